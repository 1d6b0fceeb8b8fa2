/*
 * Configuration defaults and validation, the engine registry and selection,
 * and the error table (every SRV_E code named and explained).
 */
#include "fake_engine.h"
#include "srv_build_config.h"

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

/* ------------------------------------------------------------------ */
/* Defaults                                                            */
/* ------------------------------------------------------------------ */

static void test_defaults_as_documented(void **state)
{
    (void)state;
    srv_config cfg;
    memset(&cfg, 0xA5, sizeof cfg); /* init must not rely on zeroed memory */
    srv_config_init(&cfg);
    assert_string_equal(cfg.host, "0.0.0.0");
    assert_int_equal(cfg.port, 8080);
    assert_int_equal(cfg.worker_threads, 200);
    assert_int_equal(cfg.io_threads, 0);
    assert_int_equal(cfg.max_connections, 10000);
    assert_int_equal(cfg.backlog, 4096);
    assert_int_equal(cfg.header_timeout_ms, 20000);
    assert_int_equal(cfg.keepalive_timeout_ms, 20000);
    assert_int_equal(cfg.request_timeout_ms, 60000);
    assert_int_equal(cfg.max_header_bytes, 8192);
    assert_int_equal(cfg.max_uri_bytes, 8192);
    assert_int_equal(cfg.max_body_bytes, 2 * 1024 * 1024);
    assert_int_equal(cfg.access_log, 0);
    assert_string_equal(cfg.server_name, "libsrv");
}

static void test_null_config_means_defaults(void **state)
{
    fake *f = *state;
    srv_server *srv = srv_server_new(&f->engine, NULL);
    assert_non_null(srv);
    f->srv = srv;
    assert_int_equal(srv_server_port(srv), 8080); /* configured, not started */
    assert_string_equal(srv_server_last_error(srv), "");
    fake_finish(f);
}

static void test_config_is_copied(void **state)
{
    fake *f = *state;
    char host[32] = "127.0.0.1";
    char name[32] = "unit/1.0";
    srv_config cfg;
    fake_config(&cfg);
    cfg.host = host;
    cfg.server_name = name;
    cfg.port = 0;
    f->listen = 1;
    f->srv = srv_server_new(&f->engine, &cfg);
    assert_non_null(f->srv);
    /* The caller's strings and struct may change after new. */
    strcpy(host, "not an address");
    strcpy(name, "changed");
    cfg.port = 1;
    cfg.worker_threads = 0;
    fake_start(f, NULL);

    const srv_config *c = srv__server_config(f->srv);
    assert_string_equal(c->host, "127.0.0.1");
    assert_string_equal(c->server_name, "unit/1.0");
    assert_int_equal(c->worker_threads, 4);
    assert_true(c->io_threads >= 1); /* 0 resolved to the CPU count */
    int port = srv_server_port(f->srv);
    assert_true(port > 0 && port <= 65535); /* the bound one, not 0 */
    fake_finish(f);
}

static void test_null_server_name_resolves_to_empty(void **state)
{
    fake *f = *state;
    srv_config cfg;
    fake_config(&cfg);
    cfg.server_name = NULL;
    cfg.io_threads = 3;
    fake_start(f, &cfg);
    const srv_config *c = srv__server_config(f->srv);
    assert_non_null(c->server_name);
    assert_string_equal(c->server_name, "");
    assert_int_equal(c->io_threads, 3);
    fake_finish(f);
}

/* ------------------------------------------------------------------ */
/* Invalid configurations                                              */
/* ------------------------------------------------------------------ */

static void expect_start_error(fake *f, const srv_config *cfg, int want, const char *mention,
                               int engine_may_start)
{
    f->listen = 1; /* a host check inside srv__listen counts too */
    f->srv = srv_server_new(&f->engine, cfg);
    assert_non_null(f->srv);
    int rc = srv_server_start(f->srv);
    const char *msg = srv_server_last_error(f->srv);
    if (rc != want)
        fail_msg("srv_server_start = %d (%s), want %s; last error \"%s\"", rc, srv_err_name(rc),
                 srv_err_name(want), msg);
    if (strstr(msg, mention) == NULL)
        fail_msg("last error \"%s\" does not mention \"%s\"", msg, mention);
    if (!engine_may_start)
        assert_int_equal(f->start_calls, 0); /* validated before the engine */
    fake_finish(f);
}

static void test_rejects_zero_workers(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.worker_threads = 0;
    expect_start_error(*state, &cfg, SRV_EINVAL, "worker", 0);
}

static void test_rejects_port_70000(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.port = 70000;
    expect_start_error(*state, &cfg, SRV_EINVAL, "70000", 0);
}

static void test_rejects_negative_port(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.port = -1;
    expect_start_error(*state, &cfg, SRV_EINVAL, "port", 0);
}

static void test_rejects_host_name(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.host = "localhost"; /* numeric addresses only */
    expect_start_error(*state, &cfg, SRV_EADDR, "localhost", 1);
}

static void test_rejects_bad_ipv4(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.host = "999.1.1.1";
    expect_start_error(*state, &cfg, SRV_EADDR, "999.1.1.1", 1);
}

static void test_rejects_host_with_port(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.host = "127.0.0.1:80";
    expect_start_error(*state, &cfg, SRV_EADDR, "127.0.0.1:80", 1);
}

static void test_rejects_empty_host(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.host = "";
    expect_start_error(*state, &cfg, SRV_EADDR, "host", 1);
}

static void test_rejects_server_name_with_crlf(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.server_name = "libsrv\r\nSet-Cookie: x=1";
    expect_start_error(*state, &cfg, SRV_EINVAL, "server_name", 0);
}

static void test_rejects_server_name_with_control(void **state)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.server_name = "lib\x01srv";
    expect_start_error(*state, &cfg, SRV_EINVAL, "0x01", 0);
}

static void test_bind_conflict_says_why(void **state)
{
    fake *f = *state;
    f->listen = 1;
    fake_start(f, NULL);
    int port = srv_server_port(f->srv);
    assert_true(port > 0);

    fake *g = fake_new();
    srv_config cfg;
    fake_config(&cfg);
    cfg.port = port;
    g->listen = 1;
    g->srv = srv_server_new(&g->engine, &cfg);
    int rc = srv_server_start(g->srv);
    char want[32];
    snprintf(want, sizeof want, "%d", port);
    const char *msg = srv_server_last_error(g->srv);
    int ok = rc == SRV_EBIND && strstr(msg, want) != NULL && strstr(msg, "127.0.0.1") != NULL;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", msg);
    fake_finish(g);
    fake_free(g);
    if (!ok)
        fail_msg("second bind of 127.0.0.1:%d: rc %d (%s), last error \"%s\"; want EBIND "
                 "naming the address",
                 port, rc, srv_err_name(rc), copy);
    fake_finish(f);
}

/* ------------------------------------------------------------------ */
/* Engines                                                             */
/* ------------------------------------------------------------------ */

static void test_engine_registry(void **state)
{
    (void)state;
    const srv_engine *def = srv_engine_default();
    assert_non_null(def);
    assert_true(srv_engine_count() >= 1);
    assert_ptr_equal(srv_engine_at(0), def);
    assert_null(srv_engine_at(srv_engine_count()));
    for (size_t i = 0; i < srv_engine_count(); i++) {
        const srv_engine *e = srv_engine_at(i);
        assert_non_null(e);
        const char *name = srv_engine_name(e);
        assert_non_null(name);
        assert_ptr_equal(srv_engine_find(name), e);
        for (size_t j = 0; j < i; j++) /* unique names */
            assert_string_not_equal(srv_engine_name(srv_engine_at(j)), name);
    }
    assert_null(srv_engine_find("nope"));
    assert_null(srv_engine_find(""));
    assert_null(srv_engine_find(NULL));
#if SRV_HAVE_ENGINE_THREADPOOL
    assert_non_null(srv_engine_find("threadpool"));
    assert_null(srv_engine_find("THREADPOOL")); /* case-sensitive */
    /* threadpool is the default whenever it is built. */
    assert_string_equal(srv_engine_name(def), "threadpool");
#endif
}

static void test_engine_select(void **state)
{
    (void)state;
    const srv_engine *def = srv_engine_default();
    const srv_engine *got = NULL;
    const char *other = srv_engine_name(srv_engine_at(srv_engine_count() - 1));

    unsetenv("SRV_ENGINE");
    assert_int_equal(srv_engine_select(NULL, &got), 0);
    assert_ptr_equal(got, def);

    got = NULL;
    assert_int_equal(srv_engine_select(other, &got), 0);
    assert_ptr_equal(got, srv_engine_find(other));

    got = def;
    assert_int_equal(srv_engine_select("no-such-engine", &got), SRV_ENOENGINE);
    assert_ptr_equal(got, def); /* untouched */

    setenv("SRV_ENGINE", "no-such-engine", 1);
    got = def;
    assert_int_equal(srv_engine_select(NULL, &got), SRV_ENOENGINE); /* no fallback */
    assert_ptr_equal(got, def);
    got = NULL;
    assert_int_equal(srv_engine_select(other, &got), 0); /* the name wins */
    assert_ptr_equal(got, srv_engine_find(other));

    setenv("SRV_ENGINE", other, 1);
    got = NULL;
    assert_int_equal(srv_engine_select(NULL, &got), 0);
    assert_ptr_equal(got, srv_engine_find(other));

    setenv("SRV_ENGINE", "", 1); /* empty means unset */
    got = NULL;
    assert_int_equal(srv_engine_select(NULL, &got), 0);
    assert_ptr_equal(got, def);
    unsetenv("SRV_ENGINE");
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

static void test_every_error_has_name_and_message(void **state)
{
    (void)state;
    static const struct {
        int code;
        const char *name, *msg;
    } map[] = {
#define ROW(name, num, msg) {SRV_##name, #name, msg},
        SRV_ERRNO_MAP(ROW)
#undef ROW
    };
    size_t n = sizeof map / sizeof map[0];
    for (size_t i = 0; i < n; i++) {
        assert_true(map[i].code < 0);
        assert_string_not_equal(srv_strerror(map[i].code), "unknown error");
        assert_string_equal(srv_strerror(map[i].code), map[i].msg);
        assert_string_equal(srv_err_name(map[i].code), map[i].name);
        assert_true(map[i].msg[0] != '\0');
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(map[i].code, map[j].code); /* never reused */
            assert_string_not_equal(map[i].name, map[j].name);
        }
    }
    assert_string_equal(srv_strerror(-9999), "unknown error");
    assert_string_equal(srv_strerror(12345), "unknown error");
    assert_non_null(srv_err_name(-9999));
}

static void test_version_macros(void **state)
{
    (void)state;
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", SRV_VERSION_MAJOR, SRV_VERSION_MINOR, SRV_VERSION_PATCH);
    assert_string_equal(v, SRV_VERSION_STRING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_defaults_as_documented),
        T(test_null_config_means_defaults),
        T(test_config_is_copied),
        T(test_null_server_name_resolves_to_empty),
        T(test_rejects_server_name_with_crlf),
        T(test_rejects_server_name_with_control),
        T(test_rejects_zero_workers),
        T(test_rejects_port_70000),
        T(test_rejects_negative_port),
        T(test_rejects_host_name),
        T(test_rejects_bad_ipv4),
        T(test_rejects_host_with_port),
        T(test_rejects_empty_host),
        T(test_bind_conflict_says_why),
        T(test_engine_registry),
        T(test_engine_select),
        T(test_every_error_has_name_and_message),
        T(test_version_macros),
#undef T
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
