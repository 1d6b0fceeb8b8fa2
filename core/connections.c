/*
 * Connections, for every engine: the connection policy (api/srv_conn.h:
 * deadlines, pace, linger, admission past max_connections), the srv_stats
 * connection counters, and the canned answers for a refusal the core cannot
 * build a request for. A leaf: engines and the loops that carry their
 * connections (core/h1conn.c, core/sockloop.c) call it.
 */
#include "srv_core.h"
#include "srv_conn.h"

#include <sys/socket.h>

bool srv__conn_admit(srv_server *srv)
{
    if (atomic_fetch_add(&srv->admitted, 1) >= srv->cfg.max_connections) {
        atomic_fetch_sub(&srv->admitted, 1);
        return false;
    }
    return true;
}

void srv__conn_leave(srv_server *srv)
{
    atomic_fetch_sub(&srv->admitted, 1);
}

void srv__stats_connection_opened(srv_server *srv)
{
    atomic_fetch_add(&srv->connections_total, 1);
    atomic_fetch_add(&srv->connections_open, 1);
}

void srv__stats_connection_closed(srv_server *srv)
{
    atomic_fetch_sub(&srv->connections_open, 1);
}

const char *srv__h2_preface_refusal(size_t *len)
{
    static const unsigned char frames[] = {
        0, 0, 0, 4, 0, 0, 0, 0, 0,                         /* SETTINGS, empty */
        0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xd /* GOAWAY */
    };
    *len = sizeof frames;
    return (const char *)frames;
}

const char *srv__refusal_503(size_t *len)
{
    static const char answer[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                 "Connection: close\r\n\r\n";
    *len = sizeof answer - 1;
    return answer;
}

void srv__refuse_fd(int fd, int cleartext)
{
    if (cleartext) {
        size_t len = 0;
        const char *answer = srv__refusal_503(&len);
        ssize_t w = send(fd, answer, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
    }
    shutdown(fd, SHUT_WR);
    char sink[4096];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
        ;
}

/* ------------------------------------------------------------------ */
/* The connection policy (api/srv_conn.h)                              */
/* ------------------------------------------------------------------ */

static uint64_t srv__after(uint64_t now, unsigned ms)
{
    return now + ms;
}

static void srv__conn_arriving(srv__conn *c, int on)
{
    if (on == c->arriving)
        return;
    c->arriving = (unsigned char)on;
    srv__request_arriving(c->srv, on ? 1 : -1);
}

enum srv__conn_admission srv__conn_open(srv__conn *c, srv_server *srv, uint64_t now)
{
    memset(c, 0, sizeof *c);
    c->srv = srv;
    srv__stats_connection_opened(srv);
    if (srv__conn_admit(srv)) {
        c->admitted = 1;
        c->state = SRV_CONN_FIRST;
        c->deadline = srv__after(now, srv->cfg.header_timeout_ms);
        return SRV_CONN_ADMITTED;
    }
    c->state = SRV_CONN_REFUSE;
    c->status = 503;
    if (atomic_fetch_add(&srv->refusing, 1) >= SRV_REFUSE_MAX) {
        atomic_fetch_sub(&srv->refusing, 1);
        c->deadline = now;
        return SRV_CONN_REFUSE_NOW;
    }
    c->refusing = 1;
    unsigned ms = srv->cfg.header_timeout_ms;
    c->deadline = srv__after(now, ms < SRV_REFUSE_WAIT_MS ? ms : SRV_REFUSE_WAIT_MS);
    return SRV_CONN_REFUSING;
}

int srv__conn_readmit(srv__conn *c)
{
    if (c->state != SRV_CONN_REFUSE || c->begun || !srv__conn_admit(c->srv))
        return 0;
    if (c->refusing) {
        c->refusing = 0;
        atomic_fetch_sub(&c->srv->refusing, 1);
    }
    c->admitted = 1;
    c->status = 0;
    c->state = SRV_CONN_FIRST;
    return 1;
}

void srv__conn_set(srv__conn *c, enum srv__conn_state state, uint64_t now)
{
    const srv_config *cfg = &c->srv->cfg;
    if (c->state == SRV_CONN_REFUSE && state != SRV_CONN_LINGER)
        return; /* read only to be refused: its own deadline holds */
    enum srv__conn_state was = c->state;
    c->state = state;
    c->begun = state == SRV_CONN_BODY || state == SRV_CONN_QUEUED;
    srv__conn_arriving(c, c->begun);
    switch (state) {
    case SRV_CONN_FIRST:
        c->deadline = srv__after(now, cfg->header_timeout_ms);
        break;
    case SRV_CONN_HEAD:
        if (was != SRV_CONN_FIRST) /* the first head: from the accept */
            c->deadline = srv__after(now, cfg->header_timeout_ms);
        break;
    case SRV_CONN_IDLE:
        c->deadline = srv__after(now, cfg->keepalive_timeout_ms);
        break;
    case SRV_CONN_BODY:
    case SRV_CONN_BODY_STREAM:
        c->paced = 0;
        c->deadline = srv__after(now, cfg->header_timeout_ms);
        break;
    case SRV_CONN_SEND:
        srv__conn_progress(c, now);
        break;
    case SRV_CONN_LINGER:
        if (c->refusing) {
            c->refusing = 0;
            atomic_fetch_sub(&c->srv->refusing, 1);
        }
        c->drained = 0;
        c->deadline = srv__after(now, SRV_LINGER_MS);
        break;
    case SRV_CONN_QUEUED:
    case SRV_CONN_APP:
    case SRV_CONN_REFUSE:
        c->deadline = UINT64_MAX;
        break;
    }
}

void srv__conn_begun(srv__conn *c, uint64_t now)
{
    if (c->state == SRV_CONN_FIRST || c->state == SRV_CONN_IDLE)
        srv__conn_set(c, SRV_CONN_HEAD, now);
    c->begun = 1;
    srv__conn_arriving(c, c->state != SRV_CONN_REFUSE);
}

void srv__conn_body_bytes(srv__conn *c, size_t n, uint64_t now)
{
    if (srv__pace_bytes(&c->paced, n)) /* the pace is kept: a new window */
        c->deadline = srv__after(now, c->srv->cfg.header_timeout_ms);
}

void srv__conn_progress(srv__conn *c, uint64_t now)
{
    unsigned ms = c->srv->cfg.header_timeout_ms;
    c->deadline = srv__after(now, ms < SRV_SEND_MIN_TIMEOUT_MS ? SRV_SEND_MIN_TIMEOUT_MS : ms);
}

int srv__conn_linger_bytes(srv__conn *c, size_t n, uint64_t now)
{
    c->drained += n;
    return c->drained < SRV_LINGER_MAX_BYTES && now < c->deadline;
}

enum srv__conn_due srv__conn_due(srv__conn *c, uint64_t now, int stopping, int quiescing)
{
    int expired = now >= c->deadline;
    switch (c->state) {
    case SRV_CONN_FIRST:
    case SRV_CONN_IDLE: /* nothing begun: never an answer */
        return expired || stopping || quiescing ? SRV_CONN_CLOSE : SRV_CONN_WAIT;
    case SRV_CONN_HEAD:
        if (!c->begun) /* empty lines only: idle, as far as anyone asks */
            return expired || stopping || quiescing ? SRV_CONN_CLOSE : SRV_CONN_WAIT;
        /* fall through */
    case SRV_CONN_BODY:
    case SRV_CONN_BODY_STREAM:
        if (!expired && !stopping)
            return SRV_CONN_WAIT;
        /* Stop cuts a request still arriving with the 503 every engine
         * gives the requests it cannot finish; a deadline with 408. */
        c->status = stopping ? 503 : 408;
        return SRV_CONN_ANSWER;
    case SRV_CONN_REFUSE:
        if (!c->begun) /* nothing asked: nothing to answer */
            return expired || stopping || quiescing ? SRV_CONN_CLOSE : SRV_CONN_WAIT;
        if (!expired && !stopping)
            return SRV_CONN_WAIT;
        c->status = 503;
        return SRV_CONN_ANSWER;
    case SRV_CONN_QUEUED:
    case SRV_CONN_APP:
        return stopping ? SRV_CONN_CLOSE : SRV_CONN_WAIT;
    case SRV_CONN_SEND:
    case SRV_CONN_LINGER:
        return expired || stopping ? SRV_CONN_CLOSE : SRV_CONN_WAIT;
    }
    return SRV_CONN_WAIT;
}

int srv__conn_quiesce_keeps(srv__conn *c, uint64_t now, int stopping, int quiescing,
                            int input_waiting)
{
    if (!quiescing || stopping || c->begun || now >= c->deadline || !input_waiting ||
        c->state == SRV_CONN_REFUSE)
        return 0;
    srv__conn_begun(c, now);
    return 1;
}

void srv__conn_count_closed(srv__conn *c)
{
    if (!c->counted_closed) {
        c->counted_closed = 1;
        srv__stats_connection_closed(c->srv);
    }
}

void srv__conn_close(srv__conn *c)
{
    if (!c->srv)
        return;
    srv__conn_arriving(c, 0);
    if (c->refusing)
        atomic_fetch_sub(&c->srv->refusing, 1);
    if (c->admitted)
        srv__conn_leave(c->srv);
    srv__conn_count_closed(c);
    c->srv = NULL;
}
