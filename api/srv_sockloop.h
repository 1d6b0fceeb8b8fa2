/*
 * A loop for sockets an engine without an event loop of its own hands over:
 * WebSockets after their 101 (threadpool; mhd, whose libmicrohttpd gives
 * the socket back through MHD_create_response_for_upgrade) and HTTP/2
 * connections (threadpool). The core runs one thread for them
 * (core/sockloop.c): it reads and writes the descriptor, non-blocking (or
 * through the engine's srv__sockio, its TLS), and carries the request's
 * WebSocket (core/ws.c) or the core's connection (core/h1conn.c, HTTP/2 in
 * core/h2conn.c) over it through the same srv__h1io a loop engine gives
 * srv__h1conn.
 *
 * Threads: srv__sockloop_add from the thread that got the socket; the rest
 * from the engine's controlling thread (start, quiesce, stop, free). The
 * `done` callback runs on the loop's thread.
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
} srv__sockio;

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

/* 1 when the loop can carry HTTP/2 connections (built with nghttp2):
 * an engine with no HTTP/2 of its own reports SRV_CAP_HTTP2 only then.
 * Any thread. */
int srv__sockloop_http2(void);

/* fd speaks HTTP/2 from now on (a prior-knowledge preface, or ALPN "h2"):
 * the loop carries it as the core's connection (core/h1conn.c, then
 * core/h2conn.c), requests for the core, `early` (n bytes read so far,
 * the preface's first included, copied) offered first. sio, policy,
 * done and fd as for srv__sockloop_add; peer is copied. 0, SRV_ENOMEM or
 * SRV_ESTATE (the loop stopped): then the engine closes fd itself. */
int srv__sockloop_add_h2(srv__sockloop *l, int fd, const srv__sockio *sio, void *sio_ctx,
                         srv__conn *policy, const struct sockaddr *peer, socklen_t peer_len,
                         const char *early, size_t n, void (*done)(void *ctx), void *ctx);

/* The server quiesces: every socket is told 1001 and closes. */
void srv__sockloop_quiesce(srv__sockloop *l);

/* The server stops: every socket is told 1001; those still open after a
 * short wait are closed. Returns when every `done` has run and the
 * thread has ended. NULL: nothing. */
void srv__sockloop_stop(srv__sockloop *l);

/* After srv__sockloop_stop. NULL: nothing. */
void srv__sockloop_free(srv__sockloop *l);

#ifdef __cplusplus
}
#endif

#endif /* SRV_SOCKLOOP_H */
