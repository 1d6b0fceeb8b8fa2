/*
 * The request object: built by an engine, routed here, answered exactly
 * once by the application (srv_respond) or by the core (404, 405, bad
 * input, timeout, shutdown), and freed when both sides let go (reference
 * count: one for the engine, one for the application while it holds it).
 */
#include "srv_core.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- arena ------------------------------------------------------------ */

struct srv__arena_chunk {
    srv__arena_chunk *next;
    size_t used;
    size_t cap;
    alignas(max_align_t) unsigned char data[];
};

/* A typical request (method, target, a dozen headers) fits the first,
 * small chunk; with thousands of requests waiting on an event-loop engine
 * (2700 in the benchmark) the difference is megabytes of RSS. */
#define SRV__ARENA_FIRST_CHUNK 1024
#define SRV__ARENA_CHUNK 4096

void *srv__arena_alloc(srv__arena *a, size_t n)
{
    n = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    srv__arena_chunk *c = a->chunks;
    if (c == NULL || c->cap - c->used < n) {
        size_t chunk = c == NULL ? SRV__ARENA_FIRST_CHUNK : SRV__ARENA_CHUNK;
        size_t cap = n > chunk ? n : chunk;
        c = malloc(sizeof *c + cap);
        if (c == NULL)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->chunks;
        a->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

char *srv__arena_strndup(srv__arena *a, const char *s, size_t n)
{
    char *p = srv__arena_alloc(a, n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void srv__arena_free(srv__arena *a)
{
    srv__arena_chunk *c = a->chunks;
    while (c != NULL) {
        srv__arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->chunks = NULL;
}

/* ---- small helpers ------------------------------------------------------ */

bool srv__header_has_token(const char *list, const char *token)
{
    size_t tlen = strlen(token);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *end = p;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if ((size_t)(end - start) == tlen && strncasecmp(start, token, tlen) == 0)
            return true;
    }
    return false;
}

bool srv__http_is_tchar(int c)
{
    return c > 0x20 && c < 0x7f && strchr("()<>@,;:\\\"/[]?={}", c) == NULL;
}

bool srv__http_is_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!srv__http_is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

/* ---- lifetime ------------------------------------------------------------ */

/* Decimal digits of v at p; returns the end. */
static char *srv__put_uint(char *p, unsigned v)
{
    char tmp[10];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

/* "IP:port" or "[IPv6]:port" into out (64 bytes), "-" when unknown. IPv4 by
 * hand: inet_ntop and snprintf were a sixth of a light request's CPU. */
static void srv__format_peer(char out[64], const struct sockaddr *peer, socklen_t peer_len)
{
    strcpy(out, "-");
    if (peer != NULL && peer->sa_family == AF_INET && peer_len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
        const unsigned char *a = (const unsigned char *)&in->sin_addr;
        char *p = out;
        for (int i = 0; i < 4; i++) {
            p = srv__put_uint(p, a[i]);
            *p++ = i < 3 ? '.' : ':';
        }
        p = srv__put_uint(p, ntohs(in->sin_port));
        *p = '\0';
    } else if (peer != NULL && peer->sa_family == AF_INET6 &&
               peer_len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
        char ip[INET6_ADDRSTRLEN];
        if (inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip) != NULL)
            snprintf(out, 64, "[%s]:%u", ip, ntohs(in6->sin6_port));
    }
}

srv_request *srv__request_new(srv_server *srv, const struct sockaddr *peer, socklen_t peer_len)
{
    srv_request *req = calloc(1, sizeof *req);
    if (req == NULL)
        return NULL;
    if (pthread_mutex_init(&req->mu, NULL) != 0) {
        free(req);
        return NULL;
    }
    req->srv = srv;
    atomic_init(&req->refs, 1);
    atomic_init(&req->engine_close, false);
    req->major = 1;
    req->minor = 1;
    req->keep_alive = -1;
    req->started_ms = srv__now_ms();
    srv__format_peer(req->peer, peer, peer_len);
    return req;
}

static void srv__kv_free(srv__kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].name);
        free(kv[i].value);
    }
    free(kv);
}

static void srv__request_unref(srv_request *req)
{
    if (atomic_fetch_sub(&req->refs, 1) != 1)
        return;
    srv__arena_free(&req->arena);
    free(req->body);
    srv__kv_free(req->app_headers, req->app_header_count);
    srv__kv_free(req->extra_header, req->extra_header ? 1 : 0);
    free(req->content_type);
    free(req->resp_body);
    free(req->head);
    pthread_mutex_destroy(&req->mu);
    free(req);
}

/* One of the counters srv_server_stop waits on drops; the request path
 * takes no lock unless the stopping thread waits and this reached 0. */
static void srv__counter_drop(srv_server *srv, atomic_uint *counter)
{
    if (atomic_fetch_sub(counter, 1) == 1 && atomic_load(&srv->waiter)) {
        pthread_mutex_lock(&srv->mu);
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
    }
}

void srv__request_release(srv_request *req)
{
    srv_server *srv = req->srv;
    bool counted = req->counted;
    srv__request_unref(req);
    if (counted)
        srv__counter_drop(srv, &srv->in_flight);
}

/* ---- the server's lists (srv->mu held) -------------------------------- */

static void srv__list_unlink(srv_server *srv, srv_request *req)
{
    if (req->list == SRV__LIST_PENDING) {
        if (req->prev)
            req->prev->next = req->next;
        else
            srv->pending_head = req->next;
        if (req->next)
            req->next->prev = req->prev;
        else
            srv->pending_tail = req->prev;
    } else if (req->list == SRV__LIST_ORPHAN) {
        if (req->prev)
            req->prev->next = req->next;
        else
            srv->orphans = req->next;
        if (req->next)
            req->next->prev = req->prev;
    }
    req->prev = req->next = NULL;
    req->list = SRV__LIST_NONE;
}

static void srv__list_orphan(srv_server *srv, srv_request *req)
{
    srv__list_unlink(srv, req);
    req->next = srv->orphans;
    if (srv->orphans)
        srv->orphans->prev = req;
    srv->orphans = req;
    req->list = SRV__LIST_ORPHAN;
}

/* The application lets go of a request it no longer answers. */
static void srv__request_app_done(srv_request *req)
{
    srv_server *srv = req->srv;
    pthread_mutex_lock(&srv->mu);
    srv__list_unlink(srv, req);
    pthread_mutex_unlock(&srv->mu);
    srv__request_unref(req);
}

void srv__server_drop_orphans(srv_server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        srv_request *req = srv->orphans ? srv->orphans : srv->pending_head;
        if (req != NULL)
            srv__list_unlink(srv, req);
        pthread_mutex_unlock(&srv->mu);
        if (req == NULL)
            return;
        srv__request_unref(req);
    }
}

/* ---- building (engine thread) -------------------------------------------- */

static int srv__head_grow(srv_request *req, size_t n)
{
    req->head_bytes += n;
    return req->head_bytes > req->srv->cfg.max_header_bytes ? 431 : 0;
}

int srv__request_set_method(srv_request *req, const char *method, size_t len)
{
    if (!srv__http_is_token(method, len))
        return 400;
    req->method = srv__arena_strndup(&req->arena, method, len);
    if (req->method == NULL)
        return SRV_ENOMEM;
    req->is_head = strcmp(req->method, "HEAD") == 0;
    return srv__head_grow(req, len + 1);
}

int srv__request_set_target(srv_request *req, const char *target, size_t len)
{
    int rc = srv__target_parse(req, target, len);
    if (rc != 0)
        return rc;
    return srv__head_grow(req, len + sizeof " HTTP/1.1\r\n" - 1);
}

void srv__request_set_version(srv_request *req, int major, int minor)
{
    req->major = major;
    req->minor = minor;
}

/*
 * Header rules, decided once here for every engine (docs/ENGINES.md,
 * "Header rules"): RFC 9110/9112 strictly where a lenient reading could
 * let a proxy and this server see different requests.
 */

/* At most this many header lines (nginx and h2o's picohttpparser use 100
 * too); more is 431 whatever their size. */
#define SRV__MAX_HEADERS 100

/* A field value may hold HTAB, SP, VCHAR and obs-text (RFC 9110 5.5):
 * every other control byte (NUL, CR, LF, DEL, \x01...) is a 400. */
static bool srv__value_ok(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

/* Framing headers are refused with blanks after the value: "chunked "
 * is chunked by RFC 9110, but libraries and proxies compare the raw bytes
 * (libmicrohttpd 0.9.75 then reads the body until close), so two readers
 * could frame the message differently. */
static bool srv__is_framing(const char *name, size_t len)
{
    return (len == 17 && strncasecmp(name, "Transfer-Encoding", 17) == 0) ||
           (len == 14 && strncasecmp(name, "Content-Length", 14) == 0);
}

int srv__request_add_header(srv_request *req, const char *name, size_t name_len,
                            const char *value, size_t value_len)
{
    if (!srv__http_is_token(name, name_len))
        return 400;
    while (value_len > 0 && (value[0] == ' ' || value[0] == '\t')) {
        value++;
        value_len--;
    }
    size_t raw_len = value_len;
    while (value_len > 0 && (value[value_len - 1] == ' ' || value[value_len - 1] == '\t'))
        value_len--;
    if (!srv__value_ok(value, value_len))
        return 400;
    if (raw_len != value_len && srv__is_framing(name, name_len))
        return 400;
    int rc = srv__head_grow(req, name_len + value_len + 4);
    if (rc != 0)
        return rc;
    if (req->header_count >= SRV__MAX_HEADERS)
        return 431;
    if (req->header_count == req->header_cap) {
        size_t cap = req->header_cap ? req->header_cap * 2 : 16;
        srv__kv *n = srv__arena_alloc(&req->arena, cap * sizeof *n);
        if (n == NULL)
            return SRV_ENOMEM;
        if (req->header_count)
            memcpy(n, req->headers, req->header_count * sizeof *n);
        req->headers = n;
        req->header_cap = cap;
    }
    srv__kv *kv = &req->headers[req->header_count];
    kv->name = srv__arena_strndup(&req->arena, name, name_len);
    kv->value = srv__arena_strndup(&req->arena, value, value_len);
    if (kv->name == NULL || kv->value == NULL)
        return SRV_ENOMEM;
    req->header_count++;
    return 0;
}

/* Parse a Content-Length value: digits only, no overflow. */
static bool srv__parse_length(const char *s, size_t *out)
{
    size_t v = 0;
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        if (v > (SIZE_MAX - 9) / 10)
            return false;
        v = v * 10 + (size_t)(*s - '0');
    }
    *out = v;
    return true;
}

int srv__request_headers_done(srv_request *req)
{
    bool http2 = req->major == 2 && req->minor == 0 &&
                 (req->srv->engine->caps & SRV_ENGINE_CAP_HTTP2);
    if (!(req->major == 1 && (req->minor == 0 || req->minor == 1)) && !http2)
        return 505;

    const char *te = NULL;
    bool have_length = false;
    size_t length = 0;
    unsigned hosts = 0;
    bool empty_host = false;
    for (size_t i = 0; i < req->header_count; i++) {
        const srv__kv *h = &req->headers[i];
        if (strcasecmp(h->name, "Transfer-Encoding") == 0) {
            if (te != NULL) /* repeated: a coding list we do not support */
                return 501;
            te = h->value;
        } else if (strcasecmp(h->name, "Content-Length") == 0) {
            size_t v;
            /* Repeated, even with the same value (RFC 9110 8.6 allows
             * either): a proxy may have read only one of them. */
            if (have_length || !srv__parse_length(h->value, &v))
                return 400;
            have_length = true;
            length = v;
        } else if (strcasecmp(h->name, "Host") == 0) {
            hosts++;
            empty_host = h->value[0] == '\0';
        } else if (strcasecmp(h->name, "Expect") == 0) {
            if (strcasecmp(h->value, "100-continue") != 0)
                return 417;
        }
    }
    /* RFC 9112 3.2: HTTP/1.1 needs exactly one Host (we also refuse an
     * empty one: our targets always have an authority); no HTTP/1.x
     * request may repeat it. HTTP/2 carries :authority instead. */
    if (!http2 && (hosts > 1 || (req->minor == 1 && (hosts == 0 || empty_host))))
        return 400;
    if (te != NULL && have_length)
        return 400; /* request smuggling: refuse rather than pick one */
    if (te != NULL && strcasecmp(te, "chunked") != 0)
        return 501;
    if (have_length && length > req->srv->cfg.max_body_bytes)
        return 413;
    return 0;
}

int srv__request_expects_continue(const srv_request *req)
{
    const char *e = srv_request_header(req, "Expect");
    return e != NULL && strcasecmp(e, "100-continue") == 0 && req->major == 1 && req->minor == 1;
}

int srv__request_append_body(srv_request *req, const void *data, size_t len)
{
    if (len > req->srv->cfg.max_body_bytes - req->body_len)
        return 413;
    if (req->body_len + len + 1 > req->body_cap) {
        size_t cap = req->body_cap ? req->body_cap : 1024;
        while (cap < req->body_len + len + 1)
            cap *= 2;
        char *n = realloc(req->body, cap);
        if (n == NULL)
            return SRV_ENOMEM;
        req->body = n;
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, data, len);
    req->body_len += len;
    req->body[req->body_len] = '\0';
    return 0;
}

void srv__request_set_engine_data(srv_request *req, void *data)
{
    req->engine_data = data;
}

void *srv__request_engine_data(const srv_request *req)
{
    return req->engine_data;
}

/* ---- answering ------------------------------------------------------------ */

/* Hand a final response to the engine (the winner of `answered` only). */
static void srv__deliver(srv_request *req)
{
    srv_server *srv = req->srv;
    int cls = req->status / 100;
    if (cls >= 1 && cls <= 5 && !req->cancelled) /* nothing is sent for a cancel */
        atomic_fetch_add(&srv->responses[cls - 1], 1);
    if (srv->cfg.access_log)
        srv__access_log(req);
    srv__engine_respond(srv, req);
    /* req may be gone now: the engine may have written and released it. */
    srv__counter_drop(srv, &srv->delivering);
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
    atomic_fetch_add(&srv->delivering, 1);
    if (req->list == SRV__LIST_NONE)
        return;
    pthread_mutex_lock(&srv->mu);
    if (by_core) {
        if (req->list == SRV__LIST_PENDING)
            srv__list_orphan(srv, req);
    } else {
        srv__list_unlink(srv, req);
    }
    pthread_mutex_unlock(&srv->mu);
}

/* The core answers with a short text body. Returns false when the request
 * was already answered. */
static bool srv__answer(srv_request *req, int status, bool close, const char *extra_name,
                        const char *extra_value, bool timeout)
{
    char body[96];
    int n = snprintf(body, sizeof body, "%d %s\n", status, srv__status_reason(status));
    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        pthread_mutex_unlock(&req->mu);
        return false;
    }
    req->status = status;
    req->close_after = close;
    req->core_answer = true;
    req->content_type = strdup("text/plain; charset=utf-8");
    req->resp_body = malloc((size_t)n);
    if (req->resp_body != NULL) {
        memcpy(req->resp_body, body, (size_t)n);
        req->resp_len = (size_t)n;
    }
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
static void srv__request_count(srv_request *req, bool complete)
{
    srv_server *srv = req->srv;
    if (complete)
        atomic_fetch_add(&srv->requests, 1);
    atomic_fetch_add(&srv->in_flight, 1);
    req->counted = true;
}

void srv__request_fail(srv_request *req, int status)
{
    if (status < 400 || status > 599)
        status = 500;
    srv__request_count(req, false);
    srv__answer(req, status, true, NULL, NULL, false);
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

static void srv__handler_call(srv_request *req)
{
    pthread_mutex_lock(&req->mu);
    bool answered = req->answered;
    pthread_mutex_unlock(&req->mu);
    if (answered) { /* timed out or shut down while it waited for a worker */
        srv__request_app_done(req);
        return;
    }
    req->route->handler(req, req->route->ctx);
}

static void srv__handler_job(srv_job *job)
{
    srv__handler_call((srv_request *)((char *)job - offsetof(srv_request, job)));
}

/* Join the pending list (srv->mu held): the timeout sweep and the final
 * phase of stop answer whatever the application has not. */
static void srv__list_pending(srv_server *srv, srv_request *req)
{
    /* Every request gets the same timeout, so appending keeps the list in
     * deadline order (a non-blocking handler's request joins when its
     * handler returns, at most a few ms late: the sweep's order holds). */
    req->deadline_ms = srv__now_ms() + srv->cfg.request_timeout_ms;
    req->list = SRV__LIST_PENDING;
    req->prev = srv->pending_tail;
    req->next = NULL;
    if (srv->pending_tail)
        srv->pending_tail->next = req;
    else
        srv->pending_head = req;
    srv->pending_tail = req;
}

static uint64_t srv__coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A non-blocking handler held its I/O thread too long: count it, and say
 * so once per server, since every connection of that thread waited. */
static void srv__report_slow(srv_request *req, uint64_t ms)
{
    srv_server *srv = req->srv;
    atomic_fetch_add(&srv->slow_nonblocking, 1);
    if (atomic_exchange(&srv->slow_reported, true))
        return;
    fprintf(stderr,
            "libsrv: the non-blocking handler of %s %s held its I/O thread for %llu ms "
            "(nonblocking_warn_ms is %u); a non-blocking handler must not block: register it "
            "without SRV_ROUTE_NONBLOCKING. Later cases are only counted "
            "(srv_stats.slow_nonblocking).\n",
            req->route->method, req->route->path, (unsigned long long)ms,
            srv->cfg.nonblocking_warn_ms);
}

/*
 * A non-blocking route: the handler runs here, on the engine's thread. It
 * usually answers before it returns, and then the request never touches
 * the server's lists or mutex. Otherwise it joins the pending list when
 * the handler returns, so the timeout and stop still answer it.
 */
static void srv__handler_inline(srv_request *req)
{
    srv_server *srv = req->srv;
    unsigned warn_ms = srv->cfg.nonblocking_warn_ms;
    /* The engine may write and release the request inside srv_respond:
     * hold it until the handler has returned. */
    atomic_fetch_add(&req->refs, 1);
    uint64_t t0 = warn_ms ? srv__coarse_ms() : 0;
    req->route->handler(req, req->route->ctx);
    if (warn_ms) {
        uint64_t took = srv__coarse_ms() - t0;
        if (took > warn_ms)
            srv__report_slow(req, took);
    }
    bool late = false;
    pthread_mutex_lock(&req->mu);
    if (!req->answered) {
        pthread_mutex_lock(&srv->mu);
        srv__list_pending(srv, req);
        late = srv->final_phase; /* stop's sweep may have passed already */
        pthread_mutex_unlock(&srv->mu);
    }
    pthread_mutex_unlock(&req->mu);
    if (late)
        srv__answer(req, 503, true, NULL, NULL, false);
    srv__request_unref(req);
}

/* Looks the route up (NULL: none, path_known says 405 rather than 404). */
static const srv__route *srv__request_find_route(srv_request *req, bool *path_known)
{
    const char *method = req->method ? req->method : "";
    const char *path = req->path ? req->path : "";
    return srv__router_find(&req->srv->router, method, path, path_known);
}

bool srv__request_nonblocking(srv_request *req)
{
    bool path_known;
    if (!req->route)
        req->route = srv__request_find_route(req, &path_known);
    /* No route: dispatch answers 404/405 itself, without a handler. */
    return !req->route || (req->route->flags & SRV_ROUTE_NONBLOCKING);
}

static void srv__request_route(srv_request *req, bool run_here)
{
    srv_server *srv = req->srv;
    srv__request_count(req, true);

    bool path_known = false;
    /* srv__request_nonblocking may have looked it up already. */
    const srv__route *rt = req->route ? req->route : srv__request_find_route(req, &path_known);
    if (rt == NULL) {
        if (path_known) {
            char allow[256];
            srv__router_allow(&srv->router, req->path ? req->path : "", allow, sizeof allow);
            srv__answer(req, 405, false, "Allow", allow, false);
        } else {
            srv__answer(req, 404, false, NULL, NULL, false);
        }
        return;
    }
    req->route = rt;

    if (rt->flags & SRV_ROUTE_NONBLOCKING) {
        if (atomic_load(&srv->final_phase)) {
            srv__answer(req, 503, true, NULL, NULL, false);
            return;
        }
        atomic_fetch_add(&req->refs, 1); /* the application's, until it answers */
        srv__handler_inline(req);
        return;
    }

    pthread_mutex_lock(&srv->mu);
    if (srv->final_phase) {
        pthread_mutex_unlock(&srv->mu);
        srv__answer(req, 503, true, NULL, NULL, false);
        return;
    }
    /* The application's reference, held until it answers. */
    atomic_fetch_add(&req->refs, 1);
    srv__list_pending(srv, req);
    pthread_mutex_unlock(&srv->mu);

    if (run_here) {
        srv__handler_call(req);
        return;
    }
    req->job.run = srv__handler_job;
    if (srv__pool_submit(srv, &req->job) != 0) {
        /* Shut down, or max_queued requests already wait: a quick 503
         * rather than a queue without bound. */
        srv__answer(req, 503, true, NULL, NULL, false);
        srv__request_app_done(req);
    }
}

void srv__request_dispatch(srv_request *req)
{
    srv__request_route(req, false);
}

void srv__request_run(srv_request *req)
{
    srv__request_route(req, true);
}

/* Answer each request in `reqs` (each holding a temporary reference). */
static void srv__answer_list(srv_request **reqs, size_t n, int status, bool close, bool timeout)
{
    for (size_t i = 0; i < n; i++) {
        srv__answer(reqs[i], status, close, NULL, NULL, timeout);
        srv__request_unref(reqs[i]);
    }
}

/* Collect up to `cap` pending requests (all of them when !expired_only,
 * else those past their deadline), each with a temporary reference. */
static size_t srv__collect_pending(srv_server *srv, srv_request **out, size_t cap,
                                   bool expired_only, uint64_t now)
{
    size_t n = 0;
    pthread_mutex_lock(&srv->mu);
    for (srv_request *r = srv->pending_head; r != NULL && n < cap; r = r->next) {
        if (expired_only && r->deadline_ms > now)
            break;
        atomic_fetch_add(&r->refs, 1);
        out[n++] = r;
    }
    pthread_mutex_unlock(&srv->mu);
    return n;
}

#define SRV__BATCH 256

void srv__server_sweep(void *arg)
{
    srv_server *srv = arg;
    srv_request *batch[SRV__BATCH];
    size_t n;
    do {
        n = srv__collect_pending(srv, batch, SRV__BATCH, true, srv__now_ms());
        srv__answer_list(batch, n, 503, false, true);
    } while (n == SRV__BATCH);
}

void srv__server_answer_all(srv_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    atomic_store(&srv->final_phase, true);
    pthread_mutex_unlock(&srv->mu);

    srv_request *batch[SRV__BATCH];
    size_t n;
    do {
        n = srv__collect_pending(srv, batch, SRV__BATCH, false, 0);
        srv__answer_list(batch, n, 503, true, false);
    } while (n == SRV__BATCH);

    /* Answers being handed over right now (an application's srv_respond
     * that won the race) must reach the engine before it stops. */
    atomic_store(&srv->waiter, true);
    pthread_mutex_lock(&srv->mu);
    while (atomic_load(&srv->delivering) > 0)
        pthread_cond_wait(&srv->cv, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
}

/* ---- public: responses ------------------------------------------------------ */

static bool srv__is_framing_header(const char *name)
{
    static const char *const framing[] = {"Content-Length", "Transfer-Encoding", "Connection",
                                          "Date", "Content-Type", "Keep-Alive", "Upgrade"};
    for (size_t i = 0; i < sizeof framing / sizeof framing[0]; i++)
        if (strcasecmp(name, framing[i]) == 0)
            return true;
    return false;
}

int srv_set_header(srv_request *req, const char *name, const char *value)
{
    if (req == NULL || name == NULL || value == NULL)
        return SRV_EINVAL;
    if (!srv__http_is_token(name, strlen(name)) || srv__is_framing_header(name))
        return SRV_EHEADER;
    for (const char *p = value; *p; p++)
        if (*p == '\r' || *p == '\n')
            return SRV_EHEADER;
    char *n = strdup(name), *v = strdup(value);
    if (n == NULL || v == NULL) {
        free(n);
        free(v);
        return SRV_ENOMEM;
    }
    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        bool cancelled = req->cancelled; /* the client left: dropped, not an error */
        pthread_mutex_unlock(&req->mu);
        free(n);
        free(v);
        return cancelled ? 0 : SRV_ETIMEDOUT;
    }
    if (req->app_header_count == req->app_header_cap) {
        size_t cap = req->app_header_cap ? req->app_header_cap * 2 : 8;
        srv__kv *grown = realloc(req->app_headers, cap * sizeof *grown);
        if (grown == NULL) {
            pthread_mutex_unlock(&req->mu);
            free(n);
            free(v);
            return SRV_ENOMEM;
        }
        req->app_headers = grown;
        req->app_header_cap = cap;
    }
    req->app_headers[req->app_header_count].name = n;
    req->app_headers[req->app_header_count].value = v;
    req->app_header_count++;
    pthread_mutex_unlock(&req->mu);
    return 0;
}

int srv_respond(srv_request *req, int status, const char *content_type, const void *body,
                size_t len)
{
    if (req == NULL)
        return SRV_EINVAL;
    bool bad = status < 200 || status > 599 || (body == NULL && len > 0);
    if (content_type != NULL)
        for (const char *p = content_type; *p; p++)
            bad |= *p == '\r' || *p == '\n';
    srv_server *srv = req->srv;

    pthread_mutex_lock(&req->mu);
    if (req->answered) {
        /* srv.h: a client that went away makes the response "dropped safely" (0). */
        int rc = req->cancelled ? 0 : SRV_ETIMEDOUT;
        pthread_mutex_unlock(&req->mu);
        atomic_fetch_add(&srv->dropped, 1);
        srv__request_app_done(req);
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
    req->content_type = content_type ? strdup(content_type) : NULL;
    if (len > 0) {
        req->resp_body = malloc(len);
        if (req->resp_body != NULL) {
            memcpy(req->resp_body, body, len);
            req->resp_len = len;
        } else {
            req->status = 500;
        }
    }
    srv__claim_answer(req, false);
    pthread_mutex_unlock(&req->mu);

    srv__deliver(req);
    srv__request_unref(req); /* the application's reference */
    return bad ? SRV_EINVAL : 0;
}

/* ---- public: request accessors ---------------------------------------------- */

const char *srv_request_method(const srv_request *req)
{
    return req->method ? req->method : "";
}

const char *srv_request_path(const srv_request *req)
{
    return req->path ? req->path : "";
}

const char *srv_request_target(const srv_request *req)
{
    return req->target ? req->target : "";
}

const char *srv_request_query(const srv_request *req, const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < req->query_count; i++)
        if (strcmp(req->query[i].name, name) == 0)
            return req->query[i].value;
    return NULL;
}

size_t srv_request_query_count(const srv_request *req)
{
    return req->query_count;
}

int srv_request_query_at(const srv_request *req, size_t index, const char **name,
                         const char **value)
{
    if (index >= req->query_count)
        return SRV_EINVAL;
    if (name)
        *name = req->query[index].name;
    if (value)
        *value = req->query[index].value;
    return 0;
}

const char *srv_request_header(const srv_request *req, const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < req->header_count; i++)
        if (strcasecmp(req->headers[i].name, name) == 0)
            return req->headers[i].value;
    return NULL;
}

size_t srv_request_header_count(const srv_request *req)
{
    return req->header_count;
}

int srv_request_header_at(const srv_request *req, size_t index, const char **name,
                          const char **value)
{
    if (index >= req->header_count)
        return SRV_EINVAL;
    if (name)
        *name = req->headers[index].name;
    if (value)
        *value = req->headers[index].value;
    return 0;
}

const void *srv_request_body(const srv_request *req, size_t *len)
{
    if (len)
        *len = req->body_len;
    return req->body ? req->body : "";
}

const char *srv_request_peer(const srv_request *req)
{
    return req->peer;
}

const char *srv_request_protocol(const srv_request *req)
{
    if (req->major == 2)
        return "HTTP/2";
    return req->minor == 0 ? "HTTP/1.0" : "HTTP/1.1";
}

srv_server *srv_request_server(const srv_request *req)
{
    return req->srv;
}
