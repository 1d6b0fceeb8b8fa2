/*
 * A burst that arrives while the I/O thread is busy: every request of it
 * is answered at once, whatever its size. libmicrohttpd 0.9.75's own
 * polling thread, handed exactly 128 events (its batch) by the last
 * epoll_wait of a series, waits again with its full timeout (21 s here)
 * before it processes any of them: under 1000 kept-alive clients a whole
 * thread stalled (docs/ENGINES.md, "mhd: our own loops"). Here one I/O
 * thread is held by a non-blocking handler that sleeps (a misuse, on
 * purpose) while N kept-alive connections each send a request, so the
 * thread wakes to N ready connections at once; N = 128 and 256 are the
 * sizes that stalled.
 */
#include "conformance.h"

#include <stdlib.h>

/* Non-blocking, and it blocks: holds the thread that runs it. */
static void h_hold(srv_request *req, void *ctx)
{
    (void)ctx;
    const char *ms = srv_request_query(req, "ms");
    sleep_ms(ms != NULL ? atoi(ms) : 0);
    srv_respond(req, 200, "text/plain", "held", 4);
}

/* One I/O thread, /hello and the non-blocking /hold?ms=N; started. */
static srv_server *hold_server(void)
{
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.io_threads = 1;
    cfg.worker_threads = 4;
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv != NULL, "srv_server_new");
    CHECK(srv_route(srv, "GET", "/hello", h_hello, NULL) == 0, "srv_route /hello");
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "GET";
    o.path = "/hold";
    o.handler = h_hold;
    o.flags = SRV_ROUTE_NONBLOCKING;
    CHECK(srv_route_add(srv, &o) == 0, "srv_route_add /hold");
    int rc = srv_server_start(srv);
    CHECK(rc == 0, "start: %s (%s)", srv_strerror(rc), srv_server_last_error(srv));
    return srv;
}

static int burst_get(rc_conn *c, int timeout_ms)
{
    if (rc_send_str(c, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", 2000) != RC_OK)
        return -1;
    rc_response r;
    int rc = rc_read_response(c, &r, 0, timeout_ms);
    if (rc != RC_OK)
        return rc == RC_TIMEOUT ? -2 : -1;
    int st = r.status;
    rc_response_free(&r);
    return st;
}

void test_burst_while_loop_busy(void **state)
{
    (void)state;
    enum { MAX_N = 256, HOLD_MS = 300, ANSWER_MS = 5000 };
    srv_server *srv = hold_server();
    int port = srv_server_port(srv);

    static rc_conn conns[MAX_N];
    static const int sizes[] = {128, 256};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        /* Kept alive and idle in the engine's loop: one request each first. */
        for (int i = 0; i < n; i++) {
            rc_init(&conns[i]);
            CHECK(rc_connect(&conns[i], port, 2000) == RC_OK, "connect %d of %d", i, n);
            int st = burst_get(&conns[i], ANSWER_MS);
            CHECK(st == 200, "connection %d of %d: first request %d", i, n, st);
        }
        rc_conn holder;
        rc_init(&holder);
        CHECK(rc_connect(&holder, port, 2000) == RC_OK, "connect the holder");
        char req[96];
        snprintf(req, sizeof req, "GET /hold?ms=%d HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", (int)HOLD_MS);
        CHECK(rc_send_str(&holder, req, 2000) == RC_OK, "send /hold");
        sleep_ms(HOLD_MS / 3); /* the thread is in the handler now */
        for (int i = 0; i < n; i++)
            CHECK(rc_send_str(&conns[i], "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", 2000) ==
                      RC_OK,
                  "send on connection %d of %d", i, n);
        long long t0 = rc_now_ms();
        int late = 0, first_late = -1, bad = 0;
        for (int i = 0; i < n; i++) {
            rc_response r;
            long long left = t0 + ANSWER_MS - rc_now_ms();
            int rr = rc_read_response(&conns[i], &r, 0, left > 0 ? (int)left : 1);
            if (rr == RC_TIMEOUT) {
                if (first_late < 0)
                    first_late = i;
                late++;
                continue;
            }
            if (rr != RC_OK || r.status != 200)
                bad++;
            if (rr == RC_OK)
                rc_response_free(&r);
        }
        long long took = rc_now_ms() - t0;
        rc_response hr;
        int hrc = rc_read_response(&holder, &hr, 0, ANSWER_MS);
        int hst = hrc == RC_OK ? hr.status : -1;
        if (hrc == RC_OK)
            rc_response_free(&hr);
        rc_close(&holder);
        for (int i = 0; i < n; i++)
            rc_close(&conns[i]);
        CHECK(late == 0, "%d connections sent a request while the I/O thread was busy: %d not "
              "answered within %d ms (the first: connection %d)", n, late, (int)ANSWER_MS,
              first_late);
        CHECK(bad == 0, "%d connections: %d answers not 200", n, bad);
        CHECK(hst == 200, "/hold: %d", hst);
        print_message("    %d connections answered in %lld ms after a %d ms hold\n", n, took,
                      (int)HOLD_MS);
    }
    CHECK(srv_server_stop(srv, 2000) == 0, "stop");
    srv_server_free(srv);
}

typedef struct quiesce_stop {
    srv_server *srv;
    int rc;
    long long ms; /* how long srv_server_stop took */
} quiesce_stop;

static void *quiesce_stop_run(void *arg)
{
    quiesce_stop *qs = arg;
    long long t0 = rc_now_ms();
    qs->rc = srv_server_stop(qs->srv, 3000);
    qs->ms = rc_now_ms() - t0;
    return NULL;
}

/* A connection that sent part of a head, then vanished (RST). */
static void rc_vanish(rc_conn *c)
{
    struct linger lg = {1, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    rc_close(c);
}

/* A client connects and sends its whole request while the I/O thread is
 * busy, and the stop begins before the thread is back: the thread then
 * finds the new connection and the quiesce on the same turn. The request
 * came before the quiesce, so it is served (the grace waits for it), never
 * reset: closing the just-accepted connection as idle, with its request
 * unread in the socket, reset it. Beside it, hostile ones the busy thread
 * also finds at the quiesce: a HEAD (served, no body), part of a head then
 * a half-close, part of a head then a reset, a silent connect. None may
 * hold the stop for its grace (a count of what is arriving left behind
 * would), and each is closed. */
void test_quiesce_while_loop_busy(void **state)
{
    (void)state;
    enum { HOLD_MS = 400 };
    srv_server *srv = hold_server();
    int port = srv_server_port(srv);

    rc_conn holder, late, head, half, vanish, silent;
    rc_init(&holder);
    rc_init(&late);
    rc_init(&head);
    rc_init(&half);
    rc_init(&vanish);
    rc_init(&silent);
    CHECK(rc_connect(&holder, port, 2000) == RC_OK, "connect the holder");
    char req[96];
    snprintf(req, sizeof req, "GET /hold?ms=%d HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
             (int)HOLD_MS);
    CHECK(rc_send_str(&holder, req, 2000) == RC_OK, "send /hold");
    sleep_ms(HOLD_MS / 4); /* the thread is in the handler now */
    CHECK(rc_connect(&late, port, 2000) == RC_OK, "connect while the thread is busy");
    CHECK(rc_send_str(&late, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", 2000) == RC_OK,
          "send while the thread is busy");
    static const char part[] = "GET /hello HTTP/1.1\r\nHo";
    CHECK(rc_connect(&head, port, 2000) == RC_OK && rc_connect(&half, port, 2000) == RC_OK &&
              rc_connect(&vanish, port, 2000) == RC_OK && rc_connect(&silent, port, 2000) == RC_OK,
          "connect the hostile clients");
    CHECK(rc_send_str(&head, "HEAD /hello HTTP/1.1\r\nHost: a\r\n\r\n", 2000) == RC_OK &&
              rc_send_str(&half, part, 2000) == RC_OK && rc_send_str(&vanish, part, 2000) == RC_OK,
          "send the hostile requests");
    rc_shutdown_write(&half);
    rc_vanish(&vanish);
    sleep_ms(HOLD_MS / 4);
    quiesce_stop qs = {.srv = srv, .rc = -1};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, quiesce_stop_run, &qs) == 0, "pthread_create");
    rc_response r;
    int lrc = rc_read_response(&late, &r, 0, 5000);
    int lst = lrc == RC_OK ? r.status : 0;
    if (lrc == RC_OK)
        rc_response_free(&r);
    int hrc = rc_read_response(&holder, &r, 0, 5000);
    int hst = hrc == RC_OK ? r.status : 0;
    if (hrc == RC_OK)
        rc_response_free(&r);
    int xrc = rc_read_response(&head, &r, 1, 5000);
    int xst = xrc == RC_OK ? r.status : 0;
    size_t xbody = xrc == RC_OK ? r.body_len : 0;
    if (xrc == RC_OK)
        rc_response_free(&r);
    int halfc = rc_wait_close(&half, 5000, NULL), silentc = rc_wait_close(&silent, 5000, NULL);
    pthread_join(t, NULL);
    rc_close(&holder);
    rc_close(&late);
    rc_close(&head);
    rc_close(&half);
    rc_close(&silent);
    srv_server_free(srv);
    CHECK(lrc == RC_OK && lst == 200, "a request sent before the quiesce, on a connection the "
          "busy thread had not accepted yet: %s, status %d (expected 200)", rc_strerror(lrc),
          lst);
    CHECK(hrc == RC_OK && hst == 200, "/hold: %s, status %d", rc_strerror(hrc), hst);
    CHECK(xrc == RC_OK && xst == 200 && xbody == 0, "HEAD sent before the quiesce: %s, status %d, "
          "%zu body bytes (expected 200 and none)", rc_strerror(xrc), xst, xbody);
    CHECK(halfc != RC_TIMEOUT, "part of a head, then a half-close: still open after 5 s");
    CHECK(silentc != RC_TIMEOUT, "a silent connection: still open after 5 s");
    CHECK(qs.rc == 0, "srv_server_stop: %d", qs.rc);
    CHECK(qs.ms < 2000, "the stop took %lld ms of its 3000 ms grace: something held it (a "
          "hostile client counted as arriving and never let go)", qs.ms);
}
