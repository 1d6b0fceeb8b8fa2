/*
 * A file body sent from its descriptor by an engine whose library writes
 * only buffers and tells of room only through its own writes (h2o, uv):
 * sendfile(2) on the socket while the library has nothing queued, and when
 * the socket is full the file's next bytes go through the library's write,
 * whose completion says there is room again (api/srv_h1conn.h).
 */
#include "srv_h1conn.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/types.h>
#include <unistd.h>

int srv__sendfile_step(srv__sendfile *sf, int sock, size_t *wait, uint64_t *moved)
{
    uint64_t burst = 0;
    *wait = 0;
    *moved = 0;
    while (sf->left > 0) {
        if (burst >= SRV__SENDFILE_BURST)
            return SRV__SF_BURST;
        size_t want = sf->left < SRV__SENDFILE_BURST ? (size_t)sf->left : SRV__SENDFILE_BURST;
        off_t off = (off_t)sf->off;
        ssize_t n = sock >= 0 ? sendfile(sock, sf->fd, &off, want) : -1;
        if (n > 0) {
            sf->off += (uint64_t)n;
            sf->left -= (uint64_t)n;
            burst += (uint64_t)n;
            *moved += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || sock < 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return SRV__SF_FAILED; /* the file shrank, or the client is gone */
        /* Full: the next bytes wait in the library's write. */
        if (sf->buf == NULL && (sf->buf = malloc(SRV__SENDFILE_WAIT)) == NULL)
            return SRV__SF_FAILED;
        size_t k = sf->left < SRV__SENDFILE_WAIT ? (size_t)sf->left : SRV__SENDFILE_WAIT;
        ssize_t r = pread(sf->fd, sf->buf, k, (off_t)sf->off);
        if (r <= 0)
            return SRV__SF_FAILED;
        sf->off += (uint64_t)r; /* the library has them now */
        sf->left -= (uint64_t)r;
        *wait = (size_t)r;
        return SRV__SF_WAIT;
    }
    return SRV__SF_DONE;
}

void srv__sendfile_end(srv__sendfile *sf)
{
    free(sf->buf);
    *sf = (srv__sendfile){.fd = -1};
}
