/* The listening socket every engine uses, so host parsing, IPv6, port 0
 * and "cannot bind" messages are the same on all of them. */
#include "srv_core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int srv__listen(srv_server *srv, unsigned flags)
{
    const srv_config *c = &srv->cfg;
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
