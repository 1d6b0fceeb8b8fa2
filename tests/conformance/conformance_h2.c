/*
 * libsrv conformance suite, conformance_h2.c: HTTP/2 by hand (h2c prior knowledge): rapid reset, streams reset while
 * queued, slow requests, a client that grants no window.
 */
#include "conformance.h"

/* ------------------------------------------------------------------ */
/* HTTP/2 by hand: rapid reset, resets while queued, slow requests   */
/* ------------------------------------------------------------------ */

/* Read until stream sid got its final :status 200, at most ms (or the close). 1: it did. */
static int h2_wait_200(rc_conn *c, unsigned sid, int ms)
{
    int got200 = 0;
    for (long long end = rc_now_ms() + ms; !got200 && rc_now_ms() < end;) {
        if (rc_wait_close(c, 50, NULL) != RC_TIMEOUT)
            break;
        h2_scan(c, sid, &got200);
    }
    h2_scan(c, sid, &got200);
    return got200;
}

/* A GET request block: :method, :scheme, :path, :authority. */
static size_t hpack_get(unsigned char *p, const char *path)
{
    size_t n = 0;
    n += hpack_literal(p + n, 2, "GET");
    n += hpack_literal(p + n, 6, "http");
    n += hpack_literal(p + n, 4, path);
    n += hpack_literal(p + n, 1, "conformance");
    return n;
}

/* preface + empty SETTINGS + `pairs` HEADERS (END_STREAM) + RST_STREAM
 * (CANCEL) pairs on streams 1, 3, ...; then, when tail_path is set, one
 * more HEADERS that is not reset. Returns a malloc'd buffer. */
static unsigned char *h2_flood(unsigned pairs, const char *path,
                               const char *tail_path, size_t *len)
{
    unsigned char block[256];
    size_t blen = hpack_get(block, path);
    size_t cap = 64 + (size_t)(pairs + 1) * (9 + blen + 13) + 256;
    unsigned char *buf = malloc(cap), *p = buf;
    if (!buf)
        return NULL;
    memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
    p += sizeof H2_PREFACE - 1;
    p += h2_frame(p, 4, 0, 0, NULL, 0);
    static const unsigned char cancel[4] = {0, 0, 0, 8};
    unsigned sid = 1;
    for (unsigned i = 0; i < pairs; i++, sid += 2) {
        p += h2_frame(p, 1, 0x5, sid, block, blen);
        p += h2_frame(p, 3, 0, sid, cancel, sizeof cancel);
    }
    if (tail_path) {
        unsigned char tb[256];
        size_t tl = hpack_get(tb, tail_path);
        p += h2_frame(p, 1, 0x5, sid, tb, tl);
    }
    *len = (size_t)(p - buf);
    return buf;
}

/*
 * CVE-2023-44487: 2000 HEADERS + RST_STREAM pairs on one connection must
 * not queue 2000 handler runs. An HTTP/2 engine cancels reset streams
 * before their handler starts and answers the flood with GOAWAY
 * (ENHANCE_YOUR_CALM) and a close; an HTTP/1-only engine rejects the
 * preface. Either way few handlers run and the server answers at once.
 */
void test_h2_rapid_reset(void **state)
{
    fx *f = *state;
    enum { PAIRS = 2000 };
    const char *what = "HTTP/2 rapid reset: 2000 HEADERS + RST_STREAM pairs";
    unsigned entered0 = fx_read(f, &f->entered);
    size_t len = 0;
    unsigned char *flood = h2_flood(PAIRS, "/slow?ms=1000", NULL, &len);
    CHECK(flood != NULL, "out of memory");
    rc_conn *c = conn_open(f, what);
    long long t0 = rc_now_ms();
    rc_send(c, flood, len, 5000); /* the server may close before the end */
    free(flood);
    size_t unread = 0;
    int wc = rc_wait_close(c, 5000, &unread);
    long long closed_after = rc_now_ms() - t0;

    /* /hello on a new connection, timed. */
    long long t1 = rc_now_ms();
    still_serving(f, what);
    long long hello_ms = rc_now_ms() - t1;
    sleep_ms(300); /* a handler started late would show now */
    unsigned ran = fx_read(f, &f->entered) - entered0;
    if (g_timing)
        fprintf(stderr, "# %s: connection closed after %lld ms, /hello in %lld ms, "
                "%u handlers ran\n", g_engine_name, closed_after, hello_ms, ran);
    CHECK(wc == RC_CLOSED || wc == RC_RESET, "[%s] the server kept the "
          "connection open for 5 s", what);
    if (engine_caps() & SRV_CAP_HTTP2) {
        int got200;
        long goaway = h2_scan(c, 0, &got200);
        CHECK(goaway == 0xb, "[%s] expected GOAWAY ENHANCE_YOUR_CALM (0xb) "
              "before the close, got %s %ld", what, goaway < 0 ? "no GOAWAY" :
              "error code", goaway);
    }
    CHECK(hello_ms < 1500, "[%s] GET /hello took %lld ms afterwards", what, hello_ms);
    CHECK(ran <= 100, "[%s] %u handlers ran for streams the client had "
          "reset (at most 100 may start before the resets are read)", what, ran);
    CHECK(wait_no_inflight(f, 10000), "[%s] requests_in_flight stayed %u: the "
          "reset requests were never released", what, stats(f).requests_in_flight);
    rc_close(c);
}

/* A few resets are normal (a browser navigating away): the connection
 * stays usable and the next stream is answered. HTTP/2 engines only. */
void test_h2_some_resets(void **state)
{
    fx *f = *state;
    const char *what = "HTTP/2: 20 reset streams, then GET /hello";
    if (!(engine_caps() & SRV_CAP_HTTP2)) {
        /* No HTTP/2: the preface gets an error or a close, never a hang. */
        rc_conn *c = conn_open(f, what);
        conn_send_str(c, what, H2_PREFACE);
        rc_response r;
        int rc = rc_read_response(c, &r, 0, 3000);
        int st = rc == RC_OK ? r.status : 0, got200;
        rc_response_free(&r);
        if (rc == RC_BADRESP) /* not HTTP/1: an HTTP/2 GOAWAY refusing the preface is fine */
            rc_wait_close(c, 1000, NULL);
        CHECK(rc == RC_CLOSED || rc == RC_RESET || (rc == RC_OK && st >= 400) ||
              (rc == RC_BADRESP && h2_scan(c, 0, &got200) >= 0),
              "[%s] an HTTP/1-only engine answered the preface with %s, "
              "status %d", what, rc_strerror(rc), st);
        rc_close(c);
        still_serving(f, what);
        return;
    }
    enum { PAIRS = 20 };
    size_t len = 0;
    unsigned char *buf = h2_flood(PAIRS, "/slow?ms=10", "/hello", &len);
    CHECK(buf != NULL, "out of memory");
    rc_conn *c = conn_open(f, what);
    conn_send(c, what, buf, len);
    free(buf);
    int got200 = 0;
    long goaway = -1;
    long long end = rc_now_ms() + 3000;
    while (!got200 && rc_now_ms() < end) {
        if (rc_wait_close(c, 50, NULL) != RC_TIMEOUT)
            break;
        goaway = h2_scan(c, 1 + 2 * PAIRS, &got200);
    }
    goaway = h2_scan(c, 1 + 2 * PAIRS, &got200);
    CHECK(got200, "[%s] no :status 200 for the stream after the resets", what);
    CHECK(goaway < 0, "[%s] got GOAWAY (error %ld) for 20 resets", what, goaway);
    rc_close(c);
}

/* Streams already handed to the core and waiting for a busy worker are
 * cancelled by their RST_STREAM: their handlers never start. */
void test_h2_reset_queued(void **state)
{
    fx *f = *state;
    const char *what = "HTTP/2: 20 streams queued behind 2 busy workers, then reset";
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* per-stream resets exist only in HTTP/2 */
    enum { QUEUED = 20 };
    unsigned char block[256], buf[8192], *p = buf;
    size_t blen = hpack_get(block, "/slow?ms=800");
    memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
    p += sizeof H2_PREFACE - 1;
    p += h2_frame(p, 4, 0, 0, NULL, 0);
    for (unsigned i = 0; i < 2 + QUEUED; i++)
        p += h2_frame(p, 1, 0x5, 1 + 2 * i, block, blen);
    rc_conn *c = conn_open(f, what);
    conn_send(c, what, buf, (size_t)(p - buf));
    CHECK(fx_wait(f, &f->entered, 2, 2000), "[%s] the two workers never started", what);
    sleep_ms(100); /* the other 20 are queued in the core by now */
    p = buf;
    static const unsigned char cancel[4] = {0, 0, 0, 8};
    for (unsigned i = 2; i < 2 + QUEUED; i++)
        p += h2_frame(p, 3, 0, 1 + 2 * i, cancel, sizeof cancel);
    conn_send(c, what, buf, (size_t)(p - buf));
    sleep_ms(1500); /* the first two answered; a queued one would have started */
    unsigned ran = fx_read(f, &f->entered);
    CHECK(ran == 2, "[%s] %u handlers started; only the 2 streams not reset "
          "should have", what, ran);
    CHECK(h2_wait_200(c, 1, 2000), "[%s] stream 1 (not reset) got no :status 200", what);
    CHECK(wait_no_inflight(f, 10000), "[%s] requests_in_flight stayed %u", what,
          stats(f).requests_in_flight);
    rc_close(c);
}

/* Over h2c: empty CONTINUATION frames, or 1-byte DATA frames, every
 * 300 ms do not keep a request open past header_timeout_ms. */
void test_h2_slow_request(void **state)
{
    fx *f = *state;
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* frames exist only in HTTP/2 */
    unsigned char block[256], first[512], *p;
    size_t blen = hpack_get(block, "/hello");
    for (int kind = 0; kind < 2; kind++) {
        const char *what = kind == 0 ? "HTTP/2 header block + empty CONTINUATION every 300 ms"
                                     : "HTTP/2 POST + 1-byte DATA every 300 ms";
        p = first;
        memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
        p += sizeof H2_PREFACE - 1;
        p += h2_frame(p, 4, 0, 0, NULL, 0);
        unsigned char step[16];
        size_t slen;
        if (kind == 0) {
            p += h2_frame(p, 1, 0x1, 1, block, blen); /* END_STREAM, no END_HEADERS */
            slen = h2_frame(step, 9, 0, 1, NULL, 0);
        } else {
            unsigned char post[256];
            size_t n = hpack_literal(post, 2, "POST");
            n += hpack_literal(post + n, 6, "http");
            n += hpack_literal(post + n, 4, "/echo");
            n += hpack_literal(post + n, 1, "conformance");
            p += h2_frame(p, 1, 0x4, 1, post, n); /* END_HEADERS, no END_STREAM */
            slen = h2_frame(step, 0, 0, 1, "a", 1);
        }
        rc_conn *c = conn_open(f, what);
        long long took = trickle(c, first, (size_t)(p - first), step, slen,
                                 T_HEADER_MS + 4000);
        CHECK(took >= 0 && took <= T_HEADER_MS + 2000, "[%s] %s %lld ms", what,
              took < 0 ? "still open after" : "cut after",
              took < 0 ? T_HEADER_MS + 4000LL : took);
        int got200;
        CHECK(h2_scan(c, 0, &got200) >= 0, "[%s] closed without GOAWAY", what);
        rc_close(c);
    }
    still_serving(f, "slow HTTP/2 requests");
}

/* Over h2c: a client that grants no flow-control window (SETTINGS
 * INITIAL_WINDOW_SIZE 0) never lets the answer out; the connection is cut
 * once no write was possible for header_timeout_ms. */
void test_h2_no_window(void **state)
{
    fx *f = *state;
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* flow control exists only in HTTP/2 */
    const char *what = "HTTP/2 client with a zero window, GET /n";
    unsigned char buf[512], *p = buf, block[256];
    memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
    p += sizeof H2_PREFACE - 1;
    static const unsigned char zero_window[6] = {0, 4, 0, 0, 0, 0};
    p += h2_frame(p, 4, 0, 0, zero_window, sizeof zero_window);
    size_t blen = hpack_get(block, "/n?i=0123456789");
    p += h2_frame(p, 1, 0x5, 1, block, blen);
    rc_conn *c = conn_open(f, what);
    long long t0 = rc_now_ms();
    conn_send(c, what, buf, (size_t)(p - buf));
    int rc = rc_wait_close(c, T_HEADER_MS + 4000, NULL);
    long long took = rc_now_ms() - t0;
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] still open after %lld ms", what, took);
    CHECK(took <= T_HEADER_MS + 2500, "[%s] cut after %lld ms", what, took);
    rc_close(c);
    still_serving(f, what);
}

/* HEADERS frames on stream `sid` among the frames read so far. */
static int h2_headers_on(const rc_conn *c, unsigned sid)
{
    const unsigned char *p = (const unsigned char *)c->buf + c->off;
    size_t n = c->len - c->off, i = 0;
    int count = 0;
    while (n - i >= 9) {
        size_t flen = ((size_t)p[i] << 16) | ((size_t)p[i + 1] << 8) | p[i + 2];
        unsigned fsid = ((unsigned)(p[i + 5] & 0x7f) << 24) | ((unsigned)p[i + 6] << 16) |
                        ((unsigned)p[i + 7] << 8) | p[i + 8];
        if (n - i - 9 < flen)
            break;
        count += p[i + 3] == 1 && fsid == sid;
        i += 9 + flen;
    }
    return count;
}

/* A literal header with a literal name (HPACK 6.2.2, names of any index). */
static size_t hpack_new(unsigned char *p, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value);
    p[0] = 0;
    p[1] = (unsigned char)nl;
    memcpy(p + 2, name, nl);
    p[2 + nl] = (unsigned char)vl;
    memcpy(p + 3 + nl, value, vl);
    return 3 + nl + vl;
}

/*
 * HTTP/2 with `expect: 100-continue` (h2c): an interim 100 (HEADERS without
 * END_STREAM) before the body, the final answer once the body is sent, on
 * every HTTP/2 engine (the core's HTTP/2).
 */
void test_h2_expect_continue(void **state)
{
    fx *f = *state;
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* frames exist only in HTTP/2 */
    const char *what = "HTTP/2 POST with expect: 100-continue";
    unsigned char first[512], *p = first, block[256];
    size_t n = hpack_literal(block, 2, "POST");
    n += hpack_literal(block + n, 6, "http");
    n += hpack_literal(block + n, 4, "/echo");
    n += hpack_literal(block + n, 1, "conformance");
    n += hpack_new(block + n, "content-length", "5");
    n += hpack_new(block + n, "expect", "100-continue");
    memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
    p += sizeof H2_PREFACE - 1;
    p += h2_frame(p, 4, 0, 0, NULL, 0);
    p += h2_frame(p, 1, 0x4, 1, block, n); /* END_HEADERS, no END_STREAM */
    rc_conn *c = conn_open(f, what);
    CHECK_INT("send the head", rc_send(c, first, (size_t)(p - first), 2000), RC_OK);
    long long t0 = rc_now_ms();
    while (rc_now_ms() - t0 < 700 && h2_headers_on(c, 1) == 0)
        (void)rc_read_some(c, 100);
    CHECK_INT("an interim 100 before the body", h2_headers_on(c, 1), 1);
    unsigned char data[16];
    size_t dl = h2_frame(data, 0, 0x1, 1, "hello", 5); /* END_STREAM */
    CHECK_INT("send the body", rc_send(c, data, dl, 2000), RC_OK);
    int got200 = 0;
    t0 = rc_now_ms();
    while (rc_now_ms() - t0 < 3000 && !got200) {
        (void)rc_read_some(c, 100);
        (void)h2_scan(c, 1, &got200);
    }
    CHECK(got200, "[%s] no 200 after the body", what);
    rc_close(c);
}

/* The first RST_STREAM error code on stream sid (-1: none). */
static long h2_rst_on(const rc_conn *c, unsigned sid)
{
    const unsigned char *p = (const unsigned char *)c->buf;
    size_t n = c->len, i = 0;
    while (n - i >= 9) {
        size_t flen = ((size_t)p[i] << 16) | ((size_t)p[i + 1] << 8) | p[i + 2];
        unsigned fsid = ((unsigned)(p[i + 5] & 0x7f) << 24) | ((unsigned)p[i + 6] << 16) |
                        ((unsigned)p[i + 7] << 8) | p[i + 8];
        if (n - i - 9 < flen)
            break;
        const unsigned char *pl = p + i + 9;
        if (p[i + 3] == 3 && fsid == sid && flen == 4)
            return ((long)pl[0] << 24) | ((long)pl[1] << 16) | ((long)pl[2] << 8) | pl[3];
        i += 9 + flen;
    }
    return -1;
}

/*
 * Malformed requests (RFC 9113 8.1.1, 8.2, 8.3): each is a stream error
 * (RST_STREAM PROTOCOL_ERROR) or a 400 on its stream, never served, and the
 * connection goes on: GET /hello on the next stream is answered. What nghttp2
 * checks and what the core checks give the same answer on every engine with
 * HTTP/2.
 */
void test_h2_malformed(void **state)
{
    fx *f = *state;
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* HTTP/2's own rules */
    static const struct {
        const char *what;
        const char *name, *value; /* one more header field (NULL: none) */
        int bad_pseudo;           /* 1: :path empty, 2: no :method, 3: :path after a header */
        int body;                 /* DATA "abc" against content-length 5 */
    } cases[] = {
        {"an upper-case header name", "X-Upper", "1", 0, 0},
        {"a connection-specific header", "connection", "keep-alive", 0, 0},
        {"te other than trailers", "te", "gzip", 0, 0},
        {"an empty :path", NULL, NULL, 1, 0},
        {"no :method", NULL, NULL, 2, 0},
        {"a pseudo-header after a header", NULL, NULL, 3, 0},
        {"DATA shorter than content-length", "content-length", "5", 0, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char what[128];
        snprintf(what, sizeof what, "HTTP/2 malformed request: %s", cases[k].what);
        unsigned char buf[1024], *p = buf, block[256];
        size_t n = 0;
        if (cases[k].bad_pseudo != 2)
            n += hpack_literal(block + n, 2, cases[k].body ? "POST" : "GET");
        n += hpack_literal(block + n, 6, "http");
        if (cases[k].bad_pseudo == 3)
            n += hpack_new(block + n, "x-early", "1");
        n += hpack_literal(block + n, 4,
                           cases[k].bad_pseudo == 1 ? "" : cases[k].body ? "/echo" : "/slow?ms=1");
        n += hpack_literal(block + n, 1, "conformance");
        if (cases[k].name)
            n += hpack_new(block + n, cases[k].name, cases[k].value);
        memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
        p += sizeof H2_PREFACE - 1;
        p += h2_frame(p, 4, 0, 0, NULL, 0);
        p += h2_frame(p, 1, cases[k].body ? 0x4 : 0x5, 1, block, n);
        if (cases[k].body)
            p += h2_frame(p, 0, 0x1, 1, "abc", 3);
        unsigned char get[256];
        p += h2_frame(p, 1, 0x5, 3, get, hpack_get(get, "/hello"));
        rc_conn *c = conn_open(f, what);
        conn_send(c, what, buf, (size_t)(p - buf));
        int got200 = h2_wait_200(c, 3, 3000);
        int st = h2_status_of((const unsigned char *)c->buf, c->len, 1, 1);
        long rst = h2_rst_on(c, 1);
        CHECK(st == 400 || (st == 0 && rst == 1), "[%s] stream 1: status %d, RST_STREAM %ld; "
              "want 400 or PROTOCOL_ERROR (1)", what, st, rst);
        CHECK(got200, "[%s] the next stream got no 200: the connection did not go on", what);
        rc_close(c);
    }
    /* /slow counts its runs: none of the GET cases may have reached it. */
    CHECK_INT("handlers run for malformed requests", (int)fx_read(f, &f->entered), 0);
}

/* The DATA of stream sid among the frames received (NUL-terminated, at most cap - 1). */
static size_t h2_data_of(const rc_conn *c, unsigned sid, char *out, size_t cap)
{
    const unsigned char *p = (const unsigned char *)c->buf;
    size_t n = c->len, i = 0, len = 0;
    while (n - i >= 9) {
        size_t flen = ((size_t)p[i] << 16) | ((size_t)p[i + 1] << 8) | p[i + 2];
        unsigned fsid = ((unsigned)(p[i + 5] & 0x7f) << 24) | ((unsigned)p[i + 6] << 16) |
                        ((unsigned)p[i + 7] << 8) | p[i + 8];
        if (n - i - 9 < flen)
            break;
        if (p[i + 3] == 0 && fsid == sid) {
            size_t k = flen < cap - 1 - len ? flen : cap - 1 - len;
            memcpy(out + len, p + i + 9, k);
            len += k;
        }
        i += 9 + flen;
    }
    out[len] = '\0';
    return len;
}

/* Cookie crumbs (RFC 9113 8.2.3): a client may send each cookie in its own
 * field, to compress them better; the application reads one Cookie header,
 * the crumbs joined with "; " in order. */
void test_h2_cookie_crumbs(void **state)
{
    fx *f = *state;
    if (!(engine_caps() & SRV_CAP_HTTP2))
        skip(); /* HTTP/1 has one Cookie field */
    const char *what = "HTTP/2 GET /cookie with cookies a=1, b=2, c=3 in three fields";
    unsigned char buf[512], *p = buf, block[256];
    size_t n = hpack_get(block, "/cookie");
    n += hpack_new(block + n, "cookie", "a=1");
    n += hpack_new(block + n, "cookie", "b=2");
    n += hpack_new(block + n, "cookie", "c=3");
    memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
    p += sizeof H2_PREFACE - 1;
    p += h2_frame(p, 4, 0, 0, NULL, 0);
    p += h2_frame(p, 1, 0x5, 1, block, n);
    rc_conn *c = conn_open(f, what);
    conn_send(c, what, buf, (size_t)(p - buf));
    int got200 = 0;
    char body[128];
    for (long long end = rc_now_ms() + 3000; rc_now_ms() < end;) {
        if (rc_wait_close(c, 50, NULL) != RC_TIMEOUT)
            break;
        h2_scan(c, 1, &got200);
        if (got200 && h2_data_of(c, 1, body, sizeof body) >= 13)
            break;
    }
    h2_scan(c, 1, &got200);
    h2_data_of(c, 1, body, sizeof body);
    CHECK(got200, "[%s] no 200", what);
    CHECK_STR(what, body, "a=1; b=2; c=3");
    rc_close(c);
}
