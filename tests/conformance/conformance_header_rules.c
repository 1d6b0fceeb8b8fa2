/*
 * libsrv conformance suite, conformance_header_rules.c: Header rules and request framing decided once in the core (the
 * same answer on every engine), empty lines before a request line, and
 * stop while a request is still arriving.
 */
#include "conformance.h"

/* ------------------------------------------------------------------ */
/* Header rules and request framing, decided once in the core: the     */
/* same answer on every engine.                                        */
/* docs/ENGINES.md "Header rules" lists each decision.                 */
/* ------------------------------------------------------------------ */

/* Control bytes other than HTAB in a value are 400; HTAB and obs-text
 * are fine. */
void test_hr_value_controls(void **state)
{
    fx *f = *state;
    static const char x01[] = "GET /hello HTTP/1.1\r\n" HOST "X-A: a\x01" "b\r\n\r\n";
    bad_input(f, "header value with \\x01", x01, sizeof x01 - 1, 400, BAD_STATUS);
    static const char del[] = "GET /hello HTTP/1.1\r\n" HOST "X-A: a\x7f" "b\r\n\r\n";
    bad_input(f, "header value with DEL", del, sizeof del - 1, 400, BAD_STATUS);
    static const char esc[] = "GET /hello HTTP/1.1\r\n" HOST "X-A: \x1b[31m\r\n\r\n";
    bad_input(f, "header value with ESC", esc, sizeof esc - 1, 400, BAD_STATUS);
    rc_conn *c = conn_open(f, "header value with HTAB and obs-text");
    conn_send_str(c, "header value with HTAB and obs-text",
                  "GET /hello HTTP/1.1\r\n" HOST "X-A: a\tb \xc3\xa9\r\n\r\n");
    conn_expect(c, "header value with HTAB and obs-text", 0, 200, "hello", NULL);
}

/* obs-fold (a line starting with a blank continues the previous value):
 * 400, as RFC 9112 5.2 allows, on every engine. */
void test_hr_obs_fold(void **state)
{
    fx *f = *state;
    bad_input_str(f, "obs-fold with a space",
                  "GET /hello HTTP/1.1\r\n" HOST "X-A: one\r\n two\r\n\r\n", 400,
                  BAD_STATUS);
    bad_input_str(f, "obs-fold with a tab",
                  "GET /hello HTTP/1.1\r\n" HOST "X-A: one\r\n\ttwo\r\n\r\n", 400,
                  BAD_STATUS);
    /* In a later request of a kept-alive connection: the same 400, but an
     * engine with SRV_CAP_LIB_OBS_FOLD (mhd on libmicrohttpd 1.0.x) serves
     * it unfolded: 1.0.1 makes the CR and the LF a space each and keeps the
     * blank (documented). */
    const char *what = "obs-fold in a second request";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    conn_send_str(c, what,
                  "GET /inspect HTTP/1.1\r\n" HOST "X-Probe-Header: one\r\n two\r\n\r\n");
    if (engine_caps() & SRV_CAP_LIB_OBS_FOLD) {
        rc_response r;
        conn_expect(c, what, 0, 200, NULL, &r);
        int ok = r.body != NULL && strstr(r.body, "probe=one   two\n") != NULL;
        if (!ok)
            fprintf(stderr, "[%s] body: %s\n", what, r.body ? r.body : "(none)");
        rc_response_free(&r);
        CHECK(ok, "[%s] the value unfolded to \"one   two\"", what);
    } else {
        conn_expect(c, what, 0, 400, NULL, NULL);
        conn_expect_closed(c, what, 3000);
    }
    rc_close(c);
}

/* RFC 9112 3.2: HTTP/1.1 needs exactly one non-empty Host; HTTP/1.0 may
 * omit it; no request may repeat it. */
void test_hr_host(void **state)
{
    fx *f = *state;
    bad_input_str(f, "HTTP/1.1 without Host", "GET /hello HTTP/1.1\r\n\r\n", 400,
                  BAD_STATUS);
    bad_input_str(f, "HTTP/1.1 with an empty Host",
                  "GET /hello HTTP/1.1\r\nHost:\r\n\r\n", 400, BAD_STATUS);
    bad_input_str(f, "HTTP/1.1 with two Host headers",
                  "GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, BAD_STATUS);
    bad_input_str(f, "HTTP/1.1 with the same Host twice",
                  "GET /hello HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, BAD_STATUS);
    bad_input_str(f, "HTTP/1.0 with two Host headers",
                  "GET /hello HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, BAD_STATUS);
    rc_conn *c = conn_open(f, "HTTP/1.0 without Host");
    conn_send_str(c, "HTTP/1.0 without Host", "GET /hello HTTP/1.0\r\n\r\n");
    conn_expect(c, "HTTP/1.0 without Host", 0, 200, "hello", NULL);
}

/* Two Content-Length headers, even equal ones: 400 (RFC 9110 8.6 allows
 * either; a proxy may have used only one). */
void test_hr_repeated_content_length(void **state)
{
    fx *f = *state;
    bad_input_str(f, "the same Content-Length twice",
                  "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 5\r\n"
                  "Content-Length: 5\r\n\r\nhello", 400, BAD_STATUS);
    bad_input_str(f, "Content-Length: 5, 5 (a list)",
                  "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 5, 5\r\n\r\nhello",
                  400, BAD_STATUS_FIRST);
}

/* Expect: 100-continue means nothing in HTTP/1.0 (RFC 9110 10.1.1): no
 * interim 100; the final answer comes once the body is sent. */
void test_hr_expect_http10(void **state)
{
    fx *f = *state;
    const char *what = "HTTP/1.0 with Expect: 100-continue";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "POST /echo HTTP/1.0\r\nContent-Length: 5\r\n"
                  "Expect: 100-continue\r\n\r\n");
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 500);
    int st = rc == RC_OK ? r.status : 0;
    rc_response_free(&r);
    CHECK(rc == RC_TIMEOUT, "[%s] expected nothing before the body, got %s status %d",
          what, rc_strerror(rc), st);
    conn_send_str(c, what, "hello");
    conn_expect(c, what, 0, 200, "hello", NULL);
}

/* At most 100 header lines (Host included): 101 is 431 however small. */
void test_hr_too_many_headers(void **state)
{
    fx *f = *state;
    sbuf b = {0};
    sb_add(&b, "GET /hello HTTP/1.1\r\n" HOST);
    for (int i = 0; i < 99; i++)
        sb_add(&b, "X%02d:%d\r\n", i, i % 10);
    sb_add(&b, "\r\n");
    rc_conn *c = conn_open(f, "100 header lines");
    conn_send(c, "100 header lines", b.p, b.n);
    conn_expect(c, "100 header lines (the limit)", 0, 200, "hello", NULL);
    rc_close(c);
    free(b.p);

    b = (sbuf){0};
    sb_add(&b, "GET /hello HTTP/1.1\r\n" HOST);
    for (int i = 0; i < 100; i++)
        sb_add(&b, "X%02d:%d\r\n", i, i % 10);
    sb_add(&b, "\r\n");
    bad_input(f, "101 header lines", b.p, b.n, 431, BAD_STATUS);
    free(b.p);
}

/* ------------------------------------------------------------------ */
/* Heads near max_header_bytes with many headers (the library's        */
/* default limits, 8 KiB): every one gets an HTTP answer, never an     */
/* empty reply. docs/ENGINES.md, mhd "Heads that fill the pool".       */
/* ------------------------------------------------------------------ */

/* A head of exactly `total` bytes (request line to the empty line) in
 * `n` header lines, Host included; "X-Pnnn: vvv" lines share the rest. */
static void big_head(sbuf *b, const char *target, size_t total, int n)
{
    char line[64];
    int rl = snprintf(line, sizeof line, "GET %s HTTP/1.1\r\n", target);
    size_t fixed = (size_t)rl + strlen(HOST) + 2;
    size_t k = (size_t)n - 1, rest = total - fixed;
    sb_add(b, "%s" HOST, line);
    for (size_t i = 0; i < k; i++) {
        size_t len = rest / k + (i < rest % k); /* "X-Pnnn: " + value + CRLF */
        sb_add(b, "X-P%03zu: %0*d\r\n", i, (int)(len - 10), 0);
    }
    sb_add(b, "\r\n");
}

/* mhd keeps a head in libmicrohttpd's fixed pool (max_header_bytes +
 * 4 KiB here) with its header records, and builds the response head in
 * what is left. Measured, the same on libmicrohttpd 0.9.75 and 1.0.1
 * (docs/ENGINES.md, mhd "Heads that fill the pool"): 8,000 or 8,192 bytes
 * in 97 or 98 lines fill the pool while MHD parses (its own 431); in cleartext every
 * other head gets the core's answer (written by the engine when MHD cannot
 * build its head); over TLS, where only MHD writes, an answer whose head
 * does not fit behind these heads is a close. */
static int mhd_lib_431(size_t total, int n)
{
    (void)total;
    return strcmp(g_engine_name, "mhd") == 0 && (n == 97 || n == 98);
}

static int mhd_tls_close(size_t total, int n)
{
    return strcmp(g_engine_name, "mhd") == 0 && g_tls &&
           ((total == 8192 && n == 62) || (total == 8300 && (n == 60 || n == 62)));
}

static int big_head_status(size_t total, int n)
{
    /* the core counts the request line and header lines, not the empty line */
    if (n > 100 || total - 2 > 8192 || mhd_lib_431(total, n))
        return 431;
    return 200;
}

void test_hr_big_heads(void **state)
{
    fx *f = *state;
    static const size_t sizes[] = {8000, 8192, 8300};
    static const int counts[] = {30, 60, 62, 97, 98, 120};
    int mhd = strcmp(g_engine_name, "mhd") == 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            size_t total = sizes[si];
            int n = counts[ci];
            char what[96];
            snprintf(what, sizeof what, "a %zu-byte head in %d header lines", total, n);
            sbuf b = {0};
            big_head(&b, "/hello", total, n);
            CHECK(b.n == total, "[%s] built %zu bytes", what, b.n);
            int want = big_head_status(total, n);
            rc_conn *c = conn_open(f, what);
            conn_send(c, what, b.p, b.n);
            free(b.p);
            rc_response r;
            int rc = rc_read_response(c, &r, 0, 4000);
            if (mhd_tls_close(total, n)) { /* documented: mhd over TLS */
                if (rc == RC_OK)
                    rc_response_free(&r);
                CHECK(rc == RC_CLOSED || rc == RC_RESET,
                      "[%s] expected a close (mhd over TLS), got %s", what, rc_strerror(rc));
                rc_close(c);
                continue;
            }
            CHECK(rc == RC_OK, "[%s] expected a %d response, got %s (an empty reply)", what,
                  want, rc_strerror(rc));
            int got = r.status;
            rc_response_free(&r);
            char label[160];
            snprintf(label, sizeof label, "[%s] status", what);
            CHECK_INT(label, got, want);
            if (want == 200) {
                /* then a close, or a connection that serves the next request */
                rc = rc_send(c, "GET /hello HTTP/1.1\r\n" HOST "\r\n",
                             sizeof "GET /hello HTTP/1.1\r\n" HOST "\r\n" - 1, 3000);
                if (rc == RC_OK)
                    rc = rc_read_response(c, &r, 0, 3000);
                if (rc == RC_OK) {
                    got = r.status;
                    rc_response_free(&r);
                    CHECK_INT(label, got, 200);
                } else {
                    CHECK(rc == RC_CLOSED || rc == RC_RESET,
                          "[%s] after the 200: neither served nor closed: %s", what,
                          rc_strerror(rc));
                }
            } else {
                conn_expect_closed(c, what, 3000);
            }
            rc_close(c);
        }

    /* A Cookie costs mhd twice: libmicrohttpd copies its value into the
     * pool to split it, and when that copy does not fit it answers 431
     * itself (measured on 0.9.75 and 1.0.1: the second case; 0.9.75 then
     * fails to build that answer's head: the engine writes the core's 431
     * in cleartext; over TLS the close is documented). */
    static const struct {
        size_t total, cookie;
        int n;
    } cookies[] = {{6000, 2000, 20}, {8000, 4000, 30}};
    for (size_t i = 0; i < sizeof cookies / sizeof cookies[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "a %zu-byte head in %d lines with a %zu-byte Cookie",
                 cookies[i].total, cookies[i].n, cookies[i].cookie);
        sbuf b = {0};
        size_t clen = cookies[i].cookie; /* "Cookie: c=zzz\r\n" */
        sb_add(&b, "GET /hello HTTP/1.1\r\n" HOST "Cookie: c=%0*d\r\n", (int)(clen - 12), 0);
        size_t fixed = b.n + 2;
        size_t k = (size_t)cookies[i].n - 2, rest = cookies[i].total - fixed;
        for (size_t j = 0; j < k; j++)
            sb_add(&b, "X-P%03zu: %0*d\r\n", j, (int)(rest / k + (j < rest % k) - 10), 0);
        sb_add(&b, "\r\n");
        CHECK(b.n == cookies[i].total, "[%s] built %zu bytes", what, b.n);
        int lib_431 = mhd && i == 1;
        rc_conn *c = conn_open(f, what);
        conn_send(c, what, b.p, b.n);
        free(b.p);
        rc_response r;
        int rc = rc_read_response(c, &r, 0, 4000);
        if (lib_431 && g_tls && (rc == RC_CLOSED || rc == RC_RESET)) {
            rc_close(c);
            continue;
        }
        CHECK(rc == RC_OK, "[%s] expected a response, got %s (an empty reply)", what,
              rc_strerror(rc));
        int got = r.status;
        rc_response_free(&r);
        CHECK_INT(what, got, lib_431 ? 431 : 200);
        rc_close(c);
    }
    still_serving(f, "heads near max_header_bytes");
}

/* A big head (8,000 bytes in 30 lines, served everywhere) whose answer
 * has 4 KB of application headers: more than mhd's pool keeps free. The
 * client gets the application's answer everywhere but on mhd over TLS,
 * where only MHD can write: a close (SRV_CAP_TLS_CLOSES_RAW). */
void test_hr_big_head_big_answer(void **state)
{
    fx *f = *state;
    const char *what = "an 8000-byte head whose answer has 4 KB of headers";
    sbuf b = {0};
    big_head(&b, "/big-answer", 8000, 30);
    rc_conn *c = conn_open(f, what);
    conn_send(c, what, b.p, b.n);
    free(b.p);
    rc_response r = {0};
    int tls_close = strcmp(g_engine_name, "mhd") == 0 && g_tls; /* documented: mhd */
    if (tls_close)
        conn_expect_closed(c, what, 3000);
    else
        conn_expect(c, what, 0, 200, "big", &r);
    if (!tls_close) {
        char value[BIG_ANSWER_LEN + 1];
        memset(value, 'a', BIG_ANSWER_LEN);
        value[BIG_ANSWER_LEN] = '\0';
        for (int i = 0; i < BIG_ANSWER_HEADERS; i++) {
            char name[16];
            snprintf(name, sizeof name, "X-Big-%d", i);
            const char *v = rc_header_get(&r, name);
            int same = v != NULL && strcmp(v, value) == 0;
            if (!same)
                rc_response_free(&r);
            CHECK(same, "[%s] header %s missing or changed", what, name);
        }
    }
    rc_response_free(&r);
    rc_close(c);

    /* The same answer behind a small head fits everywhere. */
    what = "a small head whose answer has 4 KB of headers";
    c = conn_open(f, what);
    conn_send_str(c, what, "GET /big-answer HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "big", NULL);
    rc_close(c);
    still_serving(f, what);
}

/* The request line: CRLFs before it are skipped (RFC 9112 2.2); two spaces,
 * an HTTP/0.9 line, a line without spaces are 400; any version other than
 * 1.0/1.1 is 505. */
void test_hr_request_line(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "CRLF before the request line");
    conn_send_str(c, "CRLF before the request line",
                  "\r\n\r\nGET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, "CRLF before the request line", 0, 200, "hello", NULL);
    rc_close(c);
    bad_input_str(f, "two spaces after the method",
                  "GET  /hello HTTP/1.1\r\n" HOST "\r\n", 400, BAD_STATUS);
    bad_input_str(f, "two spaces before the version",
                  "GET /hello  HTTP/1.1\r\n" HOST "\r\n", 400, BAD_STATUS);
    bad_input_str(f, "an HTTP/0.9 request line", "GET /hello\r\n\r\n", 400, BAD_STATUS);
    bad_input_str(f, "a request line without spaces", "HELLO\r\n\r\n", 400, BAD_STATUS);
    bad_input_str(f, "HTTP/9.9", "GET /hello HTTP/9.9\r\n" HOST "\r\n", 505, BAD_STATUS);
}

/* "Transfer-Encoding: chunked " (blank after the value): 400 on every
 * engine, and the request pipelined behind it is not served (a reader
 * comparing raw bytes frames it differently). */
void test_hr_te_trailing_space(void **state)
{
    fx *f = *state;
    const char *what = "Transfer-Encoding: \"chunked \" and a pipelined GET";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "POST /echo HTTP/1.1\r\n" HOST
                  "Transfer-Encoding: chunked \r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                  "GET /n?i=smuggled HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 400, NULL, NULL);
    conn_expect_closed(c, what, 3000);
    rc_close(c);
    bad_input_str(f, "Content-Length: \"5 \"",
                  "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 5 \r\n\r\nhello", 400,
                  BAD_STATUS_FIRST);
    still_serving(f, what);
}

/* A chunk-size line with 100 KB of extensions: 431, as trailers past the
 * limit (extensions and trailers share max_header_bytes: docs/ENGINES.md). */
void test_hr_chunk_extension_100k(void **state)
{
    fx *f = *state;
    sbuf b = {0};
    sb_add(&b, "POST /len HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n5;e=");
    for (int i = 0; i < 100 * 1024 / 64; i++)
        sb_add(&b, "%s", "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");
    sb_add(&b, "\r\nhello\r\n0\r\n\r\n");
    if (!(engine_caps() & SRV_CAP_LIB_CHUNKED)) {
        bad_input(f, "a 100 KB chunk extension", b.p, b.n, 431, BAD_STATUS);
        free(b.p);
        return;
    }
    /* The library answers itself (mhd: 500): refused and closed all the
     * same, never served. */
    const char *what = "a 100 KB chunk extension (SRV_CAP_LIB_CHUNKED)";
    rc_conn *c = conn_open(f, what);
    rc_send(c, b.p, b.n, 3000);
    free(b.p);
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 4000);
    int st = rc == RC_OK ? r.status : 0;
    rc_response_free(&r);
    CHECK(rc == RC_OK && st >= 400 && st <= 599, "[%s] expected a refusal, got %s status %d",
          what, rc_strerror(rc), st);
    int cr = rc_wait_close(c, 3000, NULL);
    CHECK(cr == RC_CLOSED || cr == RC_RESET, "[%s] still open 3 s after %d", what, st);
    rc_close(c);
    still_serving(f, what);
}

/* Trailers count against max_header_bytes: 20 KB of them is 431. */
void test_hr_trailers_20k(void **state)
{
    fx *f = *state;
    sbuf b = {0};
    sb_add(&b, "POST /len HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
           "5\r\nhello\r\n0\r\n");
    for (int i = 0; i < 20; i++) {
        sb_add(&b, "X-T%02d: ", i);
        for (int j = 0; j < 1000; j++)
            sb_add(&b, "t");
        sb_add(&b, "\r\n");
    }
    sb_add(&b, "\r\n");
    bad_input(f, "20 KB of trailers", b.p, b.n, 431, BAD_STATUS);
    free(b.p);
}

/* A body trickled one byte at a time: the head and the body share a total
 * deadline (header_timeout_ms after the head, plus 1 s per 16 KiB
 * received), so the connection is cut (408 or a close) however regular the
 * trickle. */
void test_hr_body_deadline(void **state)
{
    fx *f = *state;
    const char *what = "a chunked body trickled one byte per 200 ms";
    rc_conn *c = conn_open(f, what);
    long long t0 = rc_now_ms();
    conn_send_str(c, what, "POST /len HTTP/1.1\r\n" HOST
                  "Transfer-Encoding: chunked\r\n\r\n");
    int closed = 0;
    long long limit = 2 * T_HEADER_MS + 3000;
    while (rc_now_ms() - t0 < limit) {
        if (rc_send(c, "1\r\na\r\n", 6, 500) != RC_OK) {
            closed = 1;
            break;
        }
        size_t unread = 0;
        int rc = rc_wait_close(c, 200, &unread);
        if (rc == RC_CLOSED || rc == RC_RESET || unread > 0) {
            closed = 1;
            break;
        }
    }
    long long took = rc_now_ms() - t0;
    CHECK(closed, "[%s] still open after %lld ms (header_timeout_ms %d)", what, took,
          T_HEADER_MS);
    CHECK(took >= T_HEADER_MS / 2, "[%s] cut after only %lld ms", what, took);
    if (rc_unread(c) > 0) {
        rc_response r;
        int rc = rc_read_response(c, &r, 0, 1000);
        int st = rc == RC_OK ? r.status : 0;
        rc_response_free(&r);
        CHECK(rc == RC_OK && st == 408, "[%s] answered %s status %d, expected 408 or a "
              "close", what, rc_strerror(rc), st);
    }
    rc_close(c);

    /* The deadline is about reading: a handler slower than header_timeout
     * after a body is still answered (request_timeout_ms covers it). */
    c = conn_open(f, "a handler slower than header_timeout after a body");
    conn_send_str(c, "slow handler after a body",
                  "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 3\r\n\r\nab");
    /* A quarter of the deadline, so a loaded machine's late wake-up still
     * completes the body within it (half left it 500 ms). */
    sleep_ms(T_HEADER_MS / 4);
    conn_send_str(c, "slow handler after a body", "c");
    conn_expect(c, "the body completed within the deadline", 0, 200, "abc", NULL);
    conn_send_str(c, "slow handler", "GET /slow?ms=1500 HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, "a 1.5 s handler on a reused connection", 0, 200, "slept", NULL);
    still_serving(f, what);
}

/* A body over max_body_bytes sent in full before the client reads: the
 * 413 must reach it (lingering close), not be lost to a reset. */
void test_hr_413_survives_unread_body(void **state)
{
    fx *f = *state;
    size_t blen = 16 * L_BODY;
    char req[256];
    snprintf(req, sizeof req, "POST /len HTTP/1.1\r\n" HOST "Content-Length: %zu\r\n\r\n",
             blen);
    size_t hlen = strlen(req);
    char *all = malloc(hlen + blen);
    CHECK(all != NULL, "malloc");
    memcpy(all, req, hlen);
    memset(all + hlen, 'b', blen);
    for (int i = 0; i < 5; i++) {
        const char *what = "1 MiB body over max_body_bytes sent before reading";
        rc_conn *c = conn_open(f, what);
        rc_send(c, all, hlen + blen, 3000); /* may stop half-way: the answer counts */
        rc_response r;
        int rc = rc_read_response(c, &r, 0, 3000);
        int st = rc == RC_OK ? r.status : 0;
        rc_response_free(&r);
        if (!(rc == RC_OK && st == 413))
            free(all);
        CHECK(rc == RC_OK && st == 413, "[%s, try %d] expected 413, got %s status %d", what,
              i + 1, rc_strerror(rc), st);
        rc_close(c);
    }
    free(all);
    still_serving(f, "413 with the body sent");
}

/* Graceful stop while a request head is still arriving: served when it
 * completes within the grace period, 503 when it does not. */
void test_hr_stop_partial_head_completes(void **state)
{
    fx *f = *state;
    const char *what = "stop while a head arrives, completed within the grace";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST);
    sleep_ms(100);
    partial_stop ps = {.f = f, .grace_ms = 3000};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, partial_stop_run, &ps) == 0, "pthread_create");
    sleep_ms(300);
    rc_send_str(c, "\r\n", 1000);
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 4000);
    int st = rc == RC_OK ? r.status : 0;
    int close_hdr = rc == RC_OK && rc_header_has_token(&r, "Connection", "close");
    rc_response_free(&r);
    pthread_join(t, NULL);
    f->stopped = 1;
    CHECK(rc == RC_OK && st == 200, "[%s] expected 200, got %s status %d", what,
          rc_strerror(rc), st);
    CHECK(close_hdr, "[%s] the answer lacks Connection: close", what);
    CHECK(ps.rc == 0, "[%s] srv_server_stop: %d", what, ps.rc);
}

/* Stop (grace 300 ms) while `req`, a request never completed, arrives: the
 * grace waits for it, then it gets 503. The grace ends well before the
 * request's own 1 s header deadline, also when the stop starts late on a
 * loaded machine (a 500 ms grace after a 100 ms wait left ~300 ms). */
static void stop_partial_overruns(fx *f, const char *what, const char *req)
{
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, req);
    sleep_ms(100);
    partial_stop ps = {.f = f, .grace_ms = 300};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, partial_stop_run, &ps) == 0, "pthread_create");
    partial_stop_expect_overrun(f, c, &ps, t, what);
    rc_close(c);
}

void test_hr_stop_partial_head_overruns(void **state)
{
    stop_partial_overruns(*state, "stop while a head arrives, never completed",
                          "GET /hello HTTP/1.1\r\n" HOST "X-Slow: ");
}

/* Past max_connections (4 here) the refusal is readable by the client
 * that gets it: nothing unsolicited before its request
 * (Go reports "unsolicited response on idle HTTP channel"), then the
 * core's 503 with its headers, then the close. An HTTP/2 preface gets an
 * HTTP/2 answer (GOAWAY) from an HTTP/2 engine, an HTTP/1 one (503 or 505)
 * from the others. A connect the kernel refuses is readable too. */
void test_hr_over_limit_answer(void **state)
{
    fx *f = *state;
    const char *what = "max_connections 4: a 5th connection";
    rc_conn *held[4];
    for (int i = 0; i < 4; i++) {
        held[i] = conn_open(f, "max_connections: first 4");
        conn_send_str(held[i], "max_connections: first 4",
                      "GET /hello HTTP/1.1\r\n" HOST "\r\n");
        conn_expect(held[i], "max_connections: first 4", 0, 200, "hello", NULL);
    }
    rc_conn *c = conn_slot(f, what);
    int rc = rc_connect(c, f->port, 2000);
    if (rc != RC_REFUSED) {
        CHECK(rc == RC_OK, "[%s] connect: %s", what, rc_strerror(rc));
        size_t unread = 0;
        rc = rc_wait_close(c, 300, &unread);
        CHECK(rc == RC_TIMEOUT && unread == 0, "[%s] before any request: %s with %zu "
              "unsolicited bytes: %.*s", what, rc_strerror(rc), unread,
              (int)(unread > 100 ? 100 : unread), c->buf + c->off);
        conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
        rc_response r;
        conn_expect(c, what, 0, 503, NULL, &r);
        const char *ct = rc_header_get(&r, "Content-Type");
        const char *server = rc_header_get(&r, "Server");
        const char *date = rc_header_get(&r, "Date");
        int ok = ct != NULL && strncmp(ct, "text/plain", 10) == 0 && server != NULL &&
                 strcmp(server, "libsrv") == 0 && date != NULL;
        rc_response_free(&r);
        CHECK(ok, "[%s] the 503 lacks the core's headers (Content-Type %s, Server %s, "
              "Date %s)", what, or_null(ct), or_null(server), or_null(date));
        conn_expect_closed(c, what, 3000);
    }
    rc_close(c);

    what = "max_connections 4: an HTTP/2 preface on a 5th connection";
    c = conn_slot(f, what);
    rc = rc_connect(c, f->port, 2000);
    if (rc != RC_REFUSED) {
        CHECK(rc == RC_OK, "[%s] connect: %s", what, rc_strerror(rc));
        static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                      "\x00\x00\x00\x04\x00\x00\x00\x00\x00"; /* SETTINGS */
        rc_send(c, preface, sizeof preface - 1, 2000);
        size_t unread = 0;
        rc = rc_wait_close(c, 3000, &unread);
        CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] still open after 3 s", what);
        h2_preface_answer(what, c->buf + c->off, unread);
    }
    rc_close(c);
    for (int i = 0; i < 4; i++)
        rc_close(held[i]);
    wait_for_free_slot(f);
    still_serving(f, "past max_connections");
}

/* Empty lines before a request line (RFC 9112 2.2: a server SHOULD ignore
 * at least one): skipped, any number of them within max_header_bytes, also
 * when they arrive one read at a time or between pipelined requests, as
 * nginx and libmicrohttpd do. A flood past the head limit is refused and
 * closed, like a head over it (the header deadline bounds a slow one). */
void test_hr_empty_lines(void **state)
{
    fx *f = *state;
    const char *what = "8 empty lines before the request line";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    what = "9 empty lines before the request line";
    conn_send_str(c, what, "\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    what = "1000 empty lines (2000 bytes, within max_header_bytes) before the request line";
    char many[2000 + 64];
    for (int i = 0; i < 2000; i += 2)
        memcpy(many + i, "\r\n", 2);
    snprintf(many + 2000, sizeof many - 2000, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_send_str(c, what, many);
    conn_expect(c, what, 0, 200, "hello", NULL);
    what = "empty lines one read at a time, then a split CRLF";
    for (int i = 0; i < 3; i++) {
        conn_send_str(c, what, "\r\n");
        sleep_ms(20);
    }
    conn_send_str(c, what, "\r");
    sleep_ms(20);
    conn_send_str(c, what, "\nGET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    what = "empty lines between two pipelined requests";
    conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n\r\n\r\n"
                  "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    conn_expect(c, what, 0, 200, "hello", NULL);
    rc_close(c);

    /* 40 KB of CRLFs, ten times max_header_bytes: 431 and a close. An engine
     * with SRV_CAP_LIB_ERRORS (libmicrohttpd 0.9.75 keeps the skipped lines in
     * its connection pool, past which it answers a request line itself) may
     * answer its own 414 there instead. */
    what = "40 KB of empty lines before the request line";
    enum { FLOOD = 40 * 1024 };
    char *flood = malloc(FLOOD + 64);
    CHECK(flood != NULL, "out of memory");
    for (int i = 0; i < FLOOD; i += 2)
        memcpy(flood + i, "\r\n", 2);
    snprintf(flood + FLOOD, 64, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    c = conn_open(f, what);
    rc_send_str(c, flood, 3000); /* may fail once the server answered */
    free(flood);
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 4000);
    int st = rc == RC_OK ? r.status : 0;
    rc_response_free(&r);
    int lib = (engine_caps() & SRV_CAP_LIB_ERRORS) != 0;
    CHECK(rc == RC_OK && (st == 431 || (lib && st == 414)), "[%s] expected 431%s, got %s "
          "status %d", what, lib ? " (or the library's 414)" : "", rc_strerror(rc), st);
    conn_expect_closed(c, what, 3000);
    rc_close(c);
    still_serving(f, what);
}

/* Graceful stop while a Content-Length body is still arriving: 503 at the
 * end of the grace period, as for a head (test_hr_stop_partial_head_overruns). */
void test_hr_stop_partial_body_overruns(void **state)
{
    stop_partial_overruns(*state, "stop while a body arrives, never completed",
                          "POST /echo HTTP/1.1\r\n" HOST "Content-Length: 10\r\n\r\nabc");
}

/* A bad request line after a served request on the same connection, sent
 * later or pipelined behind it: the same single answer as on a fresh
 * connection, then the close, nothing more (mhd: a line MHD drops gets the
 * core's 400, a version MHD refuses gets only MHD's 505; emhd_worker). */
void test_ka_bad_request_line_after_request(void **state)
{
    fx *f = *state;
    static const struct {
        const char *what, *line;
        int status;
    } cases[] = {
        {"a request line without a space", "HELLO\r\n\r\n", 400},
        {"HTTP/9.9", "GET /hello HTTP/9.9\r\n" HOST "\r\n", 505},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int pipelined = 0; pipelined < 2; pipelined++) {
            char what[160];
            snprintf(what, sizeof what, "%s after a kept-alive request%s", cases[i].what,
                     pipelined ? ", pipelined" : "");
            rc_conn *c = conn_open(f, what);
            char req[256];
            snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\n" HOST "\r\n%s",
                     pipelined ? cases[i].line : "");
            conn_send_str(c, what, req);
            conn_expect(c, what, 0, 200, "hello", NULL);
            if (!pipelined)
                conn_send_str(c, what, cases[i].line);
            conn_expect(c, what, 0, cases[i].status, NULL, NULL);
            conn_expect_closed(c, what, 3000);
            rc_close(c);
        }
    }
    still_serving(f, "bad request lines after kept-alive requests");
}
