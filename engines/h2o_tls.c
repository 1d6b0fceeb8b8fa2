/*
 * The h2o engine over TLS, with libh2o's own OpenSSL integration: the
 * handshake is h2o_socket_ssl_handshake on the accepted socket, with the
 * core's SSL_CTX (certificate, versions, ciphers, ALPN "h2" then
 * "http/1.1"); once it completes, ALPN picks the core's HTTP/2 or HTTP/1
 * (engines/h2o_conn.c), as in the clear. This is h2o_accept's TLS
 * path, done here so that the handshake has the header deadline and stop
 * closes connections still in it.
 */
#include "h2o_internal.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

struct eh2o_tls_thread {
    h2o_timeout_t handshake; /* header_timeout_ms from the accept */
    SSL_CTX *ctx;            /* our reference to the server's current context */
    unsigned gen;            /* its srv__tls_generation */
};

/* A connection in its handshake (eh2o_conn.tls_hs). */
typedef struct eh2o_tls_hs {
    h2o_timeout_entry_t timeout;
    eh2o_conn *c;
    void (*ready)(eh2o_conn *c, int h2);
} eh2o_tls_hs;

int eh2o_tls_thread_new(eh2o_thread *t, srv_server *srv)
{
    if (!srv__tls_enabled(srv))
        return 0;
    eh2o_tls_thread *tt = calloc(1, sizeof *tt);
    if (tt == NULL)
        return -1;
    tt->ctx = srv__tls_ctx(srv, &tt->gen);
    if (tt->ctx == NULL) {
        free(tt);
        return -1;
    }
    t->tls = tt;
    return 0;
}

void eh2o_tls_thread_loop(eh2o_thread *t)
{
    if (t->tls != NULL)
        h2o_timeout_init(t->loop, &t->tls->handshake, t->server->cfg->header_timeout_ms);
}

void eh2o_tls_thread_dispose(eh2o_thread *t)
{
    if (t->tls != NULL)
        h2o_timeout_dispose(t->loop, &t->tls->handshake);
}

void eh2o_tls_thread_free(eh2o_thread *t)
{
    if (t->tls == NULL)
        return;
    SSL_CTX_free(t->tls->ctx);
    free(t->tls);
    t->tls = NULL;
}

/* Make h2o's handshake fail: it then calls our callback with an error and
 * the socket closes through its own path (there is no public way to close
 * a socket mid-handshake). */
static void eh2o_tls_cut(eh2o_conn *c)
{
    int fd = h2o_socket_get_fd(c->sock);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

static void eh2o_tls_on_timeout(h2o_timeout_entry_t *entry)
{
    eh2o_tls_hs *hs = H2O_STRUCT_FROM_MEMBER(eh2o_tls_hs, timeout, entry);
    eh2o_tls_cut(hs->c); /* a stalled handshake: cut at the header deadline */
}

/* A plain HTTP request sent to the TLS port gets nginx's kind of answer, in
 * the clear, so that a person who typed http:// sees why (the same bytes as
 * threadpool_tls.c). */
static const char eh2o_tls_plain_400[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 48\r\n"
    "Connection: close\r\n\r\nThis port speaks HTTPS: use https:// to call it\n";

/* After a failed handshake: when OpenSSL saw an HTTP request instead of a
 * ClientHello (h2o leaves its error queued), write the 400 in the clear -
 * what the socket takes now, never waiting - and half-close, so the close
 * that follows sends a FIN after it (h2o has read what had arrived). */
static void eh2o_tls_plain_http(h2o_socket_t *sock)
{
    unsigned long e = ERR_peek_last_error();
    ERR_clear_error();
    if (ERR_GET_LIB(e) != ERR_LIB_SSL || ERR_GET_REASON(e) != SSL_R_HTTP_REQUEST)
        return;
    int fd = h2o_socket_get_fd(sock);
    if (fd < 0)
        return;
    ssize_t n = send(fd, eh2o_tls_plain_400, sizeof eh2o_tls_plain_400 - 1,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n; /* a full buffer or a gone client: the close says the rest */
    shutdown(fd, SHUT_WR);
}

static void eh2o_tls_on_handshake(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    eh2o_thread *t = c->thread;
    eh2o_tls_hs *hs = c->tls_hs;
    void (*ready)(eh2o_conn *, int) = hs->ready;
    c->tls_hs = NULL;
    h2o_timeout_unlink(&hs->timeout);
    free(hs);
    if (err != NULL || t->quiesced) {
        if (err != NULL)
            eh2o_tls_plain_http(sock);
        h2o_socket_close(sock); /* eh2o_on_conn_close frees c */
        return;
    }
    /* Refused ones get HTTP/1 (the 503) whatever ALPN chose. Bytes that came with the
     * Finished are the first read. */
    h2o_iovec_t proto = h2o_socket_ssl_get_selected_protocol(sock);
    ready(c, proto.len == 2 && memcmp(proto.base, "h2", 2) == 0);
}

/* A reload: take the new context for connections from now on. */
static void eh2o_tls_refresh(eh2o_thread *t)
{
    eh2o_tls_thread *tt = t->tls;
    srv_server *srv = t->server->srv;
    if (srv__tls_generation(srv) != tt->gen) {
        unsigned gen = 0;
        SSL_CTX *ctx = srv__tls_ctx(srv, &gen);
        if (ctx != NULL) {
            SSL_CTX_free(tt->ctx);
            tt->ctx = ctx;
            tt->gen = gen;
        }
    }
}

int eh2o_tls_accept(eh2o_thread *t, eh2o_conn *c, void (*ready)(eh2o_conn *c, int h2))
{
    eh2o_tls_thread *tt = t->tls;
    if (tt == NULL)
        return 0;
    eh2o_tls_refresh(t);
    eh2o_tls_hs *hs = calloc(1, sizeof *hs);
    if (hs == NULL) {
        h2o_socket_close(c->sock); /* out of memory: closed unanswered */
        return 1;
    }
    hs->c = c;
    hs->ready = ready;
    hs->timeout.cb = eh2o_tls_on_timeout;
    c->tls_hs = hs;
    h2o_timeout_link(t->loop, &tt->handshake, &hs->timeout);
    h2o_socket_ssl_handshake(c->sock, tt->ctx, NULL, eh2o_tls_on_handshake);
    return 1;
}

void eh2o_tls_conn_closed(eh2o_conn *c)
{
    eh2o_tls_hs *hs = c->tls_hs;
    if (hs == NULL)
        return;
    c->tls_hs = NULL;
    h2o_timeout_unlink(&hs->timeout);
    free(hs);
}

int eh2o_tls_handshaking(eh2o_conn *c)
{
    return c->tls_hs != NULL;
}

void eh2o_tls_close(eh2o_conn *c)
{
    if (c->tls_hs != NULL)
        eh2o_tls_cut(c);
}
