/*
 * Fuzz target: one engine's whole request path, through a real socket.
 * A server on 127.0.0.1 (port 0) is started once, on the engine named by
 * FUZZ_ENGINE (built in per binary) or $SRV_FUZZ_ENGINE, with three routes.
 * Each input is written as raw bytes to a new connection, which is then
 * half-closed; the answer is read with a short deadline. Invariants:
 *   - whatever comes back starts with "HTTP/1.", or, on an engine that
 *     answers an HTTP/2 preface in HTTP/2 (SRV_CAP_HTTP2 or
 *     SRV_CAP_H2_PREFACE_GOAWAY), with an HTTP/2 SETTINGS or GOAWAY frame;
 *   - the server still answers GET /health with 200 afterwards;
 *   - and, as for every target, ASan/UBSan stay silent.
 * Chunked framing, pipelining, upgrades and bad heads are reached through
 * the engine's own parser, as a client would reach them; on an engine with
 * SRV_CAP_WEBSOCKET, WebSocket frames after a handshake on /ws (callbacks
 * on workers) and /wsn (on the loop).
 */
#include "srv_engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef FUZZ_ENGINE
#define FUZZ_ENGINE "threadpool"
#endif

/* Wait for the answer to an input: until the server closes, at most this
 * long ($SRV_FUZZ_READ_MS). Short on purpose: mhd keeps a connection that
 * hit EOF in the middle of a head open until its timeout, and the server
 * runs in this process, so a crash is caught whether or not the client
 * still waits (a late answer then meets a closed socket: a path worth
 * fuzzing too). */
static unsigned read_ms = 100;
#define FUZZ_HEALTH_MS 5000 /* answer to the health probe: a miss is a bug */

#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            fprintf(stderr, "fuzz-engine(%s): ", engine_name);   \
            fprintf(stderr, __VA_ARGS__);                        \
            fputc('\n', stderr);                                 \
            abort();                                             \
        }                                                        \
    } while (0)

static const char *engine_name = FUZZ_ENGINE;
static unsigned engine_caps;
static int port;
static srv_server *srv;

static void h_health(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "text/plain", "UP", 2);
}

static void h_echo(srv_request *req, void *ctx)
{
    (void)ctx;
    size_t len = 0;
    const void *body = srv_request_body(req, &len);
    srv_set_header(req, "X-Echo-Target", srv_request_target(req));
    srv_respond(req, 200, "application/octet-stream", body, len);
}

static void h_query(srv_request *req, void *ctx)
{
    (void)ctx;
    const char *v = srv_request_query(req, "name");
    if (v == NULL)
        v = "";
    srv_respond(req, 200, "text/plain", v, strlen(v));
}

/* WebSocket: every message back; "close" closes from the server's side. */
static void ws_echo(srv_ws *ws, int is_text, const void *d, size_t n, void *ctx)
{
    (void)ctx;
    if (is_text && n == 5 && memcmp(d, "close", 5) == 0)
        srv_ws_close(ws, 1000, "bye");
    else if (is_text)
        srv_ws_send_text(ws, d, n);
    else
        srv_ws_send_binary(ws, d, n);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int connect_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* libFuzzer's timer signal (-timeout) interrupts blocking calls: an
     * interrupted connect goes on in the background, so wait for it. */
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        CHECK(errno == EINTR, "connect: %s", strerror(errno));
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r;
        while ((r = poll(&p, 1, FUZZ_HEALTH_MS)) < 0 && errno == EINTR)
            continue;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        CHECK(r == 1 && err == 0, "connect (after EINTR): %s", r == 1 ? strerror(err) : "timeout");
    }
    return fd;
}

/* Write everything the server takes (it may close early: not an error). */
static void send_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* Read into buf (up to cap) until EOF, reset or the deadline. */
static size_t read_until_close(int fd, char *buf, size_t cap, unsigned ms, const char **how)
{
    *how = "deadline";
    size_t got = 0;
    uint64_t end = now_ms() + ms;
    for (;;) {
        uint64_t now = now_ms();
        if (now >= end)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, (int)(end - now));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        char scratch[4096];
        char *dst = got < cap ? buf + got : scratch;
        size_t room = got < cap ? cap - got : sizeof scratch;
        ssize_t r = recv(fd, dst, room, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            *how = r == 0 ? "closed" : strerror(errno);
            break;
        }
        if (got < cap)
            got += (size_t)r;
    }
    return got;
}

static void health_check(void)
{
    static const char req[] = "GET /health HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
    int fd = connect_server();
    send_all(fd, (const uint8_t *)req, sizeof req - 1);
    char buf[512];
    const char *how;
    uint64_t t0 = now_ms();
    size_t n = read_until_close(fd, buf, sizeof buf - 1, FUZZ_HEALTH_MS, &how);
    close(fd);
    buf[n] = '\0';
    srv_stats st;
    srv_server_stats(srv, &st);
    CHECK(n >= 12 && memcmp(buf, "HTTP/1.1 200", 12) == 0,
          "GET /health after the input got %zu bytes (%s after %llu ms): \"%.60s\"; "
          "server: %u connections open, %u requests in flight, %llu connections so far",
          n, how, (unsigned long long)(now_ms() - t0), buf, st.connections_open,
          st.requests_in_flight, (unsigned long long)st.connections_total);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    const char *env = getenv("SRV_FUZZ_ENGINE");
    if (env != NULL && *env)
        engine_name = env;
    const srv_engine *engine = srv_engine_find(engine_name);
    if (engine == NULL) {
        fprintf(stderr, "fuzz-engine: engine \"%s\" is not built in\n", engine_name);
        exit(2);
    }
    engine_caps = engine->caps;
    const char *ms = getenv("SRV_FUZZ_READ_MS");
    if (ms != NULL && atoi(ms) > 0)
        read_ms = (unsigned)atoi(ms);
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 4;
    cfg.io_threads = 1;
    cfg.header_timeout_ms = 2000;
    cfg.keepalive_timeout_ms = 2000;
    cfg.request_timeout_ms = 2000;
    cfg.max_header_bytes = 2048; /* limits within reach of small inputs */
    cfg.max_uri_bytes = 1024;
    cfg.max_body_bytes = 4096;
    /* The server lives for the whole run: libFuzzer exits without
     * returning, so it is never freed (reachable, not a leak). */
    srv = srv_server_new(engine, &cfg);
    CHECK(srv != NULL, "srv_server_new");
    CHECK(srv_route(srv, "GET", "/health", h_health, NULL) == 0, "route");
    CHECK(srv_route(srv, "POST", "/echo", h_echo, NULL) == 0, "route");
    CHECK(srv_route(srv, "PUT", "/echo", h_echo, NULL) == 0, "route");
    CHECK(srv_route(srv, "GET", "/q", h_query, NULL) == 0, "route");
    if (engine_caps & SRV_CAP_WEBSOCKET) { /* frames after a 101 (corpus/engine/ws-*) */
        srv_ws_opts wo;
        srv_ws_opts_init(&wo);
        wo.max_message_bytes = 4096;
        wo.send_buffer_bytes = 16384;
        wo.origins = "*";
        wo.on_message = ws_echo;
        CHECK(srv_route_ws(srv, "/ws", &wo) == 0, "route /ws: %s", srv_server_last_error(srv));
        wo.flags = SRV_WS_NONBLOCKING;
        CHECK(srv_route_ws(srv, "/wsn", &wo) == 0, "route /wsn: %s", srv_server_last_error(srv));
    }
    int rc = srv_server_start(srv);
    CHECK(rc == 0, "start: %s", srv_server_last_error(srv));
    port = srv_server_port(srv);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = connect_server();
    send_all(fd, data, size);
    shutdown(fd, SHUT_WR);
    char buf[64];
    const char *how;
    size_t n = read_until_close(fd, buf, sizeof buf, read_ms, &how);
    close(fd);

    /* An engine that speaks HTTP/2 to an HTTP/2 preface (however the input
     * reached one: after empty lines, with a damaged magic) answers with
     * frames: the first is a SETTINGS or a GOAWAY, a 9-byte header whose
     * length fits a small frame. */
    bool h2 = (engine_caps & (SRV_CAP_HTTP2 | SRV_CAP_H2_PREFACE_GOAWAY)) && n >= 9 &&
              buf[0] == 0 && (buf[3] == 4 || buf[3] == 7);
    if (n > 0 && !h2) {
        size_t k = n < 7 ? n : 7;
        CHECK(memcmp(buf, "HTTP/1.", k) == 0, "the answer starts with \"%.*s\"", (int)k, buf);
    }
    health_check();
    return 0;
}
