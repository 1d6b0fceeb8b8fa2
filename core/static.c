/*
 * Static files (srv_static_add): a non-blocking GET route "PREFIX/{*path}".
 * On the I/O thread that parsed the request the handler stats the path and
 * looks the file up in the root's open-file cache (static_cache.c); a file
 * the cache knows is answered there: 304, 416, HEAD, small files from their
 * cached bytes (one srv_respond, so one write of head and body), and other
 * bodies as a file stream that the engine sends from the descriptor
 * (sendfile) or the core reads as the engine pulls. A path that names
 * nothing gets its 404 there too. A miss goes to a worker, which opens the file below the root without leaving it, caches
 * it and answers the same way. The HTTP rules are in static_http.c.
 */
#include "srv_core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(SYS_openat2) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define SRV__HAVE_OPENAT2 1
#endif

/* The open-file cache's bounds, per srv_static_add (docs/API.md). */
#define SRV__STATIC_CACHE_ENTRIES 1024     /* files, so also descriptors */
#define SRV__STATIC_CACHE_BYTES (8u << 20) /* bytes of small files kept */
#define SRV__STATIC_SMALL (32u << 10)      /* a file this size or less keeps its bytes */
/* A file's bytes are kept only once its mtime is this many seconds old: a
 * write in the same clock tick as the last one would leave the stat the
 * same and the cached bytes stale. */
#define SRV__STATIC_SETTLED_S 2

typedef struct srv__static {
    int rootfd;            /* O_PATH | O_DIRECTORY, for the server's life */
    char *real_root;       /* its real path, for the fallback check */
    char *index;           /* NULL: no index file */
    int max_age;           /* < 0: no Cache-Control */
    char cache_control[32]; /* "max-age=N", or "" */
    bool cache_ok;         /* cache initialised */
    srv__fcache cache;
} srv__static;

/* Cleared once the kernel said ENOSYS: then the fallback only. */
static atomic_bool srv__openat2_works = true;

static void srv__static_free(void *ctx)
{
    srv__static *st = ctx;
    if (st->cache_ok)
        srv__fcache_destroy(&st->cache);
    if (st->rootfd >= 0)
        close(st->rootfd);
    free(st->real_root);
    free(st->index);
    free(st);
}

/* Is `path` (absolute, as the kernel names an open file) root or below it? */
static bool srv__below(const char *real_root, const char *path)
{
    size_t n = strlen(real_root);
    if (n == 1 && real_root[0] == '/')
        return path[0] == '/';
    return strncmp(path, real_root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int srv__static_open(int rootfd, const char *real_root, const char *rel, bool use_openat2)
{
    const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
#ifdef SRV__HAVE_OPENAT2
    if (use_openat2 && atomic_load(&srv__openat2_works)) {
        struct open_how how = {.flags = (uint64_t)flags,
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
        long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        /* ENOSYS: an old kernel; EPERM: a seccomp filter that does not know
         * the call. Anything else is the file's answer. */
        if (errno == ENOSYS)
            atomic_store(&srv__openat2_works, false);
        else if (errno != EPERM)
            return errno == EAGAIN ? -ENOENT : -errno;
    }
#else
    (void)use_openat2;
#endif
    /* Fallback: open, then ask the kernel where the file really is (the
     * descriptor's path, not a name that could be swapped meanwhile). */
    if (rel[0] == '/')
        return -EXDEV;
    int fd = openat(rootfd, rel, flags);
    if (fd < 0)
        return -errno;
    char link[64], path[PATH_MAX + 1];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0 || (size_t)n >= sizeof path - 1) {
        close(fd);
        return -EXDEV; /* cannot tell: refuse */
    }
    path[n] = '\0';
    if (!srv__below(real_root, path)) {
        close(fd);
        return -EXDEV;
    }
    return fd;
}

/* ---- answering ------------------------------------------------------------ */

static void srv__static_answer(srv_request *req, int status, const char *text)
{
    if (status >= 400) { /* an error: in the server's error format */
        char body[SRV__ERROR_BODY_MAX];
        const char *ctype;
        size_t n = srv__error_body(req, status, body, sizeof body, &ctype);
        srv_respond(req, status, ctype, body, n);
        return;
    }
    srv_respond(req, status, "text/plain; charset=utf-8", text, strlen(text));
}

static void srv__static_errno(srv_request *req, int err)
{
    switch (err) {
    case EACCES:
    case EPERM:
        srv__static_answer(req, 403, "Forbidden\n");
        return;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
        srv__static_answer(req, 503, "Service Unavailable\n");
        return;
    default: /* ENOENT, ENOTDIR, EXDEV (outside the root), ELOOP, ENAMETOOLONG... */
        srv__static_answer(req, 404, "Not Found\n");
    }
}

/* 301 to the same target with a '/' after the path. */
static void srv__static_redirect(srv_request *req)
{
    const char *t = srv_request_target(req);
    size_t plen = strcspn(t, "?#");
    size_t n = strlen(t);
    char *loc = malloc(n + 2);
    if (loc == NULL) {
        srv__static_answer(req, 503, "Service Unavailable\n");
        return;
    }
    memcpy(loc, t, plen);
    loc[plen] = '/';
    memcpy(loc + plen + 1, t + plen, n - plen + 1);
    srv_set_header(req, "Location", loc);
    free(loc);
    srv__static_answer(req, 301, "Moved Permanently\n");
}

static void srv__static_release(void *ctx)
{
    srv__fentry_unref(ctx);
}

/* Whether a is at least as recent as b. */
static bool srv__ts_ge(struct timespec a, struct timespec b)
{
    return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec >= b.tv_nsec);
}

/* `"opaque"` or `W/"opaque"` with "-gzip" before the closing quote. */
static void srv__gzip_etag(const char *etag, bool weak, char out[80])
{
    const char *t = etag[0] == 'W' && etag[1] == '/' ? etag + 2 : etag;
    size_t n = strlen(t);
    snprintf(out, 80, "%s%.*s-gzip\"", weak ? "W/" : "", (int)(n > 0 ? n - 1 : 0), t);
}

/* Whether req may get e gzip'ed: compression applies to its type and size
 * and Accept-Encoding takes gzip. */
static bool srv__static_accepts(srv_request *req, const srv__fentry *e)
{
    return srv__compress_static(req->srv, e->type, e->size) && srv__accepts_gzip(req);
}

/*
 * Answer req from the file e (the caller's reference, given up here), or
 * from sib, e's fresh precompressed "name.gz" (a reference given up too;
 * NULL: none): no file I/O here. A body not in the cache is a file stream:
 * the engine sends it from the descriptor (sendfile) or the core reads it
 * into the stream buffer as the engine pulls, on the engine's thread, a
 * piece of at most the stream buffer at a time (memory per download is
 * that buffer, whatever the file's size). The gzip form (srv_compression_set)
 * is sib as it is, else e's cached gzip'ed bytes, else e deflated as it is
 * read (static_gzip.c); it is never a range (a Range is answered from e),
 * and it has its own ETag (the identity one with "-gzip": weak when made
 * here, as its bytes depend on the zlib level) so that caches keep the two
 * apart.
 */
static void srv__static_serve(srv_request *req, const srv__static *st, srv__fentry *e,
                              srv__fentry *sib)
{
    uint64_t size = e->size;
    bool head = strcmp(srv_request_method(req), "HEAD") == 0;
    bool varies = srv__compress_static(req->srv, e->type, e->size);
    bool accepts = varies && srv__accepts_gzip(req);
    if (!accepts && sib != NULL) {
        srv__fentry_unref(sib);
        sib = NULL;
    }
    /* A cached file that gzip does not shrink goes out as it is. */
    bool gzip = accepts && srv_request_header(req, "Range") == NULL &&
                (sib != NULL || e->bytes == NULL || e->gz != NULL);
    char gz_etag[80] = "";
    if (accepts)
        srv__gzip_etag(sib != NULL ? sib->etag : e->etag, sib == NULL, gz_etag);
    const char *etag = gzip ? gz_etag : e->etag;
    /* The other form's ETag also validates: a client may hold either. */
    const char *other = gzip ? e->etag : accepts ? gz_etag : NULL;
    const srv__fentry *dated = gzip && sib != NULL ? sib : e;
    int64_t mtime = (int64_t)dated->mtim.tv_sec;

    /* RFC 9110 13.2.2: If-None-Match first; If-Modified-Since only without it. */
    const char *inm = srv_request_header(req, "If-None-Match");
    const char *ims = srv_request_header(req, "If-Modified-Since");
    int64_t since;
    bool not_modified = false;
    if (inm != NULL) {
        if (srv__etag_list_match(inm, etag)) {
            not_modified = true;
        } else if (other != NULL && srv__etag_list_match(inm, other)) {
            not_modified = true;
            etag = other; /* the one the client holds */
        }
    } else {
        not_modified = ims != NULL && srv__static_date_parse(ims, &since) && mtime <= since;
    }
    uint64_t first = 0, last = size ? size - 1 : 0;
    const char *range = head || not_modified || gzip ? NULL : srv_request_header(req, "Range");
    int r = SRV__RANGE_NONE;
    if (range != NULL &&
        srv__if_range_match(srv_request_header(req, "If-Range"), e->etag,
                            (int64_t)e->mtim.tv_sec, (int64_t)time(NULL)))
        r = srv__range_parse(range, size, &first, &last);
    uint64_t length = size == 0 ? 0 : last - first + 1;

    srv_set_header(req, "ETag", etag);
    srv_set_header(req, "Last-Modified", dated->date);
    if (!gzip) /* ranges are of the identity form only */
        srv_set_header(req, "Accept-Ranges", "bytes");
    if (st->cache_control[0] != '\0')
        srv_set_header(req, "Cache-Control", st->cache_control);
    if (varies) /* compressed or not, the answer depends on Accept-Encoding */
        srv_set_header(req, "Vary", "Accept-Encoding");
    if (not_modified) {
        srv__fentry_unref(e);
        srv__fentry_unref(sib);
        srv_respond(req, 304, NULL, NULL, 0);
        return;
    }
    if (gzip) {
        srv_set_header(req, "Content-Encoding", "gzip");
        if (sib != NULL) { /* served as it is: swap it in for e */
            const char *type = e->type; /* static storage */
            srv__fentry_unref(e);
            e = sib;
            sib = NULL;
            size = e->size;
            if (!head && size > 0 && e->bytes != NULL) {
                srv__respond_as_is(req, 200, type, e->bytes, (size_t)size);
                srv__fentry_unref(e);
                return;
            }
            srv__stream_file file = {.fd = e->fd, .release = srv__static_release, .ctx = e};
            srv_stream *stream;
            int rc = srv__stream_start_file(req, 200, type, (int64_t)size, &file, &stream);
            if (rc != 0) {
                srv__fentry_unref(e);
                if (rc == SRV_EINVAL || rc == SRV_EENGINE)
                    srv__static_answer(req, 500,
                                       "Internal Server Error: static files need streams\n");
                return;
            }
            srv_stream_end(stream);
            return;
        }
        if (e->gz != NULL) { /* HEAD too: the core sends its Content-Length only */
            srv__respond_as_is(req, 200, e->type, e->gz, e->gz_len);
            srv__fentry_unref(e);
            return;
        }
        int rc;
        if (head) { /* the length is not known without deflating it all */
            srv_stream *stream;
            rc = srv_stream_start(req, 200, e->type, SRV_LENGTH_UNKNOWN, &stream);
            if (rc == 0)
                srv_stream_end(stream);
            srv__fentry_unref(e);
        } else {
            rc = srv__static_gzip_stream(req, 200, e);
            if (rc != 0)
                srv__fentry_unref(e);
        }
        if (rc == SRV_EINVAL || rc == SRV_EENGINE || rc == SRV_ENOMEM)
            srv__static_answer(req, rc == SRV_ENOMEM ? 503 : 500,
                               rc == SRV_ENOMEM ? "Service Unavailable\n"
                                                : "Internal Server Error: static files need streams\n");
        return;
    }
    srv__fentry_unref(sib);
    char cr[80];
    if (r == SRV__RANGE_UNSAT) {
        srv__fentry_unref(e);
        snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)size);
        srv_set_header(req, "Content-Range", cr);
        srv__static_answer(req, 416, "Range Not Satisfiable\n");
        return;
    }
    int status = 200;
    if (r == SRV__RANGE_ONE) {
        status = 206;
        snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long)first,
                 (unsigned long long)last, (unsigned long long)size);
        srv_set_header(req, "Content-Range", cr);
    }
    if (!head && length > 0 && e->bytes != NULL) { /* one write of head and body */
        srv__respond_as_is(req, status, e->type, e->bytes + first, (size_t)length);
        srv__fentry_unref(e);
        return;
    }
    srv__stream_file file = {.fd = e->fd, .off = first, .release = srv__static_release, .ctx = e};
    srv_stream *stream;
    int rc = srv__stream_start_file(req, status, e->type, (int64_t)length, &file, &stream);
    if (rc != 0) {
        srv__fentry_unref(e);
        if (rc == SRV_EINVAL || rc == SRV_EENGINE) /* not sent: req is still ours */
            srv__static_answer(req, 500, "Internal Server Error: static files need streams\n");
        return; /* else timed out or the client left: req is released */
    }
    srv_stream_end(stream); /* e is the stream's now */
}

/* A new cache entry for the open file fd (given up here) named `name`,
 * with its bytes when small and settled (and those gzip'ed, when
 * compression applies to them). NULL when out of memory. */
static srv__fentry *srv__static_entry(const srv_server *srv, int fd, const struct stat *sb,
                                      const char *name)
{
    srv__fentry *e = srv__fentry_new(name, fd, sb);
    if (e == NULL) {
        close(fd);
        return NULL;
    }
    e->type = srv__static_mime(name);
    srv__static_etag((uint64_t)sb->st_ino, e->size, (int64_t)sb->st_mtim.tv_sec,
                     sb->st_mtim.tv_nsec, e->etag);
    srv__static_date((int64_t)sb->st_mtim.tv_sec, e->date);
    if (e->size > 0 && e->size <= SRV__STATIC_SMALL &&
        (int64_t)time(NULL) - (int64_t)sb->st_mtim.tv_sec >= SRV__STATIC_SETTLED_S) {
        char *b = malloc((size_t)e->size);
        size_t got = 0;
        while (b != NULL && got < e->size) {
            ssize_t n = pread(fd, b + got, (size_t)e->size - got, (off_t)got);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
        if (b != NULL && got == e->size) {
            e->bytes = b;
            e->bytes_len = got;
            srv__static_gz_bytes(srv, e);
        } else {
            free(b); /* it shrank meanwhile: served from the descriptor */
        }
    }
    return e;
}

/* "name.gz" (malloc'd), or NULL when out of memory. */
static char *srv__gz_name(const char *name)
{
    size_t n = strlen(name);
    char *gz = malloc(n + 4);
    if (gz != NULL) {
        memcpy(gz, name, n);
        memcpy(gz + n, ".gz", 4);
    }
    return gz;
}

/* e's precompressed sibling "name.gz" from the cache, when the path names
 * a regular file at least as recent as e. *open_it: there is one the cache
 * does not know (a worker must open it). The I/O thread: stats only. */
static srv__fentry *srv__static_sibling_cached(srv__static *st, const srv__fentry *e,
                                               bool *open_it)
{
    *open_it = false;
    char *gz = srv__gz_name(e->name);
    if (gz == NULL)
        return NULL;
    struct stat sb;
    srv__fentry *g = NULL;
    if (fstatat(st->rootfd, gz, &sb, 0) != 0)
        srv__fcache_get(&st->cache, gz, NULL); /* gone: its entry too */
    else if (S_ISREG(sb.st_mode) && srv__ts_ge(sb.st_mtim, e->mtim))
        *open_it = (g = srv__fcache_get(&st->cache, gz, &sb)) == NULL;
    free(gz);
    return g;
}

/* A worker: open e's sibling "name.gz" below the root, as the file itself
 * is (no way out through a link), and cache it; NULL when there is no
 * fresh regular one. */
static srv__fentry *srv__static_sibling_open(srv_request *req, srv__static *st,
                                             const srv__fentry *e)
{
    char *gz = srv__gz_name(e->name);
    if (gz == NULL)
        return NULL;
    srv__fentry *g = NULL;
    int fd = srv__static_open(st->rootfd, st->real_root, gz, true);
    struct stat sb;
    if (fd < 0) {
        srv__fcache_drop(&st->cache, gz);
    } else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || !srv__ts_ge(sb.st_mtim, e->mtim)) {
        close(fd);
    } else if ((g = srv__static_entry(req->srv, fd, &sb, gz)) != NULL) {
        srv__fcache_put(&st->cache, g);
    }
    free(gz);
    return g;
}

/* A worker: open the file below the root (the index of a directory), put
 * it in the cache, answer; e: the file, found in the cache already (its
 * sibling is what must be opened). */
static void srv__static_open_serve(srv_request *req, srv__static *st, srv__fentry *e)
{
    if (e != NULL) {
        srv__fentry *sib = srv__static_accepts(req, e) ? srv__static_sibling_open(req, st, e)
                                                       : NULL;
        srv__static_serve(req, st, e, sib);
        return;
    }
    const char *value = srv_request_param(req, "path");
    int fd = srv__static_open(st->rootfd, st->real_root, value[0] ? value : ".", true);
    if (fd < 0) {
        srv__fcache_drop(&st->cache, value);
        srv__static_errno(req, -fd);
        return;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        srv__static_errno(req, err);
        return;
    }
    const char *name = value;
    char *index_path = NULL;
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        size_t vlen = strlen(value);
        if (vlen > 0 && value[vlen - 1] != '/') {
            srv__static_redirect(req);
            return;
        }
        if (st->index == NULL) {
            srv__static_answer(req, 404, "Not Found\n");
            return;
        }
        size_t ilen = strlen(st->index);
        index_path = malloc(vlen + ilen + 1);
        if (index_path == NULL) {
            srv__static_answer(req, 503, "Service Unavailable\n");
            return;
        }
        memcpy(index_path, value, vlen);
        memcpy(index_path + vlen, st->index, ilen + 1);
        name = index_path;
        fd = srv__static_open(st->rootfd, st->real_root, index_path, true);
        if (fd < 0 || fstat(fd, &sb) != 0) {
            int err = fd < 0 ? -fd : errno;
            if (fd >= 0)
                close(fd);
            srv__fcache_drop(&st->cache, index_path);
            free(index_path);
            srv__static_errno(req, err);
            return;
        }
    }
    if (!S_ISREG(sb.st_mode)) { /* a fifo, device, socket, or a directory as index */
        close(fd);
        srv__fcache_drop(&st->cache, name);
        free(index_path);
        srv__static_answer(req, 404, "Not Found\n");
        return;
    }
    e = srv__static_entry(req->srv, fd, &sb, name);
    free(index_path);
    if (e == NULL) {
        srv__static_answer(req, 503, "Service Unavailable\n");
        return;
    }
    srv__fcache_put(&st->cache, e);
    srv__fentry *sib = srv__static_accepts(req, e) ? srv__static_sibling_open(req, st, e) : NULL;
    srv__static_serve(req, st, e, sib);
}

/* ---- the handler: the I/O thread, then maybe a worker ---------------------- */

typedef struct srv__static_job {
    srv_job job;
    srv_request *req;
    srv__static *st;
    srv__fentry *e; /* found in the cache (a reference), or NULL */
} srv__static_job;

static void srv__static_job_run(srv_job *job)
{
    srv__static_job *j = (srv__static_job *)job;
    srv__static_open_serve(j->req, j->st, j->e);
    free(j);
}

/* Continue on a worker: opening the file (and reading a small one's bytes
 * for the cache) may block. e: the file from the cache (its reference
 * goes with the job), when only its sibling must be opened. */
static void srv__static_hand_off(srv_request *req, srv__static *st, srv__fentry *e)
{
    srv__static_job *j = malloc(sizeof *j);
    if (j != NULL) {
        *j = (srv__static_job){
            .job = {.run = srv__static_job_run}, .req = req, .st = st, .e = e};
        if (srv__pool_submit(srv_request_server(req), &j->job) == 0)
            return;
        free(j);
    }
    srv__fentry_unref(e);
    srv__static_answer(req, 503, "Service Unavailable\n");
}

static void srv__static_handler(srv_request *req, void *ctx)
{
    srv__static *st = ctx;
    const char *value = srv_request_param(req, "path");
    if (value == NULL || !srv__static_path_ok(srv_request_target(req), value)) {
        srv__static_answer(req, 404, "Not Found\n");
        return;
    }
    /* The name the cache knows the file by: a directory's is its index's. */
    char buf[512];
    const char *name = value;
    size_t vlen = strlen(value);
    if (vlen == 0 || value[vlen - 1] == '/') {
        size_t ilen = st->index ? strlen(st->index) : 0;
        if (st->index == NULL || vlen + ilen >= sizeof buf) {
            srv__static_hand_off(req, st, NULL);
            return;
        }
        memcpy(buf, value, vlen);
        memcpy(buf + vlen, st->index, ilen + 1);
        name = buf;
    }
    /* Every answer from the cache is checked against the file the path
     * names now: a changed, replaced, removed or unreadable file is never
     * served from it (its entry goes at once). */
    struct stat sb;
    srv__fentry *e = NULL;
    if (fstatat(st->rootfd, name, &sb, 0) != 0) {
        int err = errno;
        srv__fcache_get(&st->cache, name, NULL);
        /* Nothing there by any way of resolving it: the worker's confined
         * open (which only refuses more) would answer the same 404. */
        if (err == ENOENT || err == ENOTDIR) {
            srv__static_answer(req, 404, "Not Found\n");
            return;
        }
    } else if (S_ISREG(sb.st_mode))
        e = srv__fcache_get(&st->cache, name, &sb);
    if (e != NULL && e->bytes == NULL && e->size > 0 && e->size <= SRV__STATIC_SMALL &&
        (int64_t)time(NULL) - (int64_t)e->mtim.tv_sec >= SRV__STATIC_SETTLED_S) {
        srv__fentry_unref(e); /* settled since it was cached: read its bytes now */
        e = NULL;
    }
    if (e == NULL) {
        srv__static_hand_off(req, st, NULL);
        return;
    }
    /* A precompressed sibling the cache does not know yet is opened on a
     * worker, as any file is. */
    bool open_it = false;
    srv__fentry *sib = srv__static_accepts(req, e) ? srv__static_sibling_cached(st, e, &open_it)
                                                   : NULL;
    if (open_it)
        srv__static_hand_off(req, st, e);
    else
        srv__static_serve(req, st, e, sib);
}

/* ---- registration ------------------------------------------------------------ */

void srv_static_opts_init_sized(srv_static_opts *opts, size_t size)
{
    if (opts == NULL || size < SRV__STATIC_OPTS_MIN_SIZE || size > SRV__STRUCT_MAX_SIZE)
        return;
    memset(opts, 0, size);
    opts->size = size;
    opts->index = "index.html";
    opts->max_age = -1;
}

int srv_static_add(srv_server *srv, const srv_static_opts *opts)
{
    if (srv == NULL || opts == NULL || opts->size < SRV__STATIC_OPTS_MIN_SIZE ||
        opts->size > SRV__STRUCT_MAX_SIZE)
        return SRV_EINVAL;
    srv_static_opts o;
    srv_static_opts_init(&o);
    memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    if (o.prefix == NULL || o.prefix[0] != '/' || o.root == NULL || o.root[0] == '\0' ||
        o.flags != 0 || (o.index != NULL && (strchr(o.index, '/') != NULL ||
                                              strcmp(o.index, ".") == 0 ||
                                              strcmp(o.index, "..") == 0)))
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;

    /* "/static" and "/static/" both give "/static/{*path}"; "/" gives "/{*path}". */
    size_t plen = strlen(o.prefix);
    while (plen > 1 && o.prefix[plen - 1] == '/')
        plen--;
    if (plen == 1)
        plen = 0;
    char *pattern = malloc(plen + sizeof "/{*path}");
    if (pattern == NULL)
        return SRV_ENOMEM;
    memcpy(pattern, o.prefix, plen);
    memcpy(pattern + plen, "/{*path}", sizeof "/{*path}");

    srv__static *st = calloc(1, sizeof *st);
    if (st == NULL) {
        free(pattern);
        return SRV_ENOMEM;
    }
    st->rootfd = open(o.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (st->rootfd < 0) {
        srv__server_set_error(srv, "static root %s: %s", o.root, strerror(errno));
        srv__static_free(st);
        free(pattern);
        return SRV_ESYS;
    }
    char link[64], path[PATH_MAX + 1];
    snprintf(link, sizeof link, "/proc/self/fd/%d", st->rootfd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n > 0 && (size_t)n < sizeof path - 1) {
        path[n] = '\0';
        st->real_root = strdup(path);
    } else {
        st->real_root = realpath(o.root, NULL);
    }
    st->index = o.index != NULL && o.index[0] != '\0' ? strdup(o.index) : NULL;
    st->max_age = o.max_age;
    if (o.max_age >= 0)
        snprintf(st->cache_control, sizeof st->cache_control, "max-age=%d", o.max_age);
    /* Every entry holds a descriptor: at most a quarter of the process's
     * limit, so that the cache never starves accept (a soft limit of 1024
     * is common). */
    size_t entries = SRV__STATIC_CACHE_ENTRIES;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 4 < entries)
        entries = rl.rlim_cur / 4 > 16 ? (size_t)(rl.rlim_cur / 4) : 16;
    if (srv__fcache_init(&st->cache, entries, SRV__STATIC_CACHE_BYTES, SRV__STATIC_SMALL) != 0) {
        srv__static_free(st);
        free(pattern);
        return SRV_ENOMEM;
    }
    st->cache_ok = true;
    if (st->real_root == NULL || (o.index != NULL && o.index[0] != '\0' && st->index == NULL)) {
        int rc = st->real_root == NULL && errno != ENOMEM ? SRV_ESYS : SRV_ENOMEM;
        if (rc == SRV_ESYS)
            srv__server_set_error(srv, "static root %s: no real path", o.root);
        srv__static_free(st);
        free(pattern);
        return rc;
    }

    /* Owned first: once the route exists its context must live as long. */
    int rc = srv__router_own(&srv->router, st, srv__static_free);
    if (rc != 0) {
        srv__static_free(st);
        free(pattern);
        return rc;
    }
    srv_route_opts ro;
    srv_route_opts_init(&ro);
    ro.method = "GET";
    ro.path = pattern;
    ro.handler = srv__static_handler;
    ro.flags = SRV_ROUTE_NONBLOCKING; /* it hands to a worker what may block */
    ro.ctx = st;
    rc = srv_route_add(srv, &ro); /* on failure st is unused, freed with the server */
    free(pattern);
    return rc;
}
