/*
 * srv_config_from_env: every srv_config field from the environment, the
 * errors that name the variable and the accepted values, and agreement with
 * what srv_server_start accepts (one table of ranges in core/config.c).
 */
#include "fake_engine.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

extern char **environ;

/* Each case starts with no SRV_/APP_ variable set. */
static int clean_env(void **state)
{
    (void)state;
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e != NULL; e++)
            if (strncmp(*e, "SRV_", 4) == 0 || strncmp(*e, "APP_", 4) == 0) {
                const char *eq = strchr(*e, '=');
                size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
                snprintf(name, sizeof name, "%.*s", (int)n, *e);
                break;
            }
        if (name[0] == '\0')
            return 0;
        unsetenv(name);
    }
}

static int from_env(srv_config *cfg, char *err, size_t cap)
{
    return srv_config_from_env(cfg, "SRV_", err, cap);
}

static void test_unset_leaves_defaults(void **state)
{
    (void)state;
    srv_config cfg, def;
    srv_config_init(&cfg);
    srv_config_init(&def);
    char err[256];
    assert_int_equal(from_env(&cfg, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_memory_equal(&cfg, &def, sizeof cfg);
}

/* Every field, one variable each, read into the right place. */
static void test_every_field(void **state)
{
    (void)state;
    setenv("SRV_HOST", "127.0.0.1", 1);
    setenv("SRV_PORT", "9090", 1);
    setenv("SRV_WORKER_THREADS", "32", 1);
    setenv("SRV_IO_THREADS", "3", 1);
    setenv("SRV_MAX_CONNECTIONS", "5000", 1);
    setenv("SRV_BACKLOG", "128", 1);
    setenv("SRV_HEADER_TIMEOUT_MS", "5000", 1);
    setenv("SRV_KEEPALIVE_TIMEOUT_MS", "6000", 1);
    setenv("SRV_REQUEST_TIMEOUT_MS", "7000", 1);
    setenv("SRV_MAX_HEADER_BYTES", "16K", 1);
    setenv("SRV_MAX_URI_BYTES", "4096", 1);
    setenv("SRV_MAX_BODY_BYTES", "10M", 1);
    setenv("SRV_ACCESS_LOG", "yes", 1);
    setenv("SRV_SERVER_NAME", "greeter/1", 1);
    setenv("SRV_WORKER_THREADS_MIN", "4", 1);
    setenv("SRV_WORKER_IDLE_TIMEOUT_MS", "1000", 1);
    setenv("SRV_MAX_QUEUED", "77", 1);
    setenv("SRV_NONBLOCKING_WARN_MS", "0", 1);
    setenv("SRV_TLS_CERT_FILE", "/etc/x/cert.pem", 1);
    setenv("SRV_TLS_KEY_FILE", "/etc/x/key.pem", 1);
    setenv("SRV_TLS_CERT_PEM", "-----BEGIN CERTIFICATE-----", 1);
    setenv("SRV_TLS_KEY_PEM", "-----BEGIN PRIVATE KEY-----", 1);
    setenv("SRV_TLS_MIN_VERSION", "1.3", 1);
    setenv("SRV_TLS_CIPHERS", "ECDHE+AESGCM", 1);
    setenv("SRV_TLS_CLIENT_CA_FILE", "/etc/x/ca.pem", 1);
    setenv("SRV_TRUSTED_PROXIES", "10.0.0.0/8", 1);
    setenv("SRV_ACCESS_LOG_PATH", "/var/log/x.log", 1);
    setenv("SRV_REUSE_PORT", "on", 1);
    setenv("SRV_LISTEN_FD", "3", 1);
    setenv("SRV_ENGINE", "h2o", 1); /* srv_engine_select's: not an error */
    setenv("SRV_MHD_LOG", "1", 1);  /* mhd's diagnostics: not an error */
    srv_config cfg;
    srv_config_init(&cfg);
    char err[256];
    int rc = from_env(&cfg, err, sizeof err);
    if (rc != 0)
        fail_msg("srv_config_from_env: %d (%s)", rc, err);
    assert_string_equal(cfg.host, "127.0.0.1");
    assert_int_equal(cfg.port, 9090);
    assert_int_equal(cfg.worker_threads, 32);
    assert_int_equal(cfg.io_threads, 3);
    assert_int_equal(cfg.max_connections, 5000);
    assert_int_equal(cfg.backlog, 128);
    assert_int_equal(cfg.header_timeout_ms, 5000);
    assert_int_equal(cfg.keepalive_timeout_ms, 6000);
    assert_int_equal(cfg.request_timeout_ms, 7000);
    assert_int_equal(cfg.max_header_bytes, 16384);
    assert_int_equal(cfg.max_uri_bytes, 4096);
    assert_int_equal(cfg.max_body_bytes, 10u * 1024 * 1024);
    assert_int_equal(cfg.access_log, 1);
    assert_string_equal(cfg.server_name, "greeter/1");
    assert_int_equal(cfg.worker_threads_min, 4);
    assert_int_equal(cfg.worker_idle_timeout_ms, 1000);
    assert_int_equal(cfg.max_queued, 77);
    assert_int_equal(cfg.nonblocking_warn_ms, 0);
    assert_string_equal(cfg.tls_cert_file, "/etc/x/cert.pem");
    assert_string_equal(cfg.tls_key_file, "/etc/x/key.pem");
    assert_string_equal(cfg.tls_cert_pem, "-----BEGIN CERTIFICATE-----");
    assert_string_equal(cfg.tls_key_pem, "-----BEGIN PRIVATE KEY-----");
    assert_int_equal(cfg.tls_min_version, SRV_TLS_1_3);
    assert_string_equal(cfg.tls_ciphers, "ECDHE+AESGCM");
    assert_string_equal(cfg.tls_client_ca_file, "/etc/x/ca.pem");
    assert_string_equal(cfg.trusted_proxies, "10.0.0.0/8");
    assert_string_equal(cfg.access_log_path, "/var/log/x.log");
    assert_int_equal(cfg.reuse_port, 1);
    assert_int_equal(cfg.listen_fd, 3);
}

/* The access log's formats by name or number; on/off as before 0.4. */
static void test_access_log_values(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int want;
    } cases[] = {{"off", 0}, {"common", 1}, {"COMBINED", 2}, {"json", 3}, {"0", 0},
                 {"2", 2},   {"on", 1},     {"true", 1},     {"no", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("SRV_ACCESS_LOG", cases[i].text, 1);
        srv_config cfg;
        srv_config_init(&cfg);
        char err[256];
        assert_int_equal(from_env(&cfg, err, sizeof err), 0);
        if (cfg.access_log != cases[i].want)
            fail_msg("SRV_ACCESS_LOG=%s gave %d, want %d", cases[i].text, cfg.access_log,
                     cases[i].want);
    }
}

/* The error format by name or number. */
static void test_error_format_values(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int want;
    } cases[] = {{"text", 0}, {"JSON", 1}, {"0", 0}, {"1", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("SRV_ERROR_FORMAT", cases[i].text, 1);
        srv_config cfg;
        srv_config_init(&cfg);
        char err[256];
        assert_int_equal(from_env(&cfg, err, sizeof err), 0);
        if (cfg.error_format != cases[i].want)
            fail_msg("SRV_ERROR_FORMAT=%s gave %d, want %d", cases[i].text, cfg.error_format,
                     cases[i].want);
    }
    unsetenv("SRV_ERROR_FORMAT");
}

/* A bad value: SRV_EINVAL, and the message names the variable, the value
 * and what would be accepted. */
static void expect_bad(const char *var, const char *value, const char *mention)
{
    setenv(var, value, 1);
    srv_config cfg;
    srv_config_init(&cfg);
    char err[256];
    int rc = from_env(&cfg, err, sizeof err);
    unsetenv(var);
    if (rc != SRV_EINVAL)
        fail_msg("%s=\"%s\": rc %d, want SRV_EINVAL (err \"%s\")", var, value, rc, err);
    char want[128];
    snprintf(want, sizeof want, "%s=\"%s\"", var, value);
    if (strstr(err, want) == NULL || strstr(err, mention) == NULL)
        fail_msg("%s=\"%s\": message \"%s\" should name the variable and say \"%s\"", var,
                 value, err, mention);
}

static void test_bad_values(void **state)
{
    (void)state;
    expect_bad("SRV_PORT", "70000", "use 0 (any free port) to 65535");
    expect_bad("SRV_PORT", "-1", "not a whole number");
    expect_bad("SRV_PORT", "+80", "not a whole number");
    expect_bad("SRV_PORT", " 80", "not a whole number");
    expect_bad("SRV_PORT", "80x", "not a whole number");
    expect_bad("SRV_PORT", "", "not a whole number");
    expect_bad("SRV_PORT", "0x50", "not a whole number");
    expect_bad("SRV_WORKER_THREADS", "0", "use 1 to 100000");
    expect_bad("SRV_WORKER_THREADS", "99999999999999999999999", "not a whole number");
    expect_bad("SRV_WORKER_THREADS", "4294967297", "out of range"); /* 2^32 + 1: no wrap */
    expect_bad("SRV_IO_THREADS", "2000", "use 0 (one per CPU) to 1024");
    expect_bad("SRV_HEADER_TIMEOUT_MS", "0", "use 1 to");
    expect_bad("SRV_MAX_HEADER_BYTES", "100", "use 256 to");
    expect_bad("SRV_MAX_HEADER_BYTES", "8KB", "units K, M, G");
    expect_bad("SRV_MAX_BODY_BYTES", "99999999999G", "not a whole number");
    expect_bad("SRV_MAX_CONNECTIONS", "1K", "not a whole number"); /* units only for bytes */
    expect_bad("SRV_ACCESS_LOG", "maybe", "use off, common, combined or json");
    expect_bad("SRV_ACCESS_LOG", "4", "use off, common, combined or json");
    expect_bad("SRV_ERROR_FORMAT", "xml", "use text or json");
    expect_bad("SRV_TLS_MIN_VERSION", "1.1", "use 1.2 or 1.3");
    expect_bad("SRV_LISTEN_FD", "-1", "not a whole number"); /* unset means -1 */
    expect_bad("SRV_LISTEN_FD", "3x", "not a whole number");
    expect_bad("SRV_HOST", "localhost", "not a numeric IPv4 or IPv6 address");
    expect_bad("SRV_HOST", "", "not a numeric IPv4 or IPv6 address");
    /* A typo is an error, not a silently ignored setting. */
    expect_bad("SRV_WORKER_THREAD", "50", "is not a libsrv setting");
    expect_bad("SRV_port", "80", "is not a libsrv setting");
}

/* The typo's message, and prefixes other than SRV_. */
static void test_unknown_variable_message(void **state)
{
    (void)state;
    setenv("SRV_WORKER_THREAD", "50", 1);
    srv_config cfg;
    srv_config_init(&cfg);
    char err[256];
    assert_int_equal(from_env(&cfg, err, sizeof err), SRV_EINVAL);
    assert_non_null(strstr(err, "SRV_WORKER_THREAD=\"50\" is not a libsrv setting"));
    /* Another prefix is the application's choice: SRV_ variables are not
     * its business, and APP_ENGINE is no exception for it. */
    setenv("APP_PORT", "81", 1);
    assert_int_equal(srv_config_from_env(&cfg, "APP_", err, sizeof err), 0);
    assert_int_equal(cfg.port, 81);
    setenv("APP_ENGINE", "h2o", 1);
    assert_int_equal(srv_config_from_env(&cfg, "APP_", err, sizeof err), SRV_EINVAL);
    /* A NULL err is allowed; a tiny one is cut, still terminated. */
    assert_int_equal(srv_config_from_env(&cfg, "APP_", NULL, 0), SRV_EINVAL);
    char tiny[8];
    assert_int_equal(srv_config_from_env(&cfg, "APP_", tiny, sizeof tiny), SRV_EINVAL);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void test_empty_strings(void **state)
{
    (void)state;
    setenv("SRV_SERVER_NAME", "", 1);
    setenv("SRV_TLS_CIPHERS", "", 1);
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.tls_ciphers = "something";
    char err[256];
    assert_int_equal(from_env(&cfg, err, sizeof err), 0);
    assert_string_equal(cfg.server_name, ""); /* no Server header */
    assert_null(cfg.tls_ciphers);             /* the default policy */
}

/* Every range the environment accepts, srv_server_start accepts, and the
 * bounds just outside are refused by both (one table). */
static void test_ranges_agree_with_start(void **state)
{
    (void)state;
    static const struct {
        const char *var, *ok, *bad;
    } cases[] = {
        {"SRV_PORT", "0", "65536"},
        {"SRV_WORKER_THREADS", "100000", "100001"},
        {"SRV_IO_THREADS", "1024", "1025"},
        {"SRV_MAX_CONNECTIONS", "1", "0"},
        {"SRV_BACKLOG", "1", "0"},
        {"SRV_HEADER_TIMEOUT_MS", "86400000", "86400001"},
        {"SRV_MAX_URI_BYTES", "16", "15"},
        {"SRV_MAX_QUEUED", "1", "0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv(cases[i].var, cases[i].ok, 1);
        srv_config cfg;
        srv_config_init(&cfg);
        cfg.host = "127.0.0.1";
        char err[256];
        int rc = from_env(&cfg, err, sizeof err);
        if (rc != 0)
            fail_msg("%s=%s refused: %s", cases[i].var, cases[i].ok, err);
        if (strcmp(cases[i].var, "SRV_PORT") != 0)
            cfg.port = 0;
        fake *f = fake_new();
        f->listen = 1;
        f->srv = srv_server_new(&f->engine, &cfg);
        rc = srv_server_start(f->srv);
        if (rc != 0)
            fail_msg("%s=%s read, but srv_server_start refused it: %s", cases[i].var,
                     cases[i].ok, srv_server_last_error(f->srv));
        fake_finish(f);
        fake_free(f);
        setenv(cases[i].var, cases[i].bad, 1);
        srv_config_init(&cfg);
        rc = from_env(&cfg, err, sizeof err);
        unsetenv(cases[i].var);
        if (rc != SRV_EINVAL)
            fail_msg("%s=%s accepted", cases[i].var, cases[i].bad);
    }
}

/* A caller built against the 0.2 srv_config (before the tls_* fields):
 * the environment does not write past its struct. */
static void test_older_struct_not_overrun(void **state)
{
    (void)state;
    setenv("SRV_PORT", "9091", 1);
    setenv("SRV_TLS_CERT_FILE", "/x.pem", 1);
    size_t old = offsetof(srv_config, tls_cert_file);
    unsigned char buf[sizeof(srv_config) + 16];
    memset(buf, 0xA5, sizeof buf);
    srv_config_init_sized((srv_config *)(void *)buf, old);
    char err[256];
    assert_int_equal(srv_config_from_env((srv_config *)(void *)buf, "SRV_", err, sizeof err), 0);
    srv_config cfg;
    memcpy(&cfg, buf, old);
    assert_int_equal(cfg.port, 9091);
    for (size_t i = old; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xA5);
}

static void test_misuse(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(srv_config_from_env(NULL, "SRV_", err, sizeof err), SRV_EINVAL);
    assert_non_null(strstr(err, "srv_config_init"));
    srv_config cfg;
    srv_config_init(&cfg);
    assert_int_equal(srv_config_from_env(&cfg, NULL, err, sizeof err), SRV_EINVAL);
    cfg.size = 3; /* never initialised */
    assert_int_equal(srv_config_from_env(&cfg, "SRV_", err, sizeof err), SRV_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_unset_leaves_defaults, clean_env),
        cmocka_unit_test_setup(test_every_field, clean_env),
        cmocka_unit_test_setup(test_bad_values, clean_env),
        cmocka_unit_test_setup(test_access_log_values, clean_env),
        cmocka_unit_test_setup(test_error_format_values, clean_env),
        cmocka_unit_test_setup(test_unknown_variable_message, clean_env),
        cmocka_unit_test_setup(test_empty_strings, clean_env),
        cmocka_unit_test_setup(test_ranges_agree_with_start, clean_env),
        cmocka_unit_test_setup(test_older_struct_not_overrun, clean_env),
        cmocka_unit_test_setup(test_misuse, clean_env),
    };
    return cmocka_run_group_tests_name("config_env", tests, NULL, NULL);
}
