/*
 * The h2o engine's HTTP/2 defences (libh2o-evloop 2.2.5), on the loop threads: requests handed
 * to the core after the read that parsed them, resets counted (rapid reset, CVE-2023-44487),
 * deadlines for slow requests and unread responses, and the GOAWAY they end with.
 */
#include "h2o_internal.h"


static void eh2o_h2_wrap_expect(eh2o_conn *c);
static void eh2o_h2_on_read(h2o_socket_t *sock, const char *err);
static size_t eh2o_h2_unhold(eh2o_conn *c, size_t n);

/* ------------------------------------------------------------------ */
/* The start: frames held until the walk is in place                   */
/* ------------------------------------------------------------------ */

/* Hold n bytes after the held ones. -1 when out of memory. */
static int eh2o_h2_hold(eh2o_conn *c, const char *p, size_t n)
{
    char *nb = realloc(c->held, c->held_off + c->held_len + n);
    if (nb == NULL)
        return -1;
    memcpy(nb + c->held_off + c->held_len, p, n);
    c->held = nb;
    c->held_len += n;
    return 0;
}

/* The held bytes into the input before its last n bytes, which came after them. The new
 * bytes' count, or SIZE_MAX out of memory. */
static size_t eh2o_h2_unhold(eh2o_conn *c, size_t n)
{
    size_t k = c->held_len;
    if (h2o_buffer_reserve(&c->sock->input, k).base == NULL)
        return SIZE_MAX;
    char *at = c->sock->input->bytes + c->sock->input->size - n;
    memmove(at + k, at, n);
    memcpy(at, c->held + c->held_off, k);
    c->sock->input->size += k;
    free(c->held);
    c->held = NULL;
    c->held_off = c->held_len = 0;
    return n + k;
}

void eh2o_h2_accept(eh2o_conn *c, size_t keep)
{
    h2o_socket_t *sock = c->sock;
    eh2o_thread *t = c->thread;
    c->http2 = 1;
    /* h2o parses what follows at once, before the walk of streamed bodies is in place
     * (eh2o_h2_begin gives it the held frames): h2o sees only the preface (h2c) or nothing
     * (TLS: the frames that came with the Finished). */
    if (sock->input->size > keep && srv__server_streams_bodies(t->server->srv) &&
        eh2o_h2_hold(c, sock->input->bytes + keep, sock->input->size - keep) == 0)
        sock->input->size = keep;
    int closed = 0, *outer = c->closed;
    c->closed = &closed;
    h2o_socket_read_stop(sock);
    h2o_http2_accept(&t->accept_ctx, sock, c->connected_at);
    if (closed) { /* c is freed */
        if (outer != NULL)
            *outer = 1;
        return;
    }
    c->closed = outer;
    eh2o_h2_begin(c); /* streams still arriving count for the stop's grace */
}

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
        h2->_write.buf != NULL && h2->streams != NULL) {
        c->h2 = h2;
        eh2o_h2_wrap_expect(c);
    }
    if (c->h2_on_read == NULL) /* not wrapped (eh2o_h2_begin): h2o's HTTP/2 on_read */
        c->h2_on_read = c->sock->_cb.read;
}

/* The stream `id` of the connection's own table, if it is one of its streams (NULL if not). */
static eh2o_h2stream *eh2o_h2_stream(eh2o_h2conn *h2, uint32_t id)
{
    const struct eh2o_khash_streams *h = h2->streams;
    for (uint32_t i = 0; i < h->n_buckets; i++)
        if (EH2O_KH_LIVE(h, i) && h->keys[i] == id)
            return h->vals[i]->stream_id == id && h->vals[i]->req.conn == &h2->super ? h->vals[i]
                                                                                        : NULL;
    return NULL;
}

/*
 * srv_server_stop's grace period waits for requests still arriving (srv__request_arriving):
 * on HTTP/2, the streams whose header block or body is still being received (h2o 2.2.5 counts
 * a stream in .open from its HEADERS, in .half_closed once it hands the request over, and
 * keeps those waiting for a processing slot on _pending_reqs), and the requests parsed but not
 * yet handed to the core (eh2o_on_dispatch runs after the read). Called after every read and
 * dispatch; the close takes back what is counted. Nothing counts once the connection is
 * closing (h2o ignores DATA from then on).
 */
void eh2o_h2_note(eh2o_conn *c)
{
    unsigned n = c->h2_to_dispatch;
    eh2o_h2conn *h2 = c->h2;
    if (h2 != NULL && h2->state == EH2O_H2_OPEN && !h2o_timeout_is_linked(&c->calm)) {
        uint32_t open = h2->num_streams[1].open, processing = h2->num_streams[1].half_closed;
        /* streamed bodies count as processing (eh2o_body_begin_h2): not arriving */
        uint32_t queued = 0;
        for (h2o_linklist_t *l = h2->_pending_reqs.next; l != &h2->_pending_reqs; l = l->next)
            queued++;
        if (open > processing + queued)
            n += open - processing - queued;
    }
    if (n != c->h2_arriving) {
        srv__request_arriving(c->thread->server->srv, (int)n - (int)c->h2_arriving);
        c->h2_arriving = n;
    }
}

/* h2o's HTTP/2 reader; 0 when the connection closed inside it (c is freed). */
static int eh2o_h2_call(eh2o_conn *c, const char *err)
{
    int closed = 0, *outer = c->closed;
    c->closed = &closed;
    c->h2_on_read(c->sock, err);
    if (closed) {
        if (outer != NULL)
            *outer = 1;
        return 0;
    }
    c->closed = outer;
    return 1;
}

static uint32_t eh2o_be24(const uint8_t *p)
{
    return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static uint32_t eh2o_be31(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]) & 0x7fffffffu;
}

#define EH2O_FRAME_CONTINUATION 9
#define EH2O_FLAG_PADDED        0x8
#define EH2O_MAX_FRAME          16384 /* h2o 2.2.5's SETTINGS_MAX_FRAME_SIZE */

/*
 * Streamed request bodies over HTTP/2 (SRV_ROUTE_STREAM_BODY). h2o 2.2.5 buffers a body in
 * the stream until END_STREAM and only then calls on_req. Its parser takes one frame per
 * call of the connection's _read_expect (parse_input), so the engine's function takes that
 * place (h2o changes it between states: each call puts it back, keeping h2o's as
 * c->h2_expect) and sees every frame before h2o does, whichever read callback h2o runs (the
 * Debian build re-arms its own on_read after a write, past the engine's socket callback):
 *  - a header block that ends (HEADERS or CONTINUATION with END_HEADERS, no END_STREAM on
 *    its HEADERS): after h2o decoded it, eh2o_h2_take_stream decides from h2o's parsed
 *    request whether its route streams the body; if so the request goes to the core at once
 *    (after the read, like every HTTP/2 request);
 *  - a DATA frame of such a stream is consumed here (its payload to engines/h2o_body.c); with
 *    END_STREAM h2o is given an empty DATA frame with END_STREAM instead, so it completes the
 *    request (on_req) and can answer it. The connection-level window of the bytes h2o never
 *    saw goes back after the read (eh2o_h2_on_after_read); the stream's as the application
 *    takes them. While the connection holds back (EH2O_H2_HOLD_MAX), such a DATA frame is
 *    left for later (INCOMPLETE: h2o stops parsing there) and reading stops again.
 */
static ssize_t eh2o_h2_expect(void *conn, const uint8_t *src, size_t len, const char **err)
{
    eh2o_h2conn *h2 = conn;
    eh2o_conn *c = eh2o_sock_conn(h2->sock);
    ssize_t (*orig)(void *, const uint8_t *, size_t, const char **) = c->h2_expect;
    /* A frame (not the client's preface, whose first byte is 'P'), complete. */
    int frame = len >= 9 && src[0] == 0 && 9 + eh2o_be24(src) <= len;
    uint8_t type = frame ? src[3] : 0xff, flags = frame ? src[4] : 0;
    uint32_t id = frame ? eh2o_be31(src + 5) : 0;
    if (c->sock->_cb.read == c->h2_on_read && c->h2_on_read != NULL)
        c->sock->_cb.read = eh2o_h2_on_read; /* h2o re-armed its own reader: ours again */
    eh2o_body *body = frame && id != 0 && !c->h2_in_block ? eh2o_body_h2_find(c, id) : NULL;
    if (body != NULL && type == EH2O_FRAME_DATA) {
        size_t flen = eh2o_be24(src), lead = flags & EH2O_FLAG_PADDED ? 1 : 0;
        if (!lead || (flen >= 1 && src[9] < flen)) { /* else h2o refuses the padding */
            if (c->h2_held_back) {
                h2o_socket_read_stop(c->sock); /* h2o read again: the hold is not over */
                return H2O_HTTP2_ERROR_INCOMPLETE;
            }
            int end = (flags & EH2O_FLAG_END_STREAM) != 0;
            eh2o_body_h2_data(body, (const char *)src + 9 + lead,
                              flen - lead - (lead ? src[9] : 0), flen, end);
            c->h2_owed += flen;
            eh2o_h2_after_read_later(c);
            if (end) { /* h2o completes the request on an empty DATA with END_STREAM */
                uint8_t empty[9];
                h2o_http2_encode_frame_header(empty, 0, EH2O_FRAME_DATA, EH2O_FLAG_END_STREAM,
                                              (int32_t)id);
                ssize_t r = orig(conn, empty, sizeof empty, err);
                if (h2->_read_expect != eh2o_h2_expect) {
                    c->h2_expect = h2->_read_expect;
                    h2->_read_expect = eh2o_h2_expect;
                }
                if (r < 0)
                    return r;
            }
            return (ssize_t)(9 + flen);
        }
    }
    if (body != NULL && type == EH2O_FRAME_HEADERS && (flags & EH2O_FLAG_END_STREAM)) {
        eh2o_body_h2_data(body, NULL, 0, 0, 1); /* trailers end the body (h2o reads them) */
        eh2o_h2_after_read_later(c);
    }
    ssize_t r = orig(conn, src, len, err);
    if (h2->_read_expect != eh2o_h2_expect) { /* h2o moved to another state */
        c->h2_expect = h2->_read_expect;
        h2->_read_expect = eh2o_h2_expect;
    }
    if (r > 0 && frame && (type == EH2O_FRAME_HEADERS || type == EH2O_FRAME_CONTINUATION)) {
        c->h2_in_block = !(flags & EH2O_FLAG_END_HEADERS);
        if (!c->h2_in_block && (id & 1) && id > c->h2_examined &&
            srv__server_streams_bodies(c->thread->server->srv)) {
            c->h2_examined = id; /* stream ids only grow: each head is looked at once */
            eh2o_h2_take_stream(c, id);
        }
    }
    return r;
}

/* Once h2o's HTTP/2 connection is adopted (its layout checked): its frames go through
 * eh2o_h2_expect (which also keeps the engine's socket callback in place). */
static void eh2o_h2_wrap_expect(eh2o_conn *c)
{
    eh2o_h2conn *h2 = c->h2;
    if (h2 == NULL || c->h2_expect != NULL)
        return;
    c->h2_expect = h2->_read_expect;
    h2->_read_expect = eh2o_h2_expect;
}

/* After the read: the connection's window for the bytes h2o never saw, each stream's body
 * moved on (and its window given back), the hold looked at. */
static void eh2o_h2_on_after_read(h2o_timeout_entry_t *entry)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, h2_after_entry, entry);
    if (c->h2_owed != 0) {
        eh2o_h2_window_update(c, 0, c->h2_owed);
        c->h2_owed = 0;
    }
    eh2o_body_h2_after_read(c);
    eh2o_h2_hold_check(c, eh2o_body_h2_held(c));
}

void eh2o_h2_after_read_later(eh2o_conn *c)
{
    if (h2o_timeout_is_linked(&c->h2_after_entry))
        return;
    c->h2_after_entry.cb = eh2o_h2_on_after_read;
    h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->h2_after_entry);
}

/* The connection's read callback once it speaks HTTP/2: h2o's, then the count of requests
 * arriving (c may be freed in h2o's). */
static void eh2o_h2_on_read(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    if (err == NULL && c->held_len != 0) { /* held at the switch to HTTP/2: they came first */
        size_t n = sock->bytes_read <= sock->input->size ? sock->bytes_read : 0;
        if (eh2o_h2_unhold(c, n) == SIZE_MAX)
            err = "out of memory";
    }
    if (eh2o_h2_call(c, err))
        eh2o_h2_note(c);
}

static void eh2o_h2_on_hold_entry(h2o_timeout_entry_t *entry)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, h2_hold_entry, entry);
    eh2o_h2_hold_check(c, eh2o_body_h2_held(c));
}

/* From wherever a body lets go of its bytes (an answer, a reset, maybe inside h2o's own
 * calls): the connection is read again from the loop, after this turn. */
void eh2o_h2_hold_later(eh2o_conn *c)
{
    if (!c->h2_held_back || h2o_timeout_is_linked(&c->h2_hold_entry))
        return;
    c->h2_hold_entry.cb = eh2o_h2_on_hold_entry;
    h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->h2_hold_entry);
}

/* A connection whose streamed bodies hold EH2O_H2_HOLD_MAX for their applications is not read
 * (TCP back-pressure, as HTTP/1 while an application pauses) until they hold half of it. */
void eh2o_h2_hold_check(eh2o_conn *c, size_t held)
{
    h2o_socket_t *sock = c->sock;
    if (!c->h2_held_back && held >= EH2O_H2_HOLD_MAX) {
        if (sock->_cb.read != NULL)
            h2o_socket_read_stop(sock);
        c->h2_held_back = 1;
    } else if (c->h2_held_back && held < EH2O_H2_HOLD_MAX / 2) {
        c->h2_held_back = 0;
        h2o_socket_read_start(sock, eh2o_h2_on_read);
        if (sock->input->size != 0) /* frames left for later while holding back */
            eh2o_h2_on_read(sock, NULL); /* c may be freed */
    }
}

/* The bytes held back at the switch to HTTP/2 (after the preface, or the whole input over
 * TLS): through eh2o_h2_expect now that it is in place. */
static void eh2o_h2_on_inject(h2o_timeout_entry_t *entry)
{
    eh2o_conn *c = H2O_STRUCT_FROM_MEMBER(eh2o_conn, inject, entry);
    if (c->held_len == 0 || c->sock->_cb.read != eh2o_h2_on_read)
        return;
    size_t n = eh2o_h2_unhold(c, 0);
    eh2o_h2_on_read(c->sock, n == SIZE_MAX ? "out of memory" : NULL);
}

void eh2o_h2_window_update(eh2o_conn *c, uint32_t stream_id, size_t n)
{
    eh2o_h2conn *h2 = c->h2;
    if (h2 == NULL || h2->state >= EH2O_H2_IS_CLOSING)
        return;
    while (n > 0) {
        int32_t step = n > 0x7fffffff ? 0x7fffffff : (int32_t)n;
        h2o_http2_encode_window_update_frame(&h2->_write.buf, stream_id, step);
        n -= (size_t)step;
    }
    h2o_http2_conn_request_write(h2);
}

void eh2o_h2_cancel_stream(eh2o_conn *c, uint32_t stream_id, int h2o_error)
{
    eh2o_h2conn *h2 = c->h2;
    eh2o_h2stream *st = h2 != NULL && h2->state < EH2O_H2_IS_CLOSING
                            ? eh2o_h2_stream(h2, stream_id)
                            : NULL;
    if (st == NULL)
        return;
    h2o_http2__encode_rst_stream_frame(&h2->_write.buf, stream_id, -h2o_error);
    h2o_http2_stream_reset(h2, st); /* disposes the request: eh2o_body_stream_gone */
    h2o_http2_conn_request_write(h2);
}

/*
 * A request with a body, its header block just parsed by h2o (eh2o_h2_expect): when its route
 * streams the body, the request goes to the core now (after this read, as every HTTP/2
 * request) and the walk takes its DATA frames; otherwise h2o buffers the body as usual and
 * on_req applies the core's rules then.
 */
void eh2o_h2_take_stream(eh2o_conn *c, uint32_t id)
{
    eh2o_thread *t = c->thread;
    if (c->h2 == NULL && !c->h2_checked && c->sock->data != NULL)
        eh2o_h2_adopt(c, c->sock->data);
    eh2o_h2stream *st = c->h2 != NULL ? eh2o_h2_stream(c->h2, id) : NULL;
    if (st == NULL || st->state != EH2O_H2S_RECV_BODY || st->_req_body == NULL ||
        st->_req_body->size != 0)
        return;
    h2o_req_t *req = &st->req;
    struct sockaddr_storage peer;
    socklen_t plen = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
    srv_request *sreq =
        srv__request_new(t->server->srv, plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    if (sreq == NULL)
        return;
    uint64_t expected = st->_expected_content_length == SIZE_MAX
                            ? UINT64_MAX
                            : (uint64_t)st->_expected_content_length;
    int rc = eh2o_fill_parsed(sreq, req);
    if (rc == 0 && expected != UINT64_MAX) { /* h2o took it out of the headers */
        char len[24];
        int n = snprintf(len, sizeof len, "%" PRIu64, expected);
        rc = srv__request_add_header(sreq, "content-length", 14, len, (size_t)n);
    }
    if (rc == 0)
        rc = srv__request_headers_done(sreq);
    eh2o_ticket *tk = rc == 0 && srv__request_streams_body(sreq) ? srv__zalloc(sizeof *tk) : NULL;
    if (tk == NULL) {
        srv__request_release(sreq);
        return;
    }
    tk->thread = t;
    tk->sreq = sreq;
    tk->req = req;
    tk->refs = 2;
    tk->conn = c;
    if (eh2o_body_begin_h2(c, tk, id, expected) == NULL) {
        free(tk);
        srv__request_release(sreq);
        return;
    }
    c->h2_with_us++;
    *(eh2o_ticket **)h2o_mem_alloc_shared(&req->pool, sizeof tk, eh2o_on_guard_dispose) = tk;
    t->live++;
    srv__request_set_engine_data(sreq, tk);
    if (t->quiesced)
        srv__request_set_close(sreq);
    st->_expected_content_length = SIZE_MAX; /* its END_STREAM comes empty: the walk checks */
    h2o_linklist_insert(&t->to_dispatch, &tk->pending);
    c->h2_to_dispatch++;
    if (!h2o_timeout_is_linked(&t->dispatch_entry))
        h2o_timeout_link(t->loop, &t->zero, &t->dispatch_entry);
}

/* h2o switched the connection to HTTP/2 (prior knowledge or h2c upgrade) and reads with its
 * HTTP/2 on_read now (h2o 2.2.5 never re-arms it): read through eh2o_h2_on_read. */
void eh2o_h2_begin(eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    h2o_socket_cb cb = sock->_cb.read;
    if (cb == NULL || cb == eh2o_h2_on_read)
        return; /* not h2o's HTTP/2 reader */
    c->h2_on_read = cb;
    sock->_cb.read = eh2o_h2_on_read;
    if (c->h2 == NULL && !c->h2_checked && sock->data != NULL)
        eh2o_h2_adopt(c, sock->data); /* HTTP/2 sets sock->data to its connection */
    if (c->held_len != 0) { /* held back at the switch: through the walk, after this turn */
        h2o_timeout_unlink(&c->inject);
        c->inject.cb = eh2o_h2_on_inject;
        h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->inject);
    }
    eh2o_h2_note(c);
}

/*
 * h2o buffers a request body in the stream (_req_body) and on_req copied it into the core's
 * request: let h2o's copy go now rather than when the stream closes after the response, so
 * the body is held once while the handler runs. Only for a stream of the connection's own
 * table whose buffer is the entity's.
 */
void eh2o_h2_drop_body(eh2o_conn *c, h2o_req_t *req)
{
    if (c == NULL || c->h2 == NULL || req->entity.base == NULL)
        return;
    eh2o_h2stream *st = H2O_STRUCT_FROM_MEMBER(eh2o_h2stream, req, req);
    if (eh2o_h2_stream(c->h2, st->stream_id) != st || st->_req_body == NULL ||
        st->_req_body->bytes != req->entity.base)
        return;
    h2o_buffer_dispose(&st->_req_body); /* sets it NULL: the stream's close skips it */
    req->entity = h2o_iovec_init(NULL, 0);
}

/* The connection record of an HTTP/2 request (NULL if the socket is not one we track). */
eh2o_conn *eh2o_h2_conn(h2o_req_t *req)
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
    if (c->h2 == NULL && c->h2_on_read != NULL && c->sock->data != NULL) /* no request yet */
        eh2o_h2_adopt(c, c->sock->data); /* HTTP/2 sets sock->data */
    eh2o_h2conn *h2 = c->h2;
    if (h2 == NULL || h2->state != EH2O_H2_OPEN)
        return;
    /* h2o 2.2.5 counts a stream in .open from its HEADERS to its end, and in .half_closed
     * from the moment it hands the request over (SEND_HEADERS, before on_req); requests
     * waiting for a processing slot are on _pending_reqs. */
    uint32_t open = h2->num_streams[1].open, processing = h2->num_streams[1].half_closed;
    /* A streamed body counts as processing (paced by its own deadline, engines/h2o_body.c). */
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
    if (c->recv_since != 0 && now - c->recv_since >= limit) {
        eh2o_h2_goaway(c, H2O_HTTP2_ERROR_NONE, "request timeout");
    } else if (sending && now - c->sent_since >= limit) {
        /* The client reads nothing: the GOAWAY would wait behind the stalled write, and h2o
         * closes only once its writes complete. Shut the socket so they fail now. */
        eh2o_h2_goaway(c, H2O_HTTP2_ERROR_NONE, "send timeout");
        shutdown(h2o_socket_get_fd(c->sock), SHUT_RDWR);
    }
}

void eh2o_on_sweep(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, sweep_entry, entry);
    uint64_t now = h2o_now(t->loop), limit = t->server->cfg->header_timeout_ms;
    for (h2o_linklist_t *n = t->conns.next; n != &t->conns; n = n->next)
        eh2o_h2_check(H2O_STRUCT_FROM_MEMBER(eh2o_conn, link, n), now, limit);
    h2o_timeout_link(t->loop, &t->sweep, &t->sweep_entry);
}

/* Zero timeout, after the reads of this loop iteration: hand the surviving requests over
 * (counted as arriving until the core counts them in flight). */
void eh2o_on_dispatch(h2o_timeout_entry_t *entry)
{
    eh2o_thread *t = H2O_STRUCT_FROM_MEMBER(eh2o_thread, dispatch_entry, entry);
    while (!h2o_linklist_is_empty(&t->to_dispatch)) {
        eh2o_ticket *tk = H2O_STRUCT_FROM_MEMBER(eh2o_ticket, pending, t->to_dispatch.next);
        h2o_linklist_unlink(&tk->pending);
        eh2o_conn *c = tk->conn; /* alive while tk->req is: the guard unlinks first */
        int closed = 0, *outer = NULL;
        if (c != NULL) {
            c->h2_to_dispatch--;
            outer = c->closed;
            c->closed = &closed;
        }
        eh2o_body *body = tk->body != NULL ? eh2o_body_h2_dispatching(tk) : NULL;
        srv__request_dispatch(tk->sreq); /* may respond (and dispose other state) at once */
        if (body != NULL)
            eh2o_body_h2_dispatched(body);
        if (c != NULL && closed && outer != NULL)
            *outer = 1;
        if (c != NULL && !closed) {
            c->closed = outer;
            eh2o_h2_note(c);
        }
    }
}

/* The flood GOAWAY is queued: close through h2o's own read-error path, which waits for the
 * pending write (the GOAWAY) and then closes every stream and the socket. */
void eh2o_on_calm(h2o_timeout_entry_t *entry)
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
void eh2o_count_reset(eh2o_conn *c)
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


/* ------------------------------------------------------------------ */
/* Stop: idle connections, streams still arriving                      */
/* ------------------------------------------------------------------ */

/* While quiescing: an HTTP/2 connection with no stream open (none arriving, none being
 * answered) and nothing queued for the core. */
int eh2o_h2_idle(eh2o_conn *c)
{
    if (!c->http2 || c->h2_on_read == NULL || h2o_timeout_is_linked(&c->calm))
        return 0;
    if (c->h2 == NULL && !c->h2_checked && c->sock->data != NULL)
        eh2o_h2_adopt(c, c->sock->data);
    eh2o_h2conn *h2 = c->h2;
    return h2 != NULL && h2->state == EH2O_H2_OPEN && h2->num_streams[1].open == 0 &&
           h2->num_streams[2].open == 0 && h2->_headers_unparsed == NULL &&
           c->h2_to_dispatch == 0;
}

/* Its last GOAWAY (the highest stream opened, as h2o's second shutdown GOAWAY), then close. */
void eh2o_h2_close_idle(eh2o_conn *c)
{
    eh2o_h2_goaway(c, H2O_HTTP2_ERROR_NONE, "graceful shutdown");
}

/* An HPACK integer with an n-bit prefix whose other bits are `first` (RFC 7541 5.1). */
static size_t eh2o_hpack_int(uint8_t *p, uint8_t first, unsigned bits, size_t v)
{
    size_t max = ((size_t)1 << bits) - 1, n = 0;
    if (v < max) {
        p[n++] = (uint8_t)(first | v);
        return n;
    }
    p[n++] = (uint8_t)(first | max);
    for (v -= max; v >= 128; v >>= 7)
        p[n++] = (uint8_t)(0x80 | (v & 0x7f));
    p[n++] = (uint8_t)v;
    return n;
}

/* "Literal header field without indexing", new name (RFC 7541 6.2.2): the dynamic tables of
 * h2o's encoder and of the client stay as they are. */
static size_t eh2o_hpack_field(uint8_t *p, const char *name, size_t nlen, const char *value,
                               size_t vlen)
{
    size_t n = 0;
    p[n++] = 0;
    n += eh2o_hpack_int(p + n, 0, 7, nlen);
    for (size_t i = 0; i < nlen; i++)
        p[n++] = (uint8_t)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    n += eh2o_hpack_int(p + n, 0, 7, vlen);
    memcpy(p + n, value, vlen);
    return n + vlen;
}

/*
 * respond slot for the stop's 503 to a stream still arriving (eh2o_complete, on the loop): h2o
 * 2.2.5 cannot answer a stream before its request is complete, so the frames are queued here
 * into the connection's write buffer, as h2o's own do: HEADERS (:status and the core's
 * headers) and DATA (within both flow-control windows, which are consumed), then RST_STREAM
 * NO_ERROR so the client stops sending the body (RFC 9113 8.1); h2o then forgets the stream.
 * Where the answer does not fit (a window too small), RST_STREAM REFUSED_STREAM instead: the
 * client may retry, nothing was processed.
 */
void eh2o_h2_write_answer(eh2o_conn *c, uint32_t id, srv_request *sreq)
{
    eh2o_h2conn *h2 = c->h2;
    eh2o_h2stream *st = h2 != NULL && h2->state == EH2O_H2_OPEN ? eh2o_h2_stream(h2, id) : NULL;
    if (st == NULL || st->state > EH2O_H2S_RECV_BODY)
        return;
    size_t blen, nh = srv__response_header_count(sreq), cap = 64;
    const void *body = srv__response_body(sreq, &blen);
    for (size_t i = 0; i < nh; i++) {
        const char *value, *name = srv__response_header_at(sreq, i, &value);
        if (name != NULL)
            cap += strlen(name) + strlen(value) + 12;
    }
    uint8_t *block = malloc(cap);
    size_t n = 0;
    if (block != NULL) {
        char num[24];
        int len = snprintf(num, sizeof num, "%d", srv__response_status(sreq));
        block[n++] = 0x08; /* literal without indexing, name ":status" (static index 8) */
        n += eh2o_hpack_int(block + n, 0, 7, (size_t)len);
        memcpy(block + n, num, (size_t)len);
        n += (size_t)len;
        for (size_t i = 0; i < nh; i++) {
            const char *value, *name = srv__response_header_at(sreq, i, &value);
            if (name == NULL)
                break;
            size_t nlen = strlen(name);
            char lc[64];
            for (size_t k = 0; k < nlen && k < sizeof lc; k++)
                lc[k] = name[k] >= 'A' && name[k] <= 'Z' ? (char)(name[k] - 'A' + 'a') : name[k];
            const h2o_token_t *tok = nlen <= sizeof lc ? h2o_lookup_token(lc, nlen) : NULL;
            if (tok != NULL && tok->http2_should_reject)
                continue; /* connection-specific: a protocol error in HTTP/2 */
            n += eh2o_hpack_field(block + n, name, nlen, value, strlen(value));
        }
        len = snprintf(num, sizeof num, "%zu", srv__response_content_length(sreq));
        n += eh2o_hpack_field(block + n, "content-length", 14, num, (size_t)len);
    }
    int fits = block != NULL && n <= h2->peer_settings.max_frame_size &&
               (blen == 0 || ((ssize_t)blen <= st->output_window._avail &&
                              (ssize_t)blen <= h2->_write.window._avail &&
                              blen <= h2->peer_settings.max_frame_size));
    if (fits) {
        h2o_iovec_t out = h2o_buffer_reserve(&h2->_write.buf, 2 * 9 + n + blen);
        uint8_t *p = (uint8_t *)out.base;
        p = h2o_http2_encode_frame_header(p, n, EH2O_FRAME_HEADERS,
                                          EH2O_FLAG_END_HEADERS |
                                              (blen == 0 ? EH2O_FLAG_END_STREAM : 0),
                                          (int32_t)id);
        memcpy(p, block, n);
        p += n;
        if (blen != 0) {
            p = h2o_http2_encode_frame_header(p, blen, EH2O_FRAME_DATA,
                                              EH2O_FLAG_END_STREAM, (int32_t)id);
            memcpy(p, body, blen);
            p += blen;
            st->output_window._avail -= (ssize_t)blen;
            h2->_write.window._avail -= (ssize_t)blen;
        }
        h2->_write.buf->size += (size_t)(p - (uint8_t *)out.base);
        h2o_http2__encode_rst_stream_frame(&h2->_write.buf, id, 0 /* NO_ERROR */);
    } else {
        h2o_http2__encode_rst_stream_frame(&h2->_write.buf, id, -H2O_HTTP2_ERROR_REFUSED_STREAM);
    }
    free(block);
    h2o_http2_stream_reset(h2, st); /* closes it in h2o: later DATA gets STREAM_CLOSED */
    h2o_http2_conn_request_write(h2);
}

/* The stop slot, on the loop, after the grace: the core's 503 (its headers, its access-log
 * line) to every stream whose header block or body is still arriving. */
void eh2o_h2_stop_arriving(eh2o_conn *c)
{
    eh2o_h2conn *h2 = c->h2;
    eh2o_thread *t = c->thread;
    if (!c->http2 || h2 == NULL || h2->state != EH2O_H2_OPEN || h2o_timeout_is_linked(&c->calm))
        return;
    const struct eh2o_khash_streams *h = h2->streams;
    uint32_t *ids = malloc(((size_t)h->size + 1) * sizeof *ids), nids = 0;
    if (ids == NULL)
        return;
    for (uint32_t i = 0; i < h->n_buckets && nids < h->size; i++) {
        eh2o_h2stream *st = EH2O_KH_LIVE(h, i) ? h->vals[i] : NULL;
        if (st != NULL && st->stream_id % 2 == 1 &&
            (st->state == EH2O_H2S_RECV_HEADERS || st->state == EH2O_H2S_RECV_BODY) &&
            !eh2o_body_h2_owns(c, st->stream_id)) /* a streamed body is the core's */
            ids[nids++] = st->stream_id; /* answering changes the table: ids first */
    }
    for (uint32_t k = 0; k < nids; k++) {
        eh2o_h2stream *st = eh2o_h2_stream(h2, ids[k]);
        if (st == NULL)
            continue;
        struct sockaddr_storage peer;
        socklen_t plen = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
        srv_request *sreq =
            srv__request_new(t->server->srv, plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
        eh2o_ticket *tk = sreq != NULL ? srv__zalloc(sizeof *tk) : NULL;
        if (tk == NULL) {
            if (sreq != NULL)
                srv__request_release(sreq);
            break;
        }
        if (st->state == EH2O_H2S_RECV_BODY) { /* its head is parsed: it names it in the log */
            srv__request_set_method(sreq, st->req.input.method.base, st->req.input.method.len);
            srv__request_set_target(sreq, st->req.input.path.base, st->req.input.path.len);
        }
        srv__request_set_version(sreq, 2, 0);
        tk->thread = t;
        tk->sreq = sreq;
        tk->h2_stop = c;
        tk->h2_stream = ids[k];
        tk->refs = 1; /* no h2o_req_t handed over, no guard */
        t->live++;
        srv__request_set_engine_data(sreq, tk);
        srv__request_fail(sreq, 503); /* respond -> eh2o_complete -> eh2o_h2_write_answer */
    }
    free(ids);
    eh2o_h2_note(c);
}
