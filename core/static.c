/*
 * Static files (srv_static_add): a GET route "PREFIX/{*path}" whose handler
 * opens the file below the root without leaving it, answers 304/416 with
 * srv_respond and everything else as a streamed response of known length,
 * read with pread in pieces of at most half the stream buffer and continued
 * from srv_stream_on_writable (back-pressure: memory per download is one
 * piece, whatever the file's size). The HTTP rules are in static_http.c.
 */
#include "srv_core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(SYS_openat2) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define SRV__HAVE_OPENAT2 1
#endif

typedef struct srv__static {
    int rootfd;            /* O_PATH | O_DIRECTORY, for the server's life */
    char *real_root;       /* its real path, for the fallback check */
    char *index;           /* NULL: no index file */
    int max_age;           /* < 0: no Cache-Control */
} srv__static;

/* Cleared once the kernel said ENOSYS: then the fallback only. */
static atomic_bool srv__openat2_works = true;

static void srv__static_free(void *ctx)
{
    srv__static *st = ctx;
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

/* ---- the body: pread pieces into the stream ------------------------------- */

typedef struct srv__sfile {
    srv_stream *stream;
    int fd;
    uint64_t off;  /* next byte to read */
    uint64_t left; /* bytes still to read */
    size_t have;   /* bytes in buf not yet taken by the stream */
    size_t piece;
    char buf[];
} srv__sfile;

static void srv__sfile_done(srv__sfile *f)
{
    /* A short file (it shrank while sent) ends short: the core then closes
     * the connection, so the client sees a truncated body, not a wrong one. */
    srv_stream_end(f->stream);
    close(f->fd);
    free(f);
}

static void srv__sfile_pump(srv_stream *stream, void *arg)
{
    srv__sfile *f = arg;
    (void)stream;
    for (;;) {
        if (f->have == 0) {
            if (f->left == 0) {
                srv__sfile_done(f);
                return;
            }
            size_t want = f->left < f->piece ? (size_t)f->left : f->piece;
            ssize_t n = pread(f->fd, f->buf, want, (off_t)f->off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                srv__sfile_done(f);
                return;
            }
            f->have = (size_t)n;
            f->off += (uint64_t)n;
            f->left -= (uint64_t)n;
        }
        int rc = srv_stream_write(f->stream, f->buf, f->have);
        if (rc == SRV_EAGAIN) {
            /* The callback may run at once on another worker: f is its own
             * from here, do not touch it. */
            if (srv_stream_on_writable(f->stream, srv__sfile_pump, f) != 0)
                srv__sfile_done(f);
            return;
        }
        if (rc != 0) { /* SRV_ECLOSED: the client went away or stop cut it */
            srv__sfile_done(f);
            return;
        }
        f->have = 0;
    }
}

/* ---- the handler (a worker thread) ------------------------------------------ */

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

static void srv__static_handler(srv_request *req, void *ctx)
{
    const srv__static *st = ctx;
    const char *value = srv_request_param(req, "path");
    if (value == NULL || !srv__static_path_ok(srv_request_target(req), value)) {
        srv__static_answer(req, 404, "Not Found\n");
        return;
    }
    int fd = srv__static_open(st->rootfd, st->real_root, value[0] ? value : ".", true);
    if (fd < 0) {
        srv__static_errno(req, -fd);
        return;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        srv__static_errno(req, errno);
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
            free(index_path);
            srv__static_errno(req, err);
            return;
        }
    }
    if (!S_ISREG(sb.st_mode)) { /* a fifo, device, socket, or a directory as index */
        close(fd);
        free(index_path);
        srv__static_answer(req, 404, "Not Found\n");
        return;
    }
    const char *type = srv__static_mime(name);
    free(index_path);

    uint64_t size = (uint64_t)sb.st_size;
    char etag[64], date[30];
    srv__static_etag((uint64_t)sb.st_ino, size, (int64_t)sb.st_mtim.tv_sec, sb.st_mtim.tv_nsec,
                     etag);
    srv__static_date((int64_t)sb.st_mtim.tv_sec, date);
    srv_set_header(req, "ETag", etag);
    srv_set_header(req, "Last-Modified", date);
    srv_set_header(req, "Accept-Ranges", "bytes");
    if (st->max_age >= 0) {
        char cc[32];
        snprintf(cc, sizeof cc, "max-age=%d", st->max_age);
        srv_set_header(req, "Cache-Control", cc);
    }

    /* RFC 9110 13.2.2: If-None-Match first; If-Modified-Since only without it. */
    const char *inm = srv_request_header(req, "If-None-Match");
    const char *ims = srv_request_header(req, "If-Modified-Since");
    int64_t since;
    if (inm != NULL ? srv__etag_list_match(inm, etag)
                    : (ims != NULL && srv__static_date_parse(ims, &since) &&
                       (int64_t)sb.st_mtim.tv_sec <= since)) {
        close(fd);
        srv_respond(req, 304, NULL, NULL, 0);
        return;
    }

    int status = 200;
    uint64_t first = 0, last = size ? size - 1 : 0;
    bool head = strcmp(srv_request_method(req), "HEAD") == 0;
    const char *range = head ? NULL : srv_request_header(req, "Range"); /* GET only */
    int r = SRV__RANGE_NONE;
    if (range != NULL && srv__if_range_match(srv_request_header(req, "If-Range"), etag,
                                             (int64_t)sb.st_mtim.tv_sec, (int64_t)time(NULL)))
        r = srv__range_parse(range, size, &first, &last);
    char cr[80];
    if (r == SRV__RANGE_UNSAT) {
        close(fd);
        snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long)size);
        srv_set_header(req, "Content-Range", cr);
        srv__static_answer(req, 416, "Range Not Satisfiable\n");
        return;
    }
    if (r == SRV__RANGE_ONE) {
        status = 206;
        snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long)first,
                 (unsigned long long)last, (unsigned long long)size);
        srv_set_header(req, "Content-Range", cr);
    }
    uint64_t length = size == 0 ? 0 : last - first + 1;

    /* Half the stream buffer (the configuration is fixed once started): the
     * next piece can be taken while the engine still sends the last one. */
    size_t piece = srv_request_server(req)->cfg.stream_buffer_bytes / 2;
    if (piece > 64 * 1024)
        piece = 64 * 1024;
    if (piece == 0)
        piece = 1;
    srv__sfile *f = NULL;
    if (!head && length > 0) {
        f = malloc(sizeof *f + piece);
        if (f == NULL) {
            close(fd);
            srv__static_answer(req, 503, "Service Unavailable\n");
            return;
        }
    }
    srv_stream *stream;
    int rc = srv_stream_start(req, status, type, (int64_t)length, &stream);
    if (rc == SRV_EINVAL || rc == SRV_EENGINE) { /* not sent: req is still ours */
        close(fd);
        free(f);
        srv__static_answer(req, 500, "Internal Server Error: static files need streams\n");
        return;
    }
    if (rc != 0) { /* timed out or the client left: req is released */
        close(fd);
        free(f);
        return;
    }
    if (f == NULL) { /* HEAD, or nothing to send */
        close(fd);
        srv_stream_end(stream);
        return;
    }
    *f = (srv__sfile){.stream = stream, .fd = fd, .off = first, .left = length,
                      .piece = piece};
    srv__sfile_pump(stream, f);
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
    ro.ctx = st;
    rc = srv_route_add(srv, &ro); /* on failure st is unused, freed with the server */
    free(pattern);
    return rc;
}
