/*
 * The OpenSSL backend's place in a libsrv built without an OpenSSL engine
 * (an mhd-only build links no OpenSSL): its one engine, mhd, serves TLS
 * with GnuTLS (SRV_ENGINE_CAP_TLS_GNUTLS, core/tls_gnutls.c), so nothing
 * gets here.
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
