/*
 * Streamed responses, once for every engine: the per-stream buffer and its
 * limit, HTTP/1.1 chunk framing (when the engine's library does not frame),
 * the states (open, ended, closed) and who is told what: the engine gets a
 * stream_kick when it waits and something comes, the application a
 * writable callback on a worker when room comes or the stream closed.
 * Every stream field is guarded by its request's mu (srv_core.h).
 */
#include "srv_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int srv__streams_init(srv_server *srv)
{
    srv->streams.head = NULL;
    return pthread_mutex_init(&srv->streams.mu, NULL) == 0 ? 0 : SRV_ESYS;
}

void srv__streams_destroy(srv_server *srv)
{
    pthread_mutex_destroy(&srv->streams.mu);
}

size_t srv__chunk_head(size_t n, char *out)
{
    return (size_t)snprintf(out, 19, "%zx\r\n", n);
}

static void srv__streams_link(srv_stream *s)
{
    srv_server *srv = s->req->srv;
    pthread_mutex_lock(&srv->streams.mu);
    s->prev = NULL;
    s->next = srv->streams.head;
    if (s->next)
        s->next->prev = s;
    srv->streams.head = s;
    s->listed = true;
    pthread_mutex_unlock(&srv->streams.mu);
}

/* false when srv__streams_drop_all took it first. */
static bool srv__streams_unlink(srv_stream *s)
{
    srv_server *srv = s->req->srv;
    pthread_mutex_lock(&srv->streams.mu);
    bool was = s->listed;
    if (was) {
        if (s->prev)
            s->prev->next = s->next;
        else
            srv->streams.head = s->next;
        if (s->next)
            s->next->prev = s->prev;
        s->prev = s->next = NULL;
        s->listed = false;
    }
    pthread_mutex_unlock(&srv->streams.mu);
    return was;
}

/* ---- the application's writable callback (req->mu held to queue) ---- */

static void srv__stream_writable_run(srv_job *job)
{
    srv_stream *s = (srv_stream *)((char *)job - offsetof(srv_stream, job));
    srv_request *req = s->req;
    pthread_mutex_lock(&req->mu);
    void (*fn)(srv_stream *, void *) = s->wfn;
    void *arg = s->warg;
    s->wfn = NULL;
    s->wpending = false;
    bool ended = s->app_ended;
    pthread_mutex_unlock(&req->mu);
    if (fn != NULL && !ended)
        fn(s, arg);
    srv__request_unref(req); /* the job's reference */
}

static size_t srv__stream_buffered(const srv_stream *s)
{
    return s->wr - s->rd;
}

/* Queue the callback when it is due: room (at most half full) or closed. */
static void srv__stream_maybe_writable(srv_stream *s)
{
    if (s->wfn == NULL || s->wpending || s->app_ended)
        return;
    if (!s->closed && !s->bodiless && !s->stop_ended) { /* else due at once */
        /* Due when the write refused last (or half the limit) fits now:
         * a callback that could only be refused again would spin. */
        size_t need = s->want > 0 ? s->want : s->limit / 2;
        if (s->cap - srv__stream_buffered(s) < need && s->buf != NULL)
            return;
        if (s->lent > 0 && s->cap - s->wr < need)
            return; /* srv__stream_sent looks again */
    }
    s->wpending = true;
    atomic_fetch_add(&s->req->refs, 1);
    s->job.run = srv__stream_writable_run;
    if (srv__pool_submit(s->req->srv, &s->job) != 0) {
        /* The pool is shut down (srv_server_free): the callback is dropped. */
        s->wpending = false;
        s->wfn = NULL;
        atomic_fetch_sub(&s->req->refs, 1); /* the application still holds one */
    }
}

/* Tell an engine that waits (req->mu held). */
static void srv__stream_kick(srv_stream *s)
{
    if (s->engine_waiting && !s->engine_done) {
        s->engine_waiting = false;
        srv__engine_stream_kick(s->req->srv, s->req);
    }
}

/* ---- the application's side ----------------------------------------- */

int srv_stream_start(srv_request *req, int status, const char *content_type, int64_t length,
                     srv_stream **out)
{
    if (req == NULL || out == NULL || status < 200 || status > 599 ||
        (length < 0 && length != SRV_LENGTH_UNKNOWN))
        return SRV_EINVAL;
    if (content_type != NULL)
        for (const char *p = content_type; *p; p++)
            if (*p == '\r' || *p == '\n')
                return SRV_EINVAL;
    if (!(req->srv->caps & SRV_ENGINE_CAP_STREAM))
        return SRV_EENGINE;
    int rc = srv__inflight_answer_stream(req, status, content_type, length, NULL);
    if (rc != 0)
        return rc;
    /* The engine may already pull from it: it only touches it under mu. */
    srv__streams_link(req->stream);
    *out = req->stream;
    return 0;
}

int srv__stream_start_file(srv_request *req, int status, const char *content_type,
                           int64_t length, const srv__stream_file *file, srv_stream **out)
{
    if (req == NULL || out == NULL || file == NULL || length < 0)
        return SRV_EINVAL;
    if (!(req->srv->caps & SRV_ENGINE_CAP_STREAM))
        return SRV_EENGINE;
    int rc = srv__inflight_answer_stream(req, status, content_type, length, file);
    if (rc != 0)
        return rc;
    srv__streams_link(req->stream);
    *out = req->stream;
    return 0;
}

int srv__stream_start_owned(srv_request *req, int status, const char *content_type,
                            void (*release)(void *ctx), void *ctx, srv_stream **out)
{
    if (req == NULL || out == NULL || release == NULL)
        return SRV_EINVAL;
    if (!(req->srv->caps & SRV_ENGINE_CAP_STREAM))
        return SRV_EENGINE;
    /* A file stream with no file bytes: only its release is used. */
    srv__stream_file none = {.fd = -1, .release = release, .ctx = ctx};
    int rc = srv__inflight_answer_stream(req, status, content_type, SRV_LENGTH_UNKNOWN, &none);
    if (rc != 0)
        return rc;
    srv__streams_link(req->stream);
    *out = req->stream;
    return 0;
}

void srv__stream_cut(srv_stream *s)
{
    pthread_mutex_lock(&s->req->mu);
    if (!s->engine_done)
        s->closed = true;
    srv__stream_kick(s); /* one that is not waiting sees it at its next pull */
    pthread_mutex_unlock(&s->req->mu);
}

/* Make room for `need` bytes at the tail (mu held): move the unsent bytes
 * to the front when none are lent to the engine. */
static bool srv__stream_room(srv_stream *s, size_t need)
{
    if (s->buf == NULL) {
        /* The limit plus one chunk's framing: a write of `limit` bytes fits
         * an empty buffer. */
        s->cap = s->limit + 32;
        s->buf = malloc(s->cap);
        if (s->buf == NULL)
            return false;
    }
    if (srv__stream_buffered(s) + need > s->cap)
        return false;
    if (s->cap - s->wr >= need)
        return true;
    if (s->lent > 0)
        return false; /* the engine holds a pointer into it: wait for sent */
    memmove(s->buf, s->buf + s->rd, s->wr - s->rd);
    s->wr -= s->rd;
    s->rd = 0;
    return true;
}

int srv_stream_write(srv_stream *s, const void *data, size_t len)
{
    if (s == NULL || (data == NULL && len > 0))
        return SRV_EINVAL;
    srv_request *req = s->req;
    pthread_mutex_lock(&req->mu);
    int rc = 0;
    if (s->app_ended)
        rc = SRV_EINVAL;
    else if (s->closed || s->stop_ended)
        rc = SRV_ECLOSED;
    else if (s->bodiless)
        rc = SRV_ENOBODY; /* HEAD, 204, 304: tell the producer to stop */
    else if (len > s->limit)
        rc = SRV_ETOOBIG;
    else if (s->length >= 0 && (uint64_t)s->length - s->written < len)
        rc = SRV_EINVAL;
    if (rc != 0 || len == 0) {
        if (rc == 0)
            s->written += len;
        pthread_mutex_unlock(&req->mu);
        return rc;
    }
    char head[20];
    size_t hlen = s->chunked ? srv__chunk_head(len, head) : 0;
    size_t need = hlen + len + (s->chunked ? 2 : 0);
    if (!srv__stream_room(s, need)) {
        s->want = need;
        pthread_mutex_unlock(&req->mu);
        return s->buf == NULL ? SRV_ENOMEM : SRV_EAGAIN;
    }
    s->want = 0;
    char *p = s->buf + s->wr;
    memcpy(p, head, hlen);
    memcpy(p + hlen, data, len);
    if (s->chunked)
        memcpy(p + hlen + len, "\r\n", 2);
    s->wr += need;
    s->written += len;
    srv__stream_kick(s);
    pthread_mutex_unlock(&req->mu);
    return 0;
}

int srv_stream_on_writable(srv_stream *s, void (*fn)(srv_stream *, void *), void *arg)
{
    if (s == NULL || fn == NULL)
        return SRV_EINVAL;
    pthread_mutex_lock(&s->req->mu);
    if (s->app_ended) {
        pthread_mutex_unlock(&s->req->mu);
        return SRV_EINVAL;
    }
    s->wfn = fn;
    s->warg = arg;
    srv__stream_maybe_writable(s);
    pthread_mutex_unlock(&s->req->mu);
    return 0;
}

int srv_stream_end(srv_stream *s)
{
    if (s == NULL)
        return SRV_EINVAL;
    srv_request *req = s->req;
    pthread_mutex_lock(&req->mu);
    if (s->app_ended) { /* a second end: the stream may be gone already */
        pthread_mutex_unlock(&req->mu);
        return SRV_EINVAL;
    }
    int rc = 0;
    if (s->closed)
        rc = SRV_ECLOSED;
    else if (s->length >= 0 && !s->bodiless && s->written < (uint64_t)s->length)
        rc = SRV_EINVAL; /* srv__stream_pull then says CUT */
    s->app_ended = true;
    s->wfn = NULL;
    srv__stream_kick(s);
    pthread_mutex_unlock(&req->mu);
    if (srv__streams_unlink(s))
        srv__request_unref(req); /* the application's reference */
    return rc;
}

int srv_stream_close_on_stop(srv_stream *s)
{
    if (s == NULL)
        return SRV_EINVAL;
    pthread_mutex_lock(&s->req->mu);
    /* A known length cannot end early without looking cut. */
    int rc = s->app_ended || s->length >= 0 ? SRV_EINVAL : 0;
    if (rc == 0)
        s->close_on_stop = true;
    pthread_mutex_unlock(&s->req->mu);
    return rc;
}

/* ---- server-sent events ----------------------------------------------- */

int srv_sse_start(srv_request *req, srv_stream **out)
{
    if (req == NULL || out == NULL)
        return SRV_EINVAL;
    int rc = srv_set_header(req, "Cache-Control", "no-cache");
    if (rc != 0 && rc != SRV_ETIMEDOUT)
        return rc;
    return srv_stream_start(req, 200, "text/event-stream", SRV_LENGTH_UNKNOWN, out);
}

static bool srv__sse_field_ok(const char *v)
{
    return v == NULL || strpbrk(v, "\r\n") == NULL;
}

int srv_sse_send(srv_stream *s, const char *event, const char *id, const char *data)
{
    if (s == NULL || !srv__sse_field_ok(event) || !srv__sse_field_ok(id))
        return SRV_EINVAL;
    if (data == NULL)
        data = "";
    /* Every line of data gets its own "data: " (6 bytes) and LF. */
    size_t dlen = strlen(data), lines = 1;
    for (size_t i = 0; i < dlen; i++)
        if (data[i] == '\n' || (data[i] == '\r' && data[i + 1] != '\n'))
            lines++;
    size_t cap = dlen + lines * 7 + 1 + (event ? strlen(event) + 8 : 0) +
                 (id ? strlen(id) + 5 : 0);
    char *msg = malloc(cap);
    if (msg == NULL)
        return SRV_ENOMEM;
    size_t o = 0;
    if (event != NULL)
        o += (size_t)sprintf(msg + o, "event: %s\n", event);
    if (id != NULL)
        o += (size_t)sprintf(msg + o, "id: %s\n", id);
    const char *p = data;
    for (;;) {
        size_t n = strcspn(p, "\r\n");
        memcpy(msg + o, "data: ", 6);
        memcpy(msg + o + 6, p, n);
        o += 6 + n;
        msg[o++] = '\n';
        p += n;
        if (*p == '\0')
            break;
        p += (p[0] == '\r' && p[1] == '\n') ? 2 : 1; /* CRLF, LF or CR */
    }
    msg[o++] = '\n';
    int rc = srv_stream_write(s, msg, o);
    free(msg);
    return rc;
}

int srv_sse_keepalive(srv_stream *s)
{
    static const char ka[] = ": keep-alive\n\n";
    return srv_stream_write(s, ka, sizeof ka - 1);
}

/* ---- the engine's side -------------------------------------------------- */

/* Read the next piece of a file body into the empty buf (mu held: the
 * only other users of a file stream's lock are its engine and its end, and
 * a piece is one page-cache read): for a pull that does not take files.
 * False when the file ended early (it shrank) or cannot be read: the body
 * is cut. */
static bool srv__stream_file_read(srv_stream *s)
{
    if (s->buf == NULL) {
        s->cap = s->limit + 32;
        s->buf = malloc(s->cap);
        if (s->buf == NULL)
            return false;
    }
    size_t want = s->file_left < s->cap ? (size_t)s->file_left : s->cap;
    ssize_t n;
    do
        n = pread(s->file_fd, s->buf, want, (off_t)s->file_off);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return false;
    s->rd = 0;
    s->wr = (size_t)n;
    s->file_off += (uint64_t)n;
    s->file_left -= (uint64_t)n;
    return true;
}

static int srv__stream_pull_any(srv_request *req, const void **data, size_t *len,
                                srv__stream_chunk *file)
{
    srv_stream *s = req->stream;
    pthread_mutex_lock(&req->mu);
    int r;
    if (s->closed) {
        r = SRV__STREAM_CUT;
    } else if (s->bodiless) {
        /* HEAD, 204, 304: the head was the whole answer; the request ends
         * now, whenever the application ends its stream. */
        r = SRV__STREAM_END;
    } else if (srv__stream_buffered(s) == 0 && s->has_file && s->file_left > 0 &&
               file != NULL) {
        file->fd = s->file_fd;
        file->off = s->file_off;
        file->len = s->file_left;
        s->lent_file = true;
        r = SRV__STREAM_FILE;
    } else if (srv__stream_buffered(s) == 0 && s->has_file && s->file_left > 0 &&
               !srv__stream_file_read(s)) {
        s->closed = true;
        r = SRV__STREAM_CUT;
    } else if (srv__stream_buffered(s) > 0) {
        *data = s->buf + s->rd;
        *len = s->lent = srv__stream_buffered(s);
        r = SRV__STREAM_DATA;
    } else if ((s->app_ended || s->stop_ended) && s->chunked && s->last_sent < 5) {
        /* The last chunk, after every byte buffered. */
        static const char last[] = "0\r\n\r\n";
        *data = last + s->last_sent;
        *len = 5u - s->last_sent;
        s->lent_last = true;
        r = SRV__STREAM_DATA;
    } else if (s->app_ended || s->stop_ended) {
        bool short_body = s->length >= 0 && !s->bodiless && s->written < (uint64_t)s->length;
        r = short_body ? SRV__STREAM_CUT : SRV__STREAM_END;
    } else {
        s->engine_waiting = true;
        r = SRV__STREAM_WAIT;
    }
    pthread_mutex_unlock(&req->mu);
    return r;
}

bool srv__response_stream_file(srv_request *req)
{
    srv_stream *s = req->stream;
    pthread_mutex_lock(&req->mu);
    bool file = s->has_file && s->file_left > 0 && !s->lent_file && srv__stream_buffered(s) == 0;
    pthread_mutex_unlock(&req->mu);
    return file;
}

int srv__stream_pull(srv_request *req, const void **data, size_t *len)
{
    return srv__stream_pull_any(req, data, len, NULL);
}

int srv__stream_pull_file(srv_request *req, const void **data, size_t *len,
                          srv__stream_chunk *file)
{
    return srv__stream_pull_any(req, data, len, file);
}

void srv__stream_sent(srv_request *req, size_t n)
{
    srv_stream *s = req->stream;
    pthread_mutex_lock(&req->mu);
    if (s->lent_file) {
        s->lent_file = false;
        if (n > s->file_left)
            n = (size_t)s->file_left;
        s->file_off += n;
        s->file_left -= n;
        pthread_mutex_unlock(&req->mu);
        return;
    }
    if (s->lent_last) {
        s->lent_last = false;
        s->last_sent = (unsigned char)(s->last_sent + (n < 5u - s->last_sent ? n : 5u - s->last_sent));
        pthread_mutex_unlock(&req->mu);
        return;
    }
    if (n > s->lent)
        n = s->lent;
    s->rd += n;
    s->lent = 0;
    if (s->rd == s->wr)
        s->rd = s->wr = 0;
    srv__stream_maybe_writable(s);
    pthread_mutex_unlock(&req->mu);
}

void srv__stream_detach(srv_request *req)
{
    srv_stream *s = req->stream;
    pthread_mutex_lock(&req->mu);
    s->engine_done = true;
    s->engine_waiting = false;
    s->lent = 0;
    s->lent_last = false;
    s->lent_file = false;
    uint64_t file_unsent = s->has_file ? s->file_left : 0;
    /* Complete: everything written was taken and the application ended
     * it, or wrote its whole known length (an engine may finish such a
     * body before the application's end), or there was no body to send.
     * Otherwise it was cut, and the application learns it at its next
     * write or end. */
    bool complete = s->bodiless || /* HEAD, 204, 304: the head was all */
                    (srv__stream_buffered(s) == 0 && !s->lent_last && file_unsent == 0 &&
                     (s->app_ended || s->stop_ended ||
                      (s->length >= 0 && s->written == (uint64_t)s->length)));
    if (!complete)
        s->closed = true;
    /* What the client got: all that was written, or (cut) what was written
     * less what is still buffered - chunk framing counts as unsent body, so
     * a cut stream is logged with at most what it sent. */
    uint64_t unsent = srv__stream_buffered(s) + file_unsent;
    s->body_sent = s->bodiless ? 0 : complete ? s->written
                                   : s->written > unsent ? s->written - unsent : 0;
    srv__stream_maybe_writable(s);
    pthread_mutex_unlock(&req->mu);
    /* A stream is logged and measured when it ends, with what it sent. */
    if (req->srv->cfg.access_log)
        srv__access_log(req);
    srv__metrics_observe(req);
}

/* ---- stop and free ------------------------------------------------------- */

void srv__streams_end_at_stop(srv_server *srv)
{
    pthread_mutex_lock(&srv->streams.mu);
    for (srv_stream *s = srv->streams.head; s != NULL; s = s->next) {
        pthread_mutex_lock(&s->req->mu);
        if (s->close_on_stop && !s->app_ended && !s->closed && !s->stop_ended) {
            s->stop_ended = true;
            srv__stream_kick(s);
            srv__stream_maybe_writable(s);
        }
        pthread_mutex_unlock(&s->req->mu);
    }
    pthread_mutex_unlock(&srv->streams.mu);
}

void srv__streams_cut_all(srv_server *srv)
{
    pthread_mutex_lock(&srv->streams.mu);
    for (srv_stream *s = srv->streams.head; s != NULL; s = s->next) {
        pthread_mutex_lock(&s->req->mu);
        if (!s->engine_done) /* a detached one was judged complete or cut already */
            s->closed = true;
        srv__stream_kick(s);
        srv__stream_maybe_writable(s);
        pthread_mutex_unlock(&s->req->mu);
    }
    pthread_mutex_unlock(&srv->streams.mu);
}

void srv__streams_drop_all(srv_server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->streams.mu);
        srv_stream *s = srv->streams.head;
        if (s != NULL) {
            srv->streams.head = s->next;
            if (s->next)
                s->next->prev = NULL;
            s->prev = s->next = NULL;
            s->listed = false;
        }
        pthread_mutex_unlock(&srv->streams.mu);
        if (s == NULL)
            return;
        srv__request_unref(s->req);
    }
}
