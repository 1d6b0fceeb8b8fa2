/* Configuration defaults (srv_config_init) and validation at start. */
#include "srv_core.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stddef.h>
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

int srv__config_own(char **copy, const char **field)
{
    if (*field == NULL)
        return 0;
    *copy = strdup(*field);
    if (*copy == NULL)
        return SRV_ENOMEM;
    *field = *copy;
    return 0;
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
    cfg->listen_fd = -1;
    cfg->stream_buffer_bytes = 64u * 1024;
}

/* Upper bounds that catch unit mix-ups (seconds for ms, bytes for KiB)
 * without limiting real deployments. */
#define SRV__MAX_THREADS 100000u
#define SRV__MAX_TIMEOUT_MS (24u * 3600u * 1000u)
#define SRV__MAX_BYTES ((unsigned long long)(SIZE_MAX / 4))

#define SRV__FIELD(f, k, lo, hi, note)                                                         \
    {#f, (k), offsetof(srv_config, f), sizeof(((srv_config *)0)->f), (lo), (hi), (note)}

/* Every field of srv_config but size, in declaration order: its name, its
 * kind and the range srv_server_start accepts (read by the validation
 * below and by srv_config_from_env, so both say the same). */
const srv__config_field srv__config_fields[] = {
    SRV__FIELD(host, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(port, SRV__FIELD_INT, 0, 65535, "0 (any free port)"),
    SRV__FIELD(worker_threads, SRV__FIELD_UINT, 1, SRV__MAX_THREADS, NULL),
    SRV__FIELD(io_threads, SRV__FIELD_UINT, 0, 1024, "0 (one per CPU)"),
    SRV__FIELD(max_connections, SRV__FIELD_UINT, 1, UINT_MAX, NULL),
    SRV__FIELD(backlog, SRV__FIELD_INT, 1, INT_MAX, NULL),
    SRV__FIELD(header_timeout_ms, SRV__FIELD_UINT, 1, SRV__MAX_TIMEOUT_MS, NULL),
    SRV__FIELD(keepalive_timeout_ms, SRV__FIELD_UINT, 1, SRV__MAX_TIMEOUT_MS, NULL),
    SRV__FIELD(request_timeout_ms, SRV__FIELD_UINT, 1, SRV__MAX_TIMEOUT_MS, NULL),
    SRV__FIELD(max_header_bytes, SRV__FIELD_SIZE, 256, SRV__MAX_BYTES, NULL),
    SRV__FIELD(max_uri_bytes, SRV__FIELD_SIZE, 16, SRV__MAX_BYTES, NULL),
    /* Bodies are buffered in memory; the cap also keeps size arithmetic on
     * network-supplied lengths far from overflow. */
    SRV__FIELD(max_body_bytes, SRV__FIELD_SIZE, 0, SRV__MAX_BYTES, NULL),
    SRV__FIELD(access_log, SRV__FIELD_ACCESS_LOG, 0, 3, NULL),
    SRV__FIELD(server_name, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(worker_threads_min, SRV__FIELD_UINT, 0, SRV__MAX_THREADS, NULL),
    SRV__FIELD(worker_idle_timeout_ms, SRV__FIELD_UINT, 1, SRV__MAX_TIMEOUT_MS, NULL),
    SRV__FIELD(max_queued, SRV__FIELD_UINT, 1, UINT_MAX, NULL),
    SRV__FIELD(nonblocking_warn_ms, SRV__FIELD_UINT, 0, SRV__MAX_TIMEOUT_MS, "0 (off)"),
    SRV__FIELD(tls_cert_file, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(tls_key_file, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(tls_cert_pem, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(tls_key_pem, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(tls_min_version, SRV__FIELD_TLS_VERSION, SRV_TLS_1_2, SRV_TLS_1_3, NULL),
    SRV__FIELD(tls_ciphers, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(tls_client_ca_file, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(trusted_proxies, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(access_log_path, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(reuse_port, SRV__FIELD_BOOL, 0, 1, NULL),
    SRV__FIELD(listen_fd, SRV__FIELD_FD, 0, INT_MAX, NULL),
    SRV__FIELD(ready_path, SRV__FIELD_STRING, 0, 0, NULL),
    SRV__FIELD(drain_ms, SRV__FIELD_UINT, 0, SRV__MAX_TIMEOUT_MS, "0 (no drain)"),
    SRV__FIELD(metrics_path, SRV__FIELD_STRING, 0, 0, NULL),
    /* A streamed response's buffer: at least a chunk head and some data,
     * at most what a client that never reads may make us hold. */
    SRV__FIELD(stream_buffer_bytes, SRV__FIELD_SIZE, 1024, 64u * 1024 * 1024, NULL),
    SRV__FIELD(error_format, SRV__FIELD_ERROR_FORMAT, 0, 1, NULL),
};
const size_t srv__config_field_count = sizeof srv__config_fields / sizeof srv__config_fields[0];

unsigned long long srv__config_field_get(const srv_config *c, const srv__config_field *f)
{
    const char *p = (const char *)c + f->offset;
    switch (f->kind) {
    case SRV__FIELD_INT:
    case SRV__FIELD_BOOL:
    case SRV__FIELD_ACCESS_LOG:
    case SRV__FIELD_ERROR_FORMAT:
    case SRV__FIELD_FD: {
        int v;
        memcpy(&v, p, sizeof v);
        return v < 0 ? ULLONG_MAX : (unsigned long long)v; /* negative: out of any range */
    }
    case SRV__FIELD_UINT:
    case SRV__FIELD_TLS_VERSION: {
        unsigned v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case SRV__FIELD_SIZE: {
        size_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    case SRV__FIELD_STRING:
        break;
    }
    return 0;
}

/* "port 70000 is out of range: use 0 (any free port) to 65535" */
void srv__config_field_range(const srv__config_field *f, char *buf, size_t cap)
{
    if (f->kind == SRV__FIELD_BOOL)
        snprintf(buf, cap, "use 0 (off) or 1 (on)");
    else if (f->kind == SRV__FIELD_ACCESS_LOG)
        snprintf(buf, cap, "use off, common, combined or json (0 to 3)");
    else if (f->kind == SRV__FIELD_ERROR_FORMAT)
        snprintf(buf, cap, "use text or json (0 or 1)");
    else if (f->kind == SRV__FIELD_TLS_VERSION)
        snprintf(buf, cap, "use SRV_TLS_1_2 (0x0303) or SRV_TLS_1_3 (0x0304)");
    else if (f->note != NULL)
        snprintf(buf, cap, "use %s to %llu", f->note, f->max);
    else
        snprintf(buf, cap, "use %llu to %llu", f->min, f->max);
}

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
    for (size_t i = 0; i < srv__config_field_count; i++) {
        const srv__config_field *f = &srv__config_fields[i];
        /* Strings are checked below, the TLS fields by srv__tls_start; a
         * flag is on for any non-zero value. */
        if (f->kind == SRV__FIELD_STRING || f->kind == SRV__FIELD_TLS_VERSION ||
            f->kind == SRV__FIELD_BOOL || f->kind == SRV__FIELD_ACCESS_LOG ||
            f->kind == SRV__FIELD_FD)
            continue; /* access_log: by srv__access_log_start; listen_fd: by srv__listen */
        unsigned long long v = srv__config_field_get(c, f);
        if (v < f->min || v > f->max) {
            char range[96];
            srv__config_field_range(f, range, sizeof range);
            char shown[32];
            if (f->kind == SRV__FIELD_INT || f->kind == SRV__FIELD_ERROR_FORMAT) {
                /* a negative int reads as ULLONG_MAX */
                int iv;
                memcpy(&iv, (const char *)c + f->offset, sizeof iv);
                snprintf(shown, sizeof shown, "%d", iv);
            } else {
                snprintf(shown, sizeof shown, "%llu", v);
            }
            snprintf(srv->error, sizeof srv->error, "%s %s is out of range: %s", f->name, shown,
                     range);
            return SRV_EINVAL;
        }
    }

    if (c->worker_threads_min > c->worker_threads)
        c->worker_threads_min = c->worker_threads;

    /* Sent as a header value: a control byte would split or corrupt the
     * response head (header injection), whatever the engine. */
    for (const char *p = c->server_name; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            snprintf(srv->error, sizeof srv->error,
                     "server_name holds a control character (byte 0x%02x): it is sent as the "
                     "Server header value", (unsigned)(unsigned char)*p);
            return SRV_EINVAL;
        }
    }

    if (c->io_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c->io_threads = n > 0 ? (unsigned)n : 1;
    }
    return 0;
}
