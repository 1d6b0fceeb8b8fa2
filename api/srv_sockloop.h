/*
 * The core's own event loop (core/sockloop.c): one epoll thread that reads
 * and writes non-blocking descriptors itself (or through the engine's
 * srv__sockio: threadpool's TLS) and carries the core's connection over
 * them (core/h1conn.c: HTTP/1, HTTP/2 in core/h2conn.c, WebSocket in
 * core/ws.c) through the same srv__h1io a library's loop gives it.
 *
 * Two uses:
 *  - an engine with no loop of its own serves on it: threadpool runs
 *    io_threads of them, each accepting from the shared listening socket
 *    (srv__sockloop_serve), so the connection policy, the accept's
 *    admission, deadlines, the quiesce's backlog and the stop are this
 *    file's, once;
 *  - an engine whose library hands a socket back after a 101 (mhd, by
 *    MHD_create_response_for_upgrade) gives it the WebSocket
 *    (srv__sockloop_add).
 *
 * Threads: srv__sockloop_add from the thread that got the socket; the rest
 * from the engine's controlling thread (start, quiesce, stop, free). The
 * `done` callback and every srv__sockio call run on the loop's thread.
 */
#ifndef SRV_SOCKLOOP_H
#define SRV_SOCKLOOP_H

#include "srv_conn.h"
#include "srv_engine.h"

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct srv__sockloop srv__sockloop;

/* A socket whose bytes pass through the engine's own layer (threadpool's
 * TLS: an SSL on the descriptor), called on the loop's thread only, never
 * blocking. NULL in srv__sockloop_add: the descriptor's bytes are the
 * protocol's. */
typedef struct srv__sockio {
    /* Up to len bytes: >0, 0 at the end of the stream, -1 with errno
     * (EAGAIN: wait for the events below). */
    ssize_t (*recv)(void *ctx, void *buf, size_t len);
    /* Some of buf: bytes taken (>0), or -1 with errno (EAGAIN: wait). A
     * retry after EAGAIN offers the same bytes (maybe at a new address). */
    ssize_t (*send)(void *ctx, const void *buf, size_t len);
    /* The epoll events to watch when the loop waits for `want` (EPOLLIN:
     * input; EPOLLOUT: room for a write's rest): a layer may wait for the
     * other direction, or hold input already read. Any event of them makes
     * the loop retry both. */
    unsigned (*events)(void *ctx, unsigned want);
    /* The write side ends (before shutdown(SHUT_WR)): TLS's close_notify. */
    void (*shut)(void *ctx);
    /* For a loop that accepts (srv__sockloop_serve), before any protocol:
     * the layer's handshake. SRV__SIO_DONE (*alpn, *alpn_len: what ALPN
     * chose, maybe nothing), SRV__SIO_WAIT (the events above, want
     * EPOLLIN), SRV__SIO_FAILED (closed unanswered), SRV__SIO_PLAIN (the
     * client spoke plain HTTP: the layer sent its answer in the clear; the
     * loop shuts the socket and closes it). */
    int (*handshake)(void *ctx, const unsigned char **alpn, unsigned *alpn_len);
    /* For a loop that accepts: the socket closes; release ctx. */
    void (*free)(void *ctx);
} srv__sockio;

enum { SRV__SIO_DONE, SRV__SIO_WAIT, SRV__SIO_FAILED, SRV__SIO_PLAIN };

/* A loop that accepts over a layer (srv__sockloop_serve): a new socket's
 * ctx for `sio` from open(arg, fd) on the loop's thread, NULL when out of
 * memory (then closed unanswered). */
typedef struct srv__sockloop_layer {
    const srv__sockio *sio;
    void *(*open)(void *arg, int fd);
    void *arg;
} srv__sockloop_layer;

/* 1 when this libsrv carries WebSocket (built with wslay), else 0: an
 * engine reports SRV_CAP_WEBSOCKET only then. Any thread. */
int srv__sockloop_available(void);

/* req's answer is a WebSocket's 101: its head (status line, headers,
 * blank line), valid until req is released or handed to srv__sockloop_add;
 * NULL for any other answer (and in a build without WebSocket). */
const char *srv__sockloop_upgrade_head(const srv_request *req, size_t *len);

/* req's 101 will not be written (the engine refused the upgrade, or the
 * connection ended first): drop its WebSocket (no callback ran). */
void srv__sockloop_upgrade_drop(srv_request *req);

/* Start the loop's thread. 0, SRV_ENOMEM or SRV_ETHREAD. */
int srv__sockloop_start(srv__sockloop **out, srv_server *srv);

/*
 * Start a loop that serves: it accepts from listen_fd (non-blocking; any
 * number of loops may share it: each takes a connect, EPOLLEXCLUSIVE),
 * admits each connection by the core's policy (srv__conn_open: past
 * max_connections the 503), runs `layer`'s handshake when not NULL (then
 * ALPN "h2" means HTTP/2; in cleartext the core sniffs the preface), and
 * carries it as the core's connection, file bodies by sendfile(2) in
 * cleartext. listen_fd stays the engine's: it closes it after the stop.
 * 0, SRV_ENOMEM, SRV_ESYS or SRV_ETHREAD.
 */
int srv__sockloop_serve(srv__sockloop **out, srv_server *srv, int listen_fd,
                        const srv__sockloop_layer *layer);

/* The 101 of req (srv__sockloop_upgrade_head) is written and fd is the
 * connection's socket from now on: the loop carries req's WebSocket over
 * it (through sio/sio_ctx when not NULL, which the loop then uses until
 * `done`), with `early` (n bytes the client sent after its handshake,
 * copied).
 * `policy` is the connection's record; the loop owns its state from now
 * on, until `done`. fd stays the engine's: when the socket is finished the
 * loop calls done(ctx) on its thread, and the engine closes fd then (after
 * done, nothing of the loop touches fd or policy). 0, or SRV_ENOMEM /
 * SRV_ESTATE (the loop stopped): then req's WebSocket is dropped and the
 * engine closes fd itself. */
int srv__sockloop_add(srv__sockloop *l, int fd, const srv__sockio *sio, void *sio_ctx,
                      srv_request *req, srv__conn *policy, const char *early, size_t n,
                      void (*done)(void *ctx), void *ctx);

/* 1 when this libsrv carries HTTP/2 (built with nghttp2): an engine on
 * the loop reports SRV_CAP_HTTP2 only then. Any thread. */
int srv__sockloop_http2(void);

/* The server quiesces: a loop that serves takes what the kernel accepted
 * before now (the backlog) and stops accepting; connections with nothing
 * begun close (one whose request waits unread counts as arriving);
 * WebSockets are told 1001. Returns at once: srv__sockloop_quiesced waits
 * for the loop to have done it. NULL: nothing. */
void srv__sockloop_quiesce(srv__sockloop *l);
void srv__sockloop_quiesced(srv__sockloop *l);

/* The server stops: requests still arriving get the core's 503, every
 * WebSocket is told 1001; sockets still open after a short wait are
 * closed. srv__sockloop_stopping only asks (several loops then stop side
 * by side); srv__sockloop_stop asks and returns when every `done` has run
 * and the thread has ended. NULL: nothing. */
void srv__sockloop_stopping(srv__sockloop *l);
void srv__sockloop_stop(srv__sockloop *l);

/* After srv__sockloop_stop. NULL: nothing. */
void srv__sockloop_free(srv__sockloop *l);

#ifdef __cplusplus
}
#endif

#endif /* SRV_SOCKLOOP_H */
