/*
 * The fake engine shared by the unit tests (see fake_engine.h): a vtable
 * that records, a generic handler that captures, and the test-thread side
 * that builds, dispatches, waits and releases requests.
 */
#include "fake_engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

uint64_t fake_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void fake_sleep_ms(unsigned ms)
{
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        continue;
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d == NULL)
        abort(); /* a test harness out of memory cannot report anything */
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static char *dup0(const char *s)
{
    return s ? dupn(s, strlen(s)) : NULL;
}

/* ------------------------------------------------------------------ */
/* The engine table                                                    */
/* ------------------------------------------------------------------ */

static fake *fake_of(srv_server *srv)
{
    /* The engine table is the first member of struct fake. */
    return (fake *)(void *)srv_server_engine(srv);
}

static int fake_start_slot(srv_server *srv, void **state)
{
    fake *f = fake_of(srv);
    pthread_mutex_lock(&f->mu);
    f->start_calls++;
    int rc = f->start_rc;
    int do_listen = f->listen;
    pthread_mutex_unlock(&f->mu);

    if (rc != 0) {
        srv__server_set_error(srv, "fake engine: start refused (%d)", rc);
        return rc;
    }
    if (do_listen) {
        int fd = srv__listen(srv, 0);
        if (fd < 0)
            return fd;
        f->fd = fd;
    }
    pthread_mutex_lock(&f->mu);
    f->started = 1;
    pthread_mutex_unlock(&f->mu);
    *state = f;
    return 0;
}

static void fake_respond_slot(void *state, srv_request *req)
{
    fake *f = state;
    fake_req *r = srv__request_engine_data(req);

    pthread_mutex_lock(&f->mu);
    f->last_state = state;
    if (r == NULL || r->req != req || r->respond_calls > 0) {
        f->unexpected++;
        if (r != NULL)
            r->respond_calls++;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        return;
    }
    if (r->close_in_respond)
        srv__request_set_close(req);

    r->status_out = srv__response_status(req);
    r->keep_alive = srv__response_keep_alive(req);
    size_t len = 0;
    const void *body = srv__response_body(req, &len);
    r->body_out = dupn(body ? body : "", body ? len : 0);
    r->body_out_len = len;
    r->content_length = srv__response_content_length(req);
    size_t n = srv__response_header_count(req);
    for (size_t i = 0; i < n && i < FAKE_MAX_PAIRS; i++) {
        const char *value = NULL;
        const char *name = srv__response_header_at(req, i, &value);
        r->resp_hname[i] = dup0(name);
        r->resp_hvalue[i] = dup0(value);
    }
    r->nresp_headers = n;
    const char *past = NULL;
    r->header_past_end = srv__response_header_at(req, n, &past) == NULL;
    size_t head_len = 0, again_len = 0;
    const char *head = srv__response_http1_head(req, &head_len);
    r->head = dupn(head ? head : "", head ? head_len : 0);
    r->head_len = head ? head_len : 0;
    const char *again = srv__response_http1_head(req, &again_len);
    r->head_stable = head != NULL && again == head && again_len == head_len;

    r->respond_calls++;
    r->respond_seq = ++f->seq;
    r->respond_thread = pthread_self();
    int release = r->release_in_respond && !r->released;
    if (release)
        r->released = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);

    if (release)
        srv__request_release(req);
}

static void fake_quiesce_slot(void *state)
{
    fake *f = state;
    pthread_mutex_lock(&f->mu);
    f->quiesce_calls++;
    f->quiesce_seq = ++f->seq;
    f->last_state = state;
    pthread_mutex_unlock(&f->mu);
}

static void fake_stop_slot(void *state)
{
    fake *f = state;
    srv_request *to_release[FAKE_MAX_REQS];
    size_t n = 0;

    pthread_mutex_lock(&f->mu);
    f->stop_calls++;
    f->stop_seq = ++f->seq;
    f->last_state = state;
    for (size_t i = 0; i < f->nreqs; i++) {
        fake_req *r = &f->reqs[i];
        if (!r->sent || r->released)
            continue;
        if (r->respond_calls == 0)
            f->stop_unanswered++;
        r->released = 1;
        to_release[n++] = r->req;
    }
    pthread_mutex_unlock(&f->mu);
    /* Release every request still held, as the contract asks. */
    for (size_t i = 0; i < n; i++)
        srv__request_release(to_release[i]);
}

static void fake_destroy_slot(void *state)
{
    fake *f = state;
    pthread_mutex_lock(&f->mu);
    f->destroy_calls++;
    f->last_state = state;
    pthread_mutex_unlock(&f->mu);
    if (f->fd >= 0) {
        close(f->fd);
        f->fd = -1;
    }
}

fake *fake_new(void)
{
    fake *f = calloc(1, sizeof *f);
    if (f == NULL)
        abort();
    f->engine = (srv_engine){
        .version = SRV_ENGINE_VERSION,
        .name = "fake",
        .caps = 0,
        .start = fake_start_slot,
        .respond = fake_respond_slot,
        .quiesce = fake_quiesce_slot,
        .stop = fake_stop_slot,
        .destroy = fake_destroy_slot,
    };
    f->fd = -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    return f;
}

void fake_config(srv_config *cfg)
{
    srv_config_init(cfg);
    cfg->host = "127.0.0.1";
    cfg->port = 0;
    cfg->worker_threads = 4;
}

srv_server *fake_server(fake *f, const srv_config *cfg)
{
    srv_config c;
    if (cfg == NULL) {
        fake_config(&c);
        cfg = &c;
    }
    f->srv = srv_server_new(&f->engine, cfg);
    assert_non_null(f->srv);
    return f->srv;
}

srv_server *fake_start(fake *f, const srv_config *cfg)
{
    srv_server *srv = f->srv ? f->srv : fake_server(f, cfg);
    int rc = srv_server_start(srv);
    if (rc != 0)
        fail_msg("srv_server_start: %s (%s)", srv_strerror(rc), srv_server_last_error(srv));
    return srv;
}

static void fake_req_free_strings(fake_req *r)
{
    char **fields[] = {&r->method_seen, &r->path_seen,  &r->target_seen, &r->protocol_seen,
                       &r->peer_seen,   &r->body_seen,  &r->body_out,    &r->head,
                       &r->client_seen, &r->scheme_seen, &r->host_seen};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        free(*fields[i]);
        *fields[i] = NULL;
    }
    for (size_t i = 0; i < FAKE_MAX_PAIRS; i++) {
        free(r->qname[i]);
        free(r->qvalue[i]);
        free(r->lookup_val[i]);
        free(r->header_val[i]);
        free(r->resp_hname[i]);
        free(r->resp_hvalue[i]);
        r->qname[i] = r->qvalue[i] = r->lookup_val[i] = r->header_val[i] = NULL;
        r->resp_hname[i] = r->resp_hvalue[i] = NULL;
    }
}

void fake_finish(fake *f)
{
    if (f->srv != NULL) {
        srv_server_free(f->srv);
        f->srv = NULL;
    }
    pthread_mutex_lock(&f->mu);
    int unexpected = f->unexpected, unanswered = f->stop_unanswered;
    int started = f->started, stops = f->stop_calls, destroys = f->destroy_calls;
    pthread_mutex_unlock(&f->mu);

    assert_int_equal(unexpected, 0);   /* respond twice, or for a stranger */
    assert_int_equal(unanswered, 0);   /* stop ran before every answer */
    if (started) {
        assert_int_equal(stops, 1);
        assert_int_equal(destroys, 1);
    } else {
        assert_int_equal(stops, 0);
        assert_int_equal(destroys, 0);
    }
    for (size_t i = 0; i < f->nreqs; i++) {
        fake_req *r = &f->reqs[i];
        if (!r->sent)
            continue;
        if (r->released_early)
            assert_true(r->respond_calls <= 1);
        else if (r->respond_calls != 1)
            fail_msg("request %zu (%s %s): respond called %d times, want exactly 1", i,
                     r->method, r->target, r->respond_calls);
        assert_true(r->released);
    }
}

void fake_free(fake *f)
{
    if (f == NULL)
        return;
    if (f->srv != NULL)
        srv_server_free(f->srv);
    for (size_t i = 0; i < f->nreqs; i++)
        fake_req_free_strings(&f->reqs[i]);
    if (f->fd >= 0)
        close(f->fd);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

/* ------------------------------------------------------------------ */
/* The handler side                                                    */
/* ------------------------------------------------------------------ */

static void mark(fake_req *r, int *flag)
{
    pthread_mutex_lock(&r->fake->mu);
    *flag = 1;
    pthread_cond_broadcast(&r->fake->cv);
    pthread_mutex_unlock(&r->fake->mu);
}

static int respond_as_asked(fake_req *r)
{
    size_t len = r->resp_len == SIZE_MAX ? (r->resp_body ? strlen(r->resp_body) : 0)
                                         : r->resp_len;
    return srv_respond(r->req, r->status, r->content_type, r->resp_body, len);
}

static void fake_after_cb(void *arg)
{
    fake_req *r = arg;
    int rc = respond_as_asked(r);
    pthread_mutex_lock(&r->fake->mu);
    r->respond_rc = rc;
    pthread_mutex_unlock(&r->fake->mu);
}

/* Route handler used by every test: capture what the request API says,
 * then act as r->action asks. `ctx` is recorded to tell routes apart. */
void fake_handler(srv_request *req, void *ctx)
{
    fake_req *r = srv__request_engine_data(req);
    fake *f = r->fake;

    r->handler_calls++;
    r->handler_thread = pthread_self();
    r->handler_ctx = ctx;
    r->req_server = srv_request_server(req);
    r->method_seen = dup0(srv_request_method(req));
    r->path_seen = dup0(srv_request_path(req));
    r->target_seen = dup0(srv_request_target(req));
    r->protocol_seen = dup0(srv_request_protocol(req));
    r->peer_seen = dup0(srv_request_peer(req));
    r->client_seen = dup0(srv_request_client_addr(req));
    r->scheme_seen = dup0(srv_request_scheme(req));
    r->host_seen = srv_request_host(req) ? dup0(srv_request_host(req)) : NULL;
    size_t blen = 0;
    const char *body = srv_request_body(req, &blen);
    r->body_seen = body ? dupn(body, blen) : NULL;
    r->body_seen_len = blen;
    /* The body is NUL-terminated for convenience: flag it if not. */
    if (body != NULL && body[blen] != '\0')
        r->body_seen_len = SIZE_MAX;

    r->query_count = srv_request_query_count(req);
    for (size_t i = 0; i < r->query_count && i < FAKE_MAX_PAIRS; i++) {
        const char *name = NULL, *value = NULL;
        if (srv_request_query_at(req, i, &name, &value) == 0) {
            r->qname[i] = dup0(name);
            r->qvalue[i] = dup0(value);
        }
    }
    r->query_at_end_rc = srv_request_query_at(req, r->query_count, NULL, NULL);
    for (size_t i = 0; i < r->nlookups; i++)
        r->lookup_val[i] = dup0(srv_request_query(req, r->lookups[i]));
    for (size_t i = 0; i < r->nheader_lookups; i++)
        r->header_val[i] = dup0(srv_request_header(req, r->header_lookups[i]));
    for (size_t i = 0; i < r->nset_headers; i++)
        r->set_header_rc[i] = srv_set_header(req, r->set_headers[i][0], r->set_headers[i][1]);
    mark(r, &r->handler_started);

    int rc = 0, after_rc = 0;
    switch (r->action) {
    case FAKE_RESPOND:
        rc = respond_as_asked(r);
        break;
    case FAKE_HOLD:
        break;
    case FAKE_AFTER:
        after_rc = srv_after(r->req_server, r->after_ms, fake_after_cb, r);
        break;
    case FAKE_BLOCK: {
        uint64_t deadline = fake_now_ms() + FAKE_WAIT_MS;
        pthread_mutex_lock(&f->mu);
        while (!f->gate_open && fake_now_ms() < deadline) {
            pthread_mutex_unlock(&f->mu);
            fake_sleep_ms(2);
            pthread_mutex_lock(&f->mu);
        }
        pthread_mutex_unlock(&f->mu);
        rc = respond_as_asked(r);
        break;
    }
    }
    pthread_mutex_lock(&f->mu);
    if (r->action != FAKE_AFTER)
        r->respond_rc = rc;
    r->after_rc = after_rc;
    r->handler_returned = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* ------------------------------------------------------------------ */
/* The connection side (test thread)                                   */
/* ------------------------------------------------------------------ */

fake_req *fake_req_new(fake *f, const char *method, const char *target)
{
    assert_true(f->nreqs < FAKE_MAX_REQS);
    fake_req *r = &f->reqs[f->nreqs++];
    memset(r, 0, sizeof *r);
    r->fake = f;
    r->method = method;
    r->target = target;
    r->major = 1;
    r->minor = 1;
    r->action = FAKE_RESPOND;
    r->status = 200;
    r->content_type = "text/plain";
    r->resp_body = "ok";
    r->resp_len = SIZE_MAX;
    return r;
}

fake_req *fake_req_from(fake *f, const char *target, const char *ip, int port, va_list ap)
{
    fake_req *r = fake_req_new(f, "GET", target);
    r->peer_v4.sin_family = AF_INET;
    r->peer_v4.sin_port = htons((uint16_t)port);
    assert_int_equal(inet_pton(AF_INET, ip, &r->peer_v4.sin_addr), 1);
    r->peer = (const struct sockaddr *)&r->peer_v4;
    r->peer_len = sizeof r->peer_v4;
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL) {
        assert_true(r->nheaders < FAKE_MAX_PAIRS);
        r->headers[r->nheaders][0] = name;
        r->headers[r->nheaders][1] = va_arg(ap, const char *);
        r->nheaders++;
    }
    return r;
}

int fake_send(fake_req *r)
{
    fake *f = r->fake;
    assert_non_null(f->srv);
    srv_request *req = srv__request_new(f->srv, r->peer, r->peer_len);
    assert_non_null(req);
    r->req = req;
    srv__request_set_engine_data(req, r);

    int st = srv__request_set_method(req, r->method, strlen(r->method));
    if (st == 0)
        st = srv__request_set_target(req, r->target, strlen(r->target));
    if (st == 0)
        srv__request_set_version(req, r->major, r->minor);
    bool has_host = false;
    for (size_t i = 0; st == 0 && i < r->nheaders; i++) {
        has_host = has_host || strcasecmp(r->headers[i][0], "Host") == 0;
        st = srv__request_add_header(req, r->headers[i][0], strlen(r->headers[i][0]),
                                     r->headers[i][1], strlen(r->headers[i][1]));
    }
    /* HTTP/1.1 needs a Host (the core's rule); tests that do not care get one. */
    if (st == 0 && !has_host && !r->no_host)
        st = srv__request_add_header(req, "Host", 4, "fake", 4);
    if (st == 0)
        st = srv__request_headers_done(req);
    if (st == 0 && r->body != NULL)
        st = srv__request_append_body(req, r->body, strlen(r->body));
    /* The request helpers return 0 or an HTTP status, never an SRV_E code. */
    assert_true(st == 0 || (st >= 400 && st <= 599));

    r->build_status = st;
    pthread_mutex_lock(&f->mu);
    r->sent = 1;
    pthread_mutex_unlock(&f->mu);
    if (st != 0)
        srv__request_fail(req, st);
    else
        srv__request_dispatch(req);
    return st;
}

static int wait_flag(fake *f, const int *flag, unsigned ms)
{
    uint64_t deadline = fake_now_ms() + ms;
    pthread_mutex_lock(&f->mu);
    while (!*flag) {
        uint64_t now = fake_now_ms();
        if (now >= deadline)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t left = deadline - now;
        if (left > 20)
            left = 20; /* re-check: the flag may be a plain counter */
        ts.tv_nsec += (long)(left * 1000000u);
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    int ok = *flag != 0;
    pthread_mutex_unlock(&f->mu);
    return ok ? 0 : -1;
}

int fake_wait_respond(fake_req *r, unsigned ms)
{
    return wait_flag(r->fake, &r->respond_calls, ms);
}

int fake_wait(fake_req *r, unsigned ms)
{
    if (fake_wait_respond(r, ms) != 0)
        return -1;
    fake_release(r);
    return r->status_out;
}

int fake_wait_handler(fake_req *r, unsigned ms)
{
    return wait_flag(r->fake, &r->handler_returned, ms);
}

int fake_wait_handler_started(fake_req *r, unsigned ms)
{
    return wait_flag(r->fake, &r->handler_started, ms);
}

int fake_roundtrip(fake *f, const char *method, const char *target)
{
    fake_req *r = fake_req_new(f, method, target);
    fake_send(r);
    return fake_wait(r, FAKE_WAIT_MS);
}

int fake_responded(fake_req *r)
{
    pthread_mutex_lock(&r->fake->mu);
    int n = r->respond_calls;
    pthread_mutex_unlock(&r->fake->mu);
    return n;
}

void fake_release(fake_req *r)
{
    pthread_mutex_lock(&r->fake->mu);
    int release = !r->released;
    if (release) {
        r->released = 1;
        r->released_early = r->respond_calls == 0;
    }
    pthread_mutex_unlock(&r->fake->mu);
    if (release)
        srv__request_release(r->req);
}

void fake_open_gate(fake *f)
{
    pthread_mutex_lock(&f->mu);
    f->gate_open = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

const char *fake_resp_header(const fake_req *r, const char *name)
{
    for (size_t i = 0; i < r->nresp_headers && i < FAKE_MAX_PAIRS; i++)
        if (r->resp_hname[i] && strcasecmp(r->resp_hname[i], name) == 0)
            return r->resp_hvalue[i] ? r->resp_hvalue[i] : "";
    return NULL;
}

int fake_head_header(const fake_req *r, const char *name, char *buf, size_t cap)
{
    int count = 0;
    size_t nlen = strlen(name);
    const char *p = r->head ? strstr(r->head, "\r\n") : NULL;
    while (p != NULL) {
        p += 2;
        const char *eol = strstr(p, "\r\n");
        if (eol == NULL || eol == p)
            break; /* end of the head */
        if ((size_t)(eol - p) > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
            if (count++ == 0 && buf != NULL && cap > 0) {
                const char *v = p + nlen + 1;
                while (v < eol && (*v == ' ' || *v == '\t'))
                    v++;
                size_t vlen = (size_t)(eol - v);
                if (vlen >= cap)
                    vlen = cap - 1;
                memcpy(buf, v, vlen);
                buf[vlen] = '\0';
            }
        }
        p = eol;
    }
    return count;
}
