/* The listening socket every engine uses, so host parsing, IPv6, port 0
 * and "cannot bind" messages are the same on all of them. */
#include "srv_core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* srv_config.listen_fd: a socket someone else bound (systemd, a
 * supervisor). Checked, made what the engine asked for, and its port
 * recorded. */
static int srv__listen_inherited(srv_server *srv, unsigned flags)
{
    int fd = srv->cfg.listen_fd, type = 0, listening = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) {
        srv__server_set_error(srv, "listen_fd %d is not a stream socket: %s", fd,
                              errno == ENOTSOCK || errno == EBADF ? strerror(errno)
                                                                   : "wrong socket type");
        return SRV_EINVAL;
    }
    len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
        srv__server_set_error(srv, "listen_fd %d is a socket that is not listening (call "
                              "listen() on it first)", fd);
        return SRV_EINVAL;
    }
    struct sockaddr_storage ss;
    len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
        (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) {
        srv__server_set_error(srv, "listen_fd %d is not a TCP/IP socket", fd);
        return SRV_EINVAL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, (flags & SRV__LISTEN_NONBLOCK) ? fl | O_NONBLOCK
                                                                   : fl & ~O_NONBLOCK) != 0) {
        srv__server_set_error(srv, "listen_fd %d: fcntl: %s", fd, strerror(errno));
        return SRV_ESYS;
    }
    /* The engine owns what it gets (it closes it at stop); the caller keeps
     * its own descriptor, so the socket outlives this server (systemd,
     * or a supervisor handing it to the next process). */
    int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) {
        srv__server_set_error(srv, "listen_fd %d: cannot duplicate it: %s", fd, strerror(errno));
        return SRV_ESYS;
    }
    srv__server_set_port(srv, ntohs(ss.ss_family == AF_INET
                                        ? ((struct sockaddr_in *)&ss)->sin_port
                                        : ((struct sockaddr_in6 *)&ss)->sin6_port));
    return dup;
}

int srv_systemd_listen_fd(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    int fd = -1;
    if (pid != NULL && fds != NULL && strtol(pid, NULL, 10) == (long)getpid() &&
        strtol(fds, NULL, 10) >= 1)
        fd = 3; /* SD_LISTEN_FDS_START */
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return fd;
}

int srv__listen(srv_server *srv, unsigned flags)
{
    const srv_config *c = &srv->cfg;
    if (c->listen_fd >= 0)
        return srv__listen_inherited(srv, flags);
    if (c->reuse_port)
        flags |= SRV__LISTEN_REUSEPORT;
    struct sockaddr_storage ss;
    socklen_t sslen;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
    bool v6 = false;
    if (inet_pton(AF_INET, c->host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)c->port);
        sslen = sizeof *sin;
    } else if (inet_pton(AF_INET6, c->host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)c->port);
        sslen = sizeof *sin6;
        v6 = true;
    } else {
        srv__server_set_error(srv, "host \"%s\" is not a numeric IPv4 or IPv6 address", c->host);
        return SRV_EADDR;
    }
    const char *lb = v6 ? "[" : "", *rb = v6 ? "]" : "";

    int type = SOCK_STREAM | SOCK_CLOEXEC | ((flags & SRV__LISTEN_NONBLOCK) ? SOCK_NONBLOCK : 0);
    int fd = socket(ss.ss_family, type, 0);
    if (fd < 0) {
        srv__server_set_error(srv, "cannot create a socket for %s%s%s:%d: %s", lb, c->host, rb,
                              c->port, strerror(errno));
        return SRV_ESYS;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (flags & SRV__LISTEN_REUSEPORT)
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (v6) /* "::" also accepts IPv4 where the system allows it */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);

    if (bind(fd, (struct sockaddr *)&ss, sslen) != 0) {
        int e = errno;
        close(fd);
        srv__server_set_error(srv, "cannot bind %s%s%s:%d: %s", lb, c->host, rb, c->port,
                              strerror(e));
        return SRV_EBIND;
    }
    if (listen(fd, c->backlog) != 0) {
        int e = errno;
        close(fd);
        srv__server_set_error(srv, "cannot listen on %s%s%s:%d: %s", lb, c->host, rb, c->port,
                              strerror(e));
        return SRV_EBIND;
    }
    sslen = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0)
        srv__server_set_port(srv, ntohs(v6 ? sin6->sin6_port : sin->sin_port));
    return fd;
}

int srv__fd_input_waiting(int fd)
{
    int n = 0;
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}
