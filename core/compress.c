/*
 * Response compression (srv_compression_set): gzip (zlib) for answers whose
 * Content-Type is in the configured list and whose body reaches the
 * minimum size, when the request accepts gzip, the way Spring Boot's
 * server.compression.* does. Applied by srv_respond to the whole body,
 * on the answering thread, before the answer is claimed.
 */
#include "srv_core.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

struct srv__compress {
    char *mime_types; /* normalised list: "text/html, application/json" */
    size_t min_size;
    int level;
};

void srv_compression_opts_init_sized(srv_compression_opts *opts, size_t size)
{
    if (opts == NULL || size < SRV__COMPRESSION_OPTS_MIN_SIZE || size > SRV__STRUCT_MAX_SIZE)
        return;
    memset(opts, 0, size);
    opts->size = size;
    opts->enabled = 1;
    opts->mime_types = "text/html, text/xml, text/plain, text/css, text/javascript, "
                       "application/javascript, application/json, application/xml";
    opts->min_size = 2048;
    opts->level = 6;
}

static void srv__compress_free(struct srv__compress *c)
{
    if (c == NULL)
        return;
    free(c->mime_types);
    free(c);
}

/* The next item of a comma-separated list, blanks trimmed. */
static bool srv__next_item(const char **p, const char **item, size_t *len)
{
    const char *s = *p;
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        if (*s == '\0')
            return false;
        const char *start = s;
        while (*s && *s != ',')
            s++;
        const char *end = s;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        *p = s;
        if (end > start) {
            *item = start;
            *len = (size_t)(end - start);
            return true;
        }
    }
}

/* "type/subtype" with tchars on both sides. */
static bool srv__mime_ok(const char *s, size_t n)
{
    const char *slash = memchr(s, '/', n);
    return slash != NULL && slash > s && (size_t)(slash - s) < n - 1 &&
           srv__http_is_token(s, (size_t)(slash - s)) &&
           srv__http_is_token(slash + 1, n - (size_t)(slash - s) - 1);
}

int srv_compression_set(srv_server *srv, const srv_compression_opts *opts)
{
    if (srv == NULL || opts == NULL || opts->size < SRV__COMPRESSION_OPTS_MIN_SIZE ||
        opts->size > SRV__STRUCT_MAX_SIZE)
        return SRV_EINVAL;
    srv_compression_opts o;
    srv_compression_opts_init(&o);
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    if (o.enabled && (o.mime_types == NULL || o.level < 1 || o.level > 9))
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;
    struct srv__compress *c = NULL;
    if (o.enabled) {
        c = calloc(1, sizeof *c);
        size_t cap = strlen(o.mime_types) + 1;
        char *list = malloc(cap);
        if (c == NULL || list == NULL) {
            free(c);
            free(list);
            return SRV_ENOMEM;
        }
        size_t out = 0, n, items = 0;
        const char *p = o.mime_types, *item;
        while (srv__next_item(&p, &item, &n)) {
            if (!srv__mime_ok(item, n)) {
                free(c);
                free(list);
                return SRV_EINVAL;
            }
            if (out)
                list[out - 1] = ','; /* "a,b": items joined by a comma */
            memcpy(list + out, item, n);
            out += n + 1;
            list[out - 1] = '\0';
            items++;
        }
        if (items == 0) {
            free(c);
            free(list);
            return SRV_EINVAL;
        }
        c->mime_types = list;
        c->min_size = o.min_size;
        c->level = o.level;
    }
    srv__router_set_compress(&srv->router, c, srv__compress_free);
    return 0;
}

/* Whether content_type's "type/subtype" (parameters aside) is listed. */
static bool srv__compressible(const struct srv__compress *c, const char *content_type)
{
    size_t n = strcspn(content_type, ";");
    while (n > 0 && (content_type[n - 1] == ' ' || content_type[n - 1] == '\t'))
        n--;
    const char *p = c->mime_types, *item;
    size_t len;
    while (srv__next_item(&p, &item, &len))
        if (len == n && strncasecmp(item, content_type, n) == 0)
            return true;
    return false;
}

/* A qvalue (RFC 9110 12.4.2: "0" ["." 0*3DIGIT] / "1" ["." 0*3"0"]) at
 * s[0..n) as 0..1000; -1 when malformed. */
static int srv__qvalue(const char *s, size_t n)
{
    if (n == 0 || (s[0] != '0' && s[0] != '1'))
        return -1;
    int v = 0, digits = 0;
    if (n > 1) {
        if (s[1] != '.' || n > 5)
            return -1;
        for (size_t i = 2; i < n; i++, digits++) {
            if (s[i] < '0' || s[i] > '9' || (s[0] == '1' && s[i] != '0'))
                return -1;
            v = v * 10 + (s[i] - '0');
        }
    }
    while (digits++ < 3)
        v *= 10;
    return s[0] == '1' ? 1000 : v;
}

void srv__accept_encoding_gzip(const char *value, int *gzip_q, int *star_q)
{
    const char *p = value, *item;
    size_t len;
    while (p != NULL && srv__next_item(&p, &item, &len)) {
        size_t name = 0;
        while (name < len && item[name] != ';' && item[name] != ' ' && item[name] != '\t')
            name++;
        int *slot = NULL;
        /* x-gzip is gzip (RFC 9110 8.4.1.3). */
        if ((name == 4 && strncasecmp(item, "gzip", 4) == 0) ||
            (name == 6 && strncasecmp(item, "x-gzip", 6) == 0))
            slot = gzip_q;
        else if (name == 1 && item[0] == '*')
            slot = star_q;
        if (slot == NULL)
            continue;
        /* Parameters: only q counts; a malformed one refuses the coding
         * (never compress on a guess). */
        int q = 1000;
        const char *s = item + name, *end = item + len;
        while (s < end) {
            while (s < end && (*s == ' ' || *s == '\t'))
                s++;
            if (s == end)
                break;
            if (*s != ';') {
                q = 0;
                break;
            }
            s++;
            while (s < end && (*s == ' ' || *s == '\t'))
                s++;
            const char *pe = s;
            while (pe < end && *pe != ';')
                pe++;
            const char *ve = pe;
            while (ve > s && (ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            if (ve - s >= 2 && (s[0] == 'q' || s[0] == 'Q') && s[1] == '=') {
                int v = srv__qvalue(s + 2, (size_t)(ve - s - 2));
                q = v < 0 ? 0 : v;
            }
            s = pe;
        }
        /* Listed twice: the lower counts (a refusal is never overridden). */
        if (*slot < 0 || q < *slot)
            *slot = q;
    }
}

bool srv__accepts_gzip(const srv_request *req)
{
    /* Several Accept-Encoding lines are one list (RFC 9110 5.3). */
    int gzip = -1, star = -1;
    for (size_t i = 0; i < srv_request_header_count(req); i++) {
        const char *name, *value;
        srv_request_header_at(req, i, &name, &value);
        if (strcasecmp(name, "Accept-Encoding") == 0)
            srv__accept_encoding_gzip(value, &gzip, &star);
    }
    int q = gzip >= 0 ? gzip : star;
    return q > 0;
}

/* The application already set a Content-Encoding (never compress twice). */
static bool srv__has_encoding(srv_request *req)
{
    bool found = false;
    pthread_mutex_lock(&req->mu);
    for (size_t i = 0; i < req->app_header_count; i++)
        if (strcasecmp(req->app_headers[i].name, "Content-Encoding") == 0)
            found = true;
    pthread_mutex_unlock(&req->mu);
    return found;
}

bool srv__compress_static(const srv_server *srv, const char *content_type, uint64_t size)
{
    const struct srv__compress *c = srv->router.compress;
    return c != NULL && size > 0 && size >= c->min_size && content_type != NULL &&
           srv__compressible(c, content_type);
}

int srv__compress_level(const srv_server *srv)
{
    const struct srv__compress *c = srv->router.compress;
    return c != NULL ? c->level : Z_DEFAULT_COMPRESSION;
}

void *srv__gzip_buf(const srv_server *srv, const void *body, size_t len, size_t *out_len)
{
    if (len == 0 || len > (size_t)UINT32_MAX)
        return NULL;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, srv__compress_level(srv), Z_DEFLATED, 15 + 16 /* gzip wrapper */, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    uLong cap = deflateBound(&zs, (uLong)len);
    unsigned char *out = malloc(cap);
    if (out == NULL) {
        deflateEnd(&zs);
        return NULL;
    }
    zs.next_in = (Bytef *)(uintptr_t)body;
    zs.avail_in = (uInt)len;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    int rc = deflate(&zs, Z_FINISH);
    size_t got = zs.total_out;
    deflateEnd(&zs);
    /* Not smaller (already compressed data): worth nothing. */
    if (rc != Z_STREAM_END || got >= len) {
        free(out);
        return NULL;
    }
    *out_len = got;
    return out;
}

void *srv__compress_body(srv_request *req, int status, const char *content_type,
                         const void *body, size_t *len)
{
    const struct srv__compress *c = req->srv->router.compress;
    if (c == NULL || content_type == NULL || *len < c->min_size || *len == 0 || status == 206 ||
        status < 200 || status == 204 || status == 304 || !srv__compressible(c, content_type) ||
        srv__has_encoding(req))
        return NULL;
    /* The answer depends on Accept-Encoding whether or not this client
     * gets it compressed: caches must know. */
    srv_set_header(req, "Vary", "Accept-Encoding");
    if (!srv__accepts_gzip(req) || *len > (size_t)UINT32_MAX)
        return NULL;

    size_t got;
    unsigned char *out = srv__gzip_buf(req->srv, body, *len, &got);
    if (out == NULL)
        return NULL;
    if (srv_set_header(req, "Content-Encoding", "gzip") != 0) {
        free(out);
        return NULL;
    }
    *len = got;
    return out;
}
