/*
 * What the threadpool engine's files share (engines/threadpool.c: the
 * loops and the vtable; engines/threadpool_tls.c: OpenSSL as the loops'
 * layer). Not installed, not seen by the core.
 */
#ifndef SRV_ENGINE_THREADPOOL_INT_H
#define SRV_ENGINE_THREADPOOL_INT_H

#include "srv_engine.h"
#include "srv_sockloop.h"

struct ssl_ctx_st;

/* One loop's reference to the server's TLS context, and its generation
 * (srv__tls_generation changes at a reload). Its loop's thread only. */
typedef struct etp_tls_ref {
    srv_server *srv;
    struct ssl_ctx_st *ctx;
    unsigned gen;
} etp_tls_ref;

/* The loop's layer: OpenSSL on each accepted socket, new SSLs from ref. */
srv__sockloop_layer etp_tls_layer(etp_tls_ref *ref);
/* After the loop stopped: drop its context reference. */
void etp_tls_ref_free(etp_tls_ref *ref);

#endif /* SRV_ENGINE_THREADPOOL_INT_H */
