/*
 * The "threadpool" engine (Tomcat-like, blocking thread-per-connection):
 * HTTP/1.x parsed by http-parser 2.9 (Debian 2.9.4). One acceptor thread
 * runs accept4(); each connection is a job on the core's worker pool, which
 * reads, runs the handler and writes on that worker until the connection
 * closes. The pool's FIFO is the queue of connections waiting for a worker.
 */
#include "srv_engine.h"

#include <http_parser.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* Bytes read from a socket at once; the parser consumes every read fully
 * (or pauses at a message end), so this is the whole per-connection input
 * buffer. */
#define ETP_READ_BUF 16384
/* Longest method token taken aside for http-parser (see etp_take_method);
 * a longer one is left to the parser, which answers 400. The buffer keeps
 * room to show the parser "GET" in place of a shorter token. */
#define ETP_MAX_METHOD 64
#define ETP_METHOD_SLACK 2
/* An idle kept-alive connection looks this often whether another connection
 * waits for its worker (then it yields: closes so the waiter is served). */
#define ETP_IDLE_SLICE_MS 200
/* Lingering close after an error: read and discard for at most this long so
 * the client sees our response instead of a reset. */
#define ETP_LINGER_MS 1000
#define ETP_LINGER_MAX_BYTES (4u * 1024u * 1024u)
/* Back-off when accept() fails for lack of descriptors or memory. */
#define ETP_ACCEPT_BACKOFF_MS 20
/* Writes that make no progress for this long (at least) give up. */
#define ETP_MIN_WRITE_TIMEOUT_MS 1000
/* stop: a response being written gets this long before its connection is
 * shut down; stop looks again this often. */
#define ETP_STOP_WRITE_GRACE_MS 2000
#define ETP_STOP_SCAN_MS 100
/* stop: connections detached (and written) in one go, at most. */
#define ETP_DETACH_BATCH 64
/* http-parser's built-in head limit (HTTP_MAX_HEADER_SIZE, 80 KiB). */
#define ETP_PARSER_DEFAULT_MAX_HEAD (80u * 1024u)

/* Where a connection is; read by stop() to spare responses being written. */
enum etp_phase {
    ETP_PH_QUEUED,  /* accepted, waiting for a worker */
    ETP_PH_IDLE,    /* between requests (or before the first byte) */
    ETP_PH_HEAD,    /* a request started; its head is not complete */
    ETP_PH_BODY,    /* head complete, reading the body */
    ETP_PH_HANDLER, /* handed to the core: handler runs or answer awaited */
    ETP_PH_WRITE,   /* writing the answer */
    ETP_PH_CLOSING
};

enum etp_close {
    ETP_CLOSE_QUIET, /* close() at once */
    ETP_CLOSE_SOFT,  /* shutdown(SHUT_WR), drop input already here, close() */
    ETP_CLOSE_LINGER /* shutdown(SHUT_WR), drain up to ETP_LINGER_MS, close() */
};

typedef struct etp_buf {
    char *p;
    size_t len, cap;
} etp_buf;

struct etp_state;

typedef struct etp_conn {
    srv_job job; /* the pool runs etp_conn_run(&job) */
    struct etp_state *st;
    struct etp_conn *prev, *next; /* st->conns, under st->mu */
    int fd;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    atomic_int phase;
    atomic_uint_fast64_t write_since; /* ETP_PH_WRITE: when it began (ms) */
    int shut; /* stop() shut the socket down (st->mu) */

    /* respond() -> connection thread hand-back. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int responded;
    srv_request *serving; /* handed to the core, its answer not yet claimed */
    int detached;         /* stop() wrote the answer and owns none of it now
                           * (also under st->mu) */

    /* Everything below is touched by the connection's worker only. */
    http_parser parser;
    srv_request *req;   /* the request being read, not yet handed over */
    int fail_status;    /* status remembered by a failing callback */
    int io_dead;        /* a write failed: close without answering */
    int headers_done;   /* this message's head is complete (trailers next) */
    int have_field;     /* a header name is being accumulated */
    int last_was_value; /* the last header callback was a value piece */
    size_t head_bytes;  /* URL + header names + values of this message */
    etp_buf url, field, value;
    int at_start;       /* the next message's method is not read yet */
    int need_more;      /* buf[off, len) is the start of a method: read on */
    char method[ETP_MAX_METHOD]; /* this message's method, when the parser */
    size_t method_len;           /* was shown GET instead (0: it was not) */
    char *buf;
    size_t off, len;    /* unparsed input is buf[off, len) */
    uint64_t deadline;  /* ETP_PH_HEAD: monotonic ms when 408 is due */
    unsigned served;    /* responses written on this connection */
    int yielded;        /* closed while idle so a waiting one gets a worker */
} etp_conn;

typedef struct etp_state {
    srv_server *srv;
    const srv_config *cfg;
    int listen_fd;
    int stop_fd; /* eventfd, written once at quiesce: wakes idle waits */
    int spare_fd; /* /dev/null, given up to accept-and-refuse on EMFILE */
    pthread_t acceptor;
    int acceptor_started;
    int quiesced; /* controlling thread only */
    atomic_int quiescing;
    atomic_int stopping;
    atomic_uint yielding; /* idle connections closing to free a worker */

    pthread_mutex_t mu; /* conns, open, detached; then a conn's mu */
    pthread_cond_t drained;
    etp_conn *conns;
    unsigned open; /* accepted and not yet closed, queued ones included */
    unsigned detached; /* open ones whose handler stop() stopped waiting for */
} etp_state;

#define ETP_CONN_OF(j) ((etp_conn *)((char *)(j) - offsetof(etp_conn, job)))

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

static uint64_t etp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int etp_clamp_ms(uint64_t ms)
{
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void etp_sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int etp_buf_append(etp_buf *b, const char *data, size_t len)
{
    if (len > SIZE_MAX - b->len - 1)
        return -1;
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len + 1)
            cap = cap > SIZE_MAX / 2 ? b->len + len + 1 : cap * 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return 0;
}

static void etp_buf_free(etp_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static void etp_set_phase(etp_conn *c, enum etp_phase ph)
{
    atomic_store_explicit(&c->phase, ph, memory_order_relaxed);
}

static enum etp_phase etp_get_phase(etp_conn *c)
{
    return (enum etp_phase)atomic_load_explicit(&c->phase, memory_order_relaxed);
}

/* How long a write may make no progress. */
static int etp_write_timeout(const etp_state *st)
{
    unsigned t = st->cfg->header_timeout_ms;
    return t < ETP_MIN_WRITE_TIMEOUT_MS ? ETP_MIN_WRITE_TIMEOUT_MS : etp_clamp_ms(t);
}

/*
 * Send what the socket takes now of a then b (either may be empty), from
 * *sent bytes in, with MSG_NOSIGNAL so a vanished client is an error, not
 * SIGPIPE. 1 when all is sent, 0 when the socket is full, -1 when the
 * client is gone.
 */
static int etp_send_some(int fd, const void *a, size_t alen, const void *b, size_t blen,
                         size_t *sent)
{
    for (;;) {
        size_t s = *sent;
        if (s >= alen + blen)
            return 1;
        struct iovec iov[2];
        size_t k = 0;
        if (s < alen) {
            iov[k++] = (struct iovec){(char *)(uintptr_t)a + s, alen - s};
            if (blen > 0)
                iov[k++] = (struct iovec){(void *)(uintptr_t)b, blen};
        } else {
            iov[k++] = (struct iovec){(char *)(uintptr_t)b + (s - alen), blen - (s - alen)};
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = k};
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        *sent += (size_t)n;
    }
}

/* Write a and then b fully. 0, or -1 when the client is gone or stopped
 * reading for timeout_ms. */
static int etp_send2(int fd, int timeout_ms, const void *a, size_t alen,
                     const void *b, size_t blen)
{
    size_t sent = 0;
    for (;;) {
        int r = etp_send_some(fd, a, alen, b, blen, &sent);
        if (r != 0)
            return r > 0 ? 0 : -1;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int p = poll(&pfd, 1, timeout_ms);
        if (p < 0 && errno == EINTR)
            continue;
        if (p <= 0)
            return -1;
    }
}

/* Read and discard what the client still sends, for at most `ms` and
 * ETP_LINGER_MAX_BYTES, so that close() does not turn unread input into a
 * reset that destroys the response on its way. ms == 0: only what already
 * arrived. */
static void etp_drain(int fd, unsigned ms)
{
    char sink[4096];
    size_t total = 0;
    uint64_t end = etp_now_ms() + ms;
    while (total < ETP_LINGER_MAX_BYTES) {
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0)
            return;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return;
        uint64_t now = etp_now_ms();
        if (n > 0) {
            total += (size_t)n;
            if (now >= end && ms > 0)
                return;
            continue;
        }
        if (ms == 0 || now >= end)
            return;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, etp_clamp_ms(end - now));
        if (r == 0 || (r < 0 && errno != EINTR))
            return;
    }
}

static void etp_linger_close(int fd, unsigned ms)
{
    shutdown(fd, SHUT_WR);
    etp_drain(fd, ms);
    close(fd);
}

/* Whether the client has sent bytes not read yet (EOF alone is not). */
static int etp_client_sent(int fd)
{
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* The 503 written when the core cannot build one (out of memory or of
 * descriptors): fits in any fresh socket buffer. */
static const char etp_canned_503[] = "HTTP/1.1 503 Service Unavailable\r\n"
                                     "Content-Length: 0\r\nConnection: close\r\n\r\n";

/* http-parser's head limit is process-global. Our own count enforces
 * max_header_bytes below it; raise it (never lower it: other servers in the
 * process may need it) only when the configuration asks for more. */
static void etp_raise_parser_limit(const srv_config *cfg)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t current = ETP_PARSER_DEFAULT_MAX_HEAD;
    uint64_t need = (uint64_t)cfg->max_header_bytes + (uint64_t)cfg->max_uri_bytes + 1024u;
    if (need > UINT32_MAX)
        need = UINT32_MAX;
    pthread_mutex_lock(&lock);
    if (need > current) {
        current = need;
        http_parser_set_max_header_size((uint32_t)need);
    }
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------ */
/* Parser callbacks: build the srv_request                             */
/* ------------------------------------------------------------------ */

/* Remember why a callback fails; returning non-zero (never 1 from
 * on_headers_complete, which means "skip the body") stops the parser. */
static int etp_cb_fail(etp_conn *c, int status)
{
    if (!c->fail_status)
        c->fail_status = status > 0 ? status : 500; /* SRV_ENOMEM */
    return -1;
}

/* Count head bytes (URL, names, values) as they arrive, so an oversized
 * head is refused before it is buffered. The core counts the request line
 * and header lines, at least as many bytes, so its answer would be 431 too. */
static int etp_count_head(etp_conn *c, size_t len)
{
    c->head_bytes += len;
    return c->head_bytes > c->st->cfg->max_header_bytes ? etp_cb_fail(c, 431) : 0;
}

static int etp_flush_header(etp_conn *c)
{
    if (!c->have_field)
        return 0;
    size_t vlen = c->value.len;
    while (vlen > 0 && (c->value.p[vlen - 1] == ' ' || c->value.p[vlen - 1] == '\t'))
        vlen--;
    int rc = srv__request_add_header(c->req, c->field.p ? c->field.p : "", c->field.len,
                                     c->value.p ? c->value.p : "", vlen);
    c->have_field = 0;
    c->last_was_value = 0;
    c->field.len = 0;
    c->value.len = 0;
    return rc ? etp_cb_fail(c, rc) : 0;
}

static int etp_on_message_begin(http_parser *p)
{
    etp_conn *c = p->data;
    c->fail_status = 0;
    c->headers_done = 0;
    c->have_field = 0;
    c->last_was_value = 0;
    c->head_bytes = 0;
    c->url.len = c->field.len = c->value.len = 0;
    if (etp_get_phase(c) != ETP_PH_HEAD) {
        etp_set_phase(c, ETP_PH_HEAD);
        c->deadline = etp_now_ms() + c->st->cfg->header_timeout_ms;
    }
    if (c->req) /* cannot happen: the previous one was handed over */
        srv__request_release(c->req);
    c->req = srv__request_new(c->st->srv, (const struct sockaddr *)&c->peer, c->peer_len);
    if (!c->req)
        return etp_cb_fail(c, 500);
    srv__request_set_engine_data(c->req, c);
    return 0;
}

static int etp_on_url(http_parser *p, const char *at, size_t len)
{
    etp_conn *c = p->data;
    if (c->url.len + len > c->st->cfg->max_uri_bytes)
        return etp_cb_fail(c, 414);
    if (etp_count_head(c, len))
        return -1;
    return etp_buf_append(&c->url, at, len) ? etp_cb_fail(c, 500) : 0;
}

static int etp_on_header_field(http_parser *p, const char *at, size_t len)
{
    etp_conn *c = p->data;
    if (c->headers_done) /* a trailer of a chunked body: not kept */
        return 0;
    if (c->last_was_value && etp_flush_header(c))
        return -1;
    c->have_field = 1;
    if (etp_count_head(c, len))
        return -1;
    return etp_buf_append(&c->field, at, len) ? etp_cb_fail(c, 500) : 0;
}

static int etp_on_header_value(http_parser *p, const char *at, size_t len)
{
    etp_conn *c = p->data;
    if (c->headers_done)
        return 0;
    c->last_was_value = 1;
    if (etp_count_head(c, len))
        return -1;
    return etp_buf_append(&c->value, at, len) ? etp_cb_fail(c, 500) : 0;
}

static int etp_on_headers_complete(http_parser *p)
{
    etp_conn *c = p->data;
    srv_request *req = c->req;
    int rc;
    if (etp_flush_header(c))
        return -1;
    const char *m = http_method_str((enum http_method)p->method);
    size_t mlen = strlen(m);
    if (c->method_len > 0) { /* the parser was shown GET instead */
        m = c->method;
        mlen = c->method_len;
    }
    if ((rc = srv__request_set_method(req, m, mlen)) != 0)
        return etp_cb_fail(c, rc);
    if ((rc = srv__request_set_target(req, c->url.p ? c->url.p : "", c->url.len)) != 0)
        return etp_cb_fail(c, rc);
    srv__request_set_version(req, p->http_major, p->http_minor);
    if ((rc = srv__request_headers_done(req)) != 0) {
        /* The core's status line echoes the minor version ("HTTP/1.5 505"):
         * answer an unsupported version in HTTP/1.1. */
        if (rc == 505)
            srv__request_set_version(req, 1, 1);
        return etp_cb_fail(c, rc);
    }
    c->headers_done = 1;
    etp_set_phase(c, ETP_PH_BODY);

    int has_body = (p->flags & F_CHUNKED) ||
                   (p->content_length > 0 && p->content_length != ULLONG_MAX);
    if (has_body && srv__request_expects_continue(req)) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (etp_send2(c->fd, etp_write_timeout(c->st), cont, sizeof cont - 1, NULL, 0)) {
            c->io_dead = 1;
            return etp_cb_fail(c, 500);
        }
    }
    return 0; /* never 1: that would make the body the next request */
}

static int etp_on_body(http_parser *p, const char *at, size_t len)
{
    etp_conn *c = p->data;
    int rc = srv__request_append_body(c->req, at, len);
    return rc ? etp_cb_fail(c, rc) : 0;
}

static int etp_on_message_complete(http_parser *p)
{
    /* One request at a time: execute() returns HPE_PAUSED right after this
     * message; pipelined bytes are parsed once it is answered. */
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings etp_settings = {
    .on_message_begin = etp_on_message_begin,
    .on_url = etp_on_url,
    .on_header_field = etp_on_header_field,
    .on_header_value = etp_on_header_value,
    .on_headers_complete = etp_on_headers_complete,
    .on_body = etp_on_body,
    .on_message_complete = etp_on_message_complete,
};

static int etp_parse_status(etp_conn *c, enum http_errno e)
{
    if (c->fail_status)
        return c->fail_status;
    switch (e) {
    case HPE_HEADER_OVERFLOW:
        return 431;
    case HPE_INVALID_TRANSFER_ENCODING:
        return 501;
    default: /* HPE_UNEXPECTED_CONTENT_LENGTH and every other parse error */
        return 400;
    }
}

/* ------------------------------------------------------------------ */
/* Answering                                                           */
/* ------------------------------------------------------------------ */

/* The respond slot: hand the final response to the connection's worker. No
 * I/O here; any thread may call it. */
static void etp_respond(void *state, srv_request *req)
{
    (void)state;
    etp_conn *c = srv__request_engine_data(req);
    if (!c) /* the acceptor's 503 for a connection over the limit */
        return;
    pthread_mutex_lock(&c->mu);
    c->responded = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Wait for respond, write the response, release the request. Returns
 * non-zero when the connection may serve another request. */
static int etp_write_response(etp_conn *c, srv_request *req)
{
    etp_state *st = c->st;
    pthread_mutex_lock(&c->mu);
    while (!c->responded)
        pthread_cond_wait(&c->cv, &c->mu);
    c->responded = 0;
    int detached = c->detached;
    c->serving = NULL; /* the answer is ours to write: stop() keeps off */
    pthread_mutex_unlock(&c->mu);
    if (detached) { /* stop() wrote it and released our reference */
        c->io_dead = 1;
        return 0;
    }
    atomic_store(&c->write_since, etp_now_ms());
    etp_set_phase(c, ETP_PH_WRITE);

    /* Tomcat BIO: do not park this worker on an idle socket while other
     * connections wait for one. */
    if (srv__pool_waiting(st->srv) > 0 || atomic_load(&st->stopping))
        srv__request_set_close(req);
    int keep = 0;
    if (!c->io_dead) {
        size_t hlen = 0, blen = 0;
        const char *head = srv__response_http1_head(req, &hlen);
        const void *body = srv__response_body(req, &blen);
        if (head && etp_send2(c->fd, etp_write_timeout(st), head, hlen, body, blen) == 0)
            keep = srv__response_keep_alive(req);
        else
            c->io_dead = 1;
    }
    srv__request_release(req);
    c->served++;
    return keep;
}

/* A complete request: run its handler here (we are a pool worker), then
 * answer it. Returns non-zero to keep the connection. */
static int etp_serve_request(etp_conn *c)
{
    srv_request *req = c->req;
    c->req = NULL;
    etp_set_phase(c, ETP_PH_HANDLER);
    /* The parser closes after this message (HTTP/1.0 without keep-alive,
     * Connection: close), or what follows an upgrade offer may not be HTTP:
     * serve the request as plain HTTP/1.1, then close. */
    int must_close = !http_should_keep_alive(&c->parser) || c->parser.upgrade;
    if (must_close)
        srv__request_set_close(req);
    pthread_mutex_lock(&c->mu);
    c->serving = req;
    pthread_mutex_unlock(&c->mu);
    srv__request_run(req);
    return etp_write_response(c, req) && !must_close;
}

/* Bad input, timeout or failure while reading: the core answers `status`
 * (its short text body); then the connection closes, lingering. */
static enum etp_close etp_fail(etp_conn *c, int status)
{
    srv_request *req = c->req;
    c->req = NULL;
    if (c->io_dead) {
        if (req)
            srv__request_release(req);
        return ETP_CLOSE_QUIET;
    }
    if (!req) {
        req = srv__request_new(c->st->srv, (const struct sockaddr *)&c->peer, c->peer_len);
        if (!req)
            return ETP_CLOSE_LINGER;
        srv__request_set_engine_data(req, c);
    }
    etp_set_phase(c, ETP_PH_HANDLER);
    srv__request_fail(req, status);
    etp_write_response(c, req);
    return c->io_dead ? ETP_CLOSE_QUIET : ETP_CLOSE_LINGER;
}

/* ------------------------------------------------------------------ */
/* The connection job                                                  */
/* ------------------------------------------------------------------ */

/*
 * Wait for the first byte of the next request. 1: readable; 0: close
 * quietly (idle timeout, stop, or yielding the worker to a waiting
 * connection); -1: error.
 */
static int etp_wait_idle(etp_conn *c)
{
    etp_state *st = c->st;
    const srv_config *cfg = st->cfg;
    unsigned limit = cfg->keepalive_timeout_ms;
    if (c->served == 0 && (limit == 0 || cfg->header_timeout_ms < limit))
        limit = cfg->header_timeout_ms; /* nothing sent yet: also a head wait */
    uint64_t end = etp_now_ms() + limit;
    for (;;) {
        uint64_t now = etp_now_ms();
        int left = now >= end ? 0 : etp_clamp_ms(end - now);
        int slice = (c->served && left > ETP_IDLE_SLICE_MS) ? ETP_IDLE_SLICE_MS : left;
        struct pollfd pfd[2] = {
            {.fd = c->fd, .events = POLLIN},
            {.fd = st->stop_fd, .events = POLLIN},
        };
        int r = poll(pfd, 2, slice);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (pfd[0].revents) /* data first: a request already sent is served */
            return 1;
        if (pfd[1].revents || atomic_load(&st->stopping))
            return 0;
        if (left == 0 || (r == 0 && slice == left))
            return 0;
        if (c->served &&
            srv__pool_waiting(st->srv) > atomic_load(&st->yielding)) {
            atomic_fetch_add(&st->yielding, 1);
            c->yielded = 1;
            return 0;
        }
    }
}

/* Wait for more of a started request. 1: readable; 0: timed out; -1: error. */
static int etp_wait_request(etp_conn *c)
{
    const srv_config *cfg = c->st->cfg;
    for (;;) {
        int timeout;
        if (etp_get_phase(c) == ETP_PH_BODY) {
            /* the body may be long: time out when it stalls */
            timeout = etp_clamp_ms(cfg->header_timeout_ms);
        } else {
            uint64_t now = etp_now_ms();
            if (now >= c->deadline)
                return 0;
            timeout = etp_clamp_ms(c->deadline - now);
        }
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        int r = poll(&pfd, 1, timeout);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        return r > 0 ? 1 : 0;
    }
}

static int etp_parser_knows(const char *m, size_t len)
{
#define ETP_KNOWN(num, name, string)                                                           \
    if (len == sizeof #string - 1 && memcmp(m, #string, len) == 0)                             \
        return 1;
    HTTP_METHOD_MAP(ETP_KNOWN)
#undef ETP_KNOWN
    return 0;
}

/*
 * http-parser 2.9 knows a fixed list of methods and fails on any other
 * token (BREW, a lowercase get) with a 400, while the core routes any token:
 * 404, 405 with Allow, or the application's own srv_route("BREW", ...), as
 * on the other engines. So at the start of each message read the method
 * here; an unknown token is kept in c->method and the parser is shown GET
 * in its place (a request's method plays no part in its framing). Returns
 * 1 to run the parser, 0 when the method is not complete in the buffer.
 */
static int etp_take_method(etp_conn *c)
{
    while (c->off < c->len && (c->buf[c->off] == '\r' || c->buf[c->off] == '\n'))
        c->off++; /* empty lines before a request are ignored (RFC 9112 2.2) */
    size_t i = c->off;
    while (i < c->len && i - c->off <= ETP_MAX_METHOD &&
           srv__http_is_tchar((unsigned char)c->buf[i]))
        i++;
    size_t mlen = i - c->off;
    if (i == c->len && mlen <= ETP_MAX_METHOD)
        return 0;
    c->at_start = 0;
    c->method_len = 0;
    if (mlen == 0 || mlen > ETP_MAX_METHOD || c->buf[i] != ' ' ||
        etp_parser_knows(c->buf + c->off, mlen))
        return 1; /* the parser decides: a method it knows, or a 400 */
    memcpy(c->method, c->buf + c->off, mlen);
    c->method_len = mlen;
    size_t need = mlen < 3 ? 3 - mlen : 0;
    if (mlen >= 3) {
        c->off += mlen - 3;
    } else if (c->off >= need) { /* consumed bytes before it: reuse them */
        c->off -= need;
    } else { /* the token starts the read: ETP_METHOD_SLACK, once per read */
        if (c->len + need > ETP_READ_BUF + ETP_METHOD_SLACK) {
            c->method_len = 0;
            return 1;
        }
        memmove(c->buf + i + need, c->buf + i, c->len - i);
        c->len += need;
    }
    memcpy(c->buf + c->off, "GET", 3);
    return 1;
}

static enum etp_close etp_serve(etp_conn *c)
{
    etp_state *st = c->st;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    etp_set_phase(c, ETP_PH_IDLE);
    c->at_start = 1;
    for (;;) {
        if (c->off == c->len || c->need_more) {
            int r;
            if (etp_get_phase(c) == ETP_PH_IDLE) {
                r = etp_wait_idle(c);
                if (r <= 0)
                    return ETP_CLOSE_QUIET;
            } else {
                r = etp_wait_request(c);
                if (r == 0)
                    return etp_fail(c, 408);
                if (r < 0)
                    return ETP_CLOSE_QUIET;
            }
            /* A method begun in the last read stays, moved to the front. */
            size_t keep = c->len - c->off;
            if (keep > 0 && c->off > 0)
                memmove(c->buf, c->buf + c->off, keep);
            c->off = 0;
            c->len = keep;
            ssize_t n = recv(c->fd, c->buf + keep, ETP_READ_BUF - keep, MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                    continue;
                return ETP_CLOSE_QUIET; /* reset */
            }
            if (n == 0) /* EOF, idle or mid-request: nobody to answer */
                return ETP_CLOSE_QUIET;
            c->len = keep + (size_t)n;
            c->need_more = 0;
            if (etp_get_phase(c) == ETP_PH_IDLE) {
                etp_set_phase(c, ETP_PH_HEAD);
                c->deadline = etp_now_ms() + st->cfg->header_timeout_ms;
            }
        }

        if (c->at_start && !etp_take_method(c)) {
            c->need_more = 1;
            continue;
        }
        size_t n = http_parser_execute(&c->parser, &etp_settings, c->buf + c->off,
                                       c->len - c->off);
        c->off += n;
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (e == HPE_PAUSED) {
            if (!etp_serve_request(c)) /* a normal close: do not wait */
                return c->io_dead ? ETP_CLOSE_QUIET : ETP_CLOSE_SOFT;
            http_parser_pause(&c->parser, 0);
            c->at_start = 1;
            if (c->off < c->len) { /* pipelined: the next head has begun */
                etp_set_phase(c, ETP_PH_HEAD);
                c->deadline = etp_now_ms() + st->cfg->header_timeout_ms;
            } else {
                etp_set_phase(c, ETP_PH_IDLE);
            }
            continue;
        }
        if (e != HPE_OK)
            return etp_fail(c, etp_parse_status(c, e));
        if (c->off < c->len) /* stopped early without an error: not HTTP */
            return ETP_CLOSE_LINGER;
    }
}

/* Close and forget a connection. The fd is closed only under st->mu, once
 * unlinked, so stop() never shuts down a number already reused. The unlock
 * is the last touch of the engine's state: stop() may return (and destroy
 * free it) right after. */
static void etp_conn_finish(etp_conn *c, enum etp_close how)
{
    etp_state *st = c->st;
    etp_set_phase(c, ETP_PH_CLOSING);
    if (c->req) {
        srv__request_release(c->req);
        c->req = NULL;
    }
    /* Unread input makes close() send a reset that can destroy the response
     * just written: after an error (the client may still be sending) or with
     * pipelined bytes left over, linger; otherwise drop what already came. */
    if (c->detached) {
        /* stop() writes and shuts the socket through its own descriptor */
        etp_drain(c->fd, 0);
    } else if (how == ETP_CLOSE_LINGER || c->off < c->len) {
        shutdown(c->fd, SHUT_WR);
        etp_drain(c->fd, ETP_LINGER_MS);
    } else if (how == ETP_CLOSE_SOFT) {
        shutdown(c->fd, SHUT_WR);
        etp_drain(c->fd, 0);
    }
    if (!c->detached) /* stop() counted it closed when it shut it */
        srv__stats_connection_closed(st->srv);
    if (c->yielded)
        atomic_fetch_sub(&st->yielding, 1);
    etp_buf_free(&c->url);
    etp_buf_free(&c->field);
    etp_buf_free(&c->value);
    free(c->buf);

    pthread_mutex_lock(&st->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        st->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    close(c->fd);
    if (c->detached)
        st->detached--;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    if (--st->open <= st->detached) /* what stop() waits for */
        pthread_cond_broadcast(&st->drained);
    pthread_mutex_unlock(&st->mu);
}

static void etp_conn_run(srv_job *job)
{
    etp_conn *c = ETP_CONN_OF(job);
    enum etp_close how = ETP_CLOSE_QUIET;
    pthread_mutex_lock(&c->st->mu); /* stop() reads QUEUED under it */
    int abandoned = c->shut;
    if (!abandoned)
        etp_set_phase(c, ETP_PH_IDLE);
    pthread_mutex_unlock(&c->st->mu);
    if (!abandoned && atomic_load(&c->st->stopping)) {
        /* Started during stop but not detached by it (stop detaches in
         * batches): a client that sent a request still gets its 503. */
        if (etp_client_sent(c->fd))
            how = etp_fail(c, 503);
    } else if (!abandoned) {
        c->buf = malloc(ETP_READ_BUF + ETP_METHOD_SLACK);
        if (c->buf)
            how = etp_serve(c);
    }
    etp_conn_finish(c, how);
}

/* ------------------------------------------------------------------ */
/* Acceptor                                                            */
/* ------------------------------------------------------------------ */

/* Over max_connections (or out of memory): answer 503 at once and close,
 * on the acceptor thread, without ever blocking on the client. */
static void etp_refuse(etp_state *st, int fd, const struct sockaddr_storage *peer,
                       socklen_t peer_len)
{
    srv__stats_connection_opened(st->srv);
    srv_request *req = srv__request_new(st->srv, (const struct sockaddr *)peer, peer_len);
    if (req) {
        srv__request_fail(req, 503); /* respond ignores it: no engine data */
        size_t hlen = 0, blen = 0;
        const char *head = srv__response_http1_head(req, &hlen);
        const void *body = srv__response_body(req, &blen);
        if (head)
            etp_send2(fd, 0, head, hlen, body, blen);
        srv__request_release(req);
    } else {
        etp_send2(fd, 0, etp_canned_503, sizeof etp_canned_503 - 1, NULL, 0);
    }
    etp_linger_close(fd, 0); /* drain what already arrived, never wait */
    srv__stats_connection_closed(st->srv);
}

static void etp_accepted(etp_state *st, int fd, const struct sockaddr_storage *peer,
                         socklen_t peer_len)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    etp_conn *c = calloc(1, sizeof *c);
    if (!c) {
        etp_refuse(st, fd, peer, peer_len);
        return;
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        etp_refuse(st, fd, peer, peer_len);
        return;
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        etp_refuse(st, fd, peer, peer_len);
        return;
    }
    c->job.run = etp_conn_run;
    c->st = st;
    c->fd = fd;
    memcpy(&c->peer, peer, peer_len <= sizeof c->peer ? peer_len : sizeof c->peer);
    c->peer_len = peer_len <= sizeof c->peer ? peer_len : (socklen_t)sizeof c->peer;
    atomic_init(&c->phase, ETP_PH_QUEUED);
    atomic_init(&c->write_since, 0);

    pthread_mutex_lock(&st->mu);
    if (st->open >= st->cfg->max_connections) {
        pthread_mutex_unlock(&st->mu);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        free(c);
        etp_refuse(st, fd, peer, peer_len);
        return;
    }
    c->next = st->conns;
    if (st->conns)
        st->conns->prev = c;
    st->conns = c;
    st->open++;
    pthread_mutex_unlock(&st->mu);

    srv__stats_connection_opened(st->srv);
    if (srv__pool_submit(st->srv, &c->job) != 0)
        etp_conn_finish(c, ETP_CLOSE_QUIET);
}

static void *etp_acceptor_main(void *arg)
{
    etp_state *st = arg;
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof peer;
        int fd = accept4(st->listen_fd, (struct sockaddr *)&peer, &peer_len, SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (atomic_load(&st->quiescing))
                break; /* shutdown() of the listening socket woke us */
            switch (err) {
            case EINTR:
            case ECONNABORTED:
            case EPROTO:
            case EAGAIN:
                continue;
            case EMFILE:
            case ENFILE:
                /* Refuse the oldest waiting client with our spare descriptor
                 * rather than leave it hanging, then back off. */
                if (st->spare_fd >= 0) {
                    close(st->spare_fd);
                    peer_len = sizeof peer;
                    fd = accept4(st->listen_fd, (struct sockaddr *)&peer, &peer_len,
                                 SOCK_CLOEXEC);
                    if (fd >= 0)
                        etp_refuse(st, fd, &peer, peer_len);
                    st->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                }
                etp_sleep_ms(ETP_ACCEPT_BACKOFF_MS);
                continue;
            case EBADF:
            case EINVAL:
            case ENOTSOCK:
                return NULL;
            default: /* ENOBUFS, ENOMEM, network errors */
                etp_sleep_ms(ETP_ACCEPT_BACKOFF_MS);
                continue;
            }
        }
        if (atomic_load(&st->quiescing)) {
            close(fd);
            break;
        }
        etp_accepted(st, fd, &peer, peer_len);
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Vtable slots                                                        */
/* ------------------------------------------------------------------ */

static void etp_free_state(etp_state *st)
{
    if (st->listen_fd >= 0)
        close(st->listen_fd);
    if (st->stop_fd >= 0)
        close(st->stop_fd);
    if (st->spare_fd >= 0)
        close(st->spare_fd);
    pthread_cond_destroy(&st->drained);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static int etp_start(srv_server *srv, void **state)
{
    etp_state *st = calloc(1, sizeof *st);
    if (!st) {
        srv__server_set_error(srv, "threadpool: out of memory");
        return SRV_ENOMEM;
    }
    st->srv = srv;
    st->cfg = srv__server_config(srv);
    st->listen_fd = st->stop_fd = st->spare_fd = -1;
    atomic_init(&st->quiescing, 0);
    atomic_init(&st->stopping, 0);
    atomic_init(&st->yielding, 0);

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_mutex_init(&st->mu, NULL);
    if (rc == 0 && (rc = pthread_cond_init(&st->drained, &ca)) != 0)
        pthread_mutex_destroy(&st->mu);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        free(st);
        srv__server_set_error(srv, "threadpool: cannot create a mutex: %s", strerror(rc));
        return SRV_ESYS;
    }

    etp_raise_parser_limit(st->cfg);

    st->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (st->stop_fd < 0) {
        int err = errno;
        etp_free_state(st);
        srv__server_set_error(srv, "threadpool: eventfd: %s", strerror(err));
        return SRV_ESYS;
    }
    st->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    int fd = srv__listen(srv, 0); /* blocking: the acceptor sleeps in accept4 */
    if (fd < 0) {
        etp_free_state(st);
        return fd;
    }
    st->listen_fd = fd;

    /* Published before the acceptor runs: the core reads it (respond) on
     * the threads our connections reach. */
    *state = st;
    /* Signals go to the application's threads, not to the acceptor. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&st->acceptor, NULL, etp_acceptor_main, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        *state = NULL;
        etp_free_state(st);
        srv__server_set_error(srv, "threadpool: cannot create the acceptor thread: %s",
                              strerror(rc));
        return SRV_ETHREAD;
    }
    st->acceptor_started = 1;
    return 0;
}

static void etp_quiesce(void *state)
{
    etp_state *st = state;
    if (st->quiesced)
        return;
    st->quiesced = 1;
    atomic_store(&st->quiescing, 1);
    /* Wakes the blocking accept4 (EINVAL); new connects are refused. */
    shutdown(st->listen_fd, SHUT_RDWR);
    if (st->acceptor_started) {
        pthread_join(st->acceptor, NULL);
        st->acceptor_started = 0;
    }
    close(st->listen_fd);
    st->listen_fd = -1;
    /* Level-triggered and never read: every idle wait from now on wakes. */
    uint64_t one = 1;
    ssize_t w = write(st->stop_fd, &one, sizeof one);
    (void)w;
}

/*
 * A blocking handler that outlived the grace period: the core has answered
 * its request (its 503, or the application's answer given before the
 * handler returned), but the connection's thread is still inside the
 * handler. Stop claims the answer, writes it through a duplicate of the
 * socket, shuts the socket so the client sees the response complete, and
 * hands the engine's reference back: the client and srv_server_stop do not
 * wait for the handler, as on the other engines. The thread finds
 * `detached` when the handler returns and only drains and closes its own
 * descriptor, never shutting the socket under stop's write.
 */
typedef struct etp_detached {
    srv_request *req; /* NULL: a queued connection, answered 503 if it sent */
    int fd; /* a dup: the socket outlives the connection thread's close */
    struct sockaddr_storage peer;
    socklen_t peer_len;
    const char *head;
    const void *body;
    size_t hlen, blen, sent;
    int over; /* written, or the client is gone */
    int has_input; /* queued: the client had sent bytes when detached */
} etp_detached;

/* st->mu held: stop no longer waits for this connection; it counts as
 * closed from now on (its job closes the descriptor later). */
static void etp_count_detached(etp_state *st, etp_conn *c)
{
    c->shut = 1;
    st->detached++;
    srv__stats_connection_closed(st->srv);
}

/* st->mu held. Claims the connection's answer (its thread then keeps off
 * the socket) and fills *out; 0 when there is nothing to claim yet. */
static int etp_detach(etp_state *st, etp_conn *c, etp_detached *out)
{
    int fd = -1;
    pthread_mutex_lock(&c->mu);
    srv_request *req = c->responded && !c->detached ? c->serving : NULL;
    if (req && (fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0)) >= 0) {
        c->detached = 1;
        c->serving = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (fd < 0) /* out of descriptors: stop waits for the handler instead */
        return 0;
    etp_count_detached(st, c);
    *out = (etp_detached){.req = req, .fd = fd};
    return 1;
}

/* st->mu held. A connection still queued for a worker (which may wait
 * behind blocking handlers) has never been read; its job finds it shut and
 * only closes (etp_conn_run), so stop does not wait for it. If the client
 * has sent a request, it gets the 503 any engine gives in-flight requests
 * at stop, written off the lock from *out (1); 0 when no descriptor could
 * be duplicated, and then a canned 503 was written here. */
static int etp_detach_queued(etp_state *st, etp_conn *c, etp_detached *out)
{
    /* Peek now, under st->mu, before the job can start and drain the
     * request away. */
    int has_input = etp_client_sent(c->fd);
    int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
    c->detached = 1; /* its job has not started: no one else reads it */
    etp_count_detached(st, c);
    if (fd < 0) {
        /* Out of descriptors: the canned 503 (not logged), then the FIN. */
        if (has_input)
            etp_send2(c->fd, 0, etp_canned_503, sizeof etp_canned_503 - 1, NULL, 0);
        shutdown(c->fd, SHUT_WR);
        return 0;
    }
    *out = (etp_detached){.fd = fd, .peer = c->peer, .peer_len = c->peer_len,
                          .has_input = has_input};
    return 1;
}

/* Off st->mu: write the detached connections' answers side by side, all
 * within ETP_STOP_WRITE_GRACE_MS (the grace a response being written gets),
 * so one slow reader delays none of the others; then shut each socket and
 * hand the engine's reference back. */
static void etp_detached_finish(etp_state *st, etp_detached *d, size_t n)
{
    struct pollfd pfd[ETP_DETACH_BATCH];
    uint64_t end = etp_now_ms() + ETP_STOP_WRITE_GRACE_MS;
    for (size_t i = 0; i < n; i++) {
        if (!d[i].req && d[i].has_input) {
            d[i].req = srv__request_new(st->srv, (const struct sockaddr *)&d[i].peer,
                                        d[i].peer_len);
            if (d[i].req) /* respond ignores it: no engine data */
                srv__request_fail(d[i].req, 503);
        }
        d[i].head = d[i].req ? srv__response_http1_head(d[i].req, &d[i].hlen) : NULL;
        d[i].body = d[i].req ? srv__response_body(d[i].req, &d[i].blen) : NULL;
        d[i].over = d[i].head == NULL;
    }
    for (;;) {
        nfds_t waiting = 0;
        for (size_t i = 0; i < n; i++) {
            if (d[i].over)
                continue;
            int r = etp_send_some(d[i].fd, d[i].head, d[i].hlen, d[i].body, d[i].blen,
                                  &d[i].sent);
            if (r != 0)
                d[i].over = 1;
            else
                pfd[waiting++] = (struct pollfd){.fd = d[i].fd, .events = POLLOUT};
        }
        uint64_t now = etp_now_ms();
        if (waiting == 0 || now >= end)
            break;
        if (poll(pfd, waiting, etp_clamp_ms(end - now)) < 0 && errno != EINTR)
            break;
    }
    for (size_t i = 0; i < n; i++) {
        etp_linger_close(d[i].fd, 0); /* the thread's own fd closes later */
        if (d[i].req)
            srv__request_release(d[i].req);
    }
}

/* Shut down (st->mu held) every connection that has nothing left to send,
 * so its blocked read returns, and responses stuck in a write for
 * ETP_STOP_WRITE_GRACE_MS; detach those still queued for a worker and those
 * whose handler still runs (into `out`, up to `cap`, to be written off the
 * lock). */
static size_t etp_shutdown_conns(etp_state *st, etp_detached *out, size_t cap)
{
    size_t n = 0;
    uint64_t now = etp_now_ms();
    for (etp_conn *c = st->conns; c; c = c->next) {
        if (c->shut)
            continue;
        enum etp_phase ph = etp_get_phase(c);
        if (ph == ETP_PH_QUEUED) {
            if (n < cap && etp_detach_queued(st, c, &out[n]))
                n++;
            continue;
        }
        if (ph == ETP_PH_HANDLER) {
            if (n < cap && etp_detach(st, c, &out[n]))
                n++;
            continue;
        }
        if (ph == ETP_PH_WRITE && now - atomic_load(&c->write_since) < ETP_STOP_WRITE_GRACE_MS)
            continue;
        shutdown(c->fd, SHUT_RDWR);
        c->shut = 1;
    }
    return n;
}

/* Returns once every connection is closed or detached; srv_server_free's
 * pool shutdown waits for the detached ones' threads before destroy. */
static void etp_stop(void *state)
{
    etp_state *st = state;
    etp_quiesce(st);
    atomic_store(&st->stopping, 1);

    pthread_mutex_lock(&st->mu);
    while (st->open > st->detached) {
        etp_detached done[ETP_DETACH_BATCH];
        size_t n = etp_shutdown_conns(st, done, ETP_DETACH_BATCH);
        if (n > 0) {
            pthread_mutex_unlock(&st->mu);
            etp_detached_finish(st, done, n);
            pthread_mutex_lock(&st->mu);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += ETP_STOP_SCAN_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&st->drained, &st->mu, &until);
    }
    pthread_mutex_unlock(&st->mu);
}

static void etp_destroy(void *state)
{
    etp_state *st = state;
    if (!st)
        return;
    etp_free_state(st);
}

const srv_engine srv_engine_threadpool = {
    .version = SRV_ENGINE_VERSION,
    .name = "threadpool",
    .caps = SRV_ENGINE_CAP_VERSION_505 | SRV_ENGINE_CAP_GARBAGE_400,
    .start = etp_start,
    .respond = etp_respond,
    .quiesce = etp_quiesce,
    .stop = etp_stop,
    .destroy = etp_destroy,
};
