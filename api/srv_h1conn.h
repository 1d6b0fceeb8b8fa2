/*
 * A connection over an event loop, once, in the core (core/h1conn.c): an
 * engine whose loop owns the sockets (h2o's evloop, libuv) reports what
 * happened to a connection - bytes read, a write done, the client gone, the
 * time, a wake - and carries out five kinds of request through srv__h1io:
 * write, read on or off, shut the write side, close, wake. Everything HTTP -
 * HTTP/1's parsing (core/http1.c), keep-alive, pipelining, 100 Continue,
 * streamed answers and bodies, error answers, deadlines and lingering (the
 * connection policy, api/srv_conn.h), and HTTP/2 (core/h2conn.c, nghttp2)
 * when the connection speaks it - happens here, the same for every such
 * engine (docs/ARCHITECTURE.md, "Connections over a loop").
 *
 * Threads: every srv__h1conn_* call but the three slots below runs on the
 * connection's loop thread. The engine's respond, stream_kick and body_kick
 * slots call srv__h1conn_respond / _stream_kick / _body_kick first, from
 * any thread: those only record the event and ask the engine to wake the
 * connection (srv__h1io.wake), which it does by calling srv__h1conn_wake on
 * the loop.
 *
 * Lifetime: srv__h1io.close is always the last thing a call does; the
 * engine closes the socket and, then or later, calls srv__h1conn_free.
 * After a call that may close (any of them), the engine touches the
 * connection only through its own close path.
 */
#ifndef SRV_H1CONN_H
#define SRV_H1CONN_H

#include "srv_conn.h"
#include "srv_engine.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct srv__h1conn srv__h1conn;

/* A piece to write: valid until srv__h1conn_written. */
typedef struct srv__buf {
    const void *base;
    size_t len;
} srv__buf;

/* What the engine does for a connection. `io` is the engine's. */
typedef struct srv__h1io {
    /* Write the pieces, in order, all of them; then call
     * srv__h1conn_written (ok: 0 when the write failed). One write at a
     * time; it may complete inside the call. */
    void (*write)(void *io, const srv__buf *bufs, size_t n);
    /* Deliver input through srv__h1conn_input (on) or stop reading (off:
     * back-pressure, and nothing to read while an answer is awaited). */
    void (*read)(void *io, int on);
    /* Shut the write side: the answer is out, the client's last bytes are
     * read and dropped (lingering) until srv__h1conn says close. */
    void (*shut)(void *io);
    /* Close the connection (srv__h1conn_free then or later). abort: a write
     * failed or made no progress in time, so reset it (a FIN queued behind
     * bytes the client does not read would keep it waiting for them). */
    void (*close)(void *io, int abort);
    /* Any thread: have the loop call srv__h1conn_wake soon. Called with the
     * connection's lock held: post and return. */
    void (*wake)(void *io);
    /* Optional, for connections given srv__h1conn_sendfile: send len bytes
     * of the file fd from off (a static file's body) from the descriptor
     * itself, all of them, then call srv__h1conn_written on a later turn
     * of the loop (ok: 0 when the socket failed or the file ended first,
     * a file that shrank). One write at a time, like write; fd stays open
     * until then. */
    void (*sendfile)(void *io, int fd, uint64_t off, uint64_t len);
    /* Optional: non-zero when input waits that the connection was not given
     * yet (bytes in the socket or the library's buffer). At quiesce a
     * connection with nothing begun closes, unless input waits: then it
     * counts as a request arriving (a connection taken from the backlog at
     * the quiesce has not been read yet; closing it with bytes unread
     * would reset it). srv__fd_input_waiting for a socket. */
    int (*pending)(void *io);
} srv__h1io;

/* A connection admitted by srv__conn_open (the engine keeps `policy` and
 * closes it; the connection sets its states). NULL when out of memory. */
srv__h1conn *srv__h1conn_new(srv_server *srv, srv__conn *policy, const srv__h1io *ops, void *io,
                             const struct sockaddr *peer, socklen_t peer_len);

/* ALPN chose h2: the connection speaks HTTP/2 from its first byte (core/h2conn.c, nghttp2;
 * without it in the build, HTTP/1 stays). Right after srv__h1conn_new. A cleartext connection
 * whose first bytes are HTTP/2's preface switches by itself when the engine has
 * SRV_ENGINE_CAP_HTTP2; either way every call below then carries HTTP/2. */
void srv__h1conn_h2(srv__h1conn *hc);

/* The engine can send files on this connection (srv__h1io.sendfile: a
 * cleartext socket it owns): HTTP/1 file bodies go that way instead of
 * being read into the stream buffer. Right after srv__h1conn_new. */
void srv__h1conn_sendfile(srv__h1conn *hc);

/*
 * For an srv__h1io.sendfile over a library that writes only buffers and
 * tells of room only through its own writes (h2o, uv; core/sendfile.c):
 * sendfile(2) on the socket while the library has nothing queued; when the
 * socket is full, the file's next bytes go through the library's write,
 * whose completion says there is room again. Loop thread.
 */
#define SRV__SENDFILE_BURST (4u << 20) /* bytes per step: the loop's others get theirs */
#define SRV__SENDFILE_WAIT 4096        /* bytes a wait for room writes */

typedef struct srv__sendfile {
    int fd;              /* the file (the request's: open until written) */
    uint64_t off, left;  /* what is still to send */
    char *buf;           /* SRV__SENDFILE_WAIT bytes for a wait, made at the first */
} srv__sendfile;

enum {
    SRV__SF_DONE,   /* all sent */
    SRV__SF_FAILED, /* the socket failed, or the file ended first (it shrank) */
    SRV__SF_BURST,  /* a burst went: step again on a later turn */
    SRV__SF_WAIT    /* full: write sf->buf's first *wait bytes (counted sent)
                     * through the library, and step again once written */
};

/* What the socket takes now (sock < 0: failed). *moved: the bytes sent by
 * sendfile in this step (the send deadline's progress). */
int srv__sendfile_step(srv__sendfile *sf, int sock, size_t *wait, uint64_t *moved);
/* Done with sf (its buffer freed; fd is not closed). */
void srv__sendfile_end(srv__sendfile *sf);

/* n bytes were read. Returns how many the connection took (copied: d is the
 * engine's again on return); the engine keeps the rest, unread, and offers
 * them again once the connection asks to read (srv__h1io.read on). */
size_t srv__h1conn_input(srv__h1conn *hc, const char *d, size_t n);

/* The client closed its side, or the socket failed. */
void srv__h1conn_eof(srv__h1conn *hc);

/* The write srv__h1io.write started is done (ok) or failed (0). */
void srv__h1conn_written(srv__h1conn *hc, int ok);

/* After srv__h1io.wake: take what other threads recorded. */
void srv__h1conn_wake(srv__h1conn *hc);

/* The deadlines (srv__conn_due): call it every few tens of ms, and once at
 * quiesce and at stop. Requests dispatched are left to their answer. */
void srv__h1conn_time(srv__h1conn *hc, uint64_t now, int stopping, int quiescing);

/* The socket is closed: release what the connection holds (a request
 * still in the application is cancelled). Loop thread. */
void srv__h1conn_free(srv__h1conn *hc);

/* The engine's slots, first: 1 when req is an h1conn's (handled), else 0. */
int srv__h1conn_respond(srv_request *req);
int srv__h1conn_stream_kick(srv_request *req);
int srv__h1conn_body_kick(srv_request *req);

#ifdef __cplusplus
}
#endif

#endif /* SRV_H1CONN_H */
