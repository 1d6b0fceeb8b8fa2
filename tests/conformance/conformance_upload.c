/*
 * Streamed request bodies (SRV_ROUTE_STREAM_BODY, srv_request_body_read)
 * on every engine that has SRV_CAP_STREAM_BODY: 64 MiB with a length and
 * chunked, checked by digest in bounded memory; an application that pauses
 * (SRV_EAGAIN) and resumes from another thread, with the client's send
 * held back meanwhile; Expect: 100-continue answered only once the body is
 * read; an answer without reading (no 100, nothing smuggled from the
 * unread body); a client vanishing mid-body; the route's size limit; a
 * malformed chunk; a slow-drip body; a graceful stop during an upload.
 * Without the capability the route is refused at registration.
 */
#include "conformance.h"

/* The digest both sides compute: FNV-1a, 64 bits. */
#define UP_FNV_INIT 0xcbf29ce484222325ull
static uint64_t up_fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t up_fnv_pattern(uint64_t total)
{
    unsigned char buf[4096];
    uint64_t h = UP_FNV_INIT;
    for (uint64_t at = 0; at < total;) {
        size_t n = total - at < sizeof buf ? (size_t)(total - at) : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern_byte(at + i);
        h = up_fnv(h, buf, n);
        at += n;
    }
    return h;
}

/* One upload as the application sees it. */
enum { UP_SUM, UP_SLOW, UP_HOLD };
typedef struct up {
    pthread_mutex_t mu;
    srv_request *req;
    int mode;
    uint64_t bytes, fnv;
    int ended;
    struct up *qnext; /* the resumer's queue */
} up;

#define UP_MAX 64

typedef struct ufx {
    const mode *m;
    srv_server *srv;
    int port;
    int stopped;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    up *ups[UP_MAX];
    int nups;
    up *q_head; /* uploads to resume (UP_SLOW), by the resumer thread */
    int quit;
    pthread_t resumer;
} ufx;

/* What the application saw. */
static struct {
    atomic_int entered;     /* handlers entered */
    atomic_int reads;       /* srv_request_body_read calls that succeeded */
    atomic_int ends;        /* on_end calls */
    atomic_int dup_end;     /* on_end called twice for one request */
    atomic_int end_status;  /* the last on_end's status */
    atomic_llong received;  /* body bytes delivered, every request */
    atomic_int hold;        /* UP_HOLD pauses while set */
    up *_Atomic held;       /* the UP_HOLD upload */
} g_up;

static ufx *g_ufx;
static int g_up_long; /* up_setup_long: request_timeout_ms of a minute */

static up *up_new(ufx *f, srv_request *req, int mode)
{
    up *u = calloc(1, sizeof *u);
    pthread_mutex_init(&u->mu, NULL);
    u->req = req;
    u->mode = mode;
    u->fnv = UP_FNV_INIT;
    pthread_mutex_lock(&f->mu);
    if (f->nups < UP_MAX)
        f->ups[f->nups++] = u;
    pthread_mutex_unlock(&f->mu);
    return u; /* freed at teardown (a resume may still look at it) */
}

/* Resume u unless its body already ended (then the request may be gone). */
static void up_resume(up *u)
{
    pthread_mutex_lock(&u->mu);
    if (!u->ended)
        srv_request_body_resume(u->req);
    pthread_mutex_unlock(&u->mu);
}

static void *up_resumer_main(void *arg)
{
    ufx *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->quit && f->q_head == NULL)
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->q_head == NULL)
            break;
        up *u = f->q_head;
        f->q_head = u->qnext;
        u->qnext = NULL;
        pthread_mutex_unlock(&f->mu);
        up_resume(u);
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static int up_on_data(srv_request *req, const void *data, size_t len, void *ctx)
{
    (void)req;
    up *u = ctx;
    pthread_mutex_lock(&u->mu);
    u->bytes += len;
    u->fnv = up_fnv(u->fnv, data, len);
    pthread_mutex_unlock(&u->mu);
    atomic_fetch_add(&g_up.received, (long long)len);
    if (u->mode == UP_SLOW) { /* every piece: later, from the resumer thread */
        ufx *f = g_ufx;
        pthread_mutex_lock(&f->mu);
        u->qnext = f->q_head;
        f->q_head = u;
        pthread_cond_signal(&f->cv);
        pthread_mutex_unlock(&f->mu);
        return SRV_EAGAIN;
    }
    if (u->mode == UP_HOLD && atomic_load(&g_up.hold))
        return SRV_EAGAIN; /* the case resumes it */
    return 0;
}

static void up_on_end(srv_request *req, int status, void *ctx)
{
    up *u = ctx;
    pthread_mutex_lock(&u->mu);
    if (u->ended)
        atomic_fetch_add(&g_up.dup_end, 1);
    u->ended = 1;
    uint64_t bytes = u->bytes, fnv = u->fnv;
    pthread_mutex_unlock(&u->mu);
    atomic_store(&g_up.end_status, status);
    atomic_fetch_add(&g_up.ends, 1); /* before the answer the client waits for */
    char out[96];
    int n;
    if (status == 0)
        n = snprintf(out, sizeof out, "%llu %016llx\n", (unsigned long long)bytes,
                     (unsigned long long)fnv);
    else
        n = snprintf(out, sizeof out, "failed %s\n", srv_err_name(status));
    /* After a failure the core answered already: this one is dropped, but
     * it gives the request back. */
    srv_respond(req, status == 0 ? 200 : 500, "text/plain", out, (size_t)n);
}

static void up_start(srv_request *req, int mode)
{
    up *u = up_new(g_ufx, req, mode);
    if (mode == UP_HOLD)
        atomic_store(&g_up.held, u);
    int rc = srv_request_body_read(req, up_on_data, up_on_end, u);
    if (rc == 0) {
        atomic_fetch_add(&g_up.reads, 1);
        return;
    }
    srv_respond(req, 500, "text/plain", "no body\n", 8);
}

static void h_sum(srv_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up.entered, 1);
    up_start(req, UP_SUM);
}

static void h_slow(srv_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up.entered, 1);
    up_start(req, UP_SLOW);
}

static void h_hold(srv_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up.entered, 1);
    up_start(req, UP_HOLD);
}

static void up_later_tick(void *arg)
{
    up_start(arg, UP_SUM);
}

/* Reads the body 300 ms after the head: "100 Continue" must wait for it. */
static void h_later(srv_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up.entered, 1);
    if (srv_after(srv_request_server(req), 300, up_later_tick, req) != 0)
        srv_respond(req, 500, "text/plain", "no timer\n", 9);
}

/* Answers without reading the body. */
static void h_deny(srv_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up.entered, 1);
    srv_respond(req, 401, "text/plain", "denied\n", 7);
}

static void h_uplain(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "text/plain", "plain", 5);
}


/* ---- multipart/form-data through the streamed parser (0.8) --------------- */

/* One form upload: the parser and what it saw, answered as one line per
 * part: "name|filename|content-type|bytes|fnv". */
typedef struct up_form {
    srv_multipart *mp;
    sbuf out;
    uint64_t bytes, fnv;
} up_form;

static int form_part(srv_multipart *mp, const srv_multipart_part *part, void *ctx)
{
    (void)mp;
    up_form *u = ctx;
    sb_add(&u->out, "%s|%s|%s|", part->name, or_null(part->filename),
           or_null(part->content_type));
    u->bytes = 0;
    u->fnv = UP_FNV_INIT;
    return 0;
}

static int form_data(srv_multipart *mp, const void *data, size_t len, void *ctx)
{
    (void)mp;
    up_form *u = ctx;
    u->bytes += len;
    u->fnv = up_fnv(u->fnv, data, len);
    return 0;
}

static int form_part_end(srv_multipart *mp, void *ctx)
{
    (void)mp;
    up_form *u = ctx;
    sb_add(&u->out, "%llu|%016llx\n", (unsigned long long)u->bytes,
           (unsigned long long)u->fnv);
    return 0;
}

static void form_free(up_form *u)
{
    srv_multipart_free(u->mp);
    free(u->out.p);
    free(u);
}

static int form_on_data(srv_request *req, const void *data, size_t len, void *ctx)
{
    up_form *u = ctx;
    int rc = srv_multipart_feed(u->mp, data, len);
    if (rc == 0)
        return 0;
    /* A malformed body: 400 now, the rest unread (the connection closes). */
    srv_multipart_respond_error(req, u->mp, rc);
    form_free(u);
    return rc;
}

static void form_on_end(srv_request *req, int status, void *ctx)
{
    up_form *u = ctx;
    int rc = status != 0 ? status : srv_multipart_finish(u->mp);
    if (status != 0)
        srv_respond(req, 500, "text/plain", "failed\n", 7); /* dropped: the core answered */
    else if (rc != 0)
        srv_multipart_respond_error(req, u->mp, rc);
    else
        srv_respond(req, 200, "text/plain", u->out.p ? u->out.p : "", u->out.n);
    form_free(u);
}

static void h_form(srv_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up.entered, 1);
    up_form *u = calloc(1, sizeof *u);
    srv_multipart_opts o;
    srv_multipart_opts_init(&o);
    o.on_part = form_part;
    o.on_data = form_data;
    o.on_part_end = form_part_end;
    o.ctx = u;
    o.max_parts = 8;
    int rc = srv_multipart_new(srv_request_header(req, "Content-Type"), &o, &u->mp);
    if (rc != 0) { /* answered before reading: no 100 Continue, nothing read */
        srv_multipart_respond_error(req, NULL, rc);
        form_free(u);
        return;
    }
    if (srv_request_body_read(req, form_on_data, form_on_end, u) != 0) {
        srv_respond(req, 500, "text/plain", "no body\n", 8);
        form_free(u);
    }
}

/* Answers from inside on_data and goes on (returns 0): on_end follows, once
 * on_data has returned (never nested in it, whatever the engine's respond
 * does inline). */
static atomic_int g_early_nested, g_early_in_data;

static int early_on_data(srv_request *req, const void *data, size_t len, void *ctx)
{
    (void)data;
    (void)len;
    up *u = ctx;
    if (!u->ended && u->bytes++ == 0) {
        atomic_store(&g_early_in_data, 1);
        srv_respond(req, 200, "text/plain", "early\n", 6);
        atomic_store(&g_early_in_data, 0);
    }
    return 0;
}

static void early_on_end(srv_request *req, int status, void *ctx)
{
    (void)req;
    up *u = ctx;
    if (atomic_load(&g_early_in_data))
        atomic_fetch_add(&g_early_nested, 1);
    if (u->ended)
        atomic_fetch_add(&g_up.dup_end, 1);
    u->ended = 1;
    atomic_store(&g_up.end_status, status);
    atomic_fetch_add(&g_up.ends, 1);
}

static void h_early(srv_request *req, void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&g_up.entered, 1);
    up *u = up_new(g_ufx, req, UP_SUM);
    if (srv_request_body_read(req, early_on_data, early_on_end, u) == 0)
        atomic_fetch_add(&g_up.reads, 1);
    else
        srv_respond(req, 500, "text/plain", "no body\n", 8);
}

/* ---- fixture ------------------------------------------------------------- */

int up_setup(void **state)
{
    const mode *m = *state ? *state : &MODE_H1;
    ufx *f = calloc(1, sizeof *f);
    f->m = m;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    atomic_store(&g_up.entered, 0);
    atomic_store(&g_up.reads, 0);
    atomic_store(&g_up.ends, 0);
    atomic_store(&g_up.dup_end, 0);
    atomic_store(&g_up.end_status, 1);
    atomic_store(&g_up.received, 0);
    atomic_store(&g_up.hold, 0);
    atomic_store(&g_up.held, NULL);
    g_ufx = f;
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 16;
    cfg.io_threads = 2;
    /* Also the body's pace window: 3 s, so that a case's own pauses
     * between sends (a busy sanitizer run) never look like a slow drip. */
    cfg.header_timeout_ms = 3 * T_HEADER_MS;
    cfg.keepalive_timeout_ms = g_up_long ? 60000 : T_KEEPALIVE_MS;
    cfg.request_timeout_ms = g_up_long ? 60000 : T_REQUEST_MS;
    cfg.max_body_bytes = L_BODY; /* the ordinary routes' limit: not the uploads' */
    if (g_tls) {
        cfg.tls_cert_file = g_tls_cert;
        cfg.tls_key_file = g_tls_key;
    }
    f->srv = srv_server_new(g_engine, &cfg);
    if (f->srv == NULL)
        return -1;
    struct {
        const char *method, *path;
        srv_handler_fn fn;
        unsigned flags;
        uint64_t max;
    } routes[] = {
        {"PUT", "/u/sum", h_sum, SRV_ROUTE_STREAM_BODY, 0},
        {"POST", "/u/sum", h_sum, SRV_ROUTE_STREAM_BODY, 0},
        {"PUT", "/u/slow", h_slow, SRV_ROUTE_STREAM_BODY, 0},
        {"PUT", "/u/hold", h_hold, SRV_ROUTE_STREAM_BODY, 0},
        {"PUT", "/u/later", h_later, SRV_ROUTE_STREAM_BODY, 0},
        {"PUT", "/u/deny", h_deny, SRV_ROUTE_STREAM_BODY, 0},
        {"PUT", "/u/small", h_sum, SRV_ROUTE_STREAM_BODY, 1000},
        {"GET", "/u/plain", h_uplain, 0, 0},
        {"POST", "/u/form", h_form, SRV_ROUTE_STREAM_BODY, 0},
        {"PUT", "/u/early", h_early, SRV_ROUTE_STREAM_BODY, 0},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = routes[i].method;
        o.path = routes[i].path;
        o.handler = routes[i].fn;
        o.ctx = f;
        o.flags = routes[i].flags | (g_nonblocking ? SRV_ROUTE_NONBLOCKING : 0);
        o.max_body_bytes = routes[i].max;
        if (srv_route_add(f->srv, &o) != 0) {
            print_error("upload setup: route %s %s refused: %s\n", o.method, o.path,
                        srv_server_last_error(f->srv));
            return -1;
        }
    }
    int rc = srv_server_start(f->srv);
    if (rc != 0) {
        print_error("upload setup: start: %s (%s)\n", srv_strerror(rc),
                    srv_server_last_error(f->srv));
        srv_server_free(f->srv);
        free(f);
        return -1;
    }
    pthread_create(&f->resumer, NULL, up_resumer_main, f);
    f->port = srv_server_port(f->srv);
    *state = f;
    return 0;
}

/* For a case whose paused application must outlast a slow (sanitizer) run's
 * transfer of megabytes: the request timeout counts from the last body byte
 * the application took. */
int up_setup_long(void **state)
{
    g_up_long = 1;
    int rc = up_setup(state);
    g_up_long = 0;
    return rc;
}

/* Every body read ended exactly once; nothing in flight; a clean stop. */
int up_teardown(void **state)
{
    ufx *f = *state;
    int rc = 0;
    atomic_store(&g_up.hold, 0);
    up *held = atomic_load(&g_up.held);
    if (held != NULL)
        up_resume(held);
    if (!f->stopped && srv_server_stop(f->srv, 2000) != 0)
        rc = -1;
    srv_stats st;
    srv_server_stats(f->srv, &st);
    if (st.connections_open != 0 || st.requests_in_flight != 0) {
        print_error("upload teardown: connections_open=%u requests_in_flight=%u\n",
                    st.connections_open, st.requests_in_flight);
        rc = -1;
    }
    for (int i = 0; i < 300 && atomic_load(&g_up.ends) != atomic_load(&g_up.reads); i++)
        sleep_ms(10);
    if (atomic_load(&g_up.ends) != atomic_load(&g_up.reads) || atomic_load(&g_up.dup_end)) {
        print_error("upload teardown: %d bodies read, %d ends (%d twice)\n",
                    atomic_load(&g_up.reads), atomic_load(&g_up.ends),
                    atomic_load(&g_up.dup_end));
        rc = -1;
    }
    pthread_mutex_lock(&f->mu);
    f->quit = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->resumer, NULL);
    srv_server_free(f->srv);
    for (int i = 0; i < f->nups; i++) {
        pthread_mutex_destroy(&f->ups[i]->mu);
        free(f->ups[i]);
    }
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    g_ufx = NULL;
    free(f);
    return rc;
}

static int up_wait_ends(int n, int timeout_ms)
{
    long long end = rc_now_ms() + timeout_ms;
    while (atomic_load(&g_up.ends) < n) {
        if (rc_now_ms() > end)
            return 0;
        sleep_ms(5);
    }
    return 1;
}

static int up_wait_no_inflight(srv_server *srv, int timeout_ms)
{
    long long end = rc_now_ms() + timeout_ms;
    for (;;) {
        srv_stats st;
        srv_server_stats(srv, &st);
        if (st.requests_in_flight == 0)
            return 1;
        if (rc_now_ms() > end)
            return 0;
        sleep_ms(10);
    }
}

/* ---- a libcurl uploader ------------------------------------------------- */

typedef struct up_send {
    uint64_t total, at;
    long held0, held_max;
    sbuf out;
} up_send;

static size_t up_read_cb(char *buf, size_t sz, size_t n, void *arg)
{
    up_send *s = arg;
    size_t len = sz * n;
    if (len > s->total - s->at)
        len = (size_t)(s->total - s->at);
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)pattern_byte(s->at + i);
    if (((s->at + len) & 0xfffff) < len || s->at == 0) { /* about every MiB */
        long h = held_kb();
        if (h > s->held_max)
            s->held_max = h;
    }
    s->at += len;
    return len;
}

static size_t up_write_cb(char *p, size_t sz, size_t n, void *arg)
{
    up_send *s = arg;
    sb_add(&s->out, "%.*s", (int)(sz * n), p);
    return sz * n;
}

/* PUT `total` pattern bytes to path, chunked (HTTP/1.1; an unknown length
 * over HTTP/2) or with Content-Length. */
static CURLcode up_put(const ufx *f, const char *path, uint64_t total, int chunked,
                       up_send *s, long *status)
{
    char url[256];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d%s", url_scheme(), f->port, path);
    s->total = total;
    s->at = 0;
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, up_read_cb);
    curl_easy_setopt(h, CURLOPT_READDATA, s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, up_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 120000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 65536L);
    if (!chunked)
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)total);
    if (f->m->http2)
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, g_tls ? (long)CURL_HTTP_VERSION_2TLS
                                                        : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    else
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if (g_tls)
        curl_easy_setopt(h, CURLOPT_CAINFO, g_tls_cert);
    struct curl_slist *hdrs = NULL;
    if (chunked && !f->m->http2)
        hdrs = curl_slist_append(hdrs, "Transfer-Encoding: chunked");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    s->held0 = s->held_max = held_kb();
    CURLcode rc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return rc;
}

static void up_check_sum(const char *what, const up_send *s, uint64_t total)
{
    char want[96];
    snprintf(want, sizeof want, "%llu %016llx\n", (unsigned long long)total,
             (unsigned long long)up_fnv_pattern(total));
    CHECK(s->out.p != NULL && strcmp(s->out.p, want) == 0, "%s: answered \"%s\", want \"%s\"",
          what, or_null(s->out.p), want);
}

static void up_big(void **state, int chunked)
{
    ufx *f = *state;
    const uint64_t total = 64u << 20;
    up_send s = {0};
    long status = 0;
    CURLcode rc = up_put(f, "/u/sum", total, chunked, &s, &status);
    CHECK(rc == CURLE_OK, "PUT 64 MiB: %s after %llu bytes", curl_easy_strerror(rc),
          (unsigned long long)s.at);
    CHECK_INT("status", status, 200);
    up_check_sum("64 MiB", &s, total);
    long grew = s.held_max - s.held0;
    CHECK(grew < 24 * 1024, "memory grew by %ld KB while receiving 64 MiB (bound: 24 MiB)",
          grew);
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), 0);
    free(s.out.p);
}

/* ---- cases ------------------------------------------------------------------ */

/* 64 MiB with Content-Length (curl asks Expect: 100-continue first): the
 * digest matches and the server never holds the body. */
void test_upload_64m_length(void **state)
{
    up_big(state, 0);
}

/* The same chunked (HTTP/1.1) or without a length (HTTP/2). */
void test_upload_64m_chunked(void **state)
{
    up_big(state, 1);
}

/* An application that pauses after every piece and is resumed from
 * another thread: every byte arrives, in order. */
void test_upload_slow_app(void **state)
{
    ufx *f = *state;
    const uint64_t total = 3u << 20;
    for (int chunked = 0; chunked < 2; chunked++) {
        up_send s = {0};
        long status = 0;
        CURLcode rc = up_put(f, "/u/slow", total, chunked, &s, &status);
        CHECK(rc == CURLE_OK, "PUT to the slow application: %s", curl_easy_strerror(rc));
        CHECK_INT("status", status, 200);
        up_check_sum("slow application", &s, total);
        free(s.out.p);
    }
}

typedef struct up_sender {
    rc_conn *c;
    const char *data;
    size_t len;
    int rc;
    atomic_int done;
} up_sender;

static void *up_sender_main(void *arg)
{
    up_sender *s = arg;
    s->rc = rc_send(s->c, s->data, s->len, 60000);
    atomic_store(&s->done, 1);
    return NULL;
}

static char *up_pattern(size_t n)
{
    char *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (char)pattern_byte(i);
    return p;
}

/* While the application holds the body paused, the engine reads nothing:
 * the client's send of 64 MiB (more than the kernel's buffers can take:
 * tcp_rmem's maximum is 32 MiB here, tcp_wmem's 4 MiB) stays blocked (TCP
 * back-pressure) and the application is given nothing more; a resume from
 * this thread lets it all through. */
void test_upload_paused_blocks_client(void **state)
{
    ufx *f = *state;
    const size_t total = 64u << 20;
    /* Made before the head goes: a client silent for longer than the pace
     * window (header_timeout_ms) once the application reads is cut. */
    char *body = up_pattern(total);
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    char head[160];
    snprintf(head, sizeof head, "PUT /u/hold HTTP/1.1\r\n" HOST "Content-Length: %zu\r\n\r\n",
             total);
    CHECK_INT("send head", rc_send_str(&c, head, 2000), RC_OK);
    atomic_store(&g_up.hold, 1);
    up_sender s = {.c = &c, .data = body, .len = total};
    pthread_t t;
    pthread_create(&t, NULL, up_sender_main, &s);
    /* Paused at its first piece: wait for it, then for the count to stay.
     * Nothing is checked until the sender is joined (a failed check leaves
     * the case at once). */
    long long end = rc_now_ms() + 10000;
    while (atomic_load(&g_up.received) == 0 && rc_now_ms() < end)
        sleep_ms(5);
    long long at_pause = atomic_load(&g_up.received);
    sleep_ms(600);
    long long later = atomic_load(&g_up.received);
    int sender_done = atomic_load(&s.done);
    atomic_store(&g_up.hold, 0);
    up *u = atomic_load(&g_up.held);
    if (u != NULL)
        up_resume(u); /* from this thread, not the I/O thread */
    else
        shutdown(c.fd, SHUT_RDWR); /* nothing to resume: the sender fails (a syscall,
                                    * safe beside its SSL_write or send) */
    pthread_join(t, NULL);
    CHECK(u != NULL, "no held upload");
    CHECK(at_pause > 0, "no body byte reached the application");
    CHECK(later == at_pause, "the application got %lld more bytes while paused",
          later - at_pause);
    CHECK(!sender_done, "the client sent all 64 MiB while the application was paused: the "
          "engine buffered the body instead of holding the client back");
    CHECK_INT("send", s.rc, RC_OK);
    rc_response r;
    CHECK_INT("response", rc_read_response(&c, &r, 0, 20000), RC_OK);
    CHECK_INT("status", r.status, 200);
    char want[96];
    snprintf(want, sizeof want, "%zu %016llx\n", total,
             (unsigned long long)up_fnv(UP_FNV_INIT, body, total));
    CHECK(r.body != NULL && strcmp(r.body, want) == 0, "answered \"%s\", want \"%s\"",
          or_null(r.body), want);
    rc_response_free(&r);
    rc_close(&c);
    free(body);
}

/* Expect: 100-continue: no "100 Continue" before the application asks for
 * the body (300 ms after the head), then the body, then the answer. */
void test_upload_expect_continue(void **state)
{
    ufx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    long long t0 = rc_now_ms();
    CHECK_INT("send head", rc_send_str(&c, "PUT /u/later HTTP/1.1\r\n" HOST
                                           "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n",
                                       2000),
              RC_OK);
    rc_response r;
    CHECK_INT("interim response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    long long took = rc_now_ms() - t0;
    CHECK_INT("interim status", r.status, 100);
    rc_response_free(&r);
    CHECK(took >= 250, "100 Continue after %lld ms: before the application read (300 ms)",
          took);
    CHECK_INT("send body", rc_send_str(&c, "hello", 2000), RC_OK);
    CHECK_INT("response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    CHECK_INT("status", r.status, 200);
    char want[64];
    snprintf(want, sizeof want, "5 %016llx\n", (unsigned long long)up_fnv(UP_FNV_INIT, "hello", 5));
    CHECK(r.body != NULL && strcmp(r.body, want) == 0, "answered \"%s\", want \"%s\"",
          or_null(r.body), want);
    rc_response_free(&r);
    /* The connection goes on. */
    CHECK_INT("send next", rc_send_str(&c, "GET /u/plain HTTP/1.1\r\n" HOST "\r\n", 2000), RC_OK);
    CHECK_INT("next response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    CHECK_INT("next status", r.status, 200);
    rc_response_free(&r);
    rc_close(&c);
}

/* An answer without reading: no 100 Continue, the answer closes the
 * connection, and a request hidden in the unread body is never served. */
void test_upload_answer_unread(void **state)
{
    ufx *f = *state;
    static const char smuggled[] = "GET /u/plain HTTP/1.1\r\n" HOST "\r\n";
    for (int expect = 0; expect < 2; expect++) {
        rc_conn c;
        rc_init(&c);
        CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
        char req[512];
        int n = snprintf(req, sizeof req,
                         "PUT /u/deny HTTP/1.1\r\n" HOST "%sContent-Length: %zu\r\n\r\n%s",
                         expect ? "Expect: 100-continue\r\n" : "", sizeof smuggled - 1,
                         expect ? "" : smuggled);
        CHECK_INT("send", rc_send(&c, req, (size_t)n, 2000), RC_OK);
        rc_response r;
        CHECK_INT("response", rc_read_response(&c, &r, 0, 5000), RC_OK);
        CHECK(r.status == 401, "got %d before the 401 (expect=%d)", r.status, expect);
        CHECK(rc_header_has_token(&r, "Connection", "close"),
              "the answer to an unread body does not close the connection");
        rc_response_free(&r);
        if (expect) /* the client sends the body anyway, late */
            rc_send_str(&c, smuggled, 2000);
        size_t unread = 0;
        int w = rc_wait_close(&c, 5000, &unread);
        CHECK(w == RC_CLOSED || w == RC_RESET, "the connection stays open after the answer");
        CHECK(unread == 0, "%zu bytes after the 401: the unread body was served as a request",
              unread);
        rc_close(&c);
    }
    CHECK_INT("bodies read", atomic_load(&g_up.reads), 0);
}

/* A client that vanishes mid-body: the application is told once (on_end
 * SRV_ECLOSED) and nothing stays in flight. */
void test_upload_vanished_client(void **state)
{
    ufx *f = *state;
    for (int chunked = 0; chunked < 2; chunked++) {
        int ends0 = atomic_load(&g_up.ends);
        long received0 = (long)atomic_load(&g_up.received);
        rc_conn c;
        rc_init(&c);
        CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
        const char *head = chunked ? "PUT /u/sum HTTP/1.1\r\n" HOST
                                     "Transfer-Encoding: chunked\r\n\r\n10000\r\n"
                                   : "PUT /u/sum HTTP/1.1\r\n" HOST
                                     "Content-Length: 10000000\r\n\r\n";
        CHECK_INT("send head", rc_send_str(&c, head, 2000), RC_OK);
        char *part = up_pattern(30000);
        CHECK_INT("send part", rc_send(&c, part, 30000, 2000), RC_OK);
        free(part);
        long long end = rc_now_ms() + 5000;
        /* This upload's bytes reached the application (the counter runs on
         * across cases): a client gone before its handler ran is cancelled,
         * and no on_end is due then. */
        while ((long)atomic_load(&g_up.received) == received0 && rc_now_ms() < end)
            sleep_ms(5);
        rc_close(&c);
        /* At once, or (mhd: its library may miss the FIN mid-body) by the
         * pace window (3 s): bounded either way. */
        CHECK(up_wait_ends(ends0 + 1, 15000), "on_end not called after the client left");
        CHECK_INT("on_end status", atomic_load(&g_up.end_status), SRV_ECLOSED);
        CHECK(up_wait_no_inflight(f->srv, 5000), "the upload is still in flight");
        sleep_ms(50);
        CHECK_INT("on_end calls", atomic_load(&g_up.ends), ends0 + 1);
        CHECK_INT("on_end twice", atomic_load(&g_up.dup_end), 0);
    }
}

/* The route's own limit (1000 bytes; the server's is 64 KiB): a length
 * over it is 413 before the handler; a chunked body that grows past it is
 * cut with 413, the application told SRV_ETOOBIG. */
void test_upload_route_limit(void **state)
{
    ufx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    CHECK_INT("send", rc_send_str(&c, "PUT /u/small HTTP/1.1\r\n" HOST
                                      "Content-Length: 1001\r\n\r\n", 2000), RC_OK);
    rc_response r;
    CHECK_INT("response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    CHECK_INT("status for a length over the route's limit", r.status, 413);
    rc_response_free(&r);
    rc_close(&c);
    CHECK_INT("handlers entered", atomic_load(&g_up.entered), 0);

    /* Within the route's limit: fine, although the server's is smaller
     * than what /u/sum takes below. */
    up_send s = {0};
    long status = 0;
    CURLcode rc = up_put(f, "/u/small", 1000, 0, &s, &status);
    CHECK(rc == CURLE_OK && status == 200, "1000 bytes to /u/small: %s, status %ld",
          curl_easy_strerror(rc), status);
    up_check_sum("1000 bytes", &s, 1000);
    free(s.out.p);
    s = (up_send){0};
    rc = up_put(f, "/u/sum", 200000, 1, &s, &status);
    CHECK(rc == CURLE_OK && status == 200, "200000 bytes (over max_body_bytes) to a streamed "
          "route without a limit: %s, status %ld", curl_easy_strerror(rc), status);
    free(s.out.p);

    int ends0 = atomic_load(&g_up.ends);
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    char *part = up_pattern(800);
    CHECK_INT("send", rc_send_str(&c, "PUT /u/small HTTP/1.1\r\n" HOST
                                      "Transfer-Encoding: chunked\r\n\r\n320\r\n", 2000), RC_OK);
    rc_send(&c, part, 800, 2000);
    rc_send_str(&c, "\r\n320\r\n", 2000);
    rc_send(&c, part, 800, 2000);
    rc_send_str(&c, "\r\n0\r\n\r\n", 2000);
    free(part);
    CHECK_INT("response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    CHECK_INT("status for a chunked body over the route's limit", r.status, 413);
    rc_response_free(&r);
    size_t unread = 0;
    int w = rc_wait_close(&c, 5000, &unread);
    CHECK(w == RC_CLOSED || w == RC_RESET, "the connection stays open after the 413");
    rc_close(&c);
    CHECK(up_wait_ends(ends0 + 1, 5000), "on_end not called");
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), SRV_ETOOBIG);
}

/* Malformed chunk framing in a streamed body: 400, close, on_end
 * SRV_EBADREQ; the bytes before it were delivered. */
void test_upload_bad_chunk(void **state)
{
    ufx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    CHECK_INT("send", rc_send_str(&c, "PUT /u/sum HTTP/1.1\r\n" HOST
                                      "Transfer-Encoding: chunked\r\n\r\n"
                                      "5\r\nhello\r\n2\r\nABXY0\r\n\r\n", 2000), RC_OK);
    rc_response r;
    CHECK_INT("response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    CHECK_INT("status", r.status, 400);
    rc_response_free(&r);
    size_t unread = 0;
    int w = rc_wait_close(&c, 5000, &unread);
    CHECK(w == RC_CLOSED || w == RC_RESET, "the connection stays open after the 400");
    rc_close(&c);
    CHECK(up_wait_ends(1, 5000), "on_end not called");
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), SRV_EBADREQ);
    CHECK(atomic_load(&g_up.received) >= 5, "the good chunk was not delivered");
}

/* A body that trickles (a byte every 100 ms, far below
 * SRV_BODY_MIN_PACE_BYTES per header_timeout_ms) is cut with 408. */
void test_upload_slow_drip(void **state)
{
    ufx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    CHECK_INT("send", rc_send_str(&c, "PUT /u/sum HTTP/1.1\r\n" HOST
                                      "Content-Length: 100000\r\n\r\n", 2000), RC_OK);
    long long t0 = rc_now_ms();
    int cut = 0;
    while (rc_now_ms() - t0 < 15000) {
        if (rc_send(&c, "x", 1, 1000) != RC_OK) {
            cut = 1;
            break;
        }
        size_t unread = 0;
        int w = rc_wait_close(&c, 100, &unread);
        if (w != RC_TIMEOUT || unread > 0) {
            cut = 1;
            break;
        }
    }
    CHECK(cut, "a body trickling a byte every 100 ms was never cut");
    rc_response r;
    int rr = rc_read_response(&c, &r, 0, 3000);
    if (rr == RC_OK) {
        CHECK_INT("status", r.status, 408);
        rc_response_free(&r);
    }
    rc_close(&c);
    CHECK(up_wait_ends(1, 5000), "on_end not called");
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), SRV_ETIMEDOUT);
}

typedef struct up_stop {
    srv_server *srv;
    int rc;
} up_stop;

static void *up_stop_main(void *arg)
{
    up_stop *s = arg;
    s->rc = srv_server_stop(s->srv, 5000);
    return NULL;
}

/* A stop during an upload: the upload that completes within the grace is
 * served (with Connection: close), new connections are refused. */
void test_upload_graceful_stop(void **state)
{
    ufx *f = *state;
    const size_t total = 4u << 20;
    char *body = up_pattern(total);
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    char head[160];
    snprintf(head, sizeof head, "PUT /u/sum HTTP/1.1\r\n" HOST "Content-Length: %zu\r\n\r\n",
             total);
    CHECK_INT("send head", rc_send_str(&c, head, 2000), RC_OK);
    CHECK_INT("send half", rc_send(&c, body, total / 2, 5000), RC_OK);
    long long end = rc_now_ms() + 5000;
    while (atomic_load(&g_up.received) == 0 && rc_now_ms() < end)
        sleep_ms(5);
    up_stop s = {.srv = f->srv};
    pthread_t t;
    pthread_create(&t, NULL, up_stop_main, &s);
    sleep_ms(200);
    CHECK_INT("send the rest", rc_send(&c, body + total / 2, total - total / 2, 5000), RC_OK);
    rc_response r;
    CHECK_INT("response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    CHECK_INT("status", r.status, 200);
    CHECK(rc_header_has_token(&r, "Connection", "close"), "no Connection: close during a stop");
    rc_response_free(&r);
    pthread_join(t, NULL);
    f->stopped = 1;
    CHECK_INT("stop", s.rc, 0);
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), 0);
    rc_close(&c);
    free(body);
}

/* Without SRV_CAP_STREAM_BODY the route is refused, never buffered. */
void test_upload_refused(void **state)
{
    (void)state;
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv != NULL, "server");
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "PUT";
    o.path = "/u/sum";
    o.handler = h_sum;
    o.flags = SRV_ROUTE_STREAM_BODY;
    CHECK_INT("route", srv_route_add(srv, &o), SRV_EENGINE);
    CHECK(strstr(srv_server_last_error(srv), "stream") != NULL, "error: %s",
          srv_server_last_error(srv));
    srv_server_free(srv);
}

/* ---- HTTP/2 by hand (h2c prior knowledge) ---------------------------------- */

/* HPACK for a request: :method, :scheme, :path, :authority and, when set,
 * content-length (static name 28: a literal without indexing, 4-bit prefix). */
static size_t up_h2_head(unsigned char *p, const char *method, const char *path,
                         const char *length)
{
    size_t n = hpack_literal(p, 2, method);
    n += hpack_literal(p + n, 6, "http");
    n += hpack_literal(p + n, 4, path);
    n += hpack_literal(p + n, 1, "conformance");
    if (length != NULL) {
        p[n++] = 0x0f; /* index 28 = 15 + 13 */
        p[n++] = 13;
        p[n++] = (unsigned char)strlen(length);
        memcpy(p + n, length, strlen(length));
        n += strlen(length);
    }
    return n;
}

/* A DATA frame whose payload is padded with `pad` bytes (PADDED flag). */
static size_t up_h2_padded(unsigned char *p, unsigned sid, unsigned flags, const void *data,
                           size_t len, unsigned char pad)
{
    unsigned char *payload = malloc(len + 1 + pad);
    payload[0] = pad;
    memcpy(payload + 1, data, len);
    memset(payload + 1 + len, 0, pad);
    size_t n = h2_frame(p, 0, flags | 0x8, sid, payload, len + 1 + pad);
    free(payload);
    return n;
}

/* What the server sent on one stream, and the windows it gave back. */
typedef struct up_h2s {
    int status;
    char body[128];
    size_t blen;
    int ended;
    long rst; /* the first RST_STREAM's code, -1 when none */
} up_h2s;

#define UP_H2_MAX_STREAMS 8

typedef struct up_h2r {
    up_h2s s[UP_H2_MAX_STREAMS]; /* by stream id: s[(id - 1) / 2] */
    unsigned long long conn_wu;  /* WINDOW_UPDATEs for the connection, h2o's own left out */
    unsigned long long stream_wu[UP_H2_MAX_STREAMS];
} up_h2r;

/* :status in a response header block (h2o's encodings: indexed, or a literal with
 * name index 8 whose value is not Huffman-coded). */
/* Scan everything received on c into *r. */
static void up_h2_scan(const rc_conn *c, up_h2r *r)
{
    const unsigned char *p = (const unsigned char *)c->buf;
    size_t n = c->len, i = 0;
    memset(r, 0, sizeof *r);
    for (int k = 0; k < UP_H2_MAX_STREAMS; k++)
        r->s[k].rst = -1;
    while (n - i >= 9) {
        size_t flen = ((size_t)p[i] << 16) | ((size_t)p[i + 1] << 8) | p[i + 2];
        unsigned type = p[i + 3], flags = p[i + 4];
        unsigned sid = ((unsigned)(p[i + 5] & 0x7f) << 24) | ((unsigned)p[i + 6] << 16) |
                       ((unsigned)p[i + 7] << 8) | p[i + 8];
        if (n - i - 9 < flen)
            break;
        const unsigned char *pl = p + i + 9;
        up_h2s *s = sid % 2 == 1 && (sid - 1) / 2 < UP_H2_MAX_STREAMS ? &r->s[(sid - 1) / 2] : NULL;
        if (type == 8 && flen == 4) {
            unsigned long long inc = ((unsigned long long)(pl[0] & 0x7f) << 24) |
                                     ((unsigned long long)pl[1] << 16) | (pl[2] << 8) | pl[3];
            if (sid == 0 && inc < (8u << 20)) /* the opening raise to 16 MiB: not counted */
                r->conn_wu += inc;
            else if (s != NULL)
                r->stream_wu[(sid - 1) / 2] += inc;
        }
        if (s != NULL && type == 0) {
            size_t k = flen < sizeof s->body - 1 - s->blen ? flen : sizeof s->body - 1 - s->blen;
            memcpy(s->body + s->blen, pl, k);
            s->blen += k;
            s->body[s->blen] = '\0';
        }
        if (s != NULL && (type == 0 || type == 1) && (flags & 0x1))
            s->ended = 1;
        if (s != NULL && type == 3 && flen == 4 && s->rst < 0) { /* the first one */
            s->rst = ((long)pl[0] << 24) | ((long)pl[1] << 16) | ((long)pl[2] << 8) | pl[3];
            s->ended = 1;
        }
        i += 9 + flen;
    }
    for (unsigned k = 0; k < UP_H2_MAX_STREAMS; k++)
        r->s[k].status = h2_status_of(p, n, 1 + 2 * k, 1);
}

/* Read until stream `sid` ended (END_STREAM or RST_STREAM), at most timeout_ms. */
static int up_h2_wait(rc_conn *c, unsigned sid, up_h2r *r, int timeout_ms)
{
    long long end = rc_now_ms() + timeout_ms;
    for (;;) {
        up_h2_scan(c, r);
        if (r->s[(sid - 1) / 2].ended)
            return 1;
        int left = (int)(end - rc_now_ms());
        if (left <= 0 || rc_read_some(c, left) <= 0) {
            up_h2_scan(c, r);
            return r->s[(sid - 1) / 2].ended;
        }
    }
}

static void up_h2_expect_sum(const char *what, const up_h2s *s, uint64_t total)
{
    char want[64];
    snprintf(want, sizeof want, "%llu %016llx\n", (unsigned long long)total,
             (unsigned long long)up_fnv_pattern(total));
    CHECK(s->status == 200 && strcmp(s->body, want) == 0, "[%s] status %d \"%s\", want 200 \"%s\"",
          what, s->status, s->body, want);
}

static rc_conn *up_h2_open(const ufx *f, const char *what)
{
    rc_conn *c = malloc(sizeof *c);
    rc_init(c);
    CHECK(rc_connect(c, f->port, 2000) == RC_OK, "[%s] connect", what);
    unsigned char pre[64], *p = pre;
    memcpy(p, H2_PREFACE, sizeof H2_PREFACE - 1);
    p += sizeof H2_PREFACE - 1;
    p += h2_frame(p, 4, 0, 0, NULL, 0);
    CHECK(rc_send(c, pre, (size_t)(p - pre), 2000) == RC_OK, "[%s] preface", what);
    /* The server's SETTINGS, acknowledged: its stream window (larger than HTTP/2's first
     * 65,535 bytes) holds from then on, and the uploads below count on it. */
    long long end = rc_now_ms() + 2000;
    while (!(h2_frame_types(c->buf, c->len) & (1u << 4)) && rc_now_ms() < end)
        rc_read_some(c, 100);
    CHECK(h2_frame_types(c->buf, c->len) & (1u << 4), "[%s] no SETTINGS from the server", what);
    p = pre;
    p += h2_frame(p, 4, 0x1, 0, NULL, 0);
    CHECK(rc_send(c, pre, (size_t)(p - pre), 2000) == RC_OK, "[%s] SETTINGS ACK", what);
    return c;
}

/* An h2c connection with PUT `path` open on stream 1 (content-length
 * `length` unless NULL) and data[0..n) of its body sent. */
static rc_conn *up_h2_put_part(const ufx *f, const char *what, const char *path,
                               const char *length, const char *data, size_t n)
{
    unsigned char buf[4096], *p = buf, block[256];
    size_t hl = up_h2_head(block, "PUT", path, length);
    p += h2_frame(p, 1, 0x4, 1, block, hl);
    if (n != 0)
        p += h2_frame(p, 0, 0, 1, data, n);
    rc_conn *c = up_h2_open(f, what);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] send", what);
    return c;
}

static void up_h2_close(rc_conn *c)
{
    rc_close(c);
    free(c);
}

/*
 * Two streamed uploads interleaved on one connection and a GET between them:
 * stream 1 with a content-length, its last DATA padded and ending it; stream 3
 * without one, a padded DATA, ended by trailers. Sent in one write, then in
 * pieces cut inside frame headers. Each digest is right, the GET is served,
 * and every byte h2o never saw is given back to the connection's window.
 */
void test_upload_h2_frames(void **state)
{
    ufx *f = *state;
    char *pat = up_pattern(3000);
    unsigned char *buf = malloc(16384), *p = buf, block[256];
    size_t n = up_h2_head(block, "PUT", "/u/sum", "3000");
    p += h2_frame(p, 1, 0x4, 1, block, n);
    n = up_h2_head(block, "POST", "/u/sum", NULL); /* in HEADERS + CONTINUATION */
    p += h2_frame(p, 1, 0, 3, block, 10);
    p += h2_frame(p, 9, 0x4, 3, block + 10, n - 10);
    p += h2_frame(p, 0, 0, 1, pat, 1000);
    p += up_h2_padded(p, 3, 0, pat, 500, 7);
    p += up_h2_padded(p, 1, 0x1, pat + 1000, 2000, 3);
    n = up_h2_head(block, "GET", "/u/plain", NULL);
    p += h2_frame(p, 1, 0x5, 5, block, n);
    p += h2_frame(p, 0, 0, 3, pat + 500, 700);
    block[0] = 0; /* trailers: "x-end: 1", a literal with a new name */
    block[1] = 5;
    memcpy(block + 2, "x-end", 5);
    block[7] = 1;
    block[8] = '1';
    p += h2_frame(p, 1, 0x5, 3, block, 9);
    size_t len = (size_t)(p - buf);
    /* The DATA frames' lengths, padding included: the connection window owed. */
    const unsigned long long owed = 1000 + (1 + 500 + 7) + (1 + 2000 + 3) + 700;
    for (int pieces = 0; pieces < 2; pieces++) {
        const char *what = pieces ? "HTTP/2 uploads interleaved, sent in pieces"
                                  : "HTTP/2 uploads interleaved, one write";
        rc_conn *c = up_h2_open(f, what);
        if (!pieces) {
            CHECK(rc_send(c, buf, len, 2000) == RC_OK, "[%s] send", what);
        } else {
            /* Inside a frame header, inside HEADERS, between HEADERS and its
             * CONTINUATION, inside DATA frames. */
            size_t cuts[] = {4, 40, 60, 70, 100, 1050, 1061, 2600, len};
            size_t at = 0;
            for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
                CHECK(rc_send(c, buf + at, cuts[k] - at, 2000) == RC_OK, "[%s] send", what);
                at = cuts[k];
                sleep_ms(30);
            }
        }
        up_h2r r;
        CHECK(up_h2_wait(c, 1, &r, 10000) && up_h2_wait(c, 3, &r, 10000) &&
                  up_h2_wait(c, 5, &r, 10000),
              "[%s] not every stream was answered", what);
        up_h2_expect_sum(what, &r.s[0], 3000);
        up_h2_expect_sum(what, &r.s[1], 1200);
        CHECK(r.s[2].status == 200 && strcmp(r.s[2].body, "plain") == 0,
              "[%s] GET between the uploads: %d \"%s\"", what, r.s[2].status, r.s[2].body);
        CHECK(r.conn_wu == owed, "[%s] the connection's window got %llu back, want %llu", what,
              r.conn_wu, owed);
        up_h2_close(c);
    }
    free(buf);
    free(pat);
}

/* An answer before the body's end: h2o cannot answer an open stream itself,
 * the engine does (HEADERS, DATA, RST_STREAM NO_ERROR); the body's DATA that
 * still come are not the handler's, and the connection goes on. */
void test_upload_h2_answer_unread(void **state)
{
    ufx *f = *state;
    const char *what = "HTTP/2 answer before the body's end";
    char *pat = up_pattern(1000);
    unsigned char buf[4096], *p, block[256];
    size_t n;
    rc_conn *c = up_h2_put_part(f, what, "/u/deny", "100000", pat, 1000);
    up_h2r r;
    CHECK(up_h2_wait(c, 1, &r, 10000), "[%s] stream 1 not answered", what);
    CHECK(r.s[0].status == 401 && strcmp(r.s[0].body, "denied\n") == 0,
          "[%s] status %d \"%s\", want 401 \"denied\"", what, r.s[0].status, r.s[0].body);
    long long end = rc_now_ms() + 5000; /* its RST_STREAM NO_ERROR follows the answer */
    for (up_h2_scan(c, &r); r.s[0].rst < 0 && rc_now_ms() < end; up_h2_scan(c, &r))
        rc_read_some(c, 100);
    CHECK(r.s[0].rst == 0, "[%s] RST_STREAM %ld after the answer, want NO_ERROR (0)", what,
          r.s[0].rst);
    /* The client had more of the body on its way, then asks for something else. */
    p = buf;
    p += h2_frame(p, 0, 0, 1, pat, 1000);
    n = up_h2_head(block, "GET", "/u/plain", NULL);
    p += h2_frame(p, 1, 0x5, 3, block, n);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] send more", what);
    CHECK(up_h2_wait(c, 3, &r, 10000), "[%s] stream 3 not answered", what);
    CHECK(r.s[1].status == 200 && strcmp(r.s[1].body, "plain") == 0,
          "[%s] the next stream: %d \"%s\"", what, r.s[1].status, r.s[1].body);
    CHECK_INT("bodies read", atomic_load(&g_up.reads), 0);
    up_h2_close(c);
    free(pat);
}

/* The route's limit over HTTP/2 (1000 bytes): a body that grows past it gets
 * 413 and the application SRV_ETOOBIG; a content-length over it, 413. */
void test_upload_h2_route_limit(void **state)
{
    ufx *f = *state;
    const char *what = "HTTP/2 body over the route's limit";
    char *pat = up_pattern(1001);
    unsigned char buf[4096], *p = buf, block[256];
    size_t n = up_h2_head(block, "PUT", "/u/small", NULL);
    p += h2_frame(p, 1, 0x4, 1, block, n);
    p += h2_frame(p, 0, 0, 1, pat, 800);
    p += h2_frame(p, 0, 0, 1, pat + 800, 200);
    p += h2_frame(p, 0, 0, 1, pat + 1000, 1);
    rc_conn *c = up_h2_open(f, what);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] send", what);
    up_h2r r;
    CHECK(up_h2_wait(c, 1, &r, 10000), "[%s] stream 1 not answered", what);
    CHECK(r.s[0].status == 413, "[%s] status %d, want 413", what, r.s[0].status);
    CHECK(up_wait_ends(1, 5000), "[%s] on_end not called", what);
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), SRV_ETOOBIG);
    p = buf;
    n = up_h2_head(block, "PUT", "/u/small", "1001");
    p += h2_frame(p, 1, 0x4, 3, block, n);
    p += h2_frame(p, 0, 0x1, 3, pat, 1001);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] send", what);
    CHECK(up_h2_wait(c, 3, &r, 10000), "[%s] stream 3 not answered", what);
    CHECK(r.s[1].status == 413, "[%s] content-length 1001: status %d, want 413", what,
          r.s[1].status);
    up_h2_close(c);
    free(pat);
}

/* A content-length the DATA do not match: malformed (RFC 9113 8.1.1), a
 * stream error of type PROTOCOL_ERROR (a 400 before the reset is allowed
 * too); the application is told SRV_EBADREQ. */
void test_upload_h2_length_mismatch(void **state)
{
    ufx *f = *state;
    const char *what = "HTTP/2 DATA shorter than the content-length";
    unsigned char buf[1024], *p;
    rc_conn *c = up_h2_put_part(f, what, "/u/sum", "10", NULL, 0);
    /* The application reads first, so that it is told in on_end (before, its
     * srv_request_body_read would say it). */
    long long end = rc_now_ms() + 10000;
    while (atomic_load(&g_up.reads) == 0 && rc_now_ms() < end)
        sleep_ms(5);
    CHECK_INT("bodies read", atomic_load(&g_up.reads), 1);
    p = buf;
    p += h2_frame(p, 0, 0x1, 1, "abcde", 5);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] send", what);
    up_h2r r;
    CHECK(up_h2_wait(c, 1, &r, 10000), "[%s] stream 1 not answered", what);
    CHECK(r.s[0].status == 400 || r.s[0].rst == 1, "[%s] status %d, RST_STREAM %ld: want 400 "
          "or PROTOCOL_ERROR (1)", what, r.s[0].status, r.s[0].rst);
    CHECK(up_wait_ends(1, 5000), "[%s] on_end not called", what);
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), SRV_EBADREQ);
    up_h2_close(c);
}

/* The client resets its stream mid-body: on_end(SRV_ECLOSED) once, nothing
 * stays in flight, the connection goes on. */
void test_upload_h2_reset(void **state)
{
    ufx *f = *state;
    const char *what = "HTTP/2 stream reset mid-body";
    char *pat = up_pattern(1000);
    unsigned char buf[4096], *p, block[256];
    size_t n;
    rc_conn *c = up_h2_put_part(f, what, "/u/sum", "100000", pat, 1000);
    long long end = rc_now_ms() + 10000;
    while (atomic_load(&g_up.received) < 1000 && rc_now_ms() < end)
        sleep_ms(5);
    CHECK(atomic_load(&g_up.received) == 1000, "[%s] the first 1000 bytes did not arrive", what);
    static const unsigned char cancel[4] = {0, 0, 0, 8};
    p = buf;
    p += h2_frame(p, 3, 0, 1, cancel, sizeof cancel);
    n = up_h2_head(block, "GET", "/u/plain", NULL);
    p += h2_frame(p, 1, 0x5, 3, block, n);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] send reset", what);
    CHECK(up_wait_ends(1, 10000), "[%s] on_end not called after the reset", what);
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), SRV_ECLOSED);
    up_h2r r;
    CHECK(up_h2_wait(c, 3, &r, 10000), "[%s] stream 3 not answered", what);
    CHECK(r.s[1].status == 200, "[%s] the next stream: %d", what, r.s[1].status);
    CHECK(up_wait_no_inflight(f->srv, 5000), "[%s] the upload is still in flight", what);
    up_h2_close(c);
    free(pat);
}

/* Flow control while the application pauses: the stream's window is given
 * back only for what the application took (none of 2 MiB while paused, then
 * all of it); a client that sends past its window has the stream reset
 * with FLOW_CONTROL_ERROR, not its bytes buffered. */
void test_upload_h2_flow_control(void **state)
{
    ufx *f = *state;
    const char *what = "HTTP/2 upload paused by the application";
    enum { FRAME = 16384, TOTAL = 2 << 20 };
    char *pat = up_pattern(TOTAL);
    size_t cap = 512 + (TOTAL / FRAME) * (9 + FRAME);
    unsigned char *buf = malloc(cap), *p = buf, block[256];
    size_t n = up_h2_head(block, "PUT", "/u/hold", NULL);
    p += h2_frame(p, 1, 0x4, 1, block, n);
    for (size_t at = 0; at < TOTAL; at += FRAME)
        p += h2_frame(p, 0, 0, 1, pat + at, FRAME);
    atomic_store(&g_up.hold, 1);
    rc_conn *c = up_h2_open(f, what);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 5000) == RC_OK, "[%s] send", what);
    long long end = rc_now_ms() + 10000;
    while (atomic_load(&g_up.received) == 0 && rc_now_ms() < end)
        sleep_ms(5);
    long long at_pause = atomic_load(&g_up.received);
    rc_read_some(c, 500);
    up_h2r r;
    up_h2_scan(c, &r);
    unsigned long long granted_paused = r.stream_wu[0];
    atomic_store(&g_up.hold, 0);
    up *u = atomic_load(&g_up.held);
    if (u != NULL)
        up_resume(u);
    CHECK(u != NULL && at_pause > 0, "[%s] the application got no byte", what);
    CHECK(granted_paused == 0, "[%s] %llu bytes of window given back while the application "
          "held all but %lld of 2 MiB", what, granted_paused, at_pause);
    /* Once the application took it all, the stream (still open) gets its window back. */
    end = rc_now_ms() + 20000;
    while (atomic_load(&g_up.received) < TOTAL && rc_now_ms() < end)
        sleep_ms(5);
    CHECK(atomic_load(&g_up.received) == TOTAL, "[%s] the application got %lld of %d bytes",
          what, (long long)atomic_load(&g_up.received), TOTAL);
    for (up_h2_scan(c, &r); r.stream_wu[0] < TOTAL / 2 && rc_now_ms() < end; up_h2_scan(c, &r))
        rc_read_some(c, 100);
    CHECK(r.stream_wu[0] >= TOTAL / 2, "[%s] only %llu bytes of the stream's window came back "
          "after the application took 2 MiB", what, r.stream_wu[0]);
    p = buf;
    p += h2_frame(p, 0, 0x1, 1, NULL, 0);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] END_STREAM", what);
    CHECK(up_h2_wait(c, 1, &r, 20000), "[%s] stream 1 not answered", what);
    up_h2_expect_sum(what, &r.s[0], TOTAL);
    up_h2_close(c);

    /* A client past its window (16 MiB, h2o's SETTINGS) while the application holds. */
    what = "HTTP/2 client sending past its flow-control window";
    const size_t over = (16u << 20) + 4 * FRAME;
    atomic_store(&g_up.hold, 1);
    atomic_store(&g_up.held, NULL);
    c = up_h2_open(f, what);
    p = buf;
    p += h2_frame(p, 1, 0x4, 3, block, n);
    CHECK(rc_send(c, buf, (size_t)(p - buf), 2000) == RC_OK, "[%s] send head", what);
    unsigned char *frame = malloc(9 + FRAME);
    size_t flen = h2_frame(frame, 0, 0, 3, pat, FRAME);
    int reset = 0;
    for (size_t sent = 0; sent < over && !reset; sent += FRAME) {
        if (rc_send(c, frame, flen, 5000) != RC_OK)
            break;
        if (sent % (1u << 20) == 0) {
            rc_read_some(c, 1);
            up_h2_scan(c, &r);
            reset = r.s[1].rst >= 0;
        }
    }
    free(frame);
    CHECK(up_h2_wait(c, 3, &r, 10000), "[%s] the stream was not reset", what);
    CHECK(r.s[1].rst == 3, "[%s] RST_STREAM %ld, want FLOW_CONTROL_ERROR (3) (status %d \"%s\")",
          what, r.s[1].rst, r.s[1].status, r.s[1].body);
    atomic_store(&g_up.hold, 0);
    CHECK(up_wait_no_inflight(f->srv, 5000), "[%s] the upload is still in flight", what);
    up_h2_close(c);
    free(buf);
    free(pat);
}

/* HTTP/1.0: a body with a length streams as in 1.1; no 100 Continue (RFC
 * 9110 10.1.1: not to 1.0 clients), and the connection closes after the
 * answer. */
void test_upload_http10(void **state)
{
    ufx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    CHECK_INT("send", rc_send_str(&c, "PUT /u/sum HTTP/1.0\r\n" HOST "Expect: 100-continue\r\n"
                                      "Content-Length: 5\r\n\r\nhello", 2000), RC_OK);
    rc_response r;
    CHECK_INT("response", rc_read_response(&c, &r, 0, 5000), RC_OK);
    CHECK(r.status == 200, "status %d (an interim 100 to an HTTP/1.0 client?)", r.status);
    char want[64];
    snprintf(want, sizeof want, "5 %016llx\n", (unsigned long long)up_fnv(UP_FNV_INIT, "hello", 5));
    CHECK(r.body != NULL && strcmp(r.body, want) == 0, "answered \"%s\", want \"%s\"",
          or_null(r.body), want);
    rc_response_free(&r);
    int w = rc_wait_close(&c, 5000, NULL);
    CHECK(w == RC_CLOSED || w == RC_RESET, "HTTP/1.0: the connection stays open after the answer");
    rc_close(&c);
    CHECK_INT("on_end status", atomic_load(&g_up.end_status), 0);
}

/* A header block that never ends (HEADERS, then an empty CONTINUATION every
 * 300 ms) to a server with streamed routes: the engine holds the block back
 * from its library until it is complete, so the receive deadline must still
 * run: the connection is closed within header_timeout_ms (3 s here) plus
 * the sweep, not kept forever. */
void test_upload_h2_block_trickle(void **state)
{
    ufx *f = *state;
    const char *what = "HTTP/2 header block trickled in empty CONTINUATIONs";
    unsigned char first[512], step[16], block[256];
    size_t n = up_h2_head(block, "PUT", "/u/sum", NULL);
    size_t fl = h2_frame(first, 1, 0, 1, block, n); /* no END_HEADERS */
    size_t sl = h2_frame(step, 9, 0, 1, NULL, 0);
    rc_conn *c = up_h2_open(f, what);
    long long cut = trickle(c, first, fl, step, sl, 20000);
    CHECK(cut >= 0, "[%s] still open after 20 s", what);
    CHECK_INT("handlers entered", atomic_load(&g_up.entered), 0);
    up_h2_close(c);
}

typedef struct up_h2_sender {
    rc_conn *c;
    unsigned char *data;
    size_t len;
    atomic_int done;
    int rc;
} up_h2_sender;

static void *up_h2_sender_main(void *arg)
{
    up_h2_sender *s = arg;
    s->rc = rc_send(s->c, s->data, s->len, 60000);
    atomic_store(&s->done, 1);
    return NULL;
}

/* Five paused uploads on one connection, each within its stream window
 * (15 of 16 MiB) but 75 MiB together: the engine holds at most
 * H2_HOLD_MAX (24 MiB, core/h2conn.c) for them and then stops reading the
 * connection, so the client's send blocks (TCP back-pressure) instead of
 * the server buffering 75 MiB; once resumed all five complete. The total
 * must exceed the hold plus what the kernel buffers on both sides: with
 * tcp_rmem's maximum at 32 MiB (this machine's) a receive buffer that
 * autotunes high let 45 MiB through now and then (a CI run, uv). */
void test_upload_h2_connection_hold(void **state)
{
    ufx *f = *state;
    const char *what = "HTTP/2 paused uploads filling a connection";
    enum { FRAME = 16384, EACH = 15 << 20, STREAMS = 5 };
    char *pat = up_pattern(FRAME);
    size_t cap = 4096 + (size_t)STREAMS * (EACH / FRAME) * (9 + FRAME);
    unsigned char *buf = malloc(cap), *p = buf, block[256];
    size_t n = up_h2_head(block, "PUT", "/u/hold", NULL);
    for (unsigned k = 0; k < STREAMS; k++)
        p += h2_frame(p, 1, 0x4, 1 + 2 * k, block, n);
    for (size_t at = 0; at < EACH; at += FRAME)
        for (unsigned k = 0; k < STREAMS; k++)
            p += h2_frame(p, 0, at + FRAME >= EACH ? 0x1 : 0, 1 + 2 * k, pat, FRAME);
    atomic_store(&g_up.hold, 1);
    rc_conn *c = up_h2_open(f, what);
    up_h2_sender s = {.c = c, .data = buf, .len = (size_t)(p - buf)};
    pthread_t t;
    pthread_create(&t, NULL, up_h2_sender_main, &s);
    long long end = rc_now_ms() + 10000;
    while (atomic_load(&g_up.reads) < STREAMS && rc_now_ms() < end)
        sleep_ms(5);
    sleep_ms(1500); /* whatever the engine takes in, it takes by now */
    int sender_done = atomic_load(&s.done);
    atomic_store(&g_up.hold, 0);
    pthread_mutex_lock(&f->mu);
    int nups = f->nups;
    up *ups[UP_MAX];
    memcpy(ups, f->ups, sizeof ups);
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < nups; i++)
        if (ups[i]->mode == UP_HOLD)
            up_resume(ups[i]);
    if (!sender_done && atomic_load(&g_up.reads) < STREAMS)
        shutdown(c->fd, SHUT_RDWR); /* nothing to resume: the sender fails */
    pthread_join(t, NULL);
    CHECK_INT("bodies read", atomic_load(&g_up.reads), STREAMS);
    CHECK(!sender_done, "[%s] the client sent all %d MiB while the applications were paused: "
          "the engine buffered them instead of holding the client back", what,
          STREAMS * EACH >> 20);
    CHECK_INT("send", s.rc, RC_OK);
    up_h2r r;
    char want[64];
    uint64_t h = UP_FNV_INIT;
    for (size_t at = 0; at < EACH; at += FRAME)
        h = up_fnv(h, pat, FRAME);
    snprintf(want, sizeof want, "%d %016llx\n", EACH, (unsigned long long)h);
    for (unsigned k = 0; k < STREAMS; k++) {
        CHECK(up_h2_wait(c, 1 + 2 * k, &r, 30000), "[%s] stream %u not answered", what,
              1 + 2 * k);
        CHECK(r.s[k].status == 200 && strcmp(r.s[k].body, want) == 0,
              "[%s] stream %u: %d \"%s\", want \"%s\"", what, 1 + 2 * k, r.s[k].status,
              r.s[k].body, want);
    }
    up_h2_close(c);
    free(buf);
    free(pat);
}

/* A request pipelined right behind a streamed body (in the same write):
 * it is the next request, answered after the upload's answer, on the same
 * connection; a chunked body's trailer line does not swallow it. */
void test_upload_pipelined_after_body(void **state)
{
    ufx *f = *state;
    static const char *heads[] = {
        "PUT /u/sum HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello",
        "PUT /u/sum HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
    };
    char want[64];
    snprintf(want, sizeof want, "5 %016llx\n", (unsigned long long)up_fnv(UP_FNV_INIT, "hello", 5));
    for (int k = 0; k < 2; k++) {
        rc_conn c;
        rc_init(&c);
        CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
        char req[512];
        int n = snprintf(req, sizeof req, "%sGET /u/plain HTTP/1.1\r\n" HOST "\r\n", heads[k]);
        CHECK_INT("send", rc_send(&c, req, (size_t)n, 2000), RC_OK);
        rc_response r;
        CHECK_INT("upload response", rc_read_response(&c, &r, 0, 5000), RC_OK);
        CHECK(r.status == 200 && r.body != NULL && strcmp(r.body, want) == 0,
              "upload (%s): %d \"%s\", want \"%s\"", k ? "chunked" : "length", r.status,
              or_null(r.body), want);
        rc_response_free(&r);
        CHECK_INT("pipelined response", rc_read_response(&c, &r, 0, 5000), RC_OK);
        CHECK(r.status == 200 && r.body != NULL && strcmp(r.body, "plain") == 0,
              "the request after the body (%s): %d \"%s\"", k ? "chunked" : "length", r.status,
              or_null(r.body));
        rc_response_free(&r);
        rc_close(&c);
    }
}

/* Read one response on c: 200 with body `want`. */
static void up_expect(rc_conn *c, const char *what, const char *want)
{
    rc_response r;
    CHECK_INT(what, rc_read_response(c, &r, 0, 10000), RC_OK);
    int same = r.status == 200 && r.body != NULL && strcmp(r.body, want) == 0;
    if (!same)
        print_error("[%s] %d \"%s\", want \"%s\"\n", what, r.status, or_null(r.body), want);
    rc_response_free(&r);
    CHECK(same, "[%s] wrong answer", what);
}

/*
 * Streamed bodies among many pipelined heads, all in one write: what an
 * engine keeps ahead of the request it serves (h2o's guard holds a read's
 * rest as bytes once its copies of waiting heads fill their budget, and
 * feeds them again a piece at a time) must reach each streamed body in
 * order, and what follows the body must stay the next requests: 300 heads,
 * a 60,000-byte body, a chunked one of 30,000, 100 heads, a last body.
 */
void test_upload_bodies_among_many_heads(void **state)
{
    ufx *f = *state;
    enum { BEFORE = 300, AFTER = 100, BODY = 60000, CHUNK = 10000 };
    const char *what = "streamed bodies among many heads";
    size_t len = 0;
    char *body = NULL;
    char *all = bodies_among_heads(NULL, "GET /u/plain HTTP/1.1\r\n" HOST "\r\n", BEFORE,
                                   "PUT /u/sum", BODY, CHUNK, AFTER,
                                   "PUT /u/sum HTTP/1.1\r\n" HOST "Content-Length: 5\r\n\r\nhello",
                                   &len, &body);
    char whole[64], part[64], last[64];
    snprintf(whole, sizeof whole, "%d %016llx\n", (int)BODY,
             (unsigned long long)up_fnv(UP_FNV_INIT, body, BODY));
    snprintf(part, sizeof part, "%d %016llx\n", 3 * CHUNK,
             (unsigned long long)up_fnv(UP_FNV_INIT, body, 3 * CHUNK));
    snprintf(last, sizeof last, "5 %016llx\n", (unsigned long long)up_fnv(UP_FNV_INIT, "hello", 5));
    free(body);
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    int rc = rc_send(&c, all, len, 10000);
    free(all);
    CHECK(rc == RC_OK, "[%s] cannot send: %s", what, rc_strerror(rc));
    for (int k = 0; k < BEFORE; k++)
        up_expect(&c, "streamed bodies among many heads: a head before", "plain");
    up_expect(&c, "streamed bodies among many heads: the 60,000-byte body", whole);
    up_expect(&c, "streamed bodies among many heads: the chunked body", part);
    for (int k = 0; k < AFTER; k++)
        up_expect(&c, "streamed bodies among many heads: a head after", "plain");
    up_expect(&c, "streamed bodies among many heads: the last body", last);
    CHECK(rc_unread(&c) == 0, "[%s] %zu stray bytes", what, rc_unread(&c));
    rc_close(&c);
}

/* ---- multipart/form-data (0.8) ---------------------------------------------- */

typedef struct form_res {
    long status;
    sbuf out;
    CURLcode rc;
} form_res;

static size_t form_write_cb(char *p, size_t sz, size_t n, void *arg)
{
    form_res *r = arg;
    sb_add(&r->out, "%.*s", (int)(sz * n), p);
    return sz * n;
}

/* POST to /u/form: a curl_mime form (what `curl -F` sends), or a raw body
 * with its Content-Type when mime is NULL. */
static void form_post(const ufx *f, curl_mime *mime, CURL *h, const char *ctype,
                      const char *body, size_t len, form_res *r)
{
    char url[256];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d/u/form", url_scheme(), f->port);
    memset(r, 0, sizeof *r);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, form_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    if (f->m->http2)
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, g_tls ? (long)CURL_HTTP_VERSION_2TLS
                                                        : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    else
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if (g_tls)
        curl_easy_setopt(h, CURLOPT_CAINFO, g_tls_cert);
    struct curl_slist *hdrs = NULL;
    if (mime != NULL) {
        curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
    } else {
        char ct[256];
        snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
        hdrs = curl_slist_append(hdrs, ct);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    }
    r->rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hdrs);
}

/* A form of three fields and a file (`curl -F greeting=hello -F
 * 'upload=@pat.bin;filename=../dir/pat.bin;type=application/octet-stream'
 * ...`), through a SRV_ROUTE_STREAM_BODY route and the streamed parser:
 * every part's name, filename, type, size and digest as sent. */
void test_upload_multipart_form(void **state)
{
    ufx *f = *state;
    const size_t big = (3u << 20) + 17;
    char *pat = malloc(big);
    for (size_t i = 0; i < big; i++)
        pat[i] = (char)pattern_byte(i);
    /* Data that looks like curl's boundaries ("--" and 24 dashes). */
    static const char tricky[] = "a\r\n--------------------------x\r\n--\r\n-\r\r\n\n--";
    CURL *h = curl_easy_init();
    curl_mime *mime = curl_mime_init(h);
    curl_mimepart *p = curl_mime_addpart(mime);
    curl_mime_name(p, "greeting");
    curl_mime_data(p, "hello", CURL_ZERO_TERMINATED);
    p = curl_mime_addpart(mime);
    curl_mime_name(p, "upload");
    curl_mime_data(p, pat, big);
    curl_mime_filename(p, "../dir/pat.bin");
    curl_mime_type(p, "application/octet-stream");
    p = curl_mime_addpart(mime);
    curl_mime_name(p, "tricky");
    curl_mime_data(p, tricky, sizeof tricky - 1);
    p = curl_mime_addpart(mime);
    curl_mime_name(p, "empty");
    curl_mime_data(p, "", 0);
    form_res r;
    form_post(f, mime, h, NULL, NULL, 0, &r);
    curl_mime_free(mime);
    curl_easy_cleanup(h);
    CHECK(r.rc == CURLE_OK, "POST form: %s", curl_easy_strerror(r.rc));
    CHECK_INT("POST form status", r.status, 200);
    sbuf want = {0};
    sb_add(&want, "greeting|(null)|(null)|5|%016llx\n",
           (unsigned long long)up_fnv(UP_FNV_INIT, "hello", 5));
    sb_add(&want, "upload|../dir/pat.bin|application/octet-stream|%zu|%016llx\n", big,
           (unsigned long long)up_fnv_pattern(big));
    sb_add(&want, "tricky|(null)|(null)|%zu|%016llx\n", sizeof tricky - 1,
           (unsigned long long)up_fnv(UP_FNV_INIT, tricky, sizeof tricky - 1));
    sb_add(&want, "empty|(null)|(null)|0|%016llx\n", (unsigned long long)UP_FNV_INIT);
    CHECK_STR("POST form answer", r.out.p, want.p);
    free(want.p);
    free(r.out.p);
    free(pat);
}

/* Malformed forms get a 400 that says why, from the parser's error. */
void test_upload_multipart_bad(void **state)
{
    ufx *f = *state;
    static const struct {
        const char *ctype, *body, *answer;
    } cases[] = {
        {"multipart/form-data; boundary=XyZ",
         "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\ntruncated",
         "400 Bad Request: multipart/form-data: the body ends before the final boundary\n"},
        {"multipart/form-data; boundary=XyZ",
         "--XyZ\r\nContent-Type: text/plain\r\n\r\nno disposition\r\n--XyZ--",
         "400 Bad Request: multipart/form-data: a part without Content-Disposition: form-data\n"},
        {"multipart/form-data; boundary=XyZ",
         "--XyZ\nContent-Disposition: form-data; name=\"a\"\n\nbare LF\n--XyZ--\n",
         NULL},
        {"multipart/form-data", "--XyZ--", NULL},               /* no boundary */
        {"text/plain", "hello", NULL},
        {"multipart/form-data; boundary=\"0123456789012345678901234567890123456789"
         "0123456789012345678901234567890\"", "--x--", NULL},   /* 71 characters */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* Refused at the head, before any body is read: over HTTP/2 the
         * answer goes with RST_STREAM(NO_ERROR) on the stream still
         * sending (test_upload_h2_answer_unread pins it), which
         * libcurl 7.88 may report as a framing error although the answer
         * came (fixed in later curl). */
        if (f->m->http2 && i >= 3)
            continue;
        CURL *h = curl_easy_init();
        form_res r;
        form_post(f, NULL, h, cases[i].ctype, cases[i].body, strlen(cases[i].body), &r);
        curl_easy_cleanup(h);
        CHECK(r.rc == CURLE_OK, "POST bad form %zu: %s", i, curl_easy_strerror(r.rc));
        CHECK(r.status == 400, "bad form %zu (%s): status %ld, answer %s", i, cases[i].ctype,
              r.status, or_null(r.out.p));
        if (cases[i].answer != NULL)
            CHECK_STR("bad form answer", r.out.p, cases[i].answer);
        else
            CHECK(r.out.p != NULL && strncmp(r.out.p, "400 Bad Request: multipart/form-data: ",
                                             38) == 0,
                  "bad form %zu answer: %s", i, or_null(r.out.p));
        free(r.out.p);
    }
    /* Too many parts (the route allows 8). */
    sbuf b = {0};
    for (int i = 0; i < 9; i++)
        sb_add(&b, "--XyZ\r\nContent-Disposition: form-data; name=\"p%d\"\r\n\r\n%d\r\n", i, i);
    sb_add(&b, "--XyZ--\r\n");
    CURL *h = curl_easy_init();
    form_res r;
    form_post(f, NULL, h, "multipart/form-data; boundary=XyZ", b.p, b.n, &r);
    curl_easy_cleanup(h);
    CHECK_INT("nine parts", r.status, 400);
    CHECK_STR("nine parts answer", r.out.p,
              "400 Bad Request: multipart/form-data: more parts than max_parts\n");
    free(r.out.p);
    free(b.p);
}

/* on_data answers and returns 0: on_end comes once, after on_data returned
 * (with the whole body there, or SRV_ECLOSED when the engine let go). */
void test_upload_answer_in_on_data(void **state)
{
    ufx *f = *state;
    atomic_store(&g_early_nested, 0);
    for (int chunked = 0; chunked < 2; chunked++) {
        up_send s = {0};
        long status = 0;
        int ends = atomic_load(&g_up.ends);
        CURLcode rc = up_put(f, "/u/early", 10, chunked, &s, &status);
        CHECK(rc == CURLE_OK, "PUT /u/early: %s", curl_easy_strerror(rc));
        CHECK_INT("PUT /u/early status", status, 200);
        CHECK_STR("PUT /u/early answer", s.out.p, "early\n");
        CHECK(up_wait_ends(ends + 1, 5000), "on_end never came");
        int st = atomic_load(&g_up.end_status);
        CHECK(st == 0 || st == SRV_ECLOSED, "on_end status %d", st);
        free(s.out.p);
    }
    CHECK_INT("on_end inside on_data", atomic_load(&g_early_nested), 0);
}
