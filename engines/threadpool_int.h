/*
 * What the threadpool engine's files share (engines/threadpool.c: poller,
 * workers, vtable; engines/threadpool_stop.c: detaching and closing at
 * stop). Not installed, not seen by the core. Each field says who owns it
 * and which lock guards it.
 */
#ifndef SRV_ENGINE_THREADPOOL_INT_H
#define SRV_ENGINE_THREADPOOL_INT_H

#include "srv_conn.h"
#include "srv_engine.h"
#include "srv_http1.h"
#include "srv_sockloop.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The poller's read buffer (one, shared by every connection it reads). */
#define ETP_READ_BUF 16384
/* The poller looks for expired deadlines this often. */
#define ETP_SCAN_MS 50
/* epoll events taken per wait; connections accepted per readiness. */
#define ETP_EVENTS 256
#define ETP_ACCEPT_BATCH 64
/* Back-off when accept() fails for lack of descriptors or memory. */
#define ETP_ACCEPT_BACKOFF_MS 20
/* A stream writes this many pieces at most before it lets the poller's
 * other connections run. */
#define ETP_STREAM_BURST 16
/* The most one sendfile call of a stream's burst asks for. */
#define ETP_SENDFILE_MAX (1u << 20)
/* stop: a response being written gets this long before its connection is
 * shut down; stop looks again this often. */
#define ETP_STOP_WRITE_GRACE_MS 2000
#define ETP_STOP_SCAN_MS 100
/* stop: connections detached (and written) in one go, at most. */
#define ETP_DETACH_BATCH 64
/* After an answer, a worker that nobody waits for reads the next request of
 * a kept-alive connection for this long itself (one recv, no hand-back to
 * the poller) before it hands the connection back. */
#define ETP_KEEP_WAIT_MS 2

/* A streamed request body's progress (etp_conn.bmode). */
enum etp_bmode {
    ETP_B_NONE = 0,
    ETP_B_READ, /* arriving: the parser gives pieces */
    ETP_B_EOM,  /* all arrived; the end not yet told (the application paused) */
    ETP_B_DONE, /* the end was told: the connection may be kept */
    ETP_B_OVER  /* cut (413/400/408) or the application stopped: close after */
};

/* Who has a connection; stop() reads it to know what to do with it. */
enum etp_phase {
    ETP_PH_POLL,    /* the poller's: idle, or a request arriving */
    ETP_PH_QUEUED,  /* a complete request, waiting for a worker */
    ETP_PH_RUN,     /* a worker's, between requests */
    ETP_PH_HANDLER, /* handed to the core: handler runs or answer awaited */
    ETP_PH_WRITE,   /* a worker writes the answer */
    ETP_PH_WQUEUED, /* an inline answer the poller could not finish
                     * writing, waiting for a worker to write the rest */
    ETP_PH_UPGRADED, /* a WebSocket after its 101, or an HTTP/2 connection:
                      * the core's socket loop has it (api/srv_sockloop.h)
                      * and closes it at stop */
    ETP_PH_CLOSING
};

struct etp_state;
struct etp_poller;

typedef struct etp_conn {
    srv_job job; /* the pool runs etp_conn_run(&job) */
    struct etp_state *st;
    struct etp_poller *p; /* the poller that owns it between requests (fixed) */
    struct etp_conn *prev, *next; /* st->conns, under st->mu */
    int fd;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    atomic_int phase;
    atomic_uint_fast64_t write_since; /* ETP_PH_WRITE: when it began (ms) */
    int shut; /* stop() shut the socket down or detached it (st->mu) */

    /* respond() -> worker hand-back (c->mu). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int responded;
    srv_request *serving; /* handed to the core, its answer not yet claimed */
    int detached;         /* stop() wrote the answer and owns none of it now
                           * (also under st->mu) */
    int in_handler;       /* the worker is inside srv__request_run */
    pthread_t worker;
    size_t early_sent;    /* bytes respond() wrote while the handler ran */
    int early_dead;       /* such a write failed */

    /* Poller list (p->plock) while the poller has it. */
    struct etp_conn *pprev, *pnext;
    int in_plist;

    /* Owned by whoever has the connection (poller or worker, never both). */
    srv_http1 parser;
    srv_request *req;   /* the message being read */
    srv_request *ready; /* a complete request for the worker */
    char *pend;         /* bytes read past `ready`: pend[pend_off, pend_len) */
    size_t pend_off, pend_len;
    srv__conn conn;     /* the core's policy: what it waits for, until when,
                         * its max_connections slot (admitted: 0 when refused) */
    unsigned served;
    int io_dead;        /* a write failed: close without answering */
    int stalled;        /* a write made no progress in time (or failed): reset */
    int rcvtimeo;       /* SO_RCVTIMEO set for ETP_KEEP_WAIT_MS */
    /* c's registration in its poller's epoll (etp_watch): the events, 0
     * when not in it. */
    uint32_t watch;

    /* Non-blocking routes, run on the poller (docs/ENGINES.md). */
    srv_request *inl;      /* dispatched by the poller, its answer not yet
                            * written (set by the poller under c->mu) */
    int inl_answered;      /* poller: the answer came (inline or queued) */
    int awaiting;          /* poller: the handler returned unanswered */
    int lost_input;        /* pipelined bytes could not be kept: close after */
    struct etp_conn *mq_next; /* p->mq (p->mqlock) */
    srv_request *wreq;     /* an inline answer a worker finishes writing, */
    size_t wsent;          /* from this many bytes in */

    /* A streamed response (docs/ENGINES.md, "Streams"): the poller writes
     * it, pulling from the core; owned by the poller while sreq is set. */
    srv_request *sreq;
    size_t shsent;   /* bytes of its head sent */
    int shead_done;
    int in_mq;       /* on p->mq (p->mqlock) */

    /* A streamed request body (docs/ENGINES.md, "Streamed request
     * bodies"): the poller reads it into the core while the core says GO;
     * c->inl is its request. Owned by the poller. */
    int bmode;        /* ETP_B_*: 0 when no body streams */
    int bcont;        /* "100 Continue" sent, or not due */
    int bhead;        /* a worker parsed a streamed-body head: c->req */
    int inl_done;     /* c->inl was answered from another thread (c->mu) */

    /* TLS (engines/threadpool_tls.c); ssl is NULL on a cleartext server,
     * and every I/O call below checks it first. Owned like the parser. */
    struct ssl_st *ssl;
    int tls_handshake;  /* the handshake is not complete yet */
    int tls_want_write; /* the last SSL call waits for the socket to drain */
    int tls_failed;     /* a fatal TLS error: no close_notify, no more I/O */
    int tls_plain;      /* plain HTTP came to the TLS port: 400 sent in clear */
    int tls_send_waits; /* a WebSocket's write waits for the SSL (socket loop) */
} etp_conn;

/* One poller thread: its epoll set, the connections it owns, its queue of
 * late inline answers. io_threads of them share the listening socket. */
typedef struct etp_poller {
    struct etp_state *st;
    int epfd;
    int wake_fd;  /* eventfd: quiesce and stop wake the poller */
    int msg_fd;   /* eventfd: a late inline answer is in mq */
    int spare_fd; /* /dev/null, given up to accept-and-refuse on EMFILE */
    pthread_t thread;
    int started;
    int listening; /* poller only: the listening socket is in its epoll */
    char rbuf[ETP_READ_BUF]; /* the poller's */

    pthread_mutex_t plock; /* plist, gone */
    etp_conn *plist;
    int gone; /* workers close instead of handing back */

    /* Connections whose inline request another thread answered (the
     * application, srv_after, the core's timeout): the poller writes them
     * (h2o's multithread messages, with an eventfd). */
    pthread_mutex_t mqlock;
    etp_conn *mq_head, *mq_tail;

    /* TLS: this poller's reference to the server's context, and its
     * generation (srv__tls_generation changes at a reload). */
    struct ssl_ctx_st *tls_ctx;
    unsigned tls_gen;
} etp_poller;

typedef struct etp_state {
    srv_server *srv;
    const srv_config *cfg;
    int listen_fd; /* shared by the pollers (EPOLLEXCLUSIVE in each) */
    unsigned npollers; /* io_threads */
    etp_poller *pollers;
    atomic_uint next_poller; /* round robin for accepted connections */
    int quiesced; /* controlling thread only */
    atomic_int quiescing;
    atomic_int stopping;

    pthread_mutex_t lk; /* listeners, listen_fd's close */
    pthread_cond_t lcond;
    unsigned listeners; /* pollers that still have the listening socket */

    pthread_mutex_t mu; /* conns, open, detached; then a conn's mu */
    pthread_cond_t drained;
    etp_conn *conns;
    unsigned open;     /* accepted and not yet closed (not refused ones) */
    unsigned detached; /* open ones whose handler stop() stopped waiting for */
    /* The loop for WebSockets after their 101 and HTTP/2 connections, made
     * at the first one; none once ws_stopped (stop). Under mu. */
    srv__sockloop *sockloop;
    int ws_stopped;
} etp_state;

#define ETP_CONN_OF(j) ((etp_conn *)((char *)(j) - offsetof(etp_conn, job)))

static inline enum etp_phase etp_get_phase(etp_conn *c)
{
    return (enum etp_phase)atomic_load_explicit(&c->phase, memory_order_relaxed);
}

/* engines/threadpool_io.c: socket I/O (no other engine file below it) */
/* sendfile what the socket takes now (threadpool_io.c has the contract). */
int etp_sendfile_some(int sock, int fd, uint64_t off, uint64_t len, size_t *sent);
int etp_send_some(int fd, const void *a, size_t alen, const void *b, size_t blen,
                  size_t *sent);
/* Write a and then b fully from `sent` bytes in, waiting at most timeout_ms
 * for each bit of progress. 0, or -1 when the client is gone or stalled. */
int etp_send_from(int fd, int timeout_ms, const void *a, size_t alen, const void *b,
                  size_t blen, size_t sent);
int etp_send2(int fd, int timeout_ms, const void *a, size_t alen, const void *b, size_t blen);
/* Drop what the client sends for at most ms (0: what already came) and
 * SRV_LINGER_MAX_BYTES. */
void etp_drain(int fd, unsigned ms);
void etp_linger_close(int fd, unsigned ms);

/*
 * engines/threadpool_tls.c: a connection's I/O when the server serves TLS
 * (c->ssl set). The cleartext path calls none of these: threadpool.c's
 * etp_io_* helpers test c->ssl and go straight to the socket otherwise.
 */
/* Poller: a new SSL for c from the poller's current context. -1 when out
 * of memory (the connection is then closed unanswered). */
int etp_tls_attach(etp_poller *p, etp_conn *c);
/* Poller: drive the handshake. 1: complete; 0: it waits for the socket
 * (re-arm with etp_tls_events); -1: failed (close without answering). */
int etp_tls_handshake(etp_conn *c);
/* The epoll events c waits for (EPOLLOUT when the SSL wants to write, or
 * when decrypted bytes are already buffered and must be read without new
 * input). */
unsigned etp_tls_events(etp_conn *c);
/* recv(MSG_DONTWAIT) through TLS: >0 bytes, 0 at the end of the stream,
 * -1 with errno EAGAIN (wait: etp_tls_events) or another error. */
ssize_t etp_tls_recv(etp_conn *c, void *buf, size_t len);
/* etp_send_some through an SSL (want_write: where the SSL then waits). */
int etp_tls_send_some(struct ssl_st *ssl, int *want_write, const void *a, size_t alen,
                      const void *b, size_t blen, size_t *sent);
/* Send close_notify once, without waiting (not after a fatal error). */
void etp_tls_close_notify(etp_conn *c);
/* Stop: take a reference to c's SSL and point it at fd (a dup of c->fd),
 * so stop writes the answer while the worker only frees its reference. */
struct ssl_st *etp_tls_detach(etp_conn *c, int fd);
void etp_tls_free(struct ssl_st *ssl);
/* close_notify on a detached SSL, one try. */
void etp_tls_shutdown(struct ssl_st *ssl);
/* The poller's context reference (etp_free_state). */
void etp_tls_poller_free(etp_poller *p);
/* A WebSocket's or HTTP/2 connection's bytes through c->ssl on the core's
 * socket loop (ctx: c). */
extern const srv__sockio etp_tls_sockio;
/* The handshake chose HTTP/2 by ALPN. */
int etp_tls_alpn_h2(etp_conn *c);

/* engines/threadpool_stop.c: the last step of stop, once the poller is
 * gone: answer, shut or detach every connection a worker has, and return
 * once all are closed or detached. */
void etp_stop_connections(etp_state *st);

#endif /* SRV_ENGINE_THREADPOOL_INT_H */
