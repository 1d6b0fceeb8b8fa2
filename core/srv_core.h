/*
 * Core-internal declarations shared by the core sources in core/: the server and
 * request structs, the router, the worker pool and the timer service.
 * Engines never include this; they see srv_engine.h only.
 */
#ifndef SRV_CORE_H
#define SRV_CORE_H

#include "srv_engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* ---- leaves: clock.c, http.c (they call no other core file) ------- */

/* srv__now_ms, srv__ms_left, srv__timespec_in: srv_engine.h's toolkit. */
/* CLOCK_MONOTONIC_COARSE in milliseconds: cheap, a few ms of resolution. */
uint64_t srv__coarse_ms(void);

/* Non-zero when `list` (a comma-separated header value) holds `token`
 * (case-insensitive), e.g. Connection: "keep-alive, Upgrade". */
bool srv__header_has_token(const char *list, const char *token);

/* ---- router (router.c): the route trie, the filters and the hooks ------- */

/* One method's handler at a trie node (a registered pattern). */
typedef struct srv__route {
    char *method;
    char *path; /* the pattern as registered, e.g. "/users/{id}" */
    srv_handler_fn handler;
    void *ctx;
    unsigned flags;      /* SRV_ROUTE_* */
    uint64_t max_body;   /* SRV_ROUTE_STREAM_BODY's limit, 0: none */
    char **params;       /* names of its {param} and {*wildcard} segments, in order */
    size_t param_count;
    bool wildcard; /* the last of them is a {*wildcard} */
    size_t index;  /* registration order: srv__router_at(index) */
    struct srv__filter *filters; /* the route's own filters, in order */
    size_t filter_count;
} srv__route;

typedef struct srv__rnode srv__rnode; /* a trie node (router.c) */

typedef struct srv__filter {
    srv_filter_fn fn;
    void *ctx;
    unsigned flags; /* SRV_FILTER_* */
    void (*free_ctx)(void *ctx); /* the library's own filters (CORS); NULL */
    /* The headers the filter adds to every answer, the core's own ones included (CORS: its
     * Access-Control-* answer headers); NULL for the application's filters. */
    void (*headers_fn)(srv_request *req, void *ctx);
} srv__filter;

/* A filter attached to a path prefix (router.c matches it). */
typedef struct srv__pfilter {
    char *prefix; /* "/api": no trailing slash; "" for "/" */
    size_t nsegs; /* its segments: the order among prefix filters */
    srv__filter f;
} srv__pfilter;

typedef struct srv__hook {
    srv_response_hook_fn fn;
    void *ctx;
} srv__hook;

/* Registered before start, read-only afterwards (lookups take no lock). */
typedef struct srv__router {
    srv__rnode *root;
    size_t depth;   /* the deepest pattern, in segments */
    size_t stream_body_routes; /* routes with SRV_ROUTE_STREAM_BODY */
    srv__route **all; /* every route in registration order */
    size_t count, all_cap;
    srv__filter *filters; /* the global chain */
    size_t filter_count;
    bool filters_block; /* some global filter is not SRV_FILTER_NONBLOCKING */
    srv__pfilter *pfilters; /* sorted by nsegs, then registration order */
    size_t pfilter_count;
    bool scoped; /* some prefix or route filter exists: chains per request */
    srv__hook *hooks;
    size_t hook_count;
    /* Response compression (compress.c's, freed through compress_free so
     * that the router calls nothing of compress.c); NULL: off. */
    struct srv__compress *compress;
    void (*compress_free)(struct srv__compress *c);
    /* Contexts of the library's own routes (static.c), freed with it. */
    struct srv__owned *owned;
    size_t owned_count;
} srv__router;

/* What routing decided for a request (router.c fills it once). */
typedef struct srv__routing {
    bool done;      /* looked up */
    int status;     /* 0: req->route; else 400, 404, 405 or 204 (automatic OPTIONS) */
    const char **values; /* decoded parameter values, req->route->params names */
    /* The request's filter chain: global, prefix (shortest first), route.
     * chain NULL: the global filters (nothing scoped matched). */
    const srv__filter **chain;
    size_t chain_len;
    bool chain_blocks;   /* some filter of the chain may block */
    size_t next_filter;  /* dispatch.c: the next filter to run */
    bool hooks_done;     /* dispatch.c: the response hooks ran */
    bool marking;        /* dispatch.c: hooks or header filters run: their headers are kept */
} srv__routing;

/* SRV_EINVAL (bad pattern, method, flags), SRV_EEXIST (same method and
 * pattern shape), SRV_ENOMEM. */
int srv__router_add(srv__router *r, const srv_route_opts *opts);
/* The routes by index, 0 to count - 1, in a fixed order once started
 * (metrics.c keeps its counters by that index). */
size_t srv__router_count(const srv__router *r);
void srv__router_at(const srv__router *r, size_t i, const char **method, const char **path);
size_t srv__router_index(const srv__router *r, const srv__route *rt);
int srv__router_add_filter(srv__router *r, const srv__filter *f);
/* A filter for one path prefix ("/api", "/api/": the segment "api" and
 * below) or for the route registered with method and pattern (shape
 * compared, as SRV_EEXIST does). SRV_EINVAL (a bad prefix), SRV_ENOROUTE,
 * SRV_ENOMEM. */
int srv__router_add_prefix_filter(srv__router *r, const char *prefix, const srv__filter *f);
int srv__router_add_route_filter(srv__router *r, const char *method, const char *pattern,
                                 const srv__filter *f);
int srv__router_add_hook(srv__router *r, const srv__hook *h);
/* Keep ctx until srv__router_free, which calls free_fn(ctx) (the context
 * of a route the library registered itself). 0 or SRV_ENOMEM. */
int srv__router_own(srv__router *r, void *ctx, void (*free_fn)(void *ctx));
/* Replace the compression settings (the old ones are freed). */
void srv__router_set_compress(srv__router *r, struct srv__compress *c,
                              void (*free_fn)(struct srv__compress *c));
/* Route req (once; the engine's thread that owns it): req->route and
 * req->routing. HEAD falls back to GET at the same pattern. */
void srv__router_lookup(srv_request *req);
/* The Allow header value for req's path, a malloc'd string ("GET, HEAD,
 * OPTIONS"), NULL when out of memory. */
char *srv__router_allow(const srv_request *req);
void srv__router_free(srv__router *r);

/* ---- worker pool ------------------------------------------------------ */

typedef struct srv__worker srv__worker;
typedef struct srv__pool {
    pthread_mutex_t mu; /* guards everything but the atomics */
    pthread_cond_t cv;  /* idle workers wait here (CLOCK_MONOTONIC) */
    srv_job *head;
    srv_job *tail;
    unsigned waiting;     /* jobs queued */
    unsigned max_waiting; /* cfg max_queued */
    unsigned alive;       /* workers started and not exited */
    unsigned idle;        /* workers waiting on cv */
    unsigned wakes;       /* signals sent that no worker consumed yet */
    unsigned spinning;    /* workers looking for a job before they sleep */
    unsigned min, max;    /* cfg worker_threads_min, worker_threads */
    unsigned idle_ms;     /* cfg worker_idle_timeout_ms */
    bool shutdown;
    srv__worker *workers; /* max slots */
    /* Hand-off policy (worker_pool.c, srv__pool_submit): when the queue last
     * moved (a job taken, or the first one queued), the last job left to
     * the awake workers, and the watcher that backs that up. */
    uint64_t moved_ns, deferred_ns;
    unsigned stalls; /* stalls seen since the queue was last empty */
    pthread_cond_t watch_cv;
    pthread_t watcher;
    bool watching, watcher_asleep;
    /* Read without the lock by stats and engines. */
    atomic_uint busy;
    atomic_uint alive_now;
    atomic_uint queued_now;
    atomic_uint_fast64_t rejected;
} srv__pool;

int srv__pool_init(srv__pool *p);
/* Start worker_threads_min workers (the pool grows up to worker_threads on
 * demand); SRV_ETHREAD/SRV_ENOMEM (nothing left running) on failure. */
int srv__pool_start(srv__pool *p, const srv_config *cfg);
/* Refuse new jobs, run every queued job, join the workers. */
void srv__pool_shutdown(srv__pool *p);
void srv__pool_destroy(srv__pool *p);

/* ---- timer service (libevent thread) ---------------------------------- */

typedef struct srv__timer_entry srv__timer_entry;

typedef struct srv__timer {
    struct event_base *base;
    struct event *tick;
    struct event *stop;
    void (*tick_fn)(void *arg);
    void *tick_arg;
    pthread_t thread;
    pthread_mutex_t mu;
    srv__timer_entry *entries;
    bool running;
    bool closing;
} srv__timer;

/* Start the timer thread; tick_fn(tick_arg) runs every tick_ms on it. */
int srv__timer_start(srv__timer *t, unsigned tick_ms,
                     void (*tick_fn)(void *), void *tick_arg);
int srv__timer_add(srv__timer *t, unsigned ms, void (*fn)(void *), void *arg);
/* Stop the thread and drop the callbacks that have not fired. */
void srv__timer_stop(srv__timer *t);

/* ---- in-flight bookkeeping (inflight.c owns every field) -------------- */

typedef struct srv__inflight {
    /* Guards the request lists and final_phase; cv signals the stopping
     * thread, which waits for in_flight and delivering to reach 0. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Awaiting a response from the application, in deadline order. */
    srv_request *pending_head;
    srv_request *pending_tail;
    /* Answered by the core while the application still holds them. */
    srv_request *orphans;
    atomic_bool final_phase; /* grace is over: new dispatches get 503 at once */
    /* Lock-free on the request path: whoever brings one to 0 broadcasts cv
     * only when `waiter` says the stopping thread is waiting for it. */
    atomic_uint in_flight;  /* dispatched, not yet released by the engine */
    atomic_uint delivering; /* answered, engine respond slot not yet returned */
    atomic_bool waiter;
    atomic_uint arriving; /* requests partly received (srv__request_arriving) */
} srv__inflight;

/* ---- server ------------------------------------------------------------ */

enum srv__state { SRV__NEW, SRV__RUNNING, SRV__STOPPING, SRV__STOPPED };

/* Which bookkeeping list a request sits on (server mutex). */
enum srv__list { SRV__LIST_NONE, SRV__LIST_PENDING, SRV__LIST_ORPHAN };

/* Streams started and not yet ended by the application (stream.c). */
typedef struct srv__streams {
    pthread_mutex_t mu; /* the list; taken before a request's mu */
    struct srv_stream *head;
} srv__streams;

struct srv_server {
    const srv_engine *engine;
    /* engine->caps with the library's (lib_caps), internal bits included:
     * what the core checks. */
    unsigned caps;
    void *engine_state;
    bool engine_started;
    int (*fault)(const char *slot, void *arg); /* srv__engine_inject_fault */
    void *fault_arg;

    srv_config cfg; /* validated copy; host/server_name point below */
    char *host;
    char *server_name;
    srv__router router;
    srv__pool pool;
    srv__timer timer;
    bool pool_started;

    atomic_int state;
    atomic_int port;
    char error[256];

    srv__inflight inflight; /* inflight.c's */
    atomic_uint_fast64_t slow_nonblocking; /* dispatch.c's */
    atomic_bool slow_reported;

    atomic_uint_fast64_t requests;
    atomic_uint_fast64_t responses[5];
    atomic_uint_fast64_t timeouts;
    atomic_uint_fast64_t dropped;
    atomic_uint_fast64_t connections_total;
    atomic_uint connections_open;
    atomic_uint admitted; /* max_connections slots taken (connections.c) */
    atomic_uint refusing; /* connections read to be refused 503 (connections.c) */

    struct srv__tls *tls; /* tls.c: NULL when no certificate is configured */
    struct srv__proxies *proxies; /* forwarded.c: NULL when none is trusted */
    char *trusted_proxies;        /* forwarded.c: the configured list, copied */
    int log_fd;                   /* access_log.c: the log file, -1: stderr */
    char *log_path;               /* access_log.c: access_log_path, copied */
    atomic_bool draining;         /* health.c: a stop's drain phase */
    struct srv__ready_check *ready_checks; /* health.c */
    size_t ready_check_count;
    char *ready_path;             /* health.c: cfg.ready_path, copied */
    struct srv__metrics *metrics; /* metrics.c: from start on */
    bool builtin_routed;          /* ready_path and metrics_path routed (server.c) */
    char *metrics_path;           /* metrics.c: cfg.metrics_path, copied */
    srv__streams streams; /* stream.c's */
    void (*on_stop)(srv_server *srv, void *arg); /* srv_server_on_stop (server.c) */
    void *on_stop_arg;
    srv_error_body_fn error_body; /* srv_server_set_error_body (error_body.c) */
    void *error_body_ctx;
};

/* The server's state, read by every layer (written by server.c only). */
static inline bool srv__state_stopping(const srv_server *srv)
{
    return atomic_load(&((srv_server *)srv)->state) >= SRV__STOPPING;
}

/* ---- engine slots (engine_slots.c: the only caller of srv_engine's slots) */

/* Validate the table once, before any slot runs (start); SRV_EENGINE with
 * the reason in srv->error. */
int srv__engine_check(srv_server *srv);
int srv__engine_start(srv_server *srv);
void srv__engine_respond(srv_server *srv, srv_request *req);
void srv__engine_quiesce(srv_server *srv);
void srv__engine_stop(srv_server *srv);
void srv__engine_destroy(srv_server *srv);
/* Tests: fault(slot name, arg) runs before each slot call; non-zero fails
 * the ones that can fail (start: a negative SRV_E... is returned as is). */
void srv__engine_inject_fault(srv_server *srv, int (*fault)(const char *slot, void *arg),
                              void *arg);


/* ---- request ------------------------------------------------------------ */

typedef struct srv__kv {
    char *name;
    char *value;
    bool kept; /* an answer header a response hook or a header filter set: it goes out with
                * the core's own answers too (srv_set_header, dispatch.c) */
} srv__kv;

/*
 * A streamed response (srv_stream_start), allocated when the stream starts
 * and freed with its request (most answers are not streams, and thousands
 * of waiting requests would each carry it): the public srv_stream handle
 * points here. Every field is guarded by the request's mu. inflight.c sets
 * it up when the stream claims the answer; stream.c owns it after.
 * buf[rd, wr) are bytes for the engine (framed when `chunked`); [rd, rd +
 * lent) is lent to the engine by srv__stream_pull and must not move until
 * srv__stream_sent.
 */
struct srv_stream {
    srv_request *req;
    bool active;         /* the answer is this stream */
    bool chunked;        /* the core frames HTTP/1.1 chunks into buf */
    bool bodiless;       /* HEAD, 204, 304: the head is all; writes say ENOBODY */
    bool app_ended;      /* srv_stream_end was called */
    bool closed;         /* client gone, send deadline, or stop cut it */
    bool engine_waiting; /* the engine found buf empty: kick it on data */
    bool engine_done;    /* the engine let go (srv__stream_detach) */
    bool wpending;       /* the writable job is queued */
    bool listed;         /* on srv->streams */
    bool lent_last;      /* the last chunk is lent, not buf */
    bool close_on_stop;  /* srv_stream_close_on_stop: a stop ends it cleanly */
    bool stop_ended;     /* ... and one did: the end follows what is buffered */
    unsigned char last_sent; /* bytes of the last chunk "0\r\n\r\n" sent */
    int64_t length;      /* SRV_LENGTH_UNKNOWN or the Content-Length */
    uint64_t written;    /* body bytes taken (not counting framing) */
    uint64_t body_sent;  /* body bytes the engine sent, set by srv__stream_detach */
    size_t limit;        /* cfg stream_buffer_bytes */
    char *buf;
    size_t rd, wr, cap, lent;
    size_t want; /* framed size of the last write refused (0: none) */
    void (*wfn)(srv_stream *stream, void *arg);
    void *warg;
    /* A file body (srv__stream_start_file): file_left bytes of file_fd from
     * file_off follow what buf holds; an engine that pulls files sends them
     * itself (srv__stream_pull_file), any other gets them read into buf.
     * file_release(file_ctx) when the request is freed. */
    bool has_file;
    bool lent_file;      /* the last pull lent the file, not buf */
    int file_fd;
    uint64_t file_off, file_left;
    void (*file_release)(void *ctx);
    void *file_ctx;
    srv_job job; /* the writable callback on a worker */
    struct srv_stream *prev, *next; /* srv->streams */
};

/* Bump allocator for the parts of a request built on the engine's thread. */
typedef struct srv__arena_chunk srv__arena_chunk;
typedef struct srv__arena {
    srv__arena_chunk *chunks;
} srv__arena;
void *srv__arena_alloc(srv__arena *a, size_t n);

/* Append n bytes to the buffer *buf of *len bytes and *cap capacity (0 at
 * first: `first` bytes, then doubling). -1 when out of memory (nothing
 * changed). For the input a connection keeps (h1conn.c, h2conn.c). */
static inline int srv__buf_append(char **buf, size_t *len, size_t *cap, size_t first,
                                  const void *d, size_t n)
{
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : first;
        while (c < *len + n)
            c *= 2;
        char *p = (char *)realloc(*buf, c);
        if (p == NULL)
            return -1;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, d, n);
    *len += n;
    return 0;
}
char *srv__arena_strndup(srv__arena *a, const char *s, size_t n);
void srv__arena_free(srv__arena *a);

/* Room in srv_request for a small answer's content type and body: a
 * typical text or JSON answer, with the request still within glibc's
 * thread cache (1,032 bytes asked for). */
#define SRV__RESP_SMALL 128

struct srv_request {
    srv_server *srv;
    atomic_int refs;
    srv__arena arena;

    /* Request, written by the engine's thread before dispatch, read-only
     * after it. */
    char *method;
    char *target;
    char *path;
    srv__kv *query;
    size_t query_count;
    srv__kv *headers;
    size_t header_count;
    size_t header_cap;
    /* cookie.c: cookies and form fields, parsed on first use by the thread
     * that holds the request (NULL until then). */
    struct srv__parsed *parsed;
    size_t head_bytes;
    char *body;
    size_t body_len;
    size_t body_cap;
    /* The peer's address: binary, for trusted_proxies (peer_family 0:
     * unknown; IPv4-mapped IPv6 as IPv4), its port, and whether the socket
     * was IPv6 (its text is then "[...]:port"). */
    unsigned char peer_addr[16];
    int peer_family;
    unsigned short peer_port;
    bool peer_v6;
    /* The peer's texts, "192.0.2.7:41000\0192.0.2.7\0" (malloc'd), made
     * at the first ask from any thread (srv__request_peer_text): most
     * requests never print them. */
    _Atomic(char *) peer_texts;
    /* forwarded.c: the client's address as the trusted proxies give it
     * (NULL: the peer's, srv__request_client_text), and the scheme and
     * host they forwarded (NULL: the port's own scheme, the Host header). */
    const char *client;
    const char *scheme;
    const char *host;
    int major;
    int minor;
    bool is_head;
    bool head_done; /* srv__request_headers_done ran: method, target and headers are whole */
    /* The body's framing as srv__request_headers_done accepted it: chunked,
     * or content_length bytes (0 without a Content-Length). */
    bool te_chunked;
    uint64_t content_length;
    bool counted; /* in srv->inflight.in_flight */
    void *engine_data;
    /* core/h1conn.c: the connection that read it (NULL: the engine's own);
     * set before dispatch, read by the respond and kick slots. */
    struct srv__h1conn *h1;
    /* core/h2conn.c: the HTTP/2 stream that carries it (NULL: not one). */
    struct srv__h2stream *h2;
    /* core/ws.c: the WebSocket a 101 answer opens; set under mu with the
     * answer (srv__respond_upgrade), read by h1conn once it is answered. */
    struct srv_ws *ws;
    const srv__route *route;
    srv__routing routing; /* router.c (lookup), dispatch.c (next_filter) */
    uint64_t started_ms;

    /* The answer: `answered` flips once, under mu, by srv_respond or by
     * the core (404/405/fail/timeout/stop); the winner fills the fields
     * below, which are read-only afterwards. */
    pthread_mutex_t mu;
    bool answered;
    bool close_after;   /* error answers close the connection */
    bool core_answer;   /* the core answered: application headers stay out */
    bool cancelled;     /* srv__request_cancel: the client withdrew it */
    atomic_bool engine_close;
    srv__kv *app_headers; /* srv_set_header, malloc'd */
    size_t app_header_count;
    size_t app_header_cap;
    int status;
    char *content_type;
    srv__kv *extra_header; /* core-added (Allow), malloc'd, 0 or 1 */
    char *resp_body;
    size_t resp_len;
    /* A small answer's content type and body, both in place of two mallocs
     * (srv__answer_store): content_type and resp_body then point in here. */
    char resp_small[SRV__RESP_SMALL];
    bool resp_inline; /* they are in resp_small: not freed on their own */
    signed char keep_alive; /* -1 until decided, then fixed (engine thread) */
    char *head; /* srv__response_http1_head, built lazily */
    size_t head_len;

    /* In-flight bookkeeping (srv->inflight.mu). */
    enum srv__list list;
    srv_request *prev;
    srv_request *next;
    uint64_t deadline_ms;
    srv_job job;

    struct srv_stream *stream; /* a streamed answer, or NULL (set under mu) */

    /* A streamed request body (body.c; fields under mu). */
    struct srv__body {
        bool streamed; /* dispatched at its head: the route streams it */
        bool reading;  /* srv_request_body_read was called */
        bool paused;   /* on_data said SRV_EAGAIN, not resumed yet */
        bool in_data;  /* on_data is running */
        bool resumed;  /* resumed while on_data ran */
        bool over;     /* no more delivery: ended, stopped or detached */
        bool detached; /* the engine let go: no body_kick */
        bool end_pending; /* ended while on_data ran: on_end(end_err) after it */
        int end_err;
        int early;     /* ended (SRV_E...) before the application read */
        uint64_t received, limit; /* limit 0: none */
        srv_body_data_fn on_data;
        srv_body_end_fn on_end;
        void *ctx;
    } body_s;
    /* Last body activity (ms): the request timeout counts from it. */
    atomic_uint_fast64_t body_touch_ms;
};

/* The i-th filter of req's chain (i < req->routing.chain_len), once
 * routed. */
static inline const srv__filter *srv__chain_at(const srv_request *req, size_t i)
{
    return req->routing.chain != NULL ? req->routing.chain[i] : &req->srv->router.filters[i];
}

/* ---- request.c: lifetime and building ---------------------------------- */

/* Free n malloc'd name/value pairs and the array. */
void srv__kv_free(srv__kv *kv, size_t n);
/* The peer as text ("192.0.2.7:41000", "[2001:db8::1]:41000"; "-" when
 * unknown) and the client's address (the trusted proxies' word for it, or
 * the peer's address without its port). Any thread; valid with req. */
const char *srv__request_peer_text(const srv_request *req);
const char *srv__request_client_text(const srv_request *req);
/* The body of an answer the core makes for `status` (cfg.error_format:
 * "404 Not Found\n" text, or Spring Boot's JSON with the request's path)
 * into out (cap bytes, NUL-terminated); its length, and *content_type. */
size_t srv__error_body(const srv_request *req, int status, char *out, size_t cap,
                       const char **content_type);
#define SRV__ERROR_BODY_MAX 4096

/* access_log.c: s as a JSON string ("..." with its quotes, null for NULL),
 * at most max bytes of s, into out (cap bytes). */
void srv__json_string(char *out, size_t cap, const char *s, size_t max);

/* cookie.c's parse of a request's cookies and form fields (freed with the
 * request by request.c). */
struct srv__parsed {
    bool cookies_done, form_done;
    srv__kv *cookies;
    size_t cookie_count;
    srv__kv *form;
    size_t form_count;
};
/* Drop one reference; the last one frees the request. */
void srv__request_unref(srv_request *req);

/* ---- inflight.c: the in-flight bookkeeping ------------------------------ */

int srv__inflight_init(srv__inflight *f);
void srv__inflight_destroy(srv__inflight *f);
/* Requests handed over by the engine and not yet released (stats). */
unsigned srv__inflight_count(const srv_server *srv);
/* Stop's final phase began: new dispatches are answered 503 at once. */
bool srv__inflight_final(const srv_server *srv);
/* Count a request the engine handed over (stop waits for these); only
 * complete ones count in srv_stats.requests. */
void srv__inflight_add(srv_request *req, bool complete);
/* Join the pending list (timeout and stop answer what the application
 * has not); false, not joined, once stop's final phase began. */
bool srv__inflight_join(srv_request *req);
/* Join the pending list after a non-blocking handler returned without
 * answering; true when stop's final phase already began (the caller
 * answers 503: the final sweep may have passed). */
bool srv__inflight_join_late(srv_request *req);
/* The core answers with a short text body (and an extra header, e.g.
 * Allow); false when the request was already answered. */
bool srv__inflight_answer(srv_request *req, int status, bool close, const char *extra_name,
                          const char *extra_value, bool timeout);
/* The application lets go of a request it no longer answers. */
void srv__inflight_app_done(srv_request *req);
/* Periodic check for handlers past request_timeout_ms (timer thread). */
void srv__inflight_sweep(void *srv);
/* Wait until nothing is in flight or arriving, or deadline_ms passed
 * (re-checked every poll_ms); true when nothing is left. */
bool srv__inflight_drain(srv_server *srv, uint64_t deadline_ms, unsigned poll_ms);
/* Answer every request still awaiting its handler with 503 and wait until
 * every answer reached the engine (srv_server_stop's final phase). */
void srv__inflight_answer_all(srv_server *srv);
/* Release the application's hold on every orphan (srv_server_free). */
void srv__inflight_drop_orphans(srv_server *srv);
/* srv_stream_start's claim: the answer becomes a stream of `length`
 * (req->stream set up under req->mu) and goes to the engine; the
 * application keeps its reference. 0, or SRV_ETIMEDOUT when the core had
 * answered already (the application's reference is dropped then). */
/* srv_respond without compression: the body goes out as it is (static
 * files: the same bytes whatever the file's size). */
int srv__respond_as_is(srv_request *req, int status, const char *content_type,
                       const void *body, size_t len);
/* Answer req "101 Switching Protocols" to a WebSocket (core/ws.c's
 * handshake): req->ws = ws with the answer. Same returns and reference as
 * srv_respond; on failure ws is still the caller's. */
int srv__respond_upgrade(srv_request *req, struct srv_ws *ws);
struct srv__stream_file;
int srv__inflight_answer_stream(srv_request *req, int status, const char *content_type,
                                int64_t length, const struct srv__stream_file *file);

/* ---- stream.c: streamed responses ------------------------------------ */

/* The body of a file stream: `length` bytes of fd from off. */
typedef struct srv__stream_file {
    int fd;
    uint64_t off;
    void (*release)(void *ctx); /* called once when the request is freed */
    void *ctx;
} srv__stream_file;

/* srv_stream_start with a body that is `length` bytes of a file: the
 * stream is complete from the start (the application ends it with
 * srv_stream_end and writes nothing). On success file->release(ctx) is
 * called when the request is freed; on failure (as srv_stream_start's)
 * the file stays the caller's. */
int srv__stream_start_file(srv_request *req, int status, const char *content_type,
                           int64_t length, const srv__stream_file *file, srv_stream **out);
/* srv_stream_start for a body the core writes itself (static.c's gzip):
 * release(ctx) is called once when the request is freed, so what feeds
 * the stream lives exactly as long as it may be called back. On failure
 * (as srv_stream_start's) ctx stays the caller's. */
int srv__stream_start_owned(srv_request *req, int status, const char *content_type,
                            void (*release)(void *ctx), void *ctx, srv_stream **out);
/* Cut the stream (a body that cannot be completed: the engine closes the
 * connection instead of ending the body cleanly). The caller still ends
 * it with srv_stream_end. */
void srv__stream_cut(srv_stream *s);

int srv__streams_init(srv_server *srv);
void srv__streams_destroy(srv_server *srv);
/* A stop began (the listener is closed): streams marked close_on_stop end
 * cleanly after what is buffered; their application is told. */
void srv__streams_end_at_stop(srv_server *srv);
/* Stop's final phase: every stream still open is cut (the engine closes
 * its connection; the application's next write says SRV_ECLOSED). */
void srv__streams_cut_all(srv_server *srv);
/* srv_server_free: drop the application's hold on streams never ended. */
void srv__streams_drop_all(srv_server *srv);
/* The chunk-size line for a chunk of n bytes ("1f4\r\n") into out (at
 * least 19 bytes); returns its length. */
size_t srv__chunk_head(size_t n, char *out);
/* Kick the engine (req->mu held): data, an end or a cut is ready. */
void srv__engine_stream_kick(srv_server *srv, srv_request *req);
/* Kick the engine (req->mu held): the application wants body bytes. */
void srv__engine_body_kick(srv_server *srv, srv_request *req);

/* Parse and decode a request-target into req (query.c). Returns 0 or an
 * HTTP status. */
int srv__target_parse(srv_request *req, const char *target, size_t len);

/* Percent-decode s[0..n) into out (which holds n + 1 bytes); '+' becomes
 * a space when plus_is_space. Invalid escapes are kept as sent. Returns the
 * decoded length, or (size_t)-1 when the result would hold a NUL. */
size_t srv__percent_decode(const char *s, size_t n, char *out,
                           bool plus_is_space);

/* compress.c: the body srv_respond should send instead of body[0..*len)
 * (malloc'd, gzip; *len updated; Content-Encoding and Vary set on req), or
 * NULL to send it as it is. Any thread; before the answer is claimed. */
void *srv__compress_body(srv_request *req, int status, const char *content_type,
                         const void *body, size_t *len);

/* Accept-Encoding value `value` (one line; call once per line, they add
 * up as one list): the q-values (0..1000) of gzip (or x-gzip) and of "*"
 * lowered into *gzip_q and *star_q where listed (set them to -1 first: -1
 * stays for "not listed"). A malformed q refuses (0). Pure: fuzzed and
 * unit-tested. */
void srv__accept_encoding_gzip(const char *value, int *gzip_q, int *star_q);
/* Whether req's Accept-Encoding lines accept gzip (q > 0, or "*" with
 * q > 0 where gzip is not listed). No line: false. */
bool srv__accepts_gzip(const srv_request *req);
/* Whether a body of this type and size is to be gzip'ed under
 * srv_compression_set (off: false). */
bool srv__compress_static(const srv_server *srv, const char *content_type, uint64_t size);
/* The configured zlib level. */
int srv__compress_level(const srv_server *srv);
/* body[0..len) gzip'ed (malloc'd, *out_len its size), or NULL when it
 * would not be smaller or memory ran out. */
void *srv__gzip_buf(const srv_server *srv, const void *body, size_t len, size_t *out_len);

/* ---- static_http.c: the pure HTTP parts of static files (static.c) ---- */

/* The Content-Type for a file name, by its extension (case-insensitive);
 * "application/octet-stream" when unknown. Never NULL, static storage. */
const char *srv__static_mime(const char *name);
/* `"ino-size-mtimens"` (hex) into out (at least 64 bytes). */
void srv__static_etag(uint64_t ino, uint64_t size, int64_t mtime_sec, long mtime_nsec,
                      char out[64]);
/* IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") into out (at least 30). */
void srv__static_date(int64_t t, char out[30]);
/* Parse an IMF-fixdate; false for anything else. */
bool srv__static_date_parse(const char *s, int64_t *t);
/* If-None-Match: true when the list holds "*" or a tag equal to `etag`
 * by weak comparison (W/ ignored); false for no match or bad syntax. */
bool srv__etag_list_match(const char *list, const char *etag);
/* If-Range: true when `value` is `etag` compared strongly, or a date equal
 * to mtime. */
bool srv__if_range_match(const char *value, const char *etag, int64_t mtime, int64_t now);

enum {
    SRV__RANGE_NONE = 0,  /* no usable Range: send the whole file (200) */
    SRV__RANGE_ONE = 1,   /* one satisfiable range: *first..*last (206) */
    SRV__RANGE_UNSAT = 2  /* 416 */
};
/* Parse a Range header value against a body of `size` bytes. */
int srv__range_parse(const char *value, uint64_t size, uint64_t *first, uint64_t *last);
/* A wildcard value static.c may resolve under its root: false for a
 * leading '/', a "." or ".." segment, or a raw path (up to '?') holding
 * an encoded slash %2F. */
bool srv__static_path_ok(const char *raw_target, const char *value);
/* Open `rel` below the directory rootfd (real path real_root), refusing
 * any resolution that leaves it: openat2(RESOLVE_BENEATH) when use_openat2
 * and the kernel has it, else openat and a check of the opened file's
 * path. O_RDONLY | O_NONBLOCK (a fifo never blocks) | O_CLOEXEC. Returns
 * the descriptor or -errno (EXDEV: outside the root). static.c. */
int srv__static_open(int rootfd, const char *real_root, const char *rel, bool use_openat2);

/* ---- static_cache.c: the open-file cache of static files (static.c) --- */

/*
 * One file as last seen: published by srv__fcache_put and immutable after,
 * reference-counted (the table holds one; every user takes one with
 * srv__fcache_get and gives it back with srv__fentry_unref, the last one
 * closing fd). Fields up to `bytes_len` are set before the put.
 */
typedef struct srv__fentry {
    char *name; /* the key: the path below the root (in the same block) */
    size_t name_len;
    uint64_t hash;
    int fd; /* open O_RDONLY, owned */
    dev_t dev;
    ino_t ino;
    uint64_t size;
    struct timespec mtim, ctim;
    const char *type;  /* Content-Type (static storage) */
    char etag[64];     /* srv__static_etag */
    char date[30];     /* Last-Modified */
    char *bytes;       /* the whole file when small and settled, else NULL */
    /* With bytes, of a type compression applies to: the same gzip'ed when
     * that is smaller (static_gzip.c), else NULL. */
    char *gz;
    size_t gz_len;
    size_t bytes_len;  /* bytes + gz, counted against the cache's max_bytes */
    atomic_uint refs;
    struct srv__fentry *hnext, *lprev, *lnext; /* the table's, under its mu */
} srv__fentry;

typedef struct srv__fcache {
    pthread_mutex_t mu;
    srv__fentry **buckets;
    size_t nbuckets;
    srv__fentry *lru_head, *lru_tail; /* most recently used first */
    size_t count, bytes;
    size_t max_entries, max_bytes, small_max;
    uint64_t hits, misses, evictions;
} srv__fcache;

/* An empty cache of at most max_entries entries and max_bytes cached file
 * bytes; files up to small_max bytes may keep their bytes. 0, SRV_ENOMEM. */
int srv__fcache_init(srv__fcache *c, size_t max_entries, size_t max_bytes, size_t small_max);
/* Drop every entry (those still used live on until their last unref). */
void srv__fcache_destroy(srv__fcache *c);
/* The entry of `name` with a reference for the caller when it is still the
 * file `sb` describes (device, inode, size, mtime and ctime all equal);
 * otherwise NULL, and an entry that no longer matches (or sb NULL: the
 * path is gone) is dropped from the table at once. Any thread. */
srv__fentry *srv__fcache_get(srv__fcache *c, const char *name, const struct stat *sb);
/* A new entry of `name` (one reference, the caller's) owning fd, with the
 * identity of sb; NULL when out of memory (fd is then still the caller's). */
srv__fentry *srv__fentry_new(const char *name, int fd, const struct stat *sb);
/* Publish e in place of any entry of the same name, evicting the least
 * recently used until both bounds hold (bytes over max_bytes are not kept).
 * The caller keeps its reference. */
void srv__fcache_put(srv__fcache *c, srv__fentry *e);
/* Forget `name` (its file could not be opened). */
void srv__fcache_drop(srv__fcache *c, const char *name);
/* Entries and cached bytes now. */
void srv__fcache_usage(srv__fcache *c, size_t *entries, size_t *bytes);
/* True when sb describes the file e was made from. */
bool srv__fentry_same(const srv__fentry *e, const struct stat *sb);
void srv__fentry_ref(srv__fentry *e);
void srv__fentry_unref(srv__fentry *e);

/* ---- static_gzip.c: static files gzip'ed on the fly (static.c) ---------- */

/* A small entry's gzip'ed bytes (e->gz), before it is published, when
 * compression applies to its type and size and they are smaller. */
void srv__static_gz_bytes(const srv_server *srv, srv__fentry *e);
/* Answer req with e's bytes gzip'ed as they are read, in a stream of
 * unknown length (headers set by the caller). On success e's reference is
 * the stream's; on failure (srv_stream_start's codes, SRV_ENOMEM) it stays
 * the caller's and req is answered only if the code says so. */
int srv__static_gzip_stream(srv_request *req, int status, srv__fentry *e);

/* Access log (access_log.c): copy the path (srv_server_new); check the
 * format and open the file (srv_server_start: SRV_EINVAL, SRV_ESYS);
 * close and free (srv_server_free); a line for a delivered response. */
int srv__access_log_init(srv_server *srv);
int srv__access_log_start(srv_server *srv);
void srv__access_log_free(srv_server *srv);
void srv__access_log(const srv_request *req);

/* ---- TLS (tls.c; backends tls_openssl.c or tls_none.c, and tls_gnutls.c) */

/* srv_server_new: copy the tls_* strings (cfg points at the copies) and
 * create srv->tls when a certificate is configured. SRV_ENOMEM. */
int srv__tls_init(srv_server *srv);
/* srv_server_start, after srv__config_validate: check the TLS fields and
 * build the first context; SRV_ETLS/SRV_EINVAL with srv->error set. */
int srv__tls_start(srv_server *srv);
/* srv_server_free. */
void srv__tls_free(srv_server *srv);

/* The backend: build a context from srv->cfg (srv->error says which file
 * and why on failure: SRV_ETLS, SRV_ENOMEM); take and drop references. */
int srv__tls_backend_build(srv_server *srv, void **ctx);
void srv__tls_backend_ref(void *ctx);
void srv__tls_backend_unref(void *ctx);
/* The GnuTLS backend (tls_gnutls.c, built with the mhd engine), for an
 * engine with SRV_ENGINE_CAP_TLS_GNUTLS: the same contract. */
int srv__tls_gnutls_build(srv_server *srv, void **ctx);
void srv__tls_gnutls_ref(void *ctx);
void srv__tls_gnutls_unref(void *ctx);

/* ---- metrics (metrics_count.c counts, metrics.c renders) --------------- */

#define SRV__METRICS_BUCKETS 11
extern const double srv__metrics_buckets[SRV__METRICS_BUCKETS]; /* seconds */
typedef struct srv__route_metrics {
    const char *method, *path; /* the route's (NULL: requests no route matched) */
    atomic_ullong by_class[5]; /* 1xx..5xx */
    atomic_ullong bucket[SRV__METRICS_BUCKETS + 1]; /* non-cumulative; the last is +Inf */
    atomic_ullong sum_us;
} srv__route_metrics;
struct srv__metrics {
    size_t n; /* routes + 1: the last slot counts unmatched requests */
    atomic_ullong bytes_in, bytes_out;
    srv__route_metrics route[];
};

/* srv_server_start: route metrics_path (before the table: it is a route
 * too), then size the per-route table once every route is known;
 * srv__deliver: count a response; srv_server_free. */
int srv__metrics_route(srv_server *srv);
int srv__metrics_start(srv_server *srv);
void srv__metrics_observe(const srv_request *req);

/* The body bytes an answer sent: resp_len (0 for HEAD), or for a stream what
 * the engine took once it let go of it (srv__stream_detach logs streams then). */
uint64_t srv__response_bytes_sent(const srv_request *req);
void srv__metrics_free(srv_server *srv);

/* ---- readiness and drain (health.c) ----------------------------------- */

/* srv_server_new: copy ready_path; srv_server_start: route it (SRV_EEXIST,
 * SRV_EINVAL with srv->error set); srv_server_stop: the drain phase (ready
 * answers 503 while everything is served, for drain_ms); free. */
int srv__health_init(srv_server *srv);
int srv__health_start(srv_server *srv);
void srv__health_drain(srv_server *srv);
void srv__health_free(srv_server *srv);

/* ---- trusted proxies (forwarded.c) ------------------------------------ */

/* srv_server_new: copy cfg.trusted_proxies (SRV_ENOMEM); srv_server_start:
 * parse it (SRV_EINVAL naming the bad entry in srv->error);
 * srv_server_free: release both. */
int srv__forwarded_init(srv_server *srv);
int srv__forwarded_start(srv_server *srv);
void srv__forwarded_free(srv_server *srv);
/* Before a request is routed: its client, scheme and host from the
 * forwarding headers when the peer is a trusted proxy. */
void srv__forwarded_resolve(srv_request *req);

/* The fields of srv_config (config.c), for validation and
 * srv_config_from_env (config_env.c): one table, one set of ranges. */
typedef enum srv__field_kind {
    SRV__FIELD_STRING,
    SRV__FIELD_INT,
    SRV__FIELD_UINT,
    SRV__FIELD_SIZE,
    SRV__FIELD_BOOL,       /* an int, zero or not */
    SRV__FIELD_ACCESS_LOG, /* an int, SRV_ACCESS_LOG_* */
    SRV__FIELD_ERROR_FORMAT, /* an int, SRV_ERROR_FORMAT_* */
    SRV__FIELD_FD,         /* an int, -1 (none) or a descriptor */
    SRV__FIELD_TLS_VERSION /* an unsigned, SRV_TLS_1_2 or SRV_TLS_1_3 */
} srv__field_kind;
typedef struct srv__config_field {
    const char *name; /* as in srv.h: "worker_threads" */
    srv__field_kind kind;
    size_t offset, width;
    unsigned long long min, max; /* accepted by srv_server_start */
    const char *note;            /* what min means, when it means more than a number */
} srv__config_field;
extern const srv__config_field srv__config_fields[];
extern const size_t srv__config_field_count;
/* A numeric field's value (a negative int reads as ULLONG_MAX). */
unsigned long long srv__config_field_get(const srv_config *c, const srv__config_field *f);
/* "use 1 to 100000", "use 0 (any free port) to 65535" */
void srv__config_field_range(const srv__config_field *f, char *buf, size_t cap);

/* Validate a configuration and resolve io_threads; returns 0 or
 * SRV_EINVAL/SRV_EADDR with the reason in srv->error. */
int srv__config_validate(srv_server *srv);

/* The smallest srv_config a caller can have: the first sized layout (0.2),
 * whose fields end with server_name. A larger size than
 * SRV__CONFIG_MAX_SIZE is garbage, not a newer header. */
#define SRV__CONFIG_MIN_SIZE (offsetof(srv_config, server_name) + sizeof(const char *))
#define SRV__CONFIG_MAX_SIZE ((size_t)4096)
#define SRV__ROUTE_OPTS_MIN_SIZE (offsetof(srv_route_opts, flags) + sizeof(unsigned))
#define SRV__FILTER_OPTS_MIN_SIZE (offsetof(srv_filter_opts, flags) + sizeof(unsigned))
#define SRV__CORS_OPTS_MIN_SIZE (offsetof(srv_cors_opts, max_age) + sizeof(int))
#define SRV__COMPRESSION_OPTS_MIN_SIZE (offsetof(srv_compression_opts, level) + sizeof(int))
#define SRV__STATIC_OPTS_MIN_SIZE (offsetof(srv_static_opts, flags) + sizeof(unsigned))
#define SRV__STRUCT_MAX_SIZE ((size_t)4096)
/* Own a configured string: *copy = strdup(*field), and *field (a field of
 * srv->cfg) points at it from then on; the caller frees *copy. NULL stays
 * NULL. 0 or SRV_ENOMEM. */
int srv__config_own(char **copy, const char **field);
/* Every default, into a full-size struct. */
void srv__config_defaults(srv_config *cfg);
/* *out = defaults overlaid with the first in->size bytes of *in (NULL: the
 * defaults). SRV_EINVAL when in->size cannot be trusted. */
int srv__config_copy(srv_config *out, const srv_config *in);

#endif /* SRV_CORE_H */
