/* The mhd engine's gate (engines/mhd_gate.h): its own accept, and a look
 * at each cleartext connection's first head before libmicrohttpd reads it. */
#include "mhd_gate.h"

#include "srv_http1.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* While quiescing, a connection that has sent nothing is closed once this
 * old: its client may be sending its request right now. */
#define EMHD_GATE_QUIET_MS 100

/* The gate's tick while connections wait: their deadlines and, once
 * quiescing, EMHD_GATE_QUIET_MS are checked this often. */
#define EMHD_GATE_TICK_MS 50

/* Commands for the gate's thread (emhd_gate.cmd bits). */
enum { EMHD_GATE_QUIESCE = 1, EMHD_GATE_STOP = 2, EMHD_GATE_KICK = 4 };

/* A cleartext connection whose first head is not complete yet. */
typedef struct emhd_wait {
    struct emhd_wait *prev, *next;
    int fd;
    long long accepted;
    srv__conn conn; /* the policy's (admission, counts), handed on with fd */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    int bad;       /* the hand's `bad` and `good` (emhd_gate_look) */
    uint64_t good;
} emhd_wait;

struct emhd_gate {
    srv_server *srv;
    struct emhd_gate_ops ops;
    bool tls;
    int lfd;            /* the gate's thread; -1 once closed */
    int epfd;
    int wake;           /* eventfd: a command is in cmd */
    atomic_int cmd;
    atomic_bool paused; /* not accepting until a kick: no room */
    bool quiescing;     /* the gate's thread */
    emhd_wait *waiting; /* the gate's thread */
    unsigned nwaiting;
    char *buf;          /* the peek buffer, cap bytes */
    size_t cap;
    pthread_t thread;
    bool stopped;       /* emhd_gate_stop ran (controlling thread) */
    pthread_mutex_t mu; /* quiesced, for emhd_gate_quiesce's wait */
    pthread_cond_t cond;
    bool quiesced;
};

/* epoll tags of the two descriptors that are no connection. */
static char emhd_gate_tag_listen, emhd_gate_tag_wake;

static long long emhd_gate_now(void)
{
    return (long long)srv__now_ms();
}

static void emhd_gate_unlink(emhd_gate *g, emhd_wait *w)
{
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        g->waiting = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    g->nwaiting--;
    epoll_ctl(g->epfd, EPOLL_CTL_DEL, w->fd, NULL);
}

/* The connection leaves the gate: to MHD (hand), closed, or lingering. */
static void emhd_gate_hand(emhd_gate *g, emhd_wait *w, bool arriving)
{
    emhd_gate_unlink(g, w);
    if (arriving) /* the policy counts it for the stop's grace (not a refused one) */
        srv__conn_begun(&w->conn, srv__now_ms());
    g->ops.hand(g->ops.ctx, w->fd, (const struct sockaddr *)&w->peer, w->peer_len, &w->conn,
                w->bad, w->good);
    free(w);
}

static void emhd_gate_close(emhd_gate *g, emhd_wait *w)
{
    emhd_gate_unlink(g, w);
    srv__conn_close(&w->conn);
    close(w->fd);
    free(w);
}

/*
 * Look at what w's client has sent (left in the socket for MHD). The
 * first head complete, or past what the core allows: the core's answer to
 * bad input (and, when the whole request is there, to bad body framing),
 * or to MHD. Not complete yet: keep waiting (the next segment is a new
 * edge). Returns false when w is gone.
 */
static bool emhd_gate_look(emhd_gate *g, emhd_wait *w)
{
    ssize_t n = recv(w->fd, g->buf, g->cap, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return true;
    if (n <= 0) { /* the client left before a byte, or an error */
        emhd_gate_close(g, w);
        return false;
    }
    if (!w->conn.begun) {
        /* A request has begun (a stop's grace waits for it): refused at the
         * accept, it takes a slot freed since (the policy's readmission). */
        (void)srv__conn_readmit(&w->conn);
        srv__conn_begun(&w->conn, srv__now_ms());
    }
    if (g->quiescing) { /* a request arrives while the server stops: MHD's
                         * grace rules answer it (served or 503) */
        emhd_gate_hand(g, w, true);
        return false;
    }
    srv_request *req =
        srv__request_new(g->srv, (const struct sockaddr *)&w->peer, w->peer_len);
    if (req == NULL) { /* out of memory: MHD may still manage */
        emhd_gate_hand(g, w, false);
        return false;
    }
    srv_http1 p;
    srv__http1_init(&p, g->srv);
    size_t off = 0, used = 0;
    bool head = false, streamed = false;
    uint64_t good = 0;
    enum srv_http1_event ev;
    for (;;) {
        ev = srv__http1_feed(&p, req, g->buf + off, (size_t)n - off, &used);
        off += used;
        if (ev == SRV_HTTP1_BODY) {
            good += p.piece_len;
            continue;
        }
        if (ev != SRV_HTTP1_HEAD_READY)
            break;
        head = true;
        /* A streamed body is the application's to limit, but its framing
         * is the core's: what came with the head is looked at in pieces
         * (libmicrohttpd de-chunks leniently, e.g. a bare LF ending a
         * chunk line, which the core answers 400). */
        if (srv__request_streams_body(req)) {
            streamed = true;
            srv__http1_stream_body(&p);
        }
    }
    int h2_preface = p.h2_preface;
    int status = srv__http1_status(&p);
    srv__http1_free(&p);
    if (ev == SRV_HTTP1_FAIL && streamed) {
        /* The application has a say in a streamed body (the head is
         * dispatched, the good bytes delivered, then on_end): MHD reads it
         * and the engine ends it where the core's parser failed. */
        srv__request_release(req);
        w->bad = status;
        w->good = good;
        emhd_gate_hand(g, w, false);
        return false;
    }
    if (ev == SRV_HTTP1_FAIL) {
        emhd_gate_unlink(g, w);
        if (h2_preface) { /* not HTTP/1: frames the client understands */
            size_t len = 0;
            const char *refusal = srv__h2_preface_refusal(&len);
            (void)send(w->fd, refusal, len, MSG_NOSIGNAL | MSG_DONTWAIT);
            srv__request_release(req);
        } else {
            g->ops.answer(g->ops.ctx, req, w->fd, status);
        }
        srv__conn_close(&w->conn);
        g->ops.linger(g->ops.ctx, w->fd);
        free(w);
        return false;
    }
    srv__request_release(req);
    /* The head is complete (its body, if any, is MHD's to read), or the
     * buffer is full: nothing more to learn here. */
    if (head || (size_t)n == g->cap) {
        emhd_gate_hand(g, w, false);
        return false;
    }
    return true;
}

/* Past max_connections with SRV_REFUSE_MAX refusals being read: the
 * core's 503 at once in cleartext (the canned one out of memory) and a
 * lingering close; over TLS only the close (no handshake here). */
static void emhd_gate_refuse_now(emhd_gate *g, emhd_wait *w)
{
    srv__conn_close(&w->conn);
    if (g->tls) {
        close(w->fd);
    } else {
        srv_request *req =
            srv__request_new(g->srv, (const struct sockaddr *)&w->peer, w->peer_len);
        if (req != NULL) {
            g->ops.answer(g->ops.ctx, req, w->fd, 503);
        } else {
            size_t len = 0;
            const char *refusal = srv__refusal_503(&len);
            (void)send(w->fd, refusal, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        g->ops.linger(g->ops.ctx, w->fd);
    }
    free(w);
}

/* Stop watching the listening socket until the next tick or kick finds
 * room (emhd_gate_resume): it stays readable while connections queue. */
static void emhd_gate_pause(emhd_gate *g)
{
    atomic_store(&g->paused, true);
    struct epoll_event ev = {.events = 0, .data.ptr = &emhd_gate_tag_listen};
    epoll_ctl(g->epfd, EPOLL_CTL_MOD, g->lfd, &ev);
}

/* Accept what the listening socket has, while there is room. */
static void emhd_gate_accept(emhd_gate *g)
{
    for (int i = 0; i < 64 && g->lfd >= 0; i++) {
        if (!g->ops.room(g->ops.ctx, g->nwaiting)) {
            /* Paused before looking again, so a kick in between is seen. */
            atomic_store(&g->paused, true);
            if (!g->ops.room(g->ops.ctx, g->nwaiting)) {
                emhd_gate_pause(g);
                return;
            }
            atomic_store(&g->paused, false);
        }
        emhd_wait *w = calloc(1, sizeof *w);
        if (w == NULL) {
            emhd_gate_pause(g); /* the connection waits in the backlog */
            return;
        }
        w->peer_len = sizeof w->peer;
        w->fd = accept4(g->lfd, (struct sockaddr *)&w->peer, &w->peer_len,
                        SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (w->fd < 0) {
            int err = errno;
            free(w);
            /* Out of descriptors or memory: the connection stays queued and
             * the listening socket readable, so wait a tick, not spin. */
            if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != ECONNABORTED)
                emhd_gate_pause(g);
            return;
        }
        w->accepted = emhd_gate_now();
        /* Admission and the srv_stats counts are the policy's, from the
         * accept; MHD's NOTIFY_CLOSED closes it, or the gate. */
        if (srv__conn_open(&w->conn, g->srv, (uint64_t)w->accepted) == SRV_CONN_REFUSE_NOW) {
            emhd_gate_refuse_now(g, w);
            continue;
        }
        w->next = g->waiting;
        if (g->waiting != NULL)
            g->waiting->prev = w;
        g->waiting = w;
        g->nwaiting++;
        if (g->tls) {
            /* Cleartext only: TLS bytes are MHD's to decrypt. Unlinked
             * without an epoll registration (EPOLL_CTL_DEL fails quietly). */
            emhd_gate_hand(g, w, false);
            continue;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = w};
        if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, w->fd, &ev) != 0) {
            emhd_gate_hand(g, w, false); /* cannot watch it: MHD's as before */
            continue;
        }
        (void)emhd_gate_look(g, w); /* the first bytes often came with the accept */
    }
}

static void emhd_gate_resume(emhd_gate *g)
{
    if (g->lfd < 0 || !atomic_load(&g->paused) || !g->ops.room(g->ops.ctx, g->nwaiting))
        return;
    atomic_store(&g->paused, false);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &emhd_gate_tag_listen};
    epoll_ctl(g->epfd, EPOLL_CTL_MOD, g->lfd, &ev);
}

/* Deadlines: a first head not complete by the policy's deadline (from the
 * accept) goes to MHD, whose watchdog ends it there as it ends every late
 * head (srv__conn_due: 408, a refused one's 503, silence a close). While
 * quiescing, silent connections close. */
static void emhd_gate_expire(emhd_gate *g)
{
    long long now = emhd_gate_now();
    for (emhd_wait *w = g->waiting, *next; w != NULL; w = next) {
        next = w->next;
        if ((uint64_t)now >= w->conn.deadline) { /* the policy's: a refused one's is shorter */
            emhd_gate_hand(g, w, false);
        } else if (g->quiescing && now - w->accepted >= EMHD_GATE_QUIET_MS) {
            char b;
            ssize_t r = recv(w->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (r > 0)
                emhd_gate_hand(g, w, true);
            else
                emhd_gate_close(g, w);
        }
    }
}

static void emhd_gate_do_quiesce(emhd_gate *g)
{
    if (g->lfd >= 0) {
        epoll_ctl(g->epfd, EPOLL_CTL_DEL, g->lfd, NULL);
        close(g->lfd);
        g->lfd = -1;
    }
    g->quiescing = true;
    /* Those with bytes are requests arriving: MHD's now, counted. */
    for (emhd_wait *w = g->waiting, *next; w != NULL; w = next) {
        next = w->next;
        char b;
        if (recv(w->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
            emhd_gate_hand(g, w, true);
    }
    pthread_mutex_lock(&g->mu);
    g->quiesced = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->mu);
}

static void *emhd_gate_main(void *arg)
{
    emhd_gate *g = arg;
    struct epoll_event evs[64];
    long long next_tick = 0;
    for (;;) {
        int timeout = g->waiting != NULL || atomic_load(&g->paused) ? EMHD_GATE_TICK_MS : -1;
        int n = epoll_wait(g->epfd, evs, 64, timeout);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &emhd_gate_tag_wake) {
                uint64_t v;
                (void)!read(g->wake, &v, sizeof v);
                continue;
            }
            if (tag == &emhd_gate_tag_listen) {
                emhd_gate_accept(g);
                continue;
            }
            /* A client that shut its side with the head still incomplete
             * sends no more: MHD reads what there is and ends it its way. */
            if (emhd_gate_look(g, tag) && (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                emhd_gate_hand(g, tag, g->quiescing);
        }
        int cmd = atomic_exchange(&g->cmd, 0);
        if (cmd & EMHD_GATE_STOP)
            break;
        if ((cmd & EMHD_GATE_QUIESCE) && !g->quiescing)
            emhd_gate_do_quiesce(g);
        /* Not on every event: a process out of descriptors would spin on
         * accept, and the deadlines walk every waiting connection. */
        long long now = emhd_gate_now();
        if (cmd & EMHD_GATE_KICK)
            emhd_gate_resume(g);
        if (now >= next_tick) {
            next_tick = now + EMHD_GATE_TICK_MS;
            emhd_gate_resume(g);
            emhd_gate_expire(g);
        }
    }
    return NULL;
}

static void emhd_gate_command(emhd_gate *g, int cmd)
{
    atomic_fetch_or(&g->cmd, cmd);
    uint64_t one = 1;
    (void)!write(g->wake, &one, sizeof one);
}

int emhd_gate_start(emhd_gate **out, srv_server *srv, int lfd, bool tls,
                    const struct emhd_gate_ops *ops)
{
    *out = NULL;
    emhd_gate *g = calloc(1, sizeof *g);
    if (g == NULL)
        return SRV_ENOMEM;
    const srv_config *cfg = srv__server_config(srv);
    g->srv = srv;
    g->ops = *ops;
    g->tls = tls;
    g->lfd = lfd;
    /* A head at the core's limits, and what follows it in the same read:
     * past max_header_bytes the core's parser has failed (431). */
    size_t head = cfg->max_header_bytes > cfg->max_uri_bytes ? cfg->max_header_bytes
                                                             : cfg->max_uri_bytes;
    g->cap = head + 1024;
    g->buf = malloc(g->cap);
    g->epfd = epoll_create1(EPOLL_CLOEXEC);
    g->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int rc = g->buf == NULL ? SRV_ENOMEM : 0;
    if (rc == 0 && (g->epfd < 0 || g->wake < 0))
        rc = SRV_ETHREAD;
    if (rc == 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &emhd_gate_tag_wake};
        struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &emhd_gate_tag_listen};
        if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->wake, &ev) != 0 ||
            epoll_ctl(g->epfd, EPOLL_CTL_ADD, lfd, &lev) != 0)
            rc = SRV_ETHREAD;
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cond, NULL);
    /* Published before the thread runs: the mhd loops read it (kick) once
     * the gate has handed them a connection. */
    *out = g;
    if (rc == 0 && srv__thread_create(&g->thread, NULL, emhd_gate_main, g) != 0)
        rc = SRV_ETHREAD;
    if (rc != 0) {
        *out = NULL;
        if (g->epfd >= 0)
            close(g->epfd);
        if (g->wake >= 0)
            close(g->wake);
        pthread_cond_destroy(&g->cond);
        pthread_mutex_destroy(&g->mu);
        free(g->buf);
        free(g);
        return rc;
    }
    return 0;
}

void emhd_gate_quiesce(emhd_gate *g)
{
    if (g == NULL)
        return;
    emhd_gate_command(g, EMHD_GATE_QUIESCE);
    pthread_mutex_lock(&g->mu);
    while (!g->quiesced)
        pthread_cond_wait(&g->cond, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

void emhd_gate_kick(emhd_gate *g)
{
    if (g != NULL && atomic_load(&g->paused))
        emhd_gate_command(g, EMHD_GATE_KICK);
}

void emhd_gate_stop(emhd_gate *g)
{
    if (g == NULL || g->stopped)
        return;
    g->stopped = true;
    emhd_gate_command(g, EMHD_GATE_STOP);
    pthread_join(g->thread, NULL);
    while (g->waiting != NULL)
        emhd_gate_close(g, g->waiting);
    if (g->lfd >= 0)
        close(g->lfd);
    g->lfd = -1;
}

void emhd_gate_free(emhd_gate *g)
{
    if (g == NULL)
        return;
    emhd_gate_stop(g);
    close(g->epfd);
    close(g->wake);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->mu);
    free(g->buf);
    free(g);
}
