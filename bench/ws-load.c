/*
 * ws-load: the WebSocket client of bench/ws_measure.sh. One thread, epoll,
 * raw non-blocking sockets; it speaks RFC 6455's client side itself: the
 * opening handshake, masked frames out, unmasked frames in (reassembled),
 * pings answered, the close handshake. Two modes:
 *
 *   echo  C clients open, then each sends a text message of SIZE bytes,
 *         waits for its whole echo and sends the next, for SECONDS; prints
 *         the messages echoed per second (counted from the moment every
 *         client is open, so the handshakes are not in the rate) and the
 *         round trip's median and p99.
 *   hold  N sockets open (at most --batch handshakes at once) and then sit
 *         idle; once every one is open or has failed, the --ready file is
 *         written, and they are held until SIGTERM/SIGINT or --hold
 *         seconds, answering the server's pings.
 *
 * Every phase is bounded (-t for the opening, the duration or --hold, 2 s
 * for the closing), so it ends by itself. Only 127.0.0.0/8 and localhost
 * are accepted as targets.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SOCK_NONBLOCK, strcasestr; meson sets it too */
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FD_RESERVE 64            /* descriptors beyond the sockets: stdio, epoll, ... */
#define MAX_FRAME (1u << 20)     /* a larger incoming frame is an error */
#define CLOSE_GRACE_NS 2000000000ull
#define SIG_TAG UINT64_MAX       /* the signalfd's epoll tag */

/* RFC 6455's own example key (section 1.3) and the accept value it gives:
 * servers need no fresh key per socket, and checking the answer against
 * the known value needs no SHA-1 here. */
#define WS_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define WS_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

typedef enum { C_IDLE, C_CONNECTING, C_HANDSHAKE, C_OPEN, C_CLOSING, C_DONE } cstate;

typedef struct conn {
    int fd;
    cstate st;
    uint32_t armed;       /* the epoll events asked for */
    int waiting;          /* echo: a message is out, its echo not complete */
    uint64_t t_sent;
    uint64_t msg_len;     /* bytes of the message being reassembled */
    uint8_t *out;         /* bytes not yet sent */
    size_t out_off, out_len, out_cap;
    uint8_t *in;          /* bytes received, not yet parsed */
    size_t in_len, in_cap;
} conn;

typedef struct opts {
    int hold;             /* mode: 0 echo, 1 hold */
    unsigned n;           /* clients (echo) or sockets (hold) */
    unsigned batch;       /* handshakes in flight at once */
    size_t size;          /* echo message bytes */
    double seconds;       /* echo duration */
    double hold_s;        /* hold: the longest hold */
    double open_s;        /* the opening's bound */
    const char *ready;    /* hold: written once all are open */
    char host[64];
    char path[1024];
    int port;
    struct sockaddr_in addr;
} opts;

static opts o = {.n = 50, .batch = 256, .size = 32, .seconds = 10, .hold_s = 300, .open_s = 30};
static conn *conns;
static int ep;
static uint64_t rng;
static uint8_t *payload;
static char *request;
static size_t request_len;
static unsigned opened, failed, pending, started, done_count;
static uint64_t messages, bad_echo;
static uint32_t *lat_us;
static size_t nlat, caplat;
static uint64_t errors;
static char first_error[160];
static int measuring;     /* echo: counting messages */
static uint64_t t_end;    /* echo: when counting stops */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ws-load: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void usage(FILE *out, int rc)
{
    fprintf(out,
            "usage: ws-load echo [-c CLIENTS] [-s SIZE] [-d SECONDS] [-t OPEN_S] URL\n"
            "       ws-load hold [-c SOCKETS] [--batch N] [--ready FILE] [--hold SECONDS]\n"
            "                    [-t OPEN_S] URL\n"
            "  URL         ws://127.0.0.1:PORT/PATH (loopback only)\n"
            "  -c N        echo: clients, each with one message in flight (50);\n"
            "              hold: sockets to open and hold (50)\n"
            "  -s SIZE     echo: text message bytes, 1-65535 (32)\n"
            "  -d SECONDS  echo: how long the messages run (10)\n"
            "  -t OPEN_S   the longest the sockets may take to open (30)\n"
            "  --batch N   handshakes in flight at once (256)\n"
            "  --ready F   hold: write \"opened N failed F seconds S\" to F once all are open\n"
            "  --hold S    hold: release the sockets after S seconds at most (300), or on\n"
            "              SIGTERM/SIGINT\n");
    exit(rc);
}

static double num_arg(const char *name, const char *v, double lo, double hi)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || d < lo || d > hi) {
        fprintf(stderr, "ws-load: %s '%s' must be a number from %g to %g\n", name, v, lo, hi);
        exit(2);
    }
    return d;
}

/* ws://HOST[:PORT][/PATH] with HOST a 127.0.0.0/8 address or localhost. */
static void parse_url(const char *url)
{
    if (strncmp(url, "ws://", 5) != 0) {
        fprintf(stderr, "ws-load: '%s' is not a ws:// URL (ws://127.0.0.1:PORT/PATH)\n", url);
        exit(2);
    }
    const char *h = url + 5, *hend = h + strcspn(h, ":/");
    if ((size_t)(hend - h) >= sizeof o.host || hend == h) {
        fprintf(stderr, "ws-load: '%s' has no usable host\n", url);
        exit(2);
    }
    memcpy(o.host, h, (size_t)(hend - h));
    o.port = 80;
    const char *p = hend;
    if (*p == ':') {
        char *end;
        long port = strtol(p + 1, &end, 10);
        if (end == p + 1 || port < 1 || port > 65535 || (*end && *end != '/')) {
            fprintf(stderr, "ws-load: '%s' has a bad port\n", url);
            exit(2);
        }
        o.port = (int)port;
        p = end;
    }
    snprintf(o.path, sizeof o.path, "%s", *p ? p : "/");
    const char *ip = strcmp(o.host, "localhost") == 0 ? "127.0.0.1" : o.host;
    o.addr.sin_family = AF_INET;
    o.addr.sin_port = htons((uint16_t)o.port);
    if (inet_pton(AF_INET, ip, &o.addr.sin_addr) != 1 ||
        (ntohl(o.addr.sin_addr.s_addr) >> 24) != 127) {
        fprintf(stderr, "ws-load: host '%s' is not allowed: ws-load only targets this machine "
                        "(127.0.0.0/8 or localhost)\n", o.host);
        exit(2);
    }
}

/* Raise the soft RLIMIT_NOFILE to what the sockets need, or say how. */
static void raise_nofile(unsigned n)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)n + FD_RESERVE;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        fatal("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        fatal("-c %u needs %lu open files but the hard limit is %lu: lower -c or raise the "
              "limit (ulimit -Hn as root)", n, (unsigned long)need, (unsigned long)rl.rlim_max);
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        fatal("cannot raise the open-file limit to %lu: %s", (unsigned long)need,
              strerror(errno));
}

static uint32_t rand32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void arm(conn *c, uint32_t ev)
{
    if (c->armed == ev)
        return;
    struct epoll_event e = {.events = ev, .data.u64 = (uint64_t)(c - conns)};
    if (epoll_ctl(ep, c->armed ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &e) != 0)
        fatal("epoll_ctl: %s", strerror(errno));
    c->armed = ev;
}

/* The socket is finished with: its descriptor closed, its count taken. */
static void finish(conn *c)
{
    if (c->st == C_DONE)
        return;
    if (c->st == C_CONNECTING || c->st == C_HANDSHAKE)
        pending--;
    if (c->fd >= 0)
        close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
    c->st = C_DONE;
    c->armed = 0;
    done_count++;
}

static void fail(conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(conn *c, const char *fmt, ...)
{
    if (c->st == C_CONNECTING || c->st == C_HANDSHAKE)
        failed++;
    errors++;
    if (!first_error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_error, sizeof first_error, fmt, ap);
        va_end(ap);
    }
    finish(c);
}

static void reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    size_t cap2 = *cap ? *cap : 256;
    while (cap2 < need)
        cap2 *= 2;
    uint8_t *b = realloc(*buf, cap2);
    if (b == NULL)
        fatal("out of memory");
    *buf = b;
    *cap = cap2;
}

static void flush_out(conn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                if (errno == EAGAIN)
                    break;
                continue;
            }
            fail(c, "send: %s", strerror(errno));
            return;
        }
        c->out_off += (size_t)w;
    }
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    arm(c, EPOLLIN | (c->out_len ? EPOLLOUT : 0));
}

/* Queue one client frame: FIN set, masked with a fresh key (RFC 6455 5.3:
 * a client masks every frame). */
static void queue_frame(conn *c, unsigned op, const uint8_t *data, size_t len)
{
    reserve(&c->out, &c->out_cap, c->out_len + len + 14);
    uint8_t *p = c->out + c->out_len;
    *p++ = (uint8_t)(0x80 | op);
    if (len < 126) {
        *p++ = (uint8_t)(0x80 | len);
    } else { /* -s is at most 65535: the 16-bit length is enough */
        *p++ = 0x80 | 126;
        *p++ = (uint8_t)(len >> 8);
        *p++ = (uint8_t)len;
    }
    uint32_t key = rand32();
    uint8_t mask[4] = {(uint8_t)(key >> 24), (uint8_t)(key >> 16), (uint8_t)(key >> 8),
                       (uint8_t)key};
    memcpy(p, mask, 4);
    p += 4;
    for (size_t i = 0; i < len; i++)
        p[i] = data[i] ^ mask[i & 3];
    c->out_len = (size_t)(p - c->out) + len;
}

static void send_message(conn *c)
{
    c->waiting = 1;
    c->t_sent = now_ns();
    queue_frame(c, 0x1, payload, o.size);
    flush_out(c);
}

static void start_close(conn *c)
{
    static const uint8_t normal[2] = {1000 >> 8, 1000 & 0xff};
    if (c->st != C_OPEN)
        return;
    c->st = C_CLOSING;
    queue_frame(c, 0x8, normal, sizeof normal);
    flush_out(c);
}

static void record_latency(uint64_t ns)
{
    if (nlat == caplat) {
        size_t cap = caplat ? caplat * 2 : 65536;
        uint32_t *l = realloc(lat_us, cap * sizeof *l);
        if (l == NULL)
            fatal("out of memory");
        lat_us = l;
        caplat = cap;
    }
    uint64_t us = ns / 1000;
    lat_us[nlat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void message_done(conn *c)
{
    if (!c->waiting || c->msg_len != o.size) {
        bad_echo++;
        if (!first_error[0])
            snprintf(first_error, sizeof first_error, "an echo of %" PRIu64 " bytes, not %zu",
                     c->msg_len, o.size);
    }
    c->waiting = 0;
    if (!measuring || c->st != C_OPEN)
        return;
    uint64_t t = now_ns();
    if (t >= t_end)
        return; /* past the window: the main loop closes it */
    messages++;
    record_latency(t - c->t_sent);
    send_message(c);
}

/* The 101's head: status 101 and the accept value our key must give. */
static int check_handshake(conn *c, size_t head_len)
{
    char *h = (char *)c->in;
    char saved = h[head_len - 1];
    h[head_len - 1] = '\0';
    int ok = strncmp(h, "HTTP/1.1 101", 12) == 0;
    char *a = ok ? strcasestr(h, "\r\nSec-WebSocket-Accept:") : NULL;
    if (a) {
        a += 23;
        a += strspn(a, " \t");
        ok = strncmp(a, WS_ACCEPT, strlen(WS_ACCEPT)) == 0;
    } else {
        ok = 0;
    }
    if (!ok) {
        char *eol = strstr(h, "\r\n");
        if (eol)
            *eol = '\0';
        fail(c, "handshake refused: %.100s", h);
        return -1;
    }
    h[head_len - 1] = saved;
    return 0;
}

/* Parse what arrived: the handshake's answer, then whole frames. */
static void parse_in(conn *c)
{
    size_t off = 0;
    if (c->st == C_HANDSHAKE) {
        uint8_t *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
        if (end == NULL) {
            if (c->in_len > 16384)
                fail(c, "handshake answer over 16 KiB");
            return;
        }
        off = (size_t)(end - c->in) + 4;
        if (check_handshake(c, off) != 0)
            return;
        c->st = C_OPEN;
        pending--;
        opened++;
        if (measuring)
            send_message(c); /* a late opener joins the run */
    }
    while (c->st == C_OPEN || c->st == C_CLOSING) {
        size_t avail = c->in_len - off;
        if (avail < 2)
            break;
        const uint8_t *f = c->in + off;
        unsigned op = f[0] & 0x0f;
        int fin = f[0] & 0x80;
        if ((f[0] & 0x70) || (f[1] & 0x80)) {
            fail(c, "a frame with RSV bits or a mask from the server");
            return;
        }
        uint64_t len = f[1] & 0x7f;
        size_t hdr = 2;
        if (len == 126) {
            if (avail < 4)
                break;
            len = (uint64_t)f[2] << 8 | f[3];
            hdr = 4;
        } else if (len == 127) {
            if (avail < 10)
                break;
            len = 0;
            for (int i = 2; i < 10; i++)
                len = len << 8 | f[i];
            hdr = 10;
        }
        if (len > MAX_FRAME) {
            fail(c, "a frame of %" PRIu64 " bytes", len);
            return;
        }
        if (avail < hdr + len) {
            reserve(&c->in, &c->in_cap, off + hdr + (size_t)len);
            break;
        }
        const uint8_t *data = f + hdr;
        off += hdr + (size_t)len;
        switch (op) {
        case 0x0: /* continuation */
        case 0x1: /* text */
        case 0x2: /* binary */
            c->msg_len += len;
            if (fin) {
                if (c->st == C_OPEN)
                    message_done(c);
                c->msg_len = 0;
            }
            break;
        case 0x8: /* close: answer it, or it answers ours */
            if (c->st == C_OPEN) {
                errors++;
                if (!first_error[0])
                    snprintf(first_error, sizeof first_error, "the server closed with %d",
                             len >= 2 ? data[0] << 8 | data[1] : 1005);
                c->st = C_CLOSING;
                queue_frame(c, 0x8, data, len >= 2 ? 2 : 0);
                flush_out(c);
            }
            if (c->st != C_DONE)
                finish(c);
            return;
        case 0x9: /* ping */
            queue_frame(c, 0xA, data, (size_t)len);
            flush_out(c);
            break;
        case 0xA: /* pong */
            break;
        default:
            fail(c, "opcode %u from the server", op);
            return;
        }
    }
    if (c->st == C_DONE)
        return;
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

static void on_readable(conn *c)
{
    for (;;) {
        reserve(&c->in, &c->in_cap, c->in_len + 4096);
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            parse_in(c);
            if (c->st == C_DONE)
                return;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        if (c->st == C_CLOSING) /* the server closed after the close handshake */
            finish(c);
        else if (r == 0)
            fail(c, "closed by the server (%s)", c->st == C_OPEN ? "open" : "handshake");
        else
            fail(c, "recv: %s", strerror(errno));
        return;
    }
}

static void start_connect(conn *c)
{
    started++;
    pending++;
    c->st = C_CONNECTING;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        fail(c, "socket: %s", strerror(errno));
        return;
    }
    int one = 1; /* small frames: no Nagle delay on the round trip */
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&o.addr, sizeof o.addr) != 0 && errno != EINPROGRESS) {
        fail(c, "connect: %s", strerror(errno));
        return;
    }
    arm(c, EPOLLOUT);
}

static void on_writable(conn *c)
{
    if (c->st == C_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            fail(c, "connect: %s", strerror(err));
            return;
        }
        c->st = C_HANDSHAKE;
        reserve(&c->out, &c->out_cap, request_len);
        memcpy(c->out, request, request_len);
        c->out_off = 0;
        c->out_len = request_len;
    }
    flush_out(c);
}

static void open_more(void)
{
    while (pending < o.batch && started < o.n)
        start_connect(&conns[started]);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Run the loop until `until` (ns) or until stop() says so; returns 1 when
 * a signal ended it. */
static int loop(uint64_t until, int (*stop)(void), int sfd)
{
    struct epoll_event ev[512];
    for (;;) {
        if (stop && stop())
            return 0;
        uint64_t t = now_ns();
        if (t >= until)
            return 0;
        uint64_t wait_ms = (until - t) / 1000000 + 1;
        int n = epoll_wait(ep, ev, 512, wait_ms > 1000 ? 1000 : (int)wait_ms);
        if (n < 0 && errno != EINTR)
            fatal("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == SIG_TAG) {
                struct signalfd_siginfo si;
                if (read(sfd, &si, sizeof si) > 0)
                    return 1;
                continue;
            }
            conn *c = &conns[ev[i].data.u64];
            if (c->st == C_DONE)
                continue;
            if (ev[i].events & (EPOLLOUT | EPOLLERR))
                on_writable(c);
            if (c->st != C_DONE && (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                on_readable(c);
        }
        open_more();
    }
}

static int all_attempted(void)
{
    return started == o.n && pending == 0;
}

static int all_done(void)
{
    return done_count == o.n;
}

/* Close every socket politely (close frames, the server's answer awaited
 * for at most CLOSE_GRACE_NS), then whatever is left at once. */
static void close_all(int sfd)
{
    for (unsigned i = 0; i < o.n; i++) {
        conn *c = &conns[i];
        if (c->st == C_OPEN)
            start_close(c);
        else if (c->st != C_CLOSING && c->st != C_DONE && c->st != C_IDLE)
            fail(c, "still opening at the end");
        else if (c->st == C_IDLE)
            c->st = C_DONE, done_count++;
    }
    loop(now_ns() + CLOSE_GRACE_NS, all_done, sfd);
    for (unsigned i = 0; i < o.n; i++)
        finish(&conns[i]);
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        usage(argc < 2 ? stderr : stdout, argc < 2 ? 2 : 0);
    if (strcmp(argv[1], "hold") == 0)
        o.hold = 1;
    else if (strcmp(argv[1], "echo") != 0)
        usage(stderr, 2);
    const char *url = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            url = a;
            continue;
        }
        if (i + 1 >= argc)
            usage(stderr, 2);
        const char *v = argv[++i];
        if (strcmp(a, "-c") == 0)
            o.n = (unsigned)num_arg(a, v, 1, 1000000);
        else if (strcmp(a, "-s") == 0)
            o.size = (size_t)num_arg(a, v, 1, 65535);
        else if (strcmp(a, "-d") == 0)
            o.seconds = num_arg(a, v, 0.1, 3600);
        else if (strcmp(a, "-t") == 0)
            o.open_s = num_arg(a, v, 0.1, 3600);
        else if (strcmp(a, "--batch") == 0)
            o.batch = (unsigned)num_arg(a, v, 1, 1000000);
        else if (strcmp(a, "--hold") == 0)
            o.hold_s = num_arg(a, v, 0, 86400);
        else if (strcmp(a, "--ready") == 0)
            o.ready = v;
        else
            usage(stderr, 2);
    }
    if (url == NULL)
        usage(stderr, 2);
    parse_url(url);
    raise_nofile(o.n);
    rng = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;

    size_t cap = strlen(o.path) + strlen(o.host) + 256;
    request = malloc(cap);
    payload = malloc(o.size);
    conns = calloc(o.n, sizeof *conns);
    if (!request || !payload || !conns)
        fatal("out of memory");
    request_len = (size_t)snprintf(request, cap,
                                   "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                                   "Connection: Upgrade\r\nSec-WebSocket-Key: " WS_KEY "\r\n"
                                   "Sec-WebSocket-Version: 13\r\nUser-Agent: ws-load/1\r\n\r\n",
                                   o.path, o.host, o.port);
    for (size_t i = 0; i < o.size; i++)
        payload[i] = (uint8_t)('a' + i % 26);
    for (unsigned i = 0; i < o.n; i++)
        conns[i].fd = -1;

    ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        fatal("epoll_create1: %s", strerror(errno));
    /* SIGTERM/SIGINT end the hold (or the run) through the loop, so the
     * sockets still get their close handshake. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0)
        fatal("signalfd: %s", strerror(errno));
    struct epoll_event se = {.events = EPOLLIN, .data.u64 = SIG_TAG};
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &se);

    uint64_t t0 = now_ns();
    open_more();
    int signalled = loop(t0 + (uint64_t)(o.open_s * 1e9), all_attempted, sfd);
    double open_s = (double)(now_ns() - t0) / 1e9;
    if (!all_attempted())
        fprintf(stderr, "ws-load: %u of %u sockets not open after %.1f s\n",
                o.n - opened - failed, o.n, o.open_s);

    if (o.hold) {
        if (o.ready) {
            /* Written whole then renamed, so a reader never sees half. */
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "%s.tmp", o.ready);
            FILE *f = fopen(tmp, "w");
            if (f == NULL || fprintf(f, "opened %u failed %u seconds %.2f\n", opened,
                                     o.n - opened, open_s) < 0 || fclose(f) != 0 ||
                rename(tmp, o.ready) != 0)
                fatal("cannot write %s: %s", o.ready, strerror(errno));
        }
        uint64_t th = now_ns();
        if (!signalled) /* ends early once no socket is left to hold */
            loop(th + (uint64_t)(o.hold_s * 1e9), all_done, sfd);
        double held = (double)(now_ns() - th) / 1e9;
        unsigned still = 0;
        for (unsigned i = 0; i < o.n; i++)
            still += conns[i].st == C_OPEN;
        close_all(sfd);
        printf("hold sockets=%u opened=%u failed=%u open_seconds=%.2f held_seconds=%.1f "
               "open_at_end=%u errors=%" PRIu64 "\n",
               o.n, opened, o.n - opened, open_s, held, still, errors);
        if (first_error[0])
            fprintf(stderr, "ws-load: first error: %s\n", first_error);
        return opened == 0 ? 1 : 0;
    }

    if (opened == 0 || signalled) {
        close_all(sfd);
        fprintf(stderr, "ws-load: %s%s\n", signalled ? "interrupted" : "no socket opened",
                first_error[0] ? first_error : "");
        return 1;
    }
    /* The window: from now, with every client open, for -d seconds. */
    uint64_t tb = now_ns();
    t_end = tb + (uint64_t)(o.seconds * 1e9);
    measuring = 1;
    for (unsigned i = 0; i < o.n; i++)
        if (conns[i].st == C_OPEN)
            send_message(&conns[i]);
    signalled = loop(t_end, NULL, sfd);
    /* The window itself, not the loop's last wake-up past it. */
    double secs = signalled ? (double)(now_ns() - tb) / 1e9 : o.seconds;
    measuring = 0;
    unsigned open_end = 0;
    for (unsigned i = 0; i < o.n; i++)
        open_end += conns[i].st == C_OPEN;
    close_all(sfd);
    qsort(lat_us, nlat, sizeof *lat_us, cmp_u32);
    double p50 = nlat ? lat_us[nlat / 2] / 1000.0 : 0;
    double p99 = nlat ? lat_us[(size_t)((double)nlat * 0.99)] / 1000.0 : 0;
    printf("echo clients=%u opened=%u open_at_end=%u size=%zu seconds=%.2f messages=%" PRIu64
           " rate=%.0f p50_ms=%.3f p99_ms=%.3f errors=%" PRIu64 " bad_echoes=%" PRIu64 "\n",
           o.n, opened, open_end, o.size, secs, messages, (double)messages / secs, p50, p99,
           errors, bad_echo);
    if (first_error[0])
        fprintf(stderr, "ws-load: first error: %s\n", first_error);
    return signalled || errors || bad_echo ? 1 : 0;
}
