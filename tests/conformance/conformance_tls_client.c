/*
 * Conformance cases over HTTPS (`conformance ENGINE tls`), the same on
 * every engine with SRV_CAP_TLS (client certificates are
 * conformance_tls_raw.c's test_tls_client_certificate): a client that finished its
 * handshake and sent nothing is idle at srv_server_stop (closed at once,
 * as an idle cleartext connection); tls_ciphers syntax per TLS library and
 * tls_min_version SRV_TLS_1_3.
 */
#include "conformance.h"

#include <fcntl.h>
#include <sys/time.h>

#include <openssl/ssl.h>

/* A TLS client with its handshake done and no request: srv_server_stop
 * closes it at once instead of waiting for a request that never comes. */
void test_tls_stop_idle_after_handshake(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "idle after the handshake");
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    CHECK(cctx != NULL, "SSL_CTX_new");
    SSL *ssl = SSL_new(cctx);
    /* A blocking socket with a 5 s bound on each read: plain SSL_connect. */
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {5, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    SSL_set_fd(ssl, c->fd);
    int hs = SSL_connect(ssl);
    CHECK(hs == 1, "[idle after the handshake] the TLS handshake failed");
    long long t0 = rc_now_ms();
    int rc = srv_server_stop(f->srv, 5000);
    long long took = rc_now_ms() - t0;
    f->stopped = 1;
    char b;
    int r = SSL_read(ssl, &b, 1); /* the server's close: 0 or an error, no byte */
    SSL_free(ssl);
    SSL_CTX_free(cctx);
    CHECK(rc == 0, "[idle after the handshake] srv_server_stop returned %s", srv_err_name(rc));
    CHECK(r <= 0, "[idle after the handshake] a byte arrived after the stop");
    /* Under the header deadline: not cut by it as an arriving request. */
    CHECK(took < T_HEADER_MS / 2, "[idle after the handshake] srv_server_stop(srv, 5000) took %lld ms: "
          "the connection was waited for as if a request were arriving", took);
}

/* tls_ciphers and tls_min_version. An OpenSSL cipher list is served by the
 * OpenSSL engines and refused at start, with a message saying what it
 * takes, by an engine that serves TLS with GnuTLS (mhd: a priority
 * string); a list no library parses is refused everywhere; with
 * SRV_TLS_1_3 a TLS 1.2-only client is refused by every engine. */
void test_tls_ciphers_and_min_version(void **state)
{
    (void)state;
    fx f0 = {.m = &MODE_H1};
    srv_config c;
    tls_small_config(&c, g_tls_cert, g_tls_key);
    char err[256];
    int rc;

    c.tls_ciphers = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384";
    srv_server *srv = tls_small_start(&f0, &c, &rc, err, sizeof err);
    if (srv != NULL) {
        http_res r;
        http_do(&f0, &(http_req){.path = "/hello"}, &r);
        srv_server_free(srv);
        check_http(&f0, "an OpenSSL cipher list, accepted", &r, 200);
        http_res_free(&r);
    } else {
        CHECK(rc == SRV_ETLS && strstr(err, "GnuTLS priority string") != NULL,
              "[an OpenSSL cipher list] refused with %s, but not as a GnuTLS engine says: %s",
              srv_err_name(rc), err);
    }

    c.tls_ciphers = "no-such-cipher-or-keyword";
    srv = tls_small_start(&f0, &c, &rc, err, sizeof err);
    if (srv != NULL)
        srv_server_free(srv);
    CHECK(rc == SRV_ETLS && strstr(err, "tls_ciphers") != NULL, "[tls_ciphers nobody parses] "
          "start returned %s: %s", srv_err_name(rc), err);

    c.tls_ciphers = NULL;
    c.tls_min_version = SRV_TLS_1_3;
    srv = tls_small_start(&f0, &c, &rc, err, sizeof err);
    CHECK(srv != NULL, "[SRV_TLS_1_3] start: %s (%s)", srv_err_name(rc), err);
    http_res old, now;
    CURL *h = easy_new(&f0);
    CHECK(h != NULL, "curl_easy_init");
    curl_easy_setopt(h, CURLOPT_SSLVERSION,
                     (long)(CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2));
    http_perform(&f0, h, &(http_req){.path = "/hello"}, &old);
    curl_easy_cleanup(h);
    http_do(&f0, &(http_req){.path = "/hello"}, &now);
    srv_server_free(srv);
    CHECK(old.rc != CURLE_OK, "[SRV_TLS_1_3] a TLS 1.2-only client was served");
    check_http(&f0, "[SRV_TLS_1_3] a TLS 1.3 client", &now, 200);
    http_res_free(&old);
    http_res_free(&now);
}
