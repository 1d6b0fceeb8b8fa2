/*
 * The core's own event loop (api/srv_sockloop.h): one epoll thread that
 * carries the core's connection (core/h1conn.c) - or a WebSocket handed
 * over after its 101 (core/ws.c) - over non-blocking descriptors, through
 * the srv__h1io a loop engine gives srv__h1conn, reading and writing the
 * descriptor itself or through the engine's srv__sockio (threadpool's
 * TLS). A loop that serves also accepts, admits and runs the layer's
 * handshake. Everything but wake runs on this thread; wake posts the
 * socket on a list and writes an eventfd.
 */
#include "srv_core.h"
#include "srv_h1conn.h"
#include "srv_sockloop.h"
#ifdef SRV_HAVE_WSLAY
#include "srv_ws.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SL_TICK_MS 50           /* the deadlines' pace (srv__ws_time, srv__h1conn_time) */
#define SL_READ 16384           /* one read's bytes */
#define SL_STOP_WAIT_MS 1000    /* a stop's last answers and 1001 handshakes, then closed */
#define SL_EVENTS 256
#define SL_TICK_DEFER 8        /* full batches of events taken before a late tick */
#define SL_ACCEPT_BATCH 64      /* connections accepted per readiness */
#define SL_ACCEPT_BACKOFF_MS 20 /* accept failed for lack of descriptors */
#define SL_SENDFILE_MAX (1u << 20) /* one sendfile(2) call's bytes at most */

typedef struct sl_conn sl_conn;
struct sl_conn {
    srv__sockloop *l;
    int fd;
    const srv__sockio *sio; /* NULL: the socket's own bytes */
    void *sio_ctx;
    srv__conn *pol;       /* the connection's policy: the engine's, or own */
    srv_ws *ws;           /* what it carries: a WebSocket, */
    srv__h1conn *hc;      /* or the core's connection; neither yet in a handshake */
    void (*done)(void *ctx); /* handed over: the engine closes fd then */
    void *ctx;
    sl_conn *prev, *next; /* l->conns (loop) */
    sl_conn *anext;       /* l->adds (l->mu) */
    sl_conn *wnext;       /* l->wakes (l->mu) */
    int posted;           /* on l->wakes (l->mu): a whole int, as other threads write it */
    sl_conn *dnext;       /* l->due (loop) */
    char *in;             /* read, not taken yet: in[in_off, in_len) */
    size_t in_off, in_len;
    char *out;            /* a write's rest: out[out_off, out_len) */
    size_t out_off, out_len;
    int sf_fd;            /* a file body by sendfile: its rest [sf_off, +sf_left) */
    uint64_t sf_off, sf_left;
    unsigned events;      /* what epoll watches now */
    /* ---- the loop's alone: bits (one word, 2,700 connections ~150 KB less) ---- */
    unsigned due : 1;          /* on l->due */
    unsigned linked : 1;       /* on l->conns: wakes count */
    unsigned accepted : 1;     /* the loop's own: it closes fd, frees sio_ctx, closes own */
    unsigned handshake : 1;    /* the layer's handshake runs: no protocol yet */
    unsigned want : 1;         /* srv__h1io.read on */
    unsigned eof : 1;          /* the peer ended (or the socket failed): told */
    unsigned drained : 1;      /* cleartext: the last read took all there was; the
                                * next waits for EPOLLIN (no read just for EAGAIN) */
    unsigned writing : 1;      /* a write is under way */
    unsigned written : 1;      /* it is done: sl_p_written is due */
    unsigned write_failed : 1;
    unsigned closed : 1;       /* srv__h1io.close came */
    unsigned freeing : 1;      /* sl_free runs: nothing is due any more */
    unsigned hup : 1;          /* epoll reported a hang-up or error */
    unsigned gone : 1;         /* then out of epoll (it reports those whatever it watches) */
    unsigned stale : 1;        /* it reported what c no longer waits for */
    srv__conn own;        /* accepted: its policy */
};

struct srv__sockloop {
    srv_server *srv;
    int epfd;
    int evfd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* ---- set before the thread runs ---- */
    int lfd;                        /* serving: the listening socket, else -1 */
    srv__sockloop_layer layer;      /* serving over a layer: layer.sio set */
    /* ---- mu ---- */
    sl_conn *adds;   /* handed over, not on the loop yet */
    sl_conn *wakes;  /* posted by srv__h1io.wake */
    unsigned open;   /* on the loop or added, not freed */
    int quit;        /* stop: no more adds; the thread ends when open is 0 */
    int quiesce_done; /* the loop took its backlog and stopped accepting */
    /* ---- any thread ---- */
    atomic_int quiescing;
    atomic_int stopping;
    /* ---- the loop's ---- */
    int listening;   /* lfd is in the epoll set */
    int spare_fd;    /* given up to accept-and-refuse when out of descriptors */
    int quiesced;
    sl_conn *conns;
    sl_conn *due;
    uint64_t stop_at; /* stopping: sockets still open then are closed */
    char rbuf[SL_READ]; /* every read (what a protocol leaves is copied) */
};

#ifdef SRV_HAVE_WSLAY
int srv__sockloop_available(void)
{
    return 1;
}

const char *srv__sockloop_upgrade_head(const srv_request *req, size_t *len)
{
    if (req->ws == NULL || srv__response_status(req) != 101)
        return NULL;
    return srv__ws_head(req, len);
}

void srv__sockloop_upgrade_drop(srv_request *req)
{
    if (req->ws != NULL)
        srv__ws_discard(req);
}
#else
int srv__sockloop_available(void)
{
    return 0;
}

const char *srv__sockloop_upgrade_head(const srv_request *req, size_t *len)
{
    (void)req;
    *len = 0;
    return NULL;
}

void srv__sockloop_upgrade_drop(srv_request *req)
{
    (void)req;
}
#endif

static void sl_kick(srv__sockloop *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->evfd, &one, sizeof one);
    (void)w;
}

static void sl_io_close(void *io, int abort);

/* What the socket carries, told its events (the same for both). */
static size_t sl_p_input(sl_conn *c, const char *d, size_t n)
{
#ifdef SRV_HAVE_WSLAY
    if (c->ws)
        return srv__ws_input(c->ws, d, n);
#endif
    return srv__h1conn_input(c->hc, d, n);
}

static void sl_p_eof(sl_conn *c)
{
#ifdef SRV_HAVE_WSLAY
    if (c->ws) {
        srv__ws_eof(c->ws);
        return;
    }
#endif
    if (c->hc)
        srv__h1conn_eof(c->hc);
    else
        sl_io_close(c, 0); /* in the handshake */
}

static void sl_p_written(sl_conn *c, int ok)
{
#ifdef SRV_HAVE_WSLAY
    if (c->ws) {
        srv__ws_written(c->ws, ok);
        return;
    }
#endif
    if (c->hc)
        srv__h1conn_written(c->hc, ok);
}

static void sl_p_wake(sl_conn *c)
{
#ifdef SRV_HAVE_WSLAY
    if (c->ws) {
        srv__ws_wake(c->ws);
        return;
    }
#endif
    if (c->hc)
        srv__h1conn_wake(c->hc);
}

static void sl_p_time(sl_conn *c, uint64_t now, int stopping, int quiescing)
{
#ifdef SRV_HAVE_WSLAY
    if (c->ws) {
        srv__ws_time(c->ws, now, stopping, quiescing);
        return;
    }
#endif
    if (c->hc) {
        srv__h1conn_time(c->hc, now, stopping, quiescing);
        return;
    }
    /* In the handshake: the first head's deadline (from the accept) covers it; a
     * quiesce or a stop closes it (nothing was asked yet). */
    if (srv__conn_due(c->pol, now, stopping, quiescing) != SRV_CONN_WAIT)
        sl_io_close(c, 0);
}

/* Loop: have c looked at once the current step is over. */
static void sl_due(sl_conn *c)
{
    if (c->due || c->freeing)
        return;
    c->due = 1;
    c->dnext = c->l->due;
    c->l->due = c;
}

/* What c waits for: input while the protocol wants it and none is held,
 * room while a write waits; in a handshake, what the layer waits for. */
static unsigned sl_wanted(const sl_conn *c)
{
    if (c->handshake)
        return c->sio->events(c->sio_ctx, EPOLLIN) | EPOLLRDHUP;
    unsigned ev = 0;
    if (c->want && c->in_off == c->in_len && !c->eof)
        ev |= EPOLLIN | EPOLLRDHUP;
    if (c->out_off < c->out_len || c->sf_left > 0)
        ev |= EPOLLOUT;
    if (c->sio && ev != 0)
        ev = c->sio->events(c->sio_ctx, ev);
    return ev;
}

/* Loop: what epoll watches for c. Events c stops waiting for stay watched
 * until one of them comes (c->stale): a request answered at once turns
 * input off and on again, which would cost two epoll_ctl a request. */
static void sl_arm(sl_conn *c)
{
    if (c->closed || c->gone)
        return;
    unsigned ev = sl_wanted(c);
    if (ev == c->events || (!c->stale && (ev & ~c->events) == 0))
        return;
    c->stale = 0;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(c->l->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0)
        c->events = ev;
}

/* A write's bytes moved: its send deadline moves on (the policy cuts one
 * that makes no progress). */
static void sl_progress(sl_conn *c)
{
    if (c->pol->state == SRV_CONN_SEND)
        srv__conn_progress(c->pol, srv__now_ms());
}

/* The write under way is over. */
static void sl_write_done(sl_conn *c, int ok)
{
    c->write_failed = !ok;
    c->written = 1;
    sl_due(c);
}

/* ---- srv__h1io ---- */

static void sl_output(sl_conn *c);

static void sl_io_write(void *io, const srv__buf *bufs, size_t n)
{
    sl_conn *c = io;
    c->writing = 1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += bufs[i].len;
    struct iovec iov[8];
    size_t k = n < 8 ? n : 8;
    for (size_t i = 0; i < k; i++)
        iov[i] = (struct iovec){(void *)bufs[i].base, bufs[i].len};
    /* MSG_DONTWAIT: the descriptor is the library's, blocking or not.
     * Through a layer, everything goes by the copy below. */
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = k};
    ssize_t w = c->closed ? -1 : c->sio ? 0 : sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        w = 0;
    if (w < 0 || (size_t)w == total) {
        sl_write_done(c, w >= 0);
        return;
    }
    /* The rest waits in a copy for room (the pieces are the caller's only
     * until sl_p_written). */
    size_t rest = total - (size_t)w;
    char *out = malloc(rest);
    if (out == NULL) {
        sl_write_done(c, 0);
        return;
    }
    size_t skip = (size_t)w, off = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b = bufs[i].base;
        size_t len = bufs[i].len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        memcpy(out + off, b + skip, len - skip);
        off += len - skip;
        skip = 0;
    }
    free(c->out);
    c->out = out;
    c->out_off = 0;
    c->out_len = rest;
    if (c->sio)
        sl_output(c);
    else
        sl_arm(c);
}

/* Loop: a file body's next bytes, while the socket takes them (then it
 * waits for room: EPOLLOUT, which also lets the loop's others go first). */
static void sl_sendfile(sl_conn *c)
{
    uint64_t sent = 0;
    while (c->sf_left > 0 && sent < SRV__SENDFILE_BURST) {
        off_t off = (off_t)c->sf_off;
        size_t ask = c->sf_left < SL_SENDFILE_MAX ? (size_t)c->sf_left : SL_SENDFILE_MAX;
        ssize_t w = sendfile(c->fd, c->sf_fd, &off, ask);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w <= 0) { /* the socket failed, or the file ended first (it shrank) */
            c->sf_left = 0;
            sl_write_done(c, 0);
            return;
        }
        c->sf_off += (uint64_t)w;
        c->sf_left -= (uint64_t)w;
        sent += (uint64_t)w;
    }
    if (sent > 0)
        sl_progress(c);
    if (c->sf_left == 0)
        sl_write_done(c, 1);
    else
        sl_arm(c);
}

static void sl_io_sendfile(void *io, int fd, uint64_t off, uint64_t len)
{
    sl_conn *c = io;
    c->writing = 1;
    c->sf_fd = fd;
    c->sf_off = off;
    c->sf_left = len;
    if (len == 0)
        sl_write_done(c, 1);
    else
        sl_sendfile(c);
}

static void sl_io_read(void *io, int on)
{
    sl_conn *c = io;
    c->want = on != 0;
    /* Held input (or the end) goes first; a layer may hold some too. */
    if (on && (c->in_off < c->in_len || c->eof || c->sio))
        sl_due(c);
    sl_arm(c);
}

static void sl_io_shut(void *io)
{
    sl_conn *c = io;
    if (c->closed)
        return;
    if (c->sio)
        c->sio->shut(c->sio_ctx);
    shutdown(c->fd, SHUT_WR);
}

static void sl_io_close(void *io, int abort)
{
    sl_conn *c = io;
    if (c->closed)
        return;
    c->closed = 1;
    if (abort) {
        struct linger lg = {1, 0};
        (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    if (!c->gone)
        epoll_ctl(c->l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    sl_due(c); /* freed once the call that closed it has returned */
}

/* Any thread (the socket's lock held): post and return. */
static void sl_io_wake(void *io)
{
    sl_conn *c = io;
    srv__sockloop *l = c->l;
    pthread_mutex_lock(&l->mu);
    int kick = 0;
    if (!c->posted) {
        c->posted = 1;
        c->wnext = l->wakes;
        l->wakes = c;
        kick = 1;
    }
    pthread_mutex_unlock(&l->mu);
    if (kick)
        sl_kick(l);
}

static int sl_io_pending(void *io)
{
    sl_conn *c = io;
    return c->in_off < c->in_len || srv__fd_input_waiting(c->fd);
}

static const srv__h1io sl_io = {
    .write = sl_io_write,
    .read = sl_io_read,
    .shut = sl_io_shut,
    .close = sl_io_close,
    .wake = sl_io_wake,
    .sendfile = sl_io_sendfile,
    .pending = sl_io_pending,
};

/* ---- the loop ---- */

/* Loop: c is closed: what it carries lets go of it; the engine closes fd
 * (handed over), or the loop does (accepted). */
static void sl_free(srv__sockloop *l, sl_conn *c)
{
    c->freeing = 1;
    if (c->hc) /* a request in the application is cancelled; no wake after it */
        srv__h1conn_free(c->hc);
#ifdef SRV_HAVE_WSLAY
    if (c->ws)
        srv__ws_free(c->ws); /* on_close if not yet; no wake after it */
#endif
    if (c->due) /* queued again by the step that closed it */
        for (sl_conn **pp = &l->due; *pp; pp = &(*pp)->dnext)
            if (*pp == c) {
                *pp = c->dnext;
                break;
            }
    pthread_mutex_lock(&l->mu);
    if (c->posted) {
        for (sl_conn **pp = &l->wakes; *pp; pp = &(*pp)->wnext)
            if (*pp == c) {
                *pp = c->wnext;
                break;
            }
    }
    pthread_mutex_unlock(&l->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        l->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->accepted) {
        if (c->sio)
            c->sio->free(c->sio_ctx);
        close(c->fd);
        srv__conn_close(&c->own);
    } else {
        c->done(c->ctx);
    }
    free(c->in);
    free(c->out);
    free(c);
    pthread_mutex_lock(&l->mu);
    l->open--;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Loop: c keeps d[0, n) that the protocol did not take, offered first
 * when it reads again. 0, or -1 when out of memory (then c closes: never
 * a request with a hole). */
static int sl_hold(sl_conn *c, const char *d, size_t n)
{
    c->in = malloc(n);
    if (c->in == NULL) {
        sl_io_close(c, 1);
        return -1;
    }
    memcpy(c->in, d, n);
    c->in_off = 0;
    c->in_len = n;
    return 0;
}

/* Loop: offer held input, read more while the protocol wants it. Reads go
 * into the loop's buffer: a connection holds memory only for what its
 * protocol left. */
static void sl_input(sl_conn *c)
{
    char *buf = c->l->rbuf;
    while (!c->closed && c->want) {
        if (c->written) { /* told first: the protocol may want no more input */
            sl_due(c);
            return;
        }
        if (c->in_off < c->in_len) {
            size_t took = sl_p_input(c, c->in + c->in_off, c->in_len - c->in_off);
            c->in_off += took;
            if (c->in_off < c->in_len)
                return; /* the rest waits for read on */
            free(c->in);
            c->in = NULL;
            c->in_off = c->in_len = 0;
            continue;
        }
        if (c->eof || c->drained)
            return;
        ssize_t r = c->sio ? c->sio->recv(c->sio_ctx, buf, SL_READ)
                           : recv(c->fd, buf, SL_READ, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) {
            c->eof = 1;
            sl_p_eof(c);
            return;
        }
        /* Less than asked: most likely all there is (a layer may hold more). */
        c->drained = c->sio == NULL && r < SL_READ;
        size_t took = c->closed ? (size_t)r : sl_p_input(c, buf, (size_t)r);
        if (took < (size_t)r && !c->closed && sl_hold(c, buf + took, (size_t)r - took) != 0)
            return;
    }
}

/* Loop: room in the socket for a write's rest. */
static void sl_output(sl_conn *c)
{
    size_t before = c->out_off;
    while (c->out_off < c->out_len) {
        ssize_t w = c->sio ? c->sio->send(c->sio_ctx, c->out + c->out_off,
                                          c->out_len - c->out_off)
                           : send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                                  MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (c->out_off > before)
                sl_progress(c);
            sl_arm(c);
            return;
        }
        if (w < 0) {
            c->write_failed = 1;
            break;
        }
        c->out_off += (size_t)w;
    }
    free(c->out);
    c->out = NULL;
    c->out_off = c->out_len = 0;
    c->written = 1;
    sl_due(c);
}

/* Loop: the protocol on c's bytes, once they flow (at the accept in
 * cleartext, after the handshake over a layer): the core's connection,
 * which speaks HTTP/2 when ALPN chose "h2" or, in cleartext, when its
 * first bytes are the prior-knowledge preface (the core sniffs them). */
static void sl_proto_start(sl_conn *c, const struct sockaddr *peer, socklen_t peer_len,
                           const unsigned char *alpn, unsigned alpn_len)
{
    c->hc = srv__h1conn_new(c->l->srv, c->pol, &sl_io, c, peer, peer_len);
    if (c->hc == NULL) { /* out of memory: closed unanswered */
        sl_io_close(c, 0);
        return;
    }
    c->want = 1;
    if (alpn_len == 2 && memcmp(alpn, "h2", 2) == 0 && c->pol->admitted)
        srv__h1conn_h2(c->hc);
    if (c->sio == NULL) /* file bodies from the descriptor: the socket's bytes are theirs */
        srv__h1conn_sendfile(c->hc);
    sl_due(c); /* over a layer, bytes that came with its last flight */
}

static void sl_handshake(sl_conn *c)
{
    const unsigned char *alpn = NULL;
    unsigned alen = 0;
    switch (c->sio->handshake(c->sio_ctx, &alpn, &alen)) {
    case SRV__SIO_WAIT:
        return;
    case SRV__SIO_PLAIN: /* shut, what came dropped, closed (a FIN, not a reset) */
        srv__refuse_fd(c->fd, 0);
        sl_io_close(c, 0);
        return;
    case SRV__SIO_DONE: {
        c->handshake = 0;
        if (atomic_load(&c->l->quiescing)) { /* no request begun: closed, as in the clear */
            sl_io_close(c, 0);
            return;
        }
        struct sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        if (getpeername(c->fd, (struct sockaddr *)&peer, &plen) != 0)
            plen = 0;
        sl_proto_start(c, (struct sockaddr *)&peer, plen, alpn, alen);
        return;
    }
    default:
        sl_io_close(c, 0);
    }
}

/* Loop: what came due for c in the last step. */
static void sl_step(srv__sockloop *l, sl_conn *c)
{
    if (!c->closed && c->handshake)
        sl_handshake(c);
    if (!c->closed && c->written) {
        c->written = 0;
        c->writing = 0;
        int ok = !c->write_failed;
        c->write_failed = 0;
        sl_p_written(c, ok);
    }
    if (!c->closed && !c->handshake && c->want && (c->in_off < c->in_len || !c->eof))
        sl_input(c);
    if (!c->closed && c->hup && !c->gone && (c->eof || !c->want)) {
        /* Reset, or both sides shut: read to the end if reading, then out
         * of epoll, and the end told (not reading: told now). */
        c->gone = 1;
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        if (!c->eof) {
            c->eof = 1;
            sl_p_eof(c);
        }
    }
    if (c->closed) {
        sl_free(l, c);
        return;
    }
    sl_arm(c);
}

static void sl_run_due(srv__sockloop *l)
{
    while (l->due) {
        sl_conn *c = l->due;
        l->due = c->dnext;
        c->due = 0;
        sl_step(l, c);
    }
}

/* Loop: c on the loop's list and in its epoll set (watching nothing yet:
 * its first step arms it). -1: the kernel is out of memory. */
static int sl_link(srv__sockloop *l, sl_conn *c)
{
    c->linked = 1;
    c->next = l->conns;
    if (l->conns)
        l->conns->prev = c;
    l->conns = c;
    struct epoll_event e = {.events = 0, .data.ptr = c};
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, c->fd, &e);
}

/* Loop: sockets handed over since the last look, and wakes. */
static void sl_messages(srv__sockloop *l)
{
    uint64_t v;
    ssize_t r = read(l->evfd, &v, sizeof v);
    (void)r;
    pthread_mutex_lock(&l->mu);
    sl_conn *adds = l->adds, *wakes = l->wakes;
    l->adds = NULL;
    l->wakes = NULL;
    pthread_mutex_unlock(&l->mu);
    while (adds) {
        sl_conn *c = adds;
        adds = c->anext;
        if (sl_link(l, c) != 0) {
            c->closed = 1; /* out of memory in the kernel: the WebSocket ends */
            sl_due(c);
            continue;
        }
        sl_p_wake(c); /* the open, and the early bytes */
    }
    /* Each posted once (the list was detached whole). A socket stays
     * marked posted until its link is read, under mu: a wake meanwhile
     * leaves it alone, one after lists it anew. A wake may close a
     * socket, but only sl_run_due frees: none of these goes before. */
    while (wakes) {
        sl_conn *c = wakes;
        pthread_mutex_lock(&l->mu);
        wakes = c->wnext;
        c->posted = 0;
        pthread_mutex_unlock(&l->mu);
        /* One posted while srv__sockloop_add was attaching it is not
         * linked yet: its add wakes it (and only then is c->ws set). */
        if (!c->closed && c->linked)
            sl_p_wake(c);
    }
    sl_run_due(l);
}

/* ---- accepting (a loop that serves) ---- */

/* Past max_connections with SRV_REFUSE_MAX already being read, or out of
 * memory: the 503 at once in cleartext, closed. */
static void sl_refuse_now(srv__sockloop *l, int fd)
{
    srv__refuse_fd(fd, l->layer.sio == NULL);
    close(fd);
}

/* Loop: fd was accepted: admitted (or refused), then read. */
static void sl_accepted(srv__sockloop *l, int fd, const struct sockaddr_storage *peer,
                        socklen_t peer_len)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sl_conn *c = srv__zalloc(sizeof *c);
    if (c == NULL) { /* counted all the same */
        srv__stats_connection_opened(l->srv);
        sl_refuse_now(l, fd);
        srv__stats_connection_closed(l->srv);
        return;
    }
    /* Past max_connections a connection is still read (its head within
     * min(header_timeout_ms, 2 s), at most SRV_REFUSE_MAX at once) so that
     * the core's 503 answers it; more are refused at once. */
    if (srv__conn_open(&c->own, l->srv, srv__now_ms()) == SRV_CONN_REFUSE_NOW) {
        sl_refuse_now(l, fd);
        srv__conn_close(&c->own);
        free(c);
        return;
    }
    c->l = l;
    c->fd = fd;
    c->pol = &c->own;
    c->accepted = 1;
    pthread_mutex_lock(&l->mu);
    l->open++;
    pthread_mutex_unlock(&l->mu);
    if (sl_link(l, c) != 0) {
        c->gone = 1;
        sl_io_close(c, 0);
        return;
    }
    if (l->layer.sio == NULL) {
        c->drained = 1; /* its request comes with EPOLLIN, most likely after the accept */
        sl_proto_start(c, (const struct sockaddr *)peer, peer_len, NULL, 0);
        return;
    }
    c->sio = l->layer.sio;
    c->sio_ctx = l->layer.open(l->layer.arg, fd);
    if (c->sio_ctx == NULL) { /* out of memory: nothing to say before a handshake */
        c->sio = NULL;
        sl_io_close(c, 0);
        return;
    }
    c->handshake = 1;
    sl_due(c);
}

/* Loop: up to `max` connections from the backlog. */
static void sl_accept_some(srv__sockloop *l, int max)
{
    for (int i = 0; i < max; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof peer;
        int fd = accept4(l->lfd, (struct sockaddr *)&peer, &peer_len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            sl_accepted(l, fd, &peer, peer_len);
            continue;
        }
        switch (errno) {
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
            continue;
        case EMFILE:
        case ENFILE:
            /* Refuse the oldest waiting client with our spare descriptor
             * rather than leave it hanging, then back off. */
            if (l->spare_fd >= 0) {
                close(l->spare_fd);
                fd = accept4(l->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd >= 0)
                    sl_refuse_now(l, fd);
                l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            }
            nanosleep(&(struct timespec){0, SL_ACCEPT_BACKOFF_MS * 1000000L}, NULL);
            return;
        default: /* EAGAIN: all taken; ENOBUFS, ENOMEM, network errors */
            return;
        }
    }
}

static void sl_unlisten(srv__sockloop *l)
{
    if (!l->listening)
        return;
    l->listening = 0;
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->lfd, NULL);
}

/* ---- time, quiesce, stop ---- */

static void sl_tick(srv__sockloop *l, uint64_t now, int quiescing)
{
    int stopping = atomic_load(&l->stopping);
    for (sl_conn *c = l->conns, *next; c; c = next) {
        next = c->next;
        if (c->closed)
            continue;
        if (stopping && l->stop_at != 0 && now >= l->stop_at)
            sl_io_close(c, 1); /* its last answer or 1001 did not finish in time */
        else
            sl_p_time(c, now, stopping, quiescing);
    }
    sl_run_due(l);
}

/* Loop: the quiesce's request came: what the kernel completed before it
 * is taken (closing the socket would reset it), then no more; idle
 * connections close, and one whose request waits unread counts as
 * arriving before the controller hears the loop is done. */
static void sl_quiesce(srv__sockloop *l)
{
    l->quiesced = 1;
    if (l->listening)
        sl_accept_some(l, l->srv->cfg.backlog);
    sl_unlisten(l);
    sl_run_due(l);
    sl_tick(l, srv__now_ms(), 1);
    pthread_mutex_lock(&l->mu);
    l->quiesce_done = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void *sl_main(void *arg)
{
    srv__sockloop *l = arg;
    struct epoll_event evs[SL_EVENTS];
    uint64_t next_tick = srv__now_ms() + SL_TICK_MS;
    int deferred = 0;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        int done = l->quit && l->open == 0 && l->adds == NULL;
        pthread_mutex_unlock(&l->mu);
        if (done)
            break;
        uint64_t now = srv__now_ms();
        int timeout = now >= next_tick ? 0 : (int)(next_tick - now);
        int n = epoll_wait(l->epfd, evs, SL_EVENTS, timeout);
        if (n < 0 && errno != EINTR)
            break;
        uint64_t polled = srv__now_ms();
        int messages = 0;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == l) {
                messages = 1;
                continue;
            }
            if (evs[i].data.ptr == &l->lfd) {
                if (l->listening)
                    sl_accept_some(l, SL_ACCEPT_BATCH);
                continue;
            }
            sl_conn *c = evs[i].data.ptr;
            if (c->closed)
                continue;
            /* Through a layer any event may be the one a write waits for. */
            if (c->out_off < c->out_len && ((evs[i].events & EPOLLOUT) || c->sio))
                sl_output(c);
            if (c->sf_left > 0 && !c->written && (evs[i].events & (EPOLLOUT | EPOLLERR)))
                sl_sendfile(c);
            if (evs[i].events & (EPOLLHUP | EPOLLERR))
                c->hup = 1;
            if (c->handshake)
                sl_due(c);
            if (evs[i].events & ~(sl_wanted(c) | EPOLLHUP | EPOLLERR)) {
                c->stale = 1; /* watched no more once its step is over */
                sl_due(c);
            }
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                c->drained = 0;
                sl_due(c);
            }
        }
        sl_run_due(l);
        if (messages)
            sl_messages(l);
        if (!l->quiesced && (atomic_load(&l->quiescing) || atomic_load(&l->stopping)))
            sl_quiesce(l);
        now = srv__now_ms();
        int stopping = atomic_load(&l->stopping);
        if (stopping && l->stop_at == 0)
            l->stop_at = now + SL_STOP_WAIT_MS;
        if (now < next_tick && !stopping)
            continue;
        /* Events that came while this batch ran (a full one, or a slow
         * one: a loop creating workers under load) are taken before the
         * deadlines are looked at, within reason: a connection whose
         * request waits in its socket is read, not closed as late. */
        if ((n == SL_EVENTS || now - polled > SL_TICK_MS) && !stopping &&
            deferred < SL_TICK_DEFER) {
            deferred++;
            continue;
        }
        deferred = 0;
        sl_tick(l, now, atomic_load(&l->quiescing));
        next_tick = now + SL_TICK_MS;
    }
    return NULL;
}

static void sl_dispose(srv__sockloop *l)
{
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->evfd >= 0)
        close(l->evfd);
    if (l->spare_fd >= 0)
        close(l->spare_fd);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int srv__sockloop_serve(srv__sockloop **out, srv_server *srv, int listen_fd,
                        const srv__sockloop_layer *layer)
{
    srv__sockloop *l = srv__zalloc(sizeof *l);
    if (l == NULL)
        return SRV_ENOMEM;
    l->srv = srv;
    l->lfd = listen_fd;
    l->spare_fd = -1;
    if (layer)
        l->layer = *layer;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = l};
    /* The listening socket wakes one loop per connect, not all. */
    struct epoll_event le = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &l->lfd};
    if (l->epfd < 0 || l->evfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->evfd, &e) != 0 ||
        (listen_fd >= 0 && epoll_ctl(l->epfd, EPOLL_CTL_ADD, listen_fd, &le) != 0)) {
        int err = errno;
        sl_dispose(l);
        return err == ENOMEM ? SRV_ENOMEM : SRV_ESYS;
    }
    if (listen_fd >= 0) {
        l->listening = 1;
        l->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (srv__thread_create(&l->thread, NULL, sl_main, l) != 0) {
        sl_dispose(l);
        return SRV_ETHREAD;
    }
    *out = l;
    return 0;
}

int srv__sockloop_start(srv__sockloop **out, srv_server *srv)
{
    return srv__sockloop_serve(out, srv, -1, NULL);
}

#ifdef SRV_HAVE_WSLAY
int srv__sockloop_add(srv__sockloop *l, int fd, const srv__sockio *sio, void *sio_ctx,
                      srv_request *req, srv__conn *policy, const char *early, size_t n,
                      void (*done)(void *ctx), void *ctx)
{
    sl_conn *c = srv__zalloc(sizeof *c);
    if (c == NULL) {
        srv__sockloop_upgrade_drop(req);
        return SRV_ENOMEM;
    }
    c->l = l;
    c->fd = fd;
    c->sio = sio;
    c->sio_ctx = sio_ctx;
    c->pol = policy;
    c->done = done;
    c->ctx = ctx;
    pthread_mutex_lock(&l->mu);
    int quit = l->quit;
    if (!quit)
        l->open++; /* before the attach: its wakes may come at once */
    pthread_mutex_unlock(&l->mu);
    if (quit) {
        free(c);
        srv__sockloop_upgrade_drop(req);
        return SRV_ESTATE;
    }
    c->ws = srv__ws_attach(req, policy, &sl_io, c, early, n);
    pthread_mutex_lock(&l->mu);
    if (c->ws == NULL) {
        l->open--;
        pthread_cond_broadcast(&l->cv);
    } else {
        c->anext = l->adds;
        l->adds = c;
    }
    pthread_mutex_unlock(&l->mu);
    if (c->ws == NULL) {
        free(c);
        return SRV_ENOMEM;
    }
    sl_kick(l);
    return 0;
}
#else
int srv__sockloop_add(srv__sockloop *l, int fd, const srv__sockio *sio, void *sio_ctx,
                      srv_request *req, srv__conn *policy, const char *early, size_t n,
                      void (*done)(void *ctx), void *ctx)
{
    (void)l, (void)fd, (void)sio, (void)sio_ctx, (void)req, (void)policy, (void)early, (void)n;
    (void)done, (void)ctx;
    return SRV_ESTATE;
}
#endif

int srv__sockloop_http2(void)
{
#ifdef SRV_HAVE_NGHTTP2
    return 1;
#else
    return 0;
#endif
}

void srv__sockloop_quiesce(srv__sockloop *l)
{
    if (l == NULL)
        return;
    atomic_store(&l->quiescing, 1);
    sl_kick(l);
}

void srv__sockloop_quiesced(srv__sockloop *l)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    while (!l->quiesce_done)
        pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
}

void srv__sockloop_stopping(srv__sockloop *l)
{
    if (l == NULL)
        return;
    atomic_store(&l->stopping, 1);
    pthread_mutex_lock(&l->mu);
    l->quit = 1;
    pthread_mutex_unlock(&l->mu);
    sl_kick(l);
}

void srv__sockloop_stop(srv__sockloop *l)
{
    if (l == NULL)
        return;
    srv__sockloop_stopping(l);
    pthread_join(l->thread, NULL);
}

void srv__sockloop_free(srv__sockloop *l)
{
    if (l != NULL)
        sl_dispose(l);
}
