/*
 * The connection policy every engine follows (core/connections.c), sans
 * I/O: what a connection waits for, until when, and what an expired wait
 * means; the body pace; the lingering close's budget; admission past
 * max_connections. Engines report what happened (bytes in, bytes written,
 * the time) and carry out the decisions; the rules live here once
 * (docs/ARCHITECTURE.md, "Connection policy").
 *
 * One srv__conn per connection, used by the thread that owns the
 * connection at the time (no locking inside). Times are srv__now_ms().
 */
#ifndef SRV_CONN_H
#define SRV_CONN_H

#include "srv_engine.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* After an answer that closes, the client's last bytes are read and dropped
 * for at most this long and this many bytes, so the kernel does not turn
 * them into a reset that destroys the answer on its way (nginx's
 * lingering_close). Engines that cannot hold more lingering sockets close
 * at once past SRV_LINGER_MAX_CONNS. */
#define SRV_LINGER_MS 1000
#define SRV_LINGER_MAX_BYTES (4u * 1024u * 1024u)
#define SRV_LINGER_MAX_CONNS 1024

/* Past max_connections, at most this many connections at once are read
 * (their head, for at most SRV_REFUSE_WAIT_MS) so that the 503 answers the
 * request in a protocol the client reads; more get the 503 at once. */
#define SRV_REFUSE_MAX 256
#define SRV_REFUSE_WAIT_MS 2000

/* A write that makes no progress for header_timeout_ms, but at least this
 * long, gives up (the client stopped reading). */
#define SRV_SEND_MIN_TIMEOUT_MS 1000

/* What a connection waits for. Each state has one deadline rule. */
enum srv__conn_state {
    SRV_CONN_FIRST,  /* accepted: its first head, complete header_timeout_ms
                      * after the accept (a stalled TLS handshake included) */
    SRV_CONN_IDLE,   /* kept alive: the next request's first byte, within
                      * keepalive_timeout_ms */
    SRV_CONN_HEAD,   /* a head arriving: complete header_timeout_ms after its
                      * first byte (after the accept for the first head);
                      * until srv__conn_begun, only empty lines came (RFC 9112
                      * 2.2): nothing arrives, and expiry closes quietly */
    SRV_CONN_BODY,   /* a body arriving: SRV_BODY_MIN_PACE_BYTES (or its end)
                      * within each header_timeout_ms, from the head's end */
    SRV_CONN_BODY_STREAM, /* a streamed body the application reads (the
                      * request is dispatched, so not arriving): the same
                      * pace; set SRV_CONN_APP while it pauses */
    SRV_CONN_QUEUED, /* complete, waiting for a worker: no deadline */
    SRV_CONN_APP,    /* the application has the request (its handler runs, or
                      * it reads a streamed body it paused): no deadline here,
                      * request_timeout_ms is the core's */
    SRV_CONN_SEND,   /* an answer being written: header_timeout_ms (at least
                      * SRV_SEND_MIN_TIMEOUT_MS) without progress */
    SRV_CONN_REFUSE, /* over max_connections: its head within
                      * min(header_timeout_ms, SRV_REFUSE_WAIT_MS), then 503 */
    SRV_CONN_LINGER  /* answered, write side shut: drain the client's last
                      * bytes within SRV_LINGER_MS / SRV_LINGER_MAX_BYTES */
};

/* What srv__conn_due asks of the engine. */
enum srv__conn_due {
    SRV_CONN_WAIT,    /* nothing due */
    SRV_CONN_CLOSE,   /* close without an answer: idle, linger over, a write
                       * stalled, or a stop with nothing to answer */
    SRV_CONN_ANSWER   /* answer srv__conn_status() (408, or 503 for a refused
                       * connection or a request a stop cuts), then linger */
};

typedef struct srv__conn {
    srv_server *srv;
    enum srv__conn_state state;
    uint64_t deadline; /* UINT64_MAX: none */
    uint64_t paced;    /* SRV_CONN_BODY: bytes since the pace window opened */
    size_t drained;    /* SRV_CONN_LINGER: bytes dropped */
    unsigned short status; /* what SRV_CONN_ANSWER answers */
    unsigned char admitted; /* holds a max_connections slot */
    unsigned char refusing; /* counted in the server's refusals */
    unsigned char arriving; /* counted by srv__request_arriving */
    unsigned char begun;    /* HEAD, REFUSE: a request's bytes came */
    unsigned char counted_closed; /* srv__conn_count_closed */
} srv__conn;

/* How srv__conn_open admitted a connection. */
enum srv__conn_admission {
    SRV_CONN_ADMITTED,  /* state SRV_CONN_FIRST */
    SRV_CONN_REFUSING,  /* over max_connections: state SRV_CONN_REFUSE; read
                         * its head, then answer 503 */
    SRV_CONN_REFUSE_NOW /* over max_connections and SRV_REFUSE_MAX are being
                         * read: answer srv__refusal_503 at once and close
                         * (srv__conn_close all the same) */
};

/* A new connection: admission (a max_connections slot), the opened
 * counters, and its first deadline. Every srv__conn_open is paired with one
 * srv__conn_close. */
enum srv__conn_admission srv__conn_open(srv__conn *c, srv_server *srv, uint64_t now);

/* A refused connection (SRV_CONN_REFUSE) whose request has not begun
 * takes a max_connections slot freed since its accept: 1, and it is
 * admitted (SRV_CONN_FIRST, no longer among those read for refusal) as if
 * the slot had been free at the accept; 0, and it stays refused. Its
 * deadline stays: waiting for a slot earns no time. For an engine that
 * learns of a request only once its bytes are parsed (mhd): a client that
 * connected at the limit and asked after a slot freed is served. */
int srv__conn_readmit(srv__conn *c);

/* The connection now waits for `state`; its deadline follows the state's
 * rule. SRV_CONN_FIRST -> SRV_CONN_HEAD keeps the accept's deadline, and
 * a refused connection stays SRV_CONN_REFUSE until it lingers. Keeps the
 * stop's count of requests arriving (srv__request_arriving) right: a begun
 * HEAD, BODY and QUEUED count, the others do not. */
void srv__conn_set(srv__conn *c, enum srv__conn_state state, uint64_t now);

/* A request's first byte (not an empty line) came: FIRST or IDLE become a
 * begun HEAD (FIRST keeps the accept's deadline, IDLE starts the head's),
 * a HEAD of empty lines is begun, a refused connection has a request to
 * answer. */
void srv__conn_begun(srv__conn *c, uint64_t now);

/* The body pace alone, for an engine whose timers are its library's: n body
 * bytes came into the window *paced. 1 when the window holds
 * SRV_BODY_MIN_PACE_BYTES: a new one opens, and the body's deadline moves
 * header_timeout_ms on from now. */
static inline int srv__pace_bytes(uint64_t *paced, size_t n)
{
    *paced += n;
    if (*paced < SRV_BODY_MIN_PACE_BYTES)
        return 0;
    *paced = 0;
    return 1;
}

/* SRV_CONN_BODY or SRV_CONN_BODY_STREAM: n body bytes came. A window that reaches
 * SRV_BODY_MIN_PACE_BYTES opens a new one. */
void srv__conn_body_bytes(srv__conn *c, size_t n, uint64_t now);

/* SRV_CONN_SEND: some bytes were written; the deadline moves on. */
void srv__conn_progress(srv__conn *c, uint64_t now);

/* SRV_CONN_LINGER: n bytes were read and dropped. 1: drain on; 0: the
 * budget is spent, close now. */
int srv__conn_linger_bytes(srv__conn *c, size_t n, uint64_t now);

/* Is the connection's wait over? `stopping`: the engine stops (everything
 * is due); `quiescing`: connections with no request begun close. */
enum srv__conn_due srv__conn_due(srv__conn *c, uint64_t now, int stopping, int quiescing);

/* srv__conn_due said CLOSE: 1 when it was only for the quiesce (nothing
 * begun, in time, no stop) and `input_waiting` (unread bytes in the socket:
 * a connection taken from the backlog at the quiesce, a request sent just
 * before it). The connection is then a request arriving, which the grace
 * waits for; closing it with bytes unread would reset it. */
int srv__conn_quiesce_keeps(srv__conn *c, uint64_t now, int stopping, int quiescing,
                            int input_waiting);

/* The status an SRV_CONN_ANSWER answers. */
static inline int srv__conn_status(const srv__conn *c) { return c->status; }

/* Count the connection closed in srv_stats now, though it is not yet (a
 * stop gave up waiting for it; its descriptor closes later). Another
 * thread may call it, under a lock the owner's srv__conn_close also
 * holds; it touches only this flag and the server's counters. */
void srv__conn_count_closed(srv__conn *c);

/* The connection is closed: its slot, its counts. Idempotent. */
void srv__conn_close(srv__conn *c);

#ifdef __cplusplus
}
#endif

#endif /* SRV_CONN_H */
