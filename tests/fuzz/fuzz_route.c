/*
 * Fuzz target: the router and the filter chain (core/router.c,
 * core/dispatch.c): pattern routes, a CORS filter and a hook, all
 * non-blocking so that the handler runs inside dispatch. The first byte
 * picks the method, the rest is the request-target. Checks: exactly one
 * answer, of a status routing can give; a handler sees decoded parameters
 * without a NUL and a wildcard without a dot segment; 405 and the
 * automatic OPTIONS carry Allow; 400 only for a path with a '%' or "/.".
 * Filters on a prefix ("/users") and a route (GET "/users/{id}"): no
 * spelling of a path reaches a route under the prefix without the prefix's
 * filter, the route's filter runs for that route only, in chain order.
 */
#include "fuzz_core.h"

#include <stdint.h>
#include <strings.h>

static int fuzz_handled;
/* The scoped filters that ran, in order: 'r' for "/", 'u' for the prefix
 * "/users", 'i' for the route GET /users/{id}. */
static char fuzz_ran[8];
static size_t fuzz_nran;

static int fuzz_scoped(srv_request *req, void *ctx)
{
    (void)req;
    if (fuzz_nran < sizeof fuzz_ran - 1)
        fuzz_ran[fuzz_nran++] = *(const char *)ctx;
    fuzz_ran[fuzz_nran] = '\0';
    return SRV_FILTER_NEXT;
}

static bool has_dot_segment(const char *v)
{
    for (;;) {
        size_t n = strcspn(v, "/");
        if ((n == 1 && v[0] == '.') || (n == 2 && v[0] == '.' && v[1] == '.'))
            return true;
        if (v[n] == '\0')
            return false;
        v += n + 1;
    }
}

static void fuzz_handler(srv_request *req, void *ctx)
{
    (void)ctx;
    fuzz_handled++;
    FUZZ_CHECK(srv_request_route(req) != NULL);
    size_t n = srv_request_param_count(req);
    for (size_t i = 0; i < n; i++) {
        const char *name, *value;
        FUZZ_CHECK(srv_request_param_at(req, i, &name, &value) == 0);
        FUZZ_CHECK(srv_request_param(req, name) == value);
        FUZZ_CHECK(strlen(value) <= strlen(srv_request_target(req)));
        if (strcmp(name, "path") == 0) /* the wildcard */
            FUZZ_CHECK(!has_dot_segment(value));
        else
            FUZZ_CHECK(value[0] != '\0'); /* a {param} is never empty */
    }
    FUZZ_CHECK(srv_request_param_at(req, n, NULL, NULL) == SRV_EINVAL);
    const char *route = srv_request_route(req);
    if (strcmp(route, "/users/{id}") == 0 && strcmp(srv_request_method(req), "OPTIONS") != 0)
        FUZZ_CHECK(strcmp(fuzz_ran, "rui") == 0);
    else if (strncmp(route, "/users/", 7) == 0)
        FUZZ_CHECK(strcmp(fuzz_ran, "ru") == 0);
    else
        FUZZ_CHECK(strchr(fuzz_ran, 'i') == NULL && fuzz_ran[0] == 'r');
    srv_respond(req, 200, "text/plain", "ok", 2);
}

static void fuzz_hook(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_set_header(req, "X-Hook", "1");
}

static srv_server *fuzz_route_server(void)
{
    static srv_server *srv;
    if (srv != NULL)
        return srv;
    srv = fuzz_core_server();
    static const char *const routes[][2] = {
        {"GET", "/"},           {"GET", "/users/{id}"},       {"GET", "/users/me"},
        {"DELETE", "/users/me"}, {"GET", "/users/{id}/posts/{post}"},
        {"GET", "/static/{*path}"}, {"GET", "/{a}/{b}/c"},    {"GET", "/a/b/d"},
        {"POST", "/x"},          {"OPTIONS", "/own"},          {"GET", "/caf\xc3\xa9/{x}"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = routes[i][0];
        o.path = routes[i][1];
        o.handler = fuzz_handler;
        o.flags = SRV_ROUTE_NONBLOCKING;
        FUZZ_CHECK(srv_route_add(srv, &o) == 0);
    }
    srv_cors_opts c;
    srv_cors_opts_init(&c);
    c.allowed_origins = "*";
    FUZZ_CHECK(srv_cors_add(srv, &c) == 0);
    FUZZ_CHECK(srv_response_hook_add(srv, fuzz_hook, NULL) == 0);
    static char c_r = 'r', c_u = 'u', c_i = 'i';
    srv_filter_opts f;
    srv_filter_opts_init(&f);
    f.filter = fuzz_scoped;
    f.flags = SRV_FILTER_NONBLOCKING;
    f.ctx = &c_i;
    f.route_method = "GET";
    f.route_path = "/users/{id}";
    FUZZ_CHECK(srv_filter_add(srv, &f) == 0);
    f.route_method = f.route_path = NULL;
    f.ctx = &c_u;
    f.prefix = "/users/";
    FUZZ_CHECK(srv_filter_add(srv, &f) == 0);
    f.ctx = &c_r;
    f.prefix = "/";
    FUZZ_CHECK(srv_filter_add(srv, &f) == 0);
    return srv;
}

static const char *header(srv_request *req, const char *name)
{
    for (size_t i = 0; i < srv__response_header_count(req); i++) {
        const char *v, *n = srv__response_header_at(req, i, &v);
        if (strcasecmp(n, name) == 0)
            return v;
    }
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "HEAD", "POST", "OPTIONS", "DELETE", "PUT"};
    if (size < 2)
        return 0;
    const char *method = methods[data[0] % 6];
    srv_request *req = srv__request_new(fuzz_route_server(), NULL, 0);
    FUZZ_CHECK(req != NULL);
    int rc = srv__request_set_method(req, method, strlen(method));
    if (rc == 0)
        rc = srv__request_set_target(req, (const char *)data + 1, size - 1);
    if (rc == 0)
        rc = srv__request_add_header(req, "Host", 4, "fuzz", 4);
    if (rc == 0)
        rc = srv__request_headers_done(req);
    if (rc != 0) {
        fuzz_core_fail(req, rc);
        return 0;
    }
    fuzz_core_responded = 0;
    fuzz_handled = 0;
    fuzz_nran = 0;
    fuzz_ran[0] = '\0';
    srv__request_dispatch(req);
    FUZZ_CHECK(fuzz_core_responded == 1);
    int st = fuzz_core_status;
    FUZZ_CHECK(st == 200 || st == 204 || st == 400 || st == 404 || st == 405);
    FUZZ_CHECK((st == 200) == (fuzz_handled == 1));
    if (st == 405 || (st == 204 && fuzz_handled == 0)) {
        const char *allow = header(req, "Allow");
        FUZZ_CHECK(allow != NULL && allow[0] != '\0');
    }
    if (st == 400)
        FUZZ_CHECK(strchr(req->target, '%') != NULL || strstr(req->target, "/.") != NULL);
    else /* past the router: the hook ran, whoever answered */
        FUZZ_CHECK(header(req, "X-Hook") != NULL);
    /* The filters run for what the router did not refuse (a CORS
     * preflight answers before them). */
    if (st == 400)
        FUZZ_CHECK(fuzz_nran == 0);
    if (strchr(fuzz_ran, 'u') != NULL) /* only under the prefix, once decoded */
        FUZZ_CHECK(strncmp(srv_request_path(req), "/users", 6) == 0);
    srv__request_release(req);
    return 0;
}
