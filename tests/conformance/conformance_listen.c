/*
 * The listening socket from outside (srv_config.listen_fd: systemd socket
 * activation, a supervisor) and SO_REUSEPORT (srv_config.reuse_port), on
 * every engine: a connection made while no server runs waits in the
 * inherited socket's backlog and is served by the next server, which is
 * what makes a restart refuse nothing.
 */
#include "conformance.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* A listening socket on 127.0.0.1, port chosen by the kernel. */
static int listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind: %s", strerror(errno));
    CHECK(listen(fd, 64) == 0, "listen: %s", strerror(errno));
    socklen_t len = sizeof a;
    CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0, "getsockname");
    *port = ntohs(a.sin_port);
    return fd;
}

static srv_server *server_on(int listen_fd, int port, int reuse_port, int *rc)
{
    srv_config cfg;
    srv_config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = port;
    cfg.io_threads = 1;
    cfg.worker_threads = 4;
    cfg.listen_fd = listen_fd;
    cfg.reuse_port = reuse_port;
    srv_server *srv = srv_server_new(g_engine, &cfg);
    CHECK(srv != NULL, "srv_server_new");
    CHECK(srv_route(srv, "GET", "/hello", h_hello, NULL) == 0, "srv_route");
    *rc = srv_server_start(srv);
    return srv;
}

/* One GET /hello on c (already connected), answered 200 "hello". */
static void expect_hello(rc_conn *c, const char *what)
{
    CHECK(rc_send_str(c, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", 2000) == RC_OK,
          "[%s] send", what);
    rc_response r;
    int rc = rc_read_response(c, &r, 0, 5000);
    int st = rc == RC_OK ? r.status : 0;
    rc_response_free(&r);
    CHECK(st == 200, "[%s] got %s status %d, want 200", what, rc_strerror(rc), st);
}

void test_listen_fd_inherited(void **state)
{
    (void)state;
    int port;
    int fd = listener(&port);
    int rc;
    srv_server *srv = server_on(fd, 1 /* ignored: the socket's port counts */, 0, &rc);
    CHECK(rc == 0, "start on listen_fd: %s (%s)", srv_strerror(rc), srv_server_last_error(srv));
    CHECK(srv_server_port(srv) == port, "srv_server_port %d, the socket's port is %d",
          srv_server_port(srv), port);
    rc_conn c;
    rc_init(&c);
    CHECK(rc_connect(&c, port, 2000) == RC_OK, "connect");
    expect_hello(&c, "served on the inherited socket");
    rc_close(&c);
    CHECK(srv_server_stop(srv, 1000) == 0, "stop");
    srv_server_free(srv);

    /* Between two servers: the connection waits in the backlog of the
     * socket the caller kept, and the next server answers it. */
    rc_init(&c);
    CHECK(rc_connect(&c, port, 2000) == RC_OK, "connect while no server runs: the caller's "
          "socket must still listen");
    CHECK(rc_send_str(&c, "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n", 2000) == RC_OK, "send");
    srv = server_on(fd, 0, 0, &rc);
    CHECK(rc == 0, "second start: %s (%s)", srv_strerror(rc), srv_server_last_error(srv));
    rc_response r;
    rc = rc_read_response(&c, &r, 0, 5000);
    int st = rc == RC_OK ? r.status : 0;
    rc_response_free(&r);
    CHECK(st == 200, "the request made between the servers: %s status %d, want 200",
          rc_strerror(rc), st);
    rc_close(&c);
    CHECK(srv_server_stop(srv, 1000) == 0, "stop");
    srv_server_free(srv);
    close(fd);
}

void test_listen_fd_refused(void **state)
{
    (void)state;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;
    srv_server *srv = server_on(s, 0, 0, &rc); /* a socket, not listening */
    CHECK(rc == SRV_EINVAL && strstr(srv_server_last_error(srv), "not listening") != NULL,
          "a socket that does not listen: %s (%s)", srv_strerror(rc), srv_server_last_error(srv));
    srv_server_free(srv);
    close(s);
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    srv = server_on(p[0], 0, 0, &rc);
    CHECK(rc == SRV_EINVAL && strstr(srv_server_last_error(srv), "not a stream socket") != NULL,
          "a pipe: %s (%s)", srv_strerror(rc), srv_server_last_error(srv));
    srv_server_free(srv);
    close(p[0]);
    close(p[1]);
}

/* Two servers on one port: refused without reuse_port, shared with it. */
void test_reuse_port(void **state)
{
    (void)state;
    int port, rc1, rc2;
    close(listener(&port)); /* a port that was free a moment ago */
    srv_server *a = server_on(-1, port, 1, &rc1);
    CHECK(rc1 == 0, "first server with reuse_port: %s (%s)", srv_strerror(rc1),
          srv_server_last_error(a));
    srv_server *b = server_on(-1, port, 0, &rc2);
    CHECK(rc2 == SRV_EBIND, "second server without reuse_port: %s, want SRV_EBIND",
          srv_strerror(rc2));
    srv_server_free(b);
    b = server_on(-1, port, 1, &rc2);
    CHECK(rc2 == 0, "second server with reuse_port: %s (%s)", srv_strerror(rc2),
          srv_server_last_error(b));
    /* Both serve: new connections land on either; each gets its answer. */
    for (int i = 0; i < 8; i++) {
        rc_conn c;
        rc_init(&c);
        CHECK(rc_connect(&c, port, 2000) == RC_OK, "connect %d", i);
        expect_hello(&c, "reuse_port");
        rc_close(&c);
    }
    CHECK(srv_server_stop(a, 1000) == 0 && srv_server_stop(b, 1000) == 0, "stop");
    srv_server_free(a);
    srv_server_free(b);
}
