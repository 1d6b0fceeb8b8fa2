/*
 * HTTP helpers every layer uses: token and header-token checks, reason
 * phrases, the Date value. A leaf: it calls no other core file.
 */
#include "srv_core.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

bool srv__header_has_token(const char *list, const char *token)
{
    size_t tlen = strlen(token);
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *start = p;
        while (*p && *p != ',')
            p++;
        const char *end = p;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        if ((size_t)(end - start) == tlen && strncasecmp(start, token, tlen) == 0)
            return true;
    }
    return false;
}

/* RFC 9110 5.6.2 tchar: VCHAR except the delimiters "(),/:;<=>?@[\]{}.
 * A bit per byte (bit c & 63 of word c >> 6): every header name and
 * method byte of every request is checked here. */
static const uint64_t srv__tchar_bits[4] = {
    /* 0x00-0x3f: ! # $ % & ' * + - . 0-9 */
    0x03ff6cfa00000000ull,
    /* 0x40-0x7f: A-Z ^ _ ` a-z | ~ */
    0x57ffffffc7fffffeull,
    0,
    0,
};

/* Whether the word may hold a byte below lim or a DEL (exact when it says no). */
static inline bool srv__ctl_in_word(uint64_t x, unsigned lim)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t del = x ^ (0x7f * ones);
    return ((((x - lim * ones) & ~x) | ((del - ones) & ~del)) & highs) != 0;
}

bool srv__http_no_ctl(const char *s, size_t n, bool blank_ok)
{
    /* Eight bytes at a time (the target and every header value of every request pass here;
     * a byte loop was ~12 instructions a byte), the last eight overlapping, a short string
     * padded with 'a': the word test only says whether a byte below lim or a DEL may be
     * there, and when it may the byte loop decides. */
    const unsigned lim = blank_ok ? 0x20 : 0x21;
    size_t i = 0;
    if (n == 0)
        return true; /* s may be NULL */
    if (n >= 8) {
        uint64_t x;
        for (; i + 8 <= n; i += 8) {
            memcpy(&x, s + i, 8);
            if (srv__ctl_in_word(x, lim))
                goto bytes;
        }
        if (i == n)
            return true;
        memcpy(&x, s + n - 8, 8);
        if (!srv__ctl_in_word(x, lim))
            return true;
        i = n - 8;
    } else {
        uint64_t x = 0x6161616161616161ull;
        memcpy(&x, s, n);
        if (!srv__ctl_in_word(x, lim))
            return true;
    }
bytes:
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < lim ? !(blank_ok && c == '\t') : c == 0x7f)
            return false;
    }
    return true;
}

bool srv__http_is_tchar(int c)
{
    return c >= 0 && c < 256 && (srv__tchar_bits[c >> 6] >> (c & 63) & 1) != 0;
}

bool srv__http_is_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!srv__http_is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

const char *srv__status_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

void srv__http_date(char out[SRV__HTTP_DATE_SIZE])
{
    /* Formatted once per second per thread; names spelled out because
     * strftime would follow the application's locale. */
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    static _Thread_local time_t cached_at = (time_t)-1;
    static _Thread_local char cached[SRV__HTTP_DATE_SIZE];
    time_t now = time(NULL);
    if (now != cached_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        char tmp[64]; /* roomy: the compiler cannot bound the int fields */
        snprintf(tmp, sizeof tmp, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
                 tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                 tm.tm_sec);
        memcpy(cached, tmp, SRV__HTTP_DATE_SIZE - 1);
        cached[SRV__HTTP_DATE_SIZE - 1] = '\0';
        cached_at = now;
    }
    memcpy(out, cached, SRV__HTTP_DATE_SIZE);
}
