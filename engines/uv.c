/*
 * The "uv" engine: libuv 1.44+ event loops, one per I/O thread, each accepting on its own dup
 * of the listening socket. A connection's bytes - in the clear, or through OpenSSL on memory
 * BIOs (engines/uv_tls.c) - carry the core's HTTP/1 (core/h1conn.c): this file is the
 * transport. Handlers run where the core puts them: non-blocking routes on the loop, inside
 * srv__request_dispatch; the others on the worker pool, whose answers wake the loop through
 * its uv_async_t.
 */
#include "srv_conn.h"
#include "srv_engine.h"
#include "srv_h1conn.h"
#include "uv_tls.h"

#include <uv.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EUV_TICK_MS 50           /* deadlines (srv__h1conn_time) are looked at this often */
#define EUV_WAKE_BATCH 256       /* woken connections taken per loop turn */
#define EUV_READ_BUF (64 * 1024) /* one read, per loop (copied where not taken) */
#define EUV_ACCEPT_PAUSE_MS 100  /* accept failed (out of memory): listen again after */
#define EUV_STOP_POLL_MS 10      /* while stopping: are the connections gone? */
#define EUV_STOP_FORCE_MS 250    /* stop: then close the connections still open */
#define EUV_LOOP_FDS 6           /* descriptors a loop opens (euv_loop_init) */

typedef struct euv_server euv_server;
typedef struct euv_loop euv_loop;

/* Where a connection's bytes are. The protocol on them is apart (enum euv_proto). */
enum euv_state {
    EUV_HANDSHAKE, /* TLS: the handshake runs; no protocol yet */
    EUV_OPEN,      /* a protocol has the bytes, both ways */
    EUV_SHUT,      /* our side is shut: what the client sends is counted, not decrypted */
    EUV_REFUSED,   /* TLS refused plain HTTP: its 400 goes out, then the close */
    EUV_CLOSING    /* uv_close called: euv_on_closed frees it */
};

/* The protocol object on a connection's bytes (euv_proto_start picks it). */
enum euv_proto {
    EUV_PROTO_NONE, /* not chosen yet (TLS handshake) */
    EUV_PROTO_H1    /* core/h1conn.c */
};

typedef struct euv_conn {
    uv_tcp_t tcp; /* tcp.data is the connection */
    euv_loop *loop;
    struct euv_conn *prev, *next; /* euv_loop.conns */
    srv__conn pol;                /* the core's policy: admission, deadlines, counts */
    enum euv_state state;
    enum euv_proto proto;
    srv__h1conn *h1;
    euv_tls *tls;   /* NULL in cleartext */
    int want;       /* the protocol takes input (srv__h1io.read) */
    int reading;    /* uv_read_start is on */
    char *held;     /* input the protocol did not take yet: held[held_off, held_len) */
    size_t held_off, held_len;
    uv_write_t wreq; /* cleartext: the protocol's write */
    uv_buf_t wbuf[2];
    int write_late;  /* a write that completes on the next turn: 1 done, -1 failed */
    size_t queued;   /* bytes libuv had still to write at the last tick */
    uv_shutdown_t sreq;
    /* A file body by sendfile (srv__h1io.sendfile, cleartext): libuv has
     * no sendfile on a stream and no writability event beside its own
     * writes (srv__sendfile_step, on uv_fileno; its waits by uv_write). */
    srv__sendfile sf;
    int sf_resume;  /* a burst ended: go on at the next turn */
    int sf_moved;   /* bytes went since the last tick (the send deadline) */
    uv_write_t sf_wreq;
    int posted; /* on euv_loop.posted (euv_loop.mu) */
    struct euv_conn *post_next;
    int soon; /* on euv_loop.soon (the loop's thread only) */
    struct euv_conn *soon_next;
} euv_conn;

/* A write of ciphertext (TLS), its bytes after it. */
typedef struct euv_chunk {
    uv_write_t req;
    euv_conn *c;
    int proto; /* the protocol's write: srv__h1conn_written after it */
    uv_buf_t buf;
} euv_chunk;

struct euv_loop {
    euv_server *server;
    pthread_t tid;
    uv_loop_t uv;
    uv_tcp_t listener;
    int listening;
    uv_async_t async; /* wakes from other threads; quiesce; stop */
    uv_timer_t tick;  /* EUV_TICK_MS: deadlines */
    uv_timer_t pause; /* EUV_ACCEPT_PAUSE_MS after a failed accept; the stop's poll */
    pthread_mutex_t mu; /* posted */
    euv_conn *posted; /* woken by other threads */
    /* Steps due after the call they were asked in, on this thread (a write done at once,
     * held input offered again): run from an idle handle on the loop's next turn, which
     * costs no system call where a post costs the async's write and its wake-up. */
    euv_conn *soon;
    uv_idle_t soon_idle;
    euv_conn conns; /* list head */
    unsigned nconns;
    int quiesced, stopping, forced;
    uint64_t stop_at;
    euv_tls_ctx *tls;
    char *rbuf; /* EUV_READ_BUF: reads */
    char *pbuf; /* EUV_READ_BUF: decrypted input */
};

struct euv_server {
    srv_server *srv;
    const srv_config *cfg;
    int listen_fd;
    unsigned nloops;
    euv_loop *loops;
    srv__loopctl ctl; /* quiesce and stop */
};

static void euv_close(euv_conn *c, int abort);
static void euv_feed(euv_conn *c);
static void euv_post(euv_conn *c);
static void euv_soon(euv_conn *c);
static void euv_on_soon(uv_idle_t *h);
static void euv_on_connection(uv_stream_t *listener, int status);

/* ---- The protocol on the bytes ---- */

static const srv__h1io euv_h1io;

/*
 * The one place a protocol is chosen for a connection's bytes, once they flow (at the accept
 * in cleartext, after the handshake over TLS): the core's connection, which speaks HTTP/2
 * (core/h2conn.c) when ALPN chose "h2" or, in cleartext, when its first bytes are the
 * prior-knowledge preface (the core sniffs them), HTTP/1 otherwise.
 */
static void euv_proto_start(euv_conn *c, const unsigned char *alpn, unsigned alpn_len)
{
    struct sockaddr_storage peer;
    int plen = sizeof peer;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer, &plen) != 0)
        plen = 0;
    c->state = EUV_OPEN;
    c->h1 = srv__h1conn_new(c->loop->server->srv, &c->pol, &euv_h1io, c,
                            plen > 0 ? (struct sockaddr *)&peer : NULL, (socklen_t)plen);
    if (c->h1 == NULL) { /* out of memory: closed unanswered */
        euv_close(c, 0);
        return;
    }
    c->proto = EUV_PROTO_H1;
    c->want = 1;
    /* ALPN "h2": HTTP/2 from the first byte (a refused connection gets HTTP/1's 503). */
    if (alpn_len == 2 && memcmp(alpn, "h2", 2) == 0 && c->pol.admitted)
        srv__h1conn_h2(c->h1);
    if (c->tls == NULL) /* file bodies from the descriptor: the socket's bytes are theirs */
        srv__h1conn_sendfile(c->h1);
    euv_feed(c); /* over TLS, bytes that came with the Finished */
}

static size_t euv_proto_input(euv_conn *c, const char *d, size_t n)
{
    return c->proto == EUV_PROTO_H1 ? srv__h1conn_input(c->h1, d, n) : n;
}

static void euv_proto_eof(euv_conn *c)
{
    if (c->proto == EUV_PROTO_H1)
        srv__h1conn_eof(c->h1);
    else
        euv_close(c, 0);
}

static void euv_proto_written(euv_conn *c, int ok)
{
    if (c->proto == EUV_PROTO_H1 && c->state != EUV_CLOSING)
        srv__h1conn_written(c->h1, ok);
}

static void euv_proto_wake(euv_conn *c)
{
    if (c->proto == EUV_PROTO_H1 && c->state != EUV_CLOSING)
        srv__h1conn_wake(c->h1);
}

static void euv_proto_time(euv_conn *c, uint64_t now, int stopping, int quiescing)
{
    if (c->state == EUV_CLOSING)
        return;
    if (c->proto == EUV_PROTO_H1) {
        /* A long write's progress moves its deadline on (the policy cuts one with none). */
        size_t q = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
        if (c->pol.state == SRV_CONN_SEND && (q < c->queued || c->sf_moved))
            srv__conn_progress(&c->pol, now);
        c->queued = q;
        c->sf_moved = 0;
        srv__h1conn_time(c->h1, now, stopping, quiescing);
        return;
    }
    /* In the handshake: the first head's deadline (from the accept) covers it; a stop or a
     * quiesce closes it (nothing was asked). */
    if (srv__conn_due(&c->pol, now, stopping, quiescing) != SRV_CONN_WAIT)
        euv_close(c, 0);
}

/* The socket is closed: after this no wake comes for c. */
static void euv_proto_free(euv_conn *c)
{
    if (c->proto == EUV_PROTO_H1) {
        srv__h1conn *h1 = c->h1;
        c->h1 = NULL;
        c->proto = EUV_PROTO_NONE;
        srv__h1conn_free(h1); /* a request in the application is cancelled */
    }
}

/* ---- Reading: cleartext to the protocol, what it leaves held ---- */

static void euv_on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void euv_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void euv_reading(euv_conn *c, int on)
{
    if (c->reading == on || c->state == EUV_CLOSING)
        return;
    c->reading = on;
    if (on)
        uv_read_start((uv_stream_t *)&c->tcp, euv_on_alloc, euv_on_read);
    else
        uv_read_stop((uv_stream_t *)&c->tcp);
}

static void euv_hold(euv_conn *c, const char *d, size_t n)
{
    size_t left = c->held_len - c->held_off;
    char *p = malloc(left + n);
    if (p == NULL) { /* never a request with a hole */
        euv_close(c, 1);
        return;
    }
    if (left > 0)
        memcpy(p, c->held + c->held_off, left);
    memcpy(p + left, d, n);
    free(c->held);
    c->held = p;
    c->held_off = 0;
    c->held_len = left + n;
}

static int euv_held(const euv_conn *c)
{
    return c->held_off < c->held_len;
}

/* Plaintext to the protocol while it takes it; the rest is held, and the socket not read,
 * until it asks again. 0 once the connection closes. */
static int euv_deliver(euv_conn *c, const char *d, size_t n)
{
    if (euv_held(c) || !c->want) { /* behind what waits already, or not asked for now */
        euv_hold(c, d, n);
        euv_reading(c, 0);
        return c->state != EUV_CLOSING;
    }
    while (n > 0 && c->state != EUV_CLOSING) {
        size_t took = euv_proto_input(c, d, n);
        if (took == 0 || c->state == EUV_CLOSING)
            break;
        d += took;
        n -= took;
    }
    if (n > 0 && c->state != EUV_CLOSING) {
        euv_hold(c, d, n);
        euv_reading(c, 0);
    }
    return c->state != EUV_CLOSING;
}

/* TLS: decrypt and deliver while the protocol takes input. 0 once the connection closes. */
static int euv_tls_drain(euv_conn *c)
{
    char *buf = c->loop->pbuf;
    while (c->state == EUV_OPEN && c->want && !euv_held(c)) {
        ssize_t m = euv_tls_read(c->tls, buf, EUV_READ_BUF);
        if (m == 0)
            break;
        if (m < 0) { /* close_notify or a bad record: the client's side is over */
            euv_proto_eof(c);
            break;
        }
        if (!euv_deliver(c, buf, (size_t)m))
            return 0;
    }
    return c->state != EUV_CLOSING;
}

static void euv_send_tls(euv_conn *c, int proto);

/* What waits for the protocol (held input, decrypted records), then the socket again. */
static void euv_feed(euv_conn *c)
{
    while (c->want && euv_held(c) && c->state != EUV_CLOSING) {
        size_t took = euv_proto_input(c, c->held + c->held_off, c->held_len - c->held_off);
        if (took == 0 || c->state == EUV_CLOSING)
            break;
        c->held_off += took;
    }
    if (c->state == EUV_CLOSING)
        return;
    if (!euv_held(c)) {
        free(c->held);
        c->held = NULL;
        c->held_off = c->held_len = 0;
    }
    if (c->tls != NULL && c->state == EUV_OPEN) {
        if (!euv_tls_drain(c))
            return;
        euv_send_tls(c, 0); /* what reading made OpenSSL say */
    }
    if (c->state != EUV_CLOSING && c->want && !euv_held(c) &&
        !(c->tls != NULL && c->state == EUV_OPEN && euv_tls_buffered(c->tls)))
        euv_reading(c, 1);
}

static void euv_on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    euv_conn *c = h->data;
    *buf = uv_buf_init(c->loop->rbuf, EUV_READ_BUF);
}

static void euv_handshake(euv_conn *c);

static void euv_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    euv_conn *c = s->data;
    if (nread == 0 || c->state == EUV_CLOSING)
        return;
    if (nread < 0) { /* the client's FIN, or the socket failed */
        c->reading = 0;
        uv_read_stop(s);
        if (c->state == EUV_OPEN || c->state == EUV_SHUT)
            euv_proto_eof(c);
        else
            euv_close(c, 0);
        return;
    }
    if (c->tls == NULL || c->state == EUV_SHUT) { /* lingering: counted, not decrypted */
        euv_deliver(c, buf->base, (size_t)nread);
        return;
    }
    if (c->state == EUV_REFUSED)
        return;
    if (euv_tls_put(c->tls, buf->base, (size_t)nread) != 0) {
        euv_close(c, 1);
        return;
    }
    if (c->state == EUV_HANDSHAKE) {
        euv_handshake(c);
        return;
    }
    if (euv_tls_drain(c))
        euv_send_tls(c, 0);
    if (c->state != EUV_CLOSING && (!c->want || euv_held(c)))
        euv_reading(c, 0); /* back-pressure: the client's bytes wait in the kernel */
}

/* ---- Writing ---- */

static void euv_on_written(uv_write_t *req, int status)
{
    euv_conn *c = req->handle->data;
    euv_proto_written(c, status == 0);
}

static void euv_on_chunk_written(uv_write_t *req, int status)
{
    euv_chunk *k = (euv_chunk *)req;
    euv_conn *c = k->c;
    int proto = k->proto;
    free(k);
    if (proto)
        euv_proto_written(c, status == 0);
}

/* A write that completes on the next turn (done at once, nothing to send, or it could not
 * start). */
static void euv_write_late(euv_conn *c, int ok)
{
    c->write_late = ok ? 1 : -1;
    euv_soon(c);
}

/* TLS: what OpenSSL has for the socket, in one write. proto: it completes the protocol's. */
static void euv_send_tls(euv_conn *c, int proto)
{
    size_t len = 0;
    char *block = c->state != EUV_CLOSING ? euv_tls_take(c->tls, sizeof(euv_chunk), &len) : NULL;
    if (block == NULL) {
        if (proto)
            euv_write_late(c, len == 0); /* nothing to send, or out of memory */
        return;
    }
    euv_chunk *k = (euv_chunk *)block;
    k->c = c;
    k->proto = proto;
    k->buf = uv_buf_init(block + sizeof *k, (unsigned)len);
    if (uv_write(&k->req, (uv_stream_t *)&c->tcp, &k->buf, 1, euv_on_chunk_written) != 0) {
        free(k);
        if (proto)
            euv_write_late(c, 0);
    }
}

static void euv_sendfile_step(euv_conn *c);

/* The end of a file body: written on the next turn (never inside the call). */
static void euv_sendfile_end(euv_conn *c, int ok)
{
    srv__sendfile_end(&c->sf);
    euv_write_late(c, ok);
}

static void euv_on_sf_written(uv_write_t *req, int status)
{
    euv_conn *c = req->handle->data;
    if (c->state == EUV_CLOSING) /* cancelled: the close frees the rest */
        return;
    if (status != 0) {
        euv_sendfile_end(c, 0);
        return;
    }
    c->sf_moved = 1;
    euv_sendfile_step(c);
}

static void euv_sendfile_step(euv_conn *c)
{
    uv_os_fd_t sock = -1;
    if (c->state == EUV_CLOSING || uv_fileno((uv_handle_t *)&c->tcp, &sock) != 0)
        sock = -1;
    size_t wait = 0;
    uint64_t moved = 0;
    int r = srv__sendfile_step(&c->sf, sock, &wait, &moved);
    if (moved > 0)
        c->sf_moved = 1;
    if (r == SRV__SF_BURST) {
        c->sf_resume = 1;
        euv_soon(c);
    } else if (r == SRV__SF_WAIT) {
        uv_buf_t b = uv_buf_init(c->sf.buf, (unsigned)wait);
        if (uv_write(&c->sf_wreq, (uv_stream_t *)&c->tcp, &b, 1, euv_on_sf_written) != 0)
            euv_sendfile_end(c, 0);
    } else {
        euv_sendfile_end(c, r == SRV__SF_DONE);
    }
}

/* ---- srv__h1io: what the protocol asks of the bytes ---- */

static void euv_io_write(void *io, const srv__buf *bufs, size_t n)
{
    euv_conn *c = io;
    if (c->tls != NULL) {
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++)
            ok = euv_tls_write(c->tls, bufs[i].base, bufs[i].len) == 0;
        if (!ok)
            euv_write_late(c, 0);
        else
            euv_send_tls(c, 1);
        return;
    }
    size_t m = 0;
    for (size_t i = 0; i < n && i < 2; i++)
        if (bufs[i].len > 0)
            c->wbuf[m++] = uv_buf_init((char *)bufs[i].base, (unsigned)bufs[i].len);
    if (m == 0) {
        euv_write_late(c, 1);
        return;
    }
    /* At once first: a uv_write done at once still stops its POLLOUT after the callback, one
     * epoll_ctl per answer (libuv's uv__drain), which uv_try_write does not touch. */
    int w = uv_try_write((uv_stream_t *)&c->tcp, c->wbuf, (unsigned)m);
    size_t i = 0;
    if (w > 0) {
        size_t done = (size_t)w;
        while (i < m && done >= c->wbuf[i].len)
            done -= c->wbuf[i++].len;
        if (i == m) {
            euv_write_late(c, 1);
            return;
        }
        c->wbuf[i].base += done;
        c->wbuf[i].len -= done;
    } else if (w != UV_EAGAIN && w != UV_ENOSYS) {
        euv_write_late(c, 0); /* the peer is gone (EPIPE, ECONNRESET) */
        return;
    }
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, c->wbuf + i, (unsigned)(m - i),
                 euv_on_written) != 0)
        euv_write_late(c, 0);
}

static void euv_io_read(void *io, int on)
{
    euv_conn *c = io;
    c->want = on;
    /* Off: the socket stays armed until bytes come while nothing is wanted (euv_deliver
     * holds them and stops then). A request answered at once asks off, then on again:
     * stopping and restarting libuv's read would cost two epoll_ctl calls each time. */
    if (!on)
        return;
    if (euv_held(c) || (c->tls != NULL && c->state == EUV_OPEN && euv_tls_buffered(c->tls)))
        euv_soon(c); /* offered again after this call, not inside it */
    else
        euv_reading(c, 1);
}

static void euv_on_shut(uv_shutdown_t *req, int status)
{
    euv_conn *c = req->handle->data;
    (void)status; /* a failed shutdown: the close follows anyway */
    if (c->state == EUV_REFUSED) /* plain HTTP's 400 and the FIN are out */
        euv_close(c, 0);
}

static void euv_io_shut(void *io)
{
    euv_conn *c = io;
    if (c->state != EUV_OPEN)
        return;
    if (c->tls != NULL) {
        euv_tls_close_notify(c->tls);
        euv_send_tls(c, 0);
    }
    c->state = EUV_SHUT;
    free(c->held); /* the lingering drops what the client still sends */
    c->held = NULL;
    c->held_off = c->held_len = 0;
    uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, euv_on_shut); /* after the writes queued */
}

static void euv_io_close(void *io, int abort)
{
    euv_close(io, abort);
}

/* Any thread (srv__h1io.wake: the connection's lock held): listed for the loop, which its
 * async wakes. */
static void euv_post(euv_conn *c)
{
    euv_loop *l = c->loop;
    pthread_mutex_lock(&l->mu);
    if (!c->posted) {
        c->posted = 1;
        c->post_next = l->posted;
        l->posted = c;
    }
    pthread_mutex_unlock(&l->mu);
    uv_async_send(&l->async);
}

/* The loop's thread: c's step runs at the loop's next turn (euv_on_soon), never inside the
 * call that asks. */
static void euv_soon(euv_conn *c)
{
    euv_loop *l = c->loop;
    if (c->soon)
        return;
    c->soon = 1;
    c->soon_next = l->soon;
    l->soon = c;
    uv_idle_start(&l->soon_idle, euv_on_soon); /* nothing if it is on */
}

static void euv_io_wake(void *io)
{
    euv_post(io);
}

static void euv_io_sendfile(void *io, int fd, uint64_t off, uint64_t len)
{
    euv_conn *c = io;
    c->sf = (srv__sendfile){.fd = fd, .off = off, .left = len};
    euv_sendfile_step(c);
}

static int euv_io_pending(void *io)
{
    euv_conn *c = io;
    uv_os_fd_t fd;
    return c->held_len > c->held_off ||
           (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 && srv__fd_input_waiting(fd));
}

static const srv__h1io euv_h1io = {
    .write = euv_io_write,
    .read = euv_io_read,
    .shut = euv_io_shut,
    .close = euv_io_close,
    .wake = euv_io_wake,
    .sendfile = euv_io_sendfile,
    .pending = euv_io_pending,
};

/* ---- TLS handshake, close ---- */

static void euv_handshake(euv_conn *c)
{
    enum euv_tls_hs hs = euv_tls_handshake(c->tls);
    if (hs == EUV_TLS_HS_PLAIN) { /* what the socket takes now, a FIN, then the close */
        size_t len = 0;
        const char *answer = euv_tls_plain_400(&len);
        uv_buf_t b = uv_buf_init((char *)answer, (unsigned)len);
        c->state = EUV_REFUSED;
        euv_reading(c, 0);
        uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, euv_on_shut) != 0)
            euv_close(c, 0);
        return;
    }
    euv_send_tls(c, 0); /* the server's flight, or the alert (libuv writes it at once) */
    if (hs == EUV_TLS_HS_FAIL)
        euv_close(c, 0);
    if (hs != EUV_TLS_HS_DONE || c->state == EUV_CLOSING)
        return;
    if (c->loop->quiesced) { /* no request begun: closed, as in the clear */
        euv_close(c, 0);
        return;
    }
    unsigned alen = 0;
    const unsigned char *alpn = euv_tls_alpn(c->tls, &alen);
    euv_proto_start(c, alpn, alen);
}

static void euv_on_closed(uv_handle_t *h)
{
    euv_conn *c = h->data;
    euv_loop *l = c->loop;
    euv_proto_free(c); /* first: no wake comes after it */
    pthread_mutex_lock(&l->mu);
    for (euv_conn **p = &l->posted; c->posted && *p != NULL; p = &(*p)->post_next)
        if (*p == c) {
            *p = c->post_next;
            c->posted = 0;
            break;
        }
    pthread_mutex_unlock(&l->mu);
    for (euv_conn **p = &l->soon; c->soon && *p != NULL; p = &(*p)->soon_next)
        if (*p == c) {
            *p = c->soon_next;
            c->soon = 0;
            break;
        }
    c->prev->next = c->next;
    c->next->prev = c->prev;
    l->nconns--;
    euv_tls_free(c->tls);
    free(c->held);
    srv__sendfile_end(&c->sf);
    srv__conn_close(&c->pol);
    free(c);
}

/* Writes still queued are cancelled (their callbacks see EUV_CLOSING); abort resets. */
static void euv_close(euv_conn *c, int abort)
{
    if (c->state == EUV_CLOSING)
        return;
    if (!abort && c->tls != NULL && c->state == EUV_OPEN) { /* one try at close_notify */
        euv_tls_close_notify(c->tls);
        size_t len = 0;
        char *block = euv_tls_take(c->tls, 0, &len);
        if (block != NULL) {
            uv_buf_t b = uv_buf_init(block, (unsigned)len);
            uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
            free(block);
        }
    }
    c->state = EUV_CLOSING;
    c->reading = 0;
    if (abort && uv_tcp_close_reset(&c->tcp, euv_on_closed) == 0)
        return;
    if (abort) { /* after a shutdown libuv refuses the reset: set it by hand */
        uv_os_fd_t fd;
        struct linger lg = {1, 0};
        if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    uv_close((uv_handle_t *)&c->tcp, euv_on_closed);
}

/* ---- Accepting ---- */

/* Past SRV_REFUSE_MAX being read: the 503 at once, in cleartext only (a TLS client cannot
 * read it before a handshake), what came drained, closed. */
static void euv_refuse_now(euv_conn *c)
{
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        srv__refuse_fd(fd, c->loop->tls == NULL);
    euv_close(c, 0);
}

static void euv_listen_close(euv_loop *l)
{
    if (l->listening) {
        l->listening = 0;
        uv_close((uv_handle_t *)&l->listener, NULL);
    }
}

static void euv_on_accept_resume(uv_timer_t *t);

/* This loop's own dup of the listening socket. 0, or a libuv error. */
static int euv_listen_open(euv_loop *l)
{
    euv_server *s = l->server;
    int fd = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return uv_translate_sys_error(errno);
    uv_tcp_init(&l->uv, &l->listener);
    l->listener.data = l;
    l->listening = 1; /* the handle exists: euv_listen_close closes it */
    int rc = uv_tcp_open(&l->listener, fd);
    if (rc != 0)
        close(fd); /* not the handle's */
    else
        rc = uv_listen((uv_stream_t *)&l->listener, s->cfg->backlog, euv_on_connection);
    if (rc != 0)
        euv_listen_close(l);
    return rc;
}

static void euv_on_accept_resume(uv_timer_t *t)
{
    euv_loop *l = t->data;
    if (!l->quiesced && !l->listening && !l->stopping &&
        !atomic_load(&l->server->ctl.quiesce_req) && euv_listen_open(l) != 0)
        uv_timer_start(&l->pause, euv_on_accept_resume, EUV_ACCEPT_PAUSE_MS, 0);
}

static void euv_on_unopened_closed(uv_handle_t *h)
{
    free(h->data);
}

/* libuv retries a failing accept at once (EMFILE aside, which it handles), and accepts no
 * more until one is taken: close this loop's dup (the backlog keeps the clients for the other
 * loops, or for later) and listen again after a rest, unless this is the quiesce's shutdown. */
static void euv_accept_pause(euv_loop *l)
{
    euv_server *s = l->server;
    euv_listen_close(l);
    if (!atomic_load(&s->ctl.quiesce_req) && !atomic_load(&s->ctl.stop_req))
        uv_timer_start(&l->pause, euv_on_accept_resume, EUV_ACCEPT_PAUSE_MS, 0);
}

static euv_conn *euv_conn_new(euv_loop *l)
{
    euv_conn *c = srv__zalloc(sizeof *c);
    if (c != NULL) {
        uv_tcp_init(&l->uv, &c->tcp);
        c->tcp.data = c;
        c->loop = l;
    }
    return c;
}

static void euv_conn_unopened(euv_conn *c)
{
    c->state = EUV_CLOSING; /* no connection: freed unopened */
    uv_close((uv_handle_t *)&c->tcp, euv_on_unopened_closed);
}

static void euv_admit(euv_loop *l, euv_conn *c);

static void euv_on_connection(uv_stream_t *listener, int status)
{
    euv_loop *l = listener->data;
    euv_conn *c = status == 0 ? euv_conn_new(l) : NULL;
    if (c == NULL) { /* failed, or out of memory */
        euv_accept_pause(l);
        return;
    }
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0)
        euv_conn_unopened(c);
    else
        euv_admit(l, c);
}

/* At the quiesce: every connection in the backlog now (the kernel completed it before the
 * quiesce closes the socket) is taken, not reset by that close. libuv accepts only from its
 * loop's poll, so accept4 here and hand the socket to a handle. */
static void euv_accept_backlog(euv_loop *l)
{
    uv_os_fd_t lfd;
    if (!l->listening || uv_fileno((uv_handle_t *)&l->listener, &lfd) != 0)
        return;
    for (int n = 0; n < l->server->cfg->backlog; n++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0)
            return; /* EAGAIN: all taken; out of descriptors: the rest is refused */
        euv_conn *c = euv_conn_new(l);
        if (c == NULL) {
            close(fd);
            continue;
        }
        if (uv_tcp_open(&c->tcp, fd) != 0) {
            close(fd);
            euv_conn_unopened(c);
        } else {
            euv_admit(l, c);
        }
    }
}

/* A connection accepted by this loop: admitted (or refused), then read. */
static void euv_admit(euv_loop *l, euv_conn *c)
{
    euv_server *s = l->server;
    /* Past max_connections a connection is still read (its head within min(header_timeout_ms,
     * 2 s), at most SRV_REFUSE_MAX at once) so that the core's 503 answers it; more are
     * refused at once. */
    enum srv__conn_admission how = srv__conn_open(&c->pol, s->srv, srv__now_ms());
    c->next = &l->conns;
    c->prev = l->conns.prev;
    c->prev->next = c;
    l->conns.prev = c;
    l->nconns++;
    uv_tcp_nodelay(&c->tcp, 1);
    if (how == SRV_CONN_REFUSE_NOW) {
        euv_refuse_now(c);
        return;
    }
    if (l->tls == NULL) {
        euv_proto_start(c, NULL, 0);
        return;
    }
    c->state = EUV_HANDSHAKE;
    c->tls = euv_tls_new(l->tls, s->srv);
    if (c->tls == NULL) { /* out of memory: closed unanswered */
        euv_close(c, 0);
        return;
    }
    euv_reading(c, 1);
}

/* ---- The loop's side: posted steps and wakes, deadlines, quiesce and stop ---- */

/* What a connection has due at a turn of its loop: a write's completion or a file body's next
 * burst, then held input offered again (both may be due: a read turned on while a write
 * was out). */
static void euv_step(euv_conn *c)
{
    if (c->state == EUV_CLOSING)
        return;
    int late = c->write_late;
    c->write_late = 0;
    if (c->sf_resume) { /* a file body's next burst */
        c->sf_resume = 0;
        euv_sendfile_step(c);
    } else if (late != 0) {
        euv_proto_written(c, late > 0);
    }
    if (c->state != EUV_CLOSING && c->want)
        euv_feed(c);
}

/* One at a time under the lock (a wake may post the same connection again meanwhile), at
 * most a batch per turn: what is left wakes the loop again. */
static void euv_take_posts(euv_loop *l)
{
    for (int i = 0; i < EUV_WAKE_BATCH; i++) {
        pthread_mutex_lock(&l->mu);
        euv_conn *c = l->posted;
        if (c != NULL) {
            l->posted = c->post_next;
            c->posted = 0;
        }
        pthread_mutex_unlock(&l->mu);
        if (c == NULL)
            return;
        if (c->state == EUV_CLOSING) /* c is freed only by its close callback, on this thread */
            continue;
        euv_step(c);
        euv_proto_wake(c);
    }
    uv_async_send(&l->async);
}

/* The idle handle: what euv_soon listed, in order; what those steps list again waits for the
 * next turn (the loop's poll does not wait then). c stays valid while listed: a close frees
 * it only in its close callback, later in the turn, which unlists it. */
static void euv_on_soon(uv_idle_t *h)
{
    euv_loop *l = h->data;
    euv_conn *c = l->soon, *fifo = NULL;
    l->soon = NULL;
    while (c != NULL) { /* listed newest first */
        euv_conn *next = c->soon_next;
        c->soon_next = fifo;
        fifo = c;
        c = next;
    }
    while (fifo != NULL) {
        c = fifo;
        fifo = c->soon_next;
        c->soon = 0;
        euv_step(c);
    }
    if (l->soon == NULL)
        uv_idle_stop(h);
}

static void euv_time_all(euv_loop *l, int stopping, int quiescing)
{
    uint64_t now = srv__now_ms();
    for (euv_conn *c = l->conns.next; c != &l->conns; c = c->next)
        euv_proto_time(c, now, stopping, quiescing); /* a close frees c only later */
}

static void euv_on_tick(uv_timer_t *t)
{
    euv_loop *l = t->data;
    euv_time_all(l, 0, l->quiesced);
}

static void euv_close_handle(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Stopping: once the connections are gone, every handle closes and uv_run returns. */
static void euv_on_stop_poll(uv_timer_t *t)
{
    euv_loop *l = t->data;
    euv_server *s = l->server;
    if (l->nconns == 0) {
        srv__loopctl_await_wakes(&s->ctl); /* the controller may be in uv_async_send on ours */
        uv_walk(&l->uv, euv_close_handle, NULL);
        return;
    }
    if (!l->forced && srv__now_ms() - l->stop_at >= EUV_STOP_FORCE_MS) {
        l->forced = 1; /* answers not written by now are not waited for */
        for (euv_conn *c = l->conns.next; c != &l->conns; c = c->next)
            euv_close(c, 0);
    }
}

/* While quiescing, HTTP/1 connections waiting for a next request close (the core's policy);
 * one whose request is arriving is read on, answered if it completes before the stop. */
static void euv_check_server(euv_loop *l)
{
    euv_server *s = l->server;
    int stop = atomic_load(&s->ctl.stop_req);
    if (!l->quiesced && (stop || atomic_load(&s->ctl.quiesce_req))) {
        l->quiesced = 1;
        uv_timer_stop(&l->pause);
        euv_accept_backlog(l);
        euv_listen_close(l);
        euv_time_all(l, 0, 1); /* idle ones close; a request waiting counts as arriving */
        srv__loopctl_quiesced(&s->ctl); /* the grace then counts what is arriving */
    }
    if (stop && !l->stopping) {
        l->stopping = 1;
        l->stop_at = srv__now_ms();
        euv_time_all(l, 1, 1); /* the core's 503 to requests still arriving */
        uv_timer_start(&l->pause, euv_on_stop_poll, 0, EUV_STOP_POLL_MS);
    }
}

static void euv_on_async(uv_async_t *a)
{
    euv_loop *l = a->data;
    euv_take_posts(l);
    euv_check_server(l);
}

static void *euv_loop_main(void *arg)
{
    euv_loop *l = arg;
    uv_run(&l->uv, UV_RUN_DEFAULT);
    if (uv_loop_close(&l->uv) != 0) {
        uv_walk(&l->uv, euv_close_handle, NULL); /* none should be left; be sure */
        uv_run(&l->uv, UV_RUN_DEFAULT);
        uv_loop_close(&l->uv);
    }
    return NULL;
}

/* On the controlling thread, before the loop's thread exists. 0, or a libuv error. */
static int euv_loop_init(euv_loop *l, euv_server *s)
{
    l->server = s; /* and the lock exists (euv_free) */
    pthread_mutex_init(&l->mu, NULL);
    l->conns.next = l->conns.prev = &l->conns;
    l->rbuf = malloc(EUV_READ_BUF);
    l->pbuf = malloc(EUV_READ_BUF);
    if (l->rbuf == NULL || l->pbuf == NULL)
        return UV_ENOMEM;
    /* libuv 1.44's uv_loop_init leaks its epoll descriptor when a later step finds no
     * descriptor left: see that the loop's are there first (epoll, the signal pipe, the
     * async eventfd, the EMFILE reserve, the listener's dup, one to spare). */
    int spare[EUV_LOOP_FDS], n = 0;
    while (n < EUV_LOOP_FDS && (spare[n] = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0)) >= 0)
        n++;
    int enough = n == EUV_LOOP_FDS;
    while (n > 0)
        close(spare[--n]);
    if (!enough)
        return UV_EMFILE;
    int rc = uv_loop_init(&l->uv);
    if (rc != 0)
        return rc;
    l->uv.data = l;
    if ((rc = uv_async_init(&l->uv, &l->async, euv_on_async)) != 0)
        return rc;
    l->async.data = l;
    uv_idle_init(&l->uv, &l->soon_idle);
    l->soon_idle.data = l;
    uv_timer_init(&l->uv, &l->tick);
    uv_timer_init(&l->uv, &l->pause);
    l->tick.data = l->pause.data = l;
    uv_timer_start(&l->tick, euv_on_tick, EUV_TICK_MS, EUV_TICK_MS);
    return euv_listen_open(l);
}

/* ---- The vtable ---- */

/* Close what euv_loop_init made, on a loop whose thread never ran (a failed start). */
static void euv_loop_dispose(euv_loop *l)
{
    if (l->uv.data == l) {
        uv_walk(&l->uv, euv_close_handle, NULL);
        uv_run(&l->uv, UV_RUN_DEFAULT);
        uv_loop_close(&l->uv);
        l->uv.data = NULL;
    }
}

static void euv_free(euv_server *s)
{
    for (unsigned i = 0; s->loops != NULL && i < s->nloops; i++) {
        euv_loop *l = &s->loops[i];
        if (l->server != NULL)
            pthread_mutex_destroy(&l->mu);
        euv_tls_ctx_free(l->tls);
        free(l->rbuf);
        free(l->pbuf);
    }
    free(s->loops);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    srv__loopctl_destroy(&s->ctl);
    free(s);
}

static void euv_wake_loop(void *arg, unsigned i)
{
    euv_server *s = arg;
    uv_async_send(&s->loops[i].async);
}

/* Ask every started loop to stop, let the asyncs go and join. */
static void euv_stop_loops(euv_server *s, unsigned started)
{
    srv__loopctl_stop(&s->ctl, started, euv_wake_loop, s);
    for (unsigned i = 0; i < started; i++)
        pthread_join(s->loops[i].tid, NULL);
}

static int euv_start(srv_server *srv, void **state)
{
    const srv_config *cfg = srv__server_config(srv);
    euv_server *s = calloc(1, sizeof *s);
    if (s == NULL) {
        srv__server_set_error(srv, "uv engine: out of memory");
        return SRV_ENOMEM;
    }
    s->srv = srv;
    s->cfg = cfg;
    s->nloops = cfg->io_threads;
    srv__loopctl_init(&s->ctl);
    int rc = srv__listen(srv, SRV__LISTEN_NONBLOCK);
    s->listen_fd = rc;
    if (rc < 0)
        goto fail;
    s->loops = calloc(s->nloops, sizeof *s->loops);
    if (s->loops == NULL) {
        srv__server_set_error(srv, "uv engine: out of memory");
        rc = SRV_ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < s->nloops; i++) {
        euv_loop *l = &s->loops[i];
        int failed = 0;
        l->tls = euv_tls_ctx_new(srv, &failed);
        int e = failed ? UV_ENOMEM : euv_loop_init(l, s);
        if (e != 0) {
            srv__server_set_error(srv, "uv engine: cannot set up I/O loop %u: %s", i,
                                  uv_strerror(e));
            rc = e == UV_ENOMEM ? SRV_ENOMEM : SRV_ESYS;
            goto fail;
        }
    }
    *state = s; /* before a loop runs: respond may come as soon as a request does */
    unsigned started = 0;
    for (; started < s->nloops; started++) {
        if ((rc = srv__thread_create(&s->loops[started].tid, NULL, euv_loop_main,
                                     &s->loops[started])) != 0)
            break;
    }
    if (started < s->nloops) {
        srv__server_set_error(srv, "uv engine: cannot create I/O thread: %s", strerror(rc));
        euv_stop_loops(s, started);
        *state = NULL;
        rc = SRV_ETHREAD;
        for (unsigned i = started; i < s->nloops; i++)
            euv_loop_dispose(&s->loops[i]);
        euv_free(s);
        return rc;
    }
    return 0;
fail:
    for (unsigned i = 0; s->loops != NULL && i < s->nloops; i++)
        euv_loop_dispose(&s->loops[i]);
    euv_free(s);
    return rc;
}

/* Each loop takes what the kernel already accepted and closes its dup; then connects are
 * refused (shutdown; it would reset what is still in the backlog, so only after every loop
 * took it) - unless the socket was handed to us (srv_config.listen_fd): it must keep
 * listening for the next process. */
static void euv_quiesce(void *state)
{
    euv_server *s = state;
    srv__loopctl_quiesce(&s->ctl, s->nloops, euv_wake_loop, s);
    if (s->cfg->listen_fd < 0)
        shutdown(s->listen_fd, SHUT_RDWR);
}

static void euv_stop(void *state)
{
    euv_stop_loops(state, ((euv_server *)state)->nloops);
}

static void euv_destroy(void *state)
{
    euv_free(state);
}

/* Every request is an h1conn's (the slots below only hand the event to it). */
static void euv_respond(void *state, srv_request *req)
{
    (void)state;
    srv__h1conn_respond(req);
}

static void euv_stream_kick(void *state, srv_request *req)
{
    (void)state;
    srv__h1conn_stream_kick(req);
}

static void euv_body_kick(void *state, srv_request *req)
{
    (void)state;
    srv__h1conn_body_kick(req);
}

const srv_engine srv_engine_uv = {
    .version = SRV_ENGINE_VERSION,
    .name = "uv",
    /* HTTP/1 is the core's (505 for an unknown version, 400 for garbage, GOAWAY for an
     * HTTP/2 preface); TLS is OpenSSL on memory BIOs with ALPN "http/1.1" only. */
    .caps = SRV_ENGINE_CAP_HTTP2 | SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_GARBAGE_400 |
            SRV_ENGINE_CAP_H2_PREFACE_GOAWAY | SRV_ENGINE_CAP_TLS | SRV_ENGINE_CAP_TLS_HTTP2 |
            SRV_ENGINE_CAP_STREAM | SRV_ENGINE_CAP_STREAM_BODY | SRV_ENGINE_CAP_WEBSOCKET |
            SRV_ENGINE_CAP_WEBSOCKET_TLS,
    .start = euv_start,
    .respond = euv_respond,
    .stream_kick = euv_stream_kick,
    .body_kick = euv_body_kick,
    .quiesce = euv_quiesce,
    .stop = euv_stop,
    .destroy = euv_destroy,
};
