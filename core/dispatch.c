/*
 * Dispatch: a complete request is counted, routed (router.c), passed
 * through the response hooks and the filters, and handed to its handler,
 * or answered 404/405/OPTIONS here. Non-blocking filters and handlers run
 * on the engine's thread, the rest on a worker: the chain starts on the
 * engine's thread and moves to a worker at the first stage that may block,
 * never back. The answer and the lists are inflight.c's.
 */
#include "srv_core.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* A non-blocking filter or handler held its I/O thread too long: count it,
 * and say so once per server, since every connection of that thread
 * waited. */
static void srv__report_slow(srv_request *req, const char *what, uint64_t ms)
{
    srv_server *srv = req->srv;
    atomic_fetch_add(&srv->slow_nonblocking, 1);
    if (atomic_exchange(&srv->slow_reported, true))
        return;
    fprintf(stderr,
            "libsrv: %s held its I/O thread for %llu ms on %s %s (nonblocking_warn_ms is %u); "
            "it must not block: register it without the NONBLOCKING flag. Later cases are "
            "only counted (srv_stats.slow_nonblocking).\n",
            what, (unsigned long long)ms, req->method ? req->method : "",
            req->route ? req->route->path : (req->path ? req->path : ""),
            srv->cfg.nonblocking_warn_ms);
}

/* Application code that kept the request on the engine's thread (a
 * handler or filter that returned without answering) joins the pending
 * list, so the timeout and stop still answer it. */
static void srv__inline_kept(srv_request *req)
{
    bool late = false;
    pthread_mutex_lock(&req->mu);
    if (!req->answered)
        late = srv__inflight_join_late(req);
    pthread_mutex_unlock(&req->mu);
    if (late)
        srv__inflight_answer(req, 503, true, NULL, NULL, false);
}

/* Run the route's handler on this (the engine's) thread, timed. The caller
 * holds the application's reference and a reference of its own. */
static void srv__handler_inline(srv_request *req)
{
    unsigned warn_ms = req->srv->cfg.nonblocking_warn_ms;
    uint64_t t0 = warn_ms ? srv__coarse_ms() : 0;
    req->route->handler(req, req->route->ctx);
    if (warn_ms) {
        uint64_t took = srv__coarse_ms() - t0;
        if (took > warn_ms)
            srv__report_slow(req, "the non-blocking handler", took);
    }
    srv__inline_kept(req);
}

/* The core's routing answer (404, 405 + Allow, the automatic OPTIONS 204
 * + Allow), given like the application's own (srv_respond) so that the
 * headers hooks and filters set go with it. Takes the application's
 * reference. */
static void srv__routing_answer(srv_request *req)
{
    int status = req->routing.status;
    if (status == 405 || status == 204) {
        char *allow = srv__router_allow(req);
        if (allow != NULL) /* out of memory: the answer goes without it */
            srv_set_header(req, "Allow", allow);
        free(allow);
    }
    if (status == 204) {
        srv_respond(req, 204, NULL, NULL, 0);
        return;
    }
    char body[SRV__ERROR_BODY_MAX];
    const char *ctype;
    size_t n = srv__error_body(req, status, body, sizeof body, &ctype);
    srv_respond(req, status, ctype, body, n);
}

/* The last stage: the handler, or the core's routing answer. */
static void srv__terminal(srv_request *req, bool inline_thread)
{
    if (req->route == NULL)
        srv__routing_answer(req);
    else if (inline_thread)
        srv__handler_inline(req);
    else
        req->route->handler(req, req->route->ctx);
}

static bool srv__terminal_blocks(const srv_request *req)
{
    return req->route != NULL && !(req->route->flags & SRV_ROUTE_NONBLOCKING);
}

static void srv__run_hooks(srv_request *req)
{
    const srv__router *r = &req->srv->router;
    if (req->routing.hooks_done)
        return;
    req->routing.hooks_done = true;
    req->routing.marking = true; /* their headers go out with every answer */
    for (size_t i = 0; i < r->hook_count; i++)
        r->hooks[i].fn(req, r->hooks[i].ctx);
    req->routing.marking = false;
}

/*
 * Call the next filter. True when the request goes on: the filter returned
 * SRV_FILTER_NEXT and nobody answered meanwhile. False: the filter took
 * the request (SRV_FILTER_DONE, or it answered although it returned NEXT),
 * or the core answered it (timeout, stop, the client left) while the
 * filter ran - then the application's reference is let go here.
 */
static bool srv__filter_next(srv_request *req, bool timed)
{
    const srv__filter *f = srv__chain_at(req, req->routing.next_filter++);
    unsigned warn_ms = timed ? req->srv->cfg.nonblocking_warn_ms : 0;
    uint64_t t0 = warn_ms ? srv__coarse_ms() : 0;
    /* A filter that answered although it returns NEXT gave the
     * application's reference away, and the engine may have released the
     * request already: hold it until we have looked. */
    atomic_fetch_add(&req->refs, 1);
    req->routing.marking = f->headers_fn != NULL; /* a header filter's go out with every answer */
    int rc = f->fn(req, f->ctx);
    req->routing.marking = false;
    if (warn_ms) {
        uint64_t took = srv__coarse_ms() - t0;
        if (took > warn_ms)
            srv__report_slow(req, "a non-blocking filter", took);
    }
    if (rc != SRV_FILTER_NEXT) {
        srv__request_unref(req);
        return false;
    }
    pthread_mutex_lock(&req->mu);
    bool answered = req->answered, by_core = req->core_answer || req->cancelled;
    pthread_mutex_unlock(&req->mu);
    if (answered && by_core)
        srv__inflight_app_done(req);
    srv__request_unref(req);
    return !answered;
}

/* On a worker, the request on the pending list with the application's
 * reference: the rest of the chain. */
static void srv__chain_worker(srv_request *req)
{
    pthread_mutex_lock(&req->mu);
    bool answered = req->answered;
    pthread_mutex_unlock(&req->mu);
    if (answered) { /* timed out or shut down while it waited for a worker */
        srv__inflight_app_done(req);
        return;
    }
    srv__run_hooks(req); /* unless they ran on the engine's thread */
    while (req->routing.next_filter < req->routing.chain_len)
        if (!srv__filter_next(req, false))
            return;
    srv__terminal(req, false);
}

static void srv__chain_job(srv_job *job)
{
    srv__chain_worker((srv_request *)((char *)job - offsetof(srv_request, job)));
}

/*
 * On the engine's thread, with the application's reference: hooks, then
 * the non-blocking filters up to the first blocking one, then the handler
 * or the core's answer when they do not block either; whatever may block
 * goes to a worker.
 */
static void srv__chain_inline(srv_request *req)
{
    srv_server *srv = req->srv;
    size_t n = req->routing.chain_len;
    /* The engine may write and release the request inside srv_respond:
     * hold it until the application code has returned. */
    atomic_fetch_add(&req->refs, 1);
    srv__run_hooks(req);
    while (req->routing.next_filter < n &&
           (srv__chain_at(req, req->routing.next_filter)->flags & SRV_FILTER_NONBLOCKING)) {
        if (!srv__filter_next(req, true)) {
            srv__inline_kept(req);
            srv__request_unref(req);
            return;
        }
    }
    if (req->routing.next_filter == n && !srv__terminal_blocks(req)) {
        srv__terminal(req, true);
        srv__request_unref(req);
        return;
    }
    if (!srv__inflight_join(req)) {
        atomic_fetch_sub(&req->refs, 1); /* the application's: it never saw it */
        srv__inflight_answer(req, 503, true, NULL, NULL, false);
    } else {
        req->job.run = srv__chain_job;
        if (srv__pool_submit(srv, &req->job) != 0) {
            srv__inflight_answer(req, 503, true, NULL, NULL, false);
            srv__inflight_app_done(req);
        }
    }
    srv__request_unref(req);
}

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

/*
 * A request the core answers before its dispatch (413, 417, 501... to a
 * whole head): the response hooks and the header filters (CORS) its route
 * would run add their headers, as to every answer of a dispatched request,
 * so a page on another origin can read a 413. On the engine's thread.
 */
static void srv__answer_headers(srv_request *req)
{
    srv__router_lookup(req);
    if (req->routing.status == 400 || req->routing.status == 500)
        return;
    srv__run_hooks(req);
    req->routing.marking = true;
    for (size_t i = 0; i < req->routing.chain_len; i++) {
        const srv__filter *f = srv__chain_at(req, i);
        if (f->headers_fn != NULL)
            f->headers_fn(req, f->ctx);
    }
    req->routing.marking = false;
}

void srv__request_fail(srv_request *req, int status)
{
    if (status < 400 || status > 599)
        status = 500;
    if (req->head_done)
        srv__answer_headers(req);
    srv__inflight_add(req, false);
    srv__inflight_answer(req, status, true, NULL, NULL, false);
}

void srv__request_dispatch(srv_request *req)
{
    srv_server *srv = req->srv;
    srv__inflight_add(req, true);
    srv__forwarded_resolve(req);

    srv__router_lookup(req); /* srv__request_streams_body may have done it */
    int status = req->routing.status;
    if (status == 400 || status == 500) { /* a path refused, or no memory */
        srv__inflight_answer(req, status, true, NULL, NULL, false);
        return;
    }
    const srv__route *rt = req->route;
    bool chain = req->routing.chain_len > 0 || srv->router.hook_count > 0;

    if (!chain && rt == NULL) {
        atomic_fetch_add(&req->refs, 1); /* srv_respond takes it */
        srv__routing_answer(req);
        return;
    }
    bool inline_start = chain || (rt->flags & SRV_ROUTE_NONBLOCKING);
    if (inline_start) {
        if (srv__inflight_final(srv)) {
            srv__inflight_answer(req, 503, true, NULL, NULL, false);
            return;
        }
        atomic_fetch_add(&req->refs, 1); /* the application's, until it answers */
        if (chain) {
            srv__chain_inline(req);
        } else {
            atomic_fetch_add(&req->refs, 1); /* ours, across the handler */
            srv__handler_inline(req);
            srv__request_unref(req);
        }
        return;
    }

    /* The application's reference, held until it answers. */
    atomic_fetch_add(&req->refs, 1);
    if (!srv__inflight_join(req)) {
        atomic_fetch_sub(&req->refs, 1);
        srv__inflight_answer(req, 503, true, NULL, NULL, false);
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
