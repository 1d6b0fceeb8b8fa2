/*
 * Conformance: what a connection may hold unread. A client that pipelines
 * requests and never reads the answers must not make the server buffer
 * everything it sends: once the answers cannot be written, the server
 * stops taking input (the kernel's buffers then hold the rest and the
 * client's send blocks), and the send deadline cuts the connection.
 */
#include "conformance.h"

/* Send `batch` (len bytes) again and again on each of the n connections,
 * round robin, until each has sent per_conn bytes (sent[] counts what
 * they had already) or a send blocks 300 ms (the server stopped taking
 * input); *all adds up what went out, *peak the highest held_kb() seen. */
static void pipeline_until_full(rc_conn **c, int n, const char *batch, size_t len,
                                size_t per_conn, size_t *sent, size_t *all, long *peak)
{
    int open_[n];
    for (int i = 0; i < n; i++)
        open_[i] = 1;
    for (int active = n; active > 0;) {
        active = 0;
        for (int i = 0; i < n; i++) {
            if (!open_[i])
                continue;
            if (sent[i] >= per_conn || rc_send(c[i], batch, len, 300) != RC_OK) {
                open_[i] = 0;
                continue;
            }
            sent[i] += len;
            *all += len;
            active++;
            long now = held_kb();
            if (now > *peak)
                *peak = now;
        }
    }
}

/*
 * Four connections with a small receive buffer each pipeline up to 8 MB of
 * `GET /query?name=<900 bytes>` (2 KB a request) and never read: the
 * server's RSS must grow by less than 8 MB while they send. threadpool
 * and mhd read one request at a time (growth: well under 1 MB); an engine
 * that reads everything into its input buffer grows by about all that was
 * sent (h2o 2.2.5 unguarded: 16-20 MB for the four). Then the send deadline
 * still cuts every connection, and the server keeps serving.
 */
void test_input_bound_pipeline_never_read(void **state)
{
    fx *f = *state;
    const char *what = "4 x 8 MB of pipelined GETs, answers never read";
    /* ~2 KB a request within the fixture's limits (L_URI, L_HEADER): a
     * 900-byte name and a 1100-byte header. */
    enum { NAME = 900, PAD = 1100, BATCH = 64, CONNS = 4, PER_CONN = 8 << 20,
           BOUND_KB = 8 << 10 };
    char head[] = "GET /query?name=";
    char mid[] = " HTTP/1.1\r\n" HOST "X-Pad: ";
    char tail[] = "\r\n\r\n";
    size_t one = sizeof head - 1 + NAME + sizeof mid - 1 + PAD + sizeof tail - 1;
    char *batch = malloc(one * BATCH);
    CHECK(batch != NULL, "out of memory");
    for (size_t k = 0; k < BATCH; k++) {
        char *p = batch + k * one;
        memcpy(p, head, sizeof head - 1);
        memset(p + sizeof head - 1, 'n', NAME);
        p += sizeof head - 1 + NAME;
        memcpy(p, mid, sizeof mid - 1);
        memset(p + sizeof mid - 1, 'p', PAD);
        memcpy(p + sizeof mid - 1 + PAD, tail, sizeof tail - 1);
    }
    rc_conn *c[CONNS];
    size_t sent[CONNS] = {0}, all = 0;
    unsigned base_open = stats(f).connections_open;
    for (int i = 0; i < CONNS; i++) {
        c[i] = conn_open(f, what);
        int small = 4096;
        setsockopt(c[i]->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    long base = held_kb(), peak = base;
    pipeline_until_full(c, CONNS, batch, one * BATCH, PER_CONN, sent, &all, &peak);
    free(batch);
    sleep_ms(300); /* let the server take what it will of the last batches */
    long now = held_kb();
    if (now > peak)
        peak = now;
    CHECK(base > 0, "[%s] cannot measure the process's %s", what, held_what());
    CHECK(peak - base < BOUND_KB, "[%s] the server's %s grew by %ld KB (bound %d KB) while "
          "%d clients pipelined %zu bytes", what, held_what(), peak - base, (int)BOUND_KB, CONNS, all);
    /* The send deadline (header_timeout_ms) still cuts every connection,
     * seen from the server while the clients still read nothing: opening
     * a window first would let the server go on writing, and it would
     * rightly serve every request it had buffered (thousands, seconds
     * under a sanitizer) before the client's silence closed it. */
    unsigned open_now = 0;
    for (int waited = 0; waited <= T_HEADER_MS + 10000; waited += 20) {
        if ((open_now = stats(f).connections_open) <= base_open)
            break;
        sleep_ms(20);
    }
    CHECK(open_now <= base_open, "[%s] the send deadline did not cut the connections: %u "
          "open, %u before (%zu, %zu, %zu, %zu bytes sent)", what, open_now, base_open,
          sent[0], sent[1], sent[2], sent[3]);
    for (int i = 0; i < CONNS; i++) {
        /* Read what the server sent before its close through a normal
         * window: through the 4 KB one, TCP's zero-window probes back off
         * and draining megabytes can take longer than the wait. */
        int big = 1 << 20;
        setsockopt(c[i]->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
        int rc = rc_wait_close(c[i], 10000, NULL);
        CHECK(rc == RC_CLOSED || rc == RC_RESET, "[%s] connection %d, closed by the server, "
              "did not end: %s (%zu bytes sent)", what, i, rc_strerror(rc), sent[i]);
        rc_close(c[i]);
    }
    still_serving(f, what);
}

/*
 * Tiny heads behind a slow request: four connections each send
 * `GET /slow?ms=2500` and then ~39-byte GETs until the server stops taking
 * them, and never read. While the slow one runs the others wait, and what
 * the server keeps for each waiting head must stay small: the measured
 * growth is the input a connection may hold (a receive buffer's worth)
 * plus what the engine keeps per head. h2o's guard once copied every head
 * of a read as it scanned it (~55 extra bytes a head, ~5,000 heads a read):
 * 1.2 MB a connection; bounded, ~0.4 MB. threadpool and mhd read one
 * request at a time. Then the clients go with their heads unserved, and
 * the server keeps serving.
 */
void test_input_bound_tiny_heads_behind_slow(void **state)
{
    fx *f = *state;
    const char *what = "4 x tiny pipelined GETs behind a slow one, answers never read";
    enum { BATCH = 4000, CONNS = 4, PER_CONN = 1 << 20, BOUND_KB = CONNS * 768 };
    static const char tiny[] = "GET /t HTTP/1.1\r\n" HOST "\r\n";
    static const char slow[] = "GET /slow?ms=2500 HTTP/1.1\r\n" HOST "\r\n";
    size_t one = sizeof tiny - 1, first = sizeof slow - 1 + one * BATCH;
    /* The slow head and the first heads in one write, so that one read brings many. */
    char *buf = malloc(first), *batch = buf + sizeof slow - 1;
    CHECK(buf != NULL, "out of memory");
    memcpy(buf, slow, sizeof slow - 1);
    for (size_t k = 0; k < BATCH; k++)
        memcpy(batch + k * one, tiny, one);
    rc_conn *c[CONNS];
    size_t sent[CONNS] = {0}, all = 0;
    long base = held_kb(), peak = base;
    for (int i = 0; i < CONNS; i++) {
        c[i] = conn_open(f, what);
        int small = 4096;
        setsockopt(c[i]->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        CHECK(rc_send(c[i], buf, first, 1000) == RC_OK, "[%s] cannot send", what);
        sent[i] = first;
        all += first;
    }
    pipeline_until_full(c, CONNS, batch, one * BATCH, PER_CONN, sent, &all, &peak);
    free(buf);
    sleep_ms(300); /* the slow requests still run: the rest waits */
    long now = held_kb();
    if (now > peak)
        peak = now;
    CHECK(base > 0, "[%s] cannot measure the process's %s", what, held_what());
    CHECK(peak - base < BOUND_KB, "[%s] the server's %s grew by %ld KB (bound %d KB) while "
          "%d clients pipelined %zu bytes of %zu-byte heads", what, held_what(), peak - base,
          (int)BOUND_KB, CONNS, all, one);
    for (int i = 0; i < CONNS; i++)
        rc_close(c[i]); /* with the heads unserved: the server lets them go */
    still_serving(f, what);
}
