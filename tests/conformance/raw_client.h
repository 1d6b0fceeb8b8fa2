/*
 * A raw-socket HTTP/1.x client for the conformance suite: connect to
 * 127.0.0.1, send exact bytes, read and parse one response at a time
 * (status line, headers, Content-Length / chunked / until-close body) and
 * notice when the server closes. Every call is bounded by a timeout, so a
 * server that hangs fails a test instead of hanging it. No test framework
 * here: callers assert on the return codes.
 */
#ifndef SRV_TEST_RAW_CLIENT_H
#define SRV_TEST_RAW_CLIENT_H

#include <stddef.h>

/* Results of the calls below (0 or one of these). */
enum {
    RC_OK = 0,
    RC_CLOSED = -1,    /* orderly close (EOF) before any byte of a response */
    RC_RESET = -2,     /* connection reset before any byte of a response */
    RC_TIMEOUT = -3,   /* nothing (more) arrived before the deadline */
    RC_BADRESP = -4,   /* bytes arrived that are not an HTTP/1.x response */
    RC_TRUNCATED = -5, /* the connection ended in the middle of a response */
    RC_REFUSED = -6,   /* connect: ECONNREFUSED */
    RC_SYSERR = -7,    /* any other socket error (see errno) */
    RC_TLS = -8        /* rc_connect over TLS: the handshake failed */
};

struct ssl_ctx_st; /* OpenSSL's SSL_CTX and SSL */
struct ssl_st;

typedef struct rc_conn {
    int fd;        /* -1 when not connected */
    struct ssl_st *ssl; /* over TLS (rc_set_tls): the client's SSL, else NULL */
    char *buf;     /* bytes received and not yet consumed: buf[off..len) */
    size_t off, len, cap;
    int eof;       /* the peer closed its side (read returned 0) */
    int reset;     /* a read or write failed with ECONNRESET / EPIPE */
    size_t received; /* total bytes received on this connection */
} rc_conn;

typedef struct rc_header {
    char *name;
    char *value;
} rc_header;

typedef struct rc_response {
    int status;         /* e.g. 200; 100 for an interim response */
    int minor;          /* HTTP/1.<minor> of the status line */
    char *reason;
    rc_header *headers;
    size_t nheaders;
    char *body;         /* NUL-terminated for convenience */
    size_t body_len;
    size_t body_cap;    /* body's room past body_len (grown by doubling) */
    int chunked;        /* the body came chunked */
} rc_response;

/* A human name for an RC_* code ("timeout", "reset", ...). */
const char *rc_strerror(int rc);

/* Zero *c and mark it unconnected. */
void rc_init(rc_conn *c);

/* Connect to 127.0.0.1:port within timeout_ms. RC_OK, RC_REFUSED,
 * RC_TIMEOUT or RC_SYSERR. The socket is non-blocking from then on.
 * With a TLS context set (rc_set_tls), the TLS handshake is made too,
 * within the same timeout (RC_TLS when it fails), and every call below
 * speaks through it: the same bytes, encrypted. A server that closes or
 * resets inside the handshake gives RC_OK here and RC_CLOSED / RC_RESET
 * to the next read, as a cleartext server that accepts and closes. */
int rc_connect(rc_conn *c, int port, int timeout_ms);

/* The OpenSSL client context rc_connect uses from now on (not owned), or
 * NULL: plain TCP again. Process-wide: set it around a group of cases. */
void rc_set_tls(struct ssl_ctx_st *ctx);

/* Send all `len` bytes within timeout_ms. RC_OK, RC_RESET (the server
 * closed: EPIPE/ECONNRESET), RC_TIMEOUT (the server stopped reading). */
int rc_send(rc_conn *c, const void *data, size_t len, int timeout_ms);
int rc_send_str(rc_conn *c, const char *s, int timeout_ms);

/* Half-close: no more bytes from us (shutdown SHUT_WR; over TLS a
 * close_notify first). */
void rc_shutdown_write(rc_conn *c);

/* Close the socket and free the buffer; safe to call twice. */
void rc_close(rc_conn *c);

/*
 * rc_read_response: read exactly one response (a 1xx interim response
 * counts as one) within timeout_ms. `is_head` says the request was HEAD
 * (no body whatever the headers say). Bytes after the response stay
 * buffered for the next call. RC_OK with *r filled (free it with
 * rc_response_free), or RC_CLOSED / RC_RESET (nothing at all arrived),
 * RC_TRUNCATED, RC_BADRESP, RC_TIMEOUT. *r is zeroed on failure.
 */
int rc_read_response(rc_conn *c, rc_response *r, int is_head, int timeout_ms);

/*
 * rc_wait_close: wait up to timeout_ms for the server to close. Returns
 * RC_CLOSED (EOF) or RC_RESET once it has, RC_TIMEOUT if it is still open.
 * Bytes arriving meanwhile are buffered; *unread (when not NULL) receives
 * how many unconsumed bytes are in the buffer.
 */
int rc_wait_close(rc_conn *c, int timeout_ms, size_t *unread);

/* Read what arrives within timeout_ms into c->buf (for callers that parse
 * the bytes themselves, e.g. HTTP/2 frames): the bytes added (> 0), 0 when
 * the peer closed, RC_TIMEOUT or RC_RESET. */
int rc_read_some(rc_conn *c, int timeout_ms);

/* Bytes received and not yet consumed by rc_read_response. */
size_t rc_unread(const rc_conn *c);

/* The first header named `name` (case-insensitive), NULL when absent. */
const char *rc_header_get(const rc_response *r, const char *name);

/* Non-zero when the comma-separated header `name` lists `token`
 * (case-insensitive, optional whitespace), in any of its occurrences. */
int rc_header_has_token(const rc_response *r, const char *name,
                        const char *token);

void rc_response_free(rc_response *r);

/* Milliseconds on the monotonic clock. */
long long rc_now_ms(void);

/* Sleep for ms milliseconds. */
void rc_sleep_ms(long ms);

#endif /* SRV_TEST_RAW_CLIENT_H */
