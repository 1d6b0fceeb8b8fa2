/*
 * The sans-I/O HTTP/1 request parser (core/http1.c): every input is fed
 * whole, one byte at a time and in 7-byte pieces, and must give the same
 * messages (method, target, body) or the same failure status each way.
 * Covers request-line and header syntax, Content-Length bodies, strict
 * chunked decoding, extensions, trailers and pipelining.
 */
#include "fake_engine.h"
#include "srv_http1.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MAX_MSGS 8

typedef struct result {
    size_t nmsgs;
    char method[MAX_MSGS][16];
    char target[MAX_MSGS][256];
    char body[MAX_MSGS][256];
    size_t body_len[MAX_MSGS];
    int continue_wanted[MAX_MSGS];
    int fail;       /* status of a FAIL, 0 when none */
    int h2_preface;
    int idle_at_end; /* no byte of a further message consumed */
} result;

static srv_server *g_srv;
static fake *g_fake;
/* Piece mode (srv__http1_stream_body after each head): bodies are collected
 * from SRV_HTTP1_BODY events instead of the request. */
static int g_pieces;

static int setup(void **state)
{
    (void)state;
    g_fake = fake_new();
    srv_config cfg;
    fake_config(&cfg);
    cfg.max_header_bytes = 1024;
    cfg.max_uri_bytes = 200;
    cfg.max_body_bytes = 100;
    g_srv = fake_server(g_fake, &cfg);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_free(g_fake);
    g_fake = NULL;
    g_srv = NULL;
    return 0;
}

/* Feed `len` bytes of `in` in pieces of `step` (0: all at once); with
 * `trim`, srv__http1_trim after every feed, as an engine whose request
 * waits calls it: a no-op inside a line, the buffer given back between
 * messages, and the same messages either way. */
static void run_step(const char *in, size_t len, size_t step, int trim, result *r)
{
    memset(r, 0, sizeof *r);
    srv_http1 p;
    srv__http1_init(&p, g_srv);
    srv_request *req = NULL;
    size_t off = 0;
    char pbody[256];
    size_t plen = 0;
    while (off < len || (req && !srv__http1_idle(&p))) {
        size_t n = step == 0 ? len - off : (len - off < step ? len - off : step);
        if (!req)
            req = srv__request_new(g_srv, NULL, 0);
        assert_non_null(req);
        size_t used = 0;
        enum srv_http1_event ev = srv__http1_feed(&p, req, in + off, n, &used);
        assert_true(used <= n);
        off += used;
        if (trim && ev != SRV_HTTP1_FAIL) {
            int between = p.line_len == 0;
            srv__http1_trim(&p);
            if (between)
                assert_null(p.line);
        }
        if (ev == SRV_HTTP1_FAIL) {
            r->fail = srv__http1_status(&p);
            r->h2_preface = p.h2_preface;
            break;
        }
        if (ev == SRV_HTTP1_HEAD_READY) {
            assert_true(r->nmsgs < MAX_MSGS);
            r->continue_wanted[r->nmsgs] =
                srv__http1_body_expected(&p) && srv__request_expects_continue(req);
            if (g_pieces)
                srv__http1_stream_body(&p);
            plen = 0;
            continue;
        }
        if (ev == SRV_HTTP1_BODY) {
            assert_true(g_pieces);
            assert_true(p.piece_len > 0 && plen + p.piece_len <= sizeof pbody);
            assert_true(p.piece >= in + off - used && p.piece + p.piece_len <= in + off);
            memcpy(pbody + plen, p.piece, p.piece_len);
            plen += p.piece_len;
            continue;
        }
        if (ev == SRV_HTTP1_MESSAGE_COMPLETE) {
            assert_true(r->nmsgs < MAX_MSGS);
            size_t k = r->nmsgs++;
            snprintf(r->method[k], sizeof r->method[k], "%s", srv_request_method(req));
            snprintf(r->target[k], sizeof r->target[k], "%s", srv_request_target(req));
            size_t bl = 0;
            const void *b = srv_request_body(req, &bl);
            if (g_pieces) { /* nothing appended to the request */
                assert_int_equal(bl, 0);
                b = pbody;
                bl = plen;
            }
            assert_true(bl < sizeof r->body[k]);
            if (bl)
                memcpy(r->body[k], b, bl);
            r->body_len[k] = bl;
            srv__request_release(req);
            req = NULL;
            continue;
        }
        /* NEED_MORE: everything given was consumed. */
        assert_int_equal(used, n);
        if (off == len)
            break;
    }
    r->idle_at_end = srv__http1_idle(&p);
    if (req)
        srv__request_release(req);
    srv__http1_free(&p);
}

/* Run whole, byte by byte, in 7-byte pieces and in 3-byte pieces with a
 * trim after each; all four must agree. */
static void run(const char *in, size_t len, result *r)
{
    result one, seven, trimmed;
    run_step(in, len, 0, 0, r);
    run_step(in, len, 1, 0, &one);
    run_step(in, len, 7, 0, &seven);
    run_step(in, len, 3, 1, &trimmed);
    const result *other[] = {&one, &seven, &trimmed};
    static const char *const name[] = {"1", "7", "3 (trimmed)"};
    for (size_t k = 0; k < 3; k++) {
        const result *o = other[k];
        if (o->fail != r->fail || o->nmsgs != r->nmsgs)
            fail_msg("pieces of %s give %zu messages / fail %d, whole gives %zu / %d",
                     name[k], o->nmsgs, o->fail, r->nmsgs, r->fail);
        if (o->idle_at_end != r->idle_at_end)
            fail_msg("pieces of %s end %s, whole ends %s", name[k],
                     o->idle_at_end ? "idle" : "in a message", r->idle_at_end ? "idle" : "in a message");
        for (size_t i = 0; i < r->nmsgs; i++) {
            assert_string_equal(o->method[i], r->method[i]);
            assert_string_equal(o->target[i], r->target[i]);
            assert_int_equal(o->body_len[i], r->body_len[i]);
            assert_memory_equal(o->body[i], r->body[i], r->body_len[i]);
        }
    }
}

static void run_str(const char *in, result *r)
{
    run(in, strlen(in), r);
}

static void expect_fail(const char *in, int status)
{
    result r;
    run_str(in, &r);
    if (r.fail != status)
        fail_msg("%s\n-> fail %d (%zu messages), want %d", in, r.fail, r.nmsgs, status);
}

#define H "Host: x\r\n"

static void test_simple_and_pipelined(void **state)
{
    (void)state;
    result r;
    run_str("GET /a?x=1 HTTP/1.1\r\n" H "\r\n"
            "HEAD /b HTTP/1.0\r\n\r\n"
            "DELETE /c HTTP/1.1\r\n" H "Content-Length: 0\r\n\r\n", &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 3);
    assert_string_equal(r.method[0], "GET");
    assert_string_equal(r.target[0], "/a?x=1");
    assert_string_equal(r.method[1], "HEAD");
    assert_string_equal(r.method[2], "DELETE");
    assert_int_equal(r.body_len[2], 0);
    assert_true(r.idle_at_end);

    /* Any token is a method (the core routes it). */
    run_str("BREW /pot HTTP/1.1\r\n" H "\r\n", &r);
    assert_int_equal(r.nmsgs, 1);
    assert_string_equal(r.method[0], "BREW");

    /* Empty lines before a request line begin no message (RFC 9112 2.2;
     * some clients send a CRLF after a body): only them is still idle. */
    run_str("POST /p HTTP/1.1\r\n" H "Content-Length: 2\r\n\r\nok\r\n\r\n", &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 1);
    assert_true(r.idle_at_end);
    run_str("\r\n\r\nG", &r);
    assert_int_equal(r.nmsgs, 0);
    assert_false(r.idle_at_end);

    /* A half head is not a message yet. */
    run_str("GET / HTTP/1.1\r\nHost: x\r\n", &r);
    assert_int_equal(r.nmsgs, 0);
    assert_int_equal(r.fail, 0);
    assert_false(r.idle_at_end);
}

static void test_content_length_body(void **state)
{
    (void)state;
    result r;
    run_str("POST /e HTTP/1.1\r\n" H "Content-Length: 5\r\n\r\nhelloGET /n HTTP/1.1\r\n" H "\r\n",
            &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 2);
    assert_int_equal(r.body_len[0], 5);
    assert_memory_equal(r.body[0], "hello", 5);
    assert_string_equal(r.target[1], "/n");

    /* Repeated lengths are refused even when identical (the core's rule,
     * docs/ENGINES.md "Header rules": a proxy may have merged them). */
    expect_fail("POST /e HTTP/1.1\r\n" H "Content-Length: 2\r\nContent-Length: 2\r\n\r\nok", 400);

    expect_fail("POST /e HTTP/1.1\r\n" H "Content-Length: 2\r\nContent-Length: 3\r\n\r\nok", 400);
    expect_fail("POST /e HTTP/1.1\r\n" H "Content-Length: -1\r\n\r\n", 400);
    expect_fail("POST /e HTTP/1.1\r\n" H "Content-Length: 0x5\r\n\r\n", 400);
    expect_fail("POST /e HTTP/1.1\r\n" H "Content-Length: 101\r\n\r\n", 413);
    expect_fail("POST /e HTTP/1.1\r\n" H "Content-Length: 3\r\n"
                "Transfer-Encoding: chunked\r\n\r\n", 400);

    /* Expect: 100-continue is visible at HEAD_READY when a body follows. */
    run_str("POST /e HTTP/1.1\r\n" H "Expect: 100-continue\r\nContent-Length: 1\r\n\r\nx", &r);
    assert_int_equal(r.nmsgs, 1);
    assert_true(r.continue_wanted[0]);
    run_str("GET /e HTTP/1.1\r\n" H "Expect: 100-continue\r\n\r\n", &r);
    assert_false(r.continue_wanted[0]);
}

static void test_chunked(void **state)
{
    (void)state;
    result r;
    run_str("POST /e HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"
            "5\r\nhello\r\n"
            "a;name=value;flag;q=\"quo\\\"ted\" ; x = y\r\n0123456789\r\n"
            "0\r\nX-Trailer: yes\r\nX-Other: 2\r\n\r\n"
            "GET /after HTTP/1.1\r\n" H "\r\n", &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 2);
    assert_int_equal(r.body_len[0], 15);
    assert_memory_equal(r.body[0], "hello0123456789", 15);
    assert_string_equal(r.target[1], "/after");

    /* Upper-case hex, leading zeros, an empty body. */
    run_str("POST /e HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"
            "0A\r\nabcdefghij\r\n000\r\n\r\n", &r);
    assert_int_equal(r.nmsgs, 1);
    assert_int_equal(r.body_len[0], 10);
    run_str("POST /e HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", &r);
    assert_int_equal(r.nmsgs, 1);
    assert_int_equal(r.body_len[0], 0);

    /* Trailing whitespace after the coding: RFC-legal, but servers read it
     * differently (smuggling), so refused. Leading OWS is ordinary. */
    expect_fail("POST /e HTTP/1.1\r\n" H "Transfer-Encoding: chunked \r\n\r\n2\r\nAB\r\n0\r\n\r\n",
                400);
    expect_fail("POST /e HTTP/1.1\r\n" H "transfer-encoding: chunked\t\r\n\r\n0\r\n\r\n", 400);
    run_str("POST /e HTTP/1.1\r\n" H "Transfer-Encoding:   chunked\r\n\r\n2\r\nAB\r\n0\r\n\r\n", &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 1);
    assert_memory_equal(r.body[0], "AB", 2);
    expect_fail("POST /e HTTP/1.1\r\n" H "Transfer-Encoding: gzip, chunked\r\n\r\n", 501);
}

/* The framing headers are found whatever their case (the header check
 * looks at a name's first letter before comparing it), and the hostile
 * mixes are refused in every spelling. */
static void test_framing_names_any_case(void **state)
{
    (void)state;
    result r;
    run_str("POST /e HTTP/1.1\r\nhOST: x\r\ncONTENT-lENGTH: 2\r\n\r\nokGET /n HTTP/1.1\r\n"
            "HOST: x\r\n\r\n",
            &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 2);
    assert_int_equal(r.body_len[0], 2);
    assert_memory_equal(r.body[0], "ok", 2);
    assert_string_equal(r.target[1], "/n");
    run_str("POST /e HTTP/1.1\r\n" H "tRANSFER-eNCODING: chunked\r\n\r\n2\r\nAB\r\n0\r\n\r\n", &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 1);
    assert_memory_equal(r.body[0], "AB", 2);
    /* smuggling: both framings, a repeated length or Host, in other cases */
    expect_fail("POST /e HTTP/1.1\r\n" H "TRANSFER-ENCODING: chunked\r\ncontent-length: 2\r\n\r\n", 400);
    expect_fail("POST /e HTTP/1.1\r\n" H "content-length: 2\r\nCONTENT-LENGTH: 2\r\n\r\nok", 400);
    expect_fail("GET / HTTP/1.1\r\nhost: x\r\nHOST: y\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\nX-Host: x\r\n\r\n", 400); /* no Host at all */
    expect_fail("POST /e HTTP/1.1\r\n" H "EXPECT: 200-ok\r\n\r\n", 417);
    expect_fail("POST /e HTTP/1.1\r\n" H "tRANSFER-eNCODING: gzip\r\n\r\n", 501);
    /* names that share a first letter are not taken for the framing ones */
    run_str("GET /c HTTP/1.1\r\n" H "Content-Type: x\r\nTE: trailers\r\nHost-X: 1\r\n"
            "Ex: 1\r\n\r\n",
            &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 1);
    assert_int_equal(r.body_len[0], 0);
}

#define CHUNKED_HEAD "POST /e HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"

static void test_chunked_framing_errors(void **state)
{
    (void)state;
    /* Data where the CRLF after the chunk belongs. */
    expect_fail(CHUNKED_HEAD "2\r\nABXY0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2\r\nAB\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2\r\nAB\rX0\r\n\r\n", 400);
    /* A bare LF in a chunk extension, in a size line, in the last chunk. */
    expect_fail(CHUNKED_HEAD "2;a\nb\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2;a=\"x\ny\"\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2\r\nAB\r\n0\n\r\n", 400);
    /* Only hex digits: no 0x, no sign, no leading space, not empty. */
    expect_fail(CHUNKED_HEAD "0x2\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "+2\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "-2\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD " 2\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "g\r\n", 400);
    /* A size that overflows 64 bits; one that does not but exceeds the
     * body limit. */
    expect_fail(CHUNKED_HEAD "1FFFFFFFFFFFFFFFF\r\nA", 400);
    expect_fail(CHUNKED_HEAD "FFFFFFFFFFFFFFFF\r\nA", 413);
    /* Bodies over max_body_bytes (100) in pieces. */
    expect_fail(CHUNKED_HEAD "40\r\n" "0123456789012345678901234567890123456789012345678901234567890123"
                "\r\n40\r\n" "0123456789012345678901234567890123456789012345678901234567890123"
                "\r\n0\r\n\r\n", 413);
    /* Extension syntax. */
    expect_fail(CHUNKED_HEAD "2;\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2;a=\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2;a=\"open\r\nAB\r\n0\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "2;a\x01\r\nAB\r\n0\r\n\r\n", 400);
    /* Trailers: the same syntax as header fields. */
    expect_fail(CHUNKED_HEAD "0\r\nNo colon\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "0\r\nX: a\r\n folded\r\n\r\n", 400);
    expect_fail(CHUNKED_HEAD "0\r\nX: a\nY: b\r\n\r\n", 400);
}

static void test_chunked_bounds(void **state)
{
    (void)state;
    /* Extensions and trailers share max_header_bytes (1024 here). */
    size_t n = 100 * 1024;
    char *in = malloc(n + 256);
    assert_non_null(in);
    int k = snprintf(in, 256, "%s2;e=", CHUNKED_HEAD);
    memset(in + k, 'x', n);
    memcpy(in + k + n, "\r\nAB\r\n0\r\n\r\n", 12);
    result r;
    run_step(in, (size_t)k + n + 11, 0, 0, &r);
    assert_int_equal(r.fail, 431);
    run_step(in, (size_t)k + n + 11, 1, 0, &r);
    assert_int_equal(r.fail, 431);

    /* 20 KB of trailers. */
    k = snprintf(in, 256, "%s0\r\n", CHUNKED_HEAD);
    size_t off = (size_t)k;
    for (int i = 0; i < 1000; i++)
        off += (size_t)snprintf(in + off, 64, "X-T%d: abcdefghij\r\n", i);
    memcpy(in + off, "\r\n", 2);
    run_step(in, off + 2, 0, 0, &r);
    assert_int_equal(r.fail, 431);
    run_step(in, off + 2, 3, 0, &r);
    assert_int_equal(r.fail, 431);
    free(in);

    /* Small ones pass. */
    run_str(CHUNKED_HEAD "2;a=b\r\nAB\r\n0\r\nX-T: 1\r\n\r\n", &r);
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 1);
}

/* Piece mode gives the same de-chunked bodies as events, the same framing
 * failures, and no max_body_bytes of its own (the engine applies the
 * route's limit through the core). */
static void test_piece_mode(void **state)
{
    (void)state;
    static const char *const inputs[] = {
        "POST /a HTTP/1.1\r\n" H "Content-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n" H "\r\n",
        "POST /a HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"
        "3;x=y\r\nabc\r\n4\r\ndefg\r\n0\r\nT: v\r\n\r\nGET /b HTTP/1.1\r\n" H "\r\n",
        "GET /a HTTP/1.1\r\n" H "\r\n",
        "POST /a HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n2\r\nABXY0\r\n\r\n",
        "POST /a HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n0x2\r\nAB\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        result whole, pieces;
        g_pieces = 0;
        run_str(inputs[i], &whole);
        g_pieces = 1;
        run_str(inputs[i], &pieces);
        g_pieces = 0;
        assert_int_equal(pieces.fail, whole.fail);
        assert_int_equal(pieces.nmsgs, whole.nmsgs);
        for (size_t k = 0; k < whole.nmsgs; k++) {
            assert_int_equal(pieces.body_len[k], whole.body_len[k]);
            assert_memory_equal(pieces.body[k], whole.body[k], whole.body_len[k]);
        }
    }
    /* 150 bytes, over this server's max_body_bytes (100): whole, 413; in
     * pieces the parser leaves the limit to the engine. */
    char big[512];
    char body[151];
    memset(body, 'z', 150);
    body[150] = '\0';
    snprintf(big, sizeof big, "POST /a HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"
             "96\r\n%s\r\n0\r\n\r\n", body);
    result r;
    expect_fail(big, 413);
    g_pieces = 1;
    run_str(big, &r);
    g_pieces = 0;
    assert_int_equal(r.fail, 0);
    assert_int_equal(r.nmsgs, 1);
    assert_int_equal(r.body_len[0], 150);
}

static void test_request_line(void **state)
{
    (void)state;
    result r;
    /* Empty lines before a request line are skipped, any number of them
     * within max_header_bytes; past it 431, as for a head. */
    run_str("\r\n\r\nGET / HTTP/1.1\r\n" H "\r\n", &r);
    assert_int_equal(r.nmsgs, 1);
    run_str("\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n" H "\r\n", &r);
    assert_int_equal(r.nmsgs, 1);
    for (size_t lines = 512; lines <= 513; lines++) { /* max_header_bytes 1024 here */
        size_t n = 2 * lines;
        char *many = malloc(n + 64);
        assert_non_null(many);
        for (size_t k = 0; k < n; k += 2)
            memcpy(many + k, "\r\n", 2);
        strcpy(many + n, "GET / HTTP/1.1\r\n" H "\r\n");
        if (lines == 512) {
            run_str(many, &r);
            assert_int_equal(r.nmsgs, 1);
        } else {
            expect_fail(many, 431);
        }
        free(many);
    }
    expect_fail("\nGET / HTTP/1.1\r\n" H "\r\n", 400);

    expect_fail("GET  / HTTP/1.1\r\n" H "\r\n", 400);
    expect_fail("GET /  HTTP/1.1\r\n" H "\r\n", 400);
    expect_fail("GET / HTTP/1.1 \r\n" H "\r\n", 400);
    expect_fail(" GET / HTTP/1.1\r\n" H "\r\n", 400);
    expect_fail("GET /\r\n\r\n", 400);         /* HTTP/0.9 */
    expect_fail("GET / HTTP/1.10\r\n\r\n", 400);
    expect_fail("GET / HTTP/1\r\n\r\n", 400);
    expect_fail("GET / http/1.1\r\n\r\n", 400);
    expect_fail("GET /a\x01 HTTP/1.1\r\n\r\n", 400);
    expect_fail("GE(T / HTTP/1.1\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\n" H "\r\n", 400);   /* bare LF */
    expect_fail("GET / HTTP/1.1\rX\r\n\r\n", 400);   /* lone CR */
    expect_fail("GET / HTTP/9.9\r\n" H "\r\n", 505);
    expect_fail("GET / HTTP/2.0\r\n" H "\r\n", 505);

    run_str("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", &r);
    assert_int_equal(r.fail, 505);
    assert_true(r.h2_preface);

    /* max_uri_bytes 200: the long target is 414, a long method 400. */
    char line[1024];
    memset(line, 0, sizeof line);
    memcpy(line, "GET /", 5);
    memset(line + 5, 'a', 600);
    expect_fail(line, 414);
    memset(line, 'A', 600);
    expect_fail(line, 400);
}

static void test_header_lines(void **state)
{
    (void)state;
    result r;
    expect_fail("GET / HTTP/1.1\r\n" H "X: a\r\n folded\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H "X: a\r\n\tfolded\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H "X : a\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H "No colon\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H ": empty name\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H "X: a\x01" "b\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H "X: a\x7f\r\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H "X: a\n\r\n", 400);
    expect_fail("GET / HTTP/1.1\r\n" H "X: a\rb\r\n\r\n", 400);
    static const char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
    run(nul, sizeof nul - 1, &r);
    assert_int_equal(r.fail, 400);

    /* HTAB and obs-text are allowed in values. */
    run_str("GET / HTTP/1.1\r\n" H "X: a\tb \xe9\r\n\r\n", &r);
    assert_int_equal(r.nmsgs, 1);

    /* Head over max_header_bytes (1024): 431. */
    char big[2048];
    int k = snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX: ");
    memset(big + k, 'v', 1500);
    memcpy(big + k + 1500, "\r\n\r\n", 5);
    expect_fail(big, 431);
    k = snprintf(big, sizeof big, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 150; i++) /* ~1200 bytes of short fields */
        k += snprintf(big + k, sizeof big - (size_t)k, "X%d: 1\r\n", i);
    snprintf(big + k, sizeof big - (size_t)k, "\r\n");
    expect_fail(big, 431);

    /* The core's head rules apply: unknown coding, bad Expect. */
    expect_fail("POST / HTTP/1.1\r\n" H "Transfer-Encoding: identity\r\n\r\n", 501);
    expect_fail("GET / HTTP/1.1\r\n" H "Expect: tea\r\n\r\n", 417);
    /* An upgrade offer is an ordinary head, checked like any other. */
    expect_fail("GET / HTTP/1.1\r\n" H "Connection: Upgrade, HTTP2-Settings\r\n"
                "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n"
                "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    run_str("GET / HTTP/1.1\r\n" H "Connection: Upgrade\r\nUpgrade: h2c\r\n\r\n", &r);
    assert_int_equal(r.nmsgs, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_simple_and_pipelined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_content_length_body, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_framing_names_any_case, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunked_framing_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunked_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_piece_mode, setup, teardown),
    };
    return cmocka_run_group_tests_name("http1 parser", tests, NULL, NULL);
}
