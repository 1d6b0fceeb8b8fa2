/*
 * TLS configuration and the current context (srv_server_reload_tls): the
 * part that does not depend on the TLS library. The context itself is
 * built by the backend: tls_openssl.c (tls_none.c in a build without an
 * OpenSSL engine), or tls_gnutls.c for an engine that serves TLS with
 * GnuTLS (SRV_ENGINE_CAP_TLS_GNUTLS: mhd). A reload builds a new context and swaps it under a
 * mutex; engines take a reference per connection (or per event loop, by
 * generation), so connections already open keep theirs.
 */
#include "srv_core.h"
#include "srv_build_config.h"

#include <stdlib.h>
#include <string.h>

struct srv__tls {
    pthread_mutex_t mu; /* ctx */
    void *ctx;          /* the backend's context; one reference is ours */
    atomic_uint generation;
    /* Copies of the configured strings (cfg points here). */
    char *cert_file, *key_file, *cert_pem, *key_pem, *ciphers, *client_ca_file;
};

/* The backend of the server's engine. */
static bool srv__tls_gnutls_engine(const srv_server *srv)
{
    return (srv->caps & SRV_ENGINE_CAP_TLS_GNUTLS) != 0;
}

static int srv__tls_build(srv_server *srv, void **ctx)
{
#if SRV_HAVE_ENGINE_MHD
    if (srv__tls_gnutls_engine(srv))
        return srv__tls_gnutls_build(srv, ctx);
#endif
    return srv__tls_backend_build(srv, ctx);
}

static void srv__tls_ref(const srv_server *srv, void *ctx)
{
    (void)srv; /* without mhd, one backend */
#if SRV_HAVE_ENGINE_MHD
    if (srv__tls_gnutls_engine(srv)) {
        srv__tls_gnutls_ref(ctx);
        return;
    }
#endif
    srv__tls_backend_ref(ctx);
}

static void srv__tls_unref(const srv_server *srv, void *ctx)
{
    (void)srv; /* without mhd, one backend */
#if SRV_HAVE_ENGINE_MHD
    if (srv__tls_gnutls_engine(srv)) {
        srv__tls_gnutls_unref(ctx);
        return;
    }
#endif
    srv__tls_backend_unref(ctx);
}

int srv__tls_init(srv_server *srv)
{
    srv_config *c = &srv->cfg;
    if (c->tls_cert_file == NULL && c->tls_cert_pem == NULL && c->tls_key_file == NULL &&
        c->tls_key_pem == NULL) {
        /* Cleartext: the other tls_* fields mean nothing; start refuses
         * them so a half-done TLS setup is not served in the clear. */
        return 0;
    }
    struct srv__tls *t = calloc(1, sizeof *t);
    if (t == NULL)
        return SRV_ENOMEM;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return SRV_ENOMEM;
    }
    atomic_init(&t->generation, 0);
    srv->tls = t;
    if (srv__config_own(&t->cert_file, &c->tls_cert_file) ||
        srv__config_own(&t->key_file, &c->tls_key_file) ||
        srv__config_own(&t->cert_pem, &c->tls_cert_pem) ||
        srv__config_own(&t->key_pem, &c->tls_key_pem) ||
        srv__config_own(&t->ciphers, &c->tls_ciphers) ||
        srv__config_own(&t->client_ca_file, &c->tls_client_ca_file))
        return SRV_ENOMEM; /* srv__tls_free frees what was copied */
    return 0;
}

void srv__tls_free(srv_server *srv)
{
    struct srv__tls *t = srv->tls;
    if (t == NULL)
        return;
    if (t->ctx != NULL)
        srv__tls_unref(srv, t->ctx);
    pthread_mutex_destroy(&t->mu);
    free(t->cert_file);
    free(t->key_file);
    free(t->cert_pem);
    free(t->key_pem);
    free(t->ciphers);
    free(t->client_ca_file);
    free(t);
    srv->tls = NULL;
}

#define SRV__TLS_CHECK(cond, ...)                                     \
    do {                                                              \
        if (!(cond)) {                                                \
            srv__server_set_error(srv, __VA_ARGS__);                  \
            return SRV_ETLS;                                          \
        }                                                             \
    } while (0)

int srv__tls_start(srv_server *srv)
{
    const srv_config *c = &srv->cfg;
    if (srv->tls == NULL) {
        SRV__TLS_CHECK(c->tls_ciphers == NULL && c->tls_client_ca_file == NULL,
                       "tls_ciphers or tls_client_ca_file is set but no certificate "
                       "(tls_cert_file or tls_cert_pem): TLS needs a certificate and its key");
        return 0;
    }
    SRV__TLS_CHECK(srv->caps & SRV_CAP_TLS,
                   "engine %s does not serve TLS in this libsrv (see srv_engine_caps, "
                   "SRV_CAP_TLS)", srv->engine->name);
    SRV__TLS_CHECK(!(c->tls_cert_file && c->tls_cert_pem),
                   "set tls_cert_file or tls_cert_pem, not both");
    SRV__TLS_CHECK(!(c->tls_key_file && c->tls_key_pem),
                   "set tls_key_file or tls_key_pem, not both");
    SRV__TLS_CHECK(c->tls_cert_file || c->tls_cert_pem,
                   "a TLS key is set but no certificate (tls_cert_file or tls_cert_pem)");
    SRV__TLS_CHECK(c->tls_key_file || c->tls_key_pem,
                   "a TLS certificate is set but no private key (tls_key_file or tls_key_pem)");
    SRV__TLS_CHECK(c->tls_min_version == SRV_TLS_1_2 || c->tls_min_version == SRV_TLS_1_3,
                   "tls_min_version 0x%04x is not SRV_TLS_1_2 (0x0303) or SRV_TLS_1_3 (0x0304)",
                   c->tls_min_version);
    void *ctx = NULL;
    int rc = srv__tls_build(srv, &ctx);
    if (rc != 0)
        return rc;
    srv->tls->ctx = ctx;
    return 0;
}

int srv_server_reload_tls(srv_server *srv)
{
    if (srv == NULL)
        return SRV_EINVAL;
    if (srv->tls == NULL)
        return SRV_EINVAL;
    int state = atomic_load(&srv->state);
    if (state != SRV__RUNNING && state != SRV__STOPPING)
        return SRV_ESTATE;
    void *ctx = NULL;
    int rc = srv__tls_build(srv, &ctx);
    if (rc != 0)
        return rc;
    struct srv__tls *t = srv->tls;
    pthread_mutex_lock(&t->mu);
    void *old = t->ctx;
    t->ctx = ctx;
    atomic_fetch_add(&t->generation, 1);
    pthread_mutex_unlock(&t->mu);
    srv__tls_unref(srv, old); /* freed once the last connection on it ends */
    return 0;
}

int srv__tls_enabled(const srv_server *srv)
{
    return srv->tls != NULL;
}

/* The current context with a reference for the caller. */
static void *srv__tls_current(srv_server *srv, unsigned *generation)
{
    struct srv__tls *t = srv->tls;
    if (t == NULL)
        return NULL;
    pthread_mutex_lock(&t->mu);
    void *ctx = t->ctx;
    if (ctx != NULL)
        srv__tls_ref(srv, ctx);
    if (generation != NULL)
        *generation = atomic_load(&t->generation);
    pthread_mutex_unlock(&t->mu);
    return ctx;
}

struct ssl_ctx_st *srv__tls_ctx(srv_server *srv, unsigned *generation)
{
    if (srv__tls_gnutls_engine(srv))
        return NULL; /* not an OpenSSL context */
    return srv__tls_current(srv, generation);
}

const srv_tls_gnutls *srv__tls_gnutls(srv_server *srv, unsigned *generation)
{
    if (!srv__tls_gnutls_engine(srv))
        return NULL;
    return srv__tls_current(srv, generation);
}

unsigned srv__tls_generation(const srv_server *srv)
{
    struct srv__tls *t = srv->tls;
    return t != NULL ? atomic_load(&t->generation) : 0;
}
