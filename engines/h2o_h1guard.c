/*
 * The h2o engine's HTTP/1 framing guard (libh2o-evloop 2.2.5), on the loop threads: every
 * byte of an HTTP/1 connection is checked here before h2o's parser sees it.
 */
#include "h2o_internal.h"
#include "srv_http1.h"

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
    EH2O_H1_STREAM, /* a streamed body: every byte after its head is engines/h2o_body.c's */
    EH2O_H1_DEAD /* answered or handed to HTTP/2: pass everything through */
};

void eh2o_h1_on_read(h2o_socket_t *sock, const char *err);
static void eh2o_h1_on_written(h2o_socket_t *sock, const char *err);
static void eh2o_h1_on_inject(h2o_timeout_entry_t *entry);
static int eh2o_h1_hold_prepend(eh2o_conn *c, const char *p, size_t n);

eh2o_conn *eh2o_sock_conn(h2o_socket_t *sock)
{
    return sock->on_close.cb == eh2o_on_conn_close ? sock->on_close.data : NULL;
}

/* Some bytes of a request are in: the guard is inside a head or a body. */
static int eh2o_h1_partial(const eh2o_conn *c)
{
    /* A streamed body is the core's request once h2o handed it over (seq == served). */
    return c->h1.phase != EH2O_H1_DEAD && c->h1.phase != EH2O_H1_STREAM &&
           (c->h1.phase != EH2O_H1_HEAD || c->h1.head_len != 0);
}

/*
 * The copies of heads waiting for on_req take more than a head may (max_header_bytes) while
 * some scanned head has not reached on_req: the guard scans no further for now (eh2o_h1_scan
 * holds the rest of the read) and takes the held bytes up again once h2o has served those.
 */
static int eh2o_h1_ready_full(const eh2o_conn *c)
{
    return c->h1.ready_bytes > c->thread->server->cfg->max_header_bytes &&
           c->h1.seq != c->h1.served;
}

/* h2o waits for input and some is held: after a streamed body's answer, once fewer copies
 * of heads wait, or behind a piece that ended inside a request. */
static int eh2o_h1_wants_held(const eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    return c->h1.held_len != 0 && c->h1.sb == NULL && c->h1.phase != EH2O_H1_DEAD &&
           !c->h1.answering && sock->_cb.read == eh2o_h1_on_read && sock->_cb.write == NULL &&
           !eh2o_h1_ready_full(c);
}

/*
 * srv_server_stop's grace period waits for requests still arriving (srv__request_arriving):
 * an HTTP/1 connection counts from the first byte of a request line (empty lines before it do
 * not count) until h2o handed the request to on_req (served catches up with seq), the guard
 * answered it, or the connection closed. Called after every h2o call (eh2o_h1_after), so the
 * -1 comes after on_req's dispatch or fail has counted the request in flight.
 */
void eh2o_h1_note(eh2o_conn *c)
{
    int on = !c->h1.off && !c->h1.answering && c->sock != NULL &&
             (c->h1.bad != 0 || eh2o_h1_partial(c) ||
              (c->h1.phase != EH2O_H1_DEAD && c->h1.seq != c->h1.served));
    if (on == c->h1.arriving)
        return;
    c->h1.arriving = on;
    srv__request_arriving(c->thread->server->srv, on ? 1 : -1);
}

/* h2o waits for the first byte of a next request, nothing of one is in, nothing is written. */
int eh2o_h1_idle(eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    return c->h1.reqread != NULL && !c->h1.off && !c->h1.answering && !c->h1.arriving &&
           c->h1.phase == EH2O_H1_HEAD && c->h1.head_len == 0 && c->h1.bad == 0 &&
           c->h1.sb == NULL && c->h1.held_len == 0 &&
           sock->_cb.read == eh2o_h1_on_read && sock->_cb.write == NULL && sock->input->size == 0;
}

/* Close through h2o's HTTP/1 read-error path (it disposes its request and the socket). */
void eh2o_h1_close(eh2o_conn *c)
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
    h2o_timeout_link(c->thread->loop, &c->thread->linger_timeout, &c->h1.linger);
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
void eh2o_h1_write_answer(eh2o_conn *c, srv_request *sreq)
{
    size_t hl, bl;
    const char *head = srv__response_http1_head(sreq, &hl);
    const void *body = srv__response_body(sreq, &bl);
    h2o_socket_t *sock = c->sock;
    c->h1.phase = EH2O_H1_DEAD;
    if (c->h1.preface && head != NULL) { /* not HTTP/1: a GOAWAY it understands */
        head = srv__h2_preface_refusal(&hl);
        bl = 0;
    }
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
    eh2o_ticket *tk = sreq != NULL ? srv__zalloc(sizeof *tk) : NULL;
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
    eh2o_h1_note(c);                 /* counted by the core now: no longer arriving */
}

/*
 * The engine's stop slot, after the grace period: a request whose head or body is still
 * arriving gets the core's 503, then the connection closes (as threadpool and mhd do).
 * Only while h2o waits for it (it reads, writes nothing): otherwise the connection is closed
 * with the others. Returns 1 when answered.
 */
int eh2o_h1_stop_arriving(eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    if (c->h1.reqread == NULL || c->h1.off || c->h1.answering || !eh2o_h1_partial(c) ||
        sock->_cb.read != eh2o_h1_on_read || sock->_cb.write != NULL)
        return 0;
    srv_request *sreq = c->h1.req; /* a body being read: its head names it in the log */
    c->h1.req = NULL;
    eh2o_h1_answer(c, sreq, 503);
    return 1;
}

/*
 * What an HTTP/1 connection may hold unread. h2o 2.2.5 keeps reading a pipelining connection
 * while it serves a request (handler, then write), and each read drains the kernel's buffer:
 * a client that pipelines and never reads had all it sent (megabytes) held in sock->input.
 * h2o takes the requests one at a time, so reading stops once the input holds more than it
 * can use; the kernel's buffers then hold the rest and the client's sends block (as on the
 * other engines, which read one request at a time). h2o itself starts reading again when
 * it is done with the request (reqread_start, after the answer is written), and this check
 * runs again there: the buffered requests are served first, each read is still scanned once.
 *  - A request being served (given to the core, or its answer being written): h2o needs no
 *    input until it is done, so the input may hold one more head (read-ahead for the next
 *    pipelined request, as before) beyond what is already in.
 *  - Otherwise h2o may wait for the rest of a request: past max_header_bytes + max_body_bytes
 *    (h2o de-chunks in place; the slack covers framing not yet decoded) the current request is
 *    complete, so h2o serves it, and the first case applies.
 * Once the buffered requests are served h2o reads again, and its read loop drains the socket
 * in one go: with the kernel's receive buffer autotuned to megabytes, one read brought in
 * megabytes (seen: 3-4 MB). So an HTTP/1 connection gets a fixed receive buffer
 * (EH2O_H1_RCVBUF, the kernel doubles it) at accept (TLS: its first read), before autotuning
 * grows it (set later, the window already offered still lets megabytes in): a read brings in
 * at most that.
 * The cost: an upload's TCP window is at most that (256 KB: 20 MB/s at 10 ms RTT).
 */
#define EH2O_H1_UNREAD_SLACK 65536

void eh2o_h1_bound_input(eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    if (sock->_cb.read != eh2o_h1_on_read)
        return; /* not reading, or h2o reads for itself (linger, HTTP/2) */
    if (!c->h1.rcvbuf_set) {
        int size = EH2O_H1_RCVBUF;
        setsockopt(h2o_socket_get_fd(sock), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
        c->h1.rcvbuf_set = 1;
    }
    const srv_config *cfg = c->thread->server->cfg;
    int serving = c->h1.served != c->h1.responded || sock->_cb.write != NULL;
    size_t limit = cfg->max_header_bytes + EH2O_H1_UNREAD_SLACK;
    if (!serving)
        limit += cfg->max_body_bytes;
    /* Held bytes (after a streamed body, or past the copies' budget) are unread input too;
     * but when they are about to be put back (eh2o_h1_on_inject) h2o waits for them. */
    if (sock->input->size + c->h1.held_len <= limit || h2o_timeout_is_linked(&c->h1.inject))
        return;
    h2o_socket_read_stop(sock); /* h2o's reqread_start reads again */
}

/* After any h2o call on an HTTP/1 connection that is still open: our callbacks back in. */
void eh2o_h1_after(eh2o_conn *c)
{
    h2o_socket_t *sock = c->sock;
    if (c->h1.off || c->h1.answering) {
        if (c->h1.off)
            eh2o_h2_begin(c); /* prior knowledge: counted there before uncounted here */
        eh2o_h1_note(c);
        return;
    }
    if (sock->_cb.read != NULL && sock->_cb.read != eh2o_h1_on_read &&
        sock->_cb.read != c->h1.reqread) {
        c->h1.off = 1; /* h2c upgrade done: HTTP/2 now */
        /* No HTTP/1 on_req comes for the upgrade's head (h2o serves it as stream 1) nor for
         * any head behind it: their copies and requests go now, not at the close. */
        eh2o_h1_ready_clear(c);
        eh2o_h2_begin(c);
        eh2o_h1_note(c);
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
        return;
    }
    if (eh2o_h1_wants_held(c) && !h2o_timeout_is_linked(&c->h1.inject)) {
        c->h1.inject.cb = eh2o_h1_on_inject;
        h2o_timeout_link(c->thread->loop, &c->thread->zero, &c->h1.inject);
    }
    eh2o_h1_bound_input(c);
    eh2o_h1_note(c);
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

/*
 * A write completed, or failed (the client reset, or the send deadline shut the socket).
 * h2o 2.2.5's on_send_complete ignores a failure and takes the next request of the input,
 * so a pipelining client cut by the send deadline had every request already buffered (the
 * guard holds up to a receive buffer of them) run its handler and fail its write in turn
 * before a read saw the end: seconds of handlers for a dead connection. After a failure
 * on_req takes nothing more (eh2o_on_req) and the connection closes once h2o is done.
 */
static void eh2o_h1_on_written(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    h2o_socket_cb cb = c->h1.wrote;
    c->h1.wrote = NULL;
    h2o_timeout_unlink(&c->h1.send);
    if (err != NULL)
        c->h1.write_failed = 1;
    if (!eh2o_h1_call(c, cb, sock, err))
        return;
    /* h2o may have started a write in its callback (a pipelined h2c upgrade's 101, which
     * frees its HTTP/2 connection only in that write's callback): it fails through h2o's
     * own callback, which closes. */
    if (err != NULL && sock->_cb.write == NULL)
        eh2o_h1_close(c);
    else
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
 * A streamed body's head (its route has SRV_ROUTE_STREAM_BODY): h2o must see a request without
 * a body, so that it dispatches at the head and never reads the body. In h2o's input the
 * framing header becomes "Content-Length:" + blanks + "0" (the same length: h2o's offsets
 * stay; a Content-Length also makes h2o copy the head out of the input, which the body's
 * reads may move), and Expect (h2o would send its own 100 Continue) and Upgrade (no h2c
 * switch with a body in flight) are hidden. The core's request already has the client's head.
 */
static int eh2o_h1_stream_head(eh2o_conn *c, const eh2o_head *h, const char *head, size_t len,
                               size_t buf_at, srv_request **sreq_out)
{
    char *raw = c->sock->input->bytes + buf_at;
    if (buf_at + len > c->sock->input->size || memcmp(raw, head, len) != 0)
        return 500; /* the input always holds the head h2o has not parsed yet */
    int chunked = c->h1.phase == EH2O_H1_CHUNK_SIZE;
    uint64_t length = c->h1.phase == EH2O_H1_BODY ? c->h1.left : 0;
    for (size_t i = 0; i < h->nheaders; i++) {
        const struct eh2o_phr_header *x = &h->headers[i];
        size_t off = (size_t)(x->name - head);
        if (h2o_lcstris(x->name, x->name_len, H2O_STRLIT("transfer-encoding")) ||
            h2o_lcstris(x->name, x->name_len, H2O_STRLIT("content-length"))) {
            /* name ':' value: 16 bytes at least ("Content-Length:5"), 25 for chunked */
            size_t span = (size_t)(x->value - head) + x->value_len - off; /* values: in head */
            memcpy(raw + off, "Content-Length:", 15);
            memset(raw + off + 15, ' ', span - 16);
            raw[off + span - 1] = '0';
        } else if (h2o_lcstris(x->name, x->name_len, H2O_STRLIT("expect")) ||
                   h2o_lcstris(x->name, x->name_len, H2O_STRLIT("upgrade"))) {
            raw[off] = '~';
        }
    }
    srv_request *sreq = *sreq_out;
    eh2o_ready_free(c->h1.scan); /* not for eh2o_h1_take_ready: on_req takes it from the body */
    c->h1.scan = NULL;
    if (eh2o_body_begin(c, sreq, chunked, length) != 0)
        return 500;
    *sreq_out = NULL; /* the body's now, then the ticket's */
    c->h1.phase = EH2O_H1_STREAM;
    return 0;
}

/*
 * A complete head, head[0..len) (in the socket's input, or the copy of a head that came in
 * pieces): the core's rules, then its body framing. Returns 0 or the status to answer
 * (*sreq_out is then the request to answer with, or NULL).
 */
static int eh2o_h1_head_done(eh2o_conn *c, const char *head, size_t len, size_t buf_at,
                             srv_request **sreq_out)
{
    eh2o_thread *t = c->thread;
    eh2o_head parsed, *h = &parsed;
    h->nheaders = EH2O_MAX_HEADERS;
    *sreq_out = NULL;
    if (phr_parse_request(head, len, &h->method, &h->method_len, &h->target,
                          &h->target_len, &h->minor, h->headers, &h->nheaders, 0) != (int)len)
        h->method = NULL;
    struct sockaddr_storage peer;
    socklen_t plen = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
    srv_request *sreq =
        srv__request_new(t->server->srv, plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    if (sreq == NULL)
        return 500;
    *sreq_out = sreq;
    if (h->method == NULL) {
        /* Refused by picohttpparser: the request line, when it has the usual three parts,
         * still names the request in the access log (the helpers refuse what is not valid). */
        const char *p = head, *end = head + len;
        while (p < end && (*p == '\r' || *p == '\n'))
            p++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *sp1 = eol != NULL ? memchr(p, ' ', (size_t)(eol - p)) : NULL;
        const char *sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
        if (sp2 != NULL && srv__request_set_method(sreq, p, (size_t)(sp1 - p)) == 0)
            srv__request_set_target(sreq, sp1 + 1, (size_t)(sp2 - sp1 - 1));
        size_t lines = 0;
        for (size_t k = 0; k < len; k++)
            lines += head[k] == '\n';
        if (lines > EH2O_MAX_HEADERS + 2) /* request line + headers + the empty line */
            return 431; /* too many header fields: picohttpparser takes 100 */
        return eh2o_h1_bad_version(head, len) ? 505 : 400;
    }
    c->h1.seq++;
    /* A copy of the head for on_req, taken before the masking below (a previous one is left
     * only by a head answered here: a bad body). */
    eh2o_ready_free(c->h1.scan);
    c->h1.scan = malloc(sizeof *c->h1.scan + len);
    if (c->h1.scan != NULL) {
        *c->h1.scan = (eh2o_ready){.seq = c->h1.seq, .len = len};
        memcpy(c->h1.scan->head, head, len);
    }
    int st = eh2o_fill_raw(sreq, h);
    if (st == 0)
        st = srv__request_headers_done(sreq);
    if (st != 0)
        return st;
    c->h1.phase = EH2O_H1_HEAD;
    /* A streamed body's head hides Upgrade and Expect on every version (eh2o_h1_stream_head),
     * and its request comes with its body: nothing to put back in on_req. */
    int streams = srv__request_streams_body(sreq);
    size_t mask_at[2];
    int nmask = 0;
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
        } else if (!streams && h->minor == 0 && nmask < 2 &&
                   (h2o_lcstris(x->name, x->name_len, H2O_STRLIT("upgrade")) ||
                    h2o_lcstris(x->name, x->name_len, H2O_STRLIT("expect")))) {
            /* RFC 9110 7.8: no Upgrade on HTTP/1.0 (h2o would answer 101); 10.1.1: no 100
             * Continue to HTTP/1.0 (h2o would send one). Hide the header from h2o by changing
             * one byte in its input; on_req puts it back (from this head's copy, so each of
             * several pipelined heads keeps its own) before the core reads the head. */
            size_t off = (size_t)(x->name - head);
            const char *raw = c->sock->input->bytes + buf_at;
            if (buf_at + len <= c->sock->input->size && memcmp(raw, head, len) == 0)
                mask_at[nmask++] = off;
        }
    }
    if (nmask != 0) {
        eh2o_ready *e = c->h1.scan;
        if (e == NULL)
            return 500; /* no copy to put them back from: the app would see "~pgrade" */
        for (int k = 0; k < nmask; k++) { /* after the loop: the memcmp saw the client's bytes */
            e->mask_at[k] = mask_at[k];
            e->mask_ch[k] = head[mask_at[k]];
            c->sock->input->bytes[buf_at + mask_at[k]] = '~'; /* a tchar h2o knows no token by */
        }
        e->nmask = nmask;
    }
    if (streams)
        return eh2o_h1_stream_head(c, h, head, len, buf_at, sreq_out);
    c->h1.req = sreq; /* its body is scanned next, or it is complete (eh2o_h1_request_done) */
    *sreq_out = NULL;
    return 0;
}

void eh2o_ready_free(eh2o_ready *e)
{
    if (e != NULL && e->req != NULL)
        srv__request_release(e->req);
    free(e);
}

/* Every head waiting for on_req, and the one being scanned: the connection is closing, or
 * speaks HTTP/2 after an h2c upgrade (no HTTP/1 on_req comes for them). */
void eh2o_h1_ready_clear(eh2o_conn *c)
{
    while (c->h1.ready != NULL) {
        eh2o_ready *e = c->h1.ready;
        c->h1.ready = e->next;
        eh2o_ready_free(e);
    }
    c->h1.ready_last = NULL;
    c->h1.ready_reqs = 0;
    c->h1.ready_bytes = 0;
    eh2o_ready_free(c->h1.scan);
    c->h1.scan = NULL;
}

/* h2o's input starts with the head the guard copied: the same bytes but for the case of
 * letters in header names, which h2o lower-cases in place as it parses a head. */
static int eh2o_h1_same_bytes(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i] && !(b[i] >= 'A' && b[i] <= 'Z' && a[i] == b[i] - 'A' + 'a'))
            return 0;
    return 1;
}

static int eh2o_h1_same_head(const h2o_buffer_t *in, const eh2o_ready *e)
{
    if (in->size < e->len)
        return 0;
    /* Eight bytes at a time: most words of a head hold no upper-case letter of a name (this
     * runs once per request on the inline path, where a byte loop cost ~500 instructions). */
    const char *a = in->bytes, *b = e->head;
    size_t i = 0;
    for (; i + 8 <= e->len; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y && !eh2o_h1_same_bytes(a + i, b + i, 8))
            return 0;
    }
    return eh2o_h1_same_bytes(a + i, b + i, e->len - i);
}

/* A request from the copy of a head the guard checked already: the client's spelling. */
static srv_request *eh2o_h1_build(eh2o_conn *c, const eh2o_ready *e)
{
    eh2o_head h;
    h.nheaders = EH2O_MAX_HEADERS;
    if (phr_parse_request(e->head, e->len, &h.method, &h.method_len, &h.target, &h.target_len,
                          &h.minor, h.headers, &h.nheaders, 0) != (int)e->len)
        return NULL;
    struct sockaddr_storage peer;
    socklen_t plen = h2o_socket_getpeername(c->sock, (struct sockaddr *)&peer);
    srv_request *sreq =
        srv__request_new(c->thread->server->srv, plen != 0 ? (struct sockaddr *)&peer : NULL, plen);
    if (sreq != NULL && (eh2o_fill_raw(sreq, &h) != 0 || srv__request_headers_done(sreq) != 0)) {
        srv__request_release(sreq);
        sreq = NULL;
    }
    return sreq;
}

/*
 * on_req (after h1.served counts it): the request for this head, when the guard scanned it and
 * h2o's input starts with the very bytes it was built from (once the head's hidden bytes are
 * back: its Upgrade/Expect, an HTTP/1.0 head's, eh2o_h1_head_done) - the
 * guard's own request (its clock restarts, as if built now) or one built from the copy. NULL
 * otherwise (on_req builds its own from h2o's input, as without the guard). Heads h2o went
 * past without an on_req (answers of h2o's own) are let go.
 */
srv_request *eh2o_h1_take_ready(eh2o_conn *c)
{
    eh2o_ready *e;
    while ((e = c->h1.ready) != NULL && (int)(e->seq - c->h1.served) <= 0) {
        if ((c->h1.ready = e->next) == NULL)
            c->h1.ready_last = NULL;
        if (e->req != NULL)
            c->h1.ready_reqs--;
        c->h1.ready_bytes -= sizeof *e + e->len;
        if (e->seq == c->h1.served)
            break;
        eh2o_ready_free(e);
    }
    if (e == NULL || e->seq != c->h1.served)
        return NULL; /* none, or the next waiting one is behind a request still on its way */
    h2o_buffer_t *in = c->sock->input;
    for (int k = 0; k < e->nmask; k++)
        if (e->mask_at[k] < in->size && in->bytes[e->mask_at[k]] == '~')
            in->bytes[e->mask_at[k]] = e->mask_ch[k];
    srv_request *r = NULL;
    if (eh2o_h1_same_head(c->sock->input, e)) {
        if ((r = e->req) != NULL) {
            e->req = NULL;
            srv__request_restart_clock(r);
        } else {
            r = eh2o_h1_build(c, e);
        }
    }
    eh2o_ready_free(e); /* nothing stays with an idle connection */
    return r;
}

/* The request being scanned is complete: the copy of its head waits for on_req, with the
 * request while few others keep theirs. */
static void eh2o_h1_request_done(eh2o_conn *c)
{
    eh2o_ready *e = c->h1.scan;
    c->h1.scan = NULL;
    if (e != NULL) {
        if (c->h1.req != NULL && c->h1.ready_reqs < EH2O_H1_READY_REQS) {
            e->req = c->h1.req;
            c->h1.req = NULL;
            c->h1.ready_reqs++;
        }
        if (c->h1.ready_last != NULL)
            c->h1.ready_last->next = e;
        else
            c->h1.ready = e;
        c->h1.ready_last = e;
        c->h1.ready_bytes += sizeof *e + e->len;
    }
    if (c->h1.req != NULL) {
        srv__request_release(c->h1.req);
        c->h1.req = NULL;
    }
    c->h1.phase = EH2O_H1_HEAD;
    c->h1.head_len = 0;
    c->h1.completed++;
}

/*
 * The client's HTTP/2 preface: h2o switches to HTTP/2 and would parse the frames that follow
 * at once, before eh2o_h2_begin puts the walk in front of it (engines/h2o_http2.c), which
 * takes the DATA of streamed bodies: when some route streams its body, they wait in held
 * (the walk is given them when it is in place) and h2o sees only the preface.
 */
static void eh2o_h1_hold_frames(eh2o_conn *c)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    h2o_buffer_t *in = c->sock->input;
    size_t pl = sizeof preface - 1;
    if (in->size <= pl || memcmp(in->bytes, preface, pl) != 0 ||
        !srv__server_streams_bodies(c->thread->server->srv))
        return;
    /* Before any held ones (the preface came in a piece of them). */
    if (eh2o_h1_hold_prepend(c, in->bytes + pl, in->size - pl) != 0)
        return; /* h2o parses them: their bodies are buffered, not streamed */
    in->size = pl;
}

/*
 * Bytes the guard does not scan yet, in the order they came: what followed a streamed body
 * (engines/h2o_body.c), frames held at the switch to HTTP/2, the rest of a read past the
 * copies' budget (eh2o_h1_scan). They are the held_len bytes at held + held_off, taken from
 * the front a piece at a time (eh2o_h1_on_inject): a read of a receive buffer's worth of
 * heads drains in pieces without moving the rest each time (when the whole of it went back
 * to the input and most of it was held again for every few heads served, a 2 KB request cost
 * 200 KB copied twice: seconds of CPU per connection under a sanitizer). Appends after the
 * held bytes; -1 when out of memory.
 */
int eh2o_h1_hold_append(eh2o_conn *c, const char *p, size_t n)
{
    if (c->h1.held_off != 0 && c->h1.held_off >= c->h1.held_len) { /* reuse the taken room */
        memmove(c->h1.held, c->h1.held + c->h1.held_off, c->h1.held_len);
        c->h1.held_off = 0;
    }
    char *nb = realloc(c->h1.held, c->h1.held_off + c->h1.held_len + n);
    if (nb == NULL)
        return -1;
    memcpy(nb + c->h1.held_off + c->h1.held_len, p, n);
    c->h1.held = nb;
    c->h1.held_len += n;
    return 0;
}

/* Bytes that came before the held ones (what the scan did not take of a piece): back in
 * front of them, in the room the piece left when there is. -1 when out of memory. */
static int eh2o_h1_hold_prepend(eh2o_conn *c, const char *p, size_t n)
{
    if (c->h1.held_off < n) {
        char *nb = malloc(n + c->h1.held_len);
        if (nb == NULL)
            return -1;
        if (c->h1.held_len != 0)
            memcpy(nb + n, c->h1.held + c->h1.held_off, c->h1.held_len);
        free(c->h1.held);
        c->h1.held = nb;
        c->h1.held_off = n;
    }
    c->h1.held_off -= n;
    memcpy(c->h1.held + c->h1.held_off, p, n);
    c->h1.held_len += n;
    return 0;
}

/* The head just scanned streams its body: the held bytes come after what the scan gave the
 * body (the rest of its piece), so the body takes them too, in order, and what follows its
 * end is held again (engines/h2o_body.c) before any later read. -1 when out of memory. */
static int eh2o_h1_held_to_body(eh2o_conn *c)
{
    if (c->h1.held_len == 0 || c->h1.sb == NULL)
        return 0;
    if (eh2o_body_hold(c->h1.sb, c->h1.held + c->h1.held_off, c->h1.held_len) != 0)
        return -1;
    free(c->h1.held);
    c->h1.held = NULL;
    c->h1.held_off = c->h1.held_len = 0;
    return 0;
}

/*
 * Scan the *np new bytes at the end of the input. Returns 0, or the status of the first
 * violation with *bad_at = its request's first byte among the new ones (SIZE_MAX when it began
 * earlier) and *sreq_out its request (or NULL). Empty lines before a request line are taken
 * out of the input (*np and the input shrink): picohttpparser skips one, the core any number
 * within max_header_bytes (RFC 9112 2.2), so h2o must not see them.
 */
static int eh2o_h1_scan(eh2o_conn *c, char *p, size_t *np, size_t *bad_at,
                        srv_request **sreq_out)
{
    size_t n = *np;
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
            if (c->h1.head_len == 0 && eh2o_h1_ready_full(c)) {
                /* One read may bring a whole receive buffer of tiny pipelined heads (a client
                 * that never reads: 128 KB is ~5,000 of 26 bytes), and a copy of each would
                 * wait: the rest waits as bytes in held, h2o serves those scanned first, and
                 * eh2o_h1_after puts the rest back once fewer copies wait (each head is still
                 * copied once). The input bound counts held bytes: no more is read meanwhile. */
                if (eh2o_h1_hold_prepend(c, p + i, n - i) != 0)
                    EH2O_BAD(500);
                c->sock->input->size -= n - i;
                *np = i;
                return 0;
            }
            if (c->h1.head_len == 0 && (ch == '\r' || ch == '\n' || c->h1.cr)) {
                /* CRLFs before the request line, as the core's parser: skipped, any number
                 * within max_header_bytes (431 past it); a bare LF or a CR without its LF
                 * is 400. The whole run is taken out at once (a flood costs O(n)). */
                size_t j = i;
                for (; j < n && (p[j] == '\r' || p[j] == '\n' || c->h1.cr); j++) {
                    if (p[j] == '\r' && !c->h1.cr) {
                        c->h1.cr = 1;
                    } else if (p[j] == '\n' && c->h1.cr) {
                        c->h1.cr = 0;
                        if (++c->h1.empty_lines > cfg->max_header_bytes / 2)
                            EH2O_BAD(431);
                    } else {
                        EH2O_BAD(400);
                    }
                }
                memmove(p + i, p + j, n - j);
                *np = n -= j - i;
                c->sock->input->size -= j - i;
                continue;
            }
            if (c->h1.head_len == 0)
                c->h1.empty_lines = 0;
            size_t old = c->h1.head_len, take = n - i;
            if (take > head_max - old)
                take = head_max - old;
            /* A head that starts in this read is scanned where it lies in the input; only
             * one that arrives in pieces is copied (c->h1.head), so a connection keeps no
             * head buffer of its own while its request waits. */
            const char *hb = p + i;
            if (old != 0) {
                memcpy(c->h1.head + old, p + i, take);
                hb = c->h1.head;
            }
            size_t cut = old + take;
            /* The head ends at the first empty line (picohttpparser skips leading CRLFs). */
            size_t s = 0;
            while (s < cut && (hb[s] == '\r' || hb[s] == '\n'))
                s++;
            /* From line feed to line feed (memchr), and in a pieced head only past what the
             * pieces before were scanned for: a head trickled byte by byte costs its length,
             * not its length squared. */
            size_t end = 0;
            for (size_t k = s > old ? s : old > 0 ? old : 1; k < cut; k++) {
                const char *lf = memchr(hb + k, '\n', cut - k);
                if (lf == NULL)
                    break;
                k = (size_t)(lf - hb);
                if (hb[k - 1] == '\n' || (k >= 2 && hb[k - 1] == '\r' && hb[k - 2] == '\n')) {
                    end = k + 1;
                    break;
                }
            }
            if (cut >= 14 && memcmp(hb + s, "PRI * HTTP/2.0", 14) == 0) {
                if (c->h1.seq != 0) {
                    /* Prior knowledge starts a connection (RFC 9113 3.3): after HTTP/1
                     * requests h2o 2.2.5 would switch mid-connection, past the guard. Refused
                     * as threadpool refuses a preface, once the requests before it are
                     * answered (eh2o_h1_write_answer writes the GOAWAY). */
                    c->h1.preface = 1;
                    EH2O_BAD(505);
                }
                c->h1.phase = EH2O_H1_DEAD; /* prior knowledge: h2o switches to HTTP/2 */
                c->h1.off = 1;
                eh2o_h1_hold_frames(c);
                return 0;
            }
            if (end == 0) {
                if (cut >= head_max) {
                    c->h1.head_len = 0;
                    /* A head too big because of its target is 414, as the core's parser
                     * answers; else 431. */
                    const char *lf = memchr(hb + s, '\n', cut - s);
                    size_t line = lf != NULL ? (size_t)(lf - (hb + s)) : cut - s;
                    if (lf == NULL || line > cfg->max_uri_bytes)
                        EH2O_BAD(srv__http1_long_line_status(hb + s, line, cfg->max_uri_bytes));
                    EH2O_BAD(431);
                }
                if (old == 0) { /* the rest comes in a later read: keep what is here */
                    if (c->h1.head == NULL && (c->h1.head = malloc(head_max)) == NULL)
                        EH2O_BAD(500);
                    memcpy(c->h1.head, p + i, take);
                }
                c->h1.head_len = cut;
                i += take;
                break;
            }
            i += end - old; /* the bytes after the head are the body or the next request */
            c->h1.head_len = end;
            size_t buf_at = c->sock->input->size - n + i - end;
            srv_request *sreq;
            int st = eh2o_h1_head_done(c, hb, end, buf_at, &sreq);
            if (hb == c->h1.head) { /* the pieced head is parsed: let its copy go */
                free(c->h1.head);
                c->h1.head = NULL;
            }
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
            else if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                EH2O_BAD(400); /* a bare LF or control byte in an extension */
            else if (++c->h1.line > head_max)
                EH2O_BAD(431); /* like a head or trailers over max_header_bytes */
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
        case EH2O_H1_STREAM: /* the rest is the streamed body's, and what follows it */
            if (eh2o_body_hold(c->h1.sb, p + i, n - i) != 0)
                EH2O_BAD(500);
            c->sock->input->size -= n - i;
            *np = i;
            if (eh2o_h1_held_to_body(c) != 0)
                EH2O_BAD(500);
            return 0;
        default: /* EH2O_H1_DEAD */
            return 0;
        }
        if (c->h1.phase == EH2O_H1_HEAD && c->h1.head_len == 0)
            req_at = i;
    }
    /* A streamed body's head that ended with these bytes: nothing of its body in them. */
    if (c->h1.phase == EH2O_H1_STREAM && eh2o_h1_held_to_body(c) != 0)
        EH2O_BAD(500);
#undef EH2O_BAD
    return 0;
}

/*
 * h2o parses a head where it lies in the socket's input and points into it (method, path,
 * header values) until the answer is written, so a request waiting for its answer keeps the
 * whole read buffer (4 KiB, EH2O_SOCKET_BUFFER) for a head of a few hundred bytes: 2700
 * waiting requests held 10 MiB that way. Before h2o parses, when the input is only this
 * read's bytes (no earlier request's head in it, so nothing of h2o's points into it yet)
 * and ends with complete heads, they move to a buffer of their size and the big one goes
 * back to h2o's per-thread recycler for the next read. h2o frees the small one once the
 * answer is written (h2o_buffer_consume; its capacity is not the prototype's, so it is
 * free()d), and the next read takes a 4 KiB buffer again. A later read into it while the
 * request waits (a pipelined one) grows it by h2o's own doubling, which h2o allows for:
 * it reads a request's body only after copying its head out (fixup_request), and stops
 * reading while a request without one is served.
 */
static void eh2o_h1_compact(eh2o_conn *c, size_t n)
{
    h2o_buffer_t *in = c->sock->input;
    if (in->size != n || n == 0 || n > in->capacity / 4 || in->_fd != -1 ||
        c->h1.completed == 0 || c->h1.phase != EH2O_H1_HEAD || c->h1.head_len != 0 ||
        c->h1.served != c->h1.responded || c->sock->_cb.write != NULL)
        return;
    h2o_buffer_t *small = malloc(offsetof(h2o_buffer_t, _buf) + n);
    if (small == NULL)
        return; /* the big one serves */
    small->capacity = n;
    small->size = n;
    small->bytes = small->_buf;
    small->_prototype = in->_prototype;
    small->_fd = -1;
    memcpy(small->_buf, in->bytes, n); /* offsets (mask_at) stay those of the input's start */
    c->sock->input = small;
    h2o_buffer__do_free(in);
}

/* The n bytes at the end of the input are new (a read, or the held bytes put back). */
static void eh2o_h1_input(eh2o_conn *c, size_t n, const char *err)
{
    h2o_socket_t *sock = c->sock;
    if (err == NULL && c->h1.bad != 0) { /* h2o waits for a head: the bad one's turn */
        int status = c->h1.bad;
        srv_request *sreq = c->h1.bad_req;
        c->h1.bad = 0;
        c->h1.bad_req = NULL;
        eh2o_h1_answer(c, sreq, status);
        return;
    }
    if (err == NULL && c->h1.phase != EH2O_H1_DEAD && n != 0 && n <= sock->input->size) {
        size_t bad_at;
        srv_request *sreq;
        c->h1.completed = 0;
        int st = eh2o_h1_scan(c, sock->input->bytes + sock->input->size - n, &n, &bad_at, &sreq);
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
        if (st == 0)
            eh2o_h1_compact(c, n);
    }
    if (eh2o_h1_call(c, c->h1.reqread, sock, err))
        eh2o_h1_after(c);
}


/* The first `take` held bytes (all when fewer) into the input before its last n bytes, which
 * came after them (so n != 0 wants all of them). The new bytes' count, or SIZE_MAX out of
 * memory. */
static size_t eh2o_h1_unhold_some(eh2o_conn *c, size_t n, size_t take)
{
    size_t k = c->h1.held_len < take ? c->h1.held_len : take;
    if (h2o_buffer_reserve(&c->sock->input, k).base == NULL)
        return SIZE_MAX;
    char *at = c->sock->input->bytes + c->sock->input->size - n;
    memmove(at + k, at, n);
    memcpy(at, c->h1.held + c->h1.held_off, k);
    c->sock->input->size += k;
    c->h1.held_off += k;
    c->h1.held_len -= k;
    if (c->h1.held_len == 0) {
        free(c->h1.held);
        c->h1.held = NULL;
        c->h1.held_off = 0;
    }
    return n + k;
}

size_t eh2o_h1_unhold(eh2o_conn *c, size_t n)
{
    return eh2o_h1_unhold_some(c, n, SIZE_MAX);
}

/*
 * Feed the held bytes to h2o a piece (room for the scan to fill the copies' budget with
 * heads) at a time while it waits for input, within this call: no read comes between two
 * pieces, so the held bytes cannot grow while a request larger than a piece is taken, and a
 * request whose bytes are all here is never seen half-arrived between loop turns.
 */
static void eh2o_h1_feed_held(eh2o_conn *c)
{
    size_t piece = 2 * ((size_t)c->thread->server->cfg->max_header_bytes + 4);
    int closed = 0, *outer = c->h1.closed;
    c->h1.closed = &closed;
    while (eh2o_h1_wants_held(c)) {
        size_t before = c->h1.held_len;
        size_t n = eh2o_h1_unhold_some(c, 0, piece);
        if (n == SIZE_MAX) {
            eh2o_h1_close(c);
            break;
        }
        eh2o_h1_input(c, n, NULL);
        if (closed || c->h1.held_len >= before)
            break; /* freed, or the scan took nothing (it held all back) */
    }
    if (closed) {
        if (outer != NULL)
            *outer = 1;
        return;
    }
    c->h1.closed = outer;
}

void eh2o_h1_on_read(h2o_socket_t *sock, const char *err)
{
    eh2o_conn *c = eh2o_sock_conn(sock);
    size_t n = err == NULL && sock->bytes_read <= sock->input->size ? sock->bytes_read : 0;
    if (c->h1.phase == EH2O_H1_STREAM && c->h1.sb != NULL) {
        if (err == NULL) {
            eh2o_body_on_read(c, n); /* the body's bytes, or what follows it */
            return;
        }
        if (eh2o_h1_call(c, c->h1.reqread, sock, err)) /* h2o closes, the request is cancelled */
            eh2o_h1_after(c);
        return;
    }
    if (c->h1.held_len != 0 && err == NULL) { /* they came first: the new bytes go after */
        if (eh2o_h1_hold_append(c, sock->input->bytes + sock->input->size - n, n) != 0) {
            eh2o_h1_close(c);
            return;
        }
        sock->input->size -= n;
        eh2o_h1_feed_held(c);
        return;
    }
    eh2o_h1_input(c, n, err);
}

/* h2o waits for the next request (after a streamed body's answer, or once fewer copies of
 * heads wait): the held bytes are its input now, scanned as if just read. When it no longer
 * waits (yet), eh2o_h1_after links this again. */
static void eh2o_h1_on_inject(h2o_timeout_entry_t *entry)
{
    eh2o_h1_feed_held(H2O_STRUCT_FROM_MEMBER(eh2o_conn, h1.inject, entry));
}

/* engines/h2o_body.c is done with c's streamed body (its answer came): a complete body lets
 * the connection go on (what followed it waits in held), one cut short closes it after the
 * answer, lingering so the client, which may still be sending, reads the answer. */
void eh2o_h1_body_done(eh2o_conn *c, int complete)
{
    if (complete) {
        c->h1.phase = EH2O_H1_HEAD;
        c->h1.head_len = 0;
        int size = EH2O_H1_RCVBUF; /* back to the pipelining bound (eh2o_body_begin raised it) */
        setsockopt(h2o_socket_get_fd(c->sock), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
        return;
    }
    c->h1.phase = EH2O_H1_DEAD;
    if (!c->h1.lingers) {
        int fd = dup(h2o_socket_get_fd(c->sock));
        if (fd >= 0) {
            c->h1.linger_fd = fd;
            c->h1.lingers = 1;
        }
    }
}
