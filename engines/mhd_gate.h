/*
 * The mhd engine's gate: it accepts connections itself and looks at each
 * cleartext connection's first bytes before libmicrohttpd does.
 * libmicrohttpd 0.9.75 answers an HTTP/2 preface, a bad version, a header
 * line without a colon and more with its own HTML before any callback of
 * ours runs (docs/ENGINES.md, "mhd: the gate"). The gate peeks (MSG_PEEK:
 * the bytes stay for MHD) until the first head is complete and runs the
 * core's HTTP/1 parser over what it has: the preface gets the SETTINGS +
 * GOAWAY every engine sends, bad input the core's answer, anything else
 * goes to MHD untouched (MHD_add_connection). TLS connections go to MHD at
 * once: their bytes are encrypted.
 *
 * One thread; the mhd engine (engines/mhd.c) gives it these callbacks.
 */
#ifndef SRV_MHD_GATE_H
#define SRV_MHD_GATE_H

#include "srv_conn.h"
#include "srv_engine.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct emhd_gate emhd_gate;

struct emhd_gate_ops {
    void *ctx;
    /* Give the connection to MHD (the gate's thread). `conn`: the policy's
     * record of it (api/srv_conn.h), opened at the accept (admitted or
     * refused, its first deadline from the accept; begun when a stop is
     * under way and bytes of a request have come, so that the stop's grace
     * waits for it), which the callee takes over (a copy) with fd and must
     * srv__conn_close; `bad` (0: none): the first request streams its body
     * (SRV_ROUTE_STREAM_BODY) and its framing fails with that status after
     * `good` de-chunked bytes, which MHD may read leniently: the
     * application gets the head and those bytes, then the failure. */
    void (*hand)(void *ctx, int fd, const struct sockaddr *peer, socklen_t peer_len,
                 const srv__conn *conn, int bad, uint64_t good);
    /* Whether one more connection may be accepted, with `waiting` in the
     * gate (the rest is MHD's). When false the gate stops accepting until
     * emhd_gate_kick. */
    bool (*room)(void *ctx, unsigned waiting);
    /* Answer `req` (built from the connection's first bytes) with the
     * core's `status` on fd; the callee releases req. fd stays the gate's. */
    void (*answer)(void *ctx, srv_request *req, int fd, int status);
    /* An answer was written on fd: close it after a lingering drain, so
     * unread bytes do not turn the close into a reset. The callee owns fd. */
    void (*linger)(void *ctx, int fd);
};

/* Start the gate's thread on the listening socket lfd (non-blocking; the
 * gate owns it from now on and closes it at emhd_gate_quiesce or stop).
 * tls: hand every connection over at once. 0, or SRV_ENOMEM /
 * SRV_ETHREAD with nothing left behind (lfd is then still the caller's). */
int emhd_gate_start(emhd_gate **out, srv_server *srv, int lfd, bool tls,
                    const struct emhd_gate_ops *ops);

/* Stop accepting: the listening socket is closed when this returns (new
 * connects are refused). A waiting connection that has sent bytes goes to
 * MHD as arriving; one that has sent nothing is closed once 100 ms old
 * (its client may be sending right now). The controlling thread, once. */
void emhd_gate_quiesce(emhd_gate *g);

/* Room may have freed (a connection of MHD's closed): accept again if the
 * gate had stopped. Any thread; cheap when the gate was not waiting. */
void emhd_gate_kick(emhd_gate *g);

/* Stop the thread and close the connections still waiting (NULL: nothing).
 * The controlling thread, after emhd_gate_quiesce. emhd_gate_kick stays
 * safe (and does nothing) until emhd_gate_free. */
void emhd_gate_stop(emhd_gate *g);

/* Stop if not yet, and free the gate (NULL: nothing): once no thread of
 * MHD's can call emhd_gate_kick any more (after MHD_stop_daemon). */
void emhd_gate_free(emhd_gate *g);

#endif
