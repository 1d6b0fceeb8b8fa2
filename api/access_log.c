/* Access log: one Common Log Format line per response, written with one
 * write(2) so lines from concurrent threads do not interleave. */
#include "srv_core.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

void srv__access_log(const srv_request *req)
{
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "%s - - [%02d/%s/%04d:%02d:%02d:%02d +0000] \"%s %.512s %s\" %d %zu %llums\n",
                     req->peer, tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, req->method ? req->method : "-",
                     req->target ? req->target : "-", srv_request_protocol(req), req->status,
                     req->is_head ? (size_t)0 : req->resp_len,
                     (unsigned long long)(srv__now_ms() - req->started_ms));
    if (n > 0) {
        size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
        ssize_t w = write(STDERR_FILENO, line, len);
        (void)w; /* a lost log line must not fail the response */
    }
}
