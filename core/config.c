/* Configuration defaults (srv_config_init) and validation at start. */
#include "srv_core.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void srv_config_init_sized(srv_config *cfg, size_t size)
{
    if (cfg == NULL || size < SRV__CONFIG_MIN_SIZE)
        return;
    srv_config d;
    srv__config_defaults(&d);
    /* An older caller's struct is a prefix of ours: fill only that. */
    memcpy(cfg, &d, size < sizeof d ? size : sizeof d);
    if (size > sizeof d) /* a newer header: zero what this libsrv does not know */
        memset((char *)cfg + sizeof d, 0, size - sizeof d);
    cfg->size = size;
}

int srv__config_copy(srv_config *out, const srv_config *in)
{
    srv__config_defaults(out);
    if (in == NULL)
        return 0;
    if (in->size < SRV__CONFIG_MIN_SIZE || in->size > SRV__CONFIG_MAX_SIZE)
        return SRV_EINVAL;
    memcpy(out, in, in->size < sizeof *out ? in->size : sizeof *out);
    out->size = sizeof *out;
    return 0;
}

void srv__config_defaults(srv_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->size = sizeof *cfg;
    cfg->host = "0.0.0.0";
    cfg->port = 8080;
    cfg->worker_threads = 200;
    cfg->io_threads = 0;
    cfg->max_connections = 10000;
    cfg->backlog = 4096;
    cfg->header_timeout_ms = 20000;
    cfg->keepalive_timeout_ms = 20000;
    cfg->request_timeout_ms = 60000;
    cfg->max_header_bytes = 8192;
    cfg->max_uri_bytes = 8192;
    cfg->max_body_bytes = 2u * 1024 * 1024;
    cfg->access_log = 0;
    cfg->server_name = "libsrv";
    cfg->worker_threads_min = 10;
    cfg->worker_idle_timeout_ms = 60000;
    cfg->max_queued = 10000;
    cfg->nonblocking_warn_ms = 200;
    cfg->tls_min_version = SRV_TLS_1_2;
    cfg->stream_buffer_bytes = 64u * 1024;
}

/* Upper bounds that catch unit mix-ups (seconds for ms, bytes for KiB)
 * without limiting real deployments. */
#define SRV__MAX_THREADS 100000u
#define SRV__MAX_TIMEOUT_MS (24u * 3600u * 1000u)
#define SRV__MAX_BYTES (SIZE_MAX / 4)

#define SRV__CHECK(cond, ...)                                         \
    do {                                                              \
        if (!(cond)) {                                                \
            snprintf(srv->error, sizeof srv->error, __VA_ARGS__);     \
            return SRV_EINVAL;                                        \
        }                                                             \
    } while (0)

int srv__config_validate(srv_server *srv)
{
    srv_config *c = &srv->cfg;
    unsigned char addr[sizeof(struct in6_addr)];

    if (inet_pton(AF_INET, c->host, addr) != 1 && inet_pton(AF_INET6, c->host, addr) != 1) {
        snprintf(srv->error, sizeof srv->error,
                 "host \"%s\" is not a numeric IPv4 or IPv6 address (e.g. 0.0.0.0, ::, 127.0.0.1)",
                 c->host);
        return SRV_EADDR;
    }
    SRV__CHECK(c->port >= 0 && c->port <= 65535,
               "port %d is out of range: use 0 (any free port) to 65535", c->port);
    SRV__CHECK(c->worker_threads >= 1 && c->worker_threads <= SRV__MAX_THREADS,
               "worker_threads %u is out of range: use 1 to %u", c->worker_threads,
               SRV__MAX_THREADS);
    SRV__CHECK(c->worker_idle_timeout_ms >= 1 && c->worker_idle_timeout_ms <= SRV__MAX_TIMEOUT_MS,
               "worker_idle_timeout_ms %u is out of range: use 1 to %u",
               c->worker_idle_timeout_ms, SRV__MAX_TIMEOUT_MS);
    SRV__CHECK(c->max_queued >= 1, "max_queued must be at least 1");
    SRV__CHECK(c->nonblocking_warn_ms <= SRV__MAX_TIMEOUT_MS,
               "nonblocking_warn_ms %u is out of range: use 0 (off) to %u", c->nonblocking_warn_ms,
               SRV__MAX_TIMEOUT_MS);
    SRV__CHECK(c->io_threads <= 1024, "io_threads %u is out of range: use 0 (one per CPU) to 1024",
               c->io_threads);
    SRV__CHECK(c->max_connections >= 1, "max_connections must be at least 1");
    SRV__CHECK(c->backlog >= 1, "backlog %d must be at least 1", c->backlog);
    SRV__CHECK(c->header_timeout_ms >= 1 && c->header_timeout_ms <= SRV__MAX_TIMEOUT_MS,
               "header_timeout_ms %u is out of range: use 1 to %u", c->header_timeout_ms,
               SRV__MAX_TIMEOUT_MS);
    SRV__CHECK(c->keepalive_timeout_ms >= 1 && c->keepalive_timeout_ms <= SRV__MAX_TIMEOUT_MS,
               "keepalive_timeout_ms %u is out of range: use 1 to %u", c->keepalive_timeout_ms,
               SRV__MAX_TIMEOUT_MS);
    SRV__CHECK(c->request_timeout_ms >= 1 && c->request_timeout_ms <= SRV__MAX_TIMEOUT_MS,
               "request_timeout_ms %u is out of range: use 1 to %u", c->request_timeout_ms,
               SRV__MAX_TIMEOUT_MS);
    SRV__CHECK(c->max_header_bytes >= 256, "max_header_bytes %zu is below the minimum of 256",
               c->max_header_bytes);
    SRV__CHECK(c->max_uri_bytes >= 16, "max_uri_bytes %zu is below the minimum of 16",
               c->max_uri_bytes);
    /* Bodies are buffered in memory; the cap also keeps size arithmetic on
     * network-supplied lengths far from overflow. */
    SRV__CHECK(c->max_body_bytes <= SRV__MAX_BYTES,
               "max_body_bytes %zu is over the maximum of %zu", c->max_body_bytes,
               (size_t)SRV__MAX_BYTES);
    SRV__CHECK(c->max_header_bytes <= SRV__MAX_BYTES && c->max_uri_bytes <= SRV__MAX_BYTES,
               "max_header_bytes and max_uri_bytes must be at most %zu", (size_t)SRV__MAX_BYTES);

    SRV__CHECK(c->stream_buffer_bytes >= 1024 && c->stream_buffer_bytes <= 64u * 1024 * 1024,
               "stream_buffer_bytes %zu is out of range: use 1024 to %u", c->stream_buffer_bytes,
               64u * 1024 * 1024);

    if (c->worker_threads_min > c->worker_threads)
        c->worker_threads_min = c->worker_threads;

    /* Sent as a header value: a control byte would split or corrupt the
     * response head (header injection), whatever the engine. */
    for (const char *p = c->server_name; *p != '\0'; p++)
        SRV__CHECK((unsigned char)*p >= 0x20 && *p != 0x7f,
                   "server_name holds a control character (byte 0x%02x): it is sent as the "
                   "Server header value", (unsigned)(unsigned char)*p);

    if (c->io_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c->io_threads = n > 0 ? (unsigned)n : 1;
    }
    return 0;
}
