/* The mhd engine's watchdog: one thread that carries out the core's
 * connection policy (api/srv_conn.h) on libmicrohttpd's connections,
 * which MHD's own idle timeout cannot (it is reset by every byte): the
 * deadlines, the send deadline by TCP's acknowledged count, the quiesce's
 * quiet close, and the lingering close of what MHD closes. */
#include "mhd_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* Lingering close (the core's policy, api/srv_conn.h): a connection MHD
 * closes while the client may still be sending keeps a duplicate of its
 * socket, write side shut, and is drained until EOF within SRV_LINGER_MS
 * and SRV_LINGER_MAX_BYTES, so the kernel does not answer unread bytes
 * with a reset that destroys the response. At most SRV_LINGER_MAX_CONNS
 * at once; past that, closed at once. */

/* Drain the lingering sockets (lock held): discard what arrived, close
 * at EOF, on an error or at the end of their time. */
static void emhd_linger_drain(emhd_server *es, long long now)
{
    static char sink[16384];
    for (unsigned i = 0; i < es->lingering;) {
        emhd_linger *l = &es->linger[i];
        bool done = now >= l->until;
        for (int n = 0; !done && n < 64; n++) { /* at most 1 MiB a tick */
            ssize_t r = recv(l->fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r > 0 && (l->drained += (size_t)r) < SRV_LINGER_MAX_BYTES)
                continue;
            if (r > 0) { /* the budget is spent */
                done = true;
                break;
            }
            done = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
            break;
        }
        if (done) {
            close(l->fd);
            *l = es->linger[--es->lingering];
        } else {
            i++;
        }
    }
}

/* Bytes of ours the client's TCP has acknowledged; ULLONG_MAX when unknown.
 * This measures the client, not libmicrohttpd (whatever wrote the bytes):
 * the one thing a send deadline needs, and the engine's only TCP_INFO read.
 * MHD reports no write progress, and a file it sends (sendfile) calls
 * nothing of ours until it is all in the socket. */
static unsigned long long emhd_acked(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked)
        return ULLONG_MAX;
    return (unsigned long long)ti.tcpi_bytes_acked;
}

/* A response being written (SRV_CONN_SEND; ec->mu held): true, with the
 * policy's deadline moved on (srv__conn_progress), when the client
 * acknowledged bytes since the last look. MHD's own timeout cannot be
 * used: it is max(header, keep-alive) + 1 s and counts bytes put in the
 * socket buffer (megabytes), not bytes the client took. */
static bool emhd_send_progressed(emhd_conn *ec, long long now)
{
    unsigned long long acked = emhd_acked(ec->fd);
    unsigned long long before = atomic_load(&ec->acked);
    if (acked == ULLONG_MAX || (acked == before && before != EMHD_ACKED_UNSAMPLED))
        return false;
    atomic_store(&ec->acked, acked);
    srv__conn_progress(&ec->policy, (uint64_t)now);
    return true;
}

/*
 * While quiescing (es->lock and ec->mu held): an idle kept-alive
 * connection closes (the policy's quiet close at a quiesce). MHD reports
 * a next request only once its request line is whole and nothing public
 * shows bytes in its buffer before that, so one whose line has partly
 * arrived closes as idle too (SRV_CAP_STOP_CLOSES_PARTIAL_LINE: the race
 * every keep-alive close has, RFC 9112 9.3.1). A connection idle for less
 * than EMHD_STOP_IDLE_MS (its answer was queued before the quiesce, with
 * keep-alive) is left for a later look: its client may be sending its
 * next request right now, and MHD reports it if the line completes.
 */
#define EMHD_STOP_IDLE_MS 100

void emhd_quiesce_idle(emhd_server *es, emhd_conn *ec, long long now)
{
    srv__conn *c = &ec->policy;
    if (!emhd_waiting(c) || ec->fd < 0 || c->deadline == UINT64_MAX)
        return;
    /* TLS, handshake not done on our side: looked at again once done (the
     * client may be about to send a request); the stop does not wait for
     * it (it does not count as arriving). */
    if (es->tls && !atomic_load(&ec->handshaken))
        return;
    long long d = (long long)c->deadline;
    if (now < d - es->keepalive_ms + EMHD_STOP_IDLE_MS) /* idle since d - keepalive */
        return;
    c->deadline = UINT64_MAX; /* looked at once */
    shutdown(ec->fd, SHUT_RDWR);
}

/*
 * A body still arriving whose client has ended its side (lock held):
 * libmicrohttpd 0.9.75 often misses a FIN that comes in the middle of a
 * body, and the request would wait for its pace deadline. A FIN with the
 * socket drained, seen on two ticks (EMHD_FIN_MS) while MHD is reading
 * (not paused: the state), can no longer complete the body: true, and the
 * connection is to be cut as a vanished client's.
 */
#define EMHD_FIN_MS 100

static bool emhd_fin_mid_body(emhd_conn *ec, enum srv__conn_state state, long long now)
{
    if ((state != SRV_CONN_BODY_STREAM && state != SRV_CONN_BODY) || ec->fd < 0) {
        ec->fin_at = 0;
        return false;
    }
    struct pollfd pf = {.fd = ec->fd, .events = POLLRDHUP};
    int unread = 1;
    bool fin = poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 &&
               ioctl(ec->fd, FIONREAD, &unread) == 0 && unread == 0;
    if (!fin) {
        ec->fin_at = 0;
        return false;
    }
    if (ec->fin_at == 0)
        ec->fin_at = now;
    return now - ec->fin_at >= EMHD_FIN_MS;
}

/* The policy's answer to a request still arriving (SRV_CONN_ANSWER: 408
 * at its deadline, 503 to a refused one or at the stop), which MHD cannot
 * give: it has no request to answer before the head is whole, and 0.9.75
 * refuses a response mid-body. In cleartext the core's answer is written
 * past MHD and the write side shut; over TLS (only MHD writes) a close.
 * SRV_CONN_LINGER then: the MHD thread's next step fails (emhd_state_from)
 * and MHD closes; at the linger's end the watchdog shuts it down.
 * es->lock and ec->mu held. */
void emhd_answer_cut(emhd_server *es, emhd_conn *ec, int status)
{
    srv__conn_set(&ec->policy, SRV_CONN_LINGER, srv__now_ms());
    if (es->tls) {
        shutdown(ec->fd, SHUT_RDWR);
        return;
    }
    emhd_answer_raw(es, ec->conn, ec->fd, status, NULL, 0);
    shutdown(ec->fd, SHUT_WR);
}

/* Answer 431 on a stuck connection's socket (a duplicate, ours) and shut
 * it down, so MHD closes it. Watchdog thread, lock not held. */
static void emhd_stuck_answer(emhd_server *es, int fd)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0)
        len = 0;
    srv_request *req = srv__request_new(es->srv, len > 0 ? (struct sockaddr *)&peer : NULL, len);
    if (req != NULL)
        emhd_answer_req(es, NULL, req, fd, 431);
    shutdown(fd, SHUT_RDWR);
    close(fd);
}

#define EMHD_STUCK_MAX 16

/*
 * One connection's tick (es->lock and ec->mu held): what the policy says
 * is due (srv__conn_due), carried out, with what libmicrohttpd hides from
 * it: a quiesce's idle connection may hold part of a request line
 * (emhd_quiesce_idle), a write's progress is TCP's acknowledged count
 * (MHD reports none), a client's FIN mid-body (0.9.75 may miss it), and a
 * query MHD could not hold (emhd_log). Returns a duplicate of the socket
 * to answer 431 on once the lock is let go, or -1.
 */
static int emhd_watch(emhd_server *es, emhd_conn *ec, long long now, bool room)
{
    srv__conn *c = &ec->policy;
    if (atomic_load(&ec->upgraded))
        return -1; /* the socket loop's */
    if (emhd_waiting(c) && atomic_load(&es->quiescing)) {
        emhd_quiesce_idle(es, ec, now); /* the policy's quiet close, when safe */
        return -1;
    }
    /* A response being written for a pass already: take the count its
     * deadline is measured from (the deadline restarts then). */
    if (c->state == SRV_CONN_SEND && atomic_load(&ec->acked) == EMHD_ACKED_UNSAMPLED) {
        (void)emhd_send_progressed(ec, now);
        return -1;
    }
    if (emhd_fin_mid_body(ec, c->state, now)) {
        ec->fin_at = 0;
        c->deadline = UINT64_MAX;
        shutdown(ec->fd, SHUT_RDWR); /* body_cut stays false: it left */
        return -1;
    }
    enum srv__conn_due due = srv__conn_due(c, (uint64_t)now, 0, 0);
    if (due == SRV_CONN_WAIT)
        return -1;
    if (c->state == SRV_CONN_SEND && emhd_send_progressed(ec, now))
        return -1;
    if (ec->fd >= 0 && atomic_exchange(&ec->lib_stuck, false)) {
        /* MHD may have written an answer meanwhile (it announced one):
         * its close ends the connection. */
        if (!emhd_quiet_since(ec, atomic_load(&ec->stuck_msgs))) {
            c->deadline = (uint64_t)(now + es->header_ms);
            return -1;
        }
        /* In cleartext the core's 431, written after the lock is let go;
         * over TLS only MHD can write: a close. */
        int fd = es->tls || !room ? -1 : fcntl(ec->fd, F_DUPFD_CLOEXEC, 0);
        if (fd >= 0) {
            c->deadline = UINT64_MAX;
            return fd;
        }
    }
    c->deadline = UINT64_MAX; /* looked at once */
    if (ec->fd < 0)
        return -1;
    if (due == SRV_CONN_CLOSE) {
        if (c->state == SRV_CONN_SEND) /* not reading (nginx's send_timeout): reset */
            atomic_store(&ec->stalled, true);
        shutdown(ec->fd, SHUT_RDWR);
        return -1;
    }
    if (c->state == SRV_CONN_BODY_STREAM) {
        /* Below the pace: the core's 408 to the application (MHD cannot
         * write mid-body), unless the client already left (MHD 0.9.75
         * does not always see a FIN mid-body at once): a vanished client. */
        struct pollfd pf = {.fd = ec->fd, .events = POLLRDHUP};
        bool gone = poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
        atomic_store(&ec->body_cut, !gone);
        shutdown(ec->fd, SHUT_RDWR);
        return -1;
    }
    emhd_answer_cut(es, ec, srv__conn_status(c));
    return -1;
}

/* Every 100 ms (10 ms while sockets linger or a quiesce is on): each
 * connection's emhd_watch; the lingering sockets drained. */
void *emhd_watchdog(void *arg)
{
    emhd_server *es = arg;
    pthread_mutex_lock(&es->lock);
    while (!es->wd_stop) {
        int stuck[EMHD_STUCK_MAX];
        unsigned nstuck = 0;
        long long now = emhd_now_ms();
        emhd_linger_drain(es, now);
        for (emhd_conn *ec = es->conns; ec != NULL; ec = ec->next) {
            pthread_mutex_lock(&ec->mu);
            int fd = emhd_watch(es, ec, now, nstuck < EMHD_STUCK_MAX);
            pthread_mutex_unlock(&ec->mu);
            if (fd >= 0)
                stuck[nstuck++] = fd;
        }
        if (nstuck > 0) {
            pthread_mutex_unlock(&es->lock);
            for (unsigned i = 0; i < nstuck; i++)
                emhd_stuck_answer(es, stuck[i]);
            pthread_mutex_lock(&es->lock);
        }
        struct timespec ts;
        bool quick = es->lingering > 0 || atomic_load(&es->quiescing);
        srv__timespec_in(&ts, CLOCK_MONOTONIC, quick ? 10 : 100);
        pthread_cond_timedwait(&es->wd_cond, &es->lock, &ts);
    }
    pthread_mutex_unlock(&es->lock);
    return NULL;
}

void emhd_watchdog_join(emhd_server *es)
{
    if (!es->watchdog_started)
        return;
    pthread_mutex_lock(&es->lock);
    es->wd_stop = true;
    pthread_cond_signal(&es->wd_cond);
    pthread_mutex_unlock(&es->lock);
    pthread_join(es->watchdog, NULL);
    es->watchdog_started = false;
    pthread_mutex_lock(&es->lock);
    emhd_linger_drain(es, LLONG_MAX); /* nobody drains them any more */
    pthread_mutex_unlock(&es->lock);
}

/* Linger on fd (ours: a duplicate of MHD's socket, or the gate's): write
 * side shut, drained by the watchdog, closed at EOF or in SRV_LINGER_MS. */
void emhd_linger_add(emhd_server *es, int fd)
{
    shutdown(fd, SHUT_WR);
    pthread_mutex_lock(&es->lock);
    if (es->lingering < SRV_LINGER_MAX_CONNS && !es->wd_stop) {
        es->linger[es->lingering++] = (emhd_linger){fd, emhd_now_ms() + SRV_LINGER_MS, 0};
        fd = -1;
        pthread_cond_signal(&es->wd_cond); /* drain at a 10 ms pace from now */
    }
    pthread_mutex_unlock(&es->lock);
    if (fd >= 0)
        close(fd);
}
