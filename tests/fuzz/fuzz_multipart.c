/*
 * Fuzz target: the streamed multipart/form-data parser (core/multipart.c).
 * Input: byte 0 seeds how the body is cut, then the Content-Type value up
 * to the first '\n' (so the boundary parameter is fuzzed too), then the
 * body. The body is parsed twice, whole and in pieces cut by the seed;
 * both must give the same events, the same result and the same data, and
 * the callbacks must keep their contract: a part's data only between its
 * on_part and on_part_end, parts numbered from 0, nothing after a stop,
 * never more data than was fed.
 */
#include "srv.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                      \
            abort();                                                             \
        }                                                                        \
    } while (0)

typedef struct run {
    uint64_t hash; /* of every event and byte, in order */
    size_t data;   /* data bytes */
    unsigned parts, ended;
    int in_part;
    int stopped;   /* a callback returned non-zero */
    unsigned stop_after; /* stop at this on_data call (0: never) */
    unsigned data_calls;
} run;

static void mix(run *r, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        r->hash = (r->hash ^ b[i]) * 0x100000001b3ull;
}

static int on_part(srv_multipart *mp, const srv_multipart_part *part, void *ctx)
{
    run *r = ctx;
    FUZZ_CHECK(!r->stopped && !r->in_part);
    FUZZ_CHECK(part->index == r->parts && part->name != NULL);
    FUZZ_CHECK(srv_multipart_header(mp, "Content-Disposition") != NULL);
    r->parts++;
    r->in_part = 1;
    mix(r, "P", 1);
    mix(r, part->name, strlen(part->name) + 1);
    if (part->filename)
        mix(r, part->filename, strlen(part->filename) + 1);
    if (part->content_type)
        mix(r, part->content_type, strlen(part->content_type) + 1);
    return 0;
}

static int on_data(srv_multipart *mp, const void *data, size_t len, void *ctx)
{
    (void)mp;
    run *r = ctx;
    FUZZ_CHECK(!r->stopped && r->in_part && len > 0);
    r->data += len;
    mix(r, data, len);
    if (++r->data_calls == r->stop_after) {
        r->stopped = 1;
        return -1000;
    }
    return 0;
}

static int on_end(srv_multipart *mp, void *ctx)
{
    (void)mp;
    run *r = ctx;
    FUZZ_CHECK(!r->stopped && r->in_part);
    r->in_part = 0;
    r->ended++;
    mix(r, "E", 1);
    return 0;
}

/* Parse body with pieces cut by seed (0: whole); the result code. */
static int parse(const char *ct, const uint8_t *body, size_t len, unsigned seed, run *r,
                 unsigned stop_after)
{
    memset(r, 0, sizeof *r);
    r->stop_after = stop_after;
    srv_multipart_opts o;
    srv_multipart_opts_init(&o);
    o.on_part = on_part;
    o.on_data = on_data;
    o.on_part_end = on_end;
    o.ctx = r;
    o.max_parts = 16;
    o.max_header_bytes = 256;
    srv_multipart *mp = NULL;
    int rc = srv_multipart_new(ct, &o, &mp);
    if (rc != 0) {
        FUZZ_CHECK(rc == SRV_EBOUNDARY && mp == NULL);
        return rc;
    }
    size_t at = 0;
    unsigned s = seed;
    while (rc == 0 && at < len) {
        size_t n = len - at;
        if (seed != 0) {
            s = s * 1103515245u + 12345u;
            n = 1 + (s >> 16) % 17;
            if (n > len - at)
                n = len - at;
        }
        rc = srv_multipart_feed(mp, body + at, n);
        at += n;
    }
    if (rc == 0)
        rc = srv_multipart_finish(mp);
    else
        FUZZ_CHECK(srv_multipart_finish(mp) == rc && srv_multipart_feed(mp, "x", 1) == rc);
    FUZZ_CHECK(rc == 0 || rc == SRV_EMULTIPART || rc == SRV_ETOOBIG || rc == -1000);
    FUZZ_CHECK(rc == 0 || srv_multipart_error(mp)[0] != '\0');
    if (rc == 0)
        FUZZ_CHECK(!r->in_part && r->ended == r->parts); /* 0 parts: a form without fields */
    FUZZ_CHECK(r->parts <= 16 && r->data <= len);
    srv_multipart_free(mp);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned seed = data[0] | 1u;
    const uint8_t *p = data + 1, *end = data + size;
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL)
        return 0;
    char ct[256];
    size_t cl = (size_t)(nl - p);
    if (cl >= sizeof ct)
        return 0;
    memcpy(ct, p, cl);
    ct[cl] = '\0';
    const uint8_t *body = nl + 1;
    size_t len = (size_t)(end - body);
    run whole, cut;
    int a = parse(ct, body, len, 0, &whole, 0);
    int b = parse(ct, body, len, seed, &cut, 0);
    FUZZ_CHECK(a == b && whole.hash == cut.hash && whole.data == cut.data &&
               whole.parts == cut.parts && whole.ended == cut.ended);
    /* A stop in the middle: nothing after it (the callbacks check). */
    if (cut.data_calls > 1)
        parse(ct, body, len, seed, &cut, 1 + seed % cut.data_calls);
    return 0;
}
