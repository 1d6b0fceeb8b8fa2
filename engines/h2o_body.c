/*
 * The h2o engine's streamed request bodies (SRV_ROUTE_STREAM_BODY) over HTTP/2, on the loop
 * threads. libh2o 2.2.5 buffers a body whole before it calls a handler and has no way to
 * read it piece by piece, so the walk (eh2o_h2_expect, engines/h2o_http2.c) takes such a
 * stream's DATA frames before h2o parses them and gives them to the object here: the pieces
 * go to srv__body_data while srv__body_state says GO, and the stream's flow-control window
 * is given back only for what the application took (back-pressure). HTTP/1's streamed bodies
 * are the core's (core/h1conn.c).
 */
#include "h2o_internal.h"


struct eh2o_body {
    h2o_multithread_message_t msg; /* the kick, at most one queued (kick_queued) */
    atomic_int kick_queued;
    atomic_int refs; /* the connection's (until released), the ticket's, a kick in flight */
    eh2o_thread *thread;
    eh2o_conn *conn;   /* NULL once released */
    srv_request *sreq; /* ours until dispatched, then the ticket's */
    eh2o_ticket *tk;
    int dispatched;    /* on_req gave it to the core */
    int released;      /* answered or the connection closed: the engine is done with it */
    char *pend;        /* body bytes read while the application did not want them */
    size_t pend_off, pend_len, pend_cap;
    int eom;           /* the body's end was parsed */
    int ended;         /* srv__body_end called */
    int stopped;       /* an error, the deadline, or the application stopped reading */
    eh2o_ticket *answer; /* an answer that waits for the END_STREAM */
    uint64_t win;      /* bytes in the current pace window */
    h2o_timeout_entry_t pace;
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
        free(b->pend);
        free(b);
    }
}

static void eh2o_body_on_pace(h2o_timeout_entry_t *entry);
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

static int eh2o_body_hold(eh2o_body *b, const char *p, size_t n)
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

static void eh2o_body_dispatched(eh2o_body *b, eh2o_ticket *tk)
{
    b->dispatched = 1;
    b->tk = tk;
    tk->body = b;
    atomic_fetch_add(&b->refs, 1); /* the ticket's: kicks find b through it */
}

/* The pace deadline runs only while the application takes the body (the connection reads
 * on for the other streams: flow control paces this one). */
static void eh2o_body_reading(eh2o_body *b, int on)
{
    if (!on)
        h2o_timeout_unlink(&b->pace);
    else if (!h2o_timeout_is_linked(&b->pace))
        h2o_timeout_link(b->thread->loop, &b->thread->send_timeout, &b->pace);
}

/* The engine is done with the body: the answer came (or the connection closed). */
static void eh2o_body_release(eh2o_body *b)
{
    if (b->released)
        return;
    b->released = 1;
    if (b->conn != NULL) /* the walk may still discard the stream's DATA, on the deadline */
        eh2o_h2_hold_later(b->conn); /* its bytes go below */
    eh2o_body_pend_drop(b);
    /* No kick after it; a reader not at the end gets on_end(SRV_ECLOSED). */
    srv__body_detach(b->sreq);
    if (!b->dispatched)
        srv__request_release(b->sreq); /* never reached the core */
    b->sreq = NULL; /* the list's reference goes at eh2o_body_unlist */
}

static void eh2o_body_paced(eh2o_body *b, size_t n)
{
    if (srv__pace_bytes(&b->win, n)) { /* the pace is kept: a new window */
        h2o_timeout_unlink(&b->pace);
        h2o_timeout_link(b->thread->loop, &b->thread->send_timeout, &b->pace);
    }
}

/* DATA payloads d[0..n) to the application while it takes them: the bytes used. The
 * application's callbacks run here: the body may be released meanwhile. */
static size_t eh2o_body_feed(eh2o_body *b, const char *d, size_t n)
{
    size_t off = 0;
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

/* HTTP/2: give the stream's window back for what the application took (discarded bytes at
 * once), in steps of EH2O_H2_GRANT_BYTES; or reset a stream whose client ignored it. */
static void eh2o_body_h2_grant(eh2o_body *b)
{
    if (!b->listed)
        return;
    if (b->flow_error) {
        eh2o_h2_cancel_stream(b->conn, b->stream_id, H2O_HTTP2_ERROR_FLOW_CONTROL);
    } else if (b->ungranted >= (b->released ? 1 : EH2O_H2_GRANT_BYTES)) {
        eh2o_h2_window_update(b->conn, b->stream_id, b->ungranted);
        b->window += (int64_t)b->ungranted;
        b->ungranted = 0;
    }
}

/* Move the body on: the bytes the walk kept, the end, an error. Runs after every read and
 * kick; each looks at everything again. */
static void eh2o_body_step(eh2o_body *b)
{
    atomic_fetch_add(&b->refs, 1); /* the application's callbacks may release it */
    while (!b->released) {
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
        if (b->pend_off < b->pend_len) { /* HTTP/2 clients do not wait for a 100 */
            b->pend_off += eh2o_body_feed(b, b->pend + b->pend_off, b->pend_len - b->pend_off);
            if (!b->released && b->pend_off == b->pend_len)
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
        eh2o_body_reading(b, 1); /* the walk brings more */
        break;
    }
    eh2o_body_h2_grant(b);
    if (b->listed) /* took some: read the connection again? */
        eh2o_h2_hold_later(b->conn);
    eh2o_body_unref(b);
}

/* The application's reading was too slow for SRV_BODY_MIN_PACE_BYTES per header_timeout_ms. */
static void eh2o_body_on_pace(h2o_timeout_entry_t *entry)
{
    eh2o_body *b = H2O_STRUCT_FROM_MEMBER(eh2o_body, pace, entry);
    if (b->released && b->listed) { /* an early answer waits for an END_STREAM */
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

/*
 * HTTP/2. h2o 2.2.5 cannot answer a stream before its END_STREAM, so an answer that comes
 * earlier is written by hand (HEADERS, DATA, RST_STREAM NO_ERROR: eh2o_h2_write_answer, as the
 * stop's 503) when it is a plain one; a streamed answer waits for the END_STREAM, the rest of
 * the body discarded (its window given back so the client gets there), and the stream is
 * cancelled at the pace deadline if the client stops sending.
 */
int eh2o_body_answered(eh2o_ticket *tk)
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
    if (srv__h1conn_body_kick(sreq)) /* HTTP/1: the core's connection */
        return;
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
/* The DATA frames come from eh2o_h2_expect (engines/h2o_http2.c)      */
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
    b->stream_id = id;
    b->expected = expected;
    b->window = H2O_HTTP2_SETTINGS_HOST.initial_window_size; /* h2o's SETTINGS to the client */
    /* Flow control paces the stream, not the kernel: a larger receive buffer costs nothing. */
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
