/*
 * Response compression (srv_compression_set) through the fake engine:
 * gzip when type, size and Accept-Encoding allow it (the body inflates back
 * to what the handler sent, Content-Length is the compressed size), Vary,
 * q-values, never twice, never for 206, HEAD, incompressible bodies, and
 * the options' checks.
 */
#include "fake_engine.h"
#include "srv_core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

static char text[8000];
static unsigned char noise[8000];

static int setup(void **state)
{
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "Hello, compressible world! "[i % 27];
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < sizeof noise; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise[i] = (unsigned char)x;
    }
    *state = fake_new();
    return 0;
}

static int teardown(void **state)
{
    fake_free(*state);
    return 0;
}

static srv_server *start(fake *f, int enabled)
{
    srv_server *srv = fake_server(f, NULL);
    srv_compression_opts o;
    srv_compression_opts_init(&o);
    assert_int_equal(o.min_size, 2048);
    o.enabled = enabled;
    o.min_size = 1000;
    assert_int_equal(srv_compression_set(srv, &o), 0);
    assert_int_equal(srv_route(srv, "GET", "/r", fake_handler, NULL), 0);
    fake_start(f, NULL);
    return srv;
}

/* GET /r answered with `type` and body[0..len), the request sending
 * Accept-Encoding `ae` (NULL: none). */
static fake_req *get(fake *f, const char *method, const char *ae, const char *type,
                     const void *body, size_t len)
{
    fake_req *r = fake_req_new(f, method, "/r");
    if (ae != NULL) {
        r->headers[r->nheaders][0] = "Accept-Encoding";
        r->headers[r->nheaders++][1] = ae;
    }
    r->content_type = type;
    r->resp_body = body;
    r->resp_len = len;
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    return r;
}

/* r's body is gzip of want[0..len). */
static void check_gzip(const fake_req *r, const void *want, size_t len)
{
    assert_string_equal(fake_resp_header(r, "Content-Encoding"), "gzip");
    assert_int_equal(r->content_length, r->body_out_len);
    assert_true(r->body_out_len < len);
    unsigned char *out = malloc(len + 1);
    assert_non_null(out);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(inflateInit2(&zs, 15 + 16), Z_OK);
    zs.next_in = (Bytef *)r->body_out;
    zs.avail_in = (uInt)r->body_out_len;
    zs.next_out = out;
    zs.avail_out = (uInt)len + 1;
    assert_int_equal(inflate(&zs, Z_FINISH), Z_STREAM_END);
    assert_int_equal(zs.total_out, len);
    inflateEnd(&zs);
    assert_memory_equal(out, want, len);
    free(out);
}

static void check_plain(const fake_req *r, const void *want, size_t len, int vary)
{
    assert_null(fake_resp_header(r, "Content-Encoding"));
    assert_int_equal(r->body_out_len, len);
    assert_memory_equal(r->body_out, want, len);
    if (vary)
        assert_string_equal(fake_resp_header(r, "Vary"), "Accept-Encoding");
    else
        assert_null(fake_resp_header(r, "Vary"));
}

static void test_gzip_when_accepted(void **state)
{
    fake *f = *state;
    start(f, 1);
    fake_req *r = get(f, "GET", "gzip, deflate", "text/plain; charset=utf-8", text, sizeof text);
    check_gzip(r, text, sizeof text);
    assert_string_equal(fake_resp_header(r, "Vary"), "Accept-Encoding");
    check_gzip(get(f, "GET", "*", "application/json", text, sizeof text), text, sizeof text);
    check_gzip(get(f, "GET", "br;q=1, GZIP;q=0.5", "TEXT/HTML", text, sizeof text), text,
               sizeof text);
    check_gzip(get(f, "GET", "gzip;q=0.001", "text/css", text, sizeof text), text, sizeof text);
    /* Not accepted: as sent, but still Vary. */
    check_plain(get(f, "GET", NULL, "text/plain", text, sizeof text), text, sizeof text, 1);
    check_plain(get(f, "GET", "gzip;q=0", "text/plain", text, sizeof text), text, sizeof text, 1);
    check_plain(get(f, "GET", "deflate, br", "text/plain", text, sizeof text), text, sizeof text,
                1);
    check_plain(get(f, "GET", "*;q=0", "text/plain", text, sizeof text), text, sizeof text, 1);
    check_plain(get(f, "GET", "gzip;q=0.000", "text/plain", text, sizeof text), text,
                sizeof text, 1);
    /* Not compressible by type or size: untouched, no Vary. */
    check_plain(get(f, "GET", "gzip", "image/png", text, sizeof text), text, sizeof text, 0);
    check_plain(get(f, "GET", "gzip", NULL, text, sizeof text), text, sizeof text, 0);
    check_plain(get(f, "GET", "gzip", "text/plain", text, 999), text, 999, 0);
    /* Would not shrink: as sent. */
    check_plain(get(f, "GET", "gzip", "text/plain", noise, sizeof noise), noise, sizeof noise, 1);
    /* HEAD: the length a GET would send, no body. */
    r = get(f, "HEAD", "gzip", "text/plain", text, sizeof text);
    assert_string_equal(fake_resp_header(r, "Content-Encoding"), "gzip");
    assert_int_equal(r->body_out_len, 0);
    assert_true(r->content_length > 0 && r->content_length < sizeof text);
    fake_finish(f);
}

static void test_never_twice_nor_206(void **state)
{
    fake *f = *state;
    start(f, 1);
    fake_req *r = fake_req_new(f, "GET", "/r");
    r->headers[r->nheaders][0] = "Accept-Encoding";
    r->headers[r->nheaders++][1] = "gzip";
    r->set_headers[r->nset_headers][0] = "Content-Encoding";
    r->set_headers[r->nset_headers++][1] = "br";
    r->resp_body = text;
    r->resp_len = sizeof text;
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    assert_string_equal(fake_resp_header(r, "Content-Encoding"), "br");
    assert_int_equal(r->body_out_len, sizeof text);

    r = fake_req_new(f, "GET", "/r");
    r->headers[r->nheaders][0] = "Accept-Encoding";
    r->headers[r->nheaders++][1] = "gzip";
    r->status = 206;
    r->resp_body = text;
    r->resp_len = sizeof text;
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 206);
    assert_null(fake_resp_header(r, "Content-Encoding"));
    assert_int_equal(r->body_out_len, sizeof text);
    fake_finish(f);
}

static void test_disabled_and_options(void **state)
{
    fake *f = *state;
    srv_server *srv = fake_server(f, NULL);
    srv_compression_opts o;
    srv_compression_opts_init(&o);
    assert_int_equal(srv_compression_set(NULL, &o), SRV_EINVAL);
    assert_int_equal(srv_compression_set(srv, NULL), SRV_EINVAL);
    o.level = 0;
    assert_int_equal(srv_compression_set(srv, &o), SRV_EINVAL);
    o.level = 10;
    assert_int_equal(srv_compression_set(srv, &o), SRV_EINVAL);
    o.level = 6;
    o.mime_types = "text/plain, nonsense";
    assert_int_equal(srv_compression_set(srv, &o), SRV_EINVAL);
    o.mime_types = " , ";
    assert_int_equal(srv_compression_set(srv, &o), SRV_EINVAL);
    o.mime_types = NULL;
    assert_int_equal(srv_compression_set(srv, &o), SRV_EINVAL);
    o.size = 0;
    assert_int_equal(srv_compression_set(srv, &o), SRV_EINVAL);
    /* On, then off again: the second call replaces the first. */
    srv_compression_opts_init(&o);
    o.min_size = 10;
    assert_int_equal(srv_compression_set(srv, &o), 0);
    o.enabled = 0;
    assert_int_equal(srv_compression_set(srv, &o), 0);
    assert_int_equal(srv_route(srv, "GET", "/r", fake_handler, NULL), 0);
    fake_start(f, NULL);
    assert_int_equal(srv_compression_set(srv, &o), SRV_ESTATE);
    check_plain(get(f, "GET", "gzip", "text/plain", text, sizeof text), text, sizeof text, 0);
    fake_finish(f);
}

/* srv__accept_encoding_gzip, the Accept-Encoding reader static files use
 * too: q-values of gzip (x-gzip) and "*", -1 when not listed. */
static void ae(const char *v, int want_gzip, int want_star)
{
    int g = -1, st = -1;
    srv__accept_encoding_gzip(v, &g, &st);
    if (g != want_gzip || st != want_star)
        fail_msg("\"%s\": gzip %d star %d, want %d %d", v, g, st, want_gzip, want_star);
}

static void test_accept_encoding(void **state)
{
    (void)state;
    ae("gzip", 1000, -1);
    ae("GZip", 1000, -1);
    ae("x-gzip", 1000, -1);
    ae("gzip;q=0.5", 500, -1);
    ae("gzip ; q=0.25 ", 250, -1);
    ae("gzip;Q=1.000", 1000, -1);
    ae("gzip;q=1", 1000, -1);
    ae("gzip;q=0", 0, -1);
    ae("gzip;q=0.", 0, -1);
    ae("gzip;q=0.001", 1, -1);
    ae("gzip;level=1;q=0.3", 300, -1); /* q after another parameter */
    ae("gzip;q=0.3;level=1", 300, -1);
    /* Malformed q: refused, never guessed. */
    ae("gzip;q=", 0, -1);
    ae("gzip;q=1.5", 0, -1);
    ae("gzip;q=1.001", 0, -1);
    ae("gzip;q=0.0001", 0, -1);
    ae("gzip;q=2", 0, -1);
    ae("gzip;q=-1", 0, -1);
    ae("gzip;q=abc", 0, -1);
    ae("gzip q=1", 0, -1);
    ae("*", -1, 1000);
    ae("*;q=0", -1, 0);
    ae("br, *;q=0.1", -1, 100);
    ae("gzip;q=0, *", 0, 1000);
    ae("gzip, gzip;q=0", 0, -1); /* twice: the lower */
    ae("gzip;q=0, gzip", 0, -1);
    ae("", -1, -1);
    ae(",,, ,", -1, -1);
    ae("gzipx, xgzip, gzip-x, \"gzip\", *x", -1, -1);
    ae(";q=1, =, ;;;", -1, -1);
    ae("identity;q=0, deflate", -1, -1);
    /* Two lines add up (the caller's loop). */
    int g = -1, st = -1;
    srv__accept_encoding_gzip("gzip", &g, &st);
    srv__accept_encoding_gzip("gzip;q=0", &g, &st);
    assert_int_equal(g, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_gzip_when_accepted),
        T(test_never_twice_nor_206),
        T(test_disabled_and_options),
        cmocka_unit_test(test_accept_encoding),
#undef T
    };
    return cmocka_run_group_tests_name("compression", tests, NULL, NULL);
}
