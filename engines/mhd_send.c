/* The mhd engine: the core's answers queued on libmicrohttpd's
 * connection: a whole response, a streamed one (MHD's content reader and
 * the core's stream_kick), a static file by MHD's sendfile, and a
 * WebSocket's 101 by MHD's upgrade, after which the core's socket loop
 * carries the socket. */
#include "mhd_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Body bytes of a HEAD (or 304) response are never read: MHD only uses the
 * size for Content-Length. */
static ssize_t emhd_no_body(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)pos;
    (void)buf;
    (void)max;
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* The core's response headers of `req` onto MHD's response (bare: none of
 * the non-framing ones), and the request's version. */
static void emhd_add_headers(struct MHD_Response *r, srv_request *req, bool bare, bool close)
{
    size_t count = bare ? 0 : srv__response_header_count(req);
    for (size_t i = 0; i < count; i++) {
        const char *value = NULL;
        const char *name = srv__response_header_at(req, i, &value);
        if (name != NULL && value != NULL)
            (void)MHD_add_response_header(r, name, value);
    }
    if (close)
        (void)MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* Queue req's (non-streamed) answer on er's connection. req is er->req,
 * or a replacement the caller releases after this (copy: MHD keeps its
 * own copy of the body). */
static enum MHD_Result emhd_queue(emhd_req *er, struct MHD_Connection *conn, srv_request *req,
                                  bool bare, bool copy)
{
    size_t len = 0;
    const void *body = srv__response_body(req, &len);
    size_t clen = srv__response_content_length(req);
    struct MHD_Response *r;
    if (len == 0 && clen > 0) /* HEAD: advertise the length a GET sends */
        r = MHD_create_response_from_callback(clen, 1024, emhd_no_body, NULL, NULL);
    else
        r = MHD_create_response_from_buffer(len, (void *)(len > 0 ? body : ""),
                                            copy ? MHD_RESPMEM_MUST_COPY
                                                 : MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    emhd_add_headers(r, req, bare, er->closes || !srv__response_keep_alive(req));
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)srv__response_status(req), r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        emhd_sending(er->ec);
    return ret;
}

/* ------------------------------------------------------------------ */
/* Streamed responses                                                  */
/* ------------------------------------------------------------------ */

/* A streamed response's content reader and the core's stream_kick agree
 * through er->sstate on who resumes the connection: the reader suspends
 * when the core has nothing, and the kick resumes it, even when it comes
 * between the reader's pull and its suspend. */
enum {
    EMHD_S_RUN,    /* the reader is pulling */
    EMHD_S_SUSP,   /* suspended for data: the kick resumes */
    EMHD_S_KICKED  /* kicked before the reader suspended: it resumes itself */
};

/* MHD's content reader (the connection's MHD thread): copy what the core
 * has. MHD frames it: chunked for HTTP/1.1 without a length, the close for
 * HTTP/1.0, and it writes the last chunk at END_OF_STREAM. */
static ssize_t emhd_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    emhd_req *er = cls;
    emhd_server *es = er->es;
    atomic_store(&er->sstate, EMHD_S_RUN);
    const void *d = NULL;
    size_t len = 0;
    int k = srv__stream_pull(er->req, &d, &len);
    if (k == SRV__STREAM_DATA) {
        size_t n = len < max ? len : max;
        memcpy(buf, d, n);
        srv__stream_sent(er->req, n);
        emhd_sending(er->ec); /* writing again after a wait: the send deadline from now */
        return (ssize_t)n;
    }
    if (k == SRV__STREAM_END)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (k == SRV__STREAM_CUT) /* MHD closes without the last chunk */
        return MHD_CONTENT_READER_END_WITH_ERROR;
    /* Nothing yet: no send deadline while the application is silent, and
     * the connection leaves MHD's loop until the kick. */
    (void)emhd_state_from(er->ec, SRV_CONN_SEND, SRV_CONN_APP);
    atomic_fetch_add(&es->outstanding, 1); /* stop resumes every one first */
    MHD_suspend_connection(er->conn);
    if (atomic_exchange(&er->sstate, EMHD_S_SUSP) == EMHD_S_KICKED) {
        atomic_store(&er->sstate, EMHD_S_RUN);
        emhd_resume(es, er->conn);
        atomic_fetch_sub(&es->outstanding, 1);
    }
    return 0; /* MHD calls again once resumed */
}

/* stream_kick slot: any thread, the request's lock held. The connection is
 * suspended (or about to be) inside the reader, so er lives. */
void emhd_stream_kick(void *state, srv_request *req)
{
    emhd_server *es = state;
    emhd_req *er = srv__request_engine_data(req);
    if (atomic_exchange(&er->sstate, EMHD_S_KICKED) == EMHD_S_SUSP) {
        atomic_store(&er->sstate, EMHD_S_RUN);
        emhd_resume(es, er->conn);
        atomic_fetch_sub(&es->outstanding, 1);
    }
}

/* emhd_send for a streamed response: a callback response of the known
 * length, or MHD_SIZE_UNKNOWN. */
static enum MHD_Result emhd_stream_send(emhd_req *er, struct MHD_Connection *conn)
{
    srv_request *req = er->req;
    int64_t length = srv__response_stream_length(req);
    bool bodiless = srv__response_stream_bodiless(req);
    atomic_store(&er->sstate, EMHD_S_RUN);
    struct MHD_Response *r = NULL;
    const void *d = NULL;
    size_t dlen = 0;
    srv__stream_chunk file;
    /* Over TLS the reader's pieces (the core reads the stream buffer's
     * worth) make bigger records than MHD's own 4 KiB file reads. */
    if (!bodiless && length > 0 && !er->es->tls && srv__response_stream_file(req) &&
        srv__stream_pull_file(req, &d, &dlen, &file) == SRV__STREAM_FILE) {
        /* A static file: libmicrohttpd sends it from the descriptor
         * (sendfile) and closes its own copy. */
        int fd = fcntl(file.fd, F_DUPFD_CLOEXEC, 0);
        if (fd >= 0) {
            r = MHD_create_response_from_fd_at_offset64(file.len, fd, file.off);
            if (r == NULL)
                close(fd);
        }
        if (r == NULL)
            srv__stream_sent(req, 0); /* lent back: the reader reads it */
        else
            er->file_len = file.len;
    }
    if (r == NULL)
        r = MHD_create_response_from_callback(
            length >= 0 ? (uint64_t)length : MHD_SIZE_UNKNOWN, 65536,
            bodiless ? emhd_no_body : emhd_stream_read, bodiless ? NULL : er, NULL);
    if (r == NULL)
        return MHD_NO;
    emhd_add_headers(r, req, false, !srv__response_keep_alive(req));
    /* HEAD of a stream of unknown length: libmicrohttpd 0.9.75 frames it
     * chunked and writes the last chunk after the head, which the client
     * reads as the start of the next answer. Its public strict HTTP/1.0
     * framing sends neither Transfer-Encoding nor a body, and closes the
     * connection after the head (docs/ENGINES.md). */
    if (bodiless && length < 0) {
        (void)MHD_set_response_options(r, MHD_RF_HTTP_1_0_COMPATIBLE_STRICT, MHD_RO_END);
        er->closes = true; /* MHD's close, not a dropped request line */
    }
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)srv__response_status(req), r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        emhd_sending(er->ec);
    return ret;
}

/* ---- WebSocket: the 101 by MHD's upgrade, then the core's socket loop ---- */

/* The socket loop, made at the first upgrade (es->lock). */
static srv__sockloop *emhd_sockloop(emhd_server *es)
{
    pthread_mutex_lock(&es->lock);
    if (es->sockloop == NULL && !atomic_load(&es->stopping_ws) &&
        srv__sockloop_start(&es->sockloop, es->srv) != 0)
        es->sockloop = NULL;
    srv__sockloop *l = es->sockloop;
    pthread_mutex_unlock(&es->lock);
    return l;
}

/* An upgraded socket, as the socket loop's `done` needs it. */
typedef struct emhd_upgrade {
    emhd_server *es;
    struct MHD_Daemon *daemon; /* the connection's (its loop is woken) */
    struct MHD_UpgradeResponseHandle *urh;
} emhd_upgrade;

/* MHD closes an upgraded socket: MHD_upgrade_action resumes the
 * connection, which its loop then cleans up (and reports closed); the
 * loop waits in epoll, so it is woken as for any resume (emhd_resume). */
static void emhd_upgrade_close(emhd_server *es, struct MHD_Daemon *d,
                               struct MHD_UpgradeResponseHandle *urh)
{
    (void)MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    for (unsigned i = 0; i < es->nloops; i++)
        if (es->loops[i].daemon == d)
            emhd_loop_wake(&es->loops[i]);
}

/* The socket loop is done with an upgraded socket. Its thread. */
static void emhd_upgrade_done(void *ctx)
{
    emhd_upgrade *u = ctx;
    emhd_upgrade_close(u->es, u->daemon, u->urh);
    free(u);
}

/* MHD wrote the 101 and hands the socket over (over TLS one end of MHD's
 * socket pair, which MHD encrypts). The MHD thread. */
static void emhd_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls,
                          const char *extra_in, size_t extra_in_size, MHD_socket sock,
                          struct MHD_UpgradeResponseHandle *urh)
{
    (void)req_cls;
    emhd_req *er = cls;
    emhd_conn *ec = er->ec;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    struct MHD_Daemon *d = ci != NULL ? ci->daemon : NULL;
    srv__sockloop *l = ec != NULL && er->req != NULL ? emhd_sockloop(er->es) : NULL;
    emhd_upgrade *u = l != NULL ? malloc(sizeof *u) : NULL;
    if (u == NULL) {
        if (er->req != NULL)
            srv__sockloop_upgrade_drop(er->req);
        emhd_upgrade_close(er->es, d, urh);
        return;
    }
    *u = (emhd_upgrade){er->es, d, urh};
    pthread_mutex_lock(&ec->mu); /* the watchdog looks at it under mu */
    atomic_store(&ec->upgraded, true);
    pthread_mutex_unlock(&ec->mu);
    if (srv__sockloop_add(l, sock, NULL, NULL, er->req, &ec->policy, extra_in, extra_in_size,
                          emhd_upgrade_done, u) != 0) {
        free(u);
        emhd_upgrade_close(er->es, d, urh);
    }
}

/* Queue req's 101 (head: the core's, srv__sockloop_upgrade_head) as MHD's
 * upgrade response: its header lines one by one (MHD writes the status
 * line, and wants the Connection header's upgrade token). */
static enum MHD_Result emhd_upgrade_send(emhd_req *er, struct MHD_Connection *conn,
                                         const char *head, size_t len)
{
    struct MHD_Response *r = MHD_create_response_for_upgrade(emhd_upgraded, er);
    const char *p = memchr(head, '\n', len), *end = head + len;
    char line[1024];
    while (r != NULL && p != NULL && ++p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t n = eol != NULL ? (size_t)(eol - p) : 0;
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break; /* the blank line */
        const char *colon = memchr(p, ':', n);
        if (colon == NULL || n >= sizeof line)
            break;
        memcpy(line, p, n);
        line[n] = '\0';
        char *v = line + (colon - p) + 1;
        line[colon - p] = '\0';
        while (*v == ' ')
            v++;
        if (MHD_add_response_header(r, line, v) != MHD_YES) {
            MHD_destroy_response(r);
            r = NULL;
        }
        p = eol;
    }
    enum MHD_Result ret = r != NULL ? MHD_queue_response(conn, 101, r) : MHD_NO;
    if (r != NULL)
        MHD_destroy_response(r);
    if (ret != MHD_YES) {
        srv__sockloop_upgrade_drop(er->req); /* MHD closes the connection */
        return MHD_NO;
    }
    emhd_sending(er->ec);
    return MHD_YES;
}

/* Queue the answer the core finished for er->req: a WebSocket's 101, a
 * streamed response, or a whole one. MHD frames it (status line, Date,
 * Content-Length, Connection); the body stays owned by the request, which
 * lives until MHD_OPTION_NOTIFY_COMPLETED. The MHD thread. */
enum MHD_Result emhd_send(emhd_req *er, struct MHD_Connection *conn)
{
    srv_request *req = er->req;
    size_t hlen = 0;
    const char *head = srv__sockloop_upgrade_head(req, &hlen);
    if (head != NULL)
        return emhd_upgrade_send(er, conn, head, hlen);
    if (srv__response_streamed(req))
        return emhd_stream_send(er, conn);
    return emhd_queue(er, conn, req, false, false);
}
