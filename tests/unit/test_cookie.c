/*
 * Cookies, form bodies, media types and Accept negotiation (core/cookie.c)
 * on requests built by hand, hostile input included: separators in odd
 * places, empty names, quotes, escapes that decode to NUL, huge counts,
 * malformed q-values; and the Set-Cookie line srv_set_cookie writes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "srv_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ce_start(srv_server *srv, void **state)
{
    (void)srv;
    *state = NULL;
    return 0;
}
static void ce_respond(void *state, srv_request *req)
{
    (void)state;
    (void)req;
}
static void ce_nop(void *state)
{
    (void)state;
}

static const srv_engine ce_engine = {
    .version = SRV_ENGINE_VERSION,
    .name = "cookie-test",
    .start = ce_start,
    .respond = ce_respond,
    .quiesce = ce_nop,
    .stop = ce_nop,
    .destroy = ce_nop,
};

static srv_server *g_srv;

static int setup(void **state)
{
    (void)state;
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 1;
    g_srv = srv_server_new(&ce_engine, &cfg);
    return g_srv != NULL && srv_server_start(g_srv) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    srv_server_stop(g_srv, 0);
    srv_server_free(g_srv);
    return 0;
}

/* A POST with the header pairs given (NULL-ended) and a body. */
static srv_request *req_new(const char *body, ...)
{
    srv_request *req = srv__request_new(g_srv, NULL, 0);
    assert_non_null(req);
    assert_int_equal(srv__request_set_method(req, "POST", 4), 0);
    assert_int_equal(srv__request_set_target(req, "/f", 2), 0);
    srv__request_set_version(req, 1, 1);
    assert_int_equal(srv__request_add_header(req, "Host", 4, "t", 1), 0);
    va_list ap;
    va_start(ap, body);
    for (const char *n; (n = va_arg(ap, const char *)) != NULL;) {
        const char *v = va_arg(ap, const char *);
        assert_int_equal(srv__request_add_header(req, n, strlen(n), v, strlen(v)), 0);
    }
    va_end(ap);
    if (body != NULL)
        assert_int_equal(srv__request_append_body(req, body, strlen(body)), 0);
    return req;
}

static void req_free(srv_request *req)
{
    srv__request_release(req);
}

static void test_cookies(void **state)
{
    (void)state;
    srv_request *r = req_new(NULL, "Cookie", "a=1; b=two;c= \"q v\" ;  d=;=x;novalue; a=again",
                             "cookie", "e=5", NULL);
    assert_string_equal(srv_request_cookie(r, "a"), "1"); /* the first */
    assert_string_equal(srv_request_cookie(r, "b"), "two");
    assert_string_equal(srv_request_cookie(r, "c"), "q v"); /* quotes off */
    assert_string_equal(srv_request_cookie(r, "d"), "");
    assert_string_equal(srv_request_cookie(r, "e"), "5"); /* a second Cookie field */
    assert_null(srv_request_cookie(r, "A"));              /* names are case-sensitive */
    assert_null(srv_request_cookie(r, "novalue"));
    assert_null(srv_request_cookie(r, ""));
    assert_int_equal(srv_request_cookie_count(r), 6);
    const char *n, *v;
    assert_int_equal(srv_request_cookie_at(r, 4, &n, &v), 0);
    assert_string_equal(n, "a");
    assert_string_equal(v, "again");
    assert_int_equal(srv_request_cookie_at(r, 6, &n, &v), SRV_EINVAL);
    req_free(r);

    r = req_new(NULL, NULL);
    assert_null(srv_request_cookie(r, "a"));
    assert_int_equal(srv_request_cookie_count(r), 0);
    req_free(r);

    /* Separators only, and a flood of tiny cookies. */
    r = req_new(NULL, "Cookie", ";;; ; = ;=;", NULL);
    assert_int_equal(srv_request_cookie_count(r), 0);
    req_free(r);
    char *flood = malloc(6 * 2000 + 1);
    size_t o = 0;
    for (int i = 0; i < 2000; i++)
        o += (size_t)sprintf(flood + o, "%c=%d;", 'a' + i % 26, i % 10);
    r = req_new(NULL, "Cookie", flood, NULL);
    assert_int_equal(srv_request_cookie_count(r), 2000);
    assert_string_equal(srv_request_cookie(r, "z"), "5");
    req_free(r);
    free(flood);
}

static void test_form(void **state)
{
    (void)state;
    srv_request *r = req_new("name=Ana+Maria&city=S%C3%A3o%20Paulo&flag&empty=&name=2&=v&&bad=%00x&k=%zz",
                             "Content-Type", "Application/X-WWW-Form-Urlencoded; charset=utf-8",
                             NULL);
    assert_string_equal(srv_request_form(r, "name"), "Ana Maria");
    assert_string_equal(srv_request_form(r, "city"), "São Paulo");
    assert_string_equal(srv_request_form(r, "flag"), "");
    assert_string_equal(srv_request_form(r, "empty"), "");
    assert_null(srv_request_form(r, "bad"));              /* a NUL: skipped */
    assert_string_equal(srv_request_form(r, "k"), "%zz"); /* invalid escapes kept */
    assert_string_equal(srv_request_form(r, ""), "v");
    const char *n, *v;
    assert_int_equal(srv_request_form_count(r), 7);
    assert_int_equal(srv_request_form_at(r, 4, &n, &v), 0);
    assert_string_equal(n, "name");
    assert_string_equal(v, "2");
    assert_int_equal(srv_request_form_at(r, 7, &n, &v), SRV_EINVAL);
    assert_null(srv_request_query(r, "name")); /* the query is another thing */
    req_free(r);

    /* Another type, or no body: no fields. */
    r = req_new("name=x", "Content-Type", "application/json", NULL);
    assert_null(srv_request_form(r, "name"));
    assert_int_equal(srv_request_form_count(r), 0);
    req_free(r);
    r = req_new(NULL, "Content-Type", "application/x-www-form-urlencoded", NULL);
    assert_int_equal(srv_request_form_count(r), 0);
    req_free(r);
}

static void test_media_type(void **state)
{
    (void)state;
    assert_true(srv_media_type_is("application/json", "application/json"));
    assert_true(srv_media_type_is(" Application/JSON ; charset=utf-8", "application/json"));
    assert_false(srv_media_type_is("application/jsonx", "application/json"));
    assert_false(srv_media_type_is("application/json", "application/js"));
    assert_false(srv_media_type_is("", ""));
    assert_false(srv_media_type_is(NULL, "text/plain"));
}

static void test_negotiate(void **state)
{
    (void)state;
    const char *offered[] = {"application/json", "text/html", NULL};
    const char *none[] = {NULL};
    struct {
        const char *accept; /* NULL: no Accept header */
        const char *want;   /* NULL: not acceptable */
    } cases[] = {
        {NULL, "application/json"},
        {"", "application/json"},
        {"text/html", "text/html"},
        {"text/html;q=0.9, application/json;q=0.8", "text/html"},
        {"*/*", "application/json"},
        {"text/*, application/json;q=0.5", "text/html"},
        {"application/*;q=0.2, text/html;q=0.1", "application/json"},
        {"application/json;q=0, */*;q=0.1", "text/html"}, /* exact range beats the wildcard */
        {"image/png", NULL},
        {"application/json;q=0", NULL},
        {"application/json;q=2, text/html;q=0.001", "text/html"}, /* a bad q matches nothing */
        {"application/json;q=0.1234", NULL},
        {"application/json;q=1.001", NULL},
        {"TEXT/HTML;Q=1.000", "text/html"},
        {",,, ;;, text/html", "text/html"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_request *r = cases[i].accept ? req_new(NULL, "Accept", cases[i].accept, NULL)
                                         : req_new(NULL, NULL);
        const char *got = srv_request_negotiate(r, offered);
        if (cases[i].want == NULL ? got != NULL : got == NULL || strcmp(got, cases[i].want) != 0)
            fail_msg("Accept: %s -> %s, want %s", cases[i].accept ? cases[i].accept : "(none)",
                     got ? got : "NULL", cases[i].want ? cases[i].want : "NULL");
        assert_null(srv_request_negotiate(r, none));
        req_free(r);
    }
}

/* The Set-Cookie lines srv_set_cookie adds, read back from the request's
 * response headers. */
static const char *last_set_cookie(srv_request *r)
{
    const char *last = NULL;
    for (size_t i = 0;; i++) {
        const char *v = NULL, *n = srv__response_header_at(r, i, &v);
        if (n == NULL)
            return last;
        if (strcmp(n, "Set-Cookie") == 0)
            last = v;
    }
}

static void test_set_cookie(void **state)
{
    (void)state;
    srv_request *r = req_new(NULL, NULL);
    assert_int_equal(srv_set_cookie(r, "sid", "abc123", NULL), 0);
    assert_string_equal(last_set_cookie(r), "sid=abc123");
    srv_cookie_opts o;
    srv_cookie_opts_init(&o);
    o.max_age = 3600;
    o.path = "/";
    o.domain = "example.com";
    o.secure = 1;
    o.http_only = 1;
    o.same_site = SRV_SAMESITE_STRICT;
    assert_int_equal(srv_set_cookie(r, "sid", "v", &o), 0);
    assert_string_equal(last_set_cookie(r),
                        "sid=v; Max-Age=3600; Path=/; Domain=example.com; Secure; HttpOnly; "
                        "SameSite=Strict");
    srv_cookie_opts_init(&o);
    o.max_age = 0;
    assert_int_equal(srv_set_cookie(r, "gone", "", &o), 0);
    assert_string_equal(last_set_cookie(r), "gone=; Max-Age=0");

    /* Refused: what would break the header or the cookie's meaning. */
    const char *bad_values[] = {"a b", "a;b", "a,b", "a\"b", "a\\b", "a\rb", "caf\xc3\xa9"};
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++)
        assert_int_equal(srv_set_cookie(r, "x", bad_values[i], NULL), SRV_EHEADER);
    assert_int_equal(srv_set_cookie(r, "a b", "v", NULL), SRV_EHEADER);
    assert_int_equal(srv_set_cookie(r, "", "v", NULL), SRV_EHEADER);
    assert_int_equal(srv_set_cookie(r, "a=b", "v", NULL), SRV_EHEADER);
    srv_cookie_opts_init(&o);
    o.path = "/x; Secure";
    assert_int_equal(srv_set_cookie(r, "x", "v", &o), SRV_EHEADER);
    srv_cookie_opts_init(&o);
    o.same_site = SRV_SAMESITE_NONE; /* without Secure */
    assert_int_equal(srv_set_cookie(r, "x", "v", &o), SRV_EINVAL);
    o.secure = 1;
    assert_int_equal(srv_set_cookie(r, "x", "v", &o), 0);
    assert_string_equal(last_set_cookie(r), "x=v; Secure; SameSite=None");
    o.same_site = 7;
    assert_int_equal(srv_set_cookie(r, "x", "v", &o), SRV_EINVAL);
    srv_cookie_opts_init(&o);
    o.max_age = -2;
    assert_int_equal(srv_set_cookie(r, "x", "v", &o), SRV_EINVAL);
    o.size = 0; /* not from srv_cookie_opts_init */
    assert_int_equal(srv_set_cookie(r, "x", "v", &o), SRV_EINVAL);
    assert_int_equal(srv_set_cookie(NULL, "x", "v", NULL), SRV_EINVAL);
    assert_int_equal(srv_set_cookie(r, "x", NULL, NULL), SRV_EINVAL);
    req_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cookies),     cmocka_unit_test(test_form),
        cmocka_unit_test(test_media_type),  cmocka_unit_test(test_negotiate),
        cmocka_unit_test(test_set_cookie),
    };
    return cmocka_run_group_tests_name("cookies, forms, media types", tests, setup, teardown);
}
