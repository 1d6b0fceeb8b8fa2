/*
 * Dispatch: a complete request is counted, routed (404, 405 answered
 * here) and handed to its handler, on a worker or, for a non-blocking
 * route, on the engine's thread. The answer and the lists are inflight.c's.
 */
#include "srv_core.h"

#include <stddef.h>
#include <stdio.h>

static void srv__handler_call(srv_request *req)
{
    pthread_mutex_lock(&req->mu);
    bool answered = req->answered;
    pthread_mutex_unlock(&req->mu);
    if (answered) { /* timed out or shut down while it waited for a worker */
        srv__inflight_app_done(req);
        return;
    }
    req->route->handler(req, req->route->ctx);
}

static void srv__handler_job(srv_job *job)
{
    srv__handler_call((srv_request *)((char *)job - offsetof(srv_request, job)));
}

/* A non-blocking handler held its I/O thread too long: count it, and say
 * so once per server, since every connection of that thread waited. */
static void srv__report_slow(srv_request *req, uint64_t ms)
{
    srv_server *srv = req->srv;
    atomic_fetch_add(&srv->slow_nonblocking, 1);
    if (atomic_exchange(&srv->slow_reported, true))
        return;
    fprintf(stderr,
            "libsrv: the non-blocking handler of %s %s held its I/O thread for %llu ms "
            "(nonblocking_warn_ms is %u); a non-blocking handler must not block: register it "
            "without SRV_ROUTE_NONBLOCKING. Later cases are only counted "
            "(srv_stats.slow_nonblocking).\n",
            req->route->method, req->route->path, (unsigned long long)ms,
            srv->cfg.nonblocking_warn_ms);
}

/*
 * A non-blocking route: the handler runs here, on the engine's thread. It
 * usually answers before it returns, and then the request never touches
 * the server's lists or mutex. Otherwise it joins the pending list when
 * the handler returns, so the timeout and stop still answer it.
 */
static void srv__handler_inline(srv_request *req)
{
    srv_server *srv = req->srv;
    unsigned warn_ms = srv->cfg.nonblocking_warn_ms;
    /* The engine may write and release the request inside srv_respond:
     * hold it until the handler has returned. */
    atomic_fetch_add(&req->refs, 1);
    uint64_t t0 = warn_ms ? srv__coarse_ms() : 0;
    req->route->handler(req, req->route->ctx);
    if (warn_ms) {
        uint64_t took = srv__coarse_ms() - t0;
        if (took > warn_ms)
            srv__report_slow(req, took);
    }
    bool late = false;
    pthread_mutex_lock(&req->mu);
    if (!req->answered)
        late = srv__inflight_join_late(req);
    pthread_mutex_unlock(&req->mu);
    if (late)
        srv__inflight_answer(req, 503, true, NULL, NULL, false);
    srv__request_unref(req);
}

/* Looks the route up (NULL: none, path_known says 405 rather than 404). */
static const srv__route *srv__request_find_route(srv_request *req, bool *path_known)
{
    const char *method = req->method ? req->method : "";
    const char *path = req->path ? req->path : "";
    return srv__router_find(&req->srv->router, method, path, path_known);
}

bool srv__request_nonblocking(srv_request *req)
{
    bool path_known;
    if (!req->route)
        req->route = srv__request_find_route(req, &path_known);
    /* No route: dispatch answers 404/405 itself, without a handler. */
    return !req->route || (req->route->flags & SRV_ROUTE_NONBLOCKING);
}

static void srv__request_route(srv_request *req, bool run_here)
{
    srv_server *srv = req->srv;
    srv__inflight_add(req, true);
    srv__forwarded_resolve(req);

    bool path_known = false;
    /* srv__request_nonblocking may have looked it up already. */
    const srv__route *rt = req->route ? req->route : srv__request_find_route(req, &path_known);
    if (rt == NULL) {
        if (path_known) {
            char allow[256];
            srv__router_allow(&srv->router, req->path ? req->path : "", allow, sizeof allow);
            srv__inflight_answer(req, 405, false, "Allow", allow, false);
        } else {
            srv__inflight_answer(req, 404, false, NULL, NULL, false);
        }
        return;
    }
    req->route = rt;

    if (rt->flags & SRV_ROUTE_NONBLOCKING) {
        if (srv__inflight_final(srv)) {
            srv__inflight_answer(req, 503, true, NULL, NULL, false);
            return;
        }
        atomic_fetch_add(&req->refs, 1); /* the application's, until it answers */
        srv__handler_inline(req);
        return;
    }

    /* The application's reference, held until it answers. */
    atomic_fetch_add(&req->refs, 1);
    if (!srv__inflight_join(req)) {
        atomic_fetch_sub(&req->refs, 1);
        srv__inflight_answer(req, 503, true, NULL, NULL, false);
        return;
    }

    if (run_here) {
        srv__handler_call(req);
        return;
    }
    req->job.run = srv__handler_job;
    if (srv__pool_submit(srv, &req->job) != 0) {
        /* Shut down, or max_queued requests already wait: a quick 503
         * rather than a queue without bound. */
        srv__inflight_answer(req, 503, true, NULL, NULL, false);
        srv__inflight_app_done(req);
    }
}

void srv__request_dispatch(srv_request *req)
{
    srv__request_route(req, false);
}

void srv__request_run(srv_request *req)
{
    srv__request_route(req, true);
}
