/*
 * Static files (srv_static_add) on every engine, same answers: types,
 * ETag, Last-Modified, Content-Length and exact bytes (a 3 MB file, many
 * times the stream buffer, checked byte by byte), 304 by ETag and by date,
 * 206 for a-b, a- and -n, 416, If-Range, several ranges served whole,
 * HEAD, index.html and the directory redirect, 404 for a directory
 * without index, and escapes refused: symbolic links out of the root, an
 * encoded slash, an empty first segment, dot segments (the core's 400),
 * a fifo (answered at once, never opened for blocking). With compression
 * on, static answers go out as they are (streams are not gzip'ed).
 * The files are made under a mkdtemp directory for each case and removed
 * after it.
 */
#include "conformance.h"

#include <sys/stat.h>

#define SF_BIG_SIZE (3u * 1000 * 1000)

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
    f->cfg.header_timeout_ms = 5000; /* also the send deadline: generous under sanitizers */
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

    /* Compression is on (min 1 KB, text/plain listed): a static answer is a
     * stream and goes out as it is, whole and exact. */
    sf_get(f, "GET", "/static/text.txt", "Accept-Encoding: gzip", NULL, &r);
    check_http(f, "text.txt gzip asked", &r, 200);
    CHECK(res_header(&r, "Content-Encoding") == NULL, "Content-Encoding %s",
          res_header(&r, "Content-Encoding"));
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
    while (rc_now_ms() - t0 < 20000) {
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
