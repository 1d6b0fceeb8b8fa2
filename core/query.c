/*
 * Request-target parsing and percent-decoding, done once in the core for
 * every engine (each library would otherwise decode in its own way).
 * Semantics: '+' is a space in the query only; %XX is decoded; an invalid
 * or truncated escape is kept as sent; a decoded NUL is refused (400)
 * because C strings would silently truncate it.
 */
#include "srv_core.h"

#include <string.h>

static int srv__hex(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The bytes percent-decoding may change or refuse; every other byte is copied as it is. */
static const bool srv__decode_special[256] = {['\0'] = true, ['%'] = true, ['+'] = true};

size_t srv__percent_decode(const char *s, size_t n, char *out, bool plus_is_space)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        /* Runs of plain bytes are copied whole: most targets have no escape at all. */
        size_t j = i;
        while (j < n && !srv__decode_special[(unsigned char)s[j]])
            j++;
        memcpy(out + o, s + i, j - i);
        o += j - i;
        if ((i = j) == n)
            break;
        unsigned char c = (unsigned char)s[i];
        if (c == '%' && i + 2 < n && srv__hex((unsigned char)s[i + 1]) >= 0 && srv__hex((unsigned char)s[i + 2]) >= 0) {
            c = (unsigned char)(srv__hex((unsigned char)s[i + 1]) * 16 +
                                srv__hex((unsigned char)s[i + 2]));
            i += 2;
            if (c == '\0')
                return (size_t)-1;
        } else if (c == '+' && plus_is_space) {
            c = ' ';
        } else if (c == '\0') {
            return (size_t)-1;
        }
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return o;
}

/* Parse the query string q[0..n) into req->query. */
static int srv__query_parse(srv_request *req, const char *q, size_t n)
{
    size_t segments = 1;
    for (size_t i = 0; i < n; i++)
        segments += q[i] == '&';
    req->query = srv__arena_alloc(&req->arena, segments * sizeof *req->query);
    if (req->query == NULL)
        return 500; /* out of memory */
    req->query_count = 0;

    size_t start = 0;
    while (start <= n) {
        const char *seg = q + start;
        const char *amp = memchr(seg, '&', n - start);
        size_t len = amp ? (size_t)(amp - seg) : n - start;
        if (len > 0) {
            const char *eq = memchr(seg, '=', len);
            size_t klen = eq ? (size_t)(eq - seg) : len;
            const char *v = eq ? eq + 1 : seg + len;
            size_t vlen = eq ? len - klen - 1 : 0;
            char *key = srv__arena_alloc(&req->arena, klen + 1);
            char *val = srv__arena_alloc(&req->arena, vlen + 1);
            if (key == NULL || val == NULL)
                return 500; /* out of memory */
            if (srv__percent_decode(seg, klen, key, true) == (size_t)-1 ||
                srv__percent_decode(v, vlen, val, true) == (size_t)-1)
                return 400;
            req->query[req->query_count].name = key;
            req->query[req->query_count].value = val;
            req->query_count++;
        }
        if (amp == NULL)
            break;
        start += len + 1;
    }
    return 0;
}

static bool srv__is_scheme(const char *s, size_t n)
{
    if (n == 0 || !((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z'))
        return false;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (!((c | 0x20) >= 'a' && (c | 0x20) <= 'z') && !(c >= '0' && c <= '9') && c != '+' &&
            c != '-' && c != '.')
            return false;
    }
    return true;
}

int srv__target_parse(srv_request *req, const char *target, size_t len)
{
    if (len == 0)
        return 400;
    if (len > req->srv->cfg.max_uri_bytes)
        return 414;
    if (!srv__http_no_ctl(target, len, false)) /* controls, spaces and DEL */
        return 400;
    req->target = srv__arena_strndup(&req->arena, target, len);
    if (req->target == NULL)
        return 500; /* out of memory */

    const char *p = target;
    size_t n = len;
    if (n == 1 && p[0] == '*') {
        req->path = req->target;
        return 0;
    }
    bool absolute = false;
    if (p[0] != '/') {
        /* absolute-form: scheme "://" authority [path] ["?" query] */
        const char *sep = NULL;
        for (size_t i = 0; i + 2 < n; i++)
            if (p[i] == ':' && p[i + 1] == '/' && p[i + 2] == '/') {
                sep = p + i;
                break;
            }
        if (sep == NULL || !srv__is_scheme(p, (size_t)(sep - p)))
            return 400;
        const char *auth = sep + 3, *end = p + n, *q = auth;
        while (q < end && *q != '/' && *q != '?' && *q != '#')
            q++;
        if (q == auth)
            return 400;
        n = (size_t)(end - q);
        p = q;
        absolute = true;
    }
    const char *hash = memchr(p, '#', n);
    if (hash != NULL)
        n = (size_t)(hash - p);
    const char *qm = memchr(p, '?', n);
    size_t plen = qm ? (size_t)(qm - p) : n;

    if (plen == 0 && absolute) {
        req->path = (char *)"/";
    } else {
        req->path = srv__arena_alloc(&req->arena, plen + 1);
        if (req->path == NULL)
            return 500; /* out of memory */
        if (srv__percent_decode(p, plen, req->path, false) == (size_t)-1)
            return 400;
    }
    if (qm != NULL)
        return srv__query_parse(req, qm + 1, n - plen - 1);
    return 0;
}
