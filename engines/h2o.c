/*
 * The "h2o" engine (Undertow's place): libh2o-evloop 2.2.5's event loops, sockets, TLS and
 * inter-thread messages, through its public API; HTTP/1 and HTTP/2 are the core's
 * (core/h1conn.c, core/h2conn.c on nghttp2), carried by engines/h2o_conn.c. Threads:
 * io_threads event loops accept, read and write; handlers run on the core's worker pool (or on
 * the loop, for non-blocking routes); answers come back to the owning loop as wake-ups.
 */
#include "h2o_internal.h"

#include <dirent.h>

static void eh2o_wake(eh2o_thread *t)
{
    /* A NULL message only writes the queue's pipe, so h2o_evloop_run returns. */
    h2o_multithread_send_message(&t->receiver, NULL);
}

static void eh2o_on_wake(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    (void)messages; /* NULL messages: nothing is queued */
}

/* The slots: every request is a core connection's (HTTP/1 or HTTP/2), which records the event
 * and wakes its loop (engines/h2o_conn.c). */
static void eh2o_respond(void *state, srv_request *sreq)
{
    (void)state;
    srv__h1conn_respond(sreq);
}

static void eh2o_stream_kick(void *state, srv_request *sreq)
{
    (void)state;
    srv__h1conn_stream_kick(sreq);
}

static void eh2o_body_kick(void *state, srv_request *sreq)
{
    (void)state;
    srv__h1conn_body_kick(sreq);
}

/* ------------------------------------------------------------------ */
/* Connections: accept, max_connections, tracking                      */
/* ------------------------------------------------------------------ */

/* Refused past SRV_REFUSE_MAX being read (or out of memory): the 503 at once, in cleartext
 * only (a TLS client cannot read it before a handshake), what came drained, closed. */
static void eh2o_refuse_now(eh2o_thread *t, h2o_socket_t *sock, srv__conn *adm)
{
    srv__refuse_fd(h2o_socket_get_fd(sock), !srv__tls_enabled(t->server->srv));
    h2o_socket_close(sock);
    srv__conn_close(adm);
}

static void eh2o_on_accept(h2o_socket_t *listener, const char *err);

static void eh2o_on_accept_resume(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, accept_resume, entry);
    if (t->listener != NULL)
        h2o_socket_read_start(t->listener, eh2o_on_accept);
}

/* Up to `max` connections from the backlog. */
static void eh2o_accept_some(eh2o_thread *t, h2o_socket_t *listener, int max)
{
    eh2o_server *s = t->server;
    for (int i = 0; i < max; i++) {
        h2o_socket_t *sock = h2o_evloop_socket_accept(listener); /* errno from accept4 */
        if (sock == NULL) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The pending connection stays readable: without a rest the loop would
                 * spin until a descriptor is freed. The backlog holds the clients. */
                h2o_socket_read_stop(listener);
                h2o_timeout_link(t->loop, &t->accept_pause, &t->accept_resume);
            }
            break;
        }
        /* Past max_connections a connection is still read (the policy bounds it: its head
         * within min(header_timeout_ms, 2 s), at most SRV_REFUSE_MAX at once) so that the
         * core's 503 answers what the client asked, in a protocol it reads (inside TLS, a
         * GOAWAY on HTTP/2); more are refused at once. */
        srv__conn adm;
        enum srv__conn_admission how = srv__conn_open(&adm, s->srv, srv__now_ms());
        eh2o_conn *c = how != SRV_CONN_REFUSE_NOW ? srv__zalloc(sizeof *c) : NULL;
        if (c == NULL) { /* zeroed: h2o_linklist_insert asserts unlinked */
            eh2o_refuse_now(t, sock, &adm);
            continue;
        }
        c->conn = adm;
        c->sock = sock;
        c->thread = t;
        h2o_linklist_insert(&t->conns, &c->link);
        t->nconns++;
        sock->data = c;
        sock->on_close.cb = eh2o_on_conn_close;
        sock->on_close.data = c;
        if (eh2o_tls_accept(t, c, eh2o_conn_start)) /* HTTPS: handshake first */
            continue;
        eh2o_conn_start(c, 0); /* HTTP/1, or HTTP/2 by its preface */
    }
}

static void eh2o_on_accept(h2o_socket_t *listener, const char *err)
{
    if (err == NULL)
        eh2o_accept_some(listener->data, listener, EH2O_ACCEPT_BATCH);
}

/* ------------------------------------------------------------------ */
/* I/O threads                                                         */
/* ------------------------------------------------------------------ */

/*
 * While quiescing, every EH2O_STOP_POLL_MS: connections waiting for a next request close (the
 * core's policy; HTTP/2 after its GOAWAY once no stream is left), and so do those still in
 * their TLS handshake. One whose request is arriving keeps being read: it is served if it
 * completes before the stop, answered 503 at the stop otherwise.
 */
static void eh2o_thread_close_idle(eh2o_thread *t)
{
    eh2o_conn_time(t, 0, 1);
    for (h2o_linklist_t *n = t->conns.next, *next; n != &t->conns; n = next) {
        next = n->next; /* closing frees c */
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
        if (eh2o_tls_handshaking(c))
            eh2o_tls_close(c);
    }
}

/* On the loop: take what the kernel accepted before the quiesce (it would be reset when the
 * socket closes), stop accepting, close idle connections, tell eh2o_quiesce. */
static void eh2o_thread_quiesce(eh2o_thread *t)
{
    eh2o_server *s = t->server;
    t->quiesced = 1;
    h2o_timeout_unlink(&t->accept_resume);
    if (t->listener != NULL) {
        eh2o_accept_some(t, t->listener, s->cfg->backlog);
        h2o_socket_read_stop(t->listener);
        h2o_socket_close(t->listener); /* closes this loop's dup */
        t->listener = NULL;
    }
    eh2o_thread_close_idle(t); /* a request waiting counts as arriving */
    srv__loopctl_quiesced(&s->ctl); /* the grace then counts what is arriving */
}

/* Connections still open a while after the stop's answers went out: closed. */
static void eh2o_thread_force_close(eh2o_thread *t)
{
    for (h2o_linklist_t *n = t->conns.next, *next; n != &t->conns; n = next) {
        next = n->next; /* closing frees c */
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
        h2o_socket_close(c->sock);
    }
}

/*
 * The loop's control: quiesce, close what is idle meanwhile, and at the stop answer what is
 * arriving, then close what is still open. It runs inside h2o's callbacks (a wake, then every
 * EH2O_STOP_POLL_MS while quiesced), never between two h2o_evloop_run calls: libh2o 2.2.5
 * runs the callback a write queues (and skips a closed socket's) only inside a run, and frees a
 * closed socket at the start of the next run. A socket written and closed between runs stayed
 * on its pending list: the next run read it after freeing it, h2o_evloop_destroy closed it
 * twice (a NULL read in h2o_buffer_dispose).
 */
static void eh2o_on_control(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, control, entry);
    eh2o_server *s = t->server;
    if (!t->quiesced && (atomic_load(&s->ctl.quiesce_req) || atomic_load(&s->ctl.stop_req)))
        eh2o_thread_quiesce(t);
    else if (t->quiesced)
        eh2o_thread_close_idle(t); /* e.g. a response written before the quiesce */
    if (atomic_load(&s->ctl.stop_req)) {
        uint64_t now = h2o_now(t->loop);
        if (t->stop_at == 0) {
            t->stop_at = now;
            eh2o_conn_time(t, 1, 1); /* requests still arriving: the core's 503 */
        }
        if (!t->forced && now - t->stop_at >= EH2O_STOP_FORCE_MS) {
            eh2o_thread_force_close(t);
            t->forced = 1;
        }
    }
    if (t->quiesced && !h2o_timeout_is_linked(&t->control))
        h2o_timeout_link(t->loop, &t->stop_poll, &t->control);
}

static void eh2o_thread_run(eh2o_thread *t)
{
    eh2o_server *s = t->server;
    while (t->stop_at == 0 || t->nconns != 0) {
        h2o_evloop_run(t->loop, INT32_MAX);
        /* A wake only ends the run (eh2o_wake): what it asks for runs on the next one. */
        int due = atomic_load(&s->ctl.stop_req) ? t->stop_at == 0
                                                : atomic_load(&s->ctl.quiesce_req) && !t->quiesced;
        if (due) {
            h2o_timeout_unlink(&t->control); /* from stop_poll: at once */
            h2o_timeout_link(t->loop, &t->zero, &t->control);
        }
    }
}

/*
 * h2o_evloop_destroy (2.2.5) does not close its epoll descriptor, and nothing public names it.
 * The kernel does: /proc/self/fdinfo of an epoll descriptor lists each descriptor it watches
 * ("tfd: N"). The loop's epoll is the one that watches this loop's own dup of the listening
 * socket (each loop has its own number). Found once the listener is registered; -1 if not.
 */
static int eh2o_loop_epoll_fd(int watched)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d)) != NULL) {
        char path[64], target[64], line[256];
        int fd = atoi(e->d_name);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = e->d_name[0] != '.' ? readlink(path, target, sizeof target - 1) : -1;
        if (n < 0)
            continue;
        target[n] = '\0';
        if (strcmp(target, "anon_inode:[eventpoll]") != 0)
            continue;
        snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue;
        int tfd;
        while (found < 0 && fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "tfd: %d", &tfd) == 1 && tfd == watched)
                found = fd;
        fclose(f);
    }
    closedir(d);
    return found;
}

static void eh2o_thread_teardown(eh2o_thread *t)
{
    eh2o_server *s = t->server;
    /* The controlling thread may still be inside h2o_multithread_send_message on our queue. */
    srv__loopctl_await_wakes(&s->ctl);
    h2o_multithread_unregister_receiver(t->queue, &t->receiver);
    eh2o_conn_thread_dispose(t);
    h2o_timeout_unlink(&t->control);
    h2o_timeout_dispose(t->loop, &t->stop_poll);
    h2o_timeout_dispose(t->loop, &t->accept_pause);
    h2o_timeout_dispose(t->loop, &t->zero);
    eh2o_tls_thread_dispose(t);
    h2o_multithread_destroy_queue(t->queue);
    free(t->queue); /* 2.2.5's h2o_multithread_destroy_queue does not free the struct */
    h2o_evloop_destroy(t->loop);
    if (t->epoll_fd >= 0)
        close(t->epoll_fd);
    t->loop = NULL;
}

static void *eh2o_thread_main(void *arg)
{
    eh2o_thread *t = arg;
    eh2o_server *s = t->server;

    for (int i = 0; i < EH2O_LOOP_FDS; i++) { /* free them for the calls below */
        close(t->spare[i]);
        t->spare[i] = -1;
    }
    t->loop = h2o_evloop_create();
    t->queue = h2o_multithread_create_queue(t->loop);
    h2o_multithread_register_receiver(t->queue, &t->receiver, eh2o_on_wake);
    h2o_timeout_init(t->loop, &t->zero, 0);
    h2o_timeout_init(t->loop, &t->stop_poll, EH2O_STOP_POLL_MS);
    t->control.cb = eh2o_on_control;
    eh2o_conn_thread_init(t);
    h2o_timeout_init(t->loop, &t->accept_pause, EH2O_ACCEPT_PAUSE_MS);
    t->accept_resume.cb = eh2o_on_accept_resume;
    eh2o_tls_thread_loop(t);
    t->listener = h2o_evloop_socket_create(t->loop, t->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    t->listen_fd = -1; /* the listener closes it */
    t->listener->data = t;
    int listen_fd = h2o_socket_get_fd(t->listener);
    h2o_socket_read_start(t->listener, eh2o_on_accept);
    h2o_evloop_run(t->loop, 0); /* registers the listener with the loop's epoll */
    t->epoll_fd = eh2o_loop_epoll_fd(listen_fd);

    srv__loopctl_ready(&s->ctl);

    eh2o_thread_run(t);
    eh2o_thread_teardown(t);
    /* The socket buffers h2o keeps for reuse are per thread and die with it: free them. */
    h2o_mem_recycle_t *recycled = &h2o_socket_buffer_prototype.allocator;
    while (recycled->cnt != 0)
        free(h2o_mem_alloc_recycle(recycled, 0));
    return NULL;
}

/* ------------------------------------------------------------------ */
/* The vtable                                                          */
/* ------------------------------------------------------------------ */

static void eh2o_free(eh2o_server *s)
{
    if (s->threads != NULL) {
        for (unsigned i = 0; i < s->nthreads; i++) {
            if (s->threads[i].listen_fd >= 0)
                close(s->threads[i].listen_fd);
            for (int j = 0; j < EH2O_LOOP_FDS; j++)
                if (s->threads[i].spare[j] >= 0)
                    close(s->threads[i].spare[j]);
            eh2o_tls_thread_free(&s->threads[i]);
        }
        free(s->threads);
    }
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    srv__loopctl_destroy(&s->ctl);
    free(s);
}

static void eh2o_wake_thread(void *arg, unsigned i)
{
    eh2o_server *s = arg;
    eh2o_wake(&s->threads[i]);
}

/* Ask every started loop to stop, let the queues go and join. */
static void eh2o_stop_threads(eh2o_server *s, unsigned started)
{
    srv__loopctl_stop(&s->ctl, started, eh2o_wake_thread, s);
    for (unsigned i = 0; i < started; i++)
        pthread_join(s->threads[i].tid, NULL);
}

static int eh2o_start(srv_server *srv, void **state)
{
    const srv_config *cfg = srv__server_config(srv);
    eh2o_server *s = calloc(1, sizeof *s);
    if (s == NULL) {
        srv__server_set_error(srv, "h2o engine: out of memory");
        return SRV_ENOMEM;
    }
    s->srv = srv;
    s->cfg = cfg;
    s->listen_fd = -1;
    s->nthreads = cfg->io_threads;
    srv__loopctl_init(&s->ctl);

    int rc = srv__listen(srv, SRV__LISTEN_NONBLOCK);
    if (rc < 0)
        goto fail;
    s->listen_fd = rc;

    s->threads = calloc(s->nthreads, sizeof *s->threads);
    if (s->threads == NULL) {
        srv__server_set_error(srv, "h2o engine: out of memory");
        rc = SRV_ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < s->nthreads; i++) { /* first: eh2o_free closes what is >= 0 */
        s->threads[i].listen_fd = -1;
        for (int j = 0; j < EH2O_LOOP_FDS; j++)
            s->threads[i].spare[j] = -1;
    }
    for (unsigned i = 0; i < s->nthreads; i++) {
        eh2o_thread *t = &s->threads[i];
        t->server = s;
        h2o_linklist_init_anchor(&t->conns);
        t->listen_fd = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
        for (int j = 0; j < EH2O_LOOP_FDS && t->listen_fd >= 0; j++) {
            t->spare[j] = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
            if (t->spare[j] < 0)
                break;
        }
        if (eh2o_tls_thread_new(t, srv) != 0) {
            srv__server_set_error(srv, "h2o engine: out of memory");
            eh2o_free(s);
            return SRV_ENOMEM;
        }
        if (t->listen_fd < 0 || t->spare[EH2O_LOOP_FDS - 1] < 0) {
            srv__server_set_error(srv, "h2o engine: %u I/O threads need %u descriptors: %s",
                                  s->nthreads, s->nthreads * (1 + EH2O_LOOP_FDS),
                                  strerror(errno));
            rc = SRV_ESYS;
            goto fail;
        }
    }

    /* Before the first loop runs: the core reads its engine state (to call respond) as soon
     * as a request arrives, and pthread_create orders this write before that. The loops take
     * no asynchronous signals (srv__thread_create): SIGPIPE from h2o's writev stays pending,
     * SIGINT/SIGTERM go to the application; a fault still reaches its handler. */
    *state = s;
    unsigned started = 0;
    for (; started < s->nthreads; started++) {
        if ((rc = srv__thread_create(&s->threads[started].tid, NULL, eh2o_thread_main,
                                     &s->threads[started])) != 0)
            break;
    }

    /* Wait for the started loops to be set up: their receivers must exist before anything
     * can be sent to them. */
    srv__loopctl_await_ready(&s->ctl, started);

    if (started < s->nthreads) {
        srv__server_set_error(srv, "h2o engine: cannot create I/O thread: %s", strerror(rc));
        rc = SRV_ETHREAD;
        goto fail_threads;
    }
    return 0;

    /* Undo in the reverse order of acquisition. */
fail_threads:
    eh2o_stop_threads(s, started);
    *state = NULL;
fail:
    eh2o_free(s); /* the descriptors taken so far, the config, the lock */
    return rc;
}

/* Each loop takes what the kernel already accepted and closes its dup; then connects are
 * refused (shutdown; it would reset what is still in the backlog, so only after every loop
 * took it) - unless the socket was handed to us (srv_config.listen_fd): it must keep
 * listening for the next process. */
static void eh2o_quiesce(void *state)
{
    eh2o_server *s = state;
    srv__loopctl_quiesce(&s->ctl, s->nthreads, eh2o_wake_thread, s);
    if (srv__server_config(s->srv)->listen_fd < 0)
        shutdown(s->listen_fd, SHUT_RDWR);
}

static void eh2o_stop(void *state)
{
    eh2o_stop_threads(state, ((eh2o_server *)state)->nthreads);
}

static void eh2o_destroy(void *state)
{
    eh2o_free(state);
}

const srv_engine srv_engine_h2o = {
    .version = SRV_ENGINE_VERSION,
    .name = "h2o",
    /* HTTP/1 and HTTP/2 are the core's (505 for an unknown version, 400 for garbage, GOAWAY
     * for an HTTP/2 preface past max_connections). */
    .caps = SRV_ENGINE_CAP_HTTP2 | SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_GARBAGE_400 |
            SRV_ENGINE_CAP_H2_PREFACE_GOAWAY | SRV_ENGINE_CAP_TLS | SRV_ENGINE_CAP_TLS_HTTP2 |
            SRV_ENGINE_CAP_STREAM | SRV_ENGINE_CAP_STREAM_BODY | SRV_ENGINE_CAP_WEBSOCKET |
            SRV_ENGINE_CAP_WEBSOCKET_TLS,
    .start = eh2o_start,
    .respond = eh2o_respond,
    .stream_kick = eh2o_stream_kick,
    .body_kick = eh2o_body_kick,
    .quiesce = eh2o_quiesce,
    .stop = eh2o_stop,
    .destroy = eh2o_destroy,
};
