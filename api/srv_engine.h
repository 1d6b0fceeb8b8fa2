/*
 * The engine-facing contract of libsrv: the vtable an engine exports
 * (struct srv_engine) and the core functions an engine may call (srv__*).
 * Applications never include this header. An engine is transport only:
 * every rule with HTTP meaning (routing, limits, framing, keep-alive) is
 * decided here by the core so each request gets the same answer on every
 * engine. docs/ARCHITECTURE.md tells the life of a request.
 */
#ifndef SRV_ENGINE_H
#define SRV_ENGINE_H

#include "srv.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to struct srv_engine's layout; slots only appended. */
#define SRV_ENGINE_VERSION 3

/* Capability bits in srv_engine.caps: the public SRV_CAP_* of srv.h (tests
 * and applications read them with srv_engine_caps, never the name). The
 * SRV_ENGINE_CAP_ spellings are kept for engine tables. */
enum {
    SRV_ENGINE_CAP_HTTP2 = SRV_CAP_HTTP2,
    SRV_ENGINE_CAP_VERSION_505 = SRV_CAP_VERSION_505,
    SRV_ENGINE_CAP_GARBAGE_400 = SRV_CAP_GARBAGE_400,
    SRV_ENGINE_CAP_LIB_CHUNKED = SRV_CAP_LIB_CHUNKED,
    SRV_ENGINE_CAP_H2_PREFACE_GOAWAY = SRV_CAP_H2_PREFACE_GOAWAY,
    SRV_ENGINE_CAP_LIB_ERRORS = SRV_CAP_LIB_ERRORS,
    SRV_ENGINE_CAP_TLS = SRV_CAP_TLS,
    SRV_ENGINE_CAP_TLS_HTTP2 = SRV_CAP_TLS_HTTP2,
    SRV_ENGINE_CAP_STREAM = SRV_CAP_STREAM,
    SRV_ENGINE_CAP_TLS_CLOSES_RAW = SRV_CAP_TLS_CLOSES_RAW,
    SRV_ENGINE_CAP_STREAM_BODY = SRV_CAP_STREAM_BODY,
    /* The engine's connections are the core's srv__h1conn (api/srv_h1conn.h),
     * which carries WebSocket after the 101 (core/ws.c). */
    SRV_ENGINE_CAP_WEBSOCKET = SRV_CAP_WEBSOCKET,
    SRV_ENGINE_CAP_WEBSOCKET_TLS = SRV_CAP_WEBSOCKET_TLS,
    SRV_ENGINE_CAP_STOP_CLOSES_PARTIAL_LINE = SRV_CAP_STOP_CLOSES_PARTIAL_LINE,
    /* Engine-only: the engine's library frames a streamed body itself
     * (chunked encoding, the close of HTTP/1.0, HTTP/2 DATA frames), so the
     * core hands it the bare bytes. Without it the core frames HTTP/1.1
     * chunks into what srv__stream_pull returns. */
    SRV_ENGINE_CAP_LIB_FRAMING = 1u << 29,
    /* (1u << 30 was TLS_QUIET_CLOSE, for libh2o's own HTTP/2: not reused.) */
    /* Engine-only: the engine serves TLS with GnuTLS (its library's own
     * TLS, libmicrohttpd), not OpenSSL: the core builds and validates its
     * contexts with GnuTLS (core/tls_gnutls.c) and the engine takes them
     * with srv__tls_gnutls, not srv__tls_ctx. */
    SRV_ENGINE_CAP_TLS_GNUTLS = 1u << 28,
    /* The bits above that srv_engine_caps does not show. */
    SRV_ENGINE_CAPS_INTERNAL = SRV_ENGINE_CAP_LIB_FRAMING | SRV_ENGINE_CAP_TLS_GNUTLS
};
/* Engine-only bits are distinct (two branches once gave two the same) and
 * clear of the public SRV_CAP_* bits, which count up from bit 0. */
_Static_assert((SRV_ENGINE_CAP_LIB_FRAMING & SRV_ENGINE_CAP_TLS_GNUTLS) == 0,
               "engine-only capability bits overlap");
_Static_assert((SRV_ENGINE_CAPS_INTERNAL & ((SRV_CAP_WEBSOCKET_TLS << 1) - 1)) == 0,
               "an engine-only capability bit overlaps a public SRV_CAP_* bit");

struct srv_engine {
    /* SRV_ENGINE_VERSION the table was written for; checked once by
     * srv_server_start (core/engine_slots.c), before any slot is called. */
    int version;
    /* Static, unique, lower case: "threadpool", "mhd", "h2o". */
    const char *name;
    /* SRV_ENGINE_CAP_* bits. */
    unsigned caps;

    /**
     * start: called once by srv_server_start on the controlling thread,
     * after the worker pool and timer thread run. Listen on the configured
     * host/port (srv__listen does it and records the bound port), start the
     * engine's threads and return 0 only once connections are accepted.
     * Store the engine's private state in *state before starting any
     * thread that may call the core (the core reads it from other threads
     * when it calls respond).
     * On failure return a negative SRV_E... code after setting a message
     * with srv__server_set_error; nothing may keep running, nothing is
     * leaked, and no other slot is called for this server.
     */
    int (*start)(srv_server *srv, void **state);

    /**
     * respond: the core calls this exactly once for every request given to
     * srv__request_dispatch / srv__request_fail, once
     * its response is final (read it with srv__response_*). Any thread may
     * call it - a worker, the timer thread, an application thread, or the
     * engine's own thread from inside srv__request_dispatch (404, 405).
     * Hand the request to the thread that owns its connection without
     * blocking long; that thread writes the response and then calls
     * srv__request_release. If the connection is gone, just release.
     */
    void (*respond)(void *state, srv_request *req);

    /**
     * quiesce: first step of srv_server_stop, on the controlling thread.
     * Stop accepting so new connects are refused, close idle kept-alive
     * connections, and return promptly. Requests in flight carry on: respond
     * is still called for them (srv__response_keep_alive now says close).
     */
    void (*quiesce)(void *state);

    /**
     * stop: last step of srv_server_stop, on the controlling thread, after
     * the grace period and after the core has answered every outstanding
     * request (so respond has been called for each one dispatched). Close
     * every connection, release every request still held, and join the
     * engine's threads. Do not wait for a blocking handler: a connection
     * whose pool job is inside one gets its answer written and its socket
     * shut here, and the job closes it when the handler returns. After stop
     * returns no engine thread runs; such a job may (srv_server_free drains
     * the pool before destroy) but calls no core function for this server.
     */
    void (*stop)(void *state);

    /**
     * destroy: free the state from start. Called once, on the controlling
     * thread, after stop.
     */
    void (*destroy)(void *state);
    /* Slots above are valid for version 1. */

    /**
     * stream_kick: a streamed response (srv__response_streamed) has
     * something new for an engine that found nothing to send: data, its
     * end, or a cut (srv__stream_pull says which). Called once per
     * SRV__STREAM_WAIT the engine got, from any thread, with the request's
     * lock held: post the request to the thread that owns the connection
     * and return; call no core function here. Never called after the
     * engine's srv__stream_detach for the request. Required with
     * SRV_ENGINE_CAP_STREAM.
     */
    void (*stream_kick)(void *state, srv_request *req);
    /* Slots above are valid for version 2. */

    /**
     * body_kick: the application of a streamed-body request (see
     * srv__request_streams_body) asked for the body or resumed it:
     * srv__body_state may say SRV__BODY_GO now. Any thread, with the
     * request's lock held: post the request to the thread that reads its
     * connection and return; call no core function here. Never called
     * after the engine's srv__body_detach for the request. Required with
     * SRV_ENGINE_CAP_STREAM_BODY.
     */
    void (*body_kick)(void *state, srv_request *req);
    /**
     * lib_caps (optional): SRV_CAP_* bits that depend on the library
     * version found at run time, added to `caps` by srv_engine_caps. Any
     * thread, no server needed.
     */
    unsigned (*lib_caps)(void);
    /* Slots above are valid for version 3. */
};

/* ------------------------------------------------------------------ */
/* Server information (any thread unless said otherwise)               */
/* ------------------------------------------------------------------ */

/* The validated configuration: io_threads is resolved (>= 1), host and
 * server_name are never NULL (server_name may be ""). */
const srv_config *srv__server_config(const srv_server *srv);

/* Non-zero once srv_server_stop has begun. */
int srv__server_stopping(const srv_server *srv);

/* Record why start failed (printf-style); srv_server_last_error shows it. */
void srv__server_set_error(srv_server *srv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Record the port actually bound (start only). */
void srv__server_set_port(srv_server *srv, int port);

enum {
    SRV__LISTEN_NONBLOCK = 1u << 0, /* the listening socket is O_NONBLOCK */
    SRV__LISTEN_REUSEPORT = 1u << 1 /* set SO_REUSEPORT too */
};

/*
 * srv__listen: a listening TCP socket on the configured host and port with
 * SO_REUSEADDR, CLOEXEC and the configured backlog (IPv6 "::" is dual-stack
 * where the system allows). Records the bound port with
 * srv__server_set_port. Returns the fd, or SRV_EADDR / SRV_EBIND / SRV_ESYS
 * with the reason set by srv__server_set_error. The caller owns the fd.
 */
int srv__listen(srv_server *srv, unsigned flags);

/* Whether socket fd has bytes to read (FIONREAD); 0 on an error. */
int srv__fd_input_waiting(int fd);

/* Connection counters for srv_stats; call once per accepted connection
 * and once when it is closed. */
void srv__stats_connection_opened(srv_server *srv);
void srv__stats_connection_closed(srv_server *srv);

/*
 * srv__thread_create: pthread_create with asynchronous signals blocked in
 * the new thread (SIGINT/SIGTERM belong to the application; SIGPIPE stays
 * pending). Every thread libsrv starts uses it. Returns pthread_create's
 * result (0 or an errno value).
 */
int srv__thread_create(pthread_t *tid, const pthread_attr_t *attr, void *(*fn)(void *),
                       void *arg);

/*
 * srv__loopctl: the controlling thread's side of an engine's event loops
 * (core/loopctl.c). The controller sets a request and wakes every loop (the
 * engine's `wake(arg, i)`, e.g. uv_async_send); a loop reads the requests
 * when woken and reports back:
 *  - srv__loopctl_ready: its setup is done (srv__loopctl_await_ready);
 *  - srv__loopctl_quiesced: it took its accept backlog and closed its
 *    listener, and its idle connections are closed, so srv__loopctl_quiesce
 *    may return (connects are refused once every loop has);
 *  - srv__loopctl_await_wakes: before it frees what a wake touches (its
 *    async handle, its queue), until srv__loopctl_stop sent the last wake.
 * The engine joins its threads after srv__loopctl_stop.
 */
typedef struct srv__loopctl {
    atomic_int quiesce_req, stop_req;
    pthread_mutex_t mu; /* the three counts */
    pthread_cond_t cv;
    unsigned ready, quiesced, wakes_done;
} srv__loopctl;

void srv__loopctl_init(srv__loopctl *c);
void srv__loopctl_destroy(srv__loopctl *c);
void srv__loopctl_ready(srv__loopctl *c);
void srv__loopctl_await_ready(srv__loopctl *c, unsigned nloops);
void srv__loopctl_quiesced(srv__loopctl *c);
void srv__loopctl_await_wakes(srv__loopctl *c);
void srv__loopctl_quiesce(srv__loopctl *c, unsigned nloops, void (*wake)(void *arg, unsigned i),
                          void *arg);
void srv__loopctl_stop(srv__loopctl *c, unsigned nloops, void (*wake)(void *arg, unsigned i),
                       void *arg);

/*
 * srv__zalloc: calloc(1, n) for what is allocated per request or per
 * connection. glibc 2.36's calloc bypasses the thread cache (tcache): each
 * call takes the arena lock and runs _int_malloc, and the chunk it frees
 * goes to a tcache bin calloc never reuses. malloc + memset is served from
 * the cache (callgrind: about 300 instructions less per allocation).
 * Returns NULL when out of memory; free() it.
 */
static inline void *srv__zalloc(size_t n)
{
    void *p = malloc(n);
    if (p != NULL) {
#if defined(__GNUC__)
        /* GCC folds malloc + memset back into calloc (checked with objdump):
         * an empty asm that may read p keeps the two calls apart. */
        __asm__ volatile("" : : "r"(p) : "memory");
#endif
        memset(p, 0, n);
    }
    return p;
}

/* ------------------------------------------------------------------ */
/* TLS (core/tls.c)                                                    */
/* ------------------------------------------------------------------ */

struct ssl_ctx_st; /* OpenSSL's SSL_CTX; this header includes no OpenSSL */

/* Non-zero when the server serves TLS (a certificate is configured). Any
 * thread. */
int srv__tls_enabled(const srv_server *srv);

/*
 * srv__tls_ctx: the OpenSSL context new connections use now - certificate,
 * key, minimum version, ciphers, client verification and (for an engine
 * with SRV_CAP_TLS_HTTP2) ALPN "h2" then "http/1.1", otherwise "http/1.1" -
 * with one reference for the caller, who drops it with SSL_CTX_free (an
 * SSL made from it holds its own). *generation (when not NULL) gets the
 * reload count it belongs to. NULL when TLS is off. Any thread; a reload
 * swaps it atomically, so connections accepted after take the new one.
 */
struct ssl_ctx_st *srv__tls_ctx(srv_server *srv, unsigned *generation);

/* The reload count (srv_server_reload_tls); cheap, for engines that keep a
 * context per thread and take the new one when it changes. Any thread. */
unsigned srv__tls_generation(const srv_server *srv);

/*
 * For an engine with SRV_ENGINE_CAP_TLS_GNUTLS: what new connections use
 * now, parsed and checked by the core with GnuTLS. The chain and key are
 * what a gnutls_certificate_retrieve_function2 returns (leaf first);
 * `priorities` is the GnuTLS priority string for the configured minimum
 * version and ciphers (Mozilla "intermediate" by default; tls_ciphers is a
 * GnuTLS priority string on such an engine); `client_ca_pem` is the text
 * of tls_client_ca_file, NULL when clients are not verified.
 */
struct gnutls_pcert_st;
struct gnutls_privkey_st;
typedef struct srv_tls_gnutls {
    struct gnutls_pcert_st *certs;
    unsigned ncerts;
    struct gnutls_privkey_st *key;
    const char *priorities;
    const char *client_ca_pem;
    const char *dh_params_pem; /* PKCS#3 PEM: RFC 7919 ffdhe2048, for DHE */
} srv_tls_gnutls;

/* srv__tls_gnutls: the current one with a reference for the caller, which
 * keeps it valid (connections keep theirs across a reload) until
 * srv__tls_gnutls_release; *generation (when not NULL) as srv__tls_ctx.
 * NULL when TLS is off. Any thread. */
const srv_tls_gnutls *srv__tls_gnutls(srv_server *srv, unsigned *generation);
void srv__tls_gnutls_release(const srv_tls_gnutls *t);

/* ------------------------------------------------------------------ */
/* Worker pool                                                         */
/* ------------------------------------------------------------------ */

/* A unit of work for the pool, embedded in the caller's own struct. */
typedef struct srv_job srv_job;
struct srv_job {
    void (*run)(srv_job *job); /* runs once on a worker thread */
    srv_job *next;             /* owned by the pool while queued */
};

/*
 * srv__pool_submit: queue `job` (FIFO) for the pool's workers (the pool
 * grows up to worker_threads when no idle worker is left). Any thread.
 * Returns 0; SRV_ETOOBIG when max_queued jobs already wait (answer 503:
 * the job is not run); SRV_ESTATE when the pool is shut down (the job is
 * not run). Jobs queued before shutdown all run: shutdown drains.
 */
int srv__pool_submit(srv_server *srv, srv_job *job);

/* Jobs queued and not yet started (how many wait for a worker). */
unsigned srv__pool_waiting(const srv_server *srv);

/* ------------------------------------------------------------------ */
/* Building a request (the engine's thread that owns the connection)   */
/* ------------------------------------------------------------------ */

/*
 * The helpers below that validate return 0 or an HTTP status the engine
 * answers with srv__request_fail (the connection then closes): 4xx/5xx for
 * the input, 500 when out of memory. Never a negative SRV_E... code.
 */

/* A new empty request holding one reference, the engine's. NULL when out
 * of memory. `peer` may be NULL (then the peer reads "-"). */
srv_request *srv__request_new(srv_server *srv, const struct sockaddr *peer,
                              socklen_t peer_len);
/* Whether c is an RFC 9110 tchar, and s[0..n) a token (n > 0, tchars
 * only): what a method or a header name must be. */
bool srv__http_is_tchar(int c);
bool srv__http_is_token(const char *s, size_t n);
/* Whether s[0..n) holds no control byte: none below 0x20 and no DEL, and with
 * blank_ok false no space either (a request-target); with blank_ok SP and HTAB
 * pass (a field value, RFC 9110 5.5). Bytes from 0x80 (obs-text) pass. */
bool srv__http_no_ctl(const char *s, size_t n, bool blank_ok);

/* The method token as received (any token; routing decides 405). 400 for
 * an empty or non-token method. */
int srv__request_set_method(srv_request *req, const char *method, size_t len);

/* The raw request-target: origin-form ("/p?q"), absolute-form
 * ("http://h/p?q") or "*". 414 over max_uri_bytes, 400 when malformed or
 * the decoded path holds a NUL. */
int srv__request_set_target(srv_request *req, const char *target, size_t len);

/* The protocol version; (2, 0) for HTTP/2. Checked by headers_done. */
void srv__request_set_version(srv_request *req, int major, int minor);

/* One header (name without ':'; the core trims the value's spaces and
 * tabs). 431 once the request line plus headers exceed max_header_bytes;
 * 400 for an invalid name or a CR, LF or NUL in the value. */
int srv__request_add_header(srv_request *req, const char *name, size_t name_len,
                            const char *value, size_t value_len);

/*
 * srv__request_headers_done: the head is complete. Applies the core's
 * rules that need the whole head (docs/ENGINES.md, "Header rules"): 505 for a version other than 1.0,
 * 1.1 (or 2.0 when set by an HTTP/2 engine); 400 for Content-Length together
 * with Transfer-Encoding, or a bad or repeated-and-different Content-Length;
 * 501 for a transfer coding other than "chunked"; 413 when Content-Length
 * exceeds max_body_bytes; 417 for an Expect other than 100-continue.
 */
int srv__request_headers_done(srv_request *req);

/* The body's framing srv__request_headers_done accepted (after it returned
 * 0): 1 for chunked; else 0, with *length the Content-Length (0 when the
 * head had none). Any thread holding the request. */
int srv__request_framing(const srv_request *req, uint64_t *length);

/* Non-zero when the client sent "Expect: 100-continue" (the engine sends
 * the interim 100 itself before reading the body, or lets its library). */
int srv__request_expects_continue(const srv_request *req);

/* Append de-chunked body bytes. 413 past max_body_bytes. */
int srv__request_append_body(srv_request *req, const void *data, size_t len);

/*
 * srv__request_arriving: +1 when a request has begun to arrive (its
 * request line, say) and -1 exactly once when it no longer does (handed
 * over with dispatch or fail, or abandoned). srv_server_stop's grace period
 * waits for these as for requests in flight, so a request that completes
 * within it is served; the engine answers 503 to those still arriving when
 * stop is called. Any engine thread.
 */
void srv__request_arriving(srv_server *srv, int delta);

/* The engine's own per-request pointer (e.g. its connection). */
void srv__request_set_engine_data(srv_request *req, void *data);
void *srv__request_engine_data(const srv_request *req);

/* ------------------------------------------------------------------ */
/* Handing a request to the core                                       */
/* ------------------------------------------------------------------ */

/*
 * srv__request_dispatch: the request is complete; route it. 404/405 (and
 * other answers the core gives itself) call the engine's respond slot before
 * this returns; a routed request's handler is queued on the worker pool.
 * Either way respond is called exactly once later or now. Any engine thread.
 */
void srv__request_dispatch(srv_request *req);

/*
 * srv__request_fail: answer the request with `status` (4xx/5xx, a short
 * text body from the core) and mark the connection to close. Calls respond
 * before it returns. Use it for bad input found while reading the request.
 */
void srv__request_fail(srv_request *req, int status);

/*
 * srv__request_cancel: the client withdrew a dispatched request before it
 * was answered (HTTP/2 RST_STREAM, or its connection is gone). A handler not
 * started yet is skipped, a running one's srv_respond is dropped (returning
 * 0, as for any client that went away), the request is logged with status
 * 499 and not counted as a response. Calls respond before it returns, like
 * srv__request_fail; the engine writes nothing and releases. Returns false
 * (and does nothing) when the request was already answered. Engine thread.
 */
bool srv__request_cancel(srv_request *req);

/*
 * srv__request_release: drop the engine's reference, once the response was
 * written (or the connection died). The request must not be touched after.
 * Every request from srv__request_new is released exactly once.
 */
void srv__request_release(srv_request *req);

/* ------------------------------------------------------------------ */
/* Reading the response (after respond, on the engine's thread)        */
/* ------------------------------------------------------------------ */

int srv__response_status(const srv_request *req);

/* Non-zero when the connection may stay open after this response: the
 * client allows it (HTTP/1.1 default, or 1.0 with keep-alive), the response
 * is not an error that closes, the server is not stopping, and the engine did
 * not call srv__request_set_close. */
int srv__response_keep_alive(const srv_request *req);

/* Ask the core to close this connection after the response (e.g. other
 * connections wait for a worker). Call before reading the head. */
void srv__request_set_close(srv_request *req);

/* The body bytes to send: empty for HEAD, 1xx, 204 and 304. */
const void *srv__response_body(const srv_request *req, size_t *len);

/* The Content-Length to advertise (for HEAD, the length a GET would send). */
size_t srv__response_content_length(const srv_request *req);

/* The non-framing response headers (application headers, Content-Type,
 * Server) in order: name of entry `index` and its *value, NULL past the
 * end. Engines whose library frames the response (mhd, h2o) add these. */
size_t srv__response_header_count(const srv_request *req);
const char *srv__response_header_at(const srv_request *req, size_t index,
                                    const char **value);

/*
 * srv__response_http1_head: the complete HTTP/1.x response head - status
 * line in the request's minor version, the headers above, Content-Length,
 * Date and Connection - built on first call and owned by the request.
 * Engines that write raw HTTP/1 (threadpool) send it followed by the body.
 */
const char *srv__response_http1_head(srv_request *req, size_t *len);

/* ------------------------------------------------------------------ */
/* Streamed responses (engines with SRV_ENGINE_CAP_STREAM)             */
/* ------------------------------------------------------------------ */

/*
 * A response may be a stream: respond is called once as for any response
 * (its head is final: srv__response_http1_head frames it with
 * Content-Length, Transfer-Encoding: chunked, or neither and a close), then
 * the engine pulls the body from the core on the connection's thread until
 * the end or a cut, calls srv__stream_detach, and releases the request.
 */

/* True when the response is streamed. Only once the answer reached the
 * engine (respond was called, or the close paths after a cancel): the
 * stream's state is published with the answer, not before. */
bool srv__response_streamed(const srv_request *req);

/* A streamed response's Content-Length, or -1 when unknown (HTTP/1.1:
 * chunked, HTTP/1.0: delimited by the close, HTTP/2: END_STREAM). */
int64_t srv__response_stream_length(const srv_request *req);

/* True when the streamed response has no body (HEAD, 204, 304): its head is
 * the whole answer, srv__stream_pull says END at once and no byte of a
 * body, not even a last chunk, may follow the head. */
bool srv__response_stream_bodiless(const srv_request *req);

enum {
    SRV__STREAM_CUT = -1, /* cut (stop, a short end): close the connection
                           * without ending the body properly */
    SRV__STREAM_WAIT = 0, /* nothing yet: stream_kick comes once there is */
    SRV__STREAM_DATA = 1, /* *data, *len: send them, then srv__stream_sent */
    SRV__STREAM_END = 2,  /* everything was pulled (with the core's last
                           * chunk when it frames): the body is complete */
    SRV__STREAM_FILE = 3  /* srv__stream_pull_file only: send the file piece
                           * *file (sendfile), then srv__stream_sent */
};

/* A piece of a file body lent by srv__stream_pull_file: len bytes of fd
 * from off (the descriptor stays open until the request is released). */
typedef struct srv__stream_chunk {
    int fd;
    uint64_t off;
    uint64_t len;
} srv__stream_chunk;

/*
 * srv__stream_pull: what to send next. DATA lends every buffered byte (the
 * pointer stays valid and unmoved until srv__stream_sent); pull again only
 * after srv__stream_sent. WAIT arms one stream_kick. The connection's
 * thread.
 */
int srv__stream_pull(srv_request *req, const void **data, size_t *len);

/* True when the streamed response's body is a file not yet lent: the next
 * srv__stream_pull_file says FILE with all of it (an engine whose library
 * sends files whole, mhd, hands it over then). The connection's thread. */
bool srv__response_stream_file(srv_request *req);

/*
 * srv__stream_pull_file: srv__stream_pull for a connection that can send
 * from a file descriptor itself (sendfile, in cleartext): where the body is
 * a file (static files) it says FILE and lends *file instead of reading it
 * into the buffer; srv__stream_sent(n) then counts n bytes of it sent. A
 * file that ends before len (it shrank) is a cut: the engine closes the
 * connection. srv__stream_pull reads such a body into the buffer (DATA,
 * on the calling thread: a piece of at most the stream buffer) instead.
 */
int srv__stream_pull_file(srv_request *req, const void **data, size_t *len,
                          srv__stream_chunk *file);

/* n of the bytes lent by the last DATA were sent (the rest is lent back:
 * the next pull returns it first). Frees room for the application. */
void srv__stream_sent(srv_request *req, size_t n);

/*
 * srv__stream_detach: the engine is done with the stream - it was
 * complete (END), or the client went away, the send deadline passed, or
 * the connection closed. The application's next write says SRV_ECLOSED
 * unless the stream was complete. No stream_kick comes after it returns.
 * Call it exactly once for every streamed response, before releasing it.
 */
void srv__stream_detach(srv_request *req);

/* ------------------------------------------------------------------ */
/* Streamed request bodies (engines with SRV_ENGINE_CAP_STREAM_BODY)   */
/* ------------------------------------------------------------------ */

/*
 * A request whose route is SRV_ROUTE_STREAM_BODY is dispatched when its
 * head is complete (srv__request_headers_done accepted it); the engine
 * then reads the body only while srv__body_state says GO and gives each
 * de-chunked piece to srv__body_data, on the thread that reads the
 * connection. Sequence: dispatch; [GO: send "100 Continue" the first time
 * when srv__request_expects_continue; read; srv__body_data ...;
 * srv__body_end(req, 0) at the end (also under GO)]; the answer comes
 * through respond as for any request; srv__body_detach before release.
 * When the answer comes before the body's end the engine closes the
 * connection after writing it (unread body bytes are never parsed as a
 * next request).
 */

/* True when the complete head's route streams its body: dispatch now.
 * Looks the route up once and keeps it for the dispatch. The engine's thread. */
bool srv__request_streams_body(srv_request *req);

/* True when some route streams its body (engines may skip looking for such
 * requests otherwise). Routes are fixed once the server started. */
bool srv__server_streams_bodies(const srv_server *srv);

enum {
    SRV__BODY_IDLE = 0, /* not asked for, or paused: wait for body_kick
                         * (no body deadline meanwhile) */
    SRV__BODY_GO = 1,   /* read and deliver */
    SRV__BODY_OVER = 2  /* the application takes no more (it stopped, or
                         * the end was reported): read nothing more; the
                         * connection closes after the answer unless the
                         * end was reached */
};

/* What to do now. The connection's thread. */
int srv__body_state(srv_request *req);

/* Deliver n > 0 body bytes (valid during the call) to the application;
 * returns the state after it (IDLE: it paused). Past the route's
 * max_body_bytes the core answers 413 and returns OVER. */
int srv__body_data(srv_request *req, const void *data, size_t n);

/* The body ended: status 0 when complete (call it under GO, once the last
 * byte was delivered), or 400 (malformed chunks), 408 (too slow: see
 * SRV_BODY_MIN_PACE_BYTES), 413, 431: the application is told and the core
 * answers that status with a close (when not answered yet). Once. */
void srv__body_end(srv_request *req, int status);

/* The engine is done with the body (the answer came before its end, the
 * client left, the connection closes): an application still reading gets
 * on_end(SRV_ECLOSED) now. No body_kick after it returns. Call it once for
 * every streamed-body request before releasing it (a no-op after a
 * complete end). The connection's thread. */
void srv__body_detach(srv_request *req);

/* ------------------------------------------------------------------ */
/* HTTP helpers                                                        */
/* ------------------------------------------------------------------ */

/* The reason phrase of a status ("Not Found"), "Unknown" when none. */
const char *srv__status_reason(int status);

/* The current time as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"),
 * 29 characters plus NUL. */
#define SRV__HTTP_DATE_SIZE 30
void srv__http_date(char out[SRV__HTTP_DATE_SIZE]);

/* ------------------------------------------------------------------ */
/* Engine toolkit: clocks, deadlines, admission, the canned refusal    */
/* ------------------------------------------------------------------ */

/* Monotonic clock (CLOCK_MONOTONIC) in milliseconds: every deadline of
 * the core and the engines is counted in it. */
uint64_t srv__now_ms(void);

/* Milliseconds from now_ms until deadline_ms, 0 once it passed, clamped to
 * INT_MAX: a timeout for poll, epoll_wait or a timer. */
int srv__ms_left(uint64_t deadline_ms, uint64_t now_ms);

/* *ts = the time `ms` from now on `clock` (CLOCK_MONOTONIC for a condition
 * variable created with that clock, CLOCK_REALTIME otherwise): the absolute
 * deadline pthread_cond_timedwait takes. */
void srv__timespec_in(struct timespec *ts, clockid_t clock, uint64_t ms);

/*
 * Connection admission, the max_connections gate (any engine thread):
 * srv__conn_admit takes one of the server's max_connections slots and
 * returns true, or returns false when all are taken (the engine refuses the
 * connection: the core's 503, or srv__refusal_503 when no request can be
 * built). An admitted connection gives its slot back with srv__conn_leave,
 * exactly once. The srv_stats connection counters stay
 * srv__stats_connection_opened/_closed.
 */
bool srv__conn_admit(srv_server *srv);
void srv__conn_leave(srv_server *srv);

/* A complete HTTP/1.1 503 response that closes the connection, for when
 * the core cannot build its own answer (out of memory before a request
 * exists): *len bytes, static. */
const char *srv__refusal_503(size_t *len);

/* A connection refused at its accept (past SRV_REFUSE_MAX being read, or
 * out of memory), never blocking: srv__refusal_503 as far as the socket
 * takes it when `cleartext` (a TLS client cannot read it before a
 * handshake), the write side shut, what already came drained (so the
 * close sends a FIN, not a reset). The caller closes fd. Any thread. */
void srv__refuse_fd(int fd, int cleartext);

/* The answer to an HTTP/2 connection preface on a connection that serves
 * HTTP/1 only: an empty SETTINGS frame (the server preface RFC 9113 3.4
 * requires first), then GOAWAY with last-stream-id 0 and HTTP_1_1_REQUIRED
 * (0xd), so the client retries over HTTP/1.1. *len bytes, static. */
const char *srv__h2_preface_refusal(size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* SRV_ENGINE_H */
