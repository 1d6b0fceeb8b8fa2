/*
 * Streamed request bodies (SRV_ROUTE_STREAM_BODY): the application pulls
 * the body with srv_request_body_read and paces it with SRV_EAGAIN and
 * srv_request_body_resume; the engine reads the socket only while
 * srv__body_state says GO and hands each de-chunked piece to
 * srv__body_data on the connection's thread. Every field is under the
 * request's mu; callbacks run without it. docs/ARCHITECTURE.md, "Streamed
 * request bodies", tells why the body is pulled rather than pushed.
 */
#include "srv_core.h"

static void srv__body_touch(srv_request *req)
{
    atomic_store_explicit(&req->body_touch_ms, srv__coarse_ms(), memory_order_relaxed);
}

bool srv__request_streams_body(srv_request *req)
{
    srv__router_lookup(req);
    const srv__route *rt = req->route;
    if (req->routing.status != 0 || rt == NULL || !(rt->flags & SRV_ROUTE_STREAM_BODY))
        return false;
    /* Set before the dispatch, on the engine's thread: read-only for the
     * application's threads, which get the request after it. */
    req->body_s.streamed = true;
    req->body_s.limit = rt->max_body;
    return true;
}

bool srv__server_streams_bodies(const srv_server *srv)
{
    return srv->router.stream_body_routes > 0;
}

/* The state under req->mu. */
static int srv__body_state_locked(const srv_request *req)
{
    const struct srv__body *b = &req->body_s;
    if (b->over)
        return SRV__BODY_OVER;
    if (!b->reading || b->paused)
        return SRV__BODY_IDLE;
    return SRV__BODY_GO;
}

int srv__body_state(srv_request *req)
{
    pthread_mutex_lock(&req->mu);
    int st = srv__body_state_locked(req);
    pthread_mutex_unlock(&req->mu);
    return st;
}

/* The application's status for an end the engine or the core decided. */
static int srv__body_error(int status)
{
    switch (status) {
    case 0:
        return 0;
    case 408:
        return SRV_ETIMEDOUT;
    case 413:
        return SRV_ETOOBIG;
    case 400:
    case 431:
        return SRV_EBADREQ;
    default:
        return SRV_ECLOSED;
    }
}

/* End the delivery with `err` and tell the application when it reads;
 * then the core answers `status` (4xx) when nobody has. Not under mu. */
static void srv__body_finish(srv_request *req, int err, int status)
{
    pthread_mutex_lock(&req->mu);
    struct srv__body *b = &req->body_s;
    if (b->over) {
        pthread_mutex_unlock(&req->mu);
        return;
    }
    b->over = true;
    bool tell = b->reading;
    if (!tell)
        b->early = err;
    if (tell && b->in_data) {
        /* Ended from inside on_data (its srv_respond let the engine go):
         * on_end follows once on_data returned, and not at all if on_data
         * stops the delivery, so the application never sees on_end nested
         * in on_data nor after a stop. */
        b->end_pending = true;
        b->end_err = err;
        tell = false;
    }
    srv_body_end_fn fn = b->on_end;
    void *ctx = b->ctx;
    pthread_mutex_unlock(&req->mu);
    srv__body_touch(req);
    /* The core's answer first, so that the application's own srv_respond
     * in on_end is the one dropped; the engine writes it only once this
     * thread (the connection's) is back, after on_end. */
    if (status >= 400)
        srv__inflight_answer(req, status, true, NULL, NULL, false);
    if (tell)
        fn(req, err, ctx);
}

int srv__body_data(srv_request *req, const void *data, size_t n)
{
    pthread_mutex_lock(&req->mu);
    struct srv__body *b = &req->body_s;
    int st = srv__body_state_locked(req);
    if (st != SRV__BODY_GO) {
        pthread_mutex_unlock(&req->mu);
        return st;
    }
    if (b->limit != 0 && (n > b->limit || b->received > b->limit - n)) {
        pthread_mutex_unlock(&req->mu);
        srv__body_finish(req, SRV_ETOOBIG, 413);
        return SRV__BODY_OVER;
    }
    b->received += n;
    if (req->srv->metrics != NULL) /* srv_received_bytes_total, as it arrives */
        atomic_fetch_add_explicit(&req->srv->metrics->bytes_in, n, memory_order_relaxed);
    b->in_data = true;
    b->resumed = false;
    srv_body_data_fn fn = b->on_data;
    void *ctx = b->ctx;
    /* on_data may answer, and the engine may write and let the request go
     * inside that srv_respond (h2o does, on its loop): hold it until the
     * state below is read and a held-back on_end has run. */
    atomic_fetch_add(&req->refs, 1);
    pthread_mutex_unlock(&req->mu);
    srv__body_touch(req);

    int rc = fn(req, data, n, ctx);

    pthread_mutex_lock(&req->mu);
    b->in_data = false;
    if (rc == SRV_EAGAIN && !b->resumed)
        b->paused = true;
    else if (rc != 0 && rc != SRV_EAGAIN)
        b->over = true; /* the application stopped: no more calls */
    bool tell = b->end_pending && (rc == 0 || rc == SRV_EAGAIN);
    b->end_pending = false;
    int err = b->end_err;
    srv_body_end_fn end = b->on_end;
    st = srv__body_state_locked(req);
    pthread_mutex_unlock(&req->mu);
    if (tell)
        end(req, err, ctx);
    srv__request_unref(req);
    return st;
}

void srv__body_end(srv_request *req, int status)
{
    srv__body_finish(req, srv__body_error(status), status);
}

void srv__body_detach(srv_request *req)
{
    pthread_mutex_lock(&req->mu);
    req->body_s.detached = true;
    pthread_mutex_unlock(&req->mu);
    srv__body_finish(req, SRV_ECLOSED, 0);
}

int srv_request_body_read(srv_request *req, srv_body_data_fn on_data, srv_body_end_fn on_end,
                          void *ctx)
{
    if (req == NULL || on_data == NULL || on_end == NULL)
        return SRV_EINVAL;
    pthread_mutex_lock(&req->mu);
    struct srv__body *b = &req->body_s;
    int rc = 0;
    if (!b->streamed || b->reading)
        rc = SRV_EINVAL;
    else if (b->early != 0)
        rc = b->early;
    else if (req->answered)
        rc = req->cancelled ? SRV_ECLOSED : SRV_ETIMEDOUT;
    else if (b->detached || b->over)
        rc = SRV_ECLOSED;
    if (rc != 0) {
        pthread_mutex_unlock(&req->mu);
        return rc;
    }
    b->reading = true;
    b->on_data = on_data;
    b->on_end = on_end;
    b->ctx = ctx;
    srv__body_touch(req);
    srv__engine_body_kick(req->srv, req);
    pthread_mutex_unlock(&req->mu);
    return 0;
}

int srv_request_body_resume(srv_request *req)
{
    if (req == NULL)
        return SRV_EINVAL;
    pthread_mutex_lock(&req->mu);
    struct srv__body *b = &req->body_s;
    if (!b->reading) {
        pthread_mutex_unlock(&req->mu);
        return SRV_EINVAL;
    }
    if (b->in_data) {
        b->resumed = true; /* the engine looks again when on_data returns */
    } else if (b->paused) {
        b->paused = false;
        if (!b->over && !b->detached)
            srv__engine_body_kick(req->srv, req);
    }
    srv__body_touch(req); /* under mu: the request may go once it is let go */
    pthread_mutex_unlock(&req->mu);
    return 0;
}
