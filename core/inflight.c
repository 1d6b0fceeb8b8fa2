/*
 * The in-flight bookkeeping, one owner for it (srv->inflight): every
 * request the engine handed over is counted until the engine releases it;
 * one awaiting its handler sits on the pending list, in deadline order,
 * where the timeout sweep and stop's final phase find it; the answer is
 * claimed exactly once (srv_respond or the core) and delivered to the
 * engine; a request the core answered while the application still holds
 * it waits on the orphan list. srv_server_stop waits here for the
 * counters to drain.
 */
#include "srv_core.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int srv__inflight_init(srv__inflight *f)
{
    memset(f, 0, sizeof *f);
    atomic_init(&f->final_phase, false);
    atomic_init(&f->in_flight, 0);
    atomic_init(&f->delivering, 0);
    atomic_init(&f->waiter, false);
    atomic_init(&f->arriving, 0);
    if (pthread_mutex_init(&f->mu, NULL) != 0)
        return SRV_ESYS;
    if (pthread_cond_init(&f->cv, NULL) != 0) {
        pthread_mutex_destroy(&f->mu);
        return SRV_ESYS;
    }
    return 0;
}

void srv__inflight_destroy(srv__inflight *f)
{
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

unsigned srv__inflight_count(const srv_server *srv)
{
    return atomic_load(&((srv_server *)srv)->inflight.in_flight);
}

bool srv__inflight_final(const srv_server *srv)
{
    return atomic_load(&((srv_server *)srv)->inflight.final_phase);
}

void srv__request_arriving(srv_server *srv, int delta)
{
    if (delta > 0)
        atomic_fetch_add(&srv->inflight.arriving, (unsigned)delta);
    else
        atomic_fetch_sub(&srv->inflight.arriving, (unsigned)-delta);
}

/* One of the counters srv_server_stop waits on drops; the request path
 * takes no lock unless the stopping thread waits and this reached 0. */
static void srv__counter_drop(srv_server *srv, atomic_uint *counter)
{
    if (atomic_fetch_sub(counter, 1) == 1 && atomic_load(&srv->inflight.waiter)) {
        pthread_mutex_lock(&srv->inflight.mu);
        pthread_cond_broadcast(&srv->inflight.cv);
        pthread_mutex_unlock(&srv->inflight.mu);
    }
}

void srv__request_release(srv_request *req)
{
    srv_server *srv = req->srv;
    bool counted = req->counted;
    srv__request_unref(req);
    if (counted)
        srv__counter_drop(srv, &srv->inflight.in_flight);
}

/* ---- the lists (srv->inflight.mu held) ------------------------------------ */

static void srv__list_unlink(srv_server *srv, srv_request *req)
{
    if (req->list == SRV__LIST_PENDING) {
        if (req->prev)
            req->prev->next = req->next;
        else
            srv->inflight.pending_head = req->next;
        if (req->next)
            req->next->prev = req->prev;
        else
            srv->inflight.pending_tail = req->prev;
    } else if (req->list == SRV__LIST_ORPHAN) {
        if (req->prev)
            req->prev->next = req->next;
        else
            srv->inflight.orphans = req->next;
        if (req->next)
            req->next->prev = req->prev;
    }
    req->prev = req->next = NULL;
    req->list = SRV__LIST_NONE;
}

static void srv__list_orphan(srv_server *srv, srv_request *req)
{
    srv__list_unlink(srv, req);
    req->next = srv->inflight.orphans;
    if (srv->inflight.orphans)
        srv->inflight.orphans->prev = req;
    srv->inflight.orphans = req;
    req->list = SRV__LIST_ORPHAN;
}

/* The application lets go of a request it no longer answers. */
void srv__inflight_app_done(srv_request *req)
{
    srv_server *srv = req->srv;
    pthread_mutex_lock(&srv->inflight.mu);
    srv__list_unlink(srv, req);
    pthread_mutex_unlock(&srv->inflight.mu);
    srv__request_unref(req);
}

void srv__inflight_drop_orphans(srv_server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->inflight.mu);
        srv__inflight *f = &srv->inflight;
        srv_request *req = f->orphans ? f->orphans : f->pending_head;
        if (req != NULL)
            srv__list_unlink(srv, req);
        pthread_mutex_unlock(&srv->inflight.mu);
        if (req == NULL)
            return;
        srv__request_unref(req);
    }
}

/* Join the pending list (srv->inflight.mu held): the timeout sweep and the
 * final phase of stop answer whatever the application has not. */
static void srv__list_pending(srv_server *srv, srv_request *req)
{
    /* Every request gets the same timeout, so appending keeps the list in
     * deadline order (a non-blocking handler's request joins when its
     * handler returns, at most a few ms late: the sweep's order holds). */
    req->deadline_ms = srv__now_ms() + srv->cfg.request_timeout_ms;
    req->list = SRV__LIST_PENDING;
    req->prev = srv->inflight.pending_tail;
    req->next = NULL;
    if (srv->inflight.pending_tail)
        srv->inflight.pending_tail->next = req;
    else
        srv->inflight.pending_head = req;
    srv->inflight.pending_tail = req;
}

bool srv__inflight_join(srv_request *req)
{
    srv_server *srv = req->srv;
    pthread_mutex_lock(&srv->inflight.mu);
    if (srv->inflight.final_phase) {
        pthread_mutex_unlock(&srv->inflight.mu);
        return false;
    }
    srv__list_pending(srv, req);
    pthread_mutex_unlock(&srv->inflight.mu);
    return true;
}

bool srv__inflight_join_late(srv_request *req)
{
    srv_server *srv = req->srv;
    pthread_mutex_lock(&srv->inflight.mu);
    srv__list_pending(srv, req);
    bool late = srv->inflight.final_phase; /* stop's sweep may have passed already */
    pthread_mutex_unlock(&srv->inflight.mu);
    return late;
}

/* ---- answering ------------------------------------------------------------ */

/* Hand a final response to the engine (the winner of `answered` only). */
static void srv__deliver(srv_request *req)
{
    srv_server *srv = req->srv;
    int cls = req->status / 100;
    if (cls >= 1 && cls <= 5 && !req->cancelled) /* nothing is sent for a cancel */
        atomic_fetch_add(&srv->responses[cls - 1], 1);
    if (req->stream == NULL) { /* a stream is logged when it ends (srv__stream_detach) */
        if (srv->cfg.access_log)
            srv__access_log(req);
        srv__metrics_observe(req);
    }
    srv__engine_respond(srv, req);
    /* req may be gone now: the engine may have written and released it. */
    srv__counter_drop(srv, &srv->inflight.delivering);
}

/*
 * Take the answer (req->mu held): count the delivery and update the list.
 * req->list only changes under req->mu until the answer is taken (the
 * request joins the pending list before any other thread can answer it,
 * or under req->mu for a non-blocking handler), so a request on no list -
 * one a non-blocking handler answered at once - costs no server lock.
 */
static void srv__claim_answer(srv_request *req, bool by_core)
{
    srv_server *srv = req->srv;
    req->answered = true;
    atomic_fetch_add(&srv->inflight.delivering, 1);
    if (req->list == SRV__LIST_NONE)
        return;
    pthread_mutex_lock(&srv->inflight.mu);
    if (by_core) {
        if (req->list == SRV__LIST_PENDING)
            srv__list_orphan(srv, req);
    } else {
        srv__list_unlink(srv, req);
    }
    pthread_mutex_unlock(&srv->inflight.mu);
}

/* Keep the answer's content type (may be NULL) and body in req: in
 * req->resp_small when both fit, else malloc'd. False when out of memory
 * (then nothing is kept). req->mu held, not answered yet. */
static bool srv__answer_store(srv_request *req, const char *content_type, const void *body,
                              size_t len)
{
    if (len > PTRDIFF_MAX) /* no object is that large: a caller's (size_t)-1 */
        return false;
    size_t ct_len = content_type != NULL ? strlen(content_type) + 1 : 0;
    if (len <= sizeof req->resp_small && ct_len <= sizeof req->resp_small - len) {
        req->resp_inline = true;
        if (ct_len > 0)
            req->content_type = memcpy(req->resp_small, content_type, ct_len);
        if (len > 0) {
            req->resp_body = memcpy(req->resp_small + ct_len, body, len);
            req->resp_len = len;
        }
        return true;
    }
    char *ct = ct_len > 0 ? strdup(content_type) : NULL;
    char *copy = len > 0 ? malloc(len) : NULL;
    if ((ct_len > 0 && ct == NULL) || (len > 0 && copy == NULL)) {
        free(ct);
        free(copy);
        return false;
    }
    req->content_type = ct;
    if (len > 0) {
        req->resp_body = memcpy(copy, body, len);
        req->resp_len = len;
    }
    return true;
}

/* The core answers with a short text body. Returns false when the request
 * was already answered. */
bool srv__inflight_answer(srv_request *req, int status, bool close, const char *extra_name,
                          const char *extra_value, bool timeout)
{
    char body[SRV__ERROR_BODY_MAX];
    const char *ctype;
    size_t n = srv__error_body(req, status, body, sizeof body, &ctype);
    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        pthread_mutex_unlock(&req->mu);
        return false;
    }
    req->status = status;
    req->close_after = close;
    req->core_answer = true;
    (void)srv__answer_store(req, ctype, body, n);
    if (extra_name != NULL) {
        req->extra_header = calloc(1, sizeof *req->extra_header);
        if (req->extra_header != NULL) {
            req->extra_header->name = strdup(extra_name);
            req->extra_header->value = strdup(extra_value);
            if (req->extra_header->name == NULL || req->extra_header->value == NULL) {
                srv__kv_free(req->extra_header, 1);
                req->extra_header = NULL;
            }
        }
    }
    srv__claim_answer(req, true);
    pthread_mutex_unlock(&req->mu);
    if (timeout) /* counted before the client can see the 503 */
        atomic_fetch_add(&req->srv->timeouts, 1);
    srv__deliver(req);
    return true;
}

/* Count a request the engine handed over (stop waits for these); only
 * complete ones count in srv_stats.requests. */
void srv__inflight_add(srv_request *req, bool complete)
{
    srv_server *srv = req->srv;
    if (complete)
        atomic_fetch_add(&srv->requests, 1);
    atomic_fetch_add(&srv->inflight.in_flight, 1);
    req->counted = true;
}


bool srv__request_cancel(srv_request *req)
{
    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        pthread_mutex_unlock(&req->mu);
        return false;
    }
    /* 499 as nginx logs a request the client closed; the engine sends nothing. */
    req->status = 499;
    req->close_after = true;
    req->cancelled = true;
    srv__claim_answer(req, true);
    pthread_mutex_unlock(&req->mu);
    srv__deliver(req);
    return true;
}

/* Answer each request in `reqs` (each holding a temporary reference). */
static void srv__answer_list(srv_request **reqs, size_t n, int status, bool close, bool timeout)
{
    for (size_t i = 0; i < n; i++) {
        srv__inflight_answer(reqs[i], status, close, NULL, NULL, timeout);
        srv__request_unref(reqs[i]);
    }
}

/* Collect up to `cap` pending requests (all of them when !expired_only,
 * else those past their deadline), each with a temporary reference. */
static size_t srv__collect_pending(srv_server *srv, srv_request **out, size_t cap,
                                   bool expired_only, uint64_t now)
{
    size_t n = 0;
    pthread_mutex_lock(&srv->inflight.mu);
    for (srv_request *r = srv->inflight.pending_head; r != NULL && n < cap; r = r->next) {
        if (expired_only && r->deadline_ms > now)
            break;
        /* A streamed body that makes progress holds off the timeout: it
         * counts from the last body activity (srv.h). */
        uint64_t touch = atomic_load_explicit(&r->body_touch_ms, memory_order_relaxed);
        if (expired_only && touch != 0 && touch + srv->cfg.request_timeout_ms > now)
            continue;
        atomic_fetch_add(&r->refs, 1);
        out[n++] = r;
    }
    pthread_mutex_unlock(&srv->inflight.mu);
    return n;
}

#define SRV__BATCH 256

void srv__inflight_sweep(void *arg)
{
    srv_server *srv = arg;
    srv_request *batch[SRV__BATCH];
    size_t n;
    do {
        n = srv__collect_pending(srv, batch, SRV__BATCH, true, srv__now_ms());
        srv__answer_list(batch, n, 503, false, true);
    } while (n == SRV__BATCH);
}

void srv__inflight_answer_all(srv_server *srv)
{
    pthread_mutex_lock(&srv->inflight.mu);
    atomic_store(&srv->inflight.final_phase, true);
    pthread_mutex_unlock(&srv->inflight.mu);

    srv_request *batch[SRV__BATCH];
    size_t n;
    do {
        n = srv__collect_pending(srv, batch, SRV__BATCH, false, 0);
        srv__answer_list(batch, n, 503, true, false);
    } while (n == SRV__BATCH);

    /* Answers being handed over right now (an application's srv_respond
     * that won the race) must reach the engine before it stops. */
    atomic_store(&srv->inflight.waiter, true);
    pthread_mutex_lock(&srv->inflight.mu);
    while (atomic_load(&srv->inflight.delivering) > 0)
        pthread_cond_wait(&srv->inflight.cv, &srv->inflight.mu);
    pthread_mutex_unlock(&srv->inflight.mu);
}

bool srv__inflight_drain(srv_server *srv, uint64_t deadline_ms, unsigned poll_ms)
{
    srv__inflight *f = &srv->inflight;
    atomic_store(&f->waiter, true); /* releases now broadcast on reaching 0 */
    pthread_mutex_lock(&f->mu);
    /* Requests whose head or body is still arriving count too: one that
     * completes within the grace is served (they are polled: the counter
     * is kept off the lock). */
    bool idle;
    while (!(idle = atomic_load(&f->in_flight) == 0 && atomic_load(&f->arriving) == 0)) {
        uint64_t now = srv__now_ms();
        if (now >= deadline_ms)
            break;
        uint64_t wait = deadline_ms - now;
        if (wait > poll_ms) /* re-check: in_flight also drops off-lock */
            wait = poll_ms;
        struct timespec ts;
        srv__timespec_in(&ts, CLOCK_REALTIME, wait);
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    return idle;
}

static int srv__respond(srv_request *req, int status, const char *content_type,
                        const void *body, size_t len, bool may_compress)
{
    if (req == NULL)
        return SRV_EINVAL;
    bool bad = status < 200 || status > 599 || (body == NULL && len > 0);
    if (content_type != NULL) /* strcspn: a byte loop here was ~250 instructions a request */
        bad |= content_type[strcspn(content_type, "\r\n")] != '\0';
    srv_server *srv = req->srv;
    /* srv_compression_set: maybe gzip the body (compress.c). */
    void *gz = bad || !may_compress ? NULL
                                    : srv__compress_body(req, status, content_type, body, &len);
    if (gz != NULL)
        body = gz;

    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        free(gz);
        /* srv.h: a client that went away makes the response "dropped safely" (0). */
        int rc = req->cancelled ? 0 : SRV_ETIMEDOUT;
        pthread_mutex_unlock(&req->mu);
        atomic_fetch_add(&srv->dropped, 1);
        srv__inflight_app_done(req);
        return rc;
    }
    if (bad) {
        /* Answer anyway so the client is not left waiting. */
        static const char msg[] = "500 Internal Server Error\n";
        status = 500;
        content_type = "text/plain; charset=utf-8";
        body = msg;
        len = sizeof msg - 1;
    }
    req->status = status;
    if (!srv__answer_store(req, content_type, body, len))
        req->status = 500;
    srv__claim_answer(req, false);
    pthread_mutex_unlock(&req->mu);
    free(gz);

    srv__deliver(req);
    srv__request_unref(req); /* the application's reference */
    return bad ? SRV_EINVAL : 0;
}

int srv_respond(srv_request *req, int status, const char *content_type, const void *body,
                size_t len)
{
    return srv__respond(req, status, content_type, body, len, true);
}

int srv__respond_as_is(srv_request *req, int status, const char *content_type,
                       const void *body, size_t len)
{
    return srv__respond(req, status, content_type, body, len, false);
}

int srv__respond_upgrade(srv_request *req, struct srv_ws *ws)
{
    if (req == NULL || ws == NULL)
        return SRV_EINVAL;
    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        int rc = req->cancelled ? SRV_ECLOSED : SRV_ETIMEDOUT;
        pthread_mutex_unlock(&req->mu);
        atomic_fetch_add(&req->srv->dropped, 1);
        srv__inflight_app_done(req);
        return rc;
    }
    req->status = 101;
    req->ws = ws;
    srv__claim_answer(req, false);
    pthread_mutex_unlock(&req->mu);
    srv__deliver(req);
    srv__request_unref(req); /* the application's reference */
    return 0;
}

int srv__inflight_answer_stream(srv_request *req, int status, const char *content_type,
                                int64_t length, const srv__stream_file *file)
{
    srv_server *srv = req->srv;
    char *ct = content_type ? strdup(content_type) : NULL;
    struct srv_stream *s = srv__zalloc(sizeof *s);
    if ((content_type != NULL && ct == NULL) || s == NULL) {
        free(ct);
        free(s);
        return SRV_ENOMEM;
    }
    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        int rc = req->cancelled ? SRV_ECLOSED : SRV_ETIMEDOUT;
        pthread_mutex_unlock(&req->mu);
        free(ct);
        free(s);
        atomic_fetch_add(&srv->dropped, 1);
        srv__inflight_app_done(req);
        return rc;
    }
    req->stream = s;
    bool bodiless = req->is_head || status == 204 || status == 304;
    bool http11 = req->major == 1 && req->minor == 1;
    req->status = status;
    req->content_type = ct;
    s->req = req;
    s->active = true;
    s->bodiless = bodiless;
    s->length = length;
    s->limit = srv->cfg.stream_buffer_bytes;
    if (file != NULL) { /* the whole body is there: written, as far as the stream goes */
        s->has_file = true;
        s->file_fd = file->fd;
        s->file_off = file->off;
        s->file_left = bodiless || length < 0 ? 0 : (uint64_t)length;
        s->file_release = file->release;
        s->file_ctx = file->ctx;
        s->written = (uint64_t)(length < 0 ? 0 : length);
    }
    /* HTTP/1.1 without a length: chunks, framed here unless the engine's
     * library frames them. HTTP/1.0 without a length: the close ends it. */
    s->chunked = !bodiless && length < 0 && http11 &&
                 !(srv->caps & SRV_ENGINE_CAP_LIB_FRAMING);
    if (!bodiless && length < 0 && req->major == 1 && req->minor == 0)
        req->close_after = true;
    srv__claim_answer(req, false);
    pthread_mutex_unlock(&req->mu);
    srv__deliver(req);
    return 0;
}
