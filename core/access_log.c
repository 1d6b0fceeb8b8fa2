/* Access log: one Common Log Format line per response, written with one
 * write(2) so lines from concurrent threads do not interleave. */
#include "srv_core.h"

#include <stdbool.h>
#include <stdio.h>
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

void srv__access_log(const srv_request *req)
{
    char method[64 * 4 + 1], target[512 * 4 + 1];
    srv__log_escape(method, sizeof method, req->method ? req->method : "-", 64);
    srv__log_escape(target, sizeof target, req->target ? req->target : "-", 512);
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char line[3072];
    int n = snprintf(line, sizeof line,
                     "%s - - [%02d/%s/%04d:%02d:%02d:%02d +0000] \"%s %s %s\" %d %zu %llums\n",
                     req->client, tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, method, target, srv_request_protocol(req), req->status,
                     req->is_head ? (size_t)0 : req->resp_len,
                     (unsigned long long)(srv__now_ms() - req->started_ms));
    if (n > 0) {
        size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
        ssize_t w = write(STDERR_FILENO, line, len);
        (void)w; /* a lost log line must not fail the response */
    }
}
