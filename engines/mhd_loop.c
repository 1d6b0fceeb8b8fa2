/* The mhd engine's I/O threads: a daemon each (no MHD thread), run by our
 * thread with MHD_run, and the gate's hand-over of accepted connections to
 * them (MHD_add_connection, with the record of what the gate knew). */
#include "mhd_int.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* The gate's side (engines/mhd_gate.h): connections reach MHD through   */
/* MHD_add_connection, with a record of what the gate knew              */
/* ------------------------------------------------------------------ */

/* Take the gate's record of fd (lock held), of hand-over `seq` only when
 * it is not 0: a record found but for a descriptor MHD never reported is
 * stale (MHD closes a connection it cannot start without a notification)
 * and is dropped. Without a record (none is expected): accepted now. */
emhd_handoff emhd_handoff_take(emhd_server *es, int fd, unsigned long long seq)
{
    emhd_handoff h = {.fd = fd};
    for (emhd_handoff **pp = &es->handoffs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->fd != fd || (seq != 0 && (*pp)->seq != seq))
            continue;
        emhd_handoff *found = *pp;
        *pp = found->next;
        es->nhandoffs--;
        h = *found;
        h.found = true;
        free(found);
        break;
    }
    return h;
}

/* ------------------------------------------------------------------ */
/* The loops (emhd_loop): one daemon each, run by our thread           */
/* ------------------------------------------------------------------ */

/* Make l run MHD again: one write until the loop has read it. Any thread. */
void emhd_loop_wake(emhd_loop *l)
{
    if (atomic_exchange(&l->signalled, true))
        return; /* written and not read yet: the loop runs MHD after reading it */
    uint64_t one = 1;
    while (write(l->wake, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* MHD_resume_connection, and its loop woken. The only wake-up a resume
 * gets: without an MHD thread, MHD_start_daemon drops MHD_USE_ITC (its
 * inter-thread channel), so MHD_resume_connection only sets flags that the
 * next MHD_run reads. Every resume must come through here. Any thread. */
void emhd_resume(emhd_server *es, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    struct MHD_Daemon *d = ci != NULL ? ci->daemon : NULL;
    MHD_resume_connection(conn); /* conn may be gone from here on */
    for (unsigned i = 0; i < es->nloops; i++) {
        if (es->loops[i].daemon == d) {
            emhd_loop_wake(&es->loops[i]);
            return;
        }
    }
}

/* The record of hand-over `seq` of fd goes: the connection never reached
 * MHD, or MHD refused it (and closed fd). Not found: the gate, accepting
 * on the same descriptor since, took it as stale and counted it. */
static void emhd_handoff_drop(emhd_server *es, int fd, unsigned long long seq)
{
    if (seq == 0)
        return; /* no record was made */
    pthread_mutex_lock(&es->lock);
    emhd_handoff mine = emhd_handoff_take(es, fd, seq);
    pthread_mutex_unlock(&es->lock);
    if (mine.found)
        srv__conn_close(&mine.conn);
}

/* The loop's thread: the connections the gate queued go to its daemon. */
static void emhd_loop_adds(emhd_loop *l)
{
    pthread_mutex_lock(&l->mu);
    emhd_add *a = l->adds;
    l->adds = NULL;
    l->adds_tail = &l->adds;
    pthread_mutex_unlock(&l->mu);
    while (a != NULL) {
        emhd_add *next = a->next;
        int fd = a->fd;
        /* MHD closes fd when it cannot take it. */
        if (MHD_add_connection(l->daemon, fd, (const struct sockaddr *)&a->peer, a->peer_len) !=
            MHD_YES)
            emhd_handoff_drop(l->es, fd, a->seq);
        free(a);
        a = next;
    }
}

/* Connections queued but never added (the loop stopped first): closed,
 * their records dropped. The controlling thread, the loop joined. */
static void emhd_loop_discard_adds(emhd_loop *l)
{
    while (l->adds != NULL) {
        emhd_add *a = l->adds;
        l->adds = a->next;
        close(a->fd);
        emhd_handoff_drop(l->es, a->fd, a->seq);
        free(a);
    }
    l->adds_tail = &l->adds;
}

static void *emhd_loop_main(void *arg)
{
    emhd_loop *l = arg;
    /* As MHD's own threads: a write to a closed socket is an error, not
     * a signal (MHD sends with MSG_NOSIGNAL too). */
    sigset_t sigpipe;
    sigemptyset(&sigpipe);
    sigaddset(&sigpipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigpipe, NULL);
    for (;;) {
        emhd_loop_adds(l);
        if (atomic_load(&l->stop)) {
            /* Here, so that MHD's last callbacks (every connection closed,
             * on_end(SRV_ECLOSED) of a body cut short) run on this thread
             * as all the others did. */
            MHD_stop_daemon(l->daemon);
            l->daemon_stopped = true;
            return NULL;
        }
        (void)MHD_run(l->daemon); /* processes what is ready, never waits */
        emhd_splitting = NULL;    /* a request MHD closed may be freed now */
        int ms = -1;
        MHD_UNSIGNED_LONG_LONG to;
        if (MHD_get_timeout(l->daemon, &to) == MHD_YES)
            ms = to < INT_MAX ? (int)to : INT_MAX;
        struct epoll_event evs[2];
        int n = epoll_wait(l->epfd, evs, 2, ms);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr != l)
                continue; /* MHD's descriptor: MHD_run takes it */
            uint64_t v;
            while (read(l->wake, &v, sizeof v) < 0 && errno == EINTR)
                ;
            /* Cleared before the next MHD_run, which sees what woke it. */
            atomic_store(&l->signalled, false);
        }
    }
}

/* The gate's thread: hand fd to the next loop. */
void emhd_loops_hand(void *ctx, int fd, const struct sockaddr *peer, socklen_t peer_len,
                     const srv__conn *conn, int bad, uint64_t good)
{
    emhd_server *es = ctx;
    emhd_handoff *h = malloc(sizeof *h);
    emhd_add *a = malloc(sizeof *a);
    pthread_mutex_lock(&es->lock);
    emhd_handoff stale = emhd_handoff_take(es, fd, 0); /* the gate alone adds records */
    if (stale.found) /* MHD closed that one without a word: its slot and count go */
        srv__conn_close(&stale.conn);
    unsigned long long seq = 0;
    if (h != NULL) {
        seq = ++es->handoff_seq;
        *h = (emhd_handoff){.next = es->handoffs, .fd = fd, .seq = seq, .conn = *conn,
                            .bad = bad, .good = good};
        es->handoffs = h;
        es->nhandoffs++;
    }
    pthread_mutex_unlock(&es->lock);
    if (h == NULL) { /* NOTIFY_STARTED, finding no record, opens it again */
        srv__conn lost = *conn;
        srv__conn_close(&lost);
    }
    if (a == NULL || peer_len > sizeof a->peer) {
        free(a);
        close(fd);
        emhd_handoff_drop(es, fd, seq);
        return;
    }
    a->next = NULL;
    a->fd = fd;
    a->seq = seq;
    a->peer_len = peer_len;
    memcpy(&a->peer, peer, peer_len);
    emhd_loop *l = &es->loops[es->next_loop++ % es->nloops];
    pthread_mutex_lock(&l->mu);
    *l->adds_tail = a;
    l->adds_tail = &a->next;
    pthread_mutex_unlock(&l->mu);
    emhd_loop_wake(l);
}

/* The limit, less one per loop: the gate stops a little before it (each
 * loop's daemon would take the whole limit). */
bool emhd_loops_room(void *ctx, unsigned waiting)
{
    emhd_server *es = ctx;
    pthread_mutex_lock(&es->lock);
    unsigned long long used = (unsigned long long)es->open + es->nhandoffs + waiting + es->threads;
    pthread_mutex_unlock(&es->lock);
    return used < es->limit;
}

/* Stop and join the loops: each stops its daemon (MHD resumes those
 * resumed last and closes every connection). Every suspended connection
 * must have been resumed. The controlling thread. */
void emhd_loops_stop(emhd_server *es)
{
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        if (l->started) { /* all at once: they close their connections in parallel */
            atomic_store(&l->stop, true);
            atomic_store(&l->signalled, false);
            emhd_loop_wake(l);
        }
    }
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        if (l->started)
            pthread_join(l->tid, NULL);
        l->started = false;
    }
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        emhd_loop_discard_adds(l);
        if (l->daemon != NULL && !l->daemon_stopped) /* a start that failed */
            MHD_stop_daemon(l->daemon);
        l->daemon = NULL;
    }
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        if (l->epfd >= 0)
            close(l->epfd);
        if (l->wake >= 0)
            close(l->wake);
        pthread_mutex_destroy(&l->mu);
    }
    free(es->loops);
    es->loops = NULL;
    es->nloops = 0;
}

/* n daemons and their threads; 0, or an SRV_E* code with nothing left. */
int emhd_loops_start(emhd_server *es, unsigned n, const emhd_daemon_opts *o)
{
    es->loops = calloc(n, sizeof *es->loops);
    if (es->loops == NULL) {
        srv__server_set_error(es->srv, "mhd: out of memory");
        return SRV_ENOMEM;
    }
    es->nloops = n;
    for (unsigned i = 0; i < n; i++) {
        emhd_loop *l = &es->loops[i];
        l->es = es;
        l->adds_tail = &l->adds;
        pthread_mutex_init(&l->mu, NULL);
        l->epfd = l->wake = -1;
    }
    int rc = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        emhd_loop *l = &es->loops[i];
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (l->epfd >= 0)
            l->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (l->epfd < 0 || l->wake < 0) {
            srv__server_set_error(es->srv, "mhd: cannot create %s for I/O thread %u: %s",
                                  l->epfd < 0 ? "an epoll set" : "an eventfd", i,
                                  strerror(errno));
            rc = SRV_EENGINE;
            break;
        }
        l->daemon = MHD_start_daemon(
            /* TURBO: MHD then closes a socket without shutting it down first,
             * so emhd_closing can still answer and linger on it (over TLS: no
             * close_notify, as h2o's quiet close; every answer is framed). */
            o->flags, 0, NULL, NULL, o->access, es,
            MHD_OPTION_EXTERNAL_LOGGER, o->log, es, /* first: 1.0 warns otherwise */
            MHD_OPTION_ARRAY, o->tls_opts,
            MHD_OPTION_CONNECTION_LIMIT, o->limit,
            MHD_OPTION_CONNECTION_TIMEOUT, o->idle_s,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, o->pool,
            MHD_OPTION_URI_LOG_CALLBACK, o->uri_log, es,
            MHD_OPTION_UNESCAPE_CALLBACK, o->unescape, es,
            MHD_OPTION_NOTIFY_COMPLETED, o->completed, es,
            MHD_OPTION_NOTIFY_CONNECTION, o->connection, es,
            MHD_OPTION_END);
        if (l->daemon == NULL) {
            srv__server_set_error(es->srv, "mhd: cannot start the daemon: %s",
                                  es->start_msg[0] != '\0' ? es->start_msg : "unknown reason");
            rc = SRV_EENGINE;
            break;
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        struct epoll_event mhd = {.events = EPOLLIN, .data.ptr = NULL};
        struct epoll_event wake = {.events = EPOLLIN, .data.ptr = l};
        if (di == NULL || epoll_ctl(l->epfd, EPOLL_CTL_ADD, di->epoll_fd, &mhd) != 0 ||
            epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake, &wake) != 0) {
            srv__server_set_error(es->srv, "mhd: cannot watch the daemon's epoll set: %s",
                                  strerror(errno));
            rc = SRV_EENGINE;
        }
    }
    for (unsigned i = 0; i < n && rc == 0; i++) {
        emhd_loop *l = &es->loops[i];
        if (srv__thread_create(&l->tid, NULL, emhd_loop_main, l) != 0) {
            srv__server_set_error(es->srv, "mhd: cannot create an I/O thread");
            rc = SRV_ETHREAD;
            break;
        }
        l->started = true;
    }
    if (rc != 0)
        emhd_loops_stop(es); /* no connection was added: nothing is suspended */
    return rc;
}
