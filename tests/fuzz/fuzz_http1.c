/*
 * Fuzz target: the core's sans-I/O HTTP/1 parser (core/http1.c), fed the
 * input in pieces the way an engine's reads would: byte 0 picks the piece
 * size (0: everything at once, else 1-8 bytes), the rest is the byte
 * stream of a connection (pipelined messages included). Invariants: the
 * parser never claims more bytes than it was given and consumes everything
 * when it asks for more; a failure carries a 4xx/5xx the core can answer;
 * a complete message's body is within max_body_bytes and the request
 * routes (404: no routes) like any other.
 */
#include "fuzz_core.h"
#include "srv_http1.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    srv_server *srv = fuzz_core_server();
    size_t step = data[0] % 9;
    srv_http1 p;
    srv__http1_init(&p, srv);
    srv_request *req = NULL;
    size_t off = 1;
    enum srv_http1_event ev = SRV_HTTP1_NEED_MORE;
    /* Each round consumes a byte or completes a step, so this bounds it. */
    for (size_t rounds = 0; rounds < 4 * size + 16; rounds++) {
        if (off >= size && ev != SRV_HTTP1_HEAD_READY)
            break;
        if (req == NULL) {
            req = srv__request_new(srv, NULL, 0);
            FUZZ_CHECK(req != NULL);
        }
        size_t left = size - off;
        size_t k = step == 0 || left < step ? left : step;
        size_t used = 0;
        ev = srv__http1_feed(&p, req, (const char *)data + off, k, &used);
        FUZZ_CHECK(used <= k);
        off += used;
        if (ev == SRV_HTTP1_NEED_MORE)
            FUZZ_CHECK(used == k);
        if (ev == SRV_HTTP1_FAIL) {
            int st = srv__http1_status(&p);
            FUZZ_CHECK(st >= 400 && st <= 599);
            fuzz_core_fail(req, st);
            req = NULL;
            break;
        }
        if (ev == SRV_HTTP1_MESSAGE_COMPLETE) {
            size_t blen = 0;
            (void)srv_request_body(req, &blen);
            FUZZ_CHECK(blen <= srv__server_config(srv)->max_body_bytes);
            fuzz_core_responded = 0;
            srv__request_dispatch(req); /* no routes: the core answers 404 */
            FUZZ_CHECK(fuzz_core_responded == 1);
            srv__request_release(req);
            req = NULL;
            FUZZ_CHECK(srv__http1_idle(&p));
        }
    }
    if (req != NULL)
        srv__request_release(req);
    srv__http1_free(&p);
    return 0;
}
