/*
 * What the mhd engine's files share (not installed, not seen by the core).
 * Calls run one way (scripts/check_layers.py): mhd.c (the engine's slots,
 * start and stop) over mhd_request.c (MHD's callbacks) over mhd_body.c
 * over mhd_send.c; those, mhd_tls.c and mhd_watch.c over mhd_loop.c,
 * mhd_conn.c and mhd_log.c. mhd_gate.c is the accepting thread, reached
 * through its ops.
 */
#ifndef SRV_ENGINE_MHD_INT_H
#define SRV_ENGINE_MHD_INT_H

#include "srv_conn.h"
#include "srv_engine.h"
#include "srv_sockloop.h"

#include "mhd_gate.h"

#include <gnutls/gnutls.h>
#include <microhttpd.h>

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* libmicrohttpd 1.0.0: a new HTTP/1 parser (read in v1.0.0's and v1.0.1's
 * connection.c; 0.9.76 and 0.9.77 still have 0.9.75's). */
#define EMHD_LIB_1_0 0x01000000u

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

/* One per loop thread: the answers MHD announced on it (mhd_log.c). */
struct emhd_worker {
    pthread_t tid;
    atomic_ullong msgs; /* MHD's answers announced on this thread */
};

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

/* emhd_conn.acked of a response not looked at yet: the watchdog samples it
 * on its next pass (a response usually completes before that, so most
 * cost no getsockopt at all). */
#define EMHD_ACKED_UNSAMPLED (ULLONG_MAX - 1)

/* What every loop's daemon is started with. */
typedef struct emhd_daemon_opts {
    unsigned flags;
    struct MHD_OptionItem *tls_opts;
    unsigned limit;
    unsigned idle_s;
    size_t pool;
    /* MHD's callbacks, given by mhd.c: mhd_loop.c sits below the files
     * that define them (mhd_request.c, mhd_log.c). */
    MHD_AccessHandlerCallback access;
    MHD_LogCallback log;
    void *(*uri_log)(void *cls, const char *uri, struct MHD_Connection *conn);
    size_t (*unescape)(void *cls, struct MHD_Connection *conn, char *s);
    MHD_RequestCompletedCallback completed;
    MHD_NotifyConnectionCallback connection;
} emhd_daemon_opts;

/* mhd_log.c: MHD's messages */
bool emhd_quiet_since(const emhd_conn *ec, unsigned long long mark);
emhd_worker *emhd_worker_self(emhd_server *es, bool add);
void emhd_went_idle(emhd_conn *ec);
extern _Thread_local bool emhd_head_failed;
extern _Thread_local emhd_req *emhd_splitting;
void emhd_log(void *cls, const char *fmt, va_list ap);

/* mhd_conn.c: the policy record, answers past MHD */
long long emhd_now_ms(void);
void emhd_state(emhd_conn *ec, enum srv__conn_state state);
bool emhd_state_from(emhd_conn *ec, enum srv__conn_state from, enum srv__conn_state to);
enum srv__conn_state emhd_state_of(emhd_conn *ec);
bool emhd_waiting(const srv__conn *c);
srv_request *emhd_request_new(emhd_server *es, struct MHD_Connection *conn);
void emhd_answer_raw(emhd_server *es, struct MHD_Connection *conn, int fd, int status,
                     const char *target, size_t target_len);
void emhd_answer_req(emhd_server *es, struct MHD_Connection *conn, srv_request *req,
                     int fd, int status);
void emhd_write_raw(int fd, srv_request *req, int wait_ms);
void emhd_sending(emhd_conn *ec);
bool emhd_body_bytes(emhd_conn *ec, enum srv__conn_state state, size_t n);

/* mhd_watch.c: the watchdog and the lingering close */
void emhd_quiesce_idle(emhd_server *es, emhd_conn *ec, long long now);
void emhd_answer_cut(emhd_server *es, emhd_conn *ec, int status);
void *emhd_watchdog(void *arg);
void emhd_watchdog_join(emhd_server *es);
void emhd_linger_add(emhd_server *es, int fd);

/* mhd_tls.c: HTTPS */
void emhd_hs_stop(emhd_server *es);
void emhd_hs_close(emhd_server *es);
void emhd_tls_session(emhd_server *es, struct MHD_Connection *conn, emhd_conn *ec);
int emhd_tls_options(emhd_server *es, srv_server *srv, struct MHD_OptionItem *tls_opts,
                     size_t n, unsigned *flags);

/* mhd_loop.c: the I/O threads and the gate's hand-over */
emhd_handoff emhd_handoff_take(emhd_server *es, int fd, unsigned long long seq);
void emhd_loop_wake(emhd_loop *l);
void emhd_resume(emhd_server *es, struct MHD_Connection *conn);
void emhd_loops_hand(void *ctx, int fd, const struct sockaddr *peer, socklen_t peer_len,
                     const srv__conn *conn, int bad, uint64_t good);
bool emhd_loops_room(void *ctx, unsigned waiting);
void emhd_loops_stop(emhd_server *es);
int emhd_loops_start(emhd_server *es, unsigned n, const emhd_daemon_opts *o);

/* mhd_send.c: answers queued on MHD */
enum MHD_Result emhd_send(emhd_req *er, struct MHD_Connection *conn);
void emhd_stream_kick(void *state, srv_request *req);

/* mhd_body.c: streamed request bodies */
void emhd_sbody_closed(emhd_req *er, struct MHD_Connection *conn, bool lib_error);
enum MHD_Result emhd_sbody(emhd_server *es, emhd_req *er, struct MHD_Connection *conn,
                           const char *data, size_t *size);
enum MHD_Result emhd_sbody_begin(emhd_server *es, emhd_req *er,
                                 struct MHD_Connection *conn);
void emhd_body_kick(void *state, srv_request *req);
void emhd_sbody_respond(emhd_server *es, emhd_req *er);

/* mhd_request.c: MHD's connection and request callbacks */
void emhd_notify_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                            enum MHD_ConnectionNotificationCode toe);
void *emhd_uri_log(void *cls, const char *uri, struct MHD_Connection *conn);
size_t emhd_unescape(void *cls, struct MHD_Connection *conn, char *s);
void emhd_notify_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe);
enum MHD_Result emhd_access(void *cls, struct MHD_Connection *conn, const char *url,
                            const char *method, const char *version,
                            const char *upload_data, size_t *upload_data_size,
                            void **con_cls);

#endif /* SRV_ENGINE_MHD_INT_H */
