/*
 * Conformance cases: HTTPS (`conformance ENGINE tls`). The run's
 * certificates are made here with the openssl CLI; conformance.c's
 * conformance_tls_main runs the libcurl cases over TLS and this group:
 * plain HTTP to the TLS port, stalled and garbage handshakes, TLS 1.0/1.1
 * refused, clients vanishing mid-handshake, ALPN, reload (call and
 * SIGHUP), bad configuration, PEM in memory, an engine without
 * SRV_CAP_TLS.
 */
#include "conformance.h"

#include <openssl/bio.h>
#include <openssl/ssl.h>

/* Certificates for the run, made with the openssl CLI in a fresh directory
 * (no key is ever committed): two self-signed P-256 certificates for
 * localhost, 127.0.0.1 and ::1, each its own CA for the client. */
int tls_make_certs(void)
{
    snprintf(g_tls_dir, sizeof g_tls_dir, "/tmp/srv-conformance-tls-XXXXXX");
    if (!mkdtemp(g_tls_dir)) {
        g_tls_dir[0] = '\0';
        return -1;
    }
    atexit(tls_remove_certs); /* also when a failed check ends the run early */
    snprintf(g_tls_cert, sizeof g_tls_cert, "%s/cert.pem", g_tls_dir);
    snprintf(g_tls_key, sizeof g_tls_key, "%s/key.pem", g_tls_dir);
    snprintf(g_tls_cert2, sizeof g_tls_cert2, "%s/cert2.pem", g_tls_dir);
    snprintf(g_tls_key2, sizeof g_tls_key2, "%s/key2.pem", g_tls_dir);
    const char *pairs[2][2] = {{g_tls_cert, g_tls_key}, {g_tls_cert2, g_tls_key2}};
    for (int i = 0; i < 2; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                 "-keyout %s -out %s -days 2 -subj /CN=localhost "
                 "-addext subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1 >/dev/null 2>&1",
                 pairs[i][1], pairs[i][0]);
        if (system(cmd) != 0) {
            fprintf(stderr, "conformance: `%s` failed: is the openssl CLI installed "
                    "(scripts/install-deps.sh)?\n", cmd);
            return -1;
        }
    }
    return 0;
}

void tls_remove_certs(void)
{
    if (!g_tls_dir[0])
        return;
    const char *files[] = {g_tls_cert, g_tls_key, g_tls_cert2, g_tls_key2};
    char extra[200];
    for (size_t i = 0; i < 4; i++) {
        unlink(files[i]);
        snprintf(extra, sizeof extra, "%s.orig", files[i]); /* a reload case cut short */
        unlink(extra);
    }
    const char *hup[] = {"hup-cert.pem", "hup-key.pem", "rsa-cert.pem", "rsa-key.pem",
                         "rsa-serving-cert.pem", "rsa-serving-key.pem"}; /* and the RSA case's */
    for (size_t i = 0; i < sizeof hup / sizeof hup[0]; i++) {
        snprintf(extra, sizeof extra, "%s/%s", g_tls_dir, hup[i]);
        unlink(extra);
    }
    rmdir(g_tls_dir);
    g_tls_dir[0] = '\0';
}

/* One GET over HTTPS with `ca` as the client's CA; fills *r. */
static void tls_get(const fx *f, CURL *h, const char *ca, const char *path, http_res *r)
{
    curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    http_perform(f, h, &(http_req){.path = path}, r);
}

/* The server keeps serving (after an abuse case). */
static void tls_still_serving(fx *f, const char *what)
{
    http_res r;
    http_do(f, &(http_req){.path = "/hello"}, &r);
    check_http(f, what, &r, 200);
    check_body(f, what, &r, "hello");
    http_res_free(&r);
}

/* Wait until the server counts no open connection (what vanished clients
 * left is closed). */
static int tls_wait_no_connections(fx *f, int timeout_ms)
{
    long long end = rc_now_ms() + timeout_ms;
    while (stats(f).connections_open > 0) {
        if (rc_now_ms() >= end)
            return 0;
        rc_sleep_ms(20);
    }
    return 1;
}

/* Over TLS: the engine answers HTTPS in the group's protocol, and says
 * SRV_CAP_TLS. */
void test_engine_identity_tls(void **state)
{
    fx *f = *state;
    CHECK(engine_caps() & SRV_CAP_TLS, "engine %s serves TLS without SRV_CAP_TLS",
          g_engine_name);
    srv_stats before = stats(f);
    http_res r;
    http_do(f, &(http_req){.path = "/inspect"}, &r);
    check_http(f, "identity over TLS", &r, 200);
    const char *want = f->m->http2 ? "protocol=HTTP/2\n" : "protocol=HTTP/1.1\n";
    CHECK(strstr(r.body, want) != NULL, "identity over TLS: the handler saw %s", r.body);
    http_res_free(&r);
    srv_stats after = stats(f);
    CHECK(after.connections_total == before.connections_total + 1 &&
              after.responses_2xx == before.responses_2xx + 1,
          "identity over TLS: counters moved by %llu connections, %llu 2xx (expected 1, 1)",
          (unsigned long long)(after.connections_total - before.connections_total),
          (unsigned long long)(after.responses_2xx - before.responses_2xx));
}

/* Plain HTTP sent to the TLS port: a 400 in the clear and a close, as nginx
 * does; an engine whose TLS is its library's (SRV_CAP_TLS_CLOSES_RAW: mhd)
 * closes without it. Never a hang. */
void test_tls_plain_http(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "plain HTTP to the TLS port");
    conn_send_str(c, "plain HTTP to the TLS port",
                  "GET /hello HTTP/1.1\r\nHost: conformance\r\n\r\n");
    rc_response r;
    long long t0 = rc_now_ms();
    int rc = rc_read_response(c, &r, 0, 3000);
    long long took = rc_now_ms() - t0;
    int closes = (engine_caps() & SRV_CAP_TLS_CLOSES_RAW) != 0;
    CHECK(closes ? rc == RC_CLOSED || rc == RC_RESET : rc == RC_OK,
          "[plain HTTP to the TLS port] want %s within 3 s: %s", closes ? "a close" : "a 400",
          rc_strerror(rc));
    if (rc == RC_OK) {
        CHECK_INT("[plain HTTP to the TLS port] status", r.status, 400);
        rc_response_free(&r);
        int w = rc_wait_close(c, 3000, NULL);
        CHECK(w == RC_CLOSED || w == RC_RESET, "[plain HTTP to the TLS port] not closed after "
              "the 400: %s", rc_strerror(w));
    }
    CHECK(took < 2000, "[plain HTTP to the TLS port] answered after %lld ms", took);
    rc_close(c);
    tls_still_serving(f, "after plain HTTP to the TLS port");
}

/* A client that opens a connection and stalls its handshake (no byte, or
 * part of a record) is cut at the header deadline. */
void test_tls_stalled_handshake(void **state)
{
    fx *f = *state;
    rc_conn *silent = conn_open(f, "stalled handshake: silent");
    rc_conn *partial = conn_open(f, "stalled handshake: partial record");
    static const unsigned char part[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00};
    conn_send(partial, "stalled handshake: partial record", part, sizeof part);
    long long t0 = rc_now_ms();
    int a = rc_wait_close(silent, T_HEADER_MS + 3000, NULL);
    int b = rc_wait_close(partial, T_HEADER_MS + 3000, NULL);
    long long took = rc_now_ms() - t0;
    CHECK(a == RC_CLOSED || a == RC_RESET, "[stalled handshake: silent] still open after "
          "%d ms: %s", T_HEADER_MS + 3000, rc_strerror(a));
    CHECK(b == RC_CLOSED || b == RC_RESET, "[stalled handshake: partial record] still open "
          "after %d ms: %s", T_HEADER_MS + 3000, rc_strerror(b));
    CHECK(took >= T_HEADER_MS / 2, "[stalled handshake] cut after %lld ms, before the header "
          "deadline of %d ms", took, T_HEADER_MS);
    rc_close(silent);
    rc_close(partial);
    tls_still_serving(f, "after stalled handshakes");
}

/* A ClientHello record full of garbage: refused with a close at once. */
void test_tls_garbage_client_hello(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 3; i++) {
        rc_conn *c = conn_open(f, "garbage ClientHello");
        unsigned char rec[5 + 64] = {0x16, 0x03, 0x01, 0x00, 64};
        for (size_t k = 5; k < sizeof rec; k++)
            rec[k] = (unsigned char)(k * 37 + (size_t)i * 11);
        rec[5] = 0x01; /* handshake type ClientHello, body garbage */
        conn_send(c, "garbage ClientHello", rec, sizeof rec);
        int w = rc_wait_close(c, 3000, NULL);
        CHECK(w == RC_CLOSED || w == RC_RESET, "[garbage ClientHello] not closed within 3 s: "
              "%s", rc_strerror(w));
        rc_close(c);
    }
    tls_still_serving(f, "after garbage ClientHellos");
}

/* A TLS 1.0/1.1-only client is refused by the server (its protocol_version
 * alert, not a client-side refusal: the client allows the old versions
 * and their ciphers), and the server keeps serving. */
void test_tls_old_versions(void **state)
{
    fx *f = *state;
    const long versions[] = {CURL_SSLVERSION_TLSv1_0 | CURL_SSLVERSION_MAX_TLSv1_0,
                             CURL_SSLVERSION_TLSv1_1 | CURL_SSLVERSION_MAX_TLSv1_1};
    for (size_t i = 0; i < 2; i++) {
        srv_stats before = stats(f);
        CURL *h = easy_new(f);
        CHECK(h != NULL, "curl_easy_init");
        curl_easy_setopt(h, CURLOPT_SSLVERSION, versions[i]);
        curl_easy_setopt(h, CURLOPT_SSL_CIPHER_LIST, "DEFAULT@SECLEVEL=0");
        http_res r;
        http_perform(f, h, &(http_req){.path = "/hello"}, &r);
        curl_easy_cleanup(h);
        CHECK(r.rc != CURLE_OK, "[TLS 1.%zu client] was served", i);
        if (g_timing)
            fprintf(stderr, "# %s: TLS 1.%zu client: %s\n", g_engine_name, i, r.err);
        /* threadpool and uv send the protocol_version alert; h2o 2.2.5 and
         * libmicrohttpd 0.9.75 close without one (docs/ENGINES.md, "Where
         * the engines still differ"). Either way the server did it: the
         * client reached the handshake (it did not refuse its own settings). */
        int alert = strcmp(g_engine_name, "threadpool") == 0 || strcmp(g_engine_name, "uv") == 0;
        CHECK(strstr(r.err, "protocol version") != NULL ||
                  (!alert && (strstr(r.err, "SSL_ERROR_SYSCALL") || strstr(r.err, "unexpected eof"))),
              "[TLS 1.%zu client] failed, but not by the server's refusal (an alert or a "
              "close in the handshake): %s (%s)", i, curl_easy_strerror(r.rc), r.err);
        CHECK(stats(f).connections_total == before.connections_total + 1,
              "[TLS 1.%zu client] never reached the server", i);
        http_res_free(&r);
    }
    tls_still_serving(f, "after TLS 1.0/1.1 clients");
}

/* Clients that vanish mid-handshake: after their ClientHello (the server
 * waits for their Finished), or halfway through it. Nothing stays open
 * and nothing leaks (the ASan run checks at free). The ClientHello is a
 * real one, made with OpenSSL on memory BIOs. */
void test_tls_vanish_mid_handshake(void **state)
{
    fx *f = *state;
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    CHECK(cctx != NULL, "SSL_CTX_new");
    for (int i = 0; i < 6; i++) {
        SSL *ssl = SSL_new(cctx);
        BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
        SSL_set_bio(ssl, rb, wb);
        SSL_set_connect_state(ssl);
        SSL_do_handshake(ssl); /* writes the ClientHello into wb */
        char *hello = NULL;
        long n = BIO_get_mem_data(wb, &hello);
        CHECK(n > 0, "no ClientHello from OpenSSL");
        rc_conn *c = conn_open(f, "vanish mid-handshake");
        size_t len = i % 2 ? (size_t)n / 2 : (size_t)n;
        conn_send(c, "vanish mid-handshake", hello, len);
        if (len == (size_t)n) { /* let the server answer, then vanish */
            rc_sleep_ms(30);
        }
        rc_close(c);
        SSL_free(ssl);
    }
    SSL_CTX_free(cctx);
    CHECK(tls_wait_no_connections(f, 10000), "[vanish mid-handshake] %u connection(s) still "
          "open 10 s after their clients vanished", stats(f).connections_open);
    tls_still_serving(f, "after clients vanished mid-handshake");
}

/* HTTP/2 by ALPN where the engine offers it (SRV_CAP_TLS_HTTP2), else
 * HTTP/1.1 for a client that offers both. */
void test_tls_alpn(void **state)
{
    fx *f = *state;
    CURL *h = easy_new(f);
    CHECK(h != NULL, "curl_easy_init");
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    http_res r;
    http_perform(f, h, &(http_req){.path = "/hello"}, &r);
    curl_easy_cleanup(h);
    CHECK(r.rc == CURLE_OK, "[ALPN] curl failed: %s (%s)", curl_easy_strerror(r.rc), r.err);
    CHECK_INT("[ALPN] status", r.status, 200);
    long want = (engine_caps() & SRV_CAP_TLS_HTTP2) ? (long)CURL_HTTP_VERSION_2_0
                                                    : (long)CURL_HTTP_VERSION_1_1;
    CHECK(r.version == want, "[ALPN] a client offering h2 and http/1.1 got curl HTTP version "
          "%ld, expected %ld", r.version, want);
    http_res_free(&r);
}

/* Copy a file in this process: 0 when done. */
int tls_copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    FILE *out = in ? fopen(to, "wb") : NULL;
    int ok = in != NULL && out != NULL;
    char buf[4096];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

/* srv_server_reload_tls: new connections get the new certificate, a
 * connection opened before keeps going; a bad file leaves the current
 * certificate in place with a message naming it. */
void test_tls_reload(void **state)
{
    fx *f = *state;
    CURL *old = easy_new(f);
    CHECK(old != NULL, "curl_easy_init");
    http_res a, b, c, d, e;
    tls_get(f, old, g_tls_cert, "/hello", &a);
    check_http(f, "before the reload", &a, 200);

    /* The configuration's file names stay; their content changes. Copied
     * in this process: the kept-alive connection must outlive what happens
     * until its next request, and keepalive_timeout_ms is 1 s (a shell and
     * four cp forked from this process could take that on a loaded
     * machine under the sanitizers). */
    char orig_cert[160], orig_key[160];
    snprintf(orig_cert, sizeof orig_cert, "%s.orig", g_tls_cert);
    snprintf(orig_key, sizeof orig_key, "%s.orig", g_tls_key);
    int copied = tls_copy_file(g_tls_cert, orig_cert) == 0 &&
                 tls_copy_file(g_tls_key, orig_key) == 0 &&
                 tls_copy_file(g_tls_cert2, g_tls_cert) == 0 &&
                 tls_copy_file(g_tls_key2, g_tls_key) == 0;
    CHECK(copied, "copying the second certificate over the first failed: %s", strerror(errno));
    int rc = srv_server_reload_tls(f->srv);
    char restore[1200];
    snprintf(restore, sizeof restore, "mv %s.orig %s && mv %s.orig %s", g_tls_cert, g_tls_cert,
             g_tls_key, g_tls_key);
    if (rc != 0) {
        int x = system(restore);
        (void)x;
    }
    CHECK(rc == 0, "srv_server_reload_tls: %s (%s)", srv_strerror(rc),
          srv_server_last_error(f->srv));

    /* The old connection, on the old certificate (same client settings, so
     * libcurl reuses it). */
    tls_get(f, old, g_tls_cert, "/n?i=2", &b);
    CURL *h = easy_new(f);
    tls_get(f, h, g_tls_cert2, "/hello", &c);   /* a new one: the new certificate */
    curl_easy_cleanup(h);
    h = easy_new(f);
    curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
    /* Only the second certificate is trusted now by that client: the
     * first one must not be served to new connections any more. */
    int x = system(restore);
    (void)x;
    tls_get(f, h, g_tls_cert, "/hello", &d);
    curl_easy_cleanup(h);
    curl_easy_cleanup(old);
    check_http(f, "the connection opened before the reload", &b, 200);
    CHECK(b.num_connects == 0, "[reload] the connection opened before the reload was not kept "
          "(NUM_CONNECTS %ld)", b.num_connects);
    check_http(f, "a new connection after the reload (new CA)", &c, 200);
    CHECK(d.rc != CURLE_OK, "[reload] a new connection was served the old certificate");

    /* A broken file: refused, the current certificate stays. */
    FILE *fp = fopen(g_tls_key, "r+");
    CHECK(fp != NULL, "open %s", g_tls_key);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    fp = fopen(g_tls_key, "w");
    CHECK(fp != NULL, "open %s", g_tls_key);
    fputs("not a key\n", fp);
    fclose(fp);
    rc = srv_server_reload_tls(f->srv);
    char err[256];
    snprintf(err, sizeof err, "%s", srv_server_last_error(f->srv));
    fp = fopen(g_tls_key, "w");
    CHECK(fp != NULL, "open %s", g_tls_key);
    fwrite(buf, 1, n, fp);
    fclose(fp);
    CHECK(rc == SRV_ETLS, "[reload with a broken key] returned %s, expected ETLS",
          srv_err_name(rc));
    CHECK(strstr(err, g_tls_key) != NULL, "[reload with a broken key] the message does not "
          "name the file: %s", err);
    h = easy_new(f);
    tls_get(f, h, g_tls_cert2, "/hello", &e);
    curl_easy_cleanup(h);
    check_http(f, "after a failed reload (the reloaded certificate stays)", &e, 200);
    http_res_free(&a);
    http_res_free(&b);
    http_res_free(&c);
    http_res_free(&d);
    http_res_free(&e);
}

void tls_small_config(srv_config *c, const char *cert, const char *key)
{
    srv_config_init(c);
    c->host = "127.0.0.1";
    c->port = 0;
    c->io_threads = 1;
    c->worker_threads = 2;
    c->tls_cert_file = cert;
    c->tls_key_file = key;
}

srv_server *tls_small_start(fx *f0, const srv_config *c, int *rc, char *err, size_t cap)
{
    srv_server *srv = srv_server_new(g_engine, c);
    CHECK(srv != NULL, "srv_server_new");
    *rc = srv_route(srv, "GET", "/hello", h_hello, f0);
    *rc = *rc ? *rc : srv_server_start(srv);
    snprintf(err, cap, "%s", srv_server_last_error(srv));
    if (*rc != 0) {
        srv_server_free(srv);
        return NULL;
    }
    f0->port = srv_server_port(srv);
    return srv;
}

/* srv_server_start with a TLS configuration it cannot serve: the error
 * names the file and why. No fixture: each server is made here. */
static void tls_start_fails(const char *what, const srv_config *cfg, int want_rc,
                            const char *want_text)
{
    srv_server *srv = srv_server_new(g_engine, cfg);
    CHECK(srv != NULL, "srv_server_new");
    int rc = srv_server_start(srv);
    char err[256];
    snprintf(err, sizeof err, "%s", srv_server_last_error(srv));
    srv_server_free(srv);
    CHECK(rc == want_rc, "[%s] srv_server_start returned %s, expected %s (%s)", what,
          srv_err_name(rc), srv_err_name(want_rc), err);
    CHECK(strstr(err, want_text) != NULL, "[%s] the message does not say \"%s\": %s", what,
          want_text, err);
}

void test_tls_bad_config(void **state)
{
    (void)state;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing.pem", g_tls_dir);
    srv_config c;
    tls_small_config(&c, missing, g_tls_key);
    tls_start_fails("missing certificate file", &c, SRV_ETLS, missing);
    tls_start_fails("missing certificate file (why)", &c, SRV_ETLS, "No such file");
    c.tls_cert_file = g_tls_cert;
    c.tls_key_file = g_tls_key2;
    tls_start_fails("key of another certificate", &c, SRV_ETLS, "does not match");
    c.tls_key_file = g_tls_cert; /* a certificate where the key should be */
    tls_start_fails("certificate as the key", &c, SRV_ETLS, g_tls_cert);
    c.tls_key_file = NULL;
    tls_start_fails("certificate without a key", &c, SRV_ETLS, "no private key");
    c.tls_key_file = g_tls_key;
    c.tls_min_version = 0x0302;
    tls_start_fails("TLS 1.1 as the minimum", &c, SRV_ETLS, "tls_min_version");
    c.tls_min_version = SRV_TLS_1_2;
    c.tls_cert_file = NULL;
    c.tls_cert_pem = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
    tls_start_fails("garbage PEM in memory", &c, SRV_ETLS, "tls_cert_pem");
}

/* The certificate and key from memory serve like the files. */
char *tls_slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return NULL;
    char *buf = calloc(1, 65536);
    if (buf)
        buf[fread(buf, 1, 65535, fp)] = '\0';
    fclose(fp);
    return buf;
}

void test_tls_pem_in_memory(void **state)
{
    (void)state;
    char *cert = tls_slurp(g_tls_cert), *key = tls_slurp(g_tls_key);
    CHECK(cert && key, "cannot read the test certificate");
    fx f0 = {.m = &MODE_H1};
    srv_config c;
    tls_small_config(&c, NULL, NULL);
    c.tls_cert_pem = cert;
    c.tls_key_pem = key;
    srv_server *srv = srv_server_new(g_engine, &c);
    CHECK(srv != NULL, "srv_server_new");
    memset(cert, 0, strlen(cert)); /* copied by srv_server_new */
    int rc = srv_route(srv, "GET", "/hello", h_hello, &f0);
    rc = rc ? rc : srv_server_start(srv);
    if (rc != 0) {
        print_error("start with PEM in memory: %s (%s)\n", srv_strerror(rc),
                    srv_server_last_error(srv));
        srv_server_free(srv);
        free(cert);
        free(key);
        fail();
    }
    f0.port = srv_server_port(srv);
    http_res r;
    http_do(&f0, &(http_req){.path = "/hello"}, &r);
    srv_server_free(srv);
    free(cert);
    free(key);
    check_http(&f0, "certificate and key from memory", &r, 200);
    http_res_free(&r);
}

/* srv_server_run reloads the certificate on SIGHUP and keeps serving;
 * SIGTERM then stops it. SIGHUP is ignored around the case, so one sent
 * before srv_server_run installed its handler is only lost (and sent
 * again), never fatal; SIGTERM is sent only once a reload proved the
 * handlers are in place. */
typedef struct tls_runner {
    srv_server *srv;
    int rc;
} tls_runner;

static void *tls_run_thread(void *arg)
{
    tls_runner *r = arg;
    r->rc = srv_server_run(r->srv, 1000);
    return NULL;
}

void test_tls_sighup_reload(void **state)
{
    (void)state;
    char cert[160], key[160], cmd[800];
    snprintf(cert, sizeof cert, "%s/hup-cert.pem", g_tls_dir);
    snprintf(key, sizeof key, "%s/hup-key.pem", g_tls_dir);
    snprintf(cmd, sizeof cmd, "cp %s %s && cp %s %s", g_tls_cert, cert, g_tls_key, key);
    CHECK(system(cmd) == 0, "`%s` failed", cmd);
    fx f0 = {.m = &MODE_H1};
    srv_config c;
    tls_small_config(&c, cert, key);
    int rc;
    char err[256];
    srv_server *srv = tls_small_start(&f0, &c, &rc, err, sizeof err);
    CHECK(srv != NULL, "start: %s (%s)", srv_strerror(rc), err);
    void (*old_hup)(int) = signal(SIGHUP, SIG_IGN);
    tls_runner run = {.srv = srv};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, tls_run_thread, &run) == 0, "pthread_create");
    snprintf(cmd, sizeof cmd, "cp %s %s && cp %s %s", g_tls_cert2, cert, g_tls_key2, key);
    int copied = system(cmd) == 0;
    http_res r = {0};
    int served_new = 0;
    for (int i = 0; copied && i < 30 && !served_new; i++) {
        /* To the thread in srv_server_run, as a terminal's signal would land
         * on whichever thread; there ThreadSanitizer sees the self-pipe it
         * created (the handler writes to it). */
        pthread_kill(th, SIGHUP);
        rc_sleep_ms(100);
        CURL *h = easy_new(&f0);
        tls_get(&f0, h, g_tls_cert2, "/hello", &r);
        curl_easy_cleanup(h);
        served_new = r.rc == CURLE_OK && r.status == 200;
        http_res_free(&r);
    }
    pthread_kill(th, SIGTERM); /* srv_server_run's handler is in place: it stops */
    pthread_join(th, NULL);
    signal(SIGHUP, old_hup);
    srv_server_free(srv);
    unlink(cert);
    unlink(key);
    CHECK(copied, "`%s` failed", cmd);
    CHECK(served_new, "[SIGHUP] srv_server_run did not reload: new connections never got the "
          "new certificate within 3 s");
    CHECK(run.rc == 0, "[SIGHUP] srv_server_run returned %s after SIGTERM", srv_err_name(run.rc));
}

/* An engine without SRV_CAP_TLS refuses a TLS configuration at start. */
void test_tls_refused_by_engine(void **state)
{
    (void)state;
    srv_config c;
    srv_config_init(&c);
    c.host = "127.0.0.1";
    c.port = 0;
    c.tls_cert_file = g_tls_cert;
    c.tls_key_file = g_tls_key;
    tls_start_fails("TLS on an engine without SRV_CAP_TLS", &c, SRV_ETLS, "does not serve TLS");
}
