/*
 * Server lifecycle: new -> route -> start -> stop -> free, the run loop
 * that waits for SIGINT/SIGTERM, srv_after, and the stats. Threads started
 * here: the worker pool and the timer thread; the engine starts its own.
 */
#include "srv_core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How often the timer thread looks for handlers past request_timeout_ms. */
#define SRV__SWEEP_MS 50

srv_server *srv_server_new(const srv_engine *engine, const srv_config *cfg)
{
    if (engine == NULL)
        return NULL;
    srv_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return NULL;
    if (srv__config_copy(&srv->cfg, cfg) != 0) {
        free(srv);
        return NULL;
    }
    srv->engine = engine;
    srv->caps = engine->caps | (engine->lib_caps != NULL ? engine->lib_caps() : 0);
    srv->host = strdup(srv->cfg.host ? srv->cfg.host : "");
    srv->server_name = strdup(srv->cfg.server_name ? srv->cfg.server_name : "");
    if (srv->host == NULL || srv->server_name == NULL)
        goto fail;
    srv->cfg.host = srv->host;
    srv->cfg.server_name = srv->server_name;
    if (srv__tls_init(srv) != 0 || srv__forwarded_init(srv) != 0 ||
        srv__access_log_init(srv) != 0 || srv__health_init(srv) != 0 ||
        srv__config_own(&srv->metrics_path, &srv->cfg.metrics_path) != 0)
        goto fail;
    atomic_init(&srv->state, SRV__NEW);
    atomic_init(&srv->port, srv->cfg.port);
    atomic_init(&srv->admitted, 0);
    atomic_init(&srv->refusing, 0);
    if (srv__inflight_init(&srv->inflight) != 0)
        goto fail;
    if (srv__pool_init(&srv->pool) != 0) {
        srv__inflight_destroy(&srv->inflight);
        goto fail;
    }
    if (srv__streams_init(srv) != 0) {
        srv__pool_destroy(&srv->pool);
        srv__inflight_destroy(&srv->inflight);
        goto fail;
    }
    return srv;
fail:
    srv__tls_free(srv);
    srv__forwarded_free(srv);
    srv__access_log_free(srv);
    srv__health_free(srv);
    free(srv->metrics_path);
    free(srv->host);
    free(srv->server_name);
    free(srv);
    return NULL;
}

void srv_route_opts_init_sized(srv_route_opts *opts, size_t size)
{
    if (opts == NULL || size < SRV__ROUTE_OPTS_MIN_SIZE || size > SRV__STRUCT_MAX_SIZE)
        return;
    memset(opts, 0, size);
    opts->size = size;
}

int srv_route_add(srv_server *srv, const srv_route_opts *opts)
{
    if (srv == NULL || opts == NULL || opts->size < SRV__ROUTE_OPTS_MIN_SIZE ||
        opts->size > SRV__STRUCT_MAX_SIZE)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;
    srv_route_opts o;
    memset(&o, 0, sizeof o);
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    if ((o.flags & SRV_ROUTE_STREAM_BODY) && !(srv->caps & SRV_ENGINE_CAP_STREAM_BODY)) {
        /* Never a silently buffered body: the application asked for a stream. */
        srv__server_set_error(srv, "engine %s cannot stream request bodies "
                                   "(SRV_ROUTE_STREAM_BODY on %s %s)",
                              srv->engine->name, o.method ? o.method : "",
                              o.path ? o.path : "");
        return SRV_EENGINE;
    }
    return srv__router_add(&srv->router, &o);
}

int srv_route(srv_server *srv, const char *method, const char *path, srv_handler_fn handler,
              void *ctx)
{
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = method;
    o.path = path;
    o.handler = handler;
    o.ctx = ctx;
    return srv_route_add(srv, &o);
}

int srv_server_start(srv_server *srv)
{
    if (srv == NULL)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW) {
        srv__server_set_error(srv, "server already started (a server starts once)");
        return SRV_ESTATE;
    }
    srv->error[0] = '\0';
    int rc = srv__engine_check(srv);
    if (rc == 0)
        rc = srv__config_validate(srv);
    if (rc == 0)
        rc = srv__tls_start(srv);
    if (rc == 0)
        rc = srv__forwarded_start(srv);
    if (rc == 0)
        rc = srv__access_log_start(srv);
    /* The built-in routes once, even when a failed start is retried. */
    if (rc == 0 && !srv->builtin_routed)
        rc = srv__health_start(srv);
    if (rc == 0 && !srv->builtin_routed)
        rc = srv__metrics_route(srv);
    if (rc == 0)
        srv->builtin_routed = true;
    if (rc == 0)
        rc = srv__metrics_start(srv); /* last: every route is known */
    if (rc != 0)
        return rc;

    rc = srv__pool_start(&srv->pool, &srv->cfg);
    if (rc != 0) {
        srv__server_set_error(srv, "cannot start %u worker threads: %s",
                              srv->cfg.worker_threads_min, srv_strerror(rc));
        return rc;
    }
    srv->pool_started = true;
    rc = srv__timer_start(&srv->timer, SRV__SWEEP_MS, srv__inflight_sweep, srv);
    if (rc != 0) {
        srv__server_set_error(srv, "cannot start the timer thread: %s", srv_strerror(rc));
        goto fail_pool;
    }
    rc = srv__engine_start(srv);
    if (rc != 0) {
        if (srv->error[0] == '\0')
            srv__server_set_error(srv, "engine %s failed to start: %s", srv->engine->name,
                                  srv_strerror(rc));
        srv__timer_stop(&srv->timer);
        goto fail_pool;
    }
    srv->engine_started = true;
    atomic_store(&srv->state, SRV__RUNNING);
    return 0;

fail_pool:
    srv__pool_shutdown(&srv->pool);
    srv->pool_started = false;
    return rc;
}

int srv_server_port(const srv_server *srv)
{
    return srv ? atomic_load(&srv->port) : 0;
}

const srv_engine *srv_server_engine(const srv_server *srv)
{
    return srv ? srv->engine : NULL;
}

const char *srv_server_last_error(const srv_server *srv)
{
    return srv ? srv->error : "";
}

int srv_server_stop(srv_server *srv, unsigned grace_ms)
{
    if (srv == NULL)
        return SRV_EINVAL;
    int expected = SRV__RUNNING;
    /* Drain first (still RUNNING: everything is served, only readiness
     * says no), so a load balancer stops sending before the listener
     * closes. */
    if (atomic_load(&srv->state) == SRV__RUNNING)
        srv__health_drain(srv);
    if (!atomic_compare_exchange_strong(&srv->state, &expected, SRV__STOPPING))
        return SRV_ESTATE;

    srv__engine_quiesce(srv);
    /* The application learns that the stop began (the listener is closed),
     * and streams it marked end cleanly: an idle SSE client does not hold
     * the stop for its whole grace. */
    if (srv->on_stop != NULL)
        srv->on_stop(srv, srv->on_stop_arg);
    srv__streams_end_at_stop(srv);

    /* Grace: wait until every request the engine handed over is answered
     * and written, or the time is up. */
    srv__inflight_drain(srv, srv__now_ms() + grace_ms, SRV__SWEEP_MS);

    srv__inflight_answer_all(srv);
    /* Streams still open after the grace are cut: the engine closes their
     * connections and the application's next write says SRV_ECLOSED. */
    srv__streams_cut_all(srv);
    srv__engine_stop(srv);
    atomic_store(&srv->state, SRV__STOPPED);
    return 0;
}

int srv_server_on_stop(srv_server *srv, void (*fn)(srv_server *srv, void *arg), void *arg)
{
    if (srv == NULL)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;
    srv->on_stop = fn;
    srv->on_stop_arg = arg;
    return 0;
}

/* ---- run: wait for SIGINT/SIGTERM ---------------------------------------- */

static int srv__signal_pipe[2] = {-1, -1};
static pthread_mutex_t srv__run_mu = PTHREAD_MUTEX_INITIALIZER;

static void srv__on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(srv__signal_pipe[1], &b, 1);
    (void)w;
    errno = saved;
}

int srv_server_run(srv_server *srv, unsigned grace_ms)
{
    if (srv == NULL)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) == SRV__NEW) {
        int rc = srv_server_start(srv);
        if (rc != 0)
            return rc;
    }
    if (atomic_load(&srv->state) != SRV__RUNNING)
        return SRV_ESTATE;

    /* A self-pipe works whichever thread the signal lands on. */
    pthread_mutex_lock(&srv__run_mu);
    if (pipe2(srv__signal_pipe, O_CLOEXEC) != 0) {
        pthread_mutex_unlock(&srv__run_mu);
        srv__server_set_error(srv, "cannot create the signal pipe: %s", strerror(errno));
        return SRV_ESYS;
    }
    struct sigaction sa, old_int, old_term, old_hup, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = srv__on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if (srv->tls != NULL) /* SIGHUP reloads the certificate (nginx's habit) */
        sigaction(SIGHUP, &sa, &old_hup);
    sigaction(SIGUSR1, &sa, &old_usr1); /* reopen the access log (logrotate) */
    /* An application that blocked these before saying it is ready (so a
     * supervisor's early SIGTERM does not kill it before the handlers are
     * in place) gets them now, pending ones included. */
    sigset_t run_sigs, old_mask;
    sigemptyset(&run_sigs);
    sigaddset(&run_sigs, SIGINT);
    sigaddset(&run_sigs, SIGTERM);
    sigaddset(&run_sigs, SIGUSR1);
    if (srv->tls != NULL)
        sigaddset(&run_sigs, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &run_sigs, &old_mask);

    for (;;) {
        unsigned char b;
        ssize_t r = read(srv__signal_pipe[0], &b, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 1 && b == SIGHUP) {
            int rc = srv_server_reload_tls(srv);
            if (rc != 0)
                fprintf(stderr, "libsrv: SIGHUP: TLS reload failed, the current certificate "
                        "stays: %s\n", srv_server_last_error(srv));
            continue;
        }
        if (r == 1 && b == SIGUSR1) {
            if (srv_server_reopen_log(srv) != 0)
                fprintf(stderr, "libsrv: SIGUSR1: access log reopen failed, the current file "
                        "stays: %s\n", srv_server_last_error(srv));
            continue;
        }
        break;
    }

    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (srv->tls != NULL)
        sigaction(SIGHUP, &old_hup, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    close(srv__signal_pipe[0]);
    close(srv__signal_pipe[1]);
    srv__signal_pipe[0] = srv__signal_pipe[1] = -1;
    pthread_mutex_unlock(&srv__run_mu);
    return srv_server_stop(srv, grace_ms);
}

void srv_server_free(srv_server *srv)
{
    if (srv == NULL)
        return;
    if (atomic_load(&srv->state) == SRV__RUNNING)
        srv_server_stop(srv, 0);
    /* Handlers still running (blocking ones cannot be interrupted) finish
     * here; their late answers are dropped. Then no thread of ours runs. */
    if (srv->pool_started)
        srv__pool_shutdown(&srv->pool);
    srv__timer_stop(&srv->timer);
    srv__inflight_drop_orphans(srv);
    srv__streams_drop_all(srv);
    if (srv->engine_started)
        srv__engine_destroy(srv);
    srv__pool_destroy(&srv->pool);
    srv__router_free(&srv->router);
    srv__inflight_destroy(&srv->inflight);
    srv__streams_destroy(srv);
    srv__tls_free(srv);
    srv__forwarded_free(srv);
    srv__access_log_free(srv);
    srv__health_free(srv);
    srv__metrics_free(srv);
    free(srv->metrics_path);
    free(srv->host);
    free(srv->server_name);
    free(srv);
}

/* ---- timers, stats, engine-facing accessors ------------------------------- */

int srv_after(srv_server *srv, unsigned ms, void (*fn)(void *arg), void *arg)
{
    if (srv == NULL || fn == NULL)
        return SRV_EINVAL;
    int state = atomic_load(&srv->state);
    if (state != SRV__RUNNING && state != SRV__STOPPING)
        return SRV_ESTATE;
    return srv__timer_add(&srv->timer, ms, fn, arg);
}

const srv_config *srv__server_config(const srv_server *srv)
{
    return &srv->cfg;
}

int srv__server_stopping(const srv_server *srv)
{
    return srv__state_stopping(srv);
}

void srv__server_set_port(srv_server *srv, int port)
{
    atomic_store(&srv->port, port);
}
