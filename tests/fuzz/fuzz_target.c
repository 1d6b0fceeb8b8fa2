/*
 * Fuzz target: the core's request-target parsing and %-decoding
 * (srv__request_set_target -> srv__target_parse -> srv__percent_decode)
 * and the query accessors. The whole input is one request-target.
 */
#include "fuzz_core.h"

#include <stdint.h>

/* Decoding never grows, terminates its output, and refuses a NUL. */
static void check_decode(const uint8_t *data, size_t size, bool plus)
{
    char *out = malloc(size + 1);
    FUZZ_CHECK(out != NULL);
    size_t n = srv__percent_decode((const char *)data, size, out, plus);
    if (n != (size_t)-1) {
        FUZZ_CHECK(n <= size);
        FUZZ_CHECK(out[n] == '\0');
        FUZZ_CHECK(memchr(out, '\0', n) == NULL);
        if (memchr(data, '%', size) == NULL) /* nothing to decode: a copy */
            for (size_t i = 0; i < size; i++)
                FUZZ_CHECK(out[i] == (plus && data[i] == '+' ? ' ' : (char)data[i]));
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_decode(data, size, false);
    check_decode(data, size, true);

    srv_request *req = srv__request_new(fuzz_core_server(), NULL, 0);
    FUZZ_CHECK(req != NULL);
    int rc = srv__request_set_target(req, (const char *)data, size);
    if (rc != 0) {
        FUZZ_CHECK(rc == 400 || rc == 414 || rc == 431 || rc == 500);
        fuzz_core_fail(req, rc);
        return 0;
    }
    /* Accepted: the target is kept as sent, the path is a C string with
     * no NUL that starts with '/' (or is "*"). */
    const char *target = srv_request_target(req);
    FUZZ_CHECK(strlen(target) == size && memcmp(target, data, size) == 0);
    const char *path = srv_request_path(req);
    FUZZ_CHECK(path != NULL);
    FUZZ_CHECK(path[0] == '/' || strcmp(path, "*") == 0);
    FUZZ_CHECK(strlen(path) <= size);

    /* Every parsed parameter is found by name, and the first one of a
     * name wins. */
    size_t count = srv_request_query_count(req);
    for (size_t i = 0; i < count; i++) {
        const char *name = NULL, *value = NULL;
        FUZZ_CHECK(srv_request_query_at(req, i, &name, &value) == 0);
        FUZZ_CHECK(name != NULL && value != NULL);
        const char *found = srv_request_query(req, name);
        FUZZ_CHECK(found != NULL);
        size_t first = 0;
        while (strcmp(req->query[first].name, name) != 0)
            first++;
        FUZZ_CHECK(first <= i);
        FUZZ_CHECK(found == req->query[first].value);
    }
    FUZZ_CHECK(srv_request_query_at(req, count, NULL, NULL) == SRV_EINVAL);
    FUZZ_CHECK(srv_request_query(req, NULL) == NULL);
    (void)srv_request_query(req, "name");
    (void)srv_request_query(req, "");

    /* Route it: no routes, so the core answers 404 (or 400) itself. */
    FUZZ_CHECK(srv__request_set_method(req, "GET", 3) == 0);
    FUZZ_CHECK(srv__request_add_header(req, "Host", 4, "fuzz", 4) == 0);
    /* The head rules are fuzz-head's business; one may still refuse this
     * target as a whole (e.g. a rule on absolute-form), so answer that. */
    rc = srv__request_headers_done(req);
    if (rc != 0) {
        fuzz_core_fail(req, rc);
        return 0;
    }
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
