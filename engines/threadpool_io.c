/*
 * The threadpool engine's socket I/O, below its other files: a send that
 * takes what the socket takes now, a send with a timeout, and the lingering
 * close (its budget is the core's policy, api/srv_conn.h).
 */
#include "threadpool_int.h"

#include <errno.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * Send what the socket takes now of a then b (either may be empty), from
 * *sent bytes in, in one sendmsg when it fits, with MSG_NOSIGNAL so a
 * vanished client is an error, not SIGPIPE. 1 when all is sent, 0 when the
 * socket is full, -1 when the client is gone.
 */
int etp_send_some(int fd, const void *a, size_t alen, const void *b, size_t blen,
                  size_t *sent)
{
    for (;;) {
        size_t s = *sent;
        if (s >= alen + blen)
            return 1;
        struct iovec iov[2];
        size_t k = 0;
        if (s < alen) {
            iov[k++] = (struct iovec){(char *)(uintptr_t)a + s, alen - s};
            if (blen > 0)
                iov[k++] = (struct iovec){(void *)(uintptr_t)b, blen};
        } else {
            iov[k++] = (struct iovec){(char *)(uintptr_t)b + (s - alen), blen - (s - alen)};
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = k};
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        *sent += (size_t)n;
    }
}

/*
 * Send what the socket takes now of len bytes of the file fd from off, by
 * sendfile (one call: the caller's loop bounds a burst). *sent is what
 * went. 1 when all len went, 2 when some did, 0 when the socket is full, -1
 * when the client is gone or the file ended before len (it shrank).
 */
int etp_sendfile_some(int sock, int fd, uint64_t off, uint64_t len, size_t *sent)
{
    *sent = 0;
    off_t o = (off_t)off;
    size_t want = len > ETP_SENDFILE_MAX ? ETP_SENDFILE_MAX : (size_t)len;
    ssize_t n;
    do
        n = sendfile(sock, fd, &o, want);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    if (n == 0)
        return -1;
    *sent = (size_t)n;
    return (uint64_t)n == len ? 1 : 2;
}

/* Write a and then b fully from *sent on. 0, or -1 when the client is
 * gone or stopped reading for timeout_ms. */
int etp_send_from(int fd, int timeout_ms, const void *a, size_t alen, const void *b,
                  size_t blen, size_t sent)
{
    for (;;) {
        int r = etp_send_some(fd, a, alen, b, blen, &sent);
        if (r != 0)
            return r > 0 ? 0 : -1;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int p = poll(&pfd, 1, timeout_ms);
        if (p < 0 && errno == EINTR)
            continue;
        if (p <= 0)
            return -1;
    }
}

int etp_send2(int fd, int timeout_ms, const void *a, size_t alen, const void *b,
              size_t blen)
{
    return etp_send_from(fd, timeout_ms, a, alen, b, blen, 0);
}

/* Read and discard what the client still sends, for at most `ms` and
 * SRV_LINGER_MAX_BYTES, so that close() does not turn unread input into a
 * reset that destroys the response on its way. ms == 0: only what already
 * arrived. */
void etp_drain(int fd, unsigned ms)
{
    char sink[4096];
    size_t total = 0;
    uint64_t end = srv__now_ms() + ms;
    while (total < SRV_LINGER_MAX_BYTES) {
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0)
            return;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return;
        uint64_t now = srv__now_ms();
        if (n > 0) {
            total += (size_t)n;
            if (now >= end && ms > 0)
                return;
            continue;
        }
        if (ms == 0 || now >= end)
            return;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, srv__ms_left(end, now));
        if (r == 0 || (r < 0 && errno != EINTR))
            return;
    }
}

void etp_linger_close(int fd, unsigned ms)
{
    shutdown(fd, SHUT_WR);
    etp_drain(fd, ms);
    close(fd);
}
