/*
 * WebSocket (RFC 6455): the route and its handshake (srv_route_ws), and a
 * socket's life after the 101 on a loop connection (core/srv_ws.h). The
 * framing - masking, fragments, control frames between them, UTF-8 of text
 * messages, the 1009 of an oversize message, the close handshake - is
 * wslay's event API, fed from memory: wslay_event_recv reads the bytes the
 * engine gave, wslay_event_send writes into one bounded buffer the engine
 * sends. The application's callbacks run one at a time per socket, on a
 * worker (one job at a time) or inline on the loop (SRV_WS_NONBLOCKING).
 *
 * Locks: ws->mu guards the wslay context (any thread queues messages), the
 * application's event queue and the flags other threads read; the loop
 * thread alone reads input, fills `out` and talks to the engine's srv__h1io.
 */
#include "srv_core.h"
#ifdef SRV_HAVE_WSLAY
#include "srv_ws.h"

#include <openssl/evp.h>
#include <wslay/wslay.h>
#endif

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define WS_DEF_MAX_MESSAGE 65536u
#define WS_DEF_SEND_BUFFER (1024u * 1024u)
#define WS_DEF_PING_MS 30000u
#define WS_DEF_PONG_MS 10000u
#define WS_CLOSE_WAIT_MS 2000u   /* our close sent: the client's answer within this */
#define WS_STOP_WAIT_MS 200u     /* at a stop: the same, shorter (the engine forces soon after) */
#define WS_OUT_CAP (16u * 1024u) /* one write's bytes */
#define WS_CTRL_MAX 256u         /* queued messages (pongs a ping flood asks for) before input pauses */

typedef struct srv__ws_route {
    srv_ws_opts o; /* strings point at the copies below */
    char *subprotocols;
    char *origins;
} srv__ws_route;

void srv_ws_opts_init_sized(srv_ws_opts *opts, size_t size)
{
    if (opts == NULL || size < offsetof(srv_ws_opts, ctx) + sizeof(void *) ||
        size > SRV__STRUCT_MAX_SIZE)
        return;
    memset(opts, 0, size);
    opts->size = size;
}

/* ------------------------------------------------------------------ */
/* Without wslay: no engine has SRV_CAP_WEBSOCKET                      */
/* ------------------------------------------------------------------ */
#ifndef SRV_HAVE_WSLAY

int srv_route_ws(srv_server *srv, const char *path, const srv_ws_opts *opts)
{
    if (srv == NULL || path == NULL || opts == NULL)
        return SRV_EINVAL;
    srv__server_set_error(srv, "WebSocket is not in this libsrv (built without wslay)");
    return SRV_EENGINE;
}
int srv_ws_send_text(srv_ws *ws, const char *data, size_t len)
{
    (void)ws, (void)data, (void)len;
    return SRV_EINVAL;
}
int srv_ws_send_binary(srv_ws *ws, const void *data, size_t len)
{
    (void)ws, (void)data, (void)len;
    return SRV_EINVAL;
}
int srv_ws_close(srv_ws *ws, int code, const char *reason)
{
    (void)ws, (void)code, (void)reason;
    return SRV_EINVAL;
}
const char *srv_ws_subprotocol(const srv_ws *ws)
{
    (void)ws;
    return NULL;
}
void srv_ws_set_data(srv_ws *ws, void *data)
{
    (void)ws, (void)data;
}
void *srv_ws_data(const srv_ws *ws)
{
    (void)ws;
    return NULL;
}
void srv_ws_ref(srv_ws *ws)
{
    (void)ws;
}
void srv_ws_unref(srv_ws *ws)
{
    (void)ws;
}

#else /* SRV_HAVE_WSLAY */

/* What the application is told, in order. */
enum ws_ev_kind { WS_EV_OPEN, WS_EV_MESSAGE, WS_EV_WRITABLE, WS_EV_CLOSE };

typedef struct ws_ev {
    struct ws_ev *next;
    enum ws_ev_kind kind;
    int is_text;
    int code;
    size_t len;
    char data[]; /* the message, or the close reason (NUL-terminated) */
} ws_ev;

struct srv_ws {
    atomic_int refs; /* the connection's, each queued job's, the application's */
    srv_server *srv;
    const srv__ws_route *rt;
    char *proto;     /* the chosen subprotocol, or NULL */
    void *data;      /* srv_ws_set_data */
    char *head;      /* the 101 */
    size_t head_len;
    size_t limit;    /* send_buffer_bytes */
    srv_job job;

    pthread_mutex_t mu;
    /* ---- under mu ---- */
    wslay_event_context_ptr wctx;
    const srv__h1io *ops; /* NULL until attached, and once the connection is freed */
    void *io;
    ws_ev *ev_head, *ev_tail;
    int running;        /* a drain runs or is queued: it takes every event */
    int deliver_retry;  /* the pool was full: the next tick queues it again */
    int msg_out;        /* a message is with the application: input waits */
    int want_writable;  /* a send was refused: on_writable is due when it fits */
    size_t want;
    int app_closed;     /* srv_ws_close or a stop asked for our close */
    int pend_close;     /* its code, until what was queued before it is out */
    size_t pend_rlen;
    char pend_reason[124];
    int close_code;     /* the first close (ours or the peer's): what on_close says */
    char close_reason[124];
    int ended;          /* the connection is closing: nothing more is sent */
    int open_told, close_told;
    int kick;           /* an off-loop call queued something: the loop looks */

    /* ---- the loop thread's ---- */
    srv__conn *pol;
    const char *in; /* the input being fed to wslay_event_recv */
    size_t in_len, in_off;
    char *early;    /* bytes that came with the handshake */
    size_t early_len, early_off;
    char *out;      /* WS_OUT_CAP bytes while there is something to write: an idle socket holds none */
    size_t out_len;
    int writing;
    int reading;
    int peer_eof;
    int going_away;
    int pumping;
    uint64_t last_in_ms, ping_ms, close_ms;
};

/* The socket whose events the loop thread is handling: calls from inside
 * its callbacks only mark work (the pump that runs them looks again). */
static _Thread_local srv_ws *ws_current;

static void ws_pump(srv_ws *ws);
static void ws_close_later(srv_ws *ws, int code, const char *reason, size_t rl);

/* ------------------------------------------------------------------ */
/* Lifetime                                                            */
/* ------------------------------------------------------------------ */

static void ws_destroy(srv_ws *ws)
{
    while (ws->ev_head) {
        ws_ev *e = ws->ev_head;
        ws->ev_head = e->next;
        free(e);
    }
    if (ws->wctx)
        wslay_event_context_free(ws->wctx);
    pthread_mutex_destroy(&ws->mu);
    free(ws->early);
    free(ws->out);
    free(ws->proto);
    free(ws->head);
    free(ws);
}

void srv_ws_ref(srv_ws *ws)
{
    if (ws)
        atomic_fetch_add(&ws->refs, 1);
}

void srv_ws_unref(srv_ws *ws)
{
    if (ws && atomic_fetch_sub(&ws->refs, 1) == 1)
        ws_destroy(ws);
}

const char *srv_ws_subprotocol(const srv_ws *ws)
{
    return ws ? ws->proto : NULL;
}

void srv_ws_set_data(srv_ws *ws, void *data)
{
    if (ws)
        ws->data = data;
}

void *srv_ws_data(const srv_ws *ws)
{
    return ws ? ws->data : NULL;
}

/* Have the loop look at ws (mu held). */
static void ws_kick_locked(srv_ws *ws)
{
    if (ws_current == ws)
        ws->kick = 1; /* the pump running this callback looks again */
    else if (ws->ops && !ws->ended)
        ws->ops->wake(ws->io); /* srv__h1conn_wake -> srv__ws_wake, on the loop */
}

/* ------------------------------------------------------------------ */
/* The application's callbacks                                         */
/* ------------------------------------------------------------------ */

/* mu held. 0, or -1 when out of memory. */
static int ws_push(srv_ws *ws, enum ws_ev_kind kind, int is_text, int code, const void *d,
                   size_t len)
{
    ws_ev *e = malloc(sizeof *e + len + 1);
    if (!e)
        return -1;
    e->next = NULL;
    e->kind = kind;
    e->is_text = is_text;
    e->code = code;
    e->len = len;
    if (len > 0)
        memcpy(e->data, d, len);
    e->data[len] = '\0';
    if (ws->ev_tail)
        ws->ev_tail->next = e;
    else
        ws->ev_head = e;
    ws->ev_tail = e;
    if (kind == WS_EV_MESSAGE)
        ws->msg_out = 1;
    return 0;
}

/* Run the queued callbacks, in order, until none is left (one drain at a
 * time per socket: `running`). */
static void ws_drain(srv_ws *ws)
{
    const srv_ws_opts *o = &ws->rt->o;
    for (;;) {
        pthread_mutex_lock(&ws->mu);
        ws_ev *e = ws->ev_head;
        if (!e) {
            ws->running = 0;
            pthread_mutex_unlock(&ws->mu);
            return;
        }
        ws->ev_head = e->next;
        if (!ws->ev_head)
            ws->ev_tail = NULL;
        pthread_mutex_unlock(&ws->mu);
        switch (e->kind) {
        case WS_EV_OPEN:
            if (o->on_open)
                o->on_open(ws, o->ctx);
            break;
        case WS_EV_MESSAGE:
            if (o->on_message)
                o->on_message(ws, e->is_text, e->data, e->len, o->ctx);
            pthread_mutex_lock(&ws->mu);
            ws->msg_out = 0; /* the next input may be read */
            ws_kick_locked(ws);
            pthread_mutex_unlock(&ws->mu);
            break;
        case WS_EV_WRITABLE:
            if (o->on_writable)
                o->on_writable(ws, o->ctx);
            break;
        case WS_EV_CLOSE:
            if (o->on_close)
                o->on_close(ws, e->code, e->data, o->ctx);
            break;
        }
        free(e);
    }
}

static void ws_job_run(srv_job *job)
{
    srv_ws *ws = (srv_ws *)((char *)job - offsetof(srv_ws, job));
    ws_drain(ws);
    srv_ws_unref(ws); /* the job's */
}

/* Have the queued callbacks run: inline on the loop for a non-blocking
 * route, else as one job on the pool. `last`: the connection is ending, no
 * tick will retry, so a full pool runs them here (on_close must come).
 * mu not held. */
static void ws_deliver_as(srv_ws *ws, int last)
{
    pthread_mutex_lock(&ws->mu);
    if (ws->running || !ws->ev_head) {
        pthread_mutex_unlock(&ws->mu);
        return;
    }
    ws->running = 1;
    ws->deliver_retry = 0;
    pthread_mutex_unlock(&ws->mu);
    if (ws->rt->o.flags & SRV_WS_NONBLOCKING) {
        ws_drain(ws);
        return;
    }
    srv_ws_ref(ws);
    ws->job.run = ws_job_run;
    int rc = srv__pool_submit(ws->srv, &ws->job);
    if (rc == 0)
        return;
    srv_ws_unref(ws);
    if (rc == SRV_ETOOBIG && !last) { /* the queue is full: the next tick tries again (input waits) */
        pthread_mutex_lock(&ws->mu);
        ws->running = 0;
        ws->deliver_retry = 1;
        pthread_mutex_unlock(&ws->mu);
        return;
    }
    ws_drain(ws); /* the pool is shut down (or full at the end): on_close must still come, here */
}

static void ws_deliver(srv_ws *ws)
{
    ws_deliver_as(ws, 0);
}

/* ------------------------------------------------------------------ */
/* wslay's callbacks (mu held: inside wslay_event_recv / _send)        */
/* ------------------------------------------------------------------ */

static ssize_t ws_recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags,
                          void *user)
{
    (void)flags;
    srv_ws *ws = user;
    /* One message at a time with the application, and no more replies
     * queued than a bound: the rest waits in the engine (TCP holds the
     * client back). */
    if (ws->msg_out || wslay_event_get_queued_msg_count(ctx) > WS_CTRL_MAX) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    size_t n = 0;
    if (ws->early_off < ws->early_len) {
        n = ws->early_len - ws->early_off;
        n = n < len ? n : len;
        memcpy(buf, ws->early + ws->early_off, n);
        ws->early_off += n;
    } else if (ws->in_off < ws->in_len) {
        n = ws->in_len - ws->in_off;
        n = n < len ? n : len;
        memcpy(buf, ws->in + ws->in_off, n);
        ws->in_off += n;
    }
    if (n == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    return (ssize_t)n;
}

static ssize_t ws_send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                          void *user)
{
    (void)flags;
    srv_ws *ws = user;
    size_t room = ws->writing ? 0 : WS_OUT_CAP - ws->out_len;
    if (room == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (!ws->out && !(ws->out = malloc(WS_OUT_CAP))) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE); /* the socket is dropped */
        return -1;
    }
    size_t n = len < room ? len : room;
    memcpy(ws->out + ws->out_len, data, n);
    ws->out_len += n;
    return (ssize_t)n;
}

static void ws_msg_cb(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                      void *user)
{
    (void)ctx;
    srv_ws *ws = user;
    switch (arg->opcode) {
    case WSLAY_TEXT_FRAME:
    case WSLAY_BINARY_FRAME:
        if (ws_push(ws, WS_EV_MESSAGE, arg->opcode == WSLAY_TEXT_FRAME, 0, arg->msg,
                    arg->msg_length) != 0)
            wslay_event_queue_close(ws->wctx, WSLAY_CODE_INTERNAL_SERVER_ERROR, NULL, 0);
        break;
    case WSLAY_CONNECTION_CLOSE:
        if (ws->close_code == 0) { /* the peer closed first: its code and reason */
            ws->close_code = arg->status_code ? arg->status_code : SRV_WS_NO_STATUS;
            size_t rl = arg->msg_length > 2 ? arg->msg_length - 2 : 0;
            rl = rl < sizeof ws->close_reason - 1 ? rl : sizeof ws->close_reason - 1;
            if (rl > 0)
                memcpy(ws->close_reason, arg->msg + 2, rl);
            ws->close_reason[rl] = '\0';
        }
        break;
    default: /* a ping (wslay queued its pong) or a pong: input counts as life */
        break;
    }
}

/* ------------------------------------------------------------------ */
/* The loop's side                                                     */
/* ------------------------------------------------------------------ */

/* on_close's code: the first close (ours or the peer's), else the one
 * wslay sent for an error (1002, 1007, 1009), else none happened. mu held. */
static int ws_close_code(srv_ws *ws)
{
    if (ws->close_code != 0)
        return ws->close_code;
    if (wslay_event_get_close_sent(ws->wctx))
        return wslay_event_get_status_code_sent(ws->wctx);
    return SRV_WS_ABNORMAL;
}

/* The connection is over: queue on_close (once, after on_open). mu held. */
static void ws_tell_close(srv_ws *ws)
{
    ws->ended = 1;
    if (ws->open_told && !ws->close_told) {
        ws->close_told = 1;
        int code = ws_close_code(ws);
        const char *reason = code == ws->close_code ? ws->close_reason : "";
        (void)ws_push(ws, WS_EV_CLOSE, 0, code, reason, strlen(reason));
    }
}

/* The connection ends: on_close is queued (once), the engine closes. */
static void ws_end(srv_ws *ws, int abort)
{
    pthread_mutex_lock(&ws->mu);
    if (ws->ended) {
        pthread_mutex_unlock(&ws->mu);
        return;
    }
    ws_tell_close(ws);
    pthread_mutex_unlock(&ws->mu);
    ws_deliver_as(ws, 1);
    ws->ops->close(ws->io, abort); /* last: the engine may free the connection */
}

/* wslay_event_recv: 1 when the connection must be dropped (out of memory).
 * A frame wslay's frame layer refuses (a control frame over 125 bytes or
 * fragmented, a length with its top bit) makes it queue a close without a
 * status code and stop reading: that close goes out, on_close says 1002.
 * mu held. */
static int ws_recv(srv_ws *ws)
{
    int r = wslay_event_recv(ws->wctx);
    if (r == WSLAY_ERR_CALLBACK_FAILURE && ws->close_code == 0) {
        ws->close_code = SRV_WS_PROTOCOL;
        snprintf(ws->close_reason, sizeof ws->close_reason, "protocol error");
    }
    return r != 0 && r != WSLAY_ERR_CALLBACK_FAILURE;
}

/* What wslay and the application want, once: feed input kept, send what
 * is queued, tell the application, read on or off, end when done. */
static void ws_step(srv_ws *ws)
{
    int fatal = 0, done = 0, want_read;
    pthread_mutex_lock(&ws->mu);
    ws->kick = 0;
    if (ws->early_off < ws->early_len && !ws->msg_out) {
        ws->in = NULL;
        ws->in_len = ws->in_off = 0;
        fatal = ws_recv(ws);
        if (ws->early_off == ws->early_len) { /* all read: not held for the socket's life */
            free(ws->early);
            ws->early = NULL;
            ws->early_off = ws->early_len = 0;
        }
    }
    if (ws->pend_close && wslay_event_get_queued_msg_count(ws->wctx) == 0) {
        /* What was queued before it is out: our close (refused only once the
         * peer's came first; then wslay answers that one). */
        (void)wslay_event_queue_close(ws->wctx, (uint16_t)ws->pend_close,
                                      (const uint8_t *)ws->pend_reason, ws->pend_rlen);
        ws->pend_close = 0;
    }
    if (!fatal && !ws->writing && wslay_event_want_write(ws->wctx) &&
        wslay_event_send(ws->wctx) != 0)
        fatal = 1;
    if (ws->want_writable && !ws->app_closed &&
        wslay_event_get_queued_msg_length(ws->wctx) + ws->want <= ws->limit) {
        ws->want_writable = 0;
        (void)ws_push(ws, WS_EV_WRITABLE, 0, 0, NULL, 0);
    }
    /* Closing (ours queued, sent, or an error's): the end within a deadline,
     * even when the client reads nothing more. */
    if (ws->close_ms == 0 && (ws->app_closed || wslay_event_get_close_sent(ws->wctx) ||
                              !wslay_event_get_read_enabled(ws->wctx)))
        ws->close_ms = srv__now_ms();
    int flushed = !ws->writing && ws->out_len == 0 && !wslay_event_want_write(ws->wctx);
    /* Closed both ways, or ours sent after an error (wslay reads no more). */
    if (wslay_event_get_close_sent(ws->wctx) && flushed &&
        (wslay_event_get_close_received(ws->wctx) || !wslay_event_get_read_enabled(ws->wctx)))
        done = 1;
    if (ws->peer_eof && (flushed || !wslay_event_get_write_enabled(ws->wctx)))
        done = 1;
    want_read = !ws->msg_out && !ws->peer_eof && wslay_event_want_read(ws->wctx) &&
                wslay_event_get_queued_msg_count(ws->wctx) <= WS_CTRL_MAX;
    int events = ws->ev_head != NULL && !ws->running && !ws->deliver_retry;
    pthread_mutex_unlock(&ws->mu);
    if (fatal || done) {
        ws_end(ws, fatal);
        return;
    }
    if (events)
        ws->kick = 1;
    if (want_read != ws->reading) {
        ws->reading = want_read;
        ws->ops->read(ws->io, want_read);
    }
    if (ws->out_len > 0 && !ws->writing) {
        ws->writing = 1;
        srv__buf b = {ws->out, ws->out_len};
        ws->ops->write(ws->io, &b, 1); /* may complete inside: srv__ws_written marks a kick */
    }
}

static void ws_pump(srv_ws *ws)
{
    if (ws->ended)
        return;
    srv_ws *outer = ws_current;
    ws_current = ws;
    srv_ws_ref(ws);
    ws->pumping++;
    do {
        ws_deliver(ws);
        if (ws->ended)
            break;
        ws_step(ws);
    } while (!ws->ended && ws->kick);
    ws->pumping--;
    ws_current = outer;
    srv_ws_unref(ws);
}

size_t srv__ws_input(srv_ws *ws, const char *d, size_t n)
{
    if (ws->ended || n == 0)
        return n;
    pthread_mutex_lock(&ws->mu);
    int fatal = 0;
    ws->in = d;
    ws->in_len = n;
    ws->in_off = 0;
    if (wslay_event_get_read_enabled(ws->wctx))
        fatal = ws_recv(ws);
    size_t took = wslay_event_get_read_enabled(ws->wctx) ? ws->in_off : n; /* closed: dropped */
    ws->in = NULL;
    ws->in_len = ws->in_off = 0;
    pthread_mutex_unlock(&ws->mu);
    if (took > 0) {
        ws->last_in_ms = srv__now_ms();
        ws->ping_ms = 0;
    }
    if (fatal) {
        ws_end(ws, 1);
        return n;
    }
    if (took < n && ws->reading) { /* the rest is offered again once read is on */
        ws->reading = 0;
        ws->ops->read(ws->io, 0);
    }
    ws_pump(ws);
    return took;
}

void srv__ws_eof(srv_ws *ws)
{
    if (ws->ended)
        return;
    ws->peer_eof = 1;
    ws_pump(ws);
}

void srv__ws_written(srv_ws *ws, int ok)
{
    ws->writing = 0;
    ws->out_len = 0;
    free(ws->out);
    ws->out = NULL;
    if (ws->ended)
        return;
    if (!ok) {
        ws_end(ws, 1);
        return;
    }
    if (ws->pumping)
        ws->kick = 1; /* completed inside ws_step's write: its pump goes on */
    else
        ws_pump(ws);
}

void srv__ws_wake(srv_ws *ws)
{
    ws_pump(ws);
}

void srv__ws_time(srv_ws *ws, uint64_t now, int stopping, int quiescing)
{
    if (ws->ended)
        return;
    const srv_ws_opts *o = &ws->rt->o;
    pthread_mutex_lock(&ws->mu);
    int retry = ws->deliver_retry;
    if ((stopping || quiescing) && !ws->going_away) {
        /* A stop closes every socket with 1001 (going away). */
        ws->going_away = 1;
        if (!ws->app_closed && !wslay_event_get_close_sent(ws->wctx) &&
            !wslay_event_get_close_received(ws->wctx))
            ws_close_later(ws, SRV_WS_GOING_AWAY, "server stopping", 15);
        ws->close_ms = now;
    }
    if (ws->msg_out) { /* input waits for the application: its pace, not the peer's death */
        ws->last_in_ms = now;
        ws->ping_ms = 0;
    }
    int end = 0, dead = 0;
    uint64_t wait = ws->going_away ? WS_STOP_WAIT_MS : WS_CLOSE_WAIT_MS;
    if (ws->close_ms != 0 && now - ws->close_ms >= wait)
        end = 1; /* our close got no answer in time */
    else if (ws->ping_ms != 0 && now - ws->ping_ms >= o->pong_timeout_ms)
        dead = 1; /* nothing came after our ping: the peer is gone */
    else if (ws->ping_ms == 0 && !ws->app_closed && now - ws->last_in_ms >= o->ping_interval_ms &&
             !wslay_event_get_close_sent(ws->wctx)) {
        struct wslay_event_msg ping = {WSLAY_PING, NULL, 0};
        if (wslay_event_queue_msg(ws->wctx, &ping) == 0)
            ws->ping_ms = now;
    }
    pthread_mutex_unlock(&ws->mu);
    if (end || dead) {
        ws_end(ws, dead); /* dead: reset, the peer reads nothing anyway */
        return;
    }
    if (retry)
        ws_deliver(ws);
    ws_pump(ws);
}

void srv__ws_free(srv_ws *ws)
{
    /* The engine closed the connection (ours, or its own at a stop). */
    if (!ws->ended) {
        pthread_mutex_lock(&ws->mu);
        ws_tell_close(ws);
        pthread_mutex_unlock(&ws->mu);
        ws_deliver_as(ws, 1);
    }
    pthread_mutex_lock(&ws->mu);
    ws->ops = NULL; /* no wake reaches a freed connection */
    ws->io = NULL;
    pthread_mutex_unlock(&ws->mu);
    srv_ws_unref(ws); /* the connection's */
}

/* ------------------------------------------------------------------ */
/* Sending (any thread)                                                */
/* ------------------------------------------------------------------ */

/* Our close, after the messages queued before it (wslay sends control
 * frames first). mu held. */
static void ws_close_later(srv_ws *ws, int code, const char *reason, size_t rl)
{
    ws->app_closed = 1;
    ws->pend_close = code;
    memcpy(ws->pend_reason, reason, rl);
    ws->pend_rlen = rl;
    if (ws->close_code == 0) {
        ws->close_code = code;
        memcpy(ws->close_reason, reason, rl);
        ws->close_reason[rl] = '\0';
    }
}

static int ws_send(srv_ws *ws, uint8_t opcode, const void *data, size_t len)
{
    if (ws == NULL || (data == NULL && len > 0))
        return SRV_EINVAL;
    if (len > ws->limit)
        return SRV_ETOOBIG;
    pthread_mutex_lock(&ws->mu);
    int rc = 0;
    if (ws->ended || ws->app_closed || !wslay_event_get_write_enabled(ws->wctx)) {
        rc = SRV_ECLOSED;
    } else if (wslay_event_get_queued_msg_length(ws->wctx) + len > ws->limit) {
        ws->want_writable = 1;
        ws->want = len;
        rc = SRV_EAGAIN;
    } else {
        struct wslay_event_msg m = {opcode, data ? data : (const void *)"", len};
        int r = wslay_event_queue_msg(ws->wctx, &m);
        rc = r == 0 ? 0 : r == WSLAY_ERR_NOMEM ? SRV_ENOMEM : SRV_ECLOSED;
        if (rc == 0)
            ws_kick_locked(ws);
    }
    pthread_mutex_unlock(&ws->mu);
    return rc;
}

int srv_ws_send_text(srv_ws *ws, const char *data, size_t len)
{
    return ws_send(ws, WSLAY_TEXT_FRAME, data, len);
}

int srv_ws_send_binary(srv_ws *ws, const void *data, size_t len)
{
    return ws_send(ws, WSLAY_BINARY_FRAME, data, len);
}

int srv_ws_close(srv_ws *ws, int code, const char *reason)
{
    size_t rl = reason ? strlen(reason) : 0;
    if (ws == NULL || rl > 123 ||
        !((code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) ||
          (code >= 3000 && code <= 4999)))
        return SRV_EINVAL;
    pthread_mutex_lock(&ws->mu);
    int rc = 0;
    if (ws->ended || ws->app_closed || wslay_event_get_close_sent(ws->wctx) ||
        wslay_event_get_close_received(ws->wctx)) {
        rc = SRV_ECLOSED;
    } else {
        ws_close_later(ws, code, reason ? reason : "", rl);
        ws_kick_locked(ws);
    }
    pthread_mutex_unlock(&ws->mu);
    return rc;
}

/* ------------------------------------------------------------------ */
/* The handshake                                                       */
/* ------------------------------------------------------------------ */

static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/* RFC 6455 4.2.1: the key is 16 bytes in base64, so 22 characters and "==". */
static int ws_key_ok(const char *k)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (k == NULL || strlen(k) != 24 || k[22] != '=' || k[23] != '=')
        return 0;
    for (int i = 0; i < 22; i++)
        if (k[i] == '\0' || strchr(b64, k[i]) == NULL)
            return 0;
    return 1;
}

/* The next comma-separated item of *p, trimmed: its length (0 at the end). */
static size_t ws_item(const char **p, const char **item)
{
    const char *s = *p;
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s != ',')
            break;
        s++;
    }
    const char *e = s;
    while (*e && *e != ',')
        e++;
    const char *t = e;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
        t--;
    *item = s;
    *p = e;
    return (size_t)(t - s);
}

static int ws_list_has(const char *list, const char *v, size_t vn)
{
    const char *it;
    size_t n;
    while ((n = ws_item(&list, &it)) > 0)
        if (n == vn && strncasecmp(it, v, n) == 0)
            return 1;
    return 0;
}

/* Browsers send Origin; anything else (no Origin) is not a cross-site page. */
static int ws_origin_ok(const srv__ws_route *rt, const srv_request *req)
{
    const char *origin = srv_request_header(req, "origin");
    if (origin == NULL)
        return 1;
    if (rt->origins != NULL) {
        if (strcmp(rt->origins, "*") == 0)
            return 1;
        return ws_list_has(rt->origins, origin, strlen(origin));
    }
    const char *host = srv_request_header(req, "host");
    const char *h = strstr(origin, "://");
    return host != NULL && h != NULL && strcasecmp(h + 3, host) == 0;
}

/* The first of the server's subprotocols the client asked for, or NULL. */
static char *ws_pick_proto(const srv__ws_route *rt, const srv_request *req, int *oom)
{
    const char *asked = srv_request_header(req, "sec-websocket-protocol");
    if (rt->subprotocols == NULL || asked == NULL)
        return NULL;
    const char *list = rt->subprotocols, *it;
    size_t n;
    while ((n = ws_item(&list, &it)) > 0) {
        if (ws_list_has(asked, it, n)) {
            char *p = strndup(it, n);
            *oom = p == NULL;
            return p;
        }
    }
    return NULL;
}

static void ws_refuse(srv_request *req, int status, const char *why)
{
    char body[160];
    int n = snprintf(body, sizeof body, "%s\n", why);
    srv_respond(req, status, "text/plain; charset=utf-8", body, (size_t)n);
}

/* The handshake's checks: 0 when it is one, else the status to refuse with. */
static int ws_check(const srv__ws_route *rt, srv_request *req, const char **why)
{
    const char *upgrade = srv_request_header(req, "upgrade");
    const char *conn = srv_request_header(req, "connection");
    const char *version = srv_request_header(req, "sec-websocket-version");
    const char *cl = srv_request_header(req, "content-length");
    if (req->h2 != NULL || strcmp(srv_request_method(req), "GET") != 0 ||
        req->major != 1 || req->minor < 1) {
        *why = "WebSocket needs an HTTP/1.1 GET";
        return 400;
    }
    if (upgrade == NULL || !srv__header_has_token(upgrade, "websocket") || conn == NULL ||
        !srv__header_has_token(conn, "upgrade")) {
        *why = "not a WebSocket handshake (Upgrade: websocket, Connection: Upgrade)";
        return 400;
    }
    if ((cl != NULL && strcmp(cl, "0") != 0) ||
        srv_request_header(req, "transfer-encoding") != NULL) {
        *why = "a WebSocket handshake has no body";
        return 400;
    }
    if (version == NULL) {
        *why = "no Sec-WebSocket-Version";
        return 400;
    }
    if (strcmp(version, "13") != 0) {
        *why = "Sec-WebSocket-Version 13 only";
        return 426;
    }
    if (!ws_key_ok(srv_request_header(req, "sec-websocket-key"))) {
        *why = "Sec-WebSocket-Key is not 16 bytes in base64";
        return 400;
    }
    if (!ws_origin_ok(rt, req)) {
        *why = "Origin not allowed";
        return 403;
    }
    return 0;
}

static srv_ws *ws_new(srv_request *req, const srv__ws_route *rt, char *proto)
{
    static const struct wslay_event_callbacks cbs = {
        .recv_callback = ws_recv_cb,
        .send_callback = ws_send_cb,
        .on_msg_recv_callback = ws_msg_cb,
    };
    srv_ws *ws = srv__zalloc(sizeof *ws);
    if (!ws)
        return NULL;
    if (pthread_mutex_init(&ws->mu, NULL) != 0) {
        free(ws);
        return NULL;
    }
    atomic_init(&ws->refs, 1); /* the connection's */
    ws->srv = req->srv;
    ws->rt = rt;
    ws->proto = proto;
    ws->limit = rt->o.send_buffer_bytes;
    /* Sec-WebSocket-Accept: base64(SHA-1(key + GUID)). */
    char kg[24 + sizeof ws_guid];
    snprintf(kg, sizeof kg, "%s%s", srv_request_header(req, "sec-websocket-key"), ws_guid);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    unsigned char accept[32];
    char head[512];
    int hn = -1;
    if (EVP_Digest(kg, strlen(kg), md, &mdlen, EVP_sha1(), NULL) == 1 && mdlen == 20) {
        EVP_EncodeBlock(accept, md, 20);
        hn = snprintf(head, sizeof head,
                      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s%s%s\r\n",
                      (const char *)accept, proto ? "Sec-WebSocket-Protocol: " : "",
                      proto ? proto : "", proto ? "\r\n" : "");
    }
    if (hn < 0 || (size_t)hn >= sizeof head || (ws->head = strdup(head)) == NULL ||
        wslay_event_context_server_init(&ws->wctx, &cbs, ws) != 0) {
        ws->proto = NULL; /* the caller's on failure */
        ws_destroy(ws);
        return NULL;
    }
    ws->head_len = (size_t)hn;
    wslay_event_config_set_max_recv_msg_length(ws->wctx, rt->o.max_message_bytes);
    return ws;
}

/* The route's handler: refuse, or answer 101 with a new socket. */
static void ws_handshake(srv_request *req, void *ctx)
{
    const srv__ws_route *rt = ctx;
    const char *why = NULL;
    int status = ws_check(rt, req, &why);
    if (status != 0) {
        if (status == 426)
            (void)srv_set_header(req, "Sec-WebSocket-Version", "13");
        ws_refuse(req, status, why);
        return;
    }
    if (rt->o.on_accept) {
        status = rt->o.on_accept(req, rt->o.ctx);
        if (status != 0) {
            ws_refuse(req, status >= 400 && status <= 599 ? status : 500, "refused");
            return;
        }
    }
    int oom = 0;
    char *proto = ws_pick_proto(rt, req, &oom);
    srv_ws *ws = oom ? NULL : ws_new(req, rt, proto);
    if (!ws) {
        free(proto);
        ws_refuse(req, 503, "out of memory");
        return;
    }
    if (srv__respond_upgrade(req, ws) != 0)
        srv_ws_unref(ws); /* answered meanwhile (timeout, stop, client gone) */
}

/* ------------------------------------------------------------------ */
/* The connection's side of the switch                                 */
/* ------------------------------------------------------------------ */

const char *srv__ws_head(const srv_request *req, size_t *len)
{
    *len = req->ws->head_len;
    return req->ws->head;
}

srv_ws *srv__ws_attach(srv_request *req, srv__conn *policy, const srv__h1io *ops, void *io,
                       const char *early, size_t n)
{
    srv_ws *ws = req->ws;
    req->ws = NULL;
    if (n > 0) {
        ws->early = malloc(n);
        if (!ws->early) {
            srv_ws_unref(ws);
            return NULL;
        }
        memcpy(ws->early, early, n);
        ws->early_len = n;
    }
    ws->pol = policy;
    /* The socket's own pace: pings and close deadlines (srv__ws_time), no
     * HTTP deadline. */
    srv__conn_set(policy, SRV_CONN_APP, srv__now_ms());
    ws->last_in_ms = srv__now_ms();
    pthread_mutex_lock(&ws->mu);
    ws->ops = ops;
    ws->io = io;
    ws->open_told = 1;
    int oom = ws_push(ws, WS_EV_OPEN, 0, 0, NULL, 0);
    pthread_mutex_unlock(&ws->mu);
    if (oom) {
        ws->ops = NULL;
        srv_ws_unref(ws);
        return NULL;
    }
    return ws;
}

void srv__ws_discard(srv_request *req)
{
    srv_ws *ws = req->ws;
    req->ws = NULL;
    srv_ws_unref(ws);
}

/* ------------------------------------------------------------------ */
/* The route                                                           */
/* ------------------------------------------------------------------ */

static void ws_route_free(void *ctx)
{
    srv__ws_route *rt = ctx;
    free(rt->subprotocols);
    free(rt->origins);
    free(rt);
}

int srv_route_ws(srv_server *srv, const char *path, const srv_ws_opts *opts)
{
    if (srv == NULL || path == NULL || opts == NULL ||
        opts->size < offsetof(srv_ws_opts, ctx) + sizeof(void *) ||
        opts->size > SRV__STRUCT_MAX_SIZE)
        return SRV_EINVAL;
    srv__ws_route *rt = srv__zalloc(sizeof *rt);
    if (!rt)
        return SRV_ENOMEM;
    memcpy(&rt->o, opts, opts->size < sizeof rt->o ? opts->size : sizeof rt->o);
    srv_ws_opts *o = &rt->o;
    int bad = (o->flags & ~(unsigned)SRV_WS_NONBLOCKING) != 0 ||
              o->max_message_bytes > 0x7fffffffu;
    if (o->subprotocols) { /* tokens only: they are echoed in a header */
        const char *list = o->subprotocols, *it;
        size_t n;
        while ((n = ws_item(&list, &it)) > 0)
            bad |= !srv__http_is_token(it, n);
    }
    if (o->origins)
        bad |= !srv__http_no_ctl(o->origins, strlen(o->origins), true);
    if (bad) {
        free(rt);
        return SRV_EINVAL;
    }
    unsigned caps = srv_engine_caps(srv->engine); /* with the library's bits */
    if (!(caps & SRV_CAP_WEBSOCKET)) {
        free(rt);
        srv__server_set_error(srv, "engine %s cannot serve WebSocket (srv_route_ws %s): "
                                   "see SRV_CAP_WEBSOCKET", srv->engine->name, path);
        return SRV_EENGINE;
    }
    if (srv__tls_enabled(srv) && !(caps & SRV_CAP_WEBSOCKET_TLS)) {
        free(rt);
        srv__server_set_error(srv, "engine %s cannot serve WebSocket over TLS (srv_route_ws "
                                   "%s): see SRV_CAP_WEBSOCKET_TLS", srv->engine->name, path);
        return SRV_EENGINE;
    }
    if (o->max_message_bytes == 0)
        o->max_message_bytes = WS_DEF_MAX_MESSAGE;
    if (o->send_buffer_bytes == 0)
        o->send_buffer_bytes = WS_DEF_SEND_BUFFER;
    if (o->ping_interval_ms == 0)
        o->ping_interval_ms = WS_DEF_PING_MS;
    if (o->pong_timeout_ms == 0)
        o->pong_timeout_ms = WS_DEF_PONG_MS;
    rt->subprotocols = o->subprotocols ? strdup(o->subprotocols) : NULL;
    rt->origins = o->origins ? strdup(o->origins) : NULL;
    o->subprotocols = rt->subprotocols;
    o->origins = rt->origins;
    if ((opts->subprotocols && !rt->subprotocols) || (opts->origins && !rt->origins)) {
        ws_route_free(rt);
        return SRV_ENOMEM;
    }
    /* Owned first: once the route exists its context must live as long. */
    int rc = srv__router_own(&srv->router, rt, ws_route_free);
    if (rc != 0) {
        ws_route_free(rt);
        return rc;
    }
    srv_route_opts ro;
    srv_route_opts_init(&ro);
    ro.method = "GET";
    ro.path = path;
    ro.handler = ws_handshake;
    ro.ctx = rt;
    ro.flags = (o->flags & SRV_WS_NONBLOCKING) ? SRV_ROUTE_NONBLOCKING : 0;
    return srv_route_add(srv, &ro);
}

#endif /* SRV_HAVE_WSLAY */
