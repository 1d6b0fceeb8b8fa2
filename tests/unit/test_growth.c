/*
 * The request path's newer contract, driven through the fake engine:
 * non-blocking routes (SRV_ROUTE_NONBLOCKING) on the dispatching thread,
 * answered at once, later from another thread, from srv_after, after the
 * client left, by the timeout and by stop; the slow-handler counter; route
 * options; the elastic, bounded worker pool; the core's own answers without
 * application headers; and the ABI rule that the library reads and writes
 * only as much of srv_config / srv_stats as the caller's header knew.
 */
#include "fake_engine.h"
#include "srv_core.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static int route_nb(srv_server *srv, const char *path, srv_handler_fn fn, void *ctx)
{
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "GET";
    o.path = path;
    o.handler = fn;
    o.ctx = ctx;
    o.flags = SRV_ROUTE_NONBLOCKING;
    return srv_route_add(srv, &o);
}

/* ---- non-blocking routes --------------------------------------------- */

static void test_nonblocking_runs_on_dispatching_thread(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(route_nb(srv, "/nb", fake_handler, NULL), 0);
    assert_int_equal(srv_route(srv, "GET", "/w", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/nb");
    assert_int_equal(fake_send(r), 0);
    /* Ran and answered inside dispatch, on this (the "I/O") thread. */
    assert_int_equal(fake_responded(r), 1);
    assert_true(pthread_equal(r->handler_thread, pthread_self()));
    assert_true(pthread_equal(r->respond_thread, pthread_self()));
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);

    /* An ordinary route of the same server still goes to a worker. */
    fake_req *w = fake_req_new(f, "GET", "/w");
    assert_int_equal(fake_send(w), 0);
    assert_int_equal(fake_wait(w, FAKE_WAIT_MS), 200);
    assert_false(pthread_equal(w->handler_thread, pthread_self()));

    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.requests_in_flight == 0);
    assert_int_equal(st.slow_nonblocking, 0);
    fake_finish(f);
}

typedef struct later {
    srv_request *req;
    unsigned ms;
    int rc;
} later;

static void *respond_later(void *arg)
{
    later *l = arg;
    fake_sleep_ms(l->ms);
    l->rc = srv_respond(l->req, 202, "text/plain", "later", 5);
    return NULL;
}

static void test_nonblocking_answer_later_from_another_thread(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(route_nb(srv, "/nb", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/nb");
    r->action = FAKE_HOLD;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(r->handler_returned, 1);
    assert_int_equal(fake_responded(r), 0);
    srv_stats st;
    srv_server_stats(srv, &st);
    assert_int_equal(st.requests_in_flight, 1);

    later l = {r->req, 50, -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, respond_later, &l), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 202);
    pthread_join(t, NULL);
    assert_int_equal(l.rc, 0);
    assert_string_equal(r->body_out, "later");
    FAKE_EVENTUALLY(srv, st, st.requests_in_flight == 0);
    fake_finish(f);
}

static void test_nonblocking_srv_after(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(route_nb(srv, "/nb", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/nb");
    r->action = FAKE_AFTER;
    r->after_ms = 30;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(r->after_rc, 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_false(pthread_equal(r->respond_thread, pthread_self())); /* the timer thread */
    fake_finish(f);
}

static void test_nonblocking_client_gone(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(route_nb(srv, "/nb", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/nb");
    r->action = FAKE_HOLD;
    assert_int_equal(fake_send(r), 0);
    fake_release(r); /* the connection died before the answer */
    /* The late answer is safe: handed to the engine, which only releases. */
    later l = {r->req, 10, -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, respond_later, &l), 0);
    pthread_join(t, NULL);
    assert_int_equal(l.rc, 0);
    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.requests_in_flight == 0);
    fake_finish(f);
}

static void test_nonblocking_timeout(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.request_timeout_ms = 150;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(route_nb(srv, "/nb", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/nb");
    r->action = FAKE_HOLD;
    uint64_t t0 = fake_now_ms();
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait_respond(r, FAKE_WAIT_MS), 0);
    uint64_t took = fake_now_ms() - t0;
    assert_int_equal(r->status_out, 503);
    assert_true(took >= 140 && took < 3000);
    fake_release(r);
    assert_int_equal(srv_respond(r->req, 200, NULL, NULL, 0), SRV_ETIMEDOUT);
    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.timeouts == 1 && st.dropped == 1);
    fake_finish(f);
}

static void test_nonblocking_stop_answers_503(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(route_nb(srv, "/nb", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/nb");
    r->action = FAKE_HOLD;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(srv_server_stop(srv, 50), 0);
    assert_int_equal(fake_responded(r), 1);
    assert_int_equal(r->status_out, 503);
    assert_int_equal(r->keep_alive, 0);
    /* A request dispatched after the final phase is answered at once. */
    fake_req *late = fake_req_new(f, "GET", "/nb");
    assert_int_equal(fake_send(late), 0);
    assert_int_equal(fake_wait(late, FAKE_WAIT_MS), 503);
    assert_int_equal(late->handler_calls, 0);
    fake_finish(f); /* frees the request the application never answered */
}

/* Holds its "I/O thread" far past nonblocking_warn_ms. */
static void sleepy_handler(srv_request *req, void *ctx)
{
    (void)ctx;
    fake_sleep_ms(60);
    srv_respond(req, 200, NULL, NULL, 0);
}

static void test_slow_nonblocking_is_counted(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.nonblocking_warn_ms = 20;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(route_nb(srv, "/nb", sleepy_handler, NULL), 0);
    fake_start(f, NULL);
    for (int i = 0; i < 2; i++) {
        fake_req *r = fake_req_new(f, "GET", "/nb");
        assert_int_equal(fake_send(r), 0);
        assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    }
    srv_stats st;
    srv_server_stats(srv, &st);
    assert_int_equal(st.slow_nonblocking, 2);
    fake_finish(f);
}

/* ---- route options ------------------------------------------------------ */

static void test_route_add_validates(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    srv_route_opts o;
    srv_route_opts_init(&o);
    assert_int_equal(o.size, sizeof o);
    assert_int_equal(srv_route_add(srv, NULL), SRV_EINVAL);
    assert_int_equal(srv_route_add(srv, &o), SRV_EINVAL); /* no method/path/handler */
    o.method = "GET";
    o.path = "/x";
    o.handler = fake_handler;
    o.flags = 1u << 7; /* unknown bit */
    assert_int_equal(srv_route_add(srv, &o), SRV_EINVAL);
    o.flags = SRV_ROUTE_NONBLOCKING;
    o.size = 0; /* not from srv_route_opts_init */
    assert_int_equal(srv_route_add(srv, &o), SRV_EINVAL);
    o.size = sizeof o;
    assert_int_equal(srv_route_add(srv, &o), 0);
    assert_int_equal(srv_route_add(srv, &o), SRV_EEXIST);
    assert_int_equal(srv_route(srv, "GET", "/x", fake_handler, NULL), SRV_EEXIST);
    fake_start(f, NULL);
    o.path = "/y";
    assert_int_equal(srv_route_add(srv, &o), SRV_ESTATE);
    fake_finish(f);
}

/* ---- ABI growth ----------------------------------------------------------- */

/* A caller built against an older srv.h whose srv_config ended at
 * server_name: the library must neither write past that nor read it. */
static void test_config_from_older_header(void **state)
{
    fake *f = *state;
    size_t old_size = offsetof(srv_config, worker_threads_min);
    srv_config c;
    memset(&c, 0xAB, sizeof c);
    srv_config_init_sized(&c, old_size);
    assert_int_equal(c.size, old_size);
    assert_int_equal(c.port, 8080);
    const unsigned char *tail = (const unsigned char *)&c + old_size;
    for (size_t i = 0; i < sizeof c - old_size; i++)
        assert_int_equal(tail[i], 0xAB); /* untouched */
    c.host = "127.0.0.1";
    c.port = 0;
    c.worker_threads = 3;

    srv_server *srv = srv_server_new(&f->engine, &c);
    assert_non_null(srv);
    const srv_config *in = srv__server_config(srv);
    assert_int_equal(in->worker_threads, 3);
    /* Fields the older header did not have: the defaults, not 0xAB. */
    assert_int_equal(in->max_queued, 10000);
    assert_int_equal(in->worker_idle_timeout_ms, 60000);
    assert_int_equal(in->nonblocking_warn_ms, 200);
    assert_int_equal(srv_server_start(srv), 0);
    assert_int_equal(srv__server_config(srv)->worker_threads_min, 3); /* clamped */
    srv_server_free(srv);

    /* A struct srv_config_init never saw is refused, not guessed at. */
    srv_config raw;
    memset(&raw, 0, sizeof raw);
    assert_null(srv_server_new(&f->engine, &raw));
    raw.size = (size_t)1 << 40;
    assert_null(srv_server_new(&f->engine, &raw));
    /* NULL still means every default. */
    srv = srv_server_new(&f->engine, NULL);
    assert_non_null(srv);
    assert_int_equal(srv__server_config(srv)->worker_threads, 200);
    srv_server_free(srv);
}

static void test_stats_into_older_struct(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    unsigned char buf[sizeof(srv_stats) + 16];
    memset(buf, 0xCD, sizeof buf);
    size_t old_size = offsetof(srv_stats, workers);
    srv_server_stats_sized(srv, (srv_stats *)(void *)buf, old_size);
    for (size_t i = old_size; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xCD);
    /* A newer, larger struct gets zeros past what this libsrv knows. */
    srv_server_stats_sized(srv, (srv_stats *)(void *)buf, sizeof buf);
    for (size_t i = sizeof(srv_stats); i < sizeof buf; i++)
        assert_int_equal(buf[i], 0);
    fake_finish(f);
}

/* ---- the worker pool -------------------------------------------------------- */

static void test_pool_grows_and_shrinks(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.worker_threads = 8;
    cfg.worker_threads_min = 1;
    cfg.worker_idle_timeout_ms = 100;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/b", fake_handler, NULL), 0);
    fake_start(f, NULL);
    srv_stats st;
    srv_server_stats(srv, &st);
    assert_int_equal(st.workers, 1);

    fake_req *rs[6];
    for (int i = 0; i < 6; i++) {
        rs[i] = fake_req_new(f, "GET", "/b");
        rs[i]->action = FAKE_BLOCK;
        assert_int_equal(fake_send(rs[i]), 0);
    }
    /* Six blocking handlers at once: the pool grew to run them all. */
    for (int i = 0; i < 6; i++)
        assert_int_equal(fake_wait_handler_started(rs[i], FAKE_WAIT_MS), 0);
    srv_server_stats(srv, &st);
    assert_true(st.workers >= 6 && st.workers <= 8);
    assert_int_equal(st.workers_busy, 6);
    fake_open_gate(f);
    for (int i = 0; i < 6; i++)
        assert_int_equal(fake_wait(rs[i], FAKE_WAIT_MS), 200);
    /* Idle past the timeout: back to the minimum. */
    FAKE_EVENTUALLY(srv, st, st.workers == 1);
    fake_finish(f);
}

static void test_pool_queue_is_bounded(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.worker_threads = 1;
    cfg.max_queued = 2;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/b", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *busy = fake_req_new(f, "GET", "/b");
    busy->action = FAKE_BLOCK;
    assert_int_equal(fake_send(busy), 0);
    assert_int_equal(fake_wait_handler_started(busy, FAKE_WAIT_MS), 0);
    fake_req *q1 = fake_req_new(f, "GET", "/b");
    fake_req *q2 = fake_req_new(f, "GET", "/b");
    assert_int_equal(fake_send(q1), 0);
    assert_int_equal(fake_send(q2), 0);
    /* The third waiting request is over the bound: 503 at once. */
    fake_req *over = fake_req_new(f, "GET", "/b");
    assert_int_equal(fake_send(over), 0);
    assert_int_equal(fake_wait(over, 100), 503);
    assert_int_equal(over->handler_calls, 0);
    srv_stats st;
    srv_server_stats(srv, &st);
    assert_int_equal(st.rejected, 1);
    assert_int_equal(st.queued, 2);

    fake_open_gate(f);
    assert_int_equal(fake_wait(busy, FAKE_WAIT_MS), 200);
    assert_int_equal(fake_wait(q1, FAKE_WAIT_MS), 200);
    assert_int_equal(fake_wait(q2, FAKE_WAIT_MS), 200);
    fake_finish(f);
}

/* A job left to the busy workers (the pool wakes nobody while the queue
 * moves) still gets its own worker when they turn out to be blocked and
 * nothing else is submitted: the pool's watcher notices the stall. */
static void test_pool_job_behind_blocked_worker(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.worker_threads = 4;
    cfg.worker_threads_min = 1;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/b", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *first = fake_req_new(f, "GET", "/b");
    first->action = FAKE_BLOCK;
    assert_int_equal(fake_send(first), 0);
    assert_int_equal(fake_wait_handler_started(first, FAKE_WAIT_MS), 0);
    fake_req *second = fake_req_new(f, "GET", "/b");
    second->action = FAKE_BLOCK;
    assert_int_equal(fake_send(second), 0);
    /* A few milliseconds nominally; generous for a loaded machine. */
    assert_int_equal(fake_wait_handler_started(second, 1000), 0);
    srv_stats st;
    srv_server_stats(srv, &st);
    assert_int_equal(st.workers_busy, 2);
    fake_open_gate(f);
    assert_int_equal(fake_wait(first, FAKE_WAIT_MS), 200);
    assert_int_equal(fake_wait(second, FAKE_WAIT_MS), 200);
    fake_finish(f);
}

/* ---- the core's own answers ------------------------------------------------- */

static void test_core_answer_drops_application_headers(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.request_timeout_ms = 100;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/h", fake_handler, NULL), 0);
    fake_start(f, NULL);

    fake_req *r = fake_req_new(f, "GET", "/h");
    r->action = FAKE_HOLD;
    r->set_headers[0][0] = "Cache-Control";
    r->set_headers[0][1] = "max-age=86400";
    r->set_headers[1][0] = "Location";
    r->set_headers[1][1] = "/elsewhere";
    r->nset_headers = 2;
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 503);
    assert_int_equal(r->set_header_rc[0], 0);
    assert_null(fake_resp_header(r, "Cache-Control"));
    assert_null(fake_resp_header(r, "Location"));
    assert_int_equal(fake_head_header(r, "Cache-Control", NULL, 0), 0);
    assert_non_null(fake_resp_header(r, "Content-Type"));
    fake_finish(f);
}

/* ---- the slot layer ------------------------------------------------------------ */

static int fail_start(const char *slot, void *arg)
{
    int *calls = arg;
    (*calls)++;
    return strcmp(slot, "start") == 0 ? SRV_EBIND : 0;
}

static void test_engine_fault_injection(void **state)
{
    fake *f = *state;
    int calls = 0;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/x", fake_handler, NULL), 0);
    srv__engine_inject_fault(srv, fail_start, &calls);
    assert_int_equal(srv_server_start(srv), SRV_EBIND);
    assert_int_equal(calls, 1);
    assert_int_equal(f->start_calls, 0); /* the engine's slot never ran */
    assert_non_null(strstr(srv_server_last_error(srv), "injected"));
    /* Nothing runs after a failed start; a later start succeeds. */
    srv__engine_inject_fault(srv, NULL, NULL);
    assert_int_equal(srv_server_start(srv), 0);
    fake_req *r = fake_req_new(f, "GET", "/x");
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    fake_finish(f);
}

/* A caller built against srv.h 0.2.0 (its srv_config ends before the TLS
 * fields): its server is cleartext with the TLS defaults, and 0xAB past
 * its struct is never read as a certificate name. A TLS configuration on
 * an engine without SRV_CAP_TLS is refused at start, naming the engine. */
static void test_config_tls_fields_from_older_header(void **state)
{
    fake *f = *state;
    size_t old_size = offsetof(srv_config, tls_cert_file);
    srv_config c;
    memset(&c, 0xAB, sizeof c);
    srv_config_init_sized(&c, old_size);
    const unsigned char *tail = (const unsigned char *)&c + old_size;
    for (size_t i = 0; i < sizeof c - old_size; i++)
        assert_int_equal(tail[i], 0xAB); /* untouched */
    c.host = "127.0.0.1";
    c.port = 0;
    srv_server *srv = srv_server_new(&f->engine, &c);
    assert_non_null(srv);
    const srv_config *in = srv__server_config(srv);
    assert_null(in->tls_cert_file);
    assert_null(in->tls_key_pem);
    assert_null(in->tls_client_ca_file);
    assert_int_equal(in->tls_min_version, SRV_TLS_1_2);
    assert_int_equal(srv__tls_enabled(srv), 0);
    assert_int_equal(srv_server_start(srv), 0);
    assert_int_equal(srv_server_reload_tls(srv), SRV_EINVAL); /* no TLS to reload */
    srv_server_free(srv);

    srv_config t;
    srv_config_init(&t);
    t.host = "127.0.0.1";
    t.port = 0;
    t.tls_cert_file = "/nonexistent/cert.pem";
    t.tls_key_file = "/nonexistent/key.pem";
    srv = srv_server_new(&f->engine, &t);
    assert_non_null(srv);
    assert_int_equal(srv_server_start(srv), SRV_ETLS);
    assert_non_null(strstr(srv_server_last_error(srv), "does not serve TLS"));
    assert_string_equal(srv_err_name(SRV_ETLS), "ETLS");
    srv_server_free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_nonblocking_runs_on_dispatching_thread),
        T(test_nonblocking_answer_later_from_another_thread),
        T(test_nonblocking_srv_after),
        T(test_nonblocking_client_gone),
        T(test_nonblocking_timeout),
        T(test_nonblocking_stop_answers_503),
        T(test_slow_nonblocking_is_counted),
        T(test_route_add_validates),
        T(test_config_from_older_header),
        T(test_config_tls_fields_from_older_header),
        T(test_stats_into_older_struct),
        T(test_pool_grows_and_shrinks),
        T(test_pool_queue_is_bounded),
        T(test_pool_job_behind_blocked_worker),
        T(test_core_answer_drops_application_headers),
        T(test_engine_fault_injection),
#undef T
    };
    return cmocka_run_group_tests_name("growth", tests, NULL, NULL);
}
