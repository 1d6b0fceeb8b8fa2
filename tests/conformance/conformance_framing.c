/*
 * libsrv conformance suite, conformance_framing.c: Framing and answers to bad input that come from the core: chunk
 * sizes, h2c upgrade heads, Upgrade in HTTP/1.0, the refusal past
 * max_connections.
 */
#include "conformance.h"

/* Send `req` on a new connection; the first response must be `status`
 * with the core's headers (Date, Server, Content-Type), then a close.
 * `lib_answers`: over TLS an engine with SRV_CAP_LIB_ERRORS answers this
 * input with its library's own answer (same status and close, its own
 * headers and body), so only the status, Date and the close are checked
 * there; in cleartext the first request's answer is the core's everywhere
 * (test_raw_error_answers_after_a_request: the requests after it). */
static void core_answer_on(fx *f, const char *what, const char *req, int status,
                           int lib_answers, int after_a_request)
{
    rc_conn *c = conn_open(f, what);
    if (after_a_request) { /* the bad input is the connection's second request */
        conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
        conn_expect(c, what, 0, 200, "hello", NULL);
    }
    rc_send_str(c, req, 3000); /* may fail once the server answered */
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 4000);
    CHECK(rc == RC_OK, "[%s] expected %d: %s", what, status, rc_strerror(rc));
    if (r.status != status)
        print_error("[%s] got \"HTTP/1.%d %d %s\" body: %.*s\n", what, r.minor,
                    r.status, r.reason, (int)(r.body_len > 200 ? 200 : r.body_len),
                    r.body);
    char label[200];
    snprintf(label, sizeof label, "[%s] status", what);
    CHECK_INT(label, r.status, status);
    CHECK(rc_header_get(&r, "Date") != NULL, "[%s] the %d has no Date", what, status);
    if (lib_answers && (g_tls || after_a_request) && (engine_caps() & SRV_CAP_LIB_ERRORS)) {
        rc_response_free(&r);
        /* Then the close; libmicrohttpd 0.9.75 writes the head of its
         * Content-Length answers twice (docs/ENGINES.md): bytes may come. */
        int closed = rc_wait_close(c, 3000, NULL);
        CHECK(closed == RC_CLOSED || closed == RC_RESET, "[%s] still open 3 s after the %d",
              what, status);
        rc_close(c);
        still_serving(f, what);
        return;
    }
    snprintf(label, sizeof label, "[%s] Server of the %d", what, status);
    CHECK_STR(label, rc_header_get(&r, "Server"), "libsrv");
    CHECK(rc_header_get(&r, "Content-Type") != NULL, "[%s] the %d has no "
          "Content-Type", what, status);
    char body[64];
    snprintf(body, sizeof body, "%d ", status);
    CHECK(r.body_len > 4 && strncmp(r.body, body, 4) == 0, "[%s] body \"%.*s\" is "
          "not the core's \"%d <reason>\"", what, (int)r.body_len, r.body, status);
    rc_response_free(&r);
    conn_expect_closed(c, what, 3000);
    rc_close(c);
    still_serving(f, what);
}

static void core_answer(fx *f, const char *what, const char *req, int status, int lib_answers)
{
    core_answer_on(f, what, req, status, lib_answers, 0);
}

/* "0x2" is no chunk size (RFC 9112 7.1: 1*HEXDIG); a lenient
 * parser reads size 0 and the rest as trailers and a next request. */
void test_raw_chunk_size_0x(void **state)
{
    fx *f = *state;
    bad_input_str(f, "chunk size 0x2, then a pipelined GET",
                  "POST /echo HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
                  "0x2\r\nAB\r\n0\r\n\r\nGET /hello HTTP/1.1\r\n" HOST "\r\n",
                  400, BAD_STATUS);
    bad_input_str(f, "chunk data longer than its size",
                  "POST /echo HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
                  "2\r\nABXY0\r\n\r\n", 400, BAD_STATUS);
}

/* The core's head rules apply to an h2c upgrade request too. */
void test_raw_upgrade_head_rules(void **state)
{
    fx *f = *state;
    bad_input_str(f, "Upgrade: h2c with Content-Length and Transfer-Encoding",
                  "GET /hello HTTP/1.1\r\n" HOST "Connection: Upgrade, HTTP2-Settings\r\n"
                  "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
                  "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                  400, BAD_STATUS);
}

/* RFC 9110 7.8, a server must ignore Upgrade in HTTP/1.0. */
void test_raw_http10_upgrade(void **state)
{
    fx *f = *state;
    const char *what = "HTTP/1.0 GET with Upgrade: h2c";
    rc_conn *c = conn_open(f, what);
    conn_send_str(c, what, "GET /hello HTTP/1.0\r\n" HOST
                  "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                  "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
    conn_expect(c, what, 0, 200, "hello", NULL);
    rc_close(c);
}

/* Bad input that libmicrohttpd 0.9.75 answers with its own HTML when it
 * parses it (docs/ENGINES.md, mhd "Bad input exceptions"). */
static const struct {
    const char *what, *req;
    int status;
} lib_inputs[] = {
    {"HTTP/9.9", "GET /hello HTTP/9.9\r\n" HOST "\r\n", 505},
    {"GET with HTTP/2.0", "GET /hello HTTP/2.0\r\n" HOST "\r\n", 505},
    {"header line without a colon", "GET /hello HTTP/1.1\r\n" HOST "NoColonHere\r\n\r\n", 400},
    {"garbage request line with spaces", "}{ this is not http\r\n\r\n", 400},
    {"chunk size 0x2", "POST /echo HTTP/1.1\r\n" HOST
     "Transfer-Encoding: chunked\r\n\r\n0x2\r\nAB\r\n0\r\n\r\n", 400},
    {"Content-Length abc", "POST /echo HTTP/1.1\r\n" HOST "Content-Length: abc\r\n\r\n", 400},
};

/* Answers to bad input come from the core on every engine. */
void test_raw_error_answers_are_the_cores(void **state)
{
    fx *f = *state;
    if (g_tls && (engine_caps() & SRV_CAP_TLS_CLOSES_RAW)) /* closed, see srv.h */
        bad_input_str(f, "garbage request line", "GARBAGE\r\n\r\n", 400, BAD_STATUS_OR_CLOSE);
    else
        core_answer(f, "garbage request line", "GARBAGE\r\n\r\n", 400, 0);
    /* libmicrohttpd 0.9.75 answers these itself when it reads them first
     * (SRV_CAP_LIB_ERRORS: over TLS; in cleartext the mhd engine's gate
     * looks at a connection's first request before MHD does). */
    for (size_t i = 0; i < sizeof lib_inputs / sizeof lib_inputs[0]; i++)
        core_answer(f, lib_inputs[i].what, lib_inputs[i].req, lib_inputs[i].status, 1);
    /* A chunked body one byte over max_body_bytes. */
    size_t cap = L_BODY + 256;
    char *req = malloc(cap);
    CHECK(req != NULL, "out of memory");
    if (req == NULL)
        return; /* not reached (cmocka's fail() is not noreturn; gcc -O2 with UBSan warns) */
    int n = snprintf(req, cap, "POST /echo HTTP/1.1\r\n" HOST
                     "Transfer-Encoding: chunked\r\n\r\n%x\r\n", L_BODY + 1);
    memset(req + n, 'a', L_BODY + 1);
    strcpy(req + n + L_BODY + 1, "\r\n0\r\n\r\n");
    core_answer(f, "chunked body over max_body_bytes", req, 413, 0);
    free(req);
}

/* A first request trickled a byte at a time (a segment each, TCP_NODELAY):
 * bad input still gets the core's answer, a good head is served, and the
 * HTTP/2 preface its GOAWAY (engines that look at a connection's first
 * head before their library, as mhd's gate does, see it in pieces). */
static void trickle_first(fx *f, const char *what, const char *req, int status)
{
    rc_conn *c = conn_open(f, what);
    for (const char *p = req; *p != '\0'; p++) {
        if (rc_send(c, p, 1, 2000) != RC_OK)
            break; /* answered and closed early: what arrived counts */
        nanosleep(&(struct timespec){.tv_nsec = 3 * 1000 * 1000}, NULL);
    }
    if (status == 0) { /* the HTTP/2 preface */
        size_t unread = 0;
        int rc = rc_wait_close(c, 3000, &unread);
        CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] still open after 3 s", what);
        h2_preface_answer(what, c->buf + c->off, unread);
        rc_close(c);
        return;
    }
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 4000);
    CHECK(rc == RC_OK, "[%s] expected %d: %s", what, status, rc_strerror(rc));
    char label[200];
    snprintf(label, sizeof label, "[%s] status", what);
    CHECK_INT(label, r.status, status);
    /* Over TLS an engine with SRV_CAP_LIB_ERRORS leaves bad input to its
     * library (core_answer_on): the status is what is the same. */
    int lib = g_tls && status >= 400 && (engine_caps() & SRV_CAP_LIB_ERRORS);
    snprintf(label, sizeof label, "[%s] Server", what);
    if (!lib)
        CHECK_STR(label, rc_header_get(&r, "Server"), "libsrv");
    if (status >= 400 && !lib) {
        char body[16];
        snprintf(body, sizeof body, "%d ", status);
        CHECK(r.body_len > 4 && strncmp(r.body, body, 4) == 0, "[%s] body \"%.*s\" is not "
              "the core's", what, (int)r.body_len, r.body);
    }
    rc_response_free(&r);
    rc_close(c);
}

void test_raw_trickled_first_request(void **state)
{
    fx *f = *state;
    trickle_first(f, "trickled: header line without a colon",
            "GET /hello HTTP/1.1\r\n" HOST "NoColonHere\r\n\r\n", 400);
    trickle_first(f, "trickled: HTTP/9.9", "GET /hello HTTP/9.9\r\n" HOST "\r\n", 505);
    trickle_first(f, "trickled: a good GET", "GET /hello HTTP/1.1\r\n" HOST "\r\n", 200);
    trickle_first(f, "trickled: the HTTP/2 preface", H2_PREFACE, 0);
    still_serving(f, "after trickled first requests");
}

/* The same inputs as a kept-alive connection's second request: the core's
 * answer, but on an engine with SRV_CAP_LIB_ERRORS its library's (the same
 * status and close; libmicrohttpd 0.9.75 reads every request after the
 * first itself, with no hook before its answer). */
void test_raw_error_answers_after_a_request(void **state)
{
    fx *f = *state;
    for (size_t i = 0; i < sizeof lib_inputs / sizeof lib_inputs[0]; i++)
        core_answer_on(f, lib_inputs[i].what, lib_inputs[i].req, lib_inputs[i].status, 1, 1);
}

/* Past max_connections the refusal is readable: nothing before
 * the client's request, then the core's 503 (Date, Server, Content-Type)
 * and a close; an HTTP/2 preface gets a GOAWAY frame instead. */
void test_raw_max_connections_readable(void **state)
{
    fx *f = *state;
    enum { HELD = 4 };
    rc_conn *held[HELD];
    const char *what = "max_connections 4: a 5th connection";
    for (int i = 0; i < HELD; i++) {
        held[i] = conn_open(f, "max_connections: first 4");
        conn_send_str(held[i], "max_connections: first 4",
                      "GET /hello HTTP/1.1\r\n" HOST "\r\n");
        conn_expect(held[i], "max_connections: first 4", 0, 200, "hello", NULL);
    }
    rc_conn *c = conn_open(f, what);
    size_t unread = 0;
    int rc = rc_wait_close(c, 300, &unread);
    CHECK(rc == RC_TIMEOUT && unread == 0, "[%s] before any request the server "
          "%s and sent %zu bytes (an answer to no request)", what,
          rc == RC_TIMEOUT ? "kept it open" : "closed it", unread);
    conn_send_str(c, what, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    rc_response r;
    rc = rc_read_response(c, &r, 0, 3000);
    CHECK(rc == RC_OK, "[%s] no answer to its request: %s", what, rc_strerror(rc));
    CHECK_INT("[max_connections: the 5th] status", r.status, 503);
    CHECK(rc_header_get(&r, "Date") != NULL, "[%s] the 503 has no Date", what);
    CHECK_STR("[max_connections: the 5th] Server", rc_header_get(&r, "Server"), "libsrv");
    CHECK(rc_header_get(&r, "Content-Type") != NULL, "[%s] no Content-Type", what);
    rc_response_free(&r);
    conn_expect_closed(c, what, 3000);
    rc_close(c);

    if (engine_caps() & SRV_CAP_HTTP2) {
        what = "max_connections 4: a 5th connection with the HTTP/2 preface";
        c = conn_open(f, what);
        unsigned char pre[64];
        memcpy(pre, H2_PREFACE, sizeof H2_PREFACE - 1);
        size_t n = sizeof H2_PREFACE - 1 + h2_frame(pre + sizeof H2_PREFACE - 1, 4, 0, 0, NULL, 0);
        conn_send(c, what, pre, n);
        rc = rc_wait_close(c, 3000, NULL);
        CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] not closed", what);
        int got200;
        long goaway = h2_scan(c, 0, &got200);
        CHECK(goaway >= 0, "[%s] no GOAWAY frame before the close (%zu bytes)", what,
              c->len - c->off);
        rc_close(c);
    }
    for (int i = 0; i < HELD; i++)
        rc_close(held[i]);
    wait_for_free_slot(f);
    still_serving(f, "max_connections reached and released");
}
