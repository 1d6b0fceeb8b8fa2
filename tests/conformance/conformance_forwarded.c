/*
 * Trusted proxies on every engine: the client, scheme and host behind a
 * load balancer come from the forwarding headers only when the TCP peer
 * is a trusted proxy (the engine's peer address, IPv4, IPv4-mapped on a
 * dual-stack socket, and IPv6); spoofed headers from anyone else change
 * nothing. The walk itself is tested in tests/unit/test_forwarded.c.
 */
#include "conformance.h"

static void expect_client(fx *f, const char *what, const char *host, const char *want,
                          const char *h1, const char *h2, const char *h3)
{
    http_res r;
    http_do(f, &(http_req){.path = "/client", .host = host, .headers = {h1, h2, h3}}, &r);
    check_http(f, what, &r, 200);
    CHECK(strstr(r.body, want) != NULL, "[%s] want \"%s\", the handler saw \"%s\"", what, want,
          r.body);
    http_res_free(&r);
}

/* No proxy trusted (the default): X-Forwarded-* and Forwarded are the
 * client's word and change nothing. */
void test_forwarded_untrusted(void **state)
{
    fx *f = *state;
    char want[128];
    snprintf(want, sizeof want, "client=127.0.0.1 scheme=%s host=127.0.0.1:%d\n", url_scheme(),
             f->port);
    expect_client(f, "spoofed X-Forwarded-*", NULL, want, "X-Forwarded-For: 6.6.6.6",
                  "X-Forwarded-Proto: gopher", "X-Forwarded-Host: evil.example");
    expect_client(f, "spoofed Forwarded", NULL, want,
                  "Forwarded: for=6.6.6.6;proto=https;host=evil.example", NULL, NULL);
}

/* 127.0.0.1 and ::1 trusted, the server on "::": the chain is walked past
 * them to the client, what the client wrote left of it is ignored. */
void test_forwarded_trusted(void **state)
{
    fx *f = *state;
    expect_client(f, "X-Forwarded-* from 127.0.0.1 (IPv4-mapped on a dual-stack socket)", NULL,
                  "client=203.0.113.5 scheme=https host=shop.example\n",
                  "X-Forwarded-For: 6.6.6.6, 203.0.113.5, ::1",
                  "X-Forwarded-Proto: https", "X-Forwarded-Host: shop.example");
    expect_client(f, "Forwarded from ::1", "[::1]",
                  "client=2001:db8::7 scheme=http host=api.example:8443\n",
                  "Forwarded: for=6.6.6.6;proto=https, for=\"[2001:db8::7]:5000\";proto=http;"
                  "host=\"api.example:8443\"", NULL, NULL);
    char want[128];
    snprintf(want, sizeof want, "client=127.0.0.1 scheme=%s host=127.0.0.1:%d\n", url_scheme(),
             f->port);
    expect_client(f, "no forwarding header from a trusted proxy", NULL, want, NULL, NULL, NULL);
    expect_client(f, "garbage from a trusted proxy", NULL, want,
                  "X-Forwarded-For: 203.0.113.5, <script>", "X-Forwarded-Proto: https", NULL);
}
