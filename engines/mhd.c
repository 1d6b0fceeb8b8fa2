/* The "mhd" engine: GNU libmicrohttpd (0.9.75 and 1.0), epoll. io_threads
 * loops (a daemon each, run by a thread of ours with MHD_run) parse and
 * write; the gate accepts; handlers run on the core's worker pool while the
 * connection is suspended (respond resumes it); a watchdog thread carries
 * out the core's connection policy (api/srv_conn.h). HTTPS through
 * libmicrohttpd's own GnuTLS (MHD_USE_TLS), with the core's GnuTLS
 * contexts. This file is the engine's slots: start, respond, quiesce, stop;
 * engines/mhd_int.h says which file does the rest. */
#include "mhd_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

/* stop: how long the loops get to write the last answers before
 * MHD_stop_daemon closes every connection (threadpool gives the same). */
#define EMHD_STOP_WRITE_MS 2000

/* The gate's ops (engines/mhd_gate.h) that are not the hand-over's. */
static void emhd_gate_answer(void *ctx, srv_request *req, int fd, int status)
{
    emhd_answer_req(ctx, NULL, req, fd, status);
}

static void emhd_gate_linger(void *ctx, int fd)
{
    emhd_linger_add(ctx, fd);
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
    opts.access = emhd_access;
    opts.log = emhd_log;
    opts.uri_log = emhd_uri_log;
    opts.unescape = emhd_unescape;
    opts.completed = emhd_notify_completed;
    opts.connection = emhd_notify_connection;
    if ((rc = emhd_loops_start(es, threads, &opts)) != 0)
        goto fail_watchdog;
    static const struct emhd_gate_ops gate_ops = {
        .hand = emhd_loops_hand,
        .room = emhd_loops_room,
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
