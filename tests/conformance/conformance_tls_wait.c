/*
 * Conformance over HTTPS (`conformance ENGINE tls`), the same on every
 * engine with SRV_CAP_TLS: a server waiting for a client's part of the
 * handshake waits idle. libmicrohttpd 0.9.75's epoll loop spun on such a
 * connection (GnuTLS reads the socket itself during the handshake, so MHD
 * never saw the EAGAIN that clears its read-ready mark): a whole core for
 * as long as the client took, a round trip per handshake on a real network.
 */
#include "conformance.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>

#include <openssl/bio.h>
#include <openssl/ssl.h>

/* User + system CPU of this process (the server's threads and ours), ms. */
static long long cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000LL +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

/* Whatever OpenSSL wrote into wb, onto the socket. */
static void flush_wb(rc_conn *c, BIO *wb, const char *what)
{
    char *p = NULL;
    long n = BIO_get_mem_data(wb, &p);
    if (n > 0)
        conn_send(c, what, p, (size_t)n);
    (void)BIO_reset(wb);
}

/* A client that has the server's whole flight and holds its Finished for
 * HOLD_MS: the server's CPU meanwhile stays far below a spinning core's,
 * then the handshake completes and the request is answered. HOLD_MS plus
 * the handshake stays well under the first head's deadline (T_HEADER_MS). */
#define HOLD_MS 400

void test_tls_handshake_waits_idle(void **state)
{
    fx *f = *state;
    const char *what = "handshake held by the client";
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    CHECK(cctx != NULL, "SSL_CTX_new");
    SSL *ssl = SSL_new(cctx);
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, rb, wb);
    SSL_set_connect_state(ssl);
    rc_conn *c = conn_open(f, what);
    /* A blocking socket with a 5 s bound on each read. */
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {5, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    /* ClientHello out, the server's flight in, until our side is done: in
     * TLS 1.3 OpenSSL then holds its Finished in wb, unsent. */
    int hs;
    while ((hs = SSL_do_handshake(ssl)) != 1) {
        CHECK(SSL_get_error(ssl, hs) == SSL_ERROR_WANT_READ, "[%s] the client's handshake "
              "failed", what);
        flush_wb(c, wb, what);
        char buf[16384];
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        CHECK(n > 0, "[%s] the server's flight did not come (recv %zd)", what, n);
        BIO_write(rb, buf, (int)n);
    }
    CHECK(SSL_version(ssl) == TLS1_3_VERSION, "[%s] TLS 1.3 expected, got %s", what,
          SSL_get_version(ssl));
    long long cpu0 = cpu_ms(), t0 = rc_now_ms();
    rc_sleep_ms(HOLD_MS);
    long long used = cpu_ms() - cpu0, held = rc_now_ms() - t0;
    /* The Finished and a request, then the answer. */
    const char *req = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK(SSL_write(ssl, req, (int)strlen(req)) > 0, "[%s] SSL_write", what);
    flush_wb(c, wb, what);
    char got[4096];
    size_t len = 0;
    for (;;) {
        int r = SSL_read(ssl, got + len, (int)(sizeof got - 1 - len));
        if (r > 0) {
            len += (size_t)r;
            if (len == sizeof got - 1)
                break;
            continue;
        }
        if (SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ)
            break; /* the server's close */
        char buf[16384];
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n <= 0)
            break;
        BIO_write(rb, buf, (int)n);
    }
    got[len] = '\0';
    SSL_free(ssl);
    SSL_CTX_free(cctx);
    CHECK(strncmp(got, "HTTP/1.1 200", 12) == 0, "[%s] no 200 after the held Finished: "
          "\"%.40s\"", what, got);
    /* A spinning server burns about `held` ms (a core); one that waits,
     * next to nothing. A third of it is far from both. */
    CHECK(used * 3 < held, "[%s] the process used %lld ms of CPU while the client held its "
          "Finished for %lld ms: the server spins on a handshake waiting for its client",
          what, used, held);
}
