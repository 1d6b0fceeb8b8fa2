/*
 * Request-target parsing and decoding (srv__request_set_target, then
 * srv_request_path / srv_request_query / srv_request_query_at as a handler
 * sees them): '+' and %XX in queries, UTF-8, invalid escapes kept, keys
 * without '=', repeated keys, path decoding, absolute-form, 400 and 414.
 */
#include "fake_engine.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static int handled_paths_ctx;

static int setup(void **state)
{
    fake *f = fake_new();
    srv_config cfg;
    fake_config(&cfg);
    cfg.max_uri_bytes = 64;
    srv_server *srv = fake_server(f, &cfg);
    /* Every path used below is routed to the capturing handler. */
    static const char *const paths[] = {"/p", "/q", "/a b", "/caf\xC3\xA9", "/a+b", "/x/y",
                                        "/"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (srv_route(srv, "GET", paths[i], fake_handler, &handled_paths_ctx) != 0)
            return -1;
    if (srv_server_start(srv) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fake *f = *state;
    fake_finish(f);
    fake_free(f);
    return 0;
}

/* GET target, looking up the given query names (NULL-terminated). */
static fake_req *get(fake *f, const char *target, const char *const *names)
{
    fake_req *r = fake_req_new(f, "GET", target);
    for (size_t i = 0; names && names[i]; i++)
        r->lookups[r->nlookups++] = names[i];
    int st = fake_send(r);
    if (st != 0)
        fail_msg("%s: the request was refused with %d", target, st);
    int got = fake_wait(r, FAKE_WAIT_MS);
    if (got != 200)
        fail_msg("%s: status %d, want 200 from the handler", target, got);
    return r;
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_pair(const fake_req *r, size_t i, const char *name, const char *value)
{
    if (i >= r->query_count)
        fail_msg("%s: only %zu parameters, want #%zu %s=%s", r->target, r->query_count, i,
                 name, value);
    assert_non_null(r->qname[i]);
    assert_non_null(r->qvalue[i]);
    if (strcmp(r->qname[i], name) != 0 || strcmp(r->qvalue[i], value) != 0)
        fail_msg("%s: parameter #%zu is \"%s\"=\"%s\", want \"%s\"=\"%s\"", r->target, i,
                 r->qname[i], r->qvalue[i], name, value);
}

static void expect_lookup(const fake_req *r, size_t i, const char *want)
{
    const char *got = r->lookup_val[i];
    if (want == NULL && got != NULL)
        fail_msg("%s: query(\"%s\") = \"%s\", want NULL", r->target, r->lookups[i], got);
    if (want != NULL && (got == NULL || strcmp(got, want) != 0))
        fail_msg("%s: query(\"%s\") = %s%s%s, want \"%s\"", r->target, r->lookups[i],
                 got ? "\"" : "", got ? got : "NULL", got ? "\"" : "", want);
}

static void test_basic_query(void **state)
{
    fake_req *r = get(*state, "/p?name=Ana", NAMES("name", "Name", "missing"));
    assert_string_equal(r->path_seen, "/p");
    assert_string_equal(r->target_seen, "/p?name=Ana");
    assert_int_equal(r->query_count, 1);
    expect_pair(r, 0, "name", "Ana");
    expect_lookup(r, 0, "Ana");
    expect_lookup(r, 1, NULL); /* names are exact */
    expect_lookup(r, 2, NULL);
    assert_int_equal(r->query_at_end_rc, SRV_EINVAL);
}

static void test_plus_is_space(void **state)
{
    fake_req *r = get(*state, "/p?name=Ana+Maria&b=a%2Bb", NAMES("name", "b"));
    expect_lookup(r, 0, "Ana Maria");
    expect_lookup(r, 1, "a+b"); /* an escaped '+' stays a plus */
}

static void test_percent_escapes(void **state)
{
    fake_req *r = get(*state, "/p?v=A%26B%3dC%20D&w=%41%62", NAMES("v", "w"));
    expect_lookup(r, 0, "A&B=C D"); /* either case of hex digits */
    expect_lookup(r, 1, "Ab");
    assert_int_equal(r->query_count, 2);
}

static void test_utf8(void **state)
{
    fake_req *r = get(*state, "/p?name=Jos%C3%A9&w=Ol%C3%A1", NAMES("name", "w"));
    expect_lookup(r, 0, "Jos\xC3\xA9");
    expect_lookup(r, 1, "Ol\xC3\xA1");
}

static void test_invalid_escapes_kept(void **state)
{
    fake_req *r = get(*state, "/p?a=%zz&b=x%4&c=%&d=%4g&e=100%25", NAMES("a", "b", "c", "d", "e"));
    expect_lookup(r, 0, "%zz");
    expect_lookup(r, 1, "x%4");
    expect_lookup(r, 2, "%");
    expect_lookup(r, 3, "%4g");
    expect_lookup(r, 4, "100%");
    assert_int_equal(r->query_count, 5);
}

static void test_key_without_value(void **state)
{
    fake_req *r = get(*state, "/p?flag&x=1&empty=&last", NAMES("flag", "x", "empty", "last"));
    expect_lookup(r, 0, "");
    expect_lookup(r, 1, "1");
    expect_lookup(r, 2, "");
    expect_lookup(r, 3, "");
    assert_int_equal(r->query_count, 4);
    expect_pair(r, 0, "flag", "");
    expect_pair(r, 1, "x", "1");
    expect_pair(r, 2, "empty", "");
    expect_pair(r, 3, "last", "");
}

static void test_value_with_equals(void **state)
{
    fake_req *r = get(*state, "/p?expr=a=b", NAMES("expr"));
    expect_lookup(r, 0, "a=b"); /* split at the first '=' */
}

static void test_empty_query(void **state)
{
    fake_req *r = get(*state, "/p?", NAMES("x"));
    assert_string_equal(r->path_seen, "/p");
    assert_int_equal(r->query_count, 0);
    expect_lookup(r, 0, NULL);
    assert_int_equal(r->query_at_end_rc, SRV_EINVAL);

    r = get(*state, "/p", NAMES("x"));
    assert_int_equal(r->query_count, 0);
    expect_lookup(r, 0, NULL);
    assert_string_equal(r->target_seen, "/p");
}

static void test_repeated_keys(void **state)
{
    fake_req *r = get(*state, "/p?a=1&b=2&a=3", NAMES("a", "b"));
    assert_int_equal(r->query_count, 3);
    expect_pair(r, 0, "a", "1");
    expect_pair(r, 1, "b", "2");
    expect_pair(r, 2, "a", "3");
    expect_lookup(r, 0, "1"); /* the first one */
    expect_lookup(r, 1, "2");
    assert_int_equal(r->query_at_end_rc, SRV_EINVAL);
}

static void test_empty_segments(void **state)
{
    fake_req *r = get(*state, "/p?a=1&&b=2&", NAMES("a", "b"));
    expect_lookup(r, 0, "1");
    expect_lookup(r, 1, "2");
}

static void test_path_decoding(void **state)
{
    fake *f = *state;
    fake_req *r = get(f, "/a%20b?x=1", NAMES("x"));
    assert_string_equal(r->path_seen, "/a b");
    assert_string_equal(r->target_seen, "/a%20b?x=1");
    expect_lookup(r, 0, "1");

    r = get(f, "/caf%C3%A9", NULL);
    assert_string_equal(r->path_seen, "/caf\xC3\xA9");

    r = get(f, "/a+b", NULL);
    assert_string_equal(r->path_seen, "/a+b"); /* '+' is only a space in queries */

    r = get(f, "/%78/%79", NULL);
    assert_string_equal(r->path_seen, "/x/y");

    /* An invalid escape in a path is refused by the router (400):
     * test_router_patterns.c; in a query it is kept (above). */
}

static void test_absolute_form(void **state)
{
    fake *f = *state;
    fake_req *r = get(f, "http://example.com/p?name=Ana", NAMES("name"));
    assert_string_equal(r->path_seen, "/p");
    assert_string_equal(r->target_seen, "http://example.com/p?name=Ana");
    expect_lookup(r, 0, "Ana");

    r = get(f, "http://example.com:8080/x/y", NULL);
    assert_string_equal(r->path_seen, "/x/y");
    assert_int_equal(r->query_count, 0);

    r = get(f, "http://example.com", NULL);
    assert_string_equal(r->path_seen, "/");
}

static void test_asterisk_form(void **state)
{
    /* "*" is a valid target (OPTIONS *); no route matches it. */
    fake *f = *state;
    fake_req *r = fake_req_new(f, "OPTIONS", "*");
    assert_int_equal(fake_send(r), 0);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 404);
}

/* A target the core must refuse with `status` before any handler runs. */
static void expect_refused(fake *f, const char *target, int status)
{
    fake_req *r = fake_req_new(f, "GET", target);
    int st = fake_send(r);
    if (st != status)
        fail_msg("target \"%s\": srv__request_set_target gave %d, want %d", target, st, status);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), status);
    assert_int_equal(r->handler_calls, 0);
    assert_int_equal(r->keep_alive, 0); /* srv__request_fail closes */
}

static void test_nul_in_path_is_400(void **state)
{
    expect_refused(*state, "/p%00", 400);
    expect_refused(*state, "/%00/p?x=1", 400);
}

static void test_malformed_targets_are_400(void **state)
{
    expect_refused(*state, "", 400);
    expect_refused(*state, "p?x=1", 400);
}

static void test_uri_limit_is_414(void **state)
{
    fake *f = *state;
    char target[80];
    /* Exactly max_uri_bytes (64) is fine. */
    memset(target, 'a', sizeof target);
    memcpy(target, "/p?x=", 5);
    target[64] = '\0';
    fake_req *r = get(f, target, NAMES("x"));
    assert_int_equal(strlen(r->lookup_val[0]), 64 - 5);

    /* One byte over: 414. */
    memset(target, 'a', sizeof target);
    memcpy(target, "/p?x=", 5);
    target[65] = '\0';
    expect_refused(f, target, 414);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_basic_query),
        T(test_plus_is_space),
        T(test_percent_escapes),
        T(test_utf8),
        T(test_invalid_escapes_kept),
        T(test_key_without_value),
        T(test_value_with_equals),
        T(test_empty_query),
        T(test_repeated_keys),
        T(test_empty_segments),
        T(test_path_decoding),
        T(test_absolute_form),
        T(test_asterisk_form),
        T(test_nul_in_path_is_400),
        T(test_malformed_targets_are_400),
        T(test_uri_limit_is_414),
#undef T
    };
    return cmocka_run_group_tests_name("query", tests, NULL, NULL);
}
