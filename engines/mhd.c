/* The "mhd" engine: GNU libmicrohttpd 0.9.75, epoll. io_threads loops (a daemon each, run
 * by a thread of ours with MHD_run) parse and write; the gate accepts; handlers run on the
 * core's worker pool while the connection is suspended (respond resumes it); a watchdog
 * thread carries out the core's connection policy (api/srv_conn.h). HTTPS through libmicrohttpd's own GnuTLS
 * (MHD_USE_TLS), with the core's GnuTLS contexts. */
#include "srv_conn.h"
#include "srv_engine.h"
#include "srv_sockloop.h"

#include "mhd_gate.h"

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>

#include <limits.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* MHD_OPTION_CLIENT_DISCIPLINE_LVL (libmicrohttpd 0.9.77.1 and later),
 * named also when built against an older header: the running library
 * decides (emhd_lib_version). */
#if MHD_VERSION >= 0x00097701
#define EMHD_OPTION_CLIENT_DISCIPLINE_LVL MHD_OPTION_CLIENT_DISCIPLINE_LVL
#else
#define EMHD_OPTION_CLIENT_DISCIPLINE_LVL ((enum MHD_OPTION)38)
#endif

/* libmicrohttpd 1.0.0: a new HTTP/1 parser (read in v1.0.0's and v1.0.1's
 * connection.c; 0.9.76 and 0.9.77 still have 0.9.75's). */
#define EMHD_LIB_1_0 0x01000000u

/* stop: how long the loops get to write the last answers before
 * MHD_stop_daemon closes every connection (threadpool gives the same). */
#define EMHD_STOP_WRITE_MS 2000

/* A response written by the engine itself because MHD's pool cannot hold
 * its head: at most this long on the MHD thread for a slow reader. */
#define EMHD_RAW_WRITE_MS 1000

/* Lingering close (the core's policy, api/srv_conn.h): a connection MHD
 * closes while the client may still be sending keeps a duplicate of its
 * socket, write side shut, and is drained until EOF within SRV_LINGER_MS
 * and SRV_LINGER_MAX_BYTES, so the kernel does not answer unread bytes
 * with a reset that destroys the response. At most SRV_LINGER_MAX_CONNS
 * at once; past that, closed at once. */

/* TLS: the most a client may send before its handshake is done. A real
 * one is a few KB, a client certificate chain tens of KB (GnuTLS's own
 * limit for one handshake message is 128 KB, OpenSSL's certificate list
 * 100 KB); the other engines' OpenSSL cuts an endless one by ~2.7 MB. */
#define EMHD_TLS_HANDSHAKE_MAX (256u << 10)

typedef struct emhd_linger {
    int fd;
    long long until;
    size_t drained;
} emhd_linger;

/* One per accepted connection (MHD's socket_context), listed so the
 * watchdog and quiesce can shut down the ones that must go: MHD's own
 * timeout is an idle timeout, reset by every byte (slowloris), and MHD
 * keeps idle kept-alive connections open until it stops. */
typedef struct emhd_conn emhd_conn;
typedef struct emhd_worker emhd_worker;
struct emhd_conn {
    emhd_conn *prev, *next;
    int fd;
    struct MHD_Connection *conn;
    struct emhd_server *es;
    /* TLS: the certificate generation its handshake took (emhd_tls_cert),
     * held until MHD has freed the session (NOTIFY_CLOSED). MHD thread. */
    const srv_tls_gnutls *tls;
    /* The policy's record (api/srv_conn.h): admission past max_connections
     * (refused: 503 at its first request), the srv_stats counts. Opened by
     * the gate at the accept; the MHD thread's from NOTIFY_STARTED. */
    srv__conn policy;
    /* policy's lock. The MHD thread moves the state (srv__conn_set); the
     * watchdog and the stop decide on it (srv__conn_due) and move it too
     * (send progress, a request begun at a quiesce, an answer past MHD).
     * One short lock per change, uncontended but for the watchdog's tick,
     * rather than an atomic snapshot: both sides then call the policy's
     * own functions on the one record, and none acts on a stale copy. */
    pthread_mutex_t mu;
    bool reused;             /* MHD thread only: a request completed on it */
    bool asked;              /* MHD thread only: MHD reported a request line on it */
    struct emhd_req *req; /* MHD thread only: the request MHD has not completed */
    bool expect_close;       /* MHD thread only: the last request ends it */
    emhd_worker *worker; /* the MHD thread that owns it (NULL: unknown) */
    /* MHD thread only: its worker's message count when it went idle
     * (emhd_went_idle); emhd_closing asks whether MHD wrote since. */
    unsigned long long idle_msgs;
    atomic_bool handshaken; /* TLS: the client's Finished arrived */
    /* TLS: suspended while its handshake waits for the client (emhd_tls_pull),
     * in es->hs_epfd until its socket turns readable. hs_mu. */
    bool hs_waiting;
    size_t hs_bytes;          /* TLS: bytes read before the handshake was done (pull) */
    gnutls_session_t session; /* TLS: MHD's session (set at NOTIFY_STARTED) */
    /* In SEND: the client's acknowledged bytes when last seen to move (the
     * MHD thread sets it when SEND begins, then the watchdog). */
    _Atomic unsigned long long acked;
    atomic_bool stalled;     /* ended while writing: reset, no linger */
    /* Its 101 is written and MHD gave the socket back: a WebSocket the
     * core's socket loop carries (api/srv_sockloop.h), which owns the
     * policy from then on; the watchdog and the stop leave it alone. */
    atomic_bool upgraded;
    atomic_bool body_cut;    /* the watchdog cut a streamed body for its pace */
    long long fin_at;        /* lock: first tick that saw its client end mid-body; 0: none */
    /* MHD thread: the gate found the first request's streamed body framed
     * badly (that status) after `good` de-chunked bytes; 0: no. */
    int bad;
    uint64_t good;
    /* MHD ran out of pool for the query's parameters and left the request
     * unanswered (emhd_log); stuck_msgs: its worker's count of announced
     * answers once MHD reported that failure (set before). */
    atomic_bool lib_stuck;
    _Atomic unsigned long long stuck_msgs;
};

/*
 * One per MHD polling thread. emhd_closing must know whether MHD wrote
 * anything on an idle connection (its own answer to a bad request line)
 * before closing it, and nothing public reports MHD's writes. But MHD
 * writes on a connection without a response of ours only through its
 * error answer, which it announces first, on the connection's own thread,
 * with one message ("Error processing request (HTTP response code is
 * ...", transmit_error_response_len, 0.9.75 and 1.0.x alike; its other
 * messages come with closes that write nothing). So each thread counts
 * those announcements: a connection whose thread announced none since it
 * went idle had nothing written. One for another connection of the same
 * thread makes the answer doubtful, and then none is written (a close,
 * never two answers). Without MHD's messages nothing can be told.
 */
#define EMHD_ANSWER_MSG "Error processing request"

struct emhd_worker {
    pthread_t tid;
    atomic_ullong msgs; /* MHD's answers announced on this thread */
};

/* MHD announced no answer on ec's thread since its count was `mark`: it wrote
 * nothing of its own on ec since then (emhd_worker). Any thread. */
static bool emhd_quiet_since(const emhd_conn *ec, unsigned long long mark)
{
    return ec->worker != NULL && atomic_load(&ec->worker->msgs) == mark;
}

/* A connection the gate gave MHD (MHD_add_connection), until MHD reports
 * it at NOTIFY_STARTED on its own thread: what the gate knew of it. */
typedef struct emhd_handoff {
    struct emhd_handoff *next;
    bool found;          /* emhd_handoff_take: a record was there */
    int fd;
    srv__conn conn;      /* the gate's, opened at the accept (when found) */
    /* Which hand-over of fd (from 1): the loop drops the record of a
     * connection MHD refused by it, as the gate may have accepted a new
     * connection on the same descriptor in the meantime. */
    unsigned long long seq;
    int bad;             /* the gate's `bad` and `good` (emhd_gate_ops.hand) */
    uint64_t good;
} emhd_handoff;

/* A connection the gate accepted, queued for its loop's MHD_add_connection. */
typedef struct emhd_add {
    struct emhd_add *next;
    int fd;
    unsigned long long seq; /* its record's (emhd_handoff.seq); 0: it has none */
    socklen_t peer_len;
    struct sockaddr_storage peer;
} emhd_add;

/*
 * One I/O thread: a daemon of its own (no MHD thread), driven by
 * emhd_loop_main with MHD_run. libmicrohttpd 0.9.75's own polling thread
 * calls epoll_wait again, with the full timeout, whenever one call
 * returned its 128 events: when those were the last, the events it holds
 * wait unprocessed until the next event or the timeout (21 s here), a
 * stall measured under 1000 kept-alive clients (docs/ENGINES.md, "mhd: our
 * own loops"). MHD_run never blocks; the wait is ours. The comments'
 * "MHD thread" is a connection's loop thread, which runs MHD's callbacks.
 */
typedef struct emhd_loop {
    struct emhd_server *es;
    struct MHD_Daemon *daemon;
    pthread_t tid;
    bool started;
    bool daemon_stopped;   /* the loop's thread stopped its daemon (read after the join) */
    int epfd;              /* ours: MHD's epoll descriptor and wake */
    int wake;              /* eventfd: a resume, a connection to add, the stop */
    atomic_bool signalled; /* wake written and not yet read: no second write */
    atomic_bool stop;
    pthread_mutex_t mu;    /* adds */
    emhd_add *adds;        /* FIFO: adds_tail is where the next goes */
    emhd_add **adds_tail;
} emhd_loop;

typedef struct emhd_server {
    srv_server *srv;
    emhd_loop *loops;        /* one daemon and thread each */
    unsigned nloops;
    unsigned next_loop;      /* the gate's round robin */
    int lfd;                 /* until the gate takes it */
    emhd_gate *gate;         /* our accept (engines/mhd_gate.h) */
    /* WebSockets after MHD's upgrade, made at the first one (lock). */
    srv__sockloop *sockloop;
    unsigned limit;          /* MHD's connection limit */
    unsigned threads;        /* the loops */
    emhd_handoff *handoffs;  /* lock */
    unsigned nhandoffs;      /* lock */
    unsigned long long handoff_seq; /* lock: the last emhd_handoff.seq */
    /* TLS (MHD_USE_TLS): nothing is written on a connection's socket but
     * through MHD, which encrypts it; the start's generation (its client
     * CA text is MHD's trust list) is held until destroy. */
    bool tls;
    const srv_tls_gnutls *tls_start;
    /* The policy's deadlines are srv__conn's; these serve the engine's own
     * looks: a stuck query's retry (emhd_watch), quiesce's idle time. */
    long long header_ms;
    long long keepalive_ms;
    size_t swallow_limit;    /* body bytes discarded after a 413 */
    unsigned lib;            /* MHD_get_version() as MHD_VERSION's 0xMMmmpp00 */
    bool quiesced;           /* controlling thread only */
    bool log_all;            /* SRV_MHD_LOG=1: print MHD's messages */
    atomic_bool running;     /* MHD_start_daemon returned */
    atomic_uint outstanding; /* suspended, resume not yet called */
    atomic_uint held;        /* core requests not yet completed by MHD */
    pthread_mutex_t lock;    /* conns, open, start_msg, wd_stop, linger */
    emhd_conn *conns;
    unsigned open;           /* MHD's connections: the gate's room below MHD's limit */
    char start_msg[200]; /* MHD's last complaint while starting */
    pthread_t watchdog;
    bool watchdog_started;
    bool wd_stop;
    pthread_cond_t wd_cond;
    emhd_linger linger[SRV_LINGER_MAX_CONNS];
    unsigned lingering;
    atomic_bool stopping;    /* emhd_stop began: MHD closes everything */
    atomic_bool stopping_ws; /* emhd_stop stopped the socket loop: no new one */
    atomic_bool quiescing;   /* emhd_quiesce began: idle connections close */
    /* The loop threads seen so far: slots filled under lock, then
     * published by nworkers (read without the lock by emhd_log). */
    emhd_worker *workers;
    unsigned max_workers;
    atomic_uint nworkers;
    /* TLS: connections whose handshake waits for the client are suspended
     * and watched here (emhd_tls_pull, emhd_hs_thread); hs_mu orders a
     * suspension against the stop's resumption of them all. */
    int hs_epfd;
    int hs_wake;             /* eventfd: the thread's stop */
    pthread_t hs_thread;
    bool hs_started;
    pthread_mutex_t hs_mu;
    bool hs_stopping;        /* hs_mu: no new suspension */
} emhd_server;

static void emhd_resume(emhd_server *es, struct MHD_Connection *conn);

/* The hand-over of one request's response. A request is dispatched without
 * suspending its connection: a response given at once (404, a
 * non-blocking handler) is queued in the same MHD call, with no
 * suspend/resume round trip through the loop's wake-up. */
enum {
    EMHD_HAND_INLINE,   /* dispatched; the MHD thread has not suspended */
    EMHD_HAND_READY,    /* respond was called: the response is readable */
    EMHD_HAND_SUSPENDED /* suspended without a response: respond resumes */
};

/* Where one request is, for emhd_access (MHD thread only). MHD calls the
 * access handler once the head is complete, once per piece of body, then
 * once with no data; a suspended request is called again after its resume. */
enum {
    EMHD_REQ_HEAD,    /* request line received: the next call has the whole head */
    EMHD_REQ_BODY,    /* head accepted: body pieces, then the call that dispatches */
    EMHD_REQ_SWALLOW, /* a status found in the body (413): the rest is discarded
                       * (bounded), the last call answers it */
    EMHD_REQ_SBODY,   /* dispatched at its head: a streamed body (emhd_sbody) */
    EMHD_REQ_ANSWERED /* handed to the core (dispatched or failed): the call after
                       * its answer queues it */
};

/* One per request, from the request line until MHD_OPTION_NOTIFY_COMPLETED
 * (MHD's con_cls). Only the MHD thread of the connection touches it, except
 * `hand`, and `conn` which respond reads. */
typedef struct emhd_req {
    emhd_server *es;
    emhd_conn *ec;
    struct MHD_Connection *conn;
    srv_request *req; /* NULL until the head is complete */
    int phase;        /* EMHD_REQ_* (MHD thread only) */
    int body_status;  /* a status found while reading the body (413) */
    size_t swallowed; /* body bytes discarded after body_status */
    /* Who hands the response over (EMHD_HAND_*): respond and the MHD
     * thread agree through it whether the connection must be resumed. */
    atomic_int hand;
    bool failed;      /* req holds the core's answer to bad input (emhd_fail) */
    bool closes;      /* the answer queued closes the connection whatever req says */
    atomic_int sstate; /* a streamed response's suspend hand-over (EMHD_S_*) */
    uint64_t file_len; /* a file body given to MHD whole (its sendfile), or 0 */
    /* A streamed body (SRV_ROUTE_STREAM_BODY; docs/ENGINES.md). MHD thread
     * only, but bst, which respond and body_kick change too. */
    bool sbody;       /* the core pulls the body */
    /* Read by body_kick on another thread: atomic (MHD may call again in
     * the pass a kick just resumed, writing them while the kicker reads). */
    atomic_bool bfirst; /* the first call (the head) is done */
    bool bhead_wait;  /* suspended in the first call: MHD repeats it */
    bool bstarted;    /* MHD was let read the body (it sent any 100 then) */
    atomic_bool bend;        /* srv__body_end(req, 0) was called */
    bool bdetached;   /* srv__body_detach was called */
    bool need100;     /* the client asked for "100 Continue" */
    bool hasbody;     /* the head announced a body (a length > 0, or chunks) */
    int bad;          /* the core's status for its framing once `good` more bytes came */
    uint64_t good;
    atomic_int bst;   /* EMHD_B_* bits: who resumes a body wait */
    const char *uri;  /* MHD's copy of the target, in its read buffer */
    size_t target_len;
    char target[]; /* the raw request-target, as MHD received it */
} emhd_req;

/* A streamed body's wait hand-over (emhd_req.bst): the MHD thread sets
 * SUSP once suspended; a kick or the answer sets its bit, and whoever
 * clears SUSP resumes the connection (exactly one does). ANS stays. */
enum { EMHD_B_SUSP = 1, EMHD_B_KICK = 2, EMHD_B_ANS = 4 };

/* The core's clock, signed (the engine's own waits: linger, stop, raw writes). */
static long long emhd_now_ms(void)
{
    return (long long)srv__now_ms();
}

/* The policy's state of a connection (ec->policy, under ec->mu). ec NULL
 * (out of memory at its start): no policy, nothing to do. */
static void emhd_state(emhd_conn *ec, enum srv__conn_state state)
{
    if (ec == NULL)
        return;
    pthread_mutex_lock(&ec->mu);
    srv__conn_set(&ec->policy, state, srv__now_ms());
    pthread_mutex_unlock(&ec->mu);
}

/* The MHD thread moves a request on from `from`; false when the watchdog
 * or the stop answered it meanwhile (SRV_CONN_LINGER: its answer is
 * written past MHD, which must close). A refused connection stays
 * SRV_CONN_REFUSE (srv__conn_set) and moves on with its request to its 503. */
static bool emhd_state_from(emhd_conn *ec, enum srv__conn_state from, enum srv__conn_state to)
{
    if (ec == NULL)
        return true;
    pthread_mutex_lock(&ec->mu);
    enum srv__conn_state now = ec->policy.state;
    bool ok = now == from || now == SRV_CONN_REFUSE;
    if (ok)
        srv__conn_set(&ec->policy, to, srv__now_ms());
    pthread_mutex_unlock(&ec->mu);
    return ok;
}

static enum srv__conn_state emhd_state_of(emhd_conn *ec)
{
    pthread_mutex_lock(&ec->mu);
    enum srv__conn_state state = ec->policy.state;
    pthread_mutex_unlock(&ec->mu);
    return state;
}

/* No request on it (ec->mu held): accepted, kept alive, or refused with
 * nothing asked yet. */
static bool emhd_waiting(const srv__conn *c)
{
    return c->state == SRV_CONN_FIRST || c->state == SRV_CONN_IDLE ||
           (c->state == SRV_CONN_REFUSE && !c->begun);
}

/* Drain the lingering sockets (lock held): discard what arrived, close
 * at EOF, on an error or at the end of their time. */
static void emhd_linger_drain(emhd_server *es, long long now)
{
    static char sink[16384];
    for (unsigned i = 0; i < es->lingering;) {
        emhd_linger *l = &es->linger[i];
        bool done = now >= l->until;
        for (int n = 0; !done && n < 64; n++) { /* at most 1 MiB a tick */
            ssize_t r = recv(l->fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r > 0 && (l->drained += (size_t)r) < SRV_LINGER_MAX_BYTES)
                continue;
            if (r > 0) { /* the budget is spent */
                done = true;
                break;
            }
            done = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
            break;
        }
        if (done) {
            close(l->fd);
            *l = es->linger[--es->lingering];
        } else {
            i++;
        }
    }
}

/* emhd_conn.acked of a response not looked at yet: the watchdog samples it
 * on its next pass (a response usually completes before that, so most
 * cost no getsockopt at all). */
#define EMHD_ACKED_UNSAMPLED (ULLONG_MAX - 1)

/* Bytes of ours the client's TCP has acknowledged; ULLONG_MAX when unknown.
 * This measures the client, not libmicrohttpd (whatever wrote the bytes):
 * the one thing a send deadline needs, and the engine's only TCP_INFO read.
 * MHD reports no write progress, and a file it sends (sendfile) calls
 * nothing of ours until it is all in the socket. */
static unsigned long long emhd_acked(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked)
        return ULLONG_MAX;
    return (unsigned long long)ti.tcpi_bytes_acked;
}

/* A response being written (SRV_CONN_SEND; ec->mu held): true, with the
 * policy's deadline moved on (srv__conn_progress), when the client
 * acknowledged bytes since the last look. MHD's own timeout cannot be
 * used: it is max(header, keep-alive) + 1 s and counts bytes put in the
 * socket buffer (megabytes), not bytes the client took. */
static bool emhd_send_progressed(emhd_conn *ec, long long now)
{
    unsigned long long acked = emhd_acked(ec->fd);
    unsigned long long before = atomic_load(&ec->acked);
    if (acked == ULLONG_MAX || (acked == before && before != EMHD_ACKED_UNSAMPLED))
        return false;
    atomic_store(&ec->acked, acked);
    srv__conn_progress(&ec->policy, (uint64_t)now);
    return true;
}

/*
 * While quiescing (es->lock and ec->mu held): an idle kept-alive
 * connection closes (the policy's quiet close at a quiesce). MHD reports
 * a next request only once its request line is whole and nothing public
 * shows bytes in its buffer before that, so one whose line has partly
 * arrived closes as idle too (SRV_CAP_STOP_CLOSES_PARTIAL_LINE: the race
 * every keep-alive close has, RFC 9112 9.3.1). A connection idle for less
 * than EMHD_STOP_IDLE_MS (its answer was queued before the quiesce, with
 * keep-alive) is left for a later look: its client may be sending its
 * next request right now, and MHD reports it if the line completes.
 */
#define EMHD_STOP_IDLE_MS 100

static void emhd_quiesce_idle(emhd_server *es, emhd_conn *ec, long long now)
{
    srv__conn *c = &ec->policy;
    if (!emhd_waiting(c) || ec->fd < 0 || c->deadline == UINT64_MAX)
        return;
    /* TLS, handshake not done on our side: looked at again once done (the
     * client may be about to send a request); the stop does not wait for
     * it (it does not count as arriving). */
    if (es->tls && !atomic_load(&ec->handshaken))
        return;
    long long d = (long long)c->deadline;
    if (now < d - es->keepalive_ms + EMHD_STOP_IDLE_MS) /* idle since d - keepalive */
        return;
    c->deadline = UINT64_MAX; /* looked at once */
    shutdown(ec->fd, SHUT_RDWR);
}

/*
 * A body still arriving whose client has ended its side (lock held):
 * libmicrohttpd 0.9.75 often misses a FIN that comes in the middle of a
 * body, and the request would wait for its pace deadline. A FIN with the
 * socket drained, seen on two ticks (EMHD_FIN_MS) while MHD is reading
 * (not paused: the state), can no longer complete the body: true, and the
 * connection is to be cut as a vanished client's.
 */
#define EMHD_FIN_MS 100

static bool emhd_fin_mid_body(emhd_conn *ec, enum srv__conn_state state, long long now)
{
    if ((state != SRV_CONN_BODY_STREAM && state != SRV_CONN_BODY) || ec->fd < 0) {
        ec->fin_at = 0;
        return false;
    }
    struct pollfd pf = {.fd = ec->fd, .events = POLLRDHUP};
    int unread = 1;
    bool fin = poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0 &&
               ioctl(ec->fd, FIONREAD, &unread) == 0 && unread == 0;
    if (!fin) {
        ec->fin_at = 0;
        return false;
    }
    if (ec->fin_at == 0)
        ec->fin_at = now;
    return now - ec->fin_at >= EMHD_FIN_MS;
}

static void emhd_answer_raw(emhd_server *es, struct MHD_Connection *conn, int fd, int status,
                            const char *target, size_t target_len);
static void emhd_answer_req(emhd_server *es, struct MHD_Connection *conn, srv_request *req,
                            int fd, int status);

/* The policy's answer to a request still arriving (SRV_CONN_ANSWER: 408
 * at its deadline, 503 to a refused one or at the stop), which MHD cannot
 * give: it has no request to answer before the head is whole, and 0.9.75
 * refuses a response mid-body. In cleartext the core's answer is written
 * past MHD and the write side shut; over TLS (only MHD writes) a close.
 * SRV_CONN_LINGER then: the MHD thread's next step fails (emhd_state_from)
 * and MHD closes; at the linger's end the watchdog shuts it down.
 * es->lock and ec->mu held. */
static void emhd_answer_cut(emhd_server *es, emhd_conn *ec, int status)
{
    srv__conn_set(&ec->policy, SRV_CONN_LINGER, srv__now_ms());
    if (es->tls) {
        shutdown(ec->fd, SHUT_RDWR);
        return;
    }
    emhd_answer_raw(es, ec->conn, ec->fd, status, NULL, 0);
    shutdown(ec->fd, SHUT_WR);
}

/* Answer 431 on a stuck connection's socket (a duplicate, ours) and shut
 * it down, so MHD closes it. Watchdog thread, lock not held. */
static void emhd_stuck_answer(emhd_server *es, int fd)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) != 0)
        len = 0;
    srv_request *req = srv__request_new(es->srv, len > 0 ? (struct sockaddr *)&peer : NULL, len);
    if (req != NULL)
        emhd_answer_req(es, NULL, req, fd, 431);
    shutdown(fd, SHUT_RDWR);
    close(fd);
}

#define EMHD_STUCK_MAX 16

/*
 * One connection's tick (es->lock and ec->mu held): what the policy says
 * is due (srv__conn_due), carried out, with what libmicrohttpd hides from
 * it: a quiesce's idle connection may hold part of a request line
 * (emhd_quiesce_idle), a write's progress is TCP's acknowledged count
 * (MHD reports none), a client's FIN mid-body (0.9.75 may miss it), and a
 * query MHD could not hold (emhd_log). Returns a duplicate of the socket
 * to answer 431 on once the lock is let go, or -1.
 */
static int emhd_watch(emhd_server *es, emhd_conn *ec, long long now, bool room)
{
    srv__conn *c = &ec->policy;
    if (atomic_load(&ec->upgraded))
        return -1; /* the socket loop's */
    if (emhd_waiting(c) && atomic_load(&es->quiescing)) {
        emhd_quiesce_idle(es, ec, now); /* the policy's quiet close, when safe */
        return -1;
    }
    /* A response being written for a pass already: take the count its
     * deadline is measured from (the deadline restarts then). */
    if (c->state == SRV_CONN_SEND && atomic_load(&ec->acked) == EMHD_ACKED_UNSAMPLED) {
        (void)emhd_send_progressed(ec, now);
        return -1;
    }
    if (emhd_fin_mid_body(ec, c->state, now)) {
        ec->fin_at = 0;
        c->deadline = UINT64_MAX;
        shutdown(ec->fd, SHUT_RDWR); /* body_cut stays false: it left */
        return -1;
    }
    enum srv__conn_due due = srv__conn_due(c, (uint64_t)now, 0, 0);
    if (due == SRV_CONN_WAIT)
        return -1;
    if (c->state == SRV_CONN_SEND && emhd_send_progressed(ec, now))
        return -1;
    if (ec->fd >= 0 && atomic_exchange(&ec->lib_stuck, false)) {
        /* MHD may have written an answer meanwhile (it announced one):
         * its close ends the connection. */
        if (!emhd_quiet_since(ec, atomic_load(&ec->stuck_msgs))) {
            c->deadline = (uint64_t)(now + es->header_ms);
            return -1;
        }
        /* In cleartext the core's 431, written after the lock is let go;
         * over TLS only MHD can write: a close. */
        int fd = es->tls || !room ? -1 : fcntl(ec->fd, F_DUPFD_CLOEXEC, 0);
        if (fd >= 0) {
            c->deadline = UINT64_MAX;
            return fd;
        }
    }
    c->deadline = UINT64_MAX; /* looked at once */
    if (ec->fd < 0)
        return -1;
    if (due == SRV_CONN_CLOSE) {
        if (c->state == SRV_CONN_SEND) /* not reading (nginx's send_timeout): reset */
            atomic_store(&ec->stalled, true);
        shutdown(ec->fd, SHUT_RDWR);
        return -1;
    }
    if (c->state == SRV_CONN_BODY_STREAM) {
        /* Below the pace: the core's 408 to the application (MHD cannot
         * write mid-body), unless the client already left (MHD 0.9.75
         * does not always see a FIN mid-body at once): a vanished client. */
        struct pollfd pf = {.fd = ec->fd, .events = POLLRDHUP};
        bool gone = poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
        atomic_store(&ec->body_cut, !gone);
        shutdown(ec->fd, SHUT_RDWR);
        return -1;
    }
    emhd_answer_cut(es, ec, srv__conn_status(c));
    return -1;
}

/* Every 100 ms (10 ms while sockets linger or a quiesce is on): each
 * connection's emhd_watch; the lingering sockets drained. */
static void *emhd_watchdog(void *arg)
{
    emhd_server *es = arg;
    pthread_mutex_lock(&es->lock);
    while (!es->wd_stop) {
        int stuck[EMHD_STUCK_MAX];
        unsigned nstuck = 0;
        long long now = emhd_now_ms();
        emhd_linger_drain(es, now);
        for (emhd_conn *ec = es->conns; ec != NULL; ec = ec->next) {
            pthread_mutex_lock(&ec->mu);
            int fd = emhd_watch(es, ec, now, nstuck < EMHD_STUCK_MAX);
            pthread_mutex_unlock(&ec->mu);
            if (fd >= 0)
                stuck[nstuck++] = fd;
        }
        if (nstuck > 0) {
            pthread_mutex_unlock(&es->lock);
            for (unsigned i = 0; i < nstuck; i++)
                emhd_stuck_answer(es, stuck[i]);
            pthread_mutex_lock(&es->lock);
        }
        struct timespec ts;
        bool quick = es->lingering > 0 || atomic_load(&es->quiescing);
        srv__timespec_in(&ts, CLOCK_MONOTONIC, quick ? 10 : 100);
        pthread_cond_timedwait(&es->wd_cond, &es->lock, &ts);
    }
    pthread_mutex_unlock(&es->lock);
    return NULL;
}

static void emhd_watchdog_join(emhd_server *es)
{
    if (!es->watchdog_started)
        return;
    pthread_mutex_lock(&es->lock);
    es->wd_stop = true;
    pthread_cond_signal(&es->wd_cond);
    pthread_mutex_unlock(&es->lock);
    pthread_join(es->watchdog, NULL);
    es->watchdog_started = false;
    pthread_mutex_lock(&es->lock);
    emhd_linger_drain(es, LLONG_MAX); /* nobody drains them any more */
    pthread_mutex_unlock(&es->lock);
}

/* The calling thread's emhd_worker, NULL if it is none of MHD's (or MHD
 * has more threads than slots). With `add`, claim a slot for it. */
static emhd_worker *emhd_worker_self(emhd_server *es, bool add)
{
    pthread_t self = pthread_self();
    unsigned n = atomic_load_explicit(&es->nworkers, memory_order_acquire);
    for (unsigned i = 0; i < n; i++)
        if (pthread_equal(es->workers[i].tid, self))
            return &es->workers[i];
    if (!add)
        return NULL;
    pthread_mutex_lock(&es->lock);
    n = atomic_load_explicit(&es->nworkers, memory_order_relaxed);
    emhd_worker *w = NULL;
    for (unsigned i = 0; i < n && w == NULL; i++) /* only this thread adds itself */
        if (pthread_equal(es->workers[i].tid, self))
            w = &es->workers[i];
    if (w == NULL && n < es->max_workers) {
        w = &es->workers[n];
        w->tid = self;
        atomic_init(&w->msgs, 0);
        atomic_store_explicit(&es->nworkers, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&es->lock);
    return w;
}

/* The connection goes idle (accepted, or its request completed with the
 * whole answer written): emhd_closing's "nothing written since" starts
 * here. MHD thread. */
static void emhd_went_idle(emhd_conn *ec)
{
    ec->idle_msgs = ec->worker != NULL ? atomic_load(&ec->worker->msgs) : 0;
}

/* ------------------------------------------------------------------ */
/* MHD callbacks (the MHD thread that owns the connection)             */
/* ------------------------------------------------------------------ */

/* MHD logs routine events too (every error answer, every client that left
 * mid-response, the connection limit). Print only trouble on our side, at
 * most once a second; everything with SRV_MHD_LOG=1. While starting, keep
 * the last message: it explains a failed MHD_start_daemon. */
static bool emhd_log_is_trouble(const char *fmt)
{
    static const char *const trouble[] = {
        "Error accepting connection", "resource limit", "Failed to create",
        "Call to epoll", "Error allocating memory", "Failed to join",
        "Failed to signal", "Failed to start serving",
    };
    for (size_t i = 0; i < sizeof trouble / sizeof trouble[0]; i++)
        if (strstr(fmt, trouble[i]) != NULL)
            return true;
    return false;
}

/* Set on an MHD thread when MHD failed to build a response head ("failed
 * to create response header", nothing written): MHD then closes the
 * connection in the same call, and its request's completion
 * (emhd_notify_completed, which reads and clears this) follows at once:
 * every request MHD split has seen the URI callback, so MHD reports it. */
static _Thread_local bool emhd_head_failed;

/* The request whose query MHD is splitting on this thread: set by the URI
 * callback, which MHD calls right before it splits the query, cleared by
 * the unescape call for the path, which MHD makes right after it (the
 * calls for each parameter come before), so a pool failure logged in
 * between is this request's; also cleared when the request goes and after
 * each MHD_run (a libmicrohttpd that gives up on the split makes no
 * unescape call). */
static _Thread_local emhd_req *emhd_splitting;

/* How long MHD may take to answer a request whose query parameters its
 * pool could not hold before the engine answers 431 itself. */
#define EMHD_LIB_STUCK_MS 100

static void emhd_log(void *cls, const char *fmt, va_list ap)
{
    static atomic_llong last_ms;
    emhd_server *es = cls;
    /* A close's reason comes as the argument of "%s\n" (connection_close_error). */
    const char *text = fmt;
    if (strcmp(fmt, "%s\n") == 0) {
        va_list aq;
        va_copy(aq, ap);
        text = va_arg(aq, const char *);
        va_end(aq);
    }
    if (text != NULL && strstr(text, "failed to create response header") != NULL)
        emhd_head_failed = true;
    /* The query's parameters filled MHD's pool: each takes a header record
     * from it. 0.9.75 queues its 431 and then loses it (it goes on reading
     * a head it has discarded), and the connection would wait for its
     * header deadline. The watchdog answers it soon unless MHD announced
     * an answer on that thread since (emhd_worker). The announcement of
     * the 431 it queues (and loses) comes in the same call, while the
     * query is still being split: that one is the failure's own.
     * 1.0.0 and later send their 431 (read in v1.0.1's
     * connection_add_header): nothing to watch there. */
    emhd_worker *w = emhd_worker_self(es, false);
    unsigned long long msgs = w != NULL ? atomic_load(&w->msgs) : 0;
    if (w != NULL && strstr(fmt, EMHD_ANSWER_MSG) != NULL)
        msgs = atomic_fetch_add(&w->msgs, 1) + 1;
    emhd_conn *sc = emhd_splitting != NULL ? emhd_splitting->ec : NULL;
    if (sc != NULL && atomic_load(&sc->lib_stuck))
        atomic_store(&sc->stuck_msgs, msgs);
    if (sc != NULL && es->lib < EMHD_LIB_1_0 && text != NULL &&
        strstr(text, "Not enough memory in pool to allocate header record") != NULL) {
        emhd_conn *ec = sc;
        if (ec->fd >= 0 && !atomic_load(&ec->lib_stuck)) {
            atomic_store(&ec->stuck_msgs, msgs);
            atomic_store(&ec->lib_stuck, true);
            /* Sooner than the head's deadline: not the policy's rule, a
             * libmicrohttpd's loss (emhd_watch). */
            pthread_mutex_lock(&ec->mu);
            ec->policy.deadline = srv__now_ms() + EMHD_LIB_STUCK_MS;
            pthread_mutex_unlock(&ec->mu);
        }
    }
    bool print = es->log_all;
    if (!print && atomic_load(&es->running) && emhd_log_is_trouble(fmt)) {
        long long now = emhd_now_ms(), last = atomic_load(&last_ms);
        print = now - last >= 1000 && atomic_compare_exchange_strong(&last_ms, &last, now);
    }
    if (print) {
        va_list aq;
        va_copy(aq, ap);
        fputs("libsrv mhd: ", stderr);
        vfprintf(stderr, fmt, aq);
        va_end(aq);
    }
    if (!atomic_load(&es->running)) {
        pthread_mutex_lock(&es->lock);
        vsnprintf(es->start_msg, sizeof es->start_msg, fmt, ap);
        size_t n = strlen(es->start_msg);
        while (n > 0 && (es->start_msg[n - 1] == '\n' || es->start_msg[n - 1] == '.'))
            es->start_msg[--n] = '\0';
        pthread_mutex_unlock(&es->lock);
    }
}

/* A new core request for a connection of MHD's, with the client's address. */
static srv_request *emhd_request_new(emhd_server *es, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;
    socklen_t salen = 0;
    if (sa != NULL)
        salen = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                          : sizeof(struct sockaddr_in);
    return srv__request_new(es->srv, sa, salen);
}

/*
 * An answer MHD gave (or a close it made) without a request of ours: make
 * the core answer `status` on a request of its own, so the answer is
 * counted and logged like any other; when fd >= 0 also write the core's
 * answer on the socket (MHD wrote nothing and no longer will). Never over
 * TLS: those bytes would be cleartext inside the TLS stream (callers close
 * instead).
 */
static void emhd_answer_req(emhd_server *es, struct MHD_Connection *conn, srv_request *req,
                            int fd, int status);
static void emhd_write_raw(int fd, srv_request *req, int wait_ms);

static void emhd_answer_raw(emhd_server *es, struct MHD_Connection *conn, int fd, int status,
                            const char *target, size_t target_len)
{
    srv_request *req = emhd_request_new(es, conn);
    if (req == NULL)
        return;
    if (target != NULL && target_len > 0)
        (void)srv__request_set_target(req, target, target_len); /* for the log only */
    emhd_answer_req(es, conn, req, fd, status);
}

/* emhd_answer_raw for a request already made (conn NULL: the gate's, before
 * MHD has the connection); releases req. */
static void emhd_answer_req(emhd_server *es, struct MHD_Connection *conn, srv_request *req,
                            int fd, int status)
{
    emhd_req er = {.es = es, .conn = conn}; /* not suspended: respond only marks it */
    srv__request_set_engine_data(req, &er);
    srv__request_fail(req, status);
    if (fd >= 0 && !es->tls)
        emhd_write_raw(fd, req, 0);
    srv__request_release(req);
}


/* A streamed body's connection closes (completed, the client left, MHD's
 * own error, or the watchdog's pace cut): tell the application once, and
 * make sure the request's answer has reached emhd_respond (which touches
 * er) before er goes. MHD thread. */
static void emhd_sbody_closed(emhd_req *er, struct MHD_Connection *conn, bool lib_error)
{
    srv_request *req = er->req;
    if (!er->bdetached) {
        er->bdetached = true;
        int st = 0;
        if (er->ec != NULL && atomic_load(&er->ec->body_cut)) {
            st = 408;
        } else if (lib_error && er->phase != EMHD_REQ_ANSWERED) {
            /* MHD answered a malformed chunk itself (400; SRV_CAP_LIB_CHUNKED). */
            const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
            if (ci != NULL && ci->http_status == 400)
                st = 400;
        }
        if (st != 0)
            srv__body_end(req, st); /* on_end; the core's answer is not written */
        srv__body_detach(req);      /* on_end(SRV_ECLOSED) unless told; no kick after */
    }
    er->phase = EMHD_REQ_ANSWERED; /* counted and logged through req, not raw */
    /* The client left first: withdraw it (respond runs here). Else an
     * answer was claimed: wait for its respond, a few instructions away. */
    if (!(atomic_load(&er->bst) & EMHD_B_ANS) && !srv__request_cancel(req))
        while (!(atomic_load(&er->bst) & EMHD_B_ANS))
            sched_yield();
    atomic_store(&er->hand, EMHD_HAND_READY);
}

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
static void emhd_linger_add(emhd_server *es, int fd);

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

/* Linger on fd (ours: a duplicate of MHD's socket, or the gate's): write
 * side shut, drained by the watchdog, closed at EOF or in SRV_LINGER_MS. */
static void emhd_linger_add(emhd_server *es, int fd)
{
    shutdown(fd, SHUT_WR);
    pthread_mutex_lock(&es->lock);
    if (es->lingering < SRV_LINGER_MAX_CONNS && !es->wd_stop) {
        es->linger[es->lingering++] = (emhd_linger){fd, emhd_now_ms() + SRV_LINGER_MS, 0};
        fd = -1;
        pthread_cond_signal(&es->wd_cond); /* drain at a 10 ms pace from now */
    }
    pthread_mutex_unlock(&es->lock);
    if (fd >= 0)
        close(fd);
}

/*
 * TLS: the certificate for a handshake (MHD_OPTION_HTTPS_CERT_CALLBACK, a
 * gnutls_certificate_retrieve_function2, on the connection's MHD thread):
 * the generation current now, so connections accepted after
 * srv_server_reload_tls get the new certificate while open ones keep the
 * one they took. The connection holds it until MHD has freed its session.
 */
static int emhd_tls_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *privkey)
{
    (void)req_ca_rdn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    struct MHD_Connection *conn = gnutls_session_get_ptr(session); /* MHD sets it */
    const union MHD_ConnectionInfo *ci =
        conn != NULL ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    emhd_conn *ec = ci != NULL ? ci->socket_context : NULL;
    if (ec == NULL)
        return -1; /* out of memory at the accept: the handshake fails */
    if (ec->tls == NULL)
        ec->tls = srv__tls_gnutls(ec->es->srv, NULL);
    if (ec->tls == NULL)
        return -1;
    *pcert = ec->tls->certs;
    *pcert_length = ec->tls->ncerts;
    *privkey = ec->tls->key;
    return 0;
}

/* TLS: the client's Finished arrived (the handshake is done on our side).
 * The bytes received so far are the handshake's: quiesce's "a next
 * request has begun" (emhd_quiesce_idle) counts from here, so a connection
 * with a handshake and no request yet is idle, as a fresh cleartext one. */
static int emhd_tls_finished(gnutls_session_t session, unsigned htype, unsigned when,
                             unsigned incoming, const gnutls_datum_t *msg)
{
    (void)htype;
    (void)when;
    (void)msg;
    struct MHD_Connection *conn = gnutls_session_get_ptr(session);
    const union MHD_ConnectionInfo *ci =
        incoming && conn != NULL
            ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT)
            : NULL;
    emhd_conn *ec = ci != NULL ? ci->socket_context : NULL;
    if (ec != NULL)
        atomic_store(&ec->handshaken, true);
    return 0;
}

/*
 * TLS: the socket read GnuTLS makes (gnutls_transport_set_pull_function).
 * libmicrohttpd 0.9.75 lets GnuTLS read the socket itself during the
 * handshake, so its epoll loop never sees the EAGAIN that clears the
 * connection's read-ready mark: it would call gnutls_handshake again and
 * again (with epoll_wait(0) between) until the client's next flight came,
 * a core busy for a round trip per handshake (docs/BENCHMARKS.md). Instead
 * a handshake that finds the socket empty suspends its connection (MHD
 * drops it from its loop) and emhd_hs_thread resumes it when the socket
 * turns readable (or hung up, or shut down by the watchdog's deadline).
 * After the handshake it is a plain recv. MHD thread.
 */
static ssize_t emhd_tls_pull(gnutls_transport_ptr_t ptr, void *buf, size_t len)
{
    emhd_conn *ec = ptr;
    ssize_t n = recv(ec->fd, buf, len, 0);
    int err = n < 0 ? errno : 0;
    if (n > 0 && !atomic_load(&ec->handshaken)) {
        /* GnuTLS reassembles whatever length a ClientHello announces (a
         * 16 MiB one grew the server by 8 MiB a connection): past
         * EMHD_TLS_HANDSHAKE_MAX the handshake fails, as OpenSSL's does. */
        ec->hs_bytes += (size_t)n;
        if (ec->hs_bytes > EMHD_TLS_HANDSHAKE_MAX) {
            gnutls_transport_set_errno(ec->session, ECONNRESET);
            return -1;
        }
    }
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK) && !atomic_load(&ec->handshaken)) {
        emhd_server *es = ec->es;
        pthread_mutex_lock(&es->hs_mu);
        if (!es->hs_stopping && !ec->hs_waiting) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT,
                                     .data.ptr = ec};
            if (epoll_ctl(es->hs_epfd, EPOLL_CTL_ADD, ec->fd, &ev) == 0) {
                ec->hs_waiting = true;
                MHD_suspend_connection(ec->conn);
            } /* else MHD calls again, as it would have */
        }
        pthread_mutex_unlock(&es->hs_mu);
    }
    if (n < 0)
        gnutls_transport_set_errno(ec->session, err);
    return n;
}

/* Resumes a connection suspended by emhd_tls_pull. hs_mu held. */
static void emhd_hs_resume(emhd_server *es, emhd_conn *ec)
{
    epoll_ctl(es->hs_epfd, EPOLL_CTL_DEL, ec->fd, NULL);
    ec->hs_waiting = false;
    emhd_resume(es, ec->conn);
}

/* The only thread that resumes those connections while the server runs,
 * so an event it took cannot outlive its connection: a suspended
 * connection is not closed by MHD. */
static void *emhd_hs_thread(void *arg)
{
    emhd_server *es = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(es->hs_epfd, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL)
                return NULL; /* hs_wake: the stop */
            emhd_conn *ec = evs[i].data.ptr;
            pthread_mutex_lock(&es->hs_mu);
            if (ec->hs_waiting)
                emhd_hs_resume(es, ec);
            pthread_mutex_unlock(&es->hs_mu);
        }
    }
}

/* Stop: no new suspension, the thread ends, and every connection still
 * waiting is resumed (MHD_stop_daemon panics on a suspended connection;
 * it closes them). */
static void emhd_hs_stop(emhd_server *es)
{
    if (!es->hs_started)
        return;
    pthread_mutex_lock(&es->hs_mu);
    es->hs_stopping = true;
    pthread_mutex_unlock(&es->hs_mu);
    uint64_t one = 1;
    while (write(es->hs_wake, &one, sizeof one) < 0 && errno == EINTR)
        ;
    pthread_join(es->hs_thread, NULL);
    es->hs_started = false;
    pthread_mutex_lock(&es->lock);
    pthread_mutex_lock(&es->hs_mu);
    for (emhd_conn *ec = es->conns; ec != NULL; ec = ec->next)
        if (ec->hs_waiting)
            emhd_hs_resume(es, ec);
    pthread_mutex_unlock(&es->hs_mu);
    pthread_mutex_unlock(&es->lock);
}

/* The epoll set, its wake-up and its thread; 0 or an SRV_E* code. */
static int emhd_hs_start(emhd_server *es)
{
    es->hs_epfd = epoll_create1(EPOLL_CLOEXEC);
    es->hs_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (es->hs_epfd < 0 || es->hs_wake < 0 ||
        epoll_ctl(es->hs_epfd, EPOLL_CTL_ADD, es->hs_wake, &ev) != 0)
        return SRV_ENOMEM;
    if (srv__thread_create(&es->hs_thread, NULL, emhd_hs_thread, es) != 0)
        return SRV_ETHREAD;
    es->hs_started = true;
    return 0;
}

static void emhd_hs_close(emhd_server *es)
{
    if (es->hs_epfd >= 0)
        close(es->hs_epfd);
    if (es->hs_wake >= 0)
        close(es->hs_wake);
    es->hs_epfd = es->hs_wake = -1;
}

/* TLS, a new connection. With tls_client_ca_file, a client without a
 * certificate that the CA file verifies fails the handshake, as on the
 * OpenSSL engines (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT):
 * MHD only requests one (GNUTLS_CERT_REQUEST) and verifies nothing. */
static void emhd_tls_session(emhd_server *es, struct MHD_Connection *conn, emhd_conn *ec)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (ci == NULL || ci->tls_session == NULL)
        return;
    gnutls_session_t session = ci->tls_session;
    if (ec != NULL && ec->fd >= 0) {
        /* Our pull (its pointer: ec); the push keeps the socket (MHD's). */
        ec->session = session;
        gnutls_transport_set_pull_function(session, emhd_tls_pull);
        gnutls_transport_set_ptr2(session, ec, (gnutls_transport_ptr_t)(intptr_t)ec->fd);
    }
    gnutls_handshake_set_hook_function(session, GNUTLS_HANDSHAKE_FINISHED, GNUTLS_HOOK_POST,
                                       emhd_tls_finished);
    if (es->tls_start == NULL || es->tls_start->client_ca_pem == NULL)
        return;
    gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(session, NULL, 0); /* against MHD's trust list */
}

/* ------------------------------------------------------------------ */
/* The gate's side (engines/mhd_gate.h): connections reach MHD through   */
/* MHD_add_connection, with a record of what the gate knew              */
/* ------------------------------------------------------------------ */

/* Take the gate's record of fd (lock held), of hand-over `seq` only when
 * it is not 0: a record found but for a descriptor MHD never reported is
 * stale (MHD closes a connection it cannot start without a notification)
 * and is dropped. Without a record (none is expected): accepted now. */
static emhd_handoff emhd_handoff_take(emhd_server *es, int fd, unsigned long long seq)
{
    emhd_handoff h = {.fd = fd};
    for (emhd_handoff **pp = &es->handoffs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->fd != fd || (seq != 0 && (*pp)->seq != seq))
            continue;
        emhd_handoff *found = *pp;
        *pp = found->next;
        es->nhandoffs--;
        h = *found;
        h.found = true;
        free(found);
        break;
    }
    return h;
}

/* ------------------------------------------------------------------ */
/* The loops (emhd_loop): one daemon each, run by our thread           */
/* ------------------------------------------------------------------ */

/* Make l run MHD again: one write until the loop has read it. Any thread. */
static void emhd_loop_wake(emhd_loop *l)
{
    if (atomic_exchange(&l->signalled, true))
        return; /* written and not read yet: the loop runs MHD after reading it */
    uint64_t one = 1;
    while (write(l->wake, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* MHD_resume_connection, and its loop woken. The only wake-up a resume
 * gets: without an MHD thread, MHD_start_daemon drops MHD_USE_ITC (its
 * inter-thread channel), so MHD_resume_connection only sets flags that the
 * next MHD_run reads. Every resume must come through here. Any thread. */
static void emhd_resume(emhd_server *es, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    struct MHD_Daemon *d = ci != NULL ? ci->daemon : NULL;
    MHD_resume_connection(conn); /* conn may be gone from here on */
    for (unsigned i = 0; i < es->nloops; i++) {
        if (es->loops[i].daemon == d) {
            emhd_loop_wake(&es->loops[i]);
            return;
        }
    }
}

/* The record of hand-over `seq` of fd goes: the connection never reached
 * MHD, or MHD refused it (and closed fd). Not found: the gate, accepting
 * on the same descriptor since, took it as stale and counted it. */
static void emhd_handoff_drop(emhd_server *es, int fd, unsigned long long seq)
{
    if (seq == 0)
        return; /* no record was made */
    pthread_mutex_lock(&es->lock);
    emhd_handoff mine = emhd_handoff_take(es, fd, seq);
    pthread_mutex_unlock(&es->lock);
    if (mine.found)
        srv__conn_close(&mine.conn);
}

/* The loop's thread: the connections the gate queued go to its daemon. */
static void emhd_loop_adds(emhd_loop *l)
{
    pthread_mutex_lock(&l->mu);
    emhd_add *a = l->adds;
    l->adds = NULL;
    l->adds_tail = &l->adds;
    pthread_mutex_unlock(&l->mu);
    while (a != NULL) {
        emhd_add *next = a->next;
        int fd = a->fd;
        /* MHD closes fd when it cannot take it. */
        if (MHD_add_connection(l->daemon, fd, (const struct sockaddr *)&a->peer, a->peer_len) !=
            MHD_YES)
            emhd_handoff_drop(l->es, fd, a->seq);
        free(a);
        a = next;
    }
}

/* Connections queued but never added (the loop stopped first): closed,
 * their records dropped. The controlling thread, the loop joined. */
static void emhd_loop_discard_adds(emhd_loop *l)
{
    while (l->adds != NULL) {
        emhd_add *a = l->adds;
        l->adds = a->next;
        close(a->fd);
        emhd_handoff_drop(l->es, a->fd, a->seq);
        free(a);
    }
    l->adds_tail = &l->adds;
}

static void *emhd_loop_main(void *arg)
{
    emhd_loop *l = arg;
    /* As MHD's own threads: a write to a closed socket is an error, not
     * a signal (MHD sends with MSG_NOSIGNAL too). */
    sigset_t sigpipe;
    sigemptyset(&sigpipe);
    sigaddset(&sigpipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigpipe, NULL);
    for (;;) {
        emhd_loop_adds(l);
        if (atomic_load(&l->stop)) {
            /* Here, so that MHD's last callbacks (every connection closed,
             * on_end(SRV_ECLOSED) of a body cut short) run on this thread
             * as all the others did. */
            MHD_stop_daemon(l->daemon);
            l->daemon_stopped = true;
            return NULL;
        }
        (void)MHD_run(l->daemon); /* processes what is ready, never waits */
        emhd_splitting = NULL;    /* a request MHD closed may be freed now */
        int ms = -1;
        MHD_UNSIGNED_LONG_LONG to;
        if (MHD_get_timeout(l->daemon, &to) == MHD_YES)
            ms = to < INT_MAX ? (int)to : INT_MAX;
        struct epoll_event evs[2];
        int n = epoll_wait(l->epfd, evs, 2, ms);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr != l)
                continue; /* MHD's descriptor: MHD_run takes it */
            uint64_t v;
            while (read(l->wake, &v, sizeof v) < 0 && errno == EINTR)
                ;
            /* Cleared before the next MHD_run, which sees what woke it. */
            atomic_store(&l->signalled, false);
        }
    }
}

/* The gate's thread: hand fd to the next loop. */
static void emhd_gate_hand(void *ctx, int fd, const struct sockaddr *peer, socklen_t peer_len,
                           const srv__conn *conn, int bad, uint64_t good)
{
    emhd_server *es = ctx;
    emhd_handoff *h = malloc(sizeof *h);
    emhd_add *a = malloc(sizeof *a);
    pthread_mutex_lock(&es->lock);
    emhd_handoff stale = emhd_handoff_take(es, fd, 0); /* the gate alone adds records */
    if (stale.found) /* MHD closed that one without a word: its slot and count go */
        srv__conn_close(&stale.conn);
    unsigned long long seq = 0;
    if (h != NULL) {
        seq = ++es->handoff_seq;
        *h = (emhd_handoff){.next = es->handoffs, .fd = fd, .seq = seq, .conn = *conn,
                            .bad = bad, .good = good};
        es->handoffs = h;
        es->nhandoffs++;
    }
    pthread_mutex_unlock(&es->lock);
    if (h == NULL) { /* NOTIFY_STARTED, finding no record, opens it again */
        srv__conn lost = *conn;
        srv__conn_close(&lost);
    }
    if (a == NULL || peer_len > sizeof a->peer) {
        free(a);
        close(fd);
        emhd_handoff_drop(es, fd, seq);
        return;
    }
    a->next = NULL;
    a->fd = fd;
    a->seq = seq;
    a->peer_len = peer_len;
    memcpy(&a->peer, peer, peer_len);
    emhd_loop *l = &es->loops[es->next_loop++ % es->nloops];
    pthread_mutex_lock(&l->mu);
    *l->adds_tail = a;
    l->adds_tail = &a->next;
    pthread_mutex_unlock(&l->mu);
    emhd_loop_wake(l);
}

/* The limit, less one per loop: the gate stops a little before it (each
 * loop's daemon would take the whole limit). */
static bool emhd_gate_room(void *ctx, unsigned waiting)
{
    emhd_server *es = ctx;
    pthread_mutex_lock(&es->lock);
    unsigned long long used = (unsigned long long)es->open + es->nhandoffs + waiting + es->threads;
    pthread_mutex_unlock(&es->lock);
    return used < es->limit;
}

static void emhd_gate_answer(void *ctx, srv_request *req, int fd, int status)
{
    emhd_answer_req(ctx, NULL, req, fd, status);
}

static void emhd_gate_linger(void *ctx, int fd)
{
    emhd_linger_add(ctx, fd);
}

static void emhd_notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
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
static void *emhd_uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
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
static size_t emhd_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    if (emhd_splitting != NULL && s == emhd_splitting->uri)
        emhd_splitting = NULL; /* the path: the query is split */
    return strlen(s);
}

static void emhd_notify_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
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


/* Write req's whole answer (the core's framing) on a cleartext socket,
 * waiting at most wait_ms for a slow reader (0: what the socket takes
 * now). Best effort. */
static void emhd_write_raw(int fd, srv_request *req, int wait_ms)
{
    size_t hlen = 0, blen = 0;
    const char *head = srv__response_http1_head(req, &hlen);
    const void *body = srv__response_body(req, &blen);
    if (head == NULL)
        return;
    struct iovec iov[2] = {{(void *)head, hlen}, {(void *)body, blen}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = blen > 0 ? 2 : 1};
    long long until = emhd_now_ms() + wait_ms;
    while (mh.msg_iovlen > 0) {
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            long long left = until - emhd_now_ms();
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                return;
            continue;
        }
        if (n <= 0)
            return;
        size_t done = (size_t)n;
        while (mh.msg_iovlen > 0 && done >= mh.msg_iov[0].iov_len) {
            done -= mh.msg_iov[0].iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + done;
            mh.msg_iov[0].iov_len -= done;
        }
    }
}

/* Body bytes of a HEAD (or 304) response are never read: MHD only uses the
 * size for Content-Length. */
static ssize_t emhd_no_body(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)pos;
    (void)buf;
    (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* The core's response headers of `req` onto MHD's response (bare: none of
 * the non-framing ones), and the request's version. */
static void emhd_add_headers(struct MHD_Response *r, srv_request *req, bool bare, bool close)
{
    size_t count = bare ? 0 : srv__response_header_count(req);
    for (size_t i = 0; i < count; i++) {
        const char *value = NULL;
        const char *name = srv__response_header_at(req, i, &value);
        if (name != NULL && value != NULL)
            (void)MHD_add_response_header(r, name, value);
    }
    if (close)
        (void)MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* An answer is being written (from SRV_CONN_APP): the watchdog cuts it
 * once the client acknowledges nothing for the policy's send deadline
 * (emhd_send_progressed). */
static void emhd_sending(emhd_conn *ec)
{
    if (ec == NULL)
        return;
    pthread_mutex_lock(&ec->mu);
    if (ec->policy.state == SRV_CONN_APP) {
        atomic_store(&ec->acked, EMHD_ACKED_UNSAMPLED);
        srv__conn_set(&ec->policy, SRV_CONN_SEND, srv__now_ms());
    }
    pthread_mutex_unlock(&ec->mu);
}

/* Queue req's (non-streamed) answer on er's connection. req is er->req,
 * or a replacement the caller releases after this (copy: MHD keeps its
 * own copy of the body). */
static enum MHD_Result emhd_queue(emhd_req *er, struct MHD_Connection *conn, srv_request *req,
                                  bool bare, bool copy)
{
    size_t len = 0;
    const void *body = srv__response_body(req, &len);
    size_t clen = srv__response_content_length(req);
    struct MHD_Response *r;
    if (len == 0 && clen > 0) /* HEAD: advertise the length a GET sends */
        r = MHD_create_response_from_callback(clen, 1024, emhd_no_body, NULL, NULL);
    else
        r = MHD_create_response_from_buffer(len, (void *)(len > 0 ? body : ""),
                                            copy ? MHD_RESPMEM_MUST_COPY
                                                 : MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    emhd_add_headers(r, req, bare, er->closes || !srv__response_keep_alive(req));
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)srv__response_status(req), r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        emhd_sending(er->ec);
    return ret;
}

/* Queue the response the core finished for er->req. MHD frames it (status
 * line, Date, Content-Length, Connection); the body stays owned by the
 * request, which lives until MHD_OPTION_NOTIFY_COMPLETED. */
static enum MHD_Result emhd_stream_send(emhd_req *er, struct MHD_Connection *conn);

/* ---- WebSocket: the 101 by MHD's upgrade, then the core's socket loop ---- */

/* The socket loop, made at the first upgrade (es->lock). */
static srv__sockloop *emhd_sockloop(emhd_server *es)
{
    pthread_mutex_lock(&es->lock);
    if (es->sockloop == NULL && !atomic_load(&es->stopping_ws) &&
        srv__sockloop_start(&es->sockloop, es->srv) != 0)
        es->sockloop = NULL;
    srv__sockloop *l = es->sockloop;
    pthread_mutex_unlock(&es->lock);
    return l;
}

/* An upgraded socket, as the socket loop's `done` needs it. */
typedef struct emhd_upgrade {
    emhd_server *es;
    struct MHD_Daemon *daemon; /* the connection's (its loop is woken) */
    struct MHD_UpgradeResponseHandle *urh;
} emhd_upgrade;

/* MHD closes an upgraded socket: MHD_upgrade_action resumes the
 * connection, which its loop then cleans up (and reports closed); the
 * loop waits in epoll, so it is woken as for any resume (emhd_resume). */
static void emhd_upgrade_close(emhd_server *es, struct MHD_Daemon *d,
                               struct MHD_UpgradeResponseHandle *urh)
{
    (void)MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    for (unsigned i = 0; i < es->nloops; i++)
        if (es->loops[i].daemon == d)
            emhd_loop_wake(&es->loops[i]);
}

/* The socket loop is done with an upgraded socket. Its thread. */
static void emhd_upgrade_done(void *ctx)
{
    emhd_upgrade *u = ctx;
    emhd_upgrade_close(u->es, u->daemon, u->urh);
    free(u);
}

/* MHD wrote the 101 and hands the socket over (over TLS one end of MHD's
 * socket pair, which MHD encrypts). The MHD thread. */
static void emhd_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls,
                          const char *extra_in, size_t extra_in_size, MHD_socket sock,
                          struct MHD_UpgradeResponseHandle *urh)
{
    (void)req_cls;
    emhd_req *er = cls;
    emhd_conn *ec = er->ec;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    struct MHD_Daemon *d = ci != NULL ? ci->daemon : NULL;
    srv__sockloop *l = ec != NULL && er->req != NULL ? emhd_sockloop(er->es) : NULL;
    emhd_upgrade *u = l != NULL ? malloc(sizeof *u) : NULL;
    if (u == NULL) {
        if (er->req != NULL)
            srv__sockloop_upgrade_drop(er->req);
        emhd_upgrade_close(er->es, d, urh);
        return;
    }
    *u = (emhd_upgrade){er->es, d, urh};
    pthread_mutex_lock(&ec->mu); /* the watchdog looks at it under mu */
    atomic_store(&ec->upgraded, true);
    pthread_mutex_unlock(&ec->mu);
    if (srv__sockloop_add(l, sock, NULL, NULL, er->req, &ec->policy, extra_in, extra_in_size,
                          emhd_upgrade_done, u) != 0) {
        free(u);
        emhd_upgrade_close(er->es, d, urh);
    }
}

/* Queue req's 101 (head: the core's, srv__sockloop_upgrade_head) as MHD's
 * upgrade response: its header lines one by one (MHD writes the status
 * line, and wants the Connection header's upgrade token). */
static enum MHD_Result emhd_upgrade_send(emhd_req *er, struct MHD_Connection *conn,
                                         const char *head, size_t len)
{
    struct MHD_Response *r = MHD_create_response_for_upgrade(emhd_upgraded, er);
    const char *p = memchr(head, '\n', len), *end = head + len;
    char line[1024];
    while (r != NULL && p != NULL && ++p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t n = eol != NULL ? (size_t)(eol - p) : 0;
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break; /* the blank line */
        const char *colon = memchr(p, ':', n);
        if (colon == NULL || n >= sizeof line)
            break;
        memcpy(line, p, n);
        line[n] = '\0';
        char *v = line + (colon - p) + 1;
        line[colon - p] = '\0';
        while (*v == ' ')
            v++;
        if (MHD_add_response_header(r, line, v) != MHD_YES) {
            MHD_destroy_response(r);
            r = NULL;
        }
        p = eol;
    }
    enum MHD_Result ret = r != NULL ? MHD_queue_response(conn, 101, r) : MHD_NO;
    if (r != NULL)
        MHD_destroy_response(r);
    if (ret != MHD_YES) {
        srv__sockloop_upgrade_drop(er->req); /* MHD closes the connection */
        return MHD_NO;
    }
    emhd_sending(er->ec);
    return MHD_YES;
}

static enum MHD_Result emhd_send(emhd_req *er, struct MHD_Connection *conn)
{
    srv_request *req = er->req;
    size_t hlen = 0;
    const char *head = srv__sockloop_upgrade_head(req, &hlen);
    if (head != NULL)
        return emhd_upgrade_send(er, conn, head, hlen);
    if (srv__response_streamed(req))
        return emhd_stream_send(er, conn);
    return emhd_queue(er, conn, req, false, false);
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

/* The running library's version (MHD_get_version(), "1.0.1") in
 * MHD_VERSION's form, 0x01000100; 0 when it does not parse. */
static unsigned emhd_lib_version(void)
{
    unsigned a = 0, b = 0, c = 0;
    const char *v = MHD_get_version();
    if (v == NULL || sscanf(v, "%u.%u.%u", &a, &b, &c) < 2)
        return 0;
    return (a & 0xffu) << 24 | (b & 0xffu) << 16 | (c & 0xffu) << 8;
}

/* srv_engine.lib_caps: what this libmicrohttpd does differently. From
 * 1.0.0 (read in v1.0.1's connection.c, up to its git master of 2025-04):
 * a chunk line with an extension is taken up to its LF but not past it,
 * so the LF opens the chunk's data and the chunk's end is malformed: MHD's
 * 400, whatever the discipline level. An unknown Transfer-Encoding gets
 * MHD's 400 before any callback (0.9.75 let it through to the core's 501).
 * obs-fold is unfolded at discipline level 0 (0.9.x: emhd_head_intact's
 * 400). */
static unsigned emhd_lib_caps(void)
{
    unsigned ws = srv__sockloop_available() && MHD_is_feature_supported(MHD_FEATURE_UPGRADE) == MHD_YES
                      ? SRV_CAP_WEBSOCKET
                      : 0;
    unsigned caps = emhd_lib_version() >= EMHD_LIB_1_0
                        ? SRV_CAP_LIB_CHUNK_EXT_400 | SRV_CAP_LIB_TE_400 | SRV_CAP_LIB_OBS_FOLD
                        : 0;
    /* A request line MHD drops without a byte gets the core's 400 only
     * where MHD's messages tell that it wrote nothing (emhd_worker). */
    if (MHD_is_feature_supported(MHD_FEATURE_MESSAGES) == MHD_YES)
        caps |= SRV_CAP_GARBAGE_400;
    return caps | ws;
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
static enum MHD_Result emhd_sbody_begin(emhd_server *es, emhd_req *er,
                                        struct MHD_Connection *conn);

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

/* n body bytes came while the connection waits in `state` (SRV_CONN_BODY,
 * or SRV_CONN_BODY_STREAM, which a pause left: a new pace window then):
 * the policy's pace. False when answered past MHD meanwhile. */
static bool emhd_body_bytes(emhd_conn *ec, enum srv__conn_state state, size_t n)
{
    if (ec == NULL)
        return true;
    pthread_mutex_lock(&ec->mu);
    srv__conn *c = &ec->policy;
    uint64_t now = srv__now_ms();
    bool ok = c->state == state || c->state == SRV_CONN_REFUSE || state == SRV_CONN_BODY_STREAM;
    if (ok && c->state != state)
        srv__conn_set(c, state, now);
    if (ok)
        srv__conn_body_bytes(c, n, now);
    pthread_mutex_unlock(&ec->mu);
    return ok;
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

/* ------------------------------------------------------------------ */
/* Streamed request bodies (docs/ENGINES.md, "mhd: streamed request    */
/* bodies")                                                            */
/* ------------------------------------------------------------------ */

/* Set `bit` and take SUSP: true when the caller must resume the
 * connection (the MHD thread had suspended it). Any thread. */
static bool emhd_b_wake(emhd_req *er, int bit)
{
    int cur = atomic_load(&er->bst);
    while (!atomic_compare_exchange_weak(&er->bst, &cur, (cur | bit) & ~EMHD_B_SUSP)) {
    }
    return (cur & EMHD_B_SUSP) != 0;
}

/* MHD thread: leave MHD's loop until a kick or the answer (no deadline:
 * the application's pace is its own). MHD reads nothing meanwhile: what it
 * holds stays unconsumed, the socket fills, the client's send blocks. */
static enum MHD_Result emhd_b_wait(emhd_server *es, emhd_req *er, struct MHD_Connection *conn)
{
    emhd_state(er->ec, SRV_CONN_APP);
    atomic_fetch_add(&es->outstanding, 1); /* stop waits for every resume */
    MHD_suspend_connection(conn);
    int cur = atomic_load(&er->bst);
    for (;;) {
        if (cur & (EMHD_B_KICK | EMHD_B_ANS)) { /* woken already: resume ourselves */
            if (atomic_compare_exchange_weak(&er->bst, &cur, cur & ~EMHD_B_KICK))
                break;
        } else if (atomic_compare_exchange_weak(&er->bst, &cur, cur | EMHD_B_SUSP)) {
            return MHD_YES; /* a waker resumes */
        }
    }
    emhd_resume(es, conn);
    atomic_fetch_sub(&es->outstanding, 1);
    return MHD_YES;
}

/* The pace window (the policy's SRV_CONN_BODY_STREAM): opened when reading
 * starts or goes on after a pause, restarted each SRV_BODY_MIN_PACE_BYTES
 * (emhd_body_bytes); the watchdog cuts it (408). */
static void emhd_b_window(emhd_req *er)
{
    emhd_state(er->ec, SRV_CONN_BODY_STREAM);
}

/* Write the claimed answer past MHD (cleartext only: over TLS only MHD
 * can write) - for an answer MHD cannot send in time. */
static void emhd_b_raw(emhd_server *es, emhd_req *er, int fd)
{
    if (es->tls || fd < 0)
        return;
    emhd_write_raw(fd, er->req, 0);
}

/* Body bytes after the application stopped or the request was answered:
 * discarded up to the swallow limit, then the answer is written past MHD
 * and the connection closed (as emhd_cut). */
static enum MHD_Result emhd_b_swallow(emhd_server *es, emhd_req *er, struct MHD_Connection *conn,
                                      size_t *size)
{
    er->swallowed += *size;
    *size = 0;
    if (er->swallowed <= es->swallow_limit)
        return MHD_YES;
    if (atomic_load(&er->bst) & EMHD_B_ANS) {
        srv__request_set_close(er->req);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        emhd_b_raw(es, er, ci != NULL ? ci->connect_fd : -1);
    }
    return MHD_NO;
}

/*
 * The access handler for a streamed body (MHD thread). MHD 0.9.75 calls it
 * for the head with nothing (and again after a resume when it suspended in
 * that call: the "first call" is repeated, and MHD decides on "100
 * Continue" only after a first call that returns unsuspended, so the 100
 * goes out exactly when the application asked for the body, and never
 * when it answered first: a response queued in the first call refuses the
 * body); then once per piece it read (again with the same piece after a
 * resume when we left it unconsumed); then with nothing once the body is
 * complete (repeated after a resume while no response is queued). Each
 * call looks at everything: the answer, then the core's state.
 */
static enum MHD_Result emhd_sbody(emhd_server *es, emhd_req *er, struct MHD_Connection *conn,
                                  const char *data, size_t *size)
{
    /* Suspended in this same pass: MHD 0.9.75 may call again before it
     * leaves the connection (its body loop); suspending twice would
     * corrupt its lists. Take nothing: the waker's resume brings it back. */
    if (atomic_load(&er->bst) & EMHD_B_SUSP)
        return MHD_YES;
    atomic_fetch_and(&er->bst, ~EMHD_B_KICK);
    bool first = *size == 0 && (!er->bfirst || er->bhead_wait);
    er->bfirst = true;
    er->bhead_wait = false;
    for (;;) {
        if (atomic_load(&er->bst) & EMHD_B_ANS) {
            atomic_store(&er->hand, EMHD_HAND_READY);
            if (!er->bdetached) {
                er->bdetached = true;
                srv__body_detach(er->req); /* on_end(SRV_ECLOSED) unless told */
            }
            if (*size != 0)
                return emhd_b_swallow(es, er, conn, size);
            /* The answer goes out at the head or once MHD has the whole
             * body; one given before the application read it all closes. */
            if (!er->bend && er->hasbody)
                srv__request_set_close(er->req);
            er->phase = EMHD_REQ_ANSWERED;
            emhd_state(er->ec, SRV_CONN_APP);
            return emhd_send(er, conn);
        }
        int k = srv__body_state(er->req);
        if (*size != 0) {
            if (k == SRV__BODY_IDLE)
                return emhd_b_wait(es, er, conn); /* the piece stays MHD's */
            if (k == SRV__BODY_OVER)
                return emhd_b_swallow(es, er, conn, size);
            size_t n = *size;
            *size = 0;
            /* The framing fails past `good` bytes (the gate): the rest of
             * what MHD de-chunked leniently is not the body. */
            bool cut = er->bad != 0 && n >= er->good;
            if (er->bad != 0) {
                n = cut ? (size_t)er->good : n;
                er->good -= n;
            }
            er->bstarted = true;
            (void)emhd_body_bytes(er->ec, SRV_CONN_BODY_STREAM, n);
            int st = n > 0 ? srv__body_data(er->req, data, n) : k;
            if (cut) {
                if (st != SRV__BODY_OVER)
                    srv__body_end(er->req, er->bad); /* the core's answer */
                er->bad = 0;
                /* Mid-body MHD refuses a response: the answer goes out at
                 * MHD's last call (what follows is swallowed meanwhile). */
                return MHD_YES;
            }
            if (st == SRV__BODY_IDLE)
                return emhd_b_wait(es, er, conn);
            return MHD_YES;
        }
        if (first) { /* the head: MHD reads (and sends its 100) once asked */
            if (k != SRV__BODY_GO) {
                er->bhead_wait = true;
                return emhd_b_wait(es, er, conn);
            }
            er->bstarted = true;
            emhd_b_window(er);
            return MHD_YES;
        }
        /* Nothing after the head: MHD has the whole body. */
        if (er->bad != 0 && k == SRV__BODY_GO) { /* no byte past `good` came */
            er->bend = true;
            srv__body_end(er->req, er->bad);
            er->bad = 0;
            continue;
        }
        if (!er->bend && k == SRV__BODY_GO) {
            er->bend = true;
            emhd_state(er->ec, SRV_CONN_APP);
            srv__body_end(er->req, 0); /* on_end may answer: look again */
            continue;
        }
        return emhd_b_wait(es, er, conn); /* paused at the end, or the answer comes */
    }
}

/* The head of a streamed-body request is accepted: dispatch it now. */
static enum MHD_Result emhd_sbody_begin(emhd_server *es, emhd_req *er,
                                        struct MHD_Connection *conn)
{
    srv_request *req = er->req;
    const char *te = srv_request_header(req, "Transfer-Encoding");
    const char *cl = srv_request_header(req, "Content-Length");
    er->sbody = true;
    if (er->ec != NULL && !er->ec->reused && er->ec->bad != 0) {
        er->bad = er->ec->bad; /* MHD would read on where the core stops */
        er->good = er->ec->good;
    }
    if (er->ec != NULL)
        er->ec->bad = 0;
    er->need100 = srv__request_expects_continue(req);
    er->hasbody = te != NULL || (cl != NULL && strcmp(cl, "0") != 0);
    er->phase = EMHD_REQ_SBODY;
    emhd_state(er->ec, SRV_CONN_QUEUED); /* arriving until dispatch counts it */
    srv__request_dispatch(req);
    emhd_state(er->ec, SRV_CONN_APP); /* dispatched: request_timeout_ms */
    size_t none = 0;
    return emhd_sbody(es, er, conn, NULL, &none);
}

/* body_kick slot: any thread, the request's lock held, never after
 * srv__body_detach (so er lives). */
static void emhd_body_kick(void *state, srv_request *req)
{
    emhd_server *es = state;
    emhd_req *er = srv__request_engine_data(req);
    if (!emhd_b_wake(er, EMHD_B_KICK))
        return; /* the MHD thread runs: it looks at the state again */
    if (er->bfirst && !er->bend) /* reading goes on: its pace window opens */
        emhd_b_window(er);
    emhd_resume(es, er->conn);
    atomic_fetch_sub(&es->outstanding, 1);
}

/* respond for a streamed-body request (any thread). */
static void emhd_sbody_respond(emhd_server *es, emhd_req *er)
{
    struct MHD_Connection *conn = er->conn;
    if (!emhd_b_wake(er, EMHD_B_ANS))
        return; /* the MHD thread runs and sees ANS: er may be gone now */
    /* Suspended: the MHD thread queues the answer once resumed (at the
     * head: in the repeated first call, so no 100 is ever sent). */
    emhd_resume(es, conn);
    atomic_fetch_sub(&es->outstanding, 1);
}

static enum MHD_Result emhd_access(void *cls, struct MHD_Connection *conn, const char *url,
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

/* ------------------------------------------------------------------ */
/* Streamed responses                                                  */
/* ------------------------------------------------------------------ */

/* A streamed response's content reader and the core's stream_kick agree
 * through er->sstate on who resumes the connection: the reader suspends
 * when the core has nothing, and the kick resumes it, even when it comes
 * between the reader's pull and its suspend. */
enum {
    EMHD_S_RUN,    /* the reader is pulling */
    EMHD_S_SUSP,   /* suspended for data: the kick resumes */
    EMHD_S_KICKED  /* kicked before the reader suspended: it resumes itself */
};

/* MHD's content reader (the connection's MHD thread): copy what the core
 * has. MHD frames it: chunked for HTTP/1.1 without a length, the close for
 * HTTP/1.0, and it writes the last chunk at END_OF_STREAM. */
static ssize_t emhd_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    emhd_req *er = cls;
    emhd_server *es = er->es;
    atomic_store(&er->sstate, EMHD_S_RUN);
    const void *d = NULL;
    size_t len = 0;
    int k = srv__stream_pull(er->req, &d, &len);
    if (k == SRV__STREAM_DATA) {
        size_t n = len < max ? len : max;
        memcpy(buf, d, n);
        srv__stream_sent(er->req, n);
        emhd_sending(er->ec); /* writing again after a wait: the send deadline from now */
        return (ssize_t)n;
    }
    if (k == SRV__STREAM_END)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (k == SRV__STREAM_CUT) /* MHD closes without the last chunk */
        return MHD_CONTENT_READER_END_WITH_ERROR;
    /* Nothing yet: no send deadline while the application is silent, and
     * the connection leaves MHD's loop until the kick. */
    (void)emhd_state_from(er->ec, SRV_CONN_SEND, SRV_CONN_APP);
    atomic_fetch_add(&es->outstanding, 1); /* stop resumes every one first */
    MHD_suspend_connection(er->conn);
    if (atomic_exchange(&er->sstate, EMHD_S_SUSP) == EMHD_S_KICKED) {
        atomic_store(&er->sstate, EMHD_S_RUN);
        emhd_resume(es, er->conn);
        atomic_fetch_sub(&es->outstanding, 1);
    }
    return 0; /* MHD calls again once resumed */
}

/* stream_kick slot: any thread, the request's lock held. The connection is
 * suspended (or about to be) inside the reader, so er lives. */
static void emhd_stream_kick(void *state, srv_request *req)
{
    emhd_server *es = state;
    emhd_req *er = srv__request_engine_data(req);
    if (atomic_exchange(&er->sstate, EMHD_S_KICKED) == EMHD_S_SUSP) {
        atomic_store(&er->sstate, EMHD_S_RUN);
        emhd_resume(es, er->conn);
        atomic_fetch_sub(&es->outstanding, 1);
    }
}

/* emhd_send for a streamed response: a callback response of the known
 * length, or MHD_SIZE_UNKNOWN. */
static enum MHD_Result emhd_stream_send(emhd_req *er, struct MHD_Connection *conn)
{
    srv_request *req = er->req;
    int64_t length = srv__response_stream_length(req);
    bool bodiless = srv__response_stream_bodiless(req);
    atomic_store(&er->sstate, EMHD_S_RUN);
    struct MHD_Response *r = NULL;
    const void *d = NULL;
    size_t dlen = 0;
    srv__stream_chunk file;
    /* Over TLS the reader's pieces (the core reads the stream buffer's
     * worth) make bigger records than MHD's own 4 KiB file reads. */
    if (!bodiless && length > 0 && !er->es->tls && srv__response_stream_file(req) &&
        srv__stream_pull_file(req, &d, &dlen, &file) == SRV__STREAM_FILE) {
        /* A static file: libmicrohttpd sends it from the descriptor
         * (sendfile) and closes its own copy. */
        int fd = fcntl(file.fd, F_DUPFD_CLOEXEC, 0);
        if (fd >= 0) {
            r = MHD_create_response_from_fd_at_offset64(file.len, fd, file.off);
            if (r == NULL)
                close(fd);
        }
        if (r == NULL)
            srv__stream_sent(req, 0); /* lent back: the reader reads it */
        else
            er->file_len = file.len;
    }
    if (r == NULL)
        r = MHD_create_response_from_callback(
            length >= 0 ? (uint64_t)length : MHD_SIZE_UNKNOWN, 65536,
            bodiless ? emhd_no_body : emhd_stream_read, bodiless ? NULL : er, NULL);
    if (r == NULL)
        return MHD_NO;
    emhd_add_headers(r, req, false, !srv__response_keep_alive(req));
    /* HEAD of a stream of unknown length: libmicrohttpd 0.9.75 frames it
     * chunked and writes the last chunk after the head, which the client
     * reads as the start of the next answer. Its public strict HTTP/1.0
     * framing sends neither Transfer-Encoding nor a body, and closes the
     * connection after the head (docs/ENGINES.md). */
    if (bodiless && length < 0) {
        (void)MHD_set_response_options(r, MHD_RF_HTTP_1_0_COMPATIBLE_STRICT, MHD_RO_END);
        er->closes = true; /* MHD's close, not a dropped request line */
    }
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)srv__response_status(req), r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        emhd_sending(er->ec);
    return ret;
}

/* ------------------------------------------------------------------ */
/* Slots                                                               */
/* ------------------------------------------------------------------ */

/* What every loop's daemon is started with. */
typedef struct emhd_daemon_opts {
    unsigned flags;
    struct MHD_OptionItem *tls_opts;
    unsigned limit;
    unsigned idle_s;
    size_t pool;
} emhd_daemon_opts;

/* Stop and join the loops: each stops its daemon (MHD resumes those
 * resumed last and closes every connection). Every suspended connection
 * must have been resumed. The controlling thread. */
static void emhd_loops_stop(emhd_server *es)
{
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        if (l->started) { /* all at once: they close their connections in parallel */
            atomic_store(&l->stop, true);
            atomic_store(&l->signalled, false);
            emhd_loop_wake(l);
        }
    }
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        if (l->started)
            pthread_join(l->tid, NULL);
        l->started = false;
    }
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        emhd_loop_discard_adds(l);
        if (l->daemon != NULL && !l->daemon_stopped) /* a start that failed */
            MHD_stop_daemon(l->daemon);
        l->daemon = NULL;
    }
    for (unsigned i = 0; i < es->nloops; i++) {
        emhd_loop *l = &es->loops[i];
        if (l->epfd >= 0)
            close(l->epfd);
        if (l->wake >= 0)
            close(l->wake);
        pthread_mutex_destroy(&l->mu);
    }
    free(es->loops);
    es->loops = NULL;
    es->nloops = 0;
}

/* n daemons and their threads; 0, or an SRV_E* code with nothing left. */
static int emhd_loops_start(emhd_server *es, unsigned n, const emhd_daemon_opts *o)
{
    es->loops = calloc(n, sizeof *es->loops);
    if (es->loops == NULL) {
        srv__server_set_error(es->srv, "mhd: out of memory");
        return SRV_ENOMEM;
    }
    es->nloops = n;
    for (unsigned i = 0; i < n; i++) {
        emhd_loop *l = &es->loops[i];
        l->es = es;
        l->adds_tail = &l->adds;
        pthread_mutex_init(&l->mu, NULL);
        l->epfd = l->wake = -1;
    }
    int rc = 0;
    for (unsigned i = 0; i < n && rc == 0; i++) {
        emhd_loop *l = &es->loops[i];
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (l->epfd >= 0)
            l->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (l->epfd < 0 || l->wake < 0) {
            srv__server_set_error(es->srv, "mhd: cannot create %s for I/O thread %u: %s",
                                  l->epfd < 0 ? "an epoll set" : "an eventfd", i,
                                  strerror(errno));
            rc = SRV_EENGINE;
            break;
        }
        l->daemon = MHD_start_daemon(
            /* TURBO: MHD then closes a socket without shutting it down first,
             * so emhd_closing can still answer and linger on it (over TLS: no
             * close_notify, as h2o's quiet close; every answer is framed). */
            o->flags, 0, NULL, NULL, emhd_access, es,
            MHD_OPTION_EXTERNAL_LOGGER, emhd_log, es, /* first: 1.0 warns otherwise */
            MHD_OPTION_ARRAY, o->tls_opts,
            MHD_OPTION_CONNECTION_LIMIT, o->limit,
            MHD_OPTION_CONNECTION_TIMEOUT, o->idle_s,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, o->pool,
            MHD_OPTION_URI_LOG_CALLBACK, emhd_uri_log, es,
            MHD_OPTION_UNESCAPE_CALLBACK, emhd_unescape, es,
            MHD_OPTION_NOTIFY_COMPLETED, emhd_notify_completed, es,
            MHD_OPTION_NOTIFY_CONNECTION, emhd_notify_connection, es,
            MHD_OPTION_END);
        if (l->daemon == NULL) {
            srv__server_set_error(es->srv, "mhd: cannot start the daemon: %s",
                                  es->start_msg[0] != '\0' ? es->start_msg : "unknown reason");
            rc = SRV_EENGINE;
            break;
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        struct epoll_event mhd = {.events = EPOLLIN, .data.ptr = NULL};
        struct epoll_event wake = {.events = EPOLLIN, .data.ptr = l};
        if (di == NULL || epoll_ctl(l->epfd, EPOLL_CTL_ADD, di->epoll_fd, &mhd) != 0 ||
            epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake, &wake) != 0) {
            srv__server_set_error(es->srv, "mhd: cannot watch the daemon's epoll set: %s",
                                  strerror(errno));
            rc = SRV_EENGINE;
        }
    }
    for (unsigned i = 0; i < n && rc == 0; i++) {
        emhd_loop *l = &es->loops[i];
        if (srv__thread_create(&l->tid, NULL, emhd_loop_main, l) != 0) {
            srv__server_set_error(es->srv, "mhd: cannot create an I/O thread");
            rc = SRV_ETHREAD;
            break;
        }
        l->started = true;
    }
    if (rc != 0)
        emhd_loops_stop(es); /* no connection was added: nothing is suspended */
    return rc;
}

/* The daemons' sizes (each daemon takes the whole limit: the gate keeps the total). */
static emhd_daemon_opts emhd_sizing(emhd_server *es, const srv_config *cfg, unsigned threads)
{
    /* MHD's default limit is FD_SETSIZE-4 even with epoll. Leave headroom
     * above max_connections so the extra clients get a quick 503 instead of
     * waiting in the backlog (the gate stops accepting at this limit). Each
     * loop's daemon takes all of it: the gate's count is the one that binds. */
    unsigned long long want = cfg->max_connections + cfg->max_connections / 4ull + 16ull * threads;
    unsigned limit = want < UINT_MAX ? (unsigned)want : UINT_MAX;
    es->limit = limit;
    /* The connection's memory pool holds the read buffer (the whole head),
     * the header table and the response head. Head limit + 4 KiB leaves
     * room for a head at the limits with a few dozen headers, so the core
     * answers 431/414 by its exact rules; bigger heads or many headers MHD
     * cuts itself with the same 431/414, and an answer whose head no longer
     * fits is written by hand in cleartext (emhd_notify_completed). The
     * pool is per connection, so its size is what keeps 2700 waiting
     * connections under 50 MB (24 KiB pools took 86 MB). */
    size_t head = cfg->max_header_bytes > cfg->max_uri_bytes ? cfg->max_header_bytes
                                                             : cfg->max_uri_bytes;
    size_t pool = head + 4096;
    if (pool < 8192)
        pool = 8192;
    /* MHD's idle timeout only backs up the watchdog, and is the send
     * timeout of a client that does not read its response. */
    unsigned idle_ms = cfg->header_timeout_ms > cfg->keepalive_timeout_ms
                           ? cfg->header_timeout_ms
                           : cfg->keepalive_timeout_ms;
    /* One second more, so the watchdog's deadlines always come first
     * (emhd_closing tells MHD's silent drops from timeouts by them). */
    unsigned idle_s = idle_ms / 1000u + (idle_ms % 1000u != 0) + 1u;

    return (emhd_daemon_opts){.limit = limit, .idle_s = idle_s, .pool = pool};
}

/* HTTPS: MHD's GnuTLS with the core's context (validated at srv_server_start): the
 * certificate comes from emhd_tls_cert at each handshake, so a reload reaches new
 * connections. MHD's own timeout and the watchdog's first-head deadline cover the handshake
 * too. Options from tls_opts[n] on; 0 or an SRV_E code with the reason set. */
static int emhd_tls_options(emhd_server *es, srv_server *srv, struct MHD_OptionItem *tls_opts,
                            size_t n, unsigned *flags)
{
    es->tls_start = srv__tls_gnutls(srv, NULL);
    if (es->tls_start == NULL || MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
        srv__server_set_error(srv, "mhd: this libmicrohttpd has no HTTPS support (GnuTLS "
                              "with certificate callbacks)");
        return SRV_ETLS;
    }
    es->tls = true;
    *flags |= MHD_USE_TLS;
    tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
                                            (void *)(uintptr_t)emhd_tls_cert};
    tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                            (void *)es->tls_start->priorities};
    tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_DHPARAMS, 0,
                                            (void *)es->tls_start->dh_params_pem};
    if (es->tls_start->client_ca_pem != NULL)
        tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0,
                                                (void *)es->tls_start->client_ca_pem};
    tls_opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    int rc = emhd_hs_start(es);
    if (rc != 0)
        srv__server_set_error(srv, "mhd: cannot start the TLS handshake thread");
    return rc;
}

static int emhd_start(srv_server *srv, void **state)
{
    const srv_config *cfg = srv__server_config(srv);
    emhd_server *es = calloc(1, sizeof *es);
    if (es == NULL) {
        srv__server_set_error(srv, "mhd: out of memory");
        return SRV_ENOMEM;
    }
    es->srv = srv;
    es->lfd = -1;
    es->hs_epfd = es->hs_wake = -1;
    pthread_mutex_init(&es->lock, NULL);
    pthread_mutex_init(&es->hs_mu, NULL);
    const char *log = getenv("SRV_MHD_LOG");
    es->log_all = log != NULL && log[0] == '1';
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the watchdog's clock */
    pthread_cond_init(&es->wd_cond, &ca);
    pthread_condattr_destroy(&ca);
    es->header_ms = cfg->header_timeout_ms;
    es->keepalive_ms = cfg->keepalive_timeout_ms;
    es->swallow_limit = cfg->max_body_bytes > (1u << 20) ? cfg->max_body_bytes : (1u << 20);

    /* Our own socket: host, IPv6, port 0, backlog and "cannot bind"
     * messages are the same as on every engine. */
    int rc = 0;
    int lfd = srv__listen(srv, SRV__LISTEN_NONBLOCK);
    if (lfd < 0) {
        rc = lfd;
        goto fail_sync;
    }
    es->lfd = lfd;

    unsigned threads = cfg->io_threads > 0 ? cfg->io_threads : 1;
    es->threads = threads;
    /* Without MHD's messages its own answers cannot be announced
     * (emhd_worker): then every completion samples its connection. */
    if (MHD_is_feature_supported(MHD_FEATURE_MESSAGES) == MHD_YES) {
        es->workers = calloc(threads, sizeof *es->workers);
        es->max_workers = es->workers != NULL ? threads : 0;
    }
    /* Publish the state before the loops exist: a request the gate hands
     * them reaches respond(state) through the core before start returns. */
    /* The watchdog first: once the loops run, requests may already be
     * suspended and dispatched, and a failure after that could not be
     * undone safely (MHD_stop_daemon panics on suspended connections). */
    if (srv__thread_create(&es->watchdog, NULL, emhd_watchdog, es) != 0) {
        srv__server_set_error(srv, "mhd: cannot create the watchdog thread");
        rc = SRV_ETHREAD;
        goto fail_listen;
    }
    es->watchdog_started = true;

    /* NO_LISTEN_SOCKET: the gate accepts (engines/mhd_gate.h) and hands
     * connections over with MHD_add_connection. */
    /* No MHD thread: emhd_loop_main runs each daemon (emhd_loop). */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET;
    if (emhd_lib_caps() & SRV_CAP_WEBSOCKET) /* its 101 by MHD's upgrade */
        flags |= MHD_ALLOW_UPGRADE;
    struct MHD_OptionItem tls_opts[8] = {{MHD_OPTION_END, 0, NULL}};
    size_t n = 0;
    es->lib = emhd_lib_version();
    if (es->lib >= (9u << 16 | 77u << 8)) /* 0.9.77, as emhd_lib_version counts */
        /* MHD's default level, pinned: a NUL or whitespace in a field name
         * gets MHD's 400; obs-fold becomes a space and a bare LF ends a
         * line (RFC 9112 allows both). Level 1 would refuse those too, but
         * also closes at a second empty line before a request line, which
         * the core skips. 0.9.75 has no such option (emhd_head_intact). The
         * library that runs decides, not the header built against (one
         * soname). */
        tls_opts[n++] = (struct MHD_OptionItem){EMHD_OPTION_CLIENT_DISCIPLINE_LVL, 0, NULL};
#if MHD_VERSION >= 0x00097205
    /* Every thread that runs a daemon blocks SIGPIPE (emhd_loop_main): MHD
     * may then sendfile a file response (static files), which it does not
     * risk otherwise. */
    if (es->lib >= (9u << 16 | 72u << 8)) /* 0.9.72, as emhd_lib_version counts */
        tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1, NULL};
#endif
    if (srv__tls_enabled(srv) && (rc = emhd_tls_options(es, srv, tls_opts, n, &flags)) != 0)
        goto fail_watchdog;

    *state = es;
    emhd_daemon_opts opts = emhd_sizing(es, cfg, threads);
    opts.flags = flags;
    opts.tls_opts = tls_opts;
    if ((rc = emhd_loops_start(es, threads, &opts)) != 0)
        goto fail_watchdog;
    static const struct emhd_gate_ops gate_ops = {
        .hand = emhd_gate_hand,
        .room = emhd_gate_room,
        .answer = emhd_gate_answer,
        .linger = emhd_gate_linger,
    };
    struct emhd_gate_ops ops = gate_ops;
    ops.ctx = es;
    if ((rc = emhd_gate_start(&es->gate, srv, lfd, es->tls, &ops)) != 0) {
        srv__server_set_error(srv, "mhd: cannot start the accepting thread");
        /* No connection was accepted: nothing is suspended. */
        atomic_store(&es->stopping, true);
        emhd_loops_stop(es);
        goto fail_watchdog;
    }
    es->lfd = -1; /* the gate's now */
    atomic_store(&es->running, true);
    return 0;

    /* Undo in the reverse order of acquisition. */
fail_watchdog:
    emhd_hs_stop(es); /* no connection was accepted: nothing to resume */
    emhd_hs_close(es);
    emhd_watchdog_join(es);
    *state = NULL;
fail_listen:
    close(lfd);
fail_sync:
    if (es->tls_start != NULL)
        srv__tls_gnutls_release(es->tls_start);
    pthread_cond_destroy(&es->wd_cond);
    pthread_mutex_destroy(&es->hs_mu);
    pthread_mutex_destroy(&es->lock);
    free(es->workers);
    free(es);
    return rc;
}

/* Any thread: the response is final. Hand it to the MHD thread. */
static void emhd_respond(void *state, srv_request *req)
{
    emhd_server *es = state;
    emhd_req *er = srv__request_engine_data(req);
    if (er->sbody) {
        emhd_sbody_respond(es, er);
        return;
    }
    struct MHD_Connection *conn = er->conn;
    /* Once READY is published the MHD thread may send, finish and free er
     * at any moment: touch only locals and es from here on. */
    if (atomic_exchange(&er->hand, EMHD_HAND_READY) != EMHD_HAND_SUSPENDED)
        return; /* the MHD thread has not suspended: it sends itself */
    emhd_resume(es, conn);
    atomic_fetch_sub(&es->outstanding, 1);
}

static void emhd_quiesce(void *state)
{
    emhd_server *es = state;
    if (es->quiesced)
        return;
    es->quiesced = true;
    /* The gate closes the listening socket (MHD has none: not
     * MHD_quiesce_daemon, which on an epoll daemon with its own threads
     * races with MHD's loop and can MHD_PANIC in 0.9.75). */
    emhd_gate_quiesce(es->gate);
    pthread_mutex_lock(&es->lock);
    srv__sockloop_quiesce(es->sockloop); /* every WebSocket: 1001 */
    pthread_mutex_unlock(&es->lock);
    /* Idle kept-alive connections: MHD would keep them until the stop, so
     * shut them down (emhd_quiesce_idle; the watchdog does the same to
     * those that go idle later). Busy ones get "Connection: close" with
     * their response (srv__response_keep_alive). */
    atomic_store(&es->quiescing, true);
    long long now = emhd_now_ms();
    pthread_mutex_lock(&es->lock);
    for (emhd_conn *ec = es->conns; ec != NULL; ec = ec->next) {
        pthread_mutex_lock(&ec->mu);
        emhd_quiesce_idle(es, ec, now);
        pthread_mutex_unlock(&ec->mu);
    }
    pthread_cond_signal(&es->wd_cond); /* its quicker pace while quiescing */
    pthread_mutex_unlock(&es->lock);
}

/* Whether a connection not yet in a request has bytes MHD has not read:
 * a request on its way, which the core will answer 503 once MHD parses it. */
static bool emhd_input_waiting(emhd_server *es)
{
    bool any = false;
    pthread_mutex_lock(&es->lock);
    for (emhd_conn *ec = es->conns; ec != NULL && !any; ec = ec->next) {
        char b;
        enum srv__conn_state st = emhd_state_of(ec);
        any = st != SRV_CONN_QUEUED && st != SRV_CONN_APP && st != SRV_CONN_SEND &&
              st != SRV_CONN_BODY_STREAM && ec->fd >= 0 &&
              recv(ec->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
    }
    pthread_mutex_unlock(&es->lock);
    return any;
}

/* The grace period is over: what the policy answers at a stop
 * (srv__conn_due: 503 to a request still arriving, or to a refused
 * connection's) is written past MHD (emhd_answer_cut: MHD has no request
 * to answer yet; over TLS a close). A streamed body's request is the
 * core's to answer (dispatched); the rest MHD_stop_daemon closes after
 * the loops wrote the last answers. */
static void emhd_refuse_arriving(emhd_server *es)
{
    uint64_t now = srv__now_ms();
    pthread_mutex_lock(&es->lock);
    for (emhd_conn *ec = es->conns; ec != NULL; ec = ec->next) {
        pthread_mutex_lock(&ec->mu);
        srv__conn *c = &ec->policy;
        if (ec->fd >= 0 && !atomic_load(&ec->upgraded) && c->state != SRV_CONN_BODY_STREAM &&
            srv__conn_due(c, now, 1, 0) == SRV_CONN_ANSWER)
            emhd_answer_cut(es, ec, srv__conn_status(c));
        pthread_mutex_unlock(&ec->mu);
    }
    pthread_mutex_unlock(&es->lock);
}

static void emhd_stop(void *state)
{
    emhd_server *es = state;
    emhd_quiesce(es);
    /* The WebSockets' close handshakes, while MHD's loops still run (each
     * socket's end is MHD's close); none is made after this. */
    pthread_mutex_lock(&es->lock);
    srv__sockloop *l = es->sockloop;
    atomic_store(&es->stopping_ws, true);
    pthread_mutex_unlock(&es->lock);
    srv__sockloop_stop(l);
    /* No connection reaches MHD from now on; those still waiting in the
     * gate have sent nothing. */
    emhd_gate_stop(es->gate);
    emhd_watchdog_join(es);
    emhd_hs_stop(es);
    emhd_refuse_arriving(es);
    /* MHD_stop_daemon panics on a suspended connection. The core answered
     * every request, so each was resumed; wait out a respond that is still
     * between its store and its resume. */
    for (int ms = 0; atomic_load(&es->outstanding) != 0; ms++) {
        if (ms == 10000) { /* a core bug; MHD_stop_daemon will say so */
            fprintf(stderr, "libsrv mhd: %u request(s) still suspended at stop\n",
                    atomic_load(&es->outstanding));
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    /* MHD_stop_daemon closes every connection at once, answers not yet
     * written included, and the core's final 503s were only just resumed.
     * Let the loops write them, and parse requests whose bytes have
     * arrived (answered 503 at once), for up to EMHD_STOP_WRITE_MS. Quiet
     * means so for 3 checks in a row: MHD may have read a request and not
     * parsed it yet. */
    long long end = emhd_now_ms() + EMHD_STOP_WRITE_MS;
    for (int quiet = 0; quiet < 3 && emhd_now_ms() < end;) {
        if (atomic_load(&es->held) == 0 && !emhd_input_waiting(es))
            quiet++;
        else
            quiet = 0;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    atomic_store(&es->stopping, true);
    emhd_loops_stop(es);
    emhd_gate_free(es->gate); /* the loops are gone: no kick any more */
    es->gate = NULL;
    /* Records MHD never reported (a connection it could not start is
     * closed without a notification) and the gate did not meet again. */
    while (es->handoffs != NULL) {
        emhd_handoff *h = es->handoffs;
        es->handoffs = h->next;
        srv__conn_close(&h->conn);
        free(h);
    }
    es->nhandoffs = 0;
}

static void emhd_destroy(void *state)
{
    emhd_server *es = state;
    if (es == NULL)
        return;
    emhd_gate_free(es->gate); /* a server never stopped */
    srv__sockloop_free(es->sockloop);
    /* MHD reported every connection closed during MHD_stop_daemon. */
    while (es->conns != NULL) {
        emhd_conn *next = es->conns->next;
        pthread_mutex_destroy(&es->conns->mu);
        free(es->conns);
        es->conns = next;
    }
    if (es->tls_start != NULL)
        srv__tls_gnutls_release(es->tls_start);
    emhd_hs_close(es);
    pthread_cond_destroy(&es->wd_cond);
    pthread_mutex_destroy(&es->hs_mu);
    pthread_mutex_destroy(&es->lock);
    free(es->workers);
    free(es);
}

const srv_engine srv_engine_mhd = {
    .version = SRV_ENGINE_VERSION,
    .name = "mhd",
    /* 505: MHD answers HTTP/0.x and 2+ itself, the core 1.2-1.9.
     * GARBAGE_400: MHD answers most garbage itself, and emhd_closing the
     * request line without a space that MHD drops silently. */
    /* LIB_ERRORS: 0.9.75 answers a bad version, a header line without a
     * colon, bad chunk framing (and more: docs/ENGINES.md) before any
     * callback, with a response that has no hook for headers or body. */
    /* TLS: libmicrohttpd's GnuTLS (MHD_USE_TLS), HTTP/1.1 only (ALPN
     * "http/1.1"); the core builds its contexts with GnuTLS. TLS_CLOSES_RAW:
     * emhd_answer_raw's cleartext answers become closes over TLS. */
    .caps = SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_LIB_CHUNKED |
            SRV_ENGINE_CAP_H2_PREFACE_GOAWAY | SRV_ENGINE_CAP_STOP_CLOSES_PARTIAL_LINE |
            SRV_ENGINE_CAP_LIB_ERRORS | SRV_ENGINE_CAP_STREAM | SRV_ENGINE_CAP_LIB_FRAMING |
                SRV_ENGINE_CAP_TLS | SRV_ENGINE_CAP_TLS_GNUTLS | SRV_ENGINE_CAP_TLS_CLOSES_RAW |
                SRV_ENGINE_CAP_STREAM_BODY,
    .start = emhd_start,
    .respond = emhd_respond,
    .body_kick = emhd_body_kick,
    .stream_kick = emhd_stream_kick,
    .quiesce = emhd_quiesce,
    .stop = emhd_stop,
    .destroy = emhd_destroy,
    .lib_caps = emhd_lib_caps,
};
