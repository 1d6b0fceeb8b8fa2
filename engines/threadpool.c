/*
 * The "threadpool" engine: no library. io_threads of the core's own epoll
 * loops (core/sockloop.c) accept from one listening socket, read and write
 * the connections - in the clear, or through OpenSSL on the socket
 * (engines/threadpool_tls.c) - and carry the core's HTTP/1, HTTP/2 and
 * WebSocket (core/h1conn.c). Handlers run where the core puts them:
 * non-blocking routes on the loop, the others on the core's worker pool
 * (its bounded queue, worker_threads of them), whose answers wake the
 * loop. So this file only sets the loops up and takes them down: the
 * transport is the core's, its policy too (docs/ARCHITECTURE.md).
 */
#include "srv_h1conn.h"
#include "threadpool_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct etp_state {
    srv_server *srv;
    const srv_config *cfg;
    int listen_fd;
    unsigned nloops;
    srv__sockloop **loops; /* NULL where not started */
    etp_tls_ref *tls;      /* one per loop; NULL in cleartext */
    int quiesced;          /* controlling thread only */
} etp_state;

static void etp_free(etp_state *st)
{
    for (unsigned i = 0; st->loops && i < st->nloops; i++)
        srv__sockloop_free(st->loops[i]);
    for (unsigned i = 0; st->tls && i < st->nloops; i++)
        etp_tls_ref_free(&st->tls[i]);
    free(st->loops);
    free(st->tls);
    if (st->listen_fd >= 0)
        close(st->listen_fd);
    free(st);
}

static void etp_stop(void *state);

static int etp_start(srv_server *srv, void **state)
{
    etp_state *st = calloc(1, sizeof *st);
    if (st == NULL) {
        srv__server_set_error(srv, "threadpool: out of memory");
        return SRV_ENOMEM;
    }
    st->srv = srv;
    st->cfg = srv__server_config(srv);
    st->nloops = st->cfg->io_threads > 0 ? st->cfg->io_threads : 1;
    st->listen_fd = srv__listen(srv, SRV__LISTEN_NONBLOCK);
    if (st->listen_fd < 0) {
        int rc = st->listen_fd;
        free(st);
        return rc;
    }
    st->loops = calloc(st->nloops, sizeof *st->loops);
    int tls = srv__tls_enabled(srv);
    if (tls)
        st->tls = calloc(st->nloops, sizeof *st->tls);
    if (st->loops == NULL || (tls && st->tls == NULL)) {
        etp_free(st);
        srv__server_set_error(srv, "threadpool: out of memory");
        return SRV_ENOMEM;
    }
    /* Published before a loop runs: respond may come as soon as a request does. */
    *state = st;
    for (unsigned i = 0; i < st->nloops; i++) {
        srv__sockloop_layer layer = {0};
        if (tls) {
            st->tls[i].srv = srv;
            layer = etp_tls_layer(&st->tls[i]);
        }
        int rc = srv__sockloop_serve(&st->loops[i], srv, st->listen_fd, tls ? &layer : NULL);
        if (rc != 0) {
            st->loops[i] = NULL;
            srv__server_set_error(srv, "threadpool: cannot start I/O loop %u", i);
            etp_stop(st);
            *state = NULL;
            etp_free(st);
            return rc;
        }
    }
    return 0;
}

/* Each loop takes what the kernel already accepted and stops accepting;
 * then connects are refused (shutdown would reset what is still in the
 * backlog, so only after every loop took it) - unless the socket was
 * handed to us (srv_config.listen_fd): it keeps listening for the next
 * process. */
static void etp_quiesce(void *state)
{
    etp_state *st = state;
    if (st->quiesced)
        return;
    st->quiesced = 1;
    for (unsigned i = 0; i < st->nloops; i++)
        srv__sockloop_quiesce(st->loops[i]);
    for (unsigned i = 0; i < st->nloops; i++)
        srv__sockloop_quiesced(st->loops[i]);
    if (st->cfg->listen_fd < 0)
        shutdown(st->listen_fd, SHUT_RDWR);
}

/* The loops stop side by side: requests still arriving get the core's 503,
 * the rest closes. */
static void etp_stop(void *state)
{
    etp_state *st = state;
    for (unsigned i = 0; i < st->nloops; i++)
        srv__sockloop_stopping(st->loops[i]);
    for (unsigned i = 0; i < st->nloops; i++)
        srv__sockloop_stop(st->loops[i]);
}

static void etp_destroy(void *state)
{
    if (state)
        etp_free(state);
}

/* Every request is a loop connection's (the slots below only hand the event to it). */
static void etp_respond(void *state, srv_request *req)
{
    (void)state;
    srv__h1conn_respond(req);
}

static void etp_stream_kick(void *state, srv_request *req)
{
    (void)state;
    srv__h1conn_stream_kick(req);
}

static void etp_body_kick(void *state, srv_request *req)
{
    (void)state;
    srv__h1conn_body_kick(req);
}

/* srv_engine.lib_caps: WebSocket when this libsrv has it (built with
 * wslay), HTTP/2 when it has nghttp2; over TLS too. */
static unsigned etp_lib_caps(void)
{
    unsigned ws = srv__sockloop_available() ? SRV_CAP_WEBSOCKET | SRV_CAP_WEBSOCKET_TLS : 0;
    unsigned h2 = srv__sockloop_http2() ? SRV_CAP_HTTP2 | SRV_CAP_TLS_HTTP2 : 0;
    return ws | h2;
}

const srv_engine srv_engine_threadpool = {
    .version = SRV_ENGINE_VERSION,
    .name = "threadpool",
    /* HTTP/1 is the core's (505 for an unknown version, 400 for garbage, GOAWAY for an
     * HTTP/2 preface); TLS is OpenSSL on the socket with ALPN. */
    .caps = SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_GARBAGE_400 |
            SRV_ENGINE_CAP_H2_PREFACE_GOAWAY | SRV_ENGINE_CAP_TLS | SRV_ENGINE_CAP_STREAM |
            SRV_ENGINE_CAP_STREAM_BODY,
    .lib_caps = etp_lib_caps,
    .start = etp_start,
    .respond = etp_respond,
    .stream_kick = etp_stream_kick,
    .body_kick = etp_body_kick,
    .quiesce = etp_quiesce,
    .stop = etp_stop,
    .destroy = etp_destroy,
};
