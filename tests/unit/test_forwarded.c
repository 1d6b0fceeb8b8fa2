/*
 * Trusted proxies (core/forwarded.c): the client, scheme and host behind a
 * load balancer, believed only from configured proxies, walking the chain
 * right to left to the first untrusted hop. Spoofing from an untrusted
 * peer, or from the client's side of a trusted proxy, changes nothing.
 */
#include "fake_engine.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

static void start(fake *f, const char *trusted)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.trusted_proxies = trusted;
    fake_server(f, &cfg);
    assert_int_equal(srv_route(f->srv, "GET", "/", fake_handler, NULL), 0);
    fake_start(f, &cfg);
}

typedef struct want {
    const char *client, *scheme, *host;
} want;

/* One request from peer `ip` with the header lines given (name, value,
 * ..., NULL); checks what the handler saw. */
static void expect(fake *f, const char *ip, want w, ...)
{
    va_list ap;
    va_start(ap, w);
    fake_req *r = fake_req_from(f, "/", ip, 40000, ap);
    va_end(ap);
    fake_send(r);
    assert_int_equal(fake_wait(r, FAKE_WAIT_MS), 200);
    if (strcmp(r->client_seen, w.client) != 0 || strcmp(r->scheme_seen, w.scheme) != 0 ||
        (w.host == NULL) != (r->host_seen == NULL) ||
        (w.host != NULL && strcmp(r->host_seen, w.host) != 0))
        fail_msg("from %s: client %s scheme %s host %s; want %s %s %s", ip, r->client_seen,
                 r->scheme_seen, r->host_seen ? r->host_seen : "(none)", w.client, w.scheme,
                 w.host ? w.host : "(none)");
}

/* Nothing trusted: the headers change nothing at all. */
static void test_untrusted_by_default(void **state)
{
    fake *f = *state;
    start(f, NULL);
    expect(f, "127.0.0.1", (want){"127.0.0.1", "http", "fake"}, "X-Forwarded-For", "6.6.6.6",
           "X-Forwarded-Proto", "https", "X-Forwarded-Host", "evil.example", NULL);
    expect(f, "127.0.0.1", (want){"127.0.0.1", "http", "fake"}, "Forwarded",
           "for=6.6.6.6;proto=https;host=evil.example", NULL);
    fake_finish(f);
}

/* A peer outside the trusted blocks: spoofing changes nothing. */
static void test_untrusted_peer_spoofing(void **state)
{
    fake *f = *state;
    start(f, "10.0.0.0/8");
    expect(f, "192.0.2.9", (want){"192.0.2.9", "http", "fake"}, "X-Forwarded-For",
           "10.1.1.1, 6.6.6.6", "X-Forwarded-Proto", "https", NULL);
    expect(f, "11.0.0.1", (want){"11.0.0.1", "http", "fake"}, "Forwarded", "for=6.6.6.6", NULL);
    fake_finish(f);
}

/* X-Forwarded-*: right to left past trusted hops; what the client wrote
 * left of the first untrusted hop is not believed. */
static void test_x_forwarded_chain(void **state)
{
    fake *f = *state;
    start(f, "10.0.0.0/8, 192.168.1.1");
    /* One proxy. */
    expect(f, "10.0.0.5", (want){"203.0.113.7", "https", "shop.example"}, "X-Forwarded-For",
           "203.0.113.7", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "shop.example", NULL);
    /* The client forged a first entry: the trusted proxy appended the real one. */
    expect(f, "10.0.0.5", (want){"203.0.113.7", "http", "fake"}, "X-Forwarded-For",
           "1.2.3.4, 203.0.113.7", NULL);
    /* Two trusted proxies (192.168.1.1 then 10.0.0.5); header lines joined in order. */
    expect(f, "10.0.0.5", (want){"198.51.100.2", "https", "fake"}, "X-Forwarded-For",
           "6.6.6.6, 198.51.100.2", "X-Forwarded-For", "192.168.1.1", "X-Forwarded-Proto",
           "http, https, http", NULL);
    /* Every hop trusted: the leftmost. */
    expect(f, "10.0.0.5", (want){"10.9.9.9", "http", "fake"}, "X-Forwarded-For",
           "10.9.9.9, 192.168.1.1", NULL);
    /* Ports and IPv6 forms. */
    expect(f, "10.0.0.5", (want){"2001:db8::1", "http", "fake"}, "X-Forwarded-For",
           "[2001:db8::1]:5555", NULL);
    expect(f, "10.0.0.5", (want){"203.0.113.8", "http", "fake"}, "X-Forwarded-For",
           "203.0.113.8:1234", NULL);
    /* Garbage where the proxy's entry should be: believe none of it. */
    expect(f, "10.0.0.5", (want){"10.0.0.5", "http", "fake"}, "X-Forwarded-For",
           "not-an-address", "X-Forwarded-Proto", "https", NULL);
    expect(f, "10.0.0.5", (want){"10.0.0.5", "http", "fake"}, "X-Forwarded-For",
           "1.2.3.4.5", NULL);
    /* A proto that is no scheme, a host with a slash or space: ignored. */
    expect(f, "10.0.0.5", (want){"203.0.113.7", "http", "fake"}, "X-Forwarded-For",
           "203.0.113.7", "X-Forwarded-Proto", "gopher", "X-Forwarded-Host", "a/b", NULL);
    fake_finish(f);
}

/* RFC 7239 Forwarded wins over X-Forwarded-*; quoted values, IPv6, ports,
 * "unknown" and obfuscated identifiers. */
static void test_forwarded_header(void **state)
{
    fake *f = *state;
    start(f, "127.0.0.1, ::1");
    expect(f, "127.0.0.1", (want){"192.0.2.60", "https", "api.example"}, "Forwarded",
           "for=192.0.2.60;proto=https;host=api.example;by=203.0.113.43", "X-Forwarded-For",
           "6.6.6.6", NULL);
    expect(f, "127.0.0.1", (want){"2001:db8:cafe::17", "http", "fake"}, "Forwarded",
           "for=\"[2001:db8:cafe::17]:4711\"", NULL);
    expect(f, "127.0.0.1", (want){"198.51.100.17", "https", "fake"}, "Forwarded",
           "for=6.6.6.6;proto=http, for=198.51.100.17;proto=https, for=127.0.0.1", NULL);
    expect(f, "127.0.0.1", (want){"unknown", "http", "fake"}, "Forwarded", "for=unknown", NULL);
    expect(f, "127.0.0.1", (want){"_hidden.1", "http", "fake"}, "Forwarded", "For=_hidden.1",
           NULL);
    /* A quoted comma is data, not an element separator (split there, the
     * second part would have no for= and nothing would be believed); the
     * host it makes is no host name, so the Host header stays. */
    expect(f, "127.0.0.1", (want){"192.0.2.1", "http", "fake"}, "Forwarded",
           "for=192.0.2.1;host=\"a,b\"", NULL);
    /* An element without for=, or garbage: believe none of it. */
    expect(f, "127.0.0.1", (want){"127.0.0.1", "http", "fake"}, "Forwarded", "proto=https",
           NULL);
    expect(f, "127.0.0.1", (want){"127.0.0.1", "http", "fake"}, "Forwarded",
           "for=\"<script>\"", NULL);
    fake_finish(f);
}

/* Long chains (more hops than the walk keeps): the rightmost hops count,
 * so a client padding the left cannot push the proxies' entries out. */
static void test_long_chain(void **state)
{
    fake *f = *state;
    start(f, "10.0.0.0/8");
    char chain[2048] = "", fwd[4096] = "";
    for (int i = 0; i < 100; i++) {
        snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "6.6.6.%d, ", i);
        snprintf(fwd + strlen(fwd), sizeof fwd - strlen(fwd), "for=6.6.6.%d, ", i);
    }
    strcat(chain, "203.0.113.9, 10.0.0.7");
    strcat(fwd, "for=203.0.113.9;proto=https, for=10.0.0.7");
    expect(f, "10.0.0.5", (want){"203.0.113.9", "http", "fake"}, "X-Forwarded-For", chain, NULL);
    expect(f, "10.0.0.5", (want){"203.0.113.9", "https", "fake"}, "Forwarded", fwd, NULL);
    /* Every kept hop trusted: the leftmost kept, a trusted address. */
    chain[0] = '\0';
    for (int i = 0; i < 40; i++)
        snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "%s10.0.%d.1",
                 i ? ", " : "", i);
    expect(f, "10.0.0.5", (want){"10.0.8.1", "http", "fake"}, "X-Forwarded-For", chain, NULL);
    fake_finish(f);
}

static void start_error(fake *f, const char *trusted, const char *mention)
{
    srv_config cfg;
    fake_config(&cfg);
    cfg.trusted_proxies = trusted;
    f->srv = srv_server_new(&f->engine, &cfg);
    assert_non_null(f->srv);
    int rc = srv_server_start(f->srv);
    if (rc != SRV_EINVAL || strstr(srv_server_last_error(f->srv), mention) == NULL)
        fail_msg("trusted_proxies \"%s\": rc %d, \"%s\"; want SRV_EINVAL naming \"%s\"", trusted,
                 rc, srv_server_last_error(f->srv), mention);
    fake_finish(f);
}

static void test_bad_lists(void **state)
{
    fake *f = *state;
    start_error(f, "10.0.0.0/33", "10.0.0.0/33");
    start_error(f, "10.0.0.0/8,,", "\"\"");
    start_error(f, "localhost", "localhost");
    start_error(f, "::1/129", "::1/129");
    start_error(f, "10.0.0.0/", "10.0.0.0/");
    start_error(f, "10.0.0.0/8x", "10.0.0.0/8x");
    start_error(f, "[::1]", "[::1]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_untrusted_by_default, setup, teardown),
        cmocka_unit_test_setup_teardown(test_untrusted_peer_spoofing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_x_forwarded_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forwarded_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_lists, setup, teardown),
    };
    return cmocka_run_group_tests_name("forwarded", tests, NULL, NULL);
}
