/*
 * Readiness (srv_config.ready_path): a built-in route a load balancer or a
 * Kubernetes readiness probe polls. 200 while the server is running and
 * every registered check passes; 503 before the start completes, during
 * the drain phase of a stop (srv_config.drain_ms: the server still serves
 * everything else, so the balancer moves traffic away before the listener
 * closes) and from the moment the stop begins, or when a check fails.
 * Spring Boot's readiness health group, and the preStop delay built in.
 */
#include "srv_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv__ready_check {
    char *name;
    srv_ready_check_fn fn;
    void *ctx;
};

int srv_ready_check_add(srv_server *srv, const char *name, srv_ready_check_fn check, void *ctx)
{
    if (srv == NULL || name == NULL || name[0] == '\0' || check == NULL)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;
    struct srv__ready_check *grown =
        realloc(srv->ready_checks, (srv->ready_check_count + 1) * sizeof *grown);
    if (grown == NULL)
        return SRV_ENOMEM;
    srv->ready_checks = grown;
    char *copy = strdup(name);
    if (copy == NULL)
        return SRV_ENOMEM;
    grown[srv->ready_check_count++] = (struct srv__ready_check){copy, check, ctx};
    return 0;
}

/* Why the server is not ready (into why), or NULL when it is. */
static const char *srv__not_ready(const srv_server *srv, char *why, size_t cap)
{
    int state = atomic_load(&srv->state);
    if (state == SRV__NEW)
        return "starting";
    if (state != SRV__RUNNING)
        return "stopping";
    if (atomic_load(&srv->draining))
        return "draining";
    for (size_t i = 0; i < srv->ready_check_count; i++) {
        const struct srv__ready_check *c = &srv->ready_checks[i];
        char reason[256] = "";
        if (c->fn(c->ctx, reason, sizeof reason) != 0) {
            snprintf(why, cap, "%s: %s", c->name, reason[0] ? reason : "failed");
            return why;
        }
    }
    return NULL;
}

int srv_server_ready(const srv_server *srv)
{
    char why[320];
    return srv != NULL && srv__not_ready(srv, why, sizeof why) == NULL;
}

static void srv__ready_handler(srv_request *req, void *ctx)
{
    srv_server *srv = ctx;
    char why[320], body[400];
    const char *no = srv__not_ready(srv, why, sizeof why);
    int n = snprintf(body, sizeof body, no ? "not ready: %s\n" : "ready\n", no);
    /* A probe must never be answered from a cache. */
    srv_set_header(req, "Cache-Control", "no-store");
    srv_respond(req, no ? 503 : 200, "text/plain; charset=utf-8", body,
                n > 0 && (size_t)n < sizeof body ? (size_t)n : strlen(body));
}

int srv__health_start(srv_server *srv)
{
    const char *path = srv->cfg.ready_path;
    if (path == NULL || path[0] == '\0')
        return 0;
    if (path[0] != '/') {
        srv__server_set_error(srv, "ready_path \"%s\" must start with '/'", path);
        return SRV_EINVAL;
    }
    /* Cheap and never blocking - unless the application's checks may
     * (a database ping): then on a worker like any blocking handler. */
    srv_route_opts o = {.size = sizeof o, .method = "GET", .path = path,
                        .handler = srv__ready_handler, .ctx = srv,
                        .flags = srv->ready_check_count == 0 ? SRV_ROUTE_NONBLOCKING : 0};
    int rc = srv__router_add(&srv->router, &o);
    if (rc != 0)
        srv__server_set_error(srv, "ready_path \"%s\": %s", path,
                              rc == SRV_EEXIST ? "the application routes GET on that path "
                                                 "already: choose another ready_path"
                                               : srv_strerror(rc));
    return rc;
}

void srv__health_drain(srv_server *srv)
{
    unsigned ms = srv->cfg.drain_ms;
    if (ms == 0)
        return;
    atomic_store(&srv->draining, true);
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

void srv__health_free(srv_server *srv)
{
    for (size_t i = 0; i < srv->ready_check_count; i++)
        free(srv->ready_checks[i].name);
    free(srv->ready_checks);
    srv->ready_checks = NULL;
    srv->ready_check_count = 0;
    free(srv->ready_path);
    srv->ready_path = NULL;
}

int srv__health_init(srv_server *srv)
{
    atomic_init(&srv->draining, false);
    return srv__config_own(&srv->ready_path, &srv->cfg.ready_path);
}
