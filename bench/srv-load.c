/*
 * srv-load: the HTTP/1.1 load generator of the libsrv benchmark, on libevent
 * 2.1 (libevent_core). One thread, one event_base (epoll), raw non-blocking
 * sockets: C clients each run GET requests one after another until N have
 * been started (or --duration is over), and the summary mirrors oha's.
 *
 * Latency of one request: from the start of its connect() (or, on a reused
 * keep-alive connection, from its send) to the read that completes the
 * response (status line, headers, then Content-Length bytes, chunked body or
 * close). Total: from the first connect to the last request's end.
 * Every request is bounded by -t, so a run ends by itself.
 * Only loopback targets are accepted (127.0.0.0/8, ::1, localhost).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept SOCK_NONBLOCK, strcasestr; meson sets it too */
#endif

#include <event2/event.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_BUF_INIT 4096          /* per-connection receive buffer */
#define HEAD_BUF_MAX (64 * 1024)    /* larger response heads are an error */
#define MAX_DETAILS 16              /* distinct "other" error messages kept */
#define FD_RESERVE 32               /* descriptors beyond -c: stdio, epoll, ... */

typedef enum { ERR_REFUSED, ERR_RESET, ERR_TIMEOUT, ERR_OTHER, ERR_KINDS } err_kind;

static const char *const err_names[ERR_KINDS] = {"connect refused", "reset", "timeout", "other"};
static const char *const err_keys[ERR_KINDS] = {"connect_refused", "reset", "timeout", "other"};

typedef enum { PH_IDLE, PH_CONNECTING, PH_SENDING, PH_READING } phase;
typedef enum { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_EOF } body_mode;
typedef enum { CH_SIZE, CH_DATA, CH_DATA_CRLF, CH_TRAILER } chunk_state;

typedef struct options {
    uint64_t n;          /* requests to send; UINT64_MAX with --duration alone */
    unsigned c;          /* concurrent connections */
    double timeout_s;    /* per request */
    double duration_s;   /* 0: none */
    int keepalive;
    int json;
    const char *url;
} options;

typedef struct target {
    char host[256];      /* as written in the URL, for the Host header */
    char path[4096];
    int port;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *request;
    size_t request_len;
} target;

struct load;

typedef struct client {
    struct load *ld;
    int fd;
    phase ph;
    struct event *io;     /* the socket, read or write, persistent */
    short io_what;        /* what io is armed for, 0 when not pending */
    struct event *timer;  /* this request's deadline */
    struct event *kick;   /* starts the next request from the loop */
    uint64_t t_start;     /* ns, this request */
    unsigned served;      /* responses on the current connection */
    int retried;          /* this request was already retried once */
    size_t sent;
    /* response parser */
    char *buf;
    size_t len, cap;
    int head_done;
    int status;
    int close_after;
    body_mode body;
    chunk_state chunk;
    uint64_t remaining;
    uint64_t got;         /* response bytes seen for this request */
} client;

typedef struct detail {
    char msg[96];
    uint64_t count;
} detail;

typedef struct load {
    options opt;
    target tgt;
    struct event_base *base;
    struct timeval req_timeout;   /* a libevent common timeout */
    struct event *deadline;       /* --duration */
    struct event *sigint;
    client *clients;
    unsigned nclients;
    unsigned active;
    int stopping;
    int interrupted;
    uint64_t started;
    uint64_t t_begin, t_end;
    /* results */
    double *lat;                  /* seconds, completed responses */
    uint64_t nlat, caplat;
    uint64_t status[600];
    uint64_t errors[ERR_KINDS];
    detail details[MAX_DETAILS];
    unsigned ndetails;
    uint64_t details_dropped;
    uint64_t bytes;               /* response bytes, heads included */
    uint64_t connections;
    uint64_t retries;
    uint64_t aborted;             /* in flight at SIGINT */
} load;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- usage */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: srv-load -n N -c C [-t TIMEOUT] [--keepalive|--no-keepalive]\n"
            "                [--duration S] [--json] URL\n"
            "Sends GET URL with C connections at once until N requests have been sent\n"
            "(or for S seconds), and prints an oha-style summary.\n"
            "\n"
            "  -n N            requests to send (optional with --duration)\n"
            "  -c C            concurrent connections (at most N are opened)\n"
            "  -t TIMEOUT      seconds allowed per request, connect included (default 30)\n"
            "  --keepalive     reuse connections for the next request (default)\n"
            "  --no-keepalive  one connection per request, sent with 'Connection: close'\n"
            "  --duration S    stop starting requests after S seconds; requests in flight\n"
            "                  then finish (bounded by -t) and are counted\n"
            "  --json          print the summary as one JSON object instead of text\n"
            "  -h, --help      show this help\n"
            "\n"
            "URL is http://HOST[:PORT][/PATH[?QUERY]] and HOST must be this machine\n"
            "(127.0.0.0/8, [::1] or localhost): srv-load is a benchmark client for a\n"
            "local server and refuses other hosts.\n"
            "Exit status: 0 when the run completed (whatever the responses), 1 when it\n"
            "could not run, 2 on bad usage.\n");
}

/* Say what is wrong with the command line and how to fix it; exit 2. */
__attribute__((format(printf, 1, 2), noreturn)) static void bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "srv-load: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'srv-load --help' for usage.\n");
    va_end(ap);
    exit(2);
}

__attribute__((format(printf, 1, 2), noreturn)) static void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "srv-load: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static uint64_t parse_count(const char *flag, const char *text, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    if (text[0] == '-' || text[0] == '\0')
        bad_usage("%s '%s' is not valid: give a whole number from %" PRIu64 " to %" PRIu64, flag,
                  text, min, max);
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        bad_usage("%s '%s' is not valid: give a whole number from %" PRIu64 " to %" PRIu64, flag,
                  text, min, max);
    return (uint64_t)v;
}

static double parse_seconds(const char *flag, const char *text, double max)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v > 0) || v > max)
        bad_usage("%s '%s' is not valid: give seconds, more than 0 and at most %.0f (e.g. %s 2.5)",
                  flag, text, max, flag);
    return v;
}

static void parse_args(int argc, char **argv, options *o)
{
    int have_n = 0, have_c = 0, have_ka = 0;
    *o = (options){.timeout_s = 30, .keepalive = 1};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--keepalive") == 0 || strcmp(a, "--no-keepalive") == 0) {
            int ka = strcmp(a, "--keepalive") == 0;
            if (have_ka && ka != o->keepalive)
                bad_usage("--keepalive and --no-keepalive contradict each other: give one");
            o->keepalive = ka;
            have_ka = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
            continue;
        }
        int takes = strcmp(a, "-n") == 0 || strcmp(a, "-c") == 0 || strcmp(a, "-t") == 0 ||
                    strcmp(a, "--duration") == 0;
        if (takes) {
            if (i + 1 >= argc)
                bad_usage("%s needs a value, e.g. %s %s", a, a,
                          strcmp(a, "-t") == 0                ? "30"
                          : strcmp(a, "--duration") == 0 ? "10"
                                                         : "100");
            const char *v = argv[++i];
            if (strcmp(a, "-n") == 0) {
                o->n = parse_count(a, v, 1, 1000000000);
                have_n = 1;
            } else if (strcmp(a, "-c") == 0) {
                o->c = (unsigned)parse_count(a, v, 1, 1000000);
                have_c = 1;
            } else if (strcmp(a, "-t") == 0) {
                o->timeout_s = parse_seconds(a, v, 3600);
            } else {
                o->duration_s = parse_seconds(a, v, 86400);
            }
            continue;
        }
        if (a[0] == '-' && a[1] != '\0')
            bad_usage("unknown option '%s'", a);
        if (o->url != NULL)
            bad_usage("more than one URL given ('%s' and '%s'): give exactly one", o->url, a);
        o->url = a;
    }
    if (o->url == NULL)
        bad_usage("no URL given: add one, e.g. http://127.0.0.1:8080/greetings");
    if (!have_c)
        bad_usage("-c is missing: give the number of concurrent connections, e.g. -c 100");
    if (!have_n && o->duration_s == 0)
        bad_usage("-n is missing: give the number of requests (e.g. -n 1000) or a --duration");
    if (!have_n)
        o->n = UINT64_MAX;
}

/* ------------------------------------------------------------ the target */

static int is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
            return 1;
        return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127;
    }
    return 0;
}

/* Parse http://HOST[:PORT][/PATH]: numeric address or localhost only. */
static void parse_url(const char *url, const options *o, target *t)
{
    const char *p = url;
    if (strncasecmp(p, "http://", 7) != 0) {
        if (strncasecmp(p, "https://", 8) == 0)
            bad_usage("'%s': https is not supported; srv-load speaks plain HTTP/1.1, use http://",
                      url);
        bad_usage("'%s' is not an http:// URL: write it as http://127.0.0.1:PORT/PATH", url);
    }
    p += 7;
    const char *host_begin = p, *host_end;
    char name[256];
    if (*p == '[') {
        host_end = strchr(p, ']');
        if (host_end == NULL)
            bad_usage("'%s': the IPv6 address has no closing ']', e.g. http://[::1]:8080/", url);
        host_end++;
        if ((size_t)(host_end - host_begin - 2) >= sizeof name)
            bad_usage("'%s': the host is too long", url);
        memcpy(name, host_begin + 1, (size_t)(host_end - host_begin - 2));
        name[host_end - host_begin - 2] = '\0';
        p = host_end;
    } else {
        while (*p && *p != ':' && *p != '/' && *p != '?' && *p != '#')
            p++;
        host_end = p;
        if ((size_t)(host_end - host_begin) >= sizeof name)
            bad_usage("'%s': the host is too long", url);
        memcpy(name, host_begin, (size_t)(host_end - host_begin));
        name[host_end - host_begin] = '\0';
    }
    if (name[0] == '\0')
        bad_usage("'%s' has no host: write it as http://127.0.0.1:PORT/PATH", url);
    t->port = 80;
    if (*p == ':') {
        char digits[8];
        size_t k = 0;
        for (p++; isdigit((unsigned char)*p) && k + 1 < sizeof digits; p++)
            digits[k++] = *p;
        digits[k] = '\0';
        char *end;
        long port = strtol(digits, &end, 10);
        if (k == 0 || (*p && *p != '/' && *p != '?') || port < 1 || port > 65535)
            bad_usage("'%s': the port must be a number from 1 to 65535", url);
        t->port = (int)port;
    } else if (*p && *p != '/' && *p != '?') {
        bad_usage("'%s': unexpected '%c' after the host", url, *p);
    }
    memcpy(t->host, host_begin, (size_t)(host_end - host_begin));
    t->host[host_end - host_begin] = '\0';

    const char *frag = strchr(p, '#');
    size_t plen = frag ? (size_t)(frag - p) : strlen(p);
    if (plen + 2 >= sizeof t->path)
        bad_usage("'%s': the path is longer than %zu bytes", url, sizeof t->path - 2);
    if (plen == 0 || p[0] == '?') {
        t->path[0] = '/';
        memcpy(t->path + 1, p, plen);
        t->path[plen + 1] = '\0';
    } else {
        memcpy(t->path, p, plen);
        t->path[plen] = '\0';
    }
    for (const char *q = t->path; *q; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f)
            bad_usage("'%s': the path has a space or control character; %%-encode it (%%20)", url);

    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai = NULL;
    const char *resolve = strcasecmp(name, "localhost") == 0 ? "127.0.0.1" : name;
    int rc = getaddrinfo(resolve, NULL, &hints, &ai);
    if (rc != 0 || ai == NULL)
        bad_usage("host '%s' is not allowed: srv-load only targets this machine; use 127.0.0.1, "
                  "[::1] or localhost",
                  name);
    memcpy(&t->addr, ai->ai_addr, ai->ai_addrlen);
    t->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    if (!is_loopback(&t->addr))
        bad_usage("host '%s' is not a loopback address: srv-load only targets this machine "
                  "(127.0.0.0/8, ::1, localhost)",
                  name);
    if (t->addr.ss_family == AF_INET)
        ((struct sockaddr_in *)&t->addr)->sin_port = htons((uint16_t)t->port);
    else
        ((struct sockaddr_in6 *)&t->addr)->sin6_port = htons((uint16_t)t->port);

    size_t cap = strlen(t->path) + strlen(t->host) + 128;
    t->request = malloc(cap);
    if (t->request == NULL)
        fatal("out of memory");
    int len = snprintf(t->request, cap,
                       "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: srv-load/1\r\nAccept: */*\r\n"
                       "%s\r\n",
                       t->path, t->host, o->keepalive ? "" : "Connection: close\r\n");
    t->request_len = (size_t)len;
}

/* Raise the soft RLIMIT_NOFILE to what -c needs, or say how to get it. */
static void raise_nofile(unsigned c)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)c + FD_RESERVE;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        fatal("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        fatal("-c %u needs %lu open files but the hard limit is %lu: lower -c, or raise the "
              "limit (ulimit -Hn as root, or nofile in /etc/security/limits.conf)",
              c, (unsigned long)need, (unsigned long)rl.rlim_max);
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        fatal("cannot raise the open-file limit to %lu for -c %u: %s; lower -c or run "
              "'ulimit -n %lu' first",
              (unsigned long)rl.rlim_cur, c, strerror(errno), (unsigned long)need);
}

/* ------------------------------------------------------------- recording */

static void add_detail(load *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add_detail(load *ld, const char *fmt, ...)
{
    char msg[sizeof ld->details[0].msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (unsigned i = 0; i < ld->ndetails; i++)
        if (strcmp(ld->details[i].msg, msg) == 0) {
            ld->details[i].count++;
            return;
        }
    if (ld->ndetails == MAX_DETAILS) {
        ld->details_dropped++;
        return;
    }
    memcpy(ld->details[ld->ndetails].msg, msg, sizeof msg);
    ld->details[ld->ndetails++].count = 1;
}

static void record_ok(load *ld, client *c, uint64_t t_end)
{
    if (ld->nlat == ld->caplat) {
        uint64_t cap = ld->caplat ? ld->caplat * 2 : 1024;
        double *lat = realloc(ld->lat, cap * sizeof *lat);
        if (lat == NULL)
            fatal("out of memory for %" PRIu64 " latencies", cap);
        ld->lat = lat;
        ld->caplat = cap;
    }
    ld->lat[ld->nlat++] = (double)(t_end - c->t_start) / 1e9;
    ld->status[c->status]++;
}

/* ---------------------------------------------------------- the client */

static void client_next(client *c);
static void on_io(evutil_socket_t fd, short what, void *arg);

static void arm(client *c, short what)
{
    if (c->io_what == what)
        return;
    if (c->io_what)
        event_del(c->io);
    event_assign(c->io, c->ld->base, c->fd, what | EV_PERSIST, on_io, c);
    event_add(c->io, NULL);
    c->io_what = what;
}

static void close_conn(client *c)
{
    if (c->io_what) {
        event_del(c->io);
        c->io_what = 0;
    }
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    c->served = 0;
    c->len = 0;
}

static void reset_parser(client *c)
{
    c->len = 0;
    c->head_done = 0;
    c->status = 0;
    c->close_after = !c->ld->opt.keepalive;
    c->body = BODY_NONE;
    c->remaining = 0;
    c->got = 0;
    c->sent = 0;
}

/* The request is over (answered or failed): start the next one from the
 * loop, never recursively, so a refused server cannot grow the stack. */
static void request_done(client *c)
{
    evtimer_del(c->timer);
    c->ph = PH_IDLE;
    event_active(c->kick, EV_TIMEOUT, 0);
}

static void fail(client *c, err_kind kind, const char *what, int err)
{
    load *ld = c->ld;
    ld->errors[kind]++;
    if (kind == ERR_OTHER) {
        if (err)
            add_detail(ld, "%s: %s", what, strerror(err));
        else
            add_detail(ld, "%s", what);
    }
    close_conn(c);
    request_done(c);
}

static err_kind kind_of(int err)
{
    switch (err) {
    case ECONNREFUSED:
        return ERR_REFUSED;
    case ECONNRESET:
    case EPIPE:
        return ERR_RESET;
    case ETIMEDOUT:
        return ERR_TIMEOUT;
    default:
        return ERR_OTHER;
    }
}

static void start_connect(client *c);

/* The connection broke before any byte of the response. On a connection
 * that already served a response this is the keep-alive race (the server
 * closed an idle connection as we reused it): retry once on a new one, like
 * browsers and Go's net/http do; the latency keeps the original start. */
static int retry_if_stale(client *c)
{
    if (c->served == 0 || c->got != 0 || c->retried)
        return 0;
    c->retried = 1;
    c->ld->retries++;
    close_conn(c);
    reset_parser(c);
    start_connect(c);
    return 1;
}

static void do_send(client *c)
{
    const target *t = &c->ld->tgt;
    while (c->sent < t->request_len) {
        ssize_t w = send(c->fd, t->request + c->sent, t->request_len - c->sent, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                arm(c, EV_WRITE);
                return;
            }
            int err = errno;
            if (retry_if_stale(c))
                return;
            fail(c, kind_of(err), "send", err);
            return;
        }
        c->sent += (size_t)w;
    }
    c->ph = PH_READING;
    arm(c, EV_READ);
}

static void start_connect(client *c)
{
    load *ld = c->ld;
    int fd = socket(ld->tgt.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fail(c, ERR_OTHER, "socket", errno);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->served = 0;
    ld->connections++;
    if (connect(fd, (const struct sockaddr *)&ld->tgt.addr, ld->tgt.addrlen) == 0) {
        c->ph = PH_SENDING;
        do_send(c);
        return;
    }
    if (errno != EINPROGRESS) {
        int err = errno;
        fail(c, kind_of(err), "connect", err);
        return;
    }
    /* Send when the loop reports the socket writable, as oha, h2load and hey
     * do: sending the moment connect() returns (the loopback handshake is
     * usually done by then) would start the server's work earlier than the
     * clients we are compared with and make totals lower than theirs. */
    c->ph = PH_CONNECTING;
    arm(c, EV_WRITE);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    client *c = arg;
    c->ld->errors[ERR_TIMEOUT]++;
    close_conn(c);
    c->ph = PH_IDLE;
    event_active(c->kick, EV_TIMEOUT, 0);
}

/* Find "\r\n" in [p, p+n). */
static const char *find_crlf(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return p + i;
    return NULL;
}

static const char *find_head_end(const char *p, size_t n)
{
    for (size_t i = 0; i + 3 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' && p[i + 3] == '\n')
            return p + i;
    return NULL;
}

/* Does the comma-separated header value contain the token? */
static int has_token(const char *v, size_t n, const char *token)
{
    size_t tl = strlen(token);
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, token, tl) == 0)
            return 1;
    }
    return 0;
}

/* Parse the status line and headers in [buf, buf+n). 0, or -1 with *why. */
static int parse_head(client *c, const char *buf, size_t n, const char **why)
{
    const char *eol = find_crlf(buf, n + 2);
    if (n < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)buf[7]) ||
        buf[8] != ' ' || !isdigit((unsigned char)buf[9]) || !isdigit((unsigned char)buf[10]) ||
        !isdigit((unsigned char)buf[11]) || (n > 12 && buf[12] != ' ')) {
        *why = "bad status line";
        return -1;
    }
    int http10 = buf[7] == '0';
    c->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    if (c->status < 100 || c->status > 599) {
        *why = "bad status code";
        return -1;
    }
    int have_len = 0, chunked = 0, conn_close = 0, conn_keep = 0;
    uint64_t clen = 0;
    const char *end = buf + n;
    const char *line = eol + 2;
    while (line < end) {
        const char *le = find_crlf(line, (size_t)(end - line) + 2);
        if (le == NULL || le > end)
            le = end;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (colon == NULL) {
            *why = "bad header line";
            return -1;
        }
        size_t nl = (size_t)(colon - line);
        const char *v = colon + 1;
        while (v < le && (*v == ' ' || *v == '\t'))
            v++;
        size_t vl = (size_t)(le - v);
        if (nl == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
            uint64_t x = 0;
            size_t k = 0;
            for (; k < vl && isdigit((unsigned char)v[k]); k++) {
                if (x > (UINT64_MAX - 9) / 10) {
                    *why = "bad Content-Length";
                    return -1;
                }
                x = x * 10 + (uint64_t)(v[k] - '0');
            }
            while (k < vl && (v[k] == ' ' || v[k] == '\t'))
                k++;
            if (k == 0 || k != vl || (have_len && x != clen)) {
                *why = "bad Content-Length";
                return -1;
            }
            clen = x;
            have_len = 1;
        } else if (nl == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) {
            chunked = has_token(v, vl, "chunked");
        } else if (nl == 10 && strncasecmp(line, "Connection", 10) == 0) {
            conn_close |= has_token(v, vl, "close");
            conn_keep |= has_token(v, vl, "keep-alive");
        }
        line = le + 2;
    }
    if (conn_close || (http10 && !conn_keep))
        c->close_after = 1;
    if ((c->status >= 100 && c->status < 200) || c->status == 204 || c->status == 304) {
        c->body = BODY_NONE;
    } else if (chunked) {
        c->body = BODY_CHUNKED;
        c->chunk = CH_SIZE;
    } else if (have_len) {
        c->body = BODY_LENGTH;
        c->remaining = clen;
    } else {
        c->body = BODY_EOF;
        c->close_after = 1;
    }
    return 0;
}

/* The response is complete. */
static void response_done(client *c)
{
    load *ld = c->ld;
    record_ok(ld, c, now_ns());
    c->served++;
    if (c->close_after || c->len != 0)
        close_conn(c); /* bytes after the response: do not reuse */
    /* else the read event stays armed: client_next sends the next request
     * on this connection at once, or closes it. */
    evtimer_del(c->timer);
    c->ph = PH_IDLE;
    client_next(c);
}

static void consume(client *c, size_t k)
{
    memmove(c->buf, c->buf + k, c->len - k);
    c->len -= k;
}

/* Advance the parser over the buffered bytes. 1: response complete,
 * 0: need more, -1: protocol error (fail() already called). */
static int parse_more(client *c)
{
    for (;;) {
        if (!c->head_done) {
            const char *he = find_head_end(c->buf, c->len);
            if (he == NULL) {
                if (c->len == c->cap && c->cap >= HEAD_BUF_MAX) {
                    fail(c, ERR_OTHER, "response head over 64 KiB", 0);
                    return -1;
                }
                return 0;
            }
            const char *why = NULL;
            size_t hl = (size_t)(he - c->buf);
            if (parse_head(c, c->buf, hl, &why) != 0) {
                fail(c, ERR_OTHER, why, 0);
                return -1;
            }
            consume(c, hl + 4);
            if (c->status < 200) { /* interim response: the real one follows */
                c->close_after = !c->ld->opt.keepalive;
                continue;
            }
            c->head_done = 1;
        }
        switch (c->body) {
        case BODY_NONE:
            return 1;
        case BODY_EOF:
            c->len = 0; /* complete at EOF */
            return 0;
        case BODY_LENGTH: {
            size_t k = c->remaining < c->len ? (size_t)c->remaining : c->len;
            consume(c, k);
            c->remaining -= k;
            return c->remaining == 0 ? 1 : 0;
        }
        case BODY_CHUNKED:
            switch (c->chunk) {
            case CH_SIZE: {
                const char *le = find_crlf(c->buf, c->len);
                if (le == NULL) {
                    if (c->len > 1024) {
                        fail(c, ERR_OTHER, "bad chunk size line", 0);
                        return -1;
                    }
                    return 0;
                }
                uint64_t size = 0;
                const char *p = c->buf;
                int digits = 0;
                for (; p < le && isxdigit((unsigned char)*p); p++, digits++) {
                    if (digits >= 15) {
                        fail(c, ERR_OTHER, "bad chunk size", 0);
                        return -1;
                    }
                    int d = isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10);
                    size = size * 16 + (uint64_t)d;
                }
                if (digits == 0 || (p < le && *p != ';' && *p != ' ' && *p != '\t')) {
                    fail(c, ERR_OTHER, "bad chunk size", 0);
                    return -1;
                }
                consume(c, (size_t)(le - c->buf) + 2);
                c->remaining = size;
                c->chunk = size == 0 ? CH_TRAILER : CH_DATA;
                continue;
            }
            case CH_DATA: {
                size_t k = c->remaining < c->len ? (size_t)c->remaining : c->len;
                consume(c, k);
                c->remaining -= k;
                if (c->remaining != 0)
                    return 0;
                c->chunk = CH_DATA_CRLF;
                continue;
            }
            case CH_DATA_CRLF:
                if (c->len < 2)
                    return 0;
                if (c->buf[0] != '\r' || c->buf[1] != '\n') {
                    fail(c, ERR_OTHER, "chunk not followed by CRLF", 0);
                    return -1;
                }
                consume(c, 2);
                c->chunk = CH_SIZE;
                continue;
            case CH_TRAILER: {
                const char *le = find_crlf(c->buf, c->len);
                if (le == NULL)
                    return 0;
                size_t ll = (size_t)(le - c->buf);
                consume(c, ll + 2);
                if (ll == 0)
                    return 1;
                continue;
            }
            }
        }
        return 0;
    }
}

static void on_readable(client *c)
{
    if (c->buf == NULL) {
        c->buf = malloc(HEAD_BUF_INIT);
        if (c->buf == NULL)
            fatal("out of memory");
        c->cap = HEAD_BUF_INIT;
    } else if (c->len == c->cap && c->cap < HEAD_BUF_MAX) {
        char *nb = realloc(c->buf, c->cap * 2);
        if (nb == NULL)
            fatal("out of memory");
        c->buf = nb;
        c->cap *= 2;
    }
    if (c->len == c->cap) { /* a trailer line over 64 KiB: give up */
        fail(c, ERR_OTHER, "response line over 64 KiB", 0);
        return;
    }
    ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        int err = errno;
        if (retry_if_stale(c))
            return;
        fail(c, kind_of(err), "recv", err);
        return;
    }
    if (r == 0) {
        if (c->head_done && c->body == BODY_EOF) {
            c->close_after = 1;
            response_done(c);
            return;
        }
        if (retry_if_stale(c))
            return;
        fail(c, ERR_OTHER,
             c->got ? "connection closed in the middle of the response"
                    : "connection closed before any response",
             0);
        return;
    }
    c->got += (uint64_t)r;
    c->ld->bytes += (uint64_t)r;
    c->len += (size_t)r;
    if (parse_more(c) == 1)
        response_done(c);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    client *c = arg;
    switch (c->ph) {
    case PH_CONNECTING: {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err != 0) {
            fail(c, kind_of(err), "connect", err);
            return;
        }
        c->ph = PH_SENDING;
        do_send(c);
        return;
    }
    case PH_SENDING:
        if (what & EV_WRITE)
            do_send(c);
        return;
    case PH_READING:
        if (what & EV_READ)
            on_readable(c);
        return;
    case PH_IDLE:
        /* Kept alive between requests: not armed. */
        return;
    }
}

/* Start this client's next request, or retire it. */
static void client_next(client *c)
{
    load *ld = c->ld;
    if (ld->stopping || ld->started >= ld->opt.n) {
        close_conn(c);
        if (--ld->active == 0)
            event_base_loopbreak(ld->base);
        return;
    }
    ld->started++;
    reset_parser(c);
    c->retried = 0;
    c->t_start = now_ns();
    evtimer_add(c->timer, &ld->req_timeout);
    if (c->fd < 0) {
        start_connect(c);
        return;
    }
    c->ph = PH_SENDING;
    do_send(c);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    client_next(arg);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    load *ld = arg;
    ld->stopping = 1; /* requests in flight finish, bounded by -t */
}

/* Ctrl-C: stop now; requests in flight are counted as aborted. */
static void on_sigint(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    load *ld = arg;
    ld->interrupted = 1;
    ld->stopping = 1;
    for (unsigned i = 0; i < ld->nclients; i++) {
        client *c = &ld->clients[i];
        if (c->ph != PH_IDLE)
            ld->aborted++;
        close_conn(c);
    }
    event_base_loopbreak(ld->base);
}

/* ------------------------------------------------------------ reporting */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of the sorted latencies. */
static double percentile(const load *ld, double p)
{
    if (ld->nlat == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)ld->nlat);
    if (rank < 1)
        rank = 1;
    return ld->lat[rank - 1];
}

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static const double pcts[] = {10, 25, 50, 75, 90, 95, 99, 99.9, 99.99};

static void report(load *ld)
{
    const options *o = &ld->opt;
    double total = (double)(ld->t_end - ld->t_begin) / 1e9;
    uint64_t errs = 0;
    for (int k = 0; k < ERR_KINDS; k++)
        errs += ld->errors[k];
    uint64_t attempts = ld->nlat + errs;
    uint64_t ok2xx = 0;
    for (int s = 200; s < 300; s++)
        ok2xx += ld->status[s];
    double sum = 0, slowest = 0, fastest = 0;
    if (ld->nlat) {
        qsort(ld->lat, ld->nlat, sizeof *ld->lat, cmp_double);
        fastest = ld->lat[0];
        slowest = ld->lat[ld->nlat - 1];
        for (uint64_t i = 0; i < ld->nlat; i++)
            sum += ld->lat[i];
    }
    double avg = ld->nlat ? sum / (double)ld->nlat : 0;
    double rate = attempts ? 100.0 * (double)ld->nlat / (double)attempts : 0;
    double rate2xx = attempts ? 100.0 * (double)ok2xx / (double)attempts : 0;
    double rps = total > 0 ? (double)attempts / total : 0;

    if (o->json) {
        FILE *f = stdout;
        fprintf(f, "{\"url\":");
        json_string(f, o->url);
        fprintf(f,
                ",\"requests\":%" PRIu64 ",\"concurrency\":%u,\"keepalive\":%s,"
                "\"timeout_s\":%g,\"duration_s\":%g,\"interrupted\":%s,",
                attempts, ld->nclients, o->keepalive ? "true" : "false", o->timeout_s,
                o->duration_s, ld->interrupted ? "true" : "false");
        fprintf(f,
                "\"success_rate\":%.4f,\"success_2xx_rate\":%.4f,\"responses\":%" PRIu64
                ",\"total_s\":%.6f,\"slowest_s\":%.6f,\"fastest_s\":%.6f,\"average_s\":%.6f,"
                "\"requests_per_sec\":%.4f,\"bytes\":%" PRIu64 ",\"connections\":%" PRIu64
                ",\"retries\":%" PRIu64 ",\"aborted\":%" PRIu64 ",\"percentiles\":{",
                rate, rate2xx, ld->nlat, total, slowest, fastest, avg, rps, ld->bytes,
                ld->connections, ld->retries, ld->aborted);
        for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
            fprintf(f, "%s\"p%g\":%.6f", i ? "," : "", pcts[i], percentile(ld, pcts[i]));
        fprintf(f, "},\"status_codes\":{");
        int first = 1;
        for (int s = 0; s < 600; s++)
            if (ld->status[s]) {
                fprintf(f, "%s\"%d\":%" PRIu64, first ? "" : ",", s, ld->status[s]);
                first = 0;
            }
        fprintf(f, "},\"errors\":{");
        for (int k = 0; k < ERR_KINDS; k++)
            fprintf(f, "%s\"%s\":%" PRIu64, k ? "," : "", err_keys[k], ld->errors[k]);
        fprintf(f, "},\"error_details\":{");
        for (unsigned i = 0; i < ld->ndetails; i++) {
            fprintf(f, "%s", i ? "," : "");
            json_string(f, ld->details[i].msg);
            fprintf(f, ":%" PRIu64, ld->details[i].count);
        }
        fprintf(f, "}}\n");
        return;
    }

    printf("Summary:\n");
    printf("  Success rate:  %.2f%% (2xx: %.2f%%)\n", rate, rate2xx);
    printf("  Total:         %.4f secs\n", total);
    printf("  Slowest:       %.4f secs\n", slowest);
    printf("  Fastest:       %.4f secs\n", fastest);
    printf("  Average:       %.4f secs\n", avg);
    printf("  Requests/sec:  %.4f\n", rps);
    printf("\n");
    printf("  Requests:      %" PRIu64 " (%" PRIu64 " responses, %" PRIu64 " errors%s)\n",
           attempts, ld->nlat, errs, ld->interrupted ? ", interrupted" : "");
    printf("  Concurrency:   %u connections, %s\n", ld->nclients,
           o->keepalive ? "keep-alive" : "no keep-alive");
    printf("  Connections:   %" PRIu64 " opened, %" PRIu64 " keep-alive retries\n",
           ld->connections, ld->retries);
    printf("  Total data:    %" PRIu64 " bytes received\n", ld->bytes);
    if (ld->aborted)
        printf("  Aborted:       %" PRIu64 " in flight at interrupt (not counted)\n", ld->aborted);
    printf("\nResponse time distribution:\n");
    for (size_t i = 0; i < sizeof pcts / sizeof pcts[0]; i++)
        printf("  %6.2f%% in %.4f secs\n", pcts[i], percentile(ld, pcts[i]));
    printf("\nStatus code distribution:\n");
    int any = 0;
    for (int s = 0; s < 600; s++)
        if (ld->status[s]) {
            printf("  [%d] %" PRIu64 " responses\n", s, ld->status[s]);
            any = 1;
        }
    if (!any)
        printf("  (no responses)\n");
    printf("\nError distribution:\n");
    for (int k = 0; k < ERR_KINDS; k++)
        printf("  [%" PRIu64 "] %s\n", ld->errors[k], err_names[k]);
    for (unsigned i = 0; i < ld->ndetails; i++)
        printf("        %" PRIu64 " x other: %s\n", ld->details[i].count, ld->details[i].msg);
    if (ld->details_dropped)
        printf("        %" PRIu64 " x other: (further kinds not listed)\n", ld->details_dropped);
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    static load ld; /* large: keep it off the stack */
    parse_args(argc, argv, &ld.opt);
    parse_url(ld.opt.url, &ld.opt, &ld.tgt);
    ld.nclients = ld.opt.n < ld.opt.c ? (unsigned)ld.opt.n : ld.opt.c;
    raise_nofile(ld.nclients);
    signal(SIGPIPE, SIG_IGN);

    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        fatal("out of memory");
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK); /* one thread */
    ld.base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (ld.base == NULL)
        fatal("cannot create the libevent base");

    struct timeval tv = {.tv_sec = (time_t)ld.opt.timeout_s,
                         .tv_usec = (suseconds_t)((ld.opt.timeout_s - floor(ld.opt.timeout_s)) *
                                                  1e6)};
    const struct timeval *common = event_base_init_common_timeout(ld.base, &tv);
    ld.req_timeout = common ? *common : tv;

    ld.clients = calloc(ld.nclients, sizeof *ld.clients);
    if (ld.clients == NULL)
        fatal("out of memory for %u clients", ld.nclients);
    for (unsigned i = 0; i < ld.nclients; i++) {
        client *c = &ld.clients[i];
        c->ld = &ld;
        c->fd = -1;
        c->io = event_new(ld.base, -1, 0, on_io, c);
        c->timer = evtimer_new(ld.base, on_timeout, c);
        c->kick = event_new(ld.base, -1, 0, on_kick, c);
        if (c->io == NULL || c->timer == NULL || c->kick == NULL)
            fatal("out of memory for %u clients", ld.nclients);
    }
    ld.sigint = evsignal_new(ld.base, SIGINT, on_sigint, &ld);
    if (ld.sigint)
        event_add(ld.sigint, NULL);
    if (ld.opt.duration_s > 0) {
        struct timeval dv = {
            .tv_sec = (time_t)ld.opt.duration_s,
            .tv_usec = (suseconds_t)((ld.opt.duration_s - floor(ld.opt.duration_s)) * 1e6)};
        ld.deadline = evtimer_new(ld.base, on_deadline, &ld);
        if (ld.deadline == NULL)
            fatal("out of memory");
        evtimer_add(ld.deadline, &dv);
    }

    ld.active = ld.nclients;
    ld.t_begin = now_ns();
    for (unsigned i = 0; i < ld.nclients; i++)
        client_next(&ld.clients[i]);
    if (ld.active > 0)
        event_base_dispatch(ld.base);
    ld.t_end = now_ns();

    report(&ld);

    for (unsigned i = 0; i < ld.nclients; i++) {
        client *c = &ld.clients[i];
        close_conn(c);
        event_free(c->io);
        event_free(c->timer);
        event_free(c->kick);
        free(c->buf);
    }
    if (ld.deadline)
        event_free(ld.deadline);
    if (ld.sigint)
        event_free(ld.sigint);
    free(ld.clients);
    free(ld.lat);
    free(ld.tgt.request);
    event_base_free(ld.base);
    return 0;
}
