/*
 * The h2o engine's HTTP/1 (libh2o-evloop 2.2.5): h2o's sockets - TLS included - carry the
 * core's HTTP/1 (core/h1conn.c, the same for every engine on a loop); libh2o's own HTTP/1
 * never runs. A cleartext connection whose first bytes are HTTP/2's preface (prior knowledge)
 * goes to h2o's HTTP/2 instead (eh2o_h2_accept); over TLS, ALPN decides (engines/h2o_tls.c).
 */
#include "h2o_internal.h"

#include <sys/socket.h>

/* HTTP/2's connection preface (RFC 9113 3.4). */
static const char eh2o_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define EH2O_PREFACE_LEN (sizeof eh2o_preface - 1)

/* HTTP/1 deadlines are looked at this often (as threadpool's poller). */
#define EH2O_H1_TICK_MS 50
/* Connections woken from other threads taken per loop turn (eh2o_h1_take_posts). */
#define EH2O_H1_WAKE_BATCH 256
/* An HTTP/1 connection's kernel receive buffer (the kernel doubles it). */
#define EH2O_H1_RCVBUF (128 * 1024)

eh2o_conn *eh2o_sock_conn(h2o_socket_t *sock)
{
    return sock->on_close.cb == eh2o_on_conn_close ? sock->on_close.data : NULL;
}

static void eh2o_h1_on_read(h2o_socket_t *sock, const char *err);

/* ------------------------------------------------------------------ */
/* srv__h1io: what the core asks of a connection                       */
/* ------------------------------------------------------------------ */

static void eh2o_h1_on_written(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (c != NULL && c->hc != NULL)
        srv__h1conn_written(c->hc, err == NULL);
}

static void eh2o_h1_write(void *io, const srv__buf *bufs, size_t n)
{
    eh2o_conn *c = io;
    h2o_iovec_t v[2];
    for (size_t i = 0; i < n && i < 2; i++)
        v[i] = h2o_iovec_init(bufs[i].base, bufs[i].len);
    h2o_socket_write(c->sock, v, n < 2 ? n : 2, eh2o_h1_on_written);
}

/* h2o reads all a socket has into its input: it reads again only once the core took all of
 * that, so the input never holds more than one read. */
static void eh2o_h1_read(void *io, int on)
{
    eh2o_conn *c = io;
    c->h1_reading = on;
    if (!on) {
        h2o_socket_read_stop(c->sock);
    } else if (c->sock->input->size != 0) { /* what the core left first, after this call */
        if (!h2o_timeout_is_linked(&c->h1_feed))
            h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->h1_feed);
    } else {
        h2o_socket_read_start(c->sock, eh2o_h1_on_read);
    }
}

static void eh2o_h1_shut(void *io)
{
    eh2o_conn *c = io;
    int fd = h2o_socket_get_fd(c->sock);
    if (fd >= 0)
        shutdown(fd, SHUT_WR);
}

static void eh2o_h1_close(void *io, int abort)
{
    eh2o_conn *c = io;
    int fd = h2o_socket_get_fd(c->sock);
    if (abort && fd >= 0) { /* the close resets it (the core lingered already where due) */
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    h2o_socket_close(c->sock); /* eh2o_on_conn_close frees c, now or once TLS is shut */
}

/* Any thread, the connection's lock held: listed for the loop, which one message per loop
 * (sent when none is queued) has take the list. */
static void eh2o_h1_wake(void *io)
{
    eh2o_conn *c = io;
    eh2o_thread *t = c->thread;
    pthread_mutex_lock(&t->h1_mu);
    if (!c->h1_queued) {
        c->h1_queued = 1;
        c->h1_next = t->h1_posted;
        t->h1_posted = c;
    }
    int send = !t->h1_msg_queued;
    t->h1_msg_queued = 1;
    pthread_mutex_unlock(&t->h1_mu);
    if (send)
        h2o_multithread_send_message(&t->h1_receiver, &t->h1_msg);
}

static const srv__h1io eh2o_h1_io = {
    .write = eh2o_h1_write,
    .read = eh2o_h1_read,
    .shut = eh2o_h1_shut,
    .close = eh2o_h1_close,
    .wake = eh2o_h1_wake,
};

/* ------------------------------------------------------------------ */
/* Reading                                                             */
/* ------------------------------------------------------------------ */

/* What h2o read (decrypted over TLS) to the core, out of h2o's buffer as the core takes it;
 * what it does not take waits there, unread (eh2o_h1_read offers it again). */
static void eh2o_h1_deliver(eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    int closed = 0, *outer = c->closed;
    c->closed = &closed;
    while (sock->input->size != 0 && c->hc != NULL) {
        size_t took = srv__h1conn_input(c->hc, sock->input->bytes, sock->input->size);
        if (closed)
            break;
        if (took == 0)
            break;
        h2o_buffer_consume(&sock->input, took);
    }
    if (closed) { /* c is freed */
        if (outer != NULL)
            *outer = 1;
        return;
    }
    c->closed = outer;
}

static void eh2o_h1_on_feed(h2o_timeout_entry_t *entry)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, h1_feed, entry);
    if (c->hc == NULL)
        return;
    int closed = 0, *outer = c->closed;
    c->closed = &closed;
    eh2o_h1_deliver(c);
    if (closed) {
        if (outer != NULL)
            *outer = 1;
        return;
    }
    c->closed = outer;
    if (c->h1_reading && c->sock->input->size == 0)
        h2o_socket_read_start(c->sock, eh2o_h1_on_read);
}

/* A cleartext connection's first bytes: HTTP/2's preface goes to h2o's HTTP/2 (1). */
static int eh2o_h1_sniff(eh2o_conn *c)
{
    h2o_buffer_t *in = c->sock->input;
    size_t m = in->size < EH2O_PREFACE_LEN ? in->size : EH2O_PREFACE_LEN;
    if (m == 0)
        return 0;
    if (memcmp(in->bytes, eh2o_preface, m) != 0) {
        c->sniff = 0; /* HTTP/1 */
        return 0;
    }
    if (m < EH2O_PREFACE_LEN)
        return 1; /* maybe: wait for the rest (the first head's deadline runs) */
    srv__h1conn *hc = c->hc;
    c->hc = NULL;
    c->sniff = 0;
    srv__h1conn_free(hc); /* nothing was given to it */
    eh2o_h2_accept(c, EH2O_PREFACE_LEN);
    return 1;
}

static void eh2o_h1_on_read(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (c == NULL || c->hc == NULL)
        return;
    if (err != NULL) {
        srv__h1conn_eof(c->hc);
        return;
    }
    if (c->sniff && eh2o_h1_sniff(c))
        return;
    int closed = 0, *outer = c->closed;
    c->closed = &closed;
    eh2o_h1_deliver(c);
    if (closed) {
        if (outer != NULL)
            *outer = 1;
        return;
    }
    c->closed = outer;
    if (sock->input->size != 0) /* left for later: no more until the core takes it */
        h2o_socket_read_stop(sock);
}

void eh2o_h1_start(eh2o_conn *c, int sniff)
{
    struct sockaddr_storage peer;
    socklen_t plen = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
    c->hc = srv__h1conn_new(c->thread->server->srv, &c->conn, &eh2o_h1_io, c,
                            plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    if (c->hc == NULL) {
        h2o_socket_close(c->sock); /* out of memory: closed unanswered */
        return;
    }
    /* A refused connection never reaches HTTP/2: the core's parser answers a preface with
     * SETTINGS + GOAWAY, and anything else with the 503. */
    c->sniff = sniff && c->conn.admitted;
    c->h1_feed.cb = eh2o_h1_on_feed;
    /* What the kernel holds for a client that pipelines while an answer is awaited (h2o
     * reads all a socket has): bounded, so the client's writes stop instead. */
    int size = EH2O_H1_RCVBUF;
    setsockopt(h2o_socket_get_fd(c->sock), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    c->h1_reading = 1;
    h2o_socket_read_start(c->sock, eh2o_h1_on_read);
    if (c->sock->input->size != 0) /* over TLS, bytes that came with the Finished */
        eh2o_h1_on_read(c->sock, NULL);
}

void eh2o_h1_closed(eh2o_conn *c)
{
    eh2o_thread *t = c->thread;
    h2o_timeout_unlink(&c->h1_feed);
    pthread_mutex_lock(&t->h1_mu);
    if (c->h1_queued) { /* no wake may find it gone */
        for (eh2o_conn **p = &t->h1_posted; *p != NULL; p = &(*p)->h1_next)
            if (*p == c) {
                *p = c->h1_next;
                break;
            }
        c->h1_queued = 0;
    }
    pthread_mutex_unlock(&t->h1_mu);
    if (c->hc != NULL) {
        srv__h1conn *hc = c->hc;
        c->hc = NULL;
        srv__h1conn_free(hc); /* a request in the application is cancelled */
    }
}

/* ------------------------------------------------------------------ */
/* The loop's side                                                     */
/* ------------------------------------------------------------------ */

/* One at a time under the lock (a wake may post the same connection again meanwhile), at most
 * a batch per turn: what is left wakes the loop again, so other sockets get their turn. */
void eh2o_h1_take_posts(eh2o_thread *t)
{
    for (int i = 0; i < EH2O_H1_WAKE_BATCH; i++) {
        pthread_mutex_lock(&t->h1_mu);
        eh2o_conn *c = t->h1_posted;
        if (c != NULL) {
            t->h1_posted = c->h1_next;
            c->h1_queued = 0;
        }
        pthread_mutex_unlock(&t->h1_mu);
        if (c == NULL)
            return;
        if (c->hc != NULL) /* only c's own wake can close c */
            srv__h1conn_wake(c->hc);
    }
    pthread_mutex_lock(&t->h1_mu);
    int send = t->h1_posted != NULL && !t->h1_msg_queued;
    if (send)
        t->h1_msg_queued = 1;
    pthread_mutex_unlock(&t->h1_mu);
    if (send) /* the rest after the loop's other events */
        h2o_multithread_send_message(&t->h1_receiver, &t->h1_msg);
}

/* The receiver of h1_msg, on the loop. */
static void eh2o_h1_on_message(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, h1_receiver, receiver);
    while (!h2o_linklist_is_empty(messages))
        h2o_linklist_unlink(messages->next);
    pthread_mutex_lock(&t->h1_mu);
    t->h1_msg_queued = 0; /* a wake from now on sends it again */
    pthread_mutex_unlock(&t->h1_mu);
    eh2o_h1_take_posts(t);
}

void eh2o_h1_time(eh2o_thread *t, int stopping, int quiescing)
{
    uint64_t now = srv__now_ms();
    for (h2o_linklist_t *n = t->conns.next, *next; n != &t->conns; n = next) {
        next = n->next; /* a close frees c */
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
        if (c->hc != NULL)
            srv__h1conn_time(c->hc, now, stopping, quiescing);
    }
}

static void eh2o_h1_on_tick(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, h1_tick_entry, entry);
    eh2o_h1_time(t, 0, t->quiesced);
    h2o_timeout_link(t->loop, &t->h1_tick, &t->h1_tick_entry);
}

void eh2o_h1_thread_init(eh2o_thread *t)
{
    pthread_mutex_init(&t->h1_mu, NULL);
    h2o_multithread_register_receiver(t->ctx.queue, &t->h1_receiver, eh2o_h1_on_message);
    h2o_timeout_init(t->loop, &t->h1_tick, EH2O_H1_TICK_MS);
    t->h1_tick_entry.cb = eh2o_h1_on_tick;
    h2o_timeout_link(t->loop, &t->h1_tick, &t->h1_tick_entry);
}

void eh2o_h1_thread_dispose(eh2o_thread *t)
{
    /* A wake sent just before its connection closed may still wait in the queue: h2o must
     * deliver it before the receiver goes (no wake comes after the last close). */
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&t->h1_mu);
        int queued = t->h1_msg_queued;
        pthread_mutex_unlock(&t->h1_mu);
        if (!queued)
            break;
        h2o_evloop_run(t->loop, 1);
    }
    h2o_multithread_unregister_receiver(t->ctx.queue, &t->h1_receiver);
    h2o_timeout_unlink(&t->h1_tick_entry);
    h2o_timeout_dispose(t->loop, &t->h1_tick);
    pthread_mutex_destroy(&t->h1_mu);
}
