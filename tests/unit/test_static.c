/*
 * Static files, the parts without a server (static_http.c, static.c's
 * open): Range parsing (every form, overflowing and huge numbers,
 * garbage), If-None-Match / If-Range matching, HTTP dates, the types, the
 * path check, and opening below a root with openat2 and with the fallback
 * (symbolic links inside and outside, absolute paths, fifos).
 */
#include "srv_core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static int range(const char *v, uint64_t size, uint64_t *a, uint64_t *b)
{
    *a = *b = 777;
    return srv__range_parse(v, size, a, b);
}

#define RANGE_ONE(v, size, want_a, want_b)                                   \
    do {                                                                     \
        uint64_t a_, b_;                                                     \
        assert_int_equal(range((v), (size), &a_, &b_), SRV__RANGE_ONE);      \
        assert_int_equal(a_, (want_a));                                      \
        assert_int_equal(b_, (want_b));                                      \
    } while (0)

#define RANGE_IS(v, size, want)                                              \
    do {                                                                     \
        uint64_t a_, b_;                                                     \
        assert_int_equal(range((v), (size), &a_, &b_), (want));              \
    } while (0)

static void test_range_forms(void **state)
{
    (void)state;
    RANGE_ONE("bytes=0-9", 100, 0, 9);
    RANGE_ONE("bytes=10-", 100, 10, 99);
    RANGE_ONE("bytes=-10", 100, 90, 99);
    RANGE_ONE("bytes=99-99", 100, 99, 99);
    RANGE_ONE("bytes=50-1000", 100, 50, 99);  /* last clamped */
    RANGE_ONE("bytes=-1000", 100, 0, 99);     /* suffix longer than the file */
    RANGE_ONE("BYTES=1-2", 100, 1, 2);        /* the unit is case-insensitive */
    RANGE_ONE("bytes= 1-2 ", 100, 1, 2);      /* OWS */
    RANGE_ONE("bytes=1-2,", 100, 1, 2);       /* empty list elements */
    RANGE_ONE("bytes=,1-2", 100, 1, 2);
}

static void test_range_unsatisfiable(void **state)
{
    (void)state;
    RANGE_IS("bytes=100-", 100, SRV__RANGE_UNSAT);
    RANGE_IS("bytes=100-200", 100, SRV__RANGE_UNSAT);
    RANGE_IS("bytes=-0", 100, SRV__RANGE_UNSAT);
    RANGE_IS("bytes=0-0", 0, SRV__RANGE_UNSAT);  /* an empty file has no byte */
    RANGE_IS("bytes=-5", 0, SRV__RANGE_UNSAT);
    /* Overflow saturates: past any file, never wraps to a small number. */
    RANGE_IS("bytes=99999999999999999999999999-", 100, SRV__RANGE_UNSAT);
    RANGE_IS("bytes=18446744073709551616-", 100, SRV__RANGE_UNSAT); /* 2^64 */
    RANGE_ONE("bytes=0-99999999999999999999999999", 100, 0, 99);
    RANGE_ONE("bytes=-99999999999999999999999999", 100, 0, 99);
    RANGE_ONE("bytes=18446744073709551614-18446744073709551615", UINT64_MAX,
              UINT64_MAX - 1, UINT64_MAX - 1);
}

static void test_range_ignored(void **state)
{
    (void)state;
    /* Whole file (200): no header, another unit, bad syntax, several ranges. */
    RANGE_IS(NULL, 100, SRV__RANGE_NONE);
    RANGE_IS("", 100, SRV__RANGE_NONE);
    RANGE_IS("items=0-1", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=-", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=a-b", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=5-2", 100, SRV__RANGE_NONE);  /* last < first: invalid */
    RANGE_IS("bytes=1-2x", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=1--2", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=+1-2", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=1 -2", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=0-1,5-6", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=0-1,-5", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=0-1,junk", 100, SRV__RANGE_NONE);
    RANGE_IS("bytes=200-300,0-1", 100, SRV__RANGE_NONE);
}

static void test_etag_match(void **state)
{
    (void)state;
    const char *e = "\"a1-2b-3c\"";
    assert_true(srv__etag_list_match("\"a1-2b-3c\"", e));
    assert_true(srv__etag_list_match("W/\"a1-2b-3c\"", e)); /* weak comparison */
    assert_true(srv__etag_list_match("\"x\", \"a1-2b-3c\"", e));
    assert_true(srv__etag_list_match("\"x\",W/\"a1-2b-3c\" , \"y\"", e));
    assert_true(srv__etag_list_match("*", e));
    assert_true(srv__etag_list_match(" * ", e));
    assert_true(srv__etag_list_match(", ,\"a1-2b-3c\"", e));
    assert_false(srv__etag_list_match("\"a1-2b-3d\"", e));
    assert_false(srv__etag_list_match("\"a1-2b-3c", e));     /* unterminated */
    assert_false(srv__etag_list_match("a1-2b-3c", e));       /* unquoted */
    assert_false(srv__etag_list_match("\"x\" junk, \"a1-2b-3c\"", e)); /* bad syntax stops */
    assert_false(srv__etag_list_match("*, \"x\"", e));
    assert_false(srv__etag_list_match("", e));
    assert_false(srv__etag_list_match("\"a1 2b\"", "\"a1 2b\"")); /* SP is not etagc */

    /* If-Range: strong comparison, or the exact date. */
    int64_t t = 784111777; /* Sun, 06 Nov 1994 08:49:37 GMT */
    assert_true(srv__if_range_match(NULL, e, t, t + 2));
    assert_true(srv__if_range_match("\"a1-2b-3c\"", e, t, t + 2));
    assert_false(srv__if_range_match("W/\"a1-2b-3c\"", e, t, t + 2));
    assert_false(srv__if_range_match("\"other\"", e, t, t + 2));
    assert_true(srv__if_range_match("Sun, 06 Nov 1994 08:49:37 GMT", e, t, t + 2));
    assert_false(srv__if_range_match("Sun, 06 Nov 1994 08:49:38 GMT", e, t, t + 2));
    assert_false(srv__if_range_match("garbage", e, t, t + 2));
    /* A date of the last second is not a strong validator: whole file. */
    assert_false(srv__if_range_match("Sun, 06 Nov 1994 08:49:37 GMT", e, t, t));
    assert_false(srv__if_range_match("Sun, 06 Nov 1994 08:49:37 GMT", e, t, t + 1));
    /* An entity tag stays strong whenever the file changed. */
    assert_true(srv__if_range_match("\"a1-2b-3c\"", e, t, t));
}

static void test_etag_and_dates(void **state)
{
    (void)state;
    char etag[64], d[30];
    srv__static_etag(0x1234, 4096, 1, 5, etag);
    assert_string_equal(etag, "\"1234-1000-3b9aca05\"");
    srv__static_etag(UINT64_MAX, UINT64_MAX, INT32_MAX, 999999999, etag);
    assert_true(strlen(etag) < 64);
    srv__static_date(784111777, d);
    assert_string_equal(d, "Sun, 06 Nov 1994 08:49:37 GMT");
    srv__static_date(0, d);
    assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
    int64_t t = 0;
    assert_true(srv__static_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", &t));
    assert_int_equal(t, 784111777);
    assert_true(srv__static_date_parse("Tue, 29 Feb 2028 23:59:59 GMT", &t));
    srv__static_date(t, d);
    assert_string_equal(d, "Tue, 29 Feb 2028 23:59:59 GMT");
    /* The obsolete forms RFC 9110 5.6.7 has recipients accept: the same time. */
    int64_t t850 = 0, tasc = 0, timf = 0;
    assert_true(srv__static_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", &timf));
    assert_true(srv__static_date_parse("Sunday, 06-Nov-94 08:49:37 GMT", &t850)); /* RFC 850 */
    assert_true(srv__static_date_parse("Sun Nov  6 08:49:37 1994", &tasc));       /* asctime */
    assert_int_equal(t850, timf);
    assert_int_equal(tasc, timf);
    assert_true(srv__static_date_parse("Thu Dec 31 23:59:59 2037", &tasc));
    assert_true(srv__static_date_parse("Thursday, 31-Dec-37 23:59:59 GMT", &t850));
    assert_int_equal(t850, tasc); /* 37: within 50 years ahead, so 2037 */
    assert_true(srv__static_date_parse("Friday, 31-Dec-99 23:59:59 GMT", &t850));
    assert_true(srv__static_date_parse("Fri Dec 31 23:59:59 1999", &tasc));
    assert_int_equal(t850, tasc); /* 99: more than 50 years ahead, so 1999 */
    assert_false(srv__static_date_parse("Sunday, 06-Nov-94 08:49:37 UTC", &t));
    assert_false(srv__static_date_parse("Sundae, 06-Nov-94 08:49:37 GMT", &t));
    assert_false(srv__static_date_parse("Sunday, 06-Nov-1994 08:49:37 GMT", &t));
    assert_false(srv__static_date_parse("Sun Nov 6 08:49:37 1994", &t));
    assert_false(srv__static_date_parse("Sun Nov  6 08:49:37 1994 ", &t));
    assert_false(srv__static_date_parse("Sun Xyz  6 08:49:37 1994", &t));
    assert_false(srv__static_date_parse("Sun Nov  6 08-49:37 1994", &t));
    assert_false(srv__static_date_parse("Sun, 06 Nov 1994 08:49:37 UTC", &t));
    assert_false(srv__static_date_parse("Sun, 06 Xyz 1994 08:49:37 GMT", &t));
    assert_false(srv__static_date_parse("Sun, 6a Nov 1994 08:49:37 GMT", &t));
    assert_false(srv__static_date_parse("Sun, 06 Nov 1994 25:49:37 GMT", &t));
    assert_false(srv__static_date_parse("", &t));
    assert_false(srv__static_date_parse(NULL, &t));
}

static void test_mime(void **state)
{
    (void)state;
    assert_string_equal(srv__static_mime("index.html"), "text/html; charset=utf-8");
    assert_string_equal(srv__static_mime("a/b/site.CSS"), "text/css; charset=utf-8");
    assert_string_equal(srv__static_mime("app.js"), "text/javascript; charset=utf-8");
    assert_string_equal(srv__static_mime("d.json"), "application/json");
    assert_string_equal(srv__static_mime("i.svg"), "image/svg+xml");
    assert_string_equal(srv__static_mime("p.png"), "image/png");
    assert_string_equal(srv__static_mime("p.jpeg"), "image/jpeg");
    assert_string_equal(srv__static_mime("m.wasm"), "application/wasm");
    assert_string_equal(srv__static_mime("f.woff2"), "font/woff2");
    assert_string_equal(srv__static_mime("x.tar.gz"), "application/gzip");
    assert_string_equal(srv__static_mime("noext"), "application/octet-stream");
    assert_string_equal(srv__static_mime(".bashrc"), "application/octet-stream");
    assert_string_equal(srv__static_mime("dir.html/file"), "application/octet-stream");
    assert_string_equal(srv__static_mime("x.unknownext"), "application/octet-stream");
    assert_string_equal(srv__static_mime("trailing."), "application/octet-stream");
}

static void test_path_ok(void **state)
{
    (void)state;
    assert_true(srv__static_path_ok("/static/a/b.css", "a/b.css"));
    assert_true(srv__static_path_ok("/static/", ""));
    assert_true(srv__static_path_ok("/static/a%20b?x=%2F", "a b")); /* the query does not count */
    assert_true(srv__static_path_ok("/static/..a/b..", "..a/b.."));
    assert_false(srv__static_path_ok("/static/a%2fb", "a/b"));
    assert_false(srv__static_path_ok("/static/a%2Fb", "a/b"));
    assert_false(srv__static_path_ok("/static//etc/passwd", "/etc/passwd"));
    assert_false(srv__static_path_ok("/static/x", "a/../b"));
    assert_false(srv__static_path_ok("/static/x", ".."));
    assert_false(srv__static_path_ok("/static/x", "a/."));
    assert_false(srv__static_path_ok("/static/x", NULL));
}

/* ---- opening below a root -------------------------------------------------- */

static char g_dir[64];

static int open_setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/srv-static-unit-XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        return -1;
    char p[160], q[160];
    snprintf(p, sizeof p, "%s/root", g_dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/root/sub", g_dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/secret", g_dir);
    FILE *fp = fopen(p, "w");
    if (fp == NULL)
        return -1;
    fputs("secret\n", fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/root/sub/f.txt", g_dir);
    fp = fopen(p, "w");
    if (fp == NULL)
        return -1;
    fputs("inside\n", fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/root/in", g_dir);
    if (symlink("sub/f.txt", p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/root/out", g_dir);
    snprintf(q, sizeof q, "%s/secret", g_dir);
    if (symlink(q, p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/root/up", g_dir);
    if (symlink("../secret", p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/root/updir", g_dir);
    if (symlink("..", p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/root/fifo", g_dir);
    if (mkfifo(p, 0644) != 0)
        return -1;
    return 0;
}

static int open_teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void check_open(bool use_openat2)
{
    char root[160], real[4096];
    snprintf(root, sizeof root, "%s/root", g_dir);
    assert_non_null(realpath(root, real));
    int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    assert_true(rootfd >= 0);
    char buf[16] = {0};

    int fd = srv__static_open(rootfd, real, "sub/f.txt", use_openat2);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, sizeof buf - 1), 7);
    assert_string_equal(buf, "inside\n");
    close(fd);
    fd = srv__static_open(rootfd, real, "in", use_openat2); /* a link inside */
    assert_true(fd >= 0);
    close(fd);
    fd = srv__static_open(rootfd, real, ".", use_openat2);
    assert_true(fd >= 0);
    close(fd);
    /* Out of the root: refused (EXDEV), whatever the way. */
    assert_int_equal(srv__static_open(rootfd, real, "out", use_openat2), -EXDEV);
    assert_int_equal(srv__static_open(rootfd, real, "up", use_openat2), -EXDEV);
    assert_int_equal(srv__static_open(rootfd, real, "updir/secret", use_openat2), -EXDEV);
    assert_int_equal(srv__static_open(rootfd, real, "../secret", use_openat2), -EXDEV);
    assert_int_equal(srv__static_open(rootfd, real, "/etc/passwd", use_openat2), -EXDEV);
    assert_int_equal(srv__static_open(rootfd, real, "sub/../../secret", use_openat2), -EXDEV);
    assert_int_equal(srv__static_open(rootfd, real, "missing", use_openat2), -ENOENT);
    /* A fifo opens at once (O_NONBLOCK), for the caller to refuse by type. */
    fd = srv__static_open(rootfd, real, "fifo", use_openat2);
    assert_true(fd >= 0);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    close(fd);
    close(rootfd);
}

static void test_open_openat2(void **state)
{
    (void)state;
    check_open(true);
}

static void test_open_fallback(void **state)
{
    (void)state;
    check_open(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_forms),
        cmocka_unit_test(test_range_unsatisfiable),
        cmocka_unit_test(test_range_ignored),
        cmocka_unit_test(test_etag_match),
        cmocka_unit_test(test_etag_and_dates),
        cmocka_unit_test(test_mime),
        cmocka_unit_test(test_path_ok),
        cmocka_unit_test_setup_teardown(test_open_openat2, open_setup, open_teardown),
        cmocka_unit_test_setup_teardown(test_open_fallback, open_setup, open_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
