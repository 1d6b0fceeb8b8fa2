/* Routing table: exact method + exact decoded path, registered before
 * start and read-only afterwards (so lookups need no lock). */
#include "srv_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv__router_add(srv__router *r, const srv_route_opts *opts)
{
    const char *method = opts->method, *path = opts->path;
    if (method == NULL || path == NULL || opts->handler == NULL ||
        !srv__http_is_token(method, strlen(method)) || path[0] != '/' ||
        (opts->flags & ~(unsigned)SRV_ROUTE_NONBLOCKING) != 0)
        return SRV_EINVAL;
    for (size_t i = 0; i < r->count; i++)
        if (strcmp(r->routes[i].method, method) == 0 && strcmp(r->routes[i].path, path) == 0)
            return SRV_EEXIST;
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        srv__route *n = realloc(r->routes, cap * sizeof *n);
        if (n == NULL)
            return SRV_ENOMEM;
        r->routes = n;
        r->cap = cap;
    }
    srv__route *rt = &r->routes[r->count];
    rt->method = strdup(method);
    rt->path = strdup(path);
    if (rt->method == NULL || rt->path == NULL) {
        free(rt->method);
        free(rt->path);
        return SRV_ENOMEM;
    }
    rt->handler = opts->handler;
    rt->ctx = opts->ctx;
    rt->flags = opts->flags;
    r->count++;
    return 0;
}

size_t srv__router_count(const srv__router *r)
{
    return r->count;
}

void srv__router_at(const srv__router *r, size_t i, const char **method, const char **path)
{
    *method = r->routes[i].method;
    *path = r->routes[i].path;
}

size_t srv__router_index(const srv__router *r, const srv__route *rt)
{
    return (size_t)(rt - r->routes);
}

const srv__route *srv__router_find(const srv__router *r, const char *method,
                                   const char *path, bool *path_known)
{
    const srv__route *get = NULL;
    *path_known = false;
    for (size_t i = 0; i < r->count; i++) {
        const srv__route *rt = &r->routes[i];
        if (strcmp(rt->path, path) != 0)
            continue;
        *path_known = true;
        if (strcmp(rt->method, method) == 0)
            return rt;
        if (strcmp(rt->method, "GET") == 0)
            get = rt;
    }
    return strcmp(method, "HEAD") == 0 ? get : NULL;
}

void srv__router_allow(const srv__router *r, const char *path, char *buf, size_t cap)
{
    size_t len = 0;
    bool get = false, head = false;
    buf[0] = '\0';
    for (size_t i = 0; i < r->count; i++) {
        const srv__route *rt = &r->routes[i];
        if (strcmp(rt->path, path) != 0)
            continue;
        get |= strcmp(rt->method, "GET") == 0;
        head |= strcmp(rt->method, "HEAD") == 0;
        int n = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", rt->method);
        if (n < 0 || (size_t)n >= cap - len)
            return;
        len += (size_t)n;
    }
    if (get && !head)
        snprintf(buf + len, cap - len, "%sHEAD", len ? ", " : "");
}

void srv__router_free(srv__router *r)
{
    for (size_t i = 0; i < r->count; i++) {
        free(r->routes[i].method);
        free(r->routes[i].path);
    }
    free(r->routes);
    r->routes = NULL;
    r->count = r->cap = 0;
}
