/*
 * Static files (srv_static_add) on every engine, same answers: types,
 * ETag, Last-Modified, Content-Length and exact bytes (a 3 MB file, many
 * times the stream buffer, checked byte by byte), 304 by ETag and by date,
 * 206 for a-b, a- and -n, 416, If-Range, several ranges served whole,
 * HEAD, index.html and the directory redirect, 404 for a directory
 * without index, and escapes refused: symbolic links out of the root, an
 * encoded slash, an empty first segment, dot segments (the core's 400),
 * a fifo (answered at once, never opened for blocking). With compression
 * on, text is gzip'ed: on the fly, from cached bytes or from a fresh
 * "name.gz" beside it (test_static_gzip*).
 * The files are made under a mkdtemp directory for each case and removed
 * after it.
 */
#include "conformance.h"

#include <malloc.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <zlib.h>

#define SF_BIG_SIZE (3u * 1000 * 1000)
/* How long a case waits for the server to cut a response whose file shrank
 * under it. An engine whose library sends the file itself (mhd: sendfile)
 * cuts it by the send deadline (static_setup's header_timeout_ms, 10 s)
 * once the client's acknowledged bytes stop: up to twice the deadline, as
 * the first look may still see the bytes in flight. */
#define SF_CUT_WAIT_MS 35000

static char g_sf_dir[64];   /* the case's temporary directory */
static char g_sf_root[128]; /* g_sf_dir/root: what is served */

static unsigned char sf_byte(uint64_t i)
{
    return (unsigned char)((i * 7) ^ (i >> 11) ^ (i >> 19));
}

static int sf_write(const char *rel, const void *p, size_t n)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_sf_dir, rel);
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return -1;
    size_t w = fwrite(p, 1, n, fp);
    return fclose(fp) == 0 && w == n ? 0 : -1;
}

static int sf_write_str(const char *rel, const char *s)
{
    return sf_write(rel, s, strlen(s));
}

static int sf_symlink(const char *target, const char *rel)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_sf_dir, rel);
    return symlink(target, path);
}

static int sf_mkdir(const char *rel)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_sf_dir, rel);
    return mkdir(path, 0755);
}

/* big.bin's bytes, for the parallel case to compare with. */
static unsigned char *g_sf_big;

/* The text file the compression check asks for (8 KB, compressible). */
static char g_sf_text[8192];

static int sf_make_tree(void)
{
    snprintf(g_sf_dir, sizeof g_sf_dir, "/tmp/srv-static-XXXXXX");
    if (mkdtemp(g_sf_dir) == NULL)
        return -1;
    snprintf(g_sf_root, sizeof g_sf_root, "%s/root", g_sf_dir);
    unsigned char *big = malloc(SF_BIG_SIZE);
    if (big == NULL)
        return -1;
    for (uint64_t i = 0; i < SF_BIG_SIZE; i++)
        big[i] = sf_byte(i);
    free(g_sf_big);
    g_sf_big = malloc(SF_BIG_SIZE);
    if (g_sf_big == NULL) {
        free(big);
        return -1;
    }
    memcpy(g_sf_big, big, SF_BIG_SIZE);
    for (size_t i = 0; i < sizeof g_sf_text; i++)
        g_sf_text[i] = "static text, compressible. "[i % 27];
    int rc = sf_mkdir("root") | sf_mkdir("root/sub") | sf_mkdir("root/empty") |
             sf_write("root/big.bin", big, SF_BIG_SIZE) |
             sf_write_str("root/index.html", "<h1>index</h1>\n") |
             sf_write_str("root/sub/index.html", "<h1>sub</h1>\n") |
             sf_write_str("root/small.txt", "hello static\n") |
             sf_write_str("root/style.css", "body{}\n") |
             sf_write_str("root/app.js", "1;\n") |
             sf_write_str("root/data.json", "{}\n") |
             sf_write_str("root/pixel.png", "\x89PNG\r\n") |
             sf_write_str("root/blob.unknownext", "?\n") |
             sf_write_str("root/empty.txt", "") |
             sf_write("root/text.txt", g_sf_text, sizeof g_sf_text) |
             sf_write_str("secret.txt", "secret\n") |
             sf_symlink("/etc/passwd", "root/passwd") |  /* absolute, out */
             sf_symlink("../secret.txt", "root/up.txt") | /* relative, out */
             sf_symlink("..", "root/updir") |             /* a directory out */
             sf_symlink("small.txt", "root/inlink.txt") | /* inside: served */
             sf_symlink("sub", "root/sublink");           /* a directory inside */
    free(big);
    char fifo[256];
    snprintf(fifo, sizeof fifo, "%s/root/fifo", g_sf_dir);
    if (mkfifo(fifo, 0644) != 0)
        rc = -1;
    return rc == 0 ? 0 : -1;
}

static void sf_remove_tree(void)
{
    if (g_sf_dir[0] == '\0')
        return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_sf_dir);
    if (system(cmd) != 0)
        print_error("static: could not remove %s\n", g_sf_dir);
    g_sf_dir[0] = '\0';
    free(g_sf_big);
    g_sf_big = NULL;
}

/* Blocking (on a worker in every mode): hold it ?ms= (sf_busy). */
static void sf_h_hold(srv_request *req, void *ctx)
{
    (void)ctx;
    const char *v = srv_request_query(req, "ms");
    sleep_ms(v != NULL ? atol(v) : 1000);
    srv_respond(req, 200, "text/plain", "held\n", 5);
}

int static_setup(void **state)
{
    if (sf_make_tree() != 0) {
        print_error("static setup: cannot make the files under %s\n", g_sf_dir);
        sf_remove_tree();
        return -1;
    }
    fx *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    f->m = *state ? *state : &MODE_H1;
    for (size_t i = 0; i < FX_MAX_CONNS; i++)
        rc_init(&f->conns[i]);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    srv_config_init(&f->cfg);
    f->cfg.host = "127.0.0.1";
    f->cfg.port = 0;
    f->cfg.worker_threads = 8;
    f->cfg.io_threads = 2;
    f->cfg.header_timeout_ms = 10000; /* also the send deadline: generous under sanitizers on a loaded machine (the gzip slow reader) */
    if (g_tls) {
        f->cfg.tls_cert_file = g_tls_cert;
        f->cfg.tls_key_file = g_tls_key;
    }
    f->srv = srv_server_new(g_engine, &f->cfg);
    if (f->srv == NULL) {
        free(f);
        return -1;
    }
    srv_static_opts so;
    srv_static_opts_init(&so);
    so.prefix = "/static";
    so.root = g_sf_root;
    so.max_age = 60;
    int rc = srv_static_add(f->srv, &so);
    if (rc == 0)
        rc = srv_route(f->srv, "GET", "/hold", sf_h_hold, NULL);
    srv_compression_opts z;
    srv_compression_opts_init(&z);
    z.min_size = 1024;
    if (rc == 0)
        rc = srv_compression_set(f->srv, &z);
    if (rc == 0)
        rc = srv_server_start(f->srv);
    if (rc != 0) {
        print_error("static setup: %s (%s)\n", srv_strerror(rc), srv_server_last_error(f->srv));
        srv_server_free(f->srv);
        free(f);
        sf_remove_tree();
        return -1;
    }
    f->port = srv_server_port(f->srv);
    *state = f;
    return 0;
}

int static_teardown(void **state)
{
    fx *f = *state;
    int rc = 0;
    for (size_t i = 0; i < FX_MAX_CONNS; i++)
        rc_close(&f->conns[i]);
    if (srv_server_stop(f->srv, 2000) != 0)
        rc = -1;
    srv_stats st;
    srv_server_stats(f->srv, &st);
    if (st.connections_open != 0 || st.requests_in_flight != 0) {
        print_error("static teardown: connections_open=%u requests_in_flight=%u\n",
                    st.connections_open, st.requests_in_flight);
        rc = -1;
    }
    srv_server_free(f->srv);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
    sf_remove_tree();
    return rc;
}

/* ---- helpers ------------------------------------------------------------------ */

static void sf_get(fx *f, const char *method, const char *path, const char *h1, const char *h2,
                   http_res *r)
{
    http_req q = {0};
    q.method = method;
    q.path = path;
    q.head = method != NULL && strcmp(method, "HEAD") == 0;
    q.headers[0] = h1;
    q.headers[1] = h1 ? h2 : NULL;
    q.timeout_ms = 15000;
    http_do(f, &q, r);
}

/* Content-Length: required over HTTP/1.1; over HTTP/2 it is optional
 * (DATA frames delimit the body), checked when sent. */
static void sf_check_length(const fx *f, const char *what, const http_res *r,
                            unsigned long long want)
{
    const char *cl = res_header(r, "Content-Length");
    if (cl == NULL && f->m->http2)
        return;
    CHECK(cl != NULL, "[%s] no Content-Length", what);
    CHECK(strtoull(cl, NULL, 10) == want, "[%s] Content-Length %s, want %llu", what, cl, want);
}

/* The body is big.bin[first..first+len). */
static void sf_check_big(const char *what, const http_res *r, uint64_t first, uint64_t len)
{
    CHECK(r->body_len == len, "[%s] %zu bytes, want %llu", what, r->body_len,
          (unsigned long long)len);
    for (uint64_t i = 0; i < len; i++)
        if ((unsigned char)r->body[i] != sf_byte(first + i))
            CHECK(0, "[%s] byte %llu differs", what, (unsigned long long)(first + i));
}

static void sf_expect(fx *f, const char *path, long status, const char *type, const char *body)
{
    http_res r;
    sf_get(f, "GET", path, NULL, NULL, &r);
    check_http(f, path, &r, status);
    if (type != NULL)
        CHECK_STR(path, res_header(&r, "Content-Type"), type);
    if (body != NULL)
        check_body(f, path, &r, body);
    http_res_free(&r);
}

static void sf_last_modified(const char *rel, char out[64])
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_sf_root, rel);
    struct stat sb;
    out[0] = '\0';
    if (stat(path, &sb) == 0) {
        struct tm tm;
        gmtime_r(&sb.st_mtime, &tm);
        strftime(out, 64, "%a, %d %b %Y %H:%M:%S GMT", &tm); /* the C locale */
    }
}

/* ---- cases -------------------------------------------------------------------- */

void test_static_get(void **state)
{
    fx *f = *state;
    http_res r;
    sf_get(f, "GET", "/static/small.txt", NULL, NULL, &r);
    check_http(f, "small.txt", &r, 200);
    check_body(f, "small.txt", &r, "hello static\n");
    CHECK_STR("Content-Type", res_header(&r, "Content-Type"), "text/plain; charset=utf-8");
    sf_check_length(f, "small.txt", &r, 13);
    const char *etag = res_header(&r, "ETag");
    CHECK(etag != NULL && etag[0] == '"' && etag[strlen(etag) - 1] == '"' && strlen(etag) > 2,
          "ETag %s", or_null(etag));
    char lm[64];
    sf_last_modified("small.txt", lm);
    CHECK_STR("Last-Modified", res_header(&r, "Last-Modified"), lm);
    CHECK_STR("Accept-Ranges", res_header(&r, "Accept-Ranges"), "bytes");
    CHECK_STR("Cache-Control", res_header(&r, "Cache-Control"), "max-age=60");
    http_res_free(&r);

    /* The same ETag twice; another file, another ETag. */
    http_res r2, r3;
    sf_get(f, "GET", "/static/small.txt", NULL, NULL, &r);
    sf_get(f, "GET", "/static/style.css", NULL, NULL, &r2);
    sf_get(f, "GET", "/static/inlink.txt", NULL, NULL, &r3); /* a link inside: served */
    check_http(f, "inlink.txt", &r3, 200);
    check_body(f, "inlink.txt", &r3, "hello static\n");
    CHECK(res_header(&r, "ETag") && res_header(&r2, "ETag") &&
              strcmp(res_header(&r, "ETag"), res_header(&r2, "ETag")) != 0,
          "two files, one ETag");
    http_res_free(&r);
    http_res_free(&r2);
    http_res_free(&r3);

    sf_expect(f, "/static/style.css", 200, "text/css; charset=utf-8", "body{}\n");
    sf_expect(f, "/static/app.js", 200, "text/javascript; charset=utf-8", "1;\n");
    sf_expect(f, "/static/data.json", 200, "application/json", "{}\n");
    sf_expect(f, "/static/pixel.png", 200, "image/png", "\x89PNG\r\n");
    sf_expect(f, "/static/blob.unknownext", 200, "application/octet-stream", "?\n");
    sf_expect(f, "/static/empty.txt", 200, "text/plain; charset=utf-8", "");
    sf_expect(f, "/static/sublink/index.html", 200, NULL, "<h1>sub</h1>\n");

    /* Compression is on (min 1 KB, text/plain listed): without
     * Accept-Encoding the file goes out as it is, saying that it varies
     * (test_static_gzip* for the rest). */
    sf_get(f, "GET", "/static/text.txt", NULL, NULL, &r);
    check_http(f, "text.txt", &r, 200);
    CHECK(res_header(&r, "Content-Encoding") == NULL, "Content-Encoding %s",
          res_header(&r, "Content-Encoding"));
    CHECK(rc_header_has_token(&r.hdr, "Vary", "Accept-Encoding"), "text.txt Vary: %s",
          or_null(res_header(&r, "Vary")));
    CHECK(r.body_len == sizeof g_sf_text && memcmp(r.body, g_sf_text, r.body_len) == 0,
          "text.txt: %zu bytes, not the file", r.body_len);
    sf_check_length(f, "text.txt", &r, sizeof g_sf_text);
    http_res_free(&r);
}

/* 3 MB, many times the stream buffer: every byte, in order. */
void test_static_big(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 2; i++) {
        http_res r;
        sf_get(f, "GET", "/static/big.bin", NULL, NULL, &r);
        check_http(f, "big.bin", &r, 200);
        CHECK_STR("Content-Type", res_header(&r, "Content-Type"), "application/octet-stream");
        sf_check_length(f, "big.bin", &r, SF_BIG_SIZE);
        sf_check_big("big.bin", &r, 0, SF_BIG_SIZE);
        http_res_free(&r);
    }
}

void test_static_conditional(void **state)
{
    fx *f = *state;
    http_res r;
    sf_get(f, "GET", "/static/small.txt", NULL, NULL, &r);
    check_http(f, "small.txt", &r, 200);
    char etag[128], lm[64], h[256], h2[256];
    snprintf(etag, sizeof etag, "%s", or_null(res_header(&r, "ETag")));
    snprintf(lm, sizeof lm, "%s", or_null(res_header(&r, "Last-Modified")));
    http_res_free(&r);
    /* The same date in the obsolete forms RFC 9110 5.6.7 has recipients
     * accept (RFC 850, asctime), written in the C locale. */
    char lm850[64] = "", lmasc[64] = "";
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (strptime(lm, "%a, %d %b %Y %H:%M:%S GMT", &tm) != NULL) {
        strftime(lm850, sizeof lm850, "%A, %d-%b-%y %H:%M:%S GMT", &tm);
        strftime(lmasc, sizeof lmasc, "%a %b %e %H:%M:%S %Y", &tm);
    }
    CHECK(lm850[0] != '\0', "Last-Modified is not an IMF-fixdate: %s", lm);

    struct {
        const char *inm, *ims; /* printf formats of the headers, %s: etag or date */
        long status;
        const char *date;      /* the date for ims's %s when not lm */
    } cases[] = {
        {"If-None-Match: %s", NULL, 304, NULL},
        {"If-None-Match: W/%s", NULL, 304, NULL},            /* weak comparison */
        {"If-None-Match: \"nope\", %s", NULL, 304, NULL},    /* a list */
        {"If-None-Match: *", NULL, 304, NULL},
        {"If-None-Match: \"nope\"", NULL, 200, NULL},
        {NULL, "If-Modified-Since: %s", 304, NULL},          /* the date itself */
        {NULL, "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT", 200, NULL},
        {NULL, "If-Modified-Since: not a date", 200, NULL},
        {NULL, "If-Modified-Since: %s", 304, lm850},   /* RFC 850 */
        {NULL, "If-Modified-Since: %s", 304, lmasc},   /* asctime */
        {NULL, "If-Modified-Since: Sunday, 06-Nov-94 08:49:37 GMT", 200, NULL},
        {NULL, "If-Modified-Since: Sun Nov  6 08:49:37 1994", 200, NULL},
        /* If-None-Match wins over If-Modified-Since, both ways. */
        {"If-None-Match: \"nope\"", "If-Modified-Since: %s", 200, NULL},
        {"If-None-Match: %s", "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT", 304, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *a = NULL, *b = NULL;
        if (cases[i].inm) {
            snprintf(h, sizeof h, cases[i].inm, etag);
            a = h;
        }
        if (cases[i].ims) {
            snprintf(h2, sizeof h2, cases[i].ims, cases[i].date ? cases[i].date : lm);
            if (a)
                b = h2;
            else
                a = h2;
        }
        char what[600];
        snprintf(what, sizeof what, "%s | %s", or_null(a), or_null(b));
        sf_get(f, "GET", "/static/small.txt", a, b, &r);
        check_http(f, what, &r, cases[i].status);
        if (cases[i].status == 304) {
            CHECK(r.body_len == 0, "[%s] 304 with %zu bytes of body", what, r.body_len);
            CHECK_STR(what, res_header(&r, "ETag"), etag);
        } else {
            check_body(f, what, &r, "hello static\n");
        }
        http_res_free(&r);
    }
    /* HEAD too. */
    snprintf(h, sizeof h, "If-None-Match: %s", etag);
    sf_get(f, "HEAD", "/static/small.txt", h, NULL, &r);
    check_http(f, "HEAD If-None-Match", &r, 304);
    http_res_free(&r);
}

static void sf_range(fx *f, const char *range, const char *if_range, long status,
                     const char *content_range, uint64_t first, uint64_t len)
{
    char h[128], what[256];
    snprintf(h, sizeof h, "Range: %s", range);
    snprintf(what, sizeof what, "%s | %s", range, or_null(if_range));
    http_res r;
    sf_get(f, "GET", "/static/big.bin", h, if_range, &r);
    check_http(f, what, &r, status);
    if (status == 416) {
        CHECK_STR(what, res_header(&r, "Content-Range"), content_range);
    } else {
        if (content_range != NULL)
            CHECK_STR(what, res_header(&r, "Content-Range"), content_range);
        else
            CHECK(res_header(&r, "Content-Range") == NULL, "[%s] Content-Range %s", what,
                  res_header(&r, "Content-Range"));
        sf_check_length(f, what, &r, len);
        sf_check_big(what, &r, first, len);
    }
    http_res_free(&r);
}

void test_static_range(void **state)
{
    fx *f = *state;
    sf_range(f, "bytes=10-19", NULL, 206, "bytes 10-19/3000000", 10, 10);
    sf_range(f, "bytes=0-0", NULL, 206, "bytes 0-0/3000000", 0, 1);
    sf_range(f, "bytes=2999990-", NULL, 206, "bytes 2999990-2999999/3000000", 2999990, 10);
    sf_range(f, "bytes=-7", NULL, 206, "bytes 2999993-2999999/3000000", 2999993, 7);
    sf_range(f, "bytes=2999999-5000000", NULL, 206, "bytes 2999999-2999999/3000000", 2999999,
             1);
    /* Two megabytes from the middle: many pieces, exact. */
    sf_range(f, "bytes=500000-2499999", NULL, 206, "bytes 500000-2499999/3000000", 500000,
             2000000);
    sf_range(f, "bytes=3000000-", NULL, 416, "bytes */3000000", 0, 0);
    sf_range(f, "bytes=99999999999999999999999-", NULL, 416, "bytes */3000000", 0, 0);
    sf_range(f, "bytes=-0", NULL, 416, "bytes */3000000", 0, 0);
    /* Ignored: the whole file, 200. */
    sf_range(f, "bytes=0-1,5-6", NULL, 200, NULL, 0, SF_BIG_SIZE);
    sf_range(f, "bytes=9-3", NULL, 200, NULL, 0, SF_BIG_SIZE);
    sf_range(f, "lines=1-2", NULL, 200, NULL, 0, SF_BIG_SIZE);

    /* If-Range: the current ETag or date gives the range, anything else the
     * whole file. The file was written a moment ago, and a date of the last
     * second is no strong validator: date it an hour back first. */
    char big[256];
    snprintf(big, sizeof big, "%s/root/big.bin", g_sf_dir);
    struct timespec hour_ago[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    CHECK(utimensat(AT_FDCWD, big, hour_ago, 0) == 0, "utimensat %s: %s", big, strerror(errno));
    http_res r;
    sf_get(f, "HEAD", "/static/big.bin", NULL, NULL, &r);
    check_http(f, "HEAD big.bin", &r, 200);
    char ir[160], ird[160];
    snprintf(ir, sizeof ir, "If-Range: %s", or_null(res_header(&r, "ETag")));
    snprintf(ird, sizeof ird, "If-Range: %s", or_null(res_header(&r, "Last-Modified")));
    http_res_free(&r);
    sf_range(f, "bytes=100-199", ir, 206, "bytes 100-199/3000000", 100, 100);
    sf_range(f, "bytes=100-199", ird, 206, "bytes 100-199/3000000", 100, 100);
    sf_range(f, "bytes=100-199", "If-Range: \"stale\"", 200, NULL, 0, SF_BIG_SIZE);
    sf_range(f, "bytes=100-199", "If-Range: Sun, 06 Nov 1994 08:49:37 GMT", 200, NULL, 0,
             SF_BIG_SIZE);

    /* Dated later than now (a clock step, or written this very second):
     * its date is weak, so a date If-Range gets the whole file; its ETag
     * still gives the range. */
    struct timespec ahead[2] = {{.tv_sec = time(NULL) + 3600}, {.tv_sec = time(NULL) + 3600}};
    CHECK(utimensat(AT_FDCWD, big, ahead, 0) == 0, "utimensat %s: %s", big, strerror(errno));
    sf_get(f, "HEAD", "/static/big.bin", NULL, NULL, &r);
    check_http(f, "HEAD big.bin, dated ahead", &r, 200);
    snprintf(ir, sizeof ir, "If-Range: %s", or_null(res_header(&r, "ETag")));
    snprintf(ird, sizeof ird, "If-Range: %s", or_null(res_header(&r, "Last-Modified")));
    http_res_free(&r);
    sf_range(f, "bytes=100-199", ird, 200, NULL, 0, SF_BIG_SIZE);
    sf_range(f, "bytes=100-199", ir, 206, "bytes 100-199/3000000", 100, 100);
}

void test_static_head(void **state)
{
    fx *f = *state;
    http_res r;
    sf_get(f, "HEAD", "/static/big.bin", NULL, NULL, &r);
    check_http(f, "HEAD big.bin", &r, 200);
    CHECK(r.body_len == 0, "HEAD: %zu bytes of body", r.body_len);
    sf_check_length(f, "HEAD big.bin", &r, SF_BIG_SIZE);
    CHECK(res_header(&r, "ETag") != NULL, "HEAD without ETag");
    CHECK_STR("HEAD Content-Type", res_header(&r, "Content-Type"), "application/octet-stream");
    http_res_free(&r);
    sf_get(f, "HEAD", "/static/", NULL, NULL, &r);
    check_http(f, "HEAD /static/", &r, 200);
    sf_check_length(f, "HEAD /static/", &r, 15);
    http_res_free(&r);
}

void test_static_directories(void **state)
{
    fx *f = *state;
    sf_expect(f, "/static/", 200, "text/html; charset=utf-8", "<h1>index</h1>\n");
    sf_expect(f, "/static/index.html", 200, "text/html; charset=utf-8", "<h1>index</h1>\n");
    sf_expect(f, "/static/sub/", 200, "text/html; charset=utf-8", "<h1>sub</h1>\n");
    sf_expect(f, "/static/empty/", 404, NULL, NULL);
    sf_expect(f, "/static/empty", 301, NULL, NULL);
    sf_expect(f, "/static/missing.txt", 404, NULL, NULL);
    sf_expect(f, "/static/small.txt/", 404, NULL, NULL); /* a file is not a directory */
    sf_expect(f, "/static/missing/deeper.txt", 404, NULL, NULL);
    http_res r;
    sf_get(f, "GET", "/static/sub?x=1", NULL, NULL, &r);
    check_http(f, "/static/sub", &r, 301);
    CHECK_STR("Location", res_header(&r, "Location"), "/static/sub/?x=1");
    http_res_free(&r);
    sf_expect(f, "/static", 404, NULL, NULL); /* the prefix alone is no route */
    sf_expect(f, "/static/", 200, NULL, NULL);
    /* POST: the route is GET (and HEAD). */
    http_req q = {0};
    q.path = "/static/small.txt";
    q.body = "x";
    q.body_len = 1;
    http_do(f, &q, &r);
    check_http(f, "POST /static/small.txt", &r, 405);
    http_res_free(&r);
}

/* Escapes from the root, through libcurl: links out of it, a fifo. */
void test_static_refused(void **state)
{
    fx *f = *state;
    sf_expect(f, "/static/passwd", 404, NULL, NULL);
    sf_expect(f, "/static/up.txt", 404, NULL, NULL);
    sf_expect(f, "/static/updir/secret.txt", 404, NULL, NULL);
    sf_expect(f, "/static/updir/", 404, NULL, NULL);
    sf_expect(f, "/static/a%2fb", 404, NULL, NULL);
    /* A fifo: refused at once, never waited on (it has no writer). */
    long long t0 = rc_now_ms();
    sf_expect(f, "/static/fifo", 404, NULL, NULL);
    CHECK(rc_now_ms() - t0 < 10000, "the fifo took %lld ms", rc_now_ms() - t0);
    sf_expect(f, "/static/small.txt", 200, NULL, "hello static\n"); /* still serving */
}

static void sf_raw(fx *f, const char *target, int status, const char *body)
{
    char *req = malloc(strlen(target) + 64);
    sprintf(req, "GET %s HTTP/1.1\r\nHost: conformance\r\n\r\n", target);
    rc_conn *c = conn_open(f, target);
    conn_send_str(c, target, req);
    conn_expect(c, target, 0, status, body, NULL);
    if (status == 400) /* a refused path: the core answers and closes */
        conn_expect_closed(c, target, 3000);
    rc_close(c);
    free(req);
}

/* Traversal attempts as sent, byte for byte (no client normalises them). */
void test_static_traversal_raw(void **state)
{
    fx *f = *state;
    /* Dot segments, plain or encoded: the core's 400, before any route. */
    sf_raw(f, "/static/../secret.txt", 400, NULL);
    sf_raw(f, "/static/%2e%2e/secret.txt", 400, NULL);
    sf_raw(f, "/static/%2E%2E/secret.txt", 400, NULL);
    sf_raw(f, "/static/..%2fsecret.txt", 400, NULL);
    sf_raw(f, "/static/sub/..%2F..%2Fsecret.txt", 400, NULL);
    sf_raw(f, "/static/sub/%2e%2e/%2e%2e/secret.txt", 400, NULL);
    sf_raw(f, "/static/small.txt%00.png", 400, NULL);
    /* Encoded slashes and an empty first segment: refused by the files. */
    sf_raw(f, "/static/a%2fb", 404, NULL);
    sf_raw(f, "/static/sub%2Findex.html", 404, NULL);
    sf_raw(f, "/static//etc/passwd", 404, NULL);
    sf_raw(f, "/static/%2fetc/passwd", 404, NULL);
    /* Links out of the root. */
    sf_raw(f, "/static/passwd", 404, NULL);
    sf_raw(f, "/static/up.txt", 404, NULL);
    sf_raw(f, "/static/updir/secret.txt", 404, NULL);
    sf_raw(f, "/static/fifo", 404, NULL);
    /* What is inside stays served. */
    sf_raw(f, "/static/inlink.txt", 200, "hello static\n");
    sf_raw(f, "/static/sub/index.html", 200, "<h1>sub</h1>\n");
    sf_raw(f, "/static/%73mall.txt", 200, "hello static\n");
}

/* srv_static_add's own checks. */
void test_static_add_errors(void **state)
{
    (void)state;
    CHECK(sf_make_tree() == 0, "files under %s", g_sf_dir);
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv != NULL, "server");
    srv_static_opts o;
    srv_static_opts_init(&o);
    CHECK_INT("NULL opts", srv_static_add(srv, NULL), SRV_EINVAL);
    CHECK_INT("no prefix", srv_static_add(srv, &o), SRV_EINVAL);
    o.prefix = "static";
    o.root = g_sf_root;
    CHECK_INT("relative prefix", srv_static_add(srv, &o), SRV_EINVAL);
    o.prefix = "/files";
    o.flags = 1;
    CHECK_INT("flags", srv_static_add(srv, &o), SRV_EINVAL);
    o.flags = 0;
    o.index = "a/b.html";
    CHECK_INT("index with a slash", srv_static_add(srv, &o), SRV_EINVAL);
    o.index = "index.html";
    char missing[200];
    snprintf(missing, sizeof missing, "%s/no-such-dir", g_sf_dir);
    o.root = missing;
    CHECK_INT("missing root", srv_static_add(srv, &o), SRV_ESYS);
    CHECK(strstr(srv_server_last_error(srv), "no-such-dir") != NULL, "last error: %s",
          srv_server_last_error(srv));
    char file[200];
    snprintf(file, sizeof file, "%s/small.txt", g_sf_root);
    o.root = file;
    CHECK_INT("root is a file", srv_static_add(srv, &o), SRV_ESYS);
    o.root = g_sf_root;
    CHECK_INT("first", srv_static_add(srv, &o), 0);
    o.prefix = "/files/"; /* the same pattern */
    CHECK_INT("twice", srv_static_add(srv, &o), SRV_EEXIST);
    o.prefix = "/";
    CHECK_INT("at the top", srv_static_add(srv, &o), 0);
    CHECK_INT("start", srv_server_start(srv), 0);
    o.prefix = "/later";
    CHECK_INT("started", srv_static_add(srv, &o), SRV_ESTATE);
    CHECK_INT("stop", srv_server_stop(srv, 1000), 0);
    srv_server_free(srv);
    sf_remove_tree();
}

/* ---- many downloads at once ------------------------------------------------- */

#define SF_PARALLEL 8       /* transfers at once */
#define SF_ROUNDS 50        /* downloads each, one after the other (kept alive) */
#define SF_PIECE (1u << 20) /* each a 1 MiB range of big.bin */

typedef struct sf_dl {
    uint64_t first; /* the range's first byte */
    size_t n;
    int bad; /* a byte differed or too many came */
    int rounds;
} sf_dl;

static size_t sf_dl_body(char *p, size_t size, size_t n, void *arg)
{
    sf_dl *d = arg;
    size_t len = size * n;
    if (d->n + len > SF_PIECE) {
        d->bad = 1;
        return len;
    }
    /* memcmp against the file's bytes: a client as fast as wrk, which is
     * what it takes to meet the race below often. */
    if (memcmp(p, g_sf_big + d->first + d->n, len) != 0)
        d->bad = 1;
    d->n += len;
    return len;
}

static void sf_dl_arm(CURLM *m, CURL *h, sf_dl *d, struct curl_slist **hdr, int k)
{
    d->first = (uint64_t)(k * 7919) % (SF_BIG_SIZE - SF_PIECE);
    d->n = 0;
    char range[64];
    snprintf(range, sizeof range, "Range: bytes=%llu-%llu", (unsigned long long)d->first,
             (unsigned long long)(d->first + SF_PIECE - 1));
    curl_slist_free_all(*hdr);
    *hdr = curl_slist_append(NULL, range);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdr);
    curl_multi_add_handle(m, h);
}

/* SF_PARALLEL clients each download SF_ROUNDS 1 MiB ranges in turn, every
 * byte checked: thousands of stream wake-ups crossing between the workers
 * and the I/O threads (the h2o engine once sent a second wake-up while the
 * first was still queued and h2o aborted the process; wrk -c4 on a 1 MB
 * file found it in a second, this case about every other run). Over HTTP/2
 * each download has its own connection (see below). */
void test_static_parallel(void **state)
{
    fx *f = *state;
    CURLM *m = curl_multi_init();
    CHECK(m != NULL, "curl_multi_init");
    CURL *h[SF_PARALLEL];
    struct curl_slist *hdr[SF_PARALLEL] = {0};
    static sf_dl dl[SF_PARALLEL];
    char url[128];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d/static/big.bin", url_scheme(), f->port);
    for (int i = 0; i < SF_PARALLEL; i++) {
        memset(&dl[i], 0, sizeof dl[i]);
        h[i] = easy_new(f);
        CHECK(h[i] != NULL, "easy handle");
        curl_easy_setopt(h[i], CURLOPT_URL, url);
        curl_easy_setopt(h[i], CURLOPT_TIMEOUT_MS, 60000L);
        curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, sf_dl_body);
        curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &dl[i]);
        curl_easy_setopt(h[i], CURLOPT_PRIVATE, (char *)&dl[i]);
        if (f->m->http2) { /* libcurl 7.88 fails a prior-knowledge h2 connection's reuse
                            * (also against nginx): one connection per download */
            curl_easy_setopt(h[i], CURLOPT_FRESH_CONNECT, 1L);
            curl_easy_setopt(h[i], CURLOPT_FORBID_REUSE, 1L);
        }
        sf_dl_arm(m, h[i], &dl[i], &hdr[i], i);
    }
    int running = 1, done = 0;
    while (running) {
        CHECK(curl_multi_perform(m, &running) == CURLM_OK, "curl_multi_perform");
        int msgs;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(m, &msgs)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            CURL *e = msg->easy_handle;
            CURLcode res = msg->data.result;
            long status = 0;
            char *priv = NULL;
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
            curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
            sf_dl *d = (sf_dl *)priv;
            CHECK(res == CURLE_OK && status == 206, "download %d: %s, status %ld", done,
                  curl_easy_strerror(res), status);
            CHECK(!d->bad && d->n == SF_PIECE, "download %d: %zu bytes from %llu%s", done, d->n,
                  (unsigned long long)d->first, d->bad ? ", wrong bytes" : "");
            done++;
            curl_multi_remove_handle(m, e);
            int i = (int)(d - dl);
            if (++d->rounds < SF_ROUNDS) {
                sf_dl_arm(m, e, d, &hdr[i], done + SF_PARALLEL);
                running = 1;
            }
        }
        if (running)
            curl_multi_poll(m, NULL, 0, 200, NULL);
    }
    CHECK_INT("downloads done", done, SF_PARALLEL * SF_ROUNDS);
    for (int i = 0; i < SF_PARALLEL; i++) {
        curl_easy_cleanup(h[i]);
        curl_slist_free_all(hdr[i]);
    }
    curl_multi_cleanup(m);
}

/* ---- the open-file cache: a change on disk is seen by the next request ---- */

/* An hour back, the same for every file of a case: a file dated so is
 * settled (its bytes may be cached), and two files given this date have
 * the same mtime. */
static time_t g_sf_then;

static int sf_date(const char *rel, time_t t)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_sf_dir, rel);
    struct timespec ts[2] = {{.tv_sec = t}, {.tv_sec = t}};
    return utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
}

static int sf_path_op(const char *rel, int (*op)(const char *))
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_sf_dir, rel);
    return op(path);
}

/* Write `s` to rel.new and rename it over rel (a new inode). */
static int sf_replace(const char *rel, const char *s)
{
    char tmp[128], from[256], to[256];
    snprintf(tmp, sizeof tmp, "%.100s.new", rel);
    snprintf(from, sizeof from, "%s/%s", g_sf_dir, tmp);
    snprintf(to, sizeof to, "%s/%s", g_sf_dir, rel);
    if (sf_write_str(tmp, s) != 0 || sf_date(tmp, g_sf_then) != 0)
        return -1;
    return rename(from, to);
}

/* Rewrite rel in place (same inode) with s, then give it back its date:
 * only its ctime (and maybe its size) tells. */
static int sf_rewrite(const char *rel, const char *s)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_sf_dir, rel);
    FILE *fp = fopen(path, "r+");
    if (fp == NULL)
        return -1;
    size_t n = strlen(s);
    int rc = fwrite(s, 1, n, fp) == n && fflush(fp) == 0 && ftruncate(fileno(fp), (off_t)n) == 0
                 ? 0 : -1;
    if (fclose(fp) != 0)
        rc = -1;
    return rc == 0 ? sf_date(rel, g_sf_then) : -1;
}

static int sf_chmod0(const char *path)
{
    return chmod(path, 0);
}

static int sf_chmod644(const char *path)
{
    return chmod(path, 0644);
}

/* Files the cache holds (bytes of small ones, the descriptor of a big
 * one) are changed behind the server's back: replaced (same size, same
 * mtime, another inode), truncated, rewritten in place (same size, same
 * mtime: only ctime differs), turned into a link out of the root, into a
 * directory, deleted, made unreadable. The very next request sees each
 * change (docs/API.md: every answer from the cache is checked against a
 * stat of the path), and what can no longer be seen is never served. */
void test_static_cache_hostile(void **state)
{
    fx *f = *state;
    g_sf_then = time(NULL) - 3600;
    static const char *const names[] = {"c_replace.txt", "c_trunc.txt", "c_inplace.txt",
                                        "c_link.txt",    "c_del.txt",   "c_perm.txt",
                                        "c_dir.txt",     "c_fresh.txt"};
    const size_t n = sizeof names / sizeof names[0];
    char rel[128], url[128];
    for (size_t i = 0; i < n; i++) {
        snprintf(rel, sizeof rel, "root/%s", names[i]);
        CHECK(sf_write_str(rel, "version one\n") == 0, "write %s", rel);
        /* c_fresh.txt stays dated now: too fresh for its bytes to be kept */
        if (strcmp(names[i], "c_fresh.txt") != 0)
            CHECK(sf_date(rel, g_sf_then) == 0, "date %s", rel);
    }
    CHECK(sf_date("root/big.bin", g_sf_then) == 0, "date big.bin");
    /* Twice each: the first request fills the cache, the second is
     * answered from it. */
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < n; i++) {
            snprintf(url, sizeof url, "/static/%s", names[i]);
            sf_expect(f, url, 200, "text/plain; charset=utf-8", "version one\n");
        }
        http_res r;
        sf_get(f, "GET", "/static/big.bin", NULL, NULL, &r);
        check_http(f, "big.bin cached", &r, 200);
        sf_check_big("big.bin cached", &r, 0, SF_BIG_SIZE);
        http_res_free(&r);
    }

    CHECK(sf_replace("root/c_replace.txt", "version two\n") == 0, "replace");
    CHECK(sf_rewrite("root/c_trunc.txt", "vers") == 0, "truncate");
    CHECK(sf_rewrite("root/c_inplace.txt", "VERSION ONE\n") == 0, "rewrite in place");
    CHECK(sf_path_op("root/c_link.txt", unlink) == 0 &&
              sf_symlink("../secret.txt", "root/c_link.txt") == 0,
          "link out of the root");
    CHECK(sf_path_op("root/c_del.txt", unlink) == 0, "delete");
    CHECK(sf_path_op("root/c_perm.txt", sf_chmod0) == 0, "chmod 0");
    CHECK(sf_path_op("root/c_dir.txt", unlink) == 0 && sf_mkdir("root/c_dir.txt") == 0,
          "a directory in its place");
    CHECK(sf_rewrite("root/c_fresh.txt", "version 1.5\n") == 0, "rewrite the fresh one");
    char big[256];
    snprintf(big, sizeof big, "%s/root/big.bin", g_sf_dir);
    CHECK(truncate(big, 1000) == 0, "truncate big.bin");

    /* At once: no time to wait out. */
    for (int round = 0; round < 2; round++) {
        sf_expect(f, "/static/c_replace.txt", 200, NULL, "version two\n");
        sf_expect(f, "/static/c_trunc.txt", 200, NULL, "vers");
        sf_expect(f, "/static/c_inplace.txt", 200, NULL, "VERSION ONE\n");
        sf_expect(f, "/static/c_link.txt", 404, NULL, NULL);
        sf_expect(f, "/static/c_del.txt", 404, NULL, NULL);
        if (geteuid() != 0) /* root reads a file of mode 0 */
            sf_expect(f, "/static/c_perm.txt", 403, NULL, NULL);
        sf_expect(f, "/static/c_dir.txt", 301, NULL, NULL);
        sf_expect(f, "/static/c_fresh.txt", 200, NULL, "version 1.5\n");
        http_res r;
        sf_get(f, "GET", "/static/big.bin", NULL, NULL, &r);
        check_http(f, "big.bin truncated", &r, 200);
        sf_check_length(f, "big.bin truncated", &r, 1000);
        sf_check_big("big.bin truncated", &r, 0, 1000);
        http_res_free(&r);
        sf_get(f, "HEAD", "/static/c_trunc.txt", NULL, NULL, &r);
        check_http(f, "HEAD c_trunc.txt", &r, 200);
        sf_check_length(f, "HEAD c_trunc.txt", &r, 4);
        http_res_free(&r);
    }

    /* And back: readable again, recreated. */
    CHECK(sf_path_op("root/c_perm.txt", sf_chmod644) == 0, "chmod 644");
    CHECK(sf_write_str("root/c_del.txt", "back\n") == 0, "recreate");
    sf_expect(f, "/static/c_perm.txt", 200, NULL, "version one\n");
    sf_expect(f, "/static/c_del.txt", 200, NULL, "back\n");
}

/* Ranges of a cached big file (sent from its descriptor: sendfile where
 * the engine has it, in cleartext) and of a small one (from its cached
 * bytes), each asked twice, every byte checked; HEAD and 304 of a cached
 * file. */
void test_static_range_sendfile(void **state)
{
    fx *f = *state;
    g_sf_then = time(NULL) - 3600;
    CHECK(sf_date("root/big.bin", g_sf_then) == 0 && sf_date("root/small.txt", g_sf_then) == 0,
          "date the files");
    for (int round = 0; round < 2; round++) {
        sf_range(f, "bytes=0-65535", NULL, 206, "bytes 0-65535/3000000", 0, 65536);
        sf_range(f, "bytes=65536-1114111", NULL, 206, "bytes 65536-1114111/3000000", 65536,
                 1048576);
        sf_range(f, "bytes=1234567-1234567", NULL, 206, "bytes 1234567-1234567/3000000",
                 1234567, 1);
        sf_range(f, "bytes=2999000-", NULL, 206, "bytes 2999000-2999999/3000000", 2999000,
                 1000);
        sf_range(f, "bytes=-1", NULL, 206, "bytes 2999999-2999999/3000000", 2999999, 1);
        sf_range(f, "bytes=3000000-", NULL, 416, "bytes */3000000", 0, 0);
        sf_range(f, "bytes=1-0", NULL, 200, NULL, 0, SF_BIG_SIZE);

        http_res r;
        sf_get(f, "GET", "/static/small.txt", "Range: bytes=6-11", NULL, &r);
        check_http(f, "small.txt 6-11", &r, 206);
        check_body(f, "small.txt 6-11", &r, "static");
        CHECK_STR("small.txt 6-11", res_header(&r, "Content-Range"), "bytes 6-11/13");
        http_res_free(&r);
        sf_get(f, "GET", "/static/small.txt", "Range: bytes=-1", NULL, &r);
        check_http(f, "small.txt -1", &r, 206);
        check_body(f, "small.txt -1", &r, "\n");
        http_res_free(&r);
        sf_get(f, "GET", "/static/small.txt", "Range: bytes=13-", NULL, &r);
        check_http(f, "small.txt 13-", &r, 416);
        CHECK_STR("small.txt 13-", res_header(&r, "Content-Range"), "bytes */13");
        http_res_free(&r);
        sf_get(f, "HEAD", "/static/small.txt", NULL, NULL, &r);
        check_http(f, "HEAD small.txt", &r, 200);
        CHECK(r.body_len == 0, "HEAD: %zu bytes of body", r.body_len);
        sf_check_length(f, "HEAD small.txt", &r, 13);
        char inm[160];
        snprintf(inm, sizeof inm, "If-None-Match: %s", or_null(res_header(&r, "ETag")));
        http_res_free(&r);
        sf_get(f, "GET", "/static/small.txt", inm, NULL, &r);
        check_http(f, "small.txt If-None-Match", &r, 304);
        CHECK(r.body_len == 0, "304: %zu bytes of body", r.body_len);
        http_res_free(&r);
    }
}

/* A big file cut short while it is being sent (the client reads slowly):
 * the body ends early with a close - never a hang, never other bytes -
 * and the server goes on serving. */
void test_static_shrink_raw(void **state)
{
    fx *f = *state;
    char huge[256];
    snprintf(huge, sizeof huge, "%s/root/huge.bin", g_sf_dir);
    const off_t size = (off_t)64 << 20; /* more than the socket buffers hold */
    CHECK(truncate(huge, size) == 0 || (creat(huge, 0644) >= 0 && truncate(huge, size) == 0),
          "make %s", huge);
    rc_conn *c = conn_open(f, "huge.bin");
    conn_send_str(c, "huge.bin", "GET /static/huge.bin HTTP/1.1\r\nHost: conformance\r\n\r\n");
    CHECK(rc_read_some(c, 5000) > 0, "huge.bin: nothing came");
    CHECK(truncate(huge, 1 << 20) == 0, "truncate huge.bin");
    int rc = RC_TIMEOUT;
    long long t0 = rc_now_ms();
    while (rc_now_ms() - t0 < SF_CUT_WAIT_MS) {
        rc = rc_read_some(c, 1000);
        if (rc == 0 || rc == RC_RESET)
            break;
        if (c->len - c->off > (1u << 20)) /* keep the buffer small: count only */
            c->off = c->len;
    }
    CHECK(rc == 0 || rc == RC_RESET, "huge.bin: still open after the file shrank (%d)", rc);
    CHECK(c->received < (size_t)size, "huge.bin: %zu bytes, the whole file", c->received);
    rc_close(c);
    sf_raw(f, "/static/small.txt", 200, "hello static\n");
}

/* What the I/O thread answers without a worker (issue 34: no hand-off for
 * a cached small file, its HEAD and 304, or a path that names nothing)
 * is answered while every worker is held by a blocking route. */
void test_static_answers_while_workers_busy(void **state)
{
    fx *f = *state;
    const char *what = "static answers while every worker is busy";
    CHECK(sf_date("root/small.txt", time(NULL) - 60) == 0, "utimensat");
    sf_expect(f, "/static/small.txt", 200, "text/plain; charset=utf-8", "hello static\n"); /* cached */
    enum { HOLDERS = 8 }; /* static_setup's worker_threads */
    rc_conn *hold[HOLDERS];
    for (int i = 0; i < HOLDERS; i++) {
        hold[i] = conn_open(f, what);
        conn_send_str(hold[i], what, "GET /hold?ms=2500 HTTP/1.1\r\nHost: conformance\r\n\r\n");
    }
    sleep_ms(300); /* every worker is in sf_h_hold now */
    long long t0 = rc_now_ms();
    sf_raw(f, "/static/small.txt", 200, "hello static\n");
    sf_raw(f, "/static/no-such-file.txt", 404, NULL);
    sf_raw(f, "/static/no-such-dir/x.txt", 404, NULL);
    sf_raw(f, "/static/small.txt/under-a-file", 404, NULL);
    long long took = rc_now_ms() - t0;
    CHECK(took < 1500, "[%s] the answers took %lld ms: they waited for a worker", what, took);
    for (int i = 0; i < HOLDERS; i++) {
        conn_expect(hold[i], what, 0, 200, "held\n", NULL);
        rc_close(hold[i]);
    }
}

/* ---- gzip (srv_compression_set with srv_static_add) --------------------------- */

/* p[0..n) inflated (malloc'd, *out_len bytes), or NULL when it is not one
 * whole gzip stream with nothing after it. */
static char *sf_gunzip(const char *p, size_t n, size_t *out_len)
{
    size_t cap = 1u << 16, got = 0;
    char *out = malloc(cap);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (out == NULL || inflateInit2(&zs, 15 + 16) != Z_OK) {
        free(out);
        return NULL;
    }
    zs.next_in = (Bytef *)(uintptr_t)p;
    zs.avail_in = (uInt)n;
    int zr = Z_OK;
    while (zr == Z_OK) {
        if (got == cap) {
            char *b = realloc(out, cap * 2);
            if (b == NULL)
                break;
            out = b;
            cap *= 2;
        }
        zs.next_out = (Bytef *)out + got;
        zs.avail_out = (uInt)(cap - got);
        zr = inflate(&zs, Z_NO_FLUSH);
        got = cap - zs.avail_out;
    }
    bool whole = zr == Z_STREAM_END && zs.avail_in == 0;
    inflateEnd(&zs);
    if (!whole) {
        free(out);
        return NULL;
    }
    *out_len = got;
    return out;
}

/* p[0..n) gzip'ed into the file rel. */
static int sf_write_gz(const char *rel, const void *p, size_t n)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    uLong cap = deflateBound(&zs, (uLong)n);
    unsigned char *out = malloc(cap);
    zs.next_in = (Bytef *)(uintptr_t)p;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    int zr = out != NULL ? deflate(&zs, Z_FINISH) : Z_MEM_ERROR;
    size_t got = zs.total_out;
    deflateEnd(&zs);
    int rc = zr == Z_STREAM_END ? sf_write(rel, out, got) : -1;
    free(out);
    return rc;
}

/* The body of r is gzip and inflates to want[0..n). */
static void sf_check_gzip(const char *what, const http_res *r, const void *want, size_t n)
{
    CHECK_STR(what, res_header(r, "Content-Encoding"), "gzip");
    size_t got = 0;
    char *plain = sf_gunzip(r->body, r->body_len, &got);
    CHECK(plain != NULL, "[%s] %zu bytes that are not one gzip stream", what, r->body_len);
    if (plain != NULL)
        CHECK(got == n && memcmp(plain, want, n) == 0, "[%s] inflates to %zu bytes, not the %zu "
              "of the file", what, got, n);
    free(plain);
}

/* The body of r is want[0..n) as it is. */
static void sf_check_plain(const char *what, const http_res *r, const void *want, size_t n)
{
    CHECK(res_header(r, "Content-Encoding") == NULL, "[%s] Content-Encoding %s", what,
          res_header(r, "Content-Encoding"));
    CHECK(r->body_len == n && memcmp(r->body, want, n) == 0, "[%s] %zu bytes, not the file's %zu",
          what, r->body_len, n);
}

static bool sf_varies(const http_res *r)
{
    return rc_header_has_token(&r->hdr, "Vary", "Accept-Encoding");
}

/* text.txt gzip'ed as it is read (it was just written: its bytes are not
 * kept yet), then from its cached gzip'ed bytes (dated back: settled),
 * each with Vary and an ETag of its own; Accept-Encoding read as RFC 9110
 * has it, hostile values included; types and sizes compression leaves. */
void test_static_gzip(void **state)
{
    fx *f = *state;
    http_res r;
    char id_etag[128] = "", gz_etag[128] = "", gz_len[32] = "";
    sf_get(f, "GET", "/static/text.txt", NULL, NULL, &r);
    check_http(f, "text.txt", &r, 200);
    snprintf(id_etag, sizeof id_etag, "%s", or_null(res_header(&r, "ETag")));
    http_res_free(&r);
    for (int round = 0; round < 4; round++) {
        if (round == 2) { /* settled from now on: the cached bytes' path */
            g_sf_then = time(NULL) - 3600;
            CHECK(sf_date("root/text.txt", g_sf_then) == 0, "date text.txt");
            sf_get(f, "GET", "/static/text.txt", NULL, NULL, &r);
            snprintf(id_etag, sizeof id_etag, "%s", or_null(res_header(&r, "ETag")));
            http_res_free(&r);
        }
        char what[64];
        snprintf(what, sizeof what, "text.txt gzip, round %d", round);
        sf_get(f, "GET", "/static/text.txt", "Accept-Encoding: gzip, deflate, br", NULL, &r);
        check_http(f, what, &r, 200);
        sf_check_gzip(what, &r, g_sf_text, sizeof g_sf_text);
        CHECK(sf_varies(&r), "[%s] Vary: %s", what, or_null(res_header(&r, "Vary")));
        CHECK_STR(what, res_header(&r, "Content-Type"), "text/plain; charset=utf-8");
        CHECK(res_header(&r, "Accept-Ranges") == NULL, "[%s] Accept-Ranges %s on gzip", what,
              res_header(&r, "Accept-Ranges"));
        const char *etag = res_header(&r, "ETag");
        CHECK(etag != NULL && strcmp(etag, id_etag) != 0 && strlen(etag) > 6 &&
                  strcmp(etag + strlen(etag) - 6, "-gzip\"") == 0,
              "[%s] ETag %s (identity %s)", what, or_null(etag), id_etag);
        snprintf(gz_etag, sizeof gz_etag, "%s", or_null(etag));
        const char *cl = res_header(&r, "Content-Length");
        if (round >= 2 && !f->m->http2) { /* cached: the length is known */
            CHECK(cl != NULL && strtoull(cl, NULL, 10) == r.body_len, "[%s] Content-Length %s, "
                  "%zu bytes", what, or_null(cl), r.body_len);
            snprintf(gz_len, sizeof gz_len, "%s", or_null(cl));
        }
        CHECK(r.body_len < sizeof g_sf_text / 4, "[%s] %zu bytes: not compressed", what,
              r.body_len);
        http_res_free(&r);

        /* HEAD: the headers of that GET, no body. */
        sf_get(f, "HEAD", "/static/text.txt", "Accept-Encoding: gzip", NULL, &r);
        check_http(f, "HEAD text.txt gzip", &r, 200);
        CHECK(r.body_len == 0, "HEAD: %zu bytes", r.body_len);
        CHECK_STR("HEAD gzip Content-Encoding", res_header(&r, "Content-Encoding"), "gzip");
        CHECK_STR("HEAD gzip ETag", res_header(&r, "ETag"), gz_etag);
        CHECK(sf_varies(&r), "HEAD Vary: %s", or_null(res_header(&r, "Vary")));
        if (round >= 2 && !f->m->http2)
            CHECK_STR("HEAD gzip Content-Length", res_header(&r, "Content-Length"), gz_len);
        else if (!f->m->http2) /* not known without deflating it all */
            CHECK(res_header(&r, "Content-Length") == NULL, "HEAD gzip stream Content-Length %s",
                  res_header(&r, "Content-Length"));
        http_res_free(&r);

        /* Accept-Encoding as RFC 9110 12.5.3 reads it: gzip when its
         * q-value (or that of "*" where gzip is not named) is above 0. */
        static const struct {
            const char *h1, *h2;
            bool gzip;
        } ae[] = {
            {"Accept-Encoding: gzip;q=0", NULL, false},
            {"Accept-Encoding: gzip; q=0.000, br", NULL, false},
            {"Accept-Encoding: *;q=0", NULL, false},
            {"Accept-Encoding: br, *;q=0", NULL, false},
            {"Accept-Encoding: identity", NULL, false},
            {"Accept-Encoding: gzipx, xgzip, gzip-x", NULL, false},
            {"Accept-Encoding: gzip;q=junk", NULL, false},
            {"Accept-Encoding: gzip;q=1.5", NULL, false},
            {"Accept-Encoding: gzip;q=0.0001", NULL, false},
            {"Accept-Encoding: ;;;,,,=;q", NULL, false},
            {"Accept-Encoding: \"gzip\"", NULL, false},
            {"Accept-Encoding: *, gzip;q=0", NULL, false},
            {"Accept-Encoding: gzip", "Accept-Encoding: gzip;q=0", false}, /* one list */
            {"Accept-Encoding:", NULL, false},
            {"Accept-Encoding: *", NULL, true},
            {"Accept-Encoding: GZIP", NULL, true},
            {"Accept-Encoding: x-gzip", NULL, true},
            {"Accept-Encoding: br;q=1, gzip;q=0.001", NULL, true},
            {"Accept-Encoding: gzip;level=9;Q=0.5", NULL, true},
            {"Accept-Encoding: identity;q=0, gzip;q=1.000", NULL, true},
            {"Accept-Encoding: ,, gzip ,,", NULL, true},
            {"Accept-Encoding: br", "Accept-Encoding: gzip", true},
        };
        for (size_t i = 0; i < sizeof ae / sizeof ae[0]; i++) {
            snprintf(what, sizeof what, "%.40s | %.20s", ae[i].h1, or_null(ae[i].h2));
            sf_get(f, "GET", "/static/text.txt", ae[i].h1, ae[i].h2, &r);
            check_http(f, what, &r, 200);
            if (ae[i].gzip)
                sf_check_gzip(what, &r, g_sf_text, sizeof g_sf_text);
            else
                sf_check_plain(what, &r, g_sf_text, sizeof g_sf_text);
            CHECK(sf_varies(&r), "[%s] Vary: %s", what, or_null(res_header(&r, "Vary")));
            http_res_free(&r);
        }
    }
    /* A huge Accept-Encoding (7 KB of codings) is read to its end. */
    char *huge = malloc(8192);
    strcpy(huge, "Accept-Encoding: ");
    while (strlen(huge) < 7000)
        strcat(huge, "compress;q=0.5, ");
    strcat(huge, "gzip;q=0.1");
    sf_get(f, "GET", "/static/text.txt", huge, NULL, &r);
    check_http(f, "huge Accept-Encoding", &r, 200);
    sf_check_gzip("huge Accept-Encoding", &r, g_sf_text, sizeof g_sf_text);
    http_res_free(&r);
    free(huge);

    /* Left as they are, without Vary: below min_size, a type not listed. */
    sf_get(f, "GET", "/static/small.txt", "Accept-Encoding: gzip", NULL, &r);
    check_http(f, "small.txt gzip", &r, 200);
    sf_check_plain("small.txt gzip", &r, "hello static\n", 13);
    CHECK(!sf_varies(&r), "small.txt Vary: %s", res_header(&r, "Vary"));
    http_res_free(&r);
    sf_get(f, "GET", "/static/big.bin", "Accept-Encoding: gzip", NULL, &r);
    check_http(f, "big.bin gzip", &r, 200);
    CHECK(res_header(&r, "Content-Encoding") == NULL && !sf_varies(&r),
          "big.bin: Content-Encoding %s, Vary %s", res_header(&r, "Content-Encoding"),
          res_header(&r, "Vary"));
    sf_check_big("big.bin gzip asked", &r, 0, SF_BIG_SIZE);
    http_res_free(&r);
}

/* 304 by either ETag (the gzip one only where gzip is acceptable), by
 * date; a Range answered from the file as it is (206, never gzip'ed);
 * If-Range with the gzip ETag: the whole file as it is. */
void test_static_gzip_conditional(void **state)
{
    fx *f = *state;
    g_sf_then = time(NULL) - 3600;
    for (int round = 0; round < 2; round++) {
        if (round == 1) /* round 1: settled (cached bytes and gzip'ed bytes) */
            CHECK(sf_date("root/text.txt", g_sf_then) == 0, "date text.txt");
        http_res r;
        char id[128], gz[128], lm[64], h[200];
        sf_get(f, "GET", "/static/text.txt", NULL, NULL, &r);
        snprintf(id, sizeof id, "%s", or_null(res_header(&r, "ETag")));
        snprintf(lm, sizeof lm, "%s", or_null(res_header(&r, "Last-Modified")));
        http_res_free(&r);
        sf_get(f, "GET", "/static/text.txt", "Accept-Encoding: gzip", NULL, &r);
        snprintf(gz, sizeof gz, "%s", or_null(res_header(&r, "ETag")));
        http_res_free(&r);
        CHECK(strcmp(id, gz) != 0, "one ETag for both forms: %s", id);

        static const struct {
            const char *inm; /* %s: id or gz */
            bool use_gz, accept;
            long status;
            bool tag_gz; /* the 304's ETag */
        } cases[] = {
            {"If-None-Match: %s", true, true, 304, true},
            {"If-None-Match: %s", false, true, 304, false},   /* held as it is */
            {"If-None-Match: \"x\", %s", true, true, 304, true},
            {"If-None-Match: %s", true, false, 200, false},   /* gzip not acceptable now */
            {"If-None-Match: %s", false, false, 304, false},
            {"If-None-Match: *", false, true, 304, true},
            {"If-None-Match: \"nope\"", false, true, 200, true},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            snprintf(h, sizeof h, cases[i].inm, cases[i].use_gz ? gz : id);
            char what[300];
            snprintf(what, sizeof what, "round %d: %s, gzip %s", round, h,
                     cases[i].accept ? "accepted" : "not accepted");
            sf_get(f, "GET", "/static/text.txt", h,
                   cases[i].accept ? "Accept-Encoding: gzip" : NULL, &r);
            check_http(f, what, &r, cases[i].status);
            CHECK(sf_varies(&r), "[%s] Vary: %s", what, or_null(res_header(&r, "Vary")));
            if (cases[i].status == 304) {
                CHECK(r.body_len == 0, "[%s] 304 with a body", what);
                CHECK_STR(what, res_header(&r, "ETag"), cases[i].tag_gz ? gz : id);
            } else if (cases[i].accept) {
                sf_check_gzip(what, &r, g_sf_text, sizeof g_sf_text);
            } else {
                sf_check_plain(what, &r, g_sf_text, sizeof g_sf_text);
            }
            http_res_free(&r);
        }
        snprintf(h, sizeof h, "If-Modified-Since: %s", lm);
        sf_get(f, "GET", "/static/text.txt", h, "Accept-Encoding: gzip", &r);
        check_http(f, "If-Modified-Since, gzip", &r, 304);
        CHECK_STR("If-Modified-Since, gzip", res_header(&r, "ETag"), gz);
        http_res_free(&r);

        /* Ranges: of the file as it is, whatever Accept-Encoding says. */
        sf_get(f, "GET", "/static/text.txt", "Accept-Encoding: gzip", "Range: bytes=27-53", &r);
        check_http(f, "Range with gzip", &r, 206);
        sf_check_plain("Range with gzip", &r, g_sf_text + 27, 27);
        CHECK_STR("Range with gzip", res_header(&r, "Content-Range"), "bytes 27-53/8192");
        CHECK_STR("Range with gzip", res_header(&r, "ETag"), id);
        CHECK(sf_varies(&r), "206 Vary: %s", or_null(res_header(&r, "Vary")));
        http_res_free(&r);
        sf_get(f, "GET", "/static/text.txt", "Accept-Encoding: gzip", "Range: bytes=9000-", &r);
        check_http(f, "416 with gzip", &r, 416);
        CHECK(res_header(&r, "Content-Encoding") == NULL, "416 gzip'ed");
        http_res_free(&r);
        snprintf(h, sizeof h, "If-Range: %s", gz); /* not the file's: all of it */
        http_req q = {0};
        q.path = "/static/text.txt";
        q.headers[0] = "Accept-Encoding: gzip";
        q.headers[1] = "Range: bytes=0-9";
        q.headers[2] = h;
        q.timeout_ms = 15000;
        http_do(f, &q, &r);
        check_http(f, "If-Range gzip ETag", &r, 200);
        sf_check_plain("If-Range gzip ETag", &r, g_sf_text, sizeof g_sf_text);
        http_res_free(&r);
    }
}

/* A precompressed "name.gz" beside the file: served as it is when it is a
 * regular file inside the root at least as recent as the file; otherwise
 * (older, a link out of the root, a directory) the file is gzip'ed on
 * the fly; every change seen by the next request; "name.gz" asked for
 * itself is a file like any other. */
void test_static_gzip_sibling(void **state)
{
    fx *f = *state;
    /* The sibling holds other text than the file, to tell which was sent. */
    static char pre[4096];
    for (size_t i = 0; i < sizeof pre; i++)
        pre[i] = "precompressed sibling. "[i % 23];
    g_sf_then = time(NULL) - 3600;
    CHECK(sf_write("root/s.txt", g_sf_text, sizeof g_sf_text) == 0 &&
              sf_write_gz("root/s.txt.gz", pre, sizeof pre) == 0 &&
              sf_date("root/s.txt", g_sf_then) == 0 && sf_date("root/s.txt.gz", g_sf_then) == 0,
          "make s.txt and s.txt.gz");
    char path[256];
    snprintf(path, sizeof path, "%s/root/s.txt.gz", g_sf_dir);
    struct stat gsb;
    CHECK(stat(path, &gsb) == 0, "stat %s", path);
    http_res r;
    char etag1[128] = "";
    for (int round = 0; round < 2; round++) {
        sf_get(f, "GET", "/static/s.txt", "Accept-Encoding: gzip", NULL, &r);
        check_http(f, "s.txt with s.txt.gz", &r, 200);
        sf_check_gzip("s.txt with s.txt.gz", &r, pre, sizeof pre);
        CHECK_INT("s.txt.gz as it is", r.body_len, (size_t)gsb.st_size);
        sf_check_length(f, "s.txt.gz", &r, (unsigned long long)gsb.st_size);
        CHECK_STR("s.txt.gz type", res_header(&r, "Content-Type"), "text/plain; charset=utf-8");
        CHECK(sf_varies(&r), "sibling Vary: %s", or_null(res_header(&r, "Vary")));
        const char *etag = res_header(&r, "ETag");
        CHECK(etag != NULL && etag[0] == '"' && strstr(etag, "-gzip\"") != NULL,
              "sibling ETag %s", or_null(etag));
        snprintf(etag1, sizeof etag1, "%s", or_null(etag));
        http_res_free(&r);
        sf_get(f, "GET", "/static/s.txt", NULL, NULL, &r);
        check_http(f, "s.txt without gzip", &r, 200);
        sf_check_plain("s.txt without gzip", &r, g_sf_text, sizeof g_sf_text);
        CHECK(strcmp(or_null(res_header(&r, "ETag")), etag1) != 0, "one ETag for both");
        http_res_free(&r);
        sf_get(f, "HEAD", "/static/s.txt", "Accept-Encoding: gzip", NULL, &r);
        check_http(f, "HEAD s.txt with s.txt.gz", &r, 200);
        sf_check_length(f, "HEAD s.txt.gz", &r, (unsigned long long)gsb.st_size);
        CHECK_STR("HEAD sibling ETag", res_header(&r, "ETag"), etag1);
        http_res_free(&r);
        char inm[160];
        snprintf(inm, sizeof inm, "If-None-Match: %s", etag1);
        sf_get(f, "GET", "/static/s.txt", "Accept-Encoding: gzip", inm, &r);
        check_http(f, "sibling 304", &r, 304);
        http_res_free(&r);
        /* The .gz itself: a file of its own type, not encoded again. */
        sf_get(f, "GET", "/static/s.txt.gz", "Accept-Encoding: gzip", NULL, &r);
        check_http(f, "s.txt.gz itself", &r, 200);
        CHECK_STR("s.txt.gz itself", res_header(&r, "Content-Type"), "application/gzip");
        CHECK(res_header(&r, "Content-Encoding") == NULL && !sf_varies(&r),
              "s.txt.gz itself: Content-Encoding %s", res_header(&r, "Content-Encoding"));
        size_t n = 0;
        char *plain = sf_gunzip(r.body, r.body_len, &n);
        CHECK(plain != NULL && n == sizeof pre && memcmp(plain, pre, n) == 0,
              "s.txt.gz itself is not the file");
        free(plain);
        http_res_free(&r);
        /* A Range: from s.txt. */
        sf_get(f, "GET", "/static/s.txt", "Accept-Encoding: gzip", "Range: bytes=0-3", &r);
        check_http(f, "sibling Range", &r, 206);
        sf_check_plain("sibling Range", &r, g_sf_text, 4);
        http_res_free(&r);
    }

    /* s.txt changes (now newer than its .gz): the .gz is stale, s.txt is
     * gzip'ed on the fly - at once, twice. */
    char changed[sizeof g_sf_text];
    memcpy(changed, g_sf_text, sizeof changed);
    memcpy(changed, "CHANGED", 7);
    CHECK(sf_write("root/s.txt", changed, sizeof changed) == 0, "rewrite s.txt");
    for (int round = 0; round < 2; round++) {
        sf_get(f, "GET", "/static/s.txt", "Accept-Encoding: gzip", NULL, &r);
        check_http(f, "stale s.txt.gz", &r, 200);
        sf_check_gzip("stale s.txt.gz", &r, changed, sizeof changed);
        CHECK(strcmp(or_null(res_header(&r, "ETag")), etag1) != 0, "the stale .gz's ETag");
        http_res_free(&r);
    }
    /* The .gz is made again: it is served, with another ETag. */
    memcpy(pre, "AGAIN", 5);
    CHECK(sf_write_gz("root/s.txt.gz", pre, sizeof pre) == 0, "rewrite s.txt.gz");
    for (int round = 0; round < 2; round++) {
        sf_get(f, "GET", "/static/s.txt", "Accept-Encoding: gzip", NULL, &r);
        check_http(f, "fresh s.txt.gz again", &r, 200);
        sf_check_gzip("fresh s.txt.gz again", &r, pre, sizeof pre);
        CHECK(strcmp(or_null(res_header(&r, "ETag")), etag1) != 0, "the old .gz's ETag");
        http_res_free(&r);
    }
    /* The .gz removed: on the fly again. */
    CHECK(sf_path_op("root/s.txt.gz", unlink) == 0, "unlink s.txt.gz");
    sf_get(f, "GET", "/static/s.txt", "Accept-Encoding: gzip", NULL, &r);
    check_http(f, "s.txt.gz removed", &r, 200);
    sf_check_gzip("s.txt.gz removed", &r, changed, sizeof changed);
    http_res_free(&r);

    /* Siblings that are not to be served: a link out of the root (to a
     * real gzip file), a directory, one older than the file. */
    static const char secret[] = "outside the root, never served\n";
    CHECK(sf_write_gz("outside.gz", secret, sizeof secret - 1) == 0 &&
              sf_write("root/l.txt", g_sf_text, sizeof g_sf_text) == 0 &&
              sf_symlink("../outside.gz", "root/l.txt.gz") == 0 &&
              sf_write("root/d.txt", g_sf_text, sizeof g_sf_text) == 0 &&
              sf_mkdir("root/d.txt.gz") == 0 &&
              sf_write("root/o.txt", g_sf_text, sizeof g_sf_text) == 0 &&
              sf_write_gz("root/o.txt.gz", secret, sizeof secret - 1) == 0 &&
              sf_date("root/o.txt.gz", g_sf_then) == 0,
          "make the hostile siblings");
    static const char *const hostile[] = {"/static/l.txt", "/static/d.txt", "/static/o.txt"};
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < 3; i++) {
            sf_get(f, "GET", hostile[i], "Accept-Encoding: gzip", NULL, &r);
            check_http(f, hostile[i], &r, 200);
            sf_check_gzip(hostile[i], &r, g_sf_text, sizeof g_sf_text);
            http_res_free(&r);
        }
    sf_expect(f, "/static/l.txt.gz", 404, NULL, NULL);
}

/* Raw HTTP/1.x: gzip on the fly to an HTTP/1.0 client (the close ends the
 * body) and chunked to an HTTP/1.1 one; a few MB deflated for a client
 * that stops reading: the server waits for it in bounded memory (the
 * heap does not grow with the file), then every byte inflates right; a
 * .gz sibling cut short while it is sent: the body ends early with a
 * close, never other bytes. */
void test_static_gzip_raw(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "HTTP/1.0 gzip");
    conn_send_str(c, "HTTP/1.0 gzip",
                  "GET /static/text.txt HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n");
    rc_response resp;
    int rc = rc_read_response(c, &resp, 0, 10000);
    CHECK(rc == RC_OK && resp.status == 200, "HTTP/1.0 gzip: %s, %d", rc_strerror(rc),
          resp.status);
    if (rc == RC_OK) {
        CHECK_STR("HTTP/1.0 gzip", rc_header_get(&resp, "Content-Encoding"), "gzip");
        CHECK(!resp.chunked, "chunks to an HTTP/1.0 client");
        size_t n = 0;
        char *plain = sf_gunzip(resp.body, resp.body_len, &n);
        CHECK(plain != NULL && n == sizeof g_sf_text && memcmp(plain, g_sf_text, n) == 0,
              "HTTP/1.0 gzip body (%zu bytes) does not inflate to text.txt", resp.body_len);
        free(plain);
        rc_response_free(&resp);
    }
    rc_close(c);

    /* A large text file, little compressible (random words): its gzip
     * form outgrows what the sockets hold. */
    const size_t big = (size_t)16 << 20;
    char *text = malloc(big);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < big; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        text[i] = (x & 63) == 0 ? ' ' : (char)('!' + (x >> 8) % 90);
    }
    CHECK(sf_write("root/large.txt", text, big) == 0, "write large.txt");
    struct mallinfo2 m0 = mallinfo2();
    c = conn_open(f, "large.txt");
    conn_send_str(c, "large.txt",
                  "GET /static/large.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
    CHECK(rc_read_some(c, 10000) > 0, "large.txt: nothing came");
    rc_sleep_ms(1500); /* the server fills what it may, then waits */
    struct mallinfo2 m1 = mallinfo2();
    /* The server is in this process: its heap is ours. mallinfo2 says 0
     * under sanitizers' allocators; the check needs glibc's. */
    if (g_timing && m0.uordblks > 0)
        fprintf(stderr, "# %s: large.txt gzip'ed for a client that stopped reading: heap "
                "%+lld KB\n", g_engine_name, ((long long)m1.uordblks - (long long)m0.uordblks) / 1024);
    if (m0.uordblks > 0)
        CHECK(m1.uordblks < m0.uordblks + ((size_t)4 << 20),
              "heap grew by %zu KB while the client did not read",
              (m1.uordblks - m0.uordblks) >> 10);
    rc = rc_read_response(c, &resp, 0, 60000);
    CHECK(rc == RC_OK && resp.status == 200, "large.txt: %s, %d", rc_strerror(rc), resp.status);
    if (rc == RC_OK) {
        CHECK(resp.chunked, "large.txt gzip'ed on the fly is not chunked");
        CHECK_STR("large.txt", rc_header_get(&resp, "Content-Encoding"), "gzip");
        size_t n = 0;
        char *plain = sf_gunzip(resp.body, resp.body_len, &n);
        CHECK(plain != NULL && n == big && memcmp(plain, text, n) == 0,
              "large.txt: %zu gzip bytes do not inflate to the file", resp.body_len);
        free(plain);
        rc_response_free(&resp);
    }
    rc_close(c);
    /* Clients that leave in the middle (a few, at once): each pump stops
     * and its state goes with its request (the sanitized runs check that
     * nothing leaks); the server goes on. */
    rc_conn *gone[3];
    for (int i = 0; i < 3; i++) {
        gone[i] = conn_open(f, "large.txt left");
        conn_send_str(gone[i], "large.txt left", "GET /static/large.txt HTTP/1.1\r\nHost: x\r\n"
                                                 "Accept-Encoding: gzip\r\n\r\n");
    }
    for (int i = 0; i < 3; i++) {
        CHECK(rc_read_some(gone[i], 10000) > 0, "large.txt left: nothing came");
        rc_close(gone[i]);
    }
    sf_raw(f, "/static/small.txt", 200, "hello static\n");
    /* The same file cut short while it is gzip'ed for a slow client: the
     * body ends with a close, never with a clean last chunk. */
    c = conn_open(f, "large.txt cut");
    conn_send_str(c, "large.txt cut",
                  "GET /static/large.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
    CHECK(rc_read_some(c, 10000) > 0, "large.txt cut: nothing came");
    char large[256];
    snprintf(large, sizeof large, "%s/root/large.txt", g_sf_dir);
    CHECK(truncate(large, 1 << 20) == 0, "truncate large.txt");
    rc = rc_read_response(c, &resp, 0, 60000);
    CHECK(rc == RC_TRUNCATED, "large.txt cut while gzip'ed: %s (want a truncated body)",
          rc_strerror(rc));
    if (rc == RC_OK)
        rc_response_free(&resp);
    rc_close(c);
    free(text);

    /* A sibling cut short while it is sent (64 MB: more than the socket
     * buffers hold; served as it is, so its bytes need not be gzip). */
    char huge[256];
    snprintf(huge, sizeof huge, "%s/root/hugez.txt.gz", g_sf_dir);
    CHECK(sf_write("root/hugez.txt", g_sf_text, sizeof g_sf_text) == 0 &&
              sf_date("root/hugez.txt", time(NULL) - 3600) == 0 &&
              (creat(huge, 0644) >= 0) && truncate(huge, (off_t)64 << 20) == 0,
          "make hugez.txt.gz");
    c = conn_open(f, "hugez.txt");
    conn_send_str(c, "hugez.txt",
                  "GET /static/hugez.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
    CHECK(rc_read_some(c, 5000) > 0, "hugez.txt: nothing came");
    CHECK(memmem(c->buf, c->len, "Content-Length: 67108864", 24) != NULL ||
              memmem(c->buf, c->len, "content-length: 67108864", 24) != NULL,
          "hugez.txt: not its sibling's length");
    CHECK(truncate(huge, 1 << 20) == 0, "truncate hugez.txt.gz");
    rc = RC_TIMEOUT;
    long long t0 = rc_now_ms();
    while (rc_now_ms() - t0 < SF_CUT_WAIT_MS) {
        rc = rc_read_some(c, 1000);
        if (rc == 0 || rc == RC_RESET)
            break;
        if (c->len - c->off > (1u << 20))
            c->off = c->len;
    }
    CHECK(rc == 0 || rc == RC_RESET, "hugez.txt: still open after its .gz shrank (%d)", rc);
    CHECK(c->received < ((size_t)64 << 20), "hugez.txt: %zu bytes, the whole .gz", c->received);
    rc_close(c);
    sf_raw(f, "/static/small.txt", 200, "hello static\n");
}
