/*
 * The core's streamed responses without sockets: a minimal engine that
 * pulls from the core as a connection thread would (the test thread), so
 * the chunk framing, the buffer limit, the writable callback, the kicks,
 * known lengths and the states are checked byte for byte.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "srv_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_request *responded;
    int kicks;
    int writable_calls;
    srv_stream *stream;  /* started by the handler */
    int start_rc;
    int64_t length;      /* the handler's srv_stream_start length */
    const char *method;  /* se_request's method (GET when NULL) */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int se_start(srv_server *srv, void **state)
{
    (void)srv;
    *state = NULL;
    return 0;
}
static void se_respond(void *state, srv_request *req)
{
    (void)state;
    pthread_mutex_lock(&g.mu);
    g.responded = req;
    pthread_mutex_unlock(&g.mu);
}
static void se_kick(void *state, srv_request *req)
{
    (void)state;
    (void)req;
    pthread_mutex_lock(&g.mu);
    g.kicks++;
    pthread_mutex_unlock(&g.mu);
}
static void se_nop(void *state)
{
    (void)state;
}

static const srv_engine se_engine = {
    .version = SRV_ENGINE_VERSION,
    .name = "stream-test",
    .caps = SRV_ENGINE_CAP_STREAM,
    .start = se_start,
    .respond = se_respond,
    .quiesce = se_nop,
    .stop = se_nop,
    .destroy = se_nop,
    .stream_kick = se_kick,
};

static void h_stream(srv_request *req, void *ctx)
{
    (void)ctx;
    g.start_rc = srv_stream_start(req, 200, "text/plain", g.length, &g.stream);
}

static const char *g_log_path; /* se_server's access log (JSON) when set */

static srv_server *se_server(size_t buffer)
{
    srv_config cfg;
    srv_config_init(&cfg);
    if (g_log_path != NULL) {
        cfg.access_log = SRV_ACCESS_LOG_JSON;
        cfg.access_log_path = g_log_path;
    }
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 2;
    cfg.worker_threads_min = 1;
    cfg.stream_buffer_bytes = buffer;
    srv_server *srv = srv_server_new(&se_engine, &cfg);
    assert_non_null(srv);
    srv_route_opts o;
    srv_route_opts_init(&o);
    o.method = "GET";
    o.path = "/s";
    o.handler = h_stream;
    o.flags = SRV_ROUTE_NONBLOCKING; /* runs inside dispatch, on this thread */
    assert_int_equal(srv_route_add(srv, &o), 0);
    assert_int_equal(srv_server_start(srv), 0);
    return srv;
}

/* A complete GET /s in HTTP/1.minor, dispatched: the handler starts the
 * stream inside dispatch. Returns the request (the engine's reference). */
static srv_request *se_request(srv_server *srv, int minor, int64_t length)
{
    g.responded = NULL;
    g.stream = NULL;
    g.kicks = 0;
    g.length = length;
    srv_request *req = srv__request_new(srv, NULL, 0);
    assert_non_null(req);
    const char *m = g.method != NULL ? g.method : "GET";
    assert_int_equal(srv__request_set_method(req, m, strlen(m)), 0);
    assert_int_equal(srv__request_set_target(req, "/s", 2), 0);
    srv__request_set_version(req, 1, minor);
    assert_int_equal(srv__request_add_header(req, "Host", 4, "t", 1), 0);
    assert_int_equal(srv__request_headers_done(req), 0);
    srv__request_dispatch(req);
    assert_int_equal(g.start_rc, 0);
    assert_ptr_equal(g.responded, req);
    assert_true(srv__response_streamed(req));
    return req;
}

/* Pull everything buffered into out (appending), marking it sent. */
static int se_pull(srv_request *req, char *out, size_t *off)
{
    const void *d;
    size_t len;
    int k = srv__stream_pull(req, &d, &len);
    if (k == SRV__STREAM_DATA) {
        memcpy(out + *off, d, len);
        *off += len;
        srv__stream_sent(req, len);
    }
    return k;
}

static void test_chunk_head(void **state)
{
    (void)state;
    char b[20];
    assert_int_equal(srv__chunk_head(5, b), 3);
    assert_string_equal(b, "5\r\n");
    assert_int_equal(srv__chunk_head(500, b), 5);
    assert_string_equal(b, "1f4\r\n");
    assert_int_equal(srv__chunk_head(65536, b), 7);
    assert_string_equal(b, "10000\r\n");
}

/* HTTP/1.1 without a length: the head says chunked, each write is one
 * chunk, the end is the last chunk; a WAIT arms exactly one kick. */
static void test_chunked_framing(void **state)
{
    (void)state;
    srv_server *srv = se_server(4096);
    srv_request *req = se_request(srv, 1, SRV_LENGTH_UNKNOWN);
    size_t hlen;
    const char *head = srv__response_http1_head(req, &hlen);
    assert_non_null(strstr(head, "Transfer-Encoding: chunked\r\n"));
    assert_null(strstr(head, "Content-Length"));

    char out[8192];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_WAIT);
    assert_int_equal(srv_stream_write(g.stream, "hello", 5), 0);
    assert_int_equal(g.kicks, 1);
    char big[500];
    memset(big, 'x', sizeof big);
    assert_int_equal(srv_stream_write(g.stream, big, sizeof big), 0);
    assert_int_equal(g.kicks, 1); /* not waiting any more: no second kick */
    assert_int_equal(srv_stream_write(g.stream, "", 0), 0); /* nothing framed */
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA);
    char want[1024];
    int n = snprintf(want, sizeof want, "5\r\nhello\r\n1f4\r\n%.500s\r\n", big);
    assert_int_equal(off, (size_t)n);
    assert_memory_equal(out, want, (size_t)n);
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_WAIT);
    srv_request *keep = req;
    assert_int_equal(srv_stream_end(g.stream), 0);
    assert_int_equal(g.kicks, 2);
    off = 0;
    assert_int_equal(se_pull(keep, out, &off), SRV__STREAM_DATA);
    assert_int_equal(off, 5);
    assert_memory_equal(out, "0\r\n\r\n", 5);
    assert_int_equal(se_pull(keep, out, &off), SRV__STREAM_END);
    srv__stream_detach(keep);
    srv__request_release(keep);
    srv_server_free(srv);
}

static void on_writable(srv_stream *s, void *arg)
{
    (void)s;
    (void)arg;
    pthread_mutex_lock(&g.mu);
    g.writable_calls++;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

static int wait_writable(int calls)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    pthread_mutex_lock(&g.mu);
    while (g.writable_calls < calls &&
           pthread_cond_timedwait(&g.cv, &g.mu, &ts) == 0) {
    }
    int got = g.writable_calls;
    pthread_mutex_unlock(&g.mu);
    return got;
}

/* The buffer limit: a write that does not fit is refused whole (EAGAIN),
 * one over the limit is ETOOBIG, and on_writable runs once the refused
 * write fits. After the engine lets go, writes say ECLOSED. */
static void test_limit_and_writable(void **state)
{
    (void)state;
    g.writable_calls = 0;
    srv_server *srv = se_server(1024);
    srv_request *req = se_request(srv, 1, SRV_LENGTH_UNKNOWN);
    char piece[1100];
    memset(piece, 'a', sizeof piece);
    assert_int_equal(srv_stream_write(g.stream, piece, 1025), SRV_ETOOBIG);
    assert_int_equal(srv_stream_write(g.stream, piece, 400), 0);
    assert_int_equal(srv_stream_write(g.stream, piece, 400), 0);
    assert_int_equal(srv_stream_write(g.stream, piece, 400), SRV_EAGAIN);
    assert_int_equal(srv_stream_on_writable(g.stream, on_writable, NULL), 0);
    /* Not due: nothing was sent. */
    struct timespec ms20 = {0, 20000000};
    nanosleep(&ms20, NULL);
    assert_int_equal(g.writable_calls, 0);
    char out[4096];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA);
    assert_int_equal(off, 2 * (5 + 400 + 2)); /* "190\r\n" + 400 + "\r\n", twice */
    assert_int_equal(wait_writable(1), 1);
    assert_int_equal(srv_stream_write(g.stream, piece, 400), 0);
    srv__stream_detach(req); /* the client went away */
    assert_int_equal(srv_stream_write(g.stream, piece, 10), SRV_ECLOSED);
    assert_int_equal(srv_stream_end(g.stream), SRV_ECLOSED);
    srv__request_release(req);
    srv_server_free(srv);
}

/* The writable callback of test_head (a worker thread). */
static void head_writable(srv_stream *s, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    g.writable_calls += 10 + (srv_stream_write(s, "x", 1) == SRV_ENOBODY);
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

/* HEAD of a stream: the head is the whole answer. The engine ends at once
 * (no last chunk, no wait for the application), every write says ENOBODY,
 * a writable callback comes at once, a stop after the head leaves it
 * complete and the end says 0. */
static void test_head(void **state)
{
    (void)state;
    srv_server *srv = se_server(4096);
    g.method = "HEAD";
    srv_request *req = se_request(srv, 1, SRV_LENGTH_UNKNOWN);
    g.method = NULL;
    size_t hlen;
    const char *head = srv__response_http1_head(req, &hlen);
    assert_non_null(strstr(head, "HTTP/1.1 200"));
    assert_int_equal(srv__response_keep_alive(req), 1);
    char out[64];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_END);
    assert_int_equal(off, 0);
    srv__stream_detach(req);
    srv__request_release(req);
    assert_int_equal(srv_stream_write(g.stream, "abc", 3), SRV_ENOBODY);
    assert_int_equal(srv_sse_keepalive(g.stream), SRV_ENOBODY);
    g.writable_calls = 0;
    assert_int_equal(srv_stream_on_writable(g.stream, head_writable, NULL), 0);
    pthread_mutex_lock(&g.mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    while (g.writable_calls == 0 && pthread_cond_timedwait(&g.cv, &g.mu, &until) == 0)
        ;
    pthread_mutex_unlock(&g.mu);
    assert_int_equal(g.writable_calls, 11); /* called, and its write said ENOBODY */
    assert_int_equal(srv_server_stop(srv, 0), 0);
    assert_int_equal(srv_stream_end(g.stream), 0);
    srv_server_free(srv);
}

static size_t slurp(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return 0;
    size_t n = fread(buf, 1, cap - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return n;
}

/* The access log and the metrics count what a stream sent, when it ends:
 * nothing at the start, the body bytes (not the chunk framing) of a
 * complete stream, and at most what was sent of a cut one. */
static void test_access_log_counts_sent(void **state)
{
    (void)state;
    char dir[] = "/tmp/srv-stream-log-XXXXXX", path[64], log[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/access.log", dir);
    g_log_path = path;
    srv_server *srv = se_server(4096);
    g_log_path = NULL;
    srv_request *req = se_request(srv, 1, SRV_LENGTH_UNKNOWN);
    assert_int_equal(slurp(path, log, sizeof log), 0); /* not at the start */
    assert_int_equal(srv_stream_write(g.stream, "abc", 3), 0);
    assert_int_equal(srv_stream_write(g.stream, "de", 2), 0);
    char out[256];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA);
    assert_int_equal(srv_stream_end(g.stream), 0);
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA); /* the last chunk */
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_END);
    assert_int_equal(slurp(path, log, sizeof log), 0); /* not before the engine let go */
    srv__stream_detach(req);
    srv__request_release(req);
    assert_true(slurp(path, log, sizeof log) > 0);
    assert_non_null(strstr(log, "\"status\":200,\"bytes\":5,"));

    /* Cut (a known length: bare bytes): 3 bytes sent, 4 still buffered
     * when the engine lets go. Chunked, the buffered framing counts as
     * unsent body too: at most what was sent. */
    req = se_request(srv, 1, 10);
    assert_int_equal(srv_stream_write(g.stream, "abc", 3), 0);
    off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA);
    assert_int_equal(srv_stream_write(g.stream, "defg", 4), 0);
    srv__stream_detach(req);
    srv__request_release(req);
    assert_int_equal(srv_stream_end(g.stream), SRV_ECLOSED);
    slurp(path, log, sizeof log);
    const char *second = strchr(log, '\n');
    assert_non_null(second);
    assert_non_null(strstr(second, "\"status\":200,\"bytes\":3,"));
    srv_server_free(srv);
    unlink(path);
    rmdir(dir);
}

/* A known length: Content-Length, bare bytes (no chunks), a write past it
 * refused, and an end short of it cuts the body. */
static void test_known_length(void **state)
{
    (void)state;
    srv_server *srv = se_server(4096);
    srv_request *req = se_request(srv, 1, 10);
    size_t hlen;
    const char *head = srv__response_http1_head(req, &hlen);
    assert_non_null(strstr(head, "Content-Length: 10\r\n"));
    assert_null(strstr(head, "Transfer-Encoding"));
    assert_int_equal(srv_stream_write(g.stream, "0123456", 7), 0);
    assert_int_equal(srv_stream_write(g.stream, "7890", 4), SRV_EINVAL);
    char out[64];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA);
    assert_memory_equal(out, "0123456", 7);
    assert_int_equal(srv_stream_end(g.stream), SRV_EINVAL); /* 3 bytes short */
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_CUT);
    srv__stream_detach(req);
    srv__request_release(req);
    srv_server_free(srv);
}

/* HTTP/1.0 without a length: no chunks, and the close ends the body. */
static void test_http10(void **state)
{
    (void)state;
    srv_server *srv = se_server(4096);
    srv_request *req = se_request(srv, 0, SRV_LENGTH_UNKNOWN);
    size_t hlen;
    const char *head = srv__response_http1_head(req, &hlen);
    assert_non_null(strstr(head, "HTTP/1.1 200")); /* RFC 9110 6.2: the highest version */
    assert_non_null(strstr(head, "Connection: close\r\n"));
    assert_null(strstr(head, "Transfer-Encoding"));
    assert_null(strstr(head, "Content-Length"));
    assert_int_equal(srv__response_keep_alive(req), 0);
    assert_int_equal(srv_stream_write(g.stream, "abc", 3), 0);
    char out[64];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA);
    assert_int_equal(off, 3);
    assert_int_equal(srv_stream_end(g.stream), 0);
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_END);
    srv__stream_detach(req);
    srv__request_release(req);
    srv_server_free(srv);
}

/* Server-sent events: fields, multi-line data split, the keep-alive comment. */
static void test_sse_format(void **state)
{
    (void)state;
    srv_server *srv = se_server(4096);
    srv_request *req = se_request(srv, 0, SRV_LENGTH_UNKNOWN); /* bare bytes */
    assert_int_equal(srv_sse_send(g.stream, "up", "7", "a\nb\r\nc\rd"), 0);
    assert_int_equal(srv_sse_send(g.stream, NULL, NULL, ""), 0);
    assert_int_equal(srv_sse_keepalive(g.stream), 0);
    assert_int_equal(srv_sse_send(g.stream, "x\ny", NULL, "z"), SRV_EINVAL);
    char out[256];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_DATA);
    const char *want = "event: up\nid: 7\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
                       "data: \n\n: keep-alive\n\n";
    assert_int_equal(off, strlen(want));
    assert_memory_equal(out, want, off);
    assert_int_equal(srv_stream_end(g.stream), 0);
    srv__stream_detach(req);
    srv__request_release(req);
    srv_server_free(srv);
}

/* A stream the application never ends is dropped by srv_server_free (no
 * leak), and stop cuts it: the next write says ECLOSED. */
static void test_stop_cuts(void **state)
{
    (void)state;
    srv_server *srv = se_server(4096);
    srv_request *req = se_request(srv, 1, SRV_LENGTH_UNKNOWN);
    char out[64];
    size_t off = 0;
    assert_int_equal(se_pull(req, out, &off), SRV__STREAM_WAIT);
    srv__stream_detach(req);    /* the engine's stop closes it ... */
    srv__request_release(req);  /* ... and releases it */
    assert_int_equal(srv_server_stop(srv, 0), 0);
    assert_int_equal(srv_stream_write(g.stream, "a", 1), SRV_ECLOSED);
    srv_server_free(srv); /* the application never ended it: dropped here */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_head),      cmocka_unit_test(test_chunked_framing),
        cmocka_unit_test(test_limit_and_writable), cmocka_unit_test(test_known_length),
        cmocka_unit_test(test_http10),          cmocka_unit_test(test_sse_format),
        cmocka_unit_test(test_stop_cuts),       cmocka_unit_test(test_head),
        cmocka_unit_test(test_access_log_counts_sent),
    };
    return cmocka_run_group_tests_name("streamed responses (core)", tests, NULL, NULL);
}
