/*
 * What a handler reads from a request beyond its head's fields, parsed once
 * on first use and kept with the request: cookies (RFC 6265 5.4), the
 * fields of an application/x-www-form-urlencoded body (decoded like the
 * query), and media types (Content-Type matching, Accept negotiation);
 * and the Set-Cookie line a handler sends (RFC 6265 4.1, checked).
 * The parsers take hostile input as it comes: any count of pairs within
 * the head and body limits, no unbounded copy, malformed pieces skipped.
 */
#include "srv_core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static struct srv__parsed *srv__parsed_of(srv_request *req)
{
    if (req->parsed == NULL)
        req->parsed = calloc(1, sizeof *req->parsed);
    return req->parsed;
}

static bool srv__kv_push(srv__kv **kv, size_t *n, size_t *cap, const char *name, size_t nl,
                         const char *value, size_t vl)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        srv__kv *g = realloc(*kv, c * sizeof *g);
        if (g == NULL)
            return false;
        *kv = g;
        *cap = c;
    }
    char *a = strndup(name, nl), *b = strndup(value, vl);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return false;
    }
    (*kv)[*n] = (srv__kv){.name = a, .value = b};
    (*n)++;
    return true;
}

/* The value of the first pair named exactly `name`, or NULL. */
static const char *srv__kv_find(const srv__kv *kv, size_t n, const char *name)
{
    for (size_t i = 0; name != NULL && i < n; i++)
        if (strcmp(kv[i].name, name) == 0)
            return kv[i].value;
    return NULL;
}

/* Pair `index` of n: 0, or SRV_EINVAL past the end. */
static int srv__kv_at(const srv__kv *kv, size_t n, size_t index, const char **name,
                      const char **value)
{
    if (index >= n)
        return SRV_EINVAL;
    if (name != NULL)
        *name = kv[index].name;
    if (value != NULL)
        *value = kv[index].value;
    return 0;
}

static bool srv__ows(char c)
{
    return c == ' ' || c == '\t';
}

/* ---- cookies -------------------------------------------------------- */

/* "a=1; b=2" (every Cookie header; HTTP/2 may send several): name=value
 * pairs, blanks around them trimmed, a value's surrounding DQUOTEs taken
 * off; a piece without '=' or with an empty name is skipped, as browsers'
 * own parsers do. Out of memory: what was parsed so far. */
static void srv__cookies_parse(srv_request *req, struct srv__parsed *p)
{
    size_t cap = 0;
    p->cookies_done = true;
    for (size_t h = 0; h < req->header_count; h++) {
        if (strcasecmp(req->headers[h].name, "cookie") != 0)
            continue;
        const char *s = req->headers[h].value;
        while (*s != '\0') {
            const char *end = strchr(s, ';');
            if (end == NULL)
                end = s + strlen(s);
            const char *a = s, *b = end;
            while (a < b && srv__ows(*a))
                a++;
            while (b > a && srv__ows(b[-1]))
                b--;
            const char *eq = memchr(a, '=', (size_t)(b - a));
            if (eq != NULL && eq > a) {
                const char *ne = eq;
                while (ne > a && srv__ows(ne[-1]))
                    ne--;
                const char *v = eq + 1;
                while (v < b && srv__ows(*v))
                    v++;
                const char *ve = b;
                if (ve - v >= 2 && v[0] == '"' && ve[-1] == '"') {
                    v++;
                    ve--;
                }
                if (ne > a && !srv__kv_push(&p->cookies, &p->cookie_count, &cap, a,
                                            (size_t)(ne - a), v, (size_t)(ve - v)))
                    return;
            }
            s = *end == ';' ? end + 1 : end;
        }
    }
}

static struct srv__parsed *srv__cookies(const srv_request *creq)
{
    srv_request *req = (srv_request *)creq; /* a cache of what the head says */
    struct srv__parsed *p = srv__parsed_of(req);
    if (p != NULL && !p->cookies_done)
        srv__cookies_parse(req, p);
    return p;
}

const char *srv_request_cookie(const srv_request *req, const char *name)
{
    struct srv__parsed *p = req != NULL ? srv__cookies(req) : NULL;
    return p != NULL ? srv__kv_find(p->cookies, p->cookie_count, name) : NULL;
}

size_t srv_request_cookie_count(const srv_request *req)
{
    struct srv__parsed *p = req != NULL ? srv__cookies(req) : NULL;
    return p != NULL ? p->cookie_count : 0;
}

int srv_request_cookie_at(const srv_request *req, size_t index, const char **name,
                          const char **value)
{
    struct srv__parsed *p = req != NULL ? srv__cookies(req) : NULL;
    return p != NULL ? srv__kv_at(p->cookies, p->cookie_count, index, name, value) : SRV_EINVAL;
}

/* ---- Set-Cookie ------------------------------------------------------ */

void srv_cookie_opts_init_sized(srv_cookie_opts *opts, size_t size)
{
    if (opts == NULL || size < sizeof(size_t))
        return;
    srv_cookie_opts d = {.size = size, .max_age = -1};
    memcpy(opts, &d, size < sizeof d ? size : sizeof d);
    if (size > sizeof d)
        memset((char *)opts + sizeof d, 0, size - sizeof d);
}

static bool srv__token(const char *s)
{
    if (s == NULL || *s == '\0')
        return false;
    for (; *s; s++)
        if (!srv__http_is_tchar((unsigned char)*s))
            return false;
    return true;
}

/* cookie-octet (RFC 6265 4.1.1): no CTL, blank, DQUOTE, ',', ';', '\'. */
static bool srv__cookie_octets(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == ',' || c == ';' || c == '\\')
            return false;
    }
    return true;
}

/* An attribute value (Path, Domain): visible ASCII and blanks, no ';'. */
static bool srv__cookie_attr(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c >= 0x7f || c == ';')
            return false;
    }
    return true;
}

int srv_set_cookie(srv_request *req, const char *name, const char *value,
                   const srv_cookie_opts *opts)
{
    if (req == NULL || name == NULL || value == NULL)
        return SRV_EINVAL;
    srv_cookie_opts o;
    srv_cookie_opts_init(&o);
    if (opts != NULL) {
        if (opts->size < sizeof(size_t) || opts->size > 4096)
            return SRV_EINVAL; /* not set by srv_cookie_opts_init */
        memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    }
    if (!srv__token(name) || !srv__cookie_octets(value) ||
        (o.path != NULL && !srv__cookie_attr(o.path)) ||
        (o.domain != NULL && !srv__cookie_attr(o.domain)))
        return SRV_EHEADER;
    if (o.same_site < SRV_SAMESITE_DEFAULT || o.same_site > SRV_SAMESITE_NONE ||
        (o.same_site == SRV_SAMESITE_NONE && !o.secure) || o.max_age < -1)
        return SRV_EINVAL; /* browsers drop SameSite=None without Secure */
    size_t cap = strlen(name) + strlen(value) + 128 + (o.path ? strlen(o.path) : 0) +
                 (o.domain ? strlen(o.domain) : 0);
    char *line = malloc(cap);
    if (line == NULL)
        return SRV_ENOMEM;
    int n = snprintf(line, cap, "%s=%s", name, value);
    if (o.max_age >= 0)
        n += snprintf(line + n, cap - (size_t)n, "; Max-Age=%lld", (long long)o.max_age);
    if (o.path != NULL)
        n += snprintf(line + n, cap - (size_t)n, "; Path=%s", o.path);
    if (o.domain != NULL)
        n += snprintf(line + n, cap - (size_t)n, "; Domain=%s", o.domain);
    if (o.secure)
        n += snprintf(line + n, cap - (size_t)n, "; Secure");
    if (o.http_only)
        n += snprintf(line + n, cap - (size_t)n, "; HttpOnly");
    static const char *const same[] = {NULL, "Strict", "Lax", "None"};
    if (o.same_site != SRV_SAMESITE_DEFAULT)
        snprintf(line + n, cap - (size_t)n, "; SameSite=%s", same[o.same_site]);
    int rc = srv_set_header(req, "Set-Cookie", line);
    free(line);
    return rc;
}

/* ---- media types ------------------------------------------------------ */

/* The type/subtype of a media type (params and blanks off): [*t, *t + *n). */
static void srv__media_core(const char *s, const char **t, size_t *n)
{
    while (srv__ows(*s))
        s++;
    size_t len = strcspn(s, ";,");
    while (len > 0 && srv__ows(s[len - 1]))
        len--;
    *t = s;
    *n = len;
}

int srv_media_type_is(const char *content_type, const char *type)
{
    if (content_type == NULL || type == NULL)
        return 0;
    const char *a, *b;
    size_t an, bn;
    srv__media_core(content_type, &a, &an);
    srv__media_core(type, &b, &bn);
    return an > 0 && an == bn && strncasecmp(a, b, an) == 0;
}

/* ---- form bodies ------------------------------------------------------- */

static struct srv__parsed *srv__form(const srv_request *creq)
{
    srv_request *req = (srv_request *)creq;
    struct srv__parsed *p = srv__parsed_of(req);
    if (p == NULL || p->form_done)
        return p;
    p->form_done = true;
    if (!srv_media_type_is(srv_request_header(req, "content-type"),
                           "application/x-www-form-urlencoded") ||
        req->body == NULL || req->body_len == 0)
        return p;
    /* name=value&name2=value2: '+' a space, %XX decoded, as the query; a
     * pair whose escapes decode to a NUL is skipped (C strings). */
    size_t cap = 0;
    const char *s = req->body, *end = req->body + req->body_len;
    char *buf = malloc(req->body_len + 1);
    if (buf == NULL)
        return p;
    while (s < end) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *e = amp != NULL ? amp : end;
        if (e > s) {
            const char *eq = memchr(s, '=', (size_t)(e - s));
            const char *ne = eq != NULL ? eq : e;
            size_t nl = srv__percent_decode(s, (size_t)(ne - s), buf, true);
            if (nl != (size_t)-1) {
                char *name = strndup(buf, nl);
                size_t vl = eq != NULL ? srv__percent_decode(eq + 1, (size_t)(e - eq - 1), buf, true)
                                       : 0;
                if (eq == NULL)
                    buf[0] = '\0';
                bool ok = name != NULL && vl != (size_t)-1 &&
                          srv__kv_push(&p->form, &p->form_count, &cap, name, nl, buf, vl);
                free(name);
                if (name == NULL)
                    break;
                (void)ok; /* a NUL in the value skips the pair */
            }
        }
        if (e == end)
            break;
        s = e + 1;
    }
    free(buf);
    return p;
}

const char *srv_request_form(const srv_request *req, const char *name)
{
    struct srv__parsed *p = req != NULL ? srv__form(req) : NULL;
    return p != NULL ? srv__kv_find(p->form, p->form_count, name) : NULL;
}

size_t srv_request_form_count(const srv_request *req)
{
    struct srv__parsed *p = req != NULL ? srv__form(req) : NULL;
    return p != NULL ? p->form_count : 0;
}

int srv_request_form_at(const srv_request *req, size_t index, const char **name,
                        const char **value)
{
    struct srv__parsed *p = req != NULL ? srv__form(req) : NULL;
    return p != NULL ? srv__kv_at(p->form, p->form_count, index, name, value) : SRV_EINVAL;
}

/* ---- Accept negotiation ----------------------------------------------- */

/* q of one Accept member's parameters ("; q=0.5"), 1000ths; -1 malformed. */
static int srv__accept_q(const char *params, size_t n)
{
    int q = 1000;
    const char *s = params, *end = params + n;
    while (s < end) {
        const char *semi = memchr(s, ';', (size_t)(end - s));
        const char *e = semi != NULL ? semi : end;
        while (s < e && srv__ows(*s))
            s++;
        if (e - s >= 2 && (s[0] == 'q' || s[0] == 'Q') && s[1] == '=') {
            const char *v = s + 2;
            size_t vl = (size_t)(e - v);
            while (vl > 0 && srv__ows(v[vl - 1]))
                vl--;
            /* qvalue: 0[.ddd] or 1[.000] (RFC 9110 12.4.2) */
            if (vl == 0 || vl > 5 || (v[0] != '0' && v[0] != '1') || (vl > 1 && v[1] != '.') ||
                vl == 2)
                return -1;
            q = (v[0] - '0') * 1000;
            int scale = 100;
            for (size_t i = 2; i < vl; i++, scale /= 10) {
                if (!isdigit((unsigned char)v[i]) || (v[0] == '1' && v[i] != '0'))
                    return -1;
                q += (v[i] - '0') * scale;
            }
        }
        if (e == end)
            break;
        s = e + 1;
    }
    return q;
}

/* How well an Accept range [r, r + rn) matches type t: 3 the type itself,
 * 2 its type with any subtype, 1 any type at all, 0 not at all. */
static int srv__accept_match(const char *r, size_t rn, const char *t, size_t tn)
{
    if (rn == tn && strncasecmp(r, t, rn) == 0)
        return 3;
    const char *ts = memchr(t, '/', tn);
    if (ts == NULL)
        return 0;
    size_t major = (size_t)(ts - t);
    if (rn == major + 2 && strncasecmp(r, t, major + 1) == 0 && r[major + 1] == '*')
        return 2;
    if (rn == 3 && memcmp(r, "*/*", 3) == 0)
        return 1;
    return 0;
}

const char *srv_request_negotiate(const srv_request *req, const char *const *offered)
{
    if (req == NULL || offered == NULL || offered[0] == NULL)
        return NULL;
    const char *accept = srv_request_header(req, "accept");
    if (accept == NULL || accept[strspn(accept, " \t")] == '\0')
        return offered[0]; /* no Accept: anything goes, the server's first */
    const char *best = NULL;
    int best_q = 0;
    for (size_t o = 0; offered[o] != NULL; o++) {
        const char *t;
        size_t tn;
        srv__media_core(offered[o], &t, &tn);
        /* The most specific range that matches decides this type's q. */
        int spec = 0, q = 0;
        for (size_t h = 0; h < req->header_count; h++) {
            if (strcasecmp(req->headers[h].name, "accept") != 0)
                continue;
            const char *s = req->headers[h].value;
            while (*s != '\0') {
                size_t len = strcspn(s, ",");
                const char *r;
                size_t rn;
                srv__media_core(s, &r, &rn);
                if (rn > len)
                    rn = len;
                const char *semi = memchr(s, ';', len);
                int mq = semi != NULL ? srv__accept_q(semi + 1, len - (size_t)(semi + 1 - s))
                                      : 1000;
                int m = rn > 0 && mq >= 0 ? srv__accept_match(r, rn, t, tn) : 0;
                if (m > spec) {
                    spec = m;
                    q = mq;
                }
                s += len;
                if (*s == ',')
                    s++;
            }
        }
        if (q > best_q) { /* ties: the server's order */
            best_q = q;
            best = offered[o];
        }
    }
    return best;
}
