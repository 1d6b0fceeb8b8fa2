/*
 * Raw-socket HTTP/1.x client for the conformance suite (see raw_client.h).
 * Non-blocking sockets and poll() against a monotonic deadline: no call
 * can outlive its timeout.
 */
#include "raw_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define RC_MAX_HEAD (1024 * 1024)

/* rc_set_tls: the context new connections handshake with, or NULL. */
static SSL_CTX *rc_tls_ctx;

void rc_set_tls(struct ssl_ctx_st *ctx)
{
    rc_tls_ctx = ctx;
}

long long rc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rc_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const char *rc_strerror(int rc)
{
    switch (rc) {
    case RC_OK: return "ok";
    case RC_CLOSED: return "closed by the server without a response";
    case RC_RESET: return "reset by the server without a response";
    case RC_TIMEOUT: return "timeout";
    case RC_BADRESP: return "not an HTTP/1.x response";
    case RC_TRUNCATED: return "connection ended inside a response";
    case RC_REFUSED: return "connection refused";
    case RC_SYSERR: return "socket error";
    case RC_TLS: return "TLS handshake failed";
    default: return "unknown";
    }
}

void rc_init(rc_conn *c)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

static int remaining(long long deadline)
{
    long long left = deadline - rc_now_ms();
    return left < 0 ? 0 : (int)left;
}

/* Wait until fd is readable (want_write 0) or writable, or the deadline:
 * 0, or RC_TIMEOUT. */
static int wait_fd(int fd, int want_write, long long deadline)
{
    for (;;) {
        struct pollfd pf = {fd, want_write ? POLLOUT : POLLIN, 0};
        int left = remaining(deadline);
        if (left == 0)
            return RC_TIMEOUT;
        int n = poll(&pf, 1, left);
        if (n > 0)
            return 0;
        if (n == 0)
            return RC_TIMEOUT;
        if (errno != EINTR)
            return RC_SYSERR;
    }
}

/* After an SSL call returned r <= 0: 1 to wait for the socket (where in
 * *want_write), else the RC code the failure means: RC_CLOSED for the
 * end of the stream, RC_RESET for a dead connection (a reset, an alert, a
 * broken record), RC_SYSERR. */
static int tls_failure(rc_conn *c, int r, int *want_write)
{
    int e = SSL_get_error(c->ssl, r);
    int saved = errno;
    ERR_clear_error();
    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want_write = 0;
        return 1;
    case SSL_ERROR_WANT_WRITE:
        *want_write = 1;
        return 1;
    case SSL_ERROR_ZERO_RETURN: /* close_notify, or a bare TCP close */
        return RC_CLOSED;
    case SSL_ERROR_SYSCALL:
        if (saved == EINTR) {
            *want_write = 0;
            return 1;
        }
        if (saved == 0)
            return RC_CLOSED;
        return saved == ECONNRESET || saved == EPIPE ? RC_RESET : RC_SYSERR;
    default: /* SSL_ERROR_SSL: an alert or bytes that are not TLS */
        return RC_RESET;
    }
}

static int tls_handshake(rc_conn *c, long long deadline)
{
    c->ssl = SSL_new(rc_tls_ctx);
    if (c->ssl == NULL || SSL_set_fd(c->ssl, c->fd) != 1) {
        ERR_clear_error();
        return RC_TLS;
    }
    SSL_set_connect_state(c->ssl);
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int r = SSL_do_handshake(c->ssl);
        if (r == 1)
            return RC_OK;
        int want_write = 0;
        int f = tls_failure(c, r, &want_write);
        if (f != 1) {
            /* The server closed or reset inside the handshake: as a
             * cleartext server that accepts and closes, the connection is
             * made and the next read says RC_CLOSED / RC_RESET (a server
             * past max_connections may do this). Anything else is a TLS
             * failure. */
            if (f == RC_CLOSED) {
                c->eof = 1;
                return RC_OK;
            }
            if (f == RC_RESET && errno == ECONNRESET) {
                c->reset = 1;
                return RC_OK;
            }
            return RC_TLS;
        }
        int w = wait_fd(c->fd, want_write, deadline);
        if (w != 0)
            return w;
    }
}

int rc_connect(rc_conn *c, int port, int timeout_ms)
{
    rc_init(c);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return RC_SYSERR;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (errno == ECONNREFUSED) {
            close(fd);
            return RC_REFUSED;
        }
        if (errno != EINPROGRESS) {
            close(fd);
            return RC_SYSERR;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int n;
        do {
            n = poll(&p, 1, timeout_ms);
        } while (n < 0 && errno == EINTR);
        if (n == 0) {
            close(fd);
            return RC_TIMEOUT;
        }
        int err = 0;
        socklen_t len = sizeof err;
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
            close(fd);
            return RC_SYSERR;
        }
        if (err != 0) {
            close(fd);
            errno = err;
            return err == ECONNREFUSED ? RC_REFUSED : RC_SYSERR;
        }
    }
    c->fd = fd;
    return rc_tls_ctx ? tls_handshake(c, rc_now_ms() + timeout_ms) : RC_OK;
}

int rc_send(rc_conn *c, const void *data, size_t len, int timeout_ms)
{
    long long deadline = rc_now_ms() + timeout_ms;
    const char *p = data;
    if (c->fd < 0)
        return RC_SYSERR;
    if (c->ssl && len > 0 && (c->eof || c->reset)) {
        c->reset = 1; /* the handshake ended in a close: as EPIPE in the clear */
        return RC_RESET;
    }
    while (len > 0 && c->ssl) {
        ERR_clear_error();
        errno = 0;
        int n = SSL_write(c->ssl, p, len > 1u << 30 ? 1 << 30 : (int)len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        int want_write = 0;
        int f = tls_failure(c, n, &want_write);
        if (f == 1) {
            int w = wait_fd(c->fd, want_write, deadline);
            if (w != 0)
                return w;
            continue;
        }
        if (f == RC_SYSERR)
            return RC_SYSERR;
        c->reset = 1; /* the server closed: as EPIPE in the clear */
        return RC_RESET;
    }
    while (len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {c->fd, POLLOUT, 0};
            int left = remaining(deadline);
            if (left == 0)
                return RC_TIMEOUT;
            if (poll(&pf, 1, left) == 0)
                return RC_TIMEOUT;
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            c->reset = 1;
            return RC_RESET;
        }
        return RC_SYSERR;
    }
    return RC_OK;
}

int rc_send_str(rc_conn *c, const char *s, int timeout_ms)
{
    return rc_send(c, s, strlen(s), timeout_ms);
}

void rc_shutdown_write(rc_conn *c)
{
    if (c->ssl) {
        ERR_clear_error();
        SSL_shutdown(c->ssl); /* our close_notify; theirs is read as EOF later */
        ERR_clear_error();
    }
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_WR);
}

void rc_close(rc_conn *c)
{
    if (c->ssl)
        SSL_free(c->ssl); /* no close_notify: a client that just goes away */
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    rc_init(c);
}

size_t rc_unread(const rc_conn *c)
{
    return c->len - c->off;
}

/* Read what is available, waiting until the deadline. Returns the number
 * of bytes added (> 0), 0 at EOF, RC_RESET or RC_TIMEOUT. */
static int fill(rc_conn *c, long long deadline)
{
    if (c->eof)
        return 0;
    if (c->reset)
        return RC_RESET;
    if (c->cap - c->len < 16384) {
        size_t cap = c->cap ? c->cap * 2 : 65536;
        char *nb = realloc(c->buf, cap + 1);
        if (!nb)
            return RC_SYSERR;
        c->buf = nb;
        c->cap = cap;
    }
    while (c->ssl) {
        ERR_clear_error();
        errno = 0;
        size_t room = c->cap - c->len;
        int n = SSL_read(c->ssl, c->buf + c->len, room > 1u << 30 ? 1 << 30 : (int)room);
        if (n > 0) {
            c->len += (size_t)n;
            c->received += (size_t)n;
            c->buf[c->len] = '\0';
            return n;
        }
        int want_write = 0;
        int f = tls_failure(c, n, &want_write);
        if (f == 1) {
            int w = wait_fd(c->fd, want_write, deadline);
            if (w != 0)
                return w;
            continue;
        }
        if (f == RC_CLOSED) {
            c->eof = 1;
            return 0;
        }
        if (f == RC_RESET) {
            c->reset = 1;
            return RC_RESET;
        }
        return RC_SYSERR;
    }
    for (;;) {
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n > 0) {
            c->len += (size_t)n;
            c->received += (size_t)n;
            c->buf[c->len] = '\0';
            return (int)n;
        }
        if (n == 0) {
            c->eof = 1;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == ECONNRESET || errno == EPIPE) {
            c->reset = 1;
            return RC_RESET;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return RC_SYSERR;
        struct pollfd pf = {c->fd, POLLIN, 0};
        int left = remaining(deadline);
        if (left == 0)
            return RC_TIMEOUT;
        int pn = poll(&pf, 1, left);
        if (pn == 0)
            return RC_TIMEOUT;
    }
}

int rc_read_some(rc_conn *c, int timeout_ms)
{
    int rc = fill(c, rc_now_ms() + timeout_ms);
    return rc >= 0 || rc == RC_TIMEOUT ? rc : RC_RESET;
}

int rc_wait_close(rc_conn *c, int timeout_ms, size_t *unread)
{
    long long deadline = rc_now_ms() + timeout_ms;
    int rc;
    for (;;) {
        rc = fill(c, deadline);
        if (rc > 0)
            continue;
        if (rc == 0) {
            rc = RC_CLOSED;
            break;
        }
        if (rc == RC_RESET || rc == RC_TIMEOUT)
            break;
        rc = RC_RESET; /* any other socket error: the connection is dead */
        break;
    }
    if (unread)
        *unread = rc_unread(c);
    return rc;
}

/* Offset (absolute in c->buf) of the next CRLF at or after `from`, or -1. */
static long find_crlf(const rc_conn *c, size_t from)
{
    for (size_t i = from; i + 1 < c->len; i++)
        if (c->buf[i] == '\r' && c->buf[i + 1] == '\n')
            return (long)i;
    return -1;
}

/* Make sure buf holds at least `upto` bytes (absolute offset). 0, or an
 * RC code: RC_TRUNCATED at EOF/reset, RC_TIMEOUT. */
static int need_bytes(rc_conn *c, size_t upto, long long deadline)
{
    while (c->len < upto) {
        int n = fill(c, deadline);
        if (n > 0)
            continue;
        return n == RC_TIMEOUT ? RC_TIMEOUT : RC_TRUNCATED;
    }
    return 0;
}

/* Wait for a CRLF at or after `from`; its offset in *at. */
static int need_line(rc_conn *c, size_t from, long long deadline, long *at)
{
    for (;;) {
        long i = find_crlf(c, from);
        if (i >= 0) {
            *at = i;
            return 0;
        }
        if (c->len - from > RC_MAX_HEAD)
            return RC_BADRESP;
        int n = fill(c, deadline);
        if (n > 0)
            continue;
        return n == RC_TIMEOUT ? RC_TIMEOUT : RC_TRUNCATED;
    }
}

static char *dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

void rc_response_free(rc_response *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nheaders; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    free(r->headers);
    free(r->reason);
    free(r->body);
    memset(r, 0, sizeof *r);
}

const char *rc_header_get(const rc_response *r, const char *name)
{
    for (size_t i = 0; i < r->nheaders; i++)
        if (strcasecmp(r->headers[i].name, name) == 0)
            return r->headers[i].value;
    return NULL;
}

int rc_header_has_token(const rc_response *r, const char *name,
                        const char *token)
{
    size_t tl = strlen(token);
    for (size_t i = 0; i < r->nheaders; i++) {
        if (strcasecmp(r->headers[i].name, name) != 0)
            continue;
        const char *p = r->headers[i].value;
        while (*p) {
            const char *end = strchr(p, ',');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            const char *t = p;
            trim(&t, &n);
            if (n == tl && strncasecmp(t, token, tl) == 0)
                return 1;
            if (!end)
                break;
            p = end + 1;
        }
    }
    return 0;
}

static int add_header(rc_response *r, const char *line, size_t n)
{
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line)
        return RC_BADRESP;
    const char *name = line;
    size_t nl = (size_t)(colon - line);
    const char *val = colon + 1;
    size_t vl = n - nl - 1;
    trim(&val, &vl);
    rc_header *nh = realloc(r->headers, (r->nheaders + 1) * sizeof *nh);
    if (!nh)
        return RC_SYSERR;
    r->headers = nh;
    nh[r->nheaders].name = dup_range(name, nl);
    nh[r->nheaders].value = dup_range(val, vl);
    r->nheaders++;
    return 0;
}

/* By doubling: a chunked body of many pieces must not cost a copy of all
 * of it per piece (16 MB in 64 KB chunks kept a sanitized client from
 * reading for seconds, and a server's send deadline cut it). */
static int append_body(rc_response *r, const char *p, size_t n)
{
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + n + 1)
            cap *= 2;
        char *nb = realloc(r->body, cap);
        if (!nb)
            return RC_SYSERR;
        r->body = nb;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, p, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return 0;
}

/* Parse a strict decimal; -1 when not all digits or too large. */
static long long parse_dec(const char *s)
{
    long long v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (1LL << 40))
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

static int read_chunked(rc_conn *c, rc_response *r, size_t *pos,
                        long long deadline)
{
    for (;;) {
        long eol;
        int rc = need_line(c, *pos, deadline, &eol);
        if (rc)
            return rc;
        unsigned long long size = 0;
        size_t i = *pos, digits = 0;
        for (; i < (size_t)eol; i++, digits++) {
            char ch = c->buf[i];
            int d;
            if (ch >= '0' && ch <= '9') d = ch - '0';
            else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
            else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
            else break;
            if (size > (1ULL << 40))
                return RC_BADRESP;
            size = size * 16 + (unsigned)d;
        }
        if (digits == 0 || (i < (size_t)eol && c->buf[i] != ';' &&
                            c->buf[i] != ' ' && c->buf[i] != '\t'))
            return RC_BADRESP;
        *pos = (size_t)eol + 2;
        if (size == 0) {
            /* Trailers until an empty line. */
            for (;;) {
                rc = need_line(c, *pos, deadline, &eol);
                if (rc)
                    return rc;
                size_t n = (size_t)eol - *pos;
                *pos = (size_t)eol + 2;
                if (n == 0)
                    return 0;
            }
        }
        rc = need_bytes(c, *pos + size + 2, deadline);
        if (rc)
            return rc;
        if (c->buf[*pos + size] != '\r' || c->buf[*pos + size + 1] != '\n')
            return RC_BADRESP;
        rc = append_body(r, c->buf + *pos, size);
        if (rc)
            return rc;
        *pos += size + 2;
    }
}

/* Move the unconsumed bytes to the front so offsets stay small. */
static void compact(rc_conn *c)
{
    if (c->off == 0)
        return;
    memmove(c->buf, c->buf + c->off, c->len - c->off);
    c->len -= c->off;
    c->off = 0;
    if (c->buf)
        c->buf[c->len] = '\0';
}

static int read_response(rc_conn *c, rc_response *r, int is_head,
                         long long deadline)
{
    compact(c);
    size_t start = c->off;
    /* Wait for the first bytes: tell "nothing at all" apart. */
    while (c->len == start) {
        int n = fill(c, deadline);
        if (n > 0)
            break;
        if (n == 0)
            return RC_CLOSED;
        return n == RC_TIMEOUT ? RC_TIMEOUT : RC_RESET;
    }
    /* Reject non-HTTP bytes early rather than waiting for a CRLF. */
    static const char prefix[] = "HTTP/1.";
    for (;;) {
        size_t have = c->len - start;
        size_t cmp = have < sizeof prefix - 1 ? have : sizeof prefix - 1;
        if (memcmp(c->buf + start, prefix, cmp) != 0)
            return RC_BADRESP;
        if (cmp == sizeof prefix - 1)
            break;
        int rc = need_bytes(c, start + sizeof prefix - 1, deadline);
        if (rc)
            return rc;
    }
    long eol;
    int rc = need_line(c, start, deadline, &eol);
    if (rc)
        return rc;
    /* "HTTP/1.x SSS reason" */
    const char *line = c->buf + start;
    size_t ll = (size_t)eol - start;
    if (ll < 12 || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
        line[9] < '1' || line[9] > '5' || line[10] < '0' || line[10] > '9' ||
        line[11] < '0' || line[11] > '9' || (ll > 12 && line[12] != ' '))
        return RC_BADRESP;
    r->minor = line[7] - '0';
    r->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    r->reason = ll > 13 ? dup_range(line + 13, ll - 13) : dup_range("", 0);
    size_t pos = (size_t)eol + 2;
    for (;;) {
        rc = need_line(c, pos, deadline, &eol);
        if (rc)
            return rc;
        size_t n = (size_t)eol - pos;
        if (n == 0) {
            pos += 2;
            break;
        }
        if (pos - start > RC_MAX_HEAD)
            return RC_BADRESP;
        rc = add_header(r, c->buf + pos, n);
        if (rc)
            return rc;
        pos = (size_t)eol + 2;
    }
    r->body = dup_range("", 0);
    int no_body = is_head || r->status < 200 || r->status == 204 ||
                  r->status == 304;
    if (!no_body) {
        const char *cl = rc_header_get(r, "Content-Length");
        if (rc_header_has_token(r, "Transfer-Encoding", "chunked")) {
            r->chunked = 1;
            rc = read_chunked(c, r, &pos, deadline);
            if (rc)
                return rc;
        } else if (cl) {
            long long len = parse_dec(cl);
            if (len < 0)
                return RC_BADRESP;
            rc = need_bytes(c, pos + (size_t)len, deadline);
            if (rc)
                return rc;
            rc = append_body(r, c->buf + pos, (size_t)len);
            if (rc)
                return rc;
            pos += (size_t)len;
        } else {
            /* Delimited by close. */
            for (;;) {
                int n = fill(c, deadline);
                if (n > 0)
                    continue;
                if (n == RC_TIMEOUT)
                    return RC_TIMEOUT;
                break;
            }
            rc = append_body(r, c->buf + pos, c->len - pos);
            if (rc)
                return rc;
            pos = c->len;
        }
    }
    c->off = pos;
    return RC_OK;
}

int rc_read_response(rc_conn *c, rc_response *r, int is_head, int timeout_ms)
{
    memset(r, 0, sizeof *r);
    if (c->fd < 0)
        return RC_SYSERR;
    int rc = read_response(c, r, is_head, rc_now_ms() + timeout_ms);
    if (rc != RC_OK)
        rc_response_free(r);
    return rc;
}
