/*
 * Routing and filters on every engine, same answers: path parameters
 * (%2F inside one), wildcards (empty too), precedence, 405 + Allow and the
 * automatic OPTIONS over patterns, a filter answering 401 early or letting
 * the request through, the response hook's header on handler answers and
 * the core's 404, CORS preflights and simple requests, and hostile paths
 * (invalid escapes, encoded dots and slashes, %00, very long paths).
 * Its own server (routing_setup): in the nonblocking run every route and
 * filter is registered non-blocking, in the default run none is (filters
 * then run on the workers).
 */
#include "conformance.h"

#include <zlib.h>

/* The body of GET /big: compressible text, over the min_size below. */
static char g_big[8192];

/* "<route>|name=value|..." */
static void h_route(srv_request *req, void *ctx)
{
    (void)ctx;
    sbuf b = {0};
    sb_add(&b, "%s", or_null(srv_request_route(req)));
    for (size_t i = 0; i < srv_request_param_count(req); i++) {
        const char *n, *v;
        if (srv_request_param_at(req, i, &n, &v) == 0)
            sb_add(&b, "|%s=%s", n, v);
    }
    srv_respond(req, 200, "text/plain", b.p ? b.p : "", b.n);
    free(b.p);
}

/* Paths under /secure/ need "Authorization: Bearer letmein". */
static int f_auth(srv_request *req, void *ctx)
{
    (void)ctx;
    if (strncmp(srv_request_path(req), "/secure/", 8) != 0)
        return SRV_FILTER_NEXT;
    const char *a = srv_request_header(req, "Authorization");
    if (a != NULL && strcmp(a, "Bearer letmein") == 0) {
        srv_set_header(req, "X-Auth", "passed");
        return SRV_FILTER_NEXT;
    }
    srv_set_header(req, "WWW-Authenticate", "Bearer");
    srv_respond(req, 401, "text/plain", "unauthorized\n", 13);
    return SRV_FILTER_DONE;
}

/* Scoped filters (0.8): what ran for the last request, in order: a
 * filter's letter, 'H' for the handler. One request at a time. */
static struct {
    pthread_mutex_t mu;
    char log[32];
} g_scope = {PTHREAD_MUTEX_INITIALIZER, ""};

static void scope_log(char c)
{
    pthread_mutex_lock(&g_scope.mu);
    size_t n = strlen(g_scope.log);
    if (n + 1 < sizeof g_scope.log) {
        g_scope.log[n] = c;
        g_scope.log[n + 1] = '\0';
    }
    pthread_mutex_unlock(&g_scope.mu);
}

/* Logs its letter and lets the request through. */
static int f_letter(srv_request *req, void *ctx)
{
    (void)req;
    scope_log(*(const char *)ctx);
    return SRV_FILTER_NEXT;
}

/* Under /api/: 401 unless "X-Api-Key: k1". */
static int f_api_key(srv_request *req, void *ctx)
{
    (void)ctx;
    scope_log('k');
    const char *k = srv_request_header(req, "X-Api-Key");
    if (k != NULL && strcmp(k, "k1") == 0)
        return SRV_FILTER_NEXT;
    srv_respond(req, 401, "text/plain", "api key\n", 8);
    return SRV_FILTER_DONE;
}

static void h_api(srv_request *req, void *ctx)
{
    scope_log('H');
    h_route(req, ctx);
}

static void h_big(srv_request *req, void *ctx)
{
    srv_respond(req, 200, ctx, g_big, sizeof g_big);
}

static void hook_nosniff(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_set_header(req, "X-Content-Type-Options", "nosniff");
}

int routing_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    f->m = *state;
    for (size_t i = 0; i < FX_MAX_CONNS; i++)
        rc_init(&f->conns[i]);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    srv_config_init(&f->cfg);
    f->cfg.host = "127.0.0.1";
    f->cfg.port = 0;
    f->cfg.worker_threads = 8;
    f->cfg.io_threads = 2;
    f->cfg.max_uri_bytes = 16384;
    f->cfg.max_header_bytes = 32768;
    f->srv = srv_server_new(g_engine, &f->cfg);
    if (f->srv == NULL) {
        free(f);
        return -1;
    }
    unsigned rflags = g_nonblocking ? SRV_ROUTE_NONBLOCKING : 0;
    unsigned fflags = g_nonblocking ? SRV_FILTER_NONBLOCKING : 0;
    static const char *const routes[][2] = {
        {"GET", "/users/{id}"},   {"GET", "/static/{*path}"}, {"GET", "/items/{id}"},
        {"PUT", "/items/{id}"},   {"DELETE", "/items/special"}, {"GET", "/secure/{*rest}"},
        {"GET", "/a/{x}/c"},      {"GET", "/a/b/d"},
    };
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof routes / sizeof routes[0]; i++) {
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = routes[i][0];
        o.path = routes[i][1];
        o.handler = h_route;
        o.flags = rflags;
        rc = srv_route_add(f->srv, &o);
    }
    for (size_t i = 0; i < sizeof g_big; i++)
        g_big[i] = "libsrv compresses this text. "[i % 29];
    static const char *const big[][2] = {{"/big", "text/plain; charset=utf-8"},
                                         {"/big.png", "image/png"}};
    for (size_t i = 0; rc == 0 && i < 2; i++) {
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = "GET";
        o.path = big[i][0];
        o.handler = h_big;
        o.ctx = (void *)big[i][1];
        o.flags = rflags;
        rc = srv_route_add(f->srv, &o);
    }
    srv_compression_opts z;
    srv_compression_opts_init(&z);
    z.min_size = 1024;
    if (rc == 0)
        rc = srv_compression_set(f->srv, &z);
    if (rc == 0) {
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = "GET";
        o.path = "/hello"; /* still_serving */
        o.handler = h_hello;
        o.flags = rflags;
        rc = srv_route_add(f->srv, &o);
    }
    /* CORS first, so that the 401 below carries its headers. */
    srv_cors_opts c;
    srv_cors_opts_init(&c);
    c.allowed_origins = "https://app.example";
    c.allowed_methods = "GET, PUT";
    c.allowed_headers = "X-Token";
    c.allow_credentials = 1;
    c.max_age = 600;
    if (rc == 0)
        rc = srv_cors_add(f->srv, &c);
    srv_filter_opts fo;
    srv_filter_opts_init(&fo);
    fo.filter = f_auth;
    fo.flags = fflags;
    if (rc == 0)
        rc = srv_filter_add(f->srv, &fo);
    if (rc == 0)
        rc = srv_response_hook_add(f->srv, hook_nosniff, NULL);
    /* Filters on a prefix and on a route: registered in another order
     * than the chain's (route, longer prefix, shorter prefix). */
    static const char *const api[] = {"/api/items/{id}", "/api/other", "/apix"};
    for (size_t i = 0; rc == 0 && i < 3; i++) {
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = "GET";
        o.path = api[i];
        o.handler = h_api;
        o.flags = rflags;
        rc = srv_route_add(f->srv, &o);
    }
    static char c_r = 'r', c_i = 'i';
    srv_filter_opts so;
    srv_filter_opts_init(&so);
    so.filter = f_letter;
    so.ctx = &c_r;
    so.flags = fflags;
    so.route_method = "GET";
    so.route_path = "/api/items/{id}";
    if (rc == 0)
        rc = srv_filter_add(f->srv, &so);
    srv_filter_opts_init(&so);
    so.filter = f_letter;
    so.ctx = &c_i;
    so.flags = fflags;
    so.prefix = "/api/items";
    if (rc == 0)
        rc = srv_filter_add(f->srv, &so);
    srv_filter_opts_init(&so);
    so.filter = f_api_key;
    so.flags = fflags;
    so.prefix = "/api/";
    if (rc == 0)
        rc = srv_filter_add(f->srv, &so);
    if (rc == 0)
        rc = srv_server_start(f->srv);
    if (rc != 0) {
        print_error("routing setup: %s (%s)\n", srv_strerror(rc), srv_server_last_error(f->srv));
        srv_server_free(f->srv);
        free(f);
        return -1;
    }
    f->port = srv_server_port(f->srv);
    *state = f;
    return 0;
}

int routing_teardown(void **state)
{
    fx *f = *state;
    int rc = 0;
    for (size_t i = 0; i < FX_MAX_CONNS; i++)
        rc_close(&f->conns[i]);
    if (srv_server_stop(f->srv, 2000) != 0)
        rc = -1;
    srv_stats st;
    srv_server_stats(f->srv, &st);
    if (st.connections_open != 0 || st.requests_in_flight != 0) {
        print_error("teardown: connections_open=%u requests_in_flight=%u\n",
                    st.connections_open, st.requests_in_flight);
        rc = -1;
    }
    srv_server_free(f->srv);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
    return rc;
}

/* One libcurl request with up to three extra headers. */
static void get(fx *f, const char *method, const char *path, const char *h1, const char *h2,
                const char *h3, http_res *r)
{
    http_req q = {0};
    q.method = method;
    q.path = path;
    q.headers[0] = h1;
    q.headers[1] = h1 ? h2 : NULL;
    q.headers[2] = h1 && h2 ? h3 : NULL;
    http_do(f, &q, r);
}

static void expect_route(fx *f, const char *path, const char *body)
{
    http_res r;
    get(f, "GET", path, NULL, NULL, NULL, &r);
    check_http(f, path, &r, 200);
    check_body(f, path, &r, body);
    http_res_free(&r);
}

void test_routing_params(void **state)
{
    fx *f = *state;
    expect_route(f, "/users/42", "/users/{id}|id=42");
    expect_route(f, "/users/a%2Fb", "/users/{id}|id=a/b");
    expect_route(f, "/users/caf%C3%A9", "/users/{id}|id=caf\xc3\xa9");
    expect_route(f, "/users/a+b%20c?x=1", "/users/{id}|id=a+b c");
    expect_route(f, "/static/", "/static/{*path}|path=");
    expect_route(f, "/static/css/site.css", "/static/{*path}|path=css/site.css");
    expect_route(f, "/static/a%20b/c%2Fd", "/static/{*path}|path=a b/c/d");
    /* Precedence: literal before parameter, with backtracking. */
    expect_route(f, "/a/b/d", "/a/b/d");
    expect_route(f, "/a/b/c", "/a/{x}/c|x=b");
    expect_route(f, "/items/special", "/items/{id}|id=special"); /* the literal has no GET */
    http_res r;
    get(f, "GET", "/users/", NULL, NULL, NULL, &r); /* a parameter is never empty */
    check_http(f, "GET /users/", &r, 404);
    http_res_free(&r);
    get(f, "GET", "/static", NULL, NULL, NULL, &r);
    check_http(f, "GET /static", &r, 404);
    http_res_free(&r);
}

void test_routing_405_options(void **state)
{
    fx *f = *state;
    http_res r;
    get(f, "POST", "/items/1", NULL, NULL, NULL, &r);
    check_http(f, "POST /items/1", &r, 405);
    CHECK_STR("POST /items/1 Allow", res_header(&r, "Allow"), "GET, HEAD, PUT, OPTIONS");
    CHECK_STR("POST /items/1 hook", res_header(&r, "X-Content-Type-Options"), "nosniff");
    http_res_free(&r);
    get(f, "POST", "/items/special", NULL, NULL, NULL, &r);
    check_http(f, "POST /items/special", &r, 405);
    CHECK_STR("POST /items/special Allow", res_header(&r, "Allow"),
              "DELETE, GET, HEAD, PUT, OPTIONS");
    http_res_free(&r);
    get(f, "OPTIONS", "/items/1", NULL, NULL, NULL, &r);
    check_http(f, "OPTIONS /items/1", &r, 204);
    CHECK_STR("OPTIONS /items/1 Allow", res_header(&r, "Allow"), "GET, HEAD, PUT, OPTIONS");
    CHECK_INT("OPTIONS /items/1 body", r.body_len, 0);
    http_res_free(&r);
    get(f, "OPTIONS", "/nothing", NULL, NULL, NULL, &r);
    check_http(f, "OPTIONS /nothing", &r, 404);
    http_res_free(&r);
    get(f, "DELETE", "/items/special", NULL, NULL, NULL, &r);
    check_http(f, "DELETE /items/special", &r, 200);
    check_body(f, "DELETE /items/special", &r, "/items/special");
    http_res_free(&r);
}

void test_routing_filter_401(void **state)
{
    fx *f = *state;
    http_res r;
    get(f, "GET", "/secure/x", NULL, NULL, NULL, &r);
    check_http(f, "GET /secure/x without credentials", &r, 401);
    check_body(f, "GET /secure/x without credentials", &r, "unauthorized\n");
    CHECK_STR("401 WWW-Authenticate", res_header(&r, "WWW-Authenticate"), "Bearer");
    CHECK_STR("401 hook", res_header(&r, "X-Content-Type-Options"), "nosniff");
    http_res_free(&r);
    get(f, "GET", "/secure/x", "Authorization: Bearer wrong", NULL, NULL, &r);
    check_http(f, "GET /secure/x wrong credentials", &r, 401);
    http_res_free(&r);
    /* Even a path no route serves is the filter's first. */
    get(f, "GET", "/secure", NULL, NULL, NULL, &r);
    check_http(f, "GET /secure", &r, 404);
    http_res_free(&r);
}

void test_routing_filter_pass(void **state)
{
    fx *f = *state;
    http_res r;
    get(f, "GET", "/secure/a/b", "Authorization: Bearer letmein", NULL, NULL, &r);
    check_http(f, "GET /secure/a/b", &r, 200);
    check_body(f, "GET /secure/a/b", &r, "/secure/{*rest}|rest=a/b");
    CHECK_STR("the filter's header", res_header(&r, "X-Auth"), "passed");
    CHECK_STR("the hook's header", res_header(&r, "X-Content-Type-Options"), "nosniff");
    http_res_free(&r);
}

void test_routing_hook_on_404(void **state)
{
    fx *f = *state;
    http_res r;
    get(f, "GET", "/no/such/thing", NULL, NULL, NULL, &r);
    check_http(f, "GET /no/such/thing", &r, 404);
    check_body(f, "GET /no/such/thing", &r, "404 Not Found\n");
    CHECK_STR("404 hook", res_header(&r, "X-Content-Type-Options"), "nosniff");
    CHECK_STR("404 Vary (CORS)", res_header(&r, "Vary"), "Origin");
    http_res_free(&r);
}

void test_routing_cors_preflight(void **state)
{
    fx *f = *state;
    http_res r;
    get(f, "OPTIONS", "/items/7", "Origin: https://app.example",
        "Access-Control-Request-Method: PUT", "Access-Control-Request-Headers: x-token", &r);
    check_http(f, "preflight", &r, 204);
    CHECK_INT("preflight body", r.body_len, 0);
    CHECK_STR("preflight ACAO", res_header(&r, "Access-Control-Allow-Origin"),
              "https://app.example");
    CHECK_STR("preflight ACAM", res_header(&r, "Access-Control-Allow-Methods"), "GET, PUT");
    CHECK_STR("preflight ACAH", res_header(&r, "Access-Control-Allow-Headers"), "X-Token");
    CHECK_STR("preflight ACAC", res_header(&r, "Access-Control-Allow-Credentials"), "true");
    CHECK_STR("preflight max-age", res_header(&r, "Access-Control-Max-Age"), "600");
    CHECK(rc_header_has_token(&r.hdr, "Vary", "Origin"), "preflight Vary: %s",
          or_null(res_header(&r, "Vary")));
    CHECK(res_header(&r, "Allow") == NULL, "a preflight is not the automatic OPTIONS");
    http_res_free(&r);
    /* Under /secure/ too: the CORS filter comes before authentication. */
    get(f, "OPTIONS", "/secure/x", "Origin: https://app.example",
        "Access-Control-Request-Method: GET", NULL, &r);
    check_http(f, "preflight /secure/x", &r, 204);
    http_res_free(&r);
    get(f, "OPTIONS", "/items/7", "Origin: https://evil.example",
        "Access-Control-Request-Method: PUT", NULL, &r);
    check_http(f, "preflight, origin not allowed", &r, 403);
    CHECK(res_header(&r, "Access-Control-Allow-Origin") == NULL, "403 with ACAO");
    http_res_free(&r);
    get(f, "OPTIONS", "/items/7", "Origin: https://app.example",
        "Access-Control-Request-Method: DELETE", NULL, &r);
    check_http(f, "preflight, method not allowed", &r, 403);
    http_res_free(&r);
}

void test_routing_cors_simple(void **state)
{
    fx *f = *state;
    http_res r;
    get(f, "GET", "/users/5", "Origin: https://app.example", NULL, NULL, &r);
    check_http(f, "CORS GET", &r, 200);
    check_body(f, "CORS GET", &r, "/users/{id}|id=5");
    CHECK_STR("ACAO", res_header(&r, "Access-Control-Allow-Origin"), "https://app.example");
    CHECK_STR("ACAC", res_header(&r, "Access-Control-Allow-Credentials"), "true");
    CHECK_STR("Vary", res_header(&r, "Vary"), "Origin");
    http_res_free(&r);
    /* The 401 a browser must be able to read carries them too. */
    get(f, "GET", "/secure/x", "Origin: https://app.example", NULL, NULL, &r);
    check_http(f, "CORS 401", &r, 401);
    CHECK_STR("401 ACAO", res_header(&r, "Access-Control-Allow-Origin"), "https://app.example");
    http_res_free(&r);
    get(f, "GET", "/users/5", "Origin: https://evil.example", NULL, NULL, &r);
    check_http(f, "CORS GET, origin not allowed", &r, 200);
    CHECK(res_header(&r, "Access-Control-Allow-Origin") == NULL,
          "ACAO for an origin not allowed: %s", res_header(&r, "Access-Control-Allow-Origin"));
    http_res_free(&r);
}

/* Raw HTTP/1.1: libcurl would normalise dot segments. */
static void raw_get(fx *f, const char *target, int status, const char *body)
{
    char *req = malloc(strlen(target) + 64);
    sprintf(req, "GET %s HTTP/1.1\r\nHost: conformance\r\n\r\n", target);
    if (status == 400) {
        bad_input_str(f, target, req, 400, BAD_STATUS);
    } else {
        rc_conn *c = conn_open(f, target);
        conn_send_str(c, target, req);
        conn_expect(c, target, 0, status, body, NULL);
        rc_close(c);
    }
    free(req);
}

void test_routing_hostile_paths(void **state)
{
    fx *f = *state;
    static const char *const refused[] = {
        "/users/%zz", "/users/%4",  "/users/%",          "/users/%00",
        "/a/../b",    "/a/./b",     "/a/%2e%2E/b",       "/static/..%2Fetc/passwd",
        "/static/a/..%2f..%2f..%2fetc", "/static/%2e%2e/x", "/users/..",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        raw_get(f, refused[i], 400, NULL);
    /* Encoded slashes and dots that are not dot segments. */
    raw_get(f, "/users/a%2F..%2Fb", 200, "/users/{id}|id=a/../b");
    raw_get(f, "/users/...", 200, "/users/{id}|id=...");
    /* Long paths, many segments (under max_uri_bytes). */
    sbuf b = {0};
    sb_add(&b, "/static");
    for (int i = 0; i < 3000; i++)
        sb_add(&b, "/a");
    sbuf want = {0};
    sb_add(&want, "/static/{*path}|path=%s", b.p + 8);
    raw_get(f, b.p, 200, want.p);
    raw_get(f, b.p + 7, 404, NULL); /* "/a/a/...": no route that deep */
    free(b.p);
    free(want.p);
}

/* gzip on and off. libcurl is not asked to decode: the test inflates. */
void test_routing_gzip(void **state)
{
    fx *f = *state;
    http_res r;
    get(f, "GET", "/big", "Accept-Encoding: gzip", NULL, NULL, &r);
    check_http(f, "GET /big gzip", &r, 200);
    CHECK_STR("Content-Encoding", res_header(&r, "Content-Encoding"), "gzip");
    CHECK(rc_header_has_token(&r.hdr, "Vary", "Accept-Encoding") &&
          rc_header_has_token(&r.hdr, "Vary", "Origin"),
          "Vary (one line of several): %s", or_null(res_header(&r, "Vary")));
    CHECK(r.body_len > 0 && r.body_len < sizeof g_big / 4, "gzip body of %zu bytes",
          r.body_len);
    char *out = malloc(sizeof g_big + 1);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "inflateInit2");
    zs.next_in = (Bytef *)r.body;
    zs.avail_in = (uInt)r.body_len;
    zs.next_out = (Bytef *)out;
    zs.avail_out = sizeof g_big + 1;
    int zr = inflate(&zs, Z_FINISH);
    size_t got = zs.total_out;
    inflateEnd(&zs);
    CHECK(zr == Z_STREAM_END && got == sizeof g_big && memcmp(out, g_big, got) == 0,
          "the gzip body does not inflate to what the handler sent (zlib %d, %zu bytes)", zr,
          got);
    free(out);
    http_res_free(&r);

    get(f, "GET", "/big", NULL, NULL, NULL, &r); /* no Accept-Encoding */
    check_http(f, "GET /big plain", &r, 200);
    CHECK(res_header(&r, "Content-Encoding") == NULL, "Content-Encoding %s without "
          "Accept-Encoding", res_header(&r, "Content-Encoding"));
    CHECK(rc_header_has_token(&r.hdr, "Vary", "Accept-Encoding"), "Vary: %s",
          or_null(res_header(&r, "Vary")));
    CHECK(r.body_len == sizeof g_big && memcmp(r.body, g_big, sizeof g_big) == 0,
          "plain body of %zu bytes", r.body_len);
    http_res_free(&r);

    get(f, "GET", "/big", "Accept-Encoding: gzip;q=0, br", NULL, NULL, &r);
    check_http(f, "GET /big gzip;q=0", &r, 200);
    CHECK(res_header(&r, "Content-Encoding") == NULL, "gzip;q=0 got %s",
          res_header(&r, "Content-Encoding"));
    http_res_free(&r);

    get(f, "GET", "/big.png", "Accept-Encoding: gzip", NULL, NULL, &r);
    check_http(f, "GET /big.png", &r, 200);
    CHECK(res_header(&r, "Content-Encoding") == NULL, "image/png compressed");
    CHECK_INT("image/png length", r.body_len, sizeof g_big);
    http_res_free(&r);

    /* The core's short answers stay as they are. */
    get(f, "GET", "/nothing", "Accept-Encoding: gzip", NULL, NULL, &r);
    check_http(f, "GET /nothing gzip", &r, 404);
    check_body(f, "GET /nothing gzip", &r, "404 Not Found\n");
    http_res_free(&r);
}

/* ---- filters on a prefix or a route (0.8) -------------------------------- */

static void scope_reset(void)
{
    pthread_mutex_lock(&g_scope.mu);
    g_scope.log[0] = '\0';
    pthread_mutex_unlock(&g_scope.mu);
}

static void scope_check(const char *what, const char *want)
{
    pthread_mutex_lock(&g_scope.mu);
    char got[sizeof g_scope.log];
    memcpy(got, g_scope.log, sizeof got);
    pthread_mutex_unlock(&g_scope.mu);
    CHECK_STR(what, got, want);
}

/* One libcurl request; the status and which filters ran. */
static void scope_get(fx *f, const char *method, const char *path, int key, long status,
                      const char *ran)
{
    http_res r;
    scope_reset();
    http_req q = {0};
    q.head = strcmp(method, "HEAD") == 0;
    q.method = q.head ? NULL : method;
    q.path = path;
    q.headers[0] = key ? "X-Api-Key: k1" : NULL;
    http_do(f, &q, &r);
    char what[160];
    snprintf(what, sizeof what, "%s %s%s", method, path, key ? " (key)" : "");
    check_http(f, what, &r, status);
    scope_check(what, ran);
    http_res_free(&r);
}

/* Global filters first, then the prefixes (shortest first), then the
 * route's; the route's filter only for its route. */
void test_routing_scoped_order(void **state)
{
    fx *f = *state;
    scope_get(f, "GET", "/api/items/5", 1, 200, "kirH");
    scope_get(f, "HEAD", "/api/items/5", 1, 200, "kirH"); /* the GET route serves HEAD */
    scope_get(f, "GET", "/api/other", 1, 200, "kH");
    scope_get(f, "PUT", "/api/items/5", 1, 405, "ki");      /* no route: no route filter */
    scope_get(f, "GET", "/api/items", 1, 404, "ki");        /* 404s under a prefix too */
    /* A global filter still runs first: /secure/'s 401 is not the API's. */
    scope_get(f, "GET", "/secure/x", 1, 401, "");
}

/* "/api/" covers "/api" and below, not "/apix". */
void test_routing_scoped_prefix_boundary(void **state)
{
    fx *f = *state;
    scope_get(f, "GET", "/apix", 0, 200, "H");
    scope_get(f, "GET", "/api", 0, 401, "k");
    scope_get(f, "GET", "/api/", 0, 401, "k");
    scope_get(f, "GET", "/api/itemsx/5", 1, 404, "k");
}

/* A filter that answers ends the chain: nothing after it runs. */
void test_routing_scoped_answer_stops(void **state)
{
    fx *f = *state;
    http_res r;
    scope_reset();
    get(f, "GET", "/api/items/5", "X-Api-Key: nope", NULL, NULL, &r);
    check_http(f, "GET /api/items/5 bad key", &r, 401);
    check_body(f, "GET /api/items/5 bad key", &r, "api key\n");
    CHECK_STR("401 hook", res_header(&r, "X-Content-Type-Options"), "nosniff");
    scope_check("GET /api/items/5 bad key", "k");
    http_res_free(&r);
}

/* The prefix is matched against the path the router routes (raw '/'
 * splits, each segment %-decoded), so no spelling of a path reaches a
 * route under /api/ without the prefix's filter. Raw HTTP/1.1: libcurl
 * would normalise dot segments. */
static void scope_raw(fx *f, const char *target, int status, const char *ran)
{
    scope_reset();
    raw_get(f, target, status, NULL);
    scope_check(target, ran);
}

void test_routing_scoped_hostile(void **state)
{
    fx *f = *state;
    scope_raw(f, "/%61pi/items/5", 401, "k");            /* decoded like the router */
    scope_raw(f, "/api/item%73/5", 401, "k");
    scope_raw(f, "/apix/../api/items/5", 400, "");       /* dot segments: never routed */
    scope_raw(f, "/api/items/../other", 400, "");
    scope_raw(f, "/apix/%2e%2e/api/items/5", 400, "");
    scope_raw(f, "/api/%2E%2e/apix", 400, "");
    scope_raw(f, "/api%2Fitems/5", 404, "");              /* one segment "api/items" */
    scope_raw(f, "/api%2fother", 404, "");
    scope_raw(f, "//api/other", 404, "");                 /* an empty first segment */
    scope_raw(f, "/API/other", 404, "");                  /* case-sensitive, like routes */
    scope_raw(f, "http://conformance/api/other", 401, "k"); /* absolute form */
}

/*
 * The core's own answers carry what the response hooks and the CORS filter
 * add to every answer: a 413 to a Content-Length over max_body_bytes (given
 * before dispatch, the body never read) and a 417 to an unknown Expect, so
 * a page on another origin can read them. The application's filters (the
 * 401 of f_auth) never ran, and their headers are not there.
 */
void test_routing_core_errors_keep_cors(void **state)
{
    fx *f = *state;
    static const struct {
        const char *what, *head;
        int status;
    } cases[] = {
        {"a Content-Length over max_body_bytes",
         "POST /users/5 HTTP/1.1\r\nHost: conformance\r\nOrigin: https://app.example\r\n"
         "Content-Length: 999999999999\r\n\r\n", 413},
        {"an Expect other than 100-continue",
         "GET /users/5 HTTP/1.1\r\nHost: conformance\r\nOrigin: https://app.example\r\n"
         "Expect: something\r\n\r\n", 417},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *what = cases[i].what;
        rc_conn *c = conn_open(f, what);
        conn_send_str(c, what, cases[i].head);
        rc_response r;
        int rc = rc_read_response(c, &r, 0, 4000);
        CHECK(rc == RC_OK, "[%s] no answer: %s", what, rc_strerror(rc));
        CHECK_INT(what, r.status, cases[i].status);
        /* libmicrohttpd answers some itself over TLS (SRV_CAP_LIB_ERRORS: its
         * HTML body): only the core's answer (its text body) is checked. */
        int libs = (engine_caps() & SRV_CAP_LIB_ERRORS) && r.body != NULL && r.body[0] == '<';
        if (!libs) {
            CHECK_STR("hook header", rc_header_get(&r, "X-Content-Type-Options"), "nosniff");
            CHECK_STR("ACAO", rc_header_get(&r, "Access-Control-Allow-Origin"),
                      "https://app.example");
            CHECK_STR("ACAC", rc_header_get(&r, "Access-Control-Allow-Credentials"), "true");
            CHECK(rc_header_has_token(&r, "Vary", "Origin"), "[%s] Vary: %s", what,
                  or_null(rc_header_get(&r, "Vary")));
        }
        rc_response_free(&r);
        rc_close(c);
    }
}
