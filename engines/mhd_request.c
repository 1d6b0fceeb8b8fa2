/* The mhd engine: libmicrohttpd's callbacks for a connection and its
 * requests (the connection's MHD thread): the connection's record from
 * NOTIFY_STARTED to NOTIFY_CLOSED, the raw target (URI log), the head
 * handed to the core and judged before any body byte, the body, the
 * dispatch, and MHD's own answers counted as the core's. */
#include "mhd_int.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A response written by the engine itself because MHD's pool cannot hold
 * its head: at most this long on the MHD thread for a slow reader. */
#define EMHD_RAW_WRITE_MS 1000

/* A request MHD closed without MHD_OPTION_NOTIFY_COMPLETED (it happens in
 * 0.9.75 on some paths after the URI callback, e.g. a NUL in a header
 * line): let go of it as notify_completed would, so its memory does not
 * leak (its "arriving" count is the connection's policy's, which its close
 * or next request settles).
 * Never for a suspended one (MHD does not close those). */
static void emhd_abandon(emhd_server *es, emhd_req *er)
{
    if (emhd_splitting == er)
        emhd_splitting = NULL;
    if (er->ec != NULL)
        er->ec->req = NULL;
    if (atomic_load(&er->hand) == EMHD_HAND_SUSPENDED)
        return;
    if (er->sbody && er->req != NULL)
        emhd_sbody_closed(er, er->conn, false);
    if (er->req != NULL) {
        if (srv__response_streamed(er->req))
            srv__stream_detach(er->req);
        srv__request_release(er->req);
        atomic_fetch_sub(&es->held, 1);
    }
    free(er);
}

/*
 * MHD is about to close the connection (NOTIFY_CLOSED; MHD_USE_TURBO, so
 * it has not shut the socket down yet).
 * - Between requests, a close MHD made on its own, with the client still
 *   there and nothing written (its thread announced no answer since: MHD
 *   announces each answer of its own first, emhd_worker), means MHD dropped a
 *   request line without a space: the core's 400 is written here, as on
 *   every engine.
 * - Then linger: keep a duplicate of the socket with its write side shut
 *   and drain it (emhd_linger_drain), so unread request bytes do not turn
 *   the close into a reset that destroys the answer (a 413 to a client
 *   still sending its body).
 */
static void emhd_closing(emhd_server *es, struct MHD_Connection *conn, emhd_conn *ec)
{
    if (ec->fd < 0 || atomic_load(&ec->upgraded)) /* a WebSocket's end: nothing to say */
        return;
    if (atomic_load(&ec->stalled)) {
        /* Ended while its answer was being written (the client does not
         * read it): a FIN would wait behind what is queued, so MHD's close
         * must reset the connection; nothing to linger for. */
        struct linger lg = {1, 0};
        (void)setsockopt(ec->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        return;
    }
    /* A query MHD could not hold (emhd_log): 0.9.75 may also close it
     * itself, without a byte (its second error on a discarded head). */
    if (atomic_exchange(&ec->lib_stuck, false) && !es->tls &&
        emhd_quiet_since(ec, atomic_load(&ec->stuck_msgs)))
        emhd_answer_raw(es, conn, ec->fd, 431, NULL, 0);
    bool stopping = atomic_load(&es->stopping) || srv__server_stopping(es->srv);
    struct pollfd p = {.fd = ec->fd, .events = POLLRDHUP};
    bool peer_gone = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    /* MHD wrote nothing since the connection went idle, and neither the
     * client nor a deadline ended it: MHD dropped a request line it could
     * not split (no space). Its other refusals of a request line (505, 414,
     * 400) are written by MHD itself; they are not logged (0.9.75 gives no
     * hook before its request callbacks, and no status once closing). */
    pthread_mutex_lock(&ec->mu);
    srv__conn *c = &ec->policy;
    /* Between requests, or a first head the gate saw begin that MHD never
     * reported (the gate's look counts its bytes as begun). */
    bool waiting = (emhd_waiting(c) || (c->state == SRV_CONN_HEAD && !ec->asked)) &&
                   srv__now_ms() < c->deadline;
    pthread_mutex_unlock(&ec->mu);
    /* Over TLS MHD's drop is a close (nothing can be written past MHD), so
     * there is no answer to count either: a failed handshake closes the
     * same way. */
    if (!es->tls && !ec->expect_close && !stopping && !peer_gone && waiting &&
        emhd_quiet_since(ec, ec->idle_msgs))
        emhd_answer_raw(es, conn, ec->fd, 400, NULL, 0);
    if (peer_gone || stopping)
        return; /* nothing to wait for, or MHD_stop_daemon closes it all */
    /* A TLS handshake that failed has no answer a reset could destroy
     * (0.9.75 sends no alert), and draining would go on taking what a
     * client past EMHD_TLS_HANDSHAKE_MAX sends. */
    if (es->tls && !atomic_load(&ec->handshaken))
        return;
    int fd = fcntl(ec->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return; /* out of descriptors: MHD's plain close */
    emhd_linger_add(es, fd);
}

void emhd_notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                            enum MHD_ConnectionNotificationCode toe)
{
    emhd_server *es = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        int fd = ci != NULL ? ci->connect_fd : -1;
        pthread_mutex_lock(&es->lock);
        emhd_handoff h = emhd_handoff_take(es, fd, 0);
        pthread_mutex_unlock(&es->lock);
        emhd_conn *ec = srv__zalloc(sizeof *ec);
        if (ec != NULL && pthread_mutex_init(&ec->mu, NULL) != 0) {
            free(ec);
            ec = NULL;
        }
        if (ec == NULL && h.found)
            srv__conn_close(&h.conn);
        if (ec != NULL) {
            /* The gate admitted it at the accept; one without a record (out
             * of memory there) is admitted and counted now. */
            if (h.found)
                ec->policy = h.conn;
            else
                (void)srv__conn_open(&ec->policy, es->srv, srv__now_ms());
            ec->fd = fd;
            ec->conn = conn;
            ec->es = es;
            ec->bad = h.bad;
            ec->good = h.good;
            pthread_mutex_lock(&es->lock);
            ec->next = es->conns;
            if (es->conns != NULL)
                es->conns->prev = ec;
            es->conns = ec;
            es->open++;
            pthread_mutex_unlock(&es->lock);
            ec->worker = es->workers != NULL ? emhd_worker_self(es, true) : NULL;
            emhd_went_idle(ec);
        }
        if (es->tls)
            emhd_tls_session(es, conn, ec);
        *socket_context = ec;
        return;
    }
    emhd_conn *ec = *socket_context;
    if (ec != NULL) {
        if (ec->req != NULL)
            emhd_abandon(es, ec->req);
        emhd_closing(es, conn, ec);
        /* Under the lock, before MHD closes the fd: quiesce never shuts
         * down a reused descriptor. */
        pthread_mutex_lock(&es->lock);
        if (ec->prev != NULL)
            ec->prev->next = ec->next;
        else
            es->conns = ec->next;
        if (ec->next != NULL)
            ec->next->prev = ec->prev;
        es->open--;
        pthread_mutex_unlock(&es->lock);
        srv__conn_close(&ec->policy); /* its slot and counts; no thread but ours has ec now */
        pthread_mutex_destroy(&ec->mu);
        emhd_gate_kick(es->gate); /* a slot is free: accept again if it stopped */
        if (ec->tls != NULL) /* MHD freed the session before this call */
            srv__tls_gnutls_release(ec->tls);
        free(ec);
        *socket_context = NULL;
    }
}

/* The request line is parsed: `uri` is the raw request-target, before MHD
 * splits the query and unescapes it in place. Its return value becomes the
 * request's con_cls. */
void *emhd_uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
{
    emhd_server *es = cls;
    size_t n = uri != NULL ? strlen(uri) : 0;
    emhd_req *er = srv__zalloc(sizeof *er + n + 1);
    if (er == NULL)
        return NULL; /* the access handler then closes the connection */
    er->es = es;
    er->conn = conn;
    er->uri = uri;
    er->target_len = n;
    if (n > 0)
        memcpy(er->target, uri, n);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    er->ec = ci != NULL ? ci->socket_context : NULL;
    if (er->ec != NULL) {
        emhd_conn *ec = er->ec;
        if (ec->req != NULL) /* never completed: not ours to keep */
            emhd_abandon(es, ec->req);
        ec->req = er;
        ec->asked = true;
        pthread_mutex_lock(&ec->mu);
        srv__conn *c = &ec->policy;
        /* Refused at the accept, its first request comes after a slot
         * freed: it is served (the policy's readmission). */
        if (!ec->reused)
            (void)srv__conn_readmit(c);
        /* A head arriving (counted for the stop's grace): the first keeps
         * the accept's deadline, a later one gets header_timeout_ms from
         * here (its request line; MHD reports no earlier byte). Not once
         * answered past MHD (SRV_CONN_LINGER): MHD is to close. */
        if (emhd_waiting(c) || c->state == SRV_CONN_HEAD || c->state == SRV_CONN_REFUSE)
            srv__conn_begun(c, srv__now_ms());
        pthread_mutex_unlock(&ec->mu);
    }
    if (uri != NULL)
        emhd_splitting = er;
    return er;
}

/* Keep the path and query raw: the core decodes the target itself. */
size_t emhd_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    if (emhd_splitting != NULL && s == emhd_splitting->uri)
        emhd_splitting = NULL; /* the path: the query is split */
    return strlen(s);
}

void emhd_notify_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    emhd_server *es = cls;
    emhd_req *er = *con_cls;
    bool head_failed = emhd_head_failed;
    emhd_head_failed = false;
    if (emhd_splitting == er)
        emhd_splitting = NULL;
    if (er == NULL)
        return;
    *con_cls = NULL;
    if (er->ec != NULL && er->ec->req == er)
        er->ec->req = NULL;
    if (er->sbody && er->req != NULL)
        emhd_sbody_closed(er, conn, toe == MHD_REQUEST_TERMINATED_WITH_ERROR);
    bool ready = atomic_load(&er->hand) == EMHD_HAND_READY;
    /* MHD could not build the head of an answer in what its connection
     * pool had left behind a big head (it logged "failed to create response
     * header", on this thread, in the call that reports the request): it
     * wrote nothing, so in cleartext the engine writes the core's answer
     * before MHD closes. The room itself is not public: no estimate
     * beforehand. Over TLS (only MHD writes) it stays a close. */
    if (head_failed && toe == MHD_REQUEST_TERMINATED_WITH_ERROR && ready && !es->tls &&
        er->phase == EMHD_REQ_ANSWERED && er->req != NULL && !er->sbody &&
        !srv__response_streamed(er->req) && er->ec != NULL && er->ec->fd >= 0) {
        er->closes = true;
        srv__request_set_close(er->req); /* before its head is framed */
        emhd_write_raw(er->ec->fd, er->req, EMHD_RAW_WRITE_MS);
    }
    if (er->phase != EMHD_REQ_ANSWERED) {
        /* MHD answered itself (431, a bad Content-Length or chunk, ...):
         * count and log it as the core's answers are. Its bytes are MHD's. */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
        unsigned code = ci != NULL ? ci->http_status : 0;
        /* It failed to build that answer's head (0.9.75 queues its 431 for
         * a Cookie it has no room to copy, then builds the head a second
         * time in a full pool): nothing went out, so the core's answer is
         * written here (cleartext only). */
        int fd = head_failed && !es->tls && er->ec != NULL ? er->ec->fd : -1;
        if (code >= 400 && code <= 599)
            emhd_answer_raw(es, conn, fd, (int)code, er->target, er->target_len);
    }
    if (er->ec != NULL) {
        /* MHD's own send timeout ended it mid-response: the client is not
         * reading, so close with a reset (emhd_closing). Not at stop: what
         * MHD already wrote to the socket must still reach the client. */
        if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED &&
            emhd_state_of(er->ec) == SRV_CONN_SEND)
            atomic_store(&er->ec->stalled, true);
        er->ec->reused = true;
        er->ec->expect_close = er->closes || !(toe == MHD_REQUEST_TERMINATED_COMPLETED_OK &&
                                 er->phase == EMHD_REQ_ANSWERED &&
                                 ready && er->req != NULL && srv__response_keep_alive(er->req));
        emhd_went_idle(er->ec); /* MHD wrote the whole answer */
        /* keepalive_timeout_ms from here; one answered past MHD lingers on */
        pthread_mutex_lock(&er->ec->mu);
        if (er->ec->policy.state != SRV_CONN_LINGER)
            srv__conn_set(&er->ec->policy, SRV_CONN_IDLE, srv__now_ms());
        pthread_mutex_unlock(&er->ec->mu);
    }
    if (atomic_load(&er->hand) == EMHD_HAND_SUSPENDED) {
        /* MHD never closes a suspended connection (it panics in
         * MHD_stop_daemon instead), so this cannot happen; if it did, a
         * worker would still call respond with this request: leak it
         * rather than free memory that respond will touch. */
        fprintf(stderr, "libsrv mhd: request closed while suspended (leaked)\n");
        return;
    }
    if (er->req != NULL) {
        if (er->file_len > 0 && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
            srv__stream_sent(er->req, (size_t)er->file_len); /* MHD sent it all */
        if (srv__response_streamed(er->req))
            srv__stream_detach(er->req); /* no kick after it: er goes */
        srv__request_release(er->req);
        atomic_fetch_sub(&es->held, 1);
    }
    free(er);
}

/* Answer with an error status found while reading (the core closes). */
static enum MHD_Result emhd_fail(emhd_req *er, struct MHD_Connection *conn, int status)
{
    /* its answer is queued next (emhd_send: the SEND deadline) */
    if (!emhd_state_from(er->ec, SRV_CONN_BODY, SRV_CONN_QUEUED))
        return MHD_NO;
    er->phase = EMHD_REQ_ANSWERED;
    er->failed = true;
    srv__request_fail(er->req, status); /* calls respond: not suspended */
    emhd_state(er->ec, SRV_CONN_APP); /* answered: no longer arriving */
    return emhd_send(er, conn);
}

/* A body that goes on past the swallow limit: write the core's answer
 * ourselves (MHD refuses a response mid-body, and its write side is idle
 * while it reads a body), best effort, then let MHD close. Over TLS only
 * the close: MHD alone can write into the TLS stream. */
static enum MHD_Result emhd_cut(emhd_req *er, struct MHD_Connection *conn)
{
    er->phase = EMHD_REQ_ANSWERED;
    srv__request_fail(er->req, er->body_status); /* calls respond: not suspended */
    (void)emhd_state_from(er->ec, SRV_CONN_BODY, SRV_CONN_APP); /* no longer arriving */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci != NULL && !er->es->tls)
        emhd_write_raw(ci->connect_fd, er->req, 0);
    return MHD_NO;
}

typedef struct emhd_headers {
    srv_request *req;
    int status;
} emhd_headers;

static enum MHD_Result emhd_add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                       size_t key_size, const char *value, size_t value_size)
{
    emhd_headers *h = cls;
    (void)kind;
    h->status = srv__request_add_header(h->req, key, key_size, value != NULL ? value : "",
                                        value != NULL ? value_size : 0);
    return h->status == 0 ? MHD_YES : MHD_NO;
}

/* Bytes [a, b) are between min and max long and each is a NUL (one of
 * MHD's separators) or, when ws is set, also a space or tab. */
static bool emhd_gap(const char *a, const char *b, size_t min, size_t max, bool ws)
{
    if (b < a || (size_t)(b - a) < min || (size_t)(b - a) > max)
        return false;
    for (; a < b; a++)
        if (*a != '\0' && !(ws && (*a == ' ' || *a == '\t')))
            return false;
    return true;
}

typedef struct emhd_walk {
    const char *pos; /* end of the previous piece of the head */
    bool ok;
} emhd_walk;

static enum MHD_Result emhd_walk_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                        size_t key_size, const char *value, size_t value_size)
{
    emhd_walk *w = cls;
    (void)kind;
    /* line end(s) before the name; the colon and blanks before the value */
    w->ok = value != NULL && emhd_gap(w->pos, key, 1, 2, false) &&
            emhd_gap(key + key_size, value, 1, SIZE_MAX, true) && key[key_size] == '\0';
    w->pos = value != NULL ? value + value_size : key;
    return w->ok ? MHD_YES : MHD_NO;
}

/*
 * MHD 0.9.75 parses the head in place as C strings, so a NUL byte silently
 * cuts a method, target or header value short ("X-User: admin\0junk" reads
 * "admin"). MHD's own NULs sit only where a separator was: after the
 * method, before the version, at each colon and line end. Walk the pieces
 * in order and require exactly that between them; anything else is a NUL
 * the client sent, or a folded (obs-fold) line that MHD moved out of the
 * head, and either is a 400 (RFC 9112 allows rejecting obs-fold).
 */
static bool emhd_head_intact(emhd_req *er, struct MHD_Connection *conn, const char *method,
                             const char *version)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (ci == NULL || method == NULL || version == NULL || er->uri == NULL)
        return false;
    const char *end = method + ci->header_size;
    const char *m_end = method + strlen(method);
    /* "METHOD\0 *target\0HTTP/x.y" */
    if (!(m_end < er->uri && er->uri + er->target_len + 1 == version && version + 8 <= end))
        return false;
    if (er->uri != m_end + 1) /* exactly one space after the method */
        return false;
    emhd_walk w = {version + 8, true};
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, emhd_walk_header, &w);
    return w.ok && w.pos <= end && emhd_gap(w.pos, end, 2, 4, false);
}

/* First call: the head is complete. Build the request and let the core
 * judge it before any body byte is consumed (MHD 0.9.75 lets
 * Content-Length with chunked, unknown codings and more through). */
static enum MHD_Result emhd_begin(emhd_server *es, emhd_req *er, struct MHD_Connection *conn,
                                  const char *method, const char *version)
{
    er->req = emhd_request_new(es, conn);
    if (er->req == NULL)
        return MHD_NO;
    atomic_fetch_add(&es->held, 1);
    srv__request_set_engine_data(er->req, er);

    /* 1.0's parser refuses a NUL itself, unfolds obs-fold, and no longer
     * splits the head in place. */
    int st = es->lib >= EMHD_LIB_1_0 || emhd_head_intact(er, conn, method, version) ? 0 : 400;
    if (st == 0)
        st = srv__request_set_method(er->req, method, strlen(method));
    if (st == 0)
        st = srv__request_set_target(er->req, er->target, er->target_len);
    if (st == 0 && er->ec != NULL && !er->ec->policy.admitted) {
        /* Past max_connections (srv__conn_open): its 503, then it lingers
         * as the policy's refusals do (and leaves those being read). */
        enum MHD_Result r = emhd_fail(er, conn, 503);
        emhd_state(er->ec, SRV_CONN_LINGER);
        return r;
    }
    if (st == 0) {
        /* MHD accepted only "HTTP/d.d" with major 1 (else it sent 400/505). */
        int major = 1, minor = 1;
        if (version != NULL && strlen(version) == 8) {
            major = version[5] - '0';
            minor = version[7] - '0';
        }
        srv__request_set_version(er->req, major, minor);
        emhd_headers h = {er->req, 0};
        MHD_get_connection_values_n(conn, MHD_HEADER_KIND, emhd_add_header, &h);
        st = h.status;
        if (st == 0)
            st = srv__request_headers_done(er->req);
    }
    if (st != 0)
        return emhd_fail(er, conn, st);
    if (srv__request_streams_body(er->req))
        return emhd_sbody_begin(es, er, conn);
    er->phase = EMHD_REQ_BODY;
    /* Expect: 100-continue is answered by MHD once this call returns
     * without a response. */
    return MHD_YES;
}

/* A piece of body: into the request, or discarded after a status. */
static enum MHD_Result emhd_body(emhd_server *es, emhd_req *er, struct MHD_Connection *conn,
                                 const char *data, size_t *size)
{
    size_t n = *size;
    *size = 0;
    if (er->phase != EMHD_REQ_ANSWERED) {
        if (!emhd_body_bytes(er->ec, SRV_CONN_BODY, n))
            return MHD_NO;
    }
    if (er->body_status == 0) {
        int st = srv__request_append_body(er->req, data, n);
        if (st != 0) {
            er->body_status = st;
            if (er->phase == EMHD_REQ_BODY)
                er->phase = EMHD_REQ_SWALLOW;
        }
        return MHD_YES;
    }
    /* MHD 0.9.75 refuses a response while the body is being read, so
     * swallow the rest (bounded) and answer at the end. */
    er->swallowed += n;
    return er->swallowed <= es->swallow_limit ? MHD_YES : emhd_cut(er, conn);
}

/* The request is complete: hand it to the core. */
static enum MHD_Result emhd_dispatch(emhd_server *es, emhd_req *er, struct MHD_Connection *conn)
{
    /* Still arriving until dispatch counts it in flight, then the
     * application's (request_timeout_ms from now). */
    if (!emhd_state_from(er->ec, SRV_CONN_BODY, SRV_CONN_QUEUED))
        return MHD_NO;
    er->phase = EMHD_REQ_ANSWERED;
    srv__request_dispatch(er->req);
    emhd_state(er->ec, SRV_CONN_APP);
    /* Answered already (404/405, a non-blocking handler, a fast worker):
     * queue it in this very call. */
    if (atomic_load(&er->hand) == EMHD_HAND_READY)
        return emhd_send(er, conn);
    /* Otherwise suspend, then say so; a respond that ran in between saw
     * INLINE and left the resume to us. */
    atomic_fetch_add(&es->outstanding, 1);
    MHD_suspend_connection(conn);
    int expected = EMHD_HAND_INLINE;
    if (!atomic_compare_exchange_strong(&er->hand, &expected, EMHD_HAND_SUSPENDED)) {
        emhd_resume(es, conn);
        atomic_fetch_sub(&es->outstanding, 1);
    }
    return MHD_YES;
}

enum MHD_Result emhd_access(void *cls, struct MHD_Connection *conn, const char *url,
                            const char *method, const char *version,
                            const char *upload_data, size_t *upload_data_size,
                            void **con_cls)
{
    emhd_server *es = cls;
    emhd_req *er = *con_cls;
    (void)url; /* decoded by MHD; the raw target came through emhd_uri_log */
    if (er == NULL)
        return MHD_NO;

    switch (er->phase) {
    case EMHD_REQ_HEAD:
        /* Head complete: the body (if any) has the policy's pace. */
        if (!emhd_state_from(er->ec, SRV_CONN_HEAD, SRV_CONN_BODY))
            return MHD_NO;
        return emhd_begin(es, er, conn, method, version); /* -> BODY or ANSWERED */
    case EMHD_REQ_BODY:
        if (*upload_data_size != 0)
            return emhd_body(es, er, conn, upload_data, upload_data_size); /* may -> SWALLOW */
        return emhd_dispatch(es, er, conn); /* -> ANSWERED */
    case EMHD_REQ_SBODY:
        return emhd_sbody(es, er, conn, upload_data, upload_data_size);
    case EMHD_REQ_SWALLOW:
        if (*upload_data_size != 0)
            return emhd_body(es, er, conn, upload_data, upload_data_size);
        return emhd_fail(er, conn, er->body_status); /* -> ANSWERED */
    default: /* EMHD_REQ_ANSWERED */
        if (*upload_data_size != 0)
            return emhd_body(es, er, conn, upload_data, upload_data_size);
        /* Resumed after respond (MHD does not call a suspended one). */
        return atomic_load(&er->hand) == EMHD_HAND_READY ? emhd_send(er, conn) : MHD_YES;
    }
}
