/* mhd_bare: libmicrohttpd alone, the reference row of bench/compare's hello
 * scenario for libsrv's mhd engine. Every GET answers 200 "Hello Bench!"
 * (text/plain; charset=utf-8), /health included, from one response object
 * made once. 2 epoll threads and the engine's pool and connection limit
 * (engines/mhd.c at libsrv's defaults), so the difference is libsrv's.
 *
 *   mhd_bare --port N      serve 127.0.0.1:N until SIGTERM or SIGINT
 *
 * Builds on libmicrohttpd 0.9.75 and 1.0.x (enum MHD_Result is in both). */
#include <microhttpd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char body[] = "Hello Bench!";

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    static int seen;
    (void)url, (void)version, (void)upload_data, (void)upload_data_size;
    if (strcmp(method, "GET") != 0)
        return MHD_NO;
    /* Answer on the second call: queued in the first (the head alone),
     * 0.9.75 adds Connection: close and every request costs a connection. */
    if (*req_cls == NULL) {
        *req_cls = &seen;
        return MHD_YES;
    }
    return MHD_queue_response(conn, MHD_HTTP_OK, cls);
}

int main(int argc, char **argv)
{
    long port = -1;
    if (argc == 3 && strcmp(argv[1], "--port") == 0)
        port = strtol(argv[2], NULL, 10);
    if (port < 1 || port > 65535) {
        fprintf(stderr, "usage: mhd_bare --port N (1-65535)\n");
        return 2;
    }
    /* Blocked before MHD's threads start, so they inherit the mask and
     * only sigwait below takes the stop signal. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    struct MHD_Response *resp = MHD_create_response_from_buffer(
        sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL ||
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "text/plain; charset=utf-8") != MHD_YES) {
        fprintf(stderr, "mhd_bare: cannot make the response\n");
        return 1;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* TURBO as the engine (no shutdown before close); 12 KiB pool and
     * 12,532 connections: the engine's figures for 10,000 connections,
     * 8 KiB heads and 2 I/O threads. */
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_TURBO | MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, answer, resp,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_THREAD_POOL_SIZE, 2u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(8192 + 4096),
        MHD_OPTION_CONNECTION_LIMIT, 12532u,
        MHD_OPTION_CONNECTION_TIMEOUT, 20u,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u,
        MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "mhd_bare: cannot start on 127.0.0.1:%ld\n", port);
        return 1;
    }
    printf("mhd_bare: listening on http://127.0.0.1:%ld threads=2 (libmicrohttpd %s)\n", port,
           MHD_get_version());
    fflush(stdout);
    int sig;
    sigwait(&stop, &sig);
    MHD_stop_daemon(d);
    MHD_destroy_response(resp);
    return 0;
}
