/*
 * libsrv conformance suite: what the topic files share. conformance.c
 * holds the fixture (one server per test), the handlers, the libcurl and
 * raw-socket helpers and main(), which registers every case in its group;
 * conformance_<topic>.c hold the cases. One binary per build, run once per
 * engine (`conformance ENGINE [nonblocking|tls]`).
 */
#ifndef SRV_CONFORMANCE_H
#define SRV_CONFORMANCE_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "srv.h"
#include "raw_client.h"

/* ------------------------------------------------------------------ */
/* Checks with a message saying which case failed                     */
/* ------------------------------------------------------------------ */

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            print_error("%s:%d: check failed: %s\n    ", __FILE__,         \
                        __LINE__, #cond);                                  \
            print_error(__VA_ARGS__);                                      \
            print_error("\n");                                             \
            fail();                                                        \
        }                                                                  \
    } while (0)

#define CHECK_INT(what, got, want)                                         \
    do {                                                                   \
        long long got_ = (long long)(got), want_ = (long long)(want);      \
        if (got_ != want_) {                                               \
            print_error("%s:%d: %s: expected %lld, got %lld\n", __FILE__,  \
                        __LINE__, (what), want_, got_);                    \
            fail();                                                        \
        }                                                                  \
    } while (0)

/* want is never NULL, but gcc -O2 with UBSan's null checks sees a path
 * where it is (-Werror=format-overflow): a function, not `?:` on an array
 * (-Werror=address). */
static inline const char *check_text(const char *s)
{
    return s != NULL ? s : "NULL";
}

#define CHECK_STR(what, got, want)                                         \
    do {                                                                   \
        const char *got_ = (got), *want_ = check_text(want);               \
        if (got_ == NULL || strcmp(got_, want_) != 0) {                    \
            print_error("%s:%d: %s: expected \"%s\", got %s%s%s\n",        \
                        __FILE__, __LINE__, (what), want_,                 \
                        got_ ? "\"" : "", got_ ? got_ : "NULL",            \
                        got_ ? "\"" : "");                                 \
            fail();                                                        \
        }                                                                  \
    } while (0)

/* Which protocol the libcurl cases speak; the group state. */
typedef struct mode {
    int http2;
    const char *name;
} mode;

#define FX_MAX_CONNS 48

#define FX_MAX_THREADS 32

#define FX_MAX_LATE 16

typedef struct fx {
    const mode *m;
    srv_config cfg;
    srv_server *srv;
    int port;
    int stopped;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned entered;   /* handlers of /slow, /late*, /never entered */
    unsigned late_done; /* late srv_respond calls made */
    int late_rc[FX_MAX_LATE];
    pthread_t threads[FX_MAX_THREADS]; /* started by /async/thread */
    size_t nthreads;
    rc_conn conns[FX_MAX_CONNS]; /* raw connections, closed at teardown */
} fx;

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

/* Small limits and timeouts keep the suite fast; see the cases. */
#define T_HEADER_MS 1000
#define T_KEEPALIVE_MS 1000
#define T_REQUEST_MS 5000
#define T_SHORT_REQUEST_MS 500
#define L_HEADER 4096
#define L_URI 1024
#define L_BODY 65536
/* GET /big-answer: that many response headers of that many bytes. */
#define BIG_ANSWER_HEADERS 8
#define BIG_ANSWER_LEN 500

typedef struct http_req {
    const char *method; /* NULL: GET, or POST when a body is given */
    const char *path;   /* already %-encoded */
    const void *body;
    size_t body_len;
    int stream;         /* send the body with an unknown length */
    const char *headers[8];
    int head;           /* HEAD request */
    long timeout_ms;    /* default 5000 */
    const char *host;   /* URL host; NULL: 127.0.0.1 */
} http_req;

typedef struct http_res {
    CURLcode rc;
    char err[CURL_ERROR_SIZE];
    long status;
    long version;      /* CURL_HTTP_VERSION_* actually used */
    long num_connects; /* new connections this transfer made */
    long local_port;
    long long ms;      /* wall time of the transfer */
    char *body;
    size_t body_len;
    rc_response hdr;   /* headers of the final response (hdr.headers) */
    int saw_100;       /* an interim 100 Continue arrived */
} http_res;

enum bad_expect {
    BAD_STATUS,           /* exactly `status`, then close */
    BAD_STATUS_OR_CLOSE,  /* `status` then close, or close without a byte */
    BAD_CLOSE_ONLY,       /* close without a single byte of response */
    BAD_STATUS_FIRST      /* `status` first, then close; stray bytes after
                             it tolerated (libmicrohttpd 0.9.75 writes its
                             own error head twice: docs/ENGINES.md) */
};

#define HOST "Host: conformance\r\n"

#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

/* ------------------------------------------------------------------ */
/* Globals and helpers (conformance.c)                                */
/* ------------------------------------------------------------------ */

extern const char *g_engine_name;
extern const srv_engine *g_engine;
extern int g_nonblocking;
extern int g_timing;
extern const mode MODE_H1, MODE_H2;
/* `conformance ENGINE tls`: the run's certificates (conformance_tls.c
 * makes them in g_tls_dir) and the scheme the libcurl cases use. */
extern int g_tls;
extern char g_tls_dir[64];
extern char g_tls_cert[128], g_tls_key[128], g_tls_cert2[128], g_tls_key2[128];
const char *url_scheme(void);

unsigned engine_caps(void);
/* crash_trace.c: a crash in any thread prints that thread's stack first. */
void conformance_trace_crashes(void);
void h_hello(srv_request *req, void *ctx);
void h_client(srv_request *req, void *ctx);
int fx_wait(fx *f, const unsigned *counter, unsigned target,
            int timeout_ms);
unsigned fx_read(fx *f, const unsigned *counter);
void sleep_ms(long ms);
void sb_add(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *or_null(const char *s);
void http_res_free(http_res *r);
const char *res_header(const http_res *r, const char *name);
CURL *easy_new(const fx *f);
void http_perform(const fx *f, CURL *h, const http_req *q, http_res *r);
void http_do(const fx *f, const http_req *q, http_res *r);
void check_http(const fx *f, const char *what, const http_res *r,
                long status);
void check_body(const fx *f, const char *what, const http_res *r,
                const char *want);
rc_conn *conn_slot(fx *f, const char *what);
rc_conn *conn_open(fx *f, const char *what);
void conn_send(rc_conn *c, const char *what, const void *p, size_t n);
void conn_send_str(rc_conn *c, const char *what, const char *s);
void conn_expect(rc_conn *c, const char *what, int is_head, int status,
                 const char *body, rc_response *out);
void conn_expect_closed(rc_conn *c, const char *what, int timeout_ms);
void still_serving(fx *f, const char *what);
unsigned h2_frame_types(const char *b, size_t len);
void h2_preface_answer(const char *what, const char *b, size_t n);
/* Pipelined heads around a Content-Length and a chunked body (conformance.c). */
char *bodies_among_heads(const char *first, const char *head, int before, const char *line,
                         size_t body_len, size_t chunk, int after, const char *last,
                         size_t *len, char **pattern);
void bad_input(fx *f, const char *what, const void *req, size_t len,
               int status, enum bad_expect how);
void bad_input_str(fx *f, const char *what, const char *req,
                   int status, enum bad_expect how);
srv_stats stats(const fx *f);
int wait_no_inflight(const fx *f, int timeout_ms);
char *pattern(size_t n);
void wait_for_free_slot(const fx *f);
size_t h2_frame(unsigned char *p, unsigned type, unsigned flags,
                unsigned sid, const void *payload, size_t len);

/* Graceful stop run from another thread while a case keeps sending. */
typedef struct partial_stop {
    fx *f;
    unsigned grace_ms;
    int rc;
    long long took;
} partial_stop;
void *partial_stop_run(void *arg); /* a pthread start: srv_server_stop(f->srv, grace_ms) */
/* Read c's answer within timeout_ms (*status 0: none), then join the stop
 * thread t; the rc_read_response result. */
int partial_stop_finish(fx *f, rc_conn *c, pthread_t t, int timeout_ms, int *status);
void partial_stop_expect_overrun(fx *f, rc_conn *c, partial_stop *ps, pthread_t t,
                                 const char *what);
void conn_expect_408_or_nothing(rc_conn *c, const char *what);

/* HPACK "literal header field without indexing", static-table name index < 15. */
size_t hpack_literal(unsigned char *p, unsigned name_index, const char *v);

long h2_scan(const rc_conn *c, unsigned sid, int *got200);
/* The :status of stream sid's first response HEADERS among the frames p[0..n)
 * (final: its first final one, 1xx skipped), decoded with nghttp2's HPACK
 * over every header block in order. 0: none came; -1: undecodable. */
int h2_status_of(const unsigned char *p, size_t n, unsigned sid, int final);
long long trickle(rc_conn *c, const void *first, size_t flen,
                  const void *step, size_t slen, long long limit_ms);

/* ------------------------------------------------------------------ */
/* Cases: conformance_http.c                                          */
/* ------------------------------------------------------------------ */

void test_metrics(void **state);
void test_ready_and_drain(void **state);
void test_ready_checks(void **state);
void test_listen_fd_inherited(void **state);
void test_listen_fd_refused(void **state);
void test_reuse_port(void **state);
void test_forwarded_untrusted(void **state);
void test_forwarded_trusted(void **state);
void test_engine_identity(void **state);
void test_request_accessors(void **state);
void test_ipv6(void **state);
void test_get_query(void **state);
void test_head(void **state);
void test_post_echo(void **state);
void test_not_found(void **state);
void test_method_not_allowed(void **state);
void test_response_headers(void **state);
void test_keepalive_reuse(void **state);
void test_expect_continue(void **state);
void test_async_timer(void **state);
void test_async_thread(void **state);
void test_client_disconnect(void **state);
void test_never_responds(void **state);
void test_concurrent_300(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_lifecycle.c                                     */
/* ------------------------------------------------------------------ */

void test_graceful_stop(void **state);
void test_stop_grace_overrun(void **state);
void test_stop_workers_busy(void **state);
void test_start_out_of_fds(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_raw.c                                           */
/* ------------------------------------------------------------------ */

void test_raw_pipelined(void **state);
void test_raw_extension_methods(void **state);
void test_raw_post(void **state);
void test_raw_chunked_extensions_trailers(void **state);
void test_raw_head(void **state);
void test_raw_expect_continue(void **state);
void test_raw_http10(void **state);
void test_raw_garbage_request_line(void **state);
void test_raw_header_without_colon(void **state);
void test_raw_headers_too_big(void **state);
void test_raw_body_too_big(void **state);
void test_raw_uri_too_long(void **state);
void test_raw_content_length_and_te(void **state);
void test_raw_unknown_transfer_coding(void **state);
void test_raw_bad_content_length(void **state);
void test_raw_bad_chunk_size(void **state);
void test_raw_bad_version(void **state);
void test_raw_nul_and_binary(void **state);
void test_raw_truncated_half_close(void **state);
void test_raw_slow_head(void **state);
void test_raw_slowloris(void **state);
void test_raw_idle_keepalive(void **state);
void test_raw_client_disconnect(void **state);
void test_raw_max_connections(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_header_rules.c                                  */
/* ------------------------------------------------------------------ */

void test_hr_value_controls(void **state);
void test_hr_obs_fold(void **state);
void test_hr_host(void **state);
void test_hr_repeated_content_length(void **state);
void test_hr_expect_http10(void **state);
void test_hr_too_many_headers(void **state);
void test_hr_big_heads(void **state);
void test_hr_big_head_big_answer(void **state);
void test_hr_request_line(void **state);
void test_hr_te_trailing_space(void **state);
void test_hr_chunk_extension_100k(void **state);
void test_hr_trailers_20k(void **state);
void test_hr_body_deadline(void **state);
void test_hr_413_survives_unread_body(void **state);
void test_hr_stop_partial_head_completes(void **state);
void test_hr_stop_partial_head_overruns(void **state);
void test_hr_over_limit_answer(void **state);
void test_hr_empty_lines(void **state);
void test_hr_stop_partial_body_overruns(void **state);
void test_ka_bad_request_line_after_request(void **state);
/* conformance_input_bound.c */
void test_input_bound_pipeline_never_read(void **state);
void test_input_bound_tiny_heads_behind_slow(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_stop.c                                          */
/* ------------------------------------------------------------------ */

void test_h2_stop_body_completes(void **state);
void test_h2_stop_body_overruns(void **state);
void test_stop_request_line_completes(void **state);
void test_stop_request_line_overruns(void **state);
void test_stop_request_line_after_bodies(void **state);
void test_stop_request_line_after_pipelined_body(void **state);
void test_crlf_trickle_times_out(void **state);
void test_stop_idle_after_bodies(void **state);
void test_stop_idle_after_body_crlf(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_slow.c                                          */
/* ------------------------------------------------------------------ */

void test_slow_idle_flood(void **state);
void test_slow_first_head_timeout(void **state);
void test_slow_chunked_body(void **state);
void test_slow_chunk_framing(void **state);
void test_slow_timeout_while_blocking(void **state);
void test_slow_upgrade_ignored(void **state);
void test_slow_h2_preface(void **state);
void test_slow_h2_preface_after_request(void **state);
void test_slow_h2_preface_after_unread_answers(void **state);
void test_slow_stop_arriving(void **state);
void test_slow_refusal_after_request(void **state);
void test_raw_slow_chunked_body(void **state);
void test_raw_pipeline_never_read(void **state);
void test_raw_upgrade_behind_failed_write(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_h2.c                                            */
/* ------------------------------------------------------------------ */

void test_h2_rapid_reset(void **state);
void test_h2_some_resets(void **state);
void test_h2_reset_queued(void **state);
void test_h2_slow_request(void **state);
void test_h2_no_window(void **state);
void test_h2_expect_continue(void **state);
void test_h2_malformed(void **state);
void test_h2_cookie_crumbs(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_framing.c                                       */
/* ------------------------------------------------------------------ */

void test_raw_chunk_size_0x(void **state);
void test_raw_upgrade_head_rules(void **state);
void test_raw_http10_upgrade(void **state);
void test_raw_error_answers_are_the_cores(void **state);
void test_raw_error_answers_after_a_request(void **state);
void test_raw_trickled_first_request(void **state);
void test_raw_max_connections_readable(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_order.c                                         */
/* ------------------------------------------------------------------ */

void test_nb_pipelined_late_answers(void **state);
void test_nb_slow_reader(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_tls.c                                           */
/* ------------------------------------------------------------------ */

int tls_make_certs(void);
/* A small TLS server's configuration: 127.0.0.1, any port, one I/O
 * thread, two workers, certificate and key from the files `cert` and
 * `key` (NULL: none, e.g. for PEM in memory). */
void tls_small_config(srv_config *c, const char *cert, const char *key);
/* A server with `c` that serves GET /hello (h_hello with f0): running,
 * its port in f0->port; or NULL, with *rc and the server's last error
 * (at most cap bytes) in err. */
srv_server *tls_small_start(fx *f0, const srv_config *c, int *rc, char *err, size_t cap);
void tls_remove_certs(void);
void test_engine_identity_tls(void **state);
void test_tls_plain_http(void **state);
void test_tls_stalled_handshake(void **state);
void test_tls_garbage_client_hello(void **state);
void test_tls_old_versions(void **state);
void test_tls_vanish_mid_handshake(void **state);
void test_tls_alpn(void **state);
void test_tls_reload(void **state);
void test_tls_bad_config(void **state);
void test_tls_pem_in_memory(void **state);
void test_tls_sighup_reload(void **state);
void test_tls_refused_by_engine(void **state);
/* conformance_tls_client.c */
void test_tls_stop_idle_after_handshake(void **state);
void test_tls_ciphers_and_min_version(void **state);
/* conformance_tls_wait.c */
void test_tls_handshake_waits_idle(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_tls_raw.c (the raw cases over TLS)              */
/* ------------------------------------------------------------------ */
int tls_raw_group_setup(void **state);
int tls_raw_group_teardown(void **state);
void test_tls_client_certificate(void **state);
void test_tls_signature_schemes(void **state);
/* conformance_tls.c's file helpers: copy (0 when done), read whole (malloc'd). */
int tls_copy_file(const char *from, const char *to);
char *tls_slurp(const char *path);
void test_tls_request_with_finished(void **state);
void test_tls_refused_handshake_stalls(void **state);
/* ------------------------------------------------------------------ */
/* Cases: conformance_stream.c (their own fixture: st_setup/teardown)  */
/* ------------------------------------------------------------------ */

int st_setup(void **state);
int st_teardown(void **state);
void test_stream_events_spread(void **state);
void test_stream_download_64m(void **state);
void test_stream_known_length(void **state);
void test_stream_http10(void **state);
void test_stream_chunked_keepalive(void **state);
void test_stream_vanished_client(void **state);
void test_stream_send_deadline(void **state);
void test_stream_graceful_stop(void **state);
void test_stream_other_thread(void **state);
void test_stream_refused(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_upload.c (their own fixture: up_setup/teardown)  */
/* ------------------------------------------------------------------ */

int up_setup(void **state);
int up_teardown(void **state);
void test_upload_64m_length(void **state);
void test_upload_64m_chunked(void **state);
void test_upload_slow_app(void **state);
void test_upload_multipart_form(void **state);
void test_upload_multipart_bad(void **state);
void test_upload_answer_in_on_data(void **state);
void test_upload_paused_blocks_client(void **state);
void test_upload_expect_continue(void **state);
void test_upload_answer_unread(void **state);
void test_upload_vanished_client(void **state);
void test_upload_route_limit(void **state);
void test_upload_bad_chunk(void **state);
void test_upload_slow_drip(void **state);
void test_upload_graceful_stop(void **state);
void test_upload_refused(void **state);
int up_setup_long(void **state);
void test_upload_http10(void **state);
void test_upload_pipelined_after_body(void **state);
void test_upload_bodies_among_many_heads(void **state);
void test_upload_h2_block_trickle(void **state);
void test_upload_h2_connection_hold(void **state);
void test_upload_h2_frames(void **state);
void test_upload_h2_answer_unread(void **state);
void test_upload_h2_route_limit(void **state);
void test_upload_h2_length_mismatch(void **state);
void test_upload_h2_reset(void **state);
void test_upload_h2_flow_control(void **state);
void test_stream_head(void **state);
void test_stream_head_stops_producer(void **state);
void test_stream_head_releases(void **state);
void test_stream_head_curl(void **state);
void test_stream_stop_ends_idle(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_routing.c (their own server: routing_setup)     */
/* ------------------------------------------------------------------ */

int routing_setup(void **state);
int routing_teardown(void **state);
void test_routing_params(void **state);
void test_routing_405_options(void **state);
void test_routing_filter_401(void **state);
void test_routing_filter_pass(void **state);
void test_routing_hook_on_404(void **state);
void test_routing_core_errors_keep_cors(void **state);
void test_routing_cors_preflight(void **state);
void test_routing_cors_simple(void **state);
void test_routing_hostile_paths(void **state);
void test_routing_gzip(void **state);
void test_routing_scoped_order(void **state);
void test_routing_scoped_prefix_boundary(void **state);
void test_routing_scoped_answer_stops(void **state);
void test_routing_scoped_hostile(void **state);

/* ------------------------------------------------------------------ */
/* Cases: conformance_static.c (their own server and files)           */
/* ------------------------------------------------------------------ */

int static_setup(void **state);
int static_teardown(void **state);
void test_static_get(void **state);
void test_static_cache_hostile(void **state);
void test_static_range_sendfile(void **state);
void test_static_shrink_raw(void **state);
void test_static_answers_while_workers_busy(void **state);
void test_static_big(void **state);
void test_static_conditional(void **state);
void test_static_range(void **state);
void test_static_head(void **state);
void test_static_directories(void **state);
void test_static_refused(void **state);
void test_static_traversal_raw(void **state);
void test_static_add_errors(void **state);
void test_static_parallel(void **state);
void test_static_gzip(void **state);
void test_static_gzip_conditional(void **state);
void test_static_gzip_sibling(void **state);
void test_static_gzip_raw(void **state);

/* ------------------------------------------------------------------ */
/* Memory held and the streams' byte pattern (conformance_memory.c)    */
/* ------------------------------------------------------------------ */

/* What the test process holds, in KB (it hosts the server): the live heap
 * under ASan/TSan, the resident set otherwise; 0 if unknown. */
long held_kb(void);
/* "live heap" or "RSS": what held_kb measures, for messages. */
const char *held_what(void);
/* Byte i of every streamed download and upload (examples/stream has the same). */
unsigned char pattern_byte(uint64_t i);

/* conformance_handoff.c */
void test_handoff_heads_stay_paired(void **state);
void test_handoff_masked_heads_pipelined(void **state);
void test_handoff_many_heads_behind_slow(void **state);
void test_handoff_bodies_among_many_heads(void **state);

/* conformance_burst.c */
void test_burst_while_loop_busy(void **state);
void test_quiesce_while_loop_busy(void **state);

/* conformance_probe.c (issue 33's probe; its own server: probe_setup) */
int probe_setup(void **state);
int probe_teardown(void **state);
void test_probe_many_query_params(void **state);
void test_probe_tls_huge_handshake(void **state);
void test_probe_chunked_bare_lf(void **state);
void test_probe_upload_fin(void **state);
void test_probe_small_differences(void **state);
void test_probe_cookies_forms(void **state);
void test_probe_json_errors(void **state);
void test_probe_error_hook(void **state);

/* conformance_ws.c (WebSocket; its own server: ws_setup) */
int ws_setup(void **state);
int ws_teardown(void **state);
void test_ws_echo(void **state);
void test_ws_handshake_refusals(void **state);
void test_ws_unmasked(void **state);
void test_ws_fragmented(void **state);
void test_ws_bad_utf8(void **state);
void test_ws_too_big(void **state);
void test_ws_client_ping(void **state);
void test_ws_dead_peer(void **state);
void test_ws_vanish(void **state);
void test_ws_slow_application(void **state);
void test_ws_slow_reader(void **state);
void test_ws_stop_going_away(void **state);
void test_ws_refused(void **state);
#define WS_CASE(fn) cmocka_unit_test_setup_teardown(fn, ws_setup, ws_teardown)
#define WS_CASES                                                                              \
    WS_CASE(test_ws_echo), WS_CASE(test_ws_handshake_refusals), WS_CASE(test_ws_unmasked),   \
        WS_CASE(test_ws_fragmented), WS_CASE(test_ws_bad_utf8), WS_CASE(test_ws_too_big),    \
        WS_CASE(test_ws_client_ping), WS_CASE(test_ws_dead_peer), WS_CASE(test_ws_vanish),   \
        WS_CASE(test_ws_slow_reader), WS_CASE(test_ws_stop_going_away),                      \
        WS_CASE(test_ws_slow_application)

#endif /* SRV_CONFORMANCE_H */
