/*
 * What the h2o engine's files share (engines/h2o.c: loops, requests, connections, the vtable;
 * h2o_h1guard.c: the HTTP/1 framing guard; h2o_http2.c: HTTP/2 resets, deadlines and the
 * mirror of h2o's connection). Engine-private: nothing here is exported from libsrv.
 */
#ifndef SRV_ENGINES_H2O_INTERNAL_H
#define SRV_ENGINES_H2O_INTERNAL_H

#include "srv_conn.h"
#include "srv_engine.h"
#include "srv_h1conn.h"

#include <h2o.h>
#include <h2o/http2.h>
#include <h2o/http2_scheduler.h>
#include <h2o/version.h>

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
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

/*
 * The head of h2o 2.2.5's struct st_h2o_http2_conn_t (include/h2o/http2_internal.h), up to
 * the write buffer: that header cannot be included (it needs klib's khash.h, which Debian does
 * not install). Used only to queue a GOAWAY on a reset flood, and only on a connection whose
 * layout eh2o_h2_conn checked against three self-linked lists first.
 */
struct eh2o_hpack_table {
    void *entries;
    size_t num_entries, entry_capacity, entry_start_index;
    size_t hpack_size, hpack_capacity, hpack_max_capacity;
};
struct st_h2o_http2_conn_t {
    h2o_conn_t super;
    h2o_socket_t *sock;
    h2o_http2_settings_t peer_settings;
    void *streams; /* khash_t(h2o_http2_stream_t) * */
    struct {
        uint32_t max_open, max_processed;
    } pull_stream_ids;
    struct {
        uint32_t max_open;
    } push_stream_ids;
    struct {
        uint32_t open, half_closed, send_body;
    } num_streams[3];
    h2o_http2_scheduler_node_t scheduler;
    enum { EH2O_H2_OPEN, EH2O_H2_HALF_CLOSED, EH2O_H2_IS_CLOSING } state;
    h2o_linklist_t _conns; /* h2o_context_t::http2._conns */
    ssize_t (*_read_expect)(void *conn, const uint8_t *src, size_t len, const char **err_desc);
    h2o_buffer_t *_http1_req_input;
    struct eh2o_hpack_table _input_header_table;
    ssize_t _input_window;
    struct eh2o_hpack_table _output_header_table;
    h2o_linklist_t _pending_reqs;
    h2o_timeout_entry_t _timeout_entry;
    h2o_buffer_t *_headers_unparsed;
    struct {
        h2o_buffer_t *buf;
        h2o_buffer_t *buf_in_flight;
        h2o_linklist_t streams_to_proceed;
        h2o_timeout_entry_t timeout_entry;
        struct { ssize_t _avail; } window; /* the connection's output window */
    } _write;
};
typedef struct st_h2o_http2_conn_t eh2o_h2conn;

/* klib's khash map of h2o_http2_stream_t (KHASH_MAP_INIT_INT64), as 2.2.5 lays it out: the
 * streams of a connection are found through it. A bucket is live when its two flag bits are 0. */
typedef struct eh2o_h2stream eh2o_h2stream;
struct eh2o_khash_streams {
    uint32_t n_buckets, size, n_occupied, upper_bound;
    uint32_t *flags;
    uint64_t *keys;
    eh2o_h2stream **vals;
};
#define EH2O_KH_LIVE(h, i) ((((h)->flags[(i) >> 4] >> (((i)&0xfU) << 1)) & 3) == 0)

/* h2o 2.2.5's struct st_h2o_http2_stream_t (same header): the request is its last member, so
 * the stream of an h2o_req_t is found from it; used only for a stream the connection's own
 * table returns for that id (eh2o_h2_stream). */
enum {
    EH2O_H2S_IDLE,
    EH2O_H2S_RECV_HEADERS,
    EH2O_H2S_RECV_BODY,
    EH2O_H2S_REQ_PENDING,
    EH2O_H2S_SEND_HEADERS /* and later: being answered */
};
struct eh2o_h2stream {
    uint32_t stream_id;
    h2o_ostream_t _ostr_final;
    int state; /* EH2O_H2S_* (h2o_http2_stream_state_t) */
    struct { ssize_t _avail; } output_window, input_window;
    h2o_http2_priority_t received_priority;
    h2o_buffer_t *_req_body; /* NULL unless a body is expected */
    size_t _expected_content_length;
    H2O_VECTOR(h2o_iovec_t) _data;
    h2o_ostream_pull_cb _pull_cb;
    void *_num_streams_slot;
    void *cache_digests;
    union {
        struct {
            uint32_t parent_stream_id;
            unsigned promise_sent : 1;
        } push;
        struct {
            unsigned casper_is_ready : 1;
        } pull;
    };
    struct {
        h2o_linklist_t link;
        h2o_http2_scheduler_openref_t scheduler;
    } _refs;
    h2o_send_state_t send_state;
    h2o_req_t req;
};
/* Exported by libh2o-evloop 2.2.5, declared in the same uninstallable header. */
void h2o_http2_encode_goaway_frame(h2o_buffer_t **buf, uint32_t last_stream_id, int errnum,
                                   h2o_iovec_t additional_data);
void h2o_http2_conn_request_write(eh2o_h2conn *conn);
void h2o_http2_stream_reset(eh2o_h2conn *conn, eh2o_h2stream *stream);
uint8_t *h2o_http2_encode_frame_header(uint8_t *dst, size_t length, uint8_t type, uint8_t flags,
                                       int32_t stream_id);
void h2o_http2__encode_rst_stream_frame(h2o_buffer_t **buf, uint32_t stream_id, int errnum);
void h2o_http2_encode_window_update_frame(h2o_buffer_t **buf, uint32_t stream_id,
                                          int32_t window_size_increment);
#define EH2O_FRAME_DATA    0 /* frame types and flags (RFC 9113 6) */
#define EH2O_FRAME_HEADERS 1
#define EH2O_FLAG_END_STREAM  0x1
#define EH2O_FLAG_END_HEADERS 0x4

#define EH2O_LOOP_FDS         3    /* a loop's own descriptors: epoll + the queue's pipe */
#define EH2O_ACCEPT_BATCH     16   /* accepts per listener wake-up, so loops share them */
#define EH2O_ACCEPT_PAUSE_MS  100  /* out of fds: wait this long before accepting again */
#define EH2O_STOP_POLL_MS     10   /* loop tick while stopping */
#define EH2O_STOP_FORCE_MS    250  /* stop: then shutdown() the connections still open */
#define EH2O_STOP_GIVEUP_MS   3000 /* stop: then leave the loop undisposed, never free in use */
/* HTTP/2 rapid reset (CVE-2023-44487): more than this many streams withdrawn by the client
 * before their answer, within one window, get GOAWAY (ENHANCE_YOUR_CALM) and a close. A
 * browser cancels at most its open streams (100, h2o's limit) at once. */
#define EH2O_RESET_BUDGET    100
#define EH2O_RESET_WINDOW_MS 1000

typedef struct eh2o_server eh2o_server;
typedef struct eh2o_thread eh2o_thread;

/* One connection being served; found again through sock->on_close. */
typedef struct eh2o_conn {
    h2o_linklist_t link; /* eh2o_thread.conns */
    h2o_socket_t *sock;
    eh2o_thread *thread;
    srv__conn conn; /* the core's policy: its max_connections slot and counts */
    /* HTTP/2 only, set by its first request: */
    eh2o_h2conn *h2; /* NULL unless its layout checked out */
    int h2_checked;
    h2o_socket_cb h2_on_read;  /* h2o's HTTP/2 read callback: closing through it is clean */
    uint64_t reset_window_at;  /* start of the current reset-counting window */
    unsigned resets;           /* streams withdrawn in that window */
    h2o_timeout_entry_t calm;  /* linked once the flood GOAWAY is queued: then close */
    unsigned h2_with_us;       /* requests given to the core, answer not yet written */
    unsigned h2_to_dispatch;   /* requests on eh2o_thread.to_dispatch */
    unsigned h2_arriving;      /* counted in srv__request_arriving (eh2o_h2_note) */
    uint64_t recv_since;       /* since when some request has been arriving (0: none) */
    uint64_t sent_since;       /* last time h2o issued a write (or had none due) */
    size_t sent_mark;          /* sock->bytes_written then */
    /* HTTP/1 (engines/h2o_h1.c): the core serves it (core/h1conn.c); NULL once HTTP/2 has
     * the connection, or in a TLS handshake. */
    srv__h1conn *hc;
    int sniff;                /* cleartext: the first bytes may be HTTP/2's preface */
    int http2;                /* h2o's HTTP/2 has it (eh2o_h2_accept) */
    struct timeval connected_at;
    h2o_timeout_entry_t h1_feed; /* input h2o holds, offered again when the core reads */
    int h1_reading;           /* the core wants input (srv__h1io.read) */
    int h1_queued;            /* on eh2o_thread.h1_posted (h1_mu) */
    struct eh2o_conn *h1_next;
    int *closed;              /* set when the connection closes under a call that may close it */
    /* HTTP/2's start: frames that came with the preface, held until the walk of streamed
     * bodies is in place (engines/h2o_http2.c): held_len bytes at held + held_off. */
    char *held;
    size_t held_off, held_len;
    h2o_timeout_entry_t inject;
    struct eh2o_body *h2_bodies; /* HTTP/2 streams whose body streams (engines/h2o_body.c) */
    /* h2o's _read_expect while eh2o_h2_expect takes its place (streamed bodies) */
    ssize_t (*h2_expect)(void *conn, const uint8_t *src, size_t len, const char **err);
    int h2_in_block;             /* a header block's CONTINUATION is due */
    uint32_t h2_examined;        /* the last stream whose head eh2o_h2_take_stream saw */
    h2o_timeout_entry_t h2_after_entry; /* after the read: windows, bodies, the hold */
    size_t h2_owed;              /* connection window the walk owes the client */
    int h2_held_back;            /* reads stopped: streamed bodies hold EH2O_H2_HOLD_MAX */
    h2o_timeout_entry_t h2_hold_entry; /* look again after this loop turn (eh2o_h2_hold_later) */
    struct eh2o_tls_hs *tls_hs; /* engines/h2o_tls.c: in its TLS handshake */
} eh2o_conn;

/*
 * The ticket of one request: the srv_request, the h2o_req_t while it lives and the message
 * that brings the response back. Two references, both dropped on the loop thread only: the
 * guard's (the h2o_req_t's pool was cleared) and the core's (the response was processed).
 */
typedef struct eh2o_ticket {
    h2o_multithread_message_t msg; /* sent by the respond slot, from any thread */
    eh2o_thread *thread;           /* the loop that owns the connection */
    srv_request *sreq;
    h2o_req_t *req; /* NULL once h2o disposed it (HTTP/2 reset, connection gone) */
    eh2o_conn *conn; /* HTTP/2: the connection, to count resets (valid while req is) */
    eh2o_conn *h2_stop;           /* the stop's 503 to a stream still arriving, */
    uint32_t h2_stream;           /* written by us on this stream */
    h2o_linklist_t pending; /* eh2o_thread.to_dispatch until handed to the core */
    struct eh2o_body *body; /* a streamed request body (engines/h2o_body.c); one reference */
    int done; /* the response reached the loop: a later dispose is no reset */
    int refs;
} eh2o_ticket;

struct eh2o_thread {
    eh2o_server *server;
    pthread_t tid;
    int listen_fd; /* this loop's dup() of the listening socket, until the listener owns it */
    /* Descriptors held for h2o_evloop_create (epoll) and h2o_context_init (its queue's pipe),
     * which abort() the process when they cannot get one: start fails cleanly instead. */
    int spare[EH2O_LOOP_FDS];
    h2o_evloop_t *loop;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener;
    h2o_multithread_receiver_t receiver; /* responses (tickets) and NULL wake-ups */
    h2o_multithread_receiver_t stream_receiver; /* stream kicks (engines/h2o_stream.c) */
    h2o_multithread_receiver_t body_receiver;   /* body kicks (engines/h2o_body.c) */
    unsigned streams; /* streamed responses not yet freed; loop thread only */
    h2o_timeout_t accept_pause; /* out of file descriptors: the listener rests */
    h2o_timeout_entry_t accept_resume;
    /* HTTP/2 requests are handed to the core after the read that parsed them, so a
     * RST_STREAM in the same read cancels them before any worker sees them. */
    h2o_timeout_t zero;
    h2o_timeout_entry_t dispatch_entry;
    h2o_timeout_t sweep; /* HTTP/2 deadlines (eh2o_h2_check) */
    h2o_timeout_t send_timeout; /* streamed bodies' pace window: header_timeout_ms */
    h2o_timeout_t h1_tick;        /* HTTP/1 deadlines (srv__h1conn_time), every 50 ms */
    h2o_timeout_entry_t h1_tick_entry;
    pthread_mutex_t h1_mu;        /* h1_posted, h1_msg_queued */
    struct eh2o_conn *h1_posted;  /* HTTP/1 connections another thread woke (eh2o_h1_wake) */
    h2o_multithread_receiver_t h1_receiver; /* h1_msg: take h1_posted (engines/h2o_h1.c) */
    h2o_multithread_message_t h1_msg;
    int h1_msg_queued;
    h2o_timeout_entry_t sweep_entry;
    h2o_linklist_t to_dispatch;
    h2o_linklist_t conns;
    unsigned nconns; /* loop thread only */
    unsigned live;   /* tickets whose response was not processed yet; loop thread only */
    int quiesced;
    int abandoned; /* connections would not close: context and loop left undisposed */
    struct eh2o_tls_thread *tls; /* engines/h2o_tls.c; NULL in cleartext */
};

typedef struct eh2o_handler {
    h2o_handler_t super;
    eh2o_server *server;
} eh2o_handler;

struct eh2o_server {
    srv_server *srv;
    const srv_config *cfg;
    h2o_globalconf_t globalconf;
    int listen_fd;
    unsigned nthreads;
    eh2o_thread *threads;
    atomic_int quiesce_req;
    atomic_int stop_req;
    pthread_mutex_t mu; /* guards the two fields below */
    pthread_cond_t cv;
    unsigned ready; /* loops that finished their setup */
    int wakes_done; /* the controlling thread sent its last wake-up: queues may go */
};


/* engines/h2o.c */
int eh2o_fill_parsed(srv_request *sreq, h2o_req_t *req);
void eh2o_on_guard_dispose(void *p); /* the ticket's hook on the h2o_req_t's pool */
void eh2o_complete(eh2o_thread *t, eh2o_ticket *tk); /* on the loop: the answer */
void eh2o_on_conn_close(void *data); /* sock->on_close.cb of every tracked connection */

/* engines/h2o_h1.c: HTTP/1 through the core */
eh2o_conn *eh2o_sock_conn(h2o_socket_t *sock); /* NULL when not a tracked connection */
void eh2o_h1_start(eh2o_conn *c, int sniff); /* serve c's HTTP/1 (sniff: or h2c's preface) */
void eh2o_h1_closed(eh2o_conn *c);            /* from eh2o_on_conn_close */
void eh2o_h1_take_posts(eh2o_thread *t);      /* on the loop: the wakes other threads posted */
void eh2o_h1_time(eh2o_thread *t, int stopping, int quiescing); /* every HTTP/1 connection */
void eh2o_h1_thread_init(eh2o_thread *t);
void eh2o_h1_thread_dispose(eh2o_thread *t);

/* engines/h2o_body.c: streamed request bodies (SRV_ROUTE_STREAM_BODY) over HTTP/2 */
#define EH2O_BODY_RCVBUF (1024 * 1024) /* SO_RCVBUF while a body streams; the kernel doubles it */
typedef struct eh2o_body eh2o_body;
int eh2o_body_answered(eh2o_ticket *tk); /* eh2o_complete: 1 when it must wait */
void eh2o_body_unref(eh2o_body *b);
void eh2o_body_kick(void *state, srv_request *sreq);
/* HTTP/2: the walk (engines/h2o_http2.c) takes a streamed body's DATA frames */
eh2o_body *eh2o_body_begin_h2(eh2o_conn *c, eh2o_ticket *tk, uint32_t id, uint64_t expected);
eh2o_body *eh2o_body_h2_find(eh2o_conn *c, uint32_t id);
void eh2o_body_h2_data(eh2o_body *b, const char *p, size_t n, size_t frame_len, int end);
void eh2o_body_h2_after_read(eh2o_conn *c);
int eh2o_body_h2_ready(eh2o_conn *c, h2o_req_t *req);
size_t eh2o_body_h2_held(eh2o_conn *c); /* bytes its streamed bodies hold */
eh2o_body *eh2o_body_h2_dispatching(eh2o_ticket *tk); /* a reference until _dispatched */
void eh2o_body_h2_dispatched(eh2o_body *b);
int eh2o_body_h2_owns(eh2o_conn *c, uint32_t stream_id);
void eh2o_body_stream_gone(eh2o_ticket *tk);
void eh2o_body_h2_conn_closed(eh2o_conn *c);
void eh2o_body_thread_init(eh2o_thread *t);
void eh2o_body_thread_dispose(eh2o_thread *t);

/* engines/h2o_tls.c: HTTPS (all no-ops on a cleartext server) */
typedef struct eh2o_tls_thread eh2o_tls_thread;
int eh2o_tls_thread_new(eh2o_thread *t, srv_server *srv); /* start: -1 out of memory */
void eh2o_tls_thread_loop(eh2o_thread *t);    /* on the loop, once it exists */
void eh2o_tls_thread_dispose(eh2o_thread *t); /* on the loop, before it is destroyed */
void eh2o_tls_thread_free(eh2o_thread *t);
/* Accept c over TLS: 1 when TLS took it (do not touch c or its socket again: it may be
 * closed already), 0 on a cleartext server. */
int eh2o_tls_accept(eh2o_thread *t, eh2o_conn *c);
void eh2o_tls_conn_closed(eh2o_conn *c); /* from eh2o_on_conn_close */
int eh2o_tls_handshaking(eh2o_conn *c);
void eh2o_tls_close(eh2o_conn *c); /* cut a connection still in its handshake */

/* engines/h2o_http2.c */
/* engines/h2o_stream.c: streamed responses. start: on the loop, from the respond path; the
 * stream takes the engine's reference to sreq (0), or -1 when out of memory. */
int eh2o_stream_start(eh2o_thread *t, h2o_req_t *req, srv_request *sreq);
void eh2o_stream_kick(void *state, srv_request *sreq);
void eh2o_stream_thread_init(eh2o_thread *t);
void eh2o_stream_thread_dispose(eh2o_thread *t);

eh2o_conn *eh2o_h2_conn(h2o_req_t *req);
/* Give c to h2o's HTTP/2 (prior knowledge or ALPN "h2"): its input starts with the preface
 * (keep: its length, shown to h2o at once) or the first frames (keep 0). c may be closed
 * (freed) when it returns. */
void eh2o_h2_accept(eh2o_conn *c, size_t keep);
void eh2o_h2_begin(eh2o_conn *c); /* the connection speaks HTTP/2 now: wrap its reads */
void eh2o_h2_note(eh2o_conn *c);
int eh2o_h2_idle(eh2o_conn *c);
void eh2o_h2_close_idle(eh2o_conn *c);
void eh2o_h2_stop_arriving(eh2o_conn *c);
void eh2o_h2_write_answer(eh2o_conn *c, uint32_t stream_id, srv_request *sreq);
void eh2o_h2_drop_body(eh2o_conn *c, h2o_req_t *req);
/* A streamed body's stream: its flow-control window back by n, or cancelled (RST_STREAM). */
#define EH2O_H2_GRANT_BYTES (1024 * 1024)
/* What one connection's streamed bodies may hold for their applications: past it the
 * connection is not read until they take some (a stream alone is bounded by its 16 MiB
 * window; this bounds the 100 streams of a connection together). */
#define EH2O_H2_HOLD_MAX (24u << 20)
void eh2o_h2_hold_check(eh2o_conn *c, size_t held); /* after the walk and each delivery */
void eh2o_h2_hold_later(eh2o_conn *c); /* a body let go of bytes: check after this turn */
void eh2o_h2_after_read_later(eh2o_conn *c); /* DATA taken: their windows after this turn */
void eh2o_h2_window_update(eh2o_conn *c, uint32_t stream_id, size_t n);
void eh2o_h2_cancel_stream(eh2o_conn *c, uint32_t stream_id, int h2o_error);
/* engines/h2o.c: take over a request with a body to a streamed route, at its HEADERS */
void eh2o_h2_take_stream(eh2o_conn *c, uint32_t stream_id);
void eh2o_count_reset(eh2o_conn *c);
void eh2o_on_dispatch(h2o_timeout_entry_t *entry);
void eh2o_on_calm(h2o_timeout_entry_t *entry);
void eh2o_on_sweep(h2o_timeout_entry_t *entry);

#endif /* SRV_ENGINES_H2O_INTERNAL_H */
