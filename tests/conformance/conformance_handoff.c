/*
 * libsrv conformance suite, conformance_handoff.c: each request reaches its
 * handler with its own head, however its bytes arrive. Engines may build a
 * request ahead of their library's view of it (h2o's HTTP/1 guard hands the
 * request it checked to on_req); a head must never be paired with another
 * request's: same target, different headers, pipelined, behind a request
 * still with its handler, and in pieces.
 */
#include "conformance.h"

#include <stdbool.h>
#include <string.h>

/* The next answer on c is /inspect's, with probe=<want>. */
static void expect_probe(rc_conn *c, const char *what, const char *want)
{
    rc_response r;
    conn_expect(c, what, 0, 200, NULL, &r);
    char line[64];
    snprintf(line, sizeof line, "probe=%s\n", want);
    bool ok = strstr(r.body, line) != NULL;
    if (!ok)
        print_error("[%s] expected %s in: %s\n", what, line, r.body);
    rc_response_free(&r);
    CHECK(ok, "[%s] the answer is another request's", what);
}

void test_handoff_heads_stay_paired(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "heads paired");
    /* Pipelined in one write: same target, only a header differs (a body in between). */
    conn_send_str(c, "heads paired, pipelined",
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: one\r\n\r\n"
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: two\r\n\r\n"
                  "POST /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: three\r\n"
                  "Content-Length: 3\r\n\r\nabc"
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "x-probe-header: four\r\n\r\n");
    expect_probe(c, "pipelined 1 of 4", "one");
    expect_probe(c, "pipelined 2 of 4", "two");
    expect_probe(c, "pipelined 3 of 4 (with a body)", "three");
    expect_probe(c, "pipelined 4 of 4", "four");
    /* The next head arrives while the request before it is with its handler. */
    conn_send_str(c, "heads paired, behind a slow one", "GET /slow?ms=300 HTTP/1.1\r\n" HOST "\r\n");
    sleep_ms(100);
    conn_send_str(c, "heads paired, behind a slow one",
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: five\r\n\r\n");
    conn_expect(c, "the slow one", 0, 200, "slept", NULL);
    expect_probe(c, "the head sent while the slow one ran", "five");
    /* A head in two pieces, then one whole. */
    conn_send_str(c, "heads paired, in pieces", "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Pro");
    sleep_ms(50);
    conn_send_str(c, "heads paired, in pieces", "be-Header: six\r\n\r\n");
    expect_probe(c, "a head in two pieces", "six");
    conn_send_str(c, "heads paired, last",
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: seven\r\n\r\n");
    expect_probe(c, "a head on its own", "seven");
    CHECK(rc_unread(c) == 0, "[heads paired] %zu stray bytes", rc_unread(c));
}
