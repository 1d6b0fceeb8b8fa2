/* Access log: one line per delivered response, in Apache's Common or
 * Combined format or as a JSON object, to stderr or a file. Each line is
 * one write(2) on an O_APPEND descriptor, so lines from concurrent threads
 * never interleave. srv_server_reopen_log (SIGUSR1 in srv_server_run)
 * swaps the file behind the same descriptor number with dup2, which is
 * atomic: a thread writing at that moment writes whole to the old file or
 * the new one, never to a closed or reused descriptor (logrotate's
 * create-then-signal). */
#include "srv_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Copy s into out (NUL-terminated, at most max source bytes) escaping as
 * nginx does: '"', '\\', control bytes and bytes >= 0x7f become \xHH, so a
 * request target cannot forge a field or a line of the log. */
static void srv__log_escape(char *out, size_t cap, const char *s, size_t max)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; s[i] != '\0' && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        bool esc = c < 0x20 || c >= 0x7f || c == '"' || c == '\\';
        if (o + (esc ? 4 : 1) >= cap)
            break;
        if (esc) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
}

/* The length of the valid UTF-8 sequence at s (1-4), 0 if it is not one. */
static size_t srv__utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (n == 0 || (n == 3 && s[0] > 0xef))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) || /* overlong, surrogate */
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))   /* overlong, > U+10FFFF */
        return 0;
    return n;
}

/* s as a JSON string ("..." with its quotes; null when s is NULL) into out:
 * UTF-8 passes through, invalid bytes become U+FFFD, quotes, backslashes and
 * control bytes are escaped, so any request yields one valid JSON line. */
void srv__json_string(char *out, size_t cap, const char *s, size_t max)
{
    if (s == NULL) {
        snprintf(out, cap, "null");
        return;
    }
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    out[o++] = '"';
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; p[i] != '\0' && i < max;) {
        unsigned char c = p[i];
        size_t n = srv__utf8_len(p + i);
        if (o + 8 >= cap)
            break;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(out + o, "\\u00", 4);
            o += 4;
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else if (n == 0) {
            memcpy(out + o, "\\ufffd", 6);
            o += 6;
            i++;
            continue;
        } else {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
            continue;
        }
        i++;
    }
    out[o++] = '"';
    out[o] = '\0';
}

int srv__access_log_init(srv_server *srv)
{
    srv->log_fd = -1;
    return srv__config_own(&srv->log_path, &srv->cfg.access_log_path);
}

static int srv__log_open(srv_server *srv, int *fd)
{
    *fd = open(srv->log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0) {
        srv__server_set_error(srv, "access_log_path \"%s\": cannot open it for appending: %s",
                              srv->log_path, strerror(errno));
        return SRV_ESYS;
    }
    return 0;
}

int srv__access_log_start(srv_server *srv)
{
    int mode = srv->cfg.access_log;
    if (mode < SRV_ACCESS_LOG_OFF || mode > SRV_ACCESS_LOG_JSON) {
        srv__server_set_error(srv, "access_log %d is not SRV_ACCESS_LOG_OFF (0), _COMMON (1), "
                              "_COMBINED (2) or _JSON (3)", mode);
        return SRV_EINVAL;
    }
    if (srv->log_path == NULL || mode == SRV_ACCESS_LOG_OFF)
        return 0;
    return srv__log_open(srv, &srv->log_fd);
}

void srv__access_log_free(srv_server *srv)
{
    if (srv->log_fd >= 0)
        close(srv->log_fd);
    srv->log_fd = -1;
    free(srv->log_path);
    srv->log_path = NULL;
}

int srv_server_reopen_log(srv_server *srv)
{
    if (srv == NULL)
        return SRV_EINVAL;
    if (srv->log_fd < 0)
        return 0; /* stderr, or no log: nothing to reopen */
    int fd;
    int rc = srv__log_open(srv, &fd);
    if (rc != 0)
        return rc; /* the old file stays in use */
    if (dup2(fd, srv->log_fd) < 0) {
        srv__server_set_error(srv, "access log reopen: dup2: %s", strerror(errno));
        close(fd);
        return SRV_ESYS;
    }
    close(fd);
    return 0;
}

void srv__access_log(const srv_request *req)
{
    const srv_server *srv = req->srv;
    int mode = srv->cfg.access_log;
    unsigned long long bytes = srv__response_bytes_sent(req);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    const char *referer = srv_request_header(req, "referer");
    const char *agent = srv_request_header(req, "user-agent");
    char line[12288];
    int n;
    if (mode == SRV_ACCESS_LOG_JSON) {
        char client[80], peer[80], scheme[16], host[1600], method[400], target[3100],
            ref[3100], ua[1600];
        srv__json_string(client, sizeof client, srv__request_client_text(req), 64);
        srv__json_string(peer, sizeof peer, srv__request_peer_text(req), 64);
        srv__json_string(scheme, sizeof scheme, srv_request_scheme(req), 8);
        srv__json_string(host, sizeof host, srv_request_host(req), 256);
        srv__json_string(method, sizeof method, req->method, 64);
        srv__json_string(target, sizeof target, req->target, 512);
        srv__json_string(ref, sizeof ref, referer, 512);
        srv__json_string(ua, sizeof ua, agent, 256);
        n = snprintf(line, sizeof line,
                     "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02dZ\",\"client\":%s,\"peer\":%s,"
                     "\"scheme\":%s,\"host\":%s,\"method\":%s,\"target\":%s,\"protocol\":\"%s\","
                     "\"status\":%d,\"bytes\":%llu,\"duration_ms\":%llu,\"referer\":%s,"
                     "\"user_agent\":%s}\n",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, client, peer, scheme, host, method, target,
                     srv_request_protocol(req), req->status, bytes,
                     (unsigned long long)(srv__now_ms() - req->started_ms), ref, ua);
    } else {
        static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
        char method[64 * 4 + 1], target[512 * 4 + 1], size[24];
        srv__log_escape(method, sizeof method, req->method ? req->method : "-", 64);
        srv__log_escape(target, sizeof target, req->target ? req->target : "-", 512);
        if (bytes == 0)
            snprintf(size, sizeof size, "-"); /* CLF's %b */
        else
            snprintf(size, sizeof size, "%llu", bytes);
        n = snprintf(line, sizeof line,
                     "%s - - [%02d/%s/%04d:%02d:%02d:%02d +0000] \"%s %s %s\" %d %s",
                     srv__request_client_text(req), tm.tm_mday, months[tm.tm_mon],
                     tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec, method, target,
                     srv_request_protocol(req), req->status, size);
        if (n > 0 && (size_t)n < sizeof line && mode == SRV_ACCESS_LOG_COMBINED) {
            char ref[512 * 4 + 1], ua[256 * 4 + 1];
            srv__log_escape(ref, sizeof ref, referer ? referer : "-", 512);
            srv__log_escape(ua, sizeof ua, agent ? agent : "-", 256);
            n += snprintf(line + n, sizeof line - (size_t)n, " \"%s\" \"%s\"", ref, ua);
        }
        if (n > 0 && (size_t)n < sizeof line - 1) {
            line[n++] = '\n';
            line[n] = '\0';
        }
    }
    if (n > 0) {
        size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
        ssize_t w = write(srv->log_fd >= 0 ? srv->log_fd : STDERR_FILENO, line, len);
        (void)w; /* a lost log line must not fail the response */
    }
}
