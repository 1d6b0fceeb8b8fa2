/*
 * A fake engine for the unit tests: a struct srv_engine whose start does not
 * listen (unless asked to) and whose respond slot records what the core
 * handed it, so the core's contract can be checked without sockets. The test
 * thread plays the engine's connection thread: it builds requests with the
 * srv__request_* helpers, dispatches them, waits for respond and releases.
 *
 * Threads: handlers run on the core's workers and write the capture fields
 * of their fake_req, then flag it under fake.mu; the respond slot records
 * under fake.mu. The test reads a field only after waiting for its flag.
 * cmocka assertions are made on the test thread only.
 */
#ifndef SRV_TEST_FAKE_ENGINE_H
#define SRV_TEST_FAKE_ENGINE_H

#include "srv_engine.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define FAKE_MAX_REQS 64
#define FAKE_MAX_PAIRS 16
#define FAKE_WAIT_MS 5000u /* bound on every wait: a hang fails, not stalls */

/* What the handler does with a request. */
enum fake_action {
    FAKE_RESPOND, /* set the headers asked, then srv_respond (blocking style) */
    FAKE_HOLD,    /* return without responding: the test responds later */
    FAKE_AFTER,   /* srv_after(after_ms), the timer callback responds */
    FAKE_BLOCK    /* wait until fake_open_gate, then respond */
};

typedef struct fake fake;

typedef struct fake_req {
    fake *fake;
    srv_request *req; /* the pointer from srv__request_new, never cleared */

    /* ---- set by the test before fake_send ---- */
    const char *method;
    const char *target;
    int major, minor;                          /* default 1.1 */
    const char *headers[FAKE_MAX_PAIRS][2];    /* request headers */
    size_t nheaders;
    int no_host;                               /* do not add "Host: fake" */
    const char *body;                          /* request body, may be NULL */
    const struct sockaddr *peer;
    socklen_t peer_len;
    struct sockaddr_in peer_v4;                /* fake_req_from's peer */

    enum fake_action action;
    int status;                                /* handler's answer, default 200 */
    const char *content_type;                  /* default "text/plain" */
    const char *resp_body;                     /* default "ok" */
    size_t resp_len;                           /* SIZE_MAX: strlen(resp_body) */
    unsigned after_ms;
    const char *set_headers[FAKE_MAX_PAIRS][2]; /* srv_set_header calls */
    size_t nset_headers;
    const char *lookups[FAKE_MAX_PAIRS];        /* srv_request_query names */
    size_t nlookups;
    const char *header_lookups[FAKE_MAX_PAIRS]; /* srv_request_header names */
    size_t nheader_lookups;
    int close_in_respond;   /* srv__request_set_close in the respond slot */
    int release_in_respond; /* release inside respond (connection gone) */

    /* ---- fake_send ---- */
    int build_status; /* first non-zero answer of the srv__request_* helpers */
    int sent;

    /* ---- captured by the handler (after fake_wait_handler) ---- */
    int handler_calls;
    int handler_started;
    int handler_returned;
    pthread_t handler_thread;
    void *handler_ctx;
    srv_server *req_server;
    char *method_seen, *path_seen, *target_seen, *protocol_seen, *peer_seen;
    char *client_seen, *scheme_seen, *host_seen; /* host_seen NULL: none */
    char *body_seen;
    size_t body_seen_len;
    size_t query_count;
    char *qname[FAKE_MAX_PAIRS], *qvalue[FAKE_MAX_PAIRS];
    int query_at_end_rc;
    char *lookup_val[FAKE_MAX_PAIRS]; /* NULL when srv_request_query gave NULL */
    char *header_val[FAKE_MAX_PAIRS];
    int set_header_rc[FAKE_MAX_PAIRS];
    int respond_rc; /* srv_respond's result in the handler or timer */
    int after_rc;

    /* ---- recorded by the respond slot ---- */
    int respond_calls;
    unsigned respond_seq;
    pthread_t respond_thread;
    int status_out;
    int keep_alive;
    char *body_out;
    size_t body_out_len;
    size_t content_length;
    char *head; /* srv__response_http1_head */
    size_t head_len;
    int head_stable;       /* a second call gave the same pointer and length */
    int header_past_end;   /* srv__response_header_at(count) returned NULL */
    size_t nresp_headers;
    char *resp_hname[FAKE_MAX_PAIRS], *resp_hvalue[FAKE_MAX_PAIRS];

    int released;          /* the engine dropped its reference */
    int released_early;    /* ...before respond was called */
} fake_req;

struct fake {
    srv_engine engine; /* first: srv_server_engine(srv) leads back here */
    srv_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;

    int listen;   /* start calls srv__listen (host/port checks) */
    int fd;
    int start_rc; /* non-zero: start fails with it */

    int start_calls, quiesce_calls, stop_calls, destroy_calls;
    int started; /* start returned 0 */
    unsigned seq, quiesce_seq, stop_seq;
    int unexpected;      /* respond for an unknown or already answered request */
    int stop_unanswered; /* requests still unanswered when stop ran */
    int gate_open;
    void *last_state;    /* the state respond/stop/destroy were given */

    fake_req reqs[FAKE_MAX_REQS];
    size_t nreqs;
};

/* The route handler every test registers: captures what the request API
 * says about the request into its fake_req, records ctx, then acts as
 * fake_req.action asks. */
void fake_handler(srv_request *req, void *ctx);

/* A fake engine with a valid table (version SRV_ENGINE_VERSION). */
fake *fake_new(void);
/* Defaults for tests: 127.0.0.1, port 0, 4 workers. */
void fake_config(srv_config *cfg);
/* srv_server_new on the fake's engine (cfg NULL: fake_config). */
srv_server *fake_server(fake *f, const srv_config *cfg);
/* fake_server + srv_server_start; asserts it started. */
srv_server *fake_start(fake *f, const srv_config *cfg);
/* Free the server (if any), then check the engine-side invariants:
 * respond exactly once per request, every request released once,
 * stop/destroy called once after a successful start. */
void fake_finish(fake *f);
void fake_free(fake *f);

/* A request record with the defaults above. */
fake_req *fake_req_new(fake *f, const char *method, const char *target);
/* fake_req_new for a GET from IPv4 peer ip:port with the header lines in
 * ap: name, value, ..., NULL. */
fake_req *fake_req_from(fake *f, const char *target, const char *ip, int port, va_list ap);
/* Build the request (new, method, target, version, headers, headers_done,
 * body) and dispatch it; on a non-zero helper answer, srv__request_fail
 * with it instead. Returns that answer (0 when dispatched). */
int fake_send(fake_req *r);
/* fake_req_new + fake_send + fake_wait: the status answered, -1 on timeout. */
int fake_roundtrip(fake *f, const char *method, const char *target);

/* Wait up to ms for respond; then release like a connection thread that has
 * written the response. The status, or -1 on timeout. */
int fake_wait(fake_req *r, unsigned ms);
/* Wait up to ms for respond without releasing. 0, or -1 on timeout. */
int fake_wait_respond(fake_req *r, unsigned ms);
/* Wait up to ms for the handler to return. 0, or -1 on timeout. */
int fake_wait_handler(fake_req *r, unsigned ms);
/* Wait up to ms for the handler to start. 0, or -1 on timeout. */
int fake_wait_handler_started(fake_req *r, unsigned ms);
/* Non-zero once respond was called for r. */
int fake_responded(fake_req *r);
/* Drop the engine's reference now (connection gone or response written). */
void fake_release(fake_req *r);
/* Let FAKE_BLOCK handlers go on. */
void fake_open_gate(fake *f);

/* A response header recorded from srv__response_header_at (case-insensitive
 * name), NULL when absent. */
const char *fake_resp_header(const fake_req *r, const char *name);
/* How many times a header appears in the HTTP/1 head; copies the first
 * value into buf (cap bytes) when buf is not NULL. */
int fake_head_header(const fake_req *r, const char *name, char *buf, size_t cap);

/* Poll srv_server_stats into `st` until `expr` holds; fail after 2 s.
 * For counters the core may update just after respond returns. */
#define FAKE_EVENTUALLY(srv, st, expr)                                        \
    do {                                                                      \
        uint64_t fake_deadline_ = fake_now_ms() + 2000;                       \
        for (;;) {                                                            \
            srv_server_stats((srv), &(st));                                   \
            if (expr)                                                         \
                break;                                                        \
            if (fake_now_ms() > fake_deadline_)                               \
                fail_msg("%s:%d: still false after 2 s: %s", __FILE__,        \
                         __LINE__, #expr);                                    \
            fake_sleep_ms(5);                                                 \
        }                                                                     \
    } while (0)

uint64_t fake_now_ms(void);
void fake_sleep_ms(unsigned ms);

#endif /* SRV_TEST_FAKE_ENGINE_H */
