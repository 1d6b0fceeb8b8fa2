/*
 * ws_echo: the libsrv side of bench/ws_measure.sh, a WebSocket echo.
 *   GET /echo    ->  WebSocket: every message comes back to its sender,
 *                    text as text, binary as binary
 *   GET /health  ->  "UP"
 * Callbacks run on the I/O thread (SRV_WS_NONBLOCKING: an echo only copies
 * bytes, as examples/chat's room does) unless --worker puts them on the
 * worker pool. SRV_* variables configure the server (srv_config_from_env),
 * e.g. SRV_MAX_CONNECTIONS for many idle sockets. Prints
 * "ws_echo: ENGINE engine on port N" once it listens; an engine without
 * SRV_CAP_WEBSOCKET refuses the route and it exits 3 saying so, so the
 * bench can skip that engine with the reason.
 */
#define _POSIX_C_SOURCE 200809L

#include <srv.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_message(srv_ws *ws, int is_text, const void *data, size_t len, void *ctx)
{
    (void)ctx;
    int rc = is_text ? srv_ws_send_text(ws, data, len) : srv_ws_send_binary(ws, data, len);
    /* A client that does not read its echoes (1 MiB waiting) is closed
     * rather than buffered for. */
    if (rc == SRV_EAGAIN)
        srv_ws_close(ws, 1008, "too slow");
}

static void handle_health(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "text/plain; charset=utf-8", "UP", 2);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: ws_echo [--engine NAME] [--host ADDR] [--port N] [--worker]\n"
                 "  --port N   TCP port, 0 for any free one (default 0)\n"
                 "  --worker   run the callbacks on the worker pool, not the I/O thread\n"
                 "SRV_* variables configure the server (srv_config_from_env).\n");
}

int main(int argc, char **argv)
{
    const char *engine_name = NULL, *host = "127.0.0.1";
    int port = 0, worker = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--engine") == 0 && i + 1 < argc)
            engine_name = argv[++i];
        else if (strcmp(argv[i], "--host") == 0 && i + 1 < argc)
            host = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--worker") == 0)
            worker = 1;
        else {
            usage(strcmp(argv[i], "--help") == 0 ? stdout : stderr);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    const srv_engine *engine;
    if (srv_engine_select(engine_name, &engine) != 0) {
        fprintf(stderr, "ws_echo: engine \"%s\" is not built into this libsrv\n",
                engine_name ? engine_name : getenv("SRV_ENGINE"));
        return 2;
    }
    srv_config cfg;
    srv_config_init(&cfg);
    char err[256];
    if (srv_config_from_env(&cfg, "SRV_", err, sizeof err) != 0) {
        fprintf(stderr, "ws_echo: %s\n", err);
        return 2;
    }
    cfg.host = host;
    cfg.port = port;
    srv_server *srv = srv_server_new(engine, &cfg);
    if (srv == NULL) {
        fprintf(stderr, "ws_echo: out of memory\n");
        return 1;
    }
    srv_ws_opts wo;
    srv_ws_opts_init(&wo);
    wo.flags = worker ? 0 : SRV_WS_NONBLOCKING;
    wo.on_message = on_message;
    int rc = srv_route_ws(srv, "/echo", &wo);
    if (rc == SRV_EENGINE) {
        fprintf(stderr, "ws_echo: %s\n", srv_server_last_error(srv));
        srv_server_free(srv);
        return 3;
    }
    if (rc == 0)
        rc = srv_route(srv, "GET", "/health", handle_health, NULL);
    sigset_t run_sigs; /* srv_server_run's signals wait for it, not kill us early */
    sigemptyset(&run_sigs);
    sigaddset(&run_sigs, SIGINT);
    sigaddset(&run_sigs, SIGTERM);
    sigaddset(&run_sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &run_sigs, NULL);
    if (rc == 0)
        rc = srv_server_start(srv);
    if (rc != 0) {
        fprintf(stderr, "ws_echo: %s: %s\n", srv_strerror(rc), srv_server_last_error(srv));
        srv_server_free(srv);
        return 1;
    }
    printf("ws_echo: %s engine on port %d\n", srv_engine_name(engine), srv_server_port(srv));
    fflush(stdout);
    rc = srv_server_run(srv, 5000);
    srv_server_free(srv);
    return rc == 0 ? 0 : 1;
}
