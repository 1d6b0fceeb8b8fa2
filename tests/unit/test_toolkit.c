/*
 * The engine toolkit of srv_engine.h: the clock and deadline arithmetic,
 * the max_connections gate, the canned refusal, and request-building
 * helpers that return HTTP statuses only.
 */
#include "fake_engine.h"
#include "srv_core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

static void test_ms_left(void **state)
{
    (void)state;
    assert_int_equal(srv__ms_left(1000, 400), 600);
    assert_int_equal(srv__ms_left(1000, 1000), 0);
    assert_int_equal(srv__ms_left(1000, 5000), 0); /* passed: no negative timeout */
    assert_int_equal(srv__ms_left(UINT64_MAX, 0), INT_MAX);
    uint64_t a = srv__now_ms(), b = srv__now_ms();
    assert_true(b >= a);
}

static void test_timespec_in(void **state)
{
    (void)state;
    struct timespec before, ts;
    clock_gettime(CLOCK_MONOTONIC, &before);
    srv__timespec_in(&ts, CLOCK_MONOTONIC, 1999);
    assert_true(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L);
    long long diff_ms = (long long)(ts.tv_sec - before.tv_sec) * 1000 +
                        (ts.tv_nsec - before.tv_nsec) / 1000000;
    assert_true(diff_ms >= 1999 && diff_ms < 2100);
}

static void test_admission(void **state)
{
    (void)state;
    fake *f = fake_new();
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.max_connections = 2;
    srv_server *srv = fake_server(f, &cfg);
    assert_true(srv__conn_admit(srv));
    assert_true(srv__conn_admit(srv));
    assert_false(srv__conn_admit(srv)); /* full: refused, no slot taken */
    assert_false(srv__conn_admit(srv));
    srv__conn_leave(srv);
    assert_true(srv__conn_admit(srv)); /* the slot given back is free again */
    assert_false(srv__conn_admit(srv));
    srv__conn_leave(srv);
    srv__conn_leave(srv);
    fake_free(f);
}

static void test_refusal(void **state)
{
    (void)state;
    size_t len = 0;
    const char *p = srv__refusal_503(&len);
    const char want[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                        "Connection: close\r\n\r\n";
    assert_int_equal(len, sizeof want - 1);
    assert_memory_equal(p, want, len);
}

/* Out of memory is not simulated here; what is checked is that every
 * failure a helper reports is an HTTP status an engine can send as is. */
static void test_helpers_return_statuses(void **state)
{
    (void)state;
    fake *f = fake_new();
    srv_server *srv = fake_server(f, NULL);
    srv_request *req = srv__request_new(srv, NULL, 0);
    assert_non_null(req);
    assert_int_equal(srv__request_set_method(req, "G T", 3), 400);
    assert_int_equal(srv__request_set_method(req, "GET", 3), 0);
    assert_int_equal(srv__request_set_target(req, "nope", 4), 400);
    assert_int_equal(srv__request_add_header(req, "Bad Name", 8, "v", 1), 400);
    srv__request_release(req);
    fake_free(f);
}

/* Every byte against RFC 9110 5.6.2's tchar, spelled out as the RFC does
 * (srv__http_is_tchar is a bitmap). */
static void test_tchar_every_byte(void **state)
{
    (void)state;
    static const char extra[] = "!#$%&'*+-.^_`|~";
    for (int c = -1; c <= 256; c++) {
        bool want = c >= 0 && c < 256 &&
                    ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                     (c != 0 && memchr(extra, c, sizeof extra - 1) != NULL));
        if (srv__http_is_tchar(c) != want)
            fail_msg("byte %d: tchar says %d", c, !want);
    }
    assert_true(srv__http_is_token("X-Custom_Header.1~", 18));
    assert_false(srv__http_is_token("a:b", 3));
    assert_false(srv__http_is_token("a\x80" "b", 3));
}

/* The byte rule srv__http_no_ctl must give, one byte at a time. */
static bool no_ctl_want(const unsigned char *s, size_t n, bool blank_ok)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == 0x7f || (s[i] < 0x20 && !(blank_ok && s[i] == '\t')) ||
            (s[i] == ' ' && !blank_ok))
            return false;
    }
    return true;
}

/* srv__http_no_ctl checks eight bytes at a time: every byte value at every position of
 * strings of 1 to 24 bytes (whole words, overlapping tails, padded short strings), on fills of
 * letters, obs-text (0x80, 0xff: the word test's ~x mask) and blanks, for targets and for
 * field values, against the byte rule; then every pair of a blank (tab or space) and a control
 * byte at different positions (a word the byte loop must read on from). Each string sits in a
 * buffer of its exact size, so a read past it is ASan's to see. */
static void no_ctl_case(const unsigned char *src, size_t n)
{
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    memcpy(buf, src, n);
    for (int blank_ok = 0; blank_ok <= 1; blank_ok++)
        if (srv__http_no_ctl((const char *)buf, n, blank_ok) != no_ctl_want(buf, n, blank_ok)) {
            char hex[3 * 24 + 1] = "";
            for (size_t i = 0; i < n; i++)
                snprintf(hex + 3 * i, 4, "%02x ", buf[i]);
            free(buf);
            fail_msg("%zu bytes %s(blank_ok %d): the byte rule says %d", n, hex, blank_ok,
                     no_ctl_want(src, n, blank_ok));
        }
    free(buf);
}

static void test_no_ctl_every_byte(void **state)
{
    (void)state;
    static const unsigned char fills[] = {'a', 0x80, 0xff, '~', '!', ' ', '\t'};
    static const unsigned char odd[] = {'\t', ' ', 0x00, 0x0d, 0x1f, 0x7f};
    unsigned char buf[24];
    for (size_t f = 0; f < sizeof fills; f++)
        for (size_t n = 1; n <= sizeof buf; n++)
            for (size_t at = 0; at < n; at++)
                for (int c = 0; c < 256; c++) {
                    memset(buf, fills[f], sizeof buf);
                    buf[at] = (unsigned char)c;
                    no_ctl_case(buf, n);
                }
    for (size_t n = 2; n <= sizeof buf; n++)
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++)
                for (size_t x = 0; x < 2; x++)
                    for (size_t y = 2; y < sizeof odd && a != b; y++) {
                        memset(buf, 'a', sizeof buf);
                        buf[a] = odd[x];
                        buf[b] = odd[y];
                        no_ctl_case(buf, n);
                    }
    assert_true(srv__http_no_ctl(NULL, 0, false));
#define NO_CTL(s, blank_ok) srv__http_no_ctl(s, sizeof s - 1, blank_ok)
    assert_true(NO_CTL("/a?b=\x80\xff&c=%20", false));
    assert_false(NO_CTL("/abcdefgh ijk", false));
    assert_true(NO_CTL("text/plain;\tq=1 x", true));
    assert_false(NO_CTL("text/plain;\tq=1 x", false));
    assert_false(NO_CTL("0123456789abcdef\x7f", true));
    assert_false(NO_CTL("\tabcdefghijklmno\x01", true)); /* a tab, then a control two words on */
#undef NO_CTL
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ms_left),
        cmocka_unit_test(test_timespec_in),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_refusal),
        cmocka_unit_test(test_helpers_return_statuses),
        cmocka_unit_test(test_tchar_every_byte),
        cmocka_unit_test(test_no_ctl_every_byte),
    };
    return cmocka_run_group_tests_name("engine toolkit", tests, NULL, NULL);
}
