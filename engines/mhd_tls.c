/* The mhd engine's HTTPS: libmicrohttpd's own GnuTLS (MHD_USE_TLS) with
 * the core's GnuTLS contexts: the certificate per handshake (a reload
 * reaches new connections), client certificates required as on the
 * OpenSSL engines, and a handshake that waits for its client suspended
 * off MHD's loop instead of spinning it (emhd_tls_pull). */
#include "mhd_int.h"

#include <gnutls/abstract.h>

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* TLS: the most a client may send before its handshake is done. A real
 * one is a few KB, a client certificate chain tens of KB (GnuTLS's own
 * limit for one handshake message is 128 KB, OpenSSL's certificate list
 * 100 KB); the other engines' OpenSSL cuts an endless one by ~2.7 MB. */
#define EMHD_TLS_HANDSHAKE_MAX (256u << 10)

/*
 * TLS: the certificate for a handshake (MHD_OPTION_HTTPS_CERT_CALLBACK, a
 * gnutls_certificate_retrieve_function2, on the connection's MHD thread):
 * the generation current now, so connections accepted after
 * srv_server_reload_tls get the new certificate while open ones keep the
 * one they took. The connection holds it until MHD has freed its session.
 */
static int emhd_tls_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                         const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                         gnutls_pcert_st **pcert, unsigned int *pcert_length,
                         gnutls_privkey_t *privkey)
{
    (void)req_ca_rdn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    struct MHD_Connection *conn = gnutls_session_get_ptr(session); /* MHD sets it */
    const union MHD_ConnectionInfo *ci =
        conn != NULL ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    emhd_conn *ec = ci != NULL ? ci->socket_context : NULL;
    if (ec == NULL)
        return -1; /* out of memory at the accept: the handshake fails */
    if (ec->tls == NULL)
        ec->tls = srv__tls_gnutls(ec->es->srv, NULL);
    if (ec->tls == NULL)
        return -1;
    *pcert = ec->tls->certs;
    *pcert_length = ec->tls->ncerts;
    *privkey = ec->tls->key;
    return 0;
}

/* TLS: the client's Finished arrived (the handshake is done on our side).
 * The bytes received so far are the handshake's: quiesce's "a next
 * request has begun" (emhd_quiesce_idle) counts from here, so a connection
 * with a handshake and no request yet is idle, as a fresh cleartext one. */
static int emhd_tls_finished(gnutls_session_t session, unsigned htype, unsigned when,
                             unsigned incoming, const gnutls_datum_t *msg)
{
    (void)htype;
    (void)when;
    (void)msg;
    struct MHD_Connection *conn = gnutls_session_get_ptr(session);
    const union MHD_ConnectionInfo *ci =
        incoming && conn != NULL
            ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT)
            : NULL;
    emhd_conn *ec = ci != NULL ? ci->socket_context : NULL;
    if (ec != NULL)
        atomic_store(&ec->handshaken, true);
    return 0;
}

/*
 * TLS: the socket read GnuTLS makes (gnutls_transport_set_pull_function).
 * libmicrohttpd 0.9.75 lets GnuTLS read the socket itself during the
 * handshake, so its epoll loop never sees the EAGAIN that clears the
 * connection's read-ready mark: it would call gnutls_handshake again and
 * again (with epoll_wait(0) between) until the client's next flight came,
 * a core busy for a round trip per handshake (docs/BENCHMARKS.md). Instead
 * a handshake that finds the socket empty suspends its connection (MHD
 * drops it from its loop) and emhd_hs_thread resumes it when the socket
 * turns readable (or hung up, or shut down by the watchdog's deadline).
 * After the handshake it is a plain recv. MHD thread.
 */
static ssize_t emhd_tls_pull(gnutls_transport_ptr_t ptr, void *buf, size_t len)
{
    emhd_conn *ec = ptr;
    ssize_t n = recv(ec->fd, buf, len, 0);
    int err = n < 0 ? errno : 0;
    if (n > 0 && !atomic_load(&ec->handshaken)) {
        /* GnuTLS reassembles whatever length a ClientHello announces (a
         * 16 MiB one grew the server by 8 MiB a connection): past
         * EMHD_TLS_HANDSHAKE_MAX the handshake fails, as OpenSSL's does. */
        ec->hs_bytes += (size_t)n;
        if (ec->hs_bytes > EMHD_TLS_HANDSHAKE_MAX) {
            gnutls_transport_set_errno(ec->session, ECONNRESET);
            return -1;
        }
    }
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK) && !atomic_load(&ec->handshaken)) {
        emhd_server *es = ec->es;
        pthread_mutex_lock(&es->hs_mu);
        if (!es->hs_stopping && !ec->hs_waiting) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT,
                                     .data.ptr = ec};
            if (epoll_ctl(es->hs_epfd, EPOLL_CTL_ADD, ec->fd, &ev) == 0) {
                ec->hs_waiting = true;
                MHD_suspend_connection(ec->conn);
            } /* else MHD calls again, as it would have */
        }
        pthread_mutex_unlock(&es->hs_mu);
    }
    if (n < 0)
        gnutls_transport_set_errno(ec->session, err);
    return n;
}

/* Resumes a connection suspended by emhd_tls_pull. hs_mu held. */
static void emhd_hs_resume(emhd_server *es, emhd_conn *ec)
{
    epoll_ctl(es->hs_epfd, EPOLL_CTL_DEL, ec->fd, NULL);
    ec->hs_waiting = false;
    emhd_resume(es, ec->conn);
}

/* The only thread that resumes those connections while the server runs,
 * so an event it took cannot outlive its connection: a suspended
 * connection is not closed by MHD. */
static void *emhd_hs_thread(void *arg)
{
    emhd_server *es = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(es->hs_epfd, evs, 64, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL)
                return NULL; /* hs_wake: the stop */
            emhd_conn *ec = evs[i].data.ptr;
            pthread_mutex_lock(&es->hs_mu);
            if (ec->hs_waiting)
                emhd_hs_resume(es, ec);
            pthread_mutex_unlock(&es->hs_mu);
        }
    }
}

/* Stop: no new suspension, the thread ends, and every connection still
 * waiting is resumed (MHD_stop_daemon panics on a suspended connection;
 * it closes them). */
void emhd_hs_stop(emhd_server *es)
{
    if (!es->hs_started)
        return;
    pthread_mutex_lock(&es->hs_mu);
    es->hs_stopping = true;
    pthread_mutex_unlock(&es->hs_mu);
    uint64_t one = 1;
    while (write(es->hs_wake, &one, sizeof one) < 0 && errno == EINTR)
        ;
    pthread_join(es->hs_thread, NULL);
    es->hs_started = false;
    pthread_mutex_lock(&es->lock);
    pthread_mutex_lock(&es->hs_mu);
    for (emhd_conn *ec = es->conns; ec != NULL; ec = ec->next)
        if (ec->hs_waiting)
            emhd_hs_resume(es, ec);
    pthread_mutex_unlock(&es->hs_mu);
    pthread_mutex_unlock(&es->lock);
}

/* The epoll set, its wake-up and its thread; 0 or an SRV_E* code. */
static int emhd_hs_start(emhd_server *es)
{
    es->hs_epfd = epoll_create1(EPOLL_CLOEXEC);
    es->hs_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (es->hs_epfd < 0 || es->hs_wake < 0 ||
        epoll_ctl(es->hs_epfd, EPOLL_CTL_ADD, es->hs_wake, &ev) != 0)
        return SRV_ENOMEM;
    if (srv__thread_create(&es->hs_thread, NULL, emhd_hs_thread, es) != 0)
        return SRV_ETHREAD;
    es->hs_started = true;
    return 0;
}

void emhd_hs_close(emhd_server *es)
{
    if (es->hs_epfd >= 0)
        close(es->hs_epfd);
    if (es->hs_wake >= 0)
        close(es->hs_wake);
    es->hs_epfd = es->hs_wake = -1;
}

/* TLS, a new connection. With tls_client_ca_file, a client without a
 * certificate that the CA file verifies fails the handshake, as on the
 * OpenSSL engines (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT):
 * MHD only requests one (GNUTLS_CERT_REQUEST) and verifies nothing. */
void emhd_tls_session(emhd_server *es, struct MHD_Connection *conn, emhd_conn *ec)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (ci == NULL || ci->tls_session == NULL)
        return;
    gnutls_session_t session = ci->tls_session;
    if (ec != NULL && ec->fd >= 0) {
        /* Our pull (its pointer: ec); the push keeps the socket (MHD's). */
        ec->session = session;
        gnutls_transport_set_pull_function(session, emhd_tls_pull);
        gnutls_transport_set_ptr2(session, ec, (gnutls_transport_ptr_t)(intptr_t)ec->fd);
    }
    gnutls_handshake_set_hook_function(session, GNUTLS_HANDSHAKE_FINISHED, GNUTLS_HOOK_POST,
                                       emhd_tls_finished);
    if (es->tls_start == NULL || es->tls_start->client_ca_pem == NULL)
        return;
    gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(session, NULL, 0); /* against MHD's trust list */
}

/* HTTPS: MHD's GnuTLS with the core's context (validated at srv_server_start): the
 * certificate comes from emhd_tls_cert at each handshake, so a reload reaches new
 * connections. MHD's own timeout and the watchdog's first-head deadline cover the handshake
 * too. Options from tls_opts[n] on; 0 or an SRV_E code with the reason set. */
int emhd_tls_options(emhd_server *es, srv_server *srv, struct MHD_OptionItem *tls_opts,
                     size_t n, unsigned *flags)
{
    es->tls_start = srv__tls_gnutls(srv, NULL);
    if (es->tls_start == NULL || MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
        srv__server_set_error(srv, "mhd: this libmicrohttpd has no HTTPS support (GnuTLS "
                              "with certificate callbacks)");
        return SRV_ETLS;
    }
    es->tls = true;
    *flags |= MHD_USE_TLS;
    tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
                                            (void *)(uintptr_t)emhd_tls_cert};
    tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                            (void *)es->tls_start->priorities};
    tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_DHPARAMS, 0,
                                            (void *)es->tls_start->dh_params_pem};
    if (es->tls_start->client_ca_pem != NULL)
        tls_opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0,
                                                (void *)es->tls_start->client_ca_pem};
    tls_opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    int rc = emhd_hs_start(es);
    if (rc != 0)
        srv__server_set_error(srv, "mhd: cannot start the TLS handshake thread");
    return rc;
}
