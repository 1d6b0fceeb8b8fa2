/*
 * HTTP/1 over an event loop (api/srv_h1conn.h): one connection's requests,
 * answers, streams and bodies, driven by the events its engine reports and
 * carried out through the engine's srv__h1io. The connection's rules are
 * the core's: parsing (core/http1.c), the connection policy
 * (core/connections.c), framing of answers and streams (core/response.c,
 * core/stream.c). No sockets, no clock reads but srv__now_ms (once per event, h1_now).
 */
#include "srv_core.h"
#include "srv_h1conn.h"
#include "srv_http1.h"
#ifdef SRV_HAVE_NGHTTP2
#include "srv_h2conn.h"
#endif
#ifdef SRV_HAVE_WSLAY
#include "srv_ws.h"
#endif

#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Where the connection is: one switch (h1_run) moves it on. */
enum h1_phase {
    H1_READ,   /* reading a request, or kept alive between requests */
    H1_APP,    /* a request is dispatched: its answer is awaited */
    H1_ANSWER, /* a whole answer is being written */
    H1_STREAM, /* a streamed answer is written as the application gives it */
    H1_BODY,   /* a streamed request body the application reads */
    H1_LINGER, /* answered and shut: the client's last bytes are dropped */
    H1_CLOSED
};

/* What the write in flight carries. */
enum h1_write {
    H1_W_CONT,   /* "100 Continue" */
    H1_W_ANSWER, /* a whole answer */
    H1_W_HEAD,   /* a stream's head */
    H1_W_PIECE,  /* a stream's piece (srv__stream_sent after it) */
    H1_W_GOAWAY, /* the HTTP/2 preface after HTTP/1 requests: a GOAWAY */
    H1_W_UPGRADE /* a WebSocket route's 101: then the connection is the socket's */
};

/* A streamed request body (hc->bmode). */
enum h1_bmode {
    H1_B_NONE = 0,
    H1_B_READ, /* arriving: the parser gives pieces */
    H1_B_EOM,  /* all arrived; the end not told yet (the application paused) */
    H1_B_DONE, /* the end was told */
    H1_B_OVER  /* cut, or the application stopped: close after the answer */
};

/* Input taken but not parsed yet (bytes past a request, a paused body) is
 * at most this much; the engine keeps the rest, unread. */
#define H1_PEND_MAX (64u * 1024u)

static const char h1_continue[] = "HTTP/1.1 100 Continue\r\n\r\n";

struct srv__h1conn {
    srv_server *srv;
    srv__conn *pol;
    const srv__h1io *ops;
    void *io;
    /* The client's address (IPv4 or IPv6, all the core formats): a
     * sockaddr_storage would be 100 bytes more on every connection. */
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } peer;
    socklen_t peer_len;
    enum h1_phase phase;
    srv_http1 parser;
    srv_request *req; /* the message being read */
    srv_request *cur; /* dispatched, or its answer being written */
    char *pend;       /* input not parsed yet: pend[pend_off, pend_len) */
    size_t pend_off, pend_len, pend_cap;
    int writing;      /* a write is in flight, carrying `wrote` */
    enum h1_write wrote;
    size_t piece;     /* H1_W_PIECE: its length */
    int sendfile;     /* file bodies by srv__h1io.sendfile */
    srv__buf out[2];
    int reading;      /* what srv__h1io.read was last told */
    unsigned served;
    int shead_done;   /* H1_STREAM: the head is out */
    int lost_input;   /* bytes after the answer cannot be read as a request */
    int peer_gone;    /* the client closed while an answer was due */
    enum h1_bmode bmode;
    int bcont;        /* a streamed body's "100 Continue" sent, or not due */
    int sniff;        /* the first bytes may be HTTP/2's preface (prior knowledge) */
#ifdef SRV_HAVE_NGHTTP2
    srv__h2conn *h2;  /* it speaks HTTP/2: every event goes there */
#endif
#ifdef SRV_HAVE_WSLAY
    srv_ws *ws;       /* it carries a WebSocket (core/ws.c): every event goes there */
#endif
    /* Another thread's respond or kick holds mu while it wakes the loop
     * (srv__h1conn_free takes it before freeing). */
    pthread_mutex_t mu;
    atomic_int answered; /* respond came for cur (until cur is done); cleared on the loop */
    /* The clock as read once in this event (0: not yet): a request moves
     * through five states in one, one read serves them all (h1_now). */
    uint64_t now;
};

/* The connection whose events the loop thread is handling: the core's
 * calls back from inside them (respond from dispatch, a kick from a pull)
 * need no wake. */
static _Thread_local srv__h1conn *h1_current;

static int h1_run(srv__h1conn *hc);

/* ------------------------------------------------------------------ */
/* Small steps                                                         */
/* ------------------------------------------------------------------ */

static uint64_t h1_now(srv__h1conn *hc)
{
    if (hc->now == 0)
        hc->now = srv__now_ms();
    return hc->now;
}

static void h1_set(srv__h1conn *hc, enum srv__conn_state state)
{
    srv__conn_set(hc->pol, state, h1_now(hc));
}

static void h1_read(srv__h1conn *hc, int on)
{
    if (hc->reading != on) {
        hc->reading = on;
        hc->ops->read(hc->io, on);
    }
}

/* The end: nothing of hc may be touched after (the engine may free it). */
static int h1_end(srv__h1conn *hc, int abort)
{
    hc->phase = H1_CLOSED;
    hc->ops->close(hc->io, abort);
    return 0;
}

static int h1_close(srv__h1conn *hc)
{
    return h1_end(hc, 0);
}

static void h1_write(srv__h1conn *hc, enum h1_write what, const void *a, size_t alen,
                     const void *b, size_t blen)
{
    size_t n = 0;
    if (alen > 0)
        hc->out[n++] = (srv__buf){a, alen};
    if (blen > 0)
        hc->out[n++] = (srv__buf){b, blen};
    hc->writing = 1;
    hc->wrote = what;
    hc->ops->write(hc->io, hc->out, n);
}

static int h1_answered(srv__h1conn *hc, int clear)
{
    if (!clear)
        return atomic_load(&hc->answered);
    return atomic_exchange(&hc->answered, 0);
}

static void h1_pend_drop(srv__h1conn *hc)
{
    hc->pend_off = hc->pend_len = 0;
}

/* Nothing kept: its buffer goes too. A connection waiting for its client
 * or its application holds no input buffer (2,700 waiting: 11 MB less). */
static void h1_pend_release(srv__h1conn *hc)
{
    if (hc->pend_off < hc->pend_len)
        return;
    free(hc->pend);
    hc->pend = NULL;
    hc->pend_off = hc->pend_len = hc->pend_cap = 0;
}

/* Keep n more input bytes. -1 when out of memory. */
static int h1_pend_add(srv__h1conn *hc, const char *d, size_t n)
{
    if (hc->pend_off > 0 && hc->pend_off == hc->pend_len)
        h1_pend_drop(hc);
    if (hc->pend_len + n > hc->pend_cap && hc->pend_off > 0) { /* slide what is left first */
        memmove(hc->pend, hc->pend + hc->pend_off, hc->pend_len - hc->pend_off);
        hc->pend_len -= hc->pend_off;
        hc->pend_off = 0;
    }
    return srv__buf_append(&hc->pend, &hc->pend_len, &hc->pend_cap, 4096, d, n);
}

/* A request for the next message, or NULL when out of memory. */
static srv_request *h1_request(srv__h1conn *hc)
{
    if (!hc->req) {
        hc->req = srv__request_new(hc->srv, hc->peer_len ? &hc->peer.sa : NULL,
                                   hc->peer_len);
        if (hc->req)
            hc->req->h1 = hc;
    }
    return hc->req;
}

/* Answer the message being read with `status` (the core's answer, which
 * closes), or with a GOAWAY when it was the HTTP/2 preface. 1: the answer
 * is due (run on); 0: the GOAWAY is being written, or the connection
 * closed (out of memory: hc is gone). */
static int h1_fail(srv__h1conn *hc, int status)
{
    h1_set(hc, SRV_CONN_APP); /* answered now: nothing arrives */
    if (hc->parser.h2_preface) {
        if (hc->req) {
            srv__request_release(hc->req);
            hc->req = NULL;
        }
        size_t len = 0;
        const char *goaway = srv__h2_preface_refusal(&len);
        hc->phase = H1_ANSWER;
        h1_write(hc, H1_W_GOAWAY, goaway, len, NULL, 0);
        return 0;
    }
    srv_request *req = h1_request(hc);
    if (!req) /* not even a request to answer with: the canned 503 */
        return h1_close(hc);
    hc->req = NULL;
    hc->cur = req;
    hc->phase = H1_APP;
    srv__request_fail(req, status); /* respond: answered */
    return 1;
}

/* Answered and shut: drop what the client still sends, within the
 * policy's linger budget. */
static int h1_linger(srv__h1conn *hc)
{
    if (hc->peer_gone)
        return h1_close(hc);
    hc->phase = H1_LINGER;
    h1_set(hc, SRV_CONN_LINGER);
    h1_pend_drop(hc);
    hc->ops->shut(hc->io);
    h1_read(hc, 1);
    return 0;
}

/* The answer of hc->cur is written: keep the connection or linger. */
static int h1_finish(srv__h1conn *hc)
{
    srv_request *req = hc->cur;
    hc->cur = NULL;
    h1_answered(hc, 1); /* the next request's answer is awaited anew */
    if (srv__response_streamed(req))
        srv__stream_detach(req);
    int keep = !hc->lost_input && !hc->peer_gone && srv__response_keep_alive(req);
    srv__request_release(req);
    hc->served++;
    if (!keep)
        return h1_linger(hc);
    h1_set(hc, SRV_CONN_IDLE);
    hc->phase = H1_READ;
    return 1;
}

/* ------------------------------------------------------------------ */
/* Reading requests                                                    */
/* ------------------------------------------------------------------ */

static void h1_dispatch(srv__h1conn *hc, srv_request *req, enum h1_phase phase)
{
    hc->cur = req;
    hc->phase = phase;
    h1_read(hc, 0);
    srv__request_dispatch(req); /* may respond here: answered */
    hc->now = 0;                /* an inline handler may have taken long */
    h1_set(hc, SRV_CONN_APP);   /* in flight (counted by dispatch) */
}

/* The head of a request whose route streams its body: dispatch it now;
 * the body is read while the application wants it (h1_body). */
static int h1_body_begin(srv__h1conn *hc)
{
    srv_request *req = hc->req;
    hc->req = NULL;
    srv__http1_stream_body(&hc->parser);
    hc->bmode = H1_B_READ;
    hc->bcont = !(srv__http1_body_expected(&hc->parser) && srv__request_expects_continue(req));
    size_t u = 0; /* no body at all: complete at once */
    if (srv__http1_feed(&hc->parser, req, NULL, 0, &u) == SRV_HTTP1_MESSAGE_COMPLETE)
        hc->bmode = H1_B_EOM;
    h1_dispatch(hc, req, H1_BODY);
    return 1;
}

/* Parse what is kept. 1: the phase changed; 0: all of it was used and
 * reading goes on, or the connection writes its GOAWAY or closed (then hc
 * is gone). */
static int h1_parse(srv__h1conn *hc)
{
    const char *d = hc->pend + hc->pend_off;
    size_t n = hc->pend_len - hc->pend_off, off = 0;
    enum srv_http1_event ev = SRV_HTTP1_HEAD_READY;
    while (off < n || ev == SRV_HTTP1_HEAD_READY) {
        if (srv__http1_fresh(&hc->parser) && hc->served > 0) /* the head's own deadline */
            h1_set(hc, SRV_CONN_HEAD);
        srv_request *req = h1_request(hc);
        if (!req) {
            hc->pend_off += off;
            return h1_fail(hc, 503);
        }
        size_t used = 0;
        ev = srv__http1_feed(&hc->parser, req, d + off, n - off, &used);
        off += used;
        if (ev != SRV_HTTP1_FAIL && !srv__http1_idle(&hc->parser) && !hc->pol->begun)
            srv__conn_begun(hc->pol, h1_now(hc));
        if (ev == SRV_HTTP1_FAIL) {
            h1_pend_drop(hc);
            return h1_fail(hc, srv__http1_status(&hc->parser));
        }
        if (ev == SRV_HTTP1_HEAD_READY) {
            if (hc->pol->admitted && srv__request_streams_body(req)) {
                hc->pend_off += off;
                return h1_body_begin(hc);
            }
            h1_set(hc, SRV_CONN_BODY);
            if (hc->pol->admitted && srv__http1_body_expected(&hc->parser) &&
                srv__request_expects_continue(req) && !hc->writing)
                h1_write(hc, H1_W_CONT, h1_continue, sizeof h1_continue - 1, NULL, 0);
            continue;
        }
        if (ev == SRV_HTTP1_MESSAGE_COMPLETE) {
            hc->pend_off += off;
            if (!hc->pol->admitted) /* read only to be refused */
                return h1_fail(hc, 503);
            hc->req = NULL;
            h1_set(hc, SRV_CONN_QUEUED);
            h1_dispatch(hc, req, H1_APP);
            return 1;
        }
    }
    h1_pend_drop(hc);
    h1_pend_release(hc);
    h1_read(hc, 1);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Answers and streams                                                 */
/* ------------------------------------------------------------------ */

/* H1_APP: the answer came (or not yet). */
static int h1_answer(srv__h1conn *hc)
{
    if (!h1_answered(hc, 0)) {
        srv__http1_trim(&hc->parser); /* nothing to hold while the application works */
        h1_pend_release(hc);
        return 0;
    }
    if (hc->writing) /* a 100 Continue goes first */
        return 0;
#ifdef SRV_HAVE_WSLAY
    if (hc->cur->status == 101 && hc->cur->ws) { /* a WebSocket opens after it */
        size_t hlen = 0;
        const char *head = srv__ws_head(hc->cur, &hlen);
        hc->phase = H1_ANSWER;
        h1_set(hc, SRV_CONN_SEND);
        h1_write(hc, H1_W_UPGRADE, head, hlen, NULL, 0);
        return 0;
    }
#endif
    if (srv__response_streamed(hc->cur)) {
        hc->phase = H1_STREAM;
        hc->shead_done = 0;
        return 1;
    }
    size_t hlen = 0, blen = 0;
    const char *head = srv__response_http1_head(hc->cur, &hlen);
    const void *body = srv__response_body(hc->cur, &blen);
    if (!head)
        return h1_close(hc);
    hc->phase = H1_ANSWER;
    h1_set(hc, SRV_CONN_SEND);
    h1_write(hc, H1_W_ANSWER, head, hlen, body, blen);
    return 0;
}

/* H1_STREAM: the head, then what the application gives, to the end. */
static int h1_stream(srv__h1conn *hc)
{
    if (hc->writing)
        return 0;
    h1_set(hc, SRV_CONN_SEND);
    if (!hc->shead_done) {
        size_t hlen = 0;
        const char *head = srv__response_http1_head(hc->cur, &hlen);
        h1_write(hc, H1_W_HEAD, head, hlen, NULL, 0);
        return 0;
    }
    const void *d = NULL;
    size_t len = 0;
    srv__stream_chunk file;
    int k = hc->sendfile ? srv__stream_pull_file(hc->cur, &d, &len, &file)
                         : srv__stream_pull(hc->cur, &d, &len);
    switch (k) {
    case SRV__STREAM_WAIT: /* a kick brings it back; the application's pace is its own */
        h1_set(hc, SRV_CONN_APP);
        return 0;
    case SRV__STREAM_END:
        return h1_finish(hc);
    case SRV__STREAM_DATA:
        hc->piece = len;
        h1_write(hc, H1_W_PIECE, d, len, NULL, 0);
        return 0;
    case SRV__STREAM_FILE: /* the rest of the file, from its descriptor */
        if (file.len > SIZE_MAX)
            return h1_close(hc);
        hc->piece = (size_t)file.len;
        hc->writing = 1;
        hc->wrote = H1_W_PIECE;
        hc->ops->sendfile(hc->io, file.fd, file.off, file.len);
        return 0;
    default: /* cut: no last chunk, the client sees a cut body */
        return h1_close(hc);
    }
}

/* ------------------------------------------------------------------ */
/* Streamed request bodies                                             */
/* ------------------------------------------------------------------ */

/* Kept input to the parser in body mode, each piece to the application,
 * while it takes them. */
static void h1_body_feed(srv__h1conn *hc)
{
    srv_request *req = hc->cur;
    const char *d = hc->pend + hc->pend_off;
    size_t n = hc->pend_len - hc->pend_off, off = 0;
    while (off < n && hc->bmode == H1_B_READ) {
        size_t u = 0;
        enum srv_http1_event ev = srv__http1_feed(&hc->parser, req, d + off, n - off, &u);
        off += u;
        if (ev == SRV_HTTP1_BODY) {
            srv__conn_body_bytes(hc->pol, hc->parser.piece_len, h1_now(hc));
            int k = srv__body_data(req, hc->parser.piece, hc->parser.piece_len);
            if (k == SRV__BODY_OVER)
                hc->bmode = H1_B_OVER;
            if (k != SRV__BODY_GO)
                break;
        } else if (ev == SRV_HTTP1_MESSAGE_COMPLETE) {
            hc->bmode = H1_B_EOM; /* what follows is the next request */
        } else if (ev == SRV_HTTP1_FAIL) {
            hc->bmode = H1_B_OVER; /* on_end, then the core's 400/431 */
            srv__body_end(req, srv__http1_status(&hc->parser));
        }
    }
    /* A Content-Length body's last piece leaves the end for the next feed. */
    if (hc->bmode == H1_B_READ && off == n) {
        size_t u = 0;
        if (srv__http1_feed(&hc->parser, req, d + off, 0, &u) == SRV_HTTP1_MESSAGE_COMPLETE)
            hc->bmode = H1_B_EOM;
    }
    hc->pend_off += off;
}

/* Nothing to read until a kick or the answer (no deadline: the
 * application's pace is its own; request_timeout_ms bounds it). */
static int h1_body_park(srv__h1conn *hc)
{
    h1_read(hc, 0);
    h1_set(hc, SRV_CONN_APP);
    return 0;
}

/* H1_BODY: the answer (it ends the body), what the application wants, the
 * end. Runs on every event; each looks at everything again. */
static int h1_body(srv__h1conn *hc)
{
    srv_request *req = hc->cur;
    if (h1_answered(hc, 0)) {
        /* A body not read to its end closes the connection after the
         * answer: its unread bytes are never parsed as a next request. */
        if (hc->bmode == H1_B_READ || hc->bmode == H1_B_OVER) {
            srv__request_set_close(req);
            hc->lost_input = 1;
            h1_pend_drop(hc);
        }
        hc->bmode = H1_B_NONE;
        srv__body_detach(req);
        hc->phase = H1_APP;
        return 1;
    }
    if (hc->bmode == H1_B_OVER || hc->bmode == H1_B_DONE)
        return h1_body_park(hc);
    int k = srv__body_state(req);
    if (k == SRV__BODY_OVER) {
        if (hc->bmode == H1_B_READ)
            hc->bmode = H1_B_OVER;
        return h1_body_park(hc);
    }
    if (k == SRV__BODY_IDLE)
        return h1_body_park(hc);
    if (!hc->bcont) { /* the application wants the body: tell the client */
        if (hc->writing)
            return 0;
        hc->bcont = 1;
        h1_write(hc, H1_W_CONT, h1_continue, sizeof h1_continue - 1, NULL, 0);
        return 1;
    }
    if (hc->bmode == H1_B_EOM) {
        hc->bmode = H1_B_DONE;
        srv__body_end(req, 0);
        return 1; /* on_end may have answered */
    }
    if (hc->pol->state != SRV_CONN_BODY_STREAM) /* a pace window opens */
        h1_set(hc, SRV_CONN_BODY_STREAM);
    if (hc->pend_off < hc->pend_len) {
        h1_body_feed(hc);
        return 1;
    }
    h1_read(hc, 1);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The one switch                                                      */
/* ------------------------------------------------------------------ */

/* Move the connection on until it waits for an event. 0: it waits (or
 * closed: then hc is gone). */
static int h1_step(srv__h1conn *hc)
{
    switch (hc->phase) {
    case H1_READ: /* a 100 Continue in flight or not: the body comes */
        if (hc->pend_off < hc->pend_len)
            return h1_parse(hc);
        h1_read(hc, 1);
        return 0;
    case H1_APP:
        return h1_answer(hc);
    case H1_STREAM:
        return h1_stream(hc);
    case H1_BODY:
        return h1_body(hc);
    case H1_ANSWER: /* its write completes it */
    case H1_LINGER:
    case H1_CLOSED:
        return 0;
    }
    return 0;
}

static int h1_run(srv__h1conn *hc)
{
    srv__h1conn *outer = h1_current;
    h1_current = hc;
    int more;
    do {
        more = h1_step(hc);
    } while (more);
    h1_current = outer; /* hc may be gone: not touched again */
    return 0;
}

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

srv__h1conn *srv__h1conn_new(srv_server *srv, srv__conn *policy, const srv__h1io *ops, void *io,
                             const struct sockaddr *peer, socklen_t peer_len)
{
    srv__h1conn *hc = srv__zalloc(sizeof *hc);
    if (!hc)
        return NULL;
    if (pthread_mutex_init(&hc->mu, NULL) != 0) {
        free(hc);
        return NULL;
    }
    hc->srv = srv;
    hc->pol = policy;
    hc->ops = ops;
    hc->io = io;
    if (peer && peer_len > 0 && peer_len <= sizeof hc->peer) {
        memcpy(&hc->peer, peer, peer_len);
        hc->peer_len = peer_len;
    }
    hc->phase = H1_READ;
    /* Prior knowledge only where the engine speaks HTTP/2, and for a connection admitted (a
     * refused one gets the parser's SETTINGS + GOAWAY). */
    hc->sniff = policy->admitted && (srv->caps & SRV_ENGINE_CAP_HTTP2) != 0;
#ifndef SRV_HAVE_NGHTTP2
    hc->sniff = 0;
#endif
    srv__http1_init(&hc->parser, srv);
    return hc;
}

/* ------------------------------------------------------------------ */
/* HTTP/2: the preface, or ALPN                                        */
/* ------------------------------------------------------------------ */

static const char h1_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define H1_PREFACE_LEN (sizeof h1_preface - 1)

#ifdef SRV_HAVE_NGHTTP2
/* Hand the connection to HTTP/2, with the bytes kept so far. 0: it closed. */
static int h1_to_h2(srv__h1conn *hc)
{
    hc->sniff = 0;
    hc->h2 = srv__h2conn_new(hc->srv, hc->pol, hc->ops, hc->io,
                             hc->peer_len ? &hc->peer.sa : NULL,
                             hc->peer_len);
    if (!hc->h2) { /* out of memory: closed unanswered */
        h1_close(hc);
        return 0;
    }
    size_t n = hc->pend_len - hc->pend_off;
    h1_pend_drop(hc);
    /* h2conn copies nothing it does not parse at once: pend stays ours until here. */
    srv__h2conn_input(hc->h2, hc->pend, n);
    return 0;
}
#endif

/* The first bytes of a connection that may speak HTTP/2: 1 while they are
 * (or may become) the preface - kept, nothing parsed - and 0 once they are
 * HTTP/1's. */
static int h1_sniff(srv__h1conn *hc)
{
    size_t n = hc->pend_len - hc->pend_off;
    size_t m = n < H1_PREFACE_LEN ? n : H1_PREFACE_LEN;
    if (memcmp(hc->pend + hc->pend_off, h1_preface, m) != 0) {
        hc->sniff = 0;
        return 0;
    }
    if (m == H1_PREFACE_LEN) {
#ifdef SRV_HAVE_NGHTTP2
        h1_to_h2(hc);
#endif
        return 1;
    }
    h1_read(hc, 1);
    return 1;
}

void srv__h1conn_h2(srv__h1conn *hc)
{
    hc->now = 0; /* an event: the clock is read anew (h1_now) */
#ifdef SRV_HAVE_NGHTTP2
    if (hc->phase == H1_READ && !hc->h2 && hc->pend_len == hc->pend_off)
        h1_to_h2(hc);
#else
    (void)hc;
#endif
}

void srv__h1conn_sendfile(srv__h1conn *hc)
{
    hc->sendfile = hc->ops->sendfile != NULL;
}

size_t srv__h1conn_input(srv__h1conn *hc, const char *d, size_t n)
{
    hc->now = 0; /* an event: the clock is read anew (h1_now) */
#ifdef SRV_HAVE_NGHTTP2
    if (hc->h2)
        return srv__h2conn_input(hc->h2, d, n);
#endif
#ifdef SRV_HAVE_WSLAY
    if (hc->ws)
        return srv__ws_input(hc->ws, d, n);
#endif
    if (hc->phase == H1_CLOSED || n == 0)
        return n;
    if (hc->phase == H1_LINGER) {
        if (!srv__conn_linger_bytes(hc->pol, n, h1_now(hc)))
            h1_close(hc);
        return n;
    }
    /* Only what a request being read takes: the rest stays the engine's, unread, while
     * an answer is awaited (TCP back-pressure on a client that pipelines). */
    size_t held = hc->pend_len - hc->pend_off;
    size_t take = hc->phase != H1_READ && hc->phase != H1_BODY ? 0
                  : held >= H1_PEND_MAX                        ? 0
                  : n < H1_PEND_MAX - held                     ? n
                                                               : H1_PEND_MAX - held;
    if (take == 0) {
        h1_read(hc, 0);
        return 0;
    }
    if (h1_pend_add(hc, d, take) != 0) { /* never a request with a hole: out of memory */
        h1_close(hc);
        return n;
    }
    if (hc->sniff && h1_sniff(hc))
        return take;
    h1_run(hc);
    return take;
}

void srv__h1conn_eof(srv__h1conn *hc)
{
    hc->now = 0; /* an event: the clock is read anew (h1_now) */
#ifdef SRV_HAVE_NGHTTP2
    if (hc->h2) {
        srv__h2conn_eof(hc->h2);
        return;
    }
#endif
#ifdef SRV_HAVE_WSLAY
    if (hc->ws) {
        srv__ws_eof(hc->ws);
        return;
    }
#endif
    switch (hc->phase) {
    case H1_APP:
    case H1_ANSWER:
    case H1_STREAM: /* an answer is due: it goes out, then the close */
        hc->peer_gone = 1;
        h1_read(hc, 0);
        return;
    case H1_CLOSED:
        return;
    default: /* idle or mid-request (nobody to answer), a body, lingering */
        h1_close(hc);
        return;
    }
}

/* The 101 is out: every later event is the WebSocket's (core/ws.c), with
 * the bytes the client sent after its handshake. */
static void h1_upgrade(srv__h1conn *hc)
{
#ifdef SRV_HAVE_WSLAY
    srv_request *req = hc->cur;
    hc->cur = NULL;
    h1_answered(hc, 1);
    hc->ws = srv__ws_attach(req, hc->pol, hc->ops, hc->io, hc->pend + hc->pend_off,
                            hc->pend_len - hc->pend_off);
    srv__request_release(req);
    h1_pend_drop(hc);
    if (!hc->ws) { /* out of memory: closed */
        h1_close(hc);
        return;
    }
    hc->reading = 0;
    if (hc->peer_gone) /* the client closed while its 101 was due */
        srv__ws_eof(hc->ws);
    else
        srv__ws_wake(hc->ws);
#else
    h1_close(hc);
#endif
}

void srv__h1conn_written(srv__h1conn *hc, int ok)
{
    hc->now = 0; /* an event: the clock is read anew (h1_now) */
#ifdef SRV_HAVE_NGHTTP2
    if (hc->h2) {
        srv__h2conn_written(hc->h2, ok);
        return;
    }
#endif
#ifdef SRV_HAVE_WSLAY
    if (hc->ws) {
        srv__ws_written(hc->ws, ok);
        return;
    }
#endif
    hc->writing = 0;
    if (hc->phase == H1_CLOSED)
        return;
    if (!ok) {
        h1_end(hc, 1);
        return;
    }
    switch (hc->wrote) {
    case H1_W_CONT:
        break;
    case H1_W_ANSWER:
        if (!h1_finish(hc))
            return;
        break;
    case H1_W_HEAD:
        hc->shead_done = 1;
        break;
    case H1_W_PIECE:
        srv__stream_sent(hc->cur, hc->piece);
        break;
    case H1_W_GOAWAY:
        h1_linger(hc);
        return;
    case H1_W_UPGRADE:
        h1_upgrade(hc);
        return;
    }
    h1_run(hc);
}

void srv__h1conn_wake(srv__h1conn *hc)
{
    hc->now = 0; /* an event: the clock is read anew (h1_now) */
#ifdef SRV_HAVE_NGHTTP2
    if (hc->h2) {
        srv__h2conn_wake(hc->h2);
        return;
    }
#endif
#ifdef SRV_HAVE_WSLAY
    if (hc->ws) {
        srv__ws_wake(hc->ws);
        return;
    }
#endif
    if (hc->phase != H1_CLOSED)
        h1_run(hc);
}

void srv__h1conn_time(srv__h1conn *hc, uint64_t now, int stopping, int quiescing)
{
    hc->now = 0; /* an event: the clock is read anew (h1_now) */
#ifdef SRV_HAVE_NGHTTP2
    if (hc->h2) {
        srv__h2conn_time(hc->h2, now, stopping, quiescing);
        return;
    }
#endif
#ifdef SRV_HAVE_WSLAY
    if (hc->ws) {
        srv__ws_time(hc->ws, now, stopping, quiescing);
        return;
    }
#endif
    if (hc->phase == H1_CLOSED || (stopping && hc->cur))
        return; /* dispatched: its answer comes (the core answers them all at a stop) */
    enum srv__conn_due due = srv__conn_due(hc->pol, now, stopping, quiescing);
    if (due == SRV_CONN_WAIT)
        return;
    if (due == SRV_CONN_CLOSE) {
        if (quiescing && !stopping && hc->ops->pending != NULL &&
            srv__conn_quiesce_keeps(hc->pol, now, stopping, quiescing, hc->ops->pending(hc->io)))
            return;
        h1_end(hc, hc->pol->state == SRV_CONN_SEND); /* a write without progress: reset */
        return;
    }
    srv__h1conn *outer = h1_current;
    h1_current = hc;
    int more = 1;
    if (hc->pol->state == SRV_CONN_BODY_STREAM && hc->cur) {
        /* A streamed body below the pace: 408 (the core answers it). */
        hc->bmode = H1_B_OVER;
        h1_body_park(hc);
        srv__body_end(hc->cur, 408);
    } else if (!hc->writing) {
        h1_pend_drop(hc);
        more = h1_fail(hc, srv__conn_status(hc->pol)); /* 0: a GOAWAY, or gone */
    }
    h1_current = outer;
    if (more)
        h1_run(hc);
}

void srv__h1conn_free(srv__h1conn *hc)
{
#ifdef SRV_HAVE_NGHTTP2
    if (hc->h2)
        srv__h2conn_free(hc->h2);
#endif
#ifdef SRV_HAVE_WSLAY
    if (hc->ws)
        srv__ws_free(hc->ws);
#endif
    srv__h1conn *outer = h1_current;
    h1_current = hc; /* the cancel's respond needs no wake */
    if (hc->req)
        srv__request_release(hc->req);
    srv_request *cur = hc->cur;
    if (cur) {
        if (hc->bmode != H1_B_NONE)
            srv__body_detach(cur);
        /* Answered from another thread meanwhile: its respond may not
         * have reached hc yet, and hc must outlive it. It is a few
         * instructions away (srv__respond claims, then h1_note). */
        if (!h1_answered(hc, 0) && !srv__request_cancel(cur))
            while (!h1_answered(hc, 0))
                sched_yield();
        if (srv__response_streamed(cur))
            srv__stream_detach(cur);
#ifdef SRV_HAVE_WSLAY
        if (cur->status == 101 && cur->ws) /* its 101 never went out */
            srv__ws_discard(cur);
#endif
        srv__request_release(cur);
    }
    h1_current = outer;
    /* A respond or kick of another thread (h1_note) may still hold mu,
     * past setting `answered` that the loop already acted on: it lets go
     * of hc before this returns. None comes after the detaches above. */
    pthread_mutex_lock(&hc->mu);
    pthread_mutex_unlock(&hc->mu);
    srv__http1_free(&hc->parser);
    free(hc->pend);
    pthread_mutex_destroy(&hc->mu);
    free(hc);
}

/* From any thread: record, and have the loop look (unless it is the loop,
 * inside this connection's events already). */
static int h1_note(srv_request *req, int answer)
{
#ifdef SRV_HAVE_NGHTTP2
    if (req->h2) {
        if (answer)
            srv__h2conn_respond(req);
        else
            srv__h2conn_kick(req);
        return 1;
    }
#endif
    srv__h1conn *hc = req->h1;
    if (!hc)
        return 0;
    if (h1_current == hc) { /* the loop, inside hc's events: it looks next */
        if (answer)
            atomic_store(&hc->answered, 1);
        return 1;
    }
    /* Another thread: the loop's srv__h1conn_free waits for mu before
     * freeing hc, so the wake cannot touch a freed connection. */
    pthread_mutex_lock(&hc->mu);
    if (answer)
        atomic_store(&hc->answered, 1);
    hc->ops->wake(hc->io);
    pthread_mutex_unlock(&hc->mu);
    return 1;
}

int srv__h1conn_respond(srv_request *req)
{
    return h1_note(req, 1);
}

int srv__h1conn_stream_kick(srv_request *req)
{
    return h1_note(req, 0);
}

int srv__h1conn_body_kick(srv_request *req)
{
    return h1_note(req, 0);
}
