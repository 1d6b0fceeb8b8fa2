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

/* The next answer on c is /inspect's, with probe=<want> and the X- header names spelled as
 * the request sent them (names=<names>). */
static void expect_probe_names(rc_conn *c, const char *what, const char *want, const char *names)
{
    rc_response r;
    conn_expect(c, what, 0, 200, NULL, &r);
    char line[64], spelled[128];
    snprintf(line, sizeof line, "probe=%s\n", want);
    snprintf(spelled, sizeof spelled, "names=%s\n", names);
    bool ok = strstr(r.body, line) != NULL;
    bool same_case = strstr(r.body, spelled) != NULL;
    if (!ok || !same_case)
        print_error("[%s] expected %s and %s in: %s\n", what, line, spelled, r.body);
    rc_response_free(&r);
    CHECK(ok, "[%s] the answer is another request's", what);
    CHECK(same_case, "[%s] header names not as the client spelled them", what);
}

void test_handoff_heads_stay_paired(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "heads paired");
    /* Pipelined in one write: same target, only a header and its spelling differ (a body in
     * between); more heads than an engine might keep built ahead (h2o keeps 4). */
    conn_send_str(c, "heads paired, pipelined",
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: one\r\n\r\n"
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-PROBE-Header: two\r\nX-a: 1\r\n\r\n"
                  "POST /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: three\r\n"
                  "Content-Length: 3\r\n\r\nabc"
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "x-probe-header: four\r\n\r\n"
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-HEADER: five\r\n\r\n"
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "x-Probe-header: six\r\nX-Zz: 1\r\n\r\n");
    expect_probe_names(c, "pipelined 1 of 6", "one", "X-Probe-Header,");
    expect_probe_names(c, "pipelined 2 of 6", "two", "X-PROBE-Header,X-a,");
    expect_probe_names(c, "pipelined 3 of 6 (with a body)", "three", "X-Probe-Header,");
    expect_probe_names(c, "pipelined 4 of 6", "four", "x-probe-header,");
    expect_probe_names(c, "pipelined 5 of 6", "five", "X-Probe-HEADER,");
    expect_probe_names(c, "pipelined 6 of 6", "six", "x-Probe-header,X-Zz,");
    /* The next head arrives while the request before it is with its handler. */
    conn_send_str(c, "heads paired, behind a slow one", "GET /slow?ms=300 HTTP/1.1\r\n" HOST "\r\n");
    sleep_ms(100);
    conn_send_str(c, "heads paired, behind a slow one",
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: five\r\n\r\n");
    conn_expect(c, "the slow one", 0, 200, "slept", NULL);
    expect_probe_names(c, "the head sent while the slow one ran", "five", "X-Probe-Header,");
    /* A head in two pieces, then one whole. */
    conn_send_str(c, "heads paired, in pieces", "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Pro");
    sleep_ms(50);
    conn_send_str(c, "heads paired, in pieces", "be-Header: six\r\n\r\n");
    expect_probe_names(c, "a head in two pieces", "six", "X-Probe-Header,");
    conn_send_str(c, "heads paired, last",
                  "GET /inspect?a=1 HTTP/1.1\r\n" HOST "X-Probe-Header: seven\r\n\r\n");
    expect_probe_names(c, "a head on its own", "seven", "X-Probe-Header,");
    CHECK(rc_unread(c) == 0, "[heads paired] %zu stray bytes", rc_unread(c));
}

/* Review: two HTTP/1.0 keep-alive heads pipelined in one write, each with a header the h2o
 * guard hides from h2o (Upgrade, Expect: one byte of the name becomes '~' in h2o's input).
 * The guard remembers the hidden bytes of one head only (h1.mask_seq/mask_at), so the first
 * head reaches on_req still masked: its copy no longer matches, on_req falls back to h2o's
 * view (lower-cased names, "~pgrade"). Each request must get its own head as sent. */
void test_handoff_masked_heads_pipelined(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "masked heads");
    conn_send_str(c, "masked heads, pipelined",
                  "GET /inspect?a=1 HTTP/1.0\r\n" HOST "Connection: keep-alive\r\n"
                  "Upgrade: foo\r\nX-Probe-Header: one\r\n\r\n"
                  "GET /inspect?a=1 HTTP/1.0\r\n" HOST "Connection: keep-alive\r\n"
                  "Upgrade: foo\r\nX-Probe-Header: two\r\n\r\n");
    expect_probe_names(c, "masked 1 of 2", "one", "X-Probe-Header,");
    expect_probe_names(c, "masked 2 of 2", "two", "X-Probe-Header,");
}

/* Many heads in one write behind a request still with its handler: far more than an engine
 * might keep copied ahead (h2o's guard holds the rest of a read as bytes once its copies
 * take max_header_bytes, and scans them when it has served those): every one is answered,
 * in order, with its own head as spelled. */
void test_handoff_many_heads_behind_slow(void **state)
{
    fx *f = *state;
    enum { N = 600 };
    rc_conn *c = conn_open(f, "many heads");
    static const char slow[] = "GET /slow?ms=300 HTTP/1.1\r\n" HOST "\r\n";
    size_t cap = sizeof slow + (size_t)N * 96, len = sizeof slow - 1;
    char *all = malloc(cap);
    CHECK(all != NULL, "out of memory");
    memcpy(all, slow, len);
    for (int k = 0; k < N; k++)
        len += (size_t)snprintf(all + len, cap - len, "GET /inspect?a=1 HTTP/1.1\r\n" HOST
                                "%s: %d\r\n\r\n", k % 2 ? "x-PROBE-header" : "X-Probe-Header", k);
    int rc = rc_send(c, all, len, 5000);
    free(all);
    CHECK(rc == RC_OK, "[many heads] cannot send: %s", rc_strerror(rc));
    conn_expect(c, "many heads: the slow one", 0, 200, "slept", NULL);
    for (int k = 0; k < N; k++) {
        char what[64], want[16];
        snprintf(what, sizeof what, "many heads: %d of %d", k + 1, N);
        snprintf(want, sizeof want, "%d", k);
        expect_probe_names(c, what, want, k % 2 ? "x-PROBE-header," : "X-Probe-Header,");
    }
    CHECK(rc_unread(c) == 0, "[many heads] %zu stray bytes", rc_unread(c));
}

/* One echoed body, checked byte for byte. */
static void expect_echo(rc_conn *c, const char *what, const char *want, size_t len)
{
    rc_response r;
    conn_expect(c, what, 0, 200, NULL, &r);
    int same = r.body_len == len && memcmp(r.body, want, len) == 0;
    size_t got = r.body_len;
    rc_response_free(&r);
    CHECK(same, "[%s] the echo differs: %zu bytes, %zu sent", what, got, len);
}

/*
 * Bodies among many pipelined heads, all in one write behind a slow request: what an engine
 * keeps ahead (h2o's guard holds a read's rest as bytes past its copies' budget and scans it
 * again a piece at a time, pieces smaller than these bodies) must give every request its
 * own bytes in order: heads, a 60,000-byte body, a chunked one of 30,000, more heads.
 */
void test_handoff_bodies_among_many_heads(void **state)
{
    fx *f = *state;
    enum { BEFORE = 300, AFTER = 100, BODY = 60000, CHUNK = 10000 };
    const char *what = "bodies among many heads";
    rc_conn *c = conn_open(f, what);
    size_t len = 0;
    char *body = NULL;
    char *all = bodies_among_heads("GET /slow?ms=300 HTTP/1.1\r\n" HOST "\r\n",
                                   "GET /hello HTTP/1.1\r\n" HOST "\r\n", BEFORE, "POST /echo",
                                   BODY, CHUNK, AFTER, NULL, &len, &body);
    int rc = rc_send(c, all, len, 5000);
    free(all);
    CHECK(rc == RC_OK, "[%s] cannot send: %s", what, rc_strerror(rc));
    conn_expect(c, "bodies among many heads: the slow one", 0, 200, "slept", NULL);
    for (int k = 0; k < BEFORE; k++)
        conn_expect(c, "bodies among many heads: a head before", 0, 200, "hello", NULL);
    expect_echo(c, "bodies among many heads: the 60,000-byte body", body, BODY);
    expect_echo(c, "bodies among many heads: the chunked body", body, 3 * CHUNK);
    for (int k = 0; k < AFTER; k++)
        conn_expect(c, "bodies among many heads: a head after", 0, 200, "hello", NULL);
    free(body);
    CHECK(rc_unread(c) == 0, "[%s] %zu stray bytes", what, rc_unread(c));
}
