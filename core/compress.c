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

/* The q-value of a coding in Accept-Encoding: -1 absent, else 0..1000. */
static int srv__coding_q(const char *accept, const char *coding)
{
    size_t clen = strlen(coding);
    const char *p = accept, *item;
    size_t len;
    while (srv__next_item(&p, &item, &len)) {
        size_t name = 0;
        while (name < len && item[name] != ';' && item[name] != ' ' && item[name] != '\t')
            name++;
        if (name != clen || strncasecmp(item, coding, clen) != 0)
            continue;
        const char *q = memchr(item, ';', len);
        if (q == NULL)
            return 1000;
        q++;
        while (q < item + len && (*q == ' ' || *q == '\t'))
            q++;
        if (q + 2 > item + len || (q[0] != 'q' && q[0] != 'Q') || q[1] != '=')
            return 1000;
        q += 2;
        int v = 0, digits = 0;
        if (q < item + len && *q == '1')
            return 1000;
        if (q < item + len && *q == '0')
            q++;
        if (q < item + len && *q == '.')
            for (q++; q < item + len && digits < 3 && *q >= '0' && *q <= '9'; q++, digits++)
                v = v * 10 + (*q - '0');
        while (digits++ < 3)
            v *= 10;
        return v;
    }
    return -1;
}

static bool srv__accepts_gzip(const srv_request *req)
{
    for (size_t i = 0; i < srv_request_header_count(req); i++) {
        const char *name, *value;
        srv_request_header_at(req, i, &name, &value);
        if (strcasecmp(name, "Accept-Encoding") != 0)
            continue;
        int q = srv__coding_q(value, "gzip");
        if (q < 0) {
            int star = srv__coding_q(value, "*");
            q = star < 0 ? 0 : star;
        }
        if (q > 0)
            return true;
    }
    return false;
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

    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, c->level, Z_DEFLATED, 15 + 16 /* gzip wrapper */, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    uLong cap = deflateBound(&zs, (uLong)*len);
    unsigned char *out = malloc(cap);
    if (out == NULL) {
        deflateEnd(&zs);
        return NULL;
    }
    zs.next_in = (Bytef *)(uintptr_t)body;
    zs.avail_in = (uInt)*len;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    int rc = deflate(&zs, Z_FINISH);
    size_t got = zs.total_out;
    deflateEnd(&zs);
    /* Not smaller (already compressed data): send it as it is. */
    if (rc != Z_STREAM_END || got >= *len) {
        free(out);
        return NULL;
    }
    if (srv_set_header(req, "Content-Encoding", "gzip") != 0) {
        free(out);
        return NULL;
    }
    *len = got;
    return out;
}
