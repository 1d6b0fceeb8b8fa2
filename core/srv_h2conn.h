/*
 * HTTP/2 over an event loop, once, in the core (core/h2conn.c, on
 * nghttp2's sans-I/O session): the protocol a loop connection
 * (api/srv_h1conn.h) switches to on the prior-knowledge preface or when
 * ALPN chose h2. Same events, same srv__h1io requests, same threads as
 * srv__h1conn: the engine never sees which of the two runs, h1conn
 * forwards. Core-private.
 */
#ifndef SRV_H2CONN_H
#define SRV_H2CONN_H

#include "srv_h1conn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct srv__h2conn srv__h2conn;

/* 1 when this build speaks HTTP/2 (nghttp2 was found). */
int srv__h2_available(void);

/* An admitted connection's HTTP/2 (`policy` as for srv__h1conn_new). NULL
 * when out of memory or without nghttp2. */
srv__h2conn *srv__h2conn_new(srv_server *srv, srv__conn *policy, const srv__h1io *ops, void *io,
                             const struct sockaddr *peer, socklen_t peer_len);

/* As the srv__h1conn_* of the same names. input takes every byte. */
size_t srv__h2conn_input(srv__h2conn *c, const char *d, size_t n);
void srv__h2conn_eof(srv__h2conn *c);
void srv__h2conn_written(srv__h2conn *c, int ok);
void srv__h2conn_wake(srv__h2conn *c);
void srv__h2conn_time(srv__h2conn *c, uint64_t now, int stopping, int quiescing);
void srv__h2conn_free(srv__h2conn *c);

/* The slots, for a request of one of its streams (req->h2 set). */
void srv__h2conn_respond(srv_request *req);
void srv__h2conn_kick(srv_request *req);

#ifdef __cplusplus
}
#endif

#endif /* SRV_H2CONN_H */
