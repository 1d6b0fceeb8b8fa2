/* The mhd engine: streamed request bodies (SRV_ROUTE_STREAM_BODY;
 * docs/ENGINES.md, "mhd: streamed request bodies"). The application pulls
 * the body; MHD's access handler leaves a piece unconsumed and suspends
 * the connection until the core's body_kick or the answer. */
#include "mhd_int.h"

#include <sched.h>
#include <string.h>

/* A streamed body's connection closes (completed, the client left, MHD's
 * own error, or the watchdog's pace cut): tell the application once, and
 * make sure the request's answer has reached emhd_respond (which touches
 * er) before er goes. MHD thread. */
void emhd_sbody_closed(emhd_req *er, struct MHD_Connection *conn, bool lib_error)
{
    srv_request *req = er->req;
    if (!er->bdetached) {
        er->bdetached = true;
        int st = 0;
        if (er->ec != NULL && atomic_load(&er->ec->body_cut)) {
            st = 408;
        } else if (lib_error && er->phase != EMHD_REQ_ANSWERED) {
            /* MHD answered a malformed chunk itself (400; SRV_CAP_LIB_CHUNKED). */
            const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
            if (ci != NULL && ci->http_status == 400)
                st = 400;
        }
        if (st != 0)
            srv__body_end(req, st); /* on_end; the core's answer is not written */
        srv__body_detach(req);      /* on_end(SRV_ECLOSED) unless told; no kick after */
    }
    er->phase = EMHD_REQ_ANSWERED; /* counted and logged through req, not raw */
    /* The client left first: withdraw it (respond runs here). Else an
     * answer was claimed: wait for its respond, a few instructions away. */
    if (!(atomic_load(&er->bst) & EMHD_B_ANS) && !srv__request_cancel(req))
        while (!(atomic_load(&er->bst) & EMHD_B_ANS))
            sched_yield();
    atomic_store(&er->hand, EMHD_HAND_READY);
}

/* Set `bit` and take SUSP: true when the caller must resume the
 * connection (the MHD thread had suspended it). Any thread. */
static bool emhd_b_wake(emhd_req *er, int bit)
{
    int cur = atomic_load(&er->bst);
    while (!atomic_compare_exchange_weak(&er->bst, &cur, (cur | bit) & ~EMHD_B_SUSP)) {
    }
    return (cur & EMHD_B_SUSP) != 0;
}

/* MHD thread: leave MHD's loop until a kick or the answer (no deadline:
 * the application's pace is its own). MHD reads nothing meanwhile: what it
 * holds stays unconsumed, the socket fills, the client's send blocks. */
static enum MHD_Result emhd_b_wait(emhd_server *es, emhd_req *er, struct MHD_Connection *conn)
{
    emhd_state(er->ec, SRV_CONN_APP);
    atomic_fetch_add(&es->outstanding, 1); /* stop waits for every resume */
    MHD_suspend_connection(conn);
    int cur = atomic_load(&er->bst);
    for (;;) {
        if (cur & (EMHD_B_KICK | EMHD_B_ANS)) { /* woken already: resume ourselves */
            if (atomic_compare_exchange_weak(&er->bst, &cur, cur & ~EMHD_B_KICK))
                break;
        } else if (atomic_compare_exchange_weak(&er->bst, &cur, cur | EMHD_B_SUSP)) {
            return MHD_YES; /* a waker resumes */
        }
    }
    emhd_resume(es, conn);
    atomic_fetch_sub(&es->outstanding, 1);
    return MHD_YES;
}

/* The pace window (the policy's SRV_CONN_BODY_STREAM): opened when reading
 * starts or goes on after a pause, restarted each SRV_BODY_MIN_PACE_BYTES
 * (emhd_body_bytes); the watchdog cuts it (408). */
static void emhd_b_window(emhd_req *er)
{
    emhd_state(er->ec, SRV_CONN_BODY_STREAM);
}

/* Write the claimed answer past MHD (cleartext only: over TLS only MHD
 * can write) - for an answer MHD cannot send in time. */
static void emhd_b_raw(emhd_server *es, emhd_req *er, int fd)
{
    if (es->tls || fd < 0)
        return;
    emhd_write_raw(fd, er->req, 0);
}

/* Body bytes after the application stopped or the request was answered:
 * discarded up to the swallow limit, then the answer is written past MHD
 * and the connection closed (as emhd_cut). */
static enum MHD_Result emhd_b_swallow(emhd_server *es, emhd_req *er, struct MHD_Connection *conn,
                                      size_t *size)
{
    er->swallowed += *size;
    *size = 0;
    if (er->swallowed <= es->swallow_limit)
        return MHD_YES;
    if (atomic_load(&er->bst) & EMHD_B_ANS) {
        srv__request_set_close(er->req);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        emhd_b_raw(es, er, ci != NULL ? ci->connect_fd : -1);
    }
    return MHD_NO;
}

/*
 * The access handler for a streamed body (MHD thread). MHD 0.9.75 calls it
 * for the head with nothing (and again after a resume when it suspended in
 * that call: the "first call" is repeated, and MHD decides on "100
 * Continue" only after a first call that returns unsuspended, so the 100
 * goes out exactly when the application asked for the body, and never
 * when it answered first: a response queued in the first call refuses the
 * body); then once per piece it read (again with the same piece after a
 * resume when we left it unconsumed); then with nothing once the body is
 * complete (repeated after a resume while no response is queued). Each
 * call looks at everything: the answer, then the core's state.
 */
enum MHD_Result emhd_sbody(emhd_server *es, emhd_req *er, struct MHD_Connection *conn,
                           const char *data, size_t *size)
{
    /* Suspended in this same pass: MHD 0.9.75 may call again before it
     * leaves the connection (its body loop); suspending twice would
     * corrupt its lists. Take nothing: the waker's resume brings it back. */
    if (atomic_load(&er->bst) & EMHD_B_SUSP)
        return MHD_YES;
    atomic_fetch_and(&er->bst, ~EMHD_B_KICK);
    bool first = *size == 0 && (!er->bfirst || er->bhead_wait);
    er->bfirst = true;
    er->bhead_wait = false;
    for (;;) {
        if (atomic_load(&er->bst) & EMHD_B_ANS) {
            atomic_store(&er->hand, EMHD_HAND_READY);
            if (!er->bdetached) {
                er->bdetached = true;
                srv__body_detach(er->req); /* on_end(SRV_ECLOSED) unless told */
            }
            if (*size != 0)
                return emhd_b_swallow(es, er, conn, size);
            /* The answer goes out at the head or once MHD has the whole
             * body; one given before the application read it all closes. */
            if (!er->bend && er->hasbody)
                srv__request_set_close(er->req);
            er->phase = EMHD_REQ_ANSWERED;
            emhd_state(er->ec, SRV_CONN_APP);
            return emhd_send(er, conn);
        }
        int k = srv__body_state(er->req);
        if (*size != 0) {
            if (k == SRV__BODY_IDLE)
                return emhd_b_wait(es, er, conn); /* the piece stays MHD's */
            if (k == SRV__BODY_OVER)
                return emhd_b_swallow(es, er, conn, size);
            size_t n = *size;
            *size = 0;
            /* The framing fails past `good` bytes (the gate): the rest of
             * what MHD de-chunked leniently is not the body. */
            bool cut = er->bad != 0 && n >= er->good;
            if (er->bad != 0) {
                n = cut ? (size_t)er->good : n;
                er->good -= n;
            }
            er->bstarted = true;
            (void)emhd_body_bytes(er->ec, SRV_CONN_BODY_STREAM, n);
            int st = n > 0 ? srv__body_data(er->req, data, n) : k;
            if (cut) {
                if (st != SRV__BODY_OVER)
                    srv__body_end(er->req, er->bad); /* the core's answer */
                er->bad = 0;
                /* Mid-body MHD refuses a response: the answer goes out at
                 * MHD's last call (what follows is swallowed meanwhile). */
                return MHD_YES;
            }
            if (st == SRV__BODY_IDLE)
                return emhd_b_wait(es, er, conn);
            return MHD_YES;
        }
        if (first) { /* the head: MHD reads (and sends its 100) once asked */
            if (k != SRV__BODY_GO) {
                er->bhead_wait = true;
                return emhd_b_wait(es, er, conn);
            }
            er->bstarted = true;
            emhd_b_window(er);
            return MHD_YES;
        }
        /* Nothing after the head: MHD has the whole body. */
        if (er->bad != 0 && k == SRV__BODY_GO) { /* no byte past `good` came */
            er->bend = true;
            srv__body_end(er->req, er->bad);
            er->bad = 0;
            continue;
        }
        if (!er->bend && k == SRV__BODY_GO) {
            er->bend = true;
            emhd_state(er->ec, SRV_CONN_APP);
            srv__body_end(er->req, 0); /* on_end may answer: look again */
            continue;
        }
        return emhd_b_wait(es, er, conn); /* paused at the end, or the answer comes */
    }
}

/* The head of a streamed-body request is accepted: dispatch it now. */
enum MHD_Result emhd_sbody_begin(emhd_server *es, emhd_req *er,
                                 struct MHD_Connection *conn)
{
    srv_request *req = er->req;
    const char *te = srv_request_header(req, "Transfer-Encoding");
    const char *cl = srv_request_header(req, "Content-Length");
    er->sbody = true;
    if (er->ec != NULL && !er->ec->reused && er->ec->bad != 0) {
        er->bad = er->ec->bad; /* MHD would read on where the core stops */
        er->good = er->ec->good;
    }
    if (er->ec != NULL)
        er->ec->bad = 0;
    er->need100 = srv__request_expects_continue(req);
    er->hasbody = te != NULL || (cl != NULL && strcmp(cl, "0") != 0);
    er->phase = EMHD_REQ_SBODY;
    emhd_state(er->ec, SRV_CONN_QUEUED); /* arriving until dispatch counts it */
    srv__request_dispatch(req);
    emhd_state(er->ec, SRV_CONN_APP); /* dispatched: request_timeout_ms */
    size_t none = 0;
    return emhd_sbody(es, er, conn, NULL, &none);
}

/* body_kick slot: any thread, the request's lock held, never after
 * srv__body_detach (so er lives). */
void emhd_body_kick(void *state, srv_request *req)
{
    emhd_server *es = state;
    emhd_req *er = srv__request_engine_data(req);
    if (!emhd_b_wake(er, EMHD_B_KICK))
        return; /* the MHD thread runs: it looks at the state again */
    if (er->bfirst && !er->bend) /* reading goes on: its pace window opens */
        emhd_b_window(er);
    emhd_resume(es, er->conn);
    atomic_fetch_sub(&es->outstanding, 1);
}

/* respond for a streamed-body request (any thread). */
void emhd_sbody_respond(emhd_server *es, emhd_req *er)
{
    struct MHD_Connection *conn = er->conn;
    if (!emhd_b_wake(er, EMHD_B_ANS))
        return; /* the MHD thread runs and sees ANS: er may be gone now */
    /* Suspended: the MHD thread queues the answer once resumed (at the
     * head: in the repeated first call, so no 100 is ever sent). */
    emhd_resume(es, conn);
    atomic_fetch_sub(&es->outstanding, 1);
}
