/*
 * libsrv: one C API for embedding an HTTP server, with interchangeable
 * engines behind it (threadpool, mhd, h2o). This is the only header an
 * application includes; it names no engine library type.
 *
 * Conventions used throughout:
 * - Functions that can fail return 0 or a negative SRV_E... code
 *   (srv_strerror() names it). When a function that takes a callback fails,
 *   the callback is never called.
 * - Strings passed in are copied unless a function says otherwise; strings
 *   returned are owned by libsrv and stay valid for the lifetime stated.
 */
#ifndef SRV_H
#define SRV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libsrv is built with hidden visibility; only this header's API is
 * exported from the shared library. */
#if defined(SRV_BUILDING) && defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define SRV_VERSION_MAJOR 0
#define SRV_VERSION_MINOR 8
#define SRV_VERSION_PATCH 0
#define SRV_VERSION_STRING "0.8.0"

/*
 * ABI policy (from 0.2): the structs an application fills or reads
 * (srv_config, srv_route_opts, srv_stats) only ever grow at their end, and
 * the library is told how big the caller's copy is - through the `size`
 * field that the *_init macros set, or the size argument the
 * srv_server_stats macro passes. The library reads and writes only that
 * many bytes, and gives fields the caller's header did not know their
 * defaults, so a binary built against an older srv.h keeps working with a
 * newer libsrv. Always use the macros; never fill `size` by hand.
 */

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/*
 * Every error code, its number and its message. Numbers are never reused
 * and only ever appended.
 */
#define SRV_ERRNO_MAP(X)                                                     \
    X(EINVAL, -1, "invalid argument")                                        \
    X(ENOMEM, -2, "out of memory")                                           \
    X(ENOENGINE, -3, "engine not built into this libsrv")                    \
    X(EBIND, -4, "cannot listen on the configured address")                  \
    X(ESTATE, -5, "not allowed in the server's current state")               \
    X(EEXIST, -6, "route already registered")                                \
    X(ETHREAD, -7, "cannot create a thread")                                 \
    X(ETIMEDOUT, -8, "request already answered by the core (timeout or shutdown)") \
    X(ESYS, -9, "system call failed")                                        \
    X(EENGINE, -10, "engine failure")                                        \
    X(ETOOBIG, -11, "over the configured limit")                             \
    X(EADDR, -12, "host is not a numeric IPv4 or IPv6 address")              \
    X(EBADREQ, -13, "malformed request")                                     \
    X(EHEADER, -14, "header name or value not allowed")                      \
    X(ETLS, -15, "TLS certificate, key or setting refused")                 \
    X(EAGAIN, -16, "stream buffer full: write again once srv_stream_on_writable calls back") \
    X(ECLOSED, -17, "stream closed: the client went away, the send deadline passed or the server stopped") \
    X(ENOBODY, -18, "the answer has no body (HEAD, 204 or 304): its head is sent, end the stream") \
    X(ENOROUTE, -19, "no route registered with that method and pattern")    \
    X(EMULTIPART, -20, "malformed multipart/form-data body")                 \
    X(EBOUNDARY, -21, "not multipart/form-data with a valid boundary (1 to 70 characters)")

typedef enum srv_error {
#define SRV__ERR_ENUM(name, num, msg) SRV_##name = (num),
    SRV_ERRNO_MAP(SRV__ERR_ENUM)
#undef SRV__ERR_ENUM
} srv_error;

/*
 * srv_strerror: a short English message for an SRV_E... code
 * ("unknown error" for anything else). srv_err_name: its name without the
 * prefix, e.g. "EBIND". Both return static strings; any thread may call them.
 */
const char *srv_strerror(int err);
const char *srv_err_name(int err);

/* ------------------------------------------------------------------ */
/* Opaque handles                                                      */
/* ------------------------------------------------------------------ */

typedef struct srv_engine srv_engine;   /* a transport, built in or not */
typedef struct srv_server srv_server;   /* one listening HTTP server */
typedef struct srv_request srv_request; /* one request, until answered */
typedef struct srv_stream srv_stream;   /* a response being streamed */
typedef struct srv_ws srv_ws;           /* one WebSocket connection */

/* ------------------------------------------------------------------ */
/* Engines                                                             */
/* ------------------------------------------------------------------ */

/*
 * srv_engine_default: the engine this libsrv was built to prefer
 * (threadpool in an `all` build, the only engine in a single-engine build).
 * Never NULL. Static; any thread.
 */
const srv_engine *srv_engine_default(void);

/*
 * srv_engine_find: the built-in engine called `name` ("threadpool", "mhd",
 * "h2o"), or NULL when this libsrv was built without it (or name is NULL).
 * Case-sensitive. Any thread.
 */
const srv_engine *srv_engine_find(const char *name);

/*
 * srv_engine_select: the engine an application should run, by precedence:
 * `name` when not NULL (e.g. from --engine), else the SRV_ENGINE environment
 * variable when set and non-empty, else srv_engine_default().
 * Stores it in *out and returns 0; returns SRV_ENOENGINE (leaving *out
 * untouched) when the requested name is not built in - never falls back
 * silently. Any thread (reads the environment).
 */
int srv_engine_select(const char *name, const srv_engine **out);

/* srv_engine_name: the engine's name, a static string. */
const char *srv_engine_name(const srv_engine *engine);

/*
 * Engine capabilities: where engines differ, so that an application (or a
 * test) asks instead of comparing names. docs/ENGINES.md explains each.
 */
enum {
    /* Serves HTTP/2 over cleartext by prior knowledge (the core's, nghttp2). */
    SRV_CAP_HTTP2 = 1u << 0,
    /* Answers an unsupported HTTP/1 version with 505 (otherwise 400). */
    SRV_CAP_VERSION_505 = 1u << 1,
    /* Answers every garbage request line with 400 (otherwise it may close
     * without a response). */
    SRV_CAP_GARBAGE_400 = 1u << 2,
    /* Its library de-chunks request bodies and answers some abusive chunk
     * framing itself, with its own status or a close (never by serving a
     * differently framed body), and where the engine cannot look first
     * (over TLS; mhd: after a connection's first request, or chunks that
     * come after its head) may read a bare LF as a chunk line's end.
     * Without it the core's answers apply. */
    SRV_CAP_LIB_CHUNKED = 1u << 3,
    /* Answers an HTTP/2 connection preface it does not serve, or refuses,
     * in HTTP/2 (a GOAWAY frame) rather than with HTTP/1 text; with
     * SRV_CAP_LIB_ERRORS too, only in cleartext (over TLS its library
     * answers the preface with an HTTP/1 505). */
    SRV_CAP_H2_PREFACE_GOAWAY = 1u << 4,
    /* Its library answers some bad input itself, before the core sees it:
     * same status and close as the core's answer, but the library's own
     * headers and body (no Server, its HTML text). Only where the engine
     * cannot look first: in a request after the first on a kept-alive
     * connection, or over TLS (the first request's head in cleartext gets
     * the core's answer). docs/ENGINES.md lists the inputs. Without it
     * every error answer is the core's. */
    SRV_CAP_LIB_ERRORS = 1u << 5,
    /* Serves HTTPS when srv_config has a certificate and key (srv_config's
     * tls_* fields). Without it srv_server_start refuses a TLS
     * configuration with SRV_ETLS. */
    SRV_CAP_TLS = 1u << 6,
    /* Over TLS, offers HTTP/2 by ALPN ("h2", then "http/1.1"); without it
     * only "http/1.1" is offered. */
    SRV_CAP_TLS_HTTP2 = 1u << 7,
    /* Streams responses (srv_stream_start). Without it srv_stream_start
     * returns SRV_EENGINE and the request is still the caller's to answer. */
    SRV_CAP_STREAM = 1u << 8,
    /* Over TLS, the bad input it answers by hand in cleartext because its
     * library drops it silently (a request line without a space; a body
     * past the 413's swallow limit; a request still arriving at the end of
     * a stop; a query whose parameters fill its library's pool) is closed
     * without an answer: the TLS session is the
     * library's to write (mhd: libmicrohttpd's GnuTLS). */
    SRV_CAP_TLS_CLOSES_RAW = 1u << 9,
    /* Streams request bodies to routes registered SRV_ROUTE_STREAM_BODY
     * (srv_request_body_read). Without it srv_server_start refuses such a
     * route with SRV_EENGINE (never a silently buffered body). */
    SRV_CAP_STREAM_BODY = 1u << 10,
    /* Its library refuses a chunk extension (`5;name=value`) in a request
     * body with its own 400, on every request (mhd on libmicrohttpd 1.0.x,
     * whose chunk parser leaves the extension line's LF in the data).
     * Without it chunk extensions are ignored, as RFC 9112 7.1.1 wants. */
    SRV_CAP_LIB_CHUNK_EXT_400 = 1u << 11,
    /* With SRV_CAP_LIB_ERRORS: where the engine cannot look first, an
     * unknown Transfer-Encoding gets its library's 400, not the core's 501
     * (mhd on libmicrohttpd 1.0.x). */
    SRV_CAP_LIB_TE_400 = 1u << 12,
    /* Where the engine cannot look first (over TLS; mhd: after a
     * connection's first request), its library replaces obs-fold with
     * spaces and serves the request (RFC 9112 5.2 allows either) instead of
     * the core's 400 (mhd on libmicrohttpd 1.0.x). */
    SRV_CAP_LIB_OBS_FOLD = 1u << 13,
    /* Serves WebSocket routes (srv_route_ws) over HTTP/1.1 (RFC 6455; the
     * core's, on wslay). Without it srv_route_ws returns SRV_EENGINE. No
     * engine carries WebSocket over HTTP/2 (RFC 8441): a browser that
     * reached the server over h2 opens its WebSocket on HTTP/1.1. */
    SRV_CAP_WEBSOCKET = 1u << 14,
    /* At a graceful stop, a kept-alive connection whose next request line
     * has only partly arrived (no line end yet) is closed like an idle
     * one, without an answer: its library reports a request only once the
     * line is whole and shows nothing before that (mhd). A client sees the
     * close any keep-alive connection may see (RFC 9112 9.3.1) and retries.
     * Without it the stop counts such a request as arriving: served if it
     * completes within the grace, else answered 503. */
    SRV_CAP_STOP_CLOSES_PARTIAL_LINE = 1u << 15,
    /* With SRV_CAP_WEBSOCKET: also over TLS. Without it a server with a
     * certificate refuses srv_route_ws with SRV_EENGINE (mhd: libmicrohttpd
     * forwards an upgraded TLS socket itself, through buffers taken from
     * the connection's memory pool, which the engine keeps small). */
    SRV_CAP_WEBSOCKET_TLS = 1u << 16
};

/* srv_engine_caps: the engine's SRV_CAP_* bits (0 for NULL). Any thread. */
unsigned srv_engine_caps(const srv_engine *engine);

/*
 * srv_engine_count / srv_engine_at: the engines built in, in order of
 * preference (index 0 is the default). srv_engine_at returns NULL past the
 * end.
 */
size_t srv_engine_count(void);
const srv_engine *srv_engine_at(size_t index);

/* ------------------------------------------------------------------ */
/* Configuration                                                       */
/* ------------------------------------------------------------------ */

typedef struct srv_config {
    /* sizeof(srv_config) as the caller was compiled; set by srv_config_init.
     * srv_server_new refuses a configuration whose size it cannot trust. */
    size_t size;
    /* Numeric IPv4 or IPv6 address to bind ("0.0.0.0", "::", "127.0.0.1").
     * The string is copied by srv_server_new. Default "0.0.0.0". */
    const char *host;
    /* TCP port; 0 asks the OS for a free one (see srv_server_port).
     * Default 8080. */
    int port;
    /* Threads that run handlers (the worker pool). Default 200. */
    unsigned worker_threads;
    /* I/O threads: event loops (threadpool's own epoll loops, h2o, uv),
     * polling threads (mhd); 0 means the number of CPUs. Default 0. */
    unsigned io_threads;
    /* Open connections served at once; past it new connections wait in
     * the backlog or get a quick 503, never hang. Default 10000. */
    unsigned max_connections;
    /* listen() backlog, clamped by the kernel's somaxconn. Default 4096. */
    int backlog;
    /* Time allowed to receive a request's head once it started.
     * Default 20000 ms (Tomcat's connectionTimeout). */
    unsigned header_timeout_ms;
    /* Idle time allowed between requests on a kept-alive connection.
     * Default 20000 ms. */
    unsigned keepalive_timeout_ms;
    /* A handler that has not responded by then is answered 503 by the
     * core. Default 60000 ms. */
    unsigned request_timeout_ms;
    /* Request line + headers over this: 431. Default 8192 (Tomcat's
     * maxHttpHeaderSize). */
    size_t max_header_bytes;
    /* Request-target over this: 414. Default 8192. */
    size_t max_uri_bytes;
    /* Request body over this: 413. Default 2 MiB (Tomcat's maxPostSize). */
    size_t max_body_bytes;
    /* One line per response: SRV_ACCESS_LOG_OFF (0), _COMMON (1, Apache's
     * Common Log Format), _COMBINED (2, Common + Referer and User-Agent)
     * or _JSON (3, one JSON object per line), to stderr or to
     * access_log_path. The first field is srv_request_client_addr (the
     * client behind trusted_proxies). Default 0 (off). */
    int access_log;
    /* Value of the Server response header; NULL sends none. Copied.
     * Default "libsrv". */
    const char *server_name;
    /* ---- fields above: 0.1; below: added in 0.2 ---- */
    /* Worker threads started with the server and kept when idle; the pool
     * grows on demand up to worker_threads and shrinks back (Tomcat keeps
     * 10 spare threads, Jetty 8). Clamped to worker_threads. Default 10. */
    unsigned worker_threads_min;
    /* A worker above worker_threads_min that found no job for this long
     * exits. Default 60000 ms (Tomcat's maxIdleTime). */
    unsigned worker_idle_timeout_ms;
    /* Requests waiting for
     * a worker; past it a request is answered 503 at once instead of
     * queueing without bound. Default 10000. */
    unsigned max_queued;
    /* A non-blocking handler (SRV_ROUTE_NONBLOCKING) that holds its I/O
     * thread longer than this is counted in srv_stats.slow_nonblocking and
     * reported once on stderr: it blocks every connection of that thread.
     * 0 disables the check. Default 200 ms (well above a busy machine's
     * scheduling delays, well below a blocking call worth finding). */
    unsigned nonblocking_warn_ms;
    /* ---- fields above: 0.2; below: TLS, added in 0.3 ---- */
    /* HTTPS: the server speaks TLS only (no cleartext on the same port)
     * when a certificate is set, from a file or from memory (not both), and
     * then needs its private key the same way. The certificate is a PEM
     * chain, the server's own certificate first, then the intermediates.
     * srv_server_start refuses (SRV_ETLS, srv_server_last_error names the
     * file and why) a file it cannot read, PEM it cannot parse, a key that
     * does not match the certificate, or an engine without SRV_CAP_TLS.
     * The strings and files are read by srv_server_start (copied by
     * srv_server_new) and again by srv_server_reload_tls. Default NULL
     * (cleartext HTTP). */
    const char *tls_cert_file;
    const char *tls_key_file;
    /* The same as PEM text in memory (NUL-terminated), for applications
     * that keep keys elsewhere than in files. Copied by srv_server_new. */
    const char *tls_cert_pem;
    const char *tls_key_pem;
    /* Lowest protocol version accepted: SRV_TLS_1_2 or SRV_TLS_1_3.
     * Default SRV_TLS_1_2 (TLS 1.0 and 1.1 clients are refused in the
     * handshake). */
    unsigned tls_min_version;
    /* TLS 1.2 cipher list in OpenSSL syntax; NULL means Mozilla's
     * "intermediate" policy (ECDHE/DHE with AES-GCM or ChaCha20-Poly1305,
     * forward secrecy only). TLS 1.3 suites are the library's defaults
     * (all AEAD). The mhd engine serves TLS with GnuTLS: there it is a
     * GnuTLS priority string ("SECURE:-VERS-TLS1.2"), and an OpenSSL list
     * is refused at start (SRV_ETLS). Copied. Default NULL. */
    const char *tls_ciphers;
    /* Non-NULL: clients must present a certificate that this PEM CA file
     * (one or more CA certificates) verifies, or the handshake fails.
     * Copied. Default NULL (no client certificate asked). */
    const char *tls_client_ca_file;
    /* ---- fields above: 0.3; below: added in 0.4 ---- */
    /* Proxies (load balancers) whose forwarding headers are believed:
     * comma-separated addresses or CIDR blocks, e.g.
     * "127.0.0.1,10.0.0.0/8,fd00::/8". From such a peer, RFC 7239
     * Forwarded (else X-Forwarded-For with X-Forwarded-Proto and
     * X-Forwarded-Host) is walked right to left past the trusted proxies
     * to the first hop that is not one: that is the client
     * (srv_request_client_addr), with the scheme and host it used
     * (srv_request_scheme, srv_request_host); the access log prints it.
     * From any other peer the headers change nothing. srv_server_start
     * refuses (SRV_EINVAL) an entry that is not an address or block.
     * Copied. Default NULL (no proxy trusted: the client is the peer). */
    const char *trusted_proxies;
    /* The access log's file, opened for appending (created 0644) by
     * srv_server_start, which refuses (SRV_ESYS, naming the file and why)
     * one it cannot open; reopened by srv_server_reopen_log and SIGUSR1 in
     * srv_server_run, for logrotate. Copied. Default NULL (stderr). */
    const char *access_log_path;
    /* Non-zero: SO_REUSEPORT on the listening socket, so several processes
     * (each its own listener on the same host and port) share the port
     * and the kernel spreads new connections over them (nginx's
     * reuseport). Default 0. */
    int reuse_port;
    /* -1: bind host:port (the default). Otherwise an already listening
     * TCP socket to serve instead - inherited from systemd socket
     * activation (srv_systemd_listen_fd) or a supervisor, so a restart
     * never refuses a connection: host, port and backlog are then the
     * socket's. srv_server_start refuses (SRV_EINVAL) a descriptor that
     * is not a listening TCP socket. The server serves a duplicate and
     * closes that when it stops; the caller keeps listen_fd, so the socket
     * (and connections queued on it) outlives the server, for the next
     * process to serve. */
    int listen_fd;
    /* Non-NULL: a built-in GET route at this path (e.g. "/ready") for load
     * balancers and readiness probes: 200 "ready" while the server runs
     * and every srv_ready_check_add check passes, 503 "not ready: <why>"
     * before the start completes, during the drain and from the moment a
     * stop begins, or when a check fails. srv_server_start refuses
     * (SRV_EEXIST) a path the application routes GET on itself. Copied.
     * Default NULL (no such route). */
    const char *ready_path;
    /* srv_server_stop first drains for this long: the server goes on
     * accepting and serving everything while ready_path answers 503, so
     * a load balancer takes the instance out before its listener closes
     * (a Kubernetes preStop delay, built in); then the graceful stop
     * proceeds with its own grace period. Default 0 (no drain). */
    unsigned drain_ms;
    /* Non-NULL: a built-in GET route at this path (e.g. "/metrics") that
     * answers srv_metrics_render's Prometheus text. srv_server_start
     * refuses (SRV_EEXIST) a path the application routes GET on itself.
     * Copied. Default NULL (no such route; srv_metrics_render works
     * anyway). */
    const char *metrics_path;
    /* Bytes a streamed response (srv_stream_start) may hold that the client
     * has not taken yet, chunk framing included: past it srv_stream_write
     * says SRV_EAGAIN. A single write may be at most this long. The memory
     * a stream costs is about this much. Default 65536 (64 KiB); 1 KiB to
     * 64 MiB. */
    size_t stream_buffer_bytes;
    /* The body of the answers the library makes itself (404, 405, 400,
     * 413, 431, 503...): SRV_ERROR_FORMAT_TEXT, "404 Not Found" as
     * text/plain (the default), or SRV_ERROR_FORMAT_JSON, Spring Boot's
     * shape as application/json: {"timestamp":"2026-12-03T14:40:00.123Z",
     * "status":404,"error":"Not Found","path":"/x"}. Answers an engine's
     * library writes itself (mhd: SRV_CAP_LIB_ERRORS) keep its own body. */
    int error_format;
} srv_config;

/*
 * srv_systemd_listen_fd: the listening socket systemd passed to this
 * process by socket activation (LISTEN_PID is ours and LISTEN_FDS is at
 * least 1: the first one, fd 3), for srv_config.listen_fd; -1 when there
 * is none. Unsets LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES so child
 * processes do not take it for theirs (sd_listen_fds(1)). Call it once, at
 * start-up, before threads are started (it changes the environment).
 */
int srv_systemd_listen_fd(void);

/* srv_config.access_log values. */
enum {
    SRV_ACCESS_LOG_OFF = 0,
    SRV_ACCESS_LOG_COMMON = 1,
    SRV_ACCESS_LOG_COMBINED = 2,
    SRV_ACCESS_LOG_JSON = 3
};

/* srv_config.error_format values. */
enum { SRV_ERROR_FORMAT_TEXT = 0, SRV_ERROR_FORMAT_JSON = 1 };

/* srv_config.tls_min_version values (the TLS wire version numbers). */
enum { SRV_TLS_1_2 = 0x0303, SRV_TLS_1_3 = 0x0304 };

/*
 * srv_config_init: fill *cfg with the defaults documented above (and set
 * cfg->size). Call it first and change only what you need, so fields added
 * later get their defaults. A macro so that the size is the caller's.
 * Any thread.
 */
void srv_config_init_sized(srv_config *cfg, size_t size);
#define srv_config_init(cfg) srv_config_init_sized((cfg), sizeof *(cfg))

/*
 * srv_config_from_env: set the fields of *cfg (already srv_config_init'ed)
 * from environment variables named `prefix` + the field's name in upper
 * case: with prefix "SRV_", SRV_HOST, SRV_PORT, SRV_WORKER_THREADS,
 * SRV_MAX_BODY_BYTES, SRV_TLS_CERT_FILE... - every field above. A variable
 * that is not set leaves its field as it is, so call it after
 * srv_config_init and before applying command-line flags (flags win).
 * Values: whole decimal numbers in the range srv_server_start accepts;
 * byte sizes (max_*_bytes) may end in K, M or G (KiB, MiB, GiB); flags
 * (reuse_port) 1/0, true/false, yes/no, on/off; access_log off, common,
 * combined or json (or 0-3; on/off as common/off); error_format text or
 * json; tls_min_version 1.2 or
 * 1.3; host a numeric address; strings as they are, an empty one clearing
 * an optional string (server_name "": no Server header).
 * A variable under the prefix that is no field (a typo such as
 * SRV_WORKER_THREAD) is an error, except the library's own SRV_ENGINE
 * (srv_engine_select) and SRV_MHD_LOG (mhd's diagnostics); an empty
 * prefix skips that check.
 * Fields past cfg->size (a caller built against an older srv.h) are not
 * set. Strings point into the environment (getenv): they stay valid while
 * the environment is not changed, and srv_server_new copies them.
 * Returns 0, or SRV_EINVAL at the first bad variable with a message in
 * err (err_size bytes, always NUL-terminated; err may be NULL) that names
 * the variable, its value and the accepted values, e.g.
 * "SRV_PORT=\"70000\" is out of range: use 0 (any free port) to 65535";
 * *cfg may then hold the variables read before it.
 * Not thread-safe against setenv/putenv in other threads (getenv is not);
 * call it at start-up.
 */
int srv_config_from_env(srv_config *cfg, const char *prefix, char *err, size_t err_size);

/* ------------------------------------------------------------------ */
/* Server                                                              */
/* ------------------------------------------------------------------ */

/*
 * A handler answers one request. It must call srv_respond() (or start a
 * streamed response, srv_stream_start) exactly once, either before it
 * returns (blocking style) or later from any thread (async style). `ctx` is the pointer given with the route.
 * Where it runs depends on its route:
 * - an ordinary route's handler runs on a worker thread, never on an
 *   engine's I/O thread, and may block (sleep, wait on a database);
 * - a route registered with SRV_ROUTE_NONBLOCKING runs its handler on the
 *   I/O thread that parsed the request, so a request answered at once never crosses threads. Such a
 *   handler must not block: it answers at once, arms srv_after, or hands
 *   the request to another thread that answers later.
 */
typedef void (*srv_handler_fn)(srv_request *req, void *ctx);

/*
 * srv_server_new: a stopped server on `engine` with a copy of *cfg (NULL
 * cfg means the defaults). Only the first cfg->size bytes are read;
 * fields past them get their defaults. The configuration is validated by
 * srv_server_start. Returns NULL when engine is NULL, when cfg->size was
 * not set by srv_config_init (0, or smaller than the first sized layout),
 * or when memory runs out.
 * The caller owns the server and frees it with srv_server_free.
 * Any thread; the returned server is then used from one controlling thread
 * (new/route/start/stop/free), except where a function says otherwise.
 */
srv_server *srv_server_new(const srv_engine *engine, const srv_config *cfg);

/* Route flags (srv_route_opts.flags). */
enum {
    /* The handler never blocks: run it on the I/O thread (see
     * srv_handler_fn). Holding the thread longer than
     * srv_config.nonblocking_warn_ms is counted and reported. */
    SRV_ROUTE_NONBLOCKING = 1u << 0,
    /* (0.5) The handler runs as soon as the request's head is complete,
     * before its body is read: the application pulls the body piece by
     * piece with srv_request_body_read ("Streamed request bodies" below),
     * so a body of any size costs bounded memory. srv_request_body is then
     * always empty. The body's limit is srv_route_opts.max_body_bytes, not
     * srv_config.max_body_bytes. Needs SRV_CAP_STREAM_BODY. */
    SRV_ROUTE_STREAM_BODY = 1u << 1
};

/*
 * One route: `method` requests (e.g. "GET", exact and case-sensitive) whose
 * decoded path matches the pattern `path` ("/greetings", "/users/{id}",
 * "/static/{*path}": see "Path patterns" below; no query) go to
 * handler(req, ctx). Initialise with srv_route_opts_init, then set what you
 * need; fields added later keep their defaults.
 */
typedef struct srv_route_opts {
    size_t size;            /* set by srv_route_opts_init */
    const char *method;     /* copied; required */
    const char *path;       /* copied; required, starts with '/' */
    srv_handler_fn handler; /* required */
    void *ctx;              /* passed to handler; default NULL */
    unsigned flags;         /* SRV_ROUTE_* bits; default 0 (worker) */
    /* ---- fields above: 0.2; below: added in 0.5 ---- */
    /* With SRV_ROUTE_STREAM_BODY: the most body bytes the route takes; a
     * Content-Length over it is answered 413 before the handler runs, a
     * chunked body that grows past it is cut with 413 (the application's
     * on_end gets SRV_ETOOBIG). 0 means unlimited. Ignored (must be 0) for
     * other routes, whose limit is srv_config.max_body_bytes. Default 0. */
    uint64_t max_body_bytes;
} srv_route_opts;

/* srv_route_opts_init: zero *opts and set its size. Any thread. */
void srv_route_opts_init_sized(srv_route_opts *opts, size_t size);
#define srv_route_opts_init(opts) srv_route_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_route_add: register the route `opts` describes (the struct is not
 * kept). A GET route also answers HEAD (the body is dropped). Only before
 * srv_server_start, from the controlling thread.
 * Returns 0; SRV_EINVAL for a NULL opts, a size it cannot trust, NULL or
 * empty method/path/handler, a method that is not a token, a path not
 * starting with '/' or not a valid pattern, or unknown flag bits;
 * SRV_EEXIST when the method is already routed for the same pattern shape
 * (parameter names aside); SRV_ESTATE once started; SRV_ENOMEM.
 * A SRV_ROUTE_STREAM_BODY route on an engine without SRV_CAP_STREAM_BODY is
 * SRV_EENGINE (srv_server_last_error says so); max_body_bytes on a route
 * without that flag is SRV_EINVAL.
 */
int srv_route_add(srv_server *srv, const srv_route_opts *opts);

/*
 * srv_route: srv_route_add for an ordinary (worker) route, with no options.
 * Same returns.
 */
int srv_route(srv_server *srv, const char *method, const char *path,
              srv_handler_fn handler, void *ctx);

/*
 * srv_server_start: validate the configuration, start the worker pool, the
 * timer thread and the engine, and return once the port accepts
 * connections. Returns 0; SRV_EINVAL (bad configuration), SRV_ETLS (a
 * certificate, key or TLS setting refused), SRV_EADDR,
 * SRV_EBIND, SRV_ETHREAD, SRV_EENGINE, SRV_ENOMEM, or SRV_ESTATE when
 * already started or stopped. On failure nothing keeps running and
 * srv_server_last_error() says what and why, e.g.
 * "cannot bind 0.0.0.0:8080: Address already in use". A server starts once.
 */
int srv_server_start(srv_server *srv);

/*
 * srv_server_port: the bound TCP port once started (the real one when
 * port 0 was configured), else the configured port. Any thread.
 */
int srv_server_port(const srv_server *srv);

/* srv_server_engine: the engine the server was created with. Any thread. */
const srv_engine *srv_server_engine(const srv_server *srv);

/*
 * srv_server_last_error: a message for the last failure of
 * srv_server_start/stop on this server, "" when none. Owned by the server,
 * valid until the next call on it or srv_server_free.
 */
const char *srv_server_last_error(const srv_server *srv);

/*
 * srv_server_stop: stop gracefully. New connections are refused at once
 * (connects the kernel completed before the stop began are served);
 * idle kept-alive connections are closed; requests in flight (including
 * those whose handler is still running or waiting on a timer) get up to
 * grace_ms to be answered, with "Connection: close". After the grace period
 * the core answers the rest 503 and the engine closes every connection.
 * Returns when the engine has stopped, on every engine without waiting for a
 * blocking handler that is still running: it keeps its worker until it
 * returns, its late response is dropped, and srv_server_free waits for it.
 * Returns 0, or SRV_ESTATE when the server is not running.
 * Must not be called from a handler or a timer callback.
 */
int srv_server_stop(srv_server *srv, unsigned grace_ms);

/*
 * srv_server_on_stop: call fn(srv, arg) once when a graceful stop begins -
 * in srv_server_stop (and so srv_server_run on SIGTERM), after the drain,
 * once new connections are refused, before the grace period - so the
 * application can end what would otherwise hold the stop for the whole
 * grace: long polls, streams (srv_stream_end), its own threads. fn runs on
 * the thread that stops the server; it may answer requests and use streams
 * and srv_after, must not call srv_server_stop or srv_server_free, and the
 * grace runs after it returns. A NULL fn removes it. Before
 * srv_server_start only (SRV_ESTATE after); SRV_EINVAL for a NULL srv.
 */
int srv_server_on_stop(srv_server *srv, void (*fn)(srv_server *srv, void *arg), void *arg);

/*
 * An error body writer: the body of an answer the library makes itself
 * (the same answers srv_config.error_format covers). Write at most `cap`
 * bytes into buf, set *content_type (a string that outlives the call, e.g.
 * a literal) and return the length; return SRV_ERROR_BODY_DEFAULT to leave
 * this one to error_format. `req` may be partly known (a malformed head:
 * its method, target or headers may be NULL or missing); read it with the
 * srv_request_* accessors only. Called on whatever thread answers (an I/O
 * thread, a worker, the timer): quick, no blocking, no srv_respond.
 */
typedef size_t (*srv_error_body_fn)(const srv_request *req, int status, char *buf, size_t cap,
                                    const char **content_type, void *ctx);
#define SRV_ERROR_BODY_DEFAULT ((size_t)-1)

/*
 * srv_server_set_error_body: use fn for the library's error bodies (cap is
 * 4096 bytes); NULL goes back to error_format. Before srv_server_start
 * only (SRV_ESTATE after); SRV_EINVAL for a NULL srv.
 */
int srv_server_set_error_body(srv_server *srv, srv_error_body_fn fn, void *ctx);

/*
 * srv_server_run: start the server if it is not running, wait for SIGINT or
 * SIGTERM, then srv_server_stop(srv, grace_ms). On SIGHUP a server with TLS
 * reloads its certificate (srv_server_reload_tls; a failure is reported on
 * stderr and the old certificate stays) and keeps running; on SIGUSR1 it
 * reopens the access log file (srv_server_reopen_log). Installs its own
 * handlers for those signals while it waits, unblocks them in the calling
 * thread, and restores the previous handlers and signal mask before it
 * returns. A signal that comes before the handlers are installed gets its
 * previous disposition (SIGTERM's default kills): an application that
 * announces readiness before calling this blocks SIGINT, SIGTERM (SIGUSR1,
 * and SIGHUP with TLS) first (pthread_sigmask, before srv_server_start so
 * every thread inherits it); a signal sent in between stays pending and is
 * handled as soon as srv_server_run unblocks it. Returns 0 or the error of
 * start/stop. Controlling thread only.
 */
int srv_server_run(srv_server *srv, unsigned grace_ms);

/*
 * srv_server_reload_tls: read the configured certificate, key and client
 * CA again (the files; PEM given in memory is rebuilt as it was) and use
 * them for connections accepted from now on; connections already open
 * keep the certificate they started with. On any error the server keeps
 * its current certificate and returns the error, srv_server_last_error
 * saying which file and why. srv_server_run calls it on SIGHUP.
 * Returns 0; SRV_ETLS (unreadable, unparsable or mismatched), SRV_EINVAL
 * (the server has no TLS configured), SRV_ESTATE (not running), SRV_ENOMEM.
 * Any thread while the server runs (not concurrently with stop or free).
 */
int srv_server_reload_tls(srv_server *srv);

/*
 * srv_server_reopen_log: reopen access_log_path (after logrotate moved it):
 * lines written from then on go to a file of that name, created if need
 * be; no line is lost or split across the swap. A failure (SRV_ESYS,
 * srv_server_last_error names the file and why) keeps the current file.
 * 0 and nothing done when the log goes to stderr. srv_server_run calls it
 * on SIGUSR1. Any thread, while the server is running.
 */
int srv_server_reopen_log(srv_server *srv);

/*
 * A readiness check: return 0 when the part of the application it watches
 * can serve (a database reachable, a cache warmed), non-zero when not,
 * saying why in `why` (why_size bytes, NUL-terminated; may be left empty).
 * Called for each request to ready_path and by srv_server_ready, from an
 * engine thread or a worker, possibly from several threads at once: keep
 * it quick and thread-safe. With checks registered, ready_path runs on the
 * worker pool (a check may block briefly); without, on the I/O thread.
 */
typedef int (*srv_ready_check_fn)(void *ctx, char *why, size_t why_size);

/*
 * srv_ready_check_add: register a readiness check under `name` (copied;
 * shown in the 503 body: "not ready: db: connection refused"). Checks run
 * in registration order, the first failure answers. Before
 * srv_server_start, controlling thread. SRV_EINVAL (NULL or empty name,
 * NULL check), SRV_ESTATE (already started), SRV_ENOMEM.
 */
int srv_ready_check_add(srv_server *srv, const char *name, srv_ready_check_fn check, void *ctx);

/*
 * srv_server_ready: 1 when ready_path would answer 200 now (running, not
 * draining or stopping, every check passing), else 0. Runs the checks.
 * Any thread.
 */
int srv_server_ready(const srv_server *srv);

/*
 * srv_metrics_render: the server's metrics in the Prometheus text
 * exposition format 0.0.4 into buf (cap bytes, NUL-terminated when cap >
 * 0; buf may be NULL with cap 0 to measure). Returns the length of the
 * whole text, like snprintf: a return >= cap means it was cut. Families:
 * srv_info{engine,version}; srv_requests_total{route,method,status="2xx"}
 * and srv_request_duration_seconds{route,method} (a histogram, buckets
 * 5 ms to 10 s), per registered route, route="" for requests no route
 * matched (404, 405, 400s); srv_requests_in_flight, srv_connections_open,
 * srv_connections_total, srv_workers{state="busy"|"idle"},
 * srv_queue_length, srv_queue_rejected_total, srv_timeouts_total,
 * srv_responses_dropped_total, srv_slow_nonblocking_total,
 * srv_received_bytes_total, srv_sent_body_bytes_total. Counting costs the
 * request path a few relaxed atomic additions, no lock. Any thread, any
 * time after srv_server_new (counters are zero before start).
 */
size_t srv_metrics_render(const srv_server *srv, char *buf, size_t cap);

/*
 * srv_server_free: stop the server if it runs (grace 0), wait for running
 * handlers to return, drop srv_after callbacks that have not fired (they are
 * never called), free every request still held, and free the server.
 * NULL is a no-op. Controlling thread only.
 */
void srv_server_free(srv_server *srv);

/* Counters, a consistent-enough snapshot (each field read atomically). */
typedef struct srv_stats {
    uint64_t requests;          /* requests received complete */
    uint64_t responses_1xx;     /* responses produced, by status class */
    uint64_t responses_2xx;
    uint64_t responses_3xx;
    uint64_t responses_4xx;
    uint64_t responses_5xx;
    uint64_t timeouts;          /* 503s the core sent for silent handlers */
    uint64_t dropped;           /* late srv_respond calls discarded */
    uint64_t connections_total; /* connections accepted since start */
    unsigned connections_open;  /* connections open now */
    unsigned requests_in_flight;/* received, not yet fully answered */
    unsigned workers_busy;      /* worker threads running a job now */
    /* ---- fields above: 0.1; below: added in 0.2 ---- */
    unsigned workers;           /* worker threads alive now (elastic pool) */
    unsigned queued;            /* jobs waiting for a worker now */
    uint64_t rejected;          /* 503s because max_queued was reached */
    uint64_t slow_nonblocking;  /* non-blocking handler (and, from 0.4,
                                   filter) calls that held their I/O thread
                                   past nonblocking_warn_ms */
} srv_stats;

/*
 * srv_server_stats: fill the first `size` bytes of *out (the macro passes
 * the caller's sizeof). Any thread, any time after new.
 */
void srv_server_stats_sized(const srv_server *srv, srv_stats *out, size_t size);
#define srv_server_stats(srv, out) srv_server_stats_sized((srv), (out), sizeof *(out))

/* ------------------------------------------------------------------ */
/* Requests (valid from the handler call until srv_respond returns)    */
/* ------------------------------------------------------------------ */

/* The method, e.g. "GET". Never NULL. */
const char *srv_request_method(const srv_request *req);

/* The %-decoded path without the query, e.g. "/greetings". Never NULL. */
const char *srv_request_path(const srv_request *req);

/* The request-target as received, e.g. "/greetings?name=Ana". Never NULL. */
const char *srv_request_target(const srv_request *req);

/*
 * srv_request_query: the decoded value of the first query parameter named
 * exactly `name` ("+" is a space, %XX decoded, invalid escapes kept as
 * sent), "" for a parameter given without "=", NULL when absent.
 */
const char *srv_request_query(const srv_request *req, const char *name);

/*
 * srv_request_query_count / srv_request_query_at: every query parameter in
 * order, repeated names included. query_at returns 0 and sets *name and
 * *value (either may be NULL to skip), or SRV_EINVAL past the end.
 */
size_t srv_request_query_count(const srv_request *req);
int srv_request_query_at(const srv_request *req, size_t index,
                         const char **name, const char **value);

/* The first header named `name`, compared case-insensitively; NULL when
 * absent. */
const char *srv_request_header(const srv_request *req, const char *name);

/*
 * srv_request_header_count / srv_request_header_at: every request header
 * in the order received, repeated names included (names as the client
 * spelled them; HTTP/2 names are lower case). header_at returns 0 and sets
 * *name and *value (either may be NULL to skip), or SRV_EINVAL past the end.
 */
size_t srv_request_header_count(const srv_request *req);
int srv_request_header_at(const srv_request *req, size_t index,
                          const char **name, const char **value);

/*
 * Cookies (0.7): srv_request_cookie: the value of the first cookie named
 * exactly `name` (case-sensitive) in the request's Cookie headers
 * ("a=1; b=2"; HTTP/2's several Cookie fields are read in order), with
 * blanks around it trimmed and surrounding DQUOTEs taken off; NULL when
 * absent. Values are not decoded. A piece without '=' or with an empty
 * name is skipped. srv_request_cookie_count / srv_request_cookie_at: every
 * cookie in order, repeated names included (at: 0, or SRV_EINVAL past the
 * end). The strings belong to the request (valid while you hold it). The
 * first call parses and keeps the result: call these from the thread that
 * holds the request (the handler, a filter), not from two threads at once.
 */
const char *srv_request_cookie(const srv_request *req, const char *name);
size_t srv_request_cookie_count(const srv_request *req);
int srv_request_cookie_at(const srv_request *req, size_t index, const char **name,
                          const char **value);

/*
 * Form bodies (0.7): srv_request_form: the decoded value of the first
 * field named exactly `name` of an application/x-www-form-urlencoded body
 * (decoded as the query: '+' a space, %XX; a field without '=' is ""), or
 * NULL when absent, when the Content-Type is another, or for a route that
 * streams its body (SRV_ROUTE_STREAM_BODY: the body is not kept). A field
 * whose escapes decode to NUL is skipped. srv_request_form_count /
 * srv_request_form_at: every field in order (at: 0, or SRV_EINVAL past
 * the end). Memory and threads as srv_request_cookie.
 */
const char *srv_request_form(const srv_request *req, const char *name);
size_t srv_request_form_count(const srv_request *req);
int srv_request_form_at(const srv_request *req, size_t index, const char **name,
                        const char **value);

/*
 * srv_media_type_is: 1 when the media type `content_type` (e.g. the
 * request's Content-Type, "Application/JSON; charset=utf-8") is `type`
 * ("application/json"): type and subtype compared case-insensitively,
 * parameters and blanks ignored; else 0 (also for NULL). Any thread.
 */
int srv_media_type_is(const char *content_type, const char *type);

/*
 * srv_request_negotiate: the media type to answer with, of the NULL-ended
 * list `offered` in the server's order of preference (e.g. {"application/
 * json", "text/html", NULL}), by the request's Accept (RFC 9110 12.5.1):
 * each offered type takes the q of the most specific range that matches it
 * (exact, then "type/ *", then "* / *"), the highest q wins, ties go to the
 * earlier offered type, q=0 means not acceptable. Returns offered[0] when
 * the request has no Accept (or an empty one), NULL when none is
 * acceptable (answer 406) or offered is empty. A malformed q makes its
 * range match nothing. The pointer is one of `offered`. The same threads as
 * srv_request_header.
 */
const char *srv_request_negotiate(const srv_request *req, const char *const *offered);

/*
 * srv_request_body: the request body (de-chunked), NUL-terminated for
 * convenience (the NUL is not counted). Sets *len when len is not NULL.
 * Never NULL: an empty body is "".
 */
const void *srv_request_body(const srv_request *req, size_t *len);

/* The TCP peer's address as "IP:port" or "[IPv6]:port" ("-" when the
 * engine could not say). Behind a proxy this is the proxy. Never NULL. */
const char *srv_request_peer(const srv_request *req);

/*
 * srv_request_client_addr: the client's address without a port ("192.0.2.7",
 * "2001:db8::1"): the peer's, or - when the peer is one of
 * srv_config.trusted_proxies - the first hop its forwarding headers name
 * that is not a trusted proxy (RFC 7239 "unknown" or an obfuscated
 * "_name" as given). Forwarding headers that do not parse are ignored, so
 * a hostile client cannot make this anything but an address or such a
 * token. "-" when unknown. Never NULL; valid as long as the request.
 * Whoever holds the request.
 */
const char *srv_request_client_addr(const srv_request *req);

/* The scheme the client used: "https" or "http" - the port's own, or
 * what a trusted proxy forwarded (Forwarded proto=, X-Forwarded-Proto).
 * Never NULL. */
const char *srv_request_scheme(const srv_request *req);

/* The host the client asked for: a trusted proxy's Forwarded host= or
 * X-Forwarded-Host (printable, no spaces or slashes), else the Host
 * header (HTTP/2: :authority); NULL when there is none. Valid as long as
 * the request. */
const char *srv_request_host(const srv_request *req);

/* The protocol, "HTTP/1.0", "HTTP/1.1" or "HTTP/2". Never NULL. */
const char *srv_request_protocol(const srv_request *req);

/* The server the request arrived on. */
srv_server *srv_request_server(const srv_request *req);

/* ------------------------------------------------------------------ */
/* Responses                                                           */
/* ------------------------------------------------------------------ */

/*
 * srv_set_header: add a response header (copied). Call before srv_respond,
 * from the thread that owns the request at that time (never concurrently
 * with srv_respond). Framing headers are the core's: Content-Length,
 * Transfer-Encoding, Connection, Keep-Alive, Upgrade, Date and Content-Type
 * (pass it to srv_respond) are refused.
 * Returns 0; SRV_EHEADER for an invalid name/value (CR, LF, NUL, a
 * non-token name) or a framing header; SRV_EINVAL for NULL arguments;
 * SRV_ETIMEDOUT when the core already answered the request (timeout or
 * shutdown: the header would be dropped anyway); SRV_ENOMEM.
 */
int srv_set_header(srv_request *req, const char *name, const char *value);

/* srv_cookie_opts.same_site values. */
enum {
    SRV_SAMESITE_DEFAULT = 0, /* no attribute: the browser's default (Lax) */
    SRV_SAMESITE_STRICT = 1,
    SRV_SAMESITE_LAX = 2,
    SRV_SAMESITE_NONE = 3 /* sent cross-site; browsers require Secure with it */
};

/* The attributes of a Set-Cookie (srv_set_cookie); grows the ABI-safe way. */
typedef struct srv_cookie_opts {
    size_t size;        /* set by srv_cookie_opts_init */
    long long max_age;  /* seconds; 0 deletes the cookie; -1 (default): none, a session cookie */
    const char *path;   /* Path; default NULL (none) */
    const char *domain; /* Domain; default NULL (the host only) */
    int secure;         /* non-zero: Secure (HTTPS only) */
    int http_only;      /* non-zero: HttpOnly (not visible to scripts) */
    int same_site;      /* SRV_SAMESITE_*; default SRV_SAMESITE_DEFAULT */
} srv_cookie_opts;

/* srv_cookie_opts_init: the defaults above, and the size. Any thread. */
void srv_cookie_opts_init_sized(srv_cookie_opts *opts, size_t size);
#define srv_cookie_opts_init(opts) srv_cookie_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_set_cookie: add a Set-Cookie header (RFC 6265 4.1) - `name=value`
 * and the attributes of `opts` (NULL: none) - as srv_set_header would,
 * before the answer, from the thread that owns the request. The name must
 * be a token and the value cookie-octets (visible ASCII but DQUOTE, ',',
 * ';' and '\': encode anything else, e.g. base64url or %XX), Path and
 * Domain visible ASCII without ';'. Returns 0; SRV_EHEADER for a name,
 * value or attribute outside that; SRV_EINVAL for NULL arguments, an opts
 * not set by srv_cookie_opts_init, max_age below -1, an unknown same_site,
 * or SRV_SAMESITE_NONE without secure (browsers drop such a cookie);
 * otherwise srv_set_header's errors.
 */
int srv_set_cookie(srv_request *req, const char *name, const char *value,
                   const srv_cookie_opts *opts);

/*
 * srv_respond: answer the request with a final `status` (200-599; interim
 * 1xx answers are the engine's), an optional Content-Type (NULL sends none) and `len` bytes of
 * body (copied; body may be NULL when len is 0). Call it (or
 * srv_stream_start) exactly once per request, from any thread, before or after the handler returns. After it
 * returns the request belongs to libsrv again: do not touch `req`.
 * If the client went away meanwhile the response is dropped safely.
 * Returns 0 when the response was handed to the engine; SRV_ETIMEDOUT when
 * the core had already answered 503 (request_timeout_ms or shutdown) and
 * this response was dropped; SRV_EINVAL for a bad status or NULL body with
 * len > 0 (the core then answers 500 so the client is not left waiting).
 */
int srv_respond(srv_request *req, int status, const char *content_type,
                const void *body, size_t len);

/* ------------------------------------------------------------------ */
/* Streamed request bodies (0.5)                                       */
/* ------------------------------------------------------------------ */

/*
 * A route registered SRV_ROUTE_STREAM_BODY gets its request when the head
 * is complete. The handler (or any thread later) decides: answer at once
 * without reading (a 401 or 413: an `Expect: 100-continue` client is then
 * never told to send, and the connection closes after the answer unless
 * the whole body had already arrived, so unread body bytes are never read
 * as a next request), or call srv_request_body_read to receive the body.
 * Pieces arrive in order on the engine's I/O thread that reads the
 * connection (threadpool, h2o, uv: its event loop; mhd: its polling
 * thread): the callbacks must not block - copy, hash, hand the piece
 * to another thread, or pause. A piece is only valid during its call.
 *
 * Flow control: on_data returning SRV_EAGAIN keeps the piece (it was
 * consumed) and pauses delivery; the engine then stops reading the socket
 * (TCP back-pressure; HTTP/2: the stream's window is not replenished)
 * until srv_request_body_resume, from any thread.
 *
 * Limits and deadlines: route max_body_bytes (413); a body that does not
 * keep up a minimum pace - SRV_BODY_MIN_PACE_BYTES within each
 * header_timeout_ms, counted only while the application is reading and
 * not paused - is cut with 408 (slow-drip clients); a malformed chunked
 * body is cut with 400. The core answers those itself (the connection
 * closes) and on_end says why. request_timeout_ms counts from the later of
 * the dispatch and the last body activity, so a long upload that makes
 * progress is not cut by it.
 */

/* A streamed body must bring at least this many bytes in each
 * header_timeout_ms (or its end), or it is cut with 408. */
#define SRV_BODY_MIN_PACE_BYTES 65536

/*
 * on_data: `len` (> 0) more body bytes, de-chunked. Return 0 for more, or
 * SRV_EAGAIN to pause (the piece counts as taken) until
 * srv_request_body_resume. Any other value stops the delivery for good:
 * neither on_data nor on_end is called again, and the connection closes
 * after the answer. The engine's I/O thread; must not block. It may call
 * srv_respond, srv_request_body_resume and the request accessors.
 */
typedef int (*srv_body_data_fn)(srv_request *req, const void *data, size_t len, void *ctx);

/*
 * on_end: called exactly once after a successful srv_request_body_read
 * (unless on_data stopped the delivery), never from inside on_data: when
 * on_data answers the request (srv_respond) and returns 0 or SRV_EAGAIN,
 * on_end follows once on_data has returned; when it answers and returns a
 * value that stops the delivery, no on_end comes. `status` is 0 when the whole body
 * arrived; SRV_ECLOSED when it never will - the client went away, the
 * request was answered before the end (by the application, the core's
 * request timeout or a stop); SRV_ETOOBIG past max_body_bytes (the core
 * answered 413); SRV_ETIMEDOUT when the body was too slow (the core
 * answered 408); SRV_EBADREQ for a malformed chunked body (the core
 * answered 400). After a non-zero status a srv_respond is dropped
 * (SRV_ETIMEDOUT, or 0 when the client left) but still required unless
 * the request was already answered by the application. The engine's I/O
 * thread; must not block. The request stays valid during the call.
 */
typedef void (*srv_body_end_fn)(srv_request *req, int status, void *ctx);

/*
 * srv_request_body_read: start receiving the body of a request of a
 * SRV_ROUTE_STREAM_BODY route (sends the interim "100 Continue" when the
 * client asked for it). Callbacks come later, never inside this call. Once
 * per request; any thread that holds the request, before it is answered.
 * Returns 0; SRV_EINVAL (NULL req/on_data/on_end, a route without the
 * flag, a second call); SRV_ETIMEDOUT when the core already answered the
 * request, SRV_ECLOSED when the client already went away (callbacks then
 * never called).
 */
int srv_request_body_read(srv_request *req, srv_body_data_fn on_data, srv_body_end_fn on_end,
                          void *ctx);

/*
 * srv_request_body_resume: deliver again after on_data returned SRV_EAGAIN.
 * Any thread, also from inside on_data. Returns 0 (also when the body
 * already ended or was not paused: nothing to do); SRV_EINVAL for NULL or
 * before srv_request_body_read. The request stays valid for this call
 * until on_end has been called (or on_data stopped the delivery): an
 * application that resumes from another thread makes its resume and its
 * on_end exclusive (a mutex, a flag), as with srv_stream_end.
 */
int srv_request_body_resume(srv_request *req);

/* ------------------------------------------------------------------ */
/* multipart/form-data as a stream (0.8)                               */
/* ------------------------------------------------------------------ */

/*
 * A parser for multipart/form-data bodies (RFC 7578, RFC 2046's syntax) that
 * the application feeds with the pieces a SRV_ROUTE_STREAM_BODY route
 * receives (srv_request_body_read's on_data), in order. It is sans-I/O: it
 * reads no socket and answers nothing by itself; it calls back per part -
 * on_part with the part's name, filename and content type, on_data with
 * the part's data in pieces, on_part_end - inside srv_multipart_feed and
 * srv_multipart_finish, on the thread that calls them. Memory is constant:
 * the parser and one part's header block (max_header_bytes, twice), never
 * a part's data; a boundary split across pieces is carried as a count.
 * The syntax is RFC 2046's, strictly: lines end in CRLF (a bare LF is not a
 * line end: in a part's headers it is an error, in data it is data, so a
 * body delimited with bare LFs ends in "the body ends before the final
 * boundary"); the preamble before the first boundary line and the epilogue
 * after the last are ignored; a boundary line may carry spaces and tabs
 * before its CRLF; a delimiter followed by anything else is an error (RFC
 * 2046: the boundary must not occur in a part's data). Each part must have
 * Content-Disposition: form-data with a name; Content-Type and other
 * headers are optional; Content-Transfer-Encoding is not applied (RFC 7578
 * 4.7); a part's data is given as sent (a nested multipart/mixed too).
 * A parser is used by one thread at a time (on a body stream: the engine's
 * I/O thread that calls on_data and on_end, so its callbacks must not block
 * either). docs/API.md ("multipart/form-data") shows the loop.
 */
typedef struct srv_multipart srv_multipart;

/*
 * One part, as on_part sees it. Filled by the library, which only ever
 * appends fields (size says how many this libsrv fills). The strings
 * belong to the parser and stay valid until on_part_end returns (or the
 * parser stops with an error).
 */
typedef struct srv_multipart_part {
    size_t size;    /* sizeof the struct this libsrv fills */
    unsigned index; /* 0 for the body's first part */
    /* Content-Disposition's name parameter: the form field's name, its
     * quoted-string unescaped, not %-decoded. Never NULL (a part without
     * one is an error). */
    const char *name;
    /* Its filename parameter, NULL when absent (a plain field). As the
     * client sent it: quoted-string unescaped, nothing else - it may hold
     * '/', '\', ".." or be an absolute path ("../../etc/passwd",
     * "C:\x\a.txt" sent as "C:\\x\\a.txt"): never use it as a file system
     * path without reducing it to a safe name. filename* (RFC 5987) is
     * ignored, as RFC 7578 4.2 says senders must not use it. */
    const char *filename;
    /* The part's Content-Type value as sent (blanks around it trimmed),
     * NULL when absent (RFC 7578: text/plain then). */
    const char *content_type;
} srv_multipart_part;

/* A callback returns 0 to go on; any other value (a negative number, e.g.
 * an SRV_E... code of the application's) stops the parser: no callback
 * runs again, and srv_multipart_feed / _finish return that value. */
typedef int (*srv_multipart_part_fn)(srv_multipart *mp, const srv_multipart_part *part,
                                     void *ctx);
/* `len` (> 0) more bytes of the current part's data; valid during the call
 * only (it may point into the fed piece or into the parser). */
typedef int (*srv_multipart_data_fn)(srv_multipart *mp, const void *data, size_t len,
                                     void *ctx);
/* The current part's data is complete (its next boundary line was read). */
typedef int (*srv_multipart_end_fn)(srv_multipart *mp, void *ctx);

typedef struct srv_multipart_opts {
    size_t size; /* set by srv_multipart_opts_init */
    srv_multipart_part_fn on_part;    /* required */
    srv_multipart_data_fn on_data;    /* required */
    srv_multipart_end_fn on_part_end; /* optional (NULL) */
    void *ctx;                        /* passed to the callbacks; default NULL */
    /* Parts at most; one more is SRV_ETOOBIG. Default 128; at least 1. (A
     * body of no part - only the final boundary line, what a browser sends
     * for a form without fields - is valid.) */
    unsigned max_parts;
    /* A part's header block (its lines and the empty line ending it) at
     * most; more is SRV_ETOOBIG. Default 8192; 64 to 1 MiB. The parser
     * allocates twice this once. */
    size_t max_header_bytes;
} srv_multipart_opts;

/* srv_multipart_opts_init: the defaults above and the size. Any thread. */
void srv_multipart_opts_init_sized(srv_multipart_opts *opts, size_t size);
#define srv_multipart_opts_init(opts) srv_multipart_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_multipart_new: a parser for a body whose Content-Type is
 * `content_type` (the request's, e.g. srv_request_header(req,
 * "Content-Type")): "multipart/form-data" (case-insensitive) with a
 * boundary parameter, as a token or a quoted-string ("boundary=\"a b\""),
 * of 1 to 70 of RFC 2046's characters (letters, digits, "'()+_,-./:=?" and
 * space, not last). The options are copied (the struct is not kept).
 * Stores the parser in *out (the caller owns it: srv_multipart_free) and
 * returns 0; SRV_EBOUNDARY for a NULL or other Content-Type, no boundary,
 * two, or one that breaks those rules (answer 400: see
 * srv_multipart_respond_error); SRV_EINVAL for NULL out or opts, an opts
 * not set by srv_multipart_opts_init, no on_part or on_data, or a limit out
 * of range; SRV_ENOMEM. Callbacks are never called by this function. Any
 * thread.
 */
int srv_multipart_new(const char *content_type, const srv_multipart_opts *opts,
                      srv_multipart **out);

/*
 * srv_multipart_feed: parse the next `len` bytes of the body (all of them:
 * nothing is kept for a later call beyond the count of a boundary's bytes
 * seen), calling back for what they complete. Returns 0; SRV_EMULTIPART for
 * malformed input (srv_multipart_error says what); SRV_ETOOBIG past
 * max_parts or max_header_bytes; a callback's non-zero return; SRV_EINVAL
 * for NULL mp, or NULL data with len > 0. After an error the parser is
 * stopped: every later feed and finish return the same value and no
 * callback runs, not even on_part_end for the part that was open. Bytes
 * after the final boundary are ignored (0). A body stream's on_data may
 * feed its piece, then return SRV_EAGAIN to pause: the piece was consumed.
 */
int srv_multipart_feed(srv_multipart *mp, const void *data, size_t len);

/*
 * srv_multipart_finish: the body ended (on_end's status 0). Returns 0 when
 * the final boundary ("--boundary--") was read; SRV_EMULTIPART when it was
 * not (a truncated body: the open part gets no on_part_end; also a body
 * with no boundary line at all); the parser's earlier error if it had
 * stopped; SRV_EINVAL for NULL. Calls no callback.
 */
int srv_multipart_finish(srv_multipart *mp);

/*
 * srv_multipart_header: the value of the current part's header `name`
 * (case-insensitive; blanks around it trimmed), NULL when the part has
 * none or outside a part. Valid from on_part until on_part_end returns.
 * The parser's thread.
 */
const char *srv_multipart_header(const srv_multipart *mp, const char *name);

/*
 * srv_multipart_error: what stopped the parser, in English ("the body ends
 * before the final boundary", "a part's headers are over
 * max_header_bytes", "stopped by on_data"...), "" when nothing did. Owned
 * by the parser, a static string.
 */
const char *srv_multipart_error(const srv_multipart *mp);

/*
 * srv_multipart_respond_error: answer `req` for a parser error `err`, in
 * place of srv_respond: 400 for SRV_EMULTIPART, SRV_EBOUNDARY and
 * SRV_ETOOBIG (the client's body is at fault), with the text "400 Bad
 * Request: multipart/form-data: " and what was wrong
 * (srv_multipart_error of mp when it has that error, else srv_strerror)
 * - or, with srv_config.error_format JSON or an error body writer, the
 * library's usual error body; 500 for any other code (a callback's own).
 * mp may be NULL (srv_multipart_new failed). Returns what srv_respond
 * returns; the request is libsrv's again afterwards. The connection closes
 * after the answer when the body was not read to its end (as for any
 * early answer). Any thread that may answer the request.
 */
int srv_multipart_respond_error(srv_request *req, const srv_multipart *mp, int err);

/* srv_multipart_free: free the parser (NULL: nothing). No callback runs. */
void srv_multipart_free(srv_multipart *mp);

/* ------------------------------------------------------------------ */
/* Streamed responses                                                  */
/* ------------------------------------------------------------------ */

/*
 * A streamed response is started in place of srv_respond and written piece
 * by piece, from any thread, without holding a worker: the handler returns
 * after srv_stream_start and the pieces come from timers (srv_after), other
 * threads or the srv_stream_on_writable callback. Framing is the core's:
 * a known length is sent as Content-Length; otherwise HTTP/1.1 uses chunked
 * encoding, HTTP/1.0 a body delimited by the connection's close, HTTP/2
 * DATA frames. Memory is bounded: each stream buffers at most
 * srv_config.stream_buffer_bytes the client has not taken yet; a write that
 * does not fit is refused with SRV_EAGAIN and nothing is taken.
 * docs/API.md ("Streaming") shows the loop.
 */

/* srv_stream_start's length when it is not known in advance. */
#define SRV_LENGTH_UNKNOWN ((int64_t)-1)

/*
 * srv_stream_start: answer `req` with `status` (200-599), an optional
 * Content-Type and the headers set with srv_set_header, and a body written
 * later with srv_stream_write. `length` is the body's exact length
 * (Content-Length) or SRV_LENGTH_UNKNOWN. On success *out is the stream and
 * `req` belongs to libsrv (as after srv_respond: do not touch it); the
 * caller owns the stream until srv_stream_end, which it must call exactly
 * once, whatever happens to the client. HEAD, 204 and 304 send no body:
 * the head goes out at once and the request is done when it is written
 * (the connection serves its next request); every write then returns
 * SRV_ENOBODY, so a producer learns at its first write that nothing it
 * makes will be sent, and stops: it ends the stream (srv_stream_end
 * returns 0) without generating the body.
 * Any thread, like srv_respond. Returns 0; SRV_ETIMEDOUT when the core had
 * already answered (timeout or stop: req is released as by srv_respond);
 * SRV_ECLOSED when the client already went away (req is released);
 * SRV_EINVAL for a NULL argument, a bad status or content type (nothing is
 * sent: answer with srv_respond); SRV_EENGINE when the engine lacks
 * SRV_CAP_STREAM (nothing is sent: answer with srv_respond); SRV_ENOMEM
 * when the stream's state or the content type could not be allocated
 * (nothing is sent: answer with srv_respond).
 */
int srv_stream_start(srv_request *req, int status, const char *content_type, int64_t length,
                     srv_stream **out);

/*
 * srv_stream_write: copy `len` bytes into the stream's buffer for the
 * engine to send. Any thread, not concurrently with another call on the
 * same stream. Returns 0 (all taken); SRV_EAGAIN when the buffer lacks room
 * (nothing taken: ask srv_stream_on_writable); SRV_ENOBODY when the answer
 * has no body (HEAD, 204, 304: stop and call srv_stream_end, which returns
 * 0); SRV_ECLOSED once the client
 * went away, the send deadline (header_timeout_ms without progress, at
 * least 1 s) passed, or the server's stop cut the stream: stop writing and
 * call srv_stream_end; SRV_ETOOBIG when len exceeds stream_buffer_bytes
 * (split it); SRV_EINVAL for NULL data with len > 0, a write after
 * srv_stream_end, or one going past the length given to srv_stream_start.
 */
int srv_stream_write(srv_stream *stream, const void *data, size_t len);

/*
 * srv_stream_on_writable: call fn(stream, arg) once, on a worker thread,
 * as soon as the write refused last with SRV_EAGAIN would fit (or half the
 * buffer when none was refused; at once if it already does) or the stream
 * is closed (the next write then says SRV_ECLOSED), or at once when the
 * answer has no body (the next write says SRV_ENOBODY). A later call
 * replaces a callback that has not run yet. The callback may write, end the
 * stream and register itself again. A callback that has not started when
 * srv_stream_end is called is never called.
 * Returns 0; SRV_EINVAL for a NULL argument or after srv_stream_end.
 */
int srv_stream_on_writable(srv_stream *stream, void (*fn)(srv_stream *stream, void *arg),
                           void *arg);

/*
 * srv_stream_end: the body is complete. The engine sends what is buffered,
 * then the end (HTTP/1.1 chunked: the last chunk; HTTP/1.0: the close;
 * HTTP/2: END_STREAM). The stream belongs to libsrv again: do not touch it.
 * Any thread. Returns 0; SRV_ECLOSED when the stream had been closed (the
 * client did not get the whole body); SRV_EINVAL for NULL, or when fewer
 * bytes than a known length were written (the connection is then closed,
 * so the client sees a short body, not a wrong one).
 */
int srv_stream_end(srv_stream *stream);

/*
 * srv_stream_close_on_stop: end this stream cleanly when a graceful stop
 * begins (srv_server_stop, at the moment srv_server_on_stop's callback
 * runs): what was written is sent, then the end (the last chunk, HTTP/2
 * END_STREAM, or HTTP/1.0's close), so the client sees a complete answer
 * and may reconnect elsewhere, and the stop does not wait the grace for
 * it. For streams without a natural end: server-sent events, long polls.
 * The application's next write then returns SRV_ECLOSED, a pending
 * srv_stream_on_writable callback runs at once, and srv_stream_end (which
 * it must still call) returns 0. Any thread, not concurrently with another
 * call on the same stream. Returns 0; SRV_EINVAL for NULL, after
 * srv_stream_end, or for a stream of known length (ending it early would
 * cut it).
 */
int srv_stream_close_on_stop(srv_stream *stream);

/*
 * Server-sent events (text/event-stream) on top of a stream.
 * srv_sse_start: srv_stream_start(req, 200, "text/event-stream", unknown
 * length) with "Cache-Control: no-cache" (and the same returns).
 * srv_sse_send: one event - "event: E", "id: I" (each when not NULL) and one
 * "data: " line per line of `data` (split at LF, CRLF or CR), then a blank
 * line - in one srv_stream_write (same returns; SRV_EINVAL also when event
 * or id holds CR or LF).
 * srv_sse_keepalive: the comment ": keep-alive" (proxies and clients keep
 * the connection), e.g. every 15 s from srv_after. Same returns.
 */
int srv_sse_start(srv_request *req, srv_stream **out);
int srv_sse_send(srv_stream *stream, const char *event, const char *id, const char *data);
int srv_sse_keepalive(srv_stream *stream);

/* ------------------------------------------------------------------ */
/* Timers                                                              */
/* ------------------------------------------------------------------ */

/*
 * srv_after: call fn(arg) once on the server's timer thread about `ms`
 * milliseconds from now - what an async handler uses instead of sleep().
 * Keep fn short; it may call srv_respond. Any thread, while the server runs
 * and while srv_server_stop is in progress (so in-flight async requests can
 * finish). Returns 0; SRV_ESTATE before srv_server_start or once
 * srv_server_stop has returned; SRV_EINVAL for a NULL fn; SRV_ENOMEM.
 * On error fn is never called.
 * Callbacks not yet fired at srv_server_free are dropped, never called.
 */
int srv_after(srv_server *srv, unsigned ms, void (*fn)(void *arg), void *arg);

/* ------------------------------------------------------------------ */
/* Path patterns (0.4)                                                 */
/* ------------------------------------------------------------------ */

/*
 * A route's path (srv_route_opts.path) is a pattern of '/'-separated
 * segments, matched against the request's path segment by segment:
 * - a literal segment ("users") matches that exact segment once it is
 *   %-decoded ("/caf%C3%A9" matches the literal "/café");
 * - "{name}" matches any one non-empty segment and captures it %-decoded
 *   ("%2F" decodes to '/' inside the value: it is data, never a separator);
 * - "{*name}", only as the last segment, matches the rest of the path,
 *   possibly empty, %-decoded ("/static/{*path}" matches "/static/" with
 *   path "" and "/static/css/a.css" with path "css/a.css"; not "/static").
 * A segment is either a literal or exactly one {...}: "file-{id}" is
 * refused, and so are empty or repeated names. Names: letters, digits, '_'.
 * Trailing slashes are significant: "/users" and "/users/" are different
 * patterns and paths, and "/users/{id}" does not match "/users/".
 *
 * Precedence, whatever the registration order: the patterns that match
 * are compared segment by segment from the left, and at the first segment
 * where they differ a literal beats a {param}, which beats a {*wildcard}.
 * The first pattern in that order that routes the request's method (or GET
 * for HEAD) answers; when patterns match but none routes the method the
 * answer is 405 with Allow listing the methods of every matching pattern
 * (plus HEAD with GET, and OPTIONS); when none matches, 404. An OPTIONS
 * request no pattern routes is answered 204 with that Allow (a CORS
 * preflight is the CORS filter's: srv_cors_add). Two registrations of the
 * same method with the same pattern shape ("/u/{id}" and "/u/{name}") are
 * refused with SRV_EEXIST.
 *
 * The core refuses with 400 (and closes) a request whose path holds an
 * invalid %-escape ("%zz", "%4"), a "." or ".." segment, sent as is or
 * %-encoded ("%2e%2e"), a NUL (%00), or a {*wildcard} value holding a "."
 * or ".." segment once decoded ("..%2F" included): such paths are never
 * routed, so a handler never sees one.
 */

/*
 * srv_request_param: the %-decoded value of the {name} or {*name} segment
 * of the request's route pattern, NULL when the pattern has no such name
 * (or no route matched). Owned by the request: valid while the request is
 * (until srv_respond returns). Any thread that holds the request.
 */
const char *srv_request_param(const srv_request *req, const char *name);

/*
 * srv_request_param_count / srv_request_param_at: the route's parameters
 * in pattern order. param_at returns 0 and sets *name and *value (either
 * may be NULL to skip), or SRV_EINVAL past the end. Same lifetime.
 */
size_t srv_request_param_count(const srv_request *req);
int srv_request_param_at(const srv_request *req, size_t index, const char **name,
                         const char **value);

/*
 * srv_request_route: the pattern of the route that matched, as registered
 * ("/users/{id}"), or NULL when none did (a filter sees the request before
 * the core answers 404/405). Owned by the server, valid for its life. Any
 * thread that holds the request.
 */
const char *srv_request_route(const srv_request *req);

/* ------------------------------------------------------------------ */
/* Filters and response hooks (0.4)                                    */
/* ------------------------------------------------------------------ */

/* What a filter returns. */
enum {
    /* Let the request through to the next filter, then the handler (or the
     * core's 404/405/OPTIONS answer). The filter must not have answered. */
    SRV_FILTER_NEXT = 0,
    /* The filter took the request: it answered with srv_respond, or will
     * later from any thread (as an async handler may). Nothing after it
     * runs. */
    SRV_FILTER_DONE = 1
};

/*
 * A filter runs before the handler, in its request's chain. Where it is
 * attached (srv_filter_opts) decides which requests have it:
 * - global (no prefix, no route): every request, routed or not;
 * - a path prefix (srv_filter_opts.prefix): every request whose path lies
 *   under it, routed or not (so a 404 under "/api/" is the filter's
 *   first: it does not tell an unauthenticated client which paths exist);
 * - a route (srv_filter_opts.route_method and route_path): the requests
 *   that route serves (a GET route's HEAD requests too), not its 404 or
 *   405 neighbours.
 * A request's chain runs in this order: the global filters in registration
 * order, then the prefix filters whose prefix covers the path, the
 * shortest prefix first (equal ones in registration order), then the
 * route's filters in registration order, then the handler (or the core's
 * 404/405/OPTIONS answer). The first filter that answers ends the chain:
 * nothing after it runs. Filters have no after-the-handler step, so there
 * is no reverse order to keep; the response hooks (srv_response_hook_add)
 * run once, before every filter.
 * A filter runs after the path was checked and looked up, so
 * srv_request_param and srv_request_route work, and before the core's
 * 404/405/OPTIONS answers. It may set response headers with srv_set_header
 * (they go on whatever answer the request gets: the handler's, another
 * filter's, the core's 404/405/OPTIONS) and return SRV_FILTER_NEXT, or
 * answer (e.g. 401) and return SRV_FILTER_DONE.
 * Threads: a filter registered SRV_FILTER_NONBLOCKING runs on the I/O
 * thread that parsed the request as long as every filter before it in the
 * request's chain is non-blocking too; a blocking filter sends the request to a
 * worker, where it and every later filter and the handler run. A
 * non-blocking filter must not block (srv_config.nonblocking_warn_ms
 * counts it like a handler).
 */
typedef int (*srv_filter_fn)(srv_request *req, void *ctx);

/* Filter flags (srv_filter_opts.flags). */
enum {
    /* The filter never blocks: it may run on the I/O thread. */
    SRV_FILTER_NONBLOCKING = 1u << 0
};

typedef struct srv_filter_opts {
    size_t size;          /* set by srv_filter_opts_init */
    srv_filter_fn filter; /* required */
    void *ctx;            /* passed to filter; default NULL */
    unsigned flags;       /* SRV_FILTER_* bits; default 0 (may block) */
    /* ---- fields above: 0.4; below: added in 0.8 ---- */
    /* Non-NULL: the filter runs only for paths under this prefix, a '/'
     * and literal segments ("/api/", "/api" alike; "/" covers every path).
     * Segment boundaries count: "/api/" covers "/api", "/api/" and
     * "/api/x/y", not "/apix". It is matched the way the router matches
     * literal segments, against the request's path split at its raw '/'
     * and each segment %-decoded: "/%61pi/x" is under "/api", while
     * "/api%2Fx" is not (an encoded slash is data inside one segment, and
     * no route "/api/..." serves it either). Paths with dot segments
     * ("/x/../api", "%2e%2e") are answered 400 before any filter. An
     * empty segment ("/a//b"), a dot segment or '{', '}', '?', '#' in the
     * prefix is SRV_EINVAL. Compared case-sensitively. Copied. Default
     * NULL. */
    const char *prefix;
    /* Both non-NULL: the filter runs only for requests the route
     * registered (before this call) with that method and pattern serves;
     * the pattern is compared by shape, as SRV_EEXIST compares routes
     * ("/u/{x}" names the route "/u/{id}"). Not with prefix. Copied (not
     * kept). Default NULL. */
    const char *route_method;
    const char *route_path;
} srv_filter_opts;

/* srv_filter_opts_init: zero *opts and set its size. Any thread. */
void srv_filter_opts_init_sized(srv_filter_opts *opts, size_t size);
#define srv_filter_opts_init(opts) srv_filter_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_filter_add: attach the filter `opts` describes - globally, to a path
 * prefix or to a route (see srv_filter_fn for the order) - (the struct is
 * not kept). Only before srv_server_start, from the controlling thread.
 * Returns 0; SRV_EINVAL (NULL opts or filter, a size it cannot trust,
 * unknown flags, a bad prefix, prefix together with a route, only one of
 * route_method and route_path), SRV_ENOROUTE (no route registered with
 * that method and pattern), SRV_ESTATE once started, SRV_ENOMEM.
 */
int srv_filter_add(srv_server *srv, const srv_filter_opts *opts);

/*
 * A response hook adds headers (srv_set_header) to every response of a
 * request. It runs once per request, when the request is dispatched and
 * before any filter, on the dispatching thread (the I/O thread): it must not block and must not answer. The headers
 * it sets go out with every answer once they ran: the application's
 * (handlers, filters), the core's routing answers (404, 405, the automatic
 * OPTIONS 204), its 408/413/503s to a request being served; and to a request
 * the core refuses before dispatching it, with its head whole (413 over
 * max_body_bytes, 417, 501, 505), they run then, on the engine's thread. Not
 * with the answers to a head that could not be read (400/414/431 to
 * malformed input), the 400 for a refused path, nor a 503 to a request still
 * queued for a worker (max_queued, request_timeout_ms: its hooks would have
 * run on the worker). The same holds for the CORS filter's Access-Control-*
 * headers (srv_cors_add); other filters' headers go with the application's
 * answers only. Typical use: security headers (X-Content-Type-Options,
 * Strict-Transport-Security).
 */
typedef void (*srv_response_hook_fn)(srv_request *req, void *ctx);

/*
 * srv_response_hook_add: add a hook; hooks run in registration order.
 * Only before srv_server_start, from the controlling thread. Returns 0;
 * SRV_EINVAL (NULL fn), SRV_ESTATE once started, SRV_ENOMEM.
 */
int srv_response_hook_add(srv_server *srv, srv_response_hook_fn fn, void *ctx);

/* ------------------------------------------------------------------ */
/* CORS (0.4): a ready filter                                          */
/* ------------------------------------------------------------------ */

/*
 * Cross-origin resource sharing, as browsers check it (Fetch standard).
 * Lists are comma-separated, blanks around items ignored; the strings are
 * copied by srv_cors_add.
 */
typedef struct srv_cors_opts {
    size_t size; /* set by srv_cors_opts_init */
    /* Origins allowed ("https://app.example.com, http://localhost:3000"),
     * compared exactly (scheme, host and port), or "*" for any (then
     * Access-Control-Allow-Origin is "*", or the request's origin with
     * allow_credentials). Required. */
    const char *allowed_origins;
    /* Methods a preflight may ask for. Default "GET, HEAD, POST". */
    const char *allowed_methods;
    /* Request headers a preflight may ask for (case-insensitive), or "*"
     * for any (answered by echoing the request's list). Default "*". */
    const char *allowed_headers;
    /* Response headers the browser lets scripts read
     * (Access-Control-Expose-Headers). Default NULL (none). */
    const char *exposed_headers;
    /* Non-zero: Access-Control-Allow-Credentials: true (cookies, HTTP
     * auth). Default 0. */
    int allow_credentials;
    /* Access-Control-Max-Age of preflight answers, in seconds; negative
     * sends none. Default 1800 (Spring's). */
    int max_age;
} srv_cors_opts;

/* srv_cors_opts_init: set *opts to the defaults above and its size. Any
 * thread. */
void srv_cors_opts_init_sized(srv_cors_opts *opts, size_t size);
#define srv_cors_opts_init(opts) srv_cors_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_cors_add: append a non-blocking CORS filter to the chain (register it
 * before filters that answer early, such as authentication, so that their
 * 401 carries the CORS headers a browser needs to read it). What it does,
 * for every request:
 * - always adds "Vary: Origin" (the answer depends on it);
 * - a preflight (OPTIONS with Origin and Access-Control-Request-Method) is
 *   answered here, whatever the routes: 204 with Access-Control-Allow-Origin,
 *   -Allow-Methods, -Allow-Headers, -Allow-Credentials (when set), -Max-Age
 *   and Vary: Origin, Access-Control-Request-Method,
 *   Access-Control-Request-Headers; 403 when the origin, the method or a
 *   requested header is not allowed;
 * - any other request with an allowed Origin gets Access-Control-Allow-Origin
 *   (and -Allow-Credentials, -Expose-Headers) on its answer and goes on;
 *   with an origin not allowed it goes on without them (the browser then
 *   withholds the answer from the page). These headers also go out with the
 *   core's own errors, as a response hook's do (srv_response_hook_fn), so a
 *   page can read a 413.
 * Only before srv_server_start, from the controlling thread (the filter then
 * runs on the threads srv_filter_fn describes, as a non-blocking filter).
 * Returns 0; SRV_EINVAL (no allowed_origins,
 * "*" among other origins, a list item that is not a token or origin, a
 * size it cannot trust), SRV_ESTATE once started, SRV_ENOMEM. The filter's
 * memory is freed with the server.
 */
int srv_cors_add(srv_server *srv, const srv_cors_opts *opts);

/* ------------------------------------------------------------------ */
/* Response compression (0.4)                                          */
/* ------------------------------------------------------------------ */

/*
 * gzip for responses, configured like Spring Boot's server.compression.*:
 * an answer given with srv_respond is compressed when its Content-Type
 * (parameters aside, case-insensitive) is in mime_types, its body has at
 * least min_size bytes, the request's Accept-Encoding accepts gzip (gzip
 * or x-gzip with q > 0, or "*" with q > 0 where gzip is not named; a
 * malformed q refuses; several lines are one list), the application set
 * no Content-Encoding itself, and the status
 * is not 206, 204, 304 or 1xx; it then carries "Content-Encoding: gzip"
 * and its Content-Length is the compressed size. Every answer of a listed
 * type and size gets "Vary: Accept-Encoding", compressed or not. A body
 * that would not shrink is sent as it is. The core's own short answers
 * (404, 503...) are below any sensible min_size. An ETag the application
 * set is sent unchanged: make it weak (W/"...") or vary it by encoding.
 * Static files (srv_static_add) of a listed type and size are compressed
 * too: see there.
 */
typedef struct srv_compression_opts {
    size_t size;            /* set by srv_compression_opts_init */
    /* Non-zero: compress. Default 1 (calling srv_compression_set is the
     * opt-in; 0 turns it off again). */
    int enabled;
    /* Comma-separated types. Default "text/html, text/xml, text/plain,
     * text/css, text/javascript, application/javascript, application/json,
     * application/xml" (Spring's list). Copied. */
    const char *mime_types;
    /* Smallest body compressed, in bytes. Default 2048 (Spring's). */
    size_t min_size;
    /* zlib level 1 (fastest) to 9 (smallest). Default 6. */
    int level;
} srv_compression_opts;

/* srv_compression_opts_init: the defaults above and the size. Any thread. */
void srv_compression_opts_init_sized(srv_compression_opts *opts, size_t size);
#define srv_compression_opts_init(opts) \
    srv_compression_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_compression_set: configure response compression (the struct is not
 * kept; a second call replaces the first). Only before srv_server_start,
 * from the controlling thread; the compression itself then runs inside
 * srv_respond, on whichever thread answers. Returns 0; SRV_EINVAL (a size
 * it cannot trust, no mime_types or an item that is not "type/subtype",
 * a level outside 1-9), SRV_ESTATE once started, SRV_ENOMEM.
 */
int srv_compression_set(srv_server *srv, const srv_compression_opts *opts);

/* ------------------------------------------------------------------ */
/* Static files (0.5)                                                  */
/* ------------------------------------------------------------------ */

/*
 * Serve the files of one directory under a URL prefix. srv_static_add
 * registers a GET route (HEAD follows GET) "PREFIX/{*path}" whose handler,
 * on a worker thread, answers:
 * - a regular file: 200 with Content-Type by extension (html, css, js,
 *   json, txt, svg, png, jpg, gif, webp, ico, wasm, pdf, woff2, xml...;
 *   application/octet-stream otherwise), Content-Length, ETag (strong,
 *   from inode, size and modification time in ns), Last-Modified,
 *   Accept-Ranges: bytes and, with max_age >= 0, Cache-Control: max-age;
 * - If-None-Match (a list, weak comparison, "*") matching the ETag: 304;
 *   without If-None-Match, If-Modified-Since (IMF-fixdate) not older than
 *   the file: 304;
 * - GET with one "Range: bytes=a-b | a- | -n": 206 with Content-Range;
 *   416 when it starts past the end (its Content-Range is RFC 9110's
 *   unsatisfied-range form, "bytes", '*', '/' and the size); If-Range (an
 *   ETag compared strongly, or the exact date of a file changed over a
 *   second ago) that does not match, a Range with several ranges, another
 *   unit or bad syntax: the whole file, 200;
 * - a directory: its index file (PREFIX/dir/ serves dir/index.html); a
 *   directory asked without its trailing slash is redirected (301) to the
 *   slash form, so relative links in the index resolve; no index: 404;
 * - 404 for anything missing, outside the root (a symbolic link leading
 *   out of it, an encoded slash "%2F" in the path, an empty first
 *   segment), not a regular file or directory (fifo, device, socket), and
 *   403 for a file the process may not read. Dot segments ("..",
 *   "%2e%2e") never reach it: the core answers 400 (see "Path patterns").
 * The body is read from the file in pieces into a streamed response
 * (srv_stream_*), never whole into memory, so the engine must have
 * SRV_CAP_STREAM (all built-in engines do).
 * With srv_compression_set on, a file whose type is in its mime_types and
 * whose size is at least its min_size goes gzip'ed to a request whose
 * Accept-Encoding accepts gzip (its rules), with "Content-Encoding: gzip":
 * - a sibling "NAME.gz" that is a regular file inside the root (opened as
 *   the file is: no link out) and not older than the file is sent as it
 *   is, with its Content-Length and ETag "<its own>-gzip";
 * - else a small cached file's gzip'ed bytes (kept with its bytes), with
 *   Content-Length; else the file gzip'ed as it is read, in pieces on a
 *   worker (constant memory; no Content-Length: chunked on HTTP/1.1, the
 *   close ends it on HTTP/1.0); ETag W/"<identity>-gzip" in both cases.
 * Every answer about such a file, gzip'ed or not, carries "Vary:
 * Accept-Encoding"; the gzip form has no Accept-Ranges. If-None-Match
 * gives 304 for the ETag of the form chosen, the identity ETag, or the
 * gzip one when gzip is acceptable (the 304 carries the one that
 * matched). A request with Range is answered from the file as it is
 * (206/416/200), never gzip'ed. HEAD: the GET's headers. NAME.gz asked
 * for itself is an ordinary application/gzip file.
 * Resolution stays inside the root: openat2(RESOLVE_BENEATH) where the
 * kernel has it (Linux 5.6+), else the opened file's path is checked
 * against the root's real path (/proc/self/fd) and refused when outside.
 */
typedef struct srv_static_opts {
    size_t size; /* set by srv_static_opts_init */
    /* URL prefix, starting with '/' ("/static", "/static/" alike; "/"
     * serves at the top). Copied. Required. */
    const char *prefix;
    /* The directory served. Opened by srv_static_add and kept open for the
     * server's life (a directory renamed later is still the one served).
     * Required. */
    const char *root;
    /* The file served for a directory. Default "index.html"; "" or NULL
     * serves none (directories are then 404). Copied; one segment, no
     * '/'. */
    const char *index;
    /* Cache-Control: max-age=N on 200/206/304 answers; negative: no
     * Cache-Control. Default -1. */
    int max_age;
    /* Reserved: 0. */
    unsigned flags;
} srv_static_opts;

/* srv_static_opts_init: the defaults above and the size. Any thread. */
void srv_static_opts_init_sized(srv_static_opts *opts, size_t size);
#define srv_static_opts_init(opts) srv_static_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_static_add: serve opts->root under opts->prefix (the struct is not
 * kept; the strings are copied). Only before srv_server_start, from the
 * controlling thread. The route is an ordinary (worker) route: opening and
 * reading files may block. Returns 0; SRV_EINVAL (NULL or untrusted size,
 * no prefix or root, a prefix that is not a valid literal pattern, an
 * index holding '/', non-zero flags), SRV_ESYS when the root cannot be
 * opened as a directory (reason in srv_server_last_error), SRV_EEXIST when
 * GET is already routed for that pattern, SRV_ESTATE once started,
 * SRV_ENOMEM. The route's memory and the root's descriptor are released
 * by srv_server_free.
 */
int srv_static_add(srv_server *srv, const srv_static_opts *opts);

/* ------------------------------------------------------------------ */
/* WebSocket                                                           */
/* ------------------------------------------------------------------ */

/*
 * A WebSocket route (RFC 6455) answers the opening handshake itself (GET
 * with Upgrade: websocket, Sec-WebSocket-Key and -Version 13; the checks
 * and their answers are below), then carries whole messages both ways
 * until one side closes. The framing (masking, fragments, control frames
 * between fragments, UTF-8 of text messages, close handshake) is the
 * core's, the same on every engine with SRV_CAP_WEBSOCKET.
 *
 * Callbacks: for one socket they never run at once, and always in this
 * order: on_open once (after the 101 is out: the client may see its
 * handshake done first), then on_message and on_writable any number of
 * times, then on_close exactly once (when on_open ran). They run on a
 * worker thread and may block, unless the route is SRV_WS_NONBLOCKING:
 * then on the I/O thread that owns the connection, and they must not
 * block. A socket's next input is not read while its message waits for
 * or runs in on_message, so a slow application holds a client back by
 * TCP, not by memory.
 *
 * The srv_ws handle passed to a callback is valid until on_close returns.
 * To use it past that (from other threads, e.g. a chat room's list), take
 * a reference with srv_ws_ref in a callback and give it back with
 * srv_ws_unref; sending on a closed socket is safe and says SRV_ECLOSED.
 */

/* srv_ws_opts.flags. */
enum {
    /* Run the callbacks (srv_ws_opts.on_*) on the I/O thread: they never
     * block (see srv_handler_fn's SRV_ROUTE_NONBLOCKING). */
    SRV_WS_NONBLOCKING = 1u << 0
};

/* Close codes the core uses (RFC 6455 7.4.1); an application may send
 * 1000, 1001, 1003, 1007-1011 and 3000-4999. */
enum {
    SRV_WS_NORMAL = 1000,       /* done */
    SRV_WS_GOING_AWAY = 1001,   /* the server stops */
    SRV_WS_PROTOCOL = 1002,     /* bad framing: unmasked, bad opcode, ... */
    SRV_WS_NO_STATUS = 1005,    /* on_close: the peer's close had no code */
    SRV_WS_ABNORMAL = 1006,     /* on_close: no close frame (the peer vanished, or
                                 * did not answer pings in time) */
    SRV_WS_BAD_DATA = 1007,     /* a text message that is not UTF-8 */
    SRV_WS_TOO_BIG = 1009       /* a message over max_message_bytes */
};

/* One WebSocket route: what it accepts and the application's callbacks.
 * Initialise with srv_ws_opts_init; fields added later keep their
 * defaults. */
typedef struct srv_ws_opts {
    size_t size;    /* set by srv_ws_opts_init */
    unsigned flags; /* SRV_WS_* bits; default 0 (callbacks on workers) */
    /* The largest message taken, after reassembly of its fragments; one
     * over it closes the socket with 1009 before its payload is read.
     * 0: 65536. */
    uint64_t max_message_bytes;
    /* Bytes of outgoing messages a socket holds that the client has not
     * taken: past it srv_ws_send_* says SRV_EAGAIN. 0: 1 MiB. */
    size_t send_buffer_bytes;
    /* Subprotocols offered, in the server's order of preference,
     * comma-separated ("chat.v2, chat"): the first one the client also
     * asks for is chosen (srv_ws_subprotocol). NULL: none. Copied. */
    const char *subprotocols;
    /* Origins allowed to open a socket (browsers do not apply CORS to
     * WebSocket), comma-separated ("https://a.example, http://b:8080"),
     * compared exactly (case-insensitively); "*" allows any. NULL (the
     * default): the Origin's host must be the request's Host (same origin).
     * A request without Origin (not a browser) is always allowed. A
     * refused Origin is answered 403. Copied. */
    const char *origins;
    /* A ping is sent after this long without input from the client; no
     * input within pong_timeout_ms after it closes the socket (on_close:
     * SRV_WS_ABNORMAL). Time a message spends with the application (input
     * is not read meanwhile) does not count. 0: 30000 and 10000. */
    unsigned ping_interval_ms;
    unsigned pong_timeout_ms;
    /* Optional. After the handshake checks, before the 101: return 0 to
     * accept or an HTTP status (400-599) to refuse (answered with it;
     * headers set with srv_set_header go with the refusal). It may read
     * the request (headers, parameters, srv_request_client_addr). Runs
     * where the callbacks run; `req` is the core's: do not answer it. */
    int (*on_accept)(srv_request *req, void *ctx);
    /* Optional. The socket is open: sends may start. */
    void (*on_open)(srv_ws *ws, void *ctx);
    /* Optional. One whole message; `data` is valid until the callback
     * returns (a text message is valid UTF-8, not NUL-terminated). */
    void (*on_message)(srv_ws *ws, int is_text, const void *data, size_t len, void *ctx);
    /* Optional. The socket is closed: `code` the close code the peer
     * sent (SRV_WS_NO_STATUS when it gave none), the one the server sent
     * first (srv_ws_close, a stop's SRV_WS_GOING_AWAY, an error's 1002,
     * 1007 or 1009), or SRV_WS_ABNORMAL when no close handshake happened;
     * `reason` its text, NUL-terminated (may be empty). The last callback. */
    void (*on_close)(srv_ws *ws, int code, const char *reason, void *ctx);
    /* Optional. The send refused last with SRV_EAGAIN would fit now.
     * Called once per refusal (not after the socket began closing). */
    void (*on_writable)(srv_ws *ws, void *ctx);
    void *ctx; /* passed to every callback; default NULL */
} srv_ws_opts;

/* srv_ws_opts_init: zero *opts and set its size. Any thread. */
void srv_ws_opts_init_sized(srv_ws_opts *opts, size_t size);
#define srv_ws_opts_init(opts) srv_ws_opts_init_sized((opts), sizeof *(opts))

/*
 * srv_route_ws: serve WebSocket at `path` (a pattern, as srv_route's; the
 * route answers GET, and only handshakes). The handshake's answers: 400
 * when it is not one (no "Upgrade: websocket" or "Connection: upgrade",
 * not HTTP/1.1 GET, a body, no Sec-WebSocket-Version or a
 * Sec-WebSocket-Key that is not 16 bytes in base64), 426 with
 * "Sec-WebSocket-Version: 13" for another version, 403 for a refused
 * Origin, on_accept's status, else 101 and the socket opens. Only before
 * srv_server_start, from the controlling thread; opts and its strings are
 * copied. Returns 0; SRV_EINVAL (NULL or untrusted size, bad path, unknown
 * flags, a subprotocol that is not a token, max_message_bytes over 2^31 -
 * 1); SRV_EENGINE on an engine without SRV_CAP_WEBSOCKET
 * (srv_server_last_error says so); SRV_EEXIST, SRV_ESTATE, SRV_ENOMEM as
 * srv_route_add.
 */
int srv_route_ws(srv_server *srv, const char *path, const srv_ws_opts *opts);

/*
 * srv_ws_send_text / srv_ws_send_binary: queue one message (copied; a
 * text message must be UTF-8, which is not checked). Any thread, including
 * inside the socket's callbacks. Returns 0; SRV_EAGAIN when the socket
 * already holds send_buffer_bytes the client has not taken (nothing
 * queued: on_writable calls back when room comes); SRV_ETOOBIG when len
 * exceeds send_buffer_bytes; SRV_ECLOSED once the socket is closing or
 * closed; SRV_EINVAL for NULL ws, or NULL data with len > 0; SRV_ENOMEM.
 */
int srv_ws_send_text(srv_ws *ws, const char *data, size_t len);
int srv_ws_send_binary(srv_ws *ws, const void *data, size_t len);

/*
 * srv_ws_close: start the close handshake with `code` (1000, 1001, 1003,
 * 1007-1011 or 3000-4999) and `reason` (NULL or at most 123 bytes of
 * UTF-8): what was queued is sent first; the socket closes when the client
 * answers, or after 2 s; on_close then reports `code`. Any thread. Returns
 * 0; SRV_ECLOSED when already closing; SRV_EINVAL for NULL ws, a code or
 * reason outside those.
 */
int srv_ws_close(srv_ws *ws, int code, const char *reason);

/*
 * srv_ws_subprotocol: the subprotocol chosen at the handshake, or NULL.
 * Valid as long as the handle. Any thread.
 */
const char *srv_ws_subprotocol(const srv_ws *ws);

/*
 * srv_ws_set_data / srv_ws_data: one pointer of the application's per
 * socket (e.g. a user name), NULL until set. Not synchronized: set it in
 * on_open, before another thread can see the socket.
 */
void srv_ws_set_data(srv_ws *ws, void *data);
void *srv_ws_data(const srv_ws *ws);

/*
 * srv_ws_ref / srv_ws_unref: keep the handle valid past on_close (see
 * above). srv_ws_ref from a callback (or while holding a reference);
 * srv_ws_unref exactly once per srv_ws_ref, from any thread. NULL: nothing.
 */
void srv_ws_ref(srv_ws *ws);
void srv_ws_unref(srv_ws *ws);

#if defined(SRV_BUILDING) && defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SRV_H */
