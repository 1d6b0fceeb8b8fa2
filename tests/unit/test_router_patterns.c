/*
 * Path patterns, filters, response hooks and the CORS filter, through the
 * fake engine (whose test thread plays the engine's I/O thread): precedence
 * whatever the registration order, backtracking, conflicts, decoding (%2F
 * inside a parameter), empty wildcards, trailing slashes, 405/Allow and
 * the automatic OPTIONS over patterns, hostile paths (400), 1000 routes,
 * where filters run and how they answer, hook headers on which answers.
 */
#include "fake_engine.h"
#include "srv_core.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

/* Answers "<pattern>|name=value|..." so a test sees which route matched
 * and what it captured. */
static void h_params(srv_request *req, void *ctx)
{
    (void)ctx;
    enum { CAP = 128 * 1024 };
    char *body = malloc(CAP);
    if (body == NULL) {
        srv_respond(req, 500, NULL, NULL, 0);
        return;
    }
    size_t o = (size_t)snprintf(body, CAP, "%s", srv_request_route(req));
    for (size_t i = 0; i < srv_request_param_count(req); i++) {
        /* No cmocka assertion off the test thread: a wrong answer instead. */
        const char *n = "?", *v = "?";
        if (srv_request_param_at(req, i, &n, &v) != 0 || srv_request_param(req, n) != v)
            n = "BROKEN";
        o += (size_t)snprintf(body + o, CAP - o, "|%s=%s", n, v);
        if (o >= CAP)
            o = CAP - 1;
    }
    if (srv_request_param_at(req, srv_request_param_count(req), NULL, NULL) != SRV_EINVAL ||
        srv_request_param(req, "no-such-name") != NULL)
        o = (size_t)snprintf(body, CAP, "BROKEN accessors");
    srv_respond(req, 200, "text/plain", body, o);
    free(body);
}

static int add(srv_server *srv, const char *method, const char *path)
{
    return srv_route(srv, method, path, h_params, NULL);
}

/* method target -> status, and for a 200 the body h_params wrote. */
static fake_req *want(fake *f, const char *method, const char *target, int status,
                      const char *body)
{
    fake_req *r = fake_req_new(f, method, target);
    fake_send(r);
    int got = fake_wait(r, FAKE_WAIT_MS);
    if (got != status)
        fail_msg("%s %s: status %d, want %d (body %.*s)", method, target, got, status,
                 (int)r->body_out_len, r->body_out ? r->body_out : "");
    if (body != NULL &&
        (r->body_out_len != strlen(body) || memcmp(r->body_out, body, r->body_out_len) != 0))
        fail_msg("%s %s: body \"%.*s\", want \"%s\"", method, target, (int)r->body_out_len,
                 r->body_out ? r->body_out : "", body);
    return r;
}

/* ---- precedence -------------------------------------------------------- */

static const char *const precedence_routes[][2] = {
    {"GET", "/files/{*rest}"}, {"GET", "/files/{name}"}, {"GET", "/files/readme"},
    {"GET", "/u/{id}/posts"},  {"GET", "/u/me/{tab}"},   {"GET", "/a/{x}/c"},
    {"GET", "/a/b/d"},         {"GET", "/users/{id}"},   {"DELETE", "/users/me"},
    {"GET", "/{*all}"},
};
#define NPREC (sizeof precedence_routes / sizeof precedence_routes[0])

static void check_precedence(fake *f, int reverse)
{
    srv_server *srv = fake_server(f, NULL);
    for (size_t i = 0; i < NPREC; i++) {
        size_t k = reverse ? NPREC - 1 - i : i;
        assert_int_equal(add(srv, precedence_routes[k][0], precedence_routes[k][1]), 0);
    }
    fake_start(f, NULL);
    want(f, "GET", "/files/readme", 200, "/files/readme");
    want(f, "GET", "/files/x", 200, "/files/{name}|name=x");
    want(f, "GET", "/files/x/y", 200, "/files/{*rest}|rest=x/y");
    want(f, "GET", "/files/", 200, "/files/{*rest}|rest=");
    /* Left to right: the literal "me" decides before "posts" is seen. */
    want(f, "GET", "/u/me/posts", 200, "/u/me/{tab}|tab=posts");
    want(f, "GET", "/u/42/posts", 200, "/u/{id}/posts|id=42");
    /* Backtracking: the literal b leads nowhere for c, {x} does. */
    want(f, "GET", "/a/b/c", 200, "/a/{x}/c|x=b");
    want(f, "GET", "/a/b/d", 200, "/a/b/d");
    /* Method-aware: the literal pattern routes only DELETE. */
    want(f, "GET", "/users/me", 200, "/users/{id}|id=me");
    want(f, "DELETE", "/users/me", 200, "/users/me");
    want(f, "HEAD", "/users/me", 200, NULL);
    fake_req *r = want(f, "DELETE", "/users/42", 405, NULL);
    assert_string_equal(fake_resp_header(r, "Allow"), "GET, HEAD, OPTIONS");
    r = want(f, "POST", "/users/me", 405, NULL);
    assert_string_equal(fake_resp_header(r, "Allow"), reverse ? "DELETE, GET, HEAD, OPTIONS"
                                                              : "DELETE, GET, HEAD, OPTIONS");
    /* The catch-all is last, at every depth. */
    want(f, "GET", "/", 200, "/{*all}|all=");
    want(f, "GET", "/other/x", 200, "/{*all}|all=other/x");
    want(f, "GET", "/u/me", 200, "/{*all}|all=u/me");
    fake_finish(f);
}

static void test_precedence(void **state)
{
    check_precedence(*state, 0);
}

static void test_precedence_reversed(void **state)
{
    check_precedence(*state, 1);
}

/* ---- registration ------------------------------------------------------- */

static void test_conflicts_and_bad_patterns(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(add(srv, "GET", "/u/{id}"), 0);
    assert_int_equal(add(srv, "GET", "/u/{name}"), SRV_EEXIST); /* same shape */
    assert_int_equal(add(srv, "PUT", "/u/{name}"), 0);          /* another method */
    assert_int_equal(add(srv, "GET", "/u/{id}/x"), 0);
    assert_int_equal(add(srv, "GET", "/u/{*rest}"), 0);         /* a wildcard is another shape */
    assert_int_equal(add(srv, "GET", "/u/{*tail}"), SRV_EEXIST);
    assert_int_equal(add(srv, "GET", "/u/me"), 0);
    assert_int_equal(add(srv, "GET", "/u/me"), SRV_EEXIST);
    assert_int_equal(add(srv, "GET", "/u/me/"), 0); /* trailing slash: another path */
    static const char *const bad[] = {
        "/a/{}",     "/a/{*}",     "/a/{*x}/b", "/a/x{id}",  "/a/{id", "/a/id}",
        "/a/{id}/{id}", "/a/{i-d}", "/a/../b",  "/./a",      "/a/{id}x", "/{*a}/{b}",
        "/a/{x}/{*x}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (add(srv, "GET", bad[i]) != SRV_EINVAL)
            fail_msg("pattern %s was not refused with SRV_EINVAL", bad[i]);
    fake_start(f, NULL);
    want(f, "GET", "/u/7", 200, "/u/{id}|id=7");
    want(f, "PUT", "/u/7", 200, "/u/{name}|name=7");
    want(f, "GET", "/u/7/x", 200, "/u/{id}/x|id=7");
    want(f, "GET", "/u/7/y", 200, "/u/{*rest}|rest=7/y");
    want(f, "GET", "/u/me", 200, "/u/me");
    want(f, "GET", "/u/me/", 200, "/u/me/");
    fake_finish(f);
}

/* ---- decoding and slashes --------------------------------------------- */

static void test_decoding_and_slashes(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(add(srv, "GET", "/users/{id}"), 0);
    assert_int_equal(add(srv, "GET", "/static/{*path}"), 0);
    assert_int_equal(add(srv, "GET", "/caf\xC3\xA9/{x}"), 0);
    assert_int_equal(add(srv, "GET", "/two/{a}/{b}"), 0);
    fake_start(f, NULL);
    want(f, "GET", "/users/a%2Fb", 200, "/users/{id}|id=a/b"); /* %2F is data */
    want(f, "GET", "/users/a%2fb%2F", 200, "/users/{id}|id=a/b/");
    want(f, "GET", "/users/caf%C3%A9", 200, "/users/{id}|id=caf\xC3\xA9");
    want(f, "GET", "/users/a+b%20c", 200, "/users/{id}|id=a+b c");
    want(f, "GET", "/users/%41?q=%42", 200, "/users/{id}|id=A");
    want(f, "GET", "/users/...", 200, "/users/{id}|id=..."); /* not a dot segment */
    want(f, "GET", "/users/%2e%2e%2e", 200, "/users/{id}|id=...");
    want(f, "GET", "/users/a%2F..%2Fb", 200, "/users/{id}|id=a/../b"); /* one segment */
    want(f, "GET", "/caf%c3%a9/1", 200, "/caf\xC3\xA9/{x}|x=1");
    want(f, "GET", "/two/x/y", 200, "/two/{a}/{b}|a=x|b=y");
    want(f, "GET", "http://example.com/users/9?x", 200, "/users/{id}|id=9");
    /* Trailing slashes and empty segments: a parameter is never empty. */
    want(f, "GET", "/users/", 404, NULL);
    want(f, "GET", "/users/42/", 404, NULL);
    want(f, "GET", "/users", 404, NULL);
    want(f, "GET", "/two//y", 404, NULL);
    want(f, "GET", "/%75sers/1", 200, "/users/{id}|id=1"); /* literals match decoded */
    want(f, "GET", "/users%2F1", 404, NULL);                /* ...but %2F never splits */
    /* The wildcard: the rest, decoded, possibly empty; not the bare prefix. */
    want(f, "GET", "/static/", 200, "/static/{*path}|path=");
    want(f, "GET", "/static", 404, NULL);
    want(f, "GET", "/static/css/a.css", 200, "/static/{*path}|path=css/a.css");
    want(f, "GET", "/static/a%20b/c%2Fd", 200, "/static/{*path}|path=a b/c/d");
    want(f, "GET", "/static/dir/", 200, "/static/{*path}|path=dir/");
    want(f, "GET", "/static/a//b", 200, "/static/{*path}|path=a//b");
    fake_finish(f);
}

static void test_hostile_paths(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.max_uri_bytes = 64 * 1024;
    cfg.max_header_bytes = 96 * 1024;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(add(srv, "GET", "/users/{id}"), 0);
    assert_int_equal(add(srv, "GET", "/static/{*path}"), 0);
    assert_int_equal(add(srv, "GET", "/a/b"), 0);
    fake_start(f, &cfg);
    static const char *const refused[] = {
        "/users/%zz", "/users/%4",     "/users/%",      "/users/%g1",     "/users/%00",
        "/a/../b",    "/a/./b",        "/a/%2e%2E/b",   "/a/.%2e/b",      "/a/%2e/b",
        "/..",        "/static/..",    "/static/..%2Fetc", "/static/a/..%2f..%2fetc",
        "/static/%2e%2e%2fx", "/static/x/.", "/static/.%2F", "/nothing/%zz",
        "/nothing/..", "http://h/a/../b",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        fake_req *r = want(f, "GET", refused[i], 400, NULL);
        assert_int_equal(r->handler_calls, 0);
        assert_int_equal(r->keep_alive, 0); /* bad input closes */
    }
    /* Very long paths and many segments: answered, in time. */
    size_t n = 30000;
    char *deep = malloc(2 * n + 16);
    assert_non_null(deep);
    char *p = deep;
    p += sprintf(p, "/static");
    for (size_t i = 0; i < n / 2; i++)
        p += sprintf(p, "/a");
    fake_req *r = want(f, "GET", deep, 200, NULL);
    assert_int_equal(r->body_out_len, strlen("/static/{*path}|path=") + n - 1);
    p = deep;
    for (size_t i = 0; i < n / 2; i++)
        p += sprintf(p, "/a");
    want(f, "GET", deep, 404, NULL);
    p = deep;
    p += sprintf(p, "/users/");
    memset(p, 'x', n);
    p[n] = '\0';
    r = want(f, "GET", deep, 200, NULL);
    assert_int_equal(r->body_out_len, strlen("/users/{id}|id=") + n);
    free(deep);
    fake_finish(f);
}

/* ---- 405, Allow and OPTIONS over patterns ------------------------------ */

static void test_allow_and_options(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(add(srv, "GET", "/items/{id}"), 0);
    assert_int_equal(add(srv, "PUT", "/items/{id}"), 0);
    assert_int_equal(add(srv, "DELETE", "/items/special"), 0);
    assert_int_equal(add(srv, "OPTIONS", "/own"), 0);
    assert_int_equal(add(srv, "POST", "/own"), 0);
    assert_int_equal(add(srv, "HEAD", "/h"), 0);
    assert_int_equal(add(srv, "GET", "/h"), 0);
    fake_start(f, NULL);
    fake_req *r = want(f, "POST", "/items/1", 405, "405 Method Not Allowed\n");
    assert_string_equal(fake_resp_header(r, "Allow"), "GET, HEAD, PUT, OPTIONS");
    r = want(f, "POST", "/items/special", 405, NULL);
    assert_string_equal(fake_resp_header(r, "Allow"), "DELETE, GET, HEAD, PUT, OPTIONS");
    assert_int_equal(fake_head_header(r, "Allow", NULL, 0), 1);
    /* OPTIONS: automatic (204, Allow, no body) unless routed. */
    r = want(f, "OPTIONS", "/items/1", 204, "");
    assert_string_equal(fake_resp_header(r, "Allow"), "GET, HEAD, PUT, OPTIONS");
    assert_null(fake_resp_header(r, "Content-Type"));
    assert_int_equal(r->handler_calls, 0);
    want(f, "OPTIONS", "/own", 200, "/own");
    r = want(f, "PATCH", "/own", 405, NULL);
    assert_string_equal(fake_resp_header(r, "Allow"), "OPTIONS, POST");
    r = want(f, "PUT", "/h", 405, NULL);
    assert_string_equal(fake_resp_header(r, "Allow"), "HEAD, GET, OPTIONS");
    want(f, "OPTIONS", "/nothing", 404, NULL);
    want(f, "OPTIONS", "*", 404, NULL);
    fake_finish(f);
}

/* ---- 1000 routes ---------------------------------------------------------- */

/* Route i's pattern and a request path that only it matches. */
static void route_i(size_t i, char *pattern, char *path, char *body)
{
    switch (i % 4) {
    case 0:
        sprintf(pattern, "/r%zu", i);
        sprintf(path, "/r%zu", i);
        sprintf(body, "%s", pattern);
        break;
    case 1:
        sprintf(pattern, "/r%zu/{id}", i);
        sprintf(path, "/r%zu/x%zu", i, i);
        sprintf(body, "%s|id=x%zu", pattern, i);
        break;
    case 2:
        sprintf(pattern, "/g%zu/m%zu/{*rest}", i / 10, i);
        sprintf(path, "/g%zu/m%zu/a/b", i / 10, i);
        sprintf(body, "%s|rest=a/b", pattern);
        break;
    default:
        sprintf(pattern, "/api/v1/{tenant}/r%zu/{id}", i);
        sprintf(path, "/api/v1/t/r%zu/%zu", i, i);
        sprintf(body, "%s|tenant=t|id=%zu", pattern, i);
        break;
    }
}

static void test_thousand_routes(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    char pattern[128], path[128], body[256];
    /* Registered in a scrambled order (a multiplier coprime to 1000). */
    for (size_t k = 0; k < 1000; k++) {
        route_i(k * 7 % 1000, pattern, path, body);
        assert_int_equal(srv_route(srv, "GET", pattern, h_params, (void *)(uintptr_t)(k * 7 % 1000)), 0);
    }
    fake_start(f, NULL);
    assert_int_equal(srv__router_count(&srv->router), 1000);
    /* Every route by the router directly (the fake engine holds 64
     * requests), then a sample through dispatch. */
    for (size_t i = 0; i < 1000; i++) {
        route_i(i, pattern, path, body);
        srv_request *req = srv__request_new(srv, NULL, 0);
        assert_non_null(req);
        assert_int_equal(srv__request_set_method(req, "GET", 3), 0);
        assert_int_equal(srv__request_set_target(req, path, strlen(path)), 0);
        srv__router_lookup(req);
        if (req->route == NULL || strcmp(req->route->path, pattern) != 0)
            fail_msg("%s: routed to %s, want %s", path, req->route ? req->route->path : "none",
                     pattern);
        assert_ptr_equal(req->route->ctx, (void *)(uintptr_t)i);
        /* The index view (metrics keep their counters by it). */
        const char *m, *p;
        size_t idx = srv__router_index(&srv->router, req->route);
        assert_true(idx < srv__router_count(&srv->router));
        srv__router_at(&srv->router, idx, &m, &p);
        assert_string_equal(m, "GET");
        assert_string_equal(p, pattern);
        srv__request_unref(req);
    }
    for (size_t i = 0; i < 1000; i += 97) {
        route_i(i, pattern, path, body);
        want(f, "GET", path, 200, body);
    }
    want(f, "GET", "/r1000", 404, NULL);
    want(f, "GET", "/api/v1/t/r3/", 404, NULL);
    want(f, "POST", "/r4", 405, NULL);
    fake_finish(f);
}

/* ---- filters -------------------------------------------------------------- */

#define MAX_LOG 16
typedef struct flog {
    pthread_mutex_t mu;
    char order[MAX_LOG];
    pthread_t thread[MAX_LOG];
    size_t n;
} flog;
static flog g_log = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void log_step(char c)
{
    pthread_mutex_lock(&g_log.mu);
    if (g_log.n < MAX_LOG) {
        g_log.order[g_log.n] = c;
        g_log.thread[g_log.n++] = pthread_self();
    }
    pthread_mutex_unlock(&g_log.mu);
}

static void log_reset(void)
{
    pthread_mutex_lock(&g_log.mu);
    memset(g_log.order, 0, sizeof g_log.order);
    g_log.n = 0;
    pthread_mutex_unlock(&g_log.mu);
}

/* A filter named by its ctx (a letter): logs itself, sets X-Filter-<c>. */
static int f_pass(srv_request *req, void *ctx)
{
    char c = *(const char *)ctx, name[16];
    log_step(c);
    snprintf(name, sizeof name, "X-Filter-%c", c);
    srv_set_header(req, name, "1"); /* the test checks the header arrived */
    return SRV_FILTER_NEXT;
}

/* 401 unless "Authorization: Bearer ok". */
static int f_auth(srv_request *req, void *ctx)
{
    (void)ctx;
    log_step('A');
    const char *a = srv_request_header(req, "Authorization");
    if (a != NULL && strcmp(a, "Bearer ok") == 0)
        return SRV_FILTER_NEXT;
    srv_set_header(req, "WWW-Authenticate", "Bearer");
    srv_respond(req, 401, "text/plain", "no\n", 3);
    return SRV_FILTER_DONE;
}

static void h_logged(srv_request *req, void *ctx)
{
    (void)ctx;
    log_step('H');
    srv_respond(req, 200, "text/plain", "handled", 7);
}

static void hook_headers(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_set_header(req, "X-Content-Type-Options", "nosniff");
}

static char c_a = 'a', c_b = 'b', c_c = 'c';

static int add_filter(srv_server *srv, srv_filter_fn fn, void *ctx, unsigned flags)
{
    srv_filter_opts o;
    srv_filter_opts_init(&o);
    o.filter = fn;
    o.ctx = ctx;
    o.flags = flags;
    return srv_filter_add(srv, &o);
}

static void test_filter_threads(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    /* a: non-blocking, b: blocking, c: non-blocking after a blocking one. */
    assert_int_equal(add_filter(srv, f_pass, &c_a, SRV_FILTER_NONBLOCKING), 0);
    assert_int_equal(add_filter(srv, f_pass, &c_b, 0), 0);
    assert_int_equal(add_filter(srv, f_pass, &c_c, SRV_FILTER_NONBLOCKING), 0);
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "GET";
    o.path = "/nb";
    o.handler = h_logged;
    o.flags = SRV_ROUTE_NONBLOCKING;
    assert_int_equal(srv_route_add(srv, &o), 0);
    fake_start(f, NULL);

    log_reset();
    fake_req *r = want(f, "GET", "/nb", 200, "handled");
    assert_int_equal(g_log.n, 4);
    assert_memory_equal(g_log.order, "abcH", 4);
    assert_true(pthread_equal(g_log.thread[0], pthread_self())); /* the I/O thread */
    assert_false(pthread_equal(g_log.thread[1], pthread_self())); /* moved to a worker */
    assert_true(pthread_equal(g_log.thread[2], g_log.thread[1]));  /* ...and stays there */
    assert_true(pthread_equal(g_log.thread[3], g_log.thread[1]));
    assert_string_equal(fake_resp_header(r, "X-Filter-a"), "1");
    assert_string_equal(fake_resp_header(r, "X-Filter-c"), "1");

    /* No route: the filters run, then the core's 404 carries their headers. */
    log_reset();
    r = want(f, "GET", "/none", 404, "404 Not Found\n");
    assert_memory_equal(g_log.order, "abc", 3);
    assert_string_equal(fake_resp_header(r, "X-Filter-b"), "1");
    fake_finish(f);
}

static void test_filters_nonblocking_stay_inline(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(add_filter(srv, f_pass, &c_a, SRV_FILTER_NONBLOCKING), 0);
    assert_int_equal(add_filter(srv, f_auth, NULL, SRV_FILTER_NONBLOCKING), 0);
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "GET";
    o.path = "/nb";
    o.handler = h_logged;
    o.flags = SRV_ROUTE_NONBLOCKING;
    assert_int_equal(srv_route_add(srv, &o), 0);
    assert_int_equal(srv_route(srv, "GET", "/w", h_logged, NULL), 0);
    fake_start(f, NULL);

    log_reset();
    fake_req *r = fake_req_new(f, "GET", "/nb");
    r->headers[r->nheaders][0] = "Authorization";
    r->headers[r->nheaders++][1] = "Bearer ok";
    fake_send(r);
    assert_int_equal(fake_responded(r), 1); /* answered inside dispatch */
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_memory_equal(g_log.order, "aAH", 3);
    for (size_t i = 0; i < 3; i++)
        assert_true(pthread_equal(g_log.thread[i], pthread_self()));

    /* The early answer: 401 on the I/O thread, the handler never runs,
     * the headers set before it go with it. */
    log_reset();
    r = fake_req_new(f, "GET", "/w");
    fake_send(r);
    assert_int_equal(fake_responded(r), 1);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 401);
    assert_memory_equal(g_log.order, "aA", 2);
    assert_int_equal(g_log.n, 2);
    assert_string_equal(fake_resp_header(r, "WWW-Authenticate"), "Bearer");
    assert_string_equal(fake_resp_header(r, "X-Filter-a"), "1");

    /* Let through to a worker route. */
    log_reset();
    r = fake_req_new(f, "GET", "/w");
    r->headers[r->nheaders][0] = "Authorization";
    r->headers[r->nheaders++][1] = "Bearer ok";
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_memory_equal(g_log.order, "aAH", 3);
    assert_false(pthread_equal(g_log.thread[2], pthread_self()));

    /* Routing answers and the automatic OPTIONS go through the filters. */
    want(f, "OPTIONS", "/w", 401, NULL);
    want(f, "GET", "/none", 401, NULL);
    fake_finish(f);
}

/* Takes the request and answers from the timer thread. */
static void answer_later(void *arg)
{
    srv_respond(arg, 202, "text/plain", "later", 5);
}

static int f_async(srv_request *req, void *ctx)
{
    (void)ctx;
    if (strcmp(srv_request_path(req), "/async") == 0) {
        if (srv_after(srv_request_server(req), 10, answer_later, req) != 0)
            srv_respond(req, 500, NULL, NULL, 0);
        return SRV_FILTER_DONE;
    }
    if (strcmp(srv_request_path(req), "/never") == 0)
        return SRV_FILTER_DONE; /* kept and never answered: the core's timeout */
    if (strcmp(srv_request_path(req), "/bug") == 0) {
        /* Answers but says NEXT: the core must not answer twice. */
        srv_respond(req, 418, "text/plain", "teapot", 6);
        return SRV_FILTER_NEXT;
    }
    return SRV_FILTER_NEXT;
}

static void check_async_filter(fake *f, unsigned flags)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.request_timeout_ms = 300;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(add_filter(srv, f_async, NULL, flags), 0);
    assert_int_equal(srv_route(srv, "GET", "/async", h_logged, NULL), 0);
    assert_int_equal(srv_route(srv, "GET", "/never", h_logged, NULL), 0);
    assert_int_equal(srv_route(srv, "GET", "/bug", h_logged, NULL), 0);
    fake_start(f, &cfg);
    log_reset();
    want(f, "GET", "/async", 202, "later");
    want(f, "GET", "/never", 503, NULL);
    want(f, "GET", "/bug", 418, "teapot");
    assert_int_equal(g_log.n, 0); /* no handler ran */
    srv_stats st;
    FAKE_EVENTUALLY(srv, st, st.requests_in_flight == 0);
    assert_int_equal(st.timeouts, 1);
    fake_finish(f);
}

static void test_filter_async_inline(void **state)
{
    check_async_filter(*state, SRV_FILTER_NONBLOCKING);
}

static void test_filter_async_worker(void **state)
{
    check_async_filter(*state, 0);
}

static void test_hooks(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_response_hook_add(srv, hook_headers, NULL), 0);
    assert_int_equal(srv_response_hook_add(srv, NULL, NULL), SRV_EINVAL);
    /* Registered after the hook, the filter's 401 still carries it. */
    assert_int_equal(add_filter(srv, f_auth, NULL, 0), 0);
    assert_int_equal(srv_route(srv, "GET", "/w", h_logged, NULL), 0);
    fake_start(f, NULL);
    assert_int_equal(srv_response_hook_add(srv, hook_headers, NULL), SRV_ESTATE);

    static const struct {
        const char *method, *target;
        int auth, status;
    } cases[] = {
        {"GET", "/w", 1, 200},     /* the handler */
        {"GET", "/w", 0, 401},     /* a filter's early answer */
        {"GET", "/none", 1, 404},  /* the core's routing answers */
        {"PUT", "/w", 1, 405},
        {"OPTIONS", "/w", 1, 204},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fake_req *r = fake_req_new(f, cases[i].method, cases[i].target);
        if (cases[i].auth) {
            r->headers[r->nheaders][0] = "Authorization";
            r->headers[r->nheaders++][1] = "Bearer ok";
        }
        fake_send(r);
        assert_int_equal(fake_wait(r, FAKE_WAIT_MS), cases[i].status);
        if (fake_head_header(r, "X-Content-Type-Options", NULL, 0) != 1)
            fail_msg("%s %s: the hook's header is missing or repeated", cases[i].method,
                     cases[i].target);
    }
    /* Not on the answer to a refused path (never dispatched to the chain). */
    fake_req *r = want(f, "GET", "/w/%zz", 400, NULL);
    assert_null(fake_resp_header(r, "X-Content-Type-Options"));
    fake_finish(f);
}

static void test_filter_registration(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    srv_filter_opts o;
    srv_filter_opts_init(&o);
    assert_int_equal(srv_filter_add(srv, &o), SRV_EINVAL); /* no filter */
    assert_int_equal(srv_filter_add(srv, NULL), SRV_EINVAL);
    assert_int_equal(srv_filter_add(NULL, &o), SRV_EINVAL);
    o.filter = f_pass;
    o.ctx = &c_a;
    o.flags = 1u << 7;
    assert_int_equal(srv_filter_add(srv, &o), SRV_EINVAL);
    o.flags = 0;
    o.size = 0;
    assert_int_equal(srv_filter_add(srv, &o), SRV_EINVAL);
    o.size = SRV__FILTER_OPTS_MIN_SIZE; /* the first layout: accepted */
    assert_int_equal(srv_filter_add(srv, &o), 0);
    assert_int_equal(srv_route(srv, "GET", "/w", h_logged, NULL), 0);
    fake_start(f, NULL);
    srv_filter_opts_init(&o);
    o.filter = f_pass;
    assert_int_equal(srv_filter_add(srv, &o), SRV_ESTATE);
    fake_req *r = want(f, "GET", "/w", 200, "handled");
    assert_string_equal(fake_resp_header(r, "X-Filter-a"), "1");
    fake_finish(f);
}


/* ---- filters on a prefix or a route (0.8) ----------------------------------- */

static char c_g = 'g', c_p = 'p', c_q = 'q', c_r = 'r', c_u = 'u', c_v = 'v';

static int add_scoped(srv_server *srv, srv_filter_fn fn, void *ctx, unsigned flags,
                      const char *prefix, const char *method, const char *route)
{
    srv_filter_opts o;
    srv_filter_opts_init(&o);
    o.filter = fn;
    o.ctx = ctx;
    o.flags = flags;
    o.prefix = prefix;
    o.route_method = method;
    o.route_path = route;
    return srv_filter_add(srv, &o);
}

/* The filters that ran, as letters, then the handler's 'H'. */
static void want_log(fake *f, const char *method, const char *target, int status,
                     const char *log)
{
    log_reset();
    want(f, method, target, status, NULL);
    pthread_mutex_lock(&g_log.mu);
    size_t n = g_log.n;
    char got[MAX_LOG + 1];
    memcpy(got, g_log.order, n);
    got[n] = '\0';
    pthread_mutex_unlock(&g_log.mu);
    if (strcmp(got, log) != 0)
        fail_msg("%s %s: ran \"%s\", want \"%s\"", method, target, got, log);
}

static void check_scoped(fake *f, unsigned flags)
{
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/api/v1/users/{id}", h_logged, NULL), 0);
    assert_int_equal(srv_route(srv, "GET", "/api/v1/other", h_logged, NULL), 0);
    assert_int_equal(srv_route(srv, "GET", "/apix", h_logged, NULL), 0);
    assert_int_equal(srv_route(srv, "GET", "/api", h_logged, NULL), 0);
    assert_int_equal(srv_route(srv, "GET", "/{name}", h_logged, NULL), 0);
    /* Registered in an order unlike the chain's: route, longer prefix, the
     * global one, the shorter prefix, the root prefix, a second route
     * filter. */
    assert_int_equal(add_scoped(srv, f_pass, &c_u, flags, NULL, "GET", "/api/v1/users/{x}"), 0);
    assert_int_equal(add_scoped(srv, f_pass, &c_q, flags, "/api/v1", NULL, NULL), 0);
    assert_int_equal(add_scoped(srv, f_pass, &c_g, flags, NULL, NULL, NULL), 0);
    assert_int_equal(add_scoped(srv, f_pass, &c_p, flags, "/api/", NULL, NULL), 0);
    assert_int_equal(add_scoped(srv, f_pass, &c_r, flags, "/", NULL, NULL), 0);
    assert_int_equal(add_scoped(srv, f_pass, &c_v, flags, NULL, "GET", "/api/v1/users/{id}"), 0);
    fake_start(f, NULL);

    want_log(f, "GET", "/api/v1/users/7", 200, "grpquvH");
    want_log(f, "HEAD", "/api/v1/users/7", 200, "grpquvH"); /* HEAD is the GET route's */
    want_log(f, "GET", "/api/v1/other", 200, "grpqH");      /* not the route's filters */
    want_log(f, "PUT", "/api/v1/users/7", 405, "grpq");     /* 405: no route, no route filter */
    want_log(f, "GET", "/api/v1/none", 404, "grpq");        /* 404 under the prefix */
    want_log(f, "GET", "/api", 200, "grpH");                /* "/api/" covers "/api" */
    want_log(f, "GET", "/api/", 404, "grp");
    want_log(f, "GET", "/apix", 200, "grH");                /* a segment boundary */
    want_log(f, "GET", "/api%2Fv1", 200, "grH");            /* %2F stays in its segment */
    want_log(f, "GET", "/%61pi/v1/users/7", 200, "grpquvH"); /* decoded, like the router */
    want_log(f, "GET", "/api/v%31/other", 200, "grpqH");
    want_log(f, "GET", "//api/v1/other", 404, "gr");        /* an empty first segment */
    want_log(f, "GET", "/API", 200, "grH");                 /* case-sensitive: "/{name}" */
    want_log(f, "GET", "http://h/api/v1/other", 200, "grpqH"); /* absolute form */
    /* Dot segments never reach a filter. */
    want_log(f, "GET", "/x/../api/v1/other", 400, "");
    want_log(f, "GET", "/api/v1/%2e%2e/other", 400, "");
    fake_finish(f);
}

static void test_scoped_filters_worker(void **state)
{
    check_scoped(*state, 0);
}

static void test_scoped_filters_inline(void **state)
{
    check_scoped(*state, SRV_FILTER_NONBLOCKING);
}

/* An answer from a prefix filter ends the chain: the route's filters and
 * the handler never run. */
static void test_scoped_filter_answers(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "GET";
    o.path = "/admin/{*rest}";
    o.handler = h_logged;
    o.flags = SRV_ROUTE_NONBLOCKING;
    assert_int_equal(srv_route_add(srv, &o), 0);
    assert_int_equal(srv_route(srv, "GET", "/open", h_logged, NULL), 0);
    assert_int_equal(add_scoped(srv, f_auth, NULL, SRV_FILTER_NONBLOCKING, "/admin", NULL, NULL),
                     0);
    /* A blocking route filter: the chain moves to a worker there. */
    assert_int_equal(add_scoped(srv, f_pass, &c_u, 0, NULL, "GET", "/admin/{*x}"), 0);
    fake_start(f, NULL);
    want_log(f, "GET", "/admin/panel", 401, "A");
    want_log(f, "GET", "/admin", 401, "A"); /* no route: still the filter's 401 */
    want_log(f, "GET", "/open", 200, "H");
    log_reset();
    fake_req *r = fake_req_new(f, "GET", "/admin/panel");
    r->headers[r->nheaders][0] = "Authorization";
    r->headers[r->nheaders++][1] = "Bearer ok";
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_memory_equal(g_log.order, "AuH", 3);
    assert_true(pthread_equal(g_log.thread[0], pthread_self()));   /* the I/O thread */
    assert_false(pthread_equal(g_log.thread[1], pthread_self()));  /* the worker */
    assert_string_equal(fake_resp_header(r, "X-Filter-u"), "1");
    fake_finish(f);
}

static void test_scoped_filter_registration(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/u/{id}", h_logged, NULL), 0);
    static const char *const bad[] = {"api", "", "/a//b", "//", "/a/../b", "/a/./b", "/..",
                                      "/{x}", "/a/{*r}", "/a?b", "/a#b", "/a//"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (add_scoped(srv, f_pass, &c_p, 0, bad[i], NULL, NULL) != SRV_EINVAL)
            fail_msg("prefix \"%s\" accepted", bad[i]);
    assert_int_equal(add_scoped(srv, f_pass, &c_p, 0, "/u", "GET", "/u/{id}"), SRV_EINVAL);
    assert_int_equal(add_scoped(srv, f_pass, &c_p, 0, NULL, "GET", NULL), SRV_EINVAL);
    assert_int_equal(add_scoped(srv, f_pass, &c_p, 0, NULL, NULL, "/u/{id}"), SRV_EINVAL);
    assert_int_equal(add_scoped(srv, f_pass, &c_u, 0, NULL, "PUT", "/u/{id}"), SRV_ENOROUTE);
    assert_int_equal(add_scoped(srv, f_pass, &c_u, 0, NULL, "GET", "/u"), SRV_ENOROUTE);
    assert_int_equal(add_scoped(srv, f_pass, &c_u, 0, NULL, "GET", "/u/{*id}"), SRV_ENOROUTE);
    assert_int_equal(add_scoped(srv, f_pass, &c_u, 0, NULL, "GET", "/u/id"), SRV_ENOROUTE);
    assert_int_equal(add_scoped(srv, f_pass, &c_u, 0, NULL, "GET", "/u/{other}"), 0);
    assert_int_equal(add_scoped(srv, f_pass, &c_p, 0, "/u/", NULL, NULL), 0);
    fake_start(f, NULL);
    assert_int_equal(add_scoped(srv, f_pass, &c_p, 0, "/v", NULL, NULL), SRV_ESTATE);
    want_log(f, "GET", "/u/1", 200, "puH");
    fake_finish(f);
    assert_string_equal(srv_err_name(SRV_ENOROUTE), "ENOROUTE");
}

/* ---- CORS ------------------------------------------------------------------ */

static fake_req *cors_req(fake *f, const char *method, const char *target, const char *origin,
                          const char *acrm, const char *acrh)
{
    fake_req *r = fake_req_new(f, method, target);
    if (origin) {
        r->headers[r->nheaders][0] = "Origin";
        r->headers[r->nheaders++][1] = origin;
    }
    if (acrm) {
        r->headers[r->nheaders][0] = "Access-Control-Request-Method";
        r->headers[r->nheaders++][1] = acrm;
    }
    if (acrh) {
        r->headers[r->nheaders][0] = "Access-Control-Request-Headers";
        r->headers[r->nheaders++][1] = acrh;
    }
    fake_send(r);
    fake_wait(r, FAKE_WAIT_MS);
    return r;
}

static void test_cors(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    srv_cors_opts c;
    srv_cors_opts_init(&c);
    assert_string_equal(c.allowed_methods, "GET, HEAD, POST");
    assert_int_equal(c.max_age, 1800);
    assert_int_equal(srv_cors_add(srv, &c), SRV_EINVAL); /* no origins */
    c.allowed_origins = "*, https://a.example";
    assert_int_equal(srv_cors_add(srv, &c), SRV_EINVAL);
    c.allowed_origins = "not an origin";
    assert_int_equal(srv_cors_add(srv, &c), SRV_EINVAL);
    c.allowed_origins = " https://a.example ,http://localhost:3000";
    c.allowed_methods = "GET,PUT";
    c.allowed_headers = "Content-Type, X-Token";
    c.exposed_headers = "X-Total";
    c.allow_credentials = 1;
    c.max_age = 600;
    assert_int_equal(srv_cors_add(srv, &c), 0);
    assert_int_equal(srv_route(srv, "GET", "/w", h_logged, NULL), 0);
    fake_start(f, NULL);

    /* A preflight, allowed: 204 whatever the routes, the handler not run. */
    fake_req *r = cors_req(f, "OPTIONS", "/w", "https://a.example", "PUT", "x-token, content-type");
    assert_int_equal(r->status_out, 204);
    assert_int_equal(r->handler_calls, 0);
    assert_int_equal(r->body_out_len, 0);
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Origin"), "https://a.example");
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Methods"), "GET, PUT");
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Headers"),
                        "Content-Type, X-Token");
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Credentials"), "true");
    assert_string_equal(fake_resp_header(r, "Access-Control-Max-Age"), "600");
    assert_string_equal(fake_resp_header(r, "Vary"),
                        "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    r = cors_req(f, "OPTIONS", "/unrouted", "http://localhost:3000", "GET", NULL);
    assert_int_equal(r->status_out, 204);
    /* Refused preflights. */
    assert_int_equal(cors_req(f, "OPTIONS", "/w", "https://evil.example", "GET", NULL)->status_out,
                     403);
    assert_int_equal(cors_req(f, "OPTIONS", "/w", "https://a.example", "DELETE", NULL)->status_out,
                     403);
    assert_int_equal(
        cors_req(f, "OPTIONS", "/w", "https://a.example", "GET", "X-Other")->status_out, 403);
    /* OPTIONS without Access-Control-Request-Method is no preflight. */
    r = cors_req(f, "OPTIONS", "/w", "https://a.example", NULL, NULL);
    assert_int_equal(r->status_out, 204);
    assert_non_null(fake_resp_header(r, "Allow"));
    /* A simple request, allowed: the headers, then the handler. */
    r = cors_req(f, "GET", "/w", "http://localhost:3000", NULL, NULL);
    assert_int_equal(r->status_out, 200);
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Origin"),
                        "http://localhost:3000");
    assert_string_equal(fake_resp_header(r, "Access-Control-Expose-Headers"), "X-Total");
    assert_string_equal(fake_resp_header(r, "Vary"), "Origin");
    /* Not allowed, or no Origin: served, without Access-Control-*. */
    r = cors_req(f, "GET", "/w", "https://evil.example", NULL, NULL);
    assert_int_equal(r->status_out, 200);
    assert_null(fake_resp_header(r, "Access-Control-Allow-Origin"));
    assert_string_equal(fake_resp_header(r, "Vary"), "Origin");
    r = cors_req(f, "GET", "/w", NULL, NULL, NULL);
    assert_int_equal(r->status_out, 200);
    assert_null(fake_resp_header(r, "Access-Control-Allow-Origin"));
    /* And on the core's 404. */
    r = cors_req(f, "GET", "/none", "https://a.example", NULL, NULL);
    assert_int_equal(r->status_out, 404);
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Origin"), "https://a.example");
    fake_finish(f);
}

static void test_cors_any_origin(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    srv_cors_opts c;
    /* A caller built against the first layout: the rest gets defaults. */
    srv_cors_opts_init_sized(&c, SRV__CORS_OPTS_MIN_SIZE);
    c.allowed_origins = "*";
    c.max_age = -1;
    assert_int_equal(srv_cors_add(srv, &c), 0);
    assert_int_equal(srv_route(srv, "GET", "/w", h_logged, NULL), 0);
    fake_start(f, NULL);
    fake_req *r = cors_req(f, "OPTIONS", "/w", "https://any.example", "POST", "X-Anything");
    assert_int_equal(r->status_out, 204);
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Origin"), "*");
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Headers"), "X-Anything");
    assert_null(fake_resp_header(r, "Access-Control-Max-Age"));
    assert_null(fake_resp_header(r, "Access-Control-Allow-Credentials"));
    r = cors_req(f, "GET", "/w", "https://any.example", NULL, NULL);
    assert_string_equal(fake_resp_header(r, "Access-Control-Allow-Origin"), "*");
    fake_finish(f);
    assert_int_equal(srv_cors_add(NULL, &c), SRV_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_precedence),
        T(test_precedence_reversed),
        T(test_conflicts_and_bad_patterns),
        T(test_decoding_and_slashes),
        T(test_hostile_paths),
        T(test_allow_and_options),
        T(test_thousand_routes),
        T(test_filter_threads),
        T(test_filters_nonblocking_stay_inline),
        T(test_filter_async_inline),
        T(test_filter_async_worker),
        T(test_hooks),
        T(test_filter_registration),
        T(test_scoped_filters_worker),
        T(test_scoped_filters_inline),
        T(test_scoped_filter_answers),
        T(test_scoped_filter_registration),
        T(test_cors),
        T(test_cors_any_origin),
#undef T
    };
    return cmocka_run_group_tests_name("router patterns and filters", tests, NULL, NULL);
}
