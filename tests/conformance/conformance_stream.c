/*
 * Streamed responses (srv_stream_*, srv_sse_*) on every engine: events
 * spread in time, large downloads verified byte for byte under
 * back-pressure in bounded memory, HTTP/1.0 (close-delimited), HTTP/1.1
 * (chunked, kept alive after), HTTP/2 (the h2 group), known lengths, a
 * vanished client, the send deadline, graceful stop, writes from another
 * thread. Each case runs its own server with the stream routes below.
 */
#include "conformance.h"

/* What the application saw, for the cases to check. */
static struct {
    atomic_int started;  /* streams started */
    atomic_int ended;    /* srv_stream_end called */
    atomic_int closed;   /* a write or end said SRV_ECLOSED */
    atomic_int end_rc;   /* the last srv_stream_end's result */
    atomic_int writes;   /* writes accepted by /s/forever */
    atomic_int nobody;   /* writes that said SRV_ENOBODY (HEAD) */
    atomic_int on_stop;  /* srv_server_on_stop callbacks */
    pthread_mutex_t idle_mu; /* the /s/idle streams the stop callback ends */
    srv_stream *idle[8];
    int nidle;
} g_st = {.idle_mu = PTHREAD_MUTEX_INITIALIZER};

typedef struct sfx {
    const mode *m;
    srv_server *srv;
    int port;
    int stopped;
    pthread_mutex_t mu;
    pthread_t threads[4];
    int nthreads;
} sfx;

static void st_end(srv_stream *s)
{
    int rc = srv_stream_end(s);
    atomic_store(&g_st.end_rc, rc);
    if (rc == SRV_ECLOSED)
        atomic_fetch_add(&g_st.closed, 1);
    atomic_fetch_add(&g_st.ended, 1);
}

/* Counted before srv_stream_start, not after: the engine may send the head
 * (a HEAD's whole answer) before the handler's next line runs, and a case
 * waiting for ended == started must not see 0 == 0 in between. */
static void st_starting(void)
{
    atomic_fetch_add(&g_st.started, 1);
}

static void st_not_started(void)
{
    atomic_fetch_sub(&g_st.started, 1);
}

static unsigned long st_query(srv_request *req, const char *name, unsigned long dflt)
{
    const char *v = srv_request_query(req, name);
    return v && *v ? strtoul(v, NULL, 10) : dflt;
}

/* ---- /s/events?count&interval_ms: SSE from srv_after --------------------- */

typedef struct st_events {
    srv_server *srv;
    srv_stream *s;
    unsigned long count, sent, interval;
} st_events;

static void st_events_tick(void *arg)
{
    st_events *e = arg;
    char id[24], data[64];
    snprintf(id, sizeof id, "%lu", e->sent + 1);
    /* Two lines of data: the helper splits them into two data: lines. */
    snprintf(data, sizeof data, "event %lu\nof %lu", e->sent + 1, e->count);
    int rc = srv_sse_send(e->s, "tick", id, data);
    if (rc == SRV_ECLOSED)
        atomic_fetch_add(&g_st.closed, 1);
    if (rc == 0 && ++e->sent < e->count &&
        srv_after(e->srv, (unsigned)e->interval, st_events_tick, e) == 0)
        return;
    st_end(e->s);
    free(e);
}

static void h_events(srv_request *req, void *ctx)
{
    (void)ctx;
    st_events *e = calloc(1, sizeof *e);
    e->srv = srv_request_server(req);
    e->count = st_query(req, "count", 10);
    e->interval = st_query(req, "interval_ms", 100);
    st_starting();
    if (srv_sse_start(req, &e->s) != 0) {
        st_not_started();
        free(e);
        return;
    }
    if (srv_after(e->srv, 0, st_events_tick, e) != 0) {
        st_end(e->s);
        free(e);
    }
}

/* ---- /s/download?bytes[&length=1][&end_at=K]: back-pressure ------------ */

typedef struct st_dl {
    uint64_t total, end_at, sent;
    unsigned char piece[20000]; /* not a divisor of the buffer: pieces straddle */
} st_dl;

static void st_dl_pump(srv_stream *s, void *arg)
{
    st_dl *d = arg;
    while (d->sent < d->end_at) {
        size_t n = sizeof d->piece;
        if (d->end_at - d->sent < n)
            n = (size_t)(d->end_at - d->sent);
        for (size_t i = 0; i < n; i++)
            d->piece[i] = pattern_byte(d->sent + i);
        int rc = srv_stream_write(s, d->piece, n);
        if (rc == SRV_EAGAIN && srv_stream_on_writable(s, st_dl_pump, d) == 0)
            return;
        if (rc != 0) {
            if (rc == SRV_ECLOSED)
                atomic_fetch_add(&g_st.closed, 1);
            if (rc == SRV_ENOBODY)
                atomic_fetch_add(&g_st.nobody, 1);
            break;
        }
        d->sent += n;
    }
    st_end(s);
    free(d);
}

static void h_download(srv_request *req, void *ctx)
{
    (void)ctx;
    st_dl *d = calloc(1, sizeof *d);
    d->total = st_query(req, "bytes", 1000);
    d->end_at = st_query(req, "end_at", d->total);
    int64_t len = st_query(req, "length", 0) ? (int64_t)d->total : SRV_LENGTH_UNKNOWN;
    srv_stream *s;
    st_starting();
    int rc = srv_stream_start(req, 200, "application/octet-stream", len, &s);
    if (rc != 0) {
        st_not_started();
        if (rc == SRV_EENGINE) /* no SRV_CAP_STREAM: the request is still ours */
            srv_respond(req, 501, "text/plain", "no streams\n", 11);
        free(d);
        return;
    }
    st_dl_pump(s, d);
}

/* ---- /s/forever: 1000 bytes every 20 ms until the stream closes --------- */

typedef struct st_forever {
    srv_server *srv;
    srv_stream *s;
} st_forever;

static void st_forever_tick(void *arg)
{
    st_forever *e = arg;
    char piece[1000];
    memset(piece, 'f', sizeof piece);
    int rc = srv_stream_write(e->s, piece, sizeof piece);
    if (rc == 0)
        atomic_fetch_add(&g_st.writes, 1);
    if ((rc == 0 || rc == SRV_EAGAIN) && srv_after(e->srv, 20, st_forever_tick, e) == 0)
        return;
    if (rc == SRV_ECLOSED)
        atomic_fetch_add(&g_st.closed, 1);
    st_end(e->s);
    free(e);
}

static void h_forever(srv_request *req, void *ctx)
{
    (void)ctx;
    st_forever *e = calloc(1, sizeof *e);
    e->srv = srv_request_server(req);
    st_starting();
    if (srv_stream_start(req, 200, "text/plain", SRV_LENGTH_UNKNOWN, &e->s) != 0) {
        st_not_started();
        free(e);
        return;
    }
    st_forever_tick(e);
}

/* ---- /s/later?ms: one write ms after the start (a silent producer) ---- */

typedef struct st_later {
    srv_stream *s;
} st_later;

static void st_later_tick(void *arg)
{
    st_later *e = arg;
    int rc = srv_stream_write(e->s, "late\n", 5);
    if (rc == SRV_ENOBODY)
        atomic_fetch_add(&g_st.nobody, 1);
    if (rc == SRV_ECLOSED)
        atomic_fetch_add(&g_st.closed, 1);
    st_end(e->s);
    free(e);
}

static void h_later(srv_request *req, void *ctx)
{
    (void)ctx;
    st_later *e = calloc(1, sizeof *e);
    srv_server *srv = srv_request_server(req);
    unsigned ms = (unsigned)st_query(req, "ms", 1000);
    int close_on_stop = (int)st_query(req, "close", 0);
    st_starting();
    if (srv_stream_start(req, 200, "text/plain", SRV_LENGTH_UNKNOWN, &e->s) != 0) {
        st_not_started();
        free(e);
        return;
    }
    if (close_on_stop && srv_stream_close_on_stop(e->s) != 0)
        atomic_fetch_add(&g_st.closed, 100); /* shows as a wrong count */
    if (srv_after(srv, ms, st_later_tick, e) != 0)
        st_later_tick(e);
}

/* ---- /s/thread?bytes: an application thread writes, waiting for room ---- */

typedef struct st_thr {
    srv_stream *s;
    uint64_t total;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int room;
} st_thr;

static void st_thr_writable(srv_stream *s, void *arg)
{
    (void)s;
    st_thr *t = arg;
    pthread_mutex_lock(&t->mu);
    t->room = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void *st_thr_main(void *arg)
{
    st_thr *t = arg;
    unsigned char piece[7000];
    uint64_t sent = 0;
    while (sent < t->total) {
        size_t n = sizeof piece;
        if (t->total - sent < n)
            n = (size_t)(t->total - sent);
        for (size_t i = 0; i < n; i++)
            piece[i] = pattern_byte(sent + i);
        int rc = srv_stream_write(t->s, piece, n);
        if (rc == SRV_EAGAIN) {
            pthread_mutex_lock(&t->mu);
            t->room = 0;
            pthread_mutex_unlock(&t->mu);
            srv_stream_on_writable(t->s, st_thr_writable, t);
            pthread_mutex_lock(&t->mu);
            while (!t->room)
                pthread_cond_wait(&t->cv, &t->mu);
            pthread_mutex_unlock(&t->mu);
            continue;
        }
        if (rc != 0)
            break;
        sent += n;
    }
    st_end(t->s);
    /* The callback may still be queued: srv_stream_end stops it from being
     * called (it never runs after end), so t can go. */
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    return NULL;
}

static void h_thread(srv_request *req, void *ctx)
{
    sfx *f = ctx;
    st_thr *t = calloc(1, sizeof *t);
    t->total = st_query(req, "bytes", 1000);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    st_starting();
    if (srv_stream_start(req, 200, "application/octet-stream", SRV_LENGTH_UNKNOWN, &t->s) != 0) {
        st_not_started();
        free(t);
        return;
    }
    pthread_mutex_lock(&f->mu);
    if (f->nthreads < 4 && pthread_create(&f->threads[f->nthreads], NULL, st_thr_main, t) == 0)
        f->nthreads++;
    else
        st_thr_main(t); /* not expected: keeps the request answered */
    pthread_mutex_unlock(&f->mu);
}

/* ---- /s/idle: one event, then nothing until the stop callback ends it ---- */

static void h_idle(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_stream *s;
    st_starting();
    if (srv_sse_start(req, &s) != 0) {
        st_not_started();
        return;
    }
    (void)srv_sse_send(s, NULL, NULL, "hello");
    pthread_mutex_lock(&g_st.idle_mu);
    if (g_st.nidle < 8)
        g_st.idle[g_st.nidle++] = s;
    else
        st_end(s);
    pthread_mutex_unlock(&g_st.idle_mu);
}

/* srv_server_on_stop: end every idle stream (this thread alone holds them). */
static void st_on_stop(srv_server *srv, void *arg)
{
    (void)srv;
    (void)arg;
    atomic_fetch_add(&g_st.on_stop, 1);
    pthread_mutex_lock(&g_st.idle_mu);
    for (int i = 0; i < g_st.nidle; i++)
        st_end(g_st.idle[i]);
    g_st.nidle = 0;
    pthread_mutex_unlock(&g_st.idle_mu);
}

static void h_plain(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "text/plain", "plain", 5);
}

/* ---- fixture ------------------------------------------------------------- */

int st_setup(void **state)
{
    const mode *m = *state ? *state : &MODE_H1;
    sfx *f = calloc(1, sizeof *f);
    f->m = m;
    pthread_mutex_init(&f->mu, NULL);
    atomic_store(&g_st.started, 0);
    atomic_store(&g_st.ended, 0);
    atomic_store(&g_st.closed, 0);
    atomic_store(&g_st.end_rc, 1);
    atomic_store(&g_st.writes, 0);
    atomic_store(&g_st.nobody, 0);
    atomic_store(&g_st.on_stop, 0);
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 16;
    cfg.io_threads = 2;
    cfg.header_timeout_ms = T_HEADER_MS; /* also the send deadline */
    cfg.keepalive_timeout_ms = T_KEEPALIVE_MS;
    cfg.request_timeout_ms = T_REQUEST_MS;
    if (g_tls) { /* the tls run: the libcurl cases over HTTPS */
        cfg.tls_cert_file = g_tls_cert;
        cfg.tls_key_file = g_tls_key;
    }
    f->srv = srv_server_new(g_engine, &cfg);
    if (f->srv == NULL)
        return -1;
    struct {
        const char *path;
        srv_handler_fn fn;
    } routes[] = {{"/s/events", h_events},     {"/s/download", h_download},
                  {"/s/forever", h_forever},   {"/s/thread", h_thread},
                  {"/s/plain", h_plain},       {"/s/later", h_later},
                  {"/s/idle", h_idle}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        srv_route_opts o;
        srv_route_opts_init(&o);
        o.method = "GET";
        o.path = routes[i].path;
        o.handler = routes[i].fn;
        o.ctx = f;
        o.flags = g_nonblocking ? SRV_ROUTE_NONBLOCKING : 0;
        if (srv_route_add(f->srv, &o) != 0)
            return -1;
    }
    if (srv_server_on_stop(f->srv, st_on_stop, NULL) != 0)
        return -1;
    int rc = srv_server_start(f->srv);
    if (rc != 0) {
        print_error("stream setup: start: %s (%s)\n", srv_strerror(rc),
                    srv_server_last_error(f->srv));
        srv_server_free(f->srv);
        free(f);
        return -1;
    }
    f->port = srv_server_port(f->srv);
    *state = f;
    return 0;
}

/* Every stream ended, nothing in flight, a clean stop. */
int st_teardown(void **state)
{
    sfx *f = *state;
    int rc = 0;
    /* Under the lock h_thread counts them with: a stream can end (and the
     * test with it) before its handler's count is out of the lock. */
    pthread_mutex_lock(&f->mu);
    int nthreads = f->nthreads;
    pthread_mutex_unlock(&f->mu);
    for (int i = 0; i < nthreads; i++)
        pthread_join(f->threads[i], NULL);
    if (!f->stopped && srv_server_stop(f->srv, 2000) != 0)
        rc = -1;
    srv_stats st;
    srv_server_stats(f->srv, &st);
    if (st.connections_open != 0 || st.requests_in_flight != 0) {
        print_error("stream teardown: connections_open=%u requests_in_flight=%u\n",
                    st.connections_open, st.requests_in_flight);
        rc = -1;
    }
    /* The streams' owners were told (a write or a callback) and ended them
     * (up to 10 s: a loaded machine runs their threads late). */
    for (int i = 0; i < 1000 && atomic_load(&g_st.ended) != atomic_load(&g_st.started); i++)
        sleep_ms(10);
    if (atomic_load(&g_st.ended) != atomic_load(&g_st.started)) {
        print_error("stream teardown: %d streams started, %d ended\n",
                    atomic_load(&g_st.started), atomic_load(&g_st.ended));
        rc = -1;
    }
    srv_server_free(f->srv);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return rc;
}

static int wait_no_inflight_srv(srv_server *srv, int timeout_ms)
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

/* The application's end runs on its own thread: the client may have the
 * whole body a moment before srv_stream_end returned. */
static void st_wait_ended(void)
{
    for (int i = 0; i < 1000 && atomic_load(&g_st.ended) != atomic_load(&g_st.started); i++)
        sleep_ms(10);
}

/* ---- a libcurl reader ------------------------------------------------------ */

typedef struct st_read {
    uint64_t got;        /* body bytes */
    uint64_t bad_at;     /* first byte off the pattern + 1 (0: none) */
    int verify;          /* check the download pattern */
    sbuf text;           /* kept body (events) */
    int keep;
    long long t0, times[64]; /* arrival of each complete event */
    int events;
    int slow_calls;      /* sleep 20 ms in this many first callbacks */
    int head;            /* ask with HEAD */
    _Atomic uint64_t progress; /* got, for another thread to watch */
    long held0, held_max;
} st_read;

static size_t st_on_data(char *p, size_t sz, size_t n, void *arg)
{
    st_read *r = arg;
    size_t len = sz * n;
    if (r->verify && r->bad_at == 0)
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)p[i] != pattern_byte(r->got + i)) {
                r->bad_at = r->got + i + 1;
                break;
            }
    if (r->keep) {
        size_t before = r->text.n;
        sb_add(&r->text, "%.*s", (int)len, p);
        /* Count events by their blank line ("\n\n"), as they complete. */
        for (size_t i = before > 0 ? before - 1 : 0; i + 1 < r->text.n; i++)
            if (r->text.p[i] == '\n' && r->text.p[i + 1] == '\n' && r->events < 64)
                r->times[r->events++] = rc_now_ms() - r->t0;
    }
    r->got += len;
    atomic_store(&r->progress, r->got);
    if (r->slow_calls > 0) {
        r->slow_calls--;
        sleep_ms(20);
    }
    if ((r->got & 0xfffff) < len) { /* about every MiB */
        long h = held_kb();
        if (h > r->held_max)
            r->held_max = h;
    }
    return len;
}

static CURLcode st_get(const sfx *f, const char *path, st_read *r, long *status,
                       char *te, size_t te_len, long long *cl)
{
    char url[256];
    snprintf(url, sizeof url, "%s://127.0.0.1:%d%s", url_scheme(), f->port, path);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, st_on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* A small receive window so the slow reader pushes back at once. */
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 16384L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    if (f->m->http2)
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, g_tls ? (long)CURL_HTTP_VERSION_2TLS
                                                        : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    else
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if (g_tls)
        curl_easy_setopt(h, CURLOPT_CAINFO, g_tls_cert);
    if (r->head)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    struct curl_slist *hdrs = NULL;
    r->t0 = rc_now_ms();
    r->held0 = r->held_max = held_kb();
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    if (cl != NULL) {
        curl_off_t v = -1;
        curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &v);
        *cl = (long long)v;
    }
    if (te != NULL) {
        struct curl_header *hd = NULL;
        te[0] = '\0';
        if (curl_easy_header(h, "Transfer-Encoding", 0, CURLH_HEADER, -1, &hd) == CURLHE_OK)
            snprintf(te, te_len, "%s", hd->value);
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return rc;
}

/* ---- cases ------------------------------------------------------------------ */

/* Five events 250 ms apart arrive as they are sent, not all at the end. */
void test_stream_events_spread(void **state)
{
    sfx *f = *state;
    st_read r = {.keep = 1};
    long status = 0;
    CURLcode rc = st_get(f, "/s/events?count=5&interval_ms=250", &r, &status, NULL, 0, NULL);
    CHECK(rc == CURLE_OK, "GET /s/events: %s", curl_easy_strerror(rc));
    CHECK_INT("status", status, 200);
    CHECK_INT("events received", r.events, 5);
    /* Sent at 0, 250, ..., 1000 ms: the first long before the last (600 ms
     * of room for a client thread a loaded machine runs late; 150 ms apart
     * the events came 570-640 ms apart under TSan, 200 ms of room). */
    CHECK(r.times[4] - r.times[0] >= 400,
          "events arrived at %lld..%lld ms: not spread (all at the end?)", r.times[0],
          r.times[4]);
    const char *want = "event: tick\nid: 1\ndata: event 1\ndata: of 5\n\n";
    CHECK(r.text.p != NULL && strncmp(r.text.p, want, strlen(want)) == 0,
          "first event framed as \"%s\", got \"%.60s\"", want, or_null(r.text.p));
    st_wait_ended();
    CHECK_INT("streams ended cleanly (end rc)", atomic_load(&g_st.end_rc), 0);
    free(r.text.p);
}

/* 64 MiB, chunked (HTTP/1.1) or DATA frames (HTTP/2), read slowly at first:
 * every byte right, and the server holds about one stream buffer, not the
 * body (the test process hosts the server: its memory is measured). */
void test_stream_download_64m(void **state)
{
    sfx *f = *state;
    const uint64_t total = 64u << 20;
    st_read r = {.verify = 1, .slow_calls = 25};
    long status = 0;
    char te[64];
    char path[96];
    snprintf(path, sizeof path, "/s/download?bytes=%llu", (unsigned long long)total);
    CURLcode rc = st_get(f, path, &r, &status, te, sizeof te, NULL);
    CHECK(rc == CURLE_OK, "GET 64 MiB: %s after %llu bytes", curl_easy_strerror(rc),
          (unsigned long long)r.got);
    CHECK_INT("status", status, 200);
    CHECK(r.got == total, "got %llu bytes, want %llu", (unsigned long long)r.got,
          (unsigned long long)total);
    CHECK(r.bad_at == 0, "byte %llu is not the pattern's", (unsigned long long)(r.bad_at - 1));
    if (!f->m->http2)
        CHECK(strcasecmp(te, "chunked") == 0, "Transfer-Encoding \"%s\", want chunked", te);
    long grew = r.held_max - r.held0;
    CHECK(grew < 24 * 1024, "memory grew by %ld KB while streaming 64 MiB (bound: 24 MiB)",
          grew);
    st_wait_ended();
    CHECK_INT("end rc", atomic_load(&g_st.end_rc), 0);
}

/* A known length is sent as Content-Length; ending short cuts the response
 * (the client sees a short body, never a wrong one) and end says EINVAL. */
void test_stream_known_length(void **state)
{
    sfx *f = *state;
    st_read r = {.verify = 1};
    long status = 0;
    long long cl = -1;
    CURLcode rc = st_get(f, "/s/download?bytes=300000&length=1", &r, &status, NULL, 0, &cl);
    CHECK(rc == CURLE_OK, "GET with a length: %s", curl_easy_strerror(rc));
    CHECK_INT("Content-Length", cl, 300000);
    CHECK_INT("bytes", r.got, 300000);
    CHECK(r.bad_at == 0, "byte %llu is not the pattern's", (unsigned long long)(r.bad_at - 1));
    st_wait_ended();
    CHECK_INT("end rc", atomic_load(&g_st.end_rc), 0);

    st_read s = {.verify = 1};
    rc = st_get(f, "/s/download?bytes=300000&length=1&end_at=100000", &s, &status, NULL, 0, &cl);
    CHECK(rc != CURLE_OK, "a body ended short of its length was received as complete");
    CHECK(s.got <= 100000, "got %llu bytes of a body ended at 100000",
          (unsigned long long)s.got);
    CHECK(s.bad_at == 0, "byte %llu is not the pattern's", (unsigned long long)(s.bad_at - 1));
    st_wait_ended();
    CHECK_INT("end rc of the short body", atomic_load(&g_st.end_rc), SRV_EINVAL);
    CHECK(wait_no_inflight_srv(f->srv, 10000), "the short stream is still in flight");
}

/* Read the raw response until the server closes (or timeout_ms). */
static size_t st_raw_all(rc_conn *c, int timeout_ms)
{
    size_t unread = 0;
    rc_wait_close(c, timeout_ms, &unread);
    return rc_unread(c);
}

/* HTTP/1.0: no length, no chunks: the close ends the body. */
void test_stream_http10(void **state)
{
    sfx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    rc_send_str(&c, "GET /s/download?bytes=200000 HTTP/1.0\r\n" HOST "\r\n", 2000);
    size_t n = st_raw_all(&c, 10000);
    CHECK(c.eof || c.reset, "the server did not close the HTTP/1.0 stream");
    const char *p = c.buf + c.off;
    const char *end = memmem(p, n, "\r\n\r\n", 4);
    CHECK(end != NULL, "no response head in %zu bytes", n);
    size_t hlen = (size_t)(end - p) + 4;
    char *head = strndup(p, hlen);
    CHECK(strncmp(head, "HTTP/1.", 7) == 0 && strstr(head, " 200 ") != NULL, "head: %s", head);
    CHECK(strcasestr(head, "content-length") == NULL, "a length in: %s", head);
    CHECK(strcasestr(head, "transfer-encoding") == NULL, "chunks for HTTP/1.0 in: %s", head);
    CHECK(strcasestr(head, "connection: close") != NULL, "no Connection: close in: %s", head);
    free(head);
    CHECK_INT("body bytes", n - hlen, 200000);
    for (size_t i = 0; i < n - hlen; i++)
        if ((unsigned char)p[hlen + i] != pattern_byte(i)) {
            CHECK(0, "byte %zu is not the pattern's", i);
            break;
        }
    rc_close(&c);
}

/* HTTP/1.1 chunked on the wire, ended by the last chunk, and the connection
 * serves the next request after it. */
void test_stream_chunked_keepalive(void **state)
{
    sfx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    rc_send_str(&c, "GET /s/events?count=3&interval_ms=10 HTTP/1.1\r\n" HOST "\r\n", 2000);
    rc_response r;
    int rc = rc_read_response(&c, &r, 0, 5000);
    CHECK(rc == RC_OK, "reading the event stream: %s", rc_strerror(rc));
    CHECK_INT("status", r.status, 200);
    CHECK(r.chunked, "the event stream was not chunked");
    CHECK(strcasecmp(or_null(rc_header_get(&r, "Content-Type")), "text/event-stream") == 0,
          "Content-Type %s", or_null(rc_header_get(&r, "Content-Type")));
    CHECK(strcasecmp(or_null(rc_header_get(&r, "Cache-Control")), "no-cache") == 0,
          "Cache-Control %s", or_null(rc_header_get(&r, "Cache-Control")));
    CHECK(strstr(r.body, "id: 3\ndata: event 3\ndata: of 3\n\n") != NULL, "body: %s", r.body);
    rc_response_free(&r);
    rc_send_str(&c, "GET /s/plain HTTP/1.1\r\n" HOST "\r\n", 2000);
    rc = rc_read_response(&c, &r, 0, 5000);
    CHECK(rc == RC_OK, "the request after a stream: %s", rc_strerror(rc));
    CHECK_INT("status after the stream", r.status, 200);
    rc_response_free(&r);
    rc_close(&c);
}

/* The client goes away mid-stream: the application's writes say
 * SRV_ECLOSED soon, it ends the stream, nothing stays in flight. */
void test_stream_vanished_client(void **state)
{
    sfx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    rc_send_str(&c, "GET /s/forever HTTP/1.1\r\n" HOST "\r\n", 2000);
    for (int i = 0; i < 1000 && rc_unread(&c) < 3000; i++) { /* up to 10 s */
        size_t u = 0;
        rc_wait_close(&c, 10, &u);
    }
    CHECK(rc_unread(&c) >= 3000, "only %zu bytes of the stream came", rc_unread(&c));
    rc_close(&c);
    long long t0 = rc_now_ms();
    while (atomic_load(&g_st.closed) == 0 && rc_now_ms() - t0 < 5000)
        sleep_ms(10);
    CHECK(atomic_load(&g_st.closed) > 0, "writes still succeed 5 s after the client left");
    CHECK(wait_no_inflight_srv(f->srv, 10000), "the stream stayed in flight");
}

/* A client that never reads: the send deadline (header_timeout_ms without
 * progress) cuts the stream and the application hears of it. */
void test_stream_send_deadline(void **state)
{
    sfx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    int small = 4096;
    setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    rc_send_str(&c, "GET /s/download?bytes=1000000000 HTTP/1.1\r\n" HOST "\r\n", 2000);
    long long t0 = rc_now_ms();
    while (atomic_load(&g_st.closed) == 0 && rc_now_ms() - t0 < 15000)
        sleep_ms(20);
    long long took = rc_now_ms() - t0;
    CHECK(atomic_load(&g_st.closed) > 0, "a never-reading client held the stream 15 s");
    CHECK(took >= T_HEADER_MS - 100, "cut after %lld ms, before the send deadline", took);
    CHECK(wait_no_inflight_srv(f->srv, 10000), "the stream stayed in flight");
    /* Widen the window, then drain what was sent before the cut. */
    int big = 1 << 20;
    setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    rc_close(&c);
}

typedef struct st_stop {
    srv_server *srv;
    unsigned grace;
    int rc;
} st_stop;

static void *st_stop_run(void *arg)
{
    st_stop *s = arg;
    s->rc = srv_server_stop(s->srv, s->grace);
    return NULL;
}

/* Graceful stop: a stream that ends within the grace completes; one that
 * does not is cut at its end (no last chunk: the client sees it cut) and
 * its owner hears SRV_ECLOSED. */
void test_stream_graceful_stop(void **state)
{
    sfx *f = *state;
    rc_conn a, b;
    rc_init(&a);
    rc_init(&b);
    CHECK_INT("connect", rc_connect(&a, f->port, 2000), RC_OK);
    CHECK_INT("connect", rc_connect(&b, f->port, 2000), RC_OK);
    rc_send_str(&a, "GET /s/events?count=4&interval_ms=150 HTTP/1.1\r\n" HOST "\r\n", 2000);
    rc_send_str(&b, "GET /s/forever HTTP/1.1\r\n" HOST "\r\n", 2000);
    for (int i = 0; i < 1000 && (rc_unread(&a) == 0 || rc_unread(&b) < 2000); i++) {
        size_t u = 0;
        rc_wait_close(&a, 5, &u);
        rc_wait_close(&b, 5, &u);
    }
    CHECK(rc_unread(&a) > 0 && rc_unread(&b) >= 2000, "the streams did not get going before "
          "the stop: %zu and %zu bytes in 10 s", rc_unread(&a), rc_unread(&b));
    st_stop s = {.srv = f->srv, .grace = 1200};
    pthread_t t;
    long long t0 = rc_now_ms();
    pthread_create(&t, NULL, st_stop_run, &s);
    rc_response r;
    int rc = rc_read_response(&a, &r, 0, 5000);
    CHECK(rc == RC_OK, "the stream ending within the grace: %s", rc_strerror(rc));
    if (rc == RC_OK) {
        CHECK(strstr(r.body, "id: 4\n") != NULL, "not every event came: %s", r.body);
        rc_response_free(&r);
    }
    rc = rc_read_response(&b, &r, 0, 5000);
    CHECK(rc == RC_TRUNCATED, "the stream outliving the grace: %s, want truncated",
          rc_strerror(rc));
    if (rc == RC_OK)
        rc_response_free(&r);
    pthread_join(t, NULL);
    f->stopped = 1;
    long long took = rc_now_ms() - t0;
    CHECK_INT("srv_server_stop", s.rc, 0);
    CHECK(took < 1200 + 2500, "stop took %lld ms with a 1200 ms grace", took);
    long long w = rc_now_ms();
    while (atomic_load(&g_st.closed) == 0 && rc_now_ms() - w < 10000)
        sleep_ms(10);
    CHECK(atomic_load(&g_st.closed) > 0, "the cut stream's owner was not told");
    rc_close(&a);
    rc_close(&b);
}

/* An application thread of its own writes 8 MB, waiting for room through
 * srv_stream_on_writable. */
void test_stream_other_thread(void **state)
{
    sfx *f = *state;
    st_read r = {.verify = 1, .slow_calls = 10};
    long status = 0;
    long long t0 = rc_now_ms();
    CURLcode rc = st_get(f, "/s/thread?bytes=8000000", &r, &status, NULL, 0, NULL);
    CHECK(rc == CURLE_OK, "GET /s/thread: %s after %llu bytes, %lld ms (end rc %d)",
          curl_easy_strerror(rc), (unsigned long long)r.got, rc_now_ms() - t0,
          atomic_load(&g_st.end_rc));
    CHECK_INT("bytes", r.got, 8000000);
    CHECK(r.bad_at == 0, "byte %llu is not the pattern's", (unsigned long long)(r.bad_at - 1));
}

/* An engine without SRV_CAP_STREAM refuses to start one (the request is
 * still the application's: it answers). */
void test_stream_refused(void **state)
{
    sfx *f = *state;
    st_read r = {0};
    long status = 0;
    CURLcode rc = st_get(f, "/s/download?bytes=10", &r, &status, NULL, 0, NULL);
    CHECK(rc == CURLE_OK, "GET: %s", curl_easy_strerror(rc));
    CHECK_INT("status without SRV_CAP_STREAM", status, 501);
    CHECK_INT("started", atomic_load(&g_st.started), 0);
}

/* HEAD on a streamed route: the head only (Content-Length of a known
 * length), writes dropped, and the connection serves the next request. */
void test_stream_head(void **state)
{
    sfx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    rc_send_str(&c, "HEAD /s/download?bytes=100000&length=1 HTTP/1.1\r\n" HOST "\r\n", 2000);
    rc_response r;
    int rc = rc_read_response(&c, &r, 1, 5000);
    CHECK(rc == RC_OK, "HEAD of a stream: %s", rc_strerror(rc));
    CHECK_INT("status", r.status, 200);
    CHECK_STR("Content-Length", rc_header_get(&r, "Content-Length"), "100000");
    CHECK_INT("body bytes", r.body_len, 0);
    rc_response_free(&r);
    rc_send_str(&c, "GET /s/plain HTTP/1.1\r\n" HOST "\r\n", 2000);
    rc = rc_read_response(&c, &r, 0, 5000);
    CHECK(rc == RC_OK, "the request after a HEAD of a stream: %s", rc_strerror(rc));
    CHECK_STR("body after", r.body, "plain");
    rc_response_free(&r);
    rc_close(&c);
    st_wait_ended();
    CHECK_INT("end rc", atomic_load(&g_st.end_rc), 0);
}

/* HEAD of a producer that would run for hours (an unknown-length 100 GB
 * download): the head comes at once, with neither Content-Length nor
 * Transfer-Encoding; the producer's first write says SRV_ENOBODY and it
 * stops; nothing follows the head (the next answer on the connection is
 * read cleanly); a known length is advertised. */
void test_stream_head_stops_producer(void **state)
{
    sfx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    long long t0 = rc_now_ms();
    rc_send_str(&c, "HEAD /s/download?bytes=100000000000 HTTP/1.1\r\n" HOST "\r\n", 2000);
    rc_response r;
    int rc = rc_read_response(&c, &r, 1, 5000);
    long long took = rc_now_ms() - t0;
    CHECK(rc == RC_OK, "HEAD of a 100 GB stream: %s", rc_strerror(rc));
    CHECK_INT("status", r.status, 200);
    CHECK(took < 2000, "the head took %lld ms", took);
    CHECK(rc_header_get(&r, "Content-Length") == NULL, "Content-Length: %s",
          rc_header_get(&r, "Content-Length"));
    CHECK(rc_header_get(&r, "Transfer-Encoding") == NULL, "Transfer-Encoding: %s",
          rc_header_get(&r, "Transfer-Encoding"));
    /* mhd closes after such a head (docs/ENGINES.md: libmicrohttpd's only
     * public framing without a last chunk); nothing may follow it. */
    int closes = strcmp(g_engine_name, "mhd") == 0;
    CHECK_INT("Connection: close", rc_header_has_token(&r, "Connection", "close"), closes);
    rc_response_free(&r);
    if (closes) {
        size_t unread = 0;
        CHECK_INT("closed after the head", rc_wait_close(&c, 2000, &unread), RC_CLOSED);
        CHECK_INT("bytes after the head", (int)unread, 0);
        rc_close(&c);
        rc_init(&c);
        CHECK_INT("connect again", rc_connect(&c, f->port, 2000), RC_OK);
    }
    rc_send_str(&c, "HEAD /s/download?bytes=100000000000&length=1 HTTP/1.1\r\n" HOST "\r\n",
                2000);
    rc = rc_read_response(&c, &r, 1, 5000);
    CHECK(rc == RC_OK, "HEAD of a 100 GB stream of known length: %s", rc_strerror(rc));
    CHECK_STR("Content-Length", rc_header_get(&r, "Content-Length"), "100000000000");
    rc_response_free(&r);
    rc_send_str(&c, "GET /s/plain HTTP/1.1\r\n" HOST "\r\n", 2000);
    rc = rc_read_response(&c, &r, 0, 5000);
    CHECK(rc == RC_OK, "the request after the HEADs: %s", rc_strerror(rc));
    CHECK_STR("body after", r.body, "plain");
    rc_response_free(&r);
    rc_close(&c);
    st_wait_ended();
    CHECK_INT("producers told ENOBODY", atomic_load(&g_st.nobody), 2);
    CHECK_INT("end rc", atomic_load(&g_st.end_rc), 0);
}

/* HEAD of a long stream whose producer is silent (first write in 3 s):
 * the request is done once the head is written - with Connection: close
 * the connection closes at once and nothing is in flight - while the
 * application still holds its stream; its late write says SRV_ENOBODY. */
void test_stream_head_releases(void **state)
{
    sfx *f = *state;
    rc_conn c;
    rc_init(&c);
    CHECK_INT("connect", rc_connect(&c, f->port, 2000), RC_OK);
    rc_send_str(&c, "HEAD /s/later?ms=3000 HTTP/1.1\r\n" HOST "Connection: close\r\n\r\n",
                2000);
    rc_response r;
    int rc = rc_read_response(&c, &r, 1, 2000);
    CHECK(rc == RC_OK, "HEAD of a silent stream: %s", rc_strerror(rc));
    CHECK_INT("status", r.status, 200);
    rc_response_free(&r);
    size_t unread = 0;
    CHECK_INT("closed after the head", rc_wait_close(&c, 1500, &unread), RC_CLOSED);
    CHECK_INT("bytes after the head", (int)unread, 0);
    rc_close(&c);
    CHECK(wait_no_inflight_srv(f->srv, 1500), "a HEAD answer still in flight");
    CHECK_INT("the application still holds its stream", atomic_load(&g_st.ended), 0);
    st_wait_ended();
    CHECK_INT("its late write said ENOBODY", atomic_load(&g_st.nobody), 1);
    CHECK_INT("end rc", atomic_load(&g_st.end_rc), 0);
}

/* The same over libcurl (HTTP/1.1, HTTP/2, TLS): a HEAD of a silent stream
 * completes at once. */
void test_stream_head_curl(void **state)
{
    sfx *f = *state;
    st_read r = {.head = 1};
    long status = 0;
    long long t0 = rc_now_ms();
    CURLcode rc = st_get(f, "/s/later?ms=3000", &r, &status, NULL, 0, NULL);
    long long took = rc_now_ms() - t0;
    CHECK(rc == CURLE_OK, "HEAD: %s", curl_easy_strerror(rc));
    CHECK_INT("status", status, 200);
    CHECK(took < 1500, "HEAD of a silent stream took %lld ms", took);
    CHECK_INT("body bytes", (int)r.got, 0);
    CHECK(wait_no_inflight_srv(f->srv, 1500), "a HEAD answer still in flight");
    st_wait_ended();
    CHECK_INT("its late write said ENOBODY", atomic_load(&g_st.nobody), 1);
}

/* A libcurl GET in a thread (the stop cases stop the server meanwhile). */
typedef struct st_bg {
    const sfx *f;
    const char *path;
    st_read r;
    long status;
    CURLcode rc;
    long long done_ms;
} st_bg;

static void *st_bg_run(void *arg)
{
    st_bg *b = arg;
    b->r.keep = 1;
    b->rc = st_get(b->f, b->path, &b->r, &b->status, NULL, 0, NULL);
    b->done_ms = rc_now_ms();
    return NULL;
}

/* Wait until `started` streams have started (the request reached its
 * handler) and `bytes` body bytes reached the client. */
static void st_wait_going(st_bg *b, int started, uint64_t bytes)
{
    for (int i = 0; i < 1000 && (atomic_load(&g_st.started) < started ||
                                 atomic_load(&b->r.progress) < bytes); i++)
        sleep_ms(10);
}

/* A graceful stop with idle streams open ends in milliseconds, not the
 * grace: an SSE stream the application ends from srv_server_on_stop, and a
 * silent one marked srv_stream_close_on_stop (its late write then says
 * SRV_ECLOSED, its end 0). Each client sees a complete answer (the last
 * chunk or END_STREAM), not a cut one. */
void test_stream_stop_ends_idle(void **state)
{
    sfx *f = *state;
    st_bg a = {.f = f, .path = "/s/idle"}, b = {.f = f, .path = "/s/later?ms=2500&close=1"};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, st_bg_run, &a);
    st_wait_going(&a, 1, 1);
    pthread_create(&tb, NULL, st_bg_run, &b);
    st_wait_going(&b, 2, 0);
    sleep_ms(100); /* b's head on its way */
    long long t0 = rc_now_ms();
    int rc = srv_server_stop(f->srv, 5000);
    long long took = rc_now_ms() - t0;
    f->stopped = 1;
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_INT("srv_server_stop", rc, 0);
    CHECK(took < 1500, "the stop took %lld ms with two idle streams (grace 5000)", took);
    CHECK_INT("on_stop calls", atomic_load(&g_st.on_stop), 1);
    CHECK(a.rc == CURLE_OK, "the SSE stream: %s (a cut, not an end?)", curl_easy_strerror(a.rc));
    CHECK_INT("SSE status", a.status, 200);
    CHECK(a.r.text.p != NULL && strstr(a.r.text.p, "data: hello\n\n") != NULL,
          "the event before the stop did not come: %s", a.r.text.p ? a.r.text.p : "");
    CHECK(b.rc == CURLE_OK, "the silent stream: %s (a cut, not an end?)",
          curl_easy_strerror(b.rc));
    CHECK_INT("silent stream status", b.status, 200);
    CHECK_INT("silent stream body", (int)b.r.got, 0);
    st_wait_ended();
    CHECK_INT("its late write said ECLOSED", atomic_load(&g_st.closed), 1);
    CHECK_INT("end rc", atomic_load(&g_st.end_rc), 0);
    free(a.r.text.p);
    free(b.r.text.p);
}
