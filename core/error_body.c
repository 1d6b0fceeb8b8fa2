/*
 * The body of the answers the core makes itself (routing's 404/405, the
 * 400/413/431 to bad input, the 503s of timeouts and stops, static files'
 * 403/404...), in the format srv_config.error_format names: a line of text,
 * or Spring Boot's default error JSON so that a JSON API answers in one type.
 */
#include "srv_core.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

int srv_server_set_error_body(srv_server *srv, srv_error_body_fn fn, void *ctx)
{
    if (srv == NULL)
        return SRV_EINVAL;
    if (atomic_load(&srv->state) != SRV__NEW)
        return SRV_ESTATE;
    srv->error_body = fn;
    srv->error_body_ctx = ctx;
    return 0;
}

size_t srv__error_body(const srv_request *req, int status, char *out, size_t cap,
                       const char **content_type)
{
    const char *reason = srv__status_reason(status);
    srv_server *srv = req->srv;
    if (srv->error_body != NULL) {
        const char *ct = NULL;
        size_t n = srv->error_body(req, status, out, cap - 1, &ct, srv->error_body_ctx);
        if (n != SRV_ERROR_BODY_DEFAULT && n < cap) {
            out[n] = '\0';
            *content_type = ct;
            return n;
        }
    }
    if (srv->cfg.error_format != SRV_ERROR_FORMAT_JSON) {
        *content_type = "text/plain; charset=utf-8";
        int n = snprintf(out, cap, "%d %s\n", status, reason);
        return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    time_t sec = tv.tv_sec;
    gmtime_r(&sec, &tm);
    /* The path as routed, else the target's path as sent (a request the
     * core refused before parsing it), else "". */
    const char *path = req->path;
    char raw[1024] = "";
    if (path == NULL && req->target != NULL) {
        size_t n = strcspn(req->target, "?#");
        if (n >= sizeof raw)
            n = sizeof raw - 1;
        memcpy(raw, req->target, n);
        raw[n] = '\0';
    }
    char jpath[3200], jreason[128];
    srv__json_string(jpath, sizeof jpath, path != NULL ? path : raw, 512);
    srv__json_string(jreason, sizeof jreason, reason, 64);
    *content_type = "application/json";
    int n = snprintf(out, cap,
                     "{\"timestamp\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"status\":%d,"
                     "\"error\":%s,\"path\":%s}",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), status, jreason, jpath);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
