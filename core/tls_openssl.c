/*
 * The TLS backend with OpenSSL: builds the SSL_CTX every OpenSSL engine
 * (threadpool, h2o) serves from - certificate chain and key from files or
 * memory, minimum version, Mozilla "intermediate" ciphers, client
 * verification, ALPN - and says which file failed and why.
 */
#include "srv_core.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/* Mozilla's "intermediate" configuration (server side TLS guidelines, v5):
 * forward-secret AEAD suites only; TLS 1.3 keeps OpenSSL's defaults. */
#define SRV__TLS_INTERMEDIATE                                                          \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                       \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                       \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"                       \
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"

/* "why" for the last OpenSSL error (the queue is cleared). */
static const char *srv__tls_why(char *buf, size_t cap)
{
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0)
        last = last ? last : e; /* the first one queued names the cause */
    if (last == 0) {
        snprintf(buf, cap, "unknown OpenSSL error");
        return buf;
    }
    const char *r = ERR_reason_error_string(last);
    if (r)
        snprintf(buf, cap, "%s", r);
    else
        ERR_error_string_n(last, buf, cap);
    return buf;
}

/* Encrypted keys are not supported: never prompt on the terminal. */
static int srv__tls_no_password(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return -1;
}

/* ALPN (RFC 7301): the server's preference among what the client offers. */
static int srv__tls_alpn(const unsigned char *prefs, unsigned prefs_len, const unsigned char **out,
                         unsigned char *outlen, const unsigned char *in, unsigned inlen)
{
    for (unsigned i = 0; i < prefs_len; i += 1u + prefs[i]) {
        for (unsigned j = 0; j < inlen; j += 1u + in[j]) {
            if (j + 1u + in[j] > inlen)
                break;
            if (in[j] == prefs[i] && memcmp(in + j + 1, prefs + i + 1, in[j]) == 0) {
                *out = in + j + 1;
                *outlen = in[j];
                return SSL_TLSEXT_ERR_OK;
            }
        }
    }
    /* None in common: go on without ALPN (HTTP/1.1), as nginx does. */
    return SSL_TLSEXT_ERR_NOACK;
}

static int srv__tls_alpn_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                            const unsigned char *in, unsigned inlen, void *arg)
{
    static const unsigned char prefs[] = "\x02h2\x08http/1.1";
    (void)ssl;
    (void)arg;
    return srv__tls_alpn(prefs, sizeof prefs - 1, out, outlen, in, inlen);
}

static int srv__tls_alpn_h1(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                            const unsigned char *in, unsigned inlen, void *arg)
{
    static const unsigned char prefs[] = "\x08http/1.1";
    (void)ssl;
    (void)arg;
    return srv__tls_alpn(prefs, sizeof prefs - 1, out, outlen, in, inlen);
}

/* The key loaded, but it is not the certificate's (OpenSSL checks when it
 * installs a key after the certificate). */
static int srv__tls_mismatch(void)
{
    unsigned long e = ERR_peek_last_error();
    return ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
}

/* A file we cannot open gets the system's reason, not OpenSSL's. */
static int srv__tls_readable(srv_server *srv, const char *what, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        srv__server_set_error(srv, "TLS %s \"%s\": %s", what, path, strerror(errno));
        return 0;
    }
    fclose(f);
    return 1;
}

/* The certificate chain from PEM text: the first certificate is the
 * server's, the rest its chain. */
static int srv__tls_cert_pem(SSL_CTX *ctx, const char *pem)
{
    BIO *bio = BIO_new_mem_buf(pem, -1);
    if (bio == NULL)
        return 0;
    int ok = 0;
    X509 *leaf = PEM_read_bio_X509_AUX(bio, NULL, srv__tls_no_password, NULL);
    if (leaf != NULL && SSL_CTX_use_certificate(ctx, leaf) == 1) {
        ok = 1;
        X509 *ca;
        while (ok && (ca = PEM_read_bio_X509(bio, NULL, srv__tls_no_password, NULL)) != NULL) {
            if (SSL_CTX_add0_chain_cert(ctx, ca) != 1) { /* takes ca on success */
                X509_free(ca);
                ok = 0;
            }
        }
        if (ok) { /* the end of the text, not an error */
            unsigned long e = ERR_peek_last_error();
            if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE)
                ERR_clear_error();
        }
    }
    X509_free(leaf);
    BIO_free(bio);
    return ok;
}

static int srv__tls_key_pem(SSL_CTX *ctx, const char *pem)
{
    BIO *bio = BIO_new_mem_buf(pem, -1);
    if (bio == NULL)
        return 0;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, srv__tls_no_password, NULL);
    int ok = key != NULL && SSL_CTX_use_PrivateKey(ctx, key) == 1;
    EVP_PKEY_free(key);
    BIO_free(bio);
    return ok;
}

int srv__tls_backend_build(srv_server *srv, void **out)
{
    const srv_config *c = &srv->cfg;
    char why[160];
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        srv__server_set_error(srv, "TLS: cannot create a context: %s",
                              srv__tls_why(why, sizeof why));
        return SRV_ENOMEM;
    }
    SSL_CTX_set_default_passwd_cb(ctx, srv__tls_no_password);
    SSL_CTX_set_min_proto_version(ctx, c->tls_min_version == SRV_TLS_1_3 ? TLS1_3_VERSION
                                                                         : TLS1_2_VERSION);
    /* Renegotiation is a denial-of-service lever and nothing needs it. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* A client that closes without close_notify (most do) ends the stream
     * like a TCP close; HTTP framing, not TLS, tells a truncated request. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    SSL_CTX_set_dh_auto(ctx, 1);
    const char *ciphers = c->tls_ciphers ? c->tls_ciphers : SRV__TLS_INTERMEDIATE;
    if (SSL_CTX_set_cipher_list(ctx, ciphers) != 1) {
        srv__server_set_error(srv, "TLS tls_ciphers \"%s\": %s", ciphers,
                              srv__tls_why(why, sizeof why));
        goto fail;
    }

    if (c->tls_cert_file) {
        if (!srv__tls_readable(srv, "certificate file", c->tls_cert_file))
            goto fail;
        if (SSL_CTX_use_certificate_chain_file(ctx, c->tls_cert_file) != 1) {
            srv__server_set_error(srv, "TLS certificate file \"%s\": %s (a PEM certificate "
                                  "chain is expected)", c->tls_cert_file,
                                  srv__tls_why(why, sizeof why));
            goto fail;
        }
    } else if (!srv__tls_cert_pem(ctx, c->tls_cert_pem)) {
        srv__server_set_error(srv, "TLS tls_cert_pem: %s (a PEM certificate chain is expected)",
                              srv__tls_why(why, sizeof why));
        goto fail;
    }
    if (c->tls_key_file) {
        if (!srv__tls_readable(srv, "key file", c->tls_key_file))
            goto fail;
        if (SSL_CTX_use_PrivateKey_file(ctx, c->tls_key_file, SSL_FILETYPE_PEM) != 1) {
            if (srv__tls_mismatch())
                goto mismatch;
            srv__server_set_error(srv, "TLS key file \"%s\": %s (an unencrypted PEM private "
                                  "key is expected)", c->tls_key_file,
                                  srv__tls_why(why, sizeof why));
            goto fail;
        }
    } else if (!srv__tls_key_pem(ctx, c->tls_key_pem)) {
        if (srv__tls_mismatch())
            goto mismatch;
        srv__server_set_error(srv, "TLS tls_key_pem: %s (an unencrypted PEM private key is "
                              "expected)", srv__tls_why(why, sizeof why));
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
    mismatch:
        srv__server_set_error(srv, "TLS key %s%s%s does not match the certificate %s%s%s: %s",
                              c->tls_key_file ? "file \"" : "(tls_key_pem)",
                              c->tls_key_file ? c->tls_key_file : "",
                              c->tls_key_file ? "\"" : "",
                              c->tls_cert_file ? "file \"" : "(tls_cert_pem)",
                              c->tls_cert_file ? c->tls_cert_file : "",
                              c->tls_cert_file ? "\"" : "", srv__tls_why(why, sizeof why));
        goto fail;
    }

    if (c->tls_client_ca_file) {
        if (!srv__tls_readable(srv, "client CA file", c->tls_client_ca_file))
            goto fail;
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(c->tls_client_ca_file);
        if (names == NULL ||
            SSL_CTX_load_verify_locations(ctx, c->tls_client_ca_file, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            srv__server_set_error(srv, "TLS client CA file \"%s\": %s (PEM CA certificates "
                                  "are expected)", c->tls_client_ca_file,
                                  srv__tls_why(why, sizeof why));
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names); /* takes names */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        /* Sessions resumed across a verify setting need an id context. */
        static const unsigned char sid[] = "libsrv";
        SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
    }
    SSL_CTX_set_alpn_select_cb(ctx,
                               (srv->caps & SRV_CAP_TLS_HTTP2) ? srv__tls_alpn_h2
                                                                       : srv__tls_alpn_h1,
                               NULL);
    *out = ctx;
    return 0;
fail:
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return SRV_ETLS;
}

void srv__tls_backend_ref(void *ctx)
{
    SSL_CTX_up_ref(ctx);
}

void srv__tls_backend_unref(void *ctx)
{
    SSL_CTX_free(ctx);
}
