/*
 * The "h2o" engine (Undertow's place): libh2o-evloop 2.2.5, HTTP/1.1 and cleartext HTTP/2.
 * Threads: io_threads event loops (one h2o_evloop + h2o_context each) accept, parse and write;
 * handlers run on the core's worker pool; responses come back to the owning loop as
 * h2o_multithread messages.
 */
#include "srv_engine.h"

#include <h2o.h>
#include <h2o/http2.h>
#include <h2o/http2_scheduler.h>
#include <h2o/version.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#if H2O_VERSION_MAJOR != 2 || H2O_VERSION_MINOR != 2
#error "engines/h2o.c is written for libh2o 2.2.x (see docs/ENGINES.md before porting)"
#endif

/* picohttpparser, exported by libh2o-evloop.so but not installed as a header (ENGINE-NOTES 3.1). */
struct eh2o_phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len,
                      const char **path, size_t *path_len, int *minor_version,
                      struct eh2o_phr_header *headers, size_t *num_headers, size_t last_len);

/*
 * The head of h2o 2.2.5's struct st_h2o_http2_conn_t (include/h2o/http2_internal.h), up to
 * the write buffer: that header cannot be included (it needs klib's khash.h, which Debian does
 * not install). Used only to queue a GOAWAY on a reset flood, and only on a connection whose
 * layout eh2o_h2_conn checked against three self-linked lists first.
 */
struct eh2o_hpack_table {
    void *entries;
    size_t num_entries, entry_capacity, entry_start_index;
    size_t hpack_size, hpack_capacity, hpack_max_capacity;
};
struct st_h2o_http2_conn_t {
    h2o_conn_t super;
    h2o_socket_t *sock;
    h2o_http2_settings_t peer_settings;
    void *streams; /* khash_t(h2o_http2_stream_t) * */
    struct {
        uint32_t max_open, max_processed;
    } pull_stream_ids;
    struct {
        uint32_t max_open;
    } push_stream_ids;
    struct {
        uint32_t open, half_closed, send_body;
    } num_streams[3];
    h2o_http2_scheduler_node_t scheduler;
    enum { EH2O_H2_OPEN, EH2O_H2_HALF_CLOSED, EH2O_H2_IS_CLOSING } state;
    h2o_linklist_t _conns; /* h2o_context_t::http2._conns */
    ssize_t (*_read_expect)(void *conn, const uint8_t *src, size_t len, const char **err_desc);
    h2o_buffer_t *_http1_req_input;
    struct eh2o_hpack_table _input_header_table;
    ssize_t _input_window;
    struct eh2o_hpack_table _output_header_table;
    h2o_linklist_t _pending_reqs;
    h2o_timeout_entry_t _timeout_entry;
    h2o_buffer_t *_headers_unparsed;
    struct {
        h2o_buffer_t *buf;
        h2o_buffer_t *buf_in_flight;
        h2o_linklist_t streams_to_proceed;
    } _write;
};
typedef struct st_h2o_http2_conn_t eh2o_h2conn;
/* Exported by libh2o-evloop 2.2.5, declared in the same uninstallable header. */
void h2o_http2_encode_goaway_frame(h2o_buffer_t **buf, uint32_t last_stream_id, int errnum,
                                   h2o_iovec_t additional_data);
void h2o_http2_conn_request_write(eh2o_h2conn *conn);

#define EH2O_LOOP_FDS         3    /* a loop's own descriptors: epoll + the queue's pipe */
#define EH2O_MAX_HEADERS      100  /* H2O_MAX_HEADERS: h2o refuses more itself */
#define EH2O_ACCEPT_BATCH     16   /* accepts per listener wake-up, so loops share them */
#define EH2O_REFUSE_LINGER_MS 1000 /* a refused connection drains this long at most */
#define EH2O_ACCEPT_PAUSE_MS  100  /* out of fds: wait this long before accepting again */
#define EH2O_STOP_POLL_MS     10   /* loop tick while stopping */
#define EH2O_STOP_FORCE_MS    250  /* stop: then shutdown() the connections still open */
#define EH2O_STOP_GIVEUP_MS   3000 /* stop: then leave the loop undisposed, never free in use */
/* HTTP/2 rapid reset (CVE-2023-44487): more than this many streams withdrawn by the client
 * before their answer, within one window, get GOAWAY (ENHANCE_YOUR_CALM) and a close. A
 * browser cancels at most its open streams (100, h2o's limit) at once. */
#define EH2O_RESET_BUDGET    100
#define EH2O_RESET_WINDOW_MS 1000

typedef struct eh2o_server eh2o_server;
typedef struct eh2o_thread eh2o_thread;

/* One connection being served; found again through sock->on_close. */
typedef struct eh2o_conn {
    h2o_linklist_t link; /* eh2o_thread.conns */
    h2o_socket_t *sock;
    eh2o_thread *thread;
    /* HTTP/2 only, set by its first request: */
    eh2o_h2conn *h2; /* NULL unless its layout checked out */
    int h2_checked;
    h2o_socket_cb h2_on_read;  /* h2o's HTTP/2 read callback: closing through it is clean */
    uint64_t reset_window_at;  /* start of the current reset-counting window */
    unsigned resets;           /* streams withdrawn in that window */
    h2o_timeout_entry_t calm;  /* linked once the flood GOAWAY is queued: then close */
    unsigned h2_with_us;       /* requests given to the core, answer not yet written */
    uint64_t recv_since;       /* since when some request has been arriving (0: none) */
    uint64_t sent_since;       /* last time h2o issued a write (or had none due) */
    size_t sent_mark;          /* sock->bytes_written then */
    struct { /* HTTP/1 framing guard (see eh2o_h1_on_read) */
        h2o_socket_cb reqread;  /* h2o's HTTP/1 read callback; NULL: not guarded */
        h2o_socket_cb wrote;    /* h2o's callback of the write in flight */
        int *closed;            /* set when the connection closes under eh2o_h1_call */
        int off;                /* HTTP/2 now: hands off */
        int answering;          /* the guard writes its own answer, then closes */
        int phase;              /* EH2O_H1_* */
        char *head;             /* the head being received (max_header_bytes + 4) */
        size_t head_len, line;
        uint64_t left;          /* Content-Length or chunk bytes still to come */
        uint64_t body;          /* chunk data so far */
        int digits;
        unsigned completed;     /* requests completed in the current read */
        unsigned seq, served;   /* heads scanned, and reached on_req */
        unsigned mask_seq;      /* the HTTP/1.0 head whose Upgrade is hidden from h2o */
        size_t mask_at;
        char mask_ch;
        srv_request *req;       /* the request whose body is scanned (to answer with) */
        int bad;                /* status for a bad request queued behind good ones */
        srv_request *bad_req;
        char *out;              /* the guard's answer being written */
        h2o_timeout_entry_t linger;
        h2o_timeout_entry_t send; /* a write that has not completed in header_timeout_ms */
    } h1;
} eh2o_conn;

/* One connection refused past max_connections: 503, then drained and closed. */
typedef struct eh2o_refusal {
    h2o_linklist_t link; /* eh2o_thread.refusals */
    h2o_timeout_entry_t timeout;
    h2o_socket_t *sock;
    eh2o_thread *thread;
    char *out;    /* the core's 503 being written */
    int answered; /* the answer is out (or given up): the timeout closes */
} eh2o_refusal;

/*
 * The ticket of one request: the srv_request, the h2o_req_t while it lives and the message
 * that brings the response back. Two references, both dropped on the loop thread only: the
 * guard's (the h2o_req_t's pool was cleared) and the core's (the response was processed).
 */
typedef struct eh2o_ticket {
    h2o_multithread_message_t msg; /* sent by the respond slot, from any thread */
    eh2o_thread *thread;           /* the loop that owns the connection */
    srv_request *sreq;
    h2o_req_t *req; /* NULL once h2o disposed it (HTTP/2 reset, connection gone) */
    eh2o_conn *conn; /* HTTP/2: the connection, to count resets (valid while req is) */
    eh2o_conn *raw;  /* an answer of the HTTP/1 guard: no h2o_req_t, we write it */
    struct eh2o_refusal *refusal; /* the 503 of a connection past max_connections */
    h2o_linklist_t pending; /* eh2o_thread.to_dispatch until handed to the core */
    int done; /* the response reached the loop: a later dispose is no reset */
    int refs;
} eh2o_ticket;

struct eh2o_thread {
    eh2o_server *server;
    pthread_t tid;
    int listen_fd; /* this loop's dup() of the listening socket, until the listener owns it */
    /* Descriptors held for h2o_evloop_create (epoll) and h2o_context_init (its queue's pipe),
     * which abort() the process when they cannot get one: start fails cleanly instead. */
    int spare[EH2O_LOOP_FDS];
    h2o_evloop_t *loop;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener;
    h2o_multithread_receiver_t receiver; /* responses (tickets) and NULL wake-ups */
    h2o_timeout_t refuse_timeout;
    h2o_timeout_t accept_pause; /* out of file descriptors: the listener rests */
    h2o_timeout_entry_t accept_resume;
    /* HTTP/2 requests are handed to the core after the read that parsed them, so a
     * RST_STREAM in the same read cancels them before any worker sees them. */
    h2o_timeout_t zero;
    h2o_timeout_entry_t dispatch_entry;
    h2o_timeout_t sweep; /* HTTP/2 deadlines (eh2o_h2_check) */
    h2o_timeout_t send_timeout; /* HTTP/1 writes: header_timeout_ms, as threadpool's */
    h2o_timeout_entry_t sweep_entry;
    h2o_linklist_t to_dispatch;
    h2o_linklist_t conns;
    h2o_linklist_t refusals;
    unsigned nconns; /* loop thread only */
    unsigned live;   /* tickets whose response was not processed yet; loop thread only */
    int quiesced;
    int abandoned; /* connections would not close: context and loop left undisposed */
};

typedef struct eh2o_handler {
    h2o_handler_t super;
    eh2o_server *server;
} eh2o_handler;

struct eh2o_server {
    srv_server *srv;
    const srv_config *cfg;
    h2o_globalconf_t globalconf;
    int listen_fd;
    unsigned nthreads;
    eh2o_thread *threads;
    atomic_uint conns; /* open connections, all loops: the max_connections gate */
    atomic_int quiesce_req;
    atomic_int stop_req;
    pthread_mutex_t mu; /* guards the two fields below */
    pthread_cond_t cv;
    unsigned ready; /* loops that finished their setup */
    int wakes_done; /* the controlling thread sent its last wake-up: queues may go */
};

static void eh2o_wake(eh2o_thread *t)
{
    /* A NULL message only writes the queue's pipe, so h2o_evloop_run returns. */
    h2o_multithread_send_message(&t->receiver, NULL);
}

/* ------------------------------------------------------------------ */
/* Tickets                                                             */
/* ------------------------------------------------------------------ */

static void eh2o_ticket_unref(eh2o_ticket *tk)
{
    if (--tk->refs == 0)
        free(tk);
}

static void eh2o_count_reset(eh2o_conn *c);

/*
 * h2o clears the request's pool: the h2o_req_t is gone, whoever still holds the ticket. Before
 * its answer reached the loop that means the client withdrew it (HTTP/2 RST_STREAM, or the
 * connection died): a request not yet handed over is dropped here, one handed over is
 * cancelled in the core (a queued handler is skipped), and the reset is counted.
 */
static void eh2o_on_guard_dispose(void *p)
{
    eh2o_ticket *tk = *(eh2o_ticket **)p;
    int drop = 1; /* the guard's reference */
    tk->req = NULL;
    if (!tk->done) {
        if (tk->conn != NULL) {
            tk->conn->h2_with_us--;
            eh2o_count_reset(tk->conn);
        }
        if (h2o_linklist_is_linked(&tk->pending)) {
            h2o_linklist_unlink(&tk->pending);
            srv__request_release(tk->sreq); /* never given to the core: no respond */
            tk->thread->live--;
            drop = 2; /* and the core's */
        } else {
            srv__request_cancel(tk->sreq); /* respond -> eh2o_complete, at once */
        }
    }
    if ((tk->refs -= drop) == 0)
        free(tk);
}

static const char *eh2o_pool_strndup(h2o_mem_pool_t *pool, const char *s, size_t n, int lower)
{
    char *d = h2o_mem_alloc_pool(pool, n + 1);
    for (size_t i = 0; i < n; i++)
        d[i] = lower && s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
    d[n] = '\0';
    return d;
}

static void eh2o_h1_write_answer(eh2o_conn *c, srv_request *sreq);
static void eh2o_refusal_write_answer(struct eh2o_refusal *r, srv_request *sreq);
static void eh2o_h1_after(eh2o_conn *c);
static eh2o_conn *eh2o_sock_conn(h2o_socket_t *sock);

/* Write the core's final response on the loop thread that owns the connection. */
static void eh2o_send_response(eh2o_thread *t, h2o_req_t *req, srv_request *sreq)
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
        /* Lower-case names for h2o's token table and HTTP/2; orig_name keeps HTTP/1's case. */
        const char *lc = eh2o_pool_strndup(&req->pool, name, nlen, 1);
        if (http2) {
            const h2o_token_t *tok = h2o_lookup_token(lc, nlen);
            if (tok != NULL && tok->http2_should_reject)
                continue; /* connection-specific: a protocol error in HTTP/2 */
        }
        h2o_add_header_by_str(&req->pool, &req->res.headers, lc, nlen, 1,
                              eh2o_pool_strndup(&req->pool, name, nlen, 0),
                              eh2o_pool_strndup(&req->pool, value, vlen, 0), vlen);
    }
    /* The core decides keep-alive (h2o 2.2.5 would close an HTTP/1.1 connection whose request
     * had any Connection header without "keep-alive", e.g. "Connection: TE"). */
    if (!http2)
        req->http1_is_persistent = srv__response_keep_alive(sreq) && !t->quiesced;

    size_t blen;
    const void *body = srv__response_body(sreq, &blen);
    h2o_iovec_t buf = {NULL, 0};
    if (blen != 0) {
        buf.base = h2o_mem_alloc_pool(&req->pool, blen); /* must live until h2o disposes req */
        memcpy(buf.base, body, blen);
        buf.len = blen;
    }
    /* HTTP/1: h2o's write callback is wrapped after the send (eh2o_h1_after). */
    eh2o_conn *c = NULL;
    if (!http2 && req->conn->callbacks->get_socket != NULL) {
        h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
        c = sock != NULL ? eh2o_sock_conn(sock) : NULL;
        if (c != NULL && c->h1.reqread == NULL)
            c = NULL;
    }
    int closed = 0, *outer = NULL;
    if (c != NULL) {
        outer = c->h1.closed;
        c->h1.closed = &closed;
    }
    h2o_start_response(req, &generator);
    /* May dispose req before it returns. */
    h2o_send(req, &buf, blen != 0 ? 1 : 0, H2O_SEND_STATE_FINAL);
    if (c != NULL) {
        if (closed) {
            if (outer != NULL)
                *outer = 1;
        } else {
            c->h1.closed = outer;
            eh2o_h1_after(c);
        }
    }
}

/* The loop this thread runs (NULL on other threads). */
static _Thread_local eh2o_thread *eh2o_self;

/* On the owning loop: write the response unless h2o disposed the request, then let go. */
static void eh2o_complete(eh2o_thread *t, eh2o_ticket *tk)
{
    srv_request *sreq = tk->sreq;
    if (tk->conn != NULL && tk->req != NULL) /* the conn lives while its req does */
        tk->conn->h2_with_us--;
    tk->done = 1;
    /* The guard may fire inside eh2o_send_response: this reference keeps tk alive. */
    if (tk->raw != NULL)
        eh2o_h1_write_answer(tk->raw, sreq);
    else if (tk->refusal != NULL)
        eh2o_refusal_write_answer(tk->refusal, sreq);
    else if (tk->req != NULL)
        eh2o_send_response(t, tk->req, sreq);
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
    eh2o_ticket *tk = srv__request_engine_data(sreq);
    if (tk->thread == eh2o_self)
        eh2o_complete(tk->thread, tk);
    else
        h2o_multithread_send_message(&tk->thread->receiver, &tk->msg);
}

/* ------------------------------------------------------------------ */
/* Requests: h2o_req_t -> srv_request                                  */
/* ------------------------------------------------------------------ */

/*
 * HTTP/1: h2o takes Host, Content-Length, Transfer-Encoding, Expect and Upgrade out of
 * req->headers, so the core could not apply its rules (400 for Content-Length together with
 * Transfer-Encoding, above all). The head is still at the start of the socket's input buffer
 * while h2o handles the request (it consumes it after the response), so parse it again with
 * h2o's own picohttpparser. Used only when the result matches what h2o parsed.
 */
typedef struct eh2o_head {
    const char *method, *target;
    size_t method_len, target_len, nheaders;
    int minor;
    struct eh2o_phr_header headers[EH2O_MAX_HEADERS];
} eh2o_head;

static int eh2o_raw_head(h2o_req_t *req, eh2o_head *h)
{
    if (req->version >= 0x200 || req->conn->callbacks->get_socket == NULL)
        return 0;
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock == NULL || sock->input == NULL || sock->input->size == 0)
        return 0;
    h->nheaders = EH2O_MAX_HEADERS;
    if (phr_parse_request(sock->input->bytes, sock->input->size, &h->method, &h->method_len,
                          &h->target, &h->target_len, &h->minor, h->headers, &h->nheaders, 0) <= 0)
        return 0;
    return h->method_len == req->input.method.len &&
           memcmp(h->method, req->input.method.base, h->method_len) == 0 &&
           h->target_len == req->input.path.len &&
           memcmp(h->target, req->input.path.base, h->target_len) == 0;
}

static int eh2o_fill_raw(srv_request *sreq, const eh2o_head *h)
{
    int st;
    if ((st = srv__request_set_method(sreq, h->method, h->method_len)) != 0 ||
        (st = srv__request_set_target(sreq, h->target, h->target_len)) != 0)
        return st;
    srv__request_set_version(sreq, 1, h->minor);
    for (size_t i = 0; i < h->nheaders; i++) {
        if (h->headers[i].name == NULL) /* obs-fold continuation line */
            return 400;
        if ((st = srv__request_add_header(sreq, h->headers[i].name, h->headers[i].name_len,
                                          h->headers[i].value, h->headers[i].value_len)) != 0)
            return st;
    }
    return 0;
}

/* HTTP/2 (and the fallback): h2o's parsed view. Host is :authority; HTTP/2's content-length
 * was checked against the DATA frames by h2o and taken out, so it is given back as the length. */
static int eh2o_fill_parsed(srv_request *sreq, h2o_req_t *req)
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
    eh2o_head head;
    int st = eh2o_raw_head(req, &head) ? eh2o_fill_raw(sreq, &head) : eh2o_fill_parsed(sreq, req);
    if (st == 0)
        st = srv__request_headers_done(sreq);
    if (st == 0 && req->entity.base != NULL && req->entity.len != 0)
        st = srv__request_append_body(sreq, req->entity.base, req->entity.len);
    return st;
}

static void eh2o_on_conn_close(void *data);

/* Take the h2o HTTP/2 connection behind c once, if its layout checks out (see the mirror). */
static void eh2o_h2_adopt(eh2o_conn *c, h2o_conn_t *conn)
{
    if (c->h2 != NULL || c->h2_checked || c->sock->_cb.read == NULL)
        return;
    c->h2_checked = 1;
    eh2o_h2conn *h2 = (eh2o_h2conn *)conn; /* super is its first member */
    int found = 0;
    h2o_linklist_t *all = &c->thread->ctx.http2._conns;
    for (h2o_linklist_t *n = all->next; n != all && !found; n = n->next)
        found = n == &h2->_conns;
    if (found && h2->sock == c->sock && h2->state <= EH2O_H2_IS_CLOSING &&
        h2->_pending_reqs.next->prev == &h2->_pending_reqs &&
        h2->_write.streams_to_proceed.next->prev == &h2->_write.streams_to_proceed &&
        h2->_write.buf != NULL)
        c->h2 = h2;
    c->h2_on_read = c->sock->_cb.read; /* reading now: h2o's HTTP/2 on_read */
}

/* The connection record of an HTTP/2 request (NULL if the socket is not one we track). */
static eh2o_conn *eh2o_h2_conn(h2o_req_t *req)
{
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (sock == NULL || sock->on_close.cb != eh2o_on_conn_close)
        return NULL;
    eh2o_conn *c = sock->on_close.data;
    eh2o_h2_adopt(c, req->conn);
    return c;
}

static void eh2o_h2_goaway(eh2o_conn *c, int errnum, const char *why);

/*
 * HTTP/2 deadlines, checked by a periodic sweep (h2o 2.2.5 has none while a stream is open):
 * - receiving: some request's head or body has been arriving (a header block waiting for its
 *   CONTINUATION, or open streams neither handed over nor queued for it) and no request
 *   completed for header_timeout_ms: empty CONTINUATIONs or 1-byte DATA frames every few
 *   seconds end there, as the HTTP/1 head and body do;
 * - sending: a response is due and h2o issued no write for header_timeout_ms (the client
 *   reads nothing, or grants no flow-control window), threadpool's write timeout.
 * Either gets GOAWAY and a close: h2o 2.2.5 cannot reset one stream from outside.
 */
static void eh2o_h2_check(eh2o_conn *c, uint64_t now, uint64_t limit)
{
    if (c->h2 == NULL && c->h1.off && c->sock->data != NULL) /* no request completed yet */
        eh2o_h2_adopt(c, c->sock->data);                      /* HTTP/2 sets sock->data */
    eh2o_h2conn *h2 = c->h2;
    if (h2 == NULL || h2->state != EH2O_H2_OPEN)
        return;
    /* h2o 2.2.5 counts a stream in .open from its HEADERS to its end, and in .half_closed
     * from the moment it hands the request over (SEND_HEADERS, before on_req); requests
     * waiting for a processing slot are on _pending_reqs. */
    uint32_t open = h2->num_streams[1].open, processing = h2->num_streams[1].half_closed;
    uint32_t queued = 0;
    for (h2o_linklist_t *n = h2->_pending_reqs.next; n != &h2->_pending_reqs; n = n->next)
        queued++;
    int receiving = h2->_headers_unparsed != NULL || open > processing + queued;
    if (!receiving)
        c->recv_since = 0;
    else if (c->recv_since == 0)
        c->recv_since = now;
    int sending = processing > c->h2_with_us || c->sock->_cb.write != NULL;
    if (!sending || c->sock->bytes_written != c->sent_mark) {
        c->sent_mark = c->sock->bytes_written;
        c->sent_since = now;
    }
    if (c->recv_since != 0 && now - c->recv_since >= limit)
        eh2o_h2_goaway(c, H2O_HTTP2_ERROR_NONE, "request timeout");
    else if (sending && now - c->sent_since >= limit)
        eh2o_h2_goaway(c, H2O_HTTP2_ERROR_NONE, "send timeout");
}

static void eh2o_on_sweep(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, sweep_entry, entry);
    uint64_t now = h2o_now(t->loop), limit = t->server->cfg->header_timeout_ms;
    for (h2o_linklist_t *n = t->conns.next; n != &t->conns; n = n->next)
        eh2o_h2_check(H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n), now, limit);
    h2o_timeout_link(t->loop, &t->sweep, &t->sweep_entry);
}

/* Zero timeout, after the reads of this loop iteration: hand the surviving requests over. */
static void eh2o_on_dispatch(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, dispatch_entry, entry);
    while (!h2o_linklist_is_empty(&t->to_dispatch)) {
        eh2o_ticket *tk = H2O_STRUCT_FROM_MEMBER(eh2o_ticket, pending, t->to_dispatch.next);
        h2o_linklist_unlink(&tk->pending);
        srv__request_dispatch(tk->sreq); /* may respond (and dispose other state) at once */
    }
}

/* The flood GOAWAY is queued: close through h2o's own read-error path, which waits for the
 * pending write (the GOAWAY) and then closes every stream and the socket. */
static void eh2o_on_calm(h2o_timeout_entry_t *entry)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, calm, entry);
    c->h2_on_read(c->sock, "too many stream resets"); /* c may be freed now */
}

/* Queue a last GOAWAY and close the HTTP/2 connection (once). */
static void eh2o_h2_goaway(eh2o_conn *c, int errnum, const char *why)
{
    eh2o_h2conn *h2 = c->h2;
    if (h2 == NULL || c->h2_on_read == NULL || h2o_timeout_is_linked(&c->calm) ||
        h2->state >= EH2O_H2_IS_CLOSING) /* h2o is closing it already */
        return;
    if (h2->state < EH2O_H2_HALF_CLOSED) {
        h2o_http2_encode_goaway_frame(&h2->_write.buf, h2->pull_stream_ids.max_open, errnum,
                                      h2o_iovec_init(why, strlen(why)));
        h2o_http2_conn_request_write(h2);
        h2->state = EH2O_H2_HALF_CLOSED;
    }
    h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->calm);
}

/*
 * One stream withdrawn before its answer. Past the budget: GOAWAY with ENHANCE_YOUR_CALM as
 * the last frame h2o sends (what its enqueue_goaway does, lib/http2/connection.c v2.2.5),
 * HALF_CLOSED so h2o opens no new stream from the rest of the input, then close.
 */
static void eh2o_count_reset(eh2o_conn *c)
{
    eh2o_thread *t = c->thread;
    uint64_t now = h2o_now(t->loop);
    if (now - c->reset_window_at >= EH2O_RESET_WINDOW_MS) {
        c->reset_window_at = now;
        c->resets = 0;
    }
    if (++c->resets > EH2O_RESET_BUDGET)
        eh2o_h2_goaway(c, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM, "too many stream resets");
}

static int eh2o_on_req(h2o_handler_t *self, h2o_req_t *req)
{
    eh2o_server *s = ((eh2o_handler *)self)->server;
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, ctx, req->conn->ctx);
    struct sockaddr_storage peer;
    socklen_t peer_len = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&peer);

    srv_request *sreq =
        srv__request_new(s->srv, peer_len != 0 ? (struct sockaddr *)&peer : NULL, peer_len);
    eh2o_ticket *tk = sreq != NULL ? calloc(1, sizeof *tk) : NULL;
    if (tk == NULL) {
        if (sreq != NULL)
            srv__request_release(sreq);
        h2o_send_error_503(req, "Service Unavailable", "out of memory",
                           H2O_SEND_ERROR_HTTP1_CLOSE_CONNECTION);
        return 0;
    }
    tk->thread = t;
    tk->sreq = sreq;
    tk->req = req;
    tk->refs = 2;
    int http2 = req->version >= 0x200;
    if (http2) {
        tk->conn = eh2o_h2_conn(req);
        if (tk->conn != NULL) {
            tk->conn->h2_with_us++;
            tk->conn->recv_since = 0; /* a request completed: the receive deadline restarts */
        }
    } else if (req->conn->callbacks->get_socket != NULL) {
        /* h2o has its view of the head now: give the core the bytes the client sent. */
        h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
        eh2o_conn *c = sock != NULL ? eh2o_sock_conn(sock) : NULL;
        if (c != NULL && ++c->h1.served == c->h1.mask_seq && c->h1.mask_at < sock->input->size &&
            sock->input->bytes[c->h1.mask_at] == '~') {
            sock->input->bytes[c->h1.mask_at] = c->h1.mask_ch;
            c->h1.mask_seq = 0;
        }
    }
    *(eh2o_ticket **)h2o_mem_alloc_shared(&req->pool, sizeof tk, eh2o_on_guard_dispose) = tk;
    t->live++;
    srv__request_set_engine_data(sreq, tk);
    if (t->quiesced)
        srv__request_set_close(sreq);

    int st = eh2o_fill(sreq, req);
    if (st != 0) {
        srv__request_fail(sreq, st > 0 ? st : 500); /* calls respond: the ticket is posted */
    } else if (http2) {
        h2o_linklist_insert(&t->to_dispatch, &tk->pending);
        if (!h2o_timeout_is_linked(&t->dispatch_entry))
            h2o_timeout_link(t->loop, &t->zero, &t->dispatch_entry);
    } else {
        srv__request_dispatch(sreq);
    }
    return 0; /* the response may already be written: req must not be touched here */
}

/*
 * h2o answers an unknown Transfer-Encoding with its own 400 before on_req; DESIGN.md and the
 * core (srv__request_headers_done) say 501. h2o sends that error through the host's fallback
 * path, so a filter there turns it into 501 when the raw head confirms the cause, with the
 * core's precedence: Content-Length as well stays 400, a repeated coding is 501.
 */
static int eh2o_te_not_implemented(h2o_req_t *req)
{
    eh2o_head h;
    if (!eh2o_raw_head(req, &h))
        return 0;
    const struct eh2o_phr_header *te = NULL;
    int nte = 0, cl = 0;
    for (size_t i = 0; i < h.nheaders; i++) {
        const struct eh2o_phr_header *x = &h.headers[i];
        if (x->name == NULL)
            continue;
        if (h2o_lcstris(x->name, x->name_len, H2O_STRLIT("transfer-encoding"))) {
            te = x;
            nte++;
        } else if (h2o_lcstris(x->name, x->name_len, H2O_STRLIT("content-length"))) {
            cl = 1;
        }
    }
    if (te == NULL || cl)
        return 0;
    return nte > 1 || !h2o_lcstris(te->value, te->value_len, H2O_STRLIT("chunked"));
}

static void eh2o_on_setup_ostream(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    (void)self;
    if (req->res.status == 400 && eh2o_te_not_implemented(req)) {
        req->res.status = 501;
        req->res.reason = "Not Implemented";
    }
    h2o_setup_next_ostream(req, slot);
}

/* ------------------------------------------------------------------ */
/* HTTP/1 framing guard: every byte read is checked before h2o sees it */
/* ------------------------------------------------------------------ */

/*
 * h2o 2.2.5 answers bad heads with canned text (no Date, no Server, 400 for "HTTP/9.9"),
 * upgrades HTTP/1.0 to h2c, runs the h2c upgrade before any handler sees the head (so the
 * core's rules were skipped), and de-chunks leniently ("0x2" is size 0 plus an extension).
 * So the connection's read callback is ours: it scans the raw bytes (heads, Content-Length
 * bodies, chunk framing) before h2o's reqread_on_read gets them. A head passes the core's
 * rules (srv__request_headers_done and the rest) here; a violation is answered by the core
 * (srv__request_fail: its framing, headers and access-log line) and written by us, and h2o
 * then closes the connection through its own read-error path.
 * h2o re-arms its own read callback after each response (reqread_start) and after a 100
 * Continue: eh2o_h1_after puts ours back after every h2o call that may have done so, and
 * wraps h2o's write callbacks to get control back at those moments.
 */
enum {
    EH2O_H1_HEAD,
    EH2O_H1_BODY,
    EH2O_H1_CHUNK_SIZE,
    EH2O_H1_CHUNK_EXT,
    EH2O_H1_CHUNK_SIZE_LF,
    EH2O_H1_CHUNK_DATA,
    EH2O_H1_CHUNK_DATA_CR,
    EH2O_H1_CHUNK_DATA_LF,
    EH2O_H1_TRAILER,
    EH2O_H1_TRAILER_LINE,
    EH2O_H1_TRAILER_LINE_LF,
    EH2O_H1_TRAILER_END_LF,
    EH2O_H1_DEAD /* answered or handed to HTTP/2: pass everything through */
};

static void eh2o_h1_on_read(h2o_socket_t *sock, const char *err);
static void eh2o_h1_on_written(h2o_socket_t *sock, const char *err);

static eh2o_conn *eh2o_sock_conn(h2o_socket_t *sock)
{
    return sock->on_close.cb == eh2o_on_conn_close ? sock->on_close.data : NULL;
}

/* Close through h2o's HTTP/1 read-error path (it disposes its request and the socket). */
static void eh2o_h1_close(eh2o_conn *c)
{
    c->h1.phase = EH2O_H1_DEAD;
    c->h1.reqread(c->sock, h2o_socket_error_closed); /* c is freed */
}

static void eh2o_h1_linger_timeout(h2o_timeout_entry_t *entry)
{
    eh2o_h1_close(H2O_STRUCT_FROM_MEMBER(eh2o_conn, h1.linger, entry));
}

static void eh2o_h1_on_linger_read(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (err != NULL) {
        h2o_timeout_unlink(&c->h1.linger);
        eh2o_h1_close(c);
        return;
    }
    h2o_buffer_consume(&sock->input, sock->input->size);
}

/* The answer is out: half-close and drain for a moment (closing with unread input would reset
 * the connection and could destroy the answer before the client reads it), then close. */
static void eh2o_h1_on_answer_written(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    h2o_timeout_unlink(&c->h1.send);
    free(c->h1.out);
    c->h1.out = NULL;
    if (err != NULL) {
        eh2o_h1_close(c);
        return;
    }
    shutdown(h2o_socket_get_fd(sock), SHUT_WR);
    h2o_buffer_consume(&sock->input, sock->input->size);
    h2o_socket_read_start(sock, eh2o_h1_on_linger_read);
    c->h1.linger.cb = eh2o_h1_linger_timeout;
    h2o_timeout_link(c->thread->loop, &c->thread->refuse_timeout, &c->h1.linger);
}

/* A client that reads nothing (pipelining without reading the answers) must not hold the
 * connection forever: h2o 2.2.5 has no timer while it writes. Past the deadline the socket
 * is shut, the write fails and h2o closes the connection. */
static void eh2o_h1_send_expired(h2o_timeout_entry_t *entry)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, h1.send, entry);
    shutdown(h2o_socket_get_fd(c->sock), SHUT_RDWR);
}

static void eh2o_h1_send_deadline(eh2o_conn *c)
{
    h2o_timeout_unlink(&c->h1.send);
    c->h1.send.cb = eh2o_h1_send_expired;
    h2o_timeout_link(c->thread->loop, &c->thread->send_timeout, &c->h1.send);
}

/* respond slot for a request the guard answered (eh2o_complete, on the loop). */
static void eh2o_h1_write_answer(eh2o_conn *c, srv_request *sreq)
{
    size_t hl, bl;
    const char *head = srv__response_http1_head(sreq, &hl);
    const void *body = srv__response_body(sreq, &bl);
    h2o_socket_t *sock = c->sock;
    c->h1.phase = EH2O_H1_DEAD;
    c->h1.out = head != NULL ? malloc(hl + bl) : NULL;
    if (c->h1.out == NULL || sock->_cb.write != NULL) {
        /* No memory, or h2o is writing (cannot happen while it reads): just close. */
        free(c->h1.out);
        c->h1.out = NULL;
        shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
        return;
    }
    memcpy(c->h1.out, head, hl);
    if (bl != 0)
        memcpy(c->h1.out + hl, body, bl);
    h2o_iovec_t buf = h2o_iovec_init(c->h1.out, hl + bl);
    h2o_socket_read_stop(sock);
    h2o_socket_write(sock, &buf, 1, eh2o_h1_on_answer_written);
    eh2o_h1_send_deadline(c);
}

/* Answer `status` through the core now (the connection then closes). Takes sreq. */
static void eh2o_h1_answer(eh2o_conn *c, srv_request *sreq, int status)
{
    eh2o_thread *t = c->thread;
    c->h1.phase = EH2O_H1_DEAD;
    c->h1.answering = 1;
    if (sreq == NULL) {
        struct sockaddr_storage peer;
        socklen_t len = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
        sreq = srv__request_new(t->server->srv, len != 0 ? (struct sockaddr *)&peer : NULL, len);
    }
    eh2o_ticket *tk = sreq != NULL ? calloc(1, sizeof *tk) : NULL;
    if (tk == NULL) {
        if (sreq != NULL)
            srv__request_release(sreq);
        shutdown(h2o_socket_get_fd(c->sock), SHUT_RDWR);
        return;
    }
    tk->thread = t;
    tk->sreq = sreq;
    tk->raw = c;
    tk->refs = 1; /* no h2o_req_t, no guard */
    t->live++;
    srv__request_set_engine_data(sreq, tk);
    srv__request_fail(sreq, status); /* respond -> eh2o_complete -> eh2o_h1_write_answer */
}

/* After any h2o call on an HTTP/1 connection that is still open: our callbacks back in. */
static void eh2o_h1_after(eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    if (c->h1.off || c->h1.answering)
        return;
    if (sock->_cb.read != NULL && sock->_cb.read != eh2o_h1_on_read &&
        sock->_cb.read != c->h1.reqread) {
        c->h1.off = 1; /* h2c upgrade done: HTTP/2 now */
        return;
    }
    if (sock->_cb.read == c->h1.reqread)
        sock->_cb.read = eh2o_h1_on_read;
    if (sock->_cb.write != NULL && sock->_cb.write != eh2o_h1_on_written &&
        sock->_cb.write != eh2o_h1_on_answer_written) {
        c->h1.wrote = sock->_cb.write;
        sock->_cb.write = eh2o_h1_on_written;
        eh2o_h1_send_deadline(c);
    }
    /* A bad request queued behind good ones: its turn once h2o waits for the next head. */
    if (c->h1.bad != 0 && sock->_cb.read == eh2o_h1_on_read && sock->_cb.write == NULL &&
        sock->input->size == 0) {
        int status = c->h1.bad;
        srv_request *sreq = c->h1.bad_req;
        c->h1.bad = 0;
        c->h1.bad_req = NULL;
        eh2o_h1_answer(c, sreq, status);
    }
}

/* Run an h2o callback; returns 0 when the connection closed meanwhile (c is freed). */
static int eh2o_h1_call(eh2o_conn *c, h2o_socket_cb cb, h2o_socket_t *sock, const char *err)
{
    int closed = 0, *outer = c->h1.closed;
    c->h1.closed = &closed;
    cb(sock, err);
    if (closed) {
        if (outer != NULL)
            *outer = 1;
        return 0;
    }
    c->h1.closed = outer;
    return 1;
}

static void eh2o_h1_on_written(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    h2o_socket_cb cb = c->h1.wrote;
    c->h1.wrote = NULL;
    h2o_timeout_unlink(&c->h1.send);
    if (eh2o_h1_call(c, cb, sock, err))
        eh2o_h1_after(c);
}

static int eh2o_hexval(int ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* A version in a request line picohttpparser refused ("HTTP/9.9", "HTTP/2.0"): 505. */
static int eh2o_h1_bad_version(const char *p, size_t n)
{
    while (n > 0 && (*p == '\r' || *p == '\n')) {
        p++;
        n--;
    }
    const char *eol = memchr(p, '\n', n);
    if (eol == NULL)
        return 0;
    size_t len = (size_t)(eol - p);
    if (len > 0 && p[len - 1] == '\r')
        len--;
    if (len > 9 && (memcmp(p + len - 8, "HTTP/1.0", 8) == 0 || memcmp(p + len - 8, "HTTP/1.1", 8) == 0))
        return 0; /* refused for another reason */
    return len > 9 && p[len - 9] == ' ' && memcmp(p + len - 8, "HTTP/", 5) == 0 &&
           p[len - 3] >= '0' && p[len - 3] <= '9' && p[len - 2] == '.' &&
           p[len - 1] >= '0' && p[len - 1] <= '9' && memchr(p, ' ', len - 9) != NULL;
}

/*
 * A complete head (c->h1.head[0..len)): the core's rules, then its body framing. Returns 0 or
 * the status to answer (*sreq_out is then the request to answer with, or NULL).
 */
static int eh2o_h1_head_done(eh2o_conn *c, size_t len, size_t buf_at, srv_request **sreq_out)
{
    eh2o_thread *t = c->thread;
    eh2o_head parsed, *h = &parsed;
    h->nheaders = EH2O_MAX_HEADERS;
    *sreq_out = NULL;
    if (phr_parse_request(c->h1.head, len, &h->method, &h->method_len, &h->target,
                          &h->target_len, &h->minor, h->headers, &h->nheaders, 0) != (int)len)
        return eh2o_h1_bad_version(c->h1.head, len) ? 505 : 400;
    struct sockaddr_storage peer;
    socklen_t plen = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
    srv_request *sreq =
        srv__request_new(t->server->srv, plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    if (sreq == NULL)
        return 500;
    *sreq_out = sreq;
    c->h1.seq++;
    int st = eh2o_fill_raw(sreq, h);
    if (st == 0)
        st = srv__request_headers_done(sreq);
    if (st != 0)
        return st > 0 ? st : 500;
    c->h1.phase = EH2O_H1_HEAD;
    for (size_t i = 0; i < h->nheaders; i++) {
        const struct eh2o_phr_header *x = &h->headers[i];
        if (h2o_lcstris(x->name, x->name_len, H2O_STRLIT("transfer-encoding"))) {
            c->h1.phase = EH2O_H1_CHUNK_SIZE; /* the core allows "chunked" only */
            c->h1.left = 0;
            c->h1.body = 0;
            c->h1.digits = 0;
        } else if (h2o_lcstris(x->name, x->name_len, H2O_STRLIT("content-length"))) {
            uint64_t v = 0;
            for (size_t k = 0; k < x->value_len; k++)
                if (x->value[k] >= '0' && x->value[k] <= '9')
                    v = v * 10 + (uint64_t)(x->value[k] - '0'); /* checked by the core */
            c->h1.left = v;
            if (v != 0 && c->h1.phase == EH2O_H1_HEAD)
                c->h1.phase = EH2O_H1_BODY;
        } else if (h->minor == 0 && h2o_lcstris(x->name, x->name_len, H2O_STRLIT("upgrade"))) {
            /* RFC 9110 7.8: no Upgrade on HTTP/1.0. h2o would answer 101: hide the header
             * from it by changing one byte in its input; on_req puts it back before the core
             * reads the head again. */
            size_t off = (size_t)(x->name - c->h1.head);
            char *raw = c->sock->input->bytes + buf_at;
            if (buf_at + len <= c->sock->input->size && memcmp(raw, c->h1.head, len) == 0) {
                c->h1.mask_at = off;
                c->h1.mask_seq = c->h1.seq + 1;
                c->h1.mask_ch = raw[off];
                raw[off] = '~'; /* a tchar: still a valid header, not a token h2o knows */
            }
        }
    }
    if (c->h1.phase == EH2O_H1_HEAD) {
        srv__request_release(sreq); /* complete: h2o builds its own and on_req ours */
        *sreq_out = NULL;
    } else {
        c->h1.req = sreq;
        *sreq_out = NULL;
    }
    return 0;
}

/* The request being scanned is complete. */
static void eh2o_h1_request_done(eh2o_conn *c)
{
    if (c->h1.req != NULL) {
        srv__request_release(c->h1.req);
        c->h1.req = NULL;
    }
    c->h1.phase = EH2O_H1_HEAD;
    c->h1.head_len = 0;
    c->h1.completed++;
}

/*
 * Scan the n new bytes at the end of the input. Returns 0, or the status of the first violation
 * with *bad_at = its request's first byte among the new ones (SIZE_MAX when it began earlier)
 * and *sreq_out its request (or NULL).
 */
static int eh2o_h1_scan(eh2o_conn *c, const char *p, size_t n, size_t *bad_at,
                        srv_request **sreq_out)
{
    const srv_config *cfg = c->thread->server->cfg;
    size_t head_max = cfg->max_header_bytes + 4; /* CRLFs the core does not count */
    size_t i = 0, req_at = c->h1.phase == EH2O_H1_HEAD && c->h1.head_len == 0 ? 0 : SIZE_MAX;
    *sreq_out = NULL;
#define EH2O_BAD(st)                                                                           \
    do {                                                                                       \
        *bad_at = req_at;                                                                      \
        *sreq_out = c->h1.req;                                                                 \
        c->h1.req = NULL;                                                                      \
        return (st);                                                                           \
    } while (0)
    while (i < n) {
        int ch = (unsigned char)p[i];
        switch (c->h1.phase) {
        case EH2O_H1_HEAD: {
            if (c->h1.head_len == 0)
                req_at = i;
            if (c->h1.head == NULL && (c->h1.head = malloc(head_max)) == NULL)
                EH2O_BAD(500);
            size_t old = c->h1.head_len, take = n - i;
            if (take > head_max - old)
                take = head_max - old;
            memcpy(c->h1.head + old, p + i, take);
            c->h1.head_len += take;
            size_t cut = c->h1.head_len;
            /* The head ends at the first empty line (picohttpparser skips leading CRLFs). */
            size_t s = 0;
            while (s < cut && (c->h1.head[s] == '\r' || c->h1.head[s] == '\n'))
                s++;
            size_t end = 0;
            for (size_t k = s > 0 ? s : 1; k < cut && end == 0; k++)
                if (c->h1.head[k] == '\n' &&
                    (c->h1.head[k - 1] == '\n' ||
                     (k >= 2 && c->h1.head[k - 1] == '\r' && c->h1.head[k - 2] == '\n')))
                    end = k + 1;
            if (cut >= 14 && memcmp(c->h1.head + s, "PRI * HTTP/2.0", 14) == 0) {
                c->h1.phase = EH2O_H1_DEAD; /* prior knowledge: h2o switches to HTTP/2 */
                c->h1.off = 1;
                return 0;
            }
            if (end == 0) {
                if (cut >= head_max) {
                    c->h1.head_len = 0;
                    EH2O_BAD(431);
                }
                i += take;
                break;
            }
            i += end - old; /* the bytes after the head are the body or the next request */
            c->h1.head_len = end;
            size_t buf_at = c->sock->input->size - n + i - end;
            srv_request *sreq;
            int st = eh2o_h1_head_done(c, end, buf_at, &sreq);
            if (st != 0) {
                c->h1.req = sreq;
                EH2O_BAD(st);
            }
            if (c->h1.phase == EH2O_H1_HEAD)
                eh2o_h1_request_done(c);
            else
                c->h1.head_len = 0;
            break;
        }
        case EH2O_H1_BODY: {
            size_t take = n - i < c->h1.left ? n - i : (size_t)c->h1.left;
            c->h1.left -= take;
            i += take;
            if (c->h1.left == 0)
                eh2o_h1_request_done(c);
            break;
        }
        case EH2O_H1_CHUNK_SIZE:
            if (eh2o_hexval(ch) >= 0) {
                if (++c->h1.digits > 15)
                    EH2O_BAD(400);
                c->h1.left = c->h1.left * 16 + (uint64_t)eh2o_hexval(ch);
            } else if (c->h1.digits > 0 && ch == '\r') {
                c->h1.phase = EH2O_H1_CHUNK_SIZE_LF;
            } else if (c->h1.digits > 0 && (ch == ';' || ch == ' ' || ch == '\t')) {
                c->h1.phase = EH2O_H1_CHUNK_EXT;
                c->h1.line = 0;
            } else {
                EH2O_BAD(400); /* "0x2", a bare LF, no digits */
            }
            i++;
            break;
        case EH2O_H1_CHUNK_EXT:
            if (ch == '\r')
                c->h1.phase = EH2O_H1_CHUNK_SIZE_LF;
            else if ((ch < 0x20 && ch != '\t') || ch == 0x7f || ++c->h1.line > head_max)
                EH2O_BAD(400); /* a bare LF or control byte in an extension */
            i++;
            break;
        case EH2O_H1_CHUNK_SIZE_LF:
            if (ch != '\n')
                EH2O_BAD(400);
            c->h1.phase = c->h1.left == 0 ? EH2O_H1_TRAILER : EH2O_H1_CHUNK_DATA;
            c->h1.line = 0;
            i++;
            break;
        case EH2O_H1_CHUNK_DATA: {
            size_t take = n - i < c->h1.left ? n - i : (size_t)c->h1.left;
            c->h1.left -= take;
            if ((c->h1.body += take) > cfg->max_body_bytes)
                EH2O_BAD(413); /* before h2o's own 413, which is not the core's */
            i += take;
            if (c->h1.left == 0)
                c->h1.phase = EH2O_H1_CHUNK_DATA_CR;
            break;
        }
        case EH2O_H1_CHUNK_DATA_CR:
            if (ch != '\r')
                EH2O_BAD(400); /* data longer than its size */
            c->h1.phase = EH2O_H1_CHUNK_DATA_LF;
            i++;
            break;
        case EH2O_H1_CHUNK_DATA_LF:
            if (ch != '\n')
                EH2O_BAD(400);
            c->h1.phase = EH2O_H1_CHUNK_SIZE;
            c->h1.digits = 0;
            i++;
            break;
        case EH2O_H1_TRAILER:
            c->h1.phase = ch == '\r' ? EH2O_H1_TRAILER_END_LF : EH2O_H1_TRAILER_LINE;
            if (ch == '\n' || ch == 0)
                EH2O_BAD(400);
            i++;
            break;
        case EH2O_H1_TRAILER_LINE:
            if (ch == '\r')
                c->h1.phase = EH2O_H1_TRAILER_LINE_LF;
            else if (ch == '\n' || ch == 0)
                EH2O_BAD(400);
            if (++c->h1.line > head_max)
                EH2O_BAD(431);
            i++;
            break;
        case EH2O_H1_TRAILER_LINE_LF:
            if (ch != '\n')
                EH2O_BAD(400);
            c->h1.phase = EH2O_H1_TRAILER;
            i++;
            break;
        case EH2O_H1_TRAILER_END_LF:
            if (ch != '\n')
                EH2O_BAD(400);
            i++;
            eh2o_h1_request_done(c);
            break;
        default: /* EH2O_H1_DEAD */
            return 0;
        }
        if (c->h1.phase == EH2O_H1_HEAD && c->h1.head_len == 0)
            req_at = i;
    }
#undef EH2O_BAD
    return 0;
}

static void eh2o_h1_on_read(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (err == NULL && c->h1.bad != 0) { /* h2o waits for a head: the bad one's turn */
        int status = c->h1.bad;
        srv_request *sreq = c->h1.bad_req;
        c->h1.bad = 0;
        c->h1.bad_req = NULL;
        eh2o_h1_answer(c, sreq, status);
        return;
    }
    if (err == NULL && c->h1.phase != EH2O_H1_DEAD && sock->bytes_read != 0 &&
        sock->bytes_read <= sock->input->size) {
        size_t n = sock->bytes_read, bad_at;
        srv_request *sreq;
        c->h1.completed = 0;
        int st = eh2o_h1_scan(c, sock->input->bytes + sock->input->size - n, n, &bad_at, &sreq);
        if (st != 0 && c->h1.completed > 0 && bad_at != SIZE_MAX) {
            /* Good requests came first in this read: h2o serves them, the bad one waits. */
            sock->input->size -= n - bad_at;
            c->h1.bad = st;
            c->h1.bad_req = sreq;
            c->h1.phase = EH2O_H1_DEAD;
        } else if (st != 0) {
            eh2o_h1_answer(c, sreq, st);
            return;
        }
    }
    if (eh2o_h1_call(c, c->h1.reqread, sock, err))
        eh2o_h1_after(c);
}

/* ------------------------------------------------------------------ */
/* Connections: accept, max_connections, refusal, tracking             */
/* ------------------------------------------------------------------ */

static void eh2o_on_conn_close(void *data)
{
    eh2o_conn *c = data;
    eh2o_thread *t = c->thread;
    h2o_timeout_unlink(&c->calm);
    h2o_timeout_unlink(&c->h1.linger);
    h2o_timeout_unlink(&c->h1.send);
    if (c->h1.closed != NULL)
        *c->h1.closed = 1;
    free(c->h1.head);
    free(c->h1.out);
    if (c->h1.req != NULL)
        srv__request_release(c->h1.req);
    if (c->h1.bad_req != NULL)
        srv__request_release(c->h1.bad_req);
    h2o_linklist_unlink(&c->link);
    t->nconns--;
    atomic_fetch_sub(&t->server->conns, 1);
    srv__stats_connection_closed(t->server->srv);
    free(c);
}

static void eh2o_refusal_close(eh2o_refusal *r)
{
    h2o_timeout_unlink(&r->timeout);
    h2o_linklist_unlink(&r->link);
    h2o_socket_close(r->sock);
    free(r->out);
    free(r);
}

static void eh2o_refusal_on_timeout(h2o_timeout_entry_t *entry);

static void eh2o_refusal_on_drain(h2o_socket_t *sock, const char *err)
{
    if (err != NULL) {
        eh2o_refusal_close(sock->data);
        return;
    }
    h2o_buffer_consume(&sock->input, sock->input->size); /* discard whatever the client sends */
}

static void eh2o_refusal_on_written(h2o_socket_t *sock, const char *err)
{
    eh2o_refusal *r = sock->data;
    if (err != NULL) {
        eh2o_refusal_close(r);
        return;
    }
    /* Half-close and drain: closing with unread input would reset the connection and the
     * client could lose the answer it has not read yet. */
    shutdown(h2o_socket_get_fd(sock), SHUT_WR);
    h2o_buffer_consume(&sock->input, sock->input->size);
    h2o_socket_read_start(sock, eh2o_refusal_on_drain);
    r->answered = 1;
    h2o_timeout_unlink(&r->timeout);
    h2o_timeout_link(r->thread->loop, &r->thread->refuse_timeout, &r->timeout);
}

static void eh2o_refusal_send(eh2o_refusal *r, const void *data, size_t len)
{
    h2o_iovec_t buf = h2o_iovec_init(data, len);
    h2o_socket_read_stop(r->sock);
    h2o_socket_write(r->sock, &buf, 1, eh2o_refusal_on_written);
}

/* respond slot for a refusal's 503 (eh2o_complete, on the loop): the core's HTTP/1 answer. */
static void eh2o_refusal_write_answer(eh2o_refusal *r, srv_request *sreq)
{
    size_t hl, bl;
    const char *head = srv__response_http1_head(sreq, &hl);
    const void *body = srv__response_body(sreq, &bl);
    r->out = head != NULL ? malloc(hl + bl) : NULL;
    if (r->out == NULL) {
        r->answered = 1; /* the timeout closes it */
        return;
    }
    memcpy(r->out, head, hl);
    if (bl != 0)
        memcpy(r->out + hl, body, bl);
    eh2o_refusal_send(r, r->out, hl + bl);
}

/* The core answers the refused request 503 (its headers, its access-log line). */
static void eh2o_refusal_answer(eh2o_refusal *r)
{
    eh2o_thread *t = r->thread;
    h2o_socket_t *sock = r->sock;
    struct sockaddr_storage peer;
    socklen_t plen = h2o_socket_getpeername(sock, (struct sockaddr *)&peer);
    srv_request *sreq =
        srv__request_new(t->server->srv, plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    eh2o_ticket *tk = sreq != NULL ? calloc(1, sizeof *tk) : NULL;
    if (tk == NULL) {
        if (sreq != NULL)
            srv__request_release(sreq);
        r->answered = 1;
        return;
    }
    /* The request line, when it parses, names the refused request in the access log. */
    const char *method, *target;
    size_t mlen, tlen, nh = EH2O_MAX_HEADERS;
    int minor;
    struct eh2o_phr_header hs[EH2O_MAX_HEADERS];
    if (phr_parse_request(sock->input->bytes, sock->input->size, &method, &mlen, &target, &tlen,
                          &minor, hs, &nh, 0) > 0) {
        srv__request_set_method(sreq, method, mlen);
        srv__request_set_target(sreq, target, tlen);
        srv__request_set_version(sreq, 1, minor);
    }
    tk->thread = t;
    tk->sreq = sreq;
    tk->refusal = r;
    tk->refs = 1;
    t->live++;
    srv__request_set_engine_data(sreq, tk);
    srv__request_fail(sreq, 503); /* respond -> eh2o_complete -> eh2o_refusal_write_answer */
}

/* A refused connection's bytes: wait for a whole head (bounded), then answer it. */
static void eh2o_refusal_on_read(h2o_socket_t *sock, const char *err)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    eh2o_refusal *r = sock->data;
    if (err != NULL) {
        eh2o_refusal_close(r);
        return;
    }
    size_t n = sock->input->size, pl = sizeof preface - 1;
    const char *p = sock->input->bytes;
    if (memcmp(p, preface, n < pl ? n : pl) == 0) {
        if (n < pl)
            return;
        /* HTTP/2 prior knowledge: the server preface (empty SETTINGS), then GOAWAY with no
         * stream processed (last-stream-id 0), so the client may retry elsewhere or later. */
        static const char goaway[] = "\0\0\0\4\0\0\0\0\0"                 /* SETTINGS */
                                     "\0\0\x1c\7\0\0\0\0\0"               /* GOAWAY */
                                     "\0\0\0\0\0\0\0\0too many connections"; /* NO_ERROR */
        eh2o_refusal_send(r, goaway, sizeof goaway - 1);
        return;
    }
    const char *method, *target;
    size_t mlen, tlen, nh = EH2O_MAX_HEADERS;
    int minor;
    struct eh2o_phr_header hs[EH2O_MAX_HEADERS];
    int ret = phr_parse_request(p, n, &method, &mlen, &target, &tlen, &minor, hs, &nh, 0);
    if (ret == -2 && n <= r->thread->server->cfg->max_header_bytes + 4)
        return; /* more to come, until the deadline */
    eh2o_refusal_answer(r);
}

/* The deadline: a partial head is answered anyway, a silent client closed (an answer to no
 * request is what confused HTTP/1 clients); after the answer, the end of the drain. */
static void eh2o_refusal_on_timeout(h2o_timeout_entry_t *entry)
{
    eh2o_refusal *r = H2O_STRUCT_FROM_MEMBER(eh2o_refusal, timeout, entry);
    if (r->answered || r->sock->input->size == 0 || r->out != NULL) {
        eh2o_refusal_close(r);
        return;
    }
    h2o_timeout_link(r->thread->loop, &r->thread->refuse_timeout, &r->timeout);
    eh2o_refusal_answer(r);
}

/* Past max_connections: read the head (at most EH2O_REFUSE_LINGER_MS), answer 503, close. */
static void eh2o_refuse(eh2o_thread *t, h2o_socket_t *sock)
{
    eh2o_refusal *r = calloc(1, sizeof *r);
    if (r == NULL) {
        h2o_socket_close(sock);
        return;
    }
    r->sock = sock;
    r->thread = t;
    sock->data = r;
    h2o_linklist_insert(&t->refusals, &r->link);
    r->timeout.cb = eh2o_refusal_on_timeout;
    h2o_timeout_link(t->loop, &t->refuse_timeout, &r->timeout);
    h2o_socket_read_start(sock, eh2o_refusal_on_read);
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
        if (atomic_fetch_add(&s->conns, 1) >= s->cfg->max_connections) {
            atomic_fetch_sub(&s->conns, 1);
            eh2o_refuse(t, sock);
            continue;
        }
        eh2o_conn *c = calloc(1, sizeof *c); /* zeroed: h2o_linklist_insert asserts unlinked */
        if (c == NULL) {
            atomic_fetch_sub(&s->conns, 1);
            h2o_socket_close(sock);
            continue;
        }
        c->sock = sock;
        c->thread = t;
        c->calm.cb = eh2o_on_calm;
        h2o_linklist_insert(&t->conns, &c->link);
        t->nconns++;
        sock->on_close.cb = eh2o_on_conn_close; /* survives h2c / prior-knowledge upgrades */
        sock->on_close.data = c;
        srv__stats_connection_opened(s->srv);
        h2o_accept(&t->accept_ctx, sock);
        if (sock->_cb.read != NULL) { /* HTTP/1 reading: the framing guard reads first */
            c->h1.reqread = sock->_cb.read;
            sock->_cb.read = eh2o_h1_on_read;
        }
    }
}

/* ------------------------------------------------------------------ */
/* I/O threads                                                         */
/* ------------------------------------------------------------------ */

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
    /* GOAWAY on HTTP/2; HTTP/1 requests parsed from now on are not persistent. */
    h2o_context_request_shutdown(&t->ctx);
    /* Idle connections are only in these timeouts' lists; with 0 they expire on this very
     * iteration (the lists read .timeout on every run; ENGINE-NOTES 1.8 step 4). */
    t->ctx.http1.req_timeout.timeout = 0;
    t->ctx.http2.idle_timeout.timeout = 0;
}

/* Connections still open after the responses went out: make their next I/O fail so h2o
 * closes them through its own paths (there is no public force-close). */
static void eh2o_thread_force_close(eh2o_thread *t)
{
    for (h2o_linklist_t *n = t->conns.next; n != &t->conns; n = n->next) {
        eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n);
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
        if (!atomic_load(&s->stop_req))
            continue;
        uint64_t now = h2o_now(t->loop);
        if (stop_at == 0)
            stop_at = now;
        if (t->nconns == 0 && t->live == 0)
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
    while (!h2o_linklist_is_empty(&t->refusals))
        eh2o_refusal_close(H2O_STRUCT_FROM_MEMBER(eh2o_refusal, link, t->refusals.next));
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
    /* Order matters (ENGINE-NOTES 1.8 step 6): request_shutdown linked this entry and
     * h2o_timeout_dispose asserts on non-empty lists. */
    h2o_timeout_unlink(&t->ctx.http2._graceful_shutdown_timeout);
    h2o_multithread_unregister_receiver(t->ctx.queue, &t->receiver);
    h2o_timeout_dispose(t->loop, &t->refuse_timeout);
    h2o_timeout_dispose(t->loop, &t->accept_pause);
    h2o_timeout_unlink(&t->dispatch_entry);
    h2o_timeout_dispose(t->loop, &t->zero);
    h2o_timeout_unlink(&t->sweep_entry);
    h2o_timeout_dispose(t->loop, &t->sweep);
    h2o_timeout_dispose(t->loop, &t->send_timeout);
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
    t->loop = h2o_evloop_create();
    h2o_context_init(&t->ctx, t->loop, &s->globalconf);
    h2o_multithread_register_receiver(t->ctx.queue, &t->receiver, eh2o_on_messages);
    h2o_timeout_init(t->loop, &t->refuse_timeout, EH2O_REFUSE_LINGER_MS);
    h2o_timeout_init(t->loop, &t->accept_pause, EH2O_ACCEPT_PAUSE_MS);
    t->accept_resume.cb = eh2o_on_accept_resume;
    h2o_timeout_init(t->loop, &t->zero, 0);
    t->dispatch_entry.cb = eh2o_on_dispatch;
    uint64_t tick = s->cfg->header_timeout_ms / 4;
    h2o_timeout_init(t->loop, &t->sweep, tick < 50 ? 50 : tick > 1000 ? 1000 : tick);
    t->sweep_entry.cb = eh2o_on_sweep;
    h2o_timeout_init(t->loop, &t->send_timeout, s->cfg->header_timeout_ms);
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
    atomic_init(&s->conns, 0);
    atomic_init(&s->quiesce_req, 0);
    atomic_init(&s->stop_req, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);

    h2o_config_init(&s->globalconf);
    s->globalconf.server_name = h2o_iovec_init("", 0); /* the core sends its own Server */
    /* h2o has one HTTP/1 timer from the end of a response (or the connect) to the end of the
     * next head: it is both the keep-alive and the header timeout. Use the stricter one. */
    s->globalconf.http1.req_timeout = cfg->header_timeout_ms < cfg->keepalive_timeout_ms
                                          ? cfg->header_timeout_ms
                                          : cfg->keepalive_timeout_ms;
    s->globalconf.http2.idle_timeout = cfg->keepalive_timeout_ms;
    s->globalconf.http1.upgrade_to_http2 = 1;
    /* h2o buffers whole bodies (1 GiB by default) before on_req. HTTP/1 gets the core's 413
     * from the framing guard first (h2o refuses a body of exactly its limit, the core allows
     * it: hence + 1); HTTP/2 gets RST_STREAM (REFUSED_STREAM) from h2o past it, documented in
     * docs/ENGINES.md. */
    s->globalconf.max_request_entity_size = cfg->max_body_bytes + 1;
    h2o_hostconf_t *host =
        h2o_config_register_host(&s->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    /* Every request reaches the core: "/..." through the path, "*" and the rest through
     * the fallback, where h2o's own early errors pass too (hence the filter). */
    h2o_pathconf_t *paths[] = {h2o_config_register_path(host, "/", 0), &host->fallback_path};
    for (size_t i = 0; i < 2; i++) {
        eh2o_handler *handler = (eh2o_handler *)h2o_create_handler(paths[i], sizeof *handler);
        handler->super.on_req = eh2o_on_req;
        handler->server = s;
    }
    h2o_create_filter(&host->fallback_path, sizeof(h2o_filter_t))->on_setup_ostream =
        eh2o_on_setup_ostream;

    int rc = srv__listen(srv, SRV__LISTEN_NONBLOCK);
    if (rc < 0) {
        eh2o_free(s);
        return rc;
    }
    s->listen_fd = rc;

    s->threads = calloc(s->nthreads, sizeof *s->threads);
    if (s->threads == NULL) {
        srv__server_set_error(srv, "h2o engine: out of memory");
        eh2o_free(s);
        return SRV_ENOMEM;
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
        h2o_linklist_init_anchor(&t->refusals);
        h2o_linklist_init_anchor(&t->to_dispatch);
        t->listen_fd = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
        for (int j = 0; j < EH2O_LOOP_FDS && t->listen_fd >= 0; j++) {
            t->spare[j] = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
            if (t->spare[j] < 0)
                break;
        }
        if (t->listen_fd < 0 || t->spare[EH2O_LOOP_FDS - 1] < 0) {
            srv__server_set_error(srv, "h2o engine: %u I/O threads need %u descriptors: %s",
                                  s->nthreads, s->nthreads * (1 + EH2O_LOOP_FDS),
                                  strerror(errno));
            eh2o_free(s);
            return SRV_ESYS;
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
        eh2o_stop_threads(s, started);
        eh2o_free(s);
        *state = NULL;
        return SRV_ETHREAD;
    }
    return 0;
}

static void eh2o_quiesce(void *state)
{
    eh2o_server *s = state;
    /* Refuse new connects now, on every loop's dup at once (accept then fails with EINVAL);
     * each loop closes its own dup when it wakes up. */
    atomic_store(&s->quiesce_req, 1); /* first: a loop woken by the shutdown sees it */
    shutdown(s->listen_fd, SHUT_RDWR);
    for (unsigned i = 0; i < s->nthreads; i++)
        eh2o_wake(&s->threads[i]);
}

static void eh2o_stop(void *state)
{
    eh2o_server *s = state;
    shutdown(s->listen_fd, SHUT_RDWR);
    eh2o_stop_threads(s, s->nthreads);
}

static void eh2o_destroy(void *state)
{
    eh2o_free(state);
}

const srv_engine srv_engine_h2o = {
    .version = SRV_ENGINE_VERSION,
    .name = "h2o",
    /* The HTTP/1 guard answers an unknown version with 505 before h2o's parser (which would
     * say 400), and garbage request lines with 400. */
    .caps = SRV_ENGINE_CAP_HTTP2 | SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_GARBAGE_400,
    .start = eh2o_start,
    .respond = eh2o_respond,
    .quiesce = eh2o_quiesce,
    .stop = eh2o_stop,
    .destroy = eh2o_destroy,
};
