/*
 * route-lookup: a microbenchmark of the router (core/router.c). For 10,
 * 100, 1000 and 10000 routes (literal, {param}, {*wildcard} and deeper
 * patterns mixed, as in tests/unit/test_router_patterns.c), it builds
 * requests for paths spread over every route and times the lookup alone
 * (srv__router_lookup: the path checks, the walk, the parameters decoded
 * into the request's arena), in batches of 1000 requests built and freed
 * outside the timed part; five runs, median, min and max. Single thread,
 * no sockets, no engine started.
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

#define BATCH 1000

/* ns per lookup over `iters` lookups: batches of BATCH requests built (not
 * timed), looked up (timed), freed (not timed). */
static double run(srv_server *srv, char (*paths)[96], size_t npaths, size_t iters, size_t *routed)
{
    static srv_request *reqs[BATCH];
    uint64_t spent = 0;
    for (size_t done = 0; done < iters; done += BATCH) {
        for (size_t k = 0; k < BATCH; k++) {
            const char *p = paths[(done + k) % npaths];
            srv_request *req = srv__request_new(srv, NULL, 0);
            if (req == NULL || srv__request_set_method(req, "GET", 3) != 0 ||
                srv__request_set_target(req, p, strlen(p)) != 0) {
                fprintf(stderr, "route-lookup: cannot build a request for %s\n", p);
                exit(1);
            }
            reqs[k] = req;
        }
        uint64_t t0 = now_ns();
        for (size_t k = 0; k < BATCH; k++)
            srv__router_lookup(reqs[k]);
        spent += now_ns() - t0;
        for (size_t k = 0; k < BATCH; k++) {
            *routed += reqs[k]->route != NULL;
            srv__request_unref(reqs[k]);
        }
    }
    return (double)spent / (double)(iters / BATCH * BATCH);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t iters = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    static const size_t counts[] = {10, 100, 1000, 10000};
    printf("routes  median_ns     min_ns     max_ns  routed (5 runs of %zu lookups)\n", iters);
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
        run(srv, paths, n, iters / 10, &routed); /* warm up */
        double t[5];
        routed = 0;
        for (int r = 0; r < 5; r++)
            t[r] = run(srv, paths, n, iters, &routed);
        qsort(t, 5, sizeof t[0], cmp_double);
        printf("%6zu  %9.1f  %9.1f  %9.1f  %zu/%zu\n", n, t[2], t[0], t[4], routed, 5 * (iters / BATCH * BATCH));
        free(paths);
        srv_server_free(srv);
    }
    return 0;
}
