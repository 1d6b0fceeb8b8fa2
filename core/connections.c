/*
 * Connections, for every engine: the max_connections gate (one slot per
 * admitted connection), the srv_stats connection counters, and the canned
 * 503 for a refusal the core cannot build a request for. A leaf: engines
 * call it, no core file does.
 */
#include "srv_core.h"

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
