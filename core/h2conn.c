/*
 * HTTP/2 over an event loop (core/srv_h2conn.h): nghttp2's server session
 * without I/O (bytes in with mem_recv, frames out with mem_send) carries a
 * connection's streams; each stream is a srv_request of the core, answered
 * through the same slots as HTTP/1's. The connection policy
 * (core/connections.c) keeps its deadlines; what nghttp2 leaves to a
 * server - resets before an answer (rapid reset), slow header blocks and
 * bodies, windows that never open, the stop - is decided here.
 */
#include "srv_core.h"
#include "srv_h2conn.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* nghttp2 1.61 renamed the calls that take or return ssize_t. */
#if NGHTTP2_VERSION_NUM >= 0x013d00
typedef nghttp2_ssize h2_ssize;
typedef nghttp2_data_provider2 h2_provider;
#define h2_mem_recv nghttp2_session_mem_recv2
#define h2_mem_send nghttp2_session_mem_send2
#define h2_submit_response nghttp2_submit_response2
#else
typedef ssize_t h2_ssize;
typedef nghttp2_data_provider h2_provider;
#define h2_mem_recv nghttp2_session_mem_recv
#define h2_mem_send nghttp2_session_mem_send
#define h2_submit_response nghttp2_submit_response
#endif

/* Streams open at once (SETTINGS_MAX_CONCURRENT_STREAMS), as nginx and h2o. */
#define H2_MAX_STREAMS 100
/* Receive windows: a stream's (SETTINGS_INITIAL_WINDOW_SIZE), given back as the application
 * takes its body; the connection's, given back as DATA arrive. What paused applications hold
 * is bounded by H2_HOLD_MAX a connection: past it the socket is not read (TCP holds the
 * client back) until they take some. */
#define H2_STREAM_WINDOW (16 << 20)
#define H2_CONN_WINDOW (16 << 20)
#define H2_HOLD_MAX (24u << 20)
/* A stream's window comes back in pieces this big (what is owed below it leaves the client
 * the rest of H2_STREAM_WINDOW). */
#define H2_STREAM_REFUND (1u << 20)
/* Held body bytes go to the application in pieces of at most a default frame. */
#define H2_PIECE 16384
/* Frames gathered into one write. */
#define H2_OUT_MAX (64u * 1024u)
/* The write buffer an idle connection keeps (a small answer's frames). */
#define H2_OUT_KEEP (16u * 1024u)
/* Resets of streams not answered yet: past this many, and more than the
 * streams answered, the client resets to make the server work for nothing
 * (CVE-2023-44487): GOAWAY ENHANCE_YOUR_CALM. */
#define H2_RESETS_MAX 100

/* Where a stream is. */
enum h2s_state {
    H2S_HEAD,  /* its header block arriving */
    H2S_BODY,  /* its whole body arriving */
    H2S_READY, /* complete: dispatched once the read that completed it is parsed */
    H2S_APP,   /* dispatched or failed: its answer is awaited */
    H2S_SEND,  /* its answer submitted */
    H2S_DONE   /* the answer is out (or never will be): the close comes */
};

/* A streamed request body. */
enum h2s_body { H2B_READ, H2B_DONE, H2B_OVER };

typedef struct srv__h2stream srv__h2stream;
struct srv__h2stream {
    srv__h2conn *c;
    int32_t id;
    srv_request *req;
    enum h2s_state state;
    int fail;       /* the head's status once complete (0: fine) */
    int have_path;
    int expect;     /* expect: 100-continue */
    int bstream;    /* the route streams the body */
    enum h2s_body bmode;
    int bcont;      /* its 100 sent, or not due */
    int remote_done; /* END_STREAM came */
    int dropping;   /* body bytes are dropped (answered, failed, stopped) */
    int deferred;   /* the answer's stream said WAIT */
    size_t body_off;
    char *cookie;   /* cookie crumbs, joined (RFC 9113 8.2.3) */
    size_t cookie_len;
    char *held;     /* body bytes that came while the application paused */
    size_t held_off, held_len, held_cap;
    size_t held_now; /* of the DATA frame being read */
    size_t owed;     /* window to give back to the stream */
    srv__h2stream *prev, *next, *ready_next;
    /* Under c->mu. */
    int answered, posted;
    srv__h2stream *post_next;
};

struct srv__h2conn {
    srv_server *srv;
    srv__conn *pol;
    const srv__h1io *ops;
    void *io;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    nghttp2_session *s;
    srv__h2stream *streams;
    unsigned nstreams;
    srv__h2stream *ready, **ready_tail;
    char *out;
    size_t out_len, out_cap;
    srv__buf outbuf;
    int writing;
    int reading;
    int running, again;
    int want_close; /* 1: close, 2: reset; at the end of the outer run */
    int ended;      /* ops->close was called */
    int lingering;
    int peer_gone;
    int broken;     /* nghttp2 gave up (its GOAWAY goes out first) */
    int goaway;     /* a GOAWAY is queued: close once no stream is left */
    int began;      /* a stream began: idle is IDLE, not FIRST */
    unsigned resets, answers;
    size_t owed; /* window to give back to the connection */
    size_t held; /* body bytes its streams hold */
    int counted;    /* arriving streams counted beyond the policy's own */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv__h2stream *posted;
};

/* The connection whose events the loop thread is handling. */
static _Thread_local srv__h2conn *h2_current;

static void h2_run(srv__h2conn *c);

/* ------------------------------------------------------------------ */
/* Small steps                                                         */
/* ------------------------------------------------------------------ */

static srv__h2stream *h2_stream(srv__h2conn *c, int32_t id)
{
    return nghttp2_session_get_stream_user_data(c->s, id);
}

static int h2_answered(srv__h2stream *st)
{
    pthread_mutex_lock(&st->c->mu);
    int a = st->answered;
    pthread_mutex_unlock(&st->c->mu);
    return a;
}

static void h2_read(srv__h2conn *c, int on)
{
    if (c->reading != on) {
        c->reading = on;
        c->ops->read(c->io, on);
    }
}

/* The end: at once, or at the end of the run that asked (nothing of c may
 * be touched after ops->close). */
static void h2_end(srv__h2conn *c, int abort)
{
    if (c->running) {
        if (c->want_close < 1 + abort)
            c->want_close = 1 + abort;
        return;
    }
    c->ended = 1;
    c->ops->close(c->io, abort);
}

/* n held body bytes the application took or that were dropped: the stream's window. */
static void h2_consume(srv__h2conn *c, srv__h2stream *st, size_t n)
{
    st->owed += n;
    c->held -= n;
}

static void h2_drop_held(srv__h2conn *c, srv__h2stream *st)
{
    h2_consume(c, st, st->held_len - st->held_off);
    st->held_off = st->held_len = 0;
}

/* The windows given back, once a run: one WINDOW_UPDATE for the connection, one a stream. */
static void h2_windows(srv__h2conn *c)
{
    for (srv__h2stream *st = c->streams; st; st = st->next) {
        if (st->remote_done || st->state == H2S_DONE)
            st->owed = 0;
        if (st->owed < H2_STREAM_REFUND)
            continue;
        nghttp2_submit_window_update(c->s, NGHTTP2_FLAG_NONE, st->id, (int32_t)st->owed);
        st->owed = 0;
    }
    if (c->owed)
        nghttp2_submit_window_update(c->s, NGHTTP2_FLAG_NONE, 0, (int32_t)c->owed);
    c->owed = 0;
}

static int h2_hold(srv__h2stream *st, const uint8_t *d, size_t n)
{
    if (st->held_off > 0 && st->held_off == st->held_len)
        st->held_off = st->held_len = 0;
    return srv__buf_append(&st->held, &st->held_len, &st->held_cap, 16384, d, n);
}

/* An interim "100 Continue" on the stream. */
static void h2_continue(srv__h2conn *c, srv__h2stream *st)
{
    static const nghttp2_nv nv[] = {
        {(uint8_t *)":status", (uint8_t *)"100", 7, 3, NGHTTP2_NV_FLAG_NONE}};
    nghttp2_submit_headers(c->s, NGHTTP2_FLAG_NONE, st->id, NULL, nv, 1, NULL);
}

/* Answer a stream whose request cannot go on (the core's answer). */
static void h2_fail(srv__h2stream *st, int status)
{
    st->state = H2S_APP;
    st->dropping = 1;
    srv__request_fail(st->req, status); /* respond: posted, answered */
}

/* ------------------------------------------------------------------ */
/* Streams arriving                                                    */
/* ------------------------------------------------------------------ */

static void h2_ready(srv__h2conn *c, srv__h2stream *st)
{
    st->state = H2S_READY;
    st->ready_next = NULL;
    *c->ready_tail = st;
    c->ready_tail = &st->ready_next;
}

static void h2_unready(srv__h2conn *c, srv__h2stream *st)
{
    srv__h2stream **p = &c->ready;
    while (*p && *p != st)
        p = &(*p)->ready_next;
    if (*p)
        *p = st->ready_next;
    c->ready_tail = &c->ready;
    while (*c->ready_tail)
        c->ready_tail = &(*c->ready_tail)->ready_next;
}

/* The header block is complete. */
static void h2_head_done(srv__h2conn *c, srv__h2stream *st, int end)
{
    srv_request *req = st->req;
    st->remote_done = end;
    if (!st->fail && st->cookie)
        st->fail = srv__request_add_header(req, "cookie", 6, st->cookie, st->cookie_len);
    if (!st->fail && !st->have_path)
        st->fail = 400;
    if (!st->fail)
        st->fail = srv__request_headers_done(req);
    if (st->fail) {
        h2_fail(st, st->fail);
        return;
    }
    if (end) {
        h2_ready(c, st);
        return;
    }
    if (c->pol->admitted && srv__request_streams_body(req)) {
        st->bstream = 1;
        st->bmode = H2B_READ;
        st->bcont = !st->expect;
        h2_ready(c, st);
        return;
    }
    st->state = H2S_BODY;
    if (st->expect)
        h2_continue(c, st);
}

static void h2_body_end(srv__h2conn *c, srv__h2stream *st)
{
    st->remote_done = 1;
    if (st->state == H2S_BODY)
        h2_ready(c, st);
}

static int h2_on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    srv__h2conn *c = ud;
    (void)s;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    srv__h2stream *st = srv__zalloc(sizeof *st);
    srv_request *req = st ? srv__request_new(c->srv,
                                             c->peer_len ? (const struct sockaddr *)&c->peer : NULL,
                                             c->peer_len)
                          : NULL;
    if (!req) {
        free(st);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM INTERNAL_ERROR */
    }
    srv__request_set_version(req, 2, 0);
    req->h2 = st;
    st->c = c;
    st->id = f->hd.stream_id;
    st->req = req;
    st->state = H2S_HEAD;
    st->next = c->streams;
    if (c->streams)
        c->streams->prev = st;
    c->streams = st;
    c->nstreams++;
    c->began = 1;
    nghttp2_session_set_stream_user_data(c->s, st->id, st);
    return 0;
}

#define H2_IS(name, len, lit) ((len) == sizeof(lit) - 1 && memcmp((name), (lit), (len)) == 0)

static int h2_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                        size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
    srv__h2conn *c = ud;
    (void)s;
    (void)flags;
    if (f->hd.type != NGHTTP2_HEADERS)
        return 0;
    srv__h2stream *st = h2_stream(c, f->hd.stream_id);
    if (!st || st->state != H2S_HEAD || st->fail) /* trailers are not kept */
        return 0;
    const char *n = (const char *)name, *v = (const char *)value;
    int r = 0;
    if (nlen > 0 && n[0] == ':') { /* nghttp2 checked which, and their order */
        if (H2_IS(n, nlen, ":method")) {
            r = srv__request_set_method(st->req, v, vlen);
        } else if (H2_IS(n, nlen, ":path")) {
            r = srv__request_set_target(st->req, v, vlen);
            st->have_path = 1;
        } else if (H2_IS(n, nlen, ":authority")) {
            r = srv__request_add_header(st->req, "host", 4, v, vlen);
        }
    } else if (H2_IS(n, nlen, "cookie")) {
        size_t need = st->cookie_len + (st->cookie ? 2 : 0) + vlen + 1;
        char *p = realloc(st->cookie, need);
        if (!p) {
            r = 500;
        } else {
            if (st->cookie_len || st->cookie) {
                memcpy(p + st->cookie_len, "; ", 2);
                st->cookie_len += 2;
            }
            memcpy(p + st->cookie_len, v, vlen);
            st->cookie_len += vlen;
            p[st->cookie_len] = '\0';
            st->cookie = p;
        }
    } else {
        if (H2_IS(n, nlen, "expect") && vlen == 12 && strncasecmp(v, "100-continue", 12) == 0)
            st->expect = 1;
        r = srv__request_add_header(st->req, n, nlen, v, vlen);
    }
    if (r)
        st->fail = r;
    return 0;
}

/* Past H2_RESETS_MAX resets of streams not answered, more than were
 * answered: GOAWAY ENHANCE_YOUR_CALM and stop reading. */
static int h2_reset_counted(srv__h2conn *c, srv__h2stream *st)
{
    if (!st || st->state >= H2S_SEND)
        return 0;
    if (++c->resets <= H2_RESETS_MAX || c->resets <= c->answers)
        return 0;
    nghttp2_session_terminate_session(c->s, NGHTTP2_ENHANCE_YOUR_CALM);
    c->broken = 1;
    return NGHTTP2_ERR_CALLBACK_FAILURE; /* mem_recv returns: nothing more is read */
}

static int h2_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    srv__h2conn *c = ud;
    (void)s;
    srv__h2stream *st = f->hd.stream_id ? h2_stream(c, f->hd.stream_id) : NULL;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        if (!st)
            break;
        if (st->state == H2S_HEAD)
            h2_head_done(c, st, (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
        else if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) /* trailers */
            h2_body_end(c, st);
        break;
    case NGHTTP2_DATA:
        /* Its window: the connection's at once, the stream's but for what is held. */
        c->owed += f->hd.length;
        if (!st)
            break;
        st->owed += f->hd.length - st->held_now;
        st->held_now = 0;
        if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
            h2_body_end(c, st);
        break;
    case NGHTTP2_RST_STREAM:
        return h2_reset_counted(c, st);
    default:
        break;
    }
    return 0;
}

static int h2_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t n,
                      void *ud)
{
    srv__h2conn *c = ud;
    (void)s;
    (void)flags;
    srv__h2stream *st = h2_stream(c, id);
    if (!st || st->dropping || st->state >= H2S_SEND || (st->bstream && st->bmode != H2B_READ))
        return 0; /* dropped: the frame's window comes back at its end */
    if (c->pol->state == SRV_CONN_BODY || c->pol->state == SRV_CONN_BODY_STREAM)
        srv__conn_body_bytes(c->pol, n, srv__now_ms());
    if (!st->bstream) {
        int r = srv__request_append_body(st->req, d, n);
        if (r)
            h2_fail(st, r); /* 413 */
        return 0;
    }
    /* A streamed body: the application's while it takes, held while it pauses (at most the
     * stream's window: what is held is not consumed). */
    if (st->held_off == st->held_len && st->bcont && st->state == H2S_APP &&
        srv__body_state(st->req) == SRV__BODY_GO) {
        int k = srv__body_data(st->req, d, n);
        if (k == SRV__BODY_OVER)
            st->bmode = H2B_OVER;
        return 0;
    }
    if (h2_hold(st, d, n) != 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    st->held_now += n;
    c->held += n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Answers                                                             */
/* ------------------------------------------------------------------ */

static h2_ssize h2_on_read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
                                uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    srv__h2stream *st = src->ptr;
    (void)s;
    (void)id;
    (void)ud;
    if (!srv__response_streamed(st->req)) {
        size_t blen = 0;
        const char *b = srv__response_body(st->req, &blen);
        size_t n = blen - st->body_off < len ? blen - st->body_off : len;
        memcpy(buf, b + st->body_off, n);
        st->body_off += n;
        if (st->body_off == blen)
            *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (h2_ssize)n;
    }
    const void *d = NULL;
    size_t dl = 0;
    switch (srv__stream_pull(st->req, &d, &dl)) {
    case SRV__STREAM_WAIT: /* a kick resumes it */
        st->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    case SRV__STREAM_END:
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    case SRV__STREAM_DATA: {
        size_t n = dl < len ? dl : len;
        memcpy(buf, d, n);
        srv__stream_sent(st->req, n);
        return (h2_ssize)n;
    }
    default: /* cut: RST_STREAM, the client sees no END_STREAM */
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
}

/* Headers HTTP/2 forbids in a message (RFC 9113 8.2.2). */
static int h2_connection_specific(const char *name)
{
    return strcasecmp(name, "connection") == 0 || strcasecmp(name, "keep-alive") == 0 ||
           strcasecmp(name, "proxy-connection") == 0 ||
           strcasecmp(name, "transfer-encoding") == 0 || strcasecmp(name, "upgrade") == 0;
}

/* The answer's HEADERS (and its DATA through h2_on_read_body). -1: out of memory. */
static int h2_submit(srv__h2conn *c, srv__h2stream *st)
{
    srv_request *req = st->req;
    int status = srv__response_status(req);
    size_t n = srv__response_header_count(req), names = 0;
    for (size_t i = 0; i < n; i++) {
        const char *v, *name = srv__response_header_at(req, i, &v);
        names += name ? strlen(name) : 0;
    }
    nghttp2_nv *nv = malloc((n + 3) * sizeof *nv + names + 1);
    if (!nv)
        return -1;
    char *lc = (char *)(nv + n + 3);
    char sbuf[8], clen[24], date[SRV__HTTP_DATE_SIZE];
    size_t k = 0;
    int sl = snprintf(sbuf, sizeof sbuf, "%d", status);
    nv[k++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)sbuf, 7, (size_t)sl, 0};
    for (size_t i = 0; i < n; i++) {
        const char *v, *name = srv__response_header_at(req, i, &v);
        if (!name)
            break;
        if (h2_connection_specific(name))
            continue;
        size_t nl = strlen(name);
        for (size_t j = 0; j < nl; j++) /* HTTP/2 names are lower case */
            lc[j] = (unsigned char)(name[j] - 'A') < 26 ? (char)(name[j] | 0x20) : name[j];
        nv[k++] = (nghttp2_nv){(uint8_t *)lc, (uint8_t *)v, nl, strlen(v), 0};
        lc += nl;
    }
    int streamed = srv__response_streamed(req), bodiless;
    int64_t length;
    size_t blen = 0;
    if (streamed) {
        bodiless = srv__response_stream_bodiless(req);
        length = srv__response_stream_length(req);
    } else {
        (void)srv__response_body(req, &blen);
        length = (int64_t)srv__response_content_length(req);
        bodiless = blen == 0;
    }
    if (length >= 0 && status >= 200 && status != 204 && status != 304) {
        int cl = snprintf(clen, sizeof clen, "%lld", (long long)length);
        nv[k++] = (nghttp2_nv){(uint8_t *)"content-length", (uint8_t *)clen, 14, (size_t)cl, 0};
    }
    srv__http_date(date);
    nv[k++] = (nghttp2_nv){(uint8_t *)"date", (uint8_t *)date, 4, strlen(date), 0};
    h2_provider prd = {.source.ptr = st, .read_callback = h2_on_read_body};
    int rv = h2_submit_response(c->s, st->id, nv, k, bodiless ? NULL : &prd);
    free(nv);
    st->state = H2S_SEND;
    return rv == 0 ? 0 : -1;
}

/* The answer came: the body (if still arriving) is over, the answer goes out. */
static void h2_answer(srv__h2conn *c, srv__h2stream *st)
{
    if (st->bstream) {
        if (st->bmode != H2B_DONE)
            st->dropping = 1; /* what is still sent is dropped, then RST_STREAM NO_ERROR */
        srv__body_detach(st->req);
        h2_drop_held(c, st);
    }
    c->answers++;
    if (h2_submit(c, st) != 0)
        nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

static int h2_on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    srv__h2conn *c = ud;
    (void)s;
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    srv__h2stream *st = h2_stream(c, f->hd.stream_id);
    if (!st || st->state != H2S_SEND)
        return 0;
    st->state = H2S_DONE;
    if (!st->remote_done) /* answered before the body's end (RFC 9113 8.1) */
        nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    return 0;
}

/* ------------------------------------------------------------------ */
/* A stream's end                                                      */
/* ------------------------------------------------------------------ */

/* Let go of a stream (nghttp2 closed it, or the connection goes). */
static void h2_stream_free(srv__h2conn *c, srv__h2stream *st)
{
    srv_request *req = st->req;
    int dispatched = st->state >= H2S_APP;
    if (st->state == H2S_READY)
        h2_unready(c, st);
    srv__h2conn *outer = h2_current;
    h2_current = c; /* a cancel's respond needs no wake */
    if (dispatched && !h2_answered(st) && !srv__request_cancel(req)) {
        /* Answered from another thread meanwhile: its respond may not have reached st. */
        pthread_mutex_lock(&c->mu);
        while (!st->answered)
            pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
    }
    if (dispatched) {
        if (st->bstream)
            srv__body_detach(req);
        if (srv__response_streamed(req))
            srv__stream_detach(req);
    }
    h2_current = outer;
    pthread_mutex_lock(&c->mu);
    if (st->posted) {
        srv__h2stream **p = &c->posted;
        while (*p != st)
            p = &(*p)->post_next;
        *p = st->post_next;
    }
    pthread_mutex_unlock(&c->mu);
    if (st->prev)
        st->prev->next = st->next;
    else
        c->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    c->nstreams--;
    c->held -= st->held_len - st->held_off;
    srv__request_release(req);
    free(st->cookie);
    free(st->held);
    free(st);
}

static int h2_on_stream_close(nghttp2_session *s, int32_t id, uint32_t error, void *ud)
{
    srv__h2conn *c = ud;
    srv__h2stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (!st)
        return 0;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    if (error == NGHTTP2_PROTOCOL_ERROR && st->bstream && st->state == H2S_APP &&
        st->bmode == H2B_READ) {
        /* Malformed (a content-length the DATA did not match, RFC 9113 8.1.1): nghttp2
         * reset the stream; the application reading it is told it was a bad request. */
        st->bmode = H2B_OVER;
        srv__h2conn *outer = h2_current;
        h2_current = c;
        srv__body_end(st->req, 400);
        h2_current = outer;
    }
    h2_stream_free(c, st);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The run: what other threads posted, dispatch, bodies, writes         */
/* ------------------------------------------------------------------ */

static srv__h2stream *h2_take_post(srv__h2conn *c, int *answered)
{
    pthread_mutex_lock(&c->mu);
    srv__h2stream *st = c->posted;
    if (st) {
        c->posted = st->post_next;
        st->posted = 0;
        *answered = st->answered;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static void h2_posts(srv__h2conn *c)
{
    srv__h2stream *st;
    int answered = 0;
    while ((st = h2_take_post(c, &answered)) != NULL) {
        if (answered && st->state == H2S_APP)
            h2_answer(c, st);
        else if (st->state == H2S_SEND && st->deferred) {
            st->deferred = 0;
            nghttp2_session_resume_data(c->s, st->id);
        }
    }
}

static void h2_dispatch(srv__h2conn *c)
{
    srv__h2stream *st;
    while (!c->broken && (st = c->ready) != NULL) {
        c->ready = st->ready_next;
        if (!c->ready)
            c->ready_tail = &c->ready;
        st->state = H2S_APP;
        srv__request_dispatch(st->req); /* may respond here */
    }
}

/* A streamed body moves while the application wants it (as core/h1conn.c's h1_body). */
static void h2_body(srv__h2conn *c, srv__h2stream *st)
{
    if (!st->bstream || st->state != H2S_APP || st->bmode != H2B_READ || h2_answered(st))
        return;
    int k = srv__body_state(st->req);
    if (k == SRV__BODY_OVER) {
        st->bmode = H2B_OVER;
        st->dropping = 1;
        h2_drop_held(c, st);
        return;
    }
    if (k != SRV__BODY_GO)
        return;
    if (!st->bcont) { /* the application wants the body: tell the client */
        st->bcont = 1;
        h2_continue(c, st);
    }
    while (st->held_off < st->held_len && st->bmode == H2B_READ) {
        size_t n = st->held_len - st->held_off; /* in pieces of a frame's size, as they came */
        if (n > H2_PIECE)
            n = H2_PIECE;
        k = srv__body_data(st->req, st->held + st->held_off, n);
        st->held_off += n;
        h2_consume(c, st, n);
        if (k == SRV__BODY_OVER)
            st->bmode = H2B_OVER;
        if (k != SRV__BODY_GO)
            return;
    }
    if (st->bmode == H2B_READ && st->remote_done) {
        st->bmode = H2B_DONE;
        srv__body_end(st->req, 0); /* on_end may answer */
    }
}

static void h2_bodies(srv__h2conn *c)
{
    for (srv__h2stream *st = c->streams; st; st = st->next)
        h2_body(c, st);
}

/* Frames out: one write at a time, up to H2_OUT_MAX gathered. */
static void h2_flush(srv__h2conn *c)
{
    if (c->writing || c->lingering)
        return;
    c->out_len = 0;
    while (c->out_len < H2_OUT_MAX) {
        const uint8_t *d = NULL;
        h2_ssize n = h2_mem_send(c->s, &d);
        if (n < 0) {
            c->broken = 1;
            break;
        }
        if (n == 0)
            break;
        if (c->out_len + (size_t)n > c->out_cap) {
            size_t cap = c->out_cap ? c->out_cap : 16384;
            while (cap < c->out_len + (size_t)n)
                cap *= 2;
            char *p = realloc(c->out, cap);
            if (!p) {
                c->broken = 1;
                break;
            }
            c->out = p;
            c->out_cap = cap;
        }
        memcpy(c->out + c->out_len, d, (size_t)n);
        c->out_len += (size_t)n;
    }
    if (c->out_len == 0) {
        if (c->out_cap > H2_OUT_KEEP) { /* an idle connection keeps no big buffer */
            free(c->out);
            c->out = NULL;
            c->out_cap = 0;
        }
        return;
    }
    c->writing = 1;
    c->outbuf = (srv__buf){c->out, c->out_len};
    c->ops->write(c->io, &c->outbuf, 1); /* may complete inside: written runs again */
}

/* An answer that cannot go out: a stream the client's window keeps shut. */
static int h2_stalled(srv__h2conn *c)
{
    if (nghttp2_session_get_remote_window_size(c->s) <= 0) {
        for (srv__h2stream *st = c->streams; st; st = st->next)
            if (st->state == H2S_SEND && !st->deferred)
                return 1;
        return 0;
    }
    for (srv__h2stream *st = c->streams; st; st = st->next)
        if (st->state == H2S_SEND && !st->deferred &&
            nghttp2_session_get_stream_remote_window_size(c->s, st->id) <= 0)
            return 1;
    return 0;
}

/* The policy's state for what the streams wait for, and the stop's count of
 * requests arriving (one per stream whose head or whole body arrives). */
static void h2_policy(srv__h2conn *c)
{
    unsigned heads = 0, bodies = 0;
    for (srv__h2stream *st = c->streams; st; st = st->next) {
        heads += st->state == H2S_HEAD;
        bodies += st->state == H2S_BODY || st->state == H2S_READY;
    }
    enum srv__conn_state want, was = c->pol->state;
    if (heads || bodies)
        want = was == SRV_CONN_HEAD || was == SRV_CONN_BODY ? was /* one deadline for them all */
               : heads                                    ? SRV_CONN_HEAD
                                                          : SRV_CONN_BODY;
    else if (c->writing || h2_stalled(c))
        want = SRV_CONN_SEND;
    else if (c->nstreams)
        want = SRV_CONN_APP;
    else
        want = c->began ? SRV_CONN_IDLE : SRV_CONN_FIRST;
    if (want != was && want != SRV_CONN_FIRST)
        srv__conn_set(c->pol, want, srv__now_ms());
    int n = (int)(heads + bodies) - (int)c->pol->arriving;
    if (n < 0)
        n = 0;
    if (n != c->counted) {
        srv__request_arriving(c->srv, n - c->counted);
        c->counted = n;
    }
}

/* Answered and shut: the client's last bytes are dropped (the policy's linger). */
static void h2_linger(srv__h2conn *c)
{
    if (c->peer_gone) {
        h2_end(c, 0);
        return;
    }
    c->lingering = 1;
    srv__conn_set(c->pol, SRV_CONN_LINGER, srv__now_ms());
    if (c->counted) {
        srv__request_arriving(c->srv, -c->counted);
        c->counted = 0;
    }
    c->ops->shut(c->io);
    h2_read(c, 1);
}

/* After a run: the session over, or what the connection waits for now. */
static void h2_settle(srv__h2conn *c)
{
    /* The hold is full: no more input, even while a write is out (a connection that always
     * has a WINDOW_UPDATE to send would otherwise read on past H2_HOLD_MAX). */
    if (c->writing && !c->lingering && c->held >= H2_HOLD_MAX)
        h2_read(c, 0);
    if (c->writing || c->lingering)
        return;
    int over = c->broken || (!nghttp2_session_want_read(c->s) &&
                             !nghttp2_session_want_write(c->s));
    if (c->goaway && c->nstreams == 0 && !nghttp2_session_want_write(c->s))
        over = 1;
    if (over) {
        h2_linger(c);
        return;
    }
    h2_policy(c);
    h2_read(c, c->held < H2_HOLD_MAX);
}

static void h2_run(srv__h2conn *c)
{
    if (c->running) {
        c->again = 1;
        return;
    }
    c->running = 1;
    srv__h2conn *outer = h2_current;
    h2_current = c;
    do {
        c->again = 0;
        h2_posts(c);
        h2_dispatch(c);
        h2_bodies(c);
        h2_posts(c); /* answers given inside dispatch or on_data */
        h2_windows(c);
        if (!c->want_close)
            h2_flush(c);
    } while (c->again && !c->want_close);
    h2_current = outer;
    c->running = 0;
    if (c->want_close) {
        h2_end(c, c->want_close == 2);
        return;
    }
    h2_settle(c);
}

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

static nghttp2_session_callbacks *h2_callbacks;
static pthread_once_t h2_once = PTHREAD_ONCE_INIT;

static void h2_callbacks_init(void)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, h2_on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, h2_on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h2_on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, h2_on_frame_send);
    h2_callbacks = cb;
}

srv__h2conn *srv__h2conn_new(srv_server *srv, srv__conn *policy, const srv__h1io *ops, void *io,
                             const struct sockaddr *peer, socklen_t peer_len)
{
    pthread_once(&h2_once, h2_callbacks_init);
    if (!h2_callbacks)
        return NULL;
    srv__h2conn *c = srv__zalloc(sizeof *c);
    if (!c)
        return NULL;
    nghttp2_option *opt = NULL;
    if (nghttp2_option_new(&opt) != 0) {
        free(c);
        return NULL;
    }
    /* The window opens as the application takes a body, not as it arrives. */
    nghttp2_option_set_no_auto_window_update(opt, 1);
    int rv = nghttp2_session_server_new2(&c->s, h2_callbacks, c, opt);
    nghttp2_option_del(opt);
    if (rv != 0) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->srv = srv;
    c->pol = policy;
    c->ops = ops;
    c->io = io;
    c->ready_tail = &c->ready;
    c->reading = 1; /* as the loop connection left it */
    if (peer && peer_len > 0 && peer_len <= sizeof c->peer) {
        memcpy(&c->peer, peer, peer_len);
        c->peer_len = peer_len;
    }
    const srv_config *cfg = &srv->cfg;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_MAX_STREAMS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)cfg->max_header_bytes},
    };
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW);
    return c;
}

size_t srv__h2conn_input(srv__h2conn *c, const char *d, size_t n)
{
    if (c->ended || n == 0)
        return n;
    if (c->lingering) {
        if (!srv__conn_linger_bytes(c->pol, n, srv__now_ms()))
            h2_end(c, 0);
        return n;
    }
    if (c->broken)
        return n;
    c->running = 1; /* callbacks post; the run below takes it all */
    srv__h2conn *outer = h2_current;
    h2_current = c;
    h2_ssize r = h2_mem_recv(c->s, (const uint8_t *)d, n);
    h2_current = outer;
    c->running = 0;
    if (r < 0)
        c->broken = 1; /* nghttp2's GOAWAY, if it queued one, goes out first */
    h2_run(c);
    return n;
}

void srv__h2conn_eof(srv__h2conn *c)
{
    if (c->ended)
        return;
    /* Nobody reads what streams still have to say: they are cancelled with the close. */
    c->peer_gone = 1;
    h2_end(c, 0);
}

void srv__h2conn_written(srv__h2conn *c, int ok)
{
    c->writing = 0;
    if (c->ended)
        return;
    if (!ok) {
        h2_end(c, 1);
        return;
    }
    if (c->pol->state == SRV_CONN_SEND)
        srv__conn_progress(c->pol, srv__now_ms());
    h2_run(c);
}

void srv__h2conn_wake(srv__h2conn *c)
{
    if (!c->ended)
        h2_run(c);
}

/* Streams still arriving get `status` (a head not complete is refused). */
static void h2_cut_arriving(srv__h2conn *c, int status)
{
    for (srv__h2stream *st = c->streams; st; st = st->next) {
        if (st->state == H2S_HEAD)
            nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_REFUSED_STREAM);
        else if (st->state == H2S_BODY)
            h2_fail(st, status);
    }
}

static void h2_goaway(srv__h2conn *c)
{
    if (c->goaway)
        return;
    c->goaway = 1;
    nghttp2_submit_goaway(c->s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->s),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

void srv__h2conn_time(srv__h2conn *c, uint64_t now, int stopping, int quiescing)
{
    if (c->ended)
        return;
    if (c->lingering) {
        if (srv__conn_due(c->pol, now, stopping, quiescing) != SRV_CONN_WAIT)
            h2_end(c, 0);
        return;
    }
    srv__h2conn *outer = h2_current;
    h2_current = c; /* the core's answers below need no wake */
    if (stopping) {
        h2_cut_arriving(c, 503);
        h2_goaway(c);
    } else if (quiescing) {
        h2_goaway(c);
    }
    enum srv__conn_due due = srv__conn_due(c->pol, now, stopping, quiescing);
    h2_current = outer;
    switch (due) {
    case SRV_CONN_WAIT:
        break;
    case SRV_CONN_CLOSE:
        if (c->pol->state == SRV_CONN_SEND && !stopping) { /* the client stopped reading */
            h2_end(c, 1);
            return;
        }
        if (c->pol->state == SRV_CONN_APP || c->pol->state == SRV_CONN_QUEUED)
            break; /* a stop: the core answers what it has */
        nghttp2_session_terminate_session(c->s, NGHTTP2_NO_ERROR);
        c->goaway = 1;
        break;
    case SRV_CONN_ANSWER:
        h2_current = c;
        h2_cut_arriving(c, srv__conn_status(c->pol));
        h2_current = outer;
        h2_goaway(c);
        break;
    }
    h2_run(c);
}

void srv__h2conn_free(srv__h2conn *c)
{
    while (c->streams)
        h2_stream_free(c, c->streams);
    if (c->counted)
        srv__request_arriving(c->srv, -c->counted);
    nghttp2_session_del(c->s);
    free(c->out);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* From any thread: record, and have the loop look (unless it is the loop,
 * inside this connection's events already). */
static void h2_post(srv_request *req, int answer)
{
    srv__h2stream *st = req->h2;
    srv__h2conn *c = st->c;
    pthread_mutex_lock(&c->mu);
    if (answer) {
        st->answered = 1;
        pthread_cond_broadcast(&c->cv);
    }
    if (!st->posted) {
        st->posted = 1;
        st->post_next = c->posted;
        c->posted = st;
    }
    if (h2_current != c)
        c->ops->wake(c->io);
    pthread_mutex_unlock(&c->mu);
}

void srv__h2conn_respond(srv_request *req)
{
    h2_post(req, 1);
}

void srv__h2conn_kick(srv_request *req)
{
    h2_post(req, 0);
}
