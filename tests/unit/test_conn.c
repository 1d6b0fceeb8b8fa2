/*
 * The connection policy (core/connections.c, api/srv_conn.h) on a fake
 * clock: each state's deadline, what an expired wait means, the body pace,
 * the linger budget, admission past max_connections, and the counts a stop
 * and srv_stats read.
 */
#include "fake_engine.h"
#include "srv_conn.h"
#include "srv_core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#define HEADER_MS 5000
#define KEEP_MS 15000
#define T0 1000000u

static srv_server *g_srv;
static fake *g_fake;

static int setup(void **state)
{
    (void)state;
    g_fake = fake_new();
    srv_config cfg;
    fake_config(&cfg);
    cfg.header_timeout_ms = HEADER_MS;
    cfg.keepalive_timeout_ms = KEEP_MS;
    cfg.max_connections = 2;
    g_srv = fake_server(g_fake, &cfg);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fake_free(g_fake);
    return 0;
}

static unsigned arriving(void)
{
    return atomic_load(&g_srv->inflight.arriving);
}

static unsigned open_conns(void)
{
    return atomic_load(&g_srv->connections_open);
}

/* The first head counts from the accept, however late its first byte. */
static void test_first_head_from_accept(void **state)
{
    (void)state;
    srv__conn c;
    assert_int_equal(srv__conn_open(&c, g_srv, T0), SRV_CONN_ADMITTED);
    assert_int_equal(open_conns(), 1);
    assert_int_equal(srv__conn_due(&c, T0 + HEADER_MS - 1, 0, 0), SRV_CONN_WAIT);
    srv__conn_begun(&c, T0 + 4000);
    assert_int_equal(c.state, SRV_CONN_HEAD);
    assert_int_equal(arriving(), 1);
    assert_int_equal(srv__conn_due(&c, T0 + HEADER_MS - 1, 0, 0), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + HEADER_MS, 0, 0), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(&c), 408);
    srv__conn_close(&c);
    srv__conn_close(&c); /* idempotent */
    assert_int_equal(arriving(), 0);
    assert_int_equal(open_conns(), 0);
    assert_int_equal(atomic_load(&g_srv->admitted), 0);
}

/* Nothing begun: the deadline, a quiesce or a stop close without a word. */
static void test_idle_closes_quietly(void **state)
{
    (void)state;
    srv__conn c;
    srv__conn_open(&c, g_srv, T0);
    assert_int_equal(srv__conn_due(&c, T0, 0, 1), SRV_CONN_CLOSE);
    assert_int_equal(srv__conn_due(&c, T0 + HEADER_MS, 0, 0), SRV_CONN_CLOSE);
    srv__conn_set(&c, SRV_CONN_IDLE, T0 + 10);
    assert_int_equal(arriving(), 0);
    assert_int_equal(srv__conn_due(&c, T0 + 10 + KEEP_MS - 1, 0, 0), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + 10 + KEEP_MS, 0, 0), SRV_CONN_CLOSE);
    assert_int_equal(srv__conn_due(&c, T0 + 11, 1, 0), SRV_CONN_CLOSE);
    /* A kept-alive connection's next head counts from its first byte, even
     * an empty line; empty lines alone are still idle (quiet close). */
    srv__conn_set(&c, SRV_CONN_HEAD, T0 + 20000);
    assert_int_equal(arriving(), 0);
    assert_int_equal(srv__conn_due(&c, T0 + 20000, 0, 1), SRV_CONN_CLOSE);
    assert_int_equal(srv__conn_due(&c, T0 + 20000 + HEADER_MS, 0, 0), SRV_CONN_CLOSE);
    srv__conn_begun(&c, T0 + 21000);
    assert_int_equal(arriving(), 1);
    assert_int_equal(srv__conn_due(&c, T0 + 20000 + HEADER_MS - 1, 0, 1), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + 20000 + HEADER_MS, 0, 0), SRV_CONN_ANSWER);
    srv__conn_close(&c);
    assert_int_equal(arriving(), 0);
}

/* At quiesce a connection with nothing begun closes, unless bytes wait
 * unread: then it is a request arriving (the grace waits for it). Not at
 * a stop, not past its deadline, not a refused one, not without input. */
static void test_quiesce_keeps_waiting_input(void **state)
{
    (void)state;
    srv__conn c, r;
    srv__conn_open(&c, g_srv, T0);
    assert_int_equal(srv__conn_due(&c, T0 + 1, 0, 1), SRV_CONN_CLOSE);
    assert_int_equal(srv__conn_quiesce_keeps(&c, T0 + 1, 0, 1, 0), 0);
    assert_int_equal(srv__conn_quiesce_keeps(&c, T0 + 1, 1, 1, 1), 0);
    assert_int_equal(srv__conn_quiesce_keeps(&c, T0 + 1, 0, 0, 1), 0);
    assert_int_equal(srv__conn_quiesce_keeps(&c, T0 + HEADER_MS, 0, 1, 1), 0);
    assert_int_equal(arriving(), 0);
    assert_int_equal(srv__conn_quiesce_keeps(&c, T0 + 1, 0, 1, 1), 1);
    assert_int_equal(c.state, SRV_CONN_HEAD);
    assert_int_equal(arriving(), 1);
    assert_int_equal(srv__conn_due(&c, T0 + 2, 0, 1), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + HEADER_MS, 0, 1), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(&c), 408);
    /* kept alive: the next request sent just before the quiesce */
    srv__conn_set(&c, SRV_CONN_IDLE, T0 + 10);
    assert_int_equal(arriving(), 0);
    assert_int_equal(srv__conn_quiesce_keeps(&c, T0 + 11, 0, 1, 1), 1);
    assert_int_equal(arriving(), 1);
    assert_int_equal(srv__conn_due(&c, T0 + 12, 1, 1), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(&c), 503);
    /* refused (past max_connections 2): its own 2 s wait, not kept */
    srv__conn c2;
    srv__conn_open(&c2, g_srv, T0);
    assert_int_equal(srv__conn_open(&r, g_srv, T0), SRV_CONN_REFUSING);
    assert_int_equal(srv__conn_quiesce_keeps(&r, T0 + 1, 0, 1, 1), 0);
    srv__conn_close(&r);
    srv__conn_close(&c2);
    srv__conn_close(&c);
    assert_int_equal(arriving(), 0);
}

/* A stop cuts a request still arriving with 503, a deadline with 408. */
static void test_stop_answers_arriving_503(void **state)
{
    (void)state;
    srv__conn c;
    srv__conn_open(&c, g_srv, T0);
    srv__conn_begun(&c, T0);
    srv__conn_set(&c, SRV_CONN_BODY, T0 + 1);
    assert_int_equal(arriving(), 1);
    assert_int_equal(srv__conn_due(&c, T0 + 2, 0, 1), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + 2, 1, 0), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(&c), 503);
    srv__conn_set(&c, SRV_CONN_QUEUED, T0 + 3);
    assert_int_equal(arriving(), 1);
    srv__conn_set(&c, SRV_CONN_APP, T0 + 4);
    assert_int_equal(arriving(), 0);
    assert_int_equal(srv__conn_due(&c, UINT64_MAX - 1, 0, 0), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + 5, 1, 0), SRV_CONN_CLOSE);
    srv__conn_close(&c);
}

/* A body keeps SRV_BODY_MIN_PACE_BYTES a window or is cut with 408; a
 * trickle that never fills a window is cut at the first window's end. */
static void test_body_pace(void **state)
{
    (void)state;
    srv__conn c;
    srv__conn_open(&c, g_srv, T0);
    srv__conn_set(&c, SRV_CONN_BODY_STREAM, T0);
    assert_int_equal(arriving(), 0); /* dispatched */
    uint64_t t = T0;
    for (int i = 0; i < 10; i++) { /* 10 windows kept: never due */
        t += HEADER_MS - 1;
        srv__conn_body_bytes(&c, SRV_BODY_MIN_PACE_BYTES, t);
        assert_int_equal(srv__conn_due(&c, t + HEADER_MS - 1, 0, 0), SRV_CONN_WAIT);
    }
    for (int i = 0; i < 100; i++) /* a trickle: one byte each 10 ms */
        srv__conn_body_bytes(&c, 1, t + (uint64_t)i * 10);
    assert_int_equal(srv__conn_due(&c, t + HEADER_MS, 0, 0), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(&c), 408);
    /* Paused by the application: no deadline, a stop closes it. */
    srv__conn_set(&c, SRV_CONN_APP, t);
    assert_int_equal(srv__conn_due(&c, t + 100 * HEADER_MS, 0, 0), SRV_CONN_WAIT);
    /* Resumed: a new window. */
    srv__conn_set(&c, SRV_CONN_BODY_STREAM, t + 1000);
    assert_int_equal(srv__conn_due(&c, t + 1000 + HEADER_MS - 1, 0, 0), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, t + 1001, 1, 0), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(&c), 503);
    srv__conn_close(&c);
}

/* A write without progress for header_timeout_ms is cut; progress moves it. */
static void test_send_deadline(void **state)
{
    (void)state;
    srv__conn c;
    srv__conn_open(&c, g_srv, T0);
    srv__conn_set(&c, SRV_CONN_SEND, T0);
    srv__conn_progress(&c, T0 + 4000);
    assert_int_equal(srv__conn_due(&c, T0 + 4000 + HEADER_MS - 1, 0, 0), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + 4000 + HEADER_MS, 0, 0), SRV_CONN_CLOSE);
    srv__conn_close(&c);
}

/* Linger: bounded in time and in bytes. */
static void test_linger_budget(void **state)
{
    (void)state;
    srv__conn c;
    srv__conn_open(&c, g_srv, T0);
    srv__conn_set(&c, SRV_CONN_LINGER, T0);
    assert_int_equal(srv__conn_linger_bytes(&c, 1000, T0 + 1), 1);
    assert_int_equal(srv__conn_linger_bytes(&c, SRV_LINGER_MAX_BYTES, T0 + 2), 0);
    srv__conn_set(&c, SRV_CONN_LINGER, T0 + 10);
    assert_int_equal(srv__conn_linger_bytes(&c, 1, T0 + 10 + SRV_LINGER_MS), 0);
    assert_int_equal(srv__conn_due(&c, T0 + 10 + SRV_LINGER_MS - 1, 0, 0), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(&c, T0 + 10 + SRV_LINGER_MS, 0, 0), SRV_CONN_CLOSE);
    srv__conn_close(&c);
}

/* Past max_connections: a refused connection is read (its head, bounded)
 * and answered 503; past SRV_REFUSE_MAX being read, refused at once; slots
 * and counts come back. */
static void test_admission(void **state)
{
    (void)state;
    static srv__conn c[2 + SRV_REFUSE_MAX + 1];
    size_t n = sizeof c / sizeof c[0];
    for (size_t i = 0; i < n; i++) {
        enum srv__conn_admission a = srv__conn_open(&c[i], g_srv, T0);
        assert_int_equal(a, i < 2 ? SRV_CONN_ADMITTED
                            : i < 2 + SRV_REFUSE_MAX ? SRV_CONN_REFUSING
                                                     : SRV_CONN_REFUSE_NOW);
    }
    assert_int_equal(open_conns(), n);
    srv__conn *r = &c[2];
    assert_int_equal(srv__conn_due(r, T0 + 1, 0, 1), SRV_CONN_CLOSE); /* nothing asked */
    srv__conn_begun(r, T0 + 1);
    assert_int_equal(r->state, SRV_CONN_REFUSE);
    assert_int_equal(arriving(), 0); /* a stop does not wait for it */
    srv__conn_set(r, SRV_CONN_QUEUED, T0 + 2); /* stays refused */
    assert_int_equal(r->state, SRV_CONN_REFUSE);
    assert_int_equal(srv__conn_due(r, T0 + SRV_REFUSE_WAIT_MS - 1, 0, 1), SRV_CONN_WAIT);
    assert_int_equal(srv__conn_due(r, T0 + SRV_REFUSE_WAIT_MS, 0, 0), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(r), 503);
    srv__conn_set(r, SRV_CONN_LINGER, T0 + SRV_REFUSE_WAIT_MS);
    assert_int_equal(atomic_load(&g_srv->refusing), SRV_REFUSE_MAX - 1);
    /* Its place among those read is free again. */
    srv__conn extra;
    assert_int_equal(srv__conn_open(&extra, g_srv, T0), SRV_CONN_REFUSING);
    srv__conn_close(&extra);
    for (size_t i = 0; i < n; i++)
        srv__conn_close(&c[i]);
    assert_int_equal(open_conns(), 0);
    assert_int_equal(atomic_load(&g_srv->admitted), 0);
    assert_int_equal(atomic_load(&g_srv->refusing), 0);
    srv__conn d;
    assert_int_equal(srv__conn_open(&d, g_srv, T0), SRV_CONN_ADMITTED);
    srv__conn_close(&d);
}

/* A refused connection that has not asked yet takes a slot freed since
 * its accept; one that has asked, or finds no slot, stays refused. */
static void test_readmit(void **state)
{
    (void)state;
    srv__conn a, b, r, s;
    srv__conn_open(&a, g_srv, T0);
    srv__conn_open(&b, g_srv, T0);
    assert_int_equal(srv__conn_open(&r, g_srv, T0), SRV_CONN_REFUSING);
    assert_int_equal(srv__conn_open(&s, g_srv, T0), SRV_CONN_REFUSING);
    assert_int_equal(srv__conn_readmit(&r), 0); /* no slot */
    assert_int_equal(r.state, SRV_CONN_REFUSE);
    srv__conn_begun(&s, T0 + 1); /* asked while refused */
    srv__conn_close(&a);
    assert_int_equal(srv__conn_readmit(&s), 0);
    assert_int_equal(srv__conn_readmit(&a), 0); /* closed: never refused */
    uint64_t d = r.deadline;
    assert_int_equal(srv__conn_readmit(&r), 1);
    assert_int_equal(r.state, SRV_CONN_FIRST);
    assert_int_equal(r.deadline, d); /* no more time for having waited */
    assert_int_equal(atomic_load(&g_srv->admitted), 2);
    assert_int_equal(atomic_load(&g_srv->refusing), 1);
    assert_int_equal(srv__conn_readmit(&r), 0); /* once */
    srv__conn_begun(&r, T0 + 2);
    assert_int_equal(arriving(), 1); /* admitted: a stop waits for it */
    assert_int_equal(srv__conn_due(&r, d, 0, 0), SRV_CONN_ANSWER);
    assert_int_equal(srv__conn_status(&r), 408);
    srv__conn_close(&r);
    srv__conn_close(&s);
    srv__conn_close(&b);
    assert_int_equal(atomic_load(&g_srv->admitted), 0);
    assert_int_equal(atomic_load(&g_srv->refusing), 0);
    assert_int_equal(arriving(), 0);
    assert_int_equal(open_conns(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_first_head_from_accept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idle_closes_quietly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quiesce_keeps_waiting_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_answers_arriving_503, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_pace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_linger_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admission, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readmit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
