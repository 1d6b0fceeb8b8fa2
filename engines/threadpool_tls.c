/*
 * The threadpool engine over TLS: non-blocking OpenSSL on the connection's
 * socket. The poller drives the handshake (under the first head's
 * deadline: a stalled handshake is an idle connection cut at
 * header_timeout_ms) and reads records; SSL_ERROR_WANT_READ/WANT_WRITE
 * become the poller's epoll interest (etp_tls_events). Writers (poller,
 * worker, the respond slot, stop) go through etp_tls_send_some. An SSL is
 * used by one thread at a time, like the rest of the connection.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "threadpool_int.h"

/* A plain HTTP request sent to the TLS port gets nginx's kind of answer, in
 * the clear, so that a person who typed http:// sees why. */
static const char etp_tls_plain_400[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 48\r\n"
    "Connection: close\r\n\r\nThis port speaks HTTPS: use https:// to call it\n";

int etp_tls_attach(etp_poller *p, etp_conn *c)
{
    srv_server *srv = p->st->srv;
    /* The context changes only at a reload: refresh this poller's
     * reference then (the generation is one atomic load). */
    if (p->tls_ctx == NULL || srv__tls_generation(srv) != p->tls_gen) {
        unsigned gen = 0;
        SSL_CTX *ctx = srv__tls_ctx(srv, &gen);
        if (ctx == NULL)
            return -1;
        if (p->tls_ctx)
            SSL_CTX_free(p->tls_ctx);
        p->tls_ctx = ctx;
        p->tls_gen = gen;
    }
    SSL *ssl = SSL_new(p->tls_ctx);
    if (ssl == NULL) {
        ERR_clear_error();
        return -1;
    }
    /* Partial writes and a moving buffer: etp_tls_send_some resumes from
     * a byte offset into head and body, like the cleartext send. Buffers
     * are released while idle (kept-alive connections cost ~no memory). */
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                          SSL_MODE_RELEASE_BUFFERS);
    if (SSL_set_fd(ssl, c->fd) != 1) {
        SSL_free(ssl);
        ERR_clear_error();
        return -1;
    }
    SSL_set_accept_state(ssl);
    c->ssl = ssl;
    c->tls_handshake = 1;
    return 0;
}

/* After an SSL call returned r <= 0: 0 when it waits for the socket (and
 * where), -1 when the connection is done (errno says why). */
static int etp_tls_wait(SSL *ssl, int r, int *want_write, int *failed)
{
    int e = SSL_get_error(ssl, r);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want_write = 0;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        *want_write = 1;
        return 0;
    case SSL_ERROR_ZERO_RETURN: /* close_notify */
        errno = 0;
        return -1;
    case SSL_ERROR_SYSCALL:
        if (errno == EINTR) /* retried by the caller as a wait for input */
            return 0;
        *failed = 1;
        if (errno == 0)
            errno = ECONNRESET;
        ERR_clear_error();
        return -1;
    default: /* SSL_ERROR_SSL: bad input, refused version, ... */
        *failed = 1;
        errno = EPROTO;
        ERR_clear_error();
        return -1;
    }
}

int etp_tls_handshake(etp_conn *c)
{
    ERR_clear_error();
    int r = SSL_do_handshake(c->ssl);
    if (r == 1) {
        c->tls_handshake = 0;
        c->tls_want_write = 0;
        return 1;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_SSL) {
        unsigned long err = ERR_peek_error();
        if (ERR_GET_LIB(err) == ERR_LIB_SSL && ERR_GET_REASON(err) == SSL_R_HTTP_REQUEST) {
            /* Plain HTTP on the TLS port: answer in the clear and close
             * (never block: what the socket takes now). */
            size_t sent = 0;
            etp_send_some(c->fd, etp_tls_plain_400, sizeof etp_tls_plain_400 - 1, NULL, 0,
                          &sent);
            c->tls_plain = 1; /* the poller lingers so the 400 is read */
        }
    }
    return etp_tls_wait(c->ssl, r, &c->tls_want_write, &c->tls_failed);
}

unsigned etp_tls_events(etp_conn *c)
{
    if (c->conn.state == SRV_CONN_LINGER) /* reads the raw socket now */
        return EPOLLIN;
    if (c->tls_want_write)
        return EPOLLOUT;
    /* Decrypted bytes already inside the SSL raise no epoll event: ask for
     * writability too, which fires at once, so the poller reads them. */
    if (!c->tls_handshake && SSL_has_pending(c->ssl))
        return EPOLLIN | EPOLLOUT;
    return EPOLLIN;
}

ssize_t etp_tls_recv(etp_conn *c, void *buf, size_t len)
{
    if (c->tls_failed) {
        errno = EPROTO;
        return -1;
    }
    if (c->tls_handshake) {
        int h = etp_tls_handshake(c);
        if (h <= 0) {
            if (h == 0)
                errno = EAGAIN;
            else if (errno == 0)
                return 0;
            return -1;
        }
    }
    ERR_clear_error();
    int n = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
    if (n > 0) {
        c->tls_want_write = 0; /* whatever it waited for came */
        return n;
    }
    if (etp_tls_wait(c->ssl, n, &c->tls_want_write, &c->tls_failed) == 0) {
        errno = EAGAIN;
        return -1;
    }
    return errno == 0 ? 0 : -1; /* close_notify: the end of the stream */
}

int etp_tls_send_some(SSL *ssl, int *want_write, const void *a, size_t alen, const void *b,
                      size_t blen, size_t *sent)
{
    /* Head and body in one record when they fit: one write, as the
     * cleartext sendmsg does. The bytes offered from a given *sent are
     * always the same, as OpenSSL requires when it retries a write. */
    char one[4096];
    for (;;) {
        size_t s = *sent;
        if (s >= alen + blen) {
            *want_write = 0; /* all out: the SSL waits for nothing now */
            return 1;
        }
        const char *p;
        size_t n;
        if (s < alen && blen > 0 && alen - s + blen <= sizeof one) {
            memcpy(one, (const char *)a + s, alen - s);
            memcpy(one + (alen - s), b, blen);
            p = one;
            n = alen - s + blen;
        } else if (s < alen) {
            p = (const char *)a + s;
            n = alen - s;
        } else {
            p = (const char *)b + (s - alen);
            n = blen - (s - alen);
        }
        if (n > INT32_MAX)
            n = INT32_MAX;
        ERR_clear_error();
        int w = SSL_write(ssl, p, (int)n);
        if (w > 0) {
            *sent += (size_t)w;
            continue;
        }
        int failed = 0;
        if (etp_tls_wait(ssl, w, want_write, &failed) == 0)
            return 0;
        return -1;
    }
}

/* ---- a WebSocket's TLS on the core's socket loop (its thread only) ---- */

static ssize_t etp_tls_io_recv(void *ctx, void *buf, size_t len)
{
    return etp_tls_recv(ctx, buf, len);
}

static ssize_t etp_tls_io_send(void *ctx, const void *buf, size_t len)
{
    etp_conn *c = ctx;
    size_t sent = 0;
    int r = etp_tls_send_some(c->ssl, &c->tls_want_write, buf, len, NULL, 0, &sent);
    c->tls_send_waits = r == 0;
    if (sent > 0)
        return (ssize_t)sent;
    if (r == 0) {
        errno = EAGAIN;
        return -1;
    }
    c->tls_failed = 1;
    return -1;
}

static unsigned etp_tls_io_events(void *ctx, unsigned want)
{
    etp_conn *c = ctx;
    unsigned ev = want;
    if (c->tls_want_write) /* the last SSL call waits for room */
        ev |= EPOLLOUT;
    else if ((want & EPOLLOUT) && c->tls_send_waits) /* a write waits for a record */
        ev |= EPOLLIN;
    if ((want & EPOLLIN) && SSL_has_pending(c->ssl)) /* read, no event would come */
        ev |= EPOLLOUT;
    return ev;
}

static void etp_tls_io_shut(void *ctx)
{
    etp_tls_close_notify(ctx);
}

const srv__sockio etp_tls_sockio = {
    .recv = etp_tls_io_recv,
    .send = etp_tls_io_send,
    .events = etp_tls_io_events,
    .shut = etp_tls_io_shut,
};

int etp_tls_alpn_h2(etp_conn *c)
{
    const unsigned char *p = NULL;
    unsigned len = 0;
    SSL_get0_alpn_selected(c->ssl, &p, &len);
    return len == 2 && memcmp(p, "h2", 2) == 0;
}

void etp_tls_close_notify(etp_conn *c)
{
    if (c->tls_failed || c->tls_handshake || c->io_dead)
        return;
    ERR_clear_error();
    SSL_shutdown(c->ssl); /* one try: the socket is closed next anyway */
    ERR_clear_error();
}

SSL *etp_tls_detach(etp_conn *c, int fd)
{
    if (c->tls_failed || c->tls_handshake || SSL_up_ref(c->ssl) != 1)
        return NULL;
    if (SSL_set_fd(c->ssl, fd) != 1) {
        SSL_free(c->ssl);
        ERR_clear_error();
        return NULL;
    }
    return c->ssl;
}

void etp_tls_shutdown(SSL *ssl)
{
    ERR_clear_error();
    SSL_shutdown(ssl);
    ERR_clear_error();
}

void etp_tls_free(SSL *ssl)
{
    SSL_free(ssl);
}

void etp_tls_poller_free(etp_poller *p)
{
    if (p->tls_ctx) {
        SSL_CTX_free(p->tls_ctx);
        p->tls_ctx = NULL;
    }
}
