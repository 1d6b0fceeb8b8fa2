/*
 * srv_config_from_env: every srv_config field from PREFIX + its name in
 * upper case (SRV_PORT, SRV_WORKER_THREADS, SRV_TLS_CERT_FILE...), the way
 * Spring Boot binds server.* properties from the environment. The field
 * table and its ranges are config.c's, the ones srv_server_start checks,
 * so a value accepted here is not refused at start for its range.
 */
#include "srv_core.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

/* The library's SRV_ variables that are no srv_config field: the engine
 * srv_engine_select picks, and mhd's diagnostic log (engines/mhd.c). */
static const char *const srv__env_own[] = {"ENGINE", "MHD_LOG"};


static int srv__env_fail(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int srv__env_fail(char *err, size_t cap, const char *fmt, ...)
{
    if (err != NULL && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return SRV_EINVAL;
}

/* A whole number: digits only (no sign, space or base prefix), and for
 * byte sizes an optional binary unit K, M or G (KiB, MiB, GiB). */
static int srv__env_number(const char *text, int units, unsigned long long *out)
{
    if (!isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0)
        return -1;
    unsigned shift = 0;
    if (units && *end != '\0' && end[1] == '\0') {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
        end++;
    }
    if (*end != '\0' || (shift && v > (ULLONG_MAX >> shift)))
        return -1;
    *out = v << shift;
    return 0;
}

static int srv__env_bool(const char *text, int *out)
{
    static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(text, on[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(text, off[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

/* One field from its variable's value. */
static int srv__env_field(srv_config *cfg, const srv__config_field *f, const char *var,
                          const char *text, char *err, size_t cap)
{
    char *p = (char *)cfg + f->offset;
    switch (f->kind) {
    case SRV__FIELD_STRING: {
        int is_host = strcmp(f->name, "host") == 0;
        if (is_host) {
            unsigned char a[sizeof(struct in6_addr)];
            if (inet_pton(AF_INET, text, a) != 1 && inet_pton(AF_INET6, text, a) != 1)
                return srv__env_fail(err, cap, "%s=\"%s\" is not a numeric IPv4 or IPv6 address: "
                                     "use e.g. 0.0.0.0, :: or 127.0.0.1", var, text);
        }
        /* Empty clears an optional string (server_name: no Server header). */
        const char *v = text[0] == '\0' ? (strcmp(f->name, "server_name") == 0 ? "" : NULL) : text;
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case SRV__FIELD_BOOL: {
        int v;
        if (srv__env_bool(text, &v) != 0)
            return srv__env_fail(err, cap, "%s=\"%s\" is not valid: use 1, true, yes, on, or 0, "
                                 "false, no, off", var, text);
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case SRV__FIELD_ACCESS_LOG: {
        static const char *const names[] = {"off", "common", "combined", "json"};
        int v = -1, b;
        for (int i = 0; i < 4; i++)
            if (strcasecmp(text, names[i]) == 0 || (text[0] == '0' + i && text[1] == '\0'))
                v = i;
        if (v < 0 && srv__env_bool(text, &b) == 0)
            v = b ? SRV_ACCESS_LOG_COMMON : SRV_ACCESS_LOG_OFF; /* on/off as before 0.4 */
        if (v < 0)
            return srv__env_fail(err, cap, "%s=\"%s\" is not valid: use off, common, combined "
                                 "or json (or 0 to 3; on/off)", var, text);
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case SRV__FIELD_ERROR_FORMAT: {
        int v = strcasecmp(text, "text") == 0 || strcmp(text, "0") == 0   ? SRV_ERROR_FORMAT_TEXT
                : strcasecmp(text, "json") == 0 || strcmp(text, "1") == 0 ? SRV_ERROR_FORMAT_JSON
                                                                          : -1;
        if (v < 0)
            return srv__env_fail(err, cap, "%s=\"%s\" is not valid: use text or json", var, text);
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case SRV__FIELD_TLS_VERSION: {
        unsigned v;
        if (strcmp(text, "1.2") == 0 || strcasecmp(text, "TLSv1.2") == 0)
            v = SRV_TLS_1_2;
        else if (strcmp(text, "1.3") == 0 || strcasecmp(text, "TLSv1.3") == 0)
            v = SRV_TLS_1_3;
        else
            return srv__env_fail(err, cap, "%s=\"%s\" is not valid: use 1.2 or 1.3", var, text);
        memcpy(p, &v, sizeof v);
        return 0;
    }
    case SRV__FIELD_INT:
    case SRV__FIELD_UINT:
    case SRV__FIELD_SIZE:
    case SRV__FIELD_FD: /* a descriptor number; -1 is the unset default */
        break;
    }
    unsigned long long v;
    char range[96];
    srv__config_field_range(f, range, sizeof range);
    int sized = f->kind == SRV__FIELD_SIZE;
    if (srv__env_number(text, sized, &v) != 0)
        return srv__env_fail(err, cap, "%s=\"%s\" is not a whole number%s: %s", var, text,
                             sized ? " of bytes (units K, M, G allowed)" : "", range);
    if (v < f->min || v > f->max)
        return srv__env_fail(err, cap, "%s=\"%s\" is out of range: %s", var, text, range);
    if (f->kind == SRV__FIELD_INT || f->kind == SRV__FIELD_FD) {
        int iv = (int)v;
        memcpy(p, &iv, sizeof iv);
    } else if (f->kind == SRV__FIELD_UINT) {
        unsigned uv = (unsigned)v;
        memcpy(p, &uv, sizeof uv);
    } else {
        size_t sv = (size_t)v;
        memcpy(p, &sv, sizeof sv);
    }
    return 0;
}

/* Upper-cases the field name after the prefix: "SRV_" + "max_queued". */
static void srv__env_name(char *buf, size_t cap, const char *prefix, const char *field)
{
    size_t n = (size_t)snprintf(buf, cap, "%s", prefix);
    for (; *field != '\0' && n + 1 < cap; field++)
        buf[n++] = (char)toupper((unsigned char)*field);
    buf[n < cap ? n : cap - 1] = '\0';
}

int srv_config_from_env(srv_config *cfg, const char *prefix, char *err, size_t err_size)
{
    if (err != NULL && err_size > 0)
        err[0] = '\0';
    if (cfg == NULL || prefix == NULL || cfg->size < SRV__CONFIG_MIN_SIZE ||
        cfg->size > SRV__CONFIG_MAX_SIZE)
        return srv__env_fail(err, err_size, "srv_config_from_env: cfg must be set up by "
                             "srv_config_init first, and prefix must not be NULL");
    size_t plen = strlen(prefix);
    if (plen > 64)
        return srv__env_fail(err, err_size, "srv_config_from_env: prefix longer than 64 bytes");
    char var[128];
    for (size_t i = 0; i < srv__config_field_count; i++) {
        const srv__config_field *f = &srv__config_fields[i];
        srv__env_name(var, sizeof var, prefix, f->name);
        const char *text = getenv(var);
        if (text == NULL)
            continue;
        /* A field past the caller's struct (an older header) is not
         * theirs to set; srv_server_new gives it its default. */
        if (f->offset + f->width > cfg->size)
            continue;
        int rc = srv__env_field(cfg, f, var, text, err, err_size);
        if (rc != 0)
            return rc;
    }
    /* A misspelt variable would otherwise be ignored without a word
     * (SRV_WORKER_THREAD=50 running with 200 workers). */
    if (plen == 0)
        return 0; /* every variable matches an empty prefix: nothing to check */
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, prefix, plen) != 0)
            continue;
        const char *name = *e + plen, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int known = 0;
        for (size_t i = 0; i < srv__config_field_count && !known; i++) {
            srv__env_name(var, sizeof var, prefix, srv__config_fields[i].name);
            known = strlen(var) == plen + len && strncmp(var + plen, name, len) == 0;
        }
        for (size_t i = 0; i < sizeof srv__env_own / sizeof srv__env_own[0] && !known; i++)
            known = strcmp(prefix, "SRV_") == 0 && strlen(srv__env_own[i]) == len &&
                    strncmp(name, srv__env_own[i], len) == 0;
        if (!known)
            return srv__env_fail(err, err_size, "%s%.*s=\"%.64s\" is not a libsrv setting: the "
                                 "%s prefix is read as srv_config fields (e.g. %sPORT, "
                                 "%sWORKER_THREADS; the list is in srv.h)", prefix,
                                 (int)(len > 64 ? 64 : len), name, eq ? eq + 1 : "", prefix,
                                 prefix, prefix);
    }
    return 0;
}
