/* srv_server_stats: the counters every part of the core keeps, read in
 * one place (also by the metrics exposition, metrics.c). */
#include "srv_core.h"

#include <string.h>

void srv_server_stats_sized(const srv_server *srv, srv_stats *dst, size_t size)
{
    if (srv == NULL || dst == NULL || size > SRV__STRUCT_MAX_SIZE)
        return;
    srv_server *s = (srv_server *)srv;
    srv_stats st, *out = &st;
    memset(out, 0, sizeof *out);
    out->requests = atomic_load(&s->requests);
    out->responses_1xx = atomic_load(&s->responses[0]);
    out->responses_2xx = atomic_load(&s->responses[1]);
    out->responses_3xx = atomic_load(&s->responses[2]);
    out->responses_4xx = atomic_load(&s->responses[3]);
    out->responses_5xx = atomic_load(&s->responses[4]);
    out->timeouts = atomic_load(&s->timeouts);
    out->dropped = atomic_load(&s->dropped);
    out->connections_total = atomic_load(&s->connections_total);
    out->connections_open = atomic_load(&s->connections_open);
    out->workers_busy = atomic_load(&s->pool.busy);
    out->workers = atomic_load(&s->pool.alive_now);
    out->queued = atomic_load(&s->pool.queued_now);
    out->rejected = atomic_load(&s->pool.rejected);
    out->slow_nonblocking = atomic_load(&s->slow_nonblocking);
    out->requests_in_flight = srv__inflight_count(s);
    /* Only what the caller's srv_stats has room for; a newer, larger one
     * gets zeros past ours. */
    memset(dst, 0, size);
    memcpy(dst, out, size < sizeof st ? size : sizeof st);
}
