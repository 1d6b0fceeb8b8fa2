/*
 * WebSocket (srv_route_ws, RFC 6455) on an engine with SRV_CAP_WEBSOCKET:
 * the handshake and its refusals, framing from a raw client written here
 * (masking, fragments around control frames, UTF-8 split across
 * fragments, limits), pings both ways, dead and vanished peers, a slow
 * reader against a sender on another thread, and a stop closing every
 * socket with 1001. Its own server (ws_setup); `nonblocking` runs the
 * callbacks on the I/O thread (SRV_WS_NONBLOCKING), `tls` the same cases
 * inside TLS.
 */
#include "conformance.h"

/* RFC 6455 1.3's example key and its accept value. */
#define WS_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define WS_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
#define WS_LIMIT 1024            /* /ws/echo's max_message_bytes */
#define WS_FLOOD_BUFFER 65536    /* /ws/flood's send_buffer_bytes */
#define WS_FLOOD_MSG 16384
#define WS_FLOOD_TOTAL (32u * 1024u * 1024u) /* more than any loopback socket buffers */
#define WS_STOP_SOCKETS 1000     /* open at a stop: each gets 1001 */
#define WS_STOP_OPENERS 8        /* threads doing their handshakes side by side */

typedef struct wfx {
    srv_server *srv;
    int port;
} wfx;

/* What the server's callbacks saw. */
static struct {
    atomic_int opens, closes;
    atomic_int codes[16]; /* on_close codes 1000..1015 */
    atomic_int other_code;
    /* /ws/flood's sender */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int writable;         /* on_writable came */
    atomic_int eagain;    /* sends refused */
    atomic_ullong accepted_at_first_eagain;
    atomic_int flood_done, flood_rc;
    pthread_t flood_thread;
    atomic_int flood_started;
} g_ws = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void ws_reset_counts(void)
{
    atomic_store(&g_ws.opens, 0);
    atomic_store(&g_ws.closes, 0);
    for (int i = 0; i < 16; i++)
        atomic_store(&g_ws.codes[i], 0);
    atomic_store(&g_ws.other_code, 0);
    g_ws.writable = 0;
    atomic_store(&g_ws.eagain, 0);
    atomic_store(&g_ws.accepted_at_first_eagain, 0);
    atomic_store(&g_ws.flood_done, 0);
    atomic_store(&g_ws.flood_rc, 0);
    atomic_store(&g_ws.flood_started, 0);
}

static int ws_code_count(int code)
{
    return code >= 1000 && code < 1016 ? atomic_load(&g_ws.codes[code - 1000]) : -1;
}

/* ------------------------------------------------------------------ */
/* The server's side                                                   */
/* ------------------------------------------------------------------ */

static void on_open_count(srv_ws *ws, void *ctx)
{
    (void)ws, (void)ctx;
    atomic_fetch_add(&g_ws.opens, 1);
}

static void on_close_count(srv_ws *ws, int code, const char *reason, void *ctx)
{
    (void)ws, (void)ctx, (void)reason;
    if (code >= 1000 && code < 1016)
        atomic_fetch_add(&g_ws.codes[code - 1000], 1);
    else
        atomic_fetch_add(&g_ws.other_code, 1);
    atomic_fetch_add(&g_ws.closes, 1);
}

/* Echo: the same message back; "close" asks the server to close first. */
static void on_echo(srv_ws *ws, int is_text, const void *d, size_t n, void *ctx)
{
    (void)ctx;
    if (is_text && n == 5 && memcmp(d, "close", 5) == 0) {
        srv_ws_close(ws, 4000, "asked");
        return;
    }
    if (is_text && n == 5 && memcmp(d, "sleep", 5) == 0)
        rc_sleep_ms(1000); /* a slow application (worker routes only) */
    if (is_text && n == 5 && memcmp(d, "proto", 5) == 0) {
        const char *p = srv_ws_subprotocol(ws);
        srv_ws_send_text(ws, p ? p : "-", strlen(p ? p : "-"));
        return;
    }
    int rc = is_text ? srv_ws_send_text(ws, d, n) : srv_ws_send_binary(ws, d, n);
    if (rc != 0)
        print_error("echo: send: %s\n", srv_strerror(rc));
}

/* /ws/accept: refuses without "x-token: yes". */
static int on_accept_token(srv_request *req, void *ctx)
{
    (void)ctx;
    const char *t = srv_request_header(req, "x-token");
    return t && strcmp(t, "yes") == 0 ? 0 : 401;
}

/* /ws/flood: a thread of the application sends WS_FLOOD_TOTAL bytes in
 * WS_FLOOD_MSG messages, waiting for on_writable whenever refused. */
static void *flood_main(void *arg)
{
    srv_ws *ws = arg;
    char *msg = malloc(WS_FLOOD_MSG);
    unsigned long long sent = 0;
    unsigned seq = 0;
    int rc = 0;
    while (sent < WS_FLOOD_TOTAL) {
        memset(msg, 'a' + (int)(seq % 26), WS_FLOOD_MSG);
        pthread_mutex_lock(&g_ws.mu);
        g_ws.writable = 0;
        pthread_mutex_unlock(&g_ws.mu);
        rc = srv_ws_send_binary(ws, msg, WS_FLOOD_MSG);
        if (rc == SRV_EAGAIN) {
            if (atomic_fetch_add(&g_ws.eagain, 1) == 0)
                atomic_store(&g_ws.accepted_at_first_eagain, sent);
            pthread_mutex_lock(&g_ws.mu);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 10;
            while (!g_ws.writable && rc == SRV_EAGAIN)
                if (pthread_cond_timedwait(&g_ws.cv, &g_ws.mu, &ts) != 0)
                    rc = SRV_ETIMEDOUT;
            pthread_mutex_unlock(&g_ws.mu);
            if (rc == SRV_ETIMEDOUT)
                break;
            rc = 0;
            continue;
        }
        if (rc != 0)
            break;
        sent += WS_FLOOD_MSG;
        seq++;
    }
    if (rc == 0)
        rc = srv_ws_close(ws, 1000, "done");
    free(msg);
    atomic_store(&g_ws.flood_rc, rc);
    atomic_store(&g_ws.flood_done, 1);
    srv_ws_unref(ws);
    return NULL;
}

static void on_flood_open(srv_ws *ws, void *ctx)
{
    (void)ctx;
    srv_ws_ref(ws); /* the sender's */
    atomic_fetch_add(&g_ws.opens, 1);
    if (pthread_create(&g_ws.flood_thread, NULL, flood_main, ws) == 0)
        atomic_store(&g_ws.flood_started, 1);
    else
        srv_ws_unref(ws);
}

static void on_flood_writable(srv_ws *ws, void *ctx)
{
    (void)ws, (void)ctx;
    pthread_mutex_lock(&g_ws.mu);
    g_ws.writable = 1;
    pthread_cond_broadcast(&g_ws.cv);
    pthread_mutex_unlock(&g_ws.mu);
}

static int ws_route(srv_server *srv, const char *path, srv_ws_opts *o)
{
    o->flags |= g_nonblocking ? SRV_WS_NONBLOCKING : 0;
    if (!o->on_open)
        o->on_open = on_open_count;
    o->on_close = on_close_count;
    int rc = srv_route_ws(srv, path, o);
    if (rc != 0)
        print_error("srv_route_ws %s: %s (%s)\n", path, srv_strerror(rc),
                    srv_server_last_error(srv));
    return rc;
}

int ws_setup(void **state)
{
    ws_reset_counts();
    wfx *f = calloc(1, sizeof *f);
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 16;
    cfg.io_threads = 2;
    cfg.header_timeout_ms = T_HEADER_MS;
    cfg.keepalive_timeout_ms = T_KEEPALIVE_MS;
    cfg.request_timeout_ms = T_REQUEST_MS;
    if (g_tls) {
        cfg.tls_cert_file = g_tls_cert;
        cfg.tls_key_file = g_tls_key;
    }
    f->srv = srv_server_new(g_engine, &cfg);
    if (!f->srv)
        return -1;
    srv_ws_opts o;
    srv_ws_opts_init(&o);
    o.max_message_bytes = WS_LIMIT;
    o.on_message = on_echo;
    o.subprotocols = "chat.v2, chat";
    if (ws_route(f->srv, "/ws/echo", &o) != 0)
        return -1;
    srv_ws_opts_init(&o);
    o.on_message = on_echo;
    o.ping_interval_ms = 200;
    o.pong_timeout_ms = 300;
    if (ws_route(f->srv, "/ws/ping", &o) != 0)
        return -1;
    srv_ws_opts_init(&o);
    o.on_message = on_echo;
    o.on_accept = on_accept_token;
    o.origins = "https://good.example, http://also.example:8080";
    if (ws_route(f->srv, "/ws/accept", &o) != 0)
        return -1;
    srv_ws_opts_init(&o);
    o.send_buffer_bytes = WS_FLOOD_BUFFER;
    o.on_open = on_flood_open;
    o.on_writable = on_flood_writable;
    if (ws_route(f->srv, "/ws/flood", &o) != 0)
        return -1;
    int rc = srv_server_start(f->srv);
    if (rc != 0) {
        print_error("ws setup: start: %s (%s)\n", srv_strerror(rc), srv_server_last_error(f->srv));
        srv_server_free(f->srv);
        free(f);
        return -1;
    }
    f->port = srv_server_port(f->srv);
    *state = f;
    return 0;
}

int ws_teardown(void **state)
{
    wfx *f = *state;
    if (f) {
        srv_server_stop(f->srv, 1000);
        if (atomic_load(&g_ws.flood_started)) {
            pthread_join(g_ws.flood_thread, NULL);
            atomic_store(&g_ws.flood_started, 0);
        }
        srv_server_free(f->srv);
        free(f);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The client's side: raw frames                                       */
/* ------------------------------------------------------------------ */

typedef struct wsf {
    int fin, op;
    size_t len;
    unsigned char *data; /* malloc'd, NUL-terminated */
} wsf;

static void wsf_free(wsf *f)
{
    free(f->data);
    f->data = NULL;
}

/* One frame, masked (as a client must) or not. */
static int wsc_frame(rc_conn *c, int fin, int op, const void *p, size_t n, int mask)
{
    unsigned char *b = malloc(14 + n);
    size_t hl = 0;
    b[hl++] = (unsigned char)((fin ? 0x80 : 0) | op);
    unsigned char mbit = mask ? 0x80 : 0;
    if (n < 126) {
        b[hl++] = (unsigned char)(mbit | n);
    } else if (n < 65536) {
        b[hl++] = mbit | 126;
        b[hl++] = (unsigned char)(n >> 8);
        b[hl++] = (unsigned char)n;
    } else {
        b[hl++] = mbit | 127;
        for (int i = 7; i >= 0; i--)
            b[hl++] = (unsigned char)((uint64_t)n >> (8 * i));
    }
    static const unsigned char key[4] = {0x37, 0xfa, 0x21, 0x3d};
    if (mask) {
        memcpy(b + hl, key, 4);
        hl += 4;
    }
    for (size_t i = 0; i < n; i++)
        b[hl + i] = ((const unsigned char *)p)[i] ^ (mask ? key[i % 4] : 0);
    int rc = rc_send(c, b, hl + n, 3000);
    free(b);
    return rc;
}

static int wsc_text(rc_conn *c, const char *s)
{
    return wsc_frame(c, 1, 1, s, strlen(s), 1);
}

/* The next frame the server sent: RC_OK, RC_CLOSED (the connection ended
 * before a whole frame), RC_TIMEOUT, RC_RESET, RC_BADRESP (masked). */
static int wsc_read(rc_conn *c, wsf *f, int timeout_ms)
{
    long long deadline = rc_now_ms() + timeout_ms;
    memset(f, 0, sizeof *f);
    for (;;) {
        const unsigned char *p = (const unsigned char *)c->buf + c->off;
        size_t have = c->len - c->off;
        if (have >= 2) {
            size_t hl = 2;
            uint64_t n = p[1] & 0x7f;
            if (p[1] & 0x80)
                return RC_BADRESP; /* a server never masks */
            if (n == 126 && have >= 4) {
                n = (uint64_t)p[2] << 8 | p[3];
                hl = 4;
            } else if (n == 127 && have >= 10) {
                n = 0;
                for (int i = 0; i < 8; i++)
                    n = n << 8 | p[2 + i];
                hl = 10;
            } else if (n >= 126) {
                hl = 0; /* the length is not whole yet */
            }
            if (hl > 0 && have >= hl + n) {
                f->fin = (p[0] & 0x80) != 0;
                f->op = p[0] & 0x0f;
                f->len = (size_t)n;
                f->data = malloc(n + 1);
                memcpy(f->data, p + hl, n);
                f->data[n] = 0;
                c->off += hl + n;
                return RC_OK;
            }
        }
        if (c->off == c->len) { /* all taken: reuse the buffer (a long run would grow it) */
            c->off = c->len = 0;
        } else if (c->off > (1u << 20)) {
            memmove(c->buf, c->buf + c->off, c->len - c->off);
            c->len -= c->off;
            c->off = 0;
        }
        long long left = deadline - rc_now_ms();
        if (left <= 0)
            return RC_TIMEOUT;
        int r = rc_read_some(c, (int)left);
        if (r == 0)
            return RC_CLOSED;
        if (r < 0)
            return r;
    }
}

/* The next frame must be a close with `code`. */
static void wsc_expect_close(rc_conn *c, const char *what, int code)
{
    wsf f;
    int rc = wsc_read(c, &f, 3000);
    CHECK(rc == RC_OK, "%s: no close frame: %s", what, rc_strerror(rc));
    CHECK(f.op == 8 && f.len >= 2, "%s: expected a close frame, got opcode %d (%zu bytes)", what,
          f.op, f.len);
    CHECK_INT(what, f.data[0] << 8 | f.data[1], code);
    wsf_free(&f);
}

/* The next frame must be a whole message `op` with `want`. */
static void wsc_expect(rc_conn *c, const char *what, int op, const void *want, size_t n)
{
    wsf f;
    int rc = wsc_read(c, &f, 3000);
    CHECK(rc == RC_OK, "%s: no frame: %s", what, rc_strerror(rc));
    CHECK(f.fin && f.op == op, "%s: expected fin opcode %d, got fin %d opcode %d", what, op, f.fin,
          f.op);
    CHECK(f.len == n && memcmp(f.data, want, n) == 0, "%s: payload of %zu bytes differs (%zu)",
          what, f.len, n);
    wsf_free(&f);
}

/* The handshake with `extra` header lines (each ending CRLF); the answer in *r. */
static int wsc_handshake(rc_conn *c, int port, const char *path, const char *extra,
                         rc_response *r)
{
    rc_init(c);
    int rc = rc_connect(c, port, 3000);
    if (rc != RC_OK)
        return rc;
    char req[1024];
    snprintf(req, sizeof req,
             "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n", path, port, extra);
    rc = rc_send_str(c, req, 3000);
    if (rc != RC_OK)
        return rc;
    return rc_read_response(c, r, 0, 3000);
}

#define WS_STD "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " WS_KEY \
               "\r\nSec-WebSocket-Version: 13\r\n"

/* An open socket on `path`, checked. */
static void wsc_open(rc_conn *c, const wfx *f, const char *path, const char *what)
{
    rc_response r;
    int rc = wsc_handshake(c, f->port, path, WS_STD, &r);
    CHECK(rc == RC_OK, "%s: handshake: %s", what, rc_strerror(rc));
    CHECK_INT(what, r.status, 101);
    CHECK_STR(what, rc_header_get(&r, "sec-websocket-accept"), WS_ACCEPT);
    rc_response_free(&r);
}

static int wait_int(atomic_int *v, int want, int timeout_ms)
{
    long long end = rc_now_ms() + timeout_ms;
    while (atomic_load(v) < want && rc_now_ms() < end)
        rc_sleep_ms(5);
    return atomic_load(v) >= want;
}

/* ------------------------------------------------------------------ */
/* Cases                                                               */
/* ------------------------------------------------------------------ */

/* Text, binary and empty messages echoed; the client's close answered with
 * the same code and the TCP close; on_open/on_close once each. */
void test_ws_echo(void **state)
{
    wfx *f = *state;
    rc_conn c;
    rc_response r;
    int rc = wsc_handshake(&c, f->port, "/ws/echo",
                           WS_STD "Sec-WebSocket-Protocol: chat, other\r\n", &r);
    CHECK(rc == RC_OK, "handshake: %s", rc_strerror(rc));
    CHECK_INT("handshake status", r.status, 101);
    CHECK(rc_header_has_token(&r, "upgrade", "websocket"), "101 without Upgrade: websocket");
    CHECK(rc_header_has_token(&r, "connection", "upgrade"), "101 without Connection: Upgrade");
    CHECK_STR("accept", rc_header_get(&r, "sec-websocket-accept"), WS_ACCEPT);
    CHECK_STR("subprotocol", rc_header_get(&r, "sec-websocket-protocol"), "chat");
    rc_response_free(&r);
    CHECK(wait_int(&g_ws.opens, 1, 2000), "on_open never ran");

    CHECK_INT("send", wsc_text(&c, "hello"), RC_OK);
    wsc_expect(&c, "text echo", 1, "hello", 5);
    unsigned char bin[300];
    for (size_t i = 0; i < sizeof bin; i++)
        bin[i] = (unsigned char)(i * 7);
    CHECK_INT("send", wsc_frame(&c, 1, 2, bin, sizeof bin, 1), RC_OK);
    wsc_expect(&c, "binary echo (300 bytes: 16-bit length)", 2, bin, sizeof bin);
    CHECK_INT("send", wsc_frame(&c, 1, 1, "", 0, 1), RC_OK);
    wsc_expect(&c, "empty message", 1, "", 0);
    CHECK_INT("send", wsc_text(&c, "proto"), RC_OK);
    wsc_expect(&c, "srv_ws_subprotocol", 1, "chat", 4);

    unsigned char close[] = {0x03, 0xe8, 'b', 'y', 'e'}; /* 1000 "bye" */
    CHECK_INT("send close", wsc_frame(&c, 1, 8, close, sizeof close, 1), RC_OK);
    wsc_expect_close(&c, "close answered", 1000);
    rc = rc_wait_close(&c, 2000, NULL);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "TCP not closed after the close handshake: %s",
          rc_strerror(rc));
    CHECK(wait_int(&g_ws.closes, 1, 2000), "on_close never ran");
    CHECK_INT("on_close 1000", ws_code_count(1000), 1);
    CHECK_INT("on_open once", atomic_load(&g_ws.opens), 1);
    rc_close(&c);

    /* The server closes first (srv_ws_close from on_message). */
    wsc_open(&c, f, "/ws/echo", "server close");
    CHECK_INT("send", wsc_text(&c, "close"), RC_OK);
    wsc_expect_close(&c, "server's close", 4000);
    unsigned char back[] = {0x0f, 0xa0};
    CHECK_INT("close back", wsc_frame(&c, 1, 8, back, 2, 1), RC_OK);
    rc = rc_wait_close(&c, 2000, NULL);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "TCP not closed: %s", rc_strerror(rc));
    CHECK(wait_int(&g_ws.closes, 2, 2000), "on_close never ran");
    CHECK_INT("on_close 4000 reported as the first close", atomic_load(&g_ws.other_code), 1);
    rc_close(&c);

    /* Frames in the same packet as the handshake: read after the 101. */
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 3000), RC_OK);
    char both[512];
    int hn = snprintf(both, sizeof both, "GET /ws/echo HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" WS_STD
                      "\r\n", f->port);
    static const unsigned char frames[] = {0x81, 0x82, 0, 0, 0, 0, 'o', 'k',  /* "ok" */
                                           0x81, 0x81, 1, 1, 1, 1, 'x' ^ 1}; /* "x" */
    memcpy(both + hn, frames, sizeof frames);
    CHECK_INT("send", rc_send(&c, both, (size_t)hn + sizeof frames, 3000), RC_OK);
    rc = rc_read_response(&c, &r, 0, 3000);
    CHECK(rc == RC_OK, "pipelined handshake: %s", rc_strerror(rc));
    CHECK_INT("pipelined handshake", r.status, 101);
    rc_response_free(&r);
    wsc_expect(&c, "first frame sent with the handshake", 1, "ok", 2);
    wsc_expect(&c, "second frame sent with the handshake", 1, "x", 1);
    rc_close(&c);
}

/* Answers of handshakes the route refuses. */
void test_ws_handshake_refusals(void **state)
{
    wfx *f = *state;
    static const struct {
        const char *what, *path, *head;
        int status;
    } cases[] = {
        {"plain GET", "/ws/echo", "", 400},
        {"no key", "/ws/echo",
         "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n", 400},
        {"bad key", "/ws/echo",
         "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: short==\r\n"
         "Sec-WebSocket-Version: 13\r\n", 400},
        {"no version", "/ws/echo",
         "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " WS_KEY "\r\n", 400},
        {"version 8", "/ws/echo",
         "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " WS_KEY
         "\r\nSec-WebSocket-Version: 8\r\n", 426},
        {"no Connection: upgrade", "/ws/echo",
         "Upgrade: websocket\r\nSec-WebSocket-Key: " WS_KEY "\r\nSec-WebSocket-Version: 13\r\n",
         400},
        {"cross-site origin (default: same origin)", "/ws/echo",
         WS_STD "Origin: https://evil.example\r\n", 403},
        {"origin not listed", "/ws/accept", WS_STD "Origin: https://evil.example\r\nx-token: yes\r\n",
         403},
        {"on_accept refuses", "/ws/accept", WS_STD "Origin: https://good.example\r\n", 401},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rc_conn c;
        rc_response r;
        int rc = wsc_handshake(&c, f->port, cases[i].path, cases[i].head, &r);
        CHECK(rc == RC_OK, "%s: %s", cases[i].what, rc_strerror(rc));
        CHECK_INT(cases[i].what, r.status, cases[i].status);
        if (cases[i].status == 426)
            CHECK_STR("426's Sec-WebSocket-Version", rc_header_get(&r, "sec-websocket-version"),
                      "13");
        rc_response_free(&r);
        rc_close(&c);
    }
    /* Same origin, a listed origin, and on_accept's yes open. */
    char same[160];
    snprintf(same, sizeof same, WS_STD "Origin: %s://127.0.0.1:%d\r\n", g_tls ? "https" : "http",
             f->port);
    const char *ok[][2] = {{"/ws/echo", same},
                           {"/ws/accept", WS_STD "Origin: http://also.example:8080\r\nx-token: yes\r\n"},
                           {"/ws/accept", WS_STD "x-token: yes\r\n"}};
    for (size_t i = 0; i < 3; i++) {
        rc_conn c;
        rc_response r;
        int rc = wsc_handshake(&c, f->port, ok[i][0], ok[i][1], &r);
        CHECK(rc == RC_OK, "accepted case %zu: %s", i, rc_strerror(rc));
        CHECK_INT("accepted handshake", r.status, 101);
        rc_response_free(&r);
        CHECK_INT("send", wsc_text(&c, "x"), RC_OK);
        wsc_expect(&c, "accepted socket echoes", 1, "x", 1);
        rc_close(&c);
    }
    CHECK(wait_int(&g_ws.closes, 3, 2000), "on_close of the accepted sockets");
    CHECK_INT("vanished peers: 1006", ws_code_count(1006), 3);
}

/* An unmasked frame from a client: 1002, then the close. */
void test_ws_unmasked(void **state)
{
    wfx *f = *state;
    rc_conn c;
    wsc_open(&c, f, "/ws/echo", "unmasked");
    CHECK_INT("send", wsc_frame(&c, 1, 1, "hi", 2, 0), RC_OK);
    wsc_expect_close(&c, "unmasked frame", 1002);
    int rc = rc_wait_close(&c, 3000, NULL);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "not closed: %s", rc_strerror(rc));
    CHECK(wait_int(&g_ws.closes, 1, 2000), "on_close");
    CHECK_INT("on_close 1002", ws_code_count(1002), 1);
    rc_close(&c);

    /* Other framing errors, each on its own socket: 1002 and the close. */
    static const struct {
        const char *what;
        unsigned char b0; /* FIN, RSV and opcode */
        size_t len;
        int bare; /* wslay's frame layer refuses it: its close has no code */
    } bad[] = {
        {"an RSV bit without an extension", 0xc1, 2, 0},
        {"a reserved opcode (3)", 0x83, 2, 0},
        {"a control frame of 126 bytes", 0x89, 126, 1},
        {"a fragmented ping", 0x09, 2, 1},
    };
    unsigned char payload[126];
    memset(payload, 'p', sizeof payload);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wsc_open(&c, f, "/ws/echo", bad[i].what);
        CHECK_INT("send", wsc_frame(&c, bad[i].b0 & 0x80, bad[i].b0 & 0x7f, payload, bad[i].len, 1),
                  RC_OK);
        if (bad[i].bare) {
            wsf fr;
            int rc1 = wsc_read(&c, &fr, 3000);
            CHECK(rc1 == RC_OK && fr.op == 8 && (fr.len == 0 || (fr.len >= 2 &&
                  (fr.data[0] << 8 | fr.data[1]) == 1002)),
                  "%s: expected a close (no code, or 1002): %s, opcode %d, %zu bytes", bad[i].what,
                  rc_strerror(rc1), fr.op, fr.len);
            wsf_free(&fr);
        } else {
            wsc_expect_close(&c, bad[i].what, 1002);
        }
        int rc2 = rc_wait_close(&c, 3000, NULL);
        CHECK(rc2 == RC_CLOSED || rc2 == RC_RESET, "%s: not closed: %s", bad[i].what,
              rc_strerror(rc2));
        rc_close(&c);
    }
    CHECK(wait_int(&g_ws.closes, 5, 2000), "on_close of the bad frames");
    CHECK_INT("on_close 1002", ws_code_count(1002), 5);
}

/* A text message in three fragments with a ping and an empty pong between
 * them: the pong comes back first, then the whole message. */
void test_ws_fragmented(void **state)
{
    wfx *f = *state;
    rc_conn c;
    wsc_open(&c, f, "/ws/echo", "fragments");
    CHECK_INT("frag 1", wsc_frame(&c, 0, 1, "Hel", 3, 1), RC_OK);
    CHECK_INT("ping", wsc_frame(&c, 1, 9, "p1", 2, 1), RC_OK);
    CHECK_INT("frag 2", wsc_frame(&c, 0, 0, "lo ", 3, 1), RC_OK);
    CHECK_INT("pong", wsc_frame(&c, 1, 10, "", 0, 1), RC_OK);
    CHECK_INT("frag 3", wsc_frame(&c, 1, 0, "World", 5, 1), RC_OK);
    wsc_expect(&c, "pong between fragments", 10, "p1", 2);
    wsc_expect(&c, "reassembled", 1, "Hello World", 11);
    /* UTF-8 split across fragments: é = C3 A9. */
    CHECK_INT("utf8 frag 1", wsc_frame(&c, 0, 1, "caf\xc3", 4, 1), RC_OK);
    CHECK_INT("utf8 frag 2", wsc_frame(&c, 1, 0, "\xa9", 1, 1), RC_OK);
    wsc_expect(&c, "valid UTF-8 split across fragments", 1, "caf\xc3\xa9", 5);
    /* A continuation with no message started: 1002. */
    CHECK_INT("stray continuation", wsc_frame(&c, 1, 0, "x", 1, 1), RC_OK);
    wsc_expect_close(&c, "continuation without a start", 1002);
    rc_close(&c);
}

/* Invalid UTF-8 split across fragments (C3 then 28): 1007. */
void test_ws_bad_utf8(void **state)
{
    wfx *f = *state;
    rc_conn c;
    wsc_open(&c, f, "/ws/echo", "bad utf-8");
    CHECK_INT("frag 1", wsc_frame(&c, 0, 1, "ok\xc3", 3, 1), RC_OK);
    CHECK_INT("frag 2", wsc_frame(&c, 1, 0, "\x28", 1, 1), RC_OK);
    wsc_expect_close(&c, "invalid UTF-8 across fragments", 1007);
    int rc = rc_wait_close(&c, 3000, NULL);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "not closed: %s", rc_strerror(rc));
    CHECK(wait_int(&g_ws.closes, 1, 2000), "on_close");
    CHECK_INT("on_close 1007", ws_code_count(1007), 1);
    rc_close(&c);
}

/* A message of exactly the limit passes; one byte more is 1009, whole or
 * in fragments. */
void test_ws_too_big(void **state)
{
    wfx *f = *state;
    char *big = malloc(WS_LIMIT + 1);
    memset(big, 'z', WS_LIMIT + 1);
    rc_conn c;
    wsc_open(&c, f, "/ws/echo", "limit");
    CHECK_INT("send", wsc_frame(&c, 1, 1, big, WS_LIMIT, 1), RC_OK);
    wsc_expect(&c, "a message of exactly max_message_bytes", 1, big, WS_LIMIT);
    CHECK_INT("send", wsc_frame(&c, 1, 1, big, WS_LIMIT + 1, 1), RC_OK);
    wsc_expect_close(&c, "one byte over", 1009);
    rc_close(&c);
    wsc_open(&c, f, "/ws/echo", "limit in fragments");
    CHECK_INT("send", wsc_frame(&c, 0, 2, big, WS_LIMIT, 1), RC_OK);
    CHECK_INT("send", wsc_frame(&c, 1, 0, big, 1, 1), RC_OK);
    wsc_expect_close(&c, "one byte over, in fragments", 1009);
    rc_close(&c);
    CHECK(wait_int(&g_ws.closes, 2, 2000), "on_close");
    CHECK_INT("on_close 1009", ws_code_count(1009), 2);
    free(big);
}

/* A ping from the client gets its pong, with the payload. */
void test_ws_client_ping(void **state)
{
    wfx *f = *state;
    rc_conn c;
    wsc_open(&c, f, "/ws/echo", "client ping");
    CHECK_INT("ping", wsc_frame(&c, 1, 9, "are you there", 13, 1), RC_OK);
    wsc_expect(&c, "pong", 10, "are you there", 13);
    CHECK_INT("send", wsc_text(&c, "after"), RC_OK);
    wsc_expect(&c, "still open", 1, "after", 5);
    rc_close(&c);
}

/* /ws/ping pings after 200 ms of silence and gives 300 ms for an answer:
 * a peer that answers stays, one that never does is closed (1006). */
void test_ws_dead_peer(void **state)
{
    wfx *f = *state;
    rc_conn live, dead;
    wsc_open(&live, f, "/ws/ping", "live peer");
    wsc_open(&dead, f, "/ws/ping", "dead peer");
    long long t0 = rc_now_ms();
    int pings = 0;
    while (rc_now_ms() - t0 < 1500) { /* the live one answers every ping */
        wsf fr;
        int rc = wsc_read(&live, &fr, 100);
        if (rc == RC_TIMEOUT)
            continue;
        CHECK(rc == RC_OK, "live peer: %s", rc_strerror(rc));
        CHECK_INT("live peer: a ping", fr.op, 9);
        pings++;
        CHECK_INT("pong", wsc_frame(&live, 1, 10, fr.data, fr.len, 1), RC_OK);
        wsf_free(&fr);
    }
    CHECK(pings >= 3, "live peer: only %d pings in 1.5 s", pings);
    int rc = rc_wait_close(&dead, 1000, NULL);
    CHECK(rc == RC_CLOSED || rc == RC_RESET, "a peer that never answers pings is still open: %s",
          rc_strerror(rc));
    CHECK(wait_int(&g_ws.closes, 1, 1000), "on_close of the dead peer");
    CHECK_INT("dead peer: on_close 1006", ws_code_count(1006), 1);
    CHECK_INT("send", wsc_text(&live, "alive"), RC_OK);
    for (;;) { /* pings go on meanwhile: answered */
        wsf fr;
        int rc1 = wsc_read(&live, &fr, 3000);
        CHECK(rc1 == RC_OK, "the live peer: %s", rc_strerror(rc1));
        if (fr.op == 9) {
            CHECK_INT("pong", wsc_frame(&live, 1, 10, fr.data, fr.len, 1), RC_OK);
            wsf_free(&fr);
            continue;
        }
        CHECK(fr.op == 1 && fr.len == 5 && memcmp(fr.data, "alive", 5) == 0,
              "the live peer is still served: opcode %d, %zu bytes", fr.op, fr.len);
        wsf_free(&fr);
        break;
    }
    rc_close(&live);
    rc_close(&dead);
}

/* An application slower than the ping's deadline (1 s in on_message on
 * /ws/ping: 200 ms + 300 ms) does not make its client look dead: input
 * waits for it, and so does the ping. Worker routes only (a non-blocking
 * callback must not sleep). */
void test_ws_slow_application(void **state)
{
    wfx *f = *state;
    if (g_nonblocking)
        skip();
    rc_conn c;
    wsc_open(&c, f, "/ws/ping", "slow application");
    CHECK_INT("send", wsc_text(&c, "sleep"), RC_OK);
    CHECK_INT("send", wsc_text(&c, "next"), RC_OK); /* waits in TCP meanwhile */
    int got = 0;
    long long t0 = rc_now_ms();
    while (got < 2 && rc_now_ms() - t0 < 3000) {
        wsf fr;
        int rc = wsc_read(&c, &fr, 3000);
        CHECK(rc == RC_OK, "after %d echoes: %s", got, rc_strerror(rc));
        if (fr.op == 9) { /* a ping after the application is done: answered */
            CHECK_INT("pong", wsc_frame(&c, 1, 10, fr.data, fr.len, 1), RC_OK);
        } else {
            CHECK(fr.op == 1, "opcode %d (a close: the slow application's client was cut)", fr.op);
            CHECK(got == 0 ? fr.len == 5 && memcmp(fr.data, "sleep", 5) == 0
                           : fr.len == 4 && memcmp(fr.data, "next", 4) == 0,
                  "echo %d: %s", got, (const char *)fr.data);
            got++;
        }
        wsf_free(&fr);
    }
    CHECK_INT("echoes", got, 2);
    CHECK_INT("no socket closed", atomic_load(&g_ws.closes), 0);
    rc_close(&c);
}

/* A client that vanishes without a close: on_close 1006, soon. */
void test_ws_vanish(void **state)
{
    wfx *f = *state;
    rc_conn c;
    wsc_open(&c, f, "/ws/echo", "vanish");
    CHECK_INT("frag", wsc_frame(&c, 0, 1, "half", 4, 1), RC_OK); /* mid-message */
    CHECK(wait_int(&g_ws.opens, 1, 2000), "on_open");
    rc_close(&c);
    CHECK(wait_int(&g_ws.closes, 1, 2000), "on_close after the client vanished");
    CHECK_INT("on_close 1006", ws_code_count(1006), 1);
}

/* A sender on another thread against a client that does not read: it is
 * refused (SRV_EAGAIN) long before all is sent, so what the server holds
 * stays bounded; then the client reads everything, in order, while
 * on_writable lets the sender go on, and the sender's close ends it. */
void test_ws_slow_reader(void **state)
{
    wfx *f = *state;
    rc_conn c;
    wsc_open(&c, f, "/ws/flood", "slow reader");
    long long t0 = rc_now_ms();
    while (atomic_load(&g_ws.eagain) == 0 && rc_now_ms() - t0 < 5000)
        rc_sleep_ms(10);
    CHECK(atomic_load(&g_ws.eagain) > 0, "the sender was never refused with SRV_EAGAIN");
    unsigned long long at = atomic_load(&g_ws.accepted_at_first_eagain);
    CHECK(at < WS_FLOOD_TOTAL / 2, "refused only after %llu bytes", at);
    long before = held_kb();
    rc_sleep_ms(300); /* the client still reads nothing: nothing more is taken */
    long after = held_kb();
    CHECK(after - before < 4096, "%s grew %ld KB while the client read nothing", held_what(),
          after - before);
    unsigned seq = 0;
    size_t total = 0;
    for (;;) {
        wsf fr;
        int rc = wsc_read(&c, &fr, 5000);
        CHECK(rc == RC_OK, "after %zu bytes: %s", total, rc_strerror(rc));
        if (fr.op == 8) {
            CHECK(fr.len >= 2 && (fr.data[0] << 8 | fr.data[1]) == 1000, "sender's close");
            wsf_free(&fr);
            break;
        }
        CHECK(fr.op == 2 && fr.len == WS_FLOOD_MSG, "message %u: opcode %d, %zu bytes", seq,
              fr.op, fr.len);
        CHECK(fr.data[0] == 'a' + seq % 26 && fr.data[fr.len - 1] == 'a' + seq % 26,
              "message %u out of order", seq);
        total += fr.len;
        seq++;
        wsf_free(&fr);
        if (seq % 256 == 0)
            rc_sleep_ms(1); /* slow */
    }
    CHECK_INT("bytes received", total, WS_FLOOD_TOTAL);
    CHECK(wait_int(&g_ws.flood_done, 1, 3000), "sender done");
    CHECK_INT("sender's last rc", atomic_load(&g_ws.flood_rc), 0);
    rc_close(&c);
}

/* A stop closes every open socket with 1001, each told on_close. */
/* One thread's share of the stop case's sockets: cs[i] for i = first,
 * first + step, ... (no CHECK off the main thread: failures are counted). */
typedef struct ws_opener {
    const wfx *f;
    rc_conn *cs;
    int first, step, n;
    int failed, last_rc, last_status;
    pthread_t t;
} ws_opener;

static void *ws_opener_run(void *arg)
{
    ws_opener *o = arg;
    for (int i = o->first; i < o->n; i += o->step) {
        rc_response r;
        int rc = wsc_handshake(&o->cs[i], o->f->port, "/ws/echo", WS_STD, &r);
        if (rc != RC_OK || r.status != 101) {
            o->failed++;
            o->last_rc = rc;
            o->last_status = rc == RC_OK ? r.status : 0;
        }
        if (rc == RC_OK)
            rc_response_free(&r);
    }
    return NULL;
}

/* 1000 sockets open at a stop, their handshakes done by a few threads side
 * by side (one after another they take long over TLS under sanitizers):
 * the stop does not wait for them, every one is told 1001 and on_close
 * runs for each. Needs two descriptors a socket in this process (client
 * and server): the soft limit is raised to the hard one for it. */
void test_ws_stop_going_away(void **state)
{
    wfx *f = *state;
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0, "getrlimit: %s", strerror(errno));
    rlim_t need = 2 * WS_STOP_SOCKETS + 256;
    if (old.rlim_cur < need) {
        struct rlimit up = old;
        up.rlim_cur = old.rlim_max < need ? old.rlim_max : need;
        CHECK(setrlimit(RLIMIT_NOFILE, &up) == 0, "setrlimit: %s", strerror(errno));
    }
    CHECK(old.rlim_max >= need, "this case needs %lu descriptors; the hard limit is %lu",
          (unsigned long)need, (unsigned long)old.rlim_max);
    rc_conn *cs = calloc(WS_STOP_SOCKETS, sizeof *cs);
    CHECK(cs != NULL, "out of memory");
    ws_opener op[WS_STOP_OPENERS];
    for (int k = 0; k < WS_STOP_OPENERS; k++) {
        op[k] = (ws_opener){.f = f, .cs = cs, .first = k, .step = WS_STOP_OPENERS,
                            .n = WS_STOP_SOCKETS};
        CHECK(pthread_create(&op[k].t, NULL, ws_opener_run, &op[k]) == 0, "pthread_create");
    }
    for (int k = 0; k < WS_STOP_OPENERS; k++) {
        pthread_join(op[k].t, NULL);
        CHECK(op[k].failed == 0, "stop: %d handshakes failed (last: %s, status %d)",
              op[k].failed, rc_strerror(op[k].last_rc), op[k].last_status);
    }
    CHECK(wait_int(&g_ws.opens, WS_STOP_SOCKETS, 10000), "on_open: %d of %d",
          atomic_load(&g_ws.opens), WS_STOP_SOCKETS);
    long long t0 = rc_now_ms();
    CHECK_INT("stop", srv_server_stop(f->srv, 2000), 0);
    long long took = rc_now_ms() - t0;
    CHECK(took < 1500, "the stop waited %lld ms for open sockets", took);
    for (int i = 0; i < WS_STOP_SOCKETS; i++) {
        wsc_expect_close(&cs[i], "stop: every socket gets 1001", 1001);
        rc_close(&cs[i]);
    }
    CHECK(wait_int(&g_ws.closes, WS_STOP_SOCKETS, 5000), "on_close: %d of %d",
          atomic_load(&g_ws.closes), WS_STOP_SOCKETS);
    CHECK_INT("on_close 1001", ws_code_count(1001), WS_STOP_SOCKETS);
    free(cs);
    setrlimit(RLIMIT_NOFILE, &old);
}

/* Without SRV_CAP_WEBSOCKET (in the TLS run: SRV_CAP_WEBSOCKET_TLS) the
 * route is refused at registration. */
void test_ws_refused(void **state)
{
    (void)state;
    srv_config cfg;
    srv_config_init(&cfg);
    if (g_tls) {
        cfg.tls_cert_file = g_tls_cert;
        cfg.tls_key_file = g_tls_key;
    }
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv != NULL, "srv_server_new");
    srv_ws_opts o;
    srv_ws_opts_init(&o);
    CHECK_INT("srv_route_ws", srv_route_ws(srv, "/ws", &o), SRV_EENGINE);
    CHECK(strstr(srv_server_last_error(srv), "WebSocket") != NULL, "last error: %s",
          srv_server_last_error(srv));
    srv_server_free(srv);
}
