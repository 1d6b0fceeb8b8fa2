/*
 * The threadpool engine over TLS: non-blocking OpenSSL on the connection's
 * socket, as the core's loop's layer (srv__sockio, api/srv_sockloop.h).
 * The loop drives the handshake (under the first head's deadline: a
 * stalled handshake is an idle connection cut at header_timeout_ms), then
 * reads and writes records through it; SSL_ERROR_WANT_READ/WANT_WRITE
 * become the loop's epoll interest (etp_tls_events). Everything here runs
 * on the connection's loop thread.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "threadpool_int.h"

typedef struct etp_tls {
    SSL *ssl;
    int handshake;  /* not complete yet */
    int want_write; /* the last SSL call waits for the socket to drain */
    int send_waits; /* a write waits for the SSL (a record to read first) */
    int failed;     /* a fatal TLS error: no close_notify, no more I/O */
} etp_tls;

/* A plain HTTP request sent to the TLS port gets nginx's kind of answer, in
 * the clear, so that a person who typed http:// sees why. */
static const char etp_tls_plain_400[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 48\r\n"
    "Connection: close\r\n\r\nThis port speaks HTTPS: use https:// to call it\n";

/* srv__sockloop_layer.open: a new SSL on fd from the loop's current
 * context (its reference changes only at a reload: one atomic load). */
static void *etp_tls_open(void *arg, int fd)
{
    etp_tls_ref *ref = arg;
    if (ref->ctx == NULL || srv__tls_generation(ref->srv) != ref->gen) {
        unsigned gen = 0;
        SSL_CTX *ctx = srv__tls_ctx(ref->srv, &gen);
        if (ctx == NULL)
            return NULL;
        if (ref->ctx)
            SSL_CTX_free(ref->ctx);
        ref->ctx = ctx;
        ref->gen = gen;
    }
    etp_tls *t = calloc(1, sizeof *t);
    SSL *ssl = t ? SSL_new(ref->ctx) : NULL;
    /* Partial writes and a moving buffer: the loop resends its rest from a
     * new address. Buffers are released while idle (kept-alive connections
     * cost ~no memory). */
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1) {
        SSL_free(ssl);
        free(t);
        ERR_clear_error();
        return NULL;
    }
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                          SSL_MODE_RELEASE_BUFFERS);
    SSL_set_accept_state(ssl);
    t->ssl = ssl;
    t->handshake = 1;
    return t;
}

/* After an SSL call returned r <= 0: 0 when it waits for the socket (and
 * where), -1 when the connection is done (errno says why: 0 for
 * close_notify). */
static int etp_tls_wait(etp_tls *t, int r)
{
    switch (SSL_get_error(t->ssl, r)) {
    case SSL_ERROR_WANT_READ:
        t->want_write = 0;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        t->want_write = 1;
        return 0;
    case SSL_ERROR_ZERO_RETURN: /* close_notify */
        errno = 0;
        return -1;
    case SSL_ERROR_SYSCALL:
        if (errno == EINTR) /* retried by the loop as a wait for input */
            return 0;
        t->failed = 1;
        if (errno == 0)
            errno = ECONNRESET;
        ERR_clear_error();
        return -1;
    default: /* SSL_ERROR_SSL: bad input, refused version, ... */
        t->failed = 1;
        errno = EPROTO;
        ERR_clear_error();
        return -1;
    }
}

static int etp_tls_handshake(void *ctx, const unsigned char **alpn, unsigned *alpn_len)
{
    etp_tls *t = ctx;
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1) {
        t->handshake = 0;
        t->want_write = 0;
        SSL_get0_alpn_selected(t->ssl, alpn, alpn_len);
        return SRV__SIO_DONE;
    }
    if (SSL_get_error(t->ssl, r) == SSL_ERROR_SSL) {
        unsigned long err = ERR_peek_error();
        if (ERR_GET_LIB(err) == ERR_LIB_SSL && ERR_GET_REASON(err) == SSL_R_HTTP_REQUEST) {
            /* Plain HTTP on the TLS port: answered in the clear (what the
             * socket takes now), then the loop closes. */
            ssize_t w = send(SSL_get_fd(t->ssl), etp_tls_plain_400, sizeof etp_tls_plain_400 - 1,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)w;
            t->failed = 1;
            ERR_clear_error();
            return SRV__SIO_PLAIN;
        }
    }
    return etp_tls_wait(t, r) == 0 ? SRV__SIO_WAIT : SRV__SIO_FAILED;
}

static ssize_t etp_tls_recv(void *ctx, void *buf, size_t len)
{
    etp_tls *t = ctx;
    if (t->failed) {
        errno = EPROTO;
        return -1;
    }
    ERR_clear_error();
    int n = SSL_read(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0) {
        t->want_write = 0; /* whatever it waited for came */
        return n;
    }
    if (etp_tls_wait(t, n) == 0) {
        errno = EAGAIN;
        return -1;
    }
    return errno == 0 ? 0 : -1; /* close_notify: the end of the stream */
}

static ssize_t etp_tls_send(void *ctx, const void *buf, size_t len)
{
    etp_tls *t = ctx;
    if (t->failed) {
        errno = EPIPE;
        return -1;
    }
    ERR_clear_error();
    int w = SSL_write(t->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    t->send_waits = 0;
    if (w > 0) {
        t->want_write = 0;
        return w;
    }
    if (etp_tls_wait(t, w) == 0) {
        t->send_waits = 1;
        errno = EAGAIN;
        return -1;
    }
    t->failed = 1;
    errno = EPIPE;
    return -1;
}

static unsigned etp_tls_events(void *ctx, unsigned want)
{
    etp_tls *t = ctx;
    unsigned ev = want;
    if (t->want_write) /* the last SSL call waits for room */
        ev |= EPOLLOUT;
    else if ((want & EPOLLOUT) && t->send_waits) /* a write waits for a record */
        ev |= EPOLLIN;
    /* Decrypted bytes already inside the SSL raise no epoll event: ask for
     * writability too, which fires at once, so the loop reads them. */
    if ((want & EPOLLIN) && !t->handshake && SSL_has_pending(t->ssl))
        ev |= EPOLLOUT;
    return ev;
}

/* close_notify once, without waiting (not after a fatal error). */
static void etp_tls_shut(void *ctx)
{
    etp_tls *t = ctx;
    if (t->failed || t->handshake)
        return;
    ERR_clear_error();
    SSL_shutdown(t->ssl); /* one try: the socket is closed next anyway */
    ERR_clear_error();
}

static void etp_tls_free(void *ctx)
{
    etp_tls *t = ctx;
    SSL_free(t->ssl);
    free(t);
}

static const srv__sockio etp_tls_sockio = {
    .recv = etp_tls_recv,
    .send = etp_tls_send,
    .events = etp_tls_events,
    .shut = etp_tls_shut,
    .handshake = etp_tls_handshake,
    .free = etp_tls_free,
};

srv__sockloop_layer etp_tls_layer(etp_tls_ref *ref)
{
    return (srv__sockloop_layer){.sio = &etp_tls_sockio, .open = etp_tls_open, .arg = ref};
}

void etp_tls_ref_free(etp_tls_ref *ref)
{
    if (ref->ctx) {
        SSL_CTX_free(ref->ctx);
        ref->ctx = NULL;
    }
}
