/*
 * chat: a WebSocket chat room on libsrv.
 *   GET /       ->  the page (www/index.html, by srv_static_add)
 *   GET /chat   ->  WebSocket: every text message a socket sends goes to
 *                   every open socket, the sender included
 *   GET /health ->  "UP"
 * The room is a list of sockets under a mutex; each socket is held with
 * srv_ws_ref from on_open to on_close, so a broadcast never sends on a
 * freed one. A client too slow to take what the room says (its send
 * buffer full: SRV_EAGAIN) is closed with 1008 instead of being waited
 * for. Needs an engine with SRV_CAP_WEBSOCKET (uv, h2o).
 */
#define _POSIX_C_SOURCE 200809L

#include <srv.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CHAT_WWW
#define CHAT_WWW "examples/chat/www"
#endif

typedef struct room {
    pthread_mutex_t mu;
    srv_ws **members;
    size_t n, cap;
} room;

static void on_open(srv_ws *ws, void *ctx)
{
    room *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        srv_ws **m = realloc(r->members, cap * sizeof *m);
        if (m == NULL) {
            pthread_mutex_unlock(&r->mu);
            srv_ws_close(ws, 1011, "room full");
            return;
        }
        r->members = m;
        r->cap = cap;
    }
    srv_ws_ref(ws); /* the room's, until on_close */
    r->members[r->n++] = ws;
    pthread_mutex_unlock(&r->mu);
}

static void on_close(srv_ws *ws, int code, const char *reason, void *ctx)
{
    (void)code, (void)reason;
    room *r = ctx;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->n; i++) {
        if (r->members[i] == ws) {
            r->members[i] = r->members[--r->n];
            srv_ws_unref(ws);
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
}

static void on_message(srv_ws *ws, int is_text, const void *data, size_t len, void *ctx)
{
    room *r = ctx;
    if (!is_text) {
        srv_ws_close(ws, 1003, "text only");
        return;
    }
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->n; i++)
        if (srv_ws_send_text(r->members[i], data, len) == SRV_EAGAIN)
            srv_ws_close(r->members[i], 1008, "too slow");
    pthread_mutex_unlock(&r->mu);
}

static void handle_health(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "text/plain; charset=utf-8", "UP", 2);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: chat [--engine NAME] [--host ADDR] [--port N] [--max-message-bytes N]\n"
                 "            [--www DIR]\n"
                 "  --port N               TCP port, 0 for any free one (default 8080)\n"
                 "  --max-message-bytes N  the largest message taken (default 65536)\n"
                 "  --www DIR              the page's directory (default " CHAT_WWW ")\n"
                 "SRV_* variables configure the server (srv_config_from_env).\n");
}

int main(int argc, char **argv)
{
    const char *engine_name = NULL, *host = "0.0.0.0", *www = CHAT_WWW;
    int port = 8080;
    unsigned long long max_msg = 65536;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--engine") == 0 && i + 1 < argc)
            engine_name = argv[++i];
        else if (strcmp(argv[i], "--host") == 0 && i + 1 < argc)
            host = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-message-bytes") == 0 && i + 1 < argc)
            max_msg = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--www") == 0 && i + 1 < argc)
            www = argv[++i];
        else {
            usage(strcmp(argv[i], "--help") == 0 ? stdout : stderr);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    const srv_engine *engine;
    if (srv_engine_select(engine_name, &engine) != 0) {
        fprintf(stderr, "chat: engine \"%s\" is not built into this libsrv\n",
                engine_name ? engine_name : getenv("SRV_ENGINE"));
        return 2;
    }
    srv_config cfg;
    srv_config_init(&cfg);
    char err[256];
    if (srv_config_from_env(&cfg, "SRV_", err, sizeof err) != 0) {
        fprintf(stderr, "chat: %s\n", err);
        return 2;
    }
    cfg.host = host;
    cfg.port = port;
    srv_server *srv = srv_server_new(engine, &cfg);
    static room r = {.mu = PTHREAD_MUTEX_INITIALIZER};
    srv_ws_opts wo;
    srv_ws_opts_init(&wo);
    wo.max_message_bytes = max_msg;
    wo.flags = SRV_WS_NONBLOCKING; /* the callbacks only copy bytes: no worker needed */
    wo.on_open = on_open;
    wo.on_message = on_message;
    wo.on_close = on_close;
    wo.ctx = &r;
    srv_static_opts so;
    srv_static_opts_init(&so);
    so.prefix = "/";
    so.root = www;
    int rc = srv == NULL ? SRV_ENOMEM : srv_route_ws(srv, "/chat", &wo);
    if (rc == 0)
        rc = srv_route(srv, "GET", "/health", handle_health, NULL);
    if (rc == 0)
        rc = srv_static_add(srv, &so);
    sigset_t run_sigs; /* srv_server_run's signals wait for it, not kill us early */
    sigemptyset(&run_sigs);
    sigaddset(&run_sigs, SIGINT);
    sigaddset(&run_sigs, SIGTERM);
    sigaddset(&run_sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &run_sigs, NULL);
    if (rc == 0)
        rc = srv_server_start(srv);
    if (rc != 0) {
        fprintf(stderr, "chat: %s: %s\n", srv_strerror(rc),
                srv ? srv_server_last_error(srv) : "out of memory");
        srv_server_free(srv);
        return 1;
    }
    printf("chat: %s engine on port %d\n", srv_engine_name(engine), srv_server_port(srv));
    fflush(stdout);
    rc = srv_server_run(srv, 5000);
    srv_server_free(srv);
    free(r.members); /* every socket left the room at the stop (on_close) */
    return rc == 0 ? 0 : 1;
}
