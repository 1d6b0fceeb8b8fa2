/*
 * srv-stress: attack and soak scenarios against examples/greetings, one
 * fresh greetings process per engine and scenario, on 127.0.0.1 only, each
 * bounded in time (`make stress`; docs/RELIABILITY.md). Every scenario
 * prints its figures and PASS or FAIL against the bound it states:
 *
 *   idle        N connections that send nothing (default 5000)
 *   slow-head   N slowloris clients: a request head, one byte a second
 *   slow-body   N clients sending a body one byte a second (half chunked)
 *   rapid-reset HTTP/2 HEADERS + RST_STREAM floods (HTTP/2 engines only,
 *               by capability bit)
 *   no-read     clients that pipeline requests and never read the answers
 *   killed      clients that reset the connection while their request runs
 *   stop        graceful stop under c = 900: every request 200 or 503
 *   stop-h2     the same over HTTP/2 (h2c, prior knowledge; HTTP/2 engines
 *               only): 900 streams on 90 connections
 *   soak        steady load for --soak-seconds, RSS sampled, flat after
 *               warm-up
 *
 * During each attack a probe sends GET /health on a new connection every
 * 200 ms and times the answer; the attacks pass only if every probe gets
 * 200 within --probe-bound-ms (1000). greetings runs with its defaults
 * (200 workers, 20 s header and keep-alive timeouts) unless said.
 */
#include "srv_engine.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- options ---------------------------------------------------------- */

static struct {
    const char *build_dir;
    const char *engines;   /* comma list, NULL = every engine built in */
    const char *only;      /* comma list of scenarios, NULL = all */
    unsigned idle;         /* idle connections */
    unsigned slow;         /* slowloris clients (head, body) */
    unsigned attack_s;     /* how long each attack is held */
    unsigned slow_s;       /* how long slow clients drip (and may be cut) */
    unsigned noread_s;     /* how long never-reading clients may be held */
    unsigned stop_c;       /* clients during the graceful stop */
    unsigned soak_s;       /* soak length per engine */
    unsigned soak_c;       /* soak clients */
    unsigned soak_rate;    /* soak requests per second, all clients */
    unsigned probe_bound;  /* ms */
} opt = {
    .build_dir = "build",
    .idle = 5000,
    .slow = 1000,
    .attack_s = 15,
    .slow_s = 30,
    .noread_s = 45,
    .stop_c = 900,
    .soak_s = 600,
    .soak_c = 32,
    .soak_rate = 1000,
    .probe_bound = 1000,
};

/* ---- small helpers ------------------------------------------------------ */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static double now_msf(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

static bool in_list(const char *list, const char *name)
{
    if (list == NULL)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (c ? 1 : 0);
    }
    return false;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)ceil(p / 100.0 * (double)n);
    return v[i == 0 ? 0 : i - 1];
}

/* ---- results ----------------------------------------------------------- */

#define MAX_RESULTS 64
static struct {
    char engine[16];
    char scenario[16];
    bool pass;
    char figures[512];
} results[MAX_RESULTS];
static size_t nresults;

static void result(const char *engine, const char *scenario, bool pass, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void result(const char *engine, const char *scenario, bool pass, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("[%s] %-11s %s  %s\n", engine, scenario, pass ? "PASS" : "FAIL", buf);
    fflush(stdout);
    if (nresults < MAX_RESULTS) {
        snprintf(results[nresults].engine, sizeof results[nresults].engine, "%s", engine);
        snprintf(results[nresults].scenario, sizeof results[nresults].scenario, "%s", scenario);
        results[nresults].pass = pass;
        snprintf(results[nresults].figures, sizeof results[nresults].figures, "%s", buf);
        nresults++;
    }
}

/* ---- the server process ------------------------------------------------ */

typedef struct server {
    pid_t pid;
    int port;
    char log[512];
} server;

/* Start greetings on `engine` with extra arguments; fills s->port from its
 * first line on stdout. */
static int server_start(server *s, const char *engine, const char *scenario,
                        const char *const *extra)
{
    char bin[512];
    snprintf(bin, sizeof bin, "%s/examples/greetings/greetings", opt.build_dir);
    char logdir[512];
    snprintf(logdir, sizeof logdir, "%.400s/stress-logs", opt.build_dir);
    mkdir(logdir, 0755);
    snprintf(s->log, sizeof s->log, "%.440s/%.30s-%.30s.log", logdir, engine, scenario);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return -1;
    const char *argv[32];
    size_t n = 0;
    argv[n++] = bin;
    argv[n++] = "--engine";
    argv[n++] = engine;
    argv[n++] = "--host";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (size_t i = 0; extra && extra[i] && n < 30; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(out[1], 1);
        int log = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (log >= 0)
            dup2(log, 2);
        execv(bin, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    s->pid = pid;
    s->port = 0;
    char line[512];
    size_t len = 0;
    uint64_t end = now_ms() + 15000;
    while (len < sizeof line - 1 && now_ms() < end) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t r = read(out[0], line + len, sizeof line - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        line[len] = '\0';
        if (strchr(line, '\n'))
            break;
    }
    close(out[0]);
    line[len] = '\0';
    const char *p = strstr(line, "127.0.0.1:");
    if (p != NULL)
        s->port = atoi(p + strlen("127.0.0.1:"));
    if (s->port <= 0) {
        fprintf(stderr, "srv-stress: greetings (%s) did not start: \"%s\" (log %s)\n", engine,
                line, s->log);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return 0;
}

/* Non-zero while the server process is alive. */
static bool server_alive(const server *s)
{
    int st;
    return waitpid(s->pid, &st, WNOHANG) == 0;
}

/* SIGTERM, wait up to `ms`, then SIGKILL. Writes how it ended into buf;
 * true when it exited 0 by itself. */
static bool server_stop(server *s, unsigned ms, char *buf, size_t cap)
{
    kill(s->pid, SIGTERM);
    uint64_t end = now_ms() + ms;
    int st = 0;
    pid_t r = 0;
    while ((r = waitpid(s->pid, &st, WNOHANG)) == 0 && now_ms() < end)
        sleep_ms(20);
    if (r == 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
        snprintf(buf, cap, "did not exit %u ms after SIGTERM (killed)", ms);
        return false;
    }
    if (r < 0) {
        snprintf(buf, cap, "already gone");
        return false;
    }
    if (WIFSIGNALED(st)) {
        snprintf(buf, cap, "died of signal %d (log %.150s)", WTERMSIG(st), s->log);
        return false;
    }
    snprintf(buf, cap, "exit %d", WEXITSTATUS(st));
    return WEXITSTATUS(st) == 0;
}

static long proc_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    fclose(f);
    return kb;
}

static int proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* ---- sockets ------------------------------------------------------------- */

static struct sockaddr_in server_addr(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* A non-blocking socket with connect() started (-1 on failure); a receive
 * buffer of rcvbuf bytes when not 0 (set before connect, so the window is
 * small from the start). */
static int connect_start_buf(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = server_addr(port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static int connect_start(int port)
{
    return connect_start_buf(port, 0);
}

/* Connect within ms; 0, or -errno (ECONNREFUSED, ETIMEDOUT...). */
static int connect_wait(int fd, unsigned ms)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int r = poll(&p, 1, (int)ms);
    if (r == 0)
        return -ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    return -err;
}

static bool send_all(int fd, const void *buf, size_t n, unsigned ms)
{
    const char *p = buf;
    uint64_t end = now_ms() + ms;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        uint64_t now = now_ms();
        if (now >= end)
            return false;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, (int)(end - now));
    }
    return true;
}

/* Read one HTTP/1.x response (head + Content-Length body) from fd within
 * ms. Returns the status, 0 when the connection ended before any byte, -1
 * on a truncated or unparsable answer or a timeout. *conn_close tells
 * whether the server said "Connection: close". */
/* Whether the last read_response on this thread ended in a reset (RST)
 * rather than an orderly close (FIN). */
static _Thread_local bool last_reset;
/* The first bytes of the last answer read on this thread, printable. */
static _Thread_local char last_bytes[64];

static void keep_bytes(const char *b, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < sizeof last_bytes; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c == '\r' || c == '\n') {
            last_bytes[o++] = '\\';
            last_bytes[o++] = c == '\r' ? 'r' : 'n';
        } else {
            last_bytes[o++] = c >= 0x20 && c < 0x7f ? (char)c : '.';
        }
    }
    last_bytes[o] = '\0';
}

static int read_response_to(int fd, unsigned ms, bool head, bool *conn_close,
                            size_t *got_bytes)
{
    last_reset = false;
    last_bytes[0] = '\0';
    char buf[8192];
    size_t len = 0;
    uint64_t end = now_ms() + ms;
    *conn_close = false;
    *got_bytes = 0;
    for (;;) {
        buf[len] = '\0';
        keep_bytes(buf, len);
        char *eoh = strstr(buf, "\r\n\r\n");
        if (eoh != NULL) {
            int status = 0;
            if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
                return -1;
            size_t clen = 0;
            for (char *l = strstr(buf, "\r\n"); l && l < eoh; l = strstr(l + 2, "\r\n")) {
                if (strncasecmp(l + 2, "Content-Length:", 15) == 0)
                    clen = (size_t)strtoul(l + 17, NULL, 10);
                if (strncasecmp(l + 2, "Connection:", 11) == 0 && strcasestr(l + 13, "close") &&
                    strcasestr(l + 13, "close") < strstr(l + 2, "\r\n"))
                    *conn_close = true;
            }
            /* The answer to HEAD has a Content-Length but no body. */
            size_t need = (size_t)(eoh + 4 - buf) + (head ? 0 : clen);
            if (len >= need)
                return status;
            if (need > sizeof buf - 1)
                return -1;
        }
        if (len >= sizeof buf - 1)
            return -1;
        uint64_t now = now_ms();
        if (now >= end)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)(end - now)) <= 0)
            return -1;
        ssize_t r = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (r <= 0) {
            last_reset = r < 0 && errno == ECONNRESET;
            return len == 0 ? 0 : -1;
        }
        len += (size_t)r;
        *got_bytes = len;
    }
}

static int read_response(int fd, unsigned ms, bool *conn_close, size_t *got_bytes)
{
    return read_response_to(fd, ms, false, conn_close, got_bytes);
}

/* ---- the /health probe ----------------------------------------------------- */

#define MAX_PROBES 20000
typedef struct probe {
    int port;
    pid_t pid;
    atomic_bool stop;
    pthread_t thread;
    double lat[MAX_PROBES];
    size_t n, ok;
    long rss_max_kb;
    char first_fail[128];
} probe;

static void *probe_main(void *arg)
{
    probe *pr = arg;
    static const char req[] = "GET /health HTTP/1.1\r\nHost: stress\r\nConnection: close\r\n\r\n";
    while (!atomic_load(&pr->stop) && pr->n < MAX_PROBES) {
        double t0 = now_msf();
        int fd = connect_start(pr->port);
        int status = -1;
        const char *why = "connect";
        if (fd >= 0) {
            int c = connect_wait(fd, 5000);
            if (c == 0) {
                bool cc;
                size_t got;
                why = "send";
                if (send_all(fd, req, sizeof req - 1, 5000)) {
                    double left = 5000 - (now_msf() - t0);
                    status = read_response(fd, left > 0 ? (unsigned)left : 1, &cc, &got);
                    why = status == 0 ? "closed without answer" : "no answer within 5 s";
                }
            } else {
                why = c == -ETIMEDOUT ? "connect timeout (5 s)" : strerror(-c);
            }
            close(fd);
        }
        double ms = now_msf() - t0;
        pr->lat[pr->n++] = ms;
        if (status == 200)
            pr->ok++;
        else if (pr->first_fail[0] == '\0')
            snprintf(pr->first_fail, sizeof pr->first_fail, "%s%s%d after %.0f ms",
                     status > 0 ? "status " : why, status > 0 ? "" : ", status ",
                     status, ms);
        long rss = proc_rss_kb(pr->pid);
        if (rss > pr->rss_max_kb)
            pr->rss_max_kb = rss;
        if (ms < 200)
            sleep_ms((unsigned)(200 - ms));
    }
    return NULL;
}

static void probe_start(probe *pr, const server *s)
{
    memset(pr, 0, sizeof *pr);
    pr->port = s->port;
    pr->pid = s->pid;
    atomic_init(&pr->stop, false);
    pthread_create(&pr->thread, NULL, probe_main, pr);
}

/* Stop the probe; describe it into buf; true when every probe got 200
 * within the bound. */
static bool probe_finish(probe *pr, char *buf, size_t cap)
{
    atomic_store(&pr->stop, true);
    pthread_join(pr->thread, NULL);
    double mx = 0;
    for (size_t i = 0; i < pr->n; i++)
        if (pr->lat[i] > mx)
            mx = pr->lat[i];
    double p50 = pct(pr->lat, pr->n, 50), p99 = pct(pr->lat, pr->n, 99);
    bool pass = pr->n > 0 && pr->ok == pr->n && mx <= opt.probe_bound;
    snprintf(buf, cap, "/health %zu/%zu ok, p50 %.1f p99 %.1f max %.1f ms%s%s", pr->ok, pr->n,
             p50, p99, mx, pr->first_fail[0] ? "; first failure: " : "", pr->first_fail);
    return pass;
}

/* ---- mass connections (one thread, poll) ----------------------------------- */

/* Open n connections; returns how many completed within 15 s (fds[i] is
 * -1 for the others). */
static unsigned mass_connect_buf(int port, int *fds, unsigned n, int rcvbuf)
{
    unsigned ok = 0;
    for (unsigned i = 0; i < n; i++) {
        fds[i] = connect_start_buf(port, rcvbuf);
        if (i % 200 == 199)
            sleep_ms(5); /* let the accept loop keep up */
    }
    uint64_t end = now_ms() + 15000;
    struct pollfd *p = calloc(n, sizeof *p);
    bool *done = calloc(n, sizeof *done);
    for (;;) {
        unsigned waiting = 0;
        for (unsigned i = 0; i < n; i++) {
            p[i].fd = (fds[i] >= 0 && !done[i]) ? fds[i] : -1;
            p[i].events = POLLOUT;
            p[i].revents = 0;
            waiting += p[i].fd >= 0;
        }
        if (waiting == 0 || now_ms() >= end)
            break;
        poll(p, n, 100);
        for (unsigned i = 0; i < n; i++) {
            if (p[i].fd < 0 || !p[i].revents)
                continue;
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
            done[i] = true;
            if (err != 0) {
                close(fds[i]);
                fds[i] = -1;
            } else {
                ok++;
            }
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (fds[i] >= 0 && !done[i]) {
            close(fds[i]);
            fds[i] = -1;
        }
    free(p);
    free(done);
    return ok;
}

static unsigned mass_connect(int port, int *fds, unsigned n)
{
    return mass_connect_buf(port, fds, n, 0);
}

/* How many of the connections the server has closed (FIN or RST seen). */
static unsigned count_server_closed(const int *fds, unsigned n)
{
    unsigned closed = 0;
    for (unsigned i = 0; i < n; i++) {
        if (fds[i] < 0)
            continue;
        struct tcp_info ti;
        socklen_t len = sizeof ti;
        if (getsockopt(fds[i], IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
            ti.tcpi_state != TCP_ESTABLISHED)
            closed++;
    }
    return closed;
}

static void close_all(int *fds, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
}

/* ---- scenarios ------------------------------------------------------------- */

typedef struct engine_info {
    const char *name;
    unsigned caps;
} engine_info;

static void finish_server(server *s, const char *engine, const char *scenario, bool *pass,
                          char *extra, size_t cap)
{
    char how[256];
    if (!server_stop(s, 30000, how, sizeof how)) {
        *pass = false;
        snprintf(extra, cap, "; server: %s", how);
    } else {
        extra[0] = '\0';
    }
    (void)engine;
    (void)scenario;
}

/* Idle connections: open them, hold them while probing, report. */
static void sc_idle(const engine_info *e)
{
    server s;
    if (server_start(&s, e->name, "idle", NULL) != 0) {
        result(e->name, "idle", false, "greetings did not start");
        return;
    }
    long rss0 = proc_rss_kb(s.pid);
    int *fds = calloc(opt.idle, sizeof *fds);
    probe pr;
    probe_start(&pr, &s);
    double t0 = now_msf();
    unsigned open = mass_connect(s.port, fds, opt.idle);
    double tconn = now_msf() - t0;
    sleep_ms(opt.attack_s * 1000);
    unsigned cut = count_server_closed(fds, opt.idle);
    char pf[256];
    bool pass = probe_finish(&pr, pf, sizeof pf);
    close_all(fds, opt.idle);
    free(fds);
    pass = pass && open == opt.idle;
    char extra[300];
    finish_server(&s, e->name, "idle", &pass, extra, sizeof extra);
    result(e->name, "idle", pass,
           "%u/%u idle connections open (%.0f ms), held %u s, %u closed by the server; %s; "
           "RSS %.1f -> max %.1f MB%s",
           open, opt.idle, tconn, opt.attack_s, cut, pf, rss0 / 1024.0, pr.rss_max_kb / 1024.0,
           extra);
}

/* Slow clients: a head (slow-head) or a body (slow-body) one byte a second. */
static void sc_slow(const engine_info *e, bool body)
{
    const char *name = body ? "slow-body" : "slow-head";
    server s;
    if (server_start(&s, e->name, name, NULL) != 0) {
        result(e->name, name, false, "greetings did not start");
        return;
    }
    long rss0 = proc_rss_kb(s.pid);
    unsigned n = opt.slow;
    int *fds = calloc(n, sizeof *fds);
    probe pr;
    probe_start(&pr, &s);
    unsigned open = mass_connect(s.port, fds, n);
    /* The head goes out at once for slow-body (then one body byte a
     * second); slow-head sends its request line, then one byte a second. */
    static const char head_cl[] =
        "POST /greetings HTTP/1.1\r\nHost: stress\r\nContent-Length: 100000\r\n\r\n";
    static const char head_te[] =
        "POST /greetings HTTP/1.1\r\nHost: stress\r\nTransfer-Encoding: chunked\r\n\r\n";
    static const char line[] = "GET /greetings HTTP/1.1\r\nHost: stress\r\n";
    static const char drip[] = "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    for (unsigned i = 0; i < n; i++) {
        if (fds[i] < 0)
            continue;
        const char *h = body ? (i % 2 ? head_te : head_cl) : line;
        send(fds[i], h, strlen(h), MSG_NOSIGNAL);
    }
    unsigned ticks = 0;
    uint64_t end = now_ms() + opt.slow_s * 1000u;
    while (now_ms() < end) {
        sleep_ms(1000);
        ticks++;
        for (unsigned i = 0; i < n; i++) {
            if (fds[i] < 0)
                continue;
            char c;
            size_t len = 1;
            const char *p = &c;
            if (body && i % 2) {
                p = "1\r\na\r\n"; /* one chunk of one byte */
                len = 6;
            } else if (body) {
                c = 'a';
            } else {
                c = drip[(ticks - 1) % (sizeof drip - 1)];
            }
            (void)send(fds[i], p, len, MSG_NOSIGNAL | MSG_DONTWAIT); /* a closed one fails */
        }
    }
    unsigned cut = count_server_closed(fds, n);
    char pf[256];
    bool pass = probe_finish(&pr, pf, sizeof pf);
    close_all(fds, n);
    free(fds);
    /* A head or body that takes longer than the server's deadline (20 s
     * header timeout in greetings) must be cut, not kept forever. */
    pass = pass && open == n && cut == open;
    char extra[300];
    finish_server(&s, e->name, name, &pass, extra, sizeof extra);
    result(e->name, name, pass,
           "%u/%u slow clients (%s), one write a second for %u s, %u closed by the server "
           "(bound: all, the header timeout is 20 s); %s; RSS %.1f -> max %.1f MB%s",
           open, n, body ? "half Content-Length, half chunked" : "head", opt.slow_s, cut, pf,
           rss0 / 1024.0, pr.rss_max_kb / 1024.0, extra);
}

/* HTTP/2 frames, built by hand. */
static size_t h2_frame(unsigned char *out, unsigned type, unsigned flags, uint32_t sid,
                       const void *payload, size_t len)
{
    out[0] = (unsigned char)(len >> 16);
    out[1] = (unsigned char)(len >> 8);
    out[2] = (unsigned char)len;
    out[3] = (unsigned char)type;
    out[4] = (unsigned char)flags;
    out[5] = (unsigned char)(sid >> 24);
    out[6] = (unsigned char)(sid >> 16);
    out[7] = (unsigned char)(sid >> 8);
    out[8] = (unsigned char)sid;
    memcpy(out + 9, payload, len);
    return 9 + len;
}

/* Rapid reset: per connection, the preface then `pairs` HEADERS (GET
 * /greetings, a 1 s blocking handler) each followed by RST_STREAM(CANCEL),
 * written as fast as the server takes them; the answers are drained. */
static void sc_rapid_reset(const engine_info *e)
{
    const char *name = "rapid-reset";
    if (!(e->caps & SRV_ENGINE_CAP_HTTP2)) {
        printf("[%s] %-11s skip  (no SRV_ENGINE_CAP_HTTP2: the engine serves no HTTP/2)\n",
               e->name, name);
        return;
    }
    server s;
    if (server_start(&s, e->name, name, NULL) != 0) {
        result(e->name, name, false, "greetings did not start");
        return;
    }
    long rss0 = proc_rss_kb(s.pid);
    enum { CONNS = 4, PAIRS = 5000 };
    static const unsigned char hpack[] = {0x82, 0x86, 0x04, 10, '/', 'g', 'r', 'e', 'e', 't',
                                          'i', 'n', 'g', 's', 0x01, 6, 's', 't', 'r', 'e', 's',
                                          's'};
    size_t pair_len = 9 + sizeof hpack + 9 + 4;
    size_t cap = 24 + 9 + PAIRS * pair_len;
    unsigned char *buf = malloc(cap);
    size_t len = 0;
    memcpy(buf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    len = 24;
    len += h2_frame(buf + len, 4, 0, 0, "", 0); /* SETTINGS */
    for (uint32_t i = 0; i < PAIRS; i++) {
        uint32_t sid = 1 + 2 * i;
        static const unsigned char cancel[4] = {0, 0, 0, 8};
        len += h2_frame(buf + len, 1, 0x05, sid, hpack, sizeof hpack);
        len += h2_frame(buf + len, 3, 0, sid, cancel, 4);
    }
    probe pr;
    probe_start(&pr, &s);
    int fds[CONNS];
    size_t off[CONNS] = {0};
    size_t rx[CONNS] = {0};
    bool goaway[CONNS] = {false}, dead[CONNS] = {false};
    unsigned open = mass_connect(s.port, fds, CONNS);
    uint64_t t0 = now_ms(), end = t0 + opt.attack_s * 1000u;
    unsigned long long written = 0;
    while (now_ms() < end) {
        struct pollfd p[CONNS];
        for (int i = 0; i < CONNS; i++) {
            p[i].fd = (fds[i] >= 0 && !dead[i]) ? fds[i] : -1;
            p[i].events = POLLIN | (off[i] < len ? POLLOUT : 0);
            p[i].revents = 0;
        }
        poll(p, CONNS, 100);
        for (int i = 0; i < CONNS; i++) {
            if (p[i].fd < 0)
                continue;
            if (p[i].revents & POLLOUT) {
                ssize_t w = send(fds[i], buf + off[i], len - off[i], MSG_NOSIGNAL);
                if (w > 0) {
                    off[i] += (size_t)w;
                    written += (size_t)w;
                } else if (w < 0 && errno != EAGAIN) {
                    dead[i] = true;
                }
            }
            if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                unsigned char r[16384];
                ssize_t n = recv(fds[i], r, sizeof r, 0);
                if (n <= 0) {
                    dead[i] = true;
                    continue;
                }
                /* A GOAWAY (type 7) at a frame boundary is all we look
                 * for; a crude scan is enough to report it. */
                for (ssize_t k = 0; k + 9 <= n; k++)
                    if (r[k + 3] == 7 && r[k + 4] == 0 && r[k] == 0 && r[k + 5] == 0 &&
                        r[k + 6] == 0 && r[k + 7] == 0 && r[k + 8] == 0 && r[k + 2] >= 8)
                        goaway[i] = true;
                rx[i] += (size_t)n;
            }
        }
    }
    unsigned ngoaway = 0, ndead = 0;
    size_t rxt = 0, sent_pairs = 0;
    for (int i = 0; i < CONNS; i++) {
        ngoaway += goaway[i];
        ndead += dead[i];
        rxt += rx[i];
        sent_pairs += off[i] > 33 ? (off[i] - 33) / pair_len : 0;
    }
    char pf[256];
    bool pass = probe_finish(&pr, pf, sizeof pf);
    close_all(fds, CONNS);
    free(buf);
    pass = pass && open == CONNS;
    char extra[300];
    finish_server(&s, e->name, name, &pass, extra, sizeof extra);
    result(e->name, name, pass,
           "%u conns wrote %zu HEADERS+RST_STREAM pairs (%.1f MB) in %u s, GOAWAY on %u, closed "
           "by server %u, %zu bytes back; %s; RSS %.1f -> max %.1f MB%s",
           open, sent_pairs, written / 1048576.0, opt.attack_s, ngoaway, ndead, rxt, pf,
           rss0 / 1024.0, pr.rss_max_kb / 1024.0, extra);
}

/* Clients that pipeline requests and never read (an 8 KB receive buffer,
 * so the server's writes back up): the server must cut them (a send
 * timeout) and keep serving. Each answer is about as large as its request
 * (a 2000-byte name), so the pipeline outgrows the server's socket buffer
 * (4 MB at most on Linux) after a few MB. */
static void sc_no_read(const engine_info *e)
{
    const char *name = "no-read";
    server s;
    const char *args[] = {"--sleep-ms", "0", NULL};
    if (server_start(&s, e->name, name, args) != 0) {
        result(e->name, name, false, "greetings did not start");
        return;
    }
    long rss0 = proc_rss_kb(s.pid);
    int fd0 = proc_fds(s.pid);
    enum { N = 50, PER_CONN = 6 << 20 };
    int fds[N];
    probe pr;
    probe_start(&pr, &s);
    unsigned open = mass_connect_buf(s.port, fds, N, 8192);
    char req[2200];
    char nm[2001];
    memset(nm, 'n', 2000);
    nm[2000] = '\0';
    int rl = snprintf(req, sizeof req, "GET /greetings?name=%s HTTP/1.1\r\nHost: stress\r\n\r\n", nm);
    enum { K = 16 };
    char *chunk = malloc((size_t)rl * K);
    for (size_t i = 0; i < K; i++)
        memcpy(chunk + i * (size_t)rl, req, (size_t)rl);
    /* Write until every connection's buffers are full (the server stopped
     * reading because its answers back up) or PER_CONN bytes each. */
    size_t sent[N] = {0};
    uint64_t t0 = now_ms(), fill_end = t0 + 5000;
    while (now_ms() < fill_end) {
        bool any = false;
        for (int i = 0; i < N; i++) {
            if (fds[i] < 0 || sent[i] >= PER_CONN)
                continue;
            ssize_t w = send(fds[i], chunk, (size_t)rl * K, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                sent[i] += (size_t)w;
                any = true;
            }
        }
        if (!any)
            sleep_ms(50);
    }
    free(chunk);
    size_t total = 0;
    for (int i = 0; i < N; i++)
        total += sent[i];
    /* Then wait for the server to cut them all, up to noread_s. */
    unsigned cut = 0;
    uint64_t cut_at = 0;
    uint64_t end = t0 + opt.noread_s * 1000u;
    while (now_ms() < end) {
        /* Cut: the client saw FIN or RST, or the server let go of the
         * socket (a FIN queued behind megabytes of unsent answers never
         * reaches a client that does not read, so count the server's
         * descriptors too; the probe may hold one). */
        int held = proc_fds(s.pid) - fd0;
        unsigned by_fd = held <= 1 ? open : (unsigned)held - 1 < open ? open - ((unsigned)held - 1) : 0;
        cut = count_server_closed(fds, N);
        if (by_fd > cut)
            cut = by_fd;
        if (cut == open) {
            cut_at = now_ms();
            break;
        }
        sleep_ms(250);
    }
    long rss_end = proc_rss_kb(s.pid);
    char pf[256];
    bool pass = probe_finish(&pr, pf, sizeof pf);
    pass = pass && open == N && cut == open;
    close_all(fds, N);
    char extra[300];
    finish_server(&s, e->name, name, &pass, extra, sizeof extra);
    char when[64];
    if (cut_at)
        snprintf(when, sizeof when, "all cut %.1f s after the first write",
                 (cut_at - t0) / 1000.0);
    else
        snprintf(when, sizeof when, "%u/%u cut after %u s", cut, open, opt.noread_s);
    result(e->name, name, pass,
           "%u conns pipelined %.1f MB of GETs and never read; %s (bound: all within %u s); %s; "
           "RSS %.1f -> max %.1f MB, %.1f MB at the end%s",
           open, total / 1048576.0, when, opt.noread_s, pf, rss0 / 1024.0,
           pr.rss_max_kb / 1024.0, rss_end / 1024.0, extra);
}

/* Clients killed mid-response: request a 200 ms greeting and reset the
 * connection (SO_LINGER 0) before or while it is answered. Afterwards every
 * normal request must work and the server's descriptors come back down. */
typedef struct kill_ctx {
    int port;
    atomic_uint next;
    unsigned total;
    atomic_uint errors;
} kill_ctx;

static void *killer_main(void *arg)
{
    kill_ctx *k = arg;
    static const char req[] = "GET /greetings?name=gone HTTP/1.1\r\nHost: stress\r\n\r\n";
    unsigned i;
    while ((i = atomic_fetch_add(&k->next, 1)) < k->total) {
        int fd = connect_start(k->port);
        if (fd < 0 || connect_wait(fd, 5000) != 0) {
            atomic_fetch_add(&k->errors, 1);
            if (fd >= 0)
                close(fd);
            continue;
        }
        send_all(fd, req, sizeof req - 1, 2000);
        sleep_ms((i * 37) % 300); /* before, during or just after the answer */
        if (i % 3 == 0) {         /* some read a few bytes first */
            char b[8];
            recv(fd, b, sizeof b, MSG_DONTWAIT);
        }
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd);
    }
    return NULL;
}

static unsigned normal_requests(int port, unsigned n, unsigned *ok)
{
    static const char req[] = "GET /health HTTP/1.1\r\nHost: stress\r\nConnection: close\r\n\r\n";
    *ok = 0;
    for (unsigned i = 0; i < n; i++) {
        int fd = connect_start(port);
        if (fd < 0)
            continue;
        if (connect_wait(fd, 5000) == 0 && send_all(fd, req, sizeof req - 1, 5000)) {
            bool cc;
            size_t got;
            if (read_response(fd, 5000, &cc, &got) == 200)
                (*ok)++;
        }
        close(fd);
    }
    return n;
}

static void sc_killed(const engine_info *e)
{
    const char *name = "killed";
    server s;
    const char *args[] = {"--sleep-ms", "200", NULL};
    if (server_start(&s, e->name, name, args) != 0) {
        result(e->name, name, false, "greetings did not start");
        return;
    }
    int fd0 = proc_fds(s.pid);
    kill_ctx k = {.port = s.port, .total = 3000};
    atomic_init(&k.next, 0);
    atomic_init(&k.errors, 0);
    probe pr;
    probe_start(&pr, &s);
    enum { T = 100 };
    pthread_t th[T];
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 128 * 1024);
    double t0 = now_msf();
    for (int i = 0; i < T; i++)
        pthread_create(&th[i], &at, killer_main, &k);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    double took = now_msf() - t0;
    char pf[256];
    bool pass = probe_finish(&pr, pf, sizeof pf);
    /* Let the server finish the handlers it still runs, then check. */
    int fd1 = -1;
    uint64_t end = now_ms() + 10000;
    while (now_ms() < end) {
        fd1 = proc_fds(s.pid);
        if (fd1 <= fd0 + 2)
            break;
        sleep_ms(200);
    }
    unsigned ok;
    unsigned n = normal_requests(s.port, 200, &ok);
    pass = pass && ok == n && fd1 <= fd0 + 2 && server_alive(&s);
    char extra[300];
    finish_server(&s, e->name, name, &pass, extra, sizeof extra);
    result(e->name, name, pass,
           "%u clients reset mid-request/response (c=%d, %.1f s, %u connect errors); then "
           "%u/%u normal requests ok; server fds %d before, %d after (bound: +2); %s%s",
           k.total, T, took / 1000, atomic_load(&k.errors), ok, n, fd0, fd1, pf, extra);
}

/* ---- closed-loop clients (graceful stop and soak) ---------------------------- */

typedef struct load {
    int port;
    atomic_bool stop;
    unsigned per_client_gap_us; /* pacing for the soak; 0 = as fast as possible */
    bool stop_mode;             /* count refused connects as clean */
    /* SRV_CAP_STOP_CLOSES_PARTIAL_LINE: a kept-alive connection whose
     * request line had partly arrived at the stop is closed as idle. */
    bool partial_closes;
    atomic_ullong ok200, ok503, other, lost, lost_reset, lost_split, truncated, refused, retried, conn_errors;
    atomic_ullong closed_partial;
    atomic_ullong latency_us_total;
    char first_other[256];
    pthread_mutex_t mu;
} load;

static void load_note(load *l, const char *fmt, ...)
{
    pthread_mutex_lock(&l->mu);
    if (l->first_other[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->first_other, sizeof l->first_other, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&l->mu);
}

static void *load_main(void *arg)
{
    load *l = arg;
    static const char *reqs[] = {
        "GET /greetings?name=soak HTTP/1.1\r\nHost: stress\r\n\r\n",
        "GET /health HTTP/1.1\r\nHost: stress\r\n\r\n",
        "GET /greetings?name=%C3%A9t%C3%A9+x HTTP/1.1\r\nHost: stress\r\nAccept: */*\r\n\r\n",
        "HEAD /health HTTP/1.1\r\nHost: stress\r\n\r\n",
    };
    int fd = -1;
    bool reused = false;
    unsigned k = (unsigned)(uintptr_t)&fd;
    while (!atomic_load(&l->stop)) {
        if (fd < 0) {
            fd = connect_start(l->port);
            int c = fd >= 0 ? connect_wait(fd, 5000) : -errno;
            if (c != 0) {
                if (fd >= 0)
                    close(fd);
                fd = -1;
                if (c == -ECONNREFUSED && l->stop_mode) {
                    atomic_fetch_add(&l->refused, 1);
                    sleep_ms(20);
                } else {
                    atomic_fetch_add(&l->conn_errors, 1);
                    load_note(l, "connect: %s", strerror(-c));
                    sleep_ms(100);
                }
                continue;
            }
            reused = false;
        }
        unsigned nth = k++;
        const char *req = reqs[l->stop_mode ? 0 : nth % 4];
        bool head = strncmp(req, "HEAD", 4) == 0;
        double t0 = now_msf();
        bool sent;
        bool split = l->stop_mode && nth % 10 == 3;
        if (split) {
            /* One request in ten arrives in two parts 500 ms apart, so
             * some heads are still arriving when the stop begins (it
             * completes within the grace period, so it is served). */
            sent = send_all(fd, req, 12, 5000);
            sleep_ms(500);
            sent = sent && send_all(fd, req + 12, strlen(req) - 12, 5000);
        } else {
            sent = send_all(fd, req, strlen(req), 5000);
        }
        bool cc = false;
        size_t got = 0;
        int st = sent ? read_response_to(fd, 30000, head, &cc, &got) : 0;
        if (st == 0 && reused && got == 0 && !split) {
            /* The server closed a kept-alive connection as the request
             * went out: a client retries (RFC 9112 9.3.1), so do we, once,
             * on a new connection. Not for a split request: the server had
             * its first part for 500 ms, the connection was not idle. */
            close(fd);
            fd = -1;
            atomic_fetch_add(&l->retried, 1);
            int fd2 = connect_start(l->port);
            int c = fd2 >= 0 ? connect_wait(fd2, 5000) : -errno;
            if (c == -ECONNREFUSED && l->stop_mode) {
                atomic_fetch_add(&l->refused, 1);
                close(fd2);
                continue;
            }
            if (c != 0) {
                if (fd2 >= 0)
                    close(fd2);
                atomic_fetch_add(&l->lost, 1);
                load_note(l, "retry connect: %s", strerror(-c));
                continue;
            }
            fd = fd2;
            reused = false;
            sent = send_all(fd, req, strlen(req), 5000);
            st = sent ? read_response_to(fd, 30000, head, &cc, &got) : 0;
        }
        atomic_fetch_add(&l->latency_us_total, (unsigned long long)((now_msf() - t0) * 1000));
        if (st == 200) {
            atomic_fetch_add(&l->ok200, 1);
        } else if (st == 503) {
            atomic_fetch_add(&l->ok503, 1);
        } else if (st > 0) {
            atomic_fetch_add(&l->other, 1);
            load_note(l, "status %d", st);
        } else if (st == 0 && split && reused && got == 0 && l->partial_closes) {
            /* The engine's documented close (its library shows no part of a
             * request line): the stop took the connection for idle. */
            atomic_fetch_add(&l->closed_partial, 1);
        } else if (st == 0) {
            atomic_fetch_add(&l->lost, 1);
            if (last_reset)
                atomic_fetch_add(&l->lost_reset, 1);
            if (split)
                atomic_fetch_add(&l->lost_split, 1);
            load_note(l, "connection %s with no answer (%s connection%s)",
                      last_reset ? "reset" : "closed", reused ? "reused" : "new",
                      split ? ", request sent in two parts" : "");
        } else {
            atomic_fetch_add(&l->truncated, 1);
            load_note(l, "truncated, late or unparsable answer (%zu bytes: \"%s\") to %.20s",
                      got, last_bytes, req);
        }
        if (st <= 0 || cc) {
            close(fd);
            fd = -1;
        } else {
            reused = true;
        }
        if (l->per_client_gap_us) {
            struct timespec ts = {.tv_sec = l->per_client_gap_us / 1000000,
                                  .tv_nsec = (long)(l->per_client_gap_us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static void load_init(load *l, int port)
{
    memset(l, 0, sizeof *l);
    l->port = port;
    atomic_init(&l->stop, false);
    pthread_mutex_init(&l->mu, NULL);
}

static unsigned long long load_total(load *l)
{
    return atomic_load(&l->ok200) + atomic_load(&l->ok503) + atomic_load(&l->other) +
           atomic_load(&l->lost) + atomic_load(&l->truncated);
}

static pthread_t *load_start(load *l, unsigned n)
{
    pthread_t *th = calloc(n, sizeof *th);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 128 * 1024);
    for (unsigned i = 0; i < n; i++)
        pthread_create(&th[i], &at, load_main, l);
    pthread_attr_destroy(&at);
    return th;
}

static void load_join(load *l, pthread_t *th, unsigned n)
{
    atomic_store(&l->stop, true);
    for (unsigned i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    free(th);
}

/* Graceful stop under c = stop_c: run 4 s, SIGTERM greetings (10 s grace),
 * keep the clients going until the server is gone. One request in ten is
 * sent in two parts 500 ms apart (see load_main). */
static void sc_stop(const engine_info *e)
{
    const char *name = "stop";
    server s;
    const char *args[] = {"--sleep-ms", "200", NULL};
    if (server_start(&s, e->name, name, args) != 0) {
        result(e->name, name, false, "greetings did not start");
        return;
    }
    load l;
    load_init(&l, s.port);
    l.stop_mode = true;
    l.partial_closes = (e->caps & SRV_CAP_STOP_CLOSES_PARTIAL_LINE) != 0;
    pthread_t *th = load_start(&l, opt.stop_c);
    sleep_ms(4000);
    unsigned long long before = load_total(&l);
    uint64_t t_term = now_ms();
    char how[256];
    bool exited = server_stop(&s, 30000, how, sizeof how);
    double stop_s = (now_ms() - t_term) / 1000.0;
    sleep_ms(500); /* refused connects after the exit */
    load_join(&l, th, opt.stop_c);
    unsigned long long lost = atomic_load(&l.lost), trunc = atomic_load(&l.truncated),
                       other = atomic_load(&l.other);
    bool pass = exited && lost == 0 && trunc == 0 && other == 0 && atomic_load(&l.ok200) > 0;
    result(e->name, name, pass,
           "c=%u, SIGTERM after %llu answers; server %s %.1f s later; 200: %llu, 503: %llu, "
           "lost: %llu (%llu by reset, %llu sent in two parts), truncated: %llu, other: %llu, "
           "closed with a partial request line (SRV_CAP_STOP_CLOSES_PARTIAL_LINE): %llu, "
           "refused connects after "
           "stop: %llu, retried idle-close: %llu%s%s (bound: 0 lost/truncated/other)",
           opt.stop_c, before, how, stop_s, atomic_load(&l.ok200), atomic_load(&l.ok503), lost,
           atomic_load(&l.lost_reset), atomic_load(&l.lost_split), trunc, other,
           atomic_load(&l.closed_partial), atomic_load(&l.refused), atomic_load(&l.retried),
           l.first_other[0] ? "; first problem: " : "", l.first_other);
}

/* ---- graceful stop over HTTP/2 ------------------------------------------- */

/* A small h2c client, frames by hand: Debian 12's libcurl (7.88.1) fails
 * requests on a reused prior-knowledge connection (curl issue 10634) and
 * is flaky with upgraded ones under many waiting streams, which would make
 * the scenario measure the client. The server's answers are all this
 * needs to read: h2o encodes :status as a static index (200, 204, 206,
 * 304, 400, 404, 500) or as a literal without indexing of three digits
 * (the engine's own 503 too), never into the dynamic table. */
enum { H2S_STREAMS = 10, H2S_BUF = 1 << 16 };

typedef struct h2s_conn {
    int fd;
    unsigned next_sid;
    unsigned inflight;      /* streams open on this connection */
    unsigned sid[H2S_STREAMS];
    int status[H2S_STREAMS]; /* 0 until its HEADERS arrive */
    bool goaway;
    unsigned last_sid;       /* from GOAWAY */
    size_t in;               /* bytes in buf */
    unsigned char buf[H2S_BUF];
} h2s_conn;

typedef struct h2s_tally {
    unsigned long long ok200, ok503, other, lost, reset, unprocessed, refused;
    char first[256];
} h2s_tally;

static void h2s_note(h2s_tally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void h2s_note(h2s_tally *t, const char *fmt, ...)
{
    if (t->first[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->first, sizeof t->first, fmt, ap);
    va_end(ap);
}

static size_t h2s_frame(unsigned char *p, unsigned type, unsigned flags, unsigned sid,
                        const void *payload, size_t len)
{
    p[0] = (unsigned char)(len >> 16);
    p[1] = (unsigned char)(len >> 8);
    p[2] = (unsigned char)len;
    p[3] = (unsigned char)type;
    p[4] = (unsigned char)flags;
    p[5] = (unsigned char)((sid >> 24) & 0x7f);
    p[6] = (unsigned char)(sid >> 16);
    p[7] = (unsigned char)(sid >> 8);
    p[8] = (unsigned char)sid;
    if (len)
        memcpy(p + 9, payload, len);
    return 9 + len;
}

/* GET /greetings?name=h2stop on a new stream. */
static bool h2s_request(h2s_conn *c)
{
    static const char path[] = "/greetings?name=h2stop", authority[] = "stress";
    unsigned char block[64], frame[80];
    size_t n = 0;
    block[n++] = 0x82; /* :method GET */
    block[n++] = 0x86; /* :scheme http */
    block[n++] = 0x04; /* :path, literal without indexing, static name 4 */
    block[n++] = (unsigned char)(sizeof path - 1);
    memcpy(block + n, path, sizeof path - 1);
    n += sizeof path - 1;
    block[n++] = 0x01; /* :authority, static name 1 */
    block[n++] = (unsigned char)(sizeof authority - 1);
    memcpy(block + n, authority, sizeof authority - 1);
    n += sizeof authority - 1;
    unsigned sid = c->next_sid;
    size_t len = h2s_frame(frame, 0x1, 0x5 /* END_STREAM | END_HEADERS */, sid, block, n);
    if (!send_all(c->fd, frame, len, 5000))
        return false;
    for (unsigned i = 0; i < H2S_STREAMS; i++)
        if (c->sid[i] == 0) {
            c->sid[i] = sid;
            c->status[i] = 0;
            break;
        }
    c->next_sid += 2;
    c->inflight++;
    return true;
}

/* Connect, preface, SETTINGS, a connection window large enough for the
 * whole run, and H2S_STREAMS requests. -errno on a failed connect. */
static int h2s_open(h2s_conn *c, int port)
{
    memset(c, 0, sizeof *c);
    c->next_sid = 1;
    c->fd = connect_start(port);
    int rc = c->fd >= 0 ? connect_wait(c->fd, 5000) : -errno;
    if (rc != 0) {
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        return rc;
    }
    unsigned char out[128];
    size_t n = 0;
    memcpy(out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    n += 24;
    n += h2s_frame(out + n, 0x4, 0, 0, NULL, 0);
    static const unsigned char grow[4] = {0x7f, 0xff, 0x00, 0x00}; /* +2^31-65536 */
    n += h2s_frame(out + n, 0x8, 0, 0, grow, 4);
    bool ok = send_all(c->fd, out, n, 5000);
    for (unsigned i = 0; ok && i < H2S_STREAMS; i++)
        ok = h2s_request(c);
    if (!ok) {
        close(c->fd);
        c->fd = -1;
        return -EPIPE;
    }
    return 0;
}

static int h2s_slot(const h2s_conn *c, unsigned sid)
{
    for (unsigned i = 0; i < H2S_STREAMS; i++)
        if (c->sid[i] == sid)
            return (int)i;
    return -1;
}

static void h2s_done(h2s_conn *c, int i, h2s_tally *t)
{
    int st = c->status[i];
    if (st == 200)
        t->ok200++;
    else if (st == 503)
        t->ok503++;
    else {
        t->other++;
        h2s_note(t, "stream %u ended with status %d", c->sid[i], st);
    }
    c->sid[i] = 0;
    c->inflight--;
}

/* The connection ended (EOF, reset, or after GOAWAY): streams the server
 * processed or may have (id <= GOAWAY's last-stream-id, every stream
 * without a GOAWAY) are lost; the others were never processed, which a
 * client may retry (RFC 9113 8.7). */
static void h2s_close(h2s_conn *c, h2s_tally *t, const char *why)
{
    for (unsigned i = 0; i < H2S_STREAMS; i++) {
        if (c->sid[i] == 0)
            continue;
        if (c->goaway && c->sid[i] > c->last_sid) {
            t->unprocessed++;
        } else {
            t->lost++;
            h2s_note(t, "stream %u: connection %s before its answer%s", c->sid[i], why,
                     c->goaway ? " (at or below GOAWAY's last-stream-id)" : "");
        }
        c->sid[i] = 0;
    }
    c->inflight = 0;
    close(c->fd);
    c->fd = -1;
}

/* Reads what arrived and handles each whole frame; false once the
 * connection is over (closed by h2s_close). */
static bool h2s_read(h2s_conn *c, h2s_tally *t, bool stopping)
{
    ssize_t r = recv(c->fd, c->buf + c->in, sizeof c->buf - c->in, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        h2s_close(c, t, r == 0 ? "closed" : "reset");
        return false;
    }
    if (r > 0)
        c->in += (size_t)r;
    size_t off = 0;
    while (c->in - off >= 9) {
        const unsigned char *f = c->buf + off;
        size_t len = ((size_t)f[0] << 16) | ((size_t)f[1] << 8) | f[2];
        if (len > sizeof c->buf - 9) {
            h2s_note(t, "frame of %zu bytes", len);
            h2s_close(c, t, "sent an oversized frame");
            return false;
        }
        if (c->in - off < 9 + len)
            break;
        unsigned type = f[3], flags = f[4];
        unsigned sid = ((unsigned)(f[5] & 0x7f) << 24) | ((unsigned)f[6] << 16) |
                       ((unsigned)f[7] << 8) | f[8];
        const unsigned char *p = f + 9;
        int i = sid ? h2s_slot(c, sid) : -1;
        if (type == 0x4 && !(flags & 0x1)) { /* SETTINGS: ack */
            unsigned char ack[9];
            h2s_frame(ack, 0x4, 0x1, 0, NULL, 0);
            send_all(c->fd, ack, sizeof ack, 5000);
        } else if (type == 0x6 && !(flags & 0x1) && len == 8) { /* PING: answer */
            unsigned char pong[17];
            h2s_frame(pong, 0x6, 0x1, 0, p, 8);
            send_all(c->fd, pong, sizeof pong, 5000);
        } else if (type == 0x7 && len >= 8) { /* GOAWAY */
            c->goaway = true;
            c->last_sid = ((unsigned)(p[0] & 0x7f) << 24) | ((unsigned)p[1] << 16) |
                          ((unsigned)p[2] << 8) | p[3];
        } else if (type == 0x1 && i >= 0 && len >= 1) { /* HEADERS */
            if (p[0] & 0x80) {
                static const int statik[] = {[8] = 200, [9] = 204, [10] = 206, [11] = 304,
                                             [12] = 400, [13] = 404, [14] = 500};
                unsigned idx = p[0] & 0x7f;
                c->status[i] = idx < 15 ? statik[idx] : -1;
            } else if (p[0] == 0x08 && len >= 5 && p[1] == 3) {
                c->status[i] = (p[2] - '0') * 100 + (p[3] - '0') * 10 + (p[4] - '0');
            } else {
                c->status[i] = -1;
            }
            if (flags & 0x1)
                h2s_done(c, i, t);
        } else if (type == 0x0 && i >= 0 && (flags & 0x1)) { /* DATA, END_STREAM */
            if (c->status[i] == 0) {
                t->other++;
                h2s_note(t, "stream %u: DATA before HEADERS", sid);
                c->sid[i] = 0;
                c->inflight--;
            } else {
                h2s_done(c, i, t);
            }
        } else if (type == 0x3 && i >= 0) { /* RST_STREAM */
            unsigned code = len >= 4 ? ((unsigned)p[0] << 24) | ((unsigned)p[1] << 16) |
                                           ((unsigned)p[2] << 8) | p[3]
                                     : 0;
            if (code == 0x7) { /* REFUSED_STREAM: not processed, retryable */
                t->unprocessed++;
            } else {
                t->reset++;
                h2s_note(t, "stream %u reset with error %u", sid, code);
            }
            c->sid[i] = 0;
            c->inflight--;
        }
        off += 9 + len;
    }
    memmove(c->buf, c->buf + off, c->in - off);
    c->in -= off;
    /* Keep H2S_STREAMS streams open until the server says GOAWAY (or
     * the stop began and it is time to let the connections end). */
    while (!c->goaway && !stopping && c->inflight < H2S_STREAMS)
        if (!h2s_request(c)) {
            h2s_close(c, t, "refused a request");
            return false;
        }
    if (c->goaway && c->inflight == 0) {
        /* Everything it accepted is answered: done with it (a client would
         * reconnect; the loop does). */
        close(c->fd);
        c->fd = -1;
        return false;
    }
    return true;
}

/* Graceful stop over HTTP/2: stop_c streams kept in flight on stop_c / 10
 * h2c connections (10 each), SIGTERM after 4 s as in sc_stop, clients
 * reconnecting until the server is gone. Every stream must end 200 or 503,
 * or be one the server never processed (above GOAWAY's last-stream-id, or
 * REFUSED_STREAM): a client may retry those, and they are counted apart,
 * as are refused reconnects after the stop. Anything else - a stream reset,
 * a connection closed under a stream it accepted, another status - fails. */
static void sc_stop_h2(const engine_info *e)
{
    const char *name = "stop-h2";
    if (!(e->caps & SRV_ENGINE_CAP_HTTP2)) {
        printf("[%s] %-11s skip  (no SRV_ENGINE_CAP_HTTP2: the engine serves no HTTP/2)\n",
               e->name, name);
        return;
    }
    server s;
    const char *args[] = {"--sleep-ms", "200", NULL};
    if (server_start(&s, e->name, name, args) != 0) {
        result(e->name, name, false, "greetings did not start");
        return;
    }
    unsigned nconn = (opt.stop_c + H2S_STREAMS - 1) / H2S_STREAMS;
    h2s_conn *conns = calloc(nconn, sizeof *conns);
    struct pollfd *pfd = calloc(nconn, sizeof *pfd);
    h2s_tally t = {0};
    unsigned long long before = 0, connect_errors = 0;
    for (unsigned i = 0; i < nconn; i++)
        conns[i].fd = -1;
    char how[256] = "did not exit";
    bool exited = false, stopping = false;
    uint64_t t0 = now_ms(), t_term = 0, t_gone = 0;
    while (!(t_gone && now_ms() > t_gone + 500)) {
        /* (Re)connect the connections that ended, as clients do. */
        for (unsigned i = 0; i < nconn && !t_gone; i++) {
            if (conns[i].fd >= 0)
                continue;
            int rc = h2s_open(&conns[i], s.port);
            if (rc == -ECONNREFUSED && stopping) {
                t.refused++;
            } else if (rc != 0) {
                connect_errors++;
                h2s_note(&t, "connect: %s", strerror(-rc));
            }
        }
        unsigned n = 0;
        for (unsigned i = 0; i < nconn; i++)
            pfd[n++] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
        poll(pfd, n, 20);
        for (unsigned i = 0; i < nconn; i++)
            if (conns[i].fd >= 0 && (pfd[i].revents & (POLLIN | POLLERR | POLLHUP)))
                h2s_read(&conns[i], &t, false);
        if (!stopping && now_ms() - t0 >= 4000) {
            before = t.ok200 + t.ok503 + t.other;
            stopping = true;
            t_term = now_ms();
            kill(s.pid, SIGTERM);
        }
        if (stopping && !t_gone) {
            int st;
            pid_t r = waitpid(s.pid, &st, WNOHANG);
            if (r == s.pid) {
                t_gone = now_ms();
                exited = WIFEXITED(st) && WEXITSTATUS(st) == 0;
                if (WIFSIGNALED(st))
                    snprintf(how, sizeof how, "died of signal %d (log %.150s)", WTERMSIG(st),
                             s.log);
                else
                    snprintf(how, sizeof how, "exit %d", WEXITSTATUS(st));
            } else if (now_ms() - t_term > 30000) {
                kill(s.pid, SIGKILL);
                waitpid(s.pid, &st, 0);
                snprintf(how, sizeof how, "did not exit 30000 ms after SIGTERM (killed)");
                t_gone = now_ms();
            }
        }
    }
    /* The server is gone: whatever is still open ends now. */
    for (unsigned i = 0; i < nconn; i++)
        if (conns[i].fd >= 0) {
            while (h2s_read(&conns[i], &t, true))
                continue;
        }
    double stop_s = t_gone ? (t_gone - t_term) / 1000.0 : 0;
    free(conns);
    free(pfd);
    bool pass = exited && t.lost == 0 && t.reset == 0 && t.other == 0 && connect_errors == 0 &&
                t.ok200 > 0;
    result(e->name, name, pass,
           "%u streams on %u h2c connections, SIGTERM after %llu answers; server %s %.1f s "
           "later; 200: %llu, 503: %llu, lost: %llu, reset: %llu, other: %llu, connect errors: "
           "%llu; never processed (retryable): %llu, refused reconnects after stop: %llu%s%s "
           "(bound: 0 lost/reset/other/connect errors)",
           nconn * H2S_STREAMS, nconn, before, how, stop_s, t.ok200, t.ok503, t.lost, t.reset,
           t.other, connect_errors, t.unprocessed, t.refused, t.first[0] ? "; first problem: " : "",
           t.first);
}

/* Soak: soak_c clients at about soak_rate requests/s for soak_s seconds;
 * RSS sampled every 5 s. Flat: the last sample is within 10% (and at
 * least 4 MB) of the sample at the end of warm-up (the first fifth, at
 * least 10 s), and no request failed. */
static void sc_soak(const engine_info *e)
{
    const char *name = "soak";
    server s;
    const char *args[] = {"--sleep-ms", "5", NULL};
    if (server_start(&s, e->name, name, args) != 0) {
        result(e->name, name, false, "greetings did not start");
        return;
    }
    load l;
    load_init(&l, s.port);
    l.per_client_gap_us = opt.soak_rate ? (unsigned)(1e6 * opt.soak_c / opt.soak_rate) : 0;
    probe pr;
    probe_start(&pr, &s);
    pthread_t *th = load_start(&l, opt.soak_c);
    unsigned warm = opt.soak_s / 5 < 10 ? 10 : opt.soak_s / 5;
    size_t cap = opt.soak_s / 5 + 4, ns = 0;
    double *t = calloc(cap, sizeof *t), *rss = calloc(cap, sizeof *rss);
    uint64_t t0 = now_ms();
    long warm_kb = -1;
    printf("[%s] %-11s running %u s at ~%u req/s (c=%u), RSS every 5 s:", e->name, name,
           opt.soak_s, opt.soak_rate, opt.soak_c);
    fflush(stdout);
    while (now_ms() - t0 < opt.soak_s * 1000u && ns < cap) {
        sleep_ms(5000);
        long kb = proc_rss_kb(s.pid);
        double at = (now_ms() - t0) / 1000.0;
        if (kb < 0)
            break;
        if (warm_kb < 0 && at >= warm)
            warm_kb = kb;
        t[ns] = at;
        rss[ns++] = kb / 1024.0;
        if (ns % 12 == 1)
            printf(" %.0fs:%.1fMB", at, kb / 1024.0);
        fflush(stdout);
    }
    printf("\n");
    unsigned long long reqs = load_total(&l);
    load_join(&l, th, opt.soak_c);
    char pf[256];
    bool probes = probe_finish(&pr, pf, sizeof pf);
    (void)probes; /* reported; the soak's bound is on RSS and errors */
    double secs = (now_ms() - t0) / 1000.0;
    /* Least-squares slope of RSS after warm-up, in MB per hour. */
    double sx = 0, sy = 0, sxx = 0, sxy = 0, mx = 0, mn = 1e18;
    size_t m = 0;
    for (size_t i = 0; i < ns; i++) {
        if (t[i] < warm)
            continue;
        sx += t[i];
        sy += rss[i];
        sxx += t[i] * t[i];
        sxy += t[i] * rss[i];
        if (rss[i] > mx)
            mx = rss[i];
        if (rss[i] < mn)
            mn = rss[i];
        m++;
    }
    double slope = m > 1 ? (m * sxy - sx * sy) / (m * sxx - sx * sx) * 3600 : 0;
    double warm_mb = warm_kb / 1024.0, last = ns ? rss[ns - 1] : 0;
    double allowed = warm_mb * 0.10 > 4 ? warm_mb * 0.10 : 4;
    unsigned long long bad = atomic_load(&l.other) + atomic_load(&l.lost) +
                             atomic_load(&l.truncated) + atomic_load(&l.conn_errors);
    bool pass = warm_kb > 0 && last - warm_mb <= allowed && bad == 0;
    char extra[300];
    finish_server(&s, e->name, name, &pass, extra, sizeof extra);
    result(e->name, name, pass,
           "%.0f s, %llu requests (%.0f/s), %llu failed, %llu retried after an idle "
           "close; RSS after %u s warm-up %.1f MB, "
           "then min %.1f max %.1f last %.1f MB, slope %+.1f MB/h (bound: last <= warm-up + "
           "%.1f MB, 0 failed); %s%s",
           secs, reqs, reqs / secs, bad, atomic_load(&l.retried), warm, warm_mb, m ? mn : 0, mx, last, slope,
           allowed, pf, extra);
    if (l.first_other[0])
        printf("  (first problem: %s)\n", l.first_other);
    free(t);
    free(rss);
}

/* ---- main ------------------------------------------------------------------ */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: srv-stress [options]\n"
            "  --build-dir DIR       where examples/greetings/greetings is (default build)\n"
            "  --engines a,b         engines to attack (default: every engine built in)\n"
            "  --only s1,s2          scenarios: idle slow-head slow-body rapid-reset no-read\n"
            "                        killed stop stop-h2 soak (default: all)\n"
            "  --idle N              idle connections (default 5000)\n"
            "  --slow N              slow clients (default 1000)\n"
            "  --attack-seconds N    how long each attack is held (default 15)\n"
            "  --slow-seconds N      how long slow clients drip; all must be cut by then\n"
            "                        (default 30: greetings' header timeout is 20 s)\n"
            "  --noread-seconds N    bound for cutting never-reading clients (default 45)\n"
            "  --stop-clients N      clients during the graceful stop (default 900)\n"
            "  --soak-seconds N      soak length per engine (default 600)\n"
            "  --soak-clients N      (default 32)   --soak-rate N  req/s (default 1000)\n"
            "  --probe-bound-ms N    /health latency bound during attacks (default 1000)\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--build-dir") == 0)
            opt.build_dir = v;
        else if (strcmp(a, "--engines") == 0)
            opt.engines = v;
        else if (strcmp(a, "--only") == 0)
            opt.only = v;
        else if (strcmp(a, "--idle") == 0)
            opt.idle = (unsigned)atoi(v);
        else if (strcmp(a, "--slow") == 0)
            opt.slow = (unsigned)atoi(v);
        else if (strcmp(a, "--attack-seconds") == 0)
            opt.attack_s = (unsigned)atoi(v);
        else if (strcmp(a, "--slow-seconds") == 0)
            opt.slow_s = (unsigned)atoi(v);
        else if (strcmp(a, "--noread-seconds") == 0)
            opt.noread_s = (unsigned)atoi(v);
        else if (strcmp(a, "--stop-clients") == 0)
            opt.stop_c = (unsigned)atoi(v);
        else if (strcmp(a, "--soak-seconds") == 0)
            opt.soak_s = (unsigned)atoi(v);
        else if (strcmp(a, "--soak-clients") == 0)
            opt.soak_c = (unsigned)atoi(v);
        else if (strcmp(a, "--soak-rate") == 0)
            opt.soak_rate = (unsigned)atoi(v);
        else if (strcmp(a, "--probe-bound-ms") == 0)
            opt.probe_bound = (unsigned)atoi(v);
        else {
            usage(stderr);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    /* Descriptors: the idle scenario holds opt.idle here and as many in
     * greetings (which inherits the limit), plus the probe's. */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t need = (rlim_t)(opt.idle > opt.stop_c ? opt.idle : opt.stop_c) + 512;
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need) {
        fprintf(stderr,
                "srv-stress: the descriptor limit is %llu (hard %llu), %llu are needed: raise the "
                "hard limit (as root: `ulimit -Hn %llu` in the shell that runs make, or "
                "`prlimit --nofile=%llu:%llu --pid $$`, or a nofile line in "
                "/etc/security/limits.conf), or pass a smaller --idle\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
                (unsigned long long)need, (unsigned long long)need, (unsigned long long)need,
                (unsigned long long)need);
        return 2;
    }
    printf("srv-stress: RLIMIT_NOFILE %llu, loopback only, greetings from %s\n",
           (unsigned long long)rl.rlim_cur, opt.build_dir);

    for (size_t i = 0; i < srv_engine_count(); i++) {
        const srv_engine *eng = srv_engine_at(i);
        engine_info e = {.name = srv_engine_name(eng), .caps = srv_engine_caps(eng)};
        if (!in_list(opt.engines, e.name))
            continue;
        printf("\n== engine %s\n", e.name);
        if (in_list(opt.only, "idle"))
            sc_idle(&e);
        if (in_list(opt.only, "slow-head"))
            sc_slow(&e, false);
        if (in_list(opt.only, "slow-body"))
            sc_slow(&e, true);
        if (in_list(opt.only, "rapid-reset"))
            sc_rapid_reset(&e);
        if (in_list(opt.only, "no-read"))
            sc_no_read(&e);
        if (in_list(opt.only, "killed"))
            sc_killed(&e);
        if (in_list(opt.only, "stop"))
            sc_stop(&e);
        if (in_list(opt.only, "stop-h2"))
            sc_stop_h2(&e);
        if (in_list(opt.only, "soak"))
            sc_soak(&e);
    }

    unsigned fails = 0;
    printf("\n== summary\n");
    for (size_t i = 0; i < nresults; i++) {
        printf("  %-10s %-11s %s\n", results[i].engine, results[i].scenario,
               results[i].pass ? "PASS" : "FAIL");
        fails += !results[i].pass;
    }
    printf("srv-stress: %zu scenarios, %u FAIL\n", nresults, fails);
    return fails ? 1 : 0;
}
