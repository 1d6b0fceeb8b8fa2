/*
 * The pure HTTP parts of serving static files (static.c): the type by
 * extension, ETag and HTTP-date text, If-None-Match / If-Range matching,
 * Range parsing (RFC 9110 sections 13 and 14) and the path check. No I/O,
 * no server state: unit-tested in tests/unit/test_static.c.
 */
#include "srv_core.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const struct {
    const char *ext;
    const char *type;
} srv__mime_table[] = {
    {"html", "text/html; charset=utf-8"},
    {"htm", "text/html; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"txt", "text/plain; charset=utf-8"},
    {"md", "text/markdown; charset=utf-8"},
    {"csv", "text/csv; charset=utf-8"},
    {"xml", "application/xml"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"avif", "image/avif"},
    {"ico", "image/x-icon"},
    {"bmp", "image/bmp"},
    {"wasm", "application/wasm"},
    {"pdf", "application/pdf"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"tar", "application/x-tar"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ttf", "font/ttf"},
    {"otf", "font/otf"},
    {"mp3", "audio/mpeg"},
    {"ogg", "audio/ogg"},
    {"wav", "audio/wav"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"webmanifest", "application/manifest+json"},
};

const char *srv__static_mime(const char *name)
{
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    const char *dot = strrchr(base, '.');
    if (dot != NULL && dot != base) /* ".bashrc" has no extension */
        for (size_t i = 0; i < sizeof srv__mime_table / sizeof srv__mime_table[0]; i++)
            if (strcasecmp(dot + 1, srv__mime_table[i].ext) == 0)
                return srv__mime_table[i].type;
    return "application/octet-stream";
}

void srv__static_etag(uint64_t ino, uint64_t size, int64_t mtime_sec, long mtime_nsec,
                      char out[64])
{
    uint64_t ns = (uint64_t)mtime_sec * 1000000000u + (uint64_t)mtime_nsec;
    snprintf(out, 64, "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"", ino, size, ns);
}

static const char srv__days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char srv__months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* Written by hand: strftime's names follow the locale. */
void srv__static_date(int64_t t, char out[30])
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (gmtime_r(&tt, &tm) == NULL)
        memset(&tm, 0, sizeof tm);
    /* The moduli only bound what the compiler must assume. */
    snprintf(out, 30, "%.3s, %02u %.3s %04u %02u:%02u:%02u GMT",
             srv__days[(unsigned)tm.tm_wday % 7], (unsigned)tm.tm_mday % 32,
             srv__months[(unsigned)tm.tm_mon % 12], (unsigned)(tm.tm_year + 1900) % 10000,
             (unsigned)tm.tm_hour % 24, (unsigned)tm.tm_min % 60, (unsigned)tm.tm_sec % 61);
}

static bool srv__digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static int srv__month_at(const char *s)
{
    for (int i = 0; i < 12; i++)
        if (memcmp(s, srv__months[i], 3) == 0)
            return i;
    return -1;
}

/* Seconds since the epoch of a checked UTC time; false when out of range. */
static bool srv__date_make(int year, int mon, int day, int hh, int mm, int ss, int64_t *t)
{
    if (mon < 0 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60 || year < 1900)
        return false;
    struct tm tm = {.tm_year = year - 1900, .tm_mon = mon, .tm_mday = day,
                    .tm_hour = hh, .tm_min = mm, .tm_sec = ss};
    *t = (int64_t)timegm(&tm);
    return true;
}

/* "HH:MM:SS" at s. */
static bool srv__clock_at(const char *s, int *hh, int *mm, int *ss)
{
    return s[2] == ':' && s[5] == ':' && srv__digits(s, 2, hh) && srv__digits(s + 3, 2, mm) &&
           srv__digits(s + 6, 2, ss);
}

/* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT". A two-digit year more than 50
 * years ahead is the last past year with those digits (RFC 9110 5.6.7). */
static bool srv__date_rfc850(const char *s, int64_t *t)
{
    static const char *const days[7] = {"Sunday,",   "Monday,", "Tuesday,", "Wednesday,",
                                        "Thursday,", "Friday,", "Saturday,"};
    size_t dl = 0;
    for (int i = 0; i < 7 && dl == 0; i++)
        if (strncmp(s, days[i], strlen(days[i])) == 0)
            dl = strlen(days[i]);
    const char *p = s + dl;
    int day, yy, hh, mm, ss;
    if (dl == 0 || strlen(p) != 23 || p[0] != ' ' || p[3] != '-' || p[7] != '-' ||
        p[10] != ' ' || strcmp(p + 19, " GMT") != 0 || !srv__digits(p + 1, 2, &day) ||
        !srv__digits(p + 8, 2, &yy) || !srv__clock_at(p + 11, &hh, &mm, &ss))
        return false;
    time_t now = time(NULL);
    struct tm tm;
    int this_year = gmtime_r(&now, &tm) != NULL ? tm.tm_year + 1900 : 2000;
    int year = this_year - this_year % 100 + yy;
    if (year > this_year + 50)
        year -= 100;
    return srv__date_make(year, srv__month_at(p + 4), day, hh, mm, ss, t);
}

/* asctime: "Sun Nov  6 08:49:37 1994" (the day padded with a space). */
static bool srv__date_asctime(const char *s, int64_t *t)
{
    int day, year, hh, mm, ss;
    if (strlen(s) != 24 || s[3] != ' ' || s[7] != ' ' || s[10] != ' ' || s[19] != ' ' ||
        !srv__digits(s + 20, 4, &year) || !srv__clock_at(s + 11, &hh, &mm, &ss))
        return false;
    if (s[8] == ' ' ? !srv__digits(s + 9, 1, &day) : !srv__digits(s + 8, 2, &day))
        return false;
    return srv__date_make(year, srv__month_at(s + 4), day, hh, mm, ss, t);
}

/* An HTTP-date in any of the three forms RFC 9110 5.6.7 has recipients
 * accept: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", what browsers send
 * back), and the obsolete RFC 850 and asctime forms. */
bool srv__static_date_parse(const char *s, int64_t *t)
{
    if (s == NULL)
        return false;
    int day, year, hh, mm, ss;
    if (strlen(s) == 29 && s[3] == ',' && s[4] == ' ' && s[7] == ' ' && s[11] == ' ' &&
        s[16] == ' ' && strcmp(s + 25, " GMT") == 0 && srv__digits(s + 5, 2, &day) &&
        srv__digits(s + 12, 4, &year) && srv__clock_at(s + 17, &hh, &mm, &ss))
        return srv__date_make(year, srv__month_at(s + 8), day, hh, mm, ss, t);
    return srv__date_rfc850(s, t) || srv__date_asctime(s, t);
}

static const char *srv__ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* One entity-tag at p ([W/]"etagc*"): its opaque part (quotes included)
 * in tag and len, and the rest after it; NULL on bad syntax. */
static const char *srv__etag_at(const char *p, bool *weak, const char **tag, size_t *len)
{
    *weak = false;
    if (p[0] == 'W' && p[1] == '/') {
        *weak = true;
        p += 2;
    }
    if (*p != '"')
        return NULL;
    const char *q = p + 1;
    /* etagc: %x21 / %x23-7E / obs-text */
    while (*q != '"') {
        unsigned char c = (unsigned char)*q;
        if (c == '\0' || c < 0x21 || c == 0x7f)
            return NULL;
        q++;
    }
    *tag = p;
    *len = (size_t)(q + 1 - p);
    return q + 1;
}

bool srv__etag_list_match(const char *list, const char *etag)
{
    if (list == NULL || etag == NULL)
        return false;
    const char *p = srv__ows(list);
    if (*p == '*')
        return *srv__ows(p + 1) == '\0';
    const char *want = etag[0] == 'W' && etag[1] == '/' ? etag + 2 : etag;
    size_t want_len = strlen(want);
    while (*p != '\0') {
        if (*p == ',') { /* empty list elements are allowed */
            p = srv__ows(p + 1);
            continue;
        }
        bool weak;
        const char *tag;
        size_t len;
        p = srv__etag_at(p, &weak, &tag, &len);
        if (p == NULL)
            return false;
        if (len == want_len && memcmp(tag, want, len) == 0)
            return true;
        p = srv__ows(p);
        if (*p != ',' && *p != '\0')
            return false;
    }
    return false;
}

bool srv__if_range_match(const char *value, const char *etag, int64_t mtime, int64_t now)
{
    if (value == NULL)
        return true;
    const char *p = srv__ows(value);
    if (*p == '"' || (p[0] == 'W' && p[1] == '/')) {
        bool weak;
        const char *tag;
        size_t len;
        const char *end = srv__etag_at(p, &weak, &tag, &len);
        /* Strong comparison: a weak tag never matches. */
        return end != NULL && *srv__ows(end) == '\0' && !weak && etag[0] == '"' &&
               strlen(etag) == len && memcmp(tag, etag, len) == 0;
    }
    /* A date is only as good as a strong validator (RFC 9110 13.1.5, 8.8.2.2):
     * a file modified within the last second may change again in the same
     * second under the same date, and a range of the new content would be
     * spliced onto the old. Past that, the date must match exactly. */
    int64_t t;
    return srv__static_date_parse(p, &t) && t == mtime && now - mtime > 1;
}

/* Digits at *p as a saturated number (UINT64_MAX past it); false when
 * there is no digit. */
static bool srv__range_num(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
    }
    *p = s;
    *out = v;
    return true;
}

int srv__range_parse(const char *value, uint64_t size, uint64_t *first, uint64_t *last)
{
    if (value == NULL || strncasecmp(value, "bytes=", 6) != 0)
        return SRV__RANGE_NONE;
    const char *p = srv__ows(value + 6);
    int count = 0;
    bool suffix = false, open_end = false;
    uint64_t a = 0, b = 0;
    while (*p != '\0') {
        if (*p == ',') {
            p = srv__ows(p + 1);
            continue;
        }
        uint64_t x = 0, y = 0;
        bool sfx = false, open = false;
        if (*p == '-') {
            p++;
            if (!srv__range_num(&p, &y))
                return SRV__RANGE_NONE;
            sfx = true;
        } else {
            if (!srv__range_num(&p, &x) || *p != '-')
                return SRV__RANGE_NONE;
            p++;
            if (!srv__range_num(&p, &y))
                open = true;
            else if (y < x)
                return SRV__RANGE_NONE; /* invalid: the header is ignored */
        }
        p = srv__ows(p);
        if (*p != ',' && *p != '\0')
            return SRV__RANGE_NONE;
        if (++count == 1) {
            a = x;
            b = y;
            suffix = sfx;
            open_end = open;
        }
    }
    /* Several ranges would need multipart/byteranges: the whole file is
     * a correct answer (RFC 9110 14.2: a server MAY ignore Range). */
    if (count != 1)
        return SRV__RANGE_NONE;
    if (suffix) {
        if (b == 0 || size == 0)
            return SRV__RANGE_UNSAT;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return SRV__RANGE_ONE;
    }
    if (a >= size)
        return SRV__RANGE_UNSAT;
    *first = a;
    *last = open_end || b >= size ? size - 1 : b;
    return SRV__RANGE_ONE;
}

bool srv__static_path_ok(const char *raw_target, const char *value)
{
    if (value == NULL || value[0] == '/')
        return false;
    for (const char *v = value;;) {
        size_t n = strcspn(v, "/");
        if ((n == 1 && v[0] == '.') || (n == 2 && v[0] == '.' && v[1] == '.'))
            return false;
        if (v[n] == '\0')
            break;
        v += n + 1;
    }
    /* An encoded slash would join two raw segments into one decoded
     * value; refused rather than given a meaning. */
    for (const char *t = raw_target; t != NULL && *t != '\0' && *t != '?' && *t != '#'; t++)
        if (t[0] == '%' && t[1] == '2' && (t[2] == 'f' || t[2] == 'F'))
            return false;
    return true;
}
