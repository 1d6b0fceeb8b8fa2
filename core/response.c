/*
 * Response framing, once for every engine: which headers go out, the
 * HTTP/1.x head (status line, Content-Length, Date, Connection), HEAD and
 * bodiless statuses, and the keep-alive decision.
 */
#include "srv_core.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

int srv__response_status(const srv_request *req)
{
    return req->status;
}

void srv__request_set_close(srv_request *req)
{
    atomic_store(&req->engine_close, true);
}

/* Whether any Connection header line holds `token`. A client may split the
 * list over several lines ("Connection: keep-alive" then "Connection:
 * close"); looking at the first line only kept such a connection open on
 * engines whose library lets the core decide (h2o), while http-parser
 * (threadpool) closed it. */
static bool srv__connection_has(const srv_request *req, const char *token)
{
    for (size_t i = 0; i < req->header_count; i++)
        if ((req->headers[i].name[0] | 0x20) == 'c' &&
            strcasecmp(req->headers[i].name, "Connection") == 0 &&
            srv__header_has_token(req->headers[i].value, token))
            return true;
    return false;
}

int srv__response_keep_alive(const srv_request *req)
{
    srv_request *r = (srv_request *)req;
    if (r->keep_alive >= 0)
        return r->keep_alive;
    bool ka;
    if (r->close_after || atomic_load(&r->engine_close) || srv__state_stopping(r->srv))
        ka = false;
    else if (r->major == 2)
        ka = true;
    else if (r->major == 1 && r->minor == 1)
        ka = !srv__connection_has(req, "close");
    else if (r->major == 1 && r->minor == 0)
        ka = srv__connection_has(req, "keep-alive") && !srv__connection_has(req, "close");
    else
        ka = false;
    r->keep_alive = ka;
    return ka;
}

static bool srv__bodiless_status(int status)
{
    return (status >= 100 && status < 200) || status == 204 || status == 304;
}

bool srv__response_streamed(const srv_request *req)
{
    return req->stream != NULL && req->stream->active;
}

int64_t srv__response_stream_length(const srv_request *req)
{
    return req->stream != NULL ? req->stream->length : SRV_LENGTH_UNKNOWN;
}

bool srv__response_stream_bodiless(const srv_request *req)
{
    return req->stream != NULL && req->stream->bodiless;
}

const void *srv__response_body(const srv_request *req, size_t *len)
{
    if (req->is_head || srv__bodiless_status(req->status) || req->resp_body == NULL) {
        *len = 0;
        return "";
    }
    *len = req->resp_len;
    return req->resp_body;
}

size_t srv__response_content_length(const srv_request *req)
{
    if (srv__response_streamed(req) && req->stream->length >= 0 &&
        !srv__bodiless_status(req->status))
        return (size_t)req->stream->length;
    return srv__bodiless_status(req->status) ? 0 : req->resp_len;
}

/* The application's headers go out with its own answers only: a 503 the
 * core sends for a timeout or a stop must not carry the Cache-Control,
 * Content-Encoding or Location the application set for its 200. Those the
 * response hooks and header filters (CORS) set go out with every answer. */
static size_t srv__app_header_count(const srv_request *req)
{
    if (!req->core_answer)
        return req->app_header_count;
    size_t n = 0;
    for (size_t i = 0; i < req->app_header_count; i++)
        n += req->app_headers[i].kept;
    return n;
}

/* The index-th of the headers srv__app_header_count counts. */
static const srv__kv *srv__app_header(const srv_request *req, size_t index)
{
    if (!req->core_answer)
        return &req->app_headers[index];
    for (size_t i = 0; i < req->app_header_count; i++)
        if (req->app_headers[i].kept && index-- == 0)
            return &req->app_headers[i];
    return NULL;
}

/* The application's own Server header replaces the configured one. */
static bool srv__core_server_header(const srv_request *req)
{
    if (req->srv->cfg.server_name[0] == '\0')
        return false;
    for (size_t i = 0; i < srv__app_header_count(req); i++)
        if (strcasecmp(srv__app_header(req, i)->name, "Server") == 0)
            return false;
    return true;
}

size_t srv__response_header_count(const srv_request *req)
{
    return srv__app_header_count(req) + (req->extra_header != NULL) + (req->content_type != NULL) +
           srv__core_server_header(req);
}

const char *srv__response_header_at(const srv_request *req, size_t index, const char **value)
{
    size_t app = srv__app_header_count(req);
    if (index < app) {
        const srv__kv *h = srv__app_header(req, index);
        *value = h->value;
        return h->name;
    }
    index -= app;
    if (req->extra_header != NULL && index-- == 0) {
        *value = req->extra_header->value;
        return req->extra_header->name;
    }
    if (req->content_type != NULL && index-- == 0) {
        *value = req->content_type;
        return "Content-Type";
    }
    if (srv__core_server_header(req) && index-- == 0) {
        *value = req->srv->cfg.server_name;
        return "Server";
    }
    *value = NULL;
    return NULL;
}

/* A head being written into a buffer sized for it (srv__response_http1_head
 * counts what goes in); past cap it is cut, never overrun. */
typedef struct srv__hbuf {
    char *p;
    size_t len, cap;
} srv__hbuf;

static void hb_put(srv__hbuf *b, const char *s, size_t n)
{
    /* Never taken (cap counts every piece). A piece that does not fit is
     * dropped whole rather than cut: the copy of a literal then keeps its
     * constant size, a few moves, where a clamped size made the compiler
     * branch on the size and copy in a loop (a third of the head's cost,
     * by callgrind). */
    if (n > b->cap - b->len) {
        b->len = b->cap;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void hb_str(srv__hbuf *b, const char *s)
{
    hb_put(b, s, strlen(s));
}

#define hb_lit(b, lit) hb_put((b), lit, sizeof lit - 1)

static void hb_num(srv__hbuf *b, unsigned long long v)
{
    char t[20];
    size_t i = sizeof t;
    do {
        t[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    hb_put(b, t + i, sizeof t - i);
}

/* The response's headers in srv__response_header_at's order, walked with
 * the Server header's check made once (the head walks them twice: counted,
 * then written). */
typedef struct srv__hwalk {
    const srv_request *req;
    size_t app; /* the next application header */
    int tail;   /* the core's after them: 0 the extra one, 1 Content-Type, 2 Server */
    bool server;
} srv__hwalk;

static bool hw_next(srv__hwalk *w, const char **name, const char **value)
{
    const srv_request *req = w->req;
    while (w->app < req->app_header_count) {
        const srv__kv *h = &req->app_headers[w->app++];
        if (!req->core_answer || h->kept) {
            *name = h->name;
            *value = h->value;
            return true;
        }
    }
    for (; w->tail < 3; w->tail++) {
        if (w->tail == 0 && req->extra_header != NULL) {
            *name = req->extra_header->name;
            *value = req->extra_header->value;
        } else if (w->tail == 1 && req->content_type != NULL) {
            *name = "Content-Type";
            *value = req->content_type;
        } else if (w->tail == 2 && w->server) {
            *name = "Server";
            *value = req->srv->cfg.server_name;
        } else {
            continue;
        }
        w->tail++;
        return true;
    }
    return false;
}

const char *srv__response_http1_head(srv_request *req, size_t *len)
{
    if (req->head != NULL) {
        *len = req->head_len;
        return req->head;
    }
    /* The status line says HTTP/1.1 to every client, 1.0 ones included:
     * the highest version this server conforms to (RFC 9110 6.2, as nginx
     * and libh2o answer); a 1.0 client's answer keeps 1.0's framing (no
     * chunks, the close unless it asked for keep-alive). */
    bool http10 = req->major == 1 && req->minor == 0;
    bool ka = srv__response_keep_alive(req);
    char date[SRV__HTTP_DATE_SIZE];
    srv__http_date(date);

    const char *reason = srv__status_reason(req->status);
    size_t reason_len = strlen(reason);
    bool server = srv__core_server_header(req);
    srv__hwalk w = {req, 0, 0, server};
    const char *name, *v;
    size_t cap = 128 + reason_len;
    while (hw_next(&w, &name, &v))
        cap += strlen(name) + strlen(v) + 4;
    char *buf = malloc(cap);
    if (buf == NULL) {
        static const char fallback[] =
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        req->keep_alive = 0;
        *len = sizeof fallback - 1;
        return fallback;
    }
    /* Appended by hand: snprintf was a twentieth of a light request's CPU. */
    srv__hbuf b = {buf, 0, cap - 1}; /* and a NUL after it, as snprintf left */
    hb_lit(&b, "HTTP/1.1 ");
    hb_num(&b, req->status >= 0 ? (unsigned long long)req->status : 0);
    hb_lit(&b, " ");
    hb_put(&b, reason, reason_len);
    hb_lit(&b, "\r\n");
    w = (srv__hwalk){req, 0, 0, server};
    while (hw_next(&w, &name, &v)) {
        hb_str(&b, name);
        hb_lit(&b, ": ");
        hb_str(&b, v);
        hb_lit(&b, "\r\n");
    }
    hb_lit(&b, "Date: ");
    hb_put(&b, date, SRV__HTTP_DATE_SIZE - 1);
    hb_lit(&b, "\r\n");
    /* A stream of unknown length: chunks (HTTP/1.1) or the close (1.0). */
    if (srv__response_streamed(req) && req->stream->length < 0) {
        if (req->stream->chunked)
            hb_lit(&b, "Transfer-Encoding: chunked\r\n");
    } else if (!srv__bodiless_status(req->status)) {
        hb_lit(&b, "Content-Length: ");
        hb_num(&b, srv__response_content_length(req));
        hb_lit(&b, "\r\n");
    }
    if (!ka)
        hb_lit(&b, "Connection: close\r\n");
    else if (http10)
        hb_lit(&b, "Connection: keep-alive\r\n");
    hb_lit(&b, "\r\n");
    buf[b.len] = '\0';
    size_t o = b.len;
    req->head = buf;
    req->head_len = o;
    *len = o;
    return buf;
}
