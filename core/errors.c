/* Error codes: messages and names from the one SRV_ERRNO_MAP table, and
 * the server's last error message (a leaf: every layer reports through it). */
#include "srv_core.h"

#include <stdarg.h>
#include <stdio.h>

const char *srv_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define SRV__ERR_MSG(name, num, msg) \
    case num:                        \
        return msg;
        SRV_ERRNO_MAP(SRV__ERR_MSG)
#undef SRV__ERR_MSG
    default:
        return "unknown error";
    }
}

const char *srv_err_name(int err)
{
    switch (err) {
    case 0:
        return "OK";
#define SRV__ERR_NAME(name, num, msg) \
    case num:                         \
        return #name;
        SRV_ERRNO_MAP(SRV__ERR_NAME)
#undef SRV__ERR_NAME
    default:
        return "UNKNOWN";
    }
}

void srv__server_set_error(srv_server *srv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(srv->error, sizeof srv->error, fmt, ap);
    va_end(ap);
}
