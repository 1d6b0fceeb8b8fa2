/*
 * route-lookup: a microbenchmark of the router (core/router.c). For 10,
 * 100, 1000 and 10000 routes (literal, {param}, {*wildcard} and deeper
 * patterns mixed, as in tests/unit/test_router_patterns.c), it builds
 * requests for paths spread over every route and times the lookup: each
 * round builds a request (method, target), looks it up and frees it, and
 * the same without the lookup; the difference is the lookup. Single
 * thread, no sockets, no engine started.
 *   build/bench/route-lookup [iterations]      (default 1000000)
 */
#include "srv_core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void handler(srv_request *req, void *ctx)
{
    (void)req;
    (void)ctx;
}

/* Route i's pattern and a path only it matches. */
static void route_i(size_t i, char *pattern, char *path)
{
    switch (i % 4) {
    case 0:
        sprintf(pattern, "/r%zu", i);
        sprintf(path, "/r%zu", i);
        break;
    case 1:
        sprintf(pattern, "/r%zu/{id}", i);
        sprintf(path, "/r%zu/x%zu", i, i);
        break;
    case 2:
        sprintf(pattern, "/g%zu/m%zu/{*rest}", i / 10, i);
        sprintf(path, "/g%zu/m%zu/a/b", i / 10, i);
        break;
    default:
        sprintf(pattern, "/api/v1/{tenant}/r%zu/{id}", i);
        sprintf(path, "/api/v1/t/r%zu/%zu", i, i);
        break;
    }
}

/* ns per round over `iters` rounds; lookup or not. */
static double run(srv_server *srv, char (*paths)[96], size_t npaths, size_t iters, int lookup,
                  size_t *routed)
{
    uint64_t t0 = now_ns();
    for (size_t k = 0; k < iters; k++) {
        const char *p = paths[k % npaths];
        srv_request *req = srv__request_new(srv, NULL, 0);
        if (req == NULL || srv__request_set_method(req, "GET", 3) != 0 ||
            srv__request_set_target(req, p, strlen(p)) != 0) {
            fprintf(stderr, "route-lookup: cannot build a request for %s\n", p);
            exit(1);
        }
        if (lookup) {
            srv__router_lookup(req);
            *routed += req->route != NULL;
        }
        srv__request_unref(req);
    }
    return (double)(now_ns() - t0) / (double)iters;
}

int main(int argc, char **argv)
{
    size_t iters = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    static const size_t counts[] = {10, 100, 1000, 10000};
    printf("routes  lookup_ns  build+free_ns  routed\n");
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t n = counts[c];
        srv_server *srv = srv_server_new(srv_engine_default(), NULL);
        char pattern[96];
        char (*paths)[96] = malloc(n * sizeof *paths);
        if (srv == NULL || paths == NULL)
            return 1;
        for (size_t i = 0; i < n; i++) {
            route_i(i, pattern, paths[i]);
            if (srv_route(srv, "GET", pattern, handler, NULL) != 0) {
                fprintf(stderr, "route-lookup: cannot route %s\n", pattern);
                return 1;
            }
        }
        size_t routed = 0;
        run(srv, paths, n, iters / 10, 1, &routed); /* warm up */
        routed = 0;
        double base = run(srv, paths, n, iters, 0, &routed);
        double with = run(srv, paths, n, iters, 1, &routed);
        printf("%6zu  %9.1f  %13.1f  %zu/%zu\n", n, with - base, base, routed, iters);
        free(paths);
        srv_server_free(srv);
    }
    return 0;
}
