/*
 * Registering filters and response hooks (srv_filter_add,
 * srv_response_hook_add): checked here, kept by the router (global, per
 * prefix, per route; router.c builds each request's chain), run by
 * dispatch.c.
 */
#include "srv_core.h"

#include <string.h>

void srv_filter_opts_init_sized(srv_filter_opts *opts, size_t size)
{
    if (opts == NULL || size < SRV__FILTER_OPTS_MIN_SIZE || size > SRV__STRUCT_MAX_SIZE)
        return;
    memset(opts, 0, size);
    opts->size = size;
}

int srv_filter_add(srv_server *srv, const srv_filter_opts *opts)
{
    if (srv == NULL || opts == NULL || opts->size < SRV__FILTER_OPTS_MIN_SIZE ||
        opts->size > SRV__STRUCT_MAX_SIZE)
        return SRV_EINVAL;
    srv_filter_opts o;
    memset(&o, 0, sizeof o);
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    if (o.filter == NULL || (o.flags & ~(unsigned)SRV_FILTER_NONBLOCKING) != 0)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;
    bool route = o.route_method != NULL || o.route_path != NULL;
    if ((route && (o.route_method == NULL || o.route_path == NULL)) ||
        (route && o.prefix != NULL))
        return SRV_EINVAL;
    srv__filter f = {.fn = o.filter, .ctx = o.ctx, .flags = o.flags};
    if (o.prefix != NULL)
        return srv__router_add_prefix_filter(&srv->router, o.prefix, &f);
    if (route)
        return srv__router_add_route_filter(&srv->router, o.route_method, o.route_path, &f);
    return srv__router_add_filter(&srv->router, &f);
}

int srv_response_hook_add(srv_server *srv, srv_response_hook_fn fn, void *ctx)
{
    if (srv == NULL || fn == NULL)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;
    srv__hook h = {.fn = fn, .ctx = ctx};
    return srv__router_add_hook(&srv->router, &h);
}
