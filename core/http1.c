/*
 * The core's sans-I/O HTTP/1.x request parser (srv_http1.h says what it
 * accepts and why). It owns the framing: request line and header syntax,
 * Content-Length bodies and strict chunked decoding; the srv__request_*
 * helpers own the meaning (limits, versions, codings), so every engine that
 * feeds its bytes here answers the same.
 */
#include "srv_http1.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    H1_REQLINE,    /* collecting the request line (or empty lines before it) */
    H1_HEADERS,    /* collecting header lines */
    H1_HEAD_DONE,  /* HEAD_READY given; the next feed starts the body */
    H1_BODY,       /* Content-Length bytes */
    H1_CHUNK_SIZE, /* hex digits of a chunk size */
    H1_CHUNK_EXT,  /* after the size: extensions (sub-state in p->sub) */
    H1_CHUNK_LF,   /* CR of the chunk line seen, LF due */
    H1_CHUNK_DATA,
    H1_CHUNK_CR,   /* chunk data done: CR due */
    H1_CHUNK_DLF,  /* LF due */
    H1_TRAILERS,   /* collecting trailer lines */
    H1_FAILED,
    H1_BODY_DONE   /* a streamed Content-Length body was all given */
};

/* Chunk-extension grammar (RFC 9112 7.1.1):
 * *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ) */
enum {
    X_BEFORE_SEMI, /* BWS then ';' or CR */
    X_NAME_START,  /* BWS then a name */
    X_NAME,
    X_AFTER_NAME,  /* BWS then '=', ';' or CR */
    X_VAL_START,   /* BWS then a token or '"' */
    X_VAL_TOKEN,
    X_QUOTED,
    X_QUOTED_ESC
};

/* Fixed part of a request line around the target: "M SP" and
 * "SP HTTP/1.1 CR". */
#define H1_REQLINE_SLACK (SRV__HTTP1_MAX_METHOD + 1 + 10)

void srv__http1_init(srv_http1 *p, srv_server *srv)
{
    const srv_config *cfg = srv__server_config(srv);
    memset(p, 0, sizeof *p);
    p->max_head = cfg->max_header_bytes;
    p->max_uri = cfg->max_uri_bytes;
    p->max_body = cfg->max_body_bytes;
    p->state = H1_REQLINE;
}

void srv__http1_free(srv_http1 *p)
{
    free(p->line);
    p->line = NULL;
    p->line_len = p->line_cap = 0;
}

void srv__http1_trim(srv_http1 *p)
{
    if (p->line_len == 0)
        srv__http1_free(p);
}

int srv__http1_body_expected(const srv_http1 *p)
{
    return p->chunked || p->remaining > 0;
}

static size_t h1_body_len(const srv_request *req)
{
    size_t n = 0;
    srv_request_body(req, &n);
    return n;
}

static enum srv_http1_event h1_fail(srv_http1 *p, int status)
{
    p->state = H1_FAILED;
    p->status = status; /* the request helpers return HTTP statuses only */
    return SRV_HTTP1_FAIL;
}

static int h1_is_hex(int c, unsigned *v)
{
    if (c >= '0' && c <= '9')
        *v = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
        *v = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
        *v = (unsigned)(c - 'A' + 10);
    else
        return 0;
    return 1;
}

/* qdtext / quoted-pair byte of a quoted-string. */
static int h1_is_qdtext(unsigned char c)
{
    return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) ||
           (c >= 0x5d && c <= 0x7e) || c >= 0x80;
}

/*
 * Collect bytes up to LF into p->line, at most `bound` bytes (CR included).
 * Returns 1 with a complete line (CRLF stripped) in p->line, 0 when the
 * input ran out first, -1 when the line outgrew `bound`, -2 for a bare LF
 * or a CR not followed by LF.
 */
static int h1_collect(srv_http1 *p, const char *d, size_t len, size_t *i, size_t bound)
{
    const char *lf = memchr(d + *i, '\n', len - *i);
    size_t end = lf ? (size_t)(lf - d) : len;
    size_t n = end - *i;
    if (n > 0 && p->line_len > 0 && p->line[p->line_len - 1] == '\r')
        return -2; /* CR then something else */
    /* No line of a head or trailer holds a control byte other than HTAB
     * (and its final CR): refuse one at once rather than wait for a LF.
     * Eight bytes at a time (srv__http_no_ctl): every byte of every head
     * passes here. h1_field_line relies on it. */
    if (!srv__http_no_ctl(d + *i, n > 0 && d[end - 1] == '\r' ? n - 1 : n, true))
        return -2;
    int over = n > bound || p->line_len > bound - n;
    if (over) /* keep what fits: the caller may look at it */
        n = bound > p->line_len ? bound - p->line_len : 0;
    if (p->line_len + n + 1 > p->line_cap) {
        size_t cap = p->line_cap ? p->line_cap : 256;
        while (cap < p->line_len + n + 1)
            cap *= 2;
        char *nl = realloc(p->line, cap);
        if (!nl)
            return -3;
        p->line = nl;
        p->line_cap = cap;
    }
    memcpy(p->line + p->line_len, d + *i, n);
    p->line_len += n;
    if (over)
        return -1;
    *i = lf ? end + 1 : len;
    if (!lf)
        return 0;
    if (p->line_len == 0 || p->line[p->line_len - 1] != '\r')
        return -2; /* bare LF */
    p->line_len--;
    p->line[p->line_len] = '\0';
    return 1;
}

/* The answer to a request line (`len` bytes at `line`, no CRLF, possibly
 * cut) that outgrew its bound: 414 when the target is what makes it long
 * (it has not ended, or is over max_uri), else 400 (a long method or
 * version). */
static int h1_long_line_status(const char *line, size_t len, size_t max_uri)
{
    const char *sp = memchr(line, ' ', len);
    if (sp == NULL || (size_t)(sp - line) > SRV__HTTP1_MAX_METHOD)
        return 400;
    const char *target = sp + 1;
    size_t rest = len - (size_t)(target - line);
    const char *sp2 = memchr(target, ' ', rest);
    size_t tlen = sp2 != NULL ? (size_t)(sp2 - target) : rest;
    return sp2 == NULL || tlen > max_uri ? 414 : 400;
}

/* The status for a request line that outgrew its bound. */
static int h1_long_reqline(const srv_http1 *p)
{
    return h1_long_line_status(p->line, p->line_len, p->max_uri);
}

static int h1_request_line(srv_http1 *p, srv_request *req)
{
    const char *l = p->line;
    size_t n = p->line_len;
    const char *sp1 = memchr(l, ' ', n);
    if (!sp1 || sp1 == l || (size_t)(sp1 - l) > SRV__HTTP1_MAX_METHOD)
        return 400;
    const char *t = sp1 + 1;
    const char *sp2 = memchr(t, ' ', n - (size_t)(t - l));
    if (!sp2 || sp2 == t) /* HTTP/0.9 (no version) or two spaces */
        return 400;
    for (const char *q = t; q < sp2; q++) {
        unsigned char c = (unsigned char)*q;
        if (c < 0x21 || c == 0x7f)
            return 400;
    }
    const char *v = sp2 + 1;
    size_t vlen = n - (size_t)(v - l);
    if (vlen != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9')
        return 400;
    if (sp1 - l == 3 && memcmp(l, "PRI", 3) == 0 && sp2 - t == 1 && *t == '*' &&
        memcmp(v, "HTTP/2.0", 8) == 0) {
        p->h2_preface = 1;
        return 505;
    }
    int rc = srv__request_set_method(req, l, (size_t)(sp1 - l));
    if (rc == 0)
        rc = srv__request_set_target(req, t, (size_t)(sp2 - t));
    if (rc != 0)
        return rc;
    if (v[5] != '1') /* HTTP/2.0 in an HTTP/1 line too, where the engine speaks HTTP/2 */
        return 505;
    srv__request_set_version(req, v[5] - '0', v[7] - '0');
    return 0;
}

/* Check a header or trailer line; *colon receives the ':' position. */
static int h1_field_line(const srv_http1 *p, size_t *colon)
{
    const char *l = p->line;
    if (l[0] == ' ' || l[0] == '\t')
        return 400; /* obs-fold, or whitespace before the first name */
    const char *c = memchr(l, ':', p->line_len);
    if (!c || c == l || !srv__http_is_token(l, (size_t)(c - l)))
        return 400;
    /* The value's bytes are HTAB, SP, VCHAR or obs-text: h1_collect let no
     * other through. */
    /* "Transfer-Encoding: chunked " is chunked by RFC 9110, but servers and
     * proxies disagree on it (one reads a chunked body, another reads to
     * close): refuse the ambiguity rather than pick a side. */
    static const char te[] = "Transfer-Encoding";
    size_t last = p->line_len - 1;
    if ((size_t)(c - l) == sizeof te - 1 && strncasecmp(l, te, sizeof te - 1) == 0 &&
        last > (size_t)(c - l) && (l[last] == ' ' || l[last] == '\t'))
        return 400;
    *colon = (size_t)(c - l);
    return 0;
}

/* The empty line after the headers: the core judges the head, then the
 * framing it accepted decides the body. */
static int h1_head_done(srv_http1 *p, srv_request *req)
{
    int rc = srv__request_headers_done(req);
    if (rc == 505) /* answer an unsupported version in HTTP/1.1 */
        srv__request_set_version(req, 1, 1);
    if (rc != 0)
        return rc;
    /* The core allows only "chunked" and a valid, single-valued length. */
    uint64_t length = 0;
    p->chunked = srv__request_framing(req, &length) != 0;
    p->remaining = length;
    return 0;
}

static void h1_next_message(srv_http1 *p)
{
    p->state = H1_REQLINE;
    p->started = 0;
    p->chunked = 0;
    p->remaining = 0;
    p->deliver = 0;
    p->meta_bytes = 0;
    p->empty_lines = 0;
    p->sub = 0;
    p->digits = 0;
    p->line_len = 0;
}

/* One chunk-extension byte (RFC 9112 7.1.1). 0, or a status. */
static int h1_ext_byte(srv_http1 *p, unsigned char c)
{
    if (++p->meta_bytes > p->max_head)
        return 431;
    int ws = c == ' ' || c == '\t';
    switch (p->sub) {
    case X_BEFORE_SEMI:
    case X_AFTER_NAME:
        if (ws)
            return 0;
        if (c == ';')
            p->sub = X_NAME_START;
        else if (c == '=' && p->sub == X_AFTER_NAME)
            p->sub = X_VAL_START;
        else
            return 400;
        return 0;
    case X_NAME_START:
        if (ws)
            return 0;
        if (!srv__http_is_tchar(c))
            return 400;
        p->sub = X_NAME;
        return 0;
    case X_NAME:
    case X_VAL_TOKEN:
        if (srv__http_is_tchar(c))
            return 0;
        if (ws)
            p->sub = p->sub == X_NAME ? X_AFTER_NAME : X_BEFORE_SEMI;
        else if (c == ';')
            p->sub = X_NAME_START;
        else if (c == '=' && p->sub == X_NAME)
            p->sub = X_VAL_START;
        else
            return 400;
        return 0;
    case X_VAL_START:
        if (ws)
            return 0;
        if (c == '"')
            p->sub = X_QUOTED;
        else if (srv__http_is_tchar(c))
            p->sub = X_VAL_TOKEN;
        else
            return 400;
        return 0;
    case X_QUOTED:
        if (c == '"')
            p->sub = X_BEFORE_SEMI;
        else if (c == '\\')
            p->sub = X_QUOTED_ESC;
        else if (!h1_is_qdtext(c))
            return 400;
        return 0;
    default: /* X_QUOTED_ESC */
        if (c != '\t' && (c < 0x20 || c == 0x7f))
            return 400;
        p->sub = X_QUOTED;
        return 0;
    }
}

/* Whether a CR may end the chunk line in this extension sub-state. */
static int h1_ext_may_end(const srv_http1 *p)
{
    return p->sub == X_BEFORE_SEMI || p->sub == X_NAME || p->sub == X_AFTER_NAME ||
           p->sub == X_VAL_TOKEN;
}

enum srv_http1_event srv__http1_feed(srv_http1 *p, srv_request *req, const char *d,
                                     size_t len, size_t *used)
{
    size_t i = 0;
    enum srv_http1_event ev = SRV_HTTP1_NEED_MORE;
    int rc;
    while (ev == SRV_HTTP1_NEED_MORE) {
        if (p->state == H1_FAILED) {
            ev = SRV_HTTP1_FAIL;
            break;
        }
        if (p->state == H1_HEAD_DONE) {
            if (p->chunked) {
                p->state = H1_CHUNK_SIZE;
                p->digits = 0;
                p->remaining = 0;
            } else if (p->remaining > 0) {
                p->state = H1_BODY;
            } else {
                h1_next_message(p);
                ev = SRV_HTTP1_MESSAGE_COMPLETE;
                break;
            }
            continue;
        }
        if (p->state == H1_BODY_DONE) {
            h1_next_message(p);
            ev = SRV_HTTP1_MESSAGE_COMPLETE;
            break;
        }
        if (i == len)
            break;
        unsigned char c = (unsigned char)d[i];
        switch (p->state) {
        case H1_REQLINE:
            if (c != '\r' && c != '\n') /* empty lines before it are no message */
                p->started = 1;
            rc = h1_collect(p, d, len, &i, p->max_uri + H1_REQLINE_SLACK);
            if (rc == 0)
                break;
            if (rc < 0) {
                ev = h1_fail(p, rc == -1 ? h1_long_reqline(p) : rc == -2 ? 400 : 500);
                break;
            }
            if (p->line_len == 0) { /* an empty line before a request: skipped */
                if (++p->empty_lines > p->max_head / 2) /* CRLFs past the head limit */
                    ev = h1_fail(p, 431);
                break;
            }
            rc = h1_request_line(p, req);
            p->line_len = 0;
            if (rc != 0)
                ev = h1_fail(p, rc);
            else
                p->state = H1_HEADERS;
            break;
        case H1_HEADERS:
            rc = h1_collect(p, d, len, &i, p->max_head + 1);
            if (rc == 0)
                break;
            if (rc < 0) {
                ev = h1_fail(p, rc == -1 ? 431 : rc == -2 ? 400 : 500);
                break;
            }
            if (p->line_len == 0) {
                rc = h1_head_done(p, req);
                if (rc != 0) {
                    ev = h1_fail(p, rc);
                } else {
                    p->state = H1_HEAD_DONE;
                    ev = SRV_HTTP1_HEAD_READY;
                }
                break;
            }
            {
                size_t colon;
                rc = h1_field_line(p, &colon);
                if (rc == 0)
                    rc = srv__request_add_header(req, p->line, colon, p->line + colon + 1,
                                                 p->line_len - colon - 1);
                p->line_len = 0;
                if (rc != 0)
                    ev = h1_fail(p, rc);
            }
            break;
        case H1_BODY:
        case H1_CHUNK_DATA: {
            size_t n = len - i;
            if (n > p->remaining)
                n = (size_t)p->remaining;
            if (p->deliver) { /* one piece per event */
                p->piece = d + i;
                p->piece_len = n;
                i += n;
                p->remaining -= n;
                if (p->remaining == 0)
                    p->state = p->state == H1_CHUNK_DATA ? H1_CHUNK_CR : H1_BODY_DONE;
                ev = SRV_HTTP1_BODY;
                break;
            }
            rc = srv__request_append_body(req, d + i, n);
            if (rc != 0) {
                ev = h1_fail(p, rc);
                break;
            }
            i += n;
            p->remaining -= n;
            if (p->remaining == 0) {
                if (p->state == H1_CHUNK_DATA) {
                    p->state = H1_CHUNK_CR;
                } else {
                    h1_next_message(p);
                    ev = SRV_HTTP1_MESSAGE_COMPLETE;
                }
            }
            break;
        }
        case H1_CHUNK_SIZE: {
            unsigned v;
            if (h1_is_hex(c, &v)) {
                if (++p->digits > 16) { /* no size needs more: overflow */
                    ev = h1_fail(p, 400);
                    break;
                }
                p->remaining = p->remaining << 4 | v;
                i++;
                break;
            }
            if (p->digits == 0) { /* empty, sign, or anything else */
                ev = h1_fail(p, 400);
                break;
            }
            if (c == '\r') {
                p->state = H1_CHUNK_LF;
                i++;
            } else if (c == ';' || c == ' ' || c == '\t') {
                p->state = H1_CHUNK_EXT;
                p->sub = X_BEFORE_SEMI;
            } else {
                ev = h1_fail(p, 400); /* "0x2", a bare LF, ... */
            }
            break;
        }
        case H1_CHUNK_EXT:
            if (c == '\r' && h1_ext_may_end(p)) {
                p->state = H1_CHUNK_LF;
                i++;
                break;
            }
            rc = h1_ext_byte(p, c);
            if (rc != 0)
                ev = h1_fail(p, rc);
            else
                i++;
            break;
        case H1_CHUNK_LF:
            if (c != '\n') {
                ev = h1_fail(p, 400);
                break;
            }
            i++;
            if (p->remaining == 0) {
                p->state = H1_TRAILERS;
                p->line_len = 0;
            } else if (!p->deliver && p->remaining > p->max_body - h1_body_len(req)) {
                ev = h1_fail(p, 413); /* refused before its data is read */
            } else {
                p->state = H1_CHUNK_DATA;
            }
            break;
        case H1_CHUNK_CR:
        case H1_CHUNK_DLF:
            if (c != (p->state == H1_CHUNK_CR ? '\r' : '\n')) {
                ev = h1_fail(p, 400); /* the chunk's data is longer than its size */
                break;
            }
            i++;
            if (p->state == H1_CHUNK_CR) {
                p->state = H1_CHUNK_DLF;
            } else {
                p->state = H1_CHUNK_SIZE;
                p->digits = 0;
                p->remaining = 0;
            }
            break;
        case H1_TRAILERS: {
            size_t room = p->max_head - (p->meta_bytes < p->max_head ? p->meta_bytes : p->max_head);
            rc = h1_collect(p, d, len, &i, room);
            if (rc == 0)
                break;
            if (rc < 0) {
                ev = h1_fail(p, rc == -1 ? 431 : rc == -2 ? 400 : 500);
                break;
            }
            if (p->line_len == 0) {
                h1_next_message(p);
                ev = SRV_HTTP1_MESSAGE_COMPLETE;
                break;
            }
            p->meta_bytes += p->line_len + 2;
            size_t colon;
            rc = h1_field_line(p, &colon); /* checked, then dropped */
            p->line_len = 0;
            if (rc != 0)
                ev = h1_fail(p, rc);
            else if (p->meta_bytes > p->max_head)
                ev = h1_fail(p, 431);
            break;
        }
        default:
            ev = h1_fail(p, 500);
            break;
        }
    }
    *used = i;
    return ev;
}
