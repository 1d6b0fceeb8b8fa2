/*
 * The "h2o" engine (Undertow's place): libh2o-evloop 2.2.5's event loops, sockets, TLS and
 * HTTP/2; HTTP/1 is the core's (engines/h2o_h1.c). Threads: io_threads event loops (one
 * h2o_evloop + h2o_context each) accept, parse and write; handlers run on the core's worker
 * pool; responses come back to the owning loop as h2o_multithread messages.
 */
#include "h2o_internal.h"

/* Initial capacity of a connection's socket read buffer (eh2o_thread_main). */
#define EH2O_SOCKET_BUFFER 4096

static void eh2o_wake(eh2o_thread *t)
{
    /* A NULL message only writes the queue's pipe, so h2o_evloop_run returns. */
    h2o_multithread_send_message(&t->receiver, NULL);
}

/* ------------------------------------------------------------------ */
/* Tickets                                                             */
/* ------------------------------------------------------------------ */

static void eh2o_ticket_free(eh2o_ticket *tk)
{
    if (tk->body != NULL)
        eh2o_body_unref(tk->body);
    free(tk);
}

static void eh2o_ticket_unref(eh2o_ticket *tk)
{
    if (--tk->refs == 0)
        eh2o_ticket_free(tk);
}

/*
 * h2o clears the request's pool: the h2o_req_t is gone, whoever still holds the ticket. Before
 * its answer reached the loop that means the client withdrew it (HTTP/2 RST_STREAM, or the
 * connection died): a request not yet handed over is dropped here, one handed over is
 * cancelled in the core (a queued handler is skipped), and the reset is counted.
 */
void eh2o_on_guard_dispose(void *p)
{
    eh2o_ticket *tk = *(eh2o_ticket **)p;
    int drop = 1; /* the guard's reference */
    tk->req = NULL; /* first: an answer given from inside the line below writes nothing */
    if (tk->body != NULL) /* an HTTP/2 streamed body: its DATA go to h2o again */
        eh2o_body_stream_gone(tk);
    if (!tk->done) {
        if (tk->conn != NULL) {
            tk->conn->h2_with_us--;
            eh2o_count_reset(tk->conn);
        }
        if (h2o_linklist_is_linked(&tk->pending)) {
            h2o_linklist_unlink(&tk->pending);
            if (tk->conn != NULL) /* counted as arriving: its read's eh2o_h2_note takes it back */
                tk->conn->h2_to_dispatch--;
            srv__request_release(tk->sreq); /* never given to the core: no respond */
            tk->thread->live--;
            drop = 2; /* and the core's */
        } else {
            srv__request_cancel(tk->sreq); /* respond -> eh2o_complete, at once */
        }
    }
    if ((tk->refs -= drop) == 0)
        eh2o_ticket_free(tk);
}

static const char *eh2o_pool_strndup(h2o_mem_pool_t *pool, const char *s, size_t n, int lower)
{
    char *d = h2o_mem_alloc_pool(pool, n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    if (lower)
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)(d[i] - 'A') < 26)
                d[i] = (char)(d[i] | 0x20);
    return d;
}


/* Write the core's final response on the loop thread that owns the connection. Returns 1
 * when a stream took the engine's reference to sreq (engines/h2o_stream.c). */
static int eh2o_send_response(eh2o_thread *t, h2o_req_t *req, srv_request *sreq)
{
    static h2o_generator_t generator = {NULL, NULL}; /* one final h2o_send: never proceeds */
    int status = srv__response_status(sreq);
    int http2 = req->version >= 0x200;

    req->res.status = status;
    req->res.reason = srv__status_reason(status);
    if (status < 200 || status == 204 || status == 304)
        req->res.content_length = SIZE_MAX; /* no Content-Length; h2o's chunked filter skips */
    else
        req->res.content_length = srv__response_content_length(sreq);

    size_t n = srv__response_header_count(sreq);
    for (size_t i = 0; i < n; i++) {
        const char *value, *name = srv__response_header_at(sreq, i, &value);
        if (name == NULL)
            break;
        size_t nlen = strlen(name), vlen = strlen(value);
        /* Lower-case names for h2o's token table and HTTP/2; orig_name keeps HTTP/1's case
         * (h2o 2.2.5's add_header copies orig_name into the pool itself). */
        const char *lc = eh2o_pool_strndup(&req->pool, name, nlen, 1);
        if (http2) {
            const h2o_token_t *tok = h2o_lookup_token(lc, nlen);
            if (tok != NULL && tok->http2_should_reject)
                continue; /* connection-specific: a protocol error in HTTP/2 */
        }
        h2o_add_header_by_str(&req->pool, &req->res.headers, lc, nlen, 1, name,
                              eh2o_pool_strndup(&req->pool, value, vlen, 0), vlen);
    }
    if (srv__response_streamed(sreq)) {
        if (eh2o_stream_start(t, req, sreq) == 0)
            return 1;
        srv__stream_detach(sreq); /* out of memory: the application sees ECLOSED */
        h2o_send_error_503(req, "Service Unavailable", "out of memory", 0);
        return 0;
    }

    size_t blen;
    const void *body = srv__response_body(sreq, &blen);
    h2o_iovec_t buf = {NULL, 0};
    if (blen != 0) {
        buf.base = h2o_mem_alloc_pool(&req->pool, blen); /* must live until h2o disposes req */
        memcpy(buf.base, body, blen);
        buf.len = blen;
    }
    h2o_start_response(req, &generator);
    /* May dispose req before it returns. */
    h2o_send(req, &buf, blen != 0 ? 1 : 0, H2O_SEND_STATE_FINAL);
    return 0;
}

/* The loop this thread runs (NULL on other threads). */
static _Thread_local eh2o_thread *eh2o_self;

/* On the owning loop: write the response unless h2o disposed the request, then let go. */
void eh2o_complete(eh2o_thread *t, eh2o_ticket *tk)
{
    srv_request *sreq = tk->sreq;
    if (tk->body != NULL && eh2o_body_answered(tk))
        return; /* after the 100 Continue being written (engines/h2o_body.c) */
    if (tk->conn != NULL && tk->req != NULL) /* the conn lives while its req does */
        tk->conn->h2_with_us--;
    tk->done = 1;
    /* The guard may fire inside eh2o_send_response: this reference keeps tk alive. */
    if (tk->h2_stop != NULL)
        eh2o_h2_write_answer(tk->h2_stop, tk->h2_stream, sreq);
    else if (tk->req != NULL && eh2o_send_response(t, tk->req, sreq))
        sreq = NULL; /* streamed: released when h2o disposes the request */
    if (sreq != NULL && srv__response_streamed(sreq))
        srv__stream_detach(sreq); /* the client left first */
    if (sreq != NULL)
        srv__request_release(sreq);
    t->live--;
    eh2o_ticket_unref(tk);
}

/* Receiver callback, on the loop thread: the responses posted by the respond slot. */
static void eh2o_on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, receiver, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        eh2o_ticket *tk = H2O_STRUCT_FROM_MEMBER(eh2o_ticket, msg.link, messages->next);
        h2o_linklist_unlink(&tk->msg.link);
        eh2o_complete(t, tk);
    }
}

/*
 * respond slot: any thread. From another thread it only posts the ticket to the owning loop.
 * On the owning loop itself (404, 405 and bad input, answered inside on_req) there is nothing
 * to hand over: respond at once, as h2o handlers do from on_req.
 */
static void eh2o_respond(void *state, srv_request *sreq)
{
    (void)state;
    if (srv__h1conn_respond(sreq)) /* HTTP/1: the core's connection takes it */
        return;
    eh2o_ticket *tk = srv__request_engine_data(sreq);
    if (tk->thread == eh2o_self)
        eh2o_complete(tk->thread, tk);
    else
        h2o_multithread_send_message(&tk->thread->receiver, &tk->msg);
}

/* ------------------------------------------------------------------ */
/* Requests: h2o_req_t -> srv_request                                  */
/* ------------------------------------------------------------------ */

/* HTTP/2: h2o's parsed view. Host is :authority; HTTP/2's content-length
 * was checked against the DATA frames by h2o and taken out, so it is given back as the length. */
int eh2o_fill_parsed(srv_request *sreq, h2o_req_t *req)
{
    int st, http2 = req->version >= 0x200;
    if ((st = srv__request_set_method(sreq, req->input.method.base, req->input.method.len)) != 0 ||
        (st = srv__request_set_target(sreq, req->input.path.base, req->input.path.len)) != 0)
        return st;
    srv__request_set_version(sreq, req->version >> 8, http2 ? 0 : req->version & 0xff);
    if (req->input.authority.len != 0 &&
        (st = srv__request_add_header(sreq, "host", 4, req->input.authority.base,
                                      req->input.authority.len)) != 0)
        return st;
    for (size_t i = 0; i < req->headers.size; i++) {
        const h2o_header_t *h = req->headers.entries + i;
        const char *name = h->orig_name != NULL ? h->orig_name : h->name->base;
        st = srv__request_add_header(sreq, name, h->name->len, h->value.base, h->value.len);
        if (st != 0)
            return st;
    }
    if (http2 && req->entity.base != NULL) {
        char len[32];
        int n = snprintf(len, sizeof len, "%zu", req->entity.len);
        if ((st = srv__request_add_header(sreq, "content-length", 14, len, (size_t)n)) != 0)
            return st;
    }
    return 0;
}

static int eh2o_fill(srv_request *sreq, h2o_req_t *req)
{
    int st = eh2o_fill_parsed(sreq, req);
    if (st == 0)
        st = srv__request_headers_done(sreq);
    if (st == 0 && req->entity.base != NULL && req->entity.len != 0)
        st = srv__request_append_body(sreq, req->entity.base, req->entity.len);
    return st;
}

static int eh2o_on_req(h2o_handler_t *self, h2o_req_t *req)
{
    eh2o_server *s = ((eh2o_handler *)self)->server;
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, ctx, req->conn->ctx);
    /* Only HTTP/2 comes here: HTTP/1 is the core's (engines/h2o_h1.c). */
    eh2o_conn *c = eh2o_h2_conn(req);
    if (c != NULL && c->h2_bodies != NULL && eh2o_body_h2_ready(c, req)) {
        c->recv_since = 0; /* its END_STREAM: the core has had it since its HEADERS */
        return 0;
    }
    struct sockaddr_storage peer;
    socklen_t plen = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&peer);
    srv_request *sreq = srv__request_new(s->srv, plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    eh2o_ticket *tk = sreq != NULL ? srv__zalloc(sizeof *tk) : NULL;
    if (tk == NULL) {
        if (sreq != NULL)
            srv__request_release(sreq);
        h2o_send_error_503(req, "Service Unavailable", "out of memory", 0);
        return 0;
    }
    tk->thread = t;
    tk->sreq = sreq;
    tk->req = req;
    tk->refs = 2;
    tk->conn = c;
    if (c != NULL) {
        c->h2_with_us++;
        c->recv_since = 0; /* a request completed: the receive deadline restarts */
    }
    *(eh2o_ticket **)h2o_mem_alloc_shared(&req->pool, sizeof tk, eh2o_on_guard_dispose) = tk;
    t->live++;
    srv__request_set_engine_data(sreq, tk);
    if (t->quiesced)
        srv__request_set_close(sreq);

    int st = eh2o_fill(sreq, req);
    eh2o_h2_drop_body(c, req); /* the core has its copy now */
    if (st != 0) {
        srv__request_fail(sreq, st); /* calls respond: the ticket is posted */
    } else {
        h2o_linklist_insert(&t->to_dispatch, &tk->pending);
        if (c != NULL)
            c->h2_to_dispatch++; /* arriving until dispatched (eh2o_h2_note) */
        if (!h2o_timeout_is_linked(&t->dispatch_entry))
            h2o_timeout_link(t->loop, &t->zero, &t->dispatch_entry);
    }
    return 0; /* the response may already be written: req must not be touched here */
}

/* ------------------------------------------------------------------ */
/* Connections: accept, max_connections, tracking                      */
/* ------------------------------------------------------------------ */

void eh2o_on_conn_close(void *data)
{
    eh2o_conn *c = data;
    eh2o_thread *t = c->thread;
    eh2o_tls_conn_closed(c);
    h2o_timeout_unlink(&c->calm);
    h2o_timeout_unlink(&c->h2_hold_entry);
    h2o_timeout_unlink(&c->h2_after_entry);
    if (c->closed != NULL)
        *c->closed = 1;
    eh2o_h1_closed(c); /* HTTP/1: the core's connection lets go */
    if (c->h2_arriving != 0) /* HTTP/2 streams and requests counted by eh2o_h2_note */
        srv__request_arriving(t->server->srv, -(int)c->h2_arriving);
    c->h2_held_back = 0; /* the socket is gone: nothing to read again */
    eh2o_body_h2_conn_closed(c);
    h2o_timeout_unlink(&c->h2_hold_entry);
    h2o_timeout_unlink(&c->inject);
    free(c->held);
    h2o_linklist_unlink(&c->link);
    t->nconns--;
    srv__conn_close(&c->conn);
    free(c);
}

/* Refused past SRV_REFUSE_MAX being read (or out of memory): the 503 at once, in cleartext
 * only (a TLS client cannot read it before a handshake), what came drained, closed. */
static void eh2o_refuse_now(eh2o_thread *t, h2o_socket_t *sock, srv__conn *adm)
{
    int fd = h2o_socket_get_fd(sock);
    if (!srv__tls_enabled(t->server->srv)) {
        size_t len = 0;
        const char *answer = srv__refusal_503(&len);
        ssize_t w = send(fd, answer, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
    }
    shutdown(fd, SHUT_WR);
    char sink[4096];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
        ;
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

static void eh2o_on_accept(h2o_socket_t *listener, const char *err)
{
    eh2o_thread *t = listener->data;
    eh2o_server *s = t->server;
    if (err != NULL)
        return;
    for (int i = 0; i < EH2O_ACCEPT_BATCH; i++) {
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
        c->calm.cb = eh2o_on_calm;
        h2o_linklist_insert(&t->conns, &c->link);
        t->nconns++;
        sock->on_close.cb = eh2o_on_conn_close; /* survives the switch to HTTP/2 */
        sock->on_close.data = c;
        if (eh2o_tls_accept(t, c)) /* HTTPS: handshake first (engines/h2o_tls.c) */
            continue;
        gettimeofday(&c->connected_at, NULL);
        eh2o_h1_start(c, 1); /* HTTP/1, or h2c's preface to HTTP/2 */
    }
}

/* ------------------------------------------------------------------ */
/* I/O threads                                                         */
/* ------------------------------------------------------------------ */

/*
 * While quiescing, after each loop turn: HTTP/1 connections waiting for a next request close
 * (the core's policy), and HTTP/2 connections with no stream open get their last GOAWAY and
 * close. One whose request is arriving keeps being read: it is served (with Connection: close
 * on HTTP/1) if it completes before the stop, answered 503 at the stop otherwise.
 */
static void eh2o_thread_close_idle(eh2o_thread *t)
{
    eh2o_h1_time(t, 0, 1);
    for (h2o_linklist_t *n = t->conns.next, *next; n != &t->conns; n = next) {
        next = n->next; /* closing frees c */
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
        if (c->hc != NULL)
            continue;
        if (eh2o_h2_idle(c))
            eh2o_h2_close_idle(c);
        else if (eh2o_tls_handshaking(c))
            eh2o_tls_close(c);
    }
}

/* The stop slot, on the loop: requests still arriving get 503 (HTTP/1 and HTTP/2). */
static void eh2o_thread_stop_arriving(eh2o_thread *t)
{
    eh2o_h1_time(t, 1, 1); /* HTTP/1: the core's 503, or the close of an idle one */
    for (h2o_linklist_t *n = t->conns.next, *next; n != &t->conns; n = next) {
        next = n->next;
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
        if (c->hc == NULL)
            eh2o_h2_stop_arriving(c); /* queues frames only: c stays */
    }
}

/* On the loop: stop accepting, turn keep-alive off, close idle connections. */
static void eh2o_thread_quiesce(eh2o_thread *t)
{
    t->quiesced = 1;
    h2o_timeout_unlink(&t->accept_resume);
    if (t->listener != NULL) {
        h2o_socket_read_stop(t->listener);
        h2o_socket_close(t->listener); /* closes this loop's dup */
        t->listener = NULL;
    }
    /* GOAWAY (last stream 2^31-1) on HTTP/2; HTTP/1 requests parsed from now on are not
     * persistent. */
    h2o_context_request_shutdown(&t->ctx);
    /* One second later h2o would send its second GOAWAY and mark every connection
     * HALF_CLOSED, after which it ignores DATA and closes a connection with no request being
     * answered: a stream whose body is still arriving could not complete within the grace.
     * Instead eh2o_thread_close_idle sends that GOAWAY to each connection once no stream of
     * it is open (h2o's idle timeout is no help: it also runs while streams are arriving). */
    h2o_timeout_unlink(&t->ctx.http2._graceful_shutdown_timeout);
    eh2o_thread_close_idle(t);
}

/* Connections still open after the responses went out: make their next I/O fail so h2o
 * closes them through its own paths (there is no public force-close). */
static void eh2o_thread_force_close(eh2o_thread *t)
{
    for (h2o_linklist_t *n = t->conns.next, *next; n != &t->conns; n = next) {
        next = n->next; /* closing frees c */
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
        if (c->hc != NULL) { /* HTTP/1's socket is ours to close */
            h2o_socket_close(c->sock);
            continue;
        }
        int fd = h2o_socket_get_fd(c->sock);
        if (fd >= 0)
            shutdown(fd, SHUT_RDWR);
    }
}

static void eh2o_thread_run(eh2o_thread *t)
{
    eh2o_server *s = t->server;
    uint64_t stop_at = 0;
    int forced = 0;
    for (;;) {
        int stopping = atomic_load(&s->stop_req);
        h2o_evloop_run(t->loop, stopping ? EH2O_STOP_POLL_MS : INT32_MAX);
        if (!t->quiesced && (atomic_load(&s->quiesce_req) || atomic_load(&s->stop_req)))
            eh2o_thread_quiesce(t);
        else if (t->quiesced)
            eh2o_thread_close_idle(t); /* e.g. a response written before the quiesce */
        if (!atomic_load(&s->stop_req))
            continue;
        uint64_t now = h2o_now(t->loop);
        if (stop_at == 0) {
            stop_at = now;
            eh2o_thread_stop_arriving(t);
        }
        if (t->nconns == 0 && t->live == 0 && t->streams == 0)
            return;
        if (!forced && now - stop_at >= EH2O_STOP_FORCE_MS) {
            eh2o_thread_force_close(t);
            forced = 1;
        }
        if (now - stop_at >= EH2O_STOP_GIVEUP_MS) {
            t->abandoned = 1;
            return;
        }
    }
}

/* h2o_evloop_destroy (2.2.5) does not close its epoll fd: find it behind the public struct
 * (epoll.c.h: struct { h2o_evloop_t super; int ep; }) and close it only if the kernel
 * confirms it is an epoll instance. */
static int eh2o_loop_epoll_fd(h2o_evloop_t *loop)
{
    struct eh2o_evloop_epoll {
        h2o_evloop_t super;
        int ep;
    };
    int fd = ((struct eh2o_evloop_epoll *)loop)->ep;
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = fd > 2 ? readlink(path, target, sizeof target - 1) : -1;
    if (n < 0)
        return -1;
    target[n] = '\0';
    return strcmp(target, "anon_inode:[eventpoll]") == 0 ? fd : -1;
}

static void eh2o_thread_teardown(eh2o_thread *t)
{
    eh2o_server *s = t->server;
    /* The controlling thread may still be inside h2o_multithread_send_message on our queue. */
    pthread_mutex_lock(&s->mu);
    while (!s->wakes_done)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (t->abandoned) {
        /* Disposing would free memory the remaining connections use. Leak instead. */
        fprintf(stderr,
                "libsrv h2o: %u connection(s) and %u request(s) did not finish; "
                "leaving an event loop undisposed\n",
                t->nconns, t->live);
        return;
    }
    /* Order matters (docs/ENGINES.md, teardown): request_shutdown linked this entry and
     * h2o_timeout_dispose asserts on non-empty lists. */
    h2o_timeout_unlink(&t->ctx.http2._graceful_shutdown_timeout);
    h2o_multithread_unregister_receiver(t->ctx.queue, &t->receiver);
    eh2o_stream_thread_dispose(t);
    eh2o_body_thread_dispose(t);
    eh2o_h1_thread_dispose(t);
    h2o_timeout_dispose(t->loop, &t->accept_pause);
    h2o_timeout_unlink(&t->dispatch_entry);
    h2o_timeout_dispose(t->loop, &t->zero);
    h2o_timeout_unlink(&t->sweep_entry);
    h2o_timeout_dispose(t->loop, &t->sweep);
    h2o_timeout_dispose(t->loop, &t->send_timeout);
    eh2o_tls_thread_dispose(t);
    h2o_multithread_queue_t *queue = t->ctx.queue;
    h2o_context_dispose(&t->ctx);
    free(queue); /* 2.2.5's h2o_multithread_destroy_queue does not free the struct */
    int ep = eh2o_loop_epoll_fd(t->loop);
    h2o_evloop_destroy(t->loop);
    if (ep >= 0)
        close(ep);
    t->loop = NULL;
}

static void *eh2o_thread_main(void *arg)
{
    eh2o_thread *t = arg;
    eh2o_server *s = t->server;

    for (int i = 0; i < EH2O_LOOP_FDS; i++) { /* free them for the two calls below */
        close(t->spare[i]);
        t->spare[i] = -1;
    }
    /* Each connection's read buffer starts at this capacity (h2o's default is 8 KiB): one
     * page holds a usual head, and a request waiting for its answer keeps its buffer. It
     * grows by doubling for more. Per thread, like the prototype, before any socket. */
    h2o_socket_buffer_prototype._initial_buf.capacity = EH2O_SOCKET_BUFFER;
    t->loop = h2o_evloop_create();
    h2o_context_init(&t->ctx, t->loop, &s->globalconf);
    h2o_multithread_register_receiver(t->ctx.queue, &t->receiver, eh2o_on_messages);
    eh2o_stream_thread_init(t);
    eh2o_body_thread_init(t);
    eh2o_h1_thread_init(t);
    h2o_timeout_init(t->loop, &t->accept_pause, EH2O_ACCEPT_PAUSE_MS);
    t->accept_resume.cb = eh2o_on_accept_resume;
    h2o_timeout_init(t->loop, &t->zero, 0);
    t->dispatch_entry.cb = eh2o_on_dispatch;
    uint64_t tick = s->cfg->header_timeout_ms / 4;
    h2o_timeout_init(t->loop, &t->sweep, tick < 50 ? 50 : tick > 1000 ? 1000 : tick);
    t->sweep_entry.cb = eh2o_on_sweep;
    h2o_timeout_init(t->loop, &t->send_timeout, s->cfg->header_timeout_ms);
    eh2o_tls_thread_loop(t);
    h2o_timeout_link(t->loop, &t->sweep, &t->sweep_entry);
    t->accept_ctx.ctx = &t->ctx;
    t->accept_ctx.hosts = s->globalconf.hosts;
    t->listener = h2o_evloop_socket_create(t->loop, t->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    t->listen_fd = -1; /* the listener closes it */
    t->listener->data = t;
    h2o_socket_read_start(t->listener, eh2o_on_accept);

    eh2o_self = t;
    pthread_mutex_lock(&s->mu);
    s->ready++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);

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
    h2o_config_dispose(&s->globalconf);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Ask every started loop to stop, let the queues go and join. */
static void eh2o_stop_threads(eh2o_server *s, unsigned started)
{
    atomic_store(&s->stop_req, 1);
    for (unsigned i = 0; i < started; i++)
        eh2o_wake(&s->threads[i]);
    pthread_mutex_lock(&s->mu);
    s->wakes_done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
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
    atomic_init(&s->quiesce_req, 0);
    atomic_init(&s->stop_req, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);

    h2o_config_init(&s->globalconf);
    s->globalconf.server_name = h2o_iovec_init("", 0); /* the core sends its own Server */
    s->globalconf.http2.idle_timeout = cfg->keepalive_timeout_ms;
    /* h2o buffers whole HTTP/2 bodies (1 GiB by default) before on_req, and refuses a body
     * of exactly its limit where the core allows it (hence + 1); past it RST_STREAM
     * (REFUSED_STREAM), documented in docs/ENGINES.md. */
    s->globalconf.max_request_entity_size = cfg->max_body_bytes + 1;
    h2o_hostconf_t *host =
        h2o_config_register_host(&s->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    /* Every HTTP/2 request reaches the core: "/..." through the path, the rest through the
     * fallback. */
    h2o_pathconf_t *paths[] = {h2o_config_register_path(host, "/", 0), &host->fallback_path};
    for (size_t i = 0; i < 2; i++) {
        eh2o_handler *handler = (eh2o_handler *)h2o_create_handler(paths[i], sizeof *handler);
        handler->super.on_req = eh2o_on_req;
        handler->server = s;
    }

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
        h2o_linklist_init_anchor(&t->to_dispatch);
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

    /* I/O threads take no signals: SIGPIPE from a write to a closed peer stays pending on
     * the thread instead of killing the process (h2o uses writev), SIGINT/SIGTERM go to
     * the application. */
    sigset_t all, old;
    sigfillset(&all);
    /* Before the first loop runs: the core reads its engine state (to call respond) as soon
     * as a request arrives, and pthread_create orders this write before that. */
    *state = s;
    pthread_sigmask(SIG_SETMASK, &all, &old);
    unsigned started = 0;
    for (; started < s->nthreads; started++) {
        if ((rc = pthread_create(&s->threads[started].tid, NULL, eh2o_thread_main,
                                 &s->threads[started])) != 0)
            break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    /* Wait for the started loops to be set up: their receivers must exist before anything
     * can be sent to them. */
    pthread_mutex_lock(&s->mu);
    while (s->ready < started)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);

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

/* Stop listening at once, on every loop's dup - unless the socket was
 * handed to us (srv_config.listen_fd): shutdown acts on the socket, not
 * the descriptor, and that one must keep listening for the next process
 * (its backlog holds connections for it); each loop closes its dup. */
static void eh2o_listener_shutdown(eh2o_server *s)
{
    if (srv__server_config(s->srv)->listen_fd < 0)
        shutdown(s->listen_fd, SHUT_RDWR);
}

static void eh2o_quiesce(void *state)
{
    eh2o_server *s = state;
    /* Refuse new connects now, on every loop's dup at once (accept then fails with EINVAL);
     * each loop closes its own dup when it wakes up. */
    atomic_store(&s->quiesce_req, 1); /* first: a loop woken by the shutdown sees it */
    eh2o_listener_shutdown(s);
    for (unsigned i = 0; i < s->nthreads; i++)
        eh2o_wake(&s->threads[i]);
}

static void eh2o_stop(void *state)
{
    eh2o_server *s = state;
    eh2o_listener_shutdown(s);
    eh2o_stop_threads(s, s->nthreads);
}

static void eh2o_destroy(void *state)
{
    eh2o_free(state);
}

const srv_engine srv_engine_h2o = {
    .version = SRV_ENGINE_VERSION,
    .name = "h2o",
    /* HTTP/1 is the core's (505 for an unknown version, 400 for garbage, GOAWAY for an
     * HTTP/2 preface past max_connections); streams are framed by the core on HTTP/1 and
     * by h2o in DATA frames on HTTP/2. */
    .caps = SRV_ENGINE_CAP_HTTP2 | SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_GARBAGE_400 |
            SRV_ENGINE_CAP_H2_PREFACE_GOAWAY | SRV_ENGINE_CAP_TLS | SRV_ENGINE_CAP_TLS_HTTP2 |
            SRV_ENGINE_CAP_TLS_QUIET_CLOSE | SRV_ENGINE_CAP_STREAM | SRV_ENGINE_CAP_STREAM_BODY,
    .start = eh2o_start,
    .respond = eh2o_respond,
    .stream_kick = eh2o_stream_kick,
    .body_kick = eh2o_body_kick,
    .quiesce = eh2o_quiesce,
    .stop = eh2o_stop,
    .destroy = eh2o_destroy,
};
