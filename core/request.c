/*
 * The request object: created and built by an engine (method, target,
 * headers, body: the core's header rules), read by the application
 * through the accessors, freed when its last reference goes. Answering
 * and the server's bookkeeping are inflight.c's; routing is dispatch.c's.
 */
#include "srv_core.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* The peer's address kept binary (srv_request.peer_addr): its texts wait
 * for srv__request_peer_text. */
static void srv__peer_keep(srv_request *req, const struct sockaddr *peer, socklen_t peer_len)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (peer != NULL && peer->sa_family == AF_INET && peer_len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
        memcpy(req->peer_addr, &in->sin_addr, 4);
        req->peer_family = AF_INET;
        req->peer_port = ntohs(in->sin_port);
    } else if (peer != NULL && peer->sa_family == AF_INET6 &&
               peer_len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
        const unsigned char *a = (const unsigned char *)&in6->sin6_addr;
        req->peer_v6 = true;
        req->peer_port = ntohs(in6->sin6_port);
        if (memcmp(a, mapped, 12) == 0) { /* IPv4 through a dual-stack socket */
            memcpy(req->peer_addr, a + 12, 4);
            req->peer_family = AF_INET;
        } else {
            memcpy(req->peer_addr, a, 16);
            req->peer_family = AF_INET6;
        }
    }
}

/* "IP:port" or "[IPv6]:port" into peer, the address alone into client
 * (an IPv4-mapped one as IPv4), "-" when unknown; 64 bytes each. IPv4 by
 * hand: inet_ntop and snprintf were a sixth of a light request's CPU. */
static void srv__peer_format(const srv_request *req, char peer[64], char client[64])
{
    strcpy(peer, "-");
    strcpy(client, "-");
    if (req->peer_family == 0)
        return;
    if (!req->peer_v6) {
        char *p = peer;
        for (int i = 0; i < 4; i++) {
            p = srv__put_uint(p, req->peer_addr[i]);
            *p++ = i < 3 ? '.' : ':';
        }
        size_t n = (size_t)(p - 1 - peer);
        p = srv__put_uint(p, req->peer_port);
        *p = '\0';
        memcpy(client, peer, n);
        client[n] = '\0';
        return;
    }
    unsigned char a[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (req->peer_family == AF_INET)
        memcpy(a + 12, req->peer_addr, 4);
    else
        memcpy(a, req->peer_addr, 16);
    char ip[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, a, ip, sizeof ip) != NULL)
        snprintf(peer, 64, "[%s]:%u", ip, req->peer_port);
    if (inet_ntop(req->peer_family, req->peer_addr, client, 64) == NULL)
        strcpy(client, "-");
}

/* The peer's two texts, "peer\0client\0", made by whichever thread asks
 * first (the others then use its copy); NULL when memory ran out. */
static const char *srv__peer_texts(const srv_request *req)
{
    srv_request *r = (srv_request *)req; /* the texts are made once, atomically */
    char *t = atomic_load_explicit(&r->peer_texts, memory_order_acquire);
    if (t != NULL)
        return t;
    char peer[64], client[64];
    srv__peer_format(req, peer, client);
    size_t pn = strlen(peer) + 1, cn = strlen(client) + 1;
    char *mine = malloc(pn + cn);
    if (mine == NULL)
        return NULL;
    memcpy(mine, peer, pn);
    memcpy(mine + pn, client, cn);
    char *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&r->peer_texts, &none, mine,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        free(mine);
        return none; /* another thread's, the same text */
    }
    return mine;
}

const char *srv__request_peer_text(const srv_request *req)
{
    const char *t = srv__peer_texts(req);
    return t != NULL ? t : "-";
}

const char *srv__request_client_text(const srv_request *req)
{
    if (req->client != NULL)
        return req->client;
    const char *t = srv__peer_texts(req);
    return t != NULL ? t + strlen(t) + 1 : "-";
}

srv_request *srv__request_new(srv_server *srv, const struct sockaddr *peer, socklen_t peer_len)
{
    srv_request *req = srv__zalloc(sizeof *req);
    if (req == NULL)
        return NULL;
    if (pthread_mutex_init(&req->mu, NULL) != 0) {
        free(req);
        return NULL;
    }
    req->srv = srv;
    atomic_init(&req->refs, 1);
    atomic_init(&req->engine_close, false);
    atomic_init(&req->body_touch_ms, 0);
    req->major = 1;
    req->minor = 1;
    req->keep_alive = -1;
    req->started_ms = srv__now_ms();
    srv__peer_keep(req, peer, peer_len);
    return req;
}

void srv__kv_free(srv__kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].name);
        free(kv[i].value);
    }
    free(kv);
}

void srv__request_unref(srv_request *req)
{
    if (atomic_fetch_sub(&req->refs, 1) != 1)
        return;
    srv__arena_free(&req->arena);
    if (req->parsed != NULL) { /* cookie.c's */
        srv__kv_free(req->parsed->cookies, req->parsed->cookie_count);
        srv__kv_free(req->parsed->form, req->parsed->form_count);
        free(req->parsed);
    }
    free(req->body);
    srv__kv_free(req->app_headers, req->app_header_count);
    srv__kv_free(req->extra_header, req->extra_header ? 1 : 0);
    if (!req->resp_inline) {
        free(req->content_type);
        free(req->resp_body);
    }
    free(req->head);
    free(atomic_load_explicit(&req->peer_texts, memory_order_relaxed));
    if (req->stream != NULL) {
        if (req->stream->has_file && req->stream->file_release != NULL)
            req->stream->file_release(req->stream->file_ctx);
        free(req->stream->buf);
        free(req->stream);
    }
    pthread_mutex_destroy(&req->mu);
    free(req);
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
        return 500; /* out of memory */
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
    return srv__http_no_ctl(value, len, true);
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
            return 500; /* out of memory */
        if (req->header_count)
            memcpy(n, req->headers, req->header_count * sizeof *n);
        req->headers = n;
        req->header_cap = cap;
    }
    srv__kv *kv = &req->headers[req->header_count];
    kv->name = srv__arena_strndup(&req->arena, name, name_len);
    kv->value = srv__arena_strndup(&req->arena, value, value_len);
    if (kv->name == NULL || kv->value == NULL)
        return 500; /* out of memory */
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

/* The body limit of a request whose head is complete: a streamed-body
 * route's own (0: none), else max_body_bytes. The route is looked up only
 * when some route streams its body. */
static uint64_t srv__body_limit(srv_request *req)
{
    srv_server *srv = req->srv;
    if (srv->router.stream_body_routes > 0) {
        srv__router_lookup(req);
        const srv__route *rt = req->route;
        if (req->routing.status == 0 && rt != NULL && (rt->flags & SRV_ROUTE_STREAM_BODY) &&
            (srv->caps & SRV_ENGINE_CAP_STREAM_BODY))
            return rt->max_body ? rt->max_body : UINT64_MAX;
    }
    return srv->cfg.max_body_bytes;
}

int srv__request_headers_done(srv_request *req)
{
    req->head_done = true; /* whole, if not acceptable: the core's answer gets the hooks' headers */
    bool http2 = req->major == 2 && req->minor == 0 &&
                 (req->srv->caps & SRV_ENGINE_CAP_HTTP2);
    if (!(req->major == 1 && (req->minor == 0 || req->minor == 1)) && !http2)
        return 505;

    const char *te = NULL;
    bool have_length = false;
    size_t length = 0;
    unsigned hosts = 0;
    bool empty_host = false;
    for (size_t i = 0; i < req->header_count; i++) {
        const srv__kv *h = &req->headers[i];
        /* By the first letter: one compare at most, none for most names. */
        switch (h->name[0] | 0x20) {
        case 't':
            if (strcasecmp(h->name, "Transfer-Encoding") != 0)
                break;
            if (te != NULL) /* repeated: a coding list we do not support */
                return 501;
            te = h->value;
            break;
        case 'c':
            if (strcasecmp(h->name, "Content-Length") != 0)
                break;
            /* Repeated, even with the same value (RFC 9110 8.6 allows
             * either): a proxy may have read only one of them. */
            size_t v;
            if (have_length || !srv__parse_length(h->value, &v))
                return 400;
            have_length = true;
            length = v;
            break;
        case 'h':
            if (strcasecmp(h->name, "Host") != 0)
                break;
            hosts++;
            empty_host = h->value[0] == '\0';
            break;
        case 'e':
            if (strcasecmp(h->name, "Expect") == 0 && strcasecmp(h->value, "100-continue") != 0)
                return 417;
            break;
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
    if (have_length && length > srv__body_limit(req))
        return 413;
    req->te_chunked = te != NULL;
    req->content_length = have_length ? length : 0;
    return 0;
}

int srv__request_framing(const srv_request *req, uint64_t *length)
{
    *length = req->te_chunked ? 0 : req->content_length;
    return req->te_chunked;
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
            return 500; /* out of memory */
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

/* ---- public: response headers ------------------------------------------------------ */

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
    req->app_headers[req->app_header_count].kept = req->routing.marking;
    req->app_header_count++;
    pthread_mutex_unlock(&req->mu);
    return 0;
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
    int first = name[0] | 0x20; /* a cheap look first: most names differ there */
    for (size_t i = 0; i < req->header_count; i++)
        if ((req->headers[i].name[0] | 0x20) == first && strcasecmp(req->headers[i].name, name) == 0)
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
    return srv__request_peer_text(req);
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
