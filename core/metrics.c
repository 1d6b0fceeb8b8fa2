/*
 * Prometheus metrics: the server's state in the text exposition format
 * 0.0.4 (srv_metrics_render, and the built-in route at
 * srv_config.metrics_path). Per route: requests by status class and a
 * latency histogram with fixed buckets, counted by metrics_count.c. A
 * scrape reads the counters as they are (each number is exact, a scrape is
 * not a snapshot across them, as with every Prometheus client library).
 */
#include "srv_core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the text format ------------------------------------------------- */

typedef struct srv__out {
    char *buf;
    size_t cap, len; /* len counts what would have been written */
} srv__out;

static void srv__put(srv__out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void srv__put(srv__out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

/* A label value: backslash, double quote and newline escaped (0.0.4). */
static void srv__label(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            out[o++] = '\\';
            out[o++] = *s;
        } else if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = '\0';
}

static void srv__family(srv__out *o, const char *name, const char *type, const char *help)
{
    srv__put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

size_t srv_metrics_render(const srv_server *srv, char *buf, size_t cap)
{
    srv__out o = {buf, buf ? cap : 0, 0};
    if (srv == NULL) {
        if (cap)
            buf[0] = '\0';
        return 0;
    }
    srv_stats st;
    srv_server_stats(srv, &st);
    const struct srv__metrics *m = srv->metrics;

    srv__family(&o, "srv_info", "gauge", "The engine serving and the libsrv version.");
    srv__put(&o, "srv_info{engine=\"%s\",version=\"%s\"} 1\n", srv->engine->name,
             SRV_VERSION_STRING);

    srv__family(&o, "srv_requests_total", "counter",
                "Responses the server produced, by route, method and status class.");
    for (size_t i = 0; m != NULL && i < m->n; i++) {
        const srv__route_metrics *rm = &m->route[i];
        char path[512], method[64];
        srv__label(path, sizeof path, rm->path ? rm->path : "");
        srv__label(method, sizeof method, rm->method ? rm->method : "");
        for (int c = 0; c < 5; c++) {
            unsigned long long v = atomic_load_explicit(&rm->by_class[c], memory_order_relaxed);
            if (v != 0 || (rm->path != NULL && c == 1)) /* every route shows its 2xx, even 0 */
                srv__put(&o, "srv_requests_total{route=\"%s\",method=\"%s\",status=\"%dxx\"} %llu\n",
                         path, method, c + 1, v);
        }
    }

    srv__family(&o, "srv_request_duration_seconds", "histogram",
                "Time from a request's first byte to its response handed to the engine (millisecond resolution), by route.");
    for (size_t i = 0; m != NULL && i < m->n; i++) {
        const srv__route_metrics *rm = &m->route[i];
        char path[512], method[64];
        srv__label(path, sizeof path, rm->path ? rm->path : "");
        srv__label(method, sizeof method, rm->method ? rm->method : "");
        unsigned long long cum = 0;
        for (size_t b = 0; b <= SRV__METRICS_BUCKETS; b++) {
            cum += atomic_load_explicit(&rm->bucket[b], memory_order_relaxed);
            char le[32];
            double ub = b < SRV__METRICS_BUCKETS ? srv__metrics_buckets[b] : 0;
            if (b < SRV__METRICS_BUCKETS && ub == (double)(long)ub)
                snprintf(le, sizeof le, "%.1f", ub); /* "1.0", as the client libraries */
            else if (b < SRV__METRICS_BUCKETS)
                snprintf(le, sizeof le, "%g", ub);
            else
                snprintf(le, sizeof le, "+Inf");
            srv__put(&o, "srv_request_duration_seconds_bucket{route=\"%s\",method=\"%s\","
                         "le=\"%s\"} %llu\n", path, method, le, cum);
        }
        srv__put(&o, "srv_request_duration_seconds_sum{route=\"%s\",method=\"%s\"} %.6f\n", path,
                 method, (double)atomic_load_explicit(&rm->sum_us, memory_order_relaxed) / 1e6);
        srv__put(&o, "srv_request_duration_seconds_count{route=\"%s\",method=\"%s\"} %llu\n",
                 path, method, cum);
    }

    srv__family(&o, "srv_requests_in_flight", "gauge", "Requests received, not yet answered.");
    srv__put(&o, "srv_requests_in_flight %u\n", st.requests_in_flight);
    srv__family(&o, "srv_connections_open", "gauge", "Connections open now.");
    srv__put(&o, "srv_connections_open %u\n", st.connections_open);
    srv__family(&o, "srv_connections_total", "counter", "Connections accepted since start.");
    srv__put(&o, "srv_connections_total %llu\n", (unsigned long long)st.connections_total);
    srv__family(&o, "srv_workers", "gauge", "Worker threads alive, by state.");
    srv__put(&o, "srv_workers{state=\"busy\"} %u\n", st.workers_busy);
    srv__put(&o, "srv_workers{state=\"idle\"} %u\n",
             st.workers > st.workers_busy ? st.workers - st.workers_busy : 0);
    srv__family(&o, "srv_queue_length", "gauge", "Jobs waiting for a worker.");
    srv__put(&o, "srv_queue_length %u\n", st.queued);
    srv__family(&o, "srv_queue_rejected_total", "counter",
                "Requests answered 503 because max_queued jobs were waiting.");
    srv__put(&o, "srv_queue_rejected_total %llu\n", (unsigned long long)st.rejected);
    srv__family(&o, "srv_timeouts_total", "counter",
                "Requests the core answered 503 because the handler did not respond in time.");
    srv__put(&o, "srv_timeouts_total %llu\n", (unsigned long long)st.timeouts);
    srv__family(&o, "srv_responses_dropped_total", "counter",
                "Late srv_respond calls discarded (the request was already answered).");
    srv__put(&o, "srv_responses_dropped_total %llu\n", (unsigned long long)st.dropped);
    srv__family(&o, "srv_slow_nonblocking_total", "counter",
                "Non-blocking handler calls that held their I/O thread past nonblocking_warn_ms.");
    srv__put(&o, "srv_slow_nonblocking_total %llu\n", (unsigned long long)st.slow_nonblocking);
    srv__family(&o, "srv_received_bytes_total", "counter",
                "Request heads and bodies received (as parsed, bodies de-chunked).");
    srv__put(&o, "srv_received_bytes_total %llu\n",
             m ? (unsigned long long)atomic_load(&m->bytes_in) : 0ULL);
    srv__family(&o, "srv_sent_body_bytes_total", "counter", "Response bodies sent.");
    srv__put(&o, "srv_sent_body_bytes_total %llu\n",
             m ? (unsigned long long)atomic_load(&m->bytes_out) : 0ULL);
    return o.len;
}

/* The built-in route: rendered into a buffer sized by a first pass. */
static void srv__metrics_handler(srv_request *req, void *ctx)
{
    srv_server *srv = ctx;
    size_t need = srv_metrics_render(srv, NULL, 0) + 4096; /* room for a request or two more */
    char *buf = malloc(need);
    if (buf == NULL) {
        srv_respond(req, 503, "text/plain", "out of memory\n", 14);
        return;
    }
    size_t len = srv_metrics_render(srv, buf, need);
    if (len >= need)
        len = need - 1;
    srv_set_header(req, "Cache-Control", "no-store");
    srv_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", buf, len);
    free(buf);
}

int srv__metrics_route(srv_server *srv)
{
    const char *path = srv->cfg.metrics_path;
    if (path == NULL || path[0] == '\0')
        return 0;
    if (path[0] != '/') {
        srv__server_set_error(srv, "metrics_path \"%s\" must start with '/'", path);
        return SRV_EINVAL;
    }
    srv_route_opts o = {.size = sizeof o, .method = "GET", .path = path,
                        .handler = srv__metrics_handler, .ctx = srv,
                        .flags = SRV_ROUTE_NONBLOCKING /* reads counters, never blocks */};
    int rc = srv__router_add(&srv->router, &o);
    if (rc != 0)
        srv__server_set_error(srv, "metrics_path \"%s\": %s", path,
                              rc == SRV_EEXIST ? "the application routes GET on that path "
                                                 "already: choose another metrics_path"
                                               : srv_strerror(rc));
    return rc;
}
