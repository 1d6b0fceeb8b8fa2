/*
 * todo: a JSON todo service on libsrv, the example to read after Greetings:
 * route parameters, JSON bodies (jansson), server-sent events, CORS, static
 * files, and every error in one JSON shape.
 *   GET /             the page (www/index.html and app.js)
 *   GET /todos        every item          POST /todos {"title":"..."} -> 201
 *   GET /todos/{id}   one item            DELETE /todos/{id}           -> 204
 *   GET /events       an SSE "todo" event per item added    GET /health {"status":"UP"}
 */
#define _POSIX_C_SOURCE 200809L

#include <srv.h>

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define MAX_BODY (64 * 1024)
#define MAX_SUBS 1024

/* Handlers run on worker threads and POST's body callbacks on I/O threads,
 * several at once: the store is only touched under mu. */
static struct {
    pthread_mutex_t mu;
    json_t *items;          /* {"1": {"id":1,"title":"..."}, ...} */
    json_int_t next_id;
    srv_stream *subs[MAX_SUBS]; /* the /events clients */
    size_t nsubs;
    int stopping;
} store = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Answer with v (taken) as JSON. */
static void reply_json(srv_request *req, int status, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    srv_respond(req, s ? status : 500, "application/json", s, s ? strlen(s) : 0);
    free(s);
}

/* Our errors in the shape of the library's own (error_format JSON, Spring
 * Boot's), plus a message saying what to fix. */
static void reply_error(srv_request *req, int status, const char *error, const char *message)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    char ts[40]; /* as the library's: 2026-12-03T14:40:00.123Z */
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", gmtime_r(&tv.tv_sec, &tm));
    snprintf(ts + n, sizeof ts - n, ".%03dZ", (int)(tv.tv_usec / 1000));
    reply_json(req, status, json_pack("{s:s, s:i, s:s, s:s, s:s}", "timestamp", ts, "status",
                                      status, "error", error, "message", message, "path",
                                      srv_request_path(req)));
}

/* Under mu: the event (data NULL: a comment) to every client, ending the streams
 * of clients gone. One too slow to take its buffer (SRV_EAGAIN) misses it. */
static void broadcast(const char *id, const char *data)
{
    size_t keep = 0;
    for (size_t i = 0; i < store.nsubs; i++) {
        srv_stream *s = store.subs[i];
        int rc = data ? srv_sse_send(s, "todo", id, data) : srv_sse_keepalive(s);
        if (rc == 0 || rc == SRV_EAGAIN)
            store.subs[keep++] = s;
        else
            srv_stream_end(s);
    }
    store.nsubs = keep;
}

static void handle_events(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_stream *s;
    int rc = srv_sse_start(req, &s);
    if (rc != 0 && rc != SRV_ETIMEDOUT && rc != SRV_ECLOSED) /* else answered already */
        reply_error(req, 503, "Service Unavailable", srv_strerror(rc));
    if (rc != 0)
        return;
    pthread_mutex_lock(&store.mu);
    if (store.nsubs == MAX_SUBS)
        broadcast(NULL, NULL); /* room: a client gone fails this or a later one */
    /* A first comment sends the head now (the page's EventSource opens); HEAD ends here. */
    if (!store.stopping && store.nsubs < MAX_SUBS && srv_sse_keepalive(s) == 0)
        store.subs[store.nsubs++] = s;
    else
        srv_stream_end(s);
    pthread_mutex_unlock(&store.mu);
}

/* A stop ends the event streams at once, instead of waiting its grace. */
static void on_stop(srv_server *srv, void *arg)
{
    (void)srv, (void)arg;
    pthread_mutex_lock(&store.mu);
    store.stopping = 1;
    for (size_t i = 0; i < store.nsubs; i++)
        srv_stream_end(store.subs[i]);
    store.nsubs = 0;
    pthread_mutex_unlock(&store.mu);
}

static void add_todo(srv_request *req, const char *body, size_t len)
{
    json_error_t jerr;
    json_t *in = json_loadb(body, len, 0, &jerr);
    const char *title = json_string_value(json_object_get(in, "title"));
    if (title == NULL || *title == '\0') {
        char msg[200];
        snprintf(msg, sizeof msg, "malformed JSON: %s", jerr.text);
        reply_error(req, 400, "Bad Request", in ? "give {\"title\": \"a non-empty string\"}" : msg);
        json_decref(in);
        return;
    }
    pthread_mutex_lock(&store.mu);
    json_int_t id = ++store.next_id;
    json_t *item = json_pack("{s:I, s:s}", "id", id, "title", title);
    char *text = json_dumps(item, JSON_COMPACT), where[40]; /* NULL for NULL */
    snprintf(where, sizeof where, "/todos/%" JSON_INTEGER_FORMAT, id);
    int ok = text != NULL && json_object_set(store.items, where + 7, item) == 0;
    if (ok)
        broadcast(where + 7, text);
    pthread_mutex_unlock(&store.mu);
    json_decref(in);
    json_decref(item);
    if (!ok)
        reply_error(req, 503, "Service Unavailable", "out of memory");
    else {
        srv_set_header(req, "Location", where);
        srv_respond(req, 201, "application/json", text, strlen(text));
    }
    free(text);
}

/* POST /todos reads its body itself (SRV_ROUTE_STREAM_BODY) so that the
 * 413 over MAX_BODY carries our message for the form to show (the library's
 * own 413, which a page on another origin can read as well, has none). */
typedef struct upload { size_t len; int over; char data[MAX_BODY]; } upload;

static int post_data(srv_request *req, const void *data, size_t len, void *arg)
{
    (void)req;
    upload *u = arg;
    if (u->over || len > MAX_BODY - u->len)
        u->over = 1; /* the rest is dropped; the 413 comes at the end */
    else {
        memcpy(u->data + u->len, data, len);
        u->len += len;
    }
    return 0;
}

static void post_end(srv_request *req, int status, void *arg)
{
    upload *u = arg;
    if (status == 0 && u->over)
        reply_error(req, 413, "Content Too Large", "a todo takes at most 64 KiB");
    else if (status == 0)
        add_todo(req, u->data, u->len);
    else /* the client left or the core answered: dropped, but still owed */
        srv_respond(req, 400, NULL, NULL, 0);
    free(u);
}

static void handle_post(srv_request *req, void *ctx)
{
    (void)ctx;
    upload *u = calloc(1, sizeof *u);
    if (u == NULL)
        reply_error(req, 503, "Service Unavailable", "out of memory");
    else if (srv_request_body_read(req, post_data, post_end, u) != 0) {
        free(u);
        srv_respond(req, 400, NULL, NULL, 0); /* answered already: dropped */
    }
}

/* GET and DELETE /todos/{id} (del non-NULL: delete). */
static void handle_one(srv_request *req, void *del)
{
    const char *id = srv_request_param(req, "id");
    pthread_mutex_lock(&store.mu);
    json_t *item = json_deep_copy(json_object_get(store.items, id)); /* answered unlocked */
    if (del != NULL)
        json_object_del(store.items, id);
    pthread_mutex_unlock(&store.mu);
    if (item == NULL)
        reply_error(req, 404, "Not Found", "no such todo");
    else if (del)
        srv_respond(req, 204, NULL, NULL, 0);
    else
        reply_json(req, 200, json_incref(item));
    json_decref(item);
}

static void handle_list(srv_request *req, void *ctx)
{
    (void)ctx;
    json_t *list = json_array(), *item;
    const char *id;
    pthread_mutex_lock(&store.mu);
    json_object_foreach(store.items, id, item) /* in the order added */
        json_array_append_new(list, json_deep_copy(item));
    pthread_mutex_unlock(&store.mu);
    reply_json(req, 200, list);
}

static void handle_health(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "application/json", "{\"status\":\"UP\"}", 15);
}

int main(int argc, char **argv)
{
    const char *engine_name = NULL, *cors = "*", *www = TODO_WWW, *port = "8080";
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.max_body_bytes = MAX_BODY;            /* the library's 413 past it */
    cfg.error_format = SRV_ERROR_FORMAT_JSON; /* its 404, 405, 400... like ours */
    const struct { const char *flag, **val; } flags[] = {
        {"--engine", &engine_name}, {"--host", &cfg.host}, {"--port", &port},
        {"--tls-cert", &cfg.tls_cert_file}, {"--tls-key", &cfg.tls_key_file},
        {"--cors", &cors}, {"--www", &www}};
    char err[256]; /* SRV_* variables set any field (SRV_ACCESS_LOG=common); flags win */
    if (srv_config_from_env(&cfg, "SRV_", err, sizeof err) != 0) {
        fprintf(stderr, "todo: %s\n", err);
        return 2;
    }
    for (int i = 1; i < argc; i += 2) {
        size_t f = 0;
        while (f < sizeof flags / sizeof flags[0] && strcmp(argv[i], flags[f].flag) != 0)
            f++;
        if (f == sizeof flags / sizeof flags[0] || i + 1 == argc) {
            fprintf(stderr, "usage: todo [--engine E] [--host ADDR] [--port N] [--tls-cert FILE "
                            "--tls-key FILE] [--cors ORIGINS] [--www DIR] (and SRV_* variables)\n");
            return 2;
        }
        *flags[f].val = argv[i + 1];
    }
    cfg.port = atoi(port);
    const srv_engine *engine;
    if (srv_engine_select(engine_name, &engine) != 0) {
        fprintf(stderr, "todo: that engine is not built into this libsrv\n");
        return 2;
    }
    /* Blocked in every thread until srv_server_run: any SIGTERM is a graceful stop. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT), sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    store.items = json_object();
    srv_server *srv = srv_server_new(engine, &cfg);
    srv_cors_opts c;
    srv_cors_opts_init(&c);
    c.allowed_origins = cors;
    c.allowed_methods = "GET, HEAD, POST, DELETE";
    c.exposed_headers = "Location";
    srv_static_opts st;
    srv_static_opts_init(&st);
    st.prefix = "/"; /* its "/{*path}" loses to "/todos"...: literals first */
    st.root = www;
    srv_route_opts post;
    srv_route_opts_init(&post);
    post.method = "POST";
    post.path = "/todos";
    post.handler = handle_post;
    post.flags = SRV_ROUTE_STREAM_BODY;
    post.max_body_bytes = 16 * MAX_BODY; /* past it the core's 413, not read */
    if (srv == NULL || store.items == NULL || srv_cors_add(srv, &c) != 0 ||
        srv_static_add(srv, &st) != 0 || srv_route_add(srv, &post) != 0 ||
        srv_route(srv, "GET", "/todos", handle_list, NULL) != 0 ||
        srv_route(srv, "GET", "/todos/{id}", handle_one, NULL) != 0 ||
        srv_route(srv, "DELETE", "/todos/{id}", handle_one, "delete") != 0 ||
        srv_route(srv, "GET", "/events", handle_events, NULL) != 0 ||
        srv_route(srv, "GET", "/health", handle_health, NULL) != 0 ||
        srv_server_on_stop(srv, on_stop, NULL) != 0 || srv_server_start(srv) != 0) {
        fprintf(stderr, "todo: cannot start (--cors '%s', --www '%s'): %s\n", cors, www,
                srv ? srv_server_last_error(srv) : "out of memory");
        srv_server_free(srv);
        return 1;
    }
    int h2 = srv_engine_caps(engine) & (cfg.tls_cert_file ? SRV_CAP_TLS_HTTP2 : SRV_CAP_HTTP2);
    printf("todo: engine=%s listening on %s://%s:%d (HTTP/1.1%s)\n", srv_engine_name(engine),
           cfg.tls_cert_file ? "https" : "http", cfg.host, srv_server_port(srv),
           h2 ? " and HTTP/2" : "");
    fflush(stdout);
    int rc = srv_server_run(srv, 5000);
    srv_server_free(srv);
    json_decref(store.items);
    return rc == 0 ? 0 : 1;
}
