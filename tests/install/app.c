/*
 * An application built out of tree against an installed libsrv (see
 * run.sh): it includes only <srv.h>, serves one route on 127.0.0.1 and a
 * free port, asks itself for it over a raw socket, checks the answer, stops
 * and exits 0. Any problem prints what and exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <srv.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static const char body[] = "installed libsrv works\n";

static void hello(srv_request *req, void *ctx)
{
    (void)ctx;
    srv_respond(req, 200, "text/plain", body, sizeof body - 1);
}

static int fail(const char *what, const char *detail)
{
    fprintf(stderr, "app: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 1;
}

/* One HTTP/1.1 request to 127.0.0.1:port; the whole answer into buf. */
static int fetch(int port, char *buf, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char req[] = "GET /hello?from=app HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Connection: close\r\n\r\n";
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
        ssize_t n;
        while (got + 1 < cap && (n = read(fd, buf + got, cap - 1 - got)) > 0)
            got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return (int)got;
}

int main(void)
{
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.worker_threads = 2;

    srv_server *srv = srv_server_new(srv_engine_default(), &cfg);
    if (srv == NULL)
        return fail("srv_server_new failed", NULL);
    if (srv_route(srv, "GET", "/hello", hello, NULL) != 0)
        return fail("srv_route failed", NULL);
    int rc = srv_server_start(srv);
    if (rc != 0)
        return fail(srv_strerror(rc), srv_server_last_error(srv));

    char answer[4096];
    int n = fetch(srv_server_port(srv), answer, sizeof answer);
    int ok = n > 0 && strncmp(answer, "HTTP/1.1 200 ", 13) == 0 &&
             strstr(answer, "\r\nContent-Length: 23\r\n") != NULL &&
             strstr(answer, "\r\n\r\n") != NULL &&
             strcmp(strstr(answer, "\r\n\r\n") + 4, body) == 0;

    if (srv_server_stop(srv, 1000) != 0)
        return fail("srv_server_stop failed", NULL);
    srv_server_free(srv);
    if (!ok)
        return fail("unexpected answer", n > 0 ? answer : "(nothing)");
    printf("app: engine %s answered over the installed libsrv\n",
           srv_engine_name(srv_engine_default()));
    return 0;
}
