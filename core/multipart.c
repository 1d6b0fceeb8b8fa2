/*
 * multipart/form-data (RFC 7578 over RFC 2046's multipart syntax) parsed as
 * a stream: a sans-I/O parser the application feeds the body pieces it
 * receives (srv_request_body_read), calling back per part. Memory is the
 * parser and one part's header block (max_header_bytes), whatever the
 * body's size: part data is handed on as it arrives, and a delimiter split
 * across pieces is held as the count of its bytes matched so far (its
 * bytes are known: the delimiter itself), never as a copy of the data.
 * Runs on whatever thread feeds it, one at a time.
 */
#include "srv_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SRV__MP_BOUNDARY_MAX 70 /* RFC 2046 5.1.1 */
#define SRV__MP_MAX_HEADERS 64  /* header lines in one part */
#define SRV__MP_OPTS_MIN_SIZE (offsetof(srv_multipart_opts, max_header_bytes) + sizeof(size_t))

enum srv__mp_state {
    MP_PREAMBLE,   /* before the first delimiter: ignored */
    MP_DELIM_TAIL, /* a delimiter matched: "--", padding or CRLF follows */
    MP_DELIM_DASH, /* "-" of the close delimiter's "--" seen */
    MP_DELIM_PAD,  /* transport padding (SP, HTAB) before the CRLF */
    MP_DELIM_LF,   /* the CR of the delimiter line's CRLF seen */
    MP_HEADERS,    /* a part's header block, up to its empty line */
    MP_BODY,       /* a part's data, up to the next delimiter */
    MP_EPILOGUE,   /* after the close delimiter: ignored */
    MP_ERROR       /* stopped; feed and finish return err */
};

struct srv_multipart {
    srv_multipart_opts o;
    char delim[4 + SRV__MP_BOUNDARY_MAX]; /* CRLF "--" boundary */
    size_t dlen;
    enum srv__mp_state state;
    size_t m; /* bytes of delim matched (MP_PREAMBLE, MP_BODY) */
    bool in_part; /* on_part called, on_part_end not yet */
    unsigned parts;
    char *hbuf; /* the header block (max_header_bytes), then the parameters */
    size_t hlen;
    char *pbuf; /* Content-Disposition's parameters, unquoted */
    const char *hname[SRV__MP_MAX_HEADERS], *hvalue[SRV__MP_MAX_HEADERS];
    size_t nh;
    srv_multipart_part part;
    int err;
    const char *why;
};

void srv_multipart_opts_init_sized(srv_multipart_opts *opts, size_t size)
{
    if (opts == NULL || size < SRV__MP_OPTS_MIN_SIZE || size > SRV__STRUCT_MAX_SIZE)
        return;
    memset(opts, 0, size);
    opts->size = size;
    opts->max_parts = 128;
    opts->max_header_bytes = 8192;
}

static int srv__mp_fail(srv_multipart *mp, int err, const char *why)
{
    mp->state = MP_ERROR;
    mp->err = err;
    mp->why = why;
    return err;
}

static bool srv__mp_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* RFC 2046's bchars: DIGIT / ALPHA / "'()+_,-./:=?" and space. */
static bool srv__mp_bchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("'()+_,-./:=? ", c) != NULL);
}

/*
 * The next parameter of a header value at *s (";" OWS name OWS "=" OWS
 * (token / quoted-string) OWS): 1 with its name (not NUL-terminated) and
 * its value unquoted into out (NUL-terminated; out holds strlen(*s) + 1
 * bytes); 0 at the end; -1 for bad syntax. Empty parameters (";;", a
 * trailing ';') are skipped.
 */
static int srv__mp_param(const char **s, const char **name, size_t *nlen, char *out)
{
    const char *p = *s;
    for (;;) {
        while (srv__mp_ows(*p))
            p++;
        if (*p == '\0') {
            *s = p;
            return 0;
        }
        if (*p != ';')
            return -1;
        p++;
        while (srv__mp_ows(*p))
            p++;
        if (*p != ';' && *p != '\0')
            break;
    }
    const char *n = p;
    while (*p != '\0' && *p != '=' && !srv__mp_ows(*p) && *p != ';')
        p++;
    if (p == n || !srv__http_is_token(n, (size_t)(p - n)))
        return -1;
    *name = n;
    *nlen = (size_t)(p - n);
    while (srv__mp_ows(*p))
        p++;
    if (*p != '=')
        return -1;
    p++;
    while (srv__mp_ows(*p))
        p++;
    size_t o = 0;
    if (*p == '"') {
        for (p++;; p++) {
            if (*p == '\0')
                return -1; /* no closing quote */
            if (*p == '"')
                break;
            if (*p == '\\') {
                p++;
                if (*p == '\0')
                    return -1;
            }
            out[o++] = *p;
        }
        p++;
    } else {
        const char *v = p;
        while (*p != '\0' && *p != ';' && !srv__mp_ows(*p))
            p++;
        if (p == v || !srv__http_is_token(v, (size_t)(p - v)))
            return -1;
        memcpy(out, v, (size_t)(p - v));
        o = (size_t)(p - v);
    }
    out[o] = '\0';
    *s = p;
    return 1;
}

/* The media type "type/subtype" of a value, blanks around it dropped. */
static bool srv__mp_type_is(const char *v, const char **rest, const char *type)
{
    while (srv__mp_ows(*v))
        v++;
    size_t n = strcspn(v, ";");
    size_t e = n;
    while (e > 0 && srv__mp_ows(v[e - 1]))
        e--;
    *rest = v + n;
    return e == strlen(type) && strncasecmp(v, type, e) == 0;
}

int srv_multipart_new(const char *content_type, const srv_multipart_opts *opts,
                      srv_multipart **out)
{
    if (out == NULL || opts == NULL || opts->size < SRV__MP_OPTS_MIN_SIZE ||
        opts->size > SRV__STRUCT_MAX_SIZE)
        return SRV_EINVAL;
    srv_multipart_opts o;
    srv_multipart_opts_init(&o);
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    o.size = sizeof o;
    if (o.on_part == NULL || o.on_data == NULL || o.max_parts == 0 ||
        o.max_header_bytes < 64 || o.max_header_bytes > (1u << 20))
        return SRV_EINVAL;
    const char *rest;
    if (content_type == NULL || !srv__mp_type_is(content_type, &rest, "multipart/form-data"))
        return SRV_EBOUNDARY;
    size_t cap = strlen(rest) + 1;
    char *val = malloc(cap), *boundary = NULL;
    if (val == NULL)
        return SRV_ENOMEM;
    char bnd[SRV__MP_BOUNDARY_MAX + 1];
    const char *name;
    size_t nlen;
    int r;
    while ((r = srv__mp_param(&rest, &name, &nlen, val)) == 1) {
        if (nlen != 8 || strncasecmp(name, "boundary", 8) != 0)
            continue;
        size_t bl = strlen(val);
        if (boundary != NULL || bl == 0 || bl > SRV__MP_BOUNDARY_MAX || val[bl - 1] == ' ') {
            r = -1; /* twice, empty, too long, or ending in a space */
            break;
        }
        for (size_t i = 0; i < bl; i++)
            if (!srv__mp_bchar(val[i]))
                r = -1;
        if (r == -1)
            break;
        memcpy(bnd, val, bl + 1);
        boundary = bnd;
    }
    free(val);
    if (r == -1 || boundary == NULL)
        return SRV_EBOUNDARY;
    srv_multipart *mp = calloc(1, sizeof *mp);
    /* The header block, then room for its parameters unquoted. */
    char *hbuf = malloc(2 * (o.max_header_bytes + 1));
    if (mp == NULL || hbuf == NULL) {
        free(mp);
        free(hbuf);
        return SRV_ENOMEM;
    }
    mp->o = o;
    mp->hbuf = hbuf;
    mp->pbuf = hbuf + o.max_header_bytes + 1;
    mp->dlen = 4 + strlen(boundary);
    memcpy(mp->delim, "\r\n--", 4);
    memcpy(mp->delim + 4, boundary, mp->dlen - 4);
    mp->state = MP_PREAMBLE;
    mp->m = 2; /* the first delimiter may open the body: its CRLF is implied */
    *out = mp;
    return 0;
}

void srv_multipart_free(srv_multipart *mp)
{
    if (mp == NULL)
        return;
    free(mp->hbuf);
    free(mp);
}

const char *srv_multipart_error(const srv_multipart *mp)
{
    return mp != NULL && mp->why != NULL ? mp->why : "";
}

const char *srv_multipart_header(const srv_multipart *mp, const char *name)
{
    if (mp == NULL || name == NULL || !mp->in_part)
        return NULL;
    for (size_t i = 0; i < mp->nh; i++)
        if (strcasecmp(mp->hname[i], name) == 0)
            return mp->hvalue[i];
    return NULL;
}

/* Split the header block (hbuf, ending in an empty line) into lines, check
 * them, and read Content-Disposition and Content-Type. */
static int srv__mp_headers(srv_multipart *mp)
{
    char *p = mp->hbuf, *end = mp->hbuf + mp->hlen - 2; /* the empty line's CRLF */
    mp->nh = 0;
    while (p < end) {
        char *lf = memchr(p, '\n', (size_t)(end - p)); /* always there: lines end in CRLF */
        char *eol = lf - 1;
        *eol = '\0';
        if (srv__mp_ows(*p))
            return srv__mp_fail(mp, SRV_EMULTIPART, "a folded line (obs-fold) in a part's headers");
        char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon == NULL || colon == p || !srv__http_is_token(p, (size_t)(colon - p)))
            return srv__mp_fail(mp, SRV_EMULTIPART, "a part's header line is not name: value");
        *colon = '\0';
        char *v = colon + 1, *ve = eol;
        while (srv__mp_ows(*v))
            v++;
        while (ve > v && srv__mp_ows(ve[-1]))
            ve--;
        *ve = '\0';
        if (!srv__http_no_ctl(v, (size_t)(ve - v), true))
            return srv__mp_fail(mp, SRV_EMULTIPART, "a control character in a part's header");
        if (mp->nh == SRV__MP_MAX_HEADERS)
            return srv__mp_fail(mp, SRV_ETOOBIG, "more than 64 header lines in a part");
        mp->hname[mp->nh] = p;
        mp->hvalue[mp->nh++] = v;
        p = lf + 1;
    }
    const char *cd = NULL, *ct = NULL;
    for (size_t i = 0; i < mp->nh; i++) {
        const char **slot = strcasecmp(mp->hname[i], "Content-Disposition") == 0 ? &cd
                            : strcasecmp(mp->hname[i], "Content-Type") == 0       ? &ct
                                                                                  : NULL;
        if (slot != NULL && *slot != NULL)
            return srv__mp_fail(mp, SRV_EMULTIPART, "a part repeats Content-Disposition or "
                                                    "Content-Type");
        if (slot != NULL)
            *slot = mp->hvalue[i];
    }
    const char *rest;
    if (cd == NULL || !srv__mp_type_is(cd, &rest, "form-data"))
        return srv__mp_fail(mp, SRV_EMULTIPART, "a part without Content-Disposition: form-data");
    srv_multipart_part *pt = &mp->part;
    memset(pt, 0, sizeof *pt);
    pt->size = sizeof *pt;
    pt->index = mp->parts - 1;
    pt->content_type = ct;
    char *out = mp->pbuf;
    const char *name;
    size_t nlen;
    int r;
    while ((r = srv__mp_param(&rest, &name, &nlen, out)) == 1) {
        const char **slot = nlen == 4 && strncasecmp(name, "name", 4) == 0       ? &pt->name
                            : nlen == 8 && strncasecmp(name, "filename", 8) == 0 ? &pt->filename
                                                                                 : NULL;
        if (slot == NULL)
            continue; /* filename* (RFC 7578 4.2: not to be used) and the rest */
        if (*slot != NULL)
            return srv__mp_fail(mp, SRV_EMULTIPART, "Content-Disposition repeats name or "
                                                    "filename");
        *slot = out;
        out += strlen(out) + 1;
    }
    if (r == -1)
        return srv__mp_fail(mp, SRV_EMULTIPART, "a part's Content-Disposition does not parse");
    if (pt->name == NULL)
        return srv__mp_fail(mp, SRV_EMULTIPART, "a part's Content-Disposition has no name");
    mp->in_part = true;
    int rc = mp->o.on_part(mp, pt, mp->o.ctx);
    if (rc != 0)
        return srv__mp_fail(mp, rc, "stopped by on_part");
    return 0;
}

static int srv__mp_data(srv_multipart *mp, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    int rc = mp->o.on_data(mp, p, n, mp->o.ctx);
    if (rc != 0)
        return srv__mp_fail(mp, rc, "stopped by on_data");
    return 0;
}

/* A delimiter line ended: the part before it (if any) is complete. */
static int srv__mp_part_end(srv_multipart *mp)
{
    if (!mp->in_part)
        return 0;
    int rc = mp->o.on_part_end != NULL ? mp->o.on_part_end(mp, mp->o.ctx) : 0;
    mp->in_part = false;
    if (rc != 0)
        return srv__mp_fail(mp, rc, "stopped by on_part_end");
    return 0;
}

/*
 * Look for the delimiter in in[*i..n): data before it (a part's, or the
 * preamble's, dropped) is handed on as it goes. A partial match at the end
 * of the piece stays as mp->m: since '\r' occurs in the delimiter only at
 * its start, a mismatch after m matched bytes means those m bytes were data
 * (they are delim[0..m)), and a new match can only start at the byte that
 * broke it, if that is a '\r'.
 */
static int srv__mp_scan(srv_multipart *mp, const unsigned char *in, size_t *pi, size_t n)
{
    bool body = mp->state == MP_BODY;
    size_t i = *pi, run = i; /* in[run..i): data not handed on yet (m == 0) */
    while (i < n) {
        if (mp->m == 0) {
            const unsigned char *cr = memchr(in + i, '\r', n - i);
            if (cr == NULL) {
                i = n;
                break;
            }
            i = (size_t)(cr - in);
            if (body && srv__mp_data(mp, in + run, i - run) != 0)
                return mp->err;
            mp->m = 1;
            run = ++i;
        } else if (in[i] == (unsigned char)mp->delim[mp->m]) {
            run = ++i;
            if (++mp->m == mp->dlen) {
                mp->m = 0;
                mp->state = MP_DELIM_TAIL;
                *pi = i;
                return 0;
            }
        } else {
            if (body && srv__mp_data(mp, mp->delim, mp->m) != 0)
                return mp->err;
            mp->m = 0;
            run = i; /* in[i] is looked at again: a '\r' starts a new match */
        }
    }
    if (body && mp->m == 0 && srv__mp_data(mp, in + run, n - run) != 0)
        return mp->err;
    *pi = n;
    return 0;
}

int srv_multipart_feed(srv_multipart *mp, const void *data, size_t len)
{
    if (mp == NULL || (data == NULL && len > 0))
        return SRV_EINVAL;
    const unsigned char *in = data;
    size_t i = 0;
    while (mp->state != MP_ERROR && i < len) {
        unsigned char c;
        switch (mp->state) {
        case MP_PREAMBLE:
        case MP_BODY:
            if (srv__mp_scan(mp, in, &i, len) != 0)
                return mp->err;
            break;
        case MP_DELIM_TAIL:
        case MP_DELIM_PAD:
            c = in[i++];
            if (c == '-' && mp->state == MP_DELIM_TAIL)
                mp->state = MP_DELIM_DASH;
            else if (c == ' ' || c == '\t')
                mp->state = MP_DELIM_PAD;
            else if (c == '\r')
                mp->state = MP_DELIM_LF;
            else
                return srv__mp_fail(mp, SRV_EMULTIPART,
                                    "the boundary is followed by other bytes than CRLF or "
                                    "\"--\" (it must not occur in a part's data)");
            break;
        case MP_DELIM_DASH:
            if (in[i++] != '-')
                return srv__mp_fail(mp, SRV_EMULTIPART, "a boundary line ends in a single '-'");
            if (srv__mp_part_end(mp) != 0)
                return mp->err;
            mp->state = MP_EPILOGUE;
            break;
        case MP_DELIM_LF:
            if (in[i++] != '\n')
                return srv__mp_fail(mp, SRV_EMULTIPART, "a boundary line ends in CR without LF");
            if (srv__mp_part_end(mp) != 0)
                return mp->err;
            if (mp->parts == mp->o.max_parts)
                return srv__mp_fail(mp, SRV_ETOOBIG, "more parts than max_parts");
            mp->parts++;
            mp->hlen = 0;
            mp->state = MP_HEADERS;
            break;
        case MP_HEADERS:
            while (i < len) {
                c = in[i++];
                if (mp->hlen == mp->o.max_header_bytes)
                    return srv__mp_fail(mp, SRV_ETOOBIG, "a part's headers are over "
                                                         "max_header_bytes");
                if (c == '\n' && (mp->hlen == 0 || mp->hbuf[mp->hlen - 1] != '\r'))
                    return srv__mp_fail(mp, SRV_EMULTIPART, "a bare LF in a part's headers "
                                                            "(lines end in CRLF)");
                mp->hbuf[mp->hlen++] = (char)c;
                if (c == '\n' && (mp->hlen == 2 || (mp->hlen >= 4 &&
                                                    mp->hbuf[mp->hlen - 3] == '\n'))) {
                    mp->hbuf[mp->hlen] = '\0';
                    if (srv__mp_headers(mp) != 0)
                        return mp->err;
                    mp->state = MP_BODY;
                    mp->m = 0;
                    break;
                }
            }
            break;
        case MP_EPILOGUE:
            i = len; /* ignored, as the preamble */
            break;
        case MP_ERROR:
            break;
        }
    }
    return mp->state == MP_ERROR ? mp->err : 0;
}

int srv_multipart_finish(srv_multipart *mp)
{
    if (mp == NULL)
        return SRV_EINVAL;
    switch (mp->state) {
    case MP_EPILOGUE:
        return 0;
    case MP_ERROR:
        return mp->err;
    case MP_PREAMBLE:
        return srv__mp_fail(mp, SRV_EMULTIPART, "no boundary line in the body");
    default:
        return srv__mp_fail(mp, SRV_EMULTIPART, "the body ends before the final boundary");
    }
}

int srv_multipart_respond_error(srv_request *req, const srv_multipart *mp, int err)
{
    if (req == NULL)
        return SRV_EINVAL;
    bool parser = err == SRV_EMULTIPART || err == SRV_EBOUNDARY || err == SRV_ETOOBIG;
    int status = parser ? 400 : 500;
    const char *why = mp != NULL && mp->why != NULL && mp->err == err ? mp->why
                                                                       : srv_strerror(err);
    char body[SRV__ERROR_BODY_MAX];
    const char *ctype;
    size_t n;
    srv_server *srv = req->srv;
    if (srv->error_body == NULL && srv->cfg.error_format == SRV_ERROR_FORMAT_TEXT && parser) {
        ctype = "text/plain; charset=utf-8";
        int w = snprintf(body, sizeof body, "400 Bad Request: multipart/form-data: %s\n", why);
        n = w < 0 ? 0 : (size_t)w < sizeof body ? (size_t)w : sizeof body - 1;
    } else {
        n = srv__error_body(req, status, body, sizeof body, &ctype);
    }
    return srv_respond(req, status, ctype, body, n);
}
