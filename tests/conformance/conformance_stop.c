/*
 * libsrv conformance suite, conformance_stop.c: graceful stop while a request is
 * still arriving in pieces the engine's library keeps to itself (an HTTP/2
 * stream's body, a partly received request line).
 */
#include "conformance.h"

/* ------------------------------------------------------------------ */
/* HTTP/2: graceful stop while a stream's body is still arriving       */
/* ------------------------------------------------------------------ */

/* What stream `sid` got among the frames received on c: its :status (0
 * when no HEADERS came, h2_status_of), its DATA bytes (up to cap), and whether a RST_STREAM came. */
static int h2_stream_answer(const rc_conn *c, unsigned sid, char *body, size_t cap,
                            size_t *blen, int *reset)
{
    const unsigned char *p = (const unsigned char *)c->buf + c->off;
    size_t n = c->len - c->off, i = 0;
    int status = 0;
    *blen = 0;
    *reset = 0;
    while (n - i >= 9) {
        size_t flen = ((size_t)p[i] << 16) | ((size_t)p[i + 1] << 8) | p[i + 2];
        unsigned type = p[i + 3];
        unsigned fsid = ((unsigned)(p[i + 5] & 0x7f) << 24) | ((unsigned)p[i + 6] << 16) |
                        ((unsigned)p[i + 7] << 8) | p[i + 8];
        if (n - i - 9 < flen)
            break;
        const unsigned char *pl = p + i + 9;
        if (fsid == sid && type == 0) {
            size_t k = flen < cap - *blen ? flen : cap - *blen;
            memcpy(body + *blen, pl, k);
            *blen += k;
        }
        if (fsid == sid && type == 3)
            *reset = 1;
        i += 9 + flen;
    }
    status = h2_status_of(p, n, sid, 1);
    return status;
}

/* An h2c connection with POST /echo (content-length 10) open on stream 1
 * and the first 5 bytes of its body sent; then srv_server_stop starts. */
static rc_conn *h2_stop_with_body_arriving(fx *f, const char *what, partial_stop *ps,
                                           pthread_t *t)
{
    unsigned char buf[512], *p = buf, block[256];
    memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
    p += sizeof H2_PREFACE - 1;
    p += h2_frame(p, 4, 0, 0, NULL, 0);
    size_t n = hpack_literal(block, 2, "POST");
    n += hpack_literal(block + n, 6, "http");
    n += hpack_literal(block + n, 4, "/echo");
    n += hpack_literal(block + n, 1, "conformance");
    block[n++] = 0x0f; /* literal without indexing, name index 28 = 15 + 13 */
    block[n++] = 13;
    block[n++] = 2; /* value "10" */
    memcpy(block + n, "10", 2);
    n += 2;
    p += h2_frame(p, 1, 0x4, 1, block, n); /* END_HEADERS, no END_STREAM */
    p += h2_frame(p, 0, 0, 1, "abcde", 5);
    rc_conn *c = conn_open(f, what);
    conn_send(c, what, buf, (size_t)(p - buf));
    sleep_ms(100);
    CHECK(pthread_create(t, NULL, partial_stop_run, ps) == 0, "pthread_create");
    return c;
}

/* The rest of the body comes within the grace: the stream is served. HTTP/2
 * only (SRV_CAP_HTTP2): streams do not exist on the other engines, whose
 * HTTP/1 cases are test_hr_stop_partial_head_completes and _overruns. */
void test_h2_stop_body_completes(void **state)
{
    fx *f = *state;
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* streams exist only in HTTP/2 */
    const char *what = "HTTP/2: stop while a body arrives, completed within the grace";
    partial_stop ps = {.f = f, .grace_ms = 3000};
    pthread_t t;
    rc_conn *c = h2_stop_with_body_arriving(f, what, &ps, &t);
    sleep_ms(300);
    unsigned char rest[32];
    size_t rl = h2_frame(rest, 0, 0x1, 1, "fghij", 5); /* END_STREAM */
    rc_send(c, rest, rl, 1000);
    int rc = rc_wait_close(c, 4000, NULL);
    pthread_join(t, NULL);
    f->stopped = 1;
    char body[64];
    size_t blen;
    int reset, st = h2_stream_answer(c, 1, body, sizeof body, &blen, &reset);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] the connection was not closed after the "
          "stop: %s", what, rc_strerror(rc));
    CHECK(st == 200, "[%s] expected 200 on stream 1, got %d", what, st);
    CHECK(blen == 10 && memcmp(body, "abcdefghij", 10) == 0, "[%s] echo \"%.*s\"", what,
          (int)blen, body);
    CHECK(ps.rc == 0 && ps.took < 3000, "[%s] srv_server_stop: %d after %lld ms", what,
          ps.rc, ps.took);
    rc_close(c);
}

/* The body never completes: the grace waits for it, then 503 on the stream.
 * A 300 ms grace ends well before the body's own 1 s deadline, also when
 * the stop starts late on a loaded machine. */
void test_h2_stop_body_overruns(void **state)
{
    fx *f = *state;
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* streams exist only in HTTP/2 (see test_h2_stop_body_completes) */
    const char *what = "HTTP/2: stop while a body arrives, never completed";
    partial_stop ps = {.f = f, .grace_ms = 300};
    pthread_t t;
    rc_conn *c = h2_stop_with_body_arriving(f, what, &ps, &t);
    int rc = rc_wait_close(c, 4000, NULL);
    pthread_join(t, NULL);
    f->stopped = 1;
    char body[64];
    size_t blen;
    int reset, st = h2_stream_answer(c, 1, body, sizeof body, &blen, &reset);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] the connection was not closed after the "
          "stop: %s", what, rc_strerror(rc));
    CHECK(st == 503, "[%s] expected 503 on stream 1 at the end of the grace, got %d", what,
          st);
    CHECK(ps.rc == 0 && ps.took < 3000, "[%s] srv_server_stop: %d after %lld ms", what,
          ps.rc, ps.took);
    CHECK(ps.took >= 240, "[%s] srv_server_stop took %lld ms: the grace period did not wait "
          "for the stream arriving", what, ps.took);
    rc_close(c);
}

/* ------------------------------------------------------------------ */
/* Graceful stop while a next request line arrives on a kept-alive     */
/* connection                                                          */
/* ------------------------------------------------------------------ */

/* Requests with and without bodies answered on c (a Content-Length body,
 * a chunked one): an engine that counts a kept-alive connection's bytes
 * per request (mhd) must count every kind right, or it takes a next
 * request for none (closed at the stop) or an idle connection for one
 * begun (the stop waits for it). */
static void answered_with_bodies(rc_conn *c, const char *what)
{
    conn_send_str(c, what, "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello");
    conn_expect(c, what, 0, 200, "hello", NULL);
    conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    /* A chunk extension only where the engine takes one (the stop is what
     * is tested here; test_raw_chunked_extensions_trailers pins the rest). */
    conn_send_str(c, what, (engine_caps() & SRV_CAP_LIB_CHUNK_EXT_400)
                               ? "POST /echo HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
                                 "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                               : "POST /echo HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
                                 "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n");
    conn_expect(c, what, 0, 200, "abcde", NULL);
    conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "X-Pad: 0123456789\r\n\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
}

/* A kept-alive connection that was answered (once, or with bodies), then
 * the first bytes of a next request line (no line end yet: a library may
 * hold them unparsed in its buffer, so the connection still looks idle),
 * then the stop. */
static rc_conn *stop_with_request_line_arriving(fx *f, const char *what, partial_stop *ps,
                                                pthread_t *t, int bodies)
{
    rc_conn *c = conn_open(f, what);
    if (bodies == 2) {
        /* A body with a bodiless request pipelined behind it, in one write
         * (the count must not take the GET's bytes twice). */
        conn_send_str(c, what, "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello"
                               "GET /hello HTTP/1.1\r\n" HOST "\r\n");
        conn_expect(c, what, 0, 200, "hello", NULL);
        conn_expect(c, what, 0, 200, "hello", NULL);
    } else if (bodies) {
        answered_with_bodies(c, what);
    } else {
        conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
        conn_expect(c, what, 0, 200, "hello", NULL);
    }
    conn_send_str(c, what, "GET /hel");
    sleep_ms(200);
    CHECK(pthread_create(t, NULL, partial_stop_run, ps) == 0, "pthread_create");
    return c;
}

/* Not a stop case, but the same empty lines: after an answer, a CRLF every
 * 600 ms (each within the 1 s head and keep-alive deadlines of its own,
 * never a request) must not keep the connection open past a deadline
 * counted from the first of them. */
void test_crlf_trickle_times_out(void **state)
{
    fx *f = *state;
    const char *what = "a CRLF every 600 ms after an answer";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    long long t0 = rc_now_ms();
    int sent = 0;
    while (rc_now_ms() - t0 < 4000 && rc_send_str(c, "\r\n", 500) == RC_OK) {
        sent++;
        size_t unread = 0;
        int rc = rc_wait_close(c, 600, &unread);
        if (rc == RC_CLOSED || rc == RC_RESET)
            break;
    }
    long long took = rc_now_ms() - t0;
    conn_expect_408_or_nothing(c, what);
    CHECK(took < 3000, "[%s] the connection stayed open %lld ms (%d CRLFs sent): each CRLF "
          "restarted its deadline", what, took, sent);
    rc_close(c);
}

/* An engine with SRV_CAP_STOP_CLOSES_PARTIAL_LINE closes c (a next
 * request line partly arrived) as idle: no byte of an answer, and the stop
 * does not wait for it. */
static void stop_expect_partial_line_closed(fx *f, rc_conn *c, partial_stop *ps, pthread_t t,
                                            const char *what)
{
    int st = 0;
    int rc = partial_stop_finish(f, c, t, 2000, &st);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] with SRV_CAP_STOP_CLOSES_PARTIAL_LINE "
          "expected a close without an answer, got %s status %d", what, rc_strerror(rc), st);
    CHECK(ps->rc == 0 && ps->took < 700, "[%s] srv_server_stop: %d after %lld ms (the "
          "connection was waited for)", what, ps->rc, ps->took);
}

/* The request line and head complete within the grace: served (or, with
 * SRV_CAP_STOP_CLOSES_PARTIAL_LINE, closed at once as idle). */
static void stop_request_line_completes(fx *f, const char *what, int bodies)
{
    partial_stop ps = {.f = f, .grace_ms = 3000};
    pthread_t t;
    rc_conn *c = stop_with_request_line_arriving(f, what, &ps, &t, bodies);
    if (engine_caps() & SRV_CAP_STOP_CLOSES_PARTIAL_LINE) {
        stop_expect_partial_line_closed(f, c, &ps, t, what);
        rc_close(c);
        return;
    }
    sleep_ms(300);
    rc_send_str(c, "lo HTTP/1.1\r\n" HOST "\r\n", 1000);
    int st = 0;
    int rc = partial_stop_finish(f, c, t, 4000, &st);
    CHECK(rc == RC_OK && st == 200, "[%s] expected 200, got %s status %d", what,
          rc_strerror(rc), st);
    CHECK(ps.rc == 0 && ps.took < 3000, "[%s] srv_server_stop: %d after %lld ms", what,
          ps.rc, ps.took);
    rc_close(c);
}

void test_stop_request_line_completes(void **state)
{
    stop_request_line_completes(
        *state, "stop while a next request line arrives, completed within the grace", 0);
}

void test_stop_request_line_after_bodies(void **state)
{
    stop_request_line_completes(
        *state, "stop while a next request line arrives after requests with bodies", 1);
}

void test_stop_request_line_after_pipelined_body(void **state)
{
    stop_request_line_completes(
        *state, "stop while a next request line arrives after a body and a pipelined GET", 2);
}

/* c is idle (answered, nothing after): the stop closes it at once instead
 * of waiting its grace for a request that never began. */
static void stop_closes_idle(fx *f, rc_conn *c, const char *what)
{
    partial_stop ps = {.f = f, .grace_ms = 3000};
    pthread_t t;
    sleep_ms(300);
    CHECK(pthread_create(&t, NULL, partial_stop_run, &ps) == 0, "pthread_create");
    conn_expect_closed(c, what, 2000);
    pthread_join(t, NULL);
    f->stopped = 1;
    /* A few ms when right; wrong, the stop waits for the 1 s head deadline
     * the fixture gives a request taken for arriving. */
    CHECK(ps.rc == 0 && ps.took < 700, "[%s] srv_server_stop: %d after %lld ms (the idle "
          "connection was taken for a request arriving)", what, ps.rc, ps.took);
    rc_close(c);
}

void test_stop_idle_after_bodies(void **state)
{
    fx *f = *state;
    const char *what = "stop with a connection idle after requests with bodies";
    rc_conn *c = conn_open(f, what);
    answered_with_bodies(c, what);
    stop_closes_idle(f, c, what);
}

/* A POST whose body is followed by a CRLF (some clients add one; RFC 9112
 * 2.2 lets a server skip empty lines before a request line), then
 * nothing: idle. */
void test_stop_idle_after_body_crlf(void **state)
{
    fx *f = *state;
    const char *what = "stop with a connection idle after a body and a CRLF";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    stop_closes_idle(f, c, what);
}

/* It never completes: the grace waits for it, then 503 (a 300 ms grace:
 * it ends well before the connection's own 1 s deadline, also when the
 * stop starts late on a loaded machine); with
 * SRV_CAP_STOP_CLOSES_PARTIAL_LINE a close at once. */
void test_stop_request_line_overruns(void **state)
{
    fx *f = *state;
    const char *what = "stop while a next request line arrives, never completed";
    partial_stop ps = {.f = f, .grace_ms = 300};
    pthread_t t;
    rc_conn *c = stop_with_request_line_arriving(f, what, &ps, &t, 0);
    if (engine_caps() & SRV_CAP_STOP_CLOSES_PARTIAL_LINE)
        stop_expect_partial_line_closed(f, c, &ps, t, what);
    else
        partial_stop_expect_overrun(f, c, &ps, t, what);
    rc_close(c);
}

