/*
 * What the h2o engine's files share: engines/h2o.c (loops, accept, stop, the vtable),
 * engines/h2o_conn.c (a connection's I/O for the core's HTTP/1 and HTTP/2), engines/h2o_tls.c
 * (the handshake). The engine is a transport: libh2o-evloop's loops, sockets, TLS and
 * inter-thread messages, through its public API; every protocol byte is the core's
 * (core/h1conn.c, core/h2conn.c). Engine-private: nothing here is exported from libsrv.
 */
#ifndef SRV_ENGINES_H2O_INTERNAL_H
#define SRV_ENGINES_H2O_INTERNAL_H

#include "srv_conn.h"
#include "srv_engine.h"
#include "srv_h1conn.h"

#include <h2o.h>
#include <h2o/version.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#if H2O_VERSION_MAJOR != 2 || H2O_VERSION_MINOR != 2
#error "engines/h2o*.c are written for libh2o 2.2.x (see docs/ENGINES.md before porting)"
#endif

#define EH2O_LOOP_FDS         5    /* a loop's own: epoll, the queue's pipe, and two to find the epoll (h2o.c) */
#define EH2O_ACCEPT_BATCH     16   /* accepts per listener wake-up, so loops share them */
#define EH2O_ACCEPT_PAUSE_MS  100  /* out of fds: wait this long before accepting again */
#define EH2O_STOP_POLL_MS     10   /* the loop's control while quiescing and stopping */
#define EH2O_STOP_FORCE_MS    250  /* stop: then close the connections still open */

typedef struct eh2o_server eh2o_server;
typedef struct eh2o_thread eh2o_thread;

/* One connection; found again through sock->on_close. */
typedef struct eh2o_conn {
    h2o_linklist_t link; /* eh2o_thread.conns */
    h2o_socket_t *sock;
    eh2o_thread *thread;
    srv__conn conn; /* the core's policy: its max_connections slot and counts */
    /* The core's connection (core/h1conn.c, HTTP/2 behind it); NULL in a TLS handshake. */
    srv__h1conn *hc;
    h2o_timeout_entry_t feed; /* input h2o holds, offered again when the core reads */
    int reading;              /* the core wants input (srv__h1io.read) */
    int queued;               /* on eh2o_thread.posted (mu) */
    struct eh2o_conn *next_posted;
    int *closed;              /* set when the connection closes under a call that may close it */
    struct eh2o_tls_hs *tls_hs; /* engines/h2o_tls.c: in its TLS handshake */
    /* A file body by sendfile (srv__h1io.sendfile, cleartext; engines/h2o_conn.c). */
    srv__sendfile sf;
    int sf_done, sf_ok;          /* ended: srv__h1conn_written(sf_ok) is due */
    h2o_timeout_entry_t sf_next; /* the next burst, or the end, on a later turn */
} eh2o_conn;

struct eh2o_thread {
    eh2o_server *server;
    pthread_t tid;
    int listen_fd; /* this loop's dup() of the listening socket, until the listener owns it */
    /* Descriptors held for h2o_evloop_create (epoll) and the queue (its pipe), which abort()
     * the process when they cannot get one: start fails cleanly instead. */
    int spare[EH2O_LOOP_FDS];
    h2o_evloop_t *loop;
    int epoll_fd; /* the loop's, closed after h2o_evloop_destroy (which leaves it open) */
    h2o_multithread_queue_t *queue;
    h2o_socket_t *listener;
    h2o_multithread_receiver_t receiver; /* wake-ups for quiesce and stop (no messages) */
    h2o_timeout_t zero;
    h2o_timeout_t accept_pause; /* out of file descriptors: the listener rests */
    h2o_timeout_entry_t accept_resume;
    h2o_timeout_t tick;        /* the core's deadlines (srv__h1conn_time), every 50 ms */
    h2o_timeout_entry_t tick_entry;
    pthread_mutex_t mu;        /* posted, msg_queued */
    struct eh2o_conn *posted;  /* connections another thread woke (engines/h2o_conn.c) */
    h2o_multithread_receiver_t post_receiver; /* msg: take `posted` */
    h2o_multithread_message_t msg;
    int msg_queued;
    h2o_linklist_t conns;
    unsigned nconns; /* loop thread only */
    /* The loop's control (eh2o_on_control): on `zero` after a wake, then on `stop_poll`. */
    h2o_timeout_entry_t control;
    h2o_timeout_t stop_poll;
    int quiesced;
    int forced;       /* the stop closed what was still open */
    uint64_t stop_at; /* when this loop saw the stop; 0: not yet */
    struct eh2o_tls_thread *tls; /* engines/h2o_tls.c; NULL in cleartext */
};

struct eh2o_server {
    srv_server *srv;
    const srv_config *cfg;
    int listen_fd;
    unsigned nthreads;
    eh2o_thread *threads;
    srv__loopctl ctl; /* setup, quiesce and stop */
};

/* A connection's socket carries it in its `data` (set at the accept). */
static inline eh2o_conn *eh2o_sock_conn(h2o_socket_t *sock)
{
    return sock->data;
}

/* engines/h2o_conn.c: a connection's I/O for the core */
void eh2o_on_conn_close(void *data); /* sock->on_close.cb of every connection */
void eh2o_conn_start(eh2o_conn *c, int h2); /* serve c (h2: ALPN chose it) */
void eh2o_conn_closed(eh2o_conn *c);        /* from eh2o_on_conn_close */
void eh2o_conn_time(eh2o_thread *t, int stopping, int quiescing); /* every connection */
void eh2o_conn_thread_init(eh2o_thread *t);
void eh2o_conn_thread_dispose(eh2o_thread *t);

/* engines/h2o_tls.c: HTTPS (all no-ops on a cleartext server) */
typedef struct eh2o_tls_thread eh2o_tls_thread;
int eh2o_tls_thread_new(eh2o_thread *t, srv_server *srv); /* start: -1 out of memory */
void eh2o_tls_thread_loop(eh2o_thread *t);    /* on the loop, once it exists */
void eh2o_tls_thread_dispose(eh2o_thread *t); /* on the loop, before it is destroyed */
void eh2o_tls_thread_free(eh2o_thread *t);
/* Accept c over TLS: 1 when TLS took it (do not touch c or its socket again: it may be
 * closed already), 0 on a cleartext server. Once the handshake is done, ready(c, h2) serves
 * it (h2: ALPN chose it). */
int eh2o_tls_accept(eh2o_thread *t, eh2o_conn *c, void (*ready)(eh2o_conn *c, int h2));
void eh2o_tls_conn_closed(eh2o_conn *c); /* from eh2o_on_conn_close */
int eh2o_tls_handshaking(eh2o_conn *c);
void eh2o_tls_close(eh2o_conn *c); /* cut a connection still in its handshake */

#endif /* SRV_ENGINES_H2O_INTERNAL_H */
