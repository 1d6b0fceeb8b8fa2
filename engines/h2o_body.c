/*
 * The h2o engine's streamed request bodies (SRV_ROUTE_STREAM_BODY) over HTTP/1, on the loop
 * threads. libh2o 2.2.5 buffers a body whole before it calls a handler and has no way to
 * read it piece by piece, so h2o never sees such a body: the framing guard (h2o_h1guard.c)
 * finds the streamed route at the head, shows h2o the head as a bodiless request
 * ("Content-Length: 0" written over the framing header, Expect and Upgrade hidden), and
 * hands every byte after the head to the object here. The core's HTTP/1 parser in body mode
 * de-chunks it; the pieces go to srv__body_data while srv__body_state says GO, and the
 * socket is read only then (TCP back-pressure when the application pauses). h2o takes the
 * connection back when the answer is written: after a complete body the bytes that followed
 * it (pipelined requests) go through the guard then; a body cut short by its answer closes
 * the connection after it, lingering so the client reads the answer.
 */
#include "h2o_internal.h"
#include "srv_http1.h"


struct eh2o_body {
    h2o_multithread_message_t msg; /* the kick, at most one queued (kick_queued) */
    atomic_int kick_queued;
    atomic_int refs; /* the connection's (until released), the ticket's, a kick in flight */
    eh2o_thread *thread;
    eh2o_conn *conn;   /* NULL once released */
    srv_request *sreq; /* ours until dispatched, then the ticket's */
    eh2o_ticket *tk;
    unsigned seq;      /* the head's number among the connection's (c->h1.seq) */
    int dispatched;    /* on_req gave it to the core */
    int released;      /* answered or the connection closed: the engine is done with it */
    srv_http1 parser;  /* body mode */
    char *pend;        /* body bytes read while the application did not want them */
    size_t pend_off, pend_len, pend_cap;
    int eom;           /* the body's end was parsed */
    int ended;         /* srv__body_end called */
    int stopped;       /* an error, the deadline, or the application stopped reading */
    int cont;          /* 100 Continue decided */
    int cont_writing;  /* its write is in flight */
    eh2o_ticket *answer; /* the answer came while the 100 was being written */
    uint64_t win;      /* bytes in the current pace window */
    h2o_timeout_entry_t pace;
    /* HTTP/2 (eh2o_h2_expect takes the stream's DATA frames before h2o parses them): */
    int h2;
    uint32_t stream_id;
    eh2o_body *next;    /* c->h2_bodies, while the walk takes its DATA (listed) */
    int listed;
    int h2o_ready;      /* the END_STREAM reached h2o: it called on_req, it can answer */
    int counted;        /* one of h2o's num_streams.pull.half_closed (eh2o_body_begin_h2) */
    uint64_t expected;  /* content-length, or UINT64_MAX */
    uint64_t received;
    int core;           /* the core has the request (eh2o_on_dispatch) */
    int64_t window;     /* the stream's flow-control window, as the client must see it */
    int flow_error;     /* the client sent past it: the stream is reset (FLOW_CONTROL_ERROR) */
    int fail;           /* a framing error the walk found: on_end and the core's answer, after it */
    size_t ungranted;   /* bytes taken by the application, not yet given back to the stream's
                         * flow-control window */
};

void eh2o_body_unref(eh2o_body *b)
{
    if (atomic_fetch_sub(&b->refs, 1) == 1) { /* on the loop (a kick's reference too) */
        h2o_timeout_unlink(&b->pace);
        srv__http1_free(&b->parser);
        free(b->pend);
        free(b);
    }
}

static void eh2o_body_on_pace(h2o_timeout_entry_t *entry);
static int eh2o_body_h2_answered(eh2o_ticket *tk);
static void eh2o_body_uncount(eh2o_body *b);

/* HTTP/2: out of the connection's list; the walk passes its frames to h2o from now on. */
static void eh2o_body_unlist(eh2o_body *b)
{
    if (!b->listed)
        return;
    eh2o_body_uncount(b); /* its stream leaves RECV_BODY, or h2o counts it itself now */
    b->listed = 0;
    h2o_timeout_unlink(&b->pace);
    eh2o_h2_hold_later(b->conn); /* its bytes are gone */
    for (eh2o_body **p = &b->conn->h2_bodies; *p != NULL; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    b->conn = NULL;
    eh2o_body_unref(b); /* the list's */
}

int eh2o_body_begin(eh2o_conn *c, srv_request *sreq, int chunked, uint64_t length)
{
    eh2o_body *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -1;
    atomic_init(&b->refs, 1);
    b->thread = c->thread;
    b->conn = c;
    b->sreq = sreq;
    b->seq = c->h1.seq;
    b->pace.cb = eh2o_body_on_pace;
    srv__http1_init(&b->parser, c->thread->server->srv);
    srv__http1_body_begin(&b->parser, chunked, length);
    c->h1.sb = b;
    if (chunked || length > EH2O_BODY_RCVBUF) {
        /* The guard's fixed 128 KB receive buffer (eh2o_h1_bound_input) bounds what a
         * pipelining client makes h2o hold; a streamed body is read only as fast as the
         * application takes it, so a larger window costs nothing and speeds uploads. */
        int size = EH2O_BODY_RCVBUF;
        setsockopt(h2o_socket_get_fd(c->sock), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    return 0;
}

int eh2o_body_hold(eh2o_body *b, const char *p, size_t n)
{
    if (b->pend_off != 0) { /* keep only what is still due */
        memmove(b->pend, b->pend + b->pend_off, b->pend_len - b->pend_off);
        b->pend_len -= b->pend_off;
        b->pend_off = 0;
    }
    if (b->pend_len + n > b->pend_cap) { /* doubling: a paused HTTP/2 stream may fill MiBs */
        size_t cap = b->pend_cap * 2 > b->pend_len + n ? b->pend_cap * 2 : b->pend_len + n;
        char *nb = realloc(b->pend, cap);
        if (nb == NULL)
            return -1;
        b->pend = nb;
        b->pend_cap = cap;
    }
    if (n != 0)
        memcpy(b->pend + b->pend_len, p, n);
    b->pend_len += n;
    return 0;
}

static void eh2o_body_pend_drop(eh2o_body *b)
{
    free(b->pend);
    b->pend = NULL;
    b->pend_off = b->pend_len = b->pend_cap = 0;
}

eh2o_body *eh2o_body_take(eh2o_conn *c)
{
    eh2o_body *b = c->h1.sb;
    return b != NULL && !b->dispatched && b->seq == c->h1.served ? b : NULL;
}

srv_request *eh2o_body_request(eh2o_body *b)
{
    return b->sreq;
}

void eh2o_body_dispatched(eh2o_body *b, eh2o_ticket *tk)
{
    b->dispatched = 1;
    b->tk = tk;
    tk->body = b;
    atomic_fetch_add(&b->refs, 1); /* the ticket's: kicks find b through it */
}

/* Read the socket (and run the pace deadline) only while the application takes the body. */
static void eh2o_body_reading(eh2o_body *b, int on)
{
    if (b->h2) { /* the connection reads on for the other streams: flow control paces */
        if (!on)
            h2o_timeout_unlink(&b->pace);
        else if (!h2o_timeout_is_linked(&b->pace))
            h2o_timeout_link(b->thread->loop, &b->thread->send_timeout, &b->pace);
        return;
    }
    h2o_socket_t *sock = b->conn->sock;
    if (on) {
        if (sock->_cb.read == NULL)
            h2o_socket_read_start(sock, eh2o_h1_on_read);
        if (!h2o_timeout_is_linked(&b->pace)) {
            b->win = 0;
            h2o_timeout_link(b->thread->loop, &b->thread->send_timeout, &b->pace);
        }
    } else {
        if (sock->_cb.read != NULL)
            h2o_socket_read_stop(sock);
        h2o_timeout_unlink(&b->pace);
    }
}

/* The engine is done with the body: the answer came (or the connection closed). */
static void eh2o_body_release(eh2o_body *b)
{
    if (b->released)
        return;
    b->released = 1;
    eh2o_conn *c = b->conn;
    if (!b->h2) /* HTTP/2: the walk may still discard the stream's DATA, on this deadline */
        h2o_timeout_unlink(&b->pace);
    else if (c != NULL)
        eh2o_h2_hold_later(c); /* its bytes go below */
    if (!b->h2 && c != NULL) {
        if (c->sock->_cb.read == eh2o_h1_on_read)
            h2o_socket_read_stop(c->sock); /* h2o reads again after its answer */
        c->h1.sb = NULL;
        eh2o_h1_body_done(c, b->eom);
        b->conn = NULL;
    }
    eh2o_body_pend_drop(b);
    /* No kick after it; a reader not at the end gets on_end(SRV_ECLOSED). */
    srv__body_detach(b->sreq);
    if (!b->dispatched)
        srv__request_release(b->sreq); /* never reached the core */
    b->sreq = NULL;
    if (!b->h2)
        eh2o_body_unref(b); /* the connection's (HTTP/2: the list's, at eh2o_body_unlist) */
}

static void eh2o_body_paced(eh2o_body *b, size_t n)
{
    if (srv__pace_bytes(&b->win, n)) { /* the pace is kept: a new window */
        h2o_timeout_unlink(&b->pace);
        h2o_timeout_link(b->thread->loop, &b->thread->send_timeout, &b->pace);
    }
}

/* Feed d[0..n) to the body parser while the application takes the pieces. Returns the bytes
 * used. The application's callbacks run here: the body may be released meanwhile. */
static size_t eh2o_body_feed(eh2o_body *b, const char *d, size_t n)
{
    static const char none[1];
    if (d == NULL)
        d = none;
    size_t off = 0;
    if (b->h2) { /* DATA payloads: the body's bytes as they are */
        while (!b->released && !b->stopped && off < n) {
            size_t piece = n - off < 65536 ? n - off : 65536;
            eh2o_body_paced(b, piece);
            int k = srv__body_data(b->sreq, d + off, piece);
            off += piece;
            b->ungranted += piece;
            if (k == SRV__BODY_OVER)
                b->stopped = 1;
            if (k != SRV__BODY_GO)
                break;
        }
        return off;
    }
    while (!b->released && !b->eom && !b->stopped) {
        size_t used = 0;
        enum srv_http1_event ev = srv__http1_feed(&b->parser, b->sreq, d + off, n - off, &used);
        off += used;
        if (ev == SRV_HTTP1_BODY) {
            eh2o_body_paced(b, b->parser.piece_len);
            int k = srv__body_data(b->sreq, b->parser.piece, b->parser.piece_len);
            if (k == SRV__BODY_OVER)
                b->stopped = 1; /* the core answers 413, or the application stopped */
            if (k != SRV__BODY_GO)
                break;
        } else if (ev == SRV_HTTP1_MESSAGE_COMPLETE) {
            b->eom = 1;
        } else if (ev == SRV_HTTP1_FAIL) {
            b->stopped = 1; /* on_end, then the core's 400/413/431 */
            srv__body_end(b->sreq, srv__http1_status(&b->parser));
        } else {
            break; /* NEED_MORE: all of it taken */
        }
    }
    return off;
}

/*
 * Move the body on: the 100 Continue when the application first wants the body, the bytes
 * kept from earlier reads, the end, or reading the socket. Runs after every read and kick;
 * each looks at everything again.
 */
static void eh2o_body_on_continue(h2o_socket_t *sock, const char *err);

/* HTTP/2: give the stream's window back for what the application took (discarded bytes at
 * once), in steps of EH2O_H2_GRANT_BYTES; or reset a stream whose client ignored it. */
static void eh2o_body_h2_grant(eh2o_body *b)
{
    if (!b->h2 || !b->listed)
        return;
    if (b->flow_error) {
        eh2o_h2_cancel_stream(b->conn, b->stream_id, H2O_HTTP2_ERROR_FLOW_CONTROL);
    } else if (b->ungranted >= (b->released ? 1 : EH2O_H2_GRANT_BYTES)) {
        eh2o_h2_window_update(b->conn, b->stream_id, b->ungranted);
        b->window += (int64_t)b->ungranted;
        b->ungranted = 0;
    }
}

static void eh2o_body_step(eh2o_body *b)
{
    atomic_fetch_add(&b->refs, 1); /* the application's callbacks may release it */
    while (!b->released && !b->cont_writing) {
        if (b->fail != 0 && !b->ended) {
            b->ended = 1;
            eh2o_body_reading(b, 0);
            srv__body_end(b->sreq, b->fail); /* on_end, then the core's answer */
            break;
        }
        if (b->stopped) {
            eh2o_body_reading(b, 0); /* the answer comes */
            break;
        }
        int k = srv__body_state(b->sreq);
        if (k != SRV__BODY_GO) {
            if (k == SRV__BODY_OVER)
                b->stopped = 1;
            eh2o_body_reading(b, 0); /* no deadline while the application paces itself */
            break;
        }
        if (!b->cont) {
            b->cont = 1; /* HTTP/2: clients do not wait for a 100 */
            if (!b->h2 && !b->eom && b->pend_len == b->pend_off &&
                srv__request_expects_continue(b->sreq) &&
                srv__http1_body_expected(&b->parser)) {
                /* Asked only now that the application reads (h2o never saw the Expect). */
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                h2o_iovec_t buf = h2o_iovec_init(cont, sizeof cont - 1);
                b->cont_writing = 1;
                h2o_socket_write(b->conn->sock, &buf, 1, eh2o_body_on_continue);
                break;
            }
        }
        if (b->pend_off < b->pend_len) {
            b->pend_off += eh2o_body_feed(b, b->pend + b->pend_off, b->pend_len - b->pend_off);
            if (!b->released && b->pend_off == b->pend_len) {
                eh2o_body_pend_drop(b);
            }
            if (b->h2 || b->released || !b->eom || b->pend_len == 0)
                continue;
            /* Bytes after the body's end: the next requests, for the guard. */
            char *rest = b->pend + b->pend_off;
            size_t nrest = b->pend_len - b->pend_off;
            eh2o_conn *c = b->conn;
            if (eh2o_h1_hold_append(c, rest, nrest) != 0)
                srv__request_set_close(b->sreq); /* out of memory: they are lost, so close */
            eh2o_body_pend_drop(b);
            continue;
        }
        if (b->eom) {
            eh2o_body_reading(b, 0); /* the next request waits for the answer */
            if (!b->ended) {
                b->ended = 1;
                srv__body_end(b->sreq, 0);
            }
            break;
        }
        if (b->h2) {
            eh2o_body_reading(b, 1); /* the walk brings more */
            break;
        }
        eh2o_body_feed(b, NULL, 0); /* an end that needs no byte (a zero length) */
        if (b->released || b->eom || b->stopped)
            continue;
        eh2o_body_reading(b, 1);
        break;
    }
    eh2o_body_h2_grant(b);
    if (b->h2 && b->listed) /* took some: read the connection again? */
        eh2o_h2_hold_later(b->conn);
    eh2o_body_unref(b);
}

static void eh2o_body_on_continue(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    eh2o_body *b = c->h1.sb;
    b->cont_writing = 0;
    if (b->answer != NULL) { /* it waited for this write: now it goes out */
        eh2o_ticket *tk = b->answer;
        b->answer = NULL;
        eh2o_complete(b->thread, tk);
        return;
    }
    if (err != NULL) {
        eh2o_h1_close(c); /* through h2o: the request is cancelled */
        return;
    }
    eh2o_body_step(b);
}

/* The guard's reader while the body streams: n new bytes at the end of the input. */
void eh2o_body_on_read(eh2o_conn *c, size_t n)
{
    eh2o_body *b = c->h1.sb;
    h2o_buffer_t *in = c->sock->input;
    const char *d = in->bytes + in->size - n;
    /* Out of h2o's input at once (it holds only the head, until the answer). The bytes stay
     * where they are until the next read: nothing here reads the socket. */
    in->size -= n;
    atomic_fetch_add(&b->refs, 1);
    if (b->dispatched && !b->stopped && !b->eom && b->pend_off == b->pend_len &&
        !b->cont_writing && srv__body_state(b->sreq) == SRV__BODY_GO) {
        size_t used = eh2o_body_feed(b, d, n);
        d += used;
        n -= used;
    }
    if (!b->released && n > 0) {
        int rc = 0;
        if (b->eom && b->pend_off == b->pend_len)
            rc = eh2o_h1_hold_append(c, d, n);
        else if (!b->stopped)
            rc = eh2o_body_hold(b, d, n); /* the application is behind: reading stops */
        if (rc != 0) {
            b->stopped = 1;
            srv__body_end(b->sreq, 500);
        }
    }
    if (!b->released && b->dispatched)
        eh2o_body_step(b);
    else if (!b->released)
        eh2o_body_reading(b, 0); /* not with the core yet: h2o dispatches it first */
    eh2o_body_unref(b);
}

/* The application's reading was too slow for SRV_BODY_MIN_PACE_BYTES per header_timeout_ms. */
static void eh2o_body_on_pace(h2o_timeout_entry_t *entry)
{
    eh2o_body *b = H2O_STRUCT_FROM_MEMBER(eh2o_body, pace, entry);
    if (b->h2 && b->released && b->listed) { /* an early answer waits for an END_STREAM */
        eh2o_h2_cancel_stream(b->conn, b->stream_id, H2O_HTTP2_ERROR_CANCEL);
        return;
    }
    if (b->released || b->stopped || b->eom)
        return;
    b->stopped = 1;
    atomic_fetch_add(&b->refs, 1);
    eh2o_body_reading(b, 0);
    srv__body_end(b->sreq, 408); /* the core answers 408 */
    eh2o_body_unref(b);
}

int eh2o_body_answered(eh2o_ticket *tk)
{
    eh2o_body *b = tk->body;
    if (b->h2)
        return eh2o_body_h2_answered(tk);
    if (b->released)
        return 0;
    if (b->cont_writing && b->conn != NULL) {
        b->answer = tk; /* h2o writes one thing at a time: after the 100 */
        return 1;
    }
    if (!b->eom)
        srv__request_set_close(b->sreq); /* unread body bytes are never parsed as a request */
    eh2o_body_release(b);
    return 0;
}

/*
 * HTTP/2. h2o 2.2.5 cannot answer a stream before its END_STREAM, so an answer that comes
 * earlier is written by hand (HEADERS, DATA, RST_STREAM NO_ERROR: eh2o_h2_write_answer, as the
 * stop's 503) when it is a plain one; a streamed answer waits for the END_STREAM, the rest of
 * the body discarded (its window given back so the client gets there), and the stream is
 * cancelled at the pace deadline if the client stops sending.
 */
static int eh2o_body_h2_answered(eh2o_ticket *tk)
{
    eh2o_body *b = tk->body;
    if (b->answer == tk)
        return 0; /* its turn now (eh2o_body_h2_ready) */
    int ready = b->h2o_ready || !b->listed || tk->req == NULL; /* NULL: the stream is gone */
    eh2o_body_release(b);
    if (ready) {
        h2o_timeout_unlink(&b->pace);
        eh2o_body_unlist(b); /* its DATA are over */
        return 0;
    }
    if (srv__response_streamed(tk->sreq)) {
        b->answer = tk;
        h2o_timeout_unlink(&b->pace);
        h2o_timeout_link(b->thread->loop, &b->thread->send_timeout, &b->pace);
        return 1;
    }
    tk->h2_stop = b->conn; /* eh2o_complete writes it by hand, the stream is reset */
    tk->h2_stream = b->stream_id;
    eh2o_body_unlist(b);
    return 0;
}

void eh2o_body_conn_closed(eh2o_conn *c)
{
    eh2o_body *b = c->h1.sb;
    c->h1.sb = NULL;
    b->conn = NULL;
    eh2o_body_release(b);
}

/* The receiver of kicks, on the loop. */
static void eh2o_body_on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        eh2o_body *b = H2O_STRUCT_FROM_MEMBER(eh2o_body, msg.link, messages->next);
        h2o_linklist_unlink(&b->msg.link);
        atomic_store(&b->kick_queued, 0); /* a kick from now on queues msg again */
        if (!b->released)
            eh2o_body_step(b);
        eh2o_body_unref(b);
    }
}

/* body_kick slot: any thread, the request's lock held; never after srv__body_detach. */
void eh2o_body_kick(void *state, srv_request *sreq)
{
    (void)state;
    eh2o_ticket *tk = srv__request_engine_data(sreq);
    eh2o_body *b = tk->body;
    if (atomic_exchange(&b->kick_queued, 1) != 0)
        return; /* the queued one steps, and sees what this one announces */
    atomic_fetch_add(&b->refs, 1);
    h2o_multithread_send_message(&b->thread->body_receiver, &b->msg);
}

void eh2o_body_thread_init(eh2o_thread *t)
{
    h2o_multithread_register_receiver(t->ctx.queue, &t->body_receiver, eh2o_body_on_messages);
}

void eh2o_body_thread_dispose(eh2o_thread *t)
{
    h2o_multithread_unregister_receiver(t->ctx.queue, &t->body_receiver);
}

/* ------------------------------------------------------------------ */
/* HTTP/2 (the DATA frames come from eh2o_h2_expect, engines/h2o_http2.c) */
/* ------------------------------------------------------------------ */

static void eh2o_body_uncount(eh2o_body *b)
{
    if (b->counted && b->conn != NULL && b->conn->h2 != NULL)
        b->conn->h2->num_streams[1].half_closed--;
    b->counted = 0;
}

eh2o_body *eh2o_body_begin_h2(eh2o_conn *c, eh2o_ticket *tk, uint32_t id, uint64_t expected)
{
    eh2o_body *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1); /* the list's; eh2o_body_dispatched adds the ticket's */
    b->thread = c->thread;
    b->conn = c;
    b->sreq = tk->sreq;
    b->h2 = 1;
    b->cont = 1;
    b->stream_id = id;
    b->expected = expected;
    b->window = H2O_HTTP2_SETTINGS_HOST.initial_window_size; /* h2o's SETTINGS to the client */
    /* As for HTTP/1 (eh2o_body_begin): flow control paces the stream, not the kernel. */
    int size = EH2O_BODY_RCVBUF;
    setsockopt(h2o_socket_get_fd(c->sock), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    b->pace.cb = eh2o_body_on_pace;
    b->listed = 1;
    b->next = c->h2_bodies;
    c->h2_bodies = b;
    /* h2o counts a stream as processing from its END_STREAM on; before it, an open stream
     * with none processing makes the connection idle for h2o, whose idle timeout would close
     * it under an upload paused by flow control. So it counts as processing from now on:
     * h2o's own count takes over at on_req (eh2o_body_h2_ready), or the stream goes. */
    c->h2->num_streams[1].half_closed++;
    b->counted = 1;
    eh2o_body_dispatched(b, tk);
    return b;
}

eh2o_body *eh2o_body_h2_find(eh2o_conn *c, uint32_t id)
{
    for (eh2o_body *b = c->h2_bodies; b != NULL; b = b->next)
        if (b->stream_id == id)
            return b;
    return NULL;
}

/* A DATA frame of b's stream, taken before h2o parses it (eh2o_h2_expect): its payload p[0..n),
 * END_STREAM or not. Kept for the application (delivered after the walk), or discarded
 * once the stream was answered. */
void eh2o_body_h2_data(eh2o_body *b, const char *p, size_t n, size_t frame_len, int end)
{
    if ((int64_t)frame_len > b->window || b->flow_error) {
        /* A client that ignores flow control would make the engine hold any amount: the
         * stream is reset after the walk (RFC 9113 6.9.1), its bytes dropped. */
        b->flow_error = 1;
        return;
    }
    b->window -= (int64_t)frame_len;
    b->received += n;
    if (b->released) { /* discarded: the window goes back at once */
        b->ungranted += n;
        h2o_timeout_unlink(&b->pace); /* the client is still sending */
        h2o_timeout_link(b->thread->loop, &b->thread->send_timeout, &b->pace);
    } else if (!b->stopped) {
        if (b->expected != UINT64_MAX && b->received > b->expected)
            b->fail = 400; /* more than its content-length: RFC 9113 8.1.1 */
        else if (n != 0 && eh2o_body_hold(b, p, n) != 0)
            b->fail = 500;
    }
    if (end) {
        b->eom = 1;
        if (!b->released && b->expected != UINT64_MAX && b->received != b->expected)
            b->fail = 400;
    }
    if (b->fail != 0 && !b->released)
        b->stopped = 1; /* told after the walk (eh2o_body_step), not in the middle of it */
}

/* After a read: move each stream's body on, and give back the flow-control window of what
 * the application took (h2o never saw those bytes, so it does not). */
void eh2o_body_h2_after_read(eh2o_conn *c)
{
    size_t n = 0;
    for (eh2o_body *b = c->h2_bodies; b != NULL; b = b->next)
        n++;
    eh2o_body **all = n != 0 ? malloc(n * sizeof *all) : NULL;
    if (all == NULL)
        return; /* none, or out of memory: the next read tries again */
    n = 0;
    for (eh2o_body *b = c->h2_bodies; b != NULL; b = b->next) {
        atomic_fetch_add(&b->refs, 1); /* a step may unlist the others */
        all[n++] = b;
    }
    for (size_t i = 0; i < n; i++) {
        eh2o_body *b = all[i];
        if (b->listed && !b->released && b->core)
            eh2o_body_step(b); /* it grants what the application took */
        else
            eh2o_body_h2_grant(b);
        eh2o_body_unref(b);
    }
    free(all);
}

/* on_req for an HTTP/2 request: 1 when it is a streamed body's, whose END_STREAM reached h2o
 * (the answer can go through h2o now). */
int eh2o_body_h2_ready(eh2o_conn *c, h2o_req_t *req)
{
    eh2o_body *b;
    for (b = c->h2_bodies; b != NULL; b = b->next)
        if (b->tk != NULL && b->tk->req == req)
            break;
    if (b == NULL)
        return 0;
    b->h2o_ready = 1;
    eh2o_body_uncount(b);
    eh2o_ticket *answer = b->answer;
    b->answer = NULL;
    h2o_timeout_unlink(&b->pace);
    if (b->released)
        eh2o_body_unlist(b); /* its DATA are over; the answer may go */
    if (answer != NULL)
        eh2o_complete(answer->thread, answer);
    return 1;
}

/* The stream's h2o_req_t goes (reset, the connection closed, or answered and done). */
void eh2o_body_stream_gone(eh2o_ticket *tk)
{
    eh2o_body *b = tk->body;
    if (!b->h2)
        return;
    eh2o_ticket *answer = b->answer;
    b->answer = NULL;
    atomic_fetch_add(&b->refs, 1);
    eh2o_body_uncount(b); /* h2o's stream closes: its connection is still there */
    if (b->listed && b->conn != NULL && !b->released)
        eh2o_body_release(b);
    h2o_timeout_unlink(&b->pace);
    eh2o_body_unlist(b);
    if (answer != NULL) /* it waited for an END_STREAM that will not come */
        eh2o_complete(answer->thread, answer);
    eh2o_body_unref(b);
}

void eh2o_body_h2_conn_closed(eh2o_conn *c)
{
    while (c->h2_bodies != NULL) {
        eh2o_body *b = c->h2_bodies;
        b->counted = 0; /* h2o's connection is gone already */
        atomic_fetch_add(&b->refs, 1);
        eh2o_body_release(b);
        h2o_timeout_unlink(&b->pace);
        eh2o_body_unlist(b);
        eh2o_body_unref(b);
    }
}

/* eh2o_on_dispatch hands the request to the core: from now on it may be told. */
eh2o_body *eh2o_body_h2_dispatching(eh2o_ticket *tk)
{
    eh2o_body *b = tk->body;
    b->core = 1;
    atomic_fetch_add(&b->refs, 1);
    return b;
}

/* ... and after it: what the walk kept (bytes, an end, an error) moves on. */
void eh2o_body_h2_dispatched(eh2o_body *b)
{
    if (b->listed && !b->released)
        eh2o_body_step(b);
    eh2o_body_unref(b);
}

size_t eh2o_body_h2_held(eh2o_conn *c)
{
    size_t n = 0;
    for (eh2o_body *b = c->h2_bodies; b != NULL; b = b->next)
        n += b->pend_len - b->pend_off;
    return n;
}

int eh2o_body_h2_owns(eh2o_conn *c, uint32_t stream_id)
{
    return eh2o_body_h2_find(c, stream_id) != NULL;
}
