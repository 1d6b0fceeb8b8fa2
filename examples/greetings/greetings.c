/*
 * Greetings: the seeds' demo API on libsrv, and the example to copy.
 *   GET /greetings?name=Ana  ->  "Hello Ana!" (or Hi, Olá, Oi, Hallo) after --sleep-ms
 *   GET /greetings/Ana       ->  the same, the name from the path
 *   GET /health              ->  "UP"
 * --cors ORIGIN lets pages from ORIGIN call it from a browser (the CORS
 * filter: preflights answered, Access-Control-* headers on the answers);
 * --compression gzips answers of text types from 2 KB when the client
 * accepts it (srv_compression_set; a greeting is shorter: this is the
 * switch an application would turn on).
 * --static DIR serves the files of DIR under /static/ (srv_static_add:
 * types, ETag, 304, Range, index.html; nothing outside DIR).
 * Blocking mode sleeps on the worker thread; --async waits with srv_after so
 * no worker is held. SIGINT/SIGTERM stop the server gracefully.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep under -std=c11 */

#include <srv.h>

#include "supervisor.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Where the handlers run (--handlers). */
enum handlers { HANDLERS_AUTO, HANDLERS_WORKER, HANDLERS_INLINE };

typedef struct greetings {
    unsigned sleep_ms;
    int async;
} greetings;

static const char *const words[] = {"Hello", "Hi", "Olá", "Oi", "Hallo"};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A per-thread xorshift64 generator: no lock, no shared state after the
 * seed, which mixes the clock with a process-wide counter so two threads
 * seeded in the same nanosecond still differ. */
static uint64_t random_u64(void)
{
    static atomic_uint_fast64_t seeds;
    static _Thread_local uint64_t state;

    if (state == 0) {
        uint64_t z = now_ns() + (atomic_fetch_add(&seeds, 1) + 1) * 0x9E3779B97F4A7C15u;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u; /* splitmix64 finalizer */
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
        state = (z ^ (z >> 31)) | 1;
    }
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

/* Sleep on the calling thread, resuming after signal interruptions. */
static void sleep_ms(unsigned ms)
{
    struct timespec left = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        continue;
}

/* "<Word> <name>!", with World when the name is missing or empty. */
static void greet(srv_request *req)
{
    /* /greetings/{name}, else /greetings?name= */
    const char *name = srv_request_param(req, "name");
    if (name == NULL)
        name = srv_request_query(req, "name");
    if (name == NULL || name[0] == '\0')
        name = "World";
    const char *word = words[random_u64() % (sizeof words / sizeof words[0])];

    /* "<word> <name>!" by hand, on the stack when it fits: a hello request
     * is a few microseconds, and malloc + snprintf were a twentieth of it. */
    size_t wlen = strlen(word), nlen = strlen(name), len = wlen + 1 + nlen + 1;
    char small[256];
    char *body = len <= sizeof small ? small : malloc(len);
    if (body == NULL) {
        srv_respond(req, 500, "text/plain; charset=utf-8", "out of memory\n", 14);
        return;
    }
    memcpy(body, word, wlen);
    body[wlen] = ' ';
    memcpy(body + wlen + 1, name, nlen);
    body[len - 1] = '!';
    srv_respond(req, 200, "text/plain; charset=utf-8", body, len);
    if (body != small)
        free(body); /* srv_respond copied it */
}

/* --async: the timer thread answers once the wait is over. */
static void greet_later(void *arg)
{
    greet(arg);
}

static void handle_greetings(srv_request *req, void *ctx)
{
    const greetings *app = ctx;

    if (!app->async) {
        /* Holds this worker, like the seeds' servers. No call at all for
         * --sleep-ms 0: nanosleep(0) still yields the CPU, a context switch
         * per request. */
        if (app->sleep_ms > 0)
            sleep_ms(app->sleep_ms);
        greet(req);
        return;
    }
    /* Return at once; greet_later responds. If the timer refuses (the server
     * is stopping), answer now so the client is not left waiting. */
    if (srv_after(srv_request_server(req), app->sleep_ms, greet_later, req) != 0)
        srv_respond(req, 503, "text/plain; charset=utf-8", "shutting down\n", 14);
}

static void handle_health(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "text/plain; charset=utf-8", "UP", 2);
}

static void print_engines(FILE *out)
{
    for (size_t i = 0; i < srv_engine_count(); i++)
        fprintf(out, "%s%s%s", i ? ", " : "", srv_engine_name(srv_engine_at(i)),
                i == 0 ? " (default)" : "");
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: greetings [options]\n"
            "Serves GET /greetings?name=NAME, GET /greetings/NAME, GET /health (liveness),\n"
            "GET /ready (readiness: 503 while starting, draining or stopping) and\n"
            "GET /metrics (Prometheus).\n"
            "\n"
            "  --engine NAME          engine to run (default: $SRV_ENGINE, else the default)\n"
            "  --host ADDR            numeric IPv4/IPv6 address to bind (default 0.0.0.0)\n"
            "  --port N               TCP port, 0 for any free one (default 8080)\n"
            "  --threads N            worker threads running handlers (default 200)\n"
            "  --io-threads N         I/O threads (event loops), 0 = CPUs (default 0)\n"
            "  --max-connections N    connections served at once (default 10000)\n"
            "  --sleep-ms N           delay before each greeting (default 1000)\n"
            "  --async                wait with a timer instead of holding a worker\n"
            "  --handlers MODE        where handlers run: auto, worker or inline (default auto)\n"
            "                         auto: /health, and /greetings when it does not block\n"
            "                         (--async or --sleep-ms 0), run non-blocking on the I/O\n"
            "                         thread; the blocking /greetings runs on the workers.\n"
            "                         worker: every route on the worker pool.\n"
            "                         inline: every route non-blocking (refused with a\n"
            "                         blocking sleep)\n"
            "  --tls-cert FILE        serve HTTPS with this PEM certificate chain\n"
            "  --tls-key FILE         ... and this PEM private key (both needed; SIGHUP\n"
            "                         reloads them)\n"
            "  --cors ORIGIN          allow browser calls from ORIGIN (e.g.\n"
            "                         https://app.example.com; comma-separated list, or *)\n"
            "  --compression          gzip text answers of 2 KB or more when the client\n"
            "                         accepts it\n"
            "  --static DIR           serve the files of DIR under /static/ (ETag, 304,\n"
            "                         Range, index.html for directories; nothing outside\n"
            "                         DIR, symbolic links included)\n"
            "  --trusted-proxies LIST believe X-Forwarded-For/-Proto/-Host and Forwarded\n"
            "                         from these addresses or CIDR blocks only\n"
            "                         (e.g. 127.0.0.1,10.0.0.0/8); the access log then shows\n"
            "                         the client behind them\n"
            "  --access-log[=FORMAT]  one line per response: common (the default), combined\n"
            "                         (+ Referer, User-Agent) or json; on stderr unless\n"
            "  --access-log-file PATH ... this file (SIGUSR1 reopens it, for logrotate)\n"
            "  --drain-ms N           on SIGTERM, first keep serving N ms while GET /ready\n"
            "                         answers 503, so a load balancer drains this instance\n"
            "                         (default 0)\n"
            "  --processes N          N processes serve the port (SO_REUSEPORT; needs a fixed\n"
            "                         --port), a parent restarts one that dies and stops\n"
            "                         them all gracefully on SIGTERM (default 1)\n"
            "  --help                 show this help\n"
            "\n"
            "Environment: every server setting (a srv_config field, see srv.h) is read\n"
            "from SRV_<FIELD> before the flags, which win: SRV_PORT=9090,\n"
            "SRV_WORKER_THREADS=50, SRV_MAX_BODY_BYTES=4M, SRV_ACCESS_LOG=on,\n"
            "SRV_TLS_CERT_FILE=..., SRV_HEADER_TIMEOUT_MS=5000...; SRV_ENGINE picks the\n"
            "engine. A bad value or an unknown SRV_ variable stops greetings with a message.\n"
            "\n"
            "Socket activation: a listening socket passed by systemd (LISTEN_FDS) is served\n"
            "instead of binding --host/--port.\n"
            "\n"
            "Engines built in: ");
    print_engines(out);
    fprintf(out, "\n");
}

/* Say what is wrong with the command line and how to fix it; exit 2. */
__attribute__((format(printf, 1, 2), noreturn)) static void bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "greetings: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nRun 'greetings --help' for the list of options.\n");
    va_end(ap);
    exit(2);
}

/* A whole decimal number in [min, max], or exit 2 naming the flag. */
static long parse_number(const char *flag, const char *text, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    /* strtol alone accepts " 5", "+5" and "5x"; a flag value must be digits. */
    if (!isdigit((unsigned char)text[0]) || errno != 0 || *end != '\0' || v < min || v > max)
        bad_usage("%s '%s' is not valid: give a whole number from %ld to %ld", flag, text, min,
                  max);
    return v;
}

int main(int argc, char **argv)
{
    uint64_t t0 = now_ns();
    const char *engine_name = NULL;
    const char *cors_origins = NULL;
    const char *static_dir = NULL;
    int compression = 0;
    greetings app = {.sleep_ms = 1000, .async = 0};
    enum handlers handlers = HANDLERS_AUTO;
    unsigned processes = 1;
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.ready_path = "/ready";     /* for load balancers; SRV_READY_PATH may move it */
    cfg.metrics_path = "/metrics"; /* for Prometheus; SRV_METRICS_PATH may move it */
    char env_err[256];
    if (srv_config_from_env(&cfg, "SRV_", env_err, sizeof env_err) != 0) {
        fprintf(stderr, "greetings: %s\nUnset or fix the variable; 'greetings --help' lists "
                "the settings.\n", env_err);
        return 2;
    }

    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(flag, "--async") == 0) {
            app.async = 1;
            continue;
        }
        if (strcmp(flag, "--access-log") == 0) {
            cfg.access_log = SRV_ACCESS_LOG_COMMON;
            continue;
        }
        if (strncmp(flag, "--access-log=", 13) == 0) {
            static const char *const formats[] = {"off", "common", "combined", "json"};
            int mode = -1;
            for (int k = 0; k < 4; k++)
                if (strcmp(flag + 13, formats[k]) == 0)
                    mode = k;
            if (mode < 0)
                bad_usage("--access-log='%s' is not valid: use common, combined, json or off",
                          flag + 13);
            cfg.access_log = mode;
            continue;
        }
        if (strcmp(flag, "--compression") == 0) {
            compression = 1;
            continue;
        }
        int takes_value = strcmp(flag, "--engine") == 0 || strcmp(flag, "--host") == 0 ||
                          strcmp(flag, "--port") == 0 || strcmp(flag, "--threads") == 0 ||
                          strcmp(flag, "--io-threads") == 0 ||
                          strcmp(flag, "--max-connections") == 0 ||
                          strcmp(flag, "--sleep-ms") == 0 || strcmp(flag, "--handlers") == 0 ||
                          strcmp(flag, "--tls-cert") == 0 || strcmp(flag, "--tls-key") == 0 ||
                          strcmp(flag, "--trusted-proxies") == 0 ||
                          strcmp(flag, "--access-log-file") == 0 ||
                          strcmp(flag, "--processes") == 0 || strcmp(flag, "--drain-ms") == 0 ||
                          strcmp(flag, "--cors") == 0 || strcmp(flag, "--static") == 0;
        if (!takes_value)
            bad_usage("unknown option '%s'", flag);
        if (i + 1 >= argc)
            bad_usage("%s needs a value", flag);
        const char *val = argv[++i];

        if (strcmp(flag, "--engine") == 0)
            engine_name = val;
        else if (strcmp(flag, "--host") == 0)
            cfg.host = val;
        else if (strcmp(flag, "--port") == 0)
            cfg.port = (int)parse_number(flag, val, 0, 65535);
        else if (strcmp(flag, "--threads") == 0)
            cfg.worker_threads = (unsigned)parse_number(flag, val, 1, 100000);
        else if (strcmp(flag, "--io-threads") == 0)
            cfg.io_threads = (unsigned)parse_number(flag, val, 0, 1024);
        else if (strcmp(flag, "--max-connections") == 0)
            cfg.max_connections = (unsigned)parse_number(flag, val, 1, 10000000);
        else if (strcmp(flag, "--tls-cert") == 0)
            cfg.tls_cert_file = val;
        else if (strcmp(flag, "--tls-key") == 0)
            cfg.tls_key_file = val;
        else if (strcmp(flag, "--trusted-proxies") == 0)
            cfg.trusted_proxies = val;
        else if (strcmp(flag, "--access-log-file") == 0)
            cfg.access_log_path = val;
        else if (strcmp(flag, "--processes") == 0)
            processes = (unsigned)parse_number(flag, val, 1, 256);
        else if (strcmp(flag, "--drain-ms") == 0)
            cfg.drain_ms = (unsigned)parse_number(flag, val, 0, 3600000);
        else if (strcmp(flag, "--cors") == 0)
            cors_origins = val;
        else if (strcmp(flag, "--static") == 0)
            static_dir = val;
        else if (strcmp(flag, "--handlers") == 0) {
            if (strcmp(val, "auto") == 0)
                handlers = HANDLERS_AUTO;
            else if (strcmp(val, "worker") == 0)
                handlers = HANDLERS_WORKER;
            else if (strcmp(val, "inline") == 0)
                handlers = HANDLERS_INLINE;
            else
                bad_usage("--handlers '%s' is not valid: use auto, worker or inline", val);
        }
        else
            app.sleep_ms = (unsigned)parse_number(flag, val, 0, 3600000);
    }

    /* A sleeping greeting would stall every connection of its I/O thread. */
    int greeting_blocks = !app.async && app.sleep_ms > 0;
    if (handlers == HANDLERS_INLINE && greeting_blocks)
        bad_usage("--handlers inline runs /greetings on the I/O thread, where a blocking "
                  "--sleep-ms %u would stall every connection of that thread: add --async, "
                  "use --sleep-ms 0, or choose --handlers auto or worker", app.sleep_ms);
    unsigned health_flags = handlers == HANDLERS_WORKER ? 0 : SRV_ROUTE_NONBLOCKING;
    unsigned greetings_flags =
        handlers == HANDLERS_WORKER || greeting_blocks ? 0 : SRV_ROUTE_NONBLOCKING;

    if ((cfg.tls_cert_file == NULL) != (cfg.tls_key_file == NULL))
        bad_usage("HTTPS needs both --tls-cert FILE and --tls-key FILE (or SRV_TLS_CERT_FILE "
                  "and SRV_TLS_KEY_FILE)");

    unsigned char addr[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, cfg.host, addr) != 1 && inet_pton(AF_INET6, cfg.host, addr) != 1)
        bad_usage("--host '%s' is not a numeric IPv4 or IPv6 address: use e.g. 0.0.0.0, :: "
                  "or 127.0.0.1", cfg.host);

    const srv_engine *engine;
    if (srv_engine_select(engine_name, &engine) != 0) {
        const char *asked = engine_name ? engine_name : getenv("SRV_ENGINE");
        fprintf(stderr, "greetings: engine '%s'%s is not built into this libsrv; built: ", asked,
                engine_name ? "" : " (from SRV_ENGINE)");
        print_engines(stderr);
        fprintf(stderr, "\n");
        return 2;
    }

    /* systemd socket activation: serve the socket it holds for us. */
    int inherited = srv_systemd_listen_fd();
    if (inherited >= 0 && cfg.listen_fd < 0)
        cfg.listen_fd = inherited;
    if (processes > 1) {
        if (cfg.listen_fd < 0 && cfg.port == 0)
            bad_usage("--processes %u needs a fixed --port: each process binds it with "
                      "SO_REUSEPORT (port 0 would give each its own port)", processes);
        cfg.reuse_port = 1;
        greetings_supervise(processes); /* returns in each child */
    }

    /* Keep the core's request timeout (503) well above the greeting delay. */
    if (cfg.request_timeout_ms < app.sleep_ms + 10000u)
        cfg.request_timeout_ms = app.sleep_ms + 10000u;

    int rc;
    srv_server *srv = srv_server_new(engine, &cfg);
    if (srv == NULL) {
        fprintf(stderr, "greetings: out of memory\n");
        return 1;
    }
    srv_route_opts greetings_route, named_route, health_route;
    srv_route_opts_init(&greetings_route);
    greetings_route.method = "GET";
    greetings_route.path = "/greetings";
    greetings_route.handler = handle_greetings;
    greetings_route.ctx = &app;
    greetings_route.flags = greetings_flags;
    named_route = greetings_route;
    named_route.path = "/greetings/{name}";
    srv_route_opts_init(&health_route);
    health_route.method = "GET";
    health_route.path = "/health";
    health_route.handler = handle_health;
    health_route.flags = health_flags;
    if (srv_route_add(srv, &greetings_route) != 0 || srv_route_add(srv, &named_route) != 0 ||
        srv_route_add(srv, &health_route) != 0) {
        fprintf(stderr, "greetings: cannot register the routes\n");
        srv_server_free(srv);
        return 1;
    }
    if (cors_origins != NULL) {
        srv_cors_opts cors;
        srv_cors_opts_init(&cors);
        cors.allowed_origins = cors_origins;
        cors.allowed_methods = "GET, HEAD";
        rc = srv_cors_add(srv, &cors);
        if (rc != 0) {
            fprintf(stderr, "greetings: --cors '%s': %s (give origins such as "
                    "https://app.example.com, comma-separated, or *)\n", cors_origins,
                    srv_strerror(rc));
            srv_server_free(srv);
            return 2;
        }
    }
    if (static_dir != NULL) {
        srv_static_opts so;
        srv_static_opts_init(&so);
        so.prefix = "/static";
        so.root = static_dir;
        rc = srv_static_add(srv, &so);
        if (rc != 0) {
            fprintf(stderr, "greetings: --static '%s': %s\n", static_dir,
                    rc == SRV_ESYS ? srv_server_last_error(srv) : srv_strerror(rc));
            srv_server_free(srv);
            return 2;
        }
    }
    if (compression) {
        srv_compression_opts z;
        srv_compression_opts_init(&z); /* Spring's defaults: text types, 2 KB */
        if (srv_compression_set(srv, &z) != 0) {
            fprintf(stderr, "greetings: cannot turn compression on\n");
            srv_server_free(srv);
            return 1;
        }
    }
    /* The start line below tells a supervisor (or a test) that we serve: a
     * SIGTERM it sends at once must wait for srv_server_run's handlers, not
     * kill the process with the default action. srv_server_run unblocks. */
    sigset_t run_sigs;
    sigemptyset(&run_sigs);
    sigaddset(&run_sigs, SIGINT);
    sigaddset(&run_sigs, SIGTERM);
    sigaddset(&run_sigs, SIGUSR1);
    if (cfg.tls_cert_file != NULL)
        sigaddset(&run_sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &run_sigs, NULL);
    rc = srv_server_start(srv);
    if (rc != 0) {
        fprintf(stderr, "greetings: %s\n", *srv_server_last_error(srv)
                                                ? srv_server_last_error(srv)
                                                : srv_strerror(rc));
        srv_server_free(srv);
        return 1;
    }
    double startup_ms = (double)(now_ns() - t0) / 1e6;

    int v6 = strchr(cfg.host, ':') != NULL;
    printf("greetings: engine=%s listening on %s://%s%s%s:%d workers=%u mode=%s "
           "greetings-handler=%s startup=%.1fms\n",
           srv_engine_name(engine), cfg.tls_cert_file ? "https" : "http", v6 ? "[" : "", cfg.host, v6 ? "]" : "",
           srv_server_port(srv), cfg.worker_threads, app.async ? "async" : "blocking",
           greetings_flags ? "inline" : "worker", startup_ms);
    fflush(stdout);

    rc = srv_server_run(srv, 10000); /* until SIGINT/SIGTERM, then 10 s grace */
    if (rc != 0)
        fprintf(stderr, "greetings: %s\n", srv_strerror(rc));
    srv_server_free(srv);
    return rc == 0 ? 0 : 1;
}
