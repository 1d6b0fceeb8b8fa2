/*
 * Conformance: the black-box probe's findings (issue 33), each the same on
 * every engine: a query of many parameters, a TLS record announcing a huge
 * handshake, bare LF in chunk framing, an upload cut by the client's FIN.
 * Their own small server (probe_setup): the default head limits (the
 * probe's), a streamed-body PUT /upload and an ordinary PUT /echo.
 */
#include "conformance.h"

#include <poll.h>
#include <sys/socket.h>

typedef struct pfx {
    srv_server *srv;
    int port;
} pfx;

/* The probe's: header deadline (also the body's pace window) far above the
 * 2 s a vanished uploader may take to be released. */
#define P_HEADER_MS 10000

static void p_greet(srv_request *req, void *ctx)
{
    (void)ctx;
    const char *name = srv_request_query(req, "name");
    char out[128];
    int n = snprintf(out, sizeof out, "Hello, %s!", name != NULL ? name : "World");
    srv_respond(req, 200, "text/plain", out, (size_t)n);
}

static int p_data(srv_request *req, const void *data, size_t len, void *ctx)
{
    (void)req;
    (void)data;
    (void)len;
    (void)ctx;
    return 0;
}

static void p_end(srv_request *req, int status, void *ctx)
{
    (void)ctx;
    /* After a failure the core answered already: this one is dropped but
     * gives the request back. */
    srv_respond(req, status == 0 ? 200 : 500, "text/plain", "done\n", 5);
}

static void p_upload(srv_request *req, void *ctx)
{
    (void)ctx;
    if (srv_request_body_read(req, p_data, p_end, NULL) != 0)
        srv_respond(req, 500, "text/plain", "no body\n", 8);
}

static void p_echo(srv_request *req, void *ctx)
{
    (void)ctx;
    size_t len = 0;
    const void *body = srv_request_body(req, &len);
    srv_respond(req, 200, "text/plain", body, len);
}

/* POST /form: what the core read of the cookies and the form, and a
 * cookie set back. */
static void p_form(srv_request *req, void *ctx)
{
    (void)ctx;
    const char *name = srv_request_form(req, "name"), *sid = srv_request_cookie(req, "sid");
    char out[512];
    int n = snprintf(out, sizeof out, "name=%s sid=%s fields=%zu cookies=%zu",
                     name ? name : "(none)", sid ? sid : "(none)", srv_request_form_count(req),
                     srv_request_cookie_count(req));
    srv_cookie_opts o;
    srv_cookie_opts_init(&o);
    o.http_only = 1;
    o.path = "/";
    if (srv_set_cookie(req, "seen", "1", &o) != 0 ||
        srv_set_cookie(req, "bad", "a;b", NULL) != SRV_EHEADER) /* refused, not sent */
        n = snprintf(out, sizeof out, "srv_set_cookie misbehaved");
    srv_respond(req, 200, "text/plain", out, (size_t)n);
}

int probe_setup(void **state)
{
    srv_config cfg;
    srv_config_init(&cfg); /* max_header_bytes, max_uri_bytes: the defaults */
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 8;
    cfg.io_threads = 2;
    cfg.header_timeout_ms = P_HEADER_MS;
    cfg.keepalive_timeout_ms = T_KEEPALIVE_MS;
    cfg.request_timeout_ms = T_REQUEST_MS;
    if (g_tls) {
        cfg.tls_cert_file = g_tls_cert;
        cfg.tls_key_file = g_tls_key;
    }
    pfx *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    f->srv = srv_server_new(g_engine, &cfg);
    if (f->srv == NULL) {
        free(f);
        return -1;
    }
    struct {
        const char *method, *path;
        srv_handler_fn fn;
        unsigned flags;
    } routes[] = {
        {"GET", "/greetings", p_greet, 0},
        {"PUT", "/upload", p_upload, SRV_ROUTE_STREAM_BODY},
        {"PUT", "/echo", p_echo, 0},
        {"POST", "/form", p_form, 0},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if ((routes[i].flags & SRV_ROUTE_STREAM_BODY) && !(engine_caps() & SRV_CAP_STREAM_BODY))
            continue;
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = routes[i].method;
        o.path = routes[i].path;
        o.handler = routes[i].fn;
        o.flags = routes[i].flags | (g_nonblocking ? SRV_ROUTE_NONBLOCKING : 0);
        if (srv_route_add(f->srv, &o) != 0) {
            print_error("probe setup: route %s %s refused: %s\n", o.method, o.path,
                        srv_server_last_error(f->srv));
            srv_server_free(f->srv);
            free(f);
            return -1;
        }
    }
    int rc = srv_server_start(f->srv);
    if (rc != 0) {
        print_error("probe setup: start: %s (%s)\n", srv_strerror(rc),
                    srv_server_last_error(f->srv));
        srv_server_free(f->srv);
        free(f);
        return -1;
    }
    f->port = srv_server_port(f->srv);
    *state = f;
    return 0;
}

/* Nothing in flight, nothing open, a clean stop. */
int probe_teardown(void **state)
{
    pfx *f = *state;
    int rc = srv_server_stop(f->srv, 2000) == 0 ? 0 : -1;
    srv_stats st;
    srv_server_stats(f->srv, &st);
    if (st.connections_open != 0 || st.requests_in_flight != 0) {
        print_error("probe teardown: connections_open=%u requests_in_flight=%u\n",
                    st.connections_open, st.requests_in_flight);
        rc = -1;
    }
    srv_server_free(f->srv);
    free(f);
    return rc;
}

static rc_conn *p_open(pfx *f, rc_conn *c, const char *what)
{
    rc_init(c);
    int rc = rc_connect(c, f->port, 3000);
    CHECK(rc == RC_OK, "[%s] connect: %s", what, rc_strerror(rc));
    return c;
}

/* ------------------------------------------------------------------ */
/* 4. Many query parameters                                            */
/* ------------------------------------------------------------------ */

/*
 * `GET /greetings?k0=v&...&k179=v&name=last` (1,170 bytes, far under the
 * default 8 KiB limits), the same with flags (`?f0&f1...`), and with 400
 * parameters: served (200 "Hello, last!") as on threadpool and h2o. An
 * engine whose library holds the parsed parameters in a fixed
 * per-connection pool (SRV_CAP_LIB_ERRORS: mhd, libmicrohttpd) may answer
 * 431 instead, promptly, or over TLS (SRV_CAP_TLS_CLOSES_RAW) close at
 * once; never a silent wait for the header deadline (libmicrohttpd 0.9.75
 * left the connection hanging for it).
 */
void test_probe_many_query_params(void **state)
{
    pfx *f = *state;
    const struct {
        int n, flags;
    } cases[] = {{173, 0}, {180, 0}, {180, 1}, {400, 0}, {400, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        sbuf b = {0};
        sb_add(&b, "GET /greetings?");
        for (int i = 0; i < cases[k].n; i++)
            sb_add(&b, cases[k].flags ? "f%d&" : "k%d=v&", i);
        sb_add(&b, "name=last HTTP/1.1\r\n" HOST "\r\n");
        char what[96];
        snprintf(what, sizeof what, "%d query %s, a %zu-byte head", cases[k].n,
                 cases[k].flags ? "flags" : "parameters", b.n);
        rc_conn c;
        p_open(f, &c, what);
        conn_send(&c, what, b.p, b.n);
        free(b.p);
        long long t0 = rc_now_ms();
        rc_response r;
        int rc = rc_read_response(&c, &r, 0, 3000);
        long long took = rc_now_ms() - t0;
        unsigned caps = engine_caps();
        if (rc == RC_OK && r.status == 200) {
            CHECK(r.body_len == 12 && memcmp(r.body, "Hello, last!", 12) == 0,
                  "[%s] 200 with body \"%.*s\"", what, (int)r.body_len, r.body);
        } else if (rc == RC_OK && r.status == 431 && (caps & SRV_CAP_LIB_ERRORS)) {
            /* the library's pool cannot hold them: refused, not hung */
        } else {
            CHECK(g_tls && (caps & SRV_CAP_TLS_CLOSES_RAW) && (rc == RC_CLOSED || rc == RC_RESET),
                  "[%s] no 200 (nor a prompt 431) within 3 s: %s, status %d, after %lld ms",
                  what, rc_strerror(rc), rc == RC_OK ? r.status : 0, took);
        }
        if (rc == RC_OK)
            rc_response_free(&r);
        rc_close(&c);
    }
}

/* ------------------------------------------------------------------ */
/* 5. A TLS record announcing a 16 MiB ClientHello                      */
/* ------------------------------------------------------------------ */

/*
 * Four connections each send a handshake record whose ClientHello
 * announces 16 MiB, then up to 512 more 16 KiB handshake records (8 MiB):
 * the server must cut each after a few MB at most (no handshake that big
 * exists) and hold less than 8 MB more meanwhile (threadpool and h2o cut
 * after at most ~2.7 MB; libmicrohttpd's GnuTLS buffered all 32 MiB).
 */
void test_probe_tls_huge_handshake(void **state)
{
    pfx *f = *state;
    enum { CONNS = 4, RECORDS = 512, REC = 16384, CUT_MAX = 4 << 20, GROWTH_KB = 8 << 10 };
    unsigned char *rec = calloc(1, 5 + REC);
    CHECK(rec != NULL, "out of memory");
    rc_conn c[CONNS];
    size_t sent[CONNS] = {0};
    int open_[CONNS];
    long base = held_kb(), peak = base;
    for (int i = 0; i < CONNS; i++) {
        p_open(f, &c[i], "huge ClientHello"); /* plain TCP: this group sets no TLS */
        /* What the client's kernel holds is not what the server took. */
        int small = 64 << 10;
        setsockopt(c[i].fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        /* Record header (handshake, TLS 1.0 on the record layer, 16 KiB),
         * then the handshake header: ClientHello, 0xffffff bytes. */
        unsigned char first[9] = {0x16, 0x03, 0x01, REC >> 8, REC & 0xff, 0x01, 0xff, 0xff, 0xff};
        memcpy(rec, first, sizeof first);
        memset(rec + sizeof first, 0x41, REC - 4);
        int rc = rc_send(&c[i], rec, 5 + REC, 2000);
        CHECK(rc == RC_OK, "[huge ClientHello] first record: %s", rc_strerror(rc));
        sent[i] = 5 + REC;
        open_[i] = 1;
    }
    /* The records that follow continue the ClientHello's body. */
    memset(rec + 5, 0x41, REC);
    for (int r = 0; r < RECORDS; r++) {
        int any = 0;
        for (int i = 0; i < CONNS; i++) {
            if (!open_[i])
                continue;
            if (rc_send(&c[i], rec, 5 + REC, 2000) != RC_OK) {
                open_[i] = 0; /* cut (reset, or it stopped reading) */
                continue;
            }
            sent[i] += 5 + REC;
            any = 1;
        }
        long now = held_kb();
        if (now > peak)
            peak = now;
        if (!any)
            break;
    }
    free(rec);
    for (int i = 0; i < CONNS; i++) {
        /* Stopped reading counts only if the server then closes it. */
        int w = rc_wait_close(&c[i], 3000, NULL);
        CHECK(sent[i] <= CUT_MAX && (w == RC_CLOSED || w == RC_RESET),
              "[huge ClientHello] connection %d took %zu bytes of one handshake (cut at most "
              "after %d) and is %s", i, sent[i], CUT_MAX,
              w == RC_CLOSED || w == RC_RESET ? "closed" : "still open");
        rc_close(&c[i]);
    }
    if (g_timing)
        print_message("[huge ClientHello] sent %zu %zu %zu %zu, grew %ld KB\n", sent[0], sent[1],
                      sent[2], sent[3], peak - base);
    CHECK(peak - base < GROWTH_KB, "[huge ClientHello] the server grew by %ld KB (%s) for 4 "
          "announced 16 MiB handshakes (bound %d KB)", peak - base, held_what(), GROWTH_KB);
}

/* ------------------------------------------------------------------ */
/* 6. Bare LF in chunk framing                                          */
/* ------------------------------------------------------------------ */

/*
 * `Transfer-Encoding: chunked` with `5\nhello\n0\n\n` (bare LF line ends):
 * 400 on every engine (docs/ENGINES.md: strict chunk framing), to the
 * streamed-body PUT /upload and to the ordinary PUT /echo, head and body
 * in one send as a connection's first request. Over TLS, an engine with
 * SRV_CAP_LIB_CHUNKED may serve it instead (docs/ENGINES.md).
 */
void test_probe_chunked_bare_lf(void **state)
{
    pfx *f = *state;
    const char *paths[] = {"/upload", "/echo"};
    const char *bodies[] = {"5\nhello\n0\n\n", "5\r\nhello\n0\r\n\r\n", "5\nhello\r\n0\r\n\r\n"};
    for (size_t p = 0; p < 2; p++) {
        if (p == 0 && !(engine_caps() & SRV_CAP_STREAM_BODY))
            continue;
        for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
            char req[256], what[96];
            int n = snprintf(req, sizeof req,
                             "PUT %s HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n%s",
                             paths[p], bodies[b]);
            snprintf(what, sizeof what, "PUT %s, bare LF in chunk framing (body %zu)", paths[p],
                     b);
            rc_conn c;
            p_open(f, &c, what);
            conn_send(&c, what, req, (size_t)n);
            rc_response r;
            int rc = rc_read_response(&c, &r, 0, 3000);
            CHECK(rc == RC_OK, "[%s] no answer: %s", what, rc_strerror(rc));
            int st = r.status;
            int hello = r.body_len == 5 && memcmp(r.body, "hello", 5) == 0;
            rc_response_free(&r);
            rc_close(&c);
            /* Over TLS an engine whose library de-chunks (SRV_CAP_LIB_CHUNKED:
             * mhd, libmicrohttpd 0.9.75) cannot be looked ahead of: it may
             * read a bare LF as a line's end, serving the same body. */
            if (g_tls && (engine_caps() & SRV_CAP_LIB_CHUNKED) && st == 200) {
                CHECK(p == 0 || hello, "[%s] 200 with another body", what);
                continue;
            }
            CHECK_INT(what, st, 400);
        }
    }
}

/* ------------------------------------------------------------------ */
/* 7. An upload cut by the client's FIN                                 */
/* ------------------------------------------------------------------ */

/*
 * Ten `PUT /upload` (a streamed body) announce Content-Length 10 MiB, send
 * 1 MiB, shut their write side and close: every request is released
 * (requests in flight back to 0, connections closed) within 2 s, far
 * before the body's pace deadline (P_HEADER_MS).
 */
void test_probe_upload_fin(void **state)
{
    pfx *f = *state;
    if (!(engine_caps() & SRV_CAP_STREAM_BODY))
        return;
    enum { N = 10, SENT = 1 << 20, CHUNK = 64 << 10 };
    const char head[] = "PUT /upload HTTP/1.1\r\n" HOST "Content-Length: 10485760\r\n\r\n";
    char *chunk = malloc(CHUNK);
    CHECK(chunk != NULL, "out of memory");
    memset(chunk, 'x', CHUNK);
    /* All ten at once, their bytes interleaved, as the probe sent them. */
    rc_conn c[N];
    for (int i = 0; i < N; i++) {
        p_open(f, &c[i], "upload cut by a FIN");
        conn_send(&c[i], "upload head", head, sizeof head - 1);
    }
    for (size_t s = 0; s < SENT; s += CHUNK)
        for (int i = 0; i < N; i++)
            conn_send(&c[i], "upload body", chunk, CHUNK);
    for (int i = 0; i < N; i++) {
        rc_shutdown_write(&c[i]);
        rc_close(&c[i]);
    }
    free(chunk);
    long long t0 = rc_now_ms();
    srv_stats st;
    do {
        srv_server_stats(f->srv, &st);
        if (st.requests_in_flight == 0 && st.connections_open == 0)
            break;
        rc_sleep_ms(20);
    } while (rc_now_ms() - t0 < 2000);
    CHECK(st.requests_in_flight == 0 && st.connections_open == 0,
          "[upload cut by a FIN] 2 s after %d clients left mid-body: %u requests in flight, "
          "%u connections open", N, st.requests_in_flight, st.connections_open);
}

/* ------------------------------------------------------------------ */
/* The smaller differences the probe saw, one rule each                */
/* ------------------------------------------------------------------ */

/*
 * Chunk framing and header sizes where engines used to differ, on a fresh
 * connection each (a first request: the mhd gate looks at it in
 * cleartext) and, for the library-read cases, as the second request of a
 * kept-alive one (where libmicrohttpd reads the framing itself):
 * - a chunk size of 2^64 (17 hex digits) is 400: malformed, not too big;
 * - `5 ;a=b` (blanks before an extension, RFC 9112 7.1.1's BWS) and `5 `
 *   (blanks before the CRLF) are served; a 10 KB chunk extension is 431
 *   (extensions count against max_header_bytes);
 * - a 1.8 KB Cookie header of 200 cookies is served (far under 8 KiB);
 *   libmicrohttpd parses every cookie into its fixed per-connection pool,
 *   so an engine answering bad input through its library
 *   (SRV_CAP_LIB_ERRORS: mhd) may answer 431 there.
 * An engine whose library reads chunk framing itself (SRV_CAP_LIB_CHUNKED)
 * may answer its own 400/413/431 or serve where the core would refuse
 * (docs/ENGINES.md lists what); every other engine gives the rule.
 */
void test_probe_small_differences(void **state)
{
    pfx *f = *state;
    sbuf ext = {0};
    for (int i = 0; i < 10 * 1024; i++)
        sb_add(&ext, "x");
    sbuf cookie = {0};
    for (int i = 0; i < 200; i++)
        sb_add(&cookie, "%sc%d=v", i ? "; " : "", i);
    sbuf big_ext = {0};
    sb_add(&big_ext, "PUT /echo HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
                     "5;e=%s\r\nhello\r\n0\r\n\r\n", ext.p);
    sbuf cookies = {0};
    sb_add(&cookies, "GET /greetings?name=c HTTP/1.1\r\n" HOST "Cookie: %s\r\n\r\n", cookie.p);
    const struct {
        const char *what, *req;
        int status;     /* the rule */
        int lib_chunk;  /* SRV_CAP_LIB_CHUNKED may answer otherwise (its library reads it) */
        int lib_431;    /* SRV_CAP_LIB_ERRORS may answer 431 (its library's pool) */
    } cases[] = {
        {"chunk size 2^64", "PUT /echo HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
                            "10000000000000000\r\nhello\r\n0\r\n\r\n", 400, 1, 0},
        {"blanks before a chunk extension", "PUT /echo HTTP/1.1\r\n" HOST
                            "Transfer-Encoding: chunked\r\n\r\n5 ;a=b\r\nhello\r\n0\r\n\r\n", 200, 1, 0},
        {"blanks after a chunk size", "PUT /echo HTTP/1.1\r\n" HOST
                            "Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n", 200, 1, 0},
        {"a 10 KB chunk extension", big_ext.p, 431, 1, 0},
        {"200 cookies in 1.8 KB", cookies.p, 200, 0, 1},
    };
    unsigned caps = engine_caps();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        for (int second = 0; second < 2; second++) {
            char what[128];
            snprintf(what, sizeof what, "%s%s", cases[k].what,
                     second ? ", second on a connection" : "");
            rc_conn c;
            p_open(f, &c, what);
            rc_response r;
            if (second) {
                conn_send_str(&c, what, "GET /greetings?name=first HTTP/1.1\r\n" HOST "\r\n");
                int rc0 = rc_read_response(&c, &r, 0, 3000);
                CHECK(rc0 == RC_OK && r.status == 200, "[%s] the first request: %s", what,
                      rc_strerror(rc0));
                if (rc0 == RC_OK)
                    rc_response_free(&r);
            }
            rc_send_str(&c, cases[k].req, 3000); /* may fail once the server answered */
            int rc = rc_read_response(&c, &r, 0, 5000);
            int st = rc == RC_OK ? r.status : 0;
            int lib = cases[k].lib_chunk && (caps & SRV_CAP_LIB_CHUNKED);
            if (g_timing)
                fprintf(stderr, "# %s%s: [%s] %s, status %d\n", g_engine_name, g_tls ? " tls" : "",
                        what, rc_strerror(rc), st);
            if (lib) /* the library's own answer: refused or served, never silence */
                CHECK(st == cases[k].status || st == 200 || st == 400 || st == 413 || st == 431 ||
                      (g_tls && (caps & SRV_CAP_TLS_CLOSES_RAW) && (rc == RC_CLOSED || rc == RC_RESET)),
                      "[%s] %s, status %d", what, rc_strerror(rc), st);
            else if (cases[k].lib_431 && (caps & SRV_CAP_LIB_ERRORS))
                CHECK(st == cases[k].status || st == 431, "[%s] want %d (or the library's 431), "
                      "got %s, status %d", what, cases[k].status, rc_strerror(rc), st);
            else
                CHECK(st == cases[k].status, "[%s] want %d, got %s, status %d", what,
                      cases[k].status, rc_strerror(rc), st);
            if (st == 200 && cases[k].status == 200 && k < 3)
                CHECK(r.body_len == 5 && memcmp(r.body, "hello", 5) == 0, "[%s] body %.*s", what,
                      (int)r.body_len, r.body);
            if (rc == RC_OK)
                rc_response_free(&r);
            rc_close(&c);
        }
    }
    free(ext.p);
    free(cookie.p);
    free(big_ext.p);
    free(cookies.p);
}

/* Cookies and a form body through every engine, hostile pieces included:
 * separators, quotes, an empty name, escapes decoding to NUL, 500 fields;
 * the Set-Cookie the handler adds arrives, the one it was refused does not. */
void test_probe_cookies_forms(void **state)
{
    pfx *f = *state;
    sbuf body = {0};
    sb_add(&body, "name=Ana+%%C3%%A9&bad=%%00&=x&flag");
    for (int i = 0; i < 500; i++)
        sb_add(&body, "&f%d=%d", i, i);
    sbuf req = {0};
    sb_add(&req, "POST /form HTTP/1.1\r\n" HOST "Cookie: a=1; ;=z; sid=\"s1\" ; x\r\n"
                 "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %zu\r\n\r\n%s",
           body.n, body.p);
    rc_conn c;
    p_open(f, &c, "cookies and a form");
    conn_send(&c, "cookies and a form", req.p, req.n);
    rc_response r;
    int rc = rc_read_response(&c, &r, 0, 5000);
    CHECK(rc == RC_OK, "[cookies and a form] %s", rc_strerror(rc));
    if (rc == RC_OK) {
        CHECK_INT("status", r.status, 200);
        CHECK_STR("what the handler read", r.body, "name=Ana \xc3\xa9 sid=s1 fields=503 cookies=2");
        CHECK_STR("Set-Cookie", rc_header_get(&r, "Set-Cookie"), "seen=1; Path=/; HttpOnly");
        size_t sc = 0;
        for (size_t i = 0; i < r.nheaders; i++)
            sc += strcasecmp(r.headers[i].name, "Set-Cookie") == 0;
        CHECK_INT("Set-Cookie lines", (int)sc, 1);
        rc_response_free(&r);
    }
    /* Another type: no fields. */
    rc_send_str(&c, "POST /form HTTP/1.1\r\n" HOST "Content-Type: text/plain\r\n"
                    "Content-Length: 6\r\n\r\nname=x", 3000);
    rc = rc_read_response(&c, &r, 0, 5000);
    CHECK(rc == RC_OK, "[a text body] %s", rc_strerror(rc));
    if (rc == RC_OK) {
        CHECK_STR("a text body", r.body, "name=(none) sid=(none) fields=0 cookies=0");
        rc_response_free(&r);
    }
    rc_close(&c);
    free(body.p);
    free(req.p);
}

/* A started server for the error-body cases: PUT /echo, a 1 KiB body
 * limit, `format`, and `fn` as srv_server_set_error_body when not NULL. */
static srv_server *p_error_server(int format, srv_error_body_fn fn)
{
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 4;
    cfg.io_threads = 1;
    cfg.max_body_bytes = 1024;
    cfg.error_format = format;
    if (g_tls) {
        cfg.tls_cert_file = g_tls_cert;
        cfg.tls_key_file = g_tls_key;
    }
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv != NULL, "srv_server_new");
    CHECK_INT("route", srv_route(srv, "PUT", "/echo", p_echo, NULL), 0);
    if (fn != NULL)
        CHECK_INT("set_error_body", srv_server_set_error_body(srv, fn, NULL), 0);
    CHECK_INT("start", srv_server_start(srv), 0);
    return srv;
}

/* One JSON error answer: status, Content-Type and the body's shape. */
static void p_json_error(rc_conn *c, const char *what, int status, const char *reason,
                         const char *path, int lib)
{
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 5000);
    CHECK(rc == RC_OK, "[%s] %s", what, rc_strerror(rc));
    if (rc != RC_OK)
        return;
    CHECK_INT(what, r.status, status);
    if (lib) { /* its library's own answer, its own body */
        rc_response_free(&r);
        return;
    }
    CHECK_STR(what, rc_header_get(&r, "Content-Type"), "application/json");
    char want[256];
    snprintf(want, sizeof want, "\",\"status\":%d,\"error\":\"%s\",\"path\":\"%s\"}", status,
             reason, path);
    /* A head too big to read whole may have no path to tell (h2o's). */
    char unknown[256];
    snprintf(unknown, sizeof unknown, "\",\"status\":%d,\"error\":\"%s\",\"path\":\"\"}", status,
             reason);
    int ends = r.body_len > strlen(want) && strcmp(r.body + r.body_len - strlen(want), want) == 0;
    if (!ends && status == 431)
        ends = r.body_len > strlen(unknown) &&
               strcmp(r.body + r.body_len - strlen(unknown), unknown) == 0;
    CHECK(strncmp(r.body, "{\"timestamp\":\"20", 16) == 0 && ends,
          "[%s] body %s, want {\"timestamp\":\"...%s", what, r.body, want);
    rc_response_free(&r);
}

/*
 * srv_config.error_format = SRV_ERROR_FORMAT_JSON: the library's own
 * answers in Spring Boot's JSON shape on every engine - routing's 404 and
 * 405, a body over the limit (413), a head over the limit (431); the path
 * escaped as JSON. An engine whose library answers some input itself
 * (SRV_CAP_LIB_ERRORS: mhd) does so after a connection's first request and
 * over TLS: these are first requests, so only its TLS run sees the
 * library's 413 and 431 (status checked, its body is its own).
 */
void test_probe_json_errors(void **state)
{
    (void)state;
    int lib = g_tls && (engine_caps() & SRV_CAP_LIB_ERRORS);
    srv_server *srv = p_error_server(SRV_ERROR_FORMAT_JSON, NULL);
    pfx f = {srv, srv_server_port(srv)};
    rc_conn c;
    p_open(&f, &c, "404");
    conn_send_str(&c, "404", "GET /no/such?x=1 HTTP/1.1\r\n" HOST "\r\n");
    p_json_error(&c, "404", 404, "Not Found", "/no/such", 0);
    rc_close(&c);
    p_open(&f, &c, "405");
    conn_send_str(&c, "405", "GET /echo HTTP/1.1\r\n" HOST "\r\n");
    p_json_error(&c, "405", 405, "Method Not Allowed", "/echo", 0);
    rc_close(&c);
    p_open(&f, &c, "a path to escape");
    conn_send_str(&c, "a path to escape", "GET /a%22b%5C HTTP/1.1\r\n" HOST "\r\n");
    p_json_error(&c, "a path to escape", 404, "Not Found", "/a\\\"b\\\\", 0);
    rc_close(&c);
    p_open(&f, &c, "413");
    conn_send_str(&c, "413", "PUT /echo HTTP/1.1\r\n" HOST "Content-Length: 5000\r\n\r\n");
    p_json_error(&c, "413", 413, "Content Too Large", "/echo", lib);
    rc_close(&c);
    sbuf big = {0};
    sb_add(&big, "GET /echo HTTP/1.1\r\n" HOST "X-Big: ");
    for (int i = 0; i < 10000; i++)
        sb_add(&big, "x");
    sb_add(&big, "\r\n\r\n");
    p_open(&f, &c, "431");
    rc_send(&c, big.p, big.n, 3000);
    p_json_error(&c, "431", 431, "Request Header Fields Too Large", "/echo", lib);
    rc_close(&c);
    free(big.p);
    CHECK_INT("stop", srv_server_stop(srv, 2000), 0);
    srv_server_free(srv);
}

/* srv_server_set_error_body's writer for test_probe_error_hook: its own
 * text for every status but 405, which it leaves to error_format. */
static size_t p_error_body(const srv_request *req, int status, char *buf, size_t cap,
                           const char **content_type, void *ctx)
{
    (void)ctx;
    if (status == 405)
        return SRV_ERROR_BODY_DEFAULT;
    *content_type = "text/x-error";
    int n = snprintf(buf, cap, "E%d %s %s", status, srv_request_method(req),
                     srv_request_path(req));
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap;
}

/* One answer: status, and (unless its library answered: lib) type and body. */
static void p_expect(rc_conn *c, const char *what, int status, const char *ctype,
                     const char *body, int lib)
{
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 5000);
    CHECK(rc == RC_OK, "[%s] %s", what, rc_strerror(rc));
    if (rc != RC_OK)
        return;
    CHECK_INT(what, r.status, status);
    if (!lib) {
        CHECK_STR(what, rc_header_get(&r, "Content-Type"), ctype);
        CHECK_STR(what, r.body, body);
    }
    rc_response_free(&r);
}

/*
 * srv_server_set_error_body: the application writes the library's error
 * bodies on every engine (404 from routing, 413 from the body limit), and
 * one it declines (405) falls back to error_format. As for the JSON case,
 * an engine whose library answers itself does so over TLS.
 */
void test_probe_error_hook(void **state)
{
    (void)state;
    int lib = g_tls && (engine_caps() & SRV_CAP_LIB_ERRORS);
    srv_server *srv = p_error_server(SRV_ERROR_FORMAT_TEXT, p_error_body);
    CHECK_INT("set_error_body once started", srv_server_set_error_body(srv, NULL, NULL),
              SRV_ESTATE);
    pfx f = {srv, srv_server_port(srv)};
    rc_conn c;
    p_open(&f, &c, "404");
    conn_send_str(&c, "404", "GET /no/such HTTP/1.1\r\n" HOST "\r\n");
    p_expect(&c, "404", 404, "text/x-error", "E404 GET /no/such", 0);
    conn_send_str(&c, "405", "GET /echo HTTP/1.1\r\n" HOST "\r\n");
    p_expect(&c, "405", 405, "text/plain; charset=utf-8", "405 Method Not Allowed\n", 0);
    rc_close(&c);
    p_open(&f, &c, "413");
    conn_send_str(&c, "413", "PUT /echo HTTP/1.1\r\n" HOST "Content-Length: 5000\r\n\r\n");
    p_expect(&c, "413", 413, "text/x-error", "E413 PUT /echo", lib);
    rc_close(&c);
    CHECK_INT("stop", srv_server_stop(srv, 2000), 0);
    srv_server_free(srv);
}
