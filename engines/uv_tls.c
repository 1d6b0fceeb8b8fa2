/*
 * The uv engine's TLS (engines/uv_tls.h): OpenSSL 1.1.1+ (Debian 12: 3.0)
 * on memory BIOs, so that libuv's loop keeps the socket and this file
 * never touches it. The core's SSL_CTX offers ALPN "h2" then "http/1.1"
 * (SRV_CAP_TLS_HTTP2); a reload is taken per loop, by generation, as in
 * threadpool_tls.c.
 */
#include "uv_tls.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

struct euv_tls_ctx {
    SSL_CTX *ctx; /* our reference to the server's current context */
    unsigned gen; /* its srv__tls_generation */
};

struct euv_tls {
    SSL *ssl;
    BIO *in;  /* ciphertext from the socket (the SSL's read BIO) */
    BIO *out; /* ciphertext for the socket (the SSL's write BIO) */
    int failed;
    int notified; /* close_notify queued */
};

/* The same bytes as threadpool_tls.c's and h2o_tls.c's. */
static const char euv_tls_plain[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 48\r\n"
    "Connection: close\r\n\r\nThis port speaks HTTPS: use https:// to call it\n";

const char *euv_tls_plain_400(size_t *len)
{
    *len = sizeof euv_tls_plain - 1;
    return euv_tls_plain;
}

euv_tls_ctx *euv_tls_ctx_new(srv_server *srv, int *failed)
{
    euv_tls_ctx *x = srv__tls_enabled(srv) ? calloc(1, sizeof *x) : NULL;
    if (x != NULL && (x->ctx = srv__tls_ctx(srv, &x->gen)) == NULL) {
        free(x);
        x = NULL;
    }
    *failed = x == NULL && srv__tls_enabled(srv);
    return x;
}

void euv_tls_ctx_free(euv_tls_ctx *x)
{
    if (x == NULL)
        return;
    SSL_CTX_free(x->ctx);
    free(x);
}

euv_tls *euv_tls_new(euv_tls_ctx *x, srv_server *srv)
{
    if (srv__tls_generation(srv) != x->gen) { /* a reload: new connections take it */
        unsigned gen = 0;
        SSL_CTX *ctx = srv__tls_ctx(srv, &gen);
        if (ctx != NULL) {
            SSL_CTX_free(x->ctx);
            x->ctx = ctx;
            x->gen = gen;
        }
    }
    euv_tls *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->ssl = SSL_new(x->ctx);
    t->in = BIO_new(BIO_s_mem());
    t->out = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->in == NULL || t->out == NULL) {
        BIO_free(t->in);
        BIO_free(t->out);
        SSL_free(t->ssl); /* NULL-safe, as BIO_free */
        free(t);
        ERR_clear_error();
        return NULL;
    }
    /* An empty read BIO asks for more (SSL_ERROR_WANT_READ), never an EOF. */
    BIO_set_mem_eof_return(t->in, -1);
    SSL_set_bio(t->ssl, t->in, t->out); /* the SSL owns both now */
    /* Buffers go while a kept-alive connection idles. */
    SSL_set_mode(t->ssl, SSL_MODE_RELEASE_BUFFERS);
    SSL_set_accept_state(t->ssl);
    return t;
}

void euv_tls_free(euv_tls *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    free(t);
}

int euv_tls_put(euv_tls *t, const void *d, size_t n)
{
    /* n is at most one read (the engine's 64 KiB): one BIO_write. */
    return n == 0 || BIO_write(t->in, d, (int)n) == (int)n ? 0 : -1;
}

enum euv_tls_hs euv_tls_handshake(euv_tls *t)
{
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1)
        return EUV_TLS_HS_DONE;
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return EUV_TLS_HS_WAIT; /* WANT_WRITE never waits on a memory BIO */
    t->failed = 1;
    unsigned long err = ERR_peek_error();
    ERR_clear_error();
    if (ERR_GET_LIB(err) == ERR_LIB_SSL && ERR_GET_REASON(err) == SSL_R_HTTP_REQUEST)
        return EUV_TLS_HS_PLAIN;
    return EUV_TLS_HS_FAIL;
}

const unsigned char *euv_tls_alpn(euv_tls *t, unsigned *len)
{
    const unsigned char *p = NULL;
    *len = 0;
    SSL_get0_alpn_selected(t->ssl, &p, len);
    return p;
}

ssize_t euv_tls_read(euv_tls *t, char *buf, size_t cap)
{
    if (t->failed)
        return -1;
    ERR_clear_error();
    int n = SSL_read(t->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
    if (n > 0)
        return n;
    int e = SSL_get_error(t->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return 0;
    if (e != SSL_ERROR_ZERO_RETURN)
        t->failed = 1; /* a bad record: no close_notify after it */
    ERR_clear_error();
    return -1;
}

int euv_tls_buffered(euv_tls *t)
{
    return !t->failed && (SSL_pending(t->ssl) > 0 || BIO_ctrl_pending(t->in) > 0);
}

int euv_tls_write(euv_tls *t, const void *d, size_t n)
{
    if (t->failed)
        return -1;
    while (n > 0) {
        ERR_clear_error();
        int w = SSL_write(t->ssl, d, n > INT_MAX ? INT_MAX : (int)n);
        if (w <= 0) { /* a memory BIO takes everything: this is a real failure */
            t->failed = 1;
            ERR_clear_error();
            return -1;
        }
        d = (const char *)d + w;
        n -= (size_t)w;
    }
    return 0;
}

void euv_tls_close_notify(euv_tls *t)
{
    if (t->failed || t->notified || !SSL_is_init_finished(t->ssl))
        return;
    t->notified = 1;
    ERR_clear_error();
    SSL_shutdown(t->ssl);
    ERR_clear_error();
}

char *euv_tls_take(euv_tls *t, size_t room, size_t *len)
{
    size_t n = BIO_ctrl_pending(t->out);
    *len = n;
    if (n == 0)
        return NULL;
    char *block = malloc(room + n);
    if (block == NULL)
        return NULL;
    int r = BIO_read(t->out, block + room, n > INT_MAX ? INT_MAX : (int)n);
    *len = r > 0 ? (size_t)r : 0;
    if (*len == 0) {
        free(block);
        return NULL;
    }
    return block;
}
