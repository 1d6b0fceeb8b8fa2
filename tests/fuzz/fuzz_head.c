/*
 * Fuzz target: header validation and the head rules, in the order an
 * engine calls them: srv__request_set_method, srv__request_set_target,
 * srv__request_set_version, srv__request_add_header (each),
 * srv__request_headers_done, srv__request_append_body, then dispatch (404:
 * no routes) or srv__request_fail.
 *
 * Input: byte 0 picks the version (low 2 bits: 1.1, 1.0, 2.0, or byte 1 as
 * major.minor digits) and where the body is split (high bits); then lines
 * split on '\n' (a '\r' stays in the line, so CR in a value is reached):
 * the method, the target, then "name:value" header lines (no ':' means
 * the whole line is a name with an empty value) up to an empty line; the
 * rest is the body, appended in two pieces. A head the core accepts is
 * also read as a handler would (cookies, form fields, Accept).
 */
#include "fuzz_core.h"

#include <stdint.h>
#include <strings.h>

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* The next line of in[*pos..size) without its '\n'; false at the end. */
static bool next_line(const uint8_t *in, size_t size, size_t *pos, const char **line,
                      size_t *len)
{
    if (*pos >= size)
        return false;
    const uint8_t *start = in + *pos;
    const uint8_t *nl = memchr(start, '\n', size - *pos);
    *line = (const char *)start;
    *len = nl ? (size_t)(nl - start) : size - *pos;
    *pos += *len + (nl ? 1 : 0);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned sel = data[0] & 3u;
    unsigned split = data[0] >> 2;
    int major = 1, minor = 1;
    if (sel == 1)
        minor = 0;
    else if (sel == 2)
        major = 2, minor = 0;
    else if (sel == 3)
        major = data[1] >> 4, minor = data[1] & 15;
    size_t pos = 2;

    srv_request *req = srv__request_new(fuzz_core_server(), NULL, 0);
    FUZZ_CHECK(req != NULL);
    const char *line;
    size_t len;
    int rc = 0;

    if (!next_line(data, size, &pos, &line, &len)) {
        fuzz_core_fail(req, 400);
        return 0;
    }
    rc = srv__request_set_method(req, line, len);
    if (rc == 0) {
        FUZZ_CHECK(srv__http_is_token(line, len));
        FUZZ_CHECK(strlen(srv_request_method(req)) == len);
    }
    if (rc == 0 && next_line(data, size, &pos, &line, &len))
        rc = srv__request_set_target(req, line, len);
    else if (rc == 0)
        rc = srv__request_set_target(req, "/", 1);
    if (rc == 0)
        srv__request_set_version(req, major, minor);

    size_t headers = 0;
    while (rc == 0 && next_line(data, size, &pos, &line, &len) && len > 0) {
        const char *colon = memchr(line, ':', len);
        size_t nlen = colon ? (size_t)(colon - line) : len;
        const char *value = colon ? colon + 1 : line + len;
        size_t vlen = colon ? len - nlen - 1 : 0;
        rc = srv__request_add_header(req, line, nlen, value, vlen);
        if (rc == 0) {
            headers++;
            FUZZ_CHECK(srv__http_is_token(line, nlen));
        } else {
            FUZZ_CHECK(rc == 400 || rc == 431 || rc == 500);
        }
    }
    if (rc == 0) {
        /* Every stored header is a token name and a value with no CR, LF,
         * NUL, nor surrounding spaces or tabs. */
        FUZZ_CHECK(req->header_count == headers);
        for (size_t i = 0; i < req->header_count; i++) {
            const char *name = req->headers[i].name, *value = req->headers[i].value;
            FUZZ_CHECK(srv__http_is_token(name, strlen(name)));
            size_t vl = strlen(value);
            FUZZ_CHECK(strpbrk(value, "\r\n") == NULL);
            FUZZ_CHECK(vl == 0 || (!is_ows(value[0]) && !is_ows(value[vl - 1])));
        }
        rc = srv__request_headers_done(req);
        if (rc == 0) {
            /* A head the core accepts is unambiguous about its body. */
            FUZZ_CHECK((major == 1 && (minor == 0 || minor == 1)) || (major == 2 && minor == 0));
            const char *te = srv_request_header(req, "Transfer-Encoding");
            const char *cl = srv_request_header(req, "Content-Length");
            FUZZ_CHECK(te == NULL || cl == NULL);
            if (cl != NULL) {
                FUZZ_CHECK(cl[0] != '\0' && strspn(cl, "0123456789") == strlen(cl));
                FUZZ_CHECK(strtoull(cl, NULL, 10) <= req->srv->cfg.max_body_bytes);
            }
            (void)srv__request_expects_continue(req);
        } else {
            FUZZ_CHECK(rc == 400 || rc == 413 || rc == 417 || rc == 431 || rc == 501 ||
                       rc == 505 || rc == 500);
        }
    }
    if (rc == 0 && pos < size) {
        size_t body = size - pos;
        size_t first = body * split / 63;
        if (first > body)
            first = body;
        rc = srv__request_append_body(req, data + pos, first);
        if (rc == 0)
            rc = srv__request_append_body(req, data + pos + first, body - first);
        if (rc == 0) {
            size_t blen = 0;
            const char *b = srv_request_body(req, &blen);
            FUZZ_CHECK(blen == body && memcmp(b, data + pos, body) == 0 && b[blen] == '\0');
        } else {
            FUZZ_CHECK(rc == 413 || rc == 500);
            FUZZ_CHECK(body > req->srv->cfg.max_body_bytes);
        }
    }
    if (rc != 0) {
        fuzz_core_fail(req, rc);
        return 0;
    }
    /* What a handler reads (core/cookie.c), on whatever the head and body
     * hold: cookies and form fields found again by name, never a
     * separator inside a cookie, a negotiation among the offered types. */
    size_t nc = srv_request_cookie_count(req);
    for (size_t i = 0; i < nc; i++) {
        const char *name = NULL, *value = NULL;
        FUZZ_CHECK(srv_request_cookie_at(req, i, &name, &value) == 0);
        FUZZ_CHECK(name[0] != '\0' && strpbrk(name, ";=") == NULL && strchr(value, ';') == NULL);
        FUZZ_CHECK(srv_request_cookie(req, name) != NULL);
    }
    FUZZ_CHECK(srv_request_cookie_at(req, nc, NULL, NULL) == SRV_EINVAL);
    size_t nf = srv_request_form_count(req);
    for (size_t i = 0; i < nf; i++) {
        const char *name = NULL, *value = NULL;
        FUZZ_CHECK(srv_request_form_at(req, i, &name, &value) == 0);
        FUZZ_CHECK(srv_request_form(req, name) != NULL && strlen(value) <= req->body_len);
    }
    FUZZ_CHECK(nf == 0 || srv_media_type_is(srv_request_header(req, "content-type"),
                                            "application/x-www-form-urlencoded"));
    static const char *const offered[] = {"application/json", "text/html", NULL};
    const char *best = srv_request_negotiate(req, offered);
    FUZZ_CHECK(best == NULL || best == offered[0] || best == offered[1]);
    /* Accept-Encoding (core/compress.c, static files' gzip): q-values in
     * range, -1 only for "not listed", and the answer follows from them. */
    int gz = -1, star = -1;
    for (size_t i = 0; i < srv_request_header_count(req); i++) {
        const char *hn, *hv;
        srv_request_header_at(req, i, &hn, &hv);
        if (strcasecmp(hn, "accept-encoding") == 0)
            srv__accept_encoding_gzip(hv, &gz, &star);
    }
    FUZZ_CHECK(gz >= -1 && gz <= 1000 && star >= -1 && star <= 1000);
    FUZZ_CHECK(srv__accepts_gzip(req) == ((gz >= 0 ? gz : star) > 0));
    fuzz_core_responded = 0;
    srv__request_dispatch(req);
    FUZZ_CHECK(fuzz_core_responded == 1);
    /* No routes: 404, or 400 when the router refuses the path (an invalid
     * or NUL %-escape, a dot segment), which needs a '%' or a "/." in it. */
    FUZZ_CHECK(fuzz_core_status == 404 ||
               (fuzz_core_status == 400 && req->routing.status == 400 &&
                (strchr(req->target, '%') != NULL || strstr(req->target, "/.") != NULL)));
    srv__request_release(req);
    return 0;
}
