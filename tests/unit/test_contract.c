/*
 * The core's side of the engine contract (srv_engine.h) and the handler
 * contract (api/srv.h), driven through a fake engine without sockets:
 * dispatch to workers, respond exactly once, 404/405, HEAD, async and late
 * responses, the request timeout, graceful stop, timers, stats, header rules
 * and engine-table validation.
 */
#include "fake_engine.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static int setup(void **state)
{
    *state = fake_new();
    return 0;
}

static int teardown(void **state)
{
    fake_free(*state);
    return 0;
}

/* A timer callback that must never run. */
static int never_calls;
static void never_cb(void *arg)
{
    (void)arg;
    never_calls++;
}

/* Non-zero when the comma-separated list holds token exactly. */
static int list_has(const char *list, const char *token)
{
    size_t n = strlen(token);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *end = p;
        while (*end && *end != ',' && *end != ' ')
            end++;
        if ((size_t)(end - p) == n && strncmp(p, token, n) == 0)
            return 1;
        p = end;
    }
    return 0;
}

/* ------------------------------------------------------------------ */

/* The core's header rules (docs/ENGINES.md "Header rules"), without
 * sockets; the conformance suite asserts them on every engine. */
static int header_case(fake *f, int minor, int no_host, const char *(*hdrs)[2], size_t n)
{
    fake_req *r = fake_req_new(f, "GET", "/hello");
    r->minor = minor;
    r->no_host = no_host;
    for (size_t i = 0; i < n; i++) {
        r->headers[i][0] = hdrs[i][0];
        r->headers[i][1] = hdrs[i][1];
    }
    r->nheaders = n;
    int st = fake_send(r);
    fake_wait(r, FAKE_WAIT_MS);
    return st;
}

static void test_header_rules(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/hello", fake_handler, NULL), 0);
    fake_start(f, NULL);
    const char *ctl[][2] = {{"Host", "h"}, {"X-A", "a\x01" "b"}};
    assert_int_equal(header_case(f, 1, 1, ctl, 2), 400);
    const char *del[][2] = {{"Host", "h"}, {"X-A", "a\x7f"}};
    assert_int_equal(header_case(f, 1, 1, del, 2), 400);
    const char *tab[][2] = {{"Host", "h"}, {"X-A", "a\tb \xc3\xa9"}};
    assert_int_equal(header_case(f, 1, 1, tab, 2), 0);
    assert_int_equal(header_case(f, 1, 1, NULL, 0), 400); /* 1.1 without Host */
    assert_int_equal(header_case(f, 0, 1, NULL, 0), 0);   /* 1.0 without Host */
    const char *empty[][2] = {{"Host", ""}};
    assert_int_equal(header_case(f, 1, 1, empty, 1), 400);
    const char *two[][2] = {{"Host", "a"}, {"host", "a"}};
    assert_int_equal(header_case(f, 1, 1, two, 2), 400);
    assert_int_equal(header_case(f, 0, 1, two, 2), 400);
    const char *cl2[][2] = {{"Content-Length", "0"}, {"Content-Length", "0"}};
    assert_int_equal(header_case(f, 1, 0, cl2, 2), 400);
    const char *te_sp[][2] = {{"Transfer-Encoding", "chunked "}};
    assert_int_equal(header_case(f, 1, 0, te_sp, 1), 400);
    const char *cl_sp[][2] = {{"Content-Length", "0\t"}};
    assert_int_equal(header_case(f, 1, 0, cl_sp, 1), 400);
    const char *lead[][2] = {{"Content-Length", "  0"}}; /* OWS before: fine */
    assert_int_equal(header_case(f, 1, 0, lead, 1), 0);
    fake_finish(f);
}

/* 100 header lines pass, the 101st is 431 (the core's count, whatever
 * their size). */
static void test_header_count_limit(void **state)
{
    fake *f = *state;
    fake_start(f, NULL);
    srv_request *req = srv__request_new(f->srv, NULL, 0);
    assert_non_null(req);
    int st = 0;
    for (int i = 0; i < 100 && st == 0; i++)
        st = srv__request_add_header(req, "X", 1, "v", 1);
    assert_int_equal(st, 0);
    assert_int_equal(srv__request_add_header(req, "X", 1, "v", 1), 431);
    srv__request_release(req);
    fake_finish(f);
}

/* The access log escapes '"', '\' and control bytes of the request line
 * as \xHH: a target cannot forge a field or a line. */
static void test_access_log_escapes(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.access_log = 1;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/a\"b\\c", fake_handler, NULL), 0);
    fake_start(f, &cfg);
    int p[2];
    assert_int_equal(pipe(p), 0);
    int saved = dup(2);
    dup2(p[1], 2);
    fake_req *r = fake_req_new(f, "GET", "/a%22b\\c");
    fake_send(r);
    int st = fake_wait(r, FAKE_WAIT_MS);
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    char line[1024] = {0};
    ssize_t n = read(p[0], line, sizeof line - 1);
    close(p[0]);
    assert_true(n > 0);
    assert_int_equal(st, 200);
    if (strstr(line, "\"GET /a\\x22b\\x5Cc HTTP/1.1\" 200") == NULL &&
        strstr(line, "\"GET /a%22b\\x5Cc HTTP/1.1\" 200") == NULL)
        fail_msg("access log line not escaped: %s", line);
    fake_finish(f);
}

static void test_routed_handler_runs_on_worker(void **state)
{
    fake *f = *state;
    int marker;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/hello", fake_handler, &marker), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/hello");
    r->resp_body = "hi there";
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);

    assert_int_equal(r->handler_calls, 1);
    assert_false(pthread_equal(r->handler_thread, pthread_self()));
    assert_ptr_equal(r->handler_ctx, &marker);
    assert_ptr_equal(r->req_server, srv);
    assert_string_equal(r->method_seen, "GET");
    assert_string_equal(r->path_seen, "/hello");
    assert_int_equal(r->respond_rc, 0);
    assert_string_equal(r->body_out, "hi there");
    assert_int_equal(r->body_out_len, 8);
    assert_int_equal(r->content_length, 8);
    assert_ptr_equal(f->last_state, f); /* the state start stored */

    /* Still exactly one respond after things settle. */
    fake_sleep_ms(50);
    assert_int_equal(fake_responded(r), 1);
    fake_finish(f);
}

static void test_unknown_path_is_404(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/hello", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/nope");
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 404);
    assert_int_equal(r->handler_calls, 0);
    fake_finish(f);
}

static void test_wrong_method_is_405_with_allow(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/r", fake_handler, NULL), 0);
    assert_int_equal(srv_route(srv, "POST", "/r", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "DELETE", "/r");
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 405);
    assert_int_equal(r->handler_calls, 0);

    const char *allow = fake_resp_header(r, "Allow");
    assert_non_null(allow);
    assert_true(list_has(allow, "GET"));
    assert_true(list_has(allow, "POST"));
    assert_false(list_has(allow, "DELETE"));
    char head_allow[128];
    assert_int_equal(fake_head_header(r, "Allow", head_allow, sizeof head_allow), 1);
    assert_string_equal(head_allow, allow);
    fake_finish(f);
}

static void test_head_on_get_route(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/h", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "HEAD", "/h");
    r->resp_body = "hello";
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_int_equal(r->handler_calls, 1);
    assert_string_equal(r->method_seen, "HEAD");
    assert_int_equal(r->body_out_len, 0);
    assert_int_equal(r->content_length, 5);
    char cl[32];
    assert_int_equal(fake_head_header(r, "Content-Length", cl, sizeof cl), 1);
    assert_string_equal(cl, "5");
    fake_finish(f);
}

struct late {
    srv_request *req;
    int status;
    int rc;
};

static void *late_respond(void *arg)
{
    struct late *l = arg;
    l->rc = srv_respond(l->req, l->status, "text/plain", "late", 4);
    return NULL;
}

static void test_async_respond_from_another_thread(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/async", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/async");
    r->action = FAKE_HOLD;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait_handler(r, FAKE_WAIT_MS), 0);
    fake_sleep_ms(50);
    assert_int_equal(fake_responded(r), 0); /* returned without answering */

    struct late l = {.req = r->req, .status = 201, .rc = -999};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, late_respond, &l), 0);
    pthread_join(t, NULL);
    assert_int_equal(l.rc, 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 201);
    assert_string_equal(r->body_out, "late");
    fake_finish(f);
}

static void test_respond_after_client_gone_is_safe(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/gone", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/gone");
    r->action = FAKE_HOLD;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait_handler(r, FAKE_WAIT_MS), 0);
    fake_release(r); /* the connection died: the engine drops its reference */
    assert_true(r->released_early);

    /* The application still holds the request; its answer is dropped. */
    assert_int_equal(srv_respond(r->req, 200, "text/plain", "too late", 8), 0);
    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.requests_in_flight == 0);
    fake_finish(f);
}

static void test_respond_slot_may_release(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/x", fake_handler, NULL), 0);
    fake_start(f, NULL);

    /* An engine that finds the connection gone releases inside respond. */
    for (int i = 0; i < 8; i++) {
        fake_req *r = fake_req_new(f, "GET", "/x");
        r->release_in_respond = 1;
        r->action = i % 2 ? FAKE_AFTER : FAKE_RESPOND;
        r->after_ms = 5;
        assert_int_equal(fake_send(r), 0);
        assert_int_equal(fake_wait_respond(r, FAKE_WAIT_MS), 0);
        assert_int_equal(r->status_out, 200);
    }
    fake_req *r404 = fake_req_new(f, "GET", "/missing");
    r404->release_in_respond = 1;
    fake_send(r404);
    assert_int_equal(fake_wait_respond(r404, FAKE_WAIT_MS), 0);
    assert_int_equal(r404->status_out, 404);

    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.requests_in_flight == 0);
    fake_finish(f);
}

static void test_silent_handler_gets_503_after_timeout(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.request_timeout_ms = 200;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/silent", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/silent");
    r->action = FAKE_HOLD;
    uint64_t t0 = fake_now_ms();
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait_respond(r, FAKE_WAIT_MS), 0);
    uint64_t elapsed = fake_now_ms() - t0;
    assert_int_equal(r->status_out, 503);
    assert_true(elapsed >= 190);  /* not before request_timeout_ms */
    assert_true(elapsed < 3000);  /* and not much later */
    fake_release(r);

    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.timeouts == 1);
    assert_true(st.responses_5xx >= 1);

    /* The handler's late answer is refused and counted, not used. */
    assert_int_equal(srv_respond(r->req, 200, "text/plain", "late", 4), SRV_ETIMEDOUT);
    FAKE_EVENTUALLY(srv, st, st.dropped == 1);
    assert_int_equal(st.requests_in_flight, 0);
    assert_int_equal(fake_responded(r), 1);
    fake_finish(f);
}

static void test_free_with_unanswered_request(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/never", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/never");
    r->action = FAKE_HOLD;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait_handler(r, FAKE_WAIT_MS), 0);
    /* srv_server_free stops (grace 0): the core answers 503 and frees the
     * request the application never answered (ASan checks the leak). */
    fake_finish(f);
    assert_int_equal(r->status_out, 503);
}

static void test_stop_answers_outstanding_503(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/held", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/held");
    r->action = FAKE_HOLD;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait_handler(r, FAKE_WAIT_MS), 0);

    uint64_t t0 = fake_now_ms();
    assert_int_equal(srv_server_stop(srv, 150), 0);
    uint64_t elapsed = fake_now_ms() - t0;
    assert_true(elapsed >= 140); /* the grace period was given */
    assert_true(elapsed < 3000);

    assert_int_equal(fake_responded(r), 1);
    assert_int_equal(r->status_out, 503);
    assert_int_equal(r->keep_alive, 0);
    assert_int_equal(f->quiesce_calls, 1);
    assert_int_equal(f->stop_calls, 1);
    assert_true(f->quiesce_seq < r->respond_seq);
    assert_true(r->respond_seq < f->stop_seq);
    assert_true(r->released); /* the stop slot released it */

    assert_int_equal(srv_respond(r->req, 200, "text/plain", "late", 4), SRV_ETIMEDOUT);
    assert_int_equal(srv_server_stop(srv, 0), SRV_ESTATE);
    assert_int_equal(srv_after(srv, 10, never_cb, NULL), SRV_ESTATE);
    fake_finish(f);
    assert_int_equal(never_calls, 0);
}

static void test_stop_lets_in_flight_finish(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/slow", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/slow");
    r->action = FAKE_AFTER;
    r->after_ms = 150;
    /* The test thread sits in srv_server_stop, so the respond slot writes
     * and releases itself, as a connection thread would. */
    r->release_in_respond = 1;
    r->resp_body = "finished";
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait_handler(r, FAKE_WAIT_MS), 0);
    assert_int_equal(r->after_rc, 0);

    uint64_t t0 = fake_now_ms();
    assert_int_equal(srv_server_stop(srv, 5000), 0);
    uint64_t elapsed = fake_now_ms() - t0;
    /* Answered within the grace period, and stop did not sit out the rest. */
    assert_int_equal(r->status_out, 200);
    assert_string_equal(r->body_out, "finished");
    assert_int_equal(r->respond_rc, 0);
    assert_int_equal(r->keep_alive, 0);
    char conn[32];
    assert_int_equal(fake_head_header(r, "Connection", conn, sizeof conn), 1);
    assert_string_equal(conn, "close");
    assert_true(elapsed < 3000);
    fake_finish(f);
}

struct tick {
    pthread_mutex_t mu;
    int calls;
    pthread_t thread;
    uint64_t at;
};

static void tick_cb(void *arg)
{
    struct tick *t = arg;
    pthread_mutex_lock(&t->mu);
    t->calls++;
    t->thread = pthread_self();
    t->at = fake_now_ms();
    pthread_mutex_unlock(&t->mu);
}

static int tick_calls(struct tick *t)
{
    pthread_mutex_lock(&t->mu);
    int n = t->calls;
    pthread_mutex_unlock(&t->mu);
    return n;
}

static void test_srv_after(void **state)
{
    fake *f = *state;
    struct tick a = {.mu = PTHREAD_MUTEX_INITIALIZER}, zero = {.mu = PTHREAD_MUTEX_INITIALIZER},
                never = {.mu = PTHREAD_MUTEX_INITIALIZER};
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_after(srv, 10, tick_cb, &never), SRV_ESTATE); /* not started */
    fake_start(f, NULL);
    assert_int_equal(srv_after(srv, 10, NULL, NULL), SRV_EINVAL);

    uint64_t t0 = fake_now_ms();
    assert_int_equal(srv_after(srv, 80, tick_cb, &a), 0);
    assert_int_equal(srv_after(srv, 0, tick_cb, &zero), 0);
    assert_int_equal(srv_after(srv, 60000, tick_cb, &never), 0);
    uint64_t deadline = t0 + 3000;
    while ((tick_calls(&a) == 0 || tick_calls(&zero) == 0) && fake_now_ms() < deadline)
        fake_sleep_ms(2);
    assert_int_equal(tick_calls(&a), 1);
    assert_int_equal(tick_calls(&zero), 1);
    pthread_mutex_lock(&a.mu);
    uint64_t fired = a.at;
    pthread_t thread = a.thread;
    pthread_mutex_unlock(&a.mu);
    assert_true(fired - t0 >= 75);
    assert_true(fired - t0 < 2000);
    assert_false(pthread_equal(thread, pthread_self()));
    fake_sleep_ms(100);
    assert_int_equal(tick_calls(&a), 1); /* once */

    fake_finish(f); /* the 60 s one is dropped, never called */
    assert_int_equal(tick_calls(&never), 0);
}

static void test_stats_count(void **state)
{
    fake *f = *state;
    srv_stats st;
    srv_config cfg;
    fake_config(&cfg);
    cfg.worker_threads = 2;
    srv_server *srv = fake_server(f, &cfg);
    srv_server_stats(srv, &st);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.responses_2xx, 0);
    assert_int_equal(st.connections_total, 0);
    assert_int_equal(st.requests_in_flight, 0);
    assert_int_equal(srv_route(srv, "GET", "/s", fake_handler, NULL), 0);
    fake_start(f, NULL);

    srv__stats_connection_opened(srv);
    srv__stats_connection_opened(srv);
    srv_server_stats(srv, &st);
    assert_int_equal(st.connections_total, 2);
    assert_int_equal(st.connections_open, 2);
    srv__stats_connection_closed(srv);
    srv_server_stats(srv, &st);
    assert_int_equal(st.connections_total, 2);
    assert_int_equal(st.connections_open, 1);

    assert_int_equal(fake_roundtrip(f, "GET", "/s"), 200);
    assert_int_equal(fake_roundtrip(f, "GET", "/s"), 200);
    assert_int_equal(fake_roundtrip(f, "GET", "/missing"), 404);
    assert_int_equal(fake_roundtrip(f, "POST", "/s"), 405);
    fake_req *bad = fake_req_new(f, "B@D", "/s"); /* not a token: 400 */
    assert_int_equal(fake_send(bad), 400);
    assert_int_equal(fake_wait(bad, FAKE_WAIT_MS), 400);
    fake_req *err = fake_req_new(f, "GET", "/s");
    err->status = 500;
    fake_send(err);
    assert_int_equal(fake_wait(err, FAKE_WAIT_MS), 500);

    FAKE_EVENTUALLY(srv, st, st.responses_5xx == 1 && st.responses_4xx == 3 &&
                                 st.responses_2xx == 2 && st.requests_in_flight == 0);
    assert_int_equal(st.requests, 5); /* the malformed one was never complete */
    assert_int_equal(st.responses_1xx, 0);
    assert_int_equal(st.responses_3xx, 0);
    assert_int_equal(st.timeouts, 0);
    assert_int_equal(st.dropped, 0);

    /* Busy workers and requests in flight, while two handlers block and a
     * third waits for a worker. */
    fake_req *b[3];
    for (int i = 0; i < 3; i++) {
        b[i] = fake_req_new(f, "GET", "/s");
        b[i]->action = FAKE_BLOCK;
        assert_int_equal(fake_send(b[i]), 0);
    }
    FAKE_EVENTUALLY(srv, st, st.workers_busy == 2);
    FAKE_EVENTUALLY(srv, st, srv__pool_waiting(srv) == 1);
    assert_int_equal(st.requests_in_flight, 3);
    fake_open_gate(f);
    for (int i = 0; i < 3; i++)
        assert_int_equal(fake_wait(b[i], FAKE_WAIT_MS), 200);
    FAKE_EVENTUALLY(srv, st, st.workers_busy == 0 && st.requests_in_flight == 0);
    assert_int_equal(srv__pool_waiting(srv), 0);
    assert_int_equal(st.responses_2xx, 5);

    srv__stats_connection_closed(srv);
    srv_server_stats(srv, &st);
    assert_int_equal(st.connections_open, 0);
    fake_finish(f);
}

static void test_set_header_rules(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/hdr", fake_handler, NULL), 0);
    fake_start(f, NULL);

    static const struct {
        const char *name, *value;
        int want;
    } cases[] = {
        {"X-Custom", "yes", 0},
        {"Content-Length", "5", SRV_EHEADER},
        {"content-length", "5", SRV_EHEADER},
        {"Transfer-Encoding", "chunked", SRV_EHEADER},
        {"Connection", "close", SRV_EHEADER},
        {"Date", "yesterday", SRV_EHEADER},
        {"CONTENT-TYPE", "text/html", SRV_EHEADER},
        {"X-Split", "a\r\nInjected: 1", SRV_EHEADER},
        {"X-Lf", "a\nInjected: 2", SRV_EHEADER},
        {"X-Cr", "a\rb", SRV_EHEADER},
        {"Bad Name", "v", SRV_EHEADER},
        {"X-Colon:", "v", SRV_EHEADER},
        {"X-Name\r\nInjected", "3", SRV_EHEADER},
        {"", "v", SRV_EHEADER},
        {NULL, "v", SRV_EINVAL},
        {"X-Null", NULL, SRV_EINVAL},
    };
    _Static_assert(sizeof cases / sizeof cases[0] <= FAKE_MAX_PAIRS, "too many cases");
    fake_req *r = fake_req_new(f, "GET", "/hdr");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r->set_headers[i][0] = cases[i].name;
        r->set_headers[i][1] = cases[i].value;
    }
    r->nset_headers = sizeof cases / sizeof cases[0];
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (r->set_header_rc[i] != cases[i].want)
            fail_msg("srv_set_header(\"%s\", \"%s\") = %d (%s), want %s",
                     cases[i].name ? cases[i].name : "(null)",
                     cases[i].value ? cases[i].value : "(null)", r->set_header_rc[i],
                     srv_err_name(r->set_header_rc[i]), srv_err_name(cases[i].want));

    char v[64];
    assert_int_equal(fake_head_header(r, "X-Custom", v, sizeof v), 1);
    assert_string_equal(v, "yes");
    assert_string_equal(fake_resp_header(r, "X-Custom"), "yes");
    assert_int_equal(fake_head_header(r, "Injected", NULL, 0), 0);
    assert_int_equal(fake_head_header(r, "Transfer-Encoding", NULL, 0), 0);
    assert_int_equal(fake_head_header(r, "Content-Length", v, sizeof v), 1);
    assert_string_equal(v, "2");
    assert_int_equal(fake_head_header(r, "Date", v, sizeof v), 1);
    assert_string_not_equal(v, "yesterday");
    assert_int_equal(fake_head_header(r, "Content-Type", v, sizeof v), 1);
    assert_string_equal(v, "text/plain");
    assert_int_equal(fake_head_header(r, "Connection", v, sizeof v) == 0 ||
                         strcmp(v, "keep-alive") == 0,
                     1);

    assert_int_equal(srv_set_header(NULL, "X-A", "b"), SRV_EINVAL);
    fake_finish(f);
}

static void test_respond_argument_errors(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/e", fake_handler, NULL), 0);
    fake_start(f, NULL);

    static const struct {
        int status;
        const char *body;
        size_t len;
    } bad[] = {{99, "x", 1}, {100, "x", 1}, {199, "x", 1}, {600, "x", 1}, {0, "x", 1},
               {-200, "x", 1}, {200, NULL, 5}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fake_req *r = fake_req_new(f, "GET", "/e");
        r->status = bad[i].status;
        r->resp_body = bad[i].body;
        r->resp_len = bad[i].len;
        assert_int_equal(fake_send(r), 0);
        /* The client is not left waiting: the core answers 500. */
        assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 500);
        assert_int_equal(fake_wait_handler(r, FAKE_WAIT_MS), 0);
        if (r->respond_rc != SRV_EINVAL)
            fail_msg("srv_respond(status %d, body %s, len %zu) = %d, want SRV_EINVAL",
                     bad[i].status, bad[i].body ? "set" : "NULL", bad[i].len, r->respond_rc);
    }

    /* A length no body can have (a failed read's -1 cast to size_t): the
     * core cannot copy it and answers 500 instead of overrunning. */
    fake_req *big = fake_req_new(f, "GET", "/e");
    big->status = 200;
    big->resp_body = "x";
    big->resp_len = SIZE_MAX - 1; /* SIZE_MAX: the fake's "strlen" */
    assert_int_equal(fake_send(big), 0);
    assert_int_equal(fake_wait(big, FAKE_WAIT_MS), 500);
    assert_int_equal(fake_wait_handler(big, FAKE_WAIT_MS), 0);

    /* A NULL body with len 0 is an empty body; 599 is the last status. */
    fake_req *r = fake_req_new(f, "GET", "/e");
    r->resp_body = NULL;
    r->resp_len = 0;
    r->status = 599;
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 599);
    assert_int_equal(fake_wait_handler(r, FAKE_WAIT_MS), 0);
    assert_int_equal(r->respond_rc, 0);
    assert_int_equal(r->body_out_len, 0);
    assert_int_equal(r->content_length, 0);
    fake_finish(f);
}

/* Responds with a stack buffer, then scribbles on it: the body is copied. */
static void scribble_handler(srv_request *req, void *ctx)
{
    (void)ctx;
    char buf[16];
    memcpy(buf, "copied!", 8);
    srv_respond(req, 200, NULL, buf, 7);
    memset(buf, 'X', sizeof buf);
}

static void test_respond_copies_body(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/c", scribble_handler, NULL), 0);
    fake_start(f, NULL);
    fake_req *r = fake_req_new(f, "GET", "/c");
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_string_equal(r->body_out, "copied!");
    assert_null(fake_resp_header(r, "Content-Type")); /* NULL sends none */
    assert_int_equal(fake_head_header(r, "Content-Type", NULL, 0), 0);
    fake_finish(f);
}

static void test_request_accessors(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "POST", "/in", fake_handler, NULL), 0);
    assert_int_equal(srv_route(srv, "PATCH", "/in", fake_handler, NULL), 0);
    fake_start(f, NULL);

    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(4321)};
    inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
    fake_req *r = fake_req_new(f, "POST", "/in?x=1");
    r->peer = (const struct sockaddr *)&sin;
    r->peer_len = sizeof sin;
    r->headers[0][0] = "Host";
    r->headers[0][1] = "example";
    r->headers[1][0] = "X-Thing";
    r->headers[1][1] = "a b";
    r->headers[2][0] = "Content-Length";
    r->headers[2][1] = "10";
    r->headers[3][0] = "x-thing";
    r->headers[3][1] = "second";
    r->nheaders = 4;
    r->body = "hello body";
    r->header_lookups[0] = "x-THING";
    r->header_lookups[1] = "HOST";
    r->header_lookups[2] = "missing";
    r->nheader_lookups = 3;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_string_equal(r->method_seen, "POST");
    assert_string_equal(r->target_seen, "/in?x=1");
    assert_string_equal(r->path_seen, "/in");
    assert_string_equal(r->protocol_seen, "HTTP/1.1");
    assert_string_equal(r->peer_seen, "127.0.0.1:4321");
    assert_string_equal(r->header_val[0], "a b"); /* the first one */
    assert_string_equal(r->header_val[1], "example");
    assert_null(r->header_val[2]);
    assert_int_equal(r->body_seen_len, 10); /* SIZE_MAX: not NUL-terminated */
    assert_memory_equal(r->body_seen, "hello body", 10);

    struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6, .sin6_port = htons(80)};
    inet_pton(AF_INET6, "::1", &sin6.sin6_addr);
    fake_req *r6 = fake_req_new(f, "PATCH", "/in");
    r6->peer = (const struct sockaddr *)&sin6;
    r6->peer_len = sizeof sin6;
    r6->major = 1;
    r6->minor = 0;
    assert_int_equal(fake_send(r6), 0);
    assert_int_equal(fake_wait(r6, FAKE_WAIT_MS), 200);
    assert_string_equal(r6->method_seen, "PATCH");
    assert_string_equal(r6->peer_seen, "[::1]:80");
    assert_string_equal(r6->protocol_seen, "HTTP/1.0");
    assert_non_null(r6->body_seen); /* never NULL: an empty body is "" */
    assert_int_equal(r6->body_seen_len, 0);

    fake_req *anon = fake_req_new(f, "POST", "/in");
    assert_int_equal(fake_send(anon), 0);
    assert_int_equal(fake_wait(anon, FAKE_WAIT_MS), 200);
    assert_string_equal(anon->peer_seen, "-");
    fake_finish(f);
}

static void test_many_concurrent_requests(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/m", fake_handler, NULL), 0);
    fake_start(f, NULL);

    enum { N = 48 };
    fake_req *r[N];
    for (int i = 0; i < N; i++) {
        r[i] = fake_req_new(f, "GET", i % 6 == 5 ? "/missing" : "/m");
        r[i]->action = (enum fake_action)(i % 3 == 0 ? FAKE_AFTER : FAKE_RESPOND);
        r[i]->after_ms = (unsigned)(i % 7) * 3;
        assert_int_equal(fake_send(r[i]), 0);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(fake_wait(r[i], FAKE_WAIT_MS), i % 6 == 5 ? 404 : 200);
    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.requests_in_flight == 0 && st.workers_busy == 0);
    assert_int_equal(st.requests, N);
    fake_finish(f);
}

/* ------------------------------------------------------------------ */
/* Server lifecycle and engine-table validation                        */
/* ------------------------------------------------------------------ */

static void test_lifecycle_states(void **state)
{
    fake *f = *state;
    assert_null(srv_server_new(NULL, NULL));
    srv_server *srv = fake_server(f, NULL);
    assert_ptr_equal(srv_server_engine(srv), &f->engine);
    assert_string_equal(srv_server_last_error(srv), "");
    assert_int_equal(srv_server_stop(srv, 0), SRV_ESTATE); /* not running */
    fake_start(f, NULL);
    assert_int_equal(f->start_calls, 1);
    assert_int_equal(srv_server_start(srv), SRV_ESTATE); /* starts once */
    assert_int_equal(f->start_calls, 1);
    assert_int_equal(srv_route(srv, "GET", "/late", fake_handler, NULL), SRV_ESTATE);
    assert_int_equal(srv_server_stop(srv, 0), 0);
    assert_int_equal(f->stop_calls, 1);
    assert_int_equal(srv_server_start(srv), SRV_ESTATE); /* not again */
    assert_int_equal(f->start_calls, 1);
    fake_finish(f);
    srv_server_free(NULL); /* a no-op */
}

static void test_engine_start_failure(void **state)
{
    fake *f = *state;
    f->start_rc = SRV_EENGINE;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_server_start(srv), SRV_EENGINE);
    assert_non_null(strstr(srv_server_last_error(srv), "fake engine: start refused"));
    assert_int_equal(f->start_calls, 1);
    /* Nothing keeps running: timers refused, no slot called again. */
    assert_int_equal(srv_after(srv, 1, never_cb, NULL), SRV_ESTATE);
    fake_finish(f);
    assert_int_equal(f->quiesce_calls, 0);
    assert_int_equal(never_calls, 0);
}

/* A start that failed (e.g. EBIND while the port was busy) leaves the server
 * NEW, so the application may call srv_server_start again. If that second
 * start succeeds the server must really serve: the first attempt's pool
 * shutdown must not leave the worker pool refusing every job (then every
 * routed request was answered 503 at once). */
static void test_start_retry_after_engine_failure(void **state)
{
    fake *f = *state;
    f->start_rc = SRV_EBIND;
    /* The built-in routes and the metrics table are set up by start: a
     * retry must neither register them twice nor leak the first table. */
    srv_config cfg;
    fake_config(&cfg);
    cfg.ready_path = "/ready";
    cfg.metrics_path = "/metrics";
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/x", fake_handler, NULL), 0);
    assert_int_equal(srv_server_start(srv), SRV_EBIND);

    pthread_mutex_lock(&f->mu);
    f->start_rc = 0;
    pthread_mutex_unlock(&f->mu);
    int rc = srv_server_start(srv);
    if (rc == 0) {
        assert_int_equal(fake_roundtrip(f, "GET", "/x"), 200);
        assert_int_equal(fake_roundtrip(f, "GET", "/ready"), 200);
        assert_int_equal(fake_roundtrip(f, "GET", "/metrics"), 200);
        assert_int_equal(srv_after(srv, 1000, never_cb, NULL), 0); /* timer runs */
    } else {
        assert_int_equal(rc, SRV_ESTATE); /* refusing a retry is fine too */
    }
    fake_finish(f);
    assert_int_equal(never_calls, 0);
}

/* "Connection: close" on a second Connection line still closes: the core
 * decides keep-alive for every engine, so it must read every line. */
static void test_connection_close_on_any_line(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/x", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/x");
    r->headers[0][0] = "Connection";
    r->headers[0][1] = "keep-alive";
    r->headers[1][0] = "Connection";
    r->headers[1][1] = "close";
    r->nheaders = 2;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_int_equal(r->keep_alive, 0);

    fake_req *r10 = fake_req_new(f, "GET", "/x");
    r10->minor = 0;
    r10->headers[0][0] = "Connection";
    r10->headers[0][1] = "keep-alive";
    r10->headers[1][0] = "Connection";
    r10->headers[1][1] = "close";
    r10->nheaders = 2;
    assert_int_equal(fake_send(r10), 0);
    assert_int_equal(fake_wait(r10, FAKE_WAIT_MS), 200);
    assert_int_equal(r10->keep_alive, 0);

    fake_req *ok = fake_req_new(f, "GET", "/x");
    ok->headers[0][0] = "Connection";
    ok->headers[0][1] = "TE";
    ok->headers[1][0] = "Connection";
    ok->headers[1][1] = "keep-alive";
    ok->nheaders = 2;
    assert_int_equal(fake_send(ok), 0);
    assert_int_equal(fake_wait(ok, FAKE_WAIT_MS), 200);
    assert_int_equal(ok->keep_alive, 1);
    fake_finish(f);
}

static void expect_rejected_table(fake *f, const char *what)
{
    srv_server *srv = srv_server_new(&f->engine, NULL);
    if (srv == NULL) {
        fake_finish(f); /* refusing the table at new is fine too */
        return;
    }
    f->srv = srv;
    int rc = srv_server_start(srv);
    if (rc >= 0)
        fail_msg("srv_server_start accepted an engine table with %s", what);
    if (f->start_calls != 0)
        fail_msg("the core called start on an engine table with %s", what);
    assert_string_not_equal(srv_server_last_error(srv), "");
    fake_finish(f);
}

static void test_engine_wrong_version_rejected(void **state)
{
    fake *f = *state;
    f->engine.version = SRV_ENGINE_VERSION + 1;
    expect_rejected_table(f, "a newer version");
}

static void test_engine_version_zero_rejected(void **state)
{
    fake *f = *state;
    f->engine.version = 0;
    expect_rejected_table(f, "version 0");
}

static void test_engine_missing_slot_rejected(void **state)
{
    fake *f = *state;
    f->engine.respond = NULL;
    expect_rejected_table(f, "no respond slot");
}

static void test_engine_missing_name_rejected(void **state)
{
    fake *f = *state;
    f->engine.name = NULL;
    expect_rejected_table(f, "no name");
}

/* An engine without SRV_CAP_STREAM_BODY (the fake has no capability): a
 * streamed-body route is refused at registration with a message, never
 * served by buffering the body; the same route without the flag is fine. */
static void test_stream_body_route_refused_without_cap(void **state)
{
    fake *f = *state;
    srv_server *srv = srv_server_new(&f->engine, NULL);
    assert_non_null(srv);
    f->srv = srv;
    assert_int_equal(srv_engine_caps(&f->engine) & SRV_CAP_STREAM_BODY, 0);
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "PUT";
    o.path = "/upload";
    o.handler = fake_handler;
    o.flags = SRV_ROUTE_STREAM_BODY;
    assert_int_equal(srv_route_add(srv, &o), SRV_EENGINE);
    assert_non_null(strstr(srv_server_last_error(srv), "stream"));
    o.flags = 0;
    assert_int_equal(srv_route_add(srv, &o), 0);
    fake_finish(f);
}

/* srv_engine_caps adds the bits an engine finds at run time (lib_caps) to
 * its table's, and still hides the engine-only ones. */
static unsigned fake_lib_caps(void)
{
    return SRV_CAP_LIB_CHUNK_EXT_400 | SRV_ENGINE_CAP_TLS_GNUTLS;
}

static void test_engine_caps_add_lib_caps(void **state)
{
    fake *f = *state;
    f->engine.caps = SRV_ENGINE_CAP_STREAM;
    assert_int_equal(srv_engine_caps(&f->engine), SRV_CAP_STREAM);
    f->engine.lib_caps = fake_lib_caps;
    assert_int_equal(srv_engine_caps(&f->engine), SRV_CAP_STREAM | SRV_CAP_LIB_CHUNK_EXT_400);
    assert_int_equal(srv_engine_caps(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_routed_handler_runs_on_worker),
        T(test_unknown_path_is_404),
        T(test_header_rules),
        T(test_header_count_limit),
        T(test_access_log_escapes),
        T(test_wrong_method_is_405_with_allow),
        T(test_head_on_get_route),
        T(test_async_respond_from_another_thread),
        T(test_respond_after_client_gone_is_safe),
        T(test_respond_slot_may_release),
        T(test_silent_handler_gets_503_after_timeout),
        T(test_free_with_unanswered_request),
        T(test_stop_answers_outstanding_503),
        T(test_stop_lets_in_flight_finish),
        T(test_srv_after),
        T(test_stats_count),
        T(test_set_header_rules),
        T(test_respond_argument_errors),
        T(test_respond_copies_body),
        T(test_request_accessors),
        T(test_many_concurrent_requests),
        T(test_lifecycle_states),
        T(test_engine_start_failure),
        T(test_start_retry_after_engine_failure),
        T(test_connection_close_on_any_line),
        T(test_engine_wrong_version_rejected),
        T(test_engine_version_zero_rejected),
        T(test_engine_missing_slot_rejected),
        T(test_engine_missing_name_rejected),
        T(test_stream_body_route_refused_without_cap),
        T(test_engine_caps_add_lib_caps),
#undef T
    };
    return cmocka_run_group_tests_name("contract", tests, NULL, NULL);
}
