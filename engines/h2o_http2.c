/*
 * The h2o engine's HTTP/2 defences (libh2o-evloop 2.2.5), on the loop threads: requests handed
 * to the core after the read that parsed them, resets counted (rapid reset, CVE-2023-44487),
 * deadlines for slow requests and unread responses, and the GOAWAY they end with.
 */
#include "h2o_internal.h"


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

/* Zero timeout, after the reads of this loop iteration: hand the surviving requests over. */
void eh2o_on_dispatch(h2o_timeout_entry_t *entry)
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

