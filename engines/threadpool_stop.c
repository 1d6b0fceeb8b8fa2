/*
 * The threadpool engine's stop, once its pollers are gone: every connection a
 * worker still has is shut (nothing left to send), given up to 2 s (an
 * answer being written), or detached (a handler still runs, or a complete
 * request still queued): its answer written here through a duplicate of the
 * socket. engines/threadpool.c has the rest of the engine.
 */
#include "threadpool_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

/*
 * A blocking handler that outlived the grace period: the core has answered
 * its request (its 503, or the application's answer given before the
 * handler returned), but the connection's worker is still inside the
 * handler. Stop claims the answer, writes what respond did not already
 * write through a duplicate of the socket, shuts the socket so the client
 * sees the response complete, and hands the engine's reference back. The
 * worker finds `detached` when the handler returns and only drains and
 * closes its own descriptor.
 */
typedef struct etp_detached {
    srv_request *req; /* NULL: a queued connection, answered 503 */
    int fd; /* a dup: the socket outlives the worker's close */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    const char *head;
    const void *body;
    size_t hlen, blen, sent;
    int over; /* written, or the client is gone */
    int tls;  /* a TLS connection: written through ssl, or not at all */
    struct ssl_st *ssl; /* our reference, on fd (etp_tls_detach) */
    int want_write;
} etp_detached;

/* st->mu held: stop no longer waits for this connection; it counts as
 * closed from now on (its job closes the descriptor later). */
static void etp_count_detached(etp_state *st, etp_conn *c)
{
    c->shut = 1;
    st->detached++;
    srv__conn_count_closed(&c->conn);
}

/* st->mu held. Claims the connection's answer (its worker then keeps off
 * the socket) and fills *out; 0 when there is nothing to claim yet. */
static int etp_detach(etp_state *st, etp_conn *c, etp_detached *out)
{
    int fd = -1;
    size_t sent = 0;
    pthread_mutex_lock(&c->mu);
    srv_request *req = c->responded && !c->detached ? c->serving : NULL;
    struct ssl_st *ssl = NULL;
    if (req && (fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0)) >= 0) {
        c->detached = 1;
        c->serving = NULL;
        sent = c->early_sent;
        if (c->ssl) /* the worker is in the handler: the SSL is free */
            ssl = etp_tls_detach(c, fd);
    }
    pthread_mutex_unlock(&c->mu);
    if (fd < 0) /* out of descriptors: stop waits for the handler instead */
        return 0;
    etp_count_detached(st, c);
    *out = (etp_detached){.req = req, .fd = fd, .sent = sent, .tls = c->ssl != NULL,
                          .ssl = ssl};
    return 1;
}

/* st->mu held. A connection queued for a worker (which may wait behind
 * blocking handlers) holds a complete request the core has not seen; it
 * gets the 503 any engine gives in-flight requests at stop, written off
 * the lock from *out (1); its job finds it shut and only closes. 0 when no
 * descriptor could be duplicated: then a canned 503 was written here. */
static int etp_detach_queued(etp_state *st, etp_conn *c, etp_detached *out)
{
    int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
    c->detached = 1; /* its job has not started: no one else reads it */
    etp_count_detached(st, c);
    if (fd < 0) {
        if (!c->ssl) { /* a TLS client cannot read a cleartext 503 */
            size_t len = 0;
            const char *refusal = srv__refusal_503(&len);
            etp_send2(c->fd, 0, refusal, len, NULL, 0);
        }
        shutdown(c->fd, SHUT_WR);
        return 0;
    }
    *out = (etp_detached){.fd = fd, .peer = c->peer, .peer_len = c->peer_len,
                          .tls = c->ssl != NULL, .ssl = c->ssl ? etp_tls_detach(c, fd) : NULL};
    return 1;
}

/* Off st->mu: write the detached connections' answers side by side, all
 * within ETP_STOP_WRITE_GRACE_MS, so one slow reader delays none of the
 * others; then shut each socket and hand the engine's reference back. */
static void etp_detached_finish(etp_state *st, etp_detached *d, size_t n)
{
    struct pollfd pfd[ETP_DETACH_BATCH];
    uint64_t end = srv__now_ms() + ETP_STOP_WRITE_GRACE_MS;
    for (size_t i = 0; i < n; i++) {
        if (!d[i].req) {
            d[i].req = srv__request_new(st->srv, (const struct sockaddr *)&d[i].peer,
                                        d[i].peer_len);
            if (d[i].req) /* respond ignores it: no engine data */
                srv__request_fail(d[i].req, 503);
        }
        /* A WebSocket's 101 goes out as it is, and the socket closes after it. */
        d[i].head = d[i].req ? srv__sockloop_upgrade_head(d[i].req, &d[i].hlen) : NULL;
        if (d[i].req && !d[i].head) {
            d[i].head = srv__response_http1_head(d[i].req, &d[i].hlen);
            d[i].body = srv__response_body(d[i].req, &d[i].blen);
        }
        d[i].over = d[i].head == NULL || (d[i].tls && !d[i].ssl);
    }
    for (;;) {
        nfds_t waiting = 0;
        for (size_t i = 0; i < n; i++) {
            if (d[i].over)
                continue;
            int r = d[i].ssl ? etp_tls_send_some(d[i].ssl, &d[i].want_write, d[i].head,
                                                 d[i].hlen, d[i].body, d[i].blen, &d[i].sent)
                             : etp_send_some(d[i].fd, d[i].head, d[i].hlen, d[i].body,
                                             d[i].blen, &d[i].sent);
            if (r != 0)
                d[i].over = 1;
            else
                pfd[waiting++] = (struct pollfd){
                    .fd = d[i].fd,
                    .events = d[i].ssl && !d[i].want_write ? POLLIN : POLLOUT};
        }
        uint64_t now = srv__now_ms();
        if (waiting == 0 || now >= end)
            break;
        if (poll(pfd, waiting, srv__ms_left(end, now)) < 0 && errno != EINTR)
            break;
    }
    for (size_t i = 0; i < n; i++) {
        if (d[i].ssl) {
            etp_tls_shutdown(d[i].ssl);
            etp_tls_free(d[i].ssl);
        }
        etp_linger_close(d[i].fd, 0); /* the worker's own fd closes later */
        if (d[i].req && srv__response_streamed(d[i].req))
            srv__stream_detach(d[i].req); /* its head only: the body is cut */
        if (d[i].req) {
            srv__sockloop_upgrade_drop(d[i].req); /* a 101: no WebSocket follows */
            srv__request_release(d[i].req);
        }
    }
}

/* st->mu held: shut down every worker-owned connection that has nothing
 * left to send, so a blocked read returns, and responses stuck in a write
 * for ETP_STOP_WRITE_GRACE_MS; detach those queued for a worker and those
 * whose handler still runs (into `out`, up to `cap`). */
static size_t etp_shutdown_conns(etp_state *st, etp_detached *out, size_t cap)
{
    size_t n = 0;
    uint64_t now = srv__now_ms();
    for (etp_conn *c = st->conns; c; c = c->next) {
        if (c->shut)
            continue;
        enum etp_phase ph = etp_get_phase(c);
        if (ph == ETP_PH_QUEUED) {
            if (n < cap && etp_detach_queued(st, c, &out[n]))
                n++;
            continue;
        }
        if (ph == ETP_PH_HANDLER) {
            if (n < cap && etp_detach(st, c, &out[n]))
                n++;
            continue;
        }
        if (ph == ETP_PH_WQUEUED) {
            /* Part of an inline answer is out and the rest waits for a
             * worker that blocking handlers may hold: past the write grace,
             * cut it short and stop counting it; its job only closes. */
            if (now - atomic_load(&c->write_since) < ETP_STOP_WRITE_GRACE_MS)
                continue;
            shutdown(c->fd, SHUT_RDWR);
            c->detached = 1;
            etp_count_detached(st, c);
            continue;
        }
        if (ph == ETP_PH_WRITE && now - atomic_load(&c->write_since) < ETP_STOP_WRITE_GRACE_MS)
            continue;
        if (ph == ETP_PH_POLL || ph == ETP_PH_CLOSING || ph == ETP_PH_UPGRADED)
            continue; /* the poller's, closing, or the socket loop's
                       * (one whose add fails closes at once) */
        shutdown(c->fd, SHUT_RDWR);
        c->shut = 1;
    }
    return n;
}

/* Returns once every connection is closed or detached; srv_server_free's
 * pool shutdown waits for the detached ones' workers before destroy. */
void etp_stop_connections(etp_state *st)
{
    pthread_mutex_lock(&st->mu);
    while (st->open > st->detached) {
        etp_detached done[ETP_DETACH_BATCH];
        size_t n = etp_shutdown_conns(st, done, ETP_DETACH_BATCH);
        if (n > 0) {
            pthread_mutex_unlock(&st->mu);
            etp_detached_finish(st, done, n);
            pthread_mutex_lock(&st->mu);
            continue;
        }
        struct timespec until;
        srv__timespec_in(&until, CLOCK_MONOTONIC, ETP_STOP_SCAN_MS);
        pthread_cond_timedwait(&st->drained, &st->mu, &until);
    }
    pthread_mutex_unlock(&st->mu);
}
