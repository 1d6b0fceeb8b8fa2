/*
 * Response framing as the core hands it to engines: srv__response_http1_head
 * (status line in the request's minor version, Content-Length, Date, Server,
 * Content-Type, Connection), keep-alive rules for HTTP/1.0 and 1.1, bodies
 * dropped for HEAD/204/304, the non-framing header list, srv__status_reason
 * and srv__http_date.
 */
#include "fake_engine.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <cmocka.h>

static int setup(void **state)
{
    *state = fake_new();
    return 0;
}

static int teardown(void **state)
{
    fake_free(*state);
    return 0;
}

/* A started server with GET/POST /r; server_name as given (fake_config's
 * default "libsrv" when use_default). */
static srv_server *start(fake *f, int use_default, const char *server_name)
{
    srv_config cfg;
    fake_config(&cfg);
    if (!use_default)
        cfg.server_name = server_name;
    srv_server *srv = fake_server(f, &cfg);
    assert_int_equal(srv_route(srv, "GET", "/r", fake_handler, NULL), 0);
    assert_int_equal(srv_route(srv, "POST", "/r", fake_handler, NULL), 0);
    fake_start(f, NULL);
    return srv;
}

static fake_req *send_wait(fake_req *r, int want)
{
    fake_send(r);
    int got = fake_wait(r, FAKE_WAIT_MS);
    if (got != want)
        fail_msg("%s %s: status %d, want %d", r->method, r->target, got, want);
    return r;
}

/* Header value from the head, asserting it appears exactly once. */
static const char *one(const fake_req *r, const char *name)
{
    static char buf[256];
    int n = fake_head_header(r, name, buf, sizeof buf);
    if (n != 1)
        fail_msg("header %s appears %d times in:\n%s", name, n, r->head);
    return buf;
}

static int absent(const fake_req *r, const char *name)
{
    return fake_head_header(r, name, NULL, 0) == 0;
}

/* Non-zero when s is an IMF-fixdate within 5 s of now. */
static int is_imf_fixdate_now(const char *s)
{
    if (strlen(s) != 29)
        return 0;
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (end == NULL || *end != '\0')
        return 0;
    time_t t = timegm(&tm);
    /* Re-format: catches a wrong weekday, missing zero padding, etc. */
    char again[64];
    struct tm back;
    gmtime_r(&t, &back);
    strftime(again, sizeof again, "%a, %d %b %Y %H:%M:%S GMT", &back);
    if (strcmp(again, s) != 0)
        return 0;
    time_t now = time(NULL);
    return t >= now - 5 && t <= now + 5;
}

static void expect_status_line(const fake_req *r, const char *line)
{
    size_t n = strlen(line);
    if (r->head == NULL || strncmp(r->head, line, n) != 0 || strncmp(r->head + n, "\r\n", 2))
        fail_msg("status line: want \"%s\", head is:\n%s", line, r->head ? r->head : "(null)");
}

/* ------------------------------------------------------------------ */

static void test_http11_framing(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->resp_body = "hello";
    r->content_type = "text/plain; charset=utf-8";
    send_wait(r, 200);

    expect_status_line(r, "HTTP/1.1 200 OK");
    assert_int_equal(strlen(r->head), r->head_len);
    assert_true(r->head_len >= 4);
    assert_memory_equal(r->head + r->head_len - 4, "\r\n\r\n", 4);
    assert_non_null(strstr(r->head, "\r\n\r\n"));
    assert_ptr_equal(strstr(r->head, "\r\n\r\n"), r->head + r->head_len - 4);
    assert_string_equal(one(r, "Content-Length"), "5");
    assert_string_equal(one(r, "Content-Type"), "text/plain; charset=utf-8");
    assert_string_equal(one(r, "Server"), "libsrv");
    const char *date = one(r, "Date");
    if (!is_imf_fixdate_now(date))
        fail_msg("Date \"%s\" is not a current IMF-fixdate", date);
    assert_true(absent(r, "Transfer-Encoding"));
    /* HTTP/1.1 is persistent by default: no "close". */
    assert_int_equal(r->keep_alive, 1);
    assert_true(absent(r, "Connection") || strcmp(one(r, "Connection"), "keep-alive") == 0);
    assert_string_equal(r->body_out, "hello");
    assert_int_equal(r->body_out_len, 5);
    assert_int_equal(r->content_length, 5);
    assert_true(r->head_stable);
    fake_finish(f);
}

static void test_http10_closes_by_default(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->minor = 0;
    send_wait(r, 200);
    expect_status_line(r, "HTTP/1.1 200 OK"); /* RFC 9110 6.2: the highest version */
    assert_int_equal(r->keep_alive, 0);
    assert_string_equal(one(r, "Connection"), "close");
    assert_string_equal(one(r, "Content-Length"), "2");
    fake_finish(f);
}

static void test_http10_keep_alive(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->minor = 0;
    r->headers[0][0] = "Connection";
    r->headers[0][1] = "Keep-Alive";
    r->nheaders = 1;
    send_wait(r, 200);
    expect_status_line(r, "HTTP/1.1 200 OK"); /* RFC 9110 6.2: the highest version */
    assert_int_equal(r->keep_alive, 1);
    /* A 1.0 client needs to be told the connection stays open. */
    const char *conn = one(r, "Connection");
    if (strcasecmp(conn, "keep-alive") != 0)
        fail_msg("Connection: %s, want keep-alive", conn);
    fake_finish(f);
}

static void test_http11_client_asks_close(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    const char *values[] = {"close", "Close", "foo, close", "Upgrade,CLOSE"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        fake_req *r = fake_req_new(f, "GET", "/r");
        r->headers[0][0] = "Connection";
        r->headers[0][1] = values[i];
        r->nheaders = 1;
        send_wait(r, 200);
        if (r->keep_alive != 0)
            fail_msg("Connection: %s from the client, yet keep-alive", values[i]);
        assert_string_equal(one(r, "Connection"), "close");
    }
    fake_finish(f);
}

static void test_engine_set_close(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->close_in_respond = 1; /* e.g. other connections wait for a worker */
    send_wait(r, 200);
    assert_int_equal(r->keep_alive, 0);
    assert_string_equal(one(r, "Connection"), "close");
    expect_status_line(r, "HTTP/1.1 200 OK");
    fake_finish(f);
}

static void test_errors_close(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    /* Bad input found while reading: srv__request_fail. */
    fake_req *r = fake_req_new(f, "B@D", "/r");
    send_wait(r, 400);
    expect_status_line(r, "HTTP/1.1 400 Bad Request");
    assert_int_equal(r->keep_alive, 0);
    assert_string_equal(one(r, "Connection"), "close");
    assert_true(r->body_out_len > 0); /* a short text body from the core */
    assert_int_equal(atoi(one(r, "Content-Length")), (int)r->body_out_len);

    fake_req *v = fake_req_new(f, "GET", "/r");
    v->minor = 0;
    v->headers[0][0] = "Content-Length";
    v->headers[0][1] = "nope";
    v->nheaders = 1;
    send_wait(v, 400);
    expect_status_line(v, "HTTP/1.1 400 Bad Request");
    assert_int_equal(v->keep_alive, 0);
    assert_string_equal(one(v, "Connection"), "close");
    fake_finish(f);
}

static void test_head_has_length_not_body(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "HEAD", "/r");
    r->resp_body = "twelve bytes";
    send_wait(r, 200);
    assert_int_equal(r->body_out_len, 0);
    assert_int_equal(r->content_length, 12);
    assert_string_equal(one(r, "Content-Length"), "12");
    assert_int_equal(r->keep_alive, 1);
    fake_finish(f);
}

static void test_204_and_304_have_no_body(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->status = 204;
    r->resp_body = "ignored";
    send_wait(r, 204);
    expect_status_line(r, "HTTP/1.1 204 No Content");
    assert_int_equal(r->body_out_len, 0);
    /* RFC 9110 8.6: no Content-Length in a 204. */
    if (!absent(r, "Content-Length"))
        fail_msg("204 with Content-Length: %s", one(r, "Content-Length"));

    fake_req *n = fake_req_new(f, "GET", "/r");
    n->status = 304;
    n->resp_body = "ignored";
    send_wait(n, 304);
    expect_status_line(n, "HTTP/1.1 304 Not Modified");
    assert_int_equal(n->body_out_len, 0);
    fake_finish(f);
}

static void test_server_header(void **state)
{
    fake *f = *state;
    start(f, 0, "unit-test/2.0");
    fake_req *r = send_wait(fake_req_new(f, "GET", "/r"), 200);
    assert_string_equal(one(r, "Server"), "unit-test/2.0");
    assert_string_equal(fake_resp_header(r, "Server"), "unit-test/2.0");
    fake_finish(f);
}

static void test_no_server_header(void **state)
{
    fake *f = *state;
    start(f, 0, NULL);
    fake_req *r = send_wait(fake_req_new(f, "GET", "/r"), 200);
    assert_true(absent(r, "Server"));
    assert_null(fake_resp_header(r, "Server"));
    fake_finish(f);
}

static void test_no_content_type(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->content_type = NULL;
    send_wait(r, 200);
    assert_true(absent(r, "Content-Type"));
    assert_null(fake_resp_header(r, "Content-Type"));
    fake_finish(f);
}

static void test_header_list_and_order(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    fake_req *r = fake_req_new(f, "POST", "/r");
    r->set_headers[0][0] = "X-First";
    r->set_headers[0][1] = "1";
    r->set_headers[1][0] = "X-Second";
    r->set_headers[1][1] = "two words";
    r->set_headers[2][0] = "Set-Cookie";
    r->set_headers[2][1] = "a=1";
    r->set_headers[3][0] = "Set-Cookie";
    r->set_headers[3][1] = "b=2";
    r->nset_headers = 4;
    r->status = 201;
    send_wait(r, 201);
    for (int i = 0; i < 4; i++)
        assert_int_equal(r->set_header_rc[i], 0);
    expect_status_line(r, "HTTP/1.1 201 Created");

    /* The list engines with their own framing use: no framing headers. */
    assert_true(r->header_past_end);
    assert_string_equal(fake_resp_header(r, "X-First"), "1");
    assert_string_equal(fake_resp_header(r, "X-Second"), "two words");
    assert_string_equal(fake_resp_header(r, "Content-Type"), "text/plain");
    assert_string_equal(fake_resp_header(r, "Server"), "libsrv");
    const char *framing[] = {"Content-Length", "Date", "Connection", "Transfer-Encoding"};
    for (size_t i = 0; i < sizeof framing / sizeof framing[0]; i++)
        if (fake_resp_header(r, framing[i]) != NULL)
            fail_msg("%s is in the non-framing header list", framing[i]);
    /* Repeated headers are kept, in order. */
    size_t cookies = 0;
    for (size_t i = 0; i < r->nresp_headers; i++)
        if (strcasecmp(r->resp_hname[i], "Set-Cookie") == 0)
            assert_string_equal(r->resp_hvalue[i], cookies++ ? "b=2" : "a=1");
    assert_int_equal(cookies, 2);
    assert_int_equal(fake_head_header(r, "Set-Cookie", NULL, 0), 2);
    const char *a = strstr(r->head, "X-First: 1\r\n");
    const char *b = strstr(r->head, "X-Second: two words\r\n");
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a < b);
    fake_finish(f);
}

static void test_large_body_length(void **state)
{
    fake *f = *state;
    start(f, 1, NULL);
    enum { N = 100000 };
    char *big = malloc(N + 1);
    assert_non_null(big);
    memset(big, 'z', N);
    big[N] = '\0';
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->resp_body = big;
    send_wait(r, 200);
    assert_string_equal(one(r, "Content-Length"), "100000");
    assert_int_equal(r->body_out_len, N);
    assert_int_equal(r->content_length, N);
    assert_memory_equal(r->body_out, big, N);
    free(big);
    fake_finish(f);
}

static void test_status_reason(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *reason;
    } known[] = {
        {200, "OK"},
        {201, "Created"},
        {204, "No Content"},
        {301, "Moved Permanently"},
        {304, "Not Modified"},
        {400, "Bad Request"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {408, "Request Timeout"},
        {414, "URI Too Long"},
        {417, "Expectation Failed"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {501, "Not Implemented"},
        {503, "Service Unavailable"},
        {505, "HTTP Version Not Supported"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        assert_string_equal(srv__status_reason(known[i].status), known[i].reason);
    /* RFC 9110 renamed 413; either name is right. */
    const char *r413 = srv__status_reason(413);
    assert_true(strcmp(r413, "Content Too Large") == 0 ||
                strcmp(r413, "Payload Too Large") == 0);
    int unknown[] = {0, -1, 99, 299, 600, 1000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        assert_string_equal(srv__status_reason(unknown[i]), "Unknown");
}

static void test_http_date(void **state)
{
    (void)state;
    char d[SRV__HTTP_DATE_SIZE];
    memset(d, 'x', sizeof d);
    srv__http_date(d);
    assert_int_equal(strlen(d), 29);
    if (!is_imf_fixdate_now(d))
        fail_msg("srv__http_date gave \"%s\"", d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_http11_framing),
        T(test_http10_closes_by_default),
        T(test_http10_keep_alive),
        T(test_http11_client_asks_close),
        T(test_engine_set_close),
        T(test_errors_close),
        T(test_head_has_length_not_body),
        T(test_204_and_304_have_no_body),
        T(test_server_header),
        T(test_no_server_header),
        T(test_no_content_type),
        T(test_header_list_and_order),
        T(test_large_body_length),
        T(test_status_reason),
        T(test_http_date),
#undef T
    };
    return cmocka_run_group_tests_name("response", tests, NULL, NULL);
}
