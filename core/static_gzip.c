/*
 * Static files gzip'ed on the fly (static.c, with srv_compression_set): a
 * small cached file keeps its gzip'ed bytes next to its own; any other is
 * read and deflated in pieces into a stream of unknown length (chunked on
 * HTTP/1.1, close-delimited on HTTP/1.0), on a worker, as the client takes
 * it: memory per download is zlib's state, one input piece, one output
 * piece and the stream buffer, whatever the file's size.
 */
#include "srv_core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define SRV__GZ_IN (16u << 10)  /* file bytes read at a time */
#define SRV__GZ_OUT (16u << 10) /* at most this much deflated per write */
/* Input deflated in one callback before the worker is given back (the
 * stream asks again at once when it has room): one big download does not
 * hold a worker for its whole length. */
#define SRV__GZ_TURN (256u << 10)

void srv__static_gz_bytes(const srv_server *srv, srv__fentry *e)
{
    if (e->bytes == NULL || e->gz != NULL || !srv__compress_static(srv, e->type, e->size))
        return;
    size_t n;
    char *gz = srv__gzip_buf(srv, e->bytes, e->size, &n);
    if (gz != NULL) {
        e->gz = gz;
        e->gz_len = n;
        e->bytes_len += n;
    }
}

typedef struct srv__gz_pump {
    srv__fentry *e; /* the file (a reference) */
    z_stream zs;
    bool zs_ok;
    bool finished;  /* deflate said Z_STREAM_END: out holds the last bytes */
    uint64_t off;   /* the next file byte to read */
    size_t out_rd, out_wr, out_cap;
    unsigned char *out;
    unsigned char in[SRV__GZ_IN];
} srv__gz_pump;

/* The request is freed: nothing calls the pump any more. */
static void srv__gz_release(void *ctx)
{
    srv__gz_pump *p = ctx;
    if (p->zs_ok)
        deflateEnd(&p->zs);
    srv__fentry_unref(p->e);
    free(p->out);
    free(p);
}

/* Deflate the next piece into out (empty). False when the file cannot give
 * the bytes it had when it was opened (it shrank, or a read failed). */
static bool srv__gz_produce(srv__gz_pump *p)
{
    if (p->zs.avail_in == 0 && p->off < p->e->size) {
        uint64_t left = p->e->size - p->off;
        size_t want = left < SRV__GZ_IN ? (size_t)left : SRV__GZ_IN;
        ssize_t n;
        do
            n = pread(p->e->fd, p->in, want, (off_t)p->off);
        while (n < 0 && errno == EINTR);
        if (n <= 0)
            return false;
        p->off += (uint64_t)n;
        p->zs.next_in = p->in;
        p->zs.avail_in = (uInt)n;
    }
    /* Bytes past the size it had are not read: what the headers describe
     * (ETag) is the file as it was. */
    int flush = p->off >= p->e->size && p->zs.avail_in == 0 ? Z_FINISH : Z_NO_FLUSH;
    p->zs.next_out = p->out;
    p->zs.avail_out = (uInt)p->out_cap;
    int rc = deflate(&p->zs, flush);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        return false;
    p->out_rd = 0;
    p->out_wr = p->out_cap - p->zs.avail_out;
    if (rc == Z_STREAM_END)
        p->finished = true;
    return true;
}

/* The writable callback, on a worker. srv_stream_end is the last thing it
 * does with p: the request (and p with it) may be freed right after. */
static void srv__gz_pump_run(srv_stream *s, void *arg)
{
    srv__gz_pump *p = arg;
    uint64_t start = p->off;
    for (;;) {
        if (p->out_rd < p->out_wr) {
            int rc = srv_stream_write(s, p->out + p->out_rd, p->out_wr - p->out_rd);
            if (rc == SRV_EAGAIN) { /* the client is slow: wait for room */
                if (srv_stream_on_writable(s, srv__gz_pump_run, p) != 0)
                    break;
                return;
            }
            if (rc != 0) /* gone, cut by a stop, HEAD */
                break;
            p->out_rd = p->out_wr = 0;
            continue;
        }
        if (p->finished)
            break;
        if (p->off - start >= SRV__GZ_TURN) { /* others' turn; back at once */
            if (srv_stream_on_writable(s, srv__gz_pump_run, p) != 0)
                break;
            return;
        }
        if (!srv__gz_produce(p)) {
            /* An end now would look like a whole body: cut instead. */
            srv__stream_cut(s);
            break;
        }
    }
    srv_stream_end(s);
}

int srv__static_gzip_stream(srv_request *req, int status, srv__fentry *e)
{
    srv__gz_pump *p = calloc(1, sizeof *p);
    size_t limit = req->srv->cfg.stream_buffer_bytes;
    size_t cap = limit < SRV__GZ_OUT ? limit : SRV__GZ_OUT;
    if (p != NULL)
        p->out = malloc(cap);
    if (p == NULL || p->out == NULL) {
        if (p != NULL)
            free(p->out);
        free(p);
        return SRV_ENOMEM;
    }
    p->e = e;
    p->out_cap = cap;
    if (deflateInit2(&p->zs, srv__compress_level(req->srv), Z_DEFLATED, 15 + 16 /* gzip */, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
        free(p->out);
        free(p);
        return SRV_ENOMEM;
    }
    p->zs_ok = true;
    srv_stream *s;
    int rc = srv__stream_start_owned(req, status, e->type, srv__gz_release, p, &s);
    if (rc != 0) {
        deflateEnd(&p->zs);
        free(p->out);
        free(p);
        return rc;
    }
    /* From here p (and e) are the request's. The first call comes at once,
     * on a worker: deflating is no work for the I/O thread. A HEAD's
     * stream takes no bytes: the first write says so and it ends. */
    if (srv_stream_on_writable(s, srv__gz_pump_run, p) != 0)
        srv_stream_end(s);
    return 0;
}
