/*
 * The "threadpool" engine (Tomcat NIO connector style): io_threads poller
 * threads run epoll over the shared listening socket and every connection
 * that is not being served, reading request heads and bodies non-blocking
 * through the core's sans-I/O HTTP/1 parser (core/http1.c). A complete
 * request of a non-blocking route runs on the poller that read it, which
 * writes the answer without blocking; any other gets a worker of the core's
 * pool, which runs the handler, writes the answer, serves pipelined
 * requests already buffered, and hands the connection back to its poller.
 * Idle and slow clients cost no worker.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "srv_h1conn.h"
#include "threadpool_int.h"

/* A cleartext connection the poller waits on for its next request: armed
 * level-triggered, for good (etp_watch). */
#define ETP_IDLE_EVENTS ((uint32_t)(EPOLLIN | EPOLLRDHUP))

static void etp_conn_run(srv_job *job);
static void etp_unwatch(etp_conn *c);
static int etp_poller_feed(etp_state *st, etp_conn *c, const char *d, size_t n);
static void etp_stream_begin(etp_state *st, etp_conn *c, srv_request *req);
static void etp_stream_pump(etp_state *st, etp_conn *c);
static void etp_mq_remove(etp_conn *c);
static void etp_body_begin(etp_state *st, etp_conn *c, const char *rest, size_t n);
static void etp_body_step(etp_state *st, etp_conn *c);

/* Set on the poller thread while it dispatches connection c's request: a
 * respond for c on this thread then comes from inside the handler. */
static _Thread_local etp_conn *etp_dispatching;

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static void etp_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void etp_set_phase(etp_conn *c, enum etp_phase ph)
{
    atomic_store_explicit(&c->phase, ph, memory_order_relaxed);
}


/* How long a blocking write may make no progress (the policy's send rule). */
static int etp_write_timeout(const etp_state *st)
{
    unsigned t = st->cfg->header_timeout_ms;
    return t < SRV_SEND_MIN_TIMEOUT_MS ? SRV_SEND_MIN_TIMEOUT_MS : srv__ms_left(t, 0);
}

/* What the connection waits for now (the core's policy sets its deadline:
 * api/srv_conn.h). */
static void etp_wait_for(etp_conn *c, enum srv__conn_state state)
{
    srv__conn_set(&c->conn, state, srv__now_ms());
}


/* ------------------------------------------------------------------ */
/* A connection's I/O: the socket, or TLS (engines/threadpool_tls.c)   */
/* ------------------------------------------------------------------ */

/* Cleartext costs one test of c->ssl per call over the plain socket call. */
static inline ssize_t etp_io_recv(etp_conn *c, void *buf, size_t len)
{
    if (c->ssl)
        return etp_tls_recv(c, buf, len);
    return recv(c->fd, buf, len, MSG_DONTWAIT);
}

static inline int etp_io_send_some(etp_conn *c, const void *a, size_t alen, const void *b,
                                   size_t blen, size_t *sent)
{
    if (c->ssl)
        return etp_tls_send_some(c->ssl, &c->tls_want_write, a, alen, b, blen, sent);
    return etp_send_some(c->fd, a, alen, b, blen, sent);
}

/* etp_send_from for a connection: over TLS a write may wait for input (a
 * key update), so poll for what the SSL waits for. */
static int etp_io_send_from(etp_conn *c, int timeout_ms, const void *a, size_t alen,
                            const void *b, size_t blen, size_t sent)
{
    if (!c->ssl)
        return etp_send_from(c->fd, timeout_ms, a, alen, b, blen, sent);
    for (;;) {
        int r = etp_io_send_some(c, a, alen, b, blen, &sent);
        if (r != 0)
            return r > 0 ? 0 : -1;
        struct pollfd pfd = {.fd = c->fd, .events = c->tls_want_write ? POLLOUT : POLLIN};
        int p = poll(&pfd, 1, timeout_ms);
        if (p < 0 && errno == EINTR)
            continue;
        if (p <= 0)
            return -1;
    }
}

/* Our side is done: close_notify over TLS, then the TCP half-close. */
static void etp_io_shut_wr(etp_conn *c)
{
    if (c->ssl)
        etp_tls_close_notify(c);
    shutdown(c->fd, SHUT_WR);
}

/* The core's canned 503, when no request could be built to answer. */
static void etp_send_refusal(int fd)
{
    size_t len = 0, sent = 0;
    const char *p = srv__refusal_503(&len);
    etp_send_some(fd, p, len, NULL, 0, &sent);
}

/* The same on a connection (over TLS when it is one). */
static void etp_conn_send_refusal(etp_conn *c)
{
    size_t len = 0, sent = 0;
    const char *p = srv__refusal_503(&len);
    etp_io_send_some(c, p, len, NULL, 0, &sent);
}

/* Write the core's answer (already final) without blocking: what the socket
 * takes now. Used by the poller, which never waits on one client. */
static void etp_write_now(int fd, srv_request *req)
{
    size_t hlen = 0, blen = 0, sent = 0;
    const char *head = srv__response_http1_head(req, &hlen);
    const void *body = srv__response_body(req, &blen);
    if (head)
        etp_send_some(fd, head, hlen, body, blen, &sent);
    else
        etp_send_refusal(fd);
}

/* etp_write_now on a connection (TLS or not). */
static void etp_conn_write_now(etp_conn *c, srv_request *req)
{
    if (!c->ssl) {
        etp_write_now(c->fd, req);
        return;
    }
    size_t hlen = 0, blen = 0, sent = 0;
    const char *head = srv__response_http1_head(req, &hlen);
    const void *body = srv__response_body(req, &blen);
    if (head)
        etp_io_send_some(c, head, hlen, body, blen, &sent);
    else
        etp_conn_send_refusal(c);
}

/* A request the core answers at once with `status` (no engine data, so the
 * respond slot ignores it), written without blocking and released. */
static void etp_answer_now(etp_state *st, etp_conn *c, srv_request *req, int status)
{
    if (!req)
        req = srv__request_new(st->srv, (const struct sockaddr *)&c->peer, c->peer_len);
    if (!req) {
        etp_conn_send_refusal(c);
        return;
    }
    srv__request_set_engine_data(req, NULL);
    srv__request_fail(req, status);
    etp_conn_write_now(c, req);
    srv__request_release(req);
}

/* ------------------------------------------------------------------ */
/* Closing                                                             */
/* ------------------------------------------------------------------ */

/* After a feed: a request began (srv_server_stop's grace waits for it
 * until it runs, fails, or the connection goes; the policy counts it). */
static void etp_note_feed(etp_conn *c, enum srv_http1_event ev)
{
    if (ev == SRV_HTTP1_FAIL)
        etp_wait_for(c, SRV_CONN_APP); /* answered now: nothing arrives */
    else if (!srv__http1_idle(&c->parser) && !c->conn.begun)
        srv__conn_begun(&c->conn, srv__now_ms());
}

/* Close and forget a connection (not a refused one). The fd is closed only
 * under st->mu, once unlinked, so stop() never shuts down a number already
 * reused. The unlock is the last touch of the engine's state: stop() may
 * return (and destroy free it) right after. */
static void etp_conn_finish(etp_conn *c, int linger)
{
    etp_state *st = c->st;
    etp_set_phase(c, ETP_PH_CLOSING);
    if (c->req) {
        srv__request_release(c->req);
        c->req = NULL;
    }
    if (c->ready) {
        srv__request_release(c->ready);
        c->ready = NULL;
    }
    if (c->wreq) {
        srv__request_release(c->wreq);
        c->wreq = NULL;
    }
    if (c->bmode && c->inl) { /* a streamed body cut short */
        srv__body_detach(c->inl);
        if (!srv__request_cancel(c->inl) && !c->inl_answered) {
            /* Answered from another thread (the application, the core's
             * timeout): its etp_respond may not have reached c yet, and c
             * must outlive it. It sets inl_done and posts under c->mu. */
            pthread_mutex_lock(&c->mu);
            while (!c->inl_done)
                pthread_cond_wait(&c->cv, &c->mu);
            pthread_mutex_unlock(&c->mu);
        }
        c->bmode = ETP_B_NONE;
    }
    etp_mq_remove(c); /* nothing of it may wait in the queue once freed */
    if (c->inl) { /* at stop once the core answered everything, or a
                   * streamed body's request whose client left */
        srv__request_release(c->inl);
        c->inl = NULL;
    }
    if (c->sreq) { /* a stream cut short: no kick comes after the detach */
        srv__stream_detach(c->sreq);
        etp_mq_remove(c);
        srv__request_release(c->sreq);
        c->sreq = NULL;
    }
    /* Unread input makes close() send a reset that can destroy the response
     * just written: after an error, linger; otherwise drop what came. A
     * write that stalled is reset instead: a FIN queued behind bytes the
     * client does not read would keep it waiting for them. */
    if (c->stalled && !c->detached) {
        struct linger lg = {1, 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    } else if (c->detached) {
        etp_drain(c->fd, 0); /* stop() writes and shuts through its own fd */
    } else if (linger || c->pend_off < c->pend_len) {
        etp_io_shut_wr(c);
        etp_drain(c->fd, linger ? SRV_LINGER_MS : 0);
    } else if (!c->io_dead) {
        etp_io_shut_wr(c);
        etp_drain(c->fd, 0);
    }
    if (c->ssl) /* stop() may hold its own reference (etp_tls_detach) */
        etp_tls_free(c->ssl);
    etp_unwatch(c); /* a dup'd fd may live on */
    srv__http1_free(&c->parser);
    free(c->pend);

    pthread_mutex_lock(&st->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        st->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    close(c->fd);
    if (c->detached)
        st->detached--;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    srv__conn_close(&c->conn); /* its slot and counts */
    free(c);
    if (--st->open <= st->detached) /* what stop() waits for */
        pthread_cond_broadcast(&st->drained);
    pthread_mutex_unlock(&st->mu);
}

/* ------------------------------------------------------------------ */
/* The poller                                                          */
/* ------------------------------------------------------------------ */

/* c->p->plock held. */
static void etp_plist_add(etp_conn *c)
{
    etp_poller *p = c->p;
    c->pprev = NULL;
    c->pnext = p->plist;
    if (p->plist)
        p->plist->pprev = c;
    p->plist = c;
    c->in_plist = 1;
}

/* c->p->plock held. */
static void etp_plist_del(etp_conn *c)
{
    if (!c->in_plist)
        return;
    if (c->pprev)
        c->pprev->pnext = c->pnext;
    else
        c->p->plist = c->pnext;
    if (c->pnext)
        c->pnext->pprev = c->pprev;
    c->pprev = c->pnext = NULL;
    c->in_plist = 0;
}

/*
 * Whoever has c: watch it for `events` in its poller's epoll. With
 * EPOLLONESHOT one event comes, then c is whoever takes it's until watched
 * again. Without (ETP_IDLE_EVENTS) it stays armed: the poller's own wait
 * for the next request of a cleartext connection it just answered, which
 * then costs no epoll_ctl per request; the poller calls etp_unwatch_idle
 * before c goes anywhere else. 0, or -1 (errno).
 */
static int etp_watch(etp_conn *c, uint32_t events)
{
    if (c->watch == events && !(events & EPOLLONESHOT))
        return 0; /* armed already */
    struct epoll_event ev = {.events = events, .data.ptr = c};
    int rc = epoll_ctl(c->p->epfd, c->watch ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &ev);
    if (rc == 0)
        c->watch = events;
    return rc;
}

/* c leaves the epoll (the loop's takes it, or it closes). */
static void etp_unwatch(etp_conn *c)
{
    if (c->watch)
        epoll_ctl(c->p->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->watch = 0;
}

/* Poller: c, watched ETP_IDLE_EVENTS, goes to a worker, a late answer, a
 * stream or a body: nothing may be reported for it meanwhile, not even a
 * hang-up (an epoll reports those whatever the events), so it leaves the
 * epoll until watched again. */
static void etp_unwatch_idle(etp_conn *c)
{
    if (c->watch == ETP_IDLE_EVENTS)
        etp_unwatch(c);
}

/* Watch the connection again (one event, then it is ours until re-armed). */
static int etp_arm(etp_state *st, etp_conn *c)
{
    (void)st;
    return etp_watch(c, (c->ssl ? etp_tls_events(c) : EPOLLIN) | EPOLLRDHUP | EPOLLONESHOT);
}

/* Poller: read c's next bytes when they come: armed for good in cleartext
 * (ETP_IDLE_EVENTS), once over TLS (its events change with the SSL). */
static int etp_read_on(etp_state *st, etp_conn *c)
{
    return c->ssl ? etp_arm(st, c) : etp_watch(c, ETP_IDLE_EVENTS);
}

/* Poller: forget a connection it owns and close it. */
static void etp_poller_close(etp_state *st, etp_conn *c, int linger)
{
    (void)st;
    pthread_mutex_lock(&c->p->plock);
    etp_plist_del(c);
    pthread_mutex_unlock(&c->p->plock);
    if (!c->conn.admitted) {
        etp_unwatch(c);
        if (c->req)
            srv__request_release(c->req);
        srv__http1_free(&c->parser);
        if (c->ssl) {
            if (linger)
                etp_tls_close_notify(c);
            etp_tls_free(c->ssl);
        }
        if (linger)
            etp_linger_close(c->fd, 0);
        else
            close(c->fd);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        srv__conn_close(&c->conn);
        free(c);
        return;
    }
    etp_conn_finish(c, 0);
    (void)linger; /* lingering was done in the poller already */
}

/* Poller: the answer is written; shut our side and read what the client
 * still sends (SRV_LINGER_MS at most) without holding anything up. */
static void etp_poller_linger(etp_state *st, etp_conn *c)
{
    etp_io_shut_wr(c);
    c->tls_want_write = 0; /* lingering reads the raw socket */
    etp_wait_for(c, SRV_CONN_LINGER);
    if (etp_arm(st, c) != 0)
        etp_poller_close(st, c, 0);
}

/* Poller: answer the message being read with `status` and close. */
static void etp_poller_fail(etp_state *st, etp_conn *c, int status)
{
    srv_request *req = c->req;
    c->req = NULL;
    if (c->parser.h2_preface) { /* not HTTP/1: a GOAWAY it understands */
        size_t sent = 0, len = 0;
        const char *refusal = srv__h2_preface_refusal(&len);
        etp_io_send_some(c, refusal, len, NULL, 0, &sent);
        if (req)
            srv__request_release(req);
    } else {
        etp_answer_now(st, c, req, status);
    }
    etp_poller_linger(st, c);
}

/* Keep n bytes read past a request (pipelined) in c->pend; d may point
 * into the old c->pend. -1 when out of memory. */
static int etp_keep_rest(etp_conn *c, const char *d, size_t n)
{
    char *p = NULL;
    if (n > 0) {
        p = malloc(n);
        if (!p)
            return -1;
        memcpy(p, d, n);
    }
    free(c->pend);
    c->pend = p;
    c->pend_off = 0;
    c->pend_len = n;
    return 0;
}

/* The bytes of req's answer: its HTTP/1 head and body, or the 101 of a
 * WebSocket (*up set: once it is out, the socket is the socket loop's). */
static const char *etp_answer(srv_request *req, size_t *hlen, const void **body, size_t *blen,
                              int *up)
{
    const char *head = srv__sockloop_upgrade_head(req, hlen);
    *up = head != NULL;
    *body = NULL;
    *blen = 0;
    if (head)
        return head;
    *body = srv__response_body(req, blen);
    return srv__response_http1_head(req, hlen);
}

/* The bytes read past the request being answered (NULL: none). */
static const char *etp_pend(const etp_conn *c)
{
    return c->pend ? c->pend + c->pend_off : NULL;
}

/* The socket loop is done with c (its thread): close c. */
static void etp_loop_done(void *ctx)
{
    etp_conn *c = ctx;
    c->io_dead = 1; /* its close handshake is over: no shut, no drain */
    etp_conn_finish(c, 0);
}

/* c goes to the core's socket loop, made at the first (NULL: stopping,
 * or out of memory): from here stop keeps off it, and the poller and the
 * workers forget it. threadpool has no event loop of its own to carry a
 * WebSocket or an HTTP/2 connection. */
static srv__sockloop *etp_hand_over(etp_conn *c)
{
    etp_state *st = c->st;
    pthread_mutex_lock(&st->mu);
    if (st->sockloop == NULL && !st->ws_stopped &&
        srv__sockloop_start(&st->sockloop, st->srv) != 0)
        st->sockloop = NULL;
    srv__sockloop *l = st->sockloop;
    if (l) /* stop reads phases under st->mu */
        etp_set_phase(c, ETP_PH_UPGRADED);
    pthread_mutex_unlock(&st->mu);
    if (!l)
        return NULL;
    pthread_mutex_lock(&c->p->plock);
    etp_plist_del(c);
    pthread_mutex_unlock(&c->p->plock);
    etp_unwatch(c); /* the loop's epoll has it */
    /* The early bytes are copied by the add; c may be gone once it returns. */
    c->pend_off = c->pend_len;
    return l;
}

/*
 * req's 101 is out (on the poller or a worker, whichever has c): the socket
 * carries req's WebSocket from now on, on the core's socket loop, with the
 * n bytes the client sent after its handshake. -1: the loop has c and
 * closes it through etp_loop_done (do not touch c again); 0: it could not
 * take it (stopping, out of memory): the caller closes c.
 */
static int etp_upgrade(etp_conn *c, srv_request *req, const char *early, size_t n)
{
    c->served++;
    srv__sockloop *l = etp_hand_over(c);
    int rc = l ? srv__sockloop_add(l, c->fd, c->ssl ? &etp_tls_sockio : NULL, c, req, &c->conn,
                                   early, n, etp_loop_done, c)
               : SRV_ESTATE;
    if (!l)
        srv__sockloop_upgrade_drop(req);
    srv__request_release(req);
    if (rc != 0) {
        c->io_dead = 1;
        return 0;
    }
    return -1;
}

/*
 * Poller: c's first bytes are HTTP/2's (the prior-knowledge preface, whose
 * request line the parser took, or ALPN "h2"): the core's socket loop
 * carries the connection from here, HTTP/2 being the core's
 * (core/h2conn.c), with `d` (n bytes read after what the parser took;
 * after the preface's line, that line first). -1: the loop has c; 0: it
 * could not take it, and the preface gets its GOAWAY.
 */
static int etp_http2(etp_state *st, etp_conn *c, int preface, const char *d, size_t n)
{
    static const char line[] = "PRI * HTTP/2.0\r\n";
    size_t lead = preface ? sizeof line - 1 : 0;
    char *early = malloc(lead + n + 1);
    srv__sockloop *l = early ? etp_hand_over(c) : NULL;
    if (!l) {
        free(early);
        return 0;
    }
    memcpy(early, line, lead);
    if (n > 0)
        memcpy(early + lead, d, n);
    if (c->req) {
        srv__request_release(c->req);
        c->req = NULL;
    }
    if (preface) /* the parser's failure said answered: a fresh connection again,
                  * for HTTP/2's first frames (core/h2conn.c's policy from here) */
        etp_wait_for(c, SRV_CONN_FIRST);
    int rc = srv__sockloop_add_h2(l, c->fd, c->ssl ? &etp_tls_sockio : NULL, c, &c->conn,
                                  (const struct sockaddr *)&c->peer, c->peer_len, early,
                                  lead + n, etp_loop_done, c);
    free(early);
    if (rc != 0) {
        c->io_dead = 1;
        etp_poller_close(st, c, 0);
    }
    return -1;
}

/*
 * Poller: write c's inline answer (c->inl) without blocking. 1: written and
 * kept alive, the poller goes on with the bytes after it; 0: the connection
 * lingers or closed, or the socket was full and a worker writes the rest
 * under the send deadline (then `rest` is kept for it).
 */
static int etp_inline_write(etp_state *st, etp_conn *c, const char *rest, size_t n)
{
    srv_request *req = c->inl;
    pthread_mutex_lock(&c->mu);
    c->inl = NULL;
    pthread_mutex_unlock(&c->mu);
    c->inl_answered = 0;
    if (srv__response_streamed(req)) { /* the poller writes it as it comes */
        if (n > 0 && etp_keep_rest(c, rest, n) != 0)
            c->lost_input = 1;
        etp_unwatch_idle(c);
        etp_stream_begin(st, c, req);
        return 0;
    }
    size_t hlen = 0, blen = 0, sent = 0;
    const void *body = NULL;
    int up = 0;
    const char *head = etp_answer(req, &hlen, &body, &blen, &up);
    int r = head ? etp_io_send_some(c, head, hlen, body, blen, &sent) : -1;
    if (r > 0 && up) {
        if (etp_upgrade(c, req, rest, n) == 0)
            etp_poller_close(st, c, 0);
        return 0;
    }
    if (r == 0) {
        if (n > 0 && etp_keep_rest(c, rest, n) != 0)
            c->lost_input = 1;
        c->wreq = req;
        c->wsent = sent;
        etp_unwatch_idle(c);
        pthread_mutex_lock(&c->p->plock);
        etp_plist_del(c);
        pthread_mutex_unlock(&c->p->plock);
        atomic_store(&c->write_since, srv__now_ms()); /* stop's grace counts from here */
        etp_wait_for(c, SRV_CONN_SEND);
        etp_set_phase(c, ETP_PH_WQUEUED);
        if (srv__pool_submit(st->srv, &c->job) != 0)
            etp_conn_finish(c, 0);
        return 0;
    }
    int keep = r > 0 && !c->lost_input && srv__response_keep_alive(req);
    srv__sockloop_upgrade_drop(req); /* a 101 that did not go out */
    srv__request_release(req);
    c->served++;
    if (r < 0) {
        c->io_dead = 1;
        etp_poller_close(st, c, 0);
        return 0;
    }
    if (!keep) {
        etp_poller_linger(st, c);
        return 0;
    }
    etp_wait_for(c, SRV_CONN_IDLE);
    return 1;
}

/* Poller: a complete request of a non-blocking route (or one the core
 * answers itself): the handler runs here, inside dispatch. Returns like
 * etp_inline_write; 0 also when the handler returned without answering:
 * the connection then waits, unread, for the answer through c->p->mq. */
static int etp_inline_run(etp_state *st, etp_conn *c, const char *rest, size_t n)
{
    srv_request *req = c->req;
    c->req = NULL;
    pthread_mutex_lock(&c->mu);
    c->inl = req;
    pthread_mutex_unlock(&c->mu);
    c->inl_answered = 0;
    etp_dispatching = c;
    srv__request_dispatch(req);
    etp_dispatching = NULL;
    etp_wait_for(c, SRV_CONN_APP); /* in flight (counted by dispatch) */
    if (c->inl_answered)
        return etp_inline_write(st, c, rest, n);
    /* Later from another thread, srv_after or the core's timeout. HTTP/1
     * answers in order: the next request waits in c->pend meanwhile. */
    if (n > 0 && etp_keep_rest(c, rest, n) != 0)
        c->lost_input = 1;
    srv__http1_trim(&c->parser);
    c->awaiting = 1;
    etp_unwatch_idle(c);
    return 0;
}

/* Poller: the late answer of c's inline request: write it, then go on with
 * the pipelined bytes or wait for input. */
static void etp_inline_resume(etp_state *st, etp_conn *c)
{
    c->awaiting = 0;
    char *buf = c->pend;
    size_t off = c->pend_off, len = c->pend_len;
    c->pend = NULL;
    c->pend_off = c->pend_len = 0;
    const char *rest = buf ? buf + off : NULL;
    if (etp_inline_write(st, c, rest, len - off) && etp_poller_feed(st, c, rest, len - off) &&
        etp_arm(st, c) != 0)
        etp_poller_close(st, c, 0);
    free(buf);
}

/* Poller: take every late inline answer posted by etp_respond. */
static void etp_poller_messages(etp_poller *p)
{
    etp_state *st = p->st;
    pthread_mutex_lock(&p->mqlock);
    etp_conn *c = p->mq_head;
    p->mq_head = p->mq_tail = NULL;
    pthread_mutex_unlock(&p->mqlock);
    while (c) {
        /* in_mq stays set until c's turn: a post meanwhile is dropped
         * (this turn looks at everything), never re-links c. */
        pthread_mutex_lock(&p->mqlock);
        etp_conn *next = c->mq_next;
        c->mq_next = NULL;
        c->in_mq = 0;
        pthread_mutex_unlock(&p->mqlock);
        if (c->sreq)
            etp_stream_pump(st, c); /* a stream_kick */
        else if (c->bmode)
            etp_body_step(st, c); /* a body_kick, or its answer */
        else if (c->inl)
            etp_inline_resume(st, c);
        c = next;
    }
}

/* Any thread but the poller inside c's dispatch: c's inline request is
 * answered; the poller writes it. The eventfd is written only when the
 * queue was empty (the poller reads it before it takes the queue). */
static void etp_post(etp_conn *c)
{
    etp_poller *p = c->p;
    pthread_mutex_lock(&p->mqlock);
    if (c->in_mq) { /* a streamed body's kick and answer share one post */
        pthread_mutex_unlock(&p->mqlock);
        return;
    }
    int was_empty = p->mq_head == NULL;
    c->mq_next = NULL;
    c->in_mq = 1;
    if (p->mq_tail)
        p->mq_tail->mq_next = c;
    else
        p->mq_head = c;
    p->mq_tail = c;
    pthread_mutex_unlock(&p->mqlock);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(p->msg_fd, &one, sizeof one);
        (void)w;
    }
}

/* Poller: a complete request. A non-blocking route runs here; any other
 * gives the connection to a worker. 1: answered and kept alive here, go on
 * with `rest`; 0: the poller is done with the connection for now. */
static int etp_poller_complete(etp_state *st, etp_conn *c, const char *rest, size_t n)
{
    if (!c->conn.admitted) { /* over max_connections: read, then refused */
        srv_request *req = c->req;
        c->req = NULL;
        etp_answer_now(st, c, req, 503);
        etp_poller_linger(st, c);
        return 0;
    }
    if (srv__request_nonblocking(c->req))
        return etp_inline_run(st, c, rest, n);
    /* pipelined bytes: the worker parses them after */
    if (n > 0 && etp_keep_rest(c, rest, n) != 0) {
        etp_poller_fail(st, c, 500);
        return 0;
    }
    c->ready = c->req;
    c->req = NULL;
    etp_unwatch_idle(c);
    pthread_mutex_lock(&c->p->plock);
    etp_plist_del(c);
    pthread_mutex_unlock(&c->p->plock);
    etp_wait_for(c, SRV_CONN_QUEUED);
    etp_set_phase(c, ETP_PH_QUEUED);
    if (srv__pool_submit(st->srv, &c->job) != 0)
        etp_conn_finish(c, 0);
    return 0;
}

/* Poller: a lingering connection is readable: drop what came. */
static void etp_poller_drain(etp_state *st, etp_conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->p->rbuf, sizeof c->p->rbuf, MSG_DONTWAIT);
        if (n > 0) {
            if (srv__conn_linger_bytes(&c->conn, (size_t)n, srv__now_ms()))
                continue;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (etp_arm(st, c) == 0)
                return;
        }
        etp_poller_close(st, c, 0);
        return;
    }
}

/* Poller: parse n bytes of c's input. 1: all consumed, the connection is
 * still the poller's to read; 0: it is gone, lingers, waits for an inline
 * answer, or a worker has it. */
static int etp_poller_feed(etp_state *st, etp_conn *c, const char *d, size_t n)
{
    if (n == 0)
        return 1;
    size_t off = 0;
    enum srv_http1_event ev = SRV_HTTP1_HEAD_READY;
    /* Until the input runs out; after HEAD_READY feed again even with
     * nothing left: a request without a body completes then. */
    while (off < n || ev == SRV_HTTP1_HEAD_READY) {
        if (srv__http1_fresh(&c->parser) && c->served > 0) /* the head's own deadline */
            etp_wait_for(c, SRV_CONN_HEAD);
        if (!c->req) {
            c->req = srv__request_new(st->srv, (const struct sockaddr *)&c->peer, c->peer_len);
            if (!c->req) {
                etp_poller_fail(st, c, 503);
                return 0;
            }
            srv__request_set_engine_data(c->req, c);
        }
        size_t used = 0;
        ev = srv__http1_feed(&c->parser, c->req, d + off, n - off, &used);
        off += used;
        etp_note_feed(c, ev);
        if (ev == SRV_HTTP1_FAIL) {
            /* HTTP/2 by prior knowledge: the first bytes of a connection. */
            if (c->parser.h2_preface && c->served == 0 && c->conn.admitted && !c->ssl &&
                srv__sockloop_http2() && etp_http2(st, c, 1, d + off, n - off) < 0)
                return 0;
            etp_poller_fail(st, c, srv__http1_status(&c->parser));
            return 0;
        }
        if (ev == SRV_HTTP1_HEAD_READY) {
            if (c->conn.admitted && srv__request_streams_body(c->req)) {
                etp_unwatch_idle(c);
                etp_body_begin(st, c, d + off, n - off);
                return 0;
            }
            etp_wait_for(c, SRV_CONN_BODY);
            if (c->conn.admitted && srv__http1_body_expected(&c->parser) &&
                srv__request_expects_continue(c->req)) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                size_t sent = 0;
                etp_io_send_some(c, cont, sizeof cont - 1, NULL, 0, &sent);
            }
            continue;
        }
        if (ev == SRV_HTTP1_MESSAGE_COMPLETE && !etp_poller_complete(st, c, d + off, n - off))
            return 0;
    }
    return 1;
}

/* Poller: the connection is readable: read and parse until the request is
 * complete, the input runs out, or it fails. */
static void etp_poller_read(etp_state *st, etp_conn *c)
{
    /* The worker that handed the connection back wrote its fields before
     * re-arming it under plock: taking plock makes that visible here in
     * the memory model (epoll alone orders it only in the kernel). */
    pthread_mutex_lock(&c->p->plock);
    pthread_mutex_unlock(&c->p->plock);
    if (c->sreq) { /* a stream waiting for room in the socket */
        etp_stream_pump(st, c);
        return;
    }
    if (c->bhead) { /* a worker found a streamed body's head */
        c->bhead = 0;
        char *buf = c->pend;
        size_t off = c->pend_off, len = c->pend_len;
        c->pend = NULL;
        c->pend_off = c->pend_len = 0;
        etp_body_begin(st, c, buf ? buf + off : NULL, len - off);
        free(buf);
        return;
    }
    if (c->bmode) { /* a streamed body's bytes */
        etp_body_step(st, c);
        return;
    }
    if (c->conn.state == SRV_CONN_LINGER) {
        etp_poller_drain(st, c);
        return;
    }
    for (;;) {
        ssize_t n = etp_io_recv(c, c->p->rbuf, sizeof c->p->rbuf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (etp_read_on(st, c) != 0)
                etp_poller_close(st, c, 0);
            return;
        }
        if (n < 0 && c->tls_plain) { /* the cleartext 400 must be read */
            etp_poller_linger(st, c);
            return;
        }
        if (n <= 0) { /* EOF or reset, idle or mid-request: nobody to answer */
            c->io_dead = n < 0;
            etp_poller_close(st, c, 0);
            return;
        }
        /* ALPN chose HTTP/2: the first bytes after the handshake are its. */
        if (c->ssl && c->served == 0 && c->conn.admitted && srv__http1_fresh(&c->parser) &&
            !c->req && etp_tls_alpn_h2(c) && etp_http2(st, c, 0, c->p->rbuf, (size_t)n) < 0)
            return;
        if (!etp_poller_feed(st, c, c->p->rbuf, (size_t)n))
            return;
        /* Most likely all there is; TLS reads one record a call: on until
         * it waits for the socket. */
        if ((size_t)n < sizeof c->p->rbuf && !c->ssl) {
            if (etp_read_on(st, c) != 0)
                etp_poller_close(st, c, 0);
            return;
        }
    }
}

/* Poller: deadlines, as the core's policy rules them (api/srv_conn.h): a
 * request that started gets 408 (503 at a stop); an idle connection
 * closes quietly. */
static void etp_poller_scan(etp_poller *p, uint64_t now, int stopping)
{
    etp_state *st = p->st;
    int quiescing = atomic_load(&st->quiescing);
    for (;;) {
        etp_conn *due = NULL;
        enum srv__conn_due what = SRV_CONN_WAIT;
        pthread_mutex_lock(&p->plock);
        for (etp_conn *c = p->plist; c; c = c->pnext) {
            what = srv__conn_due(&c->conn, now, stopping, quiescing);
            if (what != SRV_CONN_WAIT) {
                due = c;
                break;
            }
        }
        pthread_mutex_unlock(&p->plock);
        if (!due)
            return;
        if (what == SRV_CONN_CLOSE && quiescing && !stopping && !due->ssl &&
            srv__conn_quiesce_keeps(&due->conn, now, stopping, quiescing,
                                    srv__fd_input_waiting(due->fd)))
            continue; /* its request is there: read next */
        if (what == SRV_CONN_CLOSE) {
            due->io_dead |= due->sreq != NULL; /* a stream cut: no orderly end */
            due->stalled |= due->conn.state == SRV_CONN_SEND; /* its write made no progress */
            etp_poller_close(st, due, 0);
        } else if (due->conn.state == SRV_CONN_BODY_STREAM && !stopping) {
            /* A streamed body below the pace: 408 (the core answers, its
             * respond posts c). */
            due->bmode = ETP_B_OVER;
            due->awaiting = 1;
            etp_wait_for(due, SRV_CONN_APP);
            srv__body_end(due->inl, 408);
        } else if (!due->conn.admitted || stopping) {
            /* A refusal, or a stop while this request was arriving: the 503
             * every engine gives the requests it cannot finish. */
            srv_request *req = due->req;
            due->req = NULL;
            etp_answer_now(st, due, req, srv__conn_status(&due->conn));
            if (stopping)
                etp_poller_close(st, due, 1);
            else
                etp_poller_linger(st, due);
        } else {
            etp_poller_fail(st, due, srv__conn_status(&due->conn));
        }
    }
}

/* Over max_connections or out of memory: answer 503 at once and close,
 * without ever blocking on the client. */
static void etp_refuse_now(etp_state *st, int fd, const struct sockaddr_storage *peer,
                           socklen_t peer_len)
{
    if (srv__tls_enabled(st->srv)) {
        /* No handshake here (it could block): a TLS client cannot read a
         * cleartext 503, so it only sees the close. */
        etp_linger_close(fd, 0);
        return;
    }
    srv_request *req = srv__request_new(st->srv, (const struct sockaddr *)peer, peer_len);
    if (req) {
        srv__request_fail(req, 503); /* respond ignores it: no engine data */
        etp_write_now(fd, req);
        srv__request_release(req);
    } else {
        etp_send_refusal(fd);
    }
    etp_linger_close(fd, 0); /* drain what already arrived, never wait */
}

/* Out of memory for a connection: refused at once, counted all the same. */
static void etp_refuse_oom(etp_state *st, int fd, const struct sockaddr_storage *peer,
                           socklen_t peer_len)
{
    srv__stats_connection_opened(st->srv);
    etp_refuse_now(st, fd, peer, peer_len);
    srv__stats_connection_closed(st->srv);
}

/* Poller p accepted fd. The connection goes to the pollers in turn (a burst
 * of connects lands on whichever poller woke first); it stays with that
 * poller between requests. */
static void etp_accepted(etp_poller *p, int fd, const struct sockaddr_storage *peer,
                         socklen_t peer_len)
{
    etp_state *st = p->st;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    etp_conn *c = srv__zalloc(sizeof *c);
    if (!c) {
        etp_refuse_oom(st, fd, peer, peer_len);
        return;
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        etp_refuse_oom(st, fd, peer, peer_len);
        return;
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        etp_refuse_oom(st, fd, peer, peer_len);
        return;
    }
    /* The gate and the count in one step: pollers accept side by side. */
    pthread_mutex_lock(&st->mu);
    enum srv__conn_admission adm = srv__conn_open(&c->conn, st->srv, srv__now_ms());
    if (adm == SRV_CONN_ADMITTED) { /* st->open follows the core's gate */
        c->next = st->conns;
        if (st->conns)
            st->conns->prev = c;
        st->conns = c;
        st->open++;
    }
    pthread_mutex_unlock(&st->mu);
    if (adm == SRV_CONN_REFUSE_NOW) {
        etp_refuse_now(st, fd, peer, peer_len);
        srv__conn_close(&c->conn);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return;
    }
    c->job.run = etp_conn_run;
    c->st = st;
    c->p = &st->pollers[atomic_fetch_add(&st->next_poller, 1) % st->npollers];
    c->fd = fd;
    memcpy(&c->peer, peer, peer_len <= sizeof c->peer ? peer_len : sizeof c->peer);
    c->peer_len = peer_len <= sizeof c->peer ? peer_len : (socklen_t)sizeof c->peer;
    atomic_init(&c->phase, ETP_PH_POLL);
    atomic_init(&c->write_since, 0);
    srv__http1_init(&c->parser, st->srv);
    if (srv__tls_enabled(st->srv) && etp_tls_attach(p, c) != 0) {
        c->io_dead = 1; /* out of memory: close, nothing to say in TLS yet */
        etp_poller_close(st, c, 0);
        return;
    }
    /* Taken from the backlog at the quiesce: a request already waiting is
     * counted as arriving before quiesce returns, so the grace waits for it
     * (in cleartext: a TLS one has no request before its handshake). */
    if (atomic_load(&st->quiescing) && !c->ssl)
        srv__conn_quiesce_keeps(&c->conn, srv__now_ms(), 0, 1, srv__fd_input_waiting(fd));
    /* A refused one (SRV_CONN_REFUSING) has its head read, bounded in bytes
     * and time, so that the 503 answers what the client asked, in a
     * protocol it reads. */
    /* Maybe another poller's: listed and armed under its plock, which its
     * scan and its first read take, so it sees c whole (as after a
     * worker's hand-back); never armed, c is still only ours to close. */
    pthread_mutex_lock(&c->p->plock);
    etp_plist_add(c);
    int rc = etp_arm(st, c);
    if (rc != 0)
        etp_plist_del(c);
    pthread_mutex_unlock(&c->p->plock);
    if (rc != 0)
        etp_poller_close(st, c, 0);
}

/* Up to `max` connections from the backlog. */
static void etp_accept_some(etp_poller *p, int max)
{
    etp_state *st = p->st;
    for (int i = 0; i < max; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof peer;
        int fd = accept4(st->listen_fd, (struct sockaddr *)&peer, &peer_len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            etp_accepted(p, fd, &peer, peer_len);
            continue;
        }
        switch (errno) {
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
            continue;
        case EMFILE:
        case ENFILE:
            /* Refuse the oldest waiting client with our spare descriptor
             * rather than leave it hanging, then back off. */
            if (p->spare_fd >= 0) {
                close(p->spare_fd);
                peer_len = sizeof peer;
                fd = accept4(st->listen_fd, (struct sockaddr *)&peer, &peer_len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd >= 0)
                    etp_refuse_now(st, fd, &peer, peer_len);
                p->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            }
            etp_sleep_ms(ETP_ACCEPT_BACKOFF_MS);
            return;
        case EAGAIN:
        default: /* ENOBUFS, ENOMEM, network errors */
            return;
        }
    }
}

/* Poller p takes what the kernel accepted before the quiesce (the close
 * would reset it) and stops accepting; the last poller to do so closes the
 * listening socket (no poller can be inside accept4 on it then) and wakes
 * quiesce. */
static void etp_poller_unlisten(etp_poller *p)
{
    etp_state *st = p->st;
    if (atomic_load(&st->quiescing))
        etp_accept_some(p, st->cfg->backlog);
    p->listening = 0;
    pthread_mutex_lock(&st->lk);
    epoll_ctl(p->epfd, EPOLL_CTL_DEL, st->listen_fd, NULL);
    if (--st->listeners == 0) {
        close(st->listen_fd);
        st->listen_fd = -1;
        pthread_cond_broadcast(&st->lcond);
    }
    pthread_mutex_unlock(&st->lk);
}

static void *etp_poller_main(void *arg)
{
    etp_poller *p = arg;
    etp_state *st = p->st;
    struct epoll_event evs[ETP_EVENTS];
    uint64_t next_scan = srv__now_ms() + ETP_SCAN_MS;
    for (;;) {
        uint64_t now = srv__now_ms();
        int timeout = srv__ms_left(next_scan, now);
        int n = epoll_wait(p->epfd, evs, ETP_EVENTS, timeout);
        if (n < 0 && errno != EINTR)
            break;
        int stopping = atomic_load(&st->stopping);
        if (atomic_load(&st->quiescing) && p->listening)
            etp_poller_unlisten(p);
        /* Messages after the batch's connection events: a message may close
         * a connection whose event is further on in this same batch (an
         * upload's end and its client's FIN together), which would then be
         * read after it was freed. */
        int messages = 0;
        for (int i = 0; i < n; i++) {
            void *ptr = evs[i].data.ptr;
            if (ptr == &st->listen_fd) {
                if (p->listening)
                    etp_accept_some(p, ETP_ACCEPT_BATCH);
            } else if (ptr == &p->msg_fd) {
                messages = 1;
            } else if (ptr == &p->wake_fd) {
                uint64_t v;
                ssize_t r = read(p->wake_fd, &v, sizeof v);
                (void)r;
                next_scan = 0; /* look at every connection now */
            } else {
                etp_poller_read(st, ptr);
            }
        }
        if (messages) {
            uint64_t v;
            ssize_t r = read(p->msg_fd, &v, sizeof v);
            (void)r;
            etp_poller_messages(p);
        }
        now = srv__now_ms();
        if (stopping) /* the core's last answers, posted before stop */
            etp_poller_messages(p);
        if (now >= next_scan || stopping) {
            etp_poller_scan(p, now, stopping);
            next_scan = now + ETP_SCAN_MS;
        }
        if (stopping)
            break;
    }
    /* Every connection still ours is closed (the scan did it); from now on
     * workers close theirs instead of handing them back. */
    pthread_mutex_lock(&p->plock);
    p->gone = 1;
    etp_conn *left = p->plist;
    pthread_mutex_unlock(&p->plock);
    while (left) { /* handed back between the scan and gone */
        etp_poller_close(st, left, 0);
        pthread_mutex_lock(&p->plock);
        left = p->plist;
        pthread_mutex_unlock(&p->plock);
    }
    if (p->listening)
        etp_poller_unlisten(p);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Streamed responses (the poller writes them)                         */
/* ------------------------------------------------------------------ */

/* Poller: take c off the message queue (it closes while a kick waits). */
static void etp_mq_remove(etp_conn *c)
{
    etp_poller *p = c->p;
    pthread_mutex_lock(&p->mqlock);
    if (c->in_mq) {
        etp_conn *prev = NULL;
        for (etp_conn *q = p->mq_head; q; prev = q, q = q->mq_next) {
            if (q != c)
                continue;
            if (prev)
                prev->mq_next = c->mq_next;
            else
                p->mq_head = c->mq_next;
            if (p->mq_tail == c)
                p->mq_tail = prev;
            break;
        }
        c->mq_next = NULL;
        c->in_mq = 0;
    }
    pthread_mutex_unlock(&p->mqlock);
}

/* The stream_kick slot: any thread, the request's lock held. The poller
 * pulls what came (through its message queue, as late inline answers). */
static void etp_stream_kick(void *state, srv_request *req)
{
    (void)state;
    if (!srv__h1conn_stream_kick(req)) /* else an HTTP/2 stream on the socket loop */
        etp_post(srv__request_engine_data(req));
}

/* Poller: wait for the socket to take more, under the send deadline.
 * Over TLS a write that stopped for the SSL's input (WANT_READ) waits for
 * input; every other wait - the socket full, or `yield` after a burst that
 * blocked on nothing - is for room to write (a TLS stream that yielded
 * used to wait for input that never came, and was cut at its deadline). */
static void etp_stream_wait_out(etp_state *st, etp_conn *c, int progress, int yield)
{
    if (progress || c->conn.state != SRV_CONN_SEND)
        etp_wait_for(c, SRV_CONN_SEND);
    int want_input = c->ssl && !c->tls_want_write && !yield;
    if (etp_watch(c, (want_input ? EPOLLIN : EPOLLOUT) | EPOLLONESHOT) != 0) {
        c->io_dead = 1;
        etp_poller_close(st, c, 0);
    }
}

/* Poller: the body is complete; carry on as after any answer. */
static void etp_stream_done(etp_state *st, etp_conn *c)
{
    srv_request *req = c->sreq;
    c->sreq = NULL;
    srv__stream_detach(req);
    int keep = !c->lost_input && srv__response_keep_alive(req);
    srv__request_release(req);
    c->served++;
    if (!keep) {
        etp_poller_linger(st, c);
        return;
    }
    etp_wait_for(c, SRV_CONN_IDLE);
    char *buf = c->pend; /* pipelined requests wait here meanwhile */
    size_t off = c->pend_off, len = c->pend_len;
    c->pend = NULL;
    c->pend_off = c->pend_len = 0;
    if (etp_poller_feed(st, c, buf ? buf + off : NULL, len - off) &&
        etp_arm(st, c) != 0)
        etp_poller_close(st, c, 0);
    free(buf);
}

/*
 * Poller: write c's stream: its head, then what the core has, until the
 * socket is full (EPOLLOUT, under the send deadline), the application has
 * nothing (a stream_kick brings it back: the connection is not armed
 * meanwhile, so exactly one of the two is pending), the end, or a cut.
 */
static void etp_stream_pump(etp_state *st, etp_conn *c)
{
    srv_request *req = c->sreq;
    int progress = 0;
    if (!c->shead_done) {
        size_t hlen = 0;
        const char *head = srv__response_http1_head(req, &hlen);
        size_t before = c->shsent;
        int r = etp_io_send_some(c, head, hlen, NULL, 0, &c->shsent);
        if (r < 0) {
            c->io_dead = 1;
            etp_poller_close(st, c, 0);
            return;
        }
        if (r == 0) {
            etp_stream_wait_out(st, c, c->shsent > before, 0);
            return;
        }
        c->shead_done = 1;
        progress = 1;
    }
    for (int i = 0; i < ETP_STREAM_BURST; i++) {
        const void *d = NULL;
        size_t len = 0, sent = 0;
        srv__stream_chunk file;
        /* In cleartext a file body goes by sendfile; over TLS it is read. */
        int k = c->ssl ? srv__stream_pull(req, &d, &len)
                       : srv__stream_pull_file(req, &d, &len, &file);
        if (k == SRV__STREAM_FILE) {
            int r = etp_sendfile_some(c->fd, file.fd, file.off, file.len, &sent);
            srv__stream_sent(req, sent);
            if (r < 0) { /* the client went away, or the file shrank: a cut */
                c->io_dead = 1;
                etp_poller_close(st, c, 0);
                return;
            }
            progress |= sent > 0;
            if (r == 0) {
                etp_stream_wait_out(st, c, progress, 0);
                return;
            }
            continue;
        }
        if (k == SRV__STREAM_WAIT) {
            etp_wait_for(c, SRV_CONN_APP); /* the application's pace is its own */
            return;
        }
        if (k == SRV__STREAM_END) {
            etp_stream_done(st, c);
            return;
        }
        if (k == SRV__STREAM_CUT) {
            c->io_dead = 1; /* no last chunk: the client sees a cut body */
            etp_poller_close(st, c, 0);
            return;
        }
        int r = etp_io_send_some(c, d, len, NULL, 0, &sent);
        srv__stream_sent(req, sent);
        if (r < 0) { /* the client went away */
            c->io_dead = 1;
            etp_poller_close(st, c, 0);
            return;
        }
        progress |= sent > 0;
        if (r == 0) {
            etp_stream_wait_out(st, c, progress, 0);
            return;
        }
    }
    etp_stream_wait_out(st, c, 1, 1); /* let the other connections run */
}

/* Poller: an answer that is a stream (c stays in its list, its deadline
 * the send deadline once the socket fills). */
static void etp_stream_begin(etp_state *st, etp_conn *c, srv_request *req)
{
    c->sreq = req;
    c->shsent = 0;
    c->shead_done = 0;
    etp_wait_for(c, SRV_CONN_APP);
    etp_stream_pump(st, c);
}

/* ------------------------------------------------------------------ */
/* Streamed request bodies (the poller reads them into the core)       */
/* ------------------------------------------------------------------ */

/* The body_kick slot: any thread, the request's lock held. */
static void etp_body_kick(void *state, srv_request *req)
{
    (void)state;
    if (!srv__h1conn_body_kick(req)) /* else an HTTP/2 stream on the socket loop */
        etp_post(srv__request_engine_data(req));
}

/* Poller: nothing to read until a kick or the answer comes (no deadline:
 * the application's pace is its own; request_timeout_ms bounds it). */
static void etp_body_park(etp_conn *c)
{
    c->awaiting = 1;
    etp_wait_for(c, SRV_CONN_APP);
}

/* Poller: c's request was answered. A body not read to its end closes
 * the connection after the answer (its unread bytes are never parsed as a
 * next request); then the answer is written as any late inline one. */
static void etp_body_answered(etp_state *st, etp_conn *c)
{
    srv_request *req = c->inl;
    if (c->bmode == ETP_B_READ || c->bmode == ETP_B_OVER) {
        srv__request_set_close(req);
        c->lost_input = 1;
        free(c->pend); /* body bytes: dropped, the lingering close reads on */
        c->pend = NULL;
        c->pend_off = c->pend_len = 0;
    }
    c->bmode = ETP_B_NONE;
    srv__body_detach(req); /* a reader not at the end: on_end(SRV_ECLOSED) */
    etp_mq_remove(c); /* a kick or this answer posted meanwhile: none comes after */
    etp_inline_resume(st, c);
}

/* Poller: the client left (or the socket failed) while its body streams. */
static void etp_body_gone(etp_state *st, etp_conn *c)
{
    c->io_dead = 1;
    etp_poller_close(st, c, 0); /* etp_conn_finish detaches and cancels */
}

/* Poller: feed d[0..n) to the parser in body mode, each piece to the core,
 * until the input runs out or the core says stop/wait. *used: consumed. */
static void etp_body_feed(etp_conn *c, const char *d, size_t n, size_t *used)
{
    srv_request *req = c->inl;
    size_t off = 0;
    while (off < n && c->bmode == ETP_B_READ) {
        size_t u = 0;
        enum srv_http1_event ev = srv__http1_feed(&c->parser, req, d + off, n - off, &u);
        off += u;
        if (ev == SRV_HTTP1_BODY) {
            srv__conn_body_bytes(&c->conn, c->parser.piece_len, srv__now_ms());
            int k = srv__body_data(req, c->parser.piece, c->parser.piece_len);
            if (k == SRV__BODY_OVER)
                c->bmode = ETP_B_OVER;
            if (k != SRV__BODY_GO)
                break;
        } else if (ev == SRV_HTTP1_MESSAGE_COMPLETE) {
            c->bmode = ETP_B_EOM; /* what follows is the next request */
        } else if (ev == SRV_HTTP1_FAIL) {
            c->bmode = ETP_B_OVER; /* on_end, then the core's 400/431 */
            srv__body_end(req, srv__http1_status(&c->parser));
        }
    }
    /* A Content-Length body's last piece leaves the end for the next feed. */
    if (c->bmode == ETP_B_READ && off == n) {
        size_t u = 0;
        if (srv__http1_feed(&c->parser, req, d + off, 0, &u) == SRV_HTTP1_MESSAGE_COMPLETE)
            c->bmode = ETP_B_EOM;
    }
    *used = off;
}

/*
 * Poller: move c's streamed body on: the answer (it ends the body), the
 * application's state (GO: bytes kept in c->pend first, then the socket;
 * IDLE: wait for a kick), the end. Runs on every event, kick and answer;
 * each looks at everything again.
 */
static void etp_body_step(etp_state *st, etp_conn *c)
{
    srv_request *req = c->inl;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int answered = c->inl_done || c->inl_answered;
        pthread_mutex_unlock(&c->mu);
        if (answered) {
            etp_body_answered(st, c);
            return;
        }
        if (c->bmode == ETP_B_OVER || c->bmode == ETP_B_DONE) {
            etp_body_park(c); /* the answer comes */
            return;
        }
        int k = srv__body_state(req);
        if (k == SRV__BODY_OVER) { /* the application stopped reading */
            if (c->bmode == ETP_B_READ)
                c->bmode = ETP_B_OVER;
            etp_body_park(c);
            return;
        }
        if (k == SRV__BODY_IDLE) {
            etp_body_park(c);
            return;
        }
        if (!c->bcont) { /* the application wants the body: tell the client */
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            size_t sent = 0;
            c->bcont = 1;
            if (etp_io_send_some(c, cont, sizeof cont - 1, NULL, 0, &sent) < 0) {
                etp_body_gone(st, c);
                return;
            }
        }
        if (c->bmode == ETP_B_EOM) {
            c->bmode = ETP_B_DONE;
            srv__body_end(req, 0);
            continue; /* on_end may have answered */
        }
        if (c->pend_off < c->pend_len) {
            size_t used = 0;
            etp_body_feed(c, c->pend + c->pend_off, c->pend_len - c->pend_off, &used);
            c->pend_off += used;
            if (c->pend_off == c->pend_len) {
                free(c->pend);
                c->pend = NULL;
                c->pend_off = c->pend_len = 0;
            }
            continue;
        }
        ssize_t n = etp_io_recv(c, c->p->rbuf, sizeof c->p->rbuf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            c->awaiting = 0;
            if (c->conn.state != SRV_CONN_BODY_STREAM) /* a pace window opens */
                etp_wait_for(c, SRV_CONN_BODY_STREAM);
            if (etp_arm(st, c) != 0)
                etp_body_gone(st, c);
            return;
        }
        if (n <= 0) {
            etp_body_gone(st, c);
            return;
        }
        size_t used = 0;
        etp_body_feed(c, c->p->rbuf, (size_t)n, &used);
        if (used < (size_t)n && etp_keep_rest(c, c->p->rbuf + used, (size_t)n - used) != 0) {
            etp_body_gone(st, c);
            return;
        }
    }
}

/* Poller: c->req's head is complete and its route streams the body:
 * dispatch it now (the handler decides whether to read), keep the bytes
 * already read after the head, and move the body on. */
static void etp_body_begin(etp_state *st, etp_conn *c, const char *rest, size_t n)
{
    if (n > 0 && etp_keep_rest(c, rest, n) != 0) { /* never a body with a hole */
        etp_poller_fail(st, c, 500);
        return;
    }
    srv_request *req = c->req;
    c->req = NULL;
    srv__http1_stream_body(&c->parser);
    c->bmode = ETP_B_READ;
    c->bcont = !(srv__http1_body_expected(&c->parser) && srv__request_expects_continue(req));
    size_t u = 0; /* no body at all: complete at once */
    if (srv__http1_feed(&c->parser, req, NULL, 0, &u) == SRV_HTTP1_MESSAGE_COMPLETE)
        c->bmode = ETP_B_EOM;
    pthread_mutex_lock(&c->mu);
    c->inl = req;
    c->inl_done = 0;
    pthread_mutex_unlock(&c->mu);
    c->inl_answered = 0;
    etp_dispatching = c;
    srv__request_dispatch(req);
    etp_dispatching = NULL;
    etp_wait_for(c, SRV_CONN_APP); /* in flight (counted by dispatch) */
    etp_body_step(st, c);
}

/* ------------------------------------------------------------------ */
/* Answering (workers)                                                 */
/* ------------------------------------------------------------------ */

/* The respond slot. When the connection's worker is inside a handler that
 * another thread answered (the core's timeout 503, an application thread),
 * write the answer now, without blocking, so the client does not wait for
 * the handler to return; the worker writes whatever is left. Otherwise just
 * wake the worker. Any thread may call it. */
static void etp_respond(void *state, srv_request *req)
{
    (void)state;
    if (srv__h1conn_respond(req)) /* an HTTP/2 stream on the socket loop */
        return;
    etp_conn *c = srv__request_engine_data(req);
    if (!c) /* answered by the poller or a refusal: written by its caller */
        return;
    if (etp_dispatching == c) { /* inline, before the handler returned */
        c->inl_answered = 1;
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (c->inl == req) { /* a poller's inline request, answered later */
        /* Posted under c->mu (c->mu before p->mqlock, never the reverse):
         * once the poller sees inl_done it may free c at once, so nothing
         * of c is touched after the unlock (etp_conn_finish waits here). */
        c->inl_done = 1;
        etp_post(c);
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->responded = 1;
    if (c->in_handler && !c->detached && !pthread_equal(c->worker, pthread_self()) &&
        !srv__response_streamed(req)) { /* a stream goes to the poller */
        size_t hlen = 0, blen = 0;
        const void *body = NULL;
        int up = 0; /* a 101's socket is handed over by the worker, once it is out */
        const char *head = etp_answer(req, &hlen, &body, &blen, &up);
        if (head && etp_io_send_some(c, head, hlen, body, blen, &c->early_sent) < 0)
            c->early_dead = 1;
    }
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Worker: a streamed answer goes to the connection's poller, which writes
 * it as the application writes (no worker waits on a stream). -1: the
 * poller has c; 0: the poller is gone (stop): close it here. */
static int etp_stream_from_worker(etp_conn *c, srv_request *req)
{
    c->sreq = req;
    c->shsent = 0;
    c->shead_done = 0;
    etp_wait_for(c, SRV_CONN_APP);
    etp_set_phase(c, ETP_PH_POLL);
    pthread_mutex_lock(&c->p->plock);
    if (c->p->gone) {
        pthread_mutex_unlock(&c->p->plock);
        return 0; /* etp_conn_finish detaches and releases c->sreq */
    }
    etp_plist_add(c);
    /* Writable at once, most likely: the poller pumps from its event. */
    int rc = etp_watch(c, EPOLLOUT | EPOLLONESHOT);
    if (rc != 0)
        etp_plist_del(c);
    pthread_mutex_unlock(&c->p->plock);
    return rc == 0 ? -1 : 0;
}

/* Wait for respond, write the response, release the request. Returns
 * non-zero when the connection may serve another request, -1 when it went
 * to the poller to stream the response or to the socket loop as a
 * WebSocket (do not touch c again). */
static int etp_write_response(etp_conn *c, srv_request *req)
{
    etp_state *st = c->st;
    pthread_mutex_lock(&c->mu);
    while (!c->responded)
        pthread_cond_wait(&c->cv, &c->mu);
    c->responded = 0;
    int detached = c->detached;
    size_t sent = c->early_sent;
    int dead = c->early_dead;
    c->early_sent = 0;
    c->early_dead = 0;
    c->serving = NULL; /* the answer is ours to write: stop() keeps off */
    pthread_mutex_unlock(&c->mu);
    if (detached) { /* stop() wrote it and released our reference */
        c->io_dead = 1;
        return 0;
    }
    if (srv__response_streamed(req) && !c->io_dead && !dead)
        return etp_stream_from_worker(c, req);
    atomic_store(&c->write_since, srv__now_ms());
    etp_set_phase(c, ETP_PH_WRITE);
    int keep = 0;
    if (srv__response_streamed(req))
        srv__stream_detach(req);
    if (!c->io_dead && !dead) {
        size_t hlen = 0, blen = 0;
        const void *body = NULL;
        int up = 0;
        const char *head = etp_answer(req, &hlen, &body, &blen, &up);
        if (head &&
            etp_io_send_from(c, etp_write_timeout(st), head, hlen, body, blen, sent) == 0) {
            if (up)
                return etp_upgrade(c, req, etp_pend(c), c->pend_len - c->pend_off);
            keep = srv__response_keep_alive(req);
        } else {
            c->io_dead = c->stalled = 1;
        }
    } else {
        c->io_dead = 1;
    }
    srv__sockloop_upgrade_drop(req); /* a 101 that did not go out */
    srv__request_release(req);
    c->served++;
    return keep;
}

/* Worker: the rest of an inline answer the poller could not write at once
 * (etp_inline_write). Returns like etp_write_response. */
static int etp_finish_write(etp_conn *c)
{
    srv_request *req = c->wreq;
    c->wreq = NULL;
    atomic_store(&c->write_since, srv__now_ms());
    etp_set_phase(c, ETP_PH_WRITE);
    int keep = 0, up = 0;
    size_t hlen = 0, blen = 0;
    const void *body = NULL;
    const char *head = etp_answer(req, &hlen, &body, &blen, &up);
    if (etp_io_send_from(c, etp_write_timeout(c->st), head, hlen, body, blen, c->wsent) == 0) {
        if (up && !c->lost_input)
            return etp_upgrade(c, req, etp_pend(c), c->pend_len - c->pend_off);
        keep = !c->lost_input && srv__response_keep_alive(req);
    } else {
        c->io_dead = c->stalled = 1;
    }
    srv__sockloop_upgrade_drop(req); /* a 101 that did not go out */
    srv__request_release(req);
    c->served++;
    return keep;
}

/* A complete request: run its handler here (we are a pool worker), then
 * answer it. Returns non-zero to keep the connection. */
static int etp_serve_request(etp_conn *c, srv_request *req)
{
    etp_set_phase(c, ETP_PH_HANDLER);
    pthread_mutex_lock(&c->mu);
    c->serving = req;
    c->in_handler = 1;
    c->worker = pthread_self();
    pthread_mutex_unlock(&c->mu);
    /* In flight from here (a stop checking between the two sees neither for
     * a moment; its grace loop re-checks every 50 ms). */
    etp_wait_for(c, SRV_CONN_APP);
    srv__request_run(req);
    pthread_mutex_lock(&c->mu);
    c->in_handler = 0;
    pthread_mutex_unlock(&c->mu);
    return etp_write_response(c, req);
}

/* Worker: bad input in pipelined bytes; answer `status`, then close. */
static void etp_worker_fail(etp_conn *c, int status)
{
    srv_request *req = c->req;
    c->req = NULL;
    if (!req) {
        req = srv__request_new(c->st->srv, (const struct sockaddr *)&c->peer, c->peer_len);
        if (!req)
            return;
    }
    srv__request_set_engine_data(req, c);
    etp_set_phase(c, ETP_PH_HANDLER);
    pthread_mutex_lock(&c->mu);
    c->serving = req;
    pthread_mutex_unlock(&c->mu);
    srv__request_fail(req, status);
    etp_write_response(c, req);
}

/*
 * Worker: parse bytes already read (pipelined, or read by the keep-wait).
 * 1: c->ready holds the next complete request; 2: c->req is a streamed
 * body's head (c->bhead) for the poller; 0: all consumed, the next
 * message (if begun) continues in the poller; -1: failed and answered.
 */
static int etp_worker_parse(etp_conn *c, const char *d, size_t n, size_t *usedp)
{
    etp_state *st = c->st;
    size_t off = 0;
    int r = 0;
    enum srv_http1_event ev = SRV_HTTP1_HEAD_READY;
    while (off < n || ev == SRV_HTTP1_HEAD_READY) {
        if (srv__http1_fresh(&c->parser))
            etp_wait_for(c, SRV_CONN_HEAD);
        if (!c->req) {
            c->req = srv__request_new(st->srv, (const struct sockaddr *)&c->peer, c->peer_len);
            if (!c->req) {
                etp_worker_fail(c, 503);
                r = -1;
                break;
            }
            srv__request_set_engine_data(c->req, c);
        }
        size_t used = 0;
        ev = srv__http1_feed(&c->parser, c->req, d + off, n - off, &used);
        off += used;
        etp_note_feed(c, ev);
        if (ev == SRV_HTTP1_FAIL) {
            if (c->parser.h2_preface) {
                size_t len = 0;
                const char *refusal = srv__h2_preface_refusal(&len);
                etp_io_send_from(c, etp_write_timeout(st), refusal, len, NULL, 0, 0);
                srv__request_release(c->req);
                c->req = NULL;
            } else {
                etp_worker_fail(c, srv__http1_status(&c->parser));
            }
            r = -1;
            break;
        }
        if (ev == SRV_HTTP1_HEAD_READY) {
            if (srv__request_streams_body(c->req)) { /* the poller reads such a body */
                c->bhead = 1;
                r = 2;
                break;
            }
            etp_wait_for(c, SRV_CONN_BODY);
            if (srv__http1_body_expected(&c->parser) && srv__request_expects_continue(c->req)) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                etp_io_send_from(c, etp_write_timeout(st), cont, sizeof cont - 1, NULL, 0, 0);
            }
            continue;
        }
        if (ev == SRV_HTTP1_MESSAGE_COMPLETE) {
            c->ready = c->req;
            c->req = NULL;
            etp_wait_for(c, SRV_CONN_QUEUED);
            r = 1;
            break;
        }
    }
    *usedp = off;
    return r;
}

/* Worker: give a kept-alive connection back to the poller. Returns 0 when
 * the poller has it now (do not touch c again), -1 to close it here. */
static int etp_hand_back(etp_conn *c)
{
    etp_state *st = c->st;
    if (srv__http1_idle(&c->parser)) {
        if (atomic_load(&st->quiescing))
            return -1; /* stop closes idle connections */
        etp_wait_for(c, SRV_CONN_IDLE);
    }
    etp_set_phase(c, ETP_PH_POLL);
    pthread_mutex_lock(&c->p->plock);
    if (c->p->gone) {
        pthread_mutex_unlock(&c->p->plock);
        return -1;
    }
    etp_plist_add(c);
    int rc = etp_arm(st, c);
    if (rc != 0)
        etp_plist_del(c);
    pthread_mutex_unlock(&c->p->plock);
    return rc == 0 ? 0 : -1;
}

/* Worker: a streamed body's head (c->req, c->bhead) goes to the poller,
 * which dispatches it from its next event (EPOLLOUT: at once). 0: the
 * poller has it; -1: close it here. */
static int etp_hand_back_body(etp_conn *c)
{
    etp_wait_for(c, SRV_CONN_QUEUED); /* arriving until the poller dispatches it */
    etp_set_phase(c, ETP_PH_POLL);
    pthread_mutex_lock(&c->p->plock);
    if (c->p->gone) {
        pthread_mutex_unlock(&c->p->plock);
        return -1;
    }
    etp_plist_add(c);
    int rc = etp_watch(c, EPOLLOUT | EPOLLONESHOT);
    if (rc != 0)
        etp_plist_del(c);
    pthread_mutex_unlock(&c->p->plock);
    return rc == 0 ? 0 : -1;
}

/*
 * Worker: wait ETP_KEEP_WAIT_MS for the next request of a kept-alive
 * connection when no other connection waits for a worker: a client that
 * sends its next request at once (a benchmark, a pipelining proxy) costs
 * one recv instead of a hand-back to the poller and a new job. 1: bytes
 * parsed into a complete request (c->ready); 0: nothing or a partial
 * request; -1: the connection ended (answered or closed).
 */
static int etp_keep_wait(etp_conn *c)
{
    etp_state *st = c->st;
    /* Not over TLS: its blocking read would need the SSL in blocking mode;
     * the poller reads the next request instead. */
    if (ETP_KEEP_WAIT_MS == 0 || c->ssl || srv__pool_waiting(st->srv) > 0 ||
        atomic_load(&st->quiescing))
        return 0;
    if (!c->rcvtimeo) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = ETP_KEEP_WAIT_MS * 1000};
        int fl = fcntl(c->fd, F_GETFL);
        if (fl < 0 || fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
            setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
            return 0;
        c->rcvtimeo = 1;
    }
    etp_set_phase(c, ETP_PH_RUN);
    char buf[4096];
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        c->io_dead = 1;
        return -1;
    }
    if (n < 0)
        return 0;
    size_t used = 0;
    int r = etp_worker_parse(c, buf, (size_t)n, &used);
    if ((r == 1 || r == 2) && used < (size_t)n) {
        c->pend = malloc((size_t)n - used);
        if (!c->pend)
            return -1;
        memcpy(c->pend, buf + used, (size_t)n - used);
        c->pend_off = 0;
        c->pend_len = (size_t)n - used;
    }
    return r;
}

static void etp_conn_run(srv_job *job)
{
    etp_conn *c = ETP_CONN_OF(job);
    etp_state *st = c->st;
    pthread_mutex_lock(&st->mu); /* stop() reads QUEUED under it */
    int abandoned = c->shut;
    if (!abandoned && !c->wreq)
        etp_set_phase(c, ETP_PH_RUN);
    else if (!abandoned) { /* stop() shuts WQUEUED ones; WRITE has a grace */
        atomic_store(&c->write_since, srv__now_ms());
        etp_set_phase(c, ETP_PH_WRITE);
    }
    pthread_mutex_unlock(&st->mu);
    if (abandoned) { /* stop() answered it while it was queued */
        etp_conn_finish(c, 0);
        return;
    }
    for (;;) {
        srv_request *req = c->ready;
        c->ready = NULL;
        int k = c->wreq ? etp_finish_write(c) : etp_serve_request(c, req);
        if (k < 0)
            return; /* streamed: the poller has it */
        if (!k) {
            etp_conn_finish(c, 0);
            return;
        }
        int r = 0;
        if (c->pend_off < c->pend_len) { /* pipelined */
            size_t used = 0;
            r = etp_worker_parse(c, c->pend + c->pend_off, c->pend_len - c->pend_off, &used);
            c->pend_off += used;
            if (c->pend_off == c->pend_len) {
                free(c->pend);
                c->pend = NULL;
                c->pend_off = c->pend_len = 0;
            }
        } else if (srv__http1_idle(&c->parser)) {
            r = etp_keep_wait(c);
        }
        if (r == 1) /* the core answers it 503 itself once stopping */
            continue;
        if (r == 2) { /* a streamed body: the poller reads it */
            if (etp_hand_back_body(c) != 0)
                etp_conn_finish(c, 0);
            return;
        }
        if (r != 0 || etp_hand_back(c) != 0) {
            etp_conn_finish(c, r < 0 && !c->io_dead);
            return;
        }
        return; /* the poller has it */
    }
}

/* ------------------------------------------------------------------ */
/* Vtable slots                                                        */
/* ------------------------------------------------------------------ */

static void etp_free_state(etp_state *st)
{
    if (st->listen_fd >= 0)
        close(st->listen_fd);
    for (unsigned i = 0; st->pollers && i < st->npollers; i++) {
        etp_poller *p = &st->pollers[i];
        if (p->wake_fd >= 0)
            close(p->wake_fd);
        if (p->msg_fd >= 0)
            close(p->msg_fd);
        if (p->epfd >= 0)
            close(p->epfd);
        if (p->spare_fd >= 0)
            close(p->spare_fd);
        etp_tls_poller_free(p);
        pthread_mutex_destroy(&p->plock);
        pthread_mutex_destroy(&p->mqlock);
    }
    free(st->pollers);
    srv__sockloop_free(st->sockloop);
    pthread_cond_destroy(&st->drained);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->lcond);
    pthread_mutex_destroy(&st->lk);
    free(st);
}

static void etp_wake(etp_state *st)
{
    uint64_t one = 1;
    for (unsigned i = 0; i < st->npollers; i++) {
        ssize_t w = write(st->pollers[i].wake_fd, &one, sizeof one);
        (void)w;
    }
}

/* Start failed after some pollers ran: stop and join them. */
static void etp_join_pollers(etp_state *st)
{
    atomic_store(&st->quiescing, 1);
    atomic_store(&st->stopping, 1);
    etp_wake(st);
    for (unsigned i = 0; i < st->npollers; i++) {
        if (st->pollers[i].started) {
            pthread_join(st->pollers[i].thread, NULL);
            st->pollers[i].started = 0;
        }
    }
}

/* One poller's epoll set: the shared listening socket (EPOLLEXCLUSIVE: a
 * connect wakes one poller, not all), its wake and message eventfds. */
static int etp_poller_init(etp_state *st, etp_poller *p)
{
    p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    p->msg_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    p->epfd = epoll_create1(EPOLL_CLOEXEC);
    p->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (p->wake_fd < 0 || p->msg_fd < 0 || p->epfd < 0)
        return -1;
    struct epoll_event lev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &st->listen_fd};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &p->wake_fd};
    struct epoll_event mev = {.events = EPOLLIN, .data.ptr = &p->msg_fd};
    if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, st->listen_fd, &lev) != 0 ||
        epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->wake_fd, &wev) != 0 ||
        epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->msg_fd, &mev) != 0)
        return -1;
    p->listening = 1;
    return 0;
}

static int etp_start(srv_server *srv, void **state)
{
    etp_state *st = calloc(1, sizeof *st);
    if (!st) {
        srv__server_set_error(srv, "threadpool: out of memory");
        return SRV_ENOMEM;
    }
    st->srv = srv;
    st->cfg = srv__server_config(srv);
    st->listen_fd = -1;
    atomic_init(&st->quiescing, 0);
    atomic_init(&st->stopping, 0);
    atomic_init(&st->next_poller, 0);

    /* Default attributes: these cannot fail on Linux; checked all the same. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_mutex_init(&st->mu, NULL);
    rc = rc ? rc : pthread_cond_init(&st->drained, &ca);
    rc = rc ? rc : pthread_mutex_init(&st->lk, NULL);
    rc = rc ? rc : pthread_cond_init(&st->lcond, NULL);
    pthread_condattr_destroy(&ca);
    unsigned n = st->cfg->io_threads > 0 ? st->cfg->io_threads : 1;
    st->pollers = rc ? NULL : calloc(n, sizeof *st->pollers);
    if (rc != 0 || !st->pollers) {
        free(st->pollers);
        free(st);
        srv__server_set_error(srv, "threadpool: cannot create a mutex or out of memory");
        return SRV_ENOMEM;
    }
    st->npollers = n;
    for (unsigned i = 0; i < n; i++) {
        etp_poller *p = &st->pollers[i];
        p->st = st;
        p->wake_fd = p->msg_fd = p->epfd = p->spare_fd = -1;
        pthread_mutex_init(&p->plock, NULL);
        pthread_mutex_init(&p->mqlock, NULL);
    }

    int fd = srv__listen(srv, SRV__LISTEN_NONBLOCK);
    if (fd < 0) {
        etp_free_state(st);
        return fd;
    }
    st->listen_fd = fd;
    for (unsigned i = 0; i < n; i++) {
        if (etp_poller_init(st, &st->pollers[i]) != 0) {
            int err = errno;
            etp_free_state(st);
            srv__server_set_error(srv, "threadpool: eventfd/epoll: %s", strerror(err));
            return SRV_ESYS;
        }
    }
    st->listeners = n;

    /* Published before the pollers run: the core reads it (respond) on
     * the threads our connections reach. */
    *state = st;
    for (unsigned i = 0; i < n; i++) {
        rc = srv__thread_create(&st->pollers[i].thread, NULL, etp_poller_main, &st->pollers[i]);
        if (rc != 0) {
            etp_join_pollers(st);
            *state = NULL;
            etp_free_state(st);
            srv__server_set_error(srv, "threadpool: cannot create a poller thread: %s",
                                  strerror(rc));
            return SRV_ETHREAD;
        }
        st->pollers[i].started = 1;
    }
    return 0;
}

/* Stop accepting: the pollers take the listening socket out of their epoll
 * sets and the last one closes it (returning once it has, so new connects
 * are refused); each closes its idle connections. */
static void etp_quiesce(void *state)
{
    etp_state *st = state;
    if (st->quiesced)
        return;
    st->quiesced = 1;
    atomic_store(&st->quiescing, 1);
    etp_wake(st);
    pthread_mutex_lock(&st->mu);
    srv__sockloop_quiesce(st->sockloop); /* every WebSocket: 1001 */
    pthread_mutex_unlock(&st->mu);
    pthread_mutex_lock(&st->lk);
    while (st->listen_fd >= 0)
        pthread_cond_wait(&st->lcond, &st->lk);
    pthread_mutex_unlock(&st->lk);
}

/* The pollers answer and close what they hold, the WebSockets close
 * (1001, then their sockets), then the workers' connections are closed or
 * detached (engines/threadpool_stop.c). */
static void etp_stop(void *state)
{
    etp_state *st = state;
    etp_quiesce(st);
    atomic_store(&st->stopping, 1);
    etp_wake(st);
    for (unsigned i = 0; i < st->npollers; i++) {
        if (st->pollers[i].started) {
            pthread_join(st->pollers[i].thread, NULL);
            st->pollers[i].started = 0;
        }
    }
    pthread_mutex_lock(&st->mu);
    st->ws_stopped = 1; /* a 101 written from now on closes its socket */
    srv__sockloop *l = st->sockloop;
    pthread_mutex_unlock(&st->mu);
    srv__sockloop_stop(l); /* every etp_loop_done has run when it returns */
    etp_stop_connections(st);
}

static void etp_destroy(void *state)
{
    etp_state *st = state;
    if (!st)
        return;
    etp_free_state(st);
}

/* srv_engine.lib_caps: WebSocket when this libsrv has it (built with
 * wslay), over TLS too (the socket loop reads and writes through the
 * connection's SSL). */
static unsigned etp_lib_caps(void)
{
    unsigned ws = srv__sockloop_available() ? SRV_CAP_WEBSOCKET | SRV_CAP_WEBSOCKET_TLS : 0;
    unsigned h2 = srv__sockloop_http2() ? SRV_CAP_HTTP2 | SRV_CAP_TLS_HTTP2 : 0;
    return ws | h2;
}

const srv_engine srv_engine_threadpool = {
    .version = SRV_ENGINE_VERSION,
    .name = "threadpool",
    .caps = SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_GARBAGE_400 |
            SRV_ENGINE_CAP_H2_PREFACE_GOAWAY | SRV_ENGINE_CAP_TLS | SRV_ENGINE_CAP_STREAM |
            SRV_ENGINE_CAP_STREAM_BODY,
    .lib_caps = etp_lib_caps,
    .start = etp_start,
    .respond = etp_respond,
    .stream_kick = etp_stream_kick,
    .body_kick = etp_body_kick,
    .quiesce = etp_quiesce,
    .stop = etp_stop,
    .destroy = etp_destroy,
};
