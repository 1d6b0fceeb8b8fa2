/*
 * The loop for sockets an engine hands over (api/srv_sockloop.h): one
 * epoll thread that carries WebSockets (core/ws.c) and HTTP/2 connections
 * (core/h1conn.c, core/h2conn.c) over non-blocking descriptors, through
 * the srv__h1io a loop engine gives srv__h1conn (or the engine's
 * srv__sockio: threadpool's TLS). Everything but wake runs on this thread;
 * wake posts the socket on a list and writes an eventfd.
 */
#include "srv_core.h"
#include "srv_h1conn.h"
#include "srv_sockloop.h"
#ifdef SRV_HAVE_WSLAY
#include "srv_ws.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SL_TICK_MS 50           /* the deadlines' pace (srv__ws_time, srv__h1conn_time) */
#define SL_READ 16384           /* one read's bytes */
#define SL_STOP_WAIT_MS 1000    /* a stop's 1001 handshakes, then closed */
#define SL_EVENTS 64

typedef struct sl_conn sl_conn;
struct sl_conn {
    srv__sockloop *l;
    int fd;
    const srv__sockio *sio; /* NULL: the socket's own bytes */
    void *sio_ctx;
    srv_ws *ws;           /* what it carries: a WebSocket, */
    srv__h1conn *hc;      /* or the core's connection speaking HTTP/2 */
    void (*done)(void *ctx);
    void *ctx;
    sl_conn *prev, *next; /* l->conns (loop) */
    sl_conn *anext;       /* l->adds (l->mu) */
    sl_conn *wnext;       /* l->wakes (l->mu) */
    int posted;           /* on l->wakes (l->mu) */
    sl_conn *dnext;       /* l->due (loop) */
    int due;              /* on l->due (loop) */
    /* ---- the loop's ---- */
    int linked;           /* taken from l->adds: ws is set, wakes count */
    int want;             /* srv__h1io.read on */
    int eof;              /* the peer ended (or the socket failed): told */
    char *in;             /* read, not taken yet: in[in_off, in_len) */
    size_t in_off, in_len;
    char *out;            /* a write's rest: out[out_off, out_len) */
    size_t out_off, out_len;
    int writing;          /* a write is under way */
    int written;          /* it is done: sl_p_written is due */
    int write_failed;
    int closed;           /* srv__h1io.close came */
    int freeing;          /* sl_free runs: nothing is due any more */
    int hup;              /* epoll reported a hang-up or error */
    int gone;             /* then out of epoll (it reports those whatever it watches) */
    unsigned events;      /* what epoll watches now */
    int stale;            /* it reported what c no longer waits for */
};

struct srv__sockloop {
    srv_server *srv;
    int epfd;
    int evfd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* ---- mu ---- */
    sl_conn *adds;   /* handed over, not on the loop yet */
    sl_conn *wakes;  /* posted by srv__h1io.wake */
    unsigned open;   /* added and not done */
    int quit;        /* stop: no more adds; the thread ends when open is 0 */
    /* ---- any thread ---- */
    atomic_int quiescing;
    atomic_int stopping;
    /* ---- the loop's ---- */
    sl_conn *conns;
    sl_conn *due;
    uint64_t stop_at; /* stopping: sockets still open then are closed */
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

static void sl_kick(srv__sockloop *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->evfd, &one, sizeof one);
    (void)w;
}

/* What the socket carries, told its events (the same for both). */
static size_t sl_p_input(sl_conn *c, const char *d, size_t n)
{
    return c->hc ? srv__h1conn_input(c->hc, d, n) : srv__ws_input(c->ws, d, n);
}

static void sl_p_eof(sl_conn *c)
{
    if (c->hc)
        srv__h1conn_eof(c->hc);
    else
        srv__ws_eof(c->ws);
}

static void sl_p_written(sl_conn *c, int ok)
{
    if (c->hc)
        srv__h1conn_written(c->hc, ok);
    else
        srv__ws_written(c->ws, ok);
}

static void sl_p_wake(sl_conn *c)
{
    if (c->hc)
        srv__h1conn_wake(c->hc);
    else
        srv__ws_wake(c->ws);
}

static void sl_p_time(sl_conn *c, uint64_t now, int stopping, int quiescing)
{
    if (c->hc)
        srv__h1conn_time(c->hc, now, stopping, quiescing);
    else
        srv__ws_time(c->ws, now, stopping, quiescing);
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
 * room while a write waits. */
static unsigned sl_wanted(const sl_conn *c)
{
    unsigned ev = 0;
    if (c->want && c->in_off == c->in_len && !c->eof)
        ev |= EPOLLIN | EPOLLRDHUP;
    if (c->out_off < c->out_len)
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
    if (w < 0) {
        c->write_failed = 1;
        c->written = 1;
        sl_due(c);
        return;
    }
    if ((size_t)w == total) {
        c->written = 1;
        sl_due(c);
        return;
    }
    /* The rest waits in a copy for room (the pieces are the caller's only
     * until sl_p_written). */
    size_t rest = total - (size_t)w;
    char *out = malloc(rest);
    if (out == NULL) {
        c->write_failed = 1;
        c->written = 1;
        sl_due(c);
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

static void sl_io_read(void *io, int on)
{
    sl_conn *c = io;
    c->want = on;
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

static const srv__h1io sl_io = {
    .write = sl_io_write,
    .read = sl_io_read,
    .shut = sl_io_shut,
    .close = sl_io_close,
    .wake = sl_io_wake,
};

/* ---- the loop ---- */

/* Loop: c is closed: the WebSocket lets go of it, the engine closes fd. */
static void sl_free(srv__sockloop *l, sl_conn *c)
{
    c->freeing = 1;
    if (c->hc) /* a request in the application is cancelled; no wake after it */
        srv__h1conn_free(c->hc);
    else
        srv__ws_free(c->ws); /* on_close if not yet; no wake after it */
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
    c->done(c->ctx);
    free(c->in);
    free(c->out);
    free(c);
    pthread_mutex_lock(&l->mu);
    l->open--;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Loop: offer held input, read more while the protocol wants it. */
static void sl_input(sl_conn *c)
{
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
            continue;
        }
        if (c->eof)
            return;
        if (c->in == NULL && (c->in = malloc(SL_READ)) == NULL) {
            c->eof = 1;
            sl_p_eof(c);
            return;
        }
        ssize_t r = c->sio ? c->sio->recv(c->sio_ctx, c->in, SL_READ)
                           : recv(c->fd, c->in, SL_READ, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            free(c->in); /* nothing held while idle */
            c->in = NULL;
            c->in_off = c->in_len = 0;
            return;
        }
        if (r <= 0) {
            c->eof = 1;
            sl_p_eof(c);
            return;
        }
        c->in_off = 0;
        c->in_len = (size_t)r;
    }
}

/* Loop: room in the socket for a write's rest. */
static void sl_output(sl_conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = c->sio ? c->sio->send(c->sio_ctx, c->out + c->out_off,
                                          c->out_len - c->out_off)
                           : send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                                  MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
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

/* Loop: what came due for c in the last step. */
static void sl_step(srv__sockloop *l, sl_conn *c)
{
    if (!c->closed && c->written) {
        c->written = 0;
        c->writing = 0;
        int ok = !c->write_failed;
        c->write_failed = 0;
        sl_p_written(c, ok);
    }
    if (!c->closed && c->want && (c->in_off < c->in_len || !c->eof))
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
        c->linked = 1;
        c->next = l->conns;
        if (l->conns)
            l->conns->prev = c;
        l->conns = c;
        struct epoll_event e = {.events = 0, .data.ptr = c};
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, c->fd, &e) != 0) {
            c->closed = 1; /* out of memory in the kernel: the WebSocket ends */
            sl_due(c);
            continue;
        }
        sl_p_wake(c); /* the open, and the early bytes */
        if (c->hc) /* its early bytes, as input */
            sl_due(c);
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

static void sl_tick(srv__sockloop *l, uint64_t now)
{
    int stopping = atomic_load(&l->stopping), quiescing = atomic_load(&l->quiescing);
    for (sl_conn *c = l->conns, *next; c; c = next) {
        next = c->next;
        if (c->closed)
            continue;
        if (stopping && l->stop_at != 0 && now >= l->stop_at)
            sl_io_close(c, 1); /* its 1001 got no answer in time */
        else
            sl_p_time(c, now, stopping, quiescing);
    }
    sl_run_due(l);
}

static void *sl_main(void *arg)
{
    srv__sockloop *l = arg;
    struct epoll_event evs[SL_EVENTS];
    uint64_t next_tick = srv__now_ms() + SL_TICK_MS;
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
        int messages = 0;
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == l) {
                messages = 1;
                continue;
            }
            sl_conn *c = evs[i].data.ptr;
            if (c->closed)
                continue;
            /* Through a layer any event may be the one a write waits for. */
            if (c->out_off < c->out_len && ((evs[i].events & EPOLLOUT) || c->sio))
                sl_output(c);
            if (evs[i].events & (EPOLLHUP | EPOLLERR))
                c->hup = 1;
            if (evs[i].events & ~(sl_wanted(c) | EPOLLHUP | EPOLLERR)) {
                c->stale = 1; /* watched no more once its step is over */
                sl_due(c);
            }
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                sl_due(c);
        }
        sl_run_due(l);
        if (messages)
            sl_messages(l);
        now = srv__now_ms();
        if (atomic_load(&l->stopping) && l->stop_at == 0)
            l->stop_at = now + SL_STOP_WAIT_MS;
        if (now >= next_tick || atomic_load(&l->stopping)) {
            sl_tick(l, now);
            next_tick = now + SL_TICK_MS;
        }
    }
    return NULL;
}

int srv__sockloop_start(srv__sockloop **out, srv_server *srv)
{
    srv__sockloop *l = srv__zalloc(sizeof *l);
    if (l == NULL)
        return SRV_ENOMEM;
    l->srv = srv;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = l};
    if (l->epfd < 0 || l->evfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->evfd, &e) != 0 ||
        pthread_mutex_init(&l->mu, NULL) != 0) {
        if (l->epfd >= 0)
            close(l->epfd);
        if (l->evfd >= 0)
            close(l->evfd);
        free(l);
        return SRV_ENOMEM;
    }
    pthread_cond_init(&l->cv, NULL);
    if (srv__thread_create(&l->thread, NULL, sl_main, l) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        close(l->epfd);
        close(l->evfd);
        free(l);
        return SRV_ETHREAD;
    }
    *out = l;
    return 0;
}

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

#ifdef SRV_HAVE_NGHTTP2
int srv__sockloop_http2(void)
{
    return 1;
}

int srv__sockloop_add_h2(srv__sockloop *l, int fd, const srv__sockio *sio, void *sio_ctx,
                         srv__conn *policy, const struct sockaddr *peer, socklen_t peer_len,
                         const char *early, size_t n, void (*done)(void *ctx), void *ctx)
{
    sl_conn *c = srv__zalloc(sizeof *c);
    /* The early bytes are offered first, from the read buffer (which a
     * read then fills: at least SL_READ). */
    char *in = n > 0 ? malloc(n > SL_READ ? n : SL_READ) : NULL;
    if (c == NULL || (n > 0 && in == NULL)) {
        free(c);
        free(in);
        return SRV_ENOMEM;
    }
    if (n > 0)
        memcpy(in, early, n);
    *c = (sl_conn){.l = l, .fd = fd, .sio = sio, .sio_ctx = sio_ctx, .done = done, .ctx = ctx,
                   .in = in, .in_len = n, .want = 1};
    pthread_mutex_lock(&l->mu);
    int quit = l->quit;
    if (!quit)
        l->open++;
    pthread_mutex_unlock(&l->mu);
    c->hc = quit ? NULL : srv__h1conn_new(l->srv, policy, &sl_io, c, peer, peer_len);
    if (c->hc != NULL)
        srv__h1conn_h2(c->hc);
    pthread_mutex_lock(&l->mu);
    if (c->hc == NULL && !quit) {
        l->open--;
        pthread_cond_broadcast(&l->cv);
    } else if (c->hc != NULL) {
        c->anext = l->adds;
        l->adds = c;
    }
    pthread_mutex_unlock(&l->mu);
    if (c->hc == NULL) {
        free(in);
        free(c);
        return quit ? SRV_ESTATE : SRV_ENOMEM;
    }
    sl_kick(l);
    return 0;
}
#endif /* SRV_HAVE_NGHTTP2 */

void srv__sockloop_quiesce(srv__sockloop *l)
{
    if (l == NULL)
        return;
    atomic_store(&l->quiescing, 1);
    sl_kick(l);
}

void srv__sockloop_stop(srv__sockloop *l)
{
    if (l == NULL)
        return;
    atomic_store(&l->stopping, 1);
    pthread_mutex_lock(&l->mu);
    l->quit = 1;
    pthread_mutex_unlock(&l->mu);
    sl_kick(l);
    pthread_join(l->thread, NULL);
}

void srv__sockloop_free(srv__sockloop *l)
{
    if (l == NULL)
        return;
    close(l->epfd);
    close(l->evfd);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

#else /* !SRV_HAVE_WSLAY: no WebSocket (nor HTTP/2), so nothing is ever handed over */

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

int srv__sockloop_start(srv__sockloop **out, srv_server *srv)
{
    (void)srv;
    *out = NULL;
    return 0;
}

int srv__sockloop_add(srv__sockloop *l, int fd, const srv__sockio *sio, void *sio_ctx,
                      srv_request *req, srv__conn *policy, const char *early, size_t n,
                      void (*done)(void *ctx), void *ctx)
{
    (void)l, (void)fd, (void)sio, (void)sio_ctx, (void)req, (void)policy, (void)early, (void)n;
    (void)done, (void)ctx;
    return SRV_ESTATE;
}

void srv__sockloop_quiesce(srv__sockloop *l)
{
    (void)l;
}

void srv__sockloop_stop(srv__sockloop *l)
{
    (void)l;
}

void srv__sockloop_free(srv__sockloop *l)
{
    (void)l;
}

#endif

#if !defined(SRV_HAVE_WSLAY) || !defined(SRV_HAVE_NGHTTP2)
/* A build without nghttp2 (or without the loop): no HTTP/2 is handed over. */
int srv__sockloop_http2(void)
{
    return 0;
}

int srv__sockloop_add_h2(srv__sockloop *l, int fd, const srv__sockio *sio, void *sio_ctx,
                         srv__conn *policy, const struct sockaddr *peer, socklen_t peer_len,
                         const char *early, size_t n, void (*done)(void *ctx), void *ctx)
{
    (void)l, (void)fd, (void)sio, (void)sio_ctx, (void)policy, (void)peer, (void)peer_len;
    (void)early, (void)n, (void)done, (void)ctx;
    return SRV_ESTATE;
}
#endif
