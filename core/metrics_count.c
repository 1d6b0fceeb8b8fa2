/*
 * The counting half of the metrics (metrics.c renders them): a table of
 * relaxed atomic counters sized at start, one slot per route (routes are
 * fixed by then) and one for requests no route matched. The request path
 * adds to it once per response, without a lock or an allocation.
 */
#include "srv_core.h"

#include <stdlib.h>

/* Seconds, the client libraries' default buckets (bound_us below is the
 * same in microseconds, for the request path). */
const double srv__metrics_buckets[SRV__METRICS_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                            0.5,   1,    2.5,   5,    10};

int srv__metrics_start(srv_server *srv)
{
    size_t routes = srv__router_count(&srv->router);
    struct srv__metrics *m = calloc(1, sizeof *m + (routes + 1) * sizeof m->route[0]);
    if (m == NULL)
        return SRV_ENOMEM;
    m->n = routes + 1;
    for (size_t i = 0; i < routes; i++)
        srv__router_at(&srv->router, i, &m->route[i].method, &m->route[i].path);
    /* A start retried after a failed one (routes may have been added in
     * between) builds the table again. */
    free(srv->metrics);
    srv->metrics = m;
    return 0;
}

void srv__metrics_free(srv_server *srv)
{
    free(srv->metrics);
    srv->metrics = NULL;
}

void srv__metrics_observe(const srv_request *req)
{
    struct srv__metrics *m = req->srv->metrics;
    if (m == NULL)
        return;
    size_t i = req->route ? srv__router_index(&req->srv->router, req->route) : m->n - 1;
    if (i >= m->n)
        i = m->n - 1;
    srv__route_metrics *rm = &m->route[i];
    int cls = req->status / 100;
    if (cls >= 1 && cls <= 5)
        atomic_fetch_add_explicit(&rm->by_class[cls - 1], 1, memory_order_relaxed);
    uint64_t us = (srv__now_ms() - req->started_ms) * 1000u;
    static const uint64_t bound_us[SRV__METRICS_BUCKETS] = {
        5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
    size_t b = 0;
    while (b < SRV__METRICS_BUCKETS && us > bound_us[b])
        b++;
    atomic_fetch_add_explicit(&rm->bucket[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rm->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes_in, req->head_bytes + req->body_len,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes_out, srv__response_bytes_sent(req), memory_order_relaxed);
}

uint64_t srv__response_bytes_sent(const srv_request *req)
{
    if (req->stream != NULL)
        return req->stream->body_sent;
    return req->is_head ? 0 : req->resp_len;
}
