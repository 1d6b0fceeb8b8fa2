/*
 * WebSocket over a loop connection, once, in the core (core/ws.c, RFC 6455
 * framing by wslay's event API without I/O): what a srv__h1conn hands its
 * bytes and events to once the 101 of a WebSocket route is written. Same
 * events, same srv__h1io requests, same threads as srv__h1conn; the engine
 * never sees which protocol runs. Core-private.
 */
#ifndef SRV_WS_H
#define SRV_WS_H

#include "srv_h1conn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The 101's head for req (answered by srv__respond_upgrade): valid while
 * req->ws is req's. */
const char *srv__ws_head(const srv_request *req, size_t *len);

/* The 101 is written: the connection carries req's WebSocket from now on.
 * `early` holds the bytes the client sent after its handshake (copied).
 * req->ws is taken (NULL after); the connection keeps a reference until
 * srv__ws_free. Loop thread. NULL when out of memory (then close). */
srv_ws *srv__ws_attach(srv_request *req, srv__conn *policy, const srv__h1io *ops, void *io,
                       const char *early, size_t n);

/* req was answered 101 but the connection ended before the 101 went out:
 * drop its WebSocket (no callback ran). */
void srv__ws_discard(srv_request *req);

/* As the srv__h1conn_* of the same names. input may take fewer bytes than
 * given (a message awaits the application): it asks read on again. */
size_t srv__ws_input(srv_ws *ws, const char *d, size_t n);
void srv__ws_eof(srv_ws *ws);
void srv__ws_written(srv_ws *ws, int ok);
void srv__ws_wake(srv_ws *ws);
void srv__ws_time(srv_ws *ws, uint64_t now, int stopping, int quiescing);
void srv__ws_free(srv_ws *ws);

#ifdef __cplusplus
}
#endif

#endif /* SRV_WS_H */
