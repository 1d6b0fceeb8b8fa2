/*
 * Conformance cases over HTTPS (`conformance ENGINE tls`), the same on
 * every engine with SRV_CAP_TLS: client certificates (tls_client_ca_file:
 * a client whose certificate the CA file verifies is served; one without
 * a certificate, or with one the CA did not issue, is refused in the
 * handshake and never reaches a handler), and a client that finished its
 * handshake and sent nothing is idle at srv_server_stop (closed at once,
 * as an idle cleartext connection).
 */
#include "conformance.h"

#include <fcntl.h>
#include <sys/time.h>

#include <openssl/ssl.h>

/* One GET /hello with an optional client certificate; fills *r. */
static void tls_client_get(const fx *f, const char *cert, const char *key, http_res *r)
{
    CURL *h = easy_new(f);
    CHECK(h != NULL, "curl_easy_init");
    curl_easy_setopt(h, CURLOPT_CAINFO, g_tls_cert);
    if (cert != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, cert);
        curl_easy_setopt(h, CURLOPT_SSLKEY, key);
    }
    http_perform(f, h, &(http_req){.path = "/hello"}, r);
    curl_easy_cleanup(h);
}

void test_tls_client_certificate(void **state)
{
    (void)state;
    fx f0 = {.m = &MODE_H1};
    srv_config c;
    srv_config_init(&c);
    c.host = "127.0.0.1";
    c.port = 0;
    c.io_threads = 1;
    c.worker_threads = 2;
    c.header_timeout_ms = T_HEADER_MS;
    c.tls_cert_file = g_tls_cert;
    c.tls_key_file = g_tls_key;
    c.tls_client_ca_file = g_tls_cert2; /* self-signed: its own CA */
    srv_server *srv = srv_server_new(g_engine, &c);
    CHECK(srv != NULL, "srv_server_new");
    int rc = srv_route(srv, "GET", "/hello", h_hello, &f0);
    rc = rc ? rc : srv_server_start(srv);
    if (rc != 0) {
        print_error("start with tls_client_ca_file: %s (%s)\n", srv_strerror(rc),
                    srv_server_last_error(srv));
        srv_server_free(srv);
        fail();
    }
    f0.port = srv_server_port(srv);
    http_res good, none, other;
    tls_client_get(&f0, g_tls_cert2, g_tls_key2, &good); /* issued by the CA */
    tls_client_get(&f0, NULL, NULL, &none);
    tls_client_get(&f0, g_tls_cert, g_tls_key, &other); /* not issued by it */
    srv_stats st;
    srv_server_stats(srv, &st);
    srv_server_free(srv);
    check_http(&f0, "a client certificate the CA verifies", &good, 200);
    check_body(&f0, "a client certificate the CA verifies", &good, "hello");
    CHECK(none.rc != CURLE_OK && none.status != 200, "[no client certificate] served: curl %s, "
          "status %ld", curl_easy_strerror(none.rc), none.status);
    CHECK(other.rc != CURLE_OK && other.status != 200, "[a client certificate of another CA] "
          "served: curl %s, status %ld", curl_easy_strerror(other.rc), other.status);
    CHECK(st.requests == 1, "[client certificates] %llu requests reached the server, expected "
          "only the verified client's", (unsigned long long)st.requests);
    http_res_free(&good);
    http_res_free(&none);
    http_res_free(&other);
}

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
