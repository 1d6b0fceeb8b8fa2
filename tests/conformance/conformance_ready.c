/*
 * Readiness and the drain phase on every engine (srv_config.ready_path,
 * drain_ms, srv_ready_check_add): what a load balancer sees through a
 * rolling restart. Ready while running; during the drain the server still
 * accepts and serves everything but readiness says 503; a failing check
 * says why.
 */
#include "conformance.h"

#include <pthread.h>

typedef struct ready_fx {
    srv_server *srv;
    int port;
    atomic_int db_down;
} ready_fx;

static int check_db(void *ctx, char *why, size_t cap)
{
    ready_fx *r = ctx;
    if (atomic_load(&r->db_down)) {
        snprintf(why, cap, "connection refused");
        return 1;
    }
    return 0;
}

static int ready_start(ready_fx *r, unsigned drain_ms, int with_check)
{
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.io_threads = 1;
    cfg.worker_threads = 4;
    cfg.ready_path = "/ready";
    cfg.drain_ms = drain_ms;
    r->srv = srv_server_new(g_engine, &cfg);
    CHECK(r->srv != NULL, "srv_server_new");
    CHECK(srv_route(r->srv, "GET", "/hello", h_hello, NULL) == 0, "srv_route");
    if (with_check)
        CHECK(srv_ready_check_add(r->srv, "db", check_db, r) == 0, "srv_ready_check_add");
    CHECK(srv_server_ready(r->srv) == 0, "srv_server_ready before start");
    int rc = srv_server_start(r->srv);
    r->port = rc == 0 ? srv_server_port(r->srv) : 0;
    return rc;
}

/* GET path on a new connection: the status, and the body into out. */
static int get(int port, const char *path, char *out, size_t cap)
{
    rc_conn c;
    rc_init(&c);
    if (rc_connect(&c, port, 2000) != RC_OK)
        return -1;
    char req[128];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", path);
    int st = -2;
    rc_response r;
    if (rc_send_str(&c, req, 2000) == RC_OK && rc_read_response(&c, &r, 0, 5000) == RC_OK) {
        st = r.status;
        snprintf(out, cap, "%.*s", (int)r.body_len, r.body ? r.body : "");
        rc_response_free(&r);
    }
    rc_close(&c);
    return st;
}

typedef struct stopper {
    srv_server *srv;
    int rc;
    long long took;
} stopper;

static void *stop_run(void *arg)
{
    stopper *s = arg;
    long long t0 = rc_now_ms();
    s->rc = srv_server_stop(s->srv, 2000);
    s->took = rc_now_ms() - t0;
    return NULL;
}

void test_ready_and_drain(void **state)
{
    (void)state;
    /* Long enough for the two requests below to fall inside the drain
     * on a slow, loaded machine. */
    enum { DRAIN_MS = 2000 };
    ready_fx r = {0};
    int rc = ready_start(&r, DRAIN_MS, 0);
    CHECK(rc == 0, "start: %s (%s)", srv_strerror(rc), srv_server_last_error(r.srv));
    char body[256];
    int st = get(r.port, "/ready", body, sizeof body);
    CHECK(st == 200 && strcmp(body, "ready\n") == 0, "running: /ready %d \"%s\"", st, body);
    CHECK(srv_server_ready(r.srv) == 1, "srv_server_ready while running");

    stopper s = {.srv = r.srv};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stop_run, &s) == 0, "pthread_create");
    /* Wait for the stopper thread to begin the drain (it may be scheduled
     * late on a loaded machine), instead of a fixed sleep. */
    long long until = rc_now_ms() + 5000;
    while (srv_server_ready(r.srv) != 0 && rc_now_ms() < until)
        sleep_ms(5);
    /* Draining: readiness says no, everything else is served, new
     * connections included. */
    st = get(r.port, "/ready", body, sizeof body);
    CHECK(st == 503 && strstr(body, "draining") != NULL, "draining: /ready %d \"%s\"", st, body);
    CHECK(srv_server_ready(r.srv) == 0, "srv_server_ready while draining");
    st = get(r.port, "/hello", body, sizeof body);
    CHECK(st == 200, "draining: /hello on a new connection %d, want 200 (still serving)", st);
    pthread_join(t, NULL);
    CHECK(s.rc == 0 && s.took >= DRAIN_MS - 100, "stop: rc %d after %lld ms: the drain lasts %d ms",
          s.rc, s.took, (int)DRAIN_MS);
    CHECK(get(r.port, "/ready", body, sizeof body) == -1, "stopped: still accepting");
    srv_server_free(r.srv);
}

void test_ready_checks(void **state)
{
    (void)state;
    ready_fx r = {0};
    atomic_init(&r.db_down, 0);
    int rc = ready_start(&r, 0, 1);
    CHECK(rc == 0, "start: %s (%s)", srv_strerror(rc), srv_server_last_error(r.srv));
    char body[256];
    int st = get(r.port, "/ready", body, sizeof body);
    CHECK(st == 200, "check passing: /ready %d \"%s\"", st, body);
    atomic_store(&r.db_down, 1);
    st = get(r.port, "/ready", body, sizeof body);
    CHECK(st == 503 && strcmp(body, "not ready: db: connection refused\n") == 0,
          "check failing: /ready %d \"%s\"", st, body);
    CHECK(srv_server_ready(r.srv) == 0, "srv_server_ready with a failing check");
    atomic_store(&r.db_down, 0);
    st = get(r.port, "/ready", body, sizeof body);
    CHECK(st == 200, "check passing again: /ready %d", st);
    CHECK(srv_ready_check_add(r.srv, "late", check_db, &r) == SRV_ESTATE,
          "a check added after start");
    CHECK(srv_server_stop(r.srv, 1000) == 0, "stop");
    srv_server_free(r.srv);

    /* The application routing the same path is refused at start. */
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.ready_path = "/hello";
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv_route(srv, "GET", "/hello", h_hello, NULL) == 0, "srv_route");
    rc = srv_server_start(srv);
    CHECK(rc == SRV_EEXIST && strstr(srv_server_last_error(srv), "ready_path") != NULL,
          "ready_path on an application route: %s (%s)", srv_strerror(rc),
          srv_server_last_error(srv));
    srv_server_free(srv);
}
