/*
 * Conformance cases: the raw-socket cases over TLS (`conformance ENGINE
 * tls`). raw_client speaks through an OpenSSL client when a context is set
 * (rc_set_tls): the group setup here sets one that trusts the run's test
 * certificate, so the same raw cases - bad request lines and headers,
 * smuggling and framing, pipelining, the header deadline's 408, the
 * cleartext side connections of the stop cases - send the same bytes
 * inside TLS and must get the same answers as in the clear. The group runs
 * only on engines with SRV_CAP_TLS (conformance_tls_main), so mhd joins
 * when it gains the bit.
 */
#include "conformance.h"

#include <poll.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

static SSL_CTX *tls_raw_ctx;

/* A client context that verifies the server with the run's certificate
 * (its own CA) and reads a TCP close without close_notify as the end of
 * the stream, as the raw cases expect from a close. */
static SSL_CTX *tls_raw_client_ctx(const char *ca, const char *cert, const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1 ||
        (cert && SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) ||
        (key && SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)) {
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

int tls_raw_group_setup(void **state)
{
    tls_raw_ctx = tls_raw_client_ctx(g_tls_cert, NULL, NULL);
    if (tls_raw_ctx == NULL) {
        print_error("TLS raw group: cannot make the client context\n");
        return -1;
    }
    rc_set_tls(tls_raw_ctx);
    *state = (void *)&MODE_H1; /* the libcurl side of the stop cases */
    return 0;
}

int tls_raw_group_teardown(void **state)
{
    (void)state;
    rc_set_tls(NULL);
    SSL_CTX_free(tls_raw_ctx);
    tls_raw_ctx = NULL;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Client certificates (tls_client_ca_file)                           */
/* ------------------------------------------------------------------ */

/* A CA and a client certificate it signed, made with the openssl CLI in
 * the run's directory (removed by tls_cc_remove). The foreign client is
 * the run's second self-signed certificate, which this CA never signed. */
static char tls_cc_ca[160], tls_cc_ca_key[160], tls_cc_cert[160], tls_cc_key[160],
    tls_cc_csr[160];

static void tls_cc_remove(void)
{
    const char *files[] = {tls_cc_ca, tls_cc_ca_key, tls_cc_cert, tls_cc_key, tls_cc_csr};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (files[i][0])
            unlink(files[i]);
}

static int tls_cc_make(void)
{
    snprintf(tls_cc_ca, sizeof tls_cc_ca, "%s/cc-ca.pem", g_tls_dir);
    snprintf(tls_cc_ca_key, sizeof tls_cc_ca_key, "%s/cc-ca-key.pem", g_tls_dir);
    snprintf(tls_cc_cert, sizeof tls_cc_cert, "%s/cc-client.pem", g_tls_dir);
    snprintf(tls_cc_key, sizeof tls_cc_key, "%s/cc-client-key.pem", g_tls_dir);
    snprintf(tls_cc_csr, sizeof tls_cc_csr, "%s/cc-client.csr", g_tls_dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout %s -out %s -days 2 -subj /CN=conformance-client-ca >/dev/null 2>&1 && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout %s -out %s -subj /CN=conformance-client >/dev/null 2>&1 && "
             "openssl x509 -req -in %s -CA %s -CAkey %s -set_serial 2 -days 2 -out %s "
             ">/dev/null 2>&1",
             tls_cc_ca_key, tls_cc_ca, tls_cc_key, tls_cc_csr, tls_cc_csr, tls_cc_ca,
             tls_cc_ca_key, tls_cc_cert);
    if (system(cmd) != 0) {
        print_error("client certificates: `%s` failed\n", cmd);
        return -1;
    }
    return 0;
}

/* One GET /hello with libcurl, presenting cert/key (none when NULL). */
static void tls_cc_get(const fx *f, const char *cert, const char *key, http_res *r)
{
    CURL *h = easy_new(f);
    CHECK(h != NULL, "curl_easy_init");
    curl_easy_setopt(h, CURLOPT_CAINFO, g_tls_cert);
    if (cert) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, cert);
        curl_easy_setopt(h, CURLOPT_SSLKEY, key);
    }
    http_perform(f, h, &(http_req){.path = "/hello"}, r);
    curl_easy_cleanup(h);
}

/* The same over the raw client (HTTP/1.1 inside TLS, no ALPN): the status
 * of GET /hello, or the RC_* code of the failure. */
static int tls_cc_raw(const fx *f, const char *cert, const char *key)
{
    SSL_CTX *ctx = tls_raw_client_ctx(g_tls_cert, cert, key);
    if (ctx == NULL)
        return RC_TLS;
    rc_set_tls(ctx);
    rc_conn c;
    int rc = rc_connect(&c, f->port, 3000);
    if (rc == RC_OK)
        rc = rc_send_str(&c, "GET /hello HTTP/1.1\r\nHost: conformance\r\n\r\n", 3000);
    rc_response r;
    if (rc == RC_OK) {
        rc = rc_read_response(&c, &r, 0, 3000);
        if (rc == RC_OK) {
            rc = r.status;
            rc_response_free(&r);
        }
    }
    rc_close(&c);
    rc_set_tls(tls_raw_ctx); /* the group's context again (NULL outside it) */
    SSL_CTX_free(ctx);
    return rc;
}

/* tls_client_ca_file: a client whose certificate the CA signed is served;
 * one without a certificate, and one with a certificate of another issuer,
 * are refused in the handshake by the server (they trust its certificate:
 * the refusal is not theirs), no handler runs, and the server keeps
 * serving. Engines with SRV_CAP_TLS. */
void test_tls_client_certificate(void **state)
{
    (void)state;
    CHECK(tls_cc_make() == 0, "cannot make the client certificates (openssl CLI)");
    fx f0 = {.m = &MODE_H1};
    srv_config c;
    tls_small_config(&c, g_tls_cert, g_tls_key);
    c.tls_client_ca_file = tls_cc_ca;
    int rc;
    char err[256];
    srv_server *srv = tls_small_start(&f0, &c, &rc, err, sizeof err);
    if (srv == NULL) {
        print_error("start with tls_client_ca_file: %s (%s)\n", srv_strerror(rc), err);
        tls_cc_remove();
        fail();
    }
    http_res good, none, foreign, after;
    tls_cc_get(&f0, tls_cc_cert, tls_cc_key, &good);
    srv_stats s0, s1;
    srv_server_stats(srv, &s0);
    tls_cc_get(&f0, NULL, NULL, &none);
    tls_cc_get(&f0, g_tls_cert2, g_tls_key2, &foreign);
    int raw_good = tls_cc_raw(&f0, tls_cc_cert, tls_cc_key);
    int raw_none = tls_cc_raw(&f0, NULL, NULL);
    int raw_foreign = tls_cc_raw(&f0, g_tls_cert2, g_tls_key2);
    /* The raw good client's 2xx may be counted just after it was read. */
    long long until = rc_now_ms() + 5000;
    do {
        srv_server_stats(srv, &s1);
    } while (s1.responses_2xx < s0.responses_2xx + 1 && rc_now_ms() < until &&
             (rc_sleep_ms(10), 1));
    rc_sleep_ms(50); /* and nothing more comes */
    srv_server_stats(srv, &s1);
    tls_cc_get(&f0, tls_cc_cert, tls_cc_key, &after);
    srv_server_free(srv);
    tls_cc_remove();

    check_http(&f0, "client certificate signed by the CA", &good, 200);
    check_body(&f0, "client certificate signed by the CA", &good, "hello");
    CHECK(none.rc != CURLE_OK, "[no client certificate] was served (status %ld)", none.status);
    CHECK(foreign.rc != CURLE_OK, "[client certificate of another issuer] was served "
          "(status %ld)", foreign.status);
    /* Refused by the server's verification, not by the client's: the
     * client verified the server (CAINFO) and its error says TLS. */
    CHECK(none.rc != CURLE_PEER_FAILED_VERIFICATION && foreign.rc != CURLE_PEER_FAILED_VERIFICATION,
          "[client certificates] the client refused the server: %s / %s", none.err, foreign.err);
    CHECK_INT("[raw client, certificate signed by the CA] status", raw_good, 200);
    CHECK(raw_none < 0 && raw_foreign < 0, "[raw client] without a certificate: %s (%d), "
          "with another issuer's: %s (%d); both must be refused", rc_strerror(raw_none),
          raw_none, rc_strerror(raw_foreign), raw_foreign);
    /* Between s0 and s1: the raw good client's one 2xx, nothing for the others. */
    CHECK(s1.responses_2xx == s0.responses_2xx + 1, "[client certificates] %llu responses "
          "went out to the refused clients and the raw good one (expected 1)",
          (unsigned long long)(s1.responses_2xx - s0.responses_2xx));
    check_http(&f0, "a good client after the refused ones", &after, 200);
    http_res_free(&good);
    http_res_free(&none);
    http_res_free(&foreign);
    http_res_free(&after);
}

/* ------------------------------------------------------------------ */
/* A request in the same segment as the client's Finished             */
/* ------------------------------------------------------------------ */

/* Flush what OpenSSL wrote into wb to the socket, in one send. */
static int tls_flush_bio(rc_conn *c, BIO *wb)
{
    char *p = NULL;
    long n = BIO_get_mem_data(wb, &p);
    int rc = n > 0 ? rc_send(c, p, (size_t)n, 3000) : RC_OK;
    (void)BIO_reset(wb);
    return rc;
}

/* Connect and make the TLS 1.3 handshake on memory BIOs, so that the
 * client's Finished and the first request leave in one segment: the server
 * then decrypts the request while it completes the handshake (h2o decodes
 * it before the handshake callback). Afterwards c speaks TLS through the
 * same SSL, like any rc_connect over TLS. */
static int tls_connect_coalesced(fx *f, rc_conn *c, const char *req)
{
    rc_set_tls(NULL);
    int rc = rc_connect(c, f->port, 3000);
    rc_set_tls(tls_raw_ctx);
    if (rc != RC_OK)
        return rc;
    SSL *ssl = SSL_new(tls_raw_ctx);
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    if (ssl == NULL || rb == NULL || wb == NULL) {
        SSL_free(ssl);
        BIO_free(rb);
        BIO_free(wb);
        return RC_TLS;
    }
    SSL_set_bio(ssl, rb, wb); /* takes both */
    SSL_set_min_proto_version(ssl, TLS1_3_VERSION); /* the client's Finished comes last */
    SSL_set_connect_state(ssl);
    long long deadline = rc_now_ms() + 3000;
    for (;;) {
        int r = SSL_do_handshake(ssl);
        if (r == 1)
            break;
        if (SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ || rc_now_ms() > deadline ||
            tls_flush_bio(c, wb) != RC_OK) {
            ERR_clear_error();
            SSL_free(ssl);
            return RC_TLS;
        }
        /* The server's flight, as it comes. */
        char buf[4096];
        struct pollfd pf = {c->fd, POLLIN, 0};
        if (poll(&pf, 1, 500) <= 0)
            continue;
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n <= 0) {
            SSL_free(ssl);
            return RC_CLOSED;
        }
        BIO_write(rb, buf, (int)n);
    }
    /* The Finished is still in wb: the request's record joins it. */
    if (SSL_write(ssl, req, (int)strlen(req)) <= 0 || BIO_ctrl_pending(rb) != 0) {
        ERR_clear_error();
        SSL_free(ssl);
        return RC_TLS;
    }
    rc = tls_flush_bio(c, wb);
    SSL_set_fd(ssl, c->fd); /* from now on through the socket, as rc_connect's SSLs */
    c->ssl = ssl;
    return rc;
}

/* The framing guard sees a request that arrives with the handshake's end:
 * the bad chunk size that the engines' own parsers may accept gets the
 * core's 400 (h2o parsed such bytes before its guard was in place), a
 * good request is served. */
void test_tls_request_with_finished(void **state)
{
    fx *f = *state;
    const char *what = "chunk size 0x2 in the segment of the client's Finished";
    rc_conn *c = conn_slot(f, what);
    int rc = tls_connect_coalesced(f, c, "POST /echo HTTP/1.1\r\n" HOST
                                   "Transfer-Encoding: chunked\r\n\r\n"
                                   "0x2\r\nAB\r\n0\r\n\r\nGET /hello HTTP/1.1\r\n" HOST "\r\n");
    CHECK(rc == RC_OK, "[%s] %s", what, rc_strerror(rc));
    rc_response r;
    rc = rc_read_response(c, &r, 0, 3000);
    CHECK(rc == RC_OK, "[%s] no answer: %s", what, rc_strerror(rc));
    int st = r.status;
    const char *server = rc_header_get(&r, "Server");
    int libsrv = server && strcmp(server, "libsrv") == 0, has_server = server != NULL;
    rc_response_free(&r);
    CHECK_INT("[chunk size 0x2 with the Finished] status", st, 400);
    /* The core's 400 - or, on an engine whose library answers bad chunk
     * framing itself (SRV_CAP_LIB_ERRORS), the library's: either way not
     * served as a request. */
    CHECK(libsrv || (engine_caps() & SRV_CAP_LIB_ERRORS), "[%s] the 400 is not the core's "
          "(Server: %s)", what, has_server ? "other" : "none");
    conn_expect_closed(c, what, 3000);
    rc_close(c);

    what = "a good request in the segment of the client's Finished";
    c = conn_slot(f, what);
    rc = tls_connect_coalesced(f, c, "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    CHECK(rc == RC_OK, "[%s] %s", what, rc_strerror(rc));
    conn_expect(c, what, 0, 200, "hello", NULL);
    rc_close(c);
}

/* Past max_connections, a refused client that stalls its handshake is cut
 * at the refusal's deadline (about 1 s on h2o; threadpool's refusal reads
 * under the header deadline), and one still in its handshake when the
 * server stops is closed by the stop (the fixture checks the clean stop;
 * the ASan run, that nothing leaks). */
void test_tls_refused_handshake_stalls(void **state)
{
    fx *f = *state;
    enum { HELD = 4 };
    rc_conn *held[HELD];
    for (int i = 0; i < HELD; i++) {
        held[i] = conn_open(f, "max_connections: first 4");
        conn_send_str(held[i], "max_connections: first 4", "GET /hello HTTP/1.1\r\n" HOST "\r\n");
        conn_expect(held[i], "max_connections: first 4", 0, 200, "hello", NULL);
    }
    static const unsigned char part[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00};
    const char *what = "a refused client stalling its handshake";
    rc_set_tls(NULL); /* raw bytes: part of a ClientHello, then silence */
    rc_conn *c = conn_slot(f, what);
    int rc = rc_connect(c, f->port, 3000);
    rc_conn *last = conn_slot(f, "a refused client in its handshake at the stop");
    int rc2 = rc_connect(last, f->port, 3000);
    rc_set_tls(tls_raw_ctx);
    CHECK(rc == RC_OK && rc2 == RC_OK, "[%s] connect: %s / %s", what, rc_strerror(rc),
          rc_strerror(rc2));
    conn_send(c, what, part, sizeof part);
    long long t0 = rc_now_ms();
    int w = rc_wait_close(c, T_HEADER_MS + 3000, NULL);
    CHECK(w == RC_CLOSED || w == RC_RESET, "[%s] still open after %d ms: %s", what,
          T_HEADER_MS + 3000, rc_strerror(w));
    CHECK(rc_now_ms() - t0 >= 500, "[%s] closed after %lld ms, before any deadline", what,
          rc_now_ms() - t0);
    conn_send(last, what, part, sizeof part); /* left in its handshake for the stop */
    rc_sleep_ms(50);
}

/* ------------------------------------------------------------------ */
/* RSA and ECDSA certificates: every signature scheme a client may ask */
/* ------------------------------------------------------------------ */

/* One GET /hello over a fresh TLS connection whose client allows only
 * `version` and the signature schemes `sigalgs` (OpenSSL names), and
 * verifies the server with `ca`. The status, or an RC_* code; *sig_type
 * and *sig_md: the NIDs of the server's handshake signature (e.g.
 * EVP_PKEY_RSA_PSS and NID_sha384), which the client checked. */
static int tls_sig_get(const fx *f, const char *ca, int version, const char *sigalgs,
                       rc_conn *keep, int *sig_type, int *sig_md)
{
    SSL_CTX *ctx = tls_raw_client_ctx(ca, NULL, NULL);
    if (ctx == NULL)
        return RC_TLS;
    if (SSL_CTX_set_min_proto_version(ctx, version) != 1 ||
        SSL_CTX_set_max_proto_version(ctx, version) != 1 ||
        SSL_CTX_set1_sigalgs_list(ctx, sigalgs) != 1) {
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return RC_TLS;
    }
    rc_set_tls(ctx);
    rc_conn c;
    int rc = rc_connect(&c, f->port, 5000);
    *sig_type = *sig_md = NID_undef;
    if (rc == RC_OK)
        rc = rc_send_str(&c, "GET /hello HTTP/1.1\r\nHost: conformance\r\n\r\n", 5000);
    rc_response r;
    if (rc == RC_OK && (rc = rc_read_response(&c, &r, 0, 5000)) == RC_OK) {
        rc = r.status;
        rc_response_free(&r);
        SSL_get_peer_signature_type_nid(c.ssl, sig_type);
        SSL_get_peer_signature_nid(c.ssl, sig_md);
    }
    if (keep != NULL && rc == 200)
        *keep = c; /* the caller's, open */
    else
        rc_close(&c);
    rc_set_tls(tls_raw_ctx);
    SSL_CTX_free(ctx); /* the SSL of a kept connection holds its own reference */
    return rc;
}

/* An RSA-2048 certificate and key made with the openssl CLI. */
static int tls_rsa_make(const char *cert, const char *key)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -keyout %s -out %s -days 2 "
             "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1 "
             ">/dev/null 2>&1", key, cert);
    if (system(cmd) != 0) {
        print_error("RSA certificate: `%s` failed\n", cmd);
        return -1;
    }
    return 0;
}

/* An RSA certificate is served to clients of TLS 1.2 and TLS 1.3 with
 * every RSA signature scheme they may insist on - PKCS#1 v1.5 (TLS 1.2's
 * ServerKeyExchange) and RSA-PSS (TLS 1.3's CertificateVerify, and TLS
 * 1.2's with rsa_pss_rsae_*), each hash - and the client, which verifies
 * the signature and the certificate, accepts it; libcurl too, TLS 1.2 and
 * 1.3. On mhd these signatures are OpenSSL's through GnuTLS's external
 * key (core/tls_gnutls.c), a path of its own per scheme. Then a reload
 * to an ECDSA certificate (ECDSA with SHA-256 and SHA-384 in TLS 1.2,
 * TLS 1.3's ecdsa_secp256r1_sha256; a connection opened before keeps
 * being served) and back to RSA: each reload builds its key anew. And
 * the RSA key from a PEM in memory. Engines with SRV_CAP_TLS. */
void test_tls_signature_schemes(void **state)
{
    (void)state;
    char cert[160], key[160], rsa_cert[160], rsa_key[160];
    snprintf(cert, sizeof cert, "%s/rsa-serving-cert.pem", g_tls_dir);
    snprintf(key, sizeof key, "%s/rsa-serving-key.pem", g_tls_dir);
    snprintf(rsa_cert, sizeof rsa_cert, "%s/rsa-cert.pem", g_tls_dir);
    snprintf(rsa_key, sizeof rsa_key, "%s/rsa-key.pem", g_tls_dir);
    int made = tls_rsa_make(rsa_cert, rsa_key) == 0 && tls_copy_file(rsa_cert, cert) == 0 &&
               tls_copy_file(rsa_key, key) == 0;
    if (!made) {
        unlink(rsa_cert), unlink(rsa_key), unlink(cert), unlink(key);
        fail_msg("cannot make the RSA certificate (openssl CLI)");
    }
    fx f0 = {.m = &MODE_H1};
    srv_config c;
    tls_small_config(&c, cert, key);
    int rc;
    char err[256];
    srv_server *srv = tls_small_start(&f0, &c, &rc, err, sizeof err);
    if (srv == NULL) {
        print_error("start with an RSA certificate: %s (%s)\n", srv_strerror(rc), err);
        unlink(rsa_cert), unlink(rsa_key), unlink(cert), unlink(key);
        fail();
    }

    static const struct {
        int version;
        const char *sigalgs;
        int type, md;
    } want[] = {
        {TLS1_2_VERSION, "rsa_pkcs1_sha256", EVP_PKEY_RSA, NID_sha256},
        {TLS1_2_VERSION, "rsa_pkcs1_sha384", EVP_PKEY_RSA, NID_sha384},
        {TLS1_2_VERSION, "rsa_pkcs1_sha512", EVP_PKEY_RSA, NID_sha512},
        {TLS1_2_VERSION, "rsa_pss_rsae_sha256", EVP_PKEY_RSA_PSS, NID_sha256},
        {TLS1_2_VERSION, "rsa_pss_rsae_sha512", EVP_PKEY_RSA_PSS, NID_sha512},
        {TLS1_3_VERSION, "rsa_pss_rsae_sha256", EVP_PKEY_RSA_PSS, NID_sha256},
        {TLS1_3_VERSION, "rsa_pss_rsae_sha384", EVP_PKEY_RSA_PSS, NID_sha384},
        {TLS1_3_VERSION, "rsa_pss_rsae_sha512", EVP_PKEY_RSA_PSS, NID_sha512},
    };
    int status[sizeof want / sizeof want[0]], type[sizeof want / sizeof want[0]],
        md[sizeof want / sizeof want[0]];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        status[i] = tls_sig_get(&f0, rsa_cert, want[i].version, want[i].sigalgs, NULL, &type[i],
                                &md[i]);
    /* libcurl, TLS 1.2 only and TLS 1.3 only, verifying with the RSA one. */
    http_res l12 = {0}, l13 = {0};
    long curl_versions[2] = {CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2,
                             CURL_SSLVERSION_TLSv1_3 | CURL_SSLVERSION_MAX_TLSv1_3};
    http_res *lr[2] = {&l12, &l13};
    for (int i = 0; i < 2; i++) {
        CURL *h = easy_new(&f0);
        if (h == NULL) {
            lr[i]->rc = CURLE_FAILED_INIT;
            continue;
        }
        curl_easy_setopt(h, CURLOPT_SSLVERSION, curl_versions[i]);
        curl_easy_setopt(h, CURLOPT_CAINFO, rsa_cert);
        http_perform(&f0, h, &(http_req){.path = "/hello"}, lr[i]);
        curl_easy_cleanup(h);
    }

    /* Reload to the run's ECDSA certificate with a connection open, then
     * back to RSA. */
    rc_conn open_conn;
    int sig_type, sig_md;
    int before = tls_sig_get(&f0, rsa_cert, TLS1_3_VERSION, "rsa_pss_rsae_sha256", &open_conn,
                             &sig_type, &sig_md);
    int to_ec = tls_copy_file(g_tls_cert2, cert) == 0 && tls_copy_file(g_tls_key2, key) == 0
                    ? srv_server_reload_tls(srv)
                    : SRV_ESYS;
    static const struct {
        int version;
        const char *sigalgs;
        int md;
    } want_ec[] = {
        {TLS1_2_VERSION, "ecdsa_secp256r1_sha256", NID_sha256},
        {TLS1_2_VERSION, "ecdsa_secp384r1_sha384", NID_sha384}, /* any curve in TLS 1.2 */
        {TLS1_3_VERSION, "ecdsa_secp256r1_sha256", NID_sha256},
    };
    int ec_status[3], ec_type[3], ec_md[3];
    for (size_t i = 0; i < 3; i++)
        ec_status[i] = tls_sig_get(&f0, g_tls_cert2, want_ec[i].version, want_ec[i].sigalgs, NULL,
                                   &ec_type[i], &ec_md[i]);
    int old_status = RC_CLOSED;
    if (before == 200) {
        rc = rc_send_str(&open_conn, "GET /hello HTTP/1.1\r\nHost: conformance\r\n\r\n", 5000);
        rc_response r;
        if (rc == RC_OK && (rc = rc_read_response(&open_conn, &r, 0, 5000)) == RC_OK) {
            rc = r.status;
            rc_response_free(&r);
        }
        old_status = rc;
        rc_close(&open_conn);
    }
    int to_rsa = tls_copy_file(rsa_cert, cert) == 0 && tls_copy_file(rsa_key, key) == 0
                     ? srv_server_reload_tls(srv)
                     : SRV_ESYS;
    int back12 = tls_sig_get(&f0, rsa_cert, TLS1_2_VERSION, "rsa_pkcs1_sha256", NULL, &sig_type,
                             &sig_md);
    int back13 = tls_sig_get(&f0, rsa_cert, TLS1_3_VERSION, "rsa_pss_rsae_sha256", NULL,
                             &sig_type, &sig_md);
    char reload_err[256];
    snprintf(reload_err, sizeof reload_err, "%s", srv_server_last_error(srv));
    srv_server_free(srv);

    /* The key and certificate from memory. */
    http_res mem = {.rc = CURLE_FAILED_INIT};
    char *cert_pem = tls_slurp(rsa_cert), *key_pem = tls_slurp(rsa_key);
    c.tls_cert_file = c.tls_key_file = NULL;
    c.tls_cert_pem = cert_pem;
    c.tls_key_pem = key_pem;
    srv = cert_pem && key_pem ? srv_server_new(g_engine, &c) : NULL;
    rc = srv ? srv_route(srv, "GET", "/hello", h_hello, &f0) : SRV_ENOMEM;
    rc = rc ? rc : srv_server_start(srv);
    char mem_err[256] = "";
    if (rc == 0) {
        f0.port = srv_server_port(srv);
        CURL *h = easy_new(&f0);
        if (h != NULL) {
            curl_easy_setopt(h, CURLOPT_CAINFO, rsa_cert);
            http_perform(&f0, h, &(http_req){.path = "/hello"}, &mem);
            curl_easy_cleanup(h);
        }
    } else if (srv != NULL) {
        snprintf(mem_err, sizeof mem_err, "%s", srv_server_last_error(srv));
    }
    srv_server_free(srv);
    free(cert_pem);
    free(key_pem);
    unlink(rsa_cert), unlink(rsa_key), unlink(cert), unlink(key);

    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *v = want[i].version == TLS1_3_VERSION ? "TLS 1.3" : "TLS 1.2";
        CHECK(status[i] == 200, "[RSA, %s, %s] GET /hello: %s (%d)", v, want[i].sigalgs,
              status[i] < 0 ? rc_strerror(status[i]) : "status", status[i]);
        CHECK(type[i] == want[i].type && md[i] == want[i].md, "[RSA, %s, %s] the server "
              "signed with %s/%s", v, want[i].sigalgs, OBJ_nid2sn(type[i]), OBJ_nid2sn(md[i]));
    }
    check_http(&f0, "RSA certificate, libcurl TLS 1.2", &l12, 200);
    check_http(&f0, "RSA certificate, libcurl TLS 1.3", &l13, 200);
    CHECK_INT("[RSA] a connection opened before the reloads: status", before, 200);
    CHECK(to_ec == 0 && to_rsa == 0, "[RSA] reload to ECDSA: %s, back to RSA: %s (%s)",
          srv_err_name(to_ec), srv_err_name(to_rsa), reload_err);
    for (size_t i = 0; i < 3; i++) {
        const char *v = want_ec[i].version == TLS1_3_VERSION ? "TLS 1.3" : "TLS 1.2";
        CHECK(ec_status[i] == 200, "[reloaded to ECDSA, %s, %s] GET /hello: %s (%d)", v,
              want_ec[i].sigalgs, ec_status[i] < 0 ? rc_strerror(ec_status[i]) : "status",
              ec_status[i]);
        CHECK(ec_type[i] == EVP_PKEY_EC && ec_md[i] == want_ec[i].md, "[reloaded to ECDSA, %s, "
              "%s] the server signed with %s/%s", v, want_ec[i].sigalgs, OBJ_nid2sn(ec_type[i]),
              OBJ_nid2sn(ec_md[i]));
    }
    CHECK_INT("[RSA] after the reload to ECDSA: the connection opened before", old_status, 200);
    CHECK_INT("[RSA] reloaded back to RSA: TLS 1.2 (PKCS#1) status", back12, 200);
    CHECK_INT("[RSA] reloaded back to RSA: TLS 1.3 (RSA-PSS) status", back13, 200);
    CHECK(mem.rc == CURLE_OK, "[RSA] from a PEM in memory: %s (%s)", curl_easy_strerror(mem.rc),
          mem_err[0] ? mem_err : mem.err);
    check_http(&f0, "RSA certificate from memory", &mem, 200);
    http_res_free(&l12);
    http_res_free(&l13);
    http_res_free(&mem);
}
