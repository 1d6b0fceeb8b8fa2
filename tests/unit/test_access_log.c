/*
 * The access log (core/access_log.c): Common, Combined and JSON lines, a
 * file reopened for logrotate, and hostile bytes that cannot forge a field
 * or break a JSON line.
 */
#include "fake_engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

typedef struct lt {
    fake *f;
    char dir[64];
    char path[128];
} lt;

static int setup(void **state)
{
    lt *t = calloc(1, sizeof *t);
    t->f = fake_new();
    snprintf(t->dir, sizeof t->dir, "/tmp/srv-access-log-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/access.log", t->dir);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    lt *t = *state;
    fake_free(t->f);
    char p[160];
    snprintf(p, sizeof p, "%s/access.log", t->dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/access.log.1", t->dir);
    unlink(p);
    rmdir(t->dir);
    free(t);
    return 0;
}

static void start(lt *t, int mode, const char *path)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.access_log = mode;
    cfg.access_log_path = path;
    fake_server(t->f, &cfg);
    assert_int_equal(srv_route(t->f->srv, "GET", "/a", fake_handler, NULL), 0);
    fake_start(t->f, &cfg);
}

/* GET target from 192.0.2.4 with the header pairs given (NULL-ended). */
static void request(lt *t, const char *target, ...)
{
    va_list ap;
    va_start(ap, target);
    fake_req *r = fake_req_from(t->f, target, "192.0.2.4", 5555, ap);
    va_end(ap);
    fake_send(r);
    /* The core writes the line before it hands the answer to the engine:
     * once the answer is seen, the line is in the file. */
    assert_true(fake_wait(r, FAKE_WAIT_MS) > 0);
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return strdup("");
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return strdup(buf);
}

static void expect_match(const char *text, const char *pattern)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE), 0);
    int rc = regexec(&re, text, 0, NULL, 0);
    regfree(&re);
    if (rc != 0)
        fail_msg("log \"%s\" does not match /%s/", text, pattern);
}

static void test_common(void **state)
{
    lt *t = *state;
    start(t, SRV_ACCESS_LOG_COMMON, t->path);
    request(t, "/a?x=1", NULL);
    fake_finish(t->f);
    char *log = slurp(t->path);
    expect_match(log, "^192\\.0\\.2\\.4 - - \\[[0-9]{2}/[A-Z][a-z]{2}/[0-9]{4}:[0-9]{2}:[0-9]{2}:"
                      "[0-9]{2} \\+0000\\] \"GET /a\\?x=1 HTTP/1\\.1\" 200 2\n$");
    free(log);
}

static void test_combined_escapes(void **state)
{
    lt *t = *state;
    start(t, SRV_ACCESS_LOG_COMBINED, t->path);
    request(t, "/a", "Referer", "https://x.example/\" 999 \"", "User-Agent", "curl/8 \xff", NULL);
    request(t, "/a", NULL);
    fake_finish(t->f);
    char *log = slurp(t->path);
    expect_match(log, "\"GET /a HTTP/1\\.1\" 200 2 \"https://x\\.example/\\\\x22 999 \\\\x22\" "
                      "\"curl/8 \\\\xFF\"\n");
    expect_match(log, "\"GET /a HTTP/1\\.1\" 200 2 \"-\" \"-\"\n$");
    free(log);
}

/* Every line is one JSON object a real parser accepts, whatever the
 * request held (bytes that are not UTF-8 become U+FFFD; control bytes
 * never get this far: the core answers 400 to them in a head). */
static void test_json(void **state)
{
    lt *t = *state;
    start(t, SRV_ACCESS_LOG_JSON, t->path);
    request(t, "/a?q=%22", "User-Agent", "a\"b\\c\xc3\xa9\xff\xed\xa0\x80", "Referer",
            "\xf0\x9f\x98\x80", NULL);
    request(t, "/nothing-here", NULL);
    fake_finish(t->f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "ls=[json.loads(l) for l in open(sys.argv[1])]\n"
             "assert len(ls)==2, ls\n"
             "a,b=ls\n"
             "assert a[\"client\"]==\"192.0.2.4\" and a[\"peer\"]==\"192.0.2.4:5555\", a\n"
             "assert a[\"status\"]==200 and a[\"bytes\"]==2 and a[\"method\"]==\"GET\", a\n"
             "assert a[\"target\"]==\"/a?q=%%22\" and a[\"protocol\"]==\"HTTP/1.1\", a\n"
             "assert a[\"user_agent\"]==\"a\\\"b\\\\c\\u00e9\\ufffd\\ufffd\\ufffd\\ufffd\", a\n"
             "assert a[\"referer\"]==\"\\U0001f600\" and a[\"scheme\"]==\"http\", a\n"
             "assert b[\"status\"]==404 and b[\"referer\"] is None, b\n' %s",
             t->path);
    int rc = system(cmd);
    if (rc != 0) {
        char *log = slurp(t->path);
        fail_msg("the JSON lines do not parse as expected (python3 exit %d):\n%s", rc, log);
    }
}

/* logrotate: move the file, reopen; lines go to a new file of that name
 * and none is lost. */
static void test_reopen(void **state)
{
    lt *t = *state;
    start(t, SRV_ACCESS_LOG_COMMON, t->path);
    request(t, "/a?before", NULL);
    char moved[160];
    snprintf(moved, sizeof moved, "%s.1", t->path);
    assert_int_equal(rename(t->path, moved), 0);
    request(t, "/a?moved", NULL); /* still to the old file, as with nginx */
    assert_int_equal(srv_server_reopen_log(t->f->srv), 0);
    request(t, "/a?after", NULL);
    fake_finish(t->f);
    char *old = slurp(moved), *cur = slurp(t->path);
    expect_match(old, "GET /a\\?before .*\n.*GET /a\\?moved .*\n$");
    expect_match(cur, "^[^\n]*GET /a\\?after [^\n]*\n$");
    free(old);
    free(cur);
}

static void test_bad_settings(void **state)
{
    lt *t = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.access_log = SRV_ACCESS_LOG_COMMON;
    cfg.access_log_path = "/nonexistent-dir/access.log";
    t->f->srv = srv_server_new(&t->f->engine, &cfg);
    assert_int_equal(srv_server_start(t->f->srv), SRV_ESYS);
    assert_non_null(strstr(srv_server_last_error(t->f->srv), "/nonexistent-dir/access.log"));
    fake_finish(t->f);
    fake_config(&cfg);
    cfg.access_log = 7;
    t->f->srv = srv_server_new(&t->f->engine, &cfg);
    assert_int_equal(srv_server_start(t->f->srv), SRV_EINVAL);
    assert_non_null(strstr(srv_server_last_error(t->f->srv), "access_log 7"));
    fake_finish(t->f);
    /* stderr (no path): nothing to reopen. */
    assert_int_equal(srv_server_reopen_log(NULL), SRV_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_common, setup, teardown),
        cmocka_unit_test_setup_teardown(test_combined_escapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_settings, setup, teardown),
    };
    return cmocka_run_group_tests_name("access_log", tests, NULL, NULL);
}
