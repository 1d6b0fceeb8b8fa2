/*
 * Prometheus metrics on every engine (srv_config.metrics_path,
 * srv_metrics_render): known traffic, then the exposition parsed by the
 * real Prometheus text parser (Debian python3-prometheus-client) and its
 * numbers checked against that traffic.
 */
#include "conformance.h"

#include <unistd.h>

/* Blocking, 300 ms: lands between the 0.25 and 0.5 s buckets. */
static void h_sleep300(srv_request *req, void *ctx)
{
    (void)ctx;
    sleep_ms(300);
    srv_respond(req, 200, "text/plain", "slept", 5);
}

static int status_of(int port, const char *req)
{
    rc_conn c;
    rc_init(&c);
    if (rc_connect(&c, port, 2000) != RC_OK)
        return -1;
    int st = -2;
    rc_response r;
    if (rc_send_str(&c, req, 2000) == RC_OK && rc_read_response(&c, &r, 0, 5000) == RC_OK) {
        st = r.status;
        rc_response_free(&r);
    }
    rc_close(&c);
    return st;
}

/* The checks on the parsed families, in Python (the parser's language). */
static const char check_py[] =
    "import sys\n"
    "from prometheus_client.parser import text_string_to_metric_families\n"
    "text = open(sys.argv[1]).read()\n"
    "fams = {f.name: f for f in text_string_to_metric_families(text)}\n"
    "def val(fam, suffix='', **labels):\n"
    "    for s in fams[fam].samples:\n"
    "        if s.name == fam + suffix and all(s.labels.get(k) == v for k, v in labels.items()):\n"
    "            return s.value\n"
    "    return None\n"
    "engine = sys.argv[2]\n"
    "assert val('srv_info', engine=engine) == 1, 'srv_info'\n"
    "assert val('srv_requests', '_total', route='/hello', method='GET', status='2xx') == 3, "
    "'3 x GET /hello 200: %r' % val('srv_requests', '_total', route='/hello', method='GET', "
    "status='2xx')\n"
    "assert val('srv_requests', '_total', route='', method='', status='4xx') == 3, "
    "'2 x 404 + 1 x 405 unmatched'\n"
    "assert val('srv_request_duration_seconds', '_count', route='/hello', method='GET') == 3\n"
    "assert val('srv_request_duration_seconds', '_bucket', route='/hello', method='GET', "
    "le='+Inf') == 3\n"
    "slow = val('srv_request_duration_seconds', '_bucket', route='/slow', method='GET', le='0.1')\n"
    "slow_all = val('srv_request_duration_seconds', '_bucket', route='/slow', method='GET', "
    "le='1.0')\n"
    "assert slow == 0 and slow_all == 1, '/slow sleeps 300 ms: le=0.1 %r, le=1 %r' % (slow, "
    "slow_all)\n"
    "assert val('srv_request_duration_seconds', '_sum', route='/slow', method='GET') >= 0.25\n"
    "assert fams['srv_request_duration_seconds'].type == 'histogram'\n"
    "assert fams['srv_requests'].type == 'counter' and fams['srv_connections'].type == 'counter'\n"
    "assert val('srv_connections', '_total') >= 8, 'connections_total'\n"
    "assert val('srv_connections_open') >= 1 and val('srv_requests_in_flight') >= 1\n"
    "assert val('srv_workers', state='busy') is not None and val('srv_queue_length') == 0\n"
    "assert val('srv_received_bytes', '_total') > 0 and val('srv_sent_body_bytes', '_total') >= 15\n"
    "print('metrics ok')\n";

void test_metrics(void **state)
{
    (void)state;
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.io_threads = 1;
    cfg.worker_threads = 4;
    cfg.metrics_path = "/metrics";
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv != NULL, "srv_server_new");
    CHECK(srv_route(srv, "GET", "/hello", h_hello, NULL) == 0, "srv_route");
    CHECK(srv_route(srv, "GET", "/slow", h_sleep300, NULL) == 0, "srv_route");
    int rc = srv_server_start(srv);
    CHECK(rc == 0, "start: %s (%s)", srv_strerror(rc), srv_server_last_error(srv));
    int port = srv_server_port(srv);
    for (int i = 0; i < 3; i++)
        CHECK(status_of(port, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n") == 200, "GET /hello");
    for (int i = 0; i < 2; i++)
        CHECK(status_of(port, "GET /nope HTTP/1.1\r\nHost: a\r\n\r\n") == 404, "GET /nope");
    CHECK(status_of(port, "POST /hello HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n") == 405,
          "POST /hello");
    CHECK(status_of(port, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n") == 200, "GET /slow");

    rc_conn c;
    rc_init(&c);
    CHECK(rc_connect(&c, port, 2000) == RC_OK, "connect");
    CHECK(rc_send_str(&c, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 2000) == RC_OK, "send");
    rc_response r;
    rc = rc_read_response(&c, &r, 0, 5000);
    CHECK(rc == RC_OK && r.status == 200, "GET /metrics: %s %d", rc_strerror(rc), r.status);
    const char *ct = rc_header_get(&r, "Content-Type");
    CHECK(ct != NULL && strstr(ct, "version=0.0.4") != NULL, "Content-Type %s", ct ? ct : "-");
    char path[] = "/tmp/srv-metrics-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, r.body, r.body_len) == (ssize_t)r.body_len, "temp file");
    close(fd);
    char pyfile[] = "/tmp/srv-metrics-check-XXXXXX";
    fd = mkstemp(pyfile);
    CHECK(fd >= 0 && write(fd, check_py, sizeof check_py - 1) == (ssize_t)(sizeof check_py - 1),
          "temp file");
    close(fd);
    /* Debian's python3: the parser is a Debian package. */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %s", pyfile, path, g_engine_name);
    int py = system(cmd);
    if (py != 0)
        print_error("the exposition:\n%.*s\n", (int)r.body_len, r.body);
    rc_response_free(&r);
    rc_close(&c);
    unlink(path);
    unlink(pyfile);
    CHECK(py == 0, "the metrics did not parse or did not match the traffic (python3 exit %d)",
          py);

    /* The render function measures like snprintf and cuts cleanly. */
    size_t need = srv_metrics_render(srv, NULL, 0);
    char small[64];
    CHECK(srv_metrics_render(srv, small, sizeof small) >= need && strlen(small) == 63,
          "a cut render: %zu needed", need);
    CHECK(srv_server_stop(srv, 1000) == 0, "stop");
    srv_server_free(srv);
}
