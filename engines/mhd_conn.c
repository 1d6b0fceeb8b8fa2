/* The mhd engine: a connection's policy record (api/srv_conn.h) as the
 * MHD thread moves it, and the core's answers written past libmicrohttpd
 * (cleartext only) where MHD has no request to answer or cannot. */
#include "mhd_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/uio.h>

/* The core's clock, signed (the engine's own waits: linger, stop, raw writes). */
long long emhd_now_ms(void)
{
    return (long long)srv__now_ms();
}

/* The policy's state of a connection (ec->policy, under ec->mu). ec NULL
 * (out of memory at its start): no policy, nothing to do. */
void emhd_state(emhd_conn *ec, enum srv__conn_state state)
{
    if (ec == NULL)
        return;
    pthread_mutex_lock(&ec->mu);
    srv__conn_set(&ec->policy, state, srv__now_ms());
    pthread_mutex_unlock(&ec->mu);
}

/* The MHD thread moves a request on from `from`; false when the watchdog
 * or the stop answered it meanwhile (SRV_CONN_LINGER: its answer is
 * written past MHD, which must close). A refused connection stays
 * SRV_CONN_REFUSE (srv__conn_set) and moves on with its request to its 503. */
bool emhd_state_from(emhd_conn *ec, enum srv__conn_state from, enum srv__conn_state to)
{
    if (ec == NULL)
        return true;
    pthread_mutex_lock(&ec->mu);
    enum srv__conn_state now = ec->policy.state;
    bool ok = now == from || now == SRV_CONN_REFUSE;
    if (ok)
        srv__conn_set(&ec->policy, to, srv__now_ms());
    pthread_mutex_unlock(&ec->mu);
    return ok;
}

enum srv__conn_state emhd_state_of(emhd_conn *ec)
{
    pthread_mutex_lock(&ec->mu);
    enum srv__conn_state state = ec->policy.state;
    pthread_mutex_unlock(&ec->mu);
    return state;
}

/* No request on it (ec->mu held): accepted, kept alive, or refused with
 * nothing asked yet. */
bool emhd_waiting(const srv__conn *c)
{
    return c->state == SRV_CONN_FIRST || c->state == SRV_CONN_IDLE ||
           (c->state == SRV_CONN_REFUSE && !c->begun);
}

/* A new core request for a connection of MHD's, with the client's address. */
srv_request *emhd_request_new(emhd_server *es, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;
    socklen_t salen = 0;
    if (sa != NULL)
        salen = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                          : sizeof(struct sockaddr_in);
    return srv__request_new(es->srv, sa, salen);
}

/*
 * An answer MHD gave (or a close it made) without a request of ours: make
 * the core answer `status` on a request of its own, so the answer is
 * counted and logged like any other; when fd >= 0 also write the core's
 * answer on the socket (MHD wrote nothing and no longer will). Never over
 * TLS: those bytes would be cleartext inside the TLS stream (callers close
 * instead).
 */
void emhd_answer_raw(emhd_server *es, struct MHD_Connection *conn, int fd, int status,
                     const char *target, size_t target_len)
{
    srv_request *req = emhd_request_new(es, conn);
    if (req == NULL)
        return;
    if (target != NULL && target_len > 0)
        (void)srv__request_set_target(req, target, target_len); /* for the log only */
    emhd_answer_req(es, conn, req, fd, status);
}

/* emhd_answer_raw for a request already made (conn NULL: the gate's, before
 * MHD has the connection); releases req. */
void emhd_answer_req(emhd_server *es, struct MHD_Connection *conn, srv_request *req,
                     int fd, int status)
{
    emhd_req er = {.es = es, .conn = conn}; /* not suspended: respond only marks it */
    srv__request_set_engine_data(req, &er);
    srv__request_fail(req, status);
    if (fd >= 0 && !es->tls)
        emhd_write_raw(fd, req, 0);
    srv__request_release(req);
}

/* Write req's whole answer (the core's framing) on a cleartext socket,
 * waiting at most wait_ms for a slow reader (0: what the socket takes
 * now). Best effort. */
void emhd_write_raw(int fd, srv_request *req, int wait_ms)
{
    size_t hlen = 0, blen = 0;
    const char *head = srv__response_http1_head(req, &hlen);
    const void *body = srv__response_body(req, &blen);
    if (head == NULL)
        return;
    struct iovec iov[2] = {{(void *)head, hlen}, {(void *)body, blen}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = blen > 0 ? 2 : 1};
    long long until = emhd_now_ms() + wait_ms;
    while (mh.msg_iovlen > 0) {
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            long long left = until - emhd_now_ms();
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                return;
            continue;
        }
        if (n <= 0)
            return;
        size_t done = (size_t)n;
        while (mh.msg_iovlen > 0 && done >= mh.msg_iov[0].iov_len) {
            done -= mh.msg_iov[0].iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + done;
            mh.msg_iov[0].iov_len -= done;
        }
    }
}

/* An answer is being written (from SRV_CONN_APP): the watchdog cuts it
 * once the client acknowledges nothing for the policy's send deadline
 * (emhd_send_progressed). */
void emhd_sending(emhd_conn *ec)
{
    if (ec == NULL)
        return;
    pthread_mutex_lock(&ec->mu);
    if (ec->policy.state == SRV_CONN_APP) {
        atomic_store(&ec->acked, EMHD_ACKED_UNSAMPLED);
        srv__conn_set(&ec->policy, SRV_CONN_SEND, srv__now_ms());
    }
    pthread_mutex_unlock(&ec->mu);
}

/* n body bytes came while the connection waits in `state` (SRV_CONN_BODY,
 * or SRV_CONN_BODY_STREAM, which a pause left: a new pace window then):
 * the policy's pace. False when answered past MHD meanwhile. */
bool emhd_body_bytes(emhd_conn *ec, enum srv__conn_state state, size_t n)
{
    if (ec == NULL)
        return true;
    pthread_mutex_lock(&ec->mu);
    srv__conn *c = &ec->policy;
    uint64_t now = srv__now_ms();
    bool ok = c->state == state || c->state == SRV_CONN_REFUSE || state == SRV_CONN_BODY_STREAM;
    if (ok && c->state != state)
        srv__conn_set(c, state, now);
    if (ok)
        srv__conn_body_bytes(c, n, now);
    pthread_mutex_unlock(&ec->mu);
    return ok;
}
