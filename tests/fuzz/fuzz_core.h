/*
 * Shared by the core fuzz targets: a server on a do-nothing engine (never
 * started, so no socket and no thread), enough for srv__request_new and
 * for the core's own answers (404, srv__request_fail), which call the
 * engine's respond slot synchronously. Each check that fails aborts, so
 * libFuzzer records the input as a crash.
 */
#ifndef SRV_FUZZ_CORE_H
#define SRV_FUZZ_CORE_H

#include "srv_core.h"

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

/* The response the respond slot saw last (checked by the caller). */
static int fuzz_core_status;
static int fuzz_core_responded;

/* What every core answer must look like on the wire: a status line in
 * HTTP/1.x, CRLF line ends only (no bare CR or LF: response splitting), a
 * single blank line at the end. */
static void fuzz_core_respond(void *state, srv_request *req)
{
    (void)state;
    fuzz_core_responded++;
    fuzz_core_status = srv__response_status(req);
    FUZZ_CHECK(fuzz_core_status >= 100 && fuzz_core_status <= 599);
    size_t len = 0;
    const char *head = srv__response_http1_head(req, &len);
    FUZZ_CHECK(head != NULL && len >= 19);
    FUZZ_CHECK(memcmp(head, "HTTP/1.", 7) == 0);
    FUZZ_CHECK(memcmp(head + len - 4, "\r\n\r\n", 4) == 0);
    for (size_t i = 0; i < len; i++) {
        if (head[i] == '\r')
            FUZZ_CHECK(i + 1 < len && head[i + 1] == '\n');
        if (head[i] == '\n')
            FUZZ_CHECK(i > 0 && head[i - 1] == '\r');
        if (i + 4 < len)
            FUZZ_CHECK(memcmp(head + i, "\r\n\r\n", 4) != 0);
    }
    size_t blen = 0;
    (void)srv__response_body(req, &blen);
    if (!req->is_head)
        FUZZ_CHECK(blen == srv__response_content_length(req));
    (void)srv__response_keep_alive(req);
    for (size_t i = 0; i < srv__response_header_count(req); i++) {
        const char *v = NULL;
        FUZZ_CHECK(srv__response_header_at(req, i, &v) != NULL && v != NULL);
    }
}

static const srv_engine fuzz_core_engine = {
    .version = SRV_ENGINE_VERSION,
    .name = "fuzz",
    /* HTTP/2 capable, so a version of 2.0 reaches the rules behind it. */
    .caps = SRV_ENGINE_CAP_HTTP2,
    .respond = fuzz_core_respond,
};

static srv_server *fuzz_core_server(void)
{
    static srv_server *srv;
    if (srv == NULL) {
        srv_config cfg;
        srv_config_init(&cfg);
        cfg.max_header_bytes = 4096; /* reachable by libFuzzer's default -max_len */
        cfg.max_uri_bytes = 2048;
        cfg.max_body_bytes = 1024;
        srv = srv_server_new(&fuzz_core_engine, &cfg);
        FUZZ_CHECK(srv != NULL);
    }
    return srv;
}

/* Answer a request the way an engine does after a failed step, then let
 * go of it. */
static void fuzz_core_fail(srv_request *req, int rc)
{
    fuzz_core_responded = 0;
    srv__request_fail(req, rc > 0 ? rc : 500);
    FUZZ_CHECK(fuzz_core_responded == 1);
    FUZZ_CHECK(fuzz_core_status >= 400 && fuzz_core_status <= 599);
    FUZZ_CHECK(srv__response_keep_alive(req) == 0);
    srv__request_release(req);
}

#endif /* SRV_FUZZ_CORE_H */
