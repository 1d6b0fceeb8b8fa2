/*
 * The router through the public API (srv_route) and the fake engine:
 * exact method + decoded path matching, 404, 405 with Allow, HEAD on GET
 * routes, duplicate and late routes, argument checks.
 */
#include "fake_engine.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

/* Route contexts tell which route answered. */
static int ctx_get_a, ctx_post_a, ctx_root, ctx_space, ctx_get_b, ctx_custom, ctx_head_c,
    ctx_get_c, ctx_utf8;

static srv_server *routed(fake *f)
{
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/a", fake_handler, &ctx_get_a), 0);
    assert_int_equal(srv_route(srv, "POST", "/a", fake_handler, &ctx_post_a), 0);
    assert_int_equal(srv_route(srv, "GET", "/", fake_handler, &ctx_root), 0);
    assert_int_equal(srv_route(srv, "GET", "/a b", fake_handler, &ctx_space), 0);
    assert_int_equal(srv_route(srv, "GET", "/a/b", fake_handler, &ctx_get_b), 0);
    assert_int_equal(srv_route(srv, "PROPFIND", "/dav", fake_handler, &ctx_custom), 0);
    assert_int_equal(srv_route(srv, "HEAD", "/c", fake_handler, &ctx_head_c), 0);
    assert_int_equal(srv_route(srv, "GET", "/c", fake_handler, &ctx_get_c), 0);
    assert_int_equal(srv_route(srv, "GET", "/caf\xC3\xA9", fake_handler, &ctx_utf8), 0);
    fake_start(f, NULL);
    return srv;
}

/* Send method+target; check the status and which route answered. */
static fake_req *expect(fake *f, const char *method, const char *target, int status, void *ctx)
{
    fake_req *r = fake_req_new(f, method, target);
    assert_int_equal(fake_send(r), 0);
    int got = fake_wait(r, FAKE_WAIT_MS);
    if (got != status)
        fail_msg("%s %s: status %d, want %d", method, target, got, status);
    if (ctx != NULL) {
        assert_int_equal(r->handler_calls, 1);
        if (r->handler_ctx != ctx)
            fail_msg("%s %s: answered by the wrong route", method, target);
    } else {
        assert_int_equal(r->handler_calls, 0);
    }
    return r;
}

static void test_exact_match(void **state)
{
    fake *f = *state;
    routed(f);
    expect(f, "GET", "/a", 200, &ctx_get_a);
    expect(f, "POST", "/a", 200, &ctx_post_a);
    expect(f, "GET", "/", 200, &ctx_root);
    expect(f, "GET", "/a/b", 200, &ctx_get_b);
    expect(f, "GET", "/a?x=1&y", 200, &ctx_get_a); /* the query is not the path */
    expect(f, "GET", "/a%20b", 200, &ctx_space);    /* matched on the decoded path */
    expect(f, "GET", "/caf%C3%A9", 200, &ctx_utf8);
    expect(f, "GET", "/%61", 200, &ctx_get_a);
    expect(f, "PROPFIND", "/dav", 200, &ctx_custom);
    fake_finish(f);
}

static void test_near_misses_are_404(void **state)
{
    fake *f = *state;
    routed(f);
    expect(f, "GET", "/a/", 404, NULL); /* no prefix or slash folding */
    expect(f, "GET", "/ab", 404, NULL);
    expect(f, "GET", "/A", 404, NULL);  /* case-sensitive */
    expect(f, "GET", "/a/b/c", 404, NULL);
    expect(f, "GET", "//a", 404, NULL);
    expect(f, "GET", "/a+b", 404, NULL); /* '+' is not a space in a path */
    expect(f, "GET", "/nothing", 404, NULL);
    expect(f, "DELETE", "/nothing", 404, NULL); /* unknown path: 404, not 405 */
    fake_finish(f);
}

static void test_method_mismatch_is_405_with_allow(void **state)
{
    fake *f = *state;
    routed(f);
    /* OPTIONS is answered automatically (204 + Allow): test_router_patterns.c. */
    const char *methods[] = {"PUT", "DELETE", "get", "PROPFIND"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        fake_req *r = expect(f, methods[i], "/a", 405, NULL);
        const char *allow = fake_resp_header(r, "Allow");
        if (allow == NULL)
            fail_msg("%s /a: 405 without an Allow header", methods[i]);
        assert_non_null(strstr(allow, "GET"));
        assert_non_null(strstr(allow, "POST"));
        assert_null(strstr(allow, "PROPFIND"));
        assert_null(strstr(allow, "PUT"));
        assert_null(strstr(allow, "DELETE"));
        assert_int_equal(fake_head_header(r, "Allow", NULL, 0), 1);
    }
    /* A path with one custom method. */
    fake_req *r = expect(f, "GET", "/dav", 405, NULL);
    assert_non_null(fake_resp_header(r, "Allow"));
    assert_non_null(strstr(fake_resp_header(r, "Allow"), "PROPFIND"));
    fake_finish(f);
}

static void test_head_routes(void **state)
{
    fake *f = *state;
    routed(f);
    /* HEAD falls back to the GET route, without a body. */
    fake_req *r = expect(f, "HEAD", "/a", 200, &ctx_get_a);
    assert_string_equal(r->method_seen, "HEAD");
    assert_int_equal(r->body_out_len, 0);
    assert_int_equal(r->content_length, 2); /* "ok" */
    /* An explicit HEAD route wins over the GET one. */
    expect(f, "HEAD", "/c", 200, &ctx_head_c);
    expect(f, "GET", "/c", 200, &ctx_get_c);
    /* No GET route: HEAD is not allowed either. */
    expect(f, "HEAD", "/dav", 405, NULL);
    expect(f, "HEAD", "/nothing", 404, NULL);
    fake_finish(f);
}

static void test_duplicates_rejected(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/d", fake_handler, &ctx_get_a), 0);
    assert_int_equal(srv_route(srv, "GET", "/d", fake_handler, &ctx_get_b), SRV_EEXIST);
    assert_int_equal(srv_route(srv, "POST", "/d", fake_handler, &ctx_post_a), 0);
    assert_int_equal(srv_route(srv, "GET", "/d/", fake_handler, &ctx_root), 0);
    assert_int_equal(srv_route(srv, "get", "/d", fake_handler, &ctx_custom), 0); /* case */
    assert_int_equal(srv_route(srv, "POST", "/d", fake_handler, NULL), SRV_EEXIST);
    fake_start(f, NULL);
    /* The first registration is the one kept. */
    expect(f, "GET", "/d", 200, &ctx_get_a);
    expect(f, "POST", "/d", 200, &ctx_post_a);
    expect(f, "GET", "/d/", 200, &ctx_root);
    expect(f, "get", "/d", 200, &ctx_custom);
    fake_finish(f);
}

static void test_route_after_start(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/x", fake_handler, NULL), 0);
    fake_start(f, NULL);
    assert_int_equal(srv_route(srv, "GET", "/y", fake_handler, NULL), SRV_ESTATE);
    expect(f, "GET", "/y", 404, NULL); /* and it was not added */
    assert_int_equal(srv_server_stop(srv, 0), 0);
    assert_int_equal(srv_route(srv, "GET", "/z", fake_handler, NULL), SRV_ESTATE);
    fake_finish(f);
}

static void test_bad_arguments(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(NULL, "GET", "/p", fake_handler, NULL), SRV_EINVAL);
    assert_int_equal(srv_route(srv, NULL, "/p", fake_handler, NULL), SRV_EINVAL);
    assert_int_equal(srv_route(srv, "", "/p", fake_handler, NULL), SRV_EINVAL);
    assert_int_equal(srv_route(srv, "GET", NULL, fake_handler, NULL), SRV_EINVAL);
    assert_int_equal(srv_route(srv, "GET", "", fake_handler, NULL), SRV_EINVAL);
    assert_int_equal(srv_route(srv, "GET", "p", fake_handler, NULL), SRV_EINVAL);
    assert_int_equal(srv_route(srv, "GET", "http://h/p", fake_handler, NULL), SRV_EINVAL);
    assert_int_equal(srv_route(srv, "GET", "/p", NULL, NULL), SRV_EINVAL);
    /* None of those was registered. */
    fake_start(f, NULL);
    expect(f, "GET", "/p", 404, NULL);
    fake_finish(f);
}

static void test_route_strings_are_copied(void **state)
{
    fake *f = *state;
    char method[8] = "GET", path[16] = "/copied";
    srv_server *srv = fake_server(f, NULL);
    assert_int_equal(srv_route(srv, method, path, fake_handler, &ctx_get_a), 0);
    strcpy(method, "PUT");
    strcpy(path, "/changed");
    fake_start(f, NULL);
    expect(f, "GET", "/copied", 200, &ctx_get_a);
    expect(f, "GET", "/changed", 404, NULL);
    fake_finish(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_exact_match),
        T(test_near_misses_are_404),
        T(test_method_mismatch_is_405_with_allow),
        T(test_head_routes),
        T(test_duplicates_rejected),
        T(test_route_after_start),
        T(test_bad_arguments),
        T(test_route_strings_are_copied),
#undef T
    };
    return cmocka_run_group_tests_name("router", tests, NULL, NULL);
}
