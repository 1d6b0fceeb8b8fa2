/*
 * The TLS backend of a libsrv built without an OpenSSL engine (an mhd-only
 * build links no OpenSSL): no engine of it has SRV_CAP_TLS, so
 * srv__tls_start refuses a TLS configuration before it gets here.
 */
#include "srv_core.h"

int srv__tls_backend_build(srv_server *srv, void **ctx)
{
    *ctx = NULL;
    srv__server_set_error(srv, "TLS: this libsrv was built without a TLS library");
    return SRV_ETLS;
}

void srv__tls_backend_ref(void *ctx)
{
    (void)ctx;
}

void srv__tls_backend_unref(void *ctx)
{
    (void)ctx;
}
