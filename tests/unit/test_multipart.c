/*
 * The streamed multipart/form-data parser (core/multipart.c): every body is
 * fed whole, byte by byte, split in two at every position and in random
 * pieces, and must give the same parts; hostile boundaries, boundary-like
 * data, missing final boundary, bare LF, preamble and epilogue, quoted
 * boundaries, limits, empty parts, filenames kept as sent, callbacks that
 * stop the parser.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

/* What the callbacks saw: "[name|filename|type]data." per part, "-"
 * for a NULL string, '.' at on_part_end. */
typedef struct tx {
    char *p;
    size_t n, cap;
    int stop_at;     /* on_data's call number that returns -100 (0: never) */
    int data_calls;
    const char *hdr; /* a header srv_multipart_header looks up in on_part */
    char hdr_val[64];
} tx;

static void tx_add(tx *t, const void *p, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        t->cap = (t->n + n + 1) * 2;
        t->p = realloc(t->p, t->cap);
        assert_non_null(t->p);
    }
    memcpy(t->p + t->n, p, n);
    t->n += n;
    t->p[t->n] = '\0';
}

static void tx_str(tx *t, const char *s)
{
    tx_add(t, s ? s : "-", strlen(s ? s : "-"));
}

static int on_part(srv_multipart *mp, const srv_multipart_part *part, void *ctx)
{
    tx *t = ctx;
    assert_true(part->size >= sizeof *part);
    assert_non_null(part->name);
    tx_str(t, "[");
    tx_str(t, part->name);
    tx_str(t, "|");
    tx_str(t, part->filename);
    tx_str(t, "|");
    tx_str(t, part->content_type);
    tx_str(t, "]");
    if (t->hdr != NULL) {
        const char *v = srv_multipart_header(mp, t->hdr);
        snprintf(t->hdr_val, sizeof t->hdr_val, "%s", v ? v : "(none)");
    }
    return 0;
}

static int on_data(srv_multipart *mp, const void *data, size_t len, void *ctx)
{
    (void)mp;
    tx *t = ctx;
    assert_true(len > 0);
    if (++t->data_calls == t->stop_at)
        return -100;
    tx_add(t, data, len);
    return 0;
}

static int on_end(srv_multipart *mp, void *ctx)
{
    assert_null(srv_multipart_header(mp, "X-None"));
    tx_str(ctx, ".");
    return 0;
}

#define CT "multipart/form-data; boundary=XyZ"

static srv_multipart *mp_new(const char *ct, tx *t, unsigned max_parts, size_t max_hdr)
{
    srv_multipart_opts o;
    srv_multipart_opts_init(&o);
    o.on_part = on_part;
    o.on_data = on_data;
    o.on_part_end = on_end;
    o.ctx = t;
    if (max_parts)
        o.max_parts = max_parts;
    if (max_hdr)
        o.max_header_bytes = max_hdr;
    srv_multipart *mp = NULL;
    assert_int_equal(srv_multipart_new(ct, &o, &mp), 0);
    assert_non_null(mp);
    return mp;
}

/* Feed body in pieces cut at cuts[0..ncuts) (increasing); the first error
 * of feed or finish. *out is the transcript (caller frees). */
static int parse_cut(const char *ct, const char *body, size_t len, const size_t *cuts,
                     size_t ncuts, unsigned max_parts, size_t max_hdr, char **out)
{
    tx t = {0};
    srv_multipart *mp = mp_new(ct, &t, max_parts, max_hdr);
    int rc = 0;
    size_t at = 0;
    for (size_t k = 0; k <= ncuts && rc == 0; k++) {
        size_t to = k < ncuts ? cuts[k] : len;
        rc = srv_multipart_feed(mp, body + at, to - at);
        at = to;
    }
    if (rc == 0)
        rc = srv_multipart_finish(mp);
    else /* sticky */
        assert_int_equal(srv_multipart_finish(mp), rc);
    srv_multipart_free(mp);
    tx_str(&t, ""); /* never NULL */
    *out = t.p;
    return rc;
}

/*
 * The body gives `want` (transcript) and `rc` whole, byte by byte, cut in
 * two at every position, cut in three around every position pair near the
 * boundaries, and in 200 random splits.
 */
static void check_body_len(const char *ct, const char *body, size_t len, int rc,
                           const char *want, unsigned max_parts, size_t max_hdr)
{
    char *got;
    int r = parse_cut(ct, body, len, NULL, 0, max_parts, max_hdr, &got);
    if (r != rc || (want != NULL && strcmp(got, want) != 0))
        fail_msg("whole: rc %d (want %d), got \"%s\", want \"%s\"", r, rc, got,
                 want ? want : "(any)");
    char *first = got;

    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    for (size_t i = 0; i + 1 < len; i++)
        cuts[i] = i + 1;
    r = parse_cut(ct, body, len, cuts, len > 0 ? len - 1 : 0, max_parts, max_hdr, &got);
    if (r != rc || strcmp(got, first) != 0)
        fail_msg("byte by byte: rc %d (want %d), got \"%s\", want \"%s\"", r, rc, got, first);
    free(got);
    for (size_t i = 0; i <= len; i++) {
        r = parse_cut(ct, body, len, &i, 1, max_parts, max_hdr, &got);
        if (r != rc || strcmp(got, first) != 0)
            fail_msg("cut at %zu: rc %d (want %d), got \"%s\", want \"%s\"", i, r, rc, got,
                     first);
        free(got);
    }
    srand(7);
    for (int k = 0; k < 200; k++) {
        size_t n = 0;
        for (size_t i = 1; i < len; i++)
            if (rand() % 5 == 0)
                cuts[n++] = i;
        r = parse_cut(ct, body, len, cuts, n, max_parts, max_hdr, &got);
        if (r != rc || strcmp(got, first) != 0)
            fail_msg("random split %d: rc %d (want %d), got \"%s\", want \"%s\"", k, r, rc, got,
                     first);
        free(got);
    }
    free(cuts);
    free(first);
}

static void check_body(const char *body, int rc, const char *want)
{
    check_body_len(CT, body, strlen(body), rc, want, 0, 0);
}

#define CD(name) "Content-Disposition: form-data; name=\"" name "\""

static void test_basic(void **state)
{
    (void)state;
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nalpha\r\n"
               "--XyZ\r\n" CD("f") "; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\n"
               "line 1\r\nline 2\r\n\r\n"
               "--XyZ--\r\n",
               0, "[a|-|-]alpha.[f|a.txt|text/plain]line 1\r\nline 2\r\n.");
    /* Preamble and epilogue are ignored, whatever they hold. */
    check_body("This is the preamble.\r\n--XyX is not it\r\n"
               "--XyZ\r\n" CD("a") "\r\n\r\n1\r\n--XyZ--\r\nepilogue\r\n--XyZ\r\nmore",
               0, "[a|-|-]1.");
    /* The boundary inside the preamble is a delimiter too (RFC 2046). */
    check_body("preamble\r\n--XyZ is here\r\n--XyZ\r\n" CD("a") "\r\n\r\n1\r\n--XyZ--",
               SRV_EMULTIPART, NULL);
    /* No part at all: what a browser sends for a form without fields. */
    check_body("--XyZ--\r\n", 0, "");
    /* Transport padding after a boundary; no CRLF after the last one. */
    check_body("--XyZ \t \r\n" CD("a") "\r\n\r\n1\r\n--XyZ\t\r\n" CD("b") "\r\n\r\n2\r\n--XyZ--",
               0, "[a|-|-]1.[b|-|-]2.");
    /* Header names are case-insensitive; blanks around values trimmed. */
    check_body("--XyZ\r\ncontent-disposition:   FORM-DATA ;NAME=x  ;  filename=y.bin\r\n"
               "CONTENT-TYPE:  application/octet-stream \r\n\r\n\x01\x02\r\n--XyZ--",
               0, "[x|y.bin|application/octet-stream]\x01\x02.");
}

static void test_boundary_like_data(void **state)
{
    (void)state;
    /* Every prefix of the delimiter, broken at its last byte, is data. */
    check_body("--XyZ\r\n" CD("d") "\r\n\r\n"
               "\r\n--XyX|\r\n--Xy|\r\n--X|\r\n-|\r\n|\r\r\n--Xy\r|--XyZ|\n--XyZ|"
               "\r\r\r\n\r\n-\r\n--\r\n--XyZ--",
               0, "[d|-|-]\r\n--XyX|\r\n--Xy|\r\n--X|\r\n-|\r\n|\r\r\n--Xy\r|--XyZ|\n--XyZ|"
                  "\r\r\r\n\r\n-\r\n--.");
    /* A part whose data ends in CR, LF, "-". */
    check_body("--XyZ\r\n" CD("a") "\r\n\r\n\r\r\n--XyZ\r\n" CD("b") "\r\n\r\n-\r\n--XyZ--", 0,
               "[a|-|-]\r.[b|-|-]-.");
    /* The whole delimiter inside data, followed by other bytes: the
     * boundary occurs in the data, which RFC 2046 forbids. */
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nab\r\n--XyZX\r\n--XyZ--", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nab\r\n--XyZ-x--XyZ--", SRV_EMULTIPART, NULL);
}

static void test_missing_final_boundary(void **state)
{
    (void)state;
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nalpha", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nalpha\r\n--XyZ\r\n", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nalpha\r\n--XyZ-", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\n", SRV_EMULTIPART, NULL);
    check_body("no boundary at all", SRV_EMULTIPART, NULL);
    check_body("", SRV_EMULTIPART, NULL);
    /* The part that was open got its data but no end. */
    char *got;
    const char *b = "--XyZ\r\n" CD("a") "\r\n\r\nalpha\r\n--Xy";
    assert_int_equal(parse_cut(CT, b, strlen(b), NULL, 0, 0, 0, &got), SRV_EMULTIPART);
    assert_string_equal(got, "[a|-|-]alpha");
    free(got);
    tx t = {0};
    srv_multipart *mp = mp_new(CT, &t, 0, 0);
    assert_int_equal(srv_multipart_feed(mp, b, strlen(b)), 0);
    assert_int_equal(srv_multipart_finish(mp), SRV_EMULTIPART);
    assert_string_equal(srv_multipart_error(mp), "the body ends before the final boundary");
    srv_multipart_free(mp);
    free(t.p);
}

static void test_bare_lf(void **state)
{
    (void)state;
    /* RFC 2046 lines end in CRLF: a body using bare LFs does not parse. */
    check_body("--XyZ\n" CD("a") "\n\nalpha\n--XyZ--\n", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\n\nalpha\r\n--XyZ--\r\n", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\n\nalpha\r\n--XyZ--\r\n", SRV_EMULTIPART, NULL);
    /* In data a bare LF before the boundary is data: the part goes on. */
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nx\n--XyZ\r\n--XyZ--", 0, "[a|-|-]x\n--XyZ.");
    check_body("--XyZ\r\n" CD("a") "\r\n\r\nx\n--XyZ--\r\n--XyZ--", 0, "[a|-|-]x\n--XyZ--.");
    /* CRLF everywhere: fine (test_basic). A CR alone inside a header. */
    check_body("--XyZ\r\n" CD("a") "\rX: y\r\n\r\n1\r\n--XyZ--", SRV_EMULTIPART, NULL);
}

static void test_content_type_boundary(void **state)
{
    (void)state;
    static const struct {
        const char *ct, *boundary;
    } good[] = {
        {"multipart/form-data; boundary=XyZ", "XyZ"},
        {"Multipart/Form-Data;boundary=XyZ", "XyZ"},
        {"multipart/form-data; charset=utf-8; BOUNDARY=\"XyZ\"", "XyZ"},
        {"multipart/form-data; boundary=\"a b:c?(d)\"", "a b:c?(d)"},
        {"multipart/form-data; boundary=\"q\\\"\"", NULL}, /* '"' is no bchar */
        {"multipart/form-data ; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW ;",
         "----WebKitFormBoundary7MA4YWxkTrZu0gW"},
        {"multipart/form-data; boundary="
         "1234567890123456789012345678901234567890123456789012345678901234567890",
         "1234567890123456789012345678901234567890123456789012345678901234567890"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char body[512];
        if (good[i].boundary == NULL)
            continue;
        snprintf(body, sizeof body, "--%s\r\n" CD("k") "\r\n\r\nv\r\n--%s--\r\n",
                 good[i].boundary, good[i].boundary);
        check_body_len(good[i].ct, body, strlen(body), 0, "[k|-|-]v.", 0, 0);
    }
    static const char *const bad[] = {
        NULL,
        "",
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/form-data; boundary=\"\"",
        "multipart/form-data; boundary=\"ends in space \"",
        "multipart/form-data; boundary=a!b",          /* '!' is no bchar */
        "multipart/form-data; boundary=\"q\\\"\"",
        "multipart/form-data; boundary=a; boundary=b",
        "multipart/form-data; boundary=\"open",
        "multipart/form-data; boundary",
        "multipart/form-data; boundary=a b",
        "multipart/mixed; boundary=XyZ",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary="
        "12345678901234567890123456789012345678901234567890123456789012345678901", /* 71 */
    };
    tx t = {0};
    srv_multipart_opts o;
    srv_multipart_opts_init(&o);
    o.on_part = on_part;
    o.on_data = on_data;
    o.ctx = &t;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_multipart *mp = (srv_multipart *)&t; /* untouched on failure */
        int rc = srv_multipart_new(bad[i], &o, &mp);
        if (rc != SRV_EBOUNDARY)
            fail_msg("Content-Type \"%s\": %d, want SRV_EBOUNDARY", bad[i] ? bad[i] : "NULL",
                     rc);
        assert_ptr_equal(mp, (srv_multipart *)&t);
    }
    srv_multipart *mp = NULL;
    o.on_data = NULL;
    assert_int_equal(srv_multipart_new(CT, &o, &mp), SRV_EINVAL);
    o.on_data = on_data;
    o.max_parts = 0;
    assert_int_equal(srv_multipart_new(CT, &o, &mp), SRV_EINVAL);
    o.max_parts = 1;
    o.max_header_bytes = 10;
    assert_int_equal(srv_multipart_new(CT, &o, &mp), SRV_EINVAL);
    o.max_header_bytes = 64;
    o.size = 3;
    assert_int_equal(srv_multipart_new(CT, &o, &mp), SRV_EINVAL);
    assert_int_equal(srv_multipart_new(CT, NULL, &mp), SRV_EINVAL);
    assert_null(mp);
    assert_int_equal(srv_multipart_feed(NULL, "x", 1), SRV_EINVAL);
    assert_int_equal(srv_multipart_finish(NULL), SRV_EINVAL);
    assert_string_equal(srv_multipart_error(NULL), "");
    srv_multipart_free(NULL);
}

static void test_limits(void **state)
{
    (void)state;
    /* max_header_bytes: the header block with its empty line. */
#define PAD "X-Pad: 0123456789012345678901234567890123456789\r\n"
    const char *h = "--XyZ\r\n" CD("a") "\r\n" PAD "\r\nv\r\n--XyZ--";
    size_t block = strlen(CD("a") "\r\n" PAD "\r\n");
    check_body_len(CT, h, strlen(h), 0, "[a|-|-]v.", 0, block);
    check_body_len(CT, h, strlen(h), SRV_ETOOBIG, NULL, 0, block - 1);
    /* A huge header: refused at the limit, without reading it all. */
    size_t huge = 1 << 20;
    char *big = malloc(huge + 256);
    int n = sprintf(big, "--XyZ\r\n" CD("a") "\r\nX-Big: ");
    memset(big + n, 'b', huge);
    strcpy(big + n + huge, "\r\n\r\nv\r\n--XyZ--");
    tx t = {0};
    srv_multipart *mp = mp_new(CT, &t, 0, 0);
    assert_int_equal(srv_multipart_feed(mp, big, strlen(big)), SRV_ETOOBIG);
    assert_string_equal(srv_multipart_error(mp), "a part's headers are over max_header_bytes");
    assert_int_equal(srv_multipart_feed(mp, "x", 1), SRV_ETOOBIG); /* sticky */
    assert_int_equal(t.data_calls, 0);
    srv_multipart_free(mp);
    free(t.p);
    free(big);
    /* 65 header lines in a part. */
    char lines[4096];
    n = sprintf(lines, "--XyZ\r\n" CD("a") "\r\n");
    for (int i = 0; i < 64; i++)
        n += sprintf(lines + n, "X-%d: v\r\n", i);
    sprintf(lines + n, "\r\nv\r\n--XyZ--");
    check_body_len(CT, lines, strlen(lines), SRV_ETOOBIG, NULL, 0, 0);
    /* max_parts: exactly 3 is fine, a 4th is refused before its headers. */
    const char *three = "--XyZ\r\n" CD("a") "\r\n\r\n1\r\n--XyZ\r\n" CD("b") "\r\n\r\n2\r\n"
                        "--XyZ\r\n" CD("c") "\r\n\r\n3\r\n--XyZ--";
    check_body_len(CT, three, strlen(three), 0, "[a|-|-]1.[b|-|-]2.[c|-|-]3.", 3, 0);
    check_body_len(CT, three, strlen(three), SRV_ETOOBIG, NULL, 2, 0);
    /* Many tiny parts against the default (128). */
    char *many = malloc(200 * 64);
    n = 0;
    for (int i = 0; i < 200; i++)
        n += sprintf(many + n, "--XyZ\r\n" CD("p") "\r\n\r\n\r\n");
    sprintf(many + n, "--XyZ--");
    t = (tx){0};
    mp = mp_new(CT, &t, 0, 0);
    assert_int_equal(srv_multipart_feed(mp, many, strlen(many)), SRV_ETOOBIG);
    assert_string_equal(srv_multipart_error(mp), "more parts than max_parts");
    srv_multipart_free(mp);
    free(t.p);
    free(many);
}

static void test_empty_and_odd_parts(void **state)
{
    (void)state;
    /* Empty data, empty name, empty filename (a file input left empty). */
    check_body("--XyZ\r\n" CD("") "\r\n\r\n\r\n--XyZ\r\n" CD("f") "; filename=\"\"\r\n"
               "Content-Type: application/octet-stream\r\n\r\n\r\n--XyZ--",
               0, "[|-|-].[f||application/octet-stream].");
    /* Headers: none is an error (no Content-Disposition), as are a type
     * other than form-data, no name, repeats, obs-fold, a bad line. */
    check_body("--XyZ\r\n\r\ndata\r\n--XyZ--", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\n1\r\n--XyZ--",
               SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\nContent-Disposition: form-data\r\n\r\n1\r\n--XyZ--", SRV_EMULTIPART,
               NULL);
    check_body("--XyZ\r\nContent-Disposition: form-data; name=a; name=b\r\n\r\n1\r\n--XyZ--",
               SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\n" CD("b") "\r\n\r\n1\r\n--XyZ--", SRV_EMULTIPART,
               NULL);
    check_body("--XyZ\r\n" CD("a") "\r\nContent-Type: a/b\r\nContent-Type: c/d\r\n\r\n1\r\n"
               "--XyZ--", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\nX-Folded: a\r\n b\r\n\r\n1\r\n--XyZ--",
               SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\n" CD("a") "\r\nno colon\r\n\r\n1\r\n--XyZ--", SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\nContent-Disposition: form-data; name=\"open\r\n\r\n1\r\n--XyZ--",
               SRV_EMULTIPART, NULL);
    check_body("--XyZ\r\nContent-Disposition: form-data; name=a b\r\n\r\n1\r\n--XyZ--",
               SRV_EMULTIPART, NULL);
    /* A NUL in a header value. */
    static const char nul[] = "--XyZ\r\n" CD("a") "\r\nX: a\0b\r\n\r\n1\r\n--XyZ--";
    check_body_len(CT, nul, sizeof nul - 1, SRV_EMULTIPART, NULL, 0, 0);
    /* Binary data with NULs, CRs and LFs goes through unchanged. */
    static const char bin[] = "--XyZ\r\n" CD("b") "\r\n\r\n\0\r\0\n\r\n\0--XyZ\r\n--XyZ--";
    check_body_len(CT, bin, sizeof bin - 1, 0, NULL, 0, 0);
}

static void test_filenames_as_sent(void **state)
{
    (void)state;
    check_body("--XyZ\r\n" CD("f") "; filename=\"../../etc/passwd\"\r\n\r\nx\r\n"
               "--XyZ\r\n" CD("g") "; filename=\"C:\\\\Users\\\\a.txt\"\r\n\r\ny\r\n"
               "--XyZ\r\n" CD("h") "; filename=\"/abs/dir/b.txt\"; filename*=UTF-8''x\r\n\r\nz\r\n"
               "--XyZ\r\n" CD("say \\\"hi\\\"") "; filename=\"%22q%22.txt\"\r\n\r\nw\r\n"
               "--XyZ--",
               0, "[f|../../etc/passwd|-]x.[g|C:\\Users\\a.txt|-]y.[h|/abs/dir/b.txt|-]z."
                  "[say \"hi\"|%22q%22.txt|-]w.");
    /* Non-ASCII names (UTF-8 as browsers send it) pass as they are. */
    check_body("--XyZ\r\n" CD("caf\xc3\xa9") "; filename=\"\xe6\x97\xa5.txt\"\r\n\r\n1\r\n"
               "--XyZ--",
               0, "[caf\xc3\xa9|\xe6\x97\xa5.txt|-]1.");
}

static void test_headers_lookup(void **state)
{
    (void)state;
    const char *b = "--XyZ\r\n" CD("a") "\r\nX-Custom:  hello there \r\n\r\n1\r\n--XyZ--";
    tx t = {0};
    t.hdr = "x-custom";
    srv_multipart *mp = mp_new(CT, &t, 0, 0);
    assert_null(srv_multipart_header(mp, "X-Custom")); /* outside a part */
    assert_int_equal(srv_multipart_feed(mp, b, strlen(b)), 0);
    assert_int_equal(srv_multipart_finish(mp), 0);
    assert_string_equal(t.hdr_val, "hello there");
    assert_string_equal(srv_multipart_error(mp), "");
    assert_int_equal(srv_multipart_feed(mp, "after", 5), 0); /* epilogue */
    srv_multipart_free(mp);
    free(t.p);
}

static void test_callback_stops(void **state)
{
    (void)state;
    const char *b = "--XyZ\r\n" CD("a") "\r\n\r\n0123\r\n--Xy!456789\r\n--XyZ\r\n" CD("b")
                    "\r\n\r\nz\r\n--XyZ--";
    for (int stop = 1; stop <= 3; stop++) {
        tx t = {0};
        t.stop_at = stop;
        srv_multipart *mp = mp_new(CT, &t, 0, 0);
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < strlen(b); i++)
            rc = srv_multipart_feed(mp, b + i, 1);
        assert_int_equal(rc, -100);
        assert_int_equal(t.data_calls, stop);
        assert_int_equal(srv_multipart_feed(mp, "x", 1), -100);
        assert_int_equal(srv_multipart_finish(mp), -100);
        assert_int_equal(t.data_calls, stop); /* no callback after the stop */
        assert_string_equal(srv_multipart_error(mp), "stopped by on_data");
        assert_null(strchr(t.p, '.')); /* no on_part_end */
        srv_multipart_free(mp);
        free(t.p);
    }
}

/* A large part in 64 KiB pieces: its data arrives in order and whole, in
 * pieces no bigger than what was fed (nothing accumulates). */
typedef struct big {
    uint64_t bytes, sum;
    size_t max_piece;
} big;

static int big_part(srv_multipart *mp, const srv_multipart_part *part, void *ctx)
{
    (void)mp;
    (void)part;
    (void)ctx;
    return 0;
}

static int big_data(srv_multipart *mp, const void *data, size_t len, void *ctx)
{
    (void)mp;
    big *g = ctx;
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        g->sum = g->sum * 31 + p[i];
    g->bytes += len;
    if (len > g->max_piece)
        g->max_piece = len;
    return 0;
}

static void test_large_part(void **state)
{
    (void)state;
    big g = {0};
    srv_multipart_opts o;
    srv_multipart_opts_init(&o);
    o.on_part = big_part;
    o.on_data = big_data;
    o.ctx = &g;
    srv_multipart *mp = NULL;
    assert_int_equal(srv_multipart_new(CT, &o, &mp), 0);
    const char *head = "--XyZ\r\n" CD("file") "; filename=\"big\"\r\n\r\n";
    assert_int_equal(srv_multipart_feed(mp, head, strlen(head)), 0);
    enum { PIECE = 65536, PIECES = 160 }; /* 10 MiB */
    unsigned char *piece = malloc(PIECE);
    uint64_t want = 0;
    for (int k = 0; k < PIECES; k++) {
        for (size_t i = 0; i < PIECE; i++) {
            /* Boundary-like bytes all along: CR LF '-' and the boundary's
             * letters. */
            static const char alphabet[] = "\r\n-XyZ\r\n--X";
            piece[i] = (unsigned char)alphabet[(i * 7 + (size_t)k) % (sizeof alphabet - 1)];
            want = want * 31 + piece[i];
        }
        assert_int_equal(srv_multipart_feed(mp, piece, PIECE), 0);
    }
    const char *tail = "\r\n--XyZ--\r\n";
    assert_int_equal(srv_multipart_feed(mp, tail, strlen(tail)), 0);
    assert_int_equal(srv_multipart_finish(mp), 0);
    assert_int_equal(g.bytes, (uint64_t)PIECE * PIECES);
    assert_true(g.sum == want);
    assert_true(g.max_piece <= PIECE);
    srv_multipart_free(mp);
    free(piece);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_boundary_like_data),
        cmocka_unit_test(test_missing_final_boundary),
        cmocka_unit_test(test_bare_lf),
        cmocka_unit_test(test_content_type_boundary),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_empty_and_odd_parts),
        cmocka_unit_test(test_filenames_as_sent),
        cmocka_unit_test(test_headers_lookup),
        cmocka_unit_test(test_callback_stops),
        cmocka_unit_test(test_large_part),
    };
    return cmocka_run_group_tests_name("multipart/form-data parser", tests, NULL, NULL);
}
