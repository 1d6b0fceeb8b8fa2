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
    char **params;       /* names of its {param} and {*wildcard} segments, in order */
    size_t param_count;
    bool wildcard; /* the last of them is a {*wildcard} */
    size_t index;  /* registration order: srv__router_at(index) */
} srv__route;

typedef struct srv__rnode srv__rnode; /* a trie node (router.c) */

typedef struct srv__filter {
    srv_filter_fn fn;
    void *ctx;
    unsigned flags; /* SRV_FILTER_* */
    void (*free_ctx)(void *ctx); /* the library's own filters (CORS); NULL */
} srv__filter;

typedef struct srv__hook {
    srv_response_hook_fn fn;
    void *ctx;
} srv__hook;

/* Registered before start, read-only afterwards (lookups take no lock). */
typedef struct srv__router {
    srv__rnode *root;
    size_t depth;   /* the deepest pattern, in segments */
    srv__route **all; /* every route in registration order */
    size_t count, all_cap;
    srv__filter *filters;
    size_t filter_count;
    bool filters_block; /* some filter is not SRV_FILTER_NONBLOCKING */
    srv__hook *hooks;
    size_t hook_count;
    /* Response compression (compress.c's, freed through compress_free so
     * that the router calls nothing of compress.c); NULL: off. */
    struct srv__compress *compress;
    void (*compress_free)(struct srv__compress *c);
} srv__router;

/* What routing decided for a request (router.c fills it once). */
typedef struct srv__routing {
    bool done;      /* looked up */
    int status;     /* 0: req->route; else 400, 404, 405 or 204 (automatic OPTIONS) */
    const char **values; /* decoded parameter values, req->route->params names */
    size_t next_filter;  /* dispatch.c: the next filter to run */
    bool hooks_done;     /* dispatch.c: the response hooks ran */
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
int srv__router_add_hook(srv__router *r, const srv__hook *h);
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

struct srv_server {
    const srv_engine *engine;
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

    struct srv__tls *tls; /* tls.c: NULL when no certificate is configured */
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
} srv__kv;

/* Bump allocator for the parts of a request built on the engine's thread. */
typedef struct srv__arena_chunk srv__arena_chunk;
typedef struct srv__arena {
    srv__arena_chunk *chunks;
} srv__arena;
void *srv__arena_alloc(srv__arena *a, size_t n);
char *srv__arena_strndup(srv__arena *a, const char *s, size_t n);
void srv__arena_free(srv__arena *a);

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
    size_t head_bytes;
    char *body;
    size_t body_len;
    size_t body_cap;
    char peer[64];
    int major;
    int minor;
    bool is_head;
    bool counted; /* in srv->inflight.in_flight */
    void *engine_data;
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
    signed char keep_alive; /* -1 until decided, then fixed (engine thread) */
    char *head; /* srv__response_http1_head, built lazily */
    size_t head_len;

    /* In-flight bookkeeping (srv->inflight.mu). */
    enum srv__list list;
    srv_request *prev;
    srv_request *next;
    uint64_t deadline_ms;
    srv_job job;
};

/* ---- request.c: lifetime and building ---------------------------------- */

/* Free n malloc'd name/value pairs and the array. */
void srv__kv_free(srv__kv *kv, size_t n);
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

/* Access log line for a delivered response (access_log.c). */
void srv__access_log(const srv_request *req);

/* ---- TLS (tls.c, and its backend tls_openssl.c or tls_none.c) ---------- */

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
#define SRV__STRUCT_MAX_SIZE ((size_t)4096)
/* Every default, into a full-size struct. */
void srv__config_defaults(srv_config *cfg);
/* *out = defaults overlaid with the first in->size bytes of *in (NULL: the
 * defaults). SRV_EINVAL when in->size cannot be trusted. */
int srv__config_copy(srv_config *out, const srv_config *in);

#endif /* SRV_CORE_H */
