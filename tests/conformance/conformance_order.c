/*
 * libsrv conformance suite, conformance_order.c: Answers in order and slow readers (non-blocking routes run on the
 * engine's I/O thread in the nonblocking run).
 */
#include "conformance.h"

/* ------------------------------------------------------------------ */
/* Answers in order and a slow reader (non-blocking routes run on the  */
/* engine's I/O thread in the nonblocking run)                         */
/* ------------------------------------------------------------------ */

/* Requests answered later (srv_after, an application thread) and at once,
 * pipelined on one connection: answered in order, nothing stray. An I/O
 * thread that runs the handlers must hold the next request until the late
 * answer is written. */
void test_nb_pipelined_late_answers(void **state)
{
    fx *f = *state;
    rc_conn *c = conn_open(f, "late answers pipelined");
    conn_send_str(c, "late answers pipelined",
                  "GET /async/timer?ms=100 HTTP/1.1\r\n" HOST "\r\n"
                  "GET /n?i=2 HTTP/1.1\r\n" HOST "\r\n"
                  "GET /async/thread?ms=50 HTTP/1.1\r\n" HOST "\r\n"
                  "GET /n?i=4 HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, "pipelined srv_after answer, 1 of 4", 0, 200, "async-timer", NULL);
    conn_expect(c, "pipelined answer after it, 2 of 4", 0, 200, "2", NULL);
    conn_expect(c, "pipelined thread answer, 3 of 4", 0, 200, "async-thread", NULL);
    conn_expect(c, "pipelined answer after it, 4 of 4", 0, 200, "4", NULL);
    CHECK(rc_unread(c) == 0, "[late answers pipelined] %zu stray bytes", rc_unread(c));
    /* The connection still serves a request sent on its own. */
    conn_send_str(c, "late answers, next", "GET /n?i=5 HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(c, "a request after the pipelined ones", 0, 200, "5", NULL);
}

/* Sends a buffer from its own thread (the server answers while it reads). */
typedef struct nb_sender {
    rc_conn *c;
    const char *p;
    size_t n;
    int rc;
} nb_sender;

static void *nb_send_main(void *arg)
{
    nb_sender *s = arg;
    s->rc = rc_send(s->c, s->p, s->n, 20000);
    return NULL;
}

/* A client that does not read its answers (more than any socket buffer
 * holds: 80 pipelined 64 KB echoes) holds up no one else: another
 * connection is served meanwhile; every answer and the request pipelined
 * behind them arrive complete, in order, once the client reads. */
void test_nb_slow_reader(void **state)
{
    fx *f = *state;
    enum { N = 80 };
    const size_t n = L_BODY; /* the largest body the fixture takes */
    char *body = pattern(n);
    char head[160];
    int hl = snprintf(head, sizeof head,
                      "POST /echo HTTP/1.1\r\n" HOST "Content-Length: %zu\r\n\r\n", n);
    const char tail[] = "GET /n?i=7 HTTP/1.1\r\n" HOST "\r\n";
    size_t total = N * ((size_t)hl + n) + sizeof tail - 1;
    char *all = malloc(total), *w = all;
    for (int i = 0; i < N; i++) {
        memcpy(w, head, (size_t)hl);
        memcpy(w + hl, body, n);
        w += (size_t)hl + n;
    }
    memcpy(w, tail, sizeof tail - 1);

    rc_conn *a = conn_open(f, "slow reader");
    nb_sender snd = {a, all, total, RC_SYSERR};
    pthread_t tid;
    int started = pthread_create(&tid, NULL, nb_send_main, &snd) == 0;
    CHECK(started, "[slow reader] cannot start the sending thread");
    rc_sleep_ms(300); /* the server writes until the buffers are full */

    rc_conn *b = conn_open(f, "another client meanwhile");
    long long t0 = rc_now_ms();
    conn_send_str(b, "another client meanwhile", "GET /hello HTTP/1.1\r\n" HOST "\r\n");
    conn_expect(b, "another client while one does not read", 0, 200, "hello", NULL);
    long long took = rc_now_ms() - t0;
    CHECK(took < 1000, "[slow reader] another client waited %lld ms", took);

    int ok = 1;
    for (int i = 0; i < N && ok; i++) {
        rc_response r;
        int rc = rc_read_response(a, &r, 0, 5000);
        ok = rc == RC_OK && r.status == 200 && r.body_len == n && memcmp(r.body, body, n) == 0;
        if (!ok)
            print_error("[slow reader] answer %d of %d: %s, status %d, %zu bytes\n", i + 1, N,
                        rc_strerror(rc), rc == RC_OK ? r.status : 0,
                        rc == RC_OK ? r.body_len : 0);
        if (rc == RC_OK)
            rc_response_free(&r);
    }
    pthread_join(tid, NULL);
    free(all);
    free(body);
    CHECK(ok, "[slow reader] the pipelined echoes did not all come back intact");
    CHECK(snd.rc == RC_OK, "[slow reader] sending: %s", rc_strerror(snd.rc));
    conn_expect(a, "slow reader, the request pipelined behind", 0, 200, "7", NULL);
    CHECK(rc_unread(a) == 0, "[slow reader] %zu stray bytes", rc_unread(a));
}
