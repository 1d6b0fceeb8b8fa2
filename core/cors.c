/*
 * The CORS filter (srv_cors_add): a non-blocking filter built on the public
 * request API. Preflights are answered here; other requests get the
 * Access-Control-* headers their answer needs and go on.
 */
#include "srv_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct srv__cors {
    char *origins; /* NULL: any ("*") */
    char *methods;
    char *headers; /* NULL: any requested ("*") */
    char *exposed; /* NULL: none */
    bool credentials;
    int max_age;
    char max_age_text[16];
} srv__cors;

static void srv__cors_free(void *ctx)
{
    srv__cors *c = ctx;
    if (c == NULL)
        return;
    free(c->origins);
    free(c->methods);
    free(c->headers);
    free(c->exposed);
    free(c);
}

/* The next item of a comma-separated list, blanks trimmed: *p moves past
 * it; false at the end. */
static bool srv__list_next(const char **p, const char **item, size_t *len)
{
    const char *s = *p;
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0')
            return false;
        const char *start = s;
        while (*s && *s != ',')
            s++;
        const char *end = s;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if (*s == ',')
            s++;
        *p = s;
        if (end > start) {
            *item = start;
            *len = (size_t)(end - start);
            return true;
        }
    }
}

static bool srv__list_has(const char *list, const char *v, size_t n, bool nocase)
{
    const char *item;
    size_t len;
    while (srv__list_next(&list, &item, &len))
        if (len == n && (nocase ? strncasecmp(item, v, n) == 0 : memcmp(item, v, n) == 0))
            return true;
    return false;
}

/* Normalise a list ("a ,b" -> "a, b"), each item checked by ok(); NULL
 * with *rc set when an item is refused or memory runs out. `star`: a lone
 * "*" is accepted and gives *any. */
static char *srv__list_copy(const char *list, bool (*ok)(const char *, size_t), bool star,
                            bool *any, int *rc)
{
    size_t cap = strlen(list) + 1, o = 0, items = 0;
    char *out = malloc(cap + 1);
    if (out == NULL) {
        *rc = SRV_ENOMEM;
        return NULL;
    }
    const char *p = list, *item;
    size_t len;
    bool saw_star = false;
    while (srv__list_next(&p, &item, &len)) {
        items++;
        if (len == 1 && item[0] == '*' && star)
            saw_star = true;
        else if (!ok(item, len))
            goto bad;
        o += (size_t)snprintf(out + o, cap + 1 - o, "%s%.*s", o ? ", " : "", (int)len, item);
    }
    if (items == 0 || (saw_star && items > 1))
        goto bad;
    if (any != NULL)
        *any = saw_star;
    return out;
bad:
    free(out);
    *rc = SRV_EINVAL;
    return NULL;
}

static bool srv__token_ok(const char *s, size_t n)
{
    return srv__http_is_token(s, n);
}

/* scheme "://" host [":" port], or "null": visible ASCII without ','. */
static bool srv__origin_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return false;
    return (n == 4 && memcmp(s, "null", 4) == 0) || memmem(s, n, "://", 3) != NULL;
}

static bool srv__cors_origin_allowed(const srv__cors *c, const char *origin)
{
    return c->origins == NULL || srv__list_has(c->origins, origin, strlen(origin), false);
}

static void srv__cors_allow_origin(const srv__cors *c, srv_request *req, const char *origin)
{
    srv_set_header(req, "Access-Control-Allow-Origin",
                   c->origins == NULL && !c->credentials ? "*" : origin);
    if (c->credentials)
        srv_set_header(req, "Access-Control-Allow-Credentials", "true");
}

static int srv__cors_refuse(srv_request *req)
{
    if (req->srv->cfg.error_format == SRV_ERROR_FORMAT_JSON || req->srv->error_body != NULL) {
        char body[SRV__ERROR_BODY_MAX];
        const char *ctype;
        size_t n = srv__error_body(req, 403, body, sizeof body, &ctype);
        srv_respond(req, 403, ctype, body, n);
        return SRV_FILTER_DONE;
    }
    static const char msg[] = "403 Forbidden: CORS preflight refused\n";
    srv_respond(req, 403, "text/plain; charset=utf-8", msg, sizeof msg - 1);
    return SRV_FILTER_DONE;
}

/* An actual request's answer headers (any answer: the application's, or the
 * core's own error before dispatch, dispatch.c). */
static void srv__cors_headers(srv_request *req, void *ctx)
{
    const srv__cors *c = ctx;
    const char *origin = srv_request_header(req, "Origin");
    srv_set_header(req, "Vary", "Origin");
    if (origin != NULL && srv__cors_origin_allowed(c, origin)) {
        srv__cors_allow_origin(c, req, origin);
        if (c->exposed != NULL)
            srv_set_header(req, "Access-Control-Expose-Headers", c->exposed);
    }
}

static int srv__cors_filter(srv_request *req, void *ctx)
{
    const srv__cors *c = ctx;
    const char *origin = srv_request_header(req, "Origin");
    const char *want = srv_request_header(req, "Access-Control-Request-Method");
    if (origin == NULL || want == NULL || strcmp(srv_request_method(req), "OPTIONS") != 0) {
        srv__cors_headers(req, ctx);
        return SRV_FILTER_NEXT;
    }

    /* A preflight: the browser asks before sending `want`. */
    srv_set_header(req, "Vary",
                   "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    if (!srv__cors_origin_allowed(c, origin) ||
        !srv__list_has(c->methods, want, strlen(want), false))
        return srv__cors_refuse(req);
    const char *asked = srv_request_header(req, "Access-Control-Request-Headers");
    if (asked != NULL && c->headers != NULL) {
        const char *p = asked, *item;
        size_t len;
        while (srv__list_next(&p, &item, &len))
            if (!srv__list_has(c->headers, item, len, true))
                return srv__cors_refuse(req);
    }
    srv__cors_allow_origin(c, req, origin);
    srv_set_header(req, "Access-Control-Allow-Methods", c->methods);
    if (c->headers != NULL)
        srv_set_header(req, "Access-Control-Allow-Headers", c->headers);
    else if (asked != NULL && asked[0] != '\0')
        srv_set_header(req, "Access-Control-Allow-Headers", asked);
    if (c->max_age >= 0)
        srv_set_header(req, "Access-Control-Max-Age", c->max_age_text);
    srv_respond(req, 204, NULL, NULL, 0);
    return SRV_FILTER_DONE;
}

void srv_cors_opts_init_sized(srv_cors_opts *opts, size_t size)
{
    if (opts == NULL || size < SRV__CORS_OPTS_MIN_SIZE || size > SRV__STRUCT_MAX_SIZE)
        return;
    memset(opts, 0, size);
    opts->size = size;
    opts->allowed_methods = "GET, HEAD, POST";
    opts->allowed_headers = "*";
    opts->max_age = 1800;
}

int srv_cors_add(srv_server *srv, const srv_cors_opts *opts)
{
    if (srv == NULL || opts == NULL || opts->size < SRV__CORS_OPTS_MIN_SIZE ||
        opts->size > SRV__STRUCT_MAX_SIZE)
        return SRV_EINVAL;
    srv_cors_opts o;
    srv_cors_opts_init(&o);
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    o.size = sizeof o;
    if (o.allowed_origins == NULL || o.allowed_methods == NULL || o.allowed_headers == NULL)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;

    srv__cors *c = calloc(1, sizeof *c);
    if (c == NULL)
        return SRV_ENOMEM;
    int rc = 0;
    bool any_origin = false, any_header = false;
    c->origins = srv__list_copy(o.allowed_origins, srv__origin_ok, true, &any_origin, &rc);
    if (c->origins != NULL)
        c->methods = srv__list_copy(o.allowed_methods, srv__token_ok, false, NULL, &rc);
    if (c->methods != NULL)
        c->headers = srv__list_copy(o.allowed_headers, srv__token_ok, true, &any_header, &rc);
    if (c->headers != NULL && o.exposed_headers != NULL)
        c->exposed = srv__list_copy(o.exposed_headers, srv__token_ok, false, NULL, &rc);
    if (rc != 0) {
        srv__cors_free(c);
        return rc;
    }
    if (any_origin) {
        free(c->origins);
        c->origins = NULL;
    }
    if (any_header) {
        free(c->headers);
        c->headers = NULL;
    }
    c->credentials = o.allow_credentials != 0;
    c->max_age = o.max_age;
    snprintf(c->max_age_text, sizeof c->max_age_text, "%d", o.max_age);

    srv__filter f = {.fn = srv__cors_filter, .ctx = c, .flags = SRV_FILTER_NONBLOCKING,
                     .free_ctx = srv__cors_free, .headers_fn = srv__cors_headers};
    rc = srv__router_add_filter(&srv->router, &f);
    if (rc != 0)
        srv__cors_free(c);
    return rc;
}
