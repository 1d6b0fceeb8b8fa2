/*
 * A connection of the h2o engine: h2o's socket - TLS included - carries the core's connection
 * (core/h1conn.c: HTTP/1, and HTTP/2 behind it by prior knowledge or ALPN, core/h2conn.c).
 * This file is its I/O (srv__h1io), its wake-ups from other threads and its ticks.
 */
#include "h2o_internal.h"

#include <sys/socket.h>

/* Deadlines are looked at this often (as core/sockloop.c's loops). */
#define EH2O_TICK_MS 50
/* Connections woken from other threads taken per loop turn (eh2o_take_posts). */
#define EH2O_WAKE_BATCH 256
/* A connection's kernel receive buffer (the kernel doubles it). */
#define EH2O_RCVBUF (128 * 1024)


/* The socket's close (h2o_socket_close, or h2o's own on an error): the core's connection lets
 * go, then the policy. */
void eh2o_on_conn_close(void *data)
{
    eh2o_conn *c = data;
    eh2o_thread *t = c->thread;
    eh2o_tls_conn_closed(c);
    if (c->closed != NULL)
        *c->closed = 1;
    eh2o_conn_closed(c);
    h2o_linklist_unlink(&c->link);
    t->nconns--;
    srv__conn_close(&c->conn);
    srv__sendfile_end(&c->sf);
    free(c);
}


static void eh2o_on_read(h2o_socket_t *sock, const char *err);

/* ------------------------------------------------------------------ */
/* srv__h1io: what the core asks of a connection                       */
/* ------------------------------------------------------------------ */

static void eh2o_on_written(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (c != NULL && c->hc != NULL)
        srv__h1conn_written(c->hc, err == NULL);
}

static void eh2o_write(void *io, const srv__buf *bufs, size_t n)
{
    eh2o_conn *c = io;
    h2o_iovec_t v[2];
    for (size_t i = 0; i < n && i < 2; i++)
        v[i] = h2o_iovec_init(bufs[i].base, bufs[i].len);
    h2o_socket_write(c->sock, v, n < 2 ? n : 2, eh2o_on_written);
}

/* A file body by sendfile (cleartext): libh2o 2.2.5 sends only buffers and tells of room
 * only through its writes (srv__sendfile_step on h2o_socket_get_fd; its waits by
 * h2o_socket_write). The end is told on a later turn, never inside the call that asked. */
static void eh2o_sf_step(eh2o_conn *c);

static void eh2o_sf_end(eh2o_conn *c, int ok)
{
    srv__sendfile_end(&c->sf);
    c->sf_done = 1;
    c->sf_ok = ok;
    if (!h2o_timeout_is_linked(&c->sf_next))
        h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->sf_next);
}

static void eh2o_on_sf_next(h2o_timeout_entry_t *e)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, sf_next, e);
    if (!c->sf_done) {
        eh2o_sf_step(c);
        return;
    }
    c->sf_done = 0;
    if (c->hc != NULL)
        srv__h1conn_written(c->hc, c->sf_ok);
}

static void eh2o_on_sf_written(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (c == NULL)
        return;
    if (err != NULL) {
        eh2o_sf_end(c, 0);
        return;
    }
    srv__conn_progress(&c->conn, srv__now_ms());
    eh2o_sf_step(c);
}

static void eh2o_sf_step(eh2o_conn *c)
{
    size_t wait = 0;
    uint64_t moved = 0;
    int r = srv__sendfile_step(&c->sf, h2o_socket_get_fd(c->sock), &wait, &moved);
    if (moved > 0) /* the send deadline moves on */
        srv__conn_progress(&c->conn, srv__now_ms());
    if (r == SRV__SF_BURST) {
        h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->sf_next);
    } else if (r == SRV__SF_WAIT) {
        h2o_iovec_t v = h2o_iovec_init(c->sf.buf, wait);
        h2o_socket_write(c->sock, &v, 1, eh2o_on_sf_written);
    } else {
        eh2o_sf_end(c, r == SRV__SF_DONE);
    }
}

static void eh2o_sendfile(void *io, int fd, uint64_t off, uint64_t len)
{
    eh2o_conn *c = io;
    c->sf = (srv__sendfile){.fd = fd, .off = off, .left = len};
    eh2o_sf_step(c);
}

/* h2o reads all a socket has into its input: it reads again only once the core took all of
 * that, so the input never holds more than one read. */
static void eh2o_read(void *io, int on)
{
    eh2o_conn *c = io;
    c->reading = on;
    if (!on) {
        h2o_socket_read_stop(c->sock);
    } else if (c->sock->input->size != 0) { /* what the core left first, after this call */
        if (!h2o_timeout_is_linked(&c->feed))
            h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->feed);
    } else {
        h2o_socket_read_start(c->sock, eh2o_on_read);
    }
}

static void eh2o_shut(void *io)
{
    eh2o_conn *c = io;
    int fd = h2o_socket_get_fd(c->sock);
    if (fd >= 0)
        shutdown(fd, SHUT_WR);
}

static void eh2o_close(void *io, int abort)
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
static void eh2o_wake_conn(void *io)
{
    eh2o_conn *c = io;
    eh2o_thread *t = c->thread;
    pthread_mutex_lock(&t->mu);
    if (!c->queued) {
        c->queued = 1;
        c->next_posted = t->posted;
        t->posted = c;
    }
    int send = !t->msg_queued;
    t->msg_queued = 1;
    pthread_mutex_unlock(&t->mu);
    if (send)
        h2o_multithread_send_message(&t->post_receiver, &t->msg);
}

static int eh2o_pending(void *io)
{
    eh2o_conn *c = io;
    return c->sock->input->size != 0 || srv__fd_input_waiting(h2o_socket_get_fd(c->sock));
}

static const srv__h1io eh2o_io = {
    .write = eh2o_write,
    .read = eh2o_read,
    .shut = eh2o_shut,
    .close = eh2o_close,
    .wake = eh2o_wake_conn,
    .sendfile = eh2o_sendfile,
    .pending = eh2o_pending,
};

/* ------------------------------------------------------------------ */
/* Reading                                                             */
/* ------------------------------------------------------------------ */

/* What h2o read (decrypted over TLS) to the core, out of h2o's buffer as the core takes it;
 * what it does not take waits there, unread (eh2o_read offers it again). */
static void eh2o_deliver(eh2o_conn *c)
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

static void eh2o_on_feed(h2o_timeout_entry_t *entry)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, feed, entry);
    if (c->hc == NULL)
        return;
    int closed = 0, *outer = c->closed;
    c->closed = &closed;
    eh2o_deliver(c);
    if (closed) {
        if (outer != NULL)
            *outer = 1;
        return;
    }
    c->closed = outer;
    if (c->reading && c->sock->input->size == 0)
        h2o_socket_read_start(c->sock, eh2o_on_read);
}

static void eh2o_on_read(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (c == NULL || c->hc == NULL)
        return;
    if (err != NULL) {
        srv__h1conn_eof(c->hc);
        return;
    }
    int closed = 0, *outer = c->closed;
    c->closed = &closed;
    eh2o_deliver(c);
    if (closed) {
        if (outer != NULL)
            *outer = 1;
        return;
    }
    c->closed = outer;
    if (sock->input->size != 0) /* left for later: no more until the core takes it */
        h2o_socket_read_stop(sock);
}

void eh2o_conn_start(eh2o_conn *c, int h2)
{
    struct sockaddr_storage peer;
    socklen_t plen = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
    c->hc = srv__h1conn_new(c->thread->server->srv, &c->conn, &eh2o_io, c,
                            plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    if (c->hc == NULL) {
        h2o_socket_close(c->sock); /* out of memory: closed unanswered */
        return;
    }
    if (h2 && c->conn.admitted) /* a refused one is answered 503 in HTTP/1 */
        srv__h1conn_h2(c->hc);
    if (c->sock->ssl == NULL) /* file bodies from the descriptor (eh2o_sf_step) */
        srv__h1conn_sendfile(c->hc);
    c->feed.cb = eh2o_on_feed;
    c->sf_next.cb = eh2o_on_sf_next;
    /* What the kernel holds for a client that pipelines while an answer is awaited (h2o
     * reads all a socket has): bounded, so the client's writes stop instead. */
    int size = EH2O_RCVBUF;
    setsockopt(h2o_socket_get_fd(c->sock), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    c->reading = 1;
    h2o_socket_read_start(c->sock, eh2o_on_read);
    if (c->sock->input->size != 0) /* over TLS, bytes that came with the Finished */
        eh2o_on_read(c->sock, NULL);
}

void eh2o_conn_closed(eh2o_conn *c)
{
    eh2o_thread *t = c->thread;
    h2o_timeout_unlink(&c->feed);
    h2o_timeout_unlink(&c->sf_next);
    /* First: the core's connection lets go, and waits for an answer another thread is giving
     * right now, whose wake may list c again; after it no wake comes for c. */
    if (c->hc != NULL) {
        srv__h1conn *hc = c->hc;
        c->hc = NULL;
        srv__h1conn_free(hc); /* a request in the application is cancelled */
    }
    pthread_mutex_lock(&t->mu);
    if (c->queued) { /* no wake may find it gone */
        for (eh2o_conn **p = &t->posted; *p != NULL; p = &(*p)->next_posted)
            if (*p == c) {
                *p = c->next_posted;
                break;
            }
        c->queued = 0;
    }
    pthread_mutex_unlock(&t->mu);
}

/* ------------------------------------------------------------------ */
/* The loop's side                                                     */
/* ------------------------------------------------------------------ */

/* One at a time under the lock (a wake may post the same connection again meanwhile), at most
 * a batch per turn: what is left wakes the loop again, so other sockets get their turn. */
static void eh2o_take_posts(eh2o_thread *t)
{
    for (int i = 0; i < EH2O_WAKE_BATCH; i++) {
        pthread_mutex_lock(&t->mu);
        eh2o_conn *c = t->posted;
        if (c != NULL) {
            t->posted = c->next_posted;
            c->queued = 0;
        }
        pthread_mutex_unlock(&t->mu);
        if (c == NULL)
            return;
        if (c->hc != NULL) /* only c's own wake can close c */
            srv__h1conn_wake(c->hc);
    }
    pthread_mutex_lock(&t->mu);
    int send = t->posted != NULL && !t->msg_queued;
    if (send)
        t->msg_queued = 1;
    pthread_mutex_unlock(&t->mu);
    if (send) /* the rest after the loop's other events */
        h2o_multithread_send_message(&t->post_receiver, &t->msg);
}

/* The receiver of msg, on the loop. */
static void eh2o_on_posted(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, post_receiver, receiver);
    while (!h2o_linklist_is_empty(messages))
        h2o_linklist_unlink(messages->next);
    pthread_mutex_lock(&t->mu);
    t->msg_queued = 0; /* a wake from now on sends it again */
    pthread_mutex_unlock(&t->mu);
    eh2o_take_posts(t);
}

void eh2o_conn_time(eh2o_thread *t, int stopping, int quiescing)
{
    uint64_t now = srv__now_ms();
    for (h2o_linklist_t *n = t->conns.next, *next; n != &t->conns; n = next) {
        next = n->next; /* a close frees c */
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
        if (c->hc != NULL)
            srv__h1conn_time(c->hc, now, stopping, quiescing);
    }
}

static void eh2o_on_tick(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, tick_entry, entry);
    eh2o_conn_time(t, 0, t->quiesced);
    h2o_timeout_link(t->loop, &t->tick, &t->tick_entry);
}

void eh2o_conn_thread_init(eh2o_thread *t)
{
    pthread_mutex_init(&t->mu, NULL);
    h2o_multithread_register_receiver(t->queue, &t->post_receiver, eh2o_on_posted);
    h2o_timeout_init(t->loop, &t->tick, EH2O_TICK_MS);
    t->tick_entry.cb = eh2o_on_tick;
    h2o_timeout_link(t->loop, &t->tick, &t->tick_entry);
}

void eh2o_conn_thread_dispose(eh2o_thread *t)
{
    /* A wake sent just before its connection closed may still wait in the queue: h2o must
     * deliver it before the receiver goes (no wake comes after the last close). */
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&t->mu);
        int queued = t->msg_queued;
        pthread_mutex_unlock(&t->mu);
        if (!queued)
            break;
        h2o_evloop_run(t->loop, 1);
    }
    h2o_multithread_unregister_receiver(t->queue, &t->post_receiver);
    h2o_timeout_unlink(&t->tick_entry);
    h2o_timeout_dispose(t->loop, &t->tick);
    pthread_mutex_destroy(&t->mu);
}
