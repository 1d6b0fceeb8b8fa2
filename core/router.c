/*
 * Routing: a trie of path segments (literal children sorted for a binary
 * search, at most one {param} and one {*wildcard} child per node, the
 * methods routed at each node), the filters and the response hooks.
 * Registered before start and read-only afterwards, so lookups take no
 * lock. A lookup walks the request's raw path (a %2F stays inside its
 * segment) and backtracks in precedence order: literal, then {param},
 * then {*wildcard}; its cost depends on the path's depth, not on the
 * number of routes. docs/ARCHITECTURE.md, "Routing".
 */
#include "srv_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pattern's segments at most (the lookup recurses once per segment). */
#define SRV__MAX_PATTERN_SEGMENTS 128

struct srv__rnode {
    char *seg; /* a literal child's decoded segment (NUL-free) */
    size_t seg_len;
    srv__rnode **lits; /* literal children, sorted by srv__seg_cmp */
    size_t nlits, caplits;
    srv__rnode *param; /* {name} */
    srv__rnode *wild;  /* {*name}: always a leaf */
    srv__route **routes; /* methods routed here, in registration order */
    size_t nroutes;
};

/* ---- registration ----------------------------------------------------------- */

static int srv__seg_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen;
}

/* Index of the literal child `seg`, or -(insertion point) - 1. */
static long srv__lit_find(const srv__rnode *n, const char *seg, size_t len)
{
    size_t lo = 0, hi = n->nlits;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = srv__seg_cmp(n->lits[mid]->seg, n->lits[mid]->seg_len, seg, len);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -(long)lo - 1;
}

static srv__rnode *srv__lit_child(srv__rnode *n, const char *seg, size_t len)
{
    long i = srv__lit_find(n, seg, len);
    if (i >= 0)
        return n->lits[i];
    size_t at = (size_t)(-i - 1);
    if (n->nlits == n->caplits) {
        size_t cap = n->caplits ? n->caplits * 2 : 4;
        srv__rnode **grown = realloc(n->lits, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        n->lits = grown;
        n->caplits = cap;
    }
    srv__rnode *c = calloc(1, sizeof *c);
    char *s = malloc(len + 1);
    if (c == NULL || s == NULL) {
        free(c);
        free(s);
        return NULL;
    }
    memcpy(s, seg, len);
    s[len] = '\0';
    c->seg = s;
    c->seg_len = len;
    memmove(n->lits + at + 1, n->lits + at, (n->nlits - at) * sizeof *n->lits);
    n->lits[at] = c;
    n->nlits++;
    return c;
}

static bool srv__name_ok(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return false;
    }
    return true;
}

enum srv__seg_kind { SRV__SEG_LIT, SRV__SEG_PARAM, SRV__SEG_WILD, SRV__SEG_BAD };

/* What pattern segment s[0..n) is; *name and *name_len for a parameter. */
static enum srv__seg_kind srv__seg_kind(const char *s, size_t n, const char **name,
                                        size_t *name_len)
{
    if (n >= 2 && s[0] == '{' && s[n - 1] == '}') {
        bool wild = n >= 3 && s[1] == '*';
        *name = s + (wild ? 2 : 1);
        *name_len = n - (wild ? 3 : 2);
        if (!srv__name_ok(*name, *name_len))
            return SRV__SEG_BAD;
        return wild ? SRV__SEG_WILD : SRV__SEG_PARAM;
    }
    if (memchr(s, '{', n) != NULL || memchr(s, '}', n) != NULL)
        return SRV__SEG_BAD;
    /* A request with a dot segment is refused before routing: such a
     * pattern could never match. */
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return SRV__SEG_BAD;
    return SRV__SEG_LIT;
}

static void srv__filter_release(srv__filter *f)
{
    if (f->free_ctx != NULL)
        f->free_ctx(f->ctx);
}

static void srv__route_free(srv__route *rt)
{
    if (rt == NULL)
        return;
    for (size_t i = 0; i < rt->filter_count; i++)
        srv__filter_release(&rt->filters[i]);
    free(rt->filters);
    for (size_t i = 0; i < rt->param_count; i++)
        free(rt->params[i]);
    free(rt->params);
    free(rt->method);
    free(rt->path);
    free(rt);
}

/* Check the pattern and collect its parameter names (malloc'd). */
static int srv__pattern_parse(const char *path, srv__route *rt, size_t *depth)
{
    if (path[0] != '/')
        return SRV_EINVAL;
    size_t segs = 0;
    const char *p = path + 1;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (++segs > SRV__MAX_PATTERN_SEGMENTS)
            return SRV_EINVAL;
        const char *name;
        size_t name_len;
        enum srv__seg_kind k = srv__seg_kind(p, n, &name, &name_len);
        if (k == SRV__SEG_BAD || (k == SRV__SEG_WILD && slash != NULL))
            return SRV_EINVAL;
        rt->wildcard = k == SRV__SEG_WILD;
        if (k != SRV__SEG_LIT) {
            for (size_t i = 0; i < rt->param_count; i++)
                if (strlen(rt->params[i]) == name_len &&
                    memcmp(rt->params[i], name, name_len) == 0)
                    return SRV_EINVAL; /* a name given twice */
            char **grown = realloc(rt->params, (rt->param_count + 1) * sizeof *grown);
            if (grown == NULL)
                return SRV_ENOMEM;
            rt->params = grown;
            rt->params[rt->param_count] = strndup(name, name_len);
            if (rt->params[rt->param_count] == NULL)
                return SRV_ENOMEM;
            rt->param_count++;
        }
        if (slash == NULL)
            break;
        p = slash + 1;
    }
    *depth = segs;
    return 0;
}

/* The node the pattern leads to, created as needed (NULL: no memory). */
static srv__rnode *srv__node_for(srv__router *r, const char *path)
{
    if (r->root == NULL && (r->root = calloc(1, sizeof *r->root)) == NULL)
        return NULL;
    srv__rnode *n = r->root;
    const char *p = path + 1;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        const char *name;
        size_t name_len;
        switch (srv__seg_kind(p, len, &name, &name_len)) {
        case SRV__SEG_PARAM:
            if (n->param == NULL && (n->param = calloc(1, sizeof *n->param)) == NULL)
                return NULL;
            n = n->param;
            break;
        case SRV__SEG_WILD:
            if (n->wild == NULL && (n->wild = calloc(1, sizeof *n->wild)) == NULL)
                return NULL;
            n = n->wild;
            break;
        default:
            if ((n = srv__lit_child(n, p, len)) == NULL)
                return NULL;
            break;
        }
        if (slash == NULL)
            return n;
        p = slash + 1;
    }
}

int srv__router_add(srv__router *r, const srv_route_opts *opts)
{
    const char *method = opts->method, *path = opts->path;
    if (method == NULL || path == NULL || opts->handler == NULL ||
        !srv__http_is_token(method, strlen(method)) || path[0] != '/' ||
        (opts->flags & ~(unsigned)(SRV_ROUTE_NONBLOCKING | SRV_ROUTE_STREAM_BODY)) != 0 ||
        (opts->max_body_bytes != 0 && !(opts->flags & SRV_ROUTE_STREAM_BODY)))
        return SRV_EINVAL;
    srv__route *rt = calloc(1, sizeof *rt);
    if (rt == NULL)
        return SRV_ENOMEM;
    size_t depth = 0;
    int rc = srv__pattern_parse(path, rt, &depth);
    if (rc != 0) {
        srv__route_free(rt);
        return rc;
    }
    /* Nodes made for a refused route stay: empty, they match nothing. */
    srv__rnode *n = srv__node_for(r, path);
    if (n == NULL) {
        srv__route_free(rt);
        return SRV_ENOMEM;
    }
    for (size_t i = 0; i < n->nroutes; i++)
        if (strcmp(n->routes[i]->method, method) == 0) {
            srv__route_free(rt);
            return SRV_EEXIST;
        }
    srv__route **grown = realloc(n->routes, (n->nroutes + 1) * sizeof *grown);
    if (grown != NULL)
        n->routes = grown;
    if (grown != NULL && r->count == r->all_cap) {
        size_t cap = r->all_cap ? r->all_cap * 2 : 16;
        srv__route **all = realloc(r->all, cap * sizeof *all);
        if (all == NULL)
            grown = NULL;
        else {
            r->all = all;
            r->all_cap = cap;
        }
    }
    rt->method = strdup(method);
    rt->path = strdup(path);
    if (grown == NULL || rt->method == NULL || rt->path == NULL) {
        srv__route_free(rt);
        return SRV_ENOMEM;
    }
    rt->handler = opts->handler;
    rt->ctx = opts->ctx;
    rt->flags = opts->flags;
    rt->max_body = opts->max_body_bytes;
    if (rt->flags & SRV_ROUTE_STREAM_BODY)
        r->stream_body_routes++;
    n->routes[n->nroutes++] = rt;
    rt->index = r->count;
    r->all[r->count++] = rt;
    if (depth > r->depth)
        r->depth = depth;
    return 0;
}

size_t srv__router_count(const srv__router *r)
{
    return r->count;
}

void srv__router_at(const srv__router *r, size_t i, const char **method, const char **path)
{
    *method = r->all[i]->method;
    *path = r->all[i]->path;
}

size_t srv__router_index(const srv__router *r, const srv__route *rt)
{
    (void)r;
    return rt->index;
}

int srv__router_add_filter(srv__router *r, const srv__filter *f)
{
    srv__filter *grown = realloc(r->filters, (r->filter_count + 1) * sizeof *grown);
    if (grown == NULL)
        return SRV_ENOMEM;
    r->filters = grown;
    r->filters[r->filter_count++] = *f;
    if (!(f->flags & SRV_FILTER_NONBLOCKING))
        r->filters_block = true;
    return 0;
}

/* The node a valid pattern leads to, NULL when no route made it. */
static srv__rnode *srv__node_find(const srv__router *r, const char *path)
{
    srv__rnode *n = r->root;
    const char *p = path + 1;
    while (n != NULL) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        const char *name;
        size_t name_len;
        switch (srv__seg_kind(p, len, &name, &name_len)) {
        case SRV__SEG_PARAM:
            n = n->param;
            break;
        case SRV__SEG_WILD:
            n = slash == NULL ? n->wild : NULL;
            break;
        case SRV__SEG_LIT: {
            long i = srv__lit_find(n, p, len);
            n = i >= 0 ? n->lits[i] : NULL;
            break;
        }
        default:
            return NULL;
        }
        if (slash == NULL)
            return n;
        p = slash + 1;
    }
    return NULL;
}

int srv__router_add_route_filter(srv__router *r, const char *method, const char *pattern,
                                 const srv__filter *f)
{
    if (method == NULL || pattern == NULL || pattern[0] != '/')
        return SRV_EINVAL;
    srv__rnode *n = srv__node_find(r, pattern);
    srv__route *rt = NULL;
    for (size_t i = 0; n != NULL && i < n->nroutes; i++)
        if (strcmp(n->routes[i]->method, method) == 0)
            rt = n->routes[i];
    if (rt == NULL)
        return SRV_ENOROUTE;
    srv__filter *grown = realloc(rt->filters, (rt->filter_count + 1) * sizeof *grown);
    if (grown == NULL)
        return SRV_ENOMEM;
    rt->filters = grown;
    rt->filters[rt->filter_count++] = *f;
    r->scoped = true;
    return 0;
}

/* A prefix is '/' and literal segments: no empty one inside, no dot
 * segment (never routed), no pattern syntax, no query. Its copy has no
 * trailing slash ("/api/" and "/api" are the same prefix). */
static int srv__prefix_norm(const char *prefix, char **out, size_t *nsegs)
{
    if (prefix == NULL || prefix[0] != '/')
        return SRV_EINVAL;
    size_t len = strlen(prefix);
    if (len > 1 && prefix[len - 1] == '/' && prefix[--len - 1] == '/')
        return SRV_EINVAL; /* "//", "/a//" */
    size_t segs = 0;
    for (const char *p = prefix + 1; p < prefix + len;) {
        const char *slash = memchr(p, '/', (size_t)(prefix + len - p));
        size_t n = slash ? (size_t)(slash - p) : (size_t)(prefix + len - p);
        if (n == 0 || memchr(p, '{', n) || memchr(p, '}', n) || memchr(p, '?', n) ||
            memchr(p, '#', n) || (n == 1 && p[0] == '.') ||
            (n == 2 && p[0] == '.' && p[1] == '.'))
            return SRV_EINVAL;
        segs++;
        p += n + 1;
    }
    if (len == 1)
        len = 0; /* "/": every path */
    *out = strndup(prefix, len);
    if (*out == NULL)
        return SRV_ENOMEM;
    *nsegs = segs;
    return 0;
}

int srv__router_add_prefix_filter(srv__router *r, const char *prefix, const srv__filter *f)
{
    char *norm;
    size_t nsegs;
    int rc = srv__prefix_norm(prefix, &norm, &nsegs);
    if (rc != 0)
        return rc;
    srv__pfilter *grown = realloc(r->pfilters, (r->pfilter_count + 1) * sizeof *grown);
    if (grown == NULL) {
        free(norm);
        return SRV_ENOMEM;
    }
    r->pfilters = grown;
    /* Shortest first; among equals, registration order. */
    size_t at = r->pfilter_count;
    while (at > 0 && r->pfilters[at - 1].nsegs > nsegs)
        at--;
    memmove(r->pfilters + at + 1, r->pfilters + at, (r->pfilter_count - at) * sizeof *grown);
    r->pfilters[at] = (srv__pfilter){.prefix = norm, .nsegs = nsegs, .f = *f};
    r->pfilter_count++;
    r->scoped = true;
    return 0;
}

void srv__router_set_compress(srv__router *r, struct srv__compress *c,
                              void (*free_fn)(struct srv__compress *c))
{
    if (r->compress != NULL)
        r->compress_free(r->compress);
    r->compress = c;
    r->compress_free = free_fn;
}

int srv__router_add_hook(srv__router *r, const srv__hook *h)
{
    srv__hook *grown = realloc(r->hooks, (r->hook_count + 1) * sizeof *grown);
    if (grown == NULL)
        return SRV_ENOMEM;
    r->hooks = grown;
    r->hooks[r->hook_count++] = *h;
    return 0;
}

struct srv__owned {
    void *ctx;
    void (*free_fn)(void *ctx);
};

int srv__router_own(srv__router *r, void *ctx, void (*free_fn)(void *ctx))
{
    struct srv__owned *grown = realloc(r->owned, (r->owned_count + 1) * sizeof *grown);
    if (grown == NULL)
        return SRV_ENOMEM;
    r->owned = grown;
    r->owned[r->owned_count++] = (struct srv__owned){ctx, free_fn};
    return 0;
}

static void srv__node_free(srv__rnode *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nlits; i++)
        srv__node_free(n->lits[i]);
    free(n->lits);
    srv__node_free(n->param);
    srv__node_free(n->wild);
    for (size_t i = 0; i < n->nroutes; i++)
        srv__route_free(n->routes[i]);
    free(n->routes);
    free(n->seg);
    free(n);
}

void srv__router_free(srv__router *r)
{
    srv__node_free(r->root);
    free(r->all);
    for (size_t i = 0; i < r->filter_count; i++)
        srv__filter_release(&r->filters[i]);
    free(r->filters);
    for (size_t i = 0; i < r->pfilter_count; i++) {
        srv__filter_release(&r->pfilters[i].f);
        free(r->pfilters[i].prefix);
    }
    free(r->pfilters);
    free(r->hooks);
    if (r->compress != NULL)
        r->compress_free(r->compress);
    for (size_t i = 0; i < r->owned_count; i++)
        r->owned[i].free_fn(r->owned[i].ctx);
    free(r->owned);
    memset(r, 0, sizeof *r);
}

/* ---- lookup (the engine's thread that owns the request) --------------------- */

static int srv__hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The raw path of a request-target (origin or absolute form), without
 * query or fragment; false for "*" and anything else without one. */
static bool srv__raw_path(const char *target, const char **path, size_t *len)
{
    const char *p = target;
    if (p[0] != '/') {
        const char *sep = strstr(p, "://");
        if (sep == NULL)
            return false;
        p = sep + 3;
        while (*p && *p != '/' && *p != '?' && *p != '#')
            p++;
        if (*p != '/') { /* "http://h" or "http://h?q": the path is "/" */
            *path = "/";
            *len = 1;
            return true;
        }
    }
    *path = p;
    *len = strcspn(p, "?#");
    return true;
}

/* The number of dots when raw segment s[0..n) decodes to dots only ("..",
 * ".%2e", "%2E%2e"), else 0. */
static int srv__dot_segment(const char *s, size_t n)
{
    int dots = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] == '.')
            i++;
        else if (s[i] == '%' && i + 2 < n && s[i + 1] == '2' && (s[i + 2] | 0x20) == 'e')
            i += 3;
        else
            return 0;
        if (++dots > 2)
            return 0;
    }
    return dots;
}

/* The raw path's rules: valid %-escapes, no %00, no dot segment. */
static bool srv__path_ok(const char *p, size_t n)
{
    size_t seg = 1;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || p[i] == '/') {
            if (i > seg && srv__dot_segment(p + seg, i - seg) != 0)
                return false;
            seg = i + 1;
        } else if (p[i] == '%') {
            if (!(i + 2 < n && srv__hexval(p[i + 1]) >= 0 && srv__hexval(p[i + 2]) >= 0))
                return false;
            if (p[i + 1] == '0' && p[i + 2] == '0')
                return false;
        }
    }
    return true;
}

/* Decode a checked raw span into out (n + 1 bytes); the decoded length. */
static size_t srv__decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            out[o++] = (char)(srv__hexval(s[i + 1]) * 16 + srv__hexval(s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return o;
}

/* A request segment: raw span and (for depths the trie has) decoded. */
typedef struct srv__seg {
    const char *raw;
    size_t raw_len;
    char *dec;
    size_t dec_len;
} srv__seg;

typedef struct srv__walk {
    const char *path; /* raw path */
    size_t len;
    srv__seg *segs; /* up to the trie's depth */
    size_t nsegs;   /* request segments split (<= trie depth + 1) */
    bool more;      /* segments beyond nsegs exist */
    const char *method;
    bool head, options;
    /* captures: raw spans of {param} and {*wild} along the current branch */
    const char **cap;
    size_t *cap_len;
    size_t ncap;
    /* result */
    const srv__route *found;
    bool known; /* some pattern matched the path */
    /* collecting Allow */
    bool collect;
    const char **methods;
    size_t nmethods, capmethods;
    bool oom;
} srv__walk;

static const srv__route *srv__node_method(const srv__rnode *n, const char *method, bool head)
{
    const srv__route *get = NULL;
    for (size_t i = 0; i < n->nroutes; i++) {
        if (strcmp(n->routes[i]->method, method) == 0)
            return n->routes[i];
        if (head && strcmp(n->routes[i]->method, "GET") == 0)
            get = n->routes[i];
    }
    return get;
}

static void srv__collect(srv__walk *w, const char *m)
{
    for (size_t i = 0; i < w->nmethods; i++)
        if (strcmp(w->methods[i], m) == 0)
            return;
    if (w->nmethods == w->capmethods) {
        size_t cap = w->capmethods ? w->capmethods * 2 : 8;
        const char **grown = realloc(w->methods, cap * sizeof *grown);
        if (grown == NULL) {
            w->oom = true;
            return;
        }
        w->methods = grown;
        w->capmethods = cap;
    }
    w->methods[w->nmethods++] = m;
}

/* A node the path ends at: true to stop the walk (a route was found). */
static bool srv__terminal(srv__walk *w, const srv__rnode *n)
{
    if (n->nroutes == 0)
        return false;
    w->known = true;
    if (w->collect) {
        for (size_t i = 0; i < n->nroutes; i++)
            srv__collect(w, n->routes[i]->method);
        return false;
    }
    const srv__route *rt = srv__node_method(n, w->method, w->head);
    if (rt == NULL)
        return false;
    w->found = rt;
    return true;
}

/* Depth-first in precedence order from node n at request segment i. */
static bool srv__walk_node(srv__walk *w, const srv__rnode *n, size_t i)
{
    if (i == w->nsegs && !w->more)
        return srv__terminal(w, n); /* the path ends here */
    if (i >= w->nsegs)
        return false; /* deeper than any pattern (only a wildcard reaches it) */
    const srv__seg *s = &w->segs[i];
    if (n->nlits > 0) {
        long k = srv__lit_find(n, s->dec, s->dec_len);
        if (k >= 0 && srv__walk_node(w, n->lits[k], i + 1))
            return true;
    }
    if (n->param != NULL && s->raw_len > 0) {
        w->cap[w->ncap] = s->raw;
        w->cap_len[w->ncap++] = s->raw_len;
        if (srv__walk_node(w, n->param, i + 1))
            return true;
        w->ncap--;
    }
    if (n->wild != NULL) {
        w->cap[w->ncap] = s->raw;
        w->cap_len[w->ncap++] = (size_t)(w->path + w->len - s->raw);
        if (srv__terminal(w, n->wild))
            return true;
        w->ncap--;
    }
    return false;
}

/* Bytes srv__walk_path needs for a raw path of len bytes. */
static size_t srv__walk_size(const srv__router *r, size_t len)
{
    size_t max = r->depth + 1;
    return max * (sizeof(srv__seg) + sizeof(const char *) + sizeof(size_t)) + len + max;
}

/* Split the raw path into w->segs (in `block`, srv__walk_size bytes) and
 * walk the trie. */
static void srv__walk_path(const srv__router *r, srv__walk *w, void *block, const char *path,
                           size_t len)
{
    size_t max = r->depth + 1;
    w->path = path;
    w->len = len;
    w->segs = block;
    w->cap = (const char **)(w->segs + max);
    w->cap_len = (size_t *)(w->cap + max);
    char *dec = (char *)(w->cap_len + max);
    const char *p = path + 1, *end = path + len;
    for (;;) {
        if (w->nsegs == max) {
            w->more = true;
            break;
        }
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t n = slash ? (size_t)(slash - p) : (size_t)(end - p);
        srv__seg *s = &w->segs[w->nsegs++];
        s->raw = p;
        s->raw_len = n;
        s->dec = dec;
        s->dec_len = srv__decode(p, n, dec);
        dec += s->dec_len + 1;
        if (slash == NULL)
            break;
        p = slash + 1;
    }
    if (r->root != NULL)
        srv__walk_node(w, r->root, 0);
}

/* A wildcard's decoded value must not hold a dot segment ("..%2F.." made
 * one from a single raw segment). */
static bool srv__value_has_dots(const char *v)
{
    for (;;) {
        size_t n = strcspn(v, "/");
        if ((n == 1 && v[0] == '.') || (n == 2 && v[0] == '.' && v[1] == '.'))
            return true;
        if (v[n] == '\0')
            return false;
        v += n + 1;
    }
}

/* Whether the checked raw path p[0..n) lies under prefix (segments of
 * literal text, compared with the request's %-decoded segments the way
 * literal route segments are, so "/%61pi/x" is under "/api" and
 * "/api%2Fx" is not: an encoded slash stays inside its segment). */
static bool srv__under_prefix(const char *p, size_t n, const char *prefix)
{
    const char *end = p + n;
    p++; /* the leading '/' */
    while (*prefix != '\0') {
        prefix++; /* its '/' */
        if (p > end)
            return false; /* the path has fewer segments */
        size_t plen = strcspn(prefix, "/");
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *seg_end = slash ? slash : end;
        size_t i = 0;
        for (const char *q = p; q < seg_end; i++) {
            char c = *q;
            if (c == '%') {
                c = (char)(srv__hexval(q[1]) * 16 + srv__hexval(q[2]));
                q += 3;
            } else {
                q++;
            }
            if (i >= plen || prefix[i] != c)
                return false;
        }
        if (i != plen)
            return false;
        prefix += plen;
        p = seg_end + 1;
    }
    return true;
}

/* req's filter chain: the global filters, then those of the prefixes the
 * path lies under (shortest first), then the route's own. Only when some
 * prefix or route filter exists; otherwise the global list serves as is. */
static void srv__chain_build(srv_request *req, const char *path, size_t len,
                             const srv__route *route)
{
    srv__routing *rt = &req->routing;
    const srv__router *r = &req->srv->router;
    size_t max = r->filter_count + r->pfilter_count + (route ? route->filter_count : 0);
    if (!r->scoped || max == r->filter_count)
        return;
    const srv__filter **chain = srv__arena_alloc(&req->arena, max * sizeof *chain);
    if (chain == NULL) {
        rt->status = 500;
        return;
    }
    size_t k = 0;
    bool blocks = false;
    for (size_t i = 0; i < r->filter_count; i++)
        chain[k++] = &r->filters[i];
    for (size_t i = 0; path != NULL && i < r->pfilter_count; i++)
        if (srv__under_prefix(path, len, r->pfilters[i].prefix))
            chain[k++] = &r->pfilters[i].f;
    for (size_t i = 0; route != NULL && i < route->filter_count; i++)
        chain[k++] = &route->filters[i];
    for (size_t i = r->filter_count; i < k; i++)
        blocks |= !(chain[i]->flags & SRV_FILTER_NONBLOCKING);
    rt->chain = chain;
    rt->chain_len = k;
    rt->chain_blocks = r->filters_block || blocks;
}

void srv__router_lookup(srv_request *req)
{
    srv__routing *rt = &req->routing;
    if (rt->done)
        return;
    rt->done = true;
    req->route = NULL;
    rt->chain = NULL;
    rt->chain_len = req->srv->router.filter_count;
    rt->chain_blocks = req->srv->router.filters_block;
    const char *path;
    size_t len;
    if (req->target == NULL || !srv__raw_path(req->target, &path, &len)) {
        rt->status = 404;
        return;
    }
    if (!srv__path_ok(path, len)) {
        rt->status = 400;
        return;
    }
    srv__walk w = {0};
    w.method = req->method ? req->method : "";
    w.head = strcmp(w.method, "HEAD") == 0;
    w.options = strcmp(w.method, "OPTIONS") == 0;
    const srv__router *r = &req->srv->router;
    void *block = srv__arena_alloc(&req->arena, srv__walk_size(r, len));
    if (block == NULL) {
        rt->status = 500;
        return;
    }
    srv__walk_path(r, &w, block, path, len);
    if (w.found == NULL) {
        rt->status = !w.known ? 404 : w.options ? 204 : 405;
        srv__chain_build(req, path, len, NULL);
        return;
    }
    const srv__route *route = w.found;
    if (route->param_count > 0) {
        rt->values = srv__arena_alloc(&req->arena, route->param_count * sizeof *rt->values);
        if (rt->values == NULL) {
            rt->status = 500;
            return;
        }
        for (size_t i = 0; i < route->param_count; i++) {
            char *v = srv__arena_alloc(&req->arena, w.cap_len[i] + 1);
            if (v == NULL) {
                rt->status = 500;
                return;
            }
            srv__decode(w.cap[i], w.cap_len[i], v);
            rt->values[i] = v;
        }
        /* Only the last parameter can be a wildcard. */
        if (route->wildcard && srv__value_has_dots(rt->values[route->param_count - 1])) {
            rt->status = 400;
            return;
        }
    }
    req->route = route;
    rt->status = 0;
    srv__chain_build(req, path, len, route);
    if (rt->status != 0)
        req->route = NULL;
}

char *srv__router_allow(const srv_request *req)
{
    srv__walk w = {0};
    w.collect = true;
    w.method = "";
    const char *path;
    size_t len;
    /* Malloc'd: this may run on a worker, and the arena is the engine
     * thread's. */
    void *block = NULL;
    if (req->target != NULL && srv__raw_path(req->target, &path, &len)) {
        const srv__router *r = &req->srv->router;
        block = malloc(srv__walk_size(r, len));
        if (block == NULL)
            w.oom = true;
        else
            srv__walk_path(r, &w, block, path, len);
    }
    bool head = false, options = false;
    size_t cap = 32;
    for (size_t i = 0; i < w.nmethods; i++) {
        head |= strcmp(w.methods[i], "HEAD") == 0;
        options |= strcmp(w.methods[i], "OPTIONS") == 0;
        cap += strlen(w.methods[i]) + 2;
    }
    char *out = w.oom ? NULL : malloc(cap);
    if (out != NULL) {
        size_t o = 0;
        out[0] = '\0';
        for (size_t i = 0; i < w.nmethods; i++) {
            o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? ", " : "", w.methods[i]);
            if (strcmp(w.methods[i], "GET") == 0 && !head)
                o += (size_t)snprintf(out + o, cap - o, ", HEAD");
        }
        if (!options) /* answered automatically */
            snprintf(out + o, cap - o, "%sOPTIONS", o ? ", " : "");
    }
    free(w.methods);
    free(block);
    return out;
}

/* ---- public: the route's parameters --------------------------------------- */

const char *srv_request_param(const srv_request *req, const char *name)
{
    if (req == NULL || name == NULL || req->route == NULL)
        return NULL;
    for (size_t i = 0; i < req->route->param_count; i++)
        if (strcmp(req->route->params[i], name) == 0)
            return req->routing.values[i];
    return NULL;
}

size_t srv_request_param_count(const srv_request *req)
{
    return req && req->route ? req->route->param_count : 0;
}

int srv_request_param_at(const srv_request *req, size_t index, const char **name,
                         const char **value)
{
    if (index >= srv_request_param_count(req))
        return SRV_EINVAL;
    if (name)
        *name = req->route->params[index];
    if (value)
        *value = req->routing.values[index];
    return 0;
}

const char *srv_request_route(const srv_request *req)
{
    return req && req->route ? req->route->path : NULL;
}
