/*
 * The TLS backend with GnuTLS, for engines that serve TLS through a GnuTLS
 * library (mhd: libmicrohttpd 0.9.75; SRV_ENGINE_CAP_TLS_GNUTLS). One
 * context per configuration generation: the certificate chain and key
 * parsed (srv_tls_gnutls, handed to the engine's certificate callback),
 * the priority string (minimum version, Mozilla "intermediate" ciphers) and
 * the client CA text. Validation says which file failed and why, as the
 * OpenSSL backend does, so an mhd-only build (no OpenSSL TLS backend) refuses a bad
 * certificate at start and at reload.
 *
 * Handshake signatures go through OpenSSL's libcrypto: Debian 12's GnuTLS
 * 3.7 signs with nettle, about 1600 us per RSA-2048 signature against
 * OpenSSL's 370 us on the same core (ECDSA P-256: 90-100 us against
 * 32-36 us), and a full handshake makes one. The key GnuTLS validated is
 * parsed again by OpenSSL from the same PEM and handed to GnuTLS as an
 * external key (gnutls_privkey_import_ext4): GnuTLS still chooses the
 * scheme and hashes (and builds PKCS#1 v1.5's DigestInfo), OpenSSL makes
 * the signature. See srv__tls_gnutls_ossl_key.
 */
#include "srv_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

/* Mozilla's "intermediate" configuration (server side TLS guidelines, v5)
 * in GnuTLS terms: TLS 1.2 with forward-secret AEAD suites only (ECDHE or
 * DHE key exchange; AES-GCM or ChaCha20-Poly1305), TLS 1.3 with its three
 * AEAD suites (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305); no CBC, no
 * static RSA, no compression; the client's preference, as Mozilla's. */
#define SRV__TLS_GNUTLS_INTERMEDIATE                                                   \
    "SECURE:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-128-GCM:"              \
    "+AES-256-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:"   \
    "+DHE-RSA"

typedef struct srv__tls_gnutls_ctx {
    srv_tls_gnutls pub; /* first: the engine's view */
    atomic_uint refs;
    gnutls_pcert_st *certs;
    char *priorities;
    char *client_ca_pem;
    char *dh_params_pem;
    int static_rsa_kx; /* the priorities allow RSA key exchange (decryption) */
} srv__tls_gnutls_ctx;

/* A whole file as text (NUL-terminated); NULL with srv->error set. */
static char *srv__tls_gnutls_slurp(srv_server *srv, const char *what, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        srv__server_set_error(srv, "TLS %s \"%s\": %s", what, path, strerror(errno));
        return NULL;
    }
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (ferror(f)) {
            srv__server_set_error(srv, "TLS %s \"%s\": %s", what, path, strerror(errno));
            free(buf);
            buf = NULL;
            break;
        }
        if (feof(f))
            break;
        if (len + 1 == cap) {
            char *more = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
            if (more == NULL) {
                srv__server_set_error(srv, "TLS %s \"%s\": too big or out of memory", what,
                                      path);
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

static void srv__tls_gnutls_free(srv__tls_gnutls_ctx *t)
{
    if (t == NULL)
        return;
    for (unsigned i = 0; i < t->pub.ncerts; i++)
        gnutls_pcert_deinit(&t->certs[i]);
    free(t->certs);
    if (t->pub.key != NULL)
        gnutls_privkey_deinit(t->pub.key);
    free(t->priorities);
    free(t->client_ca_pem);
    free(t->dh_params_pem);
    free(t);
}

/* The chain from PEM text: leaf first, then its intermediates. */
static int srv__tls_gnutls_chain(srv__tls_gnutls_ctx *t, const char *pem)
{
    gnutls_datum_t d = {(unsigned char *)pem, (unsigned)strlen(pem)};
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    int rc = gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0);
    if (rc < 0)
        return rc;
    if (n == 0) {
        gnutls_free(crts);
        return GNUTLS_E_NO_CERTIFICATE_FOUND;
    }
    t->certs = calloc(n, sizeof *t->certs);
    rc = t->certs != NULL ? 0 : GNUTLS_E_MEMORY_ERROR;
    for (unsigned i = 0; i < n; i++) {
        if (rc == 0) {
            rc = gnutls_pcert_import_x509(&t->certs[i], crts[i], 0);
            if (rc == 0)
                t->pub.ncerts = i + 1;
        }
        gnutls_x509_crt_deinit(crts[i]);
    }
    gnutls_free(crts);
    t->pub.certs = t->certs;
    return rc;
}

static int srv__tls_gnutls_key(srv__tls_gnutls_ctx *t, const char *pem)
{
    gnutls_datum_t d = {(unsigned char *)pem, (unsigned)strlen(pem)};
    int rc = gnutls_privkey_init(&t->pub.key);
    if (rc < 0)
        return rc;
    /* No password: an encrypted key is refused, never prompted for. */
    return gnutls_privkey_import_x509_raw(t->pub.key, &d, GNUTLS_X509_FMT_PEM, NULL, 0);
}

/* ------------------------------------------------------------------ */
/* Signatures with OpenSSL (RSA, ECDSA)                                */
/* ------------------------------------------------------------------ */

/* OpenSSL's digest for a GnuTLS one, for RSA-PSS (the hash names the
 * padding's digest and MGF1's); NULL for one TLS does not sign with. */
static const EVP_MD *srv__tls_gnutls_ossl_md(gnutls_digest_algorithm_t d)
{
    switch (d) {
    case GNUTLS_DIG_SHA256:
        return EVP_sha256();
    case GNUTLS_DIG_SHA384:
        return EVP_sha384();
    case GNUTLS_DIG_SHA512:
        return EVP_sha512();
    default:
        return NULL;
    }
}

/* The external key's sign_hash_func: GnuTLS calls it on the handshake's
 * thread (an MHD thread), many at once on one key: each call has its own
 * EVP_PKEY_CTX, the EVP_PKEY itself is only read. The input is what
 * GnuTLS prepared (privkey_sign_raw_data in its lib/privkey.c):
 * - GNUTLS_SIGN_RSA_RAW: PKCS#1 v1.5 of the bytes as given, a DigestInfo
 *   (TLS 1.2's rsa_pkcs1_*; also the MD5+SHA-1 of TLS 1.0/1.1, which the
 *   priorities never allow);
 * - an RSA-PSS algorithm (TLS 1.3, and TLS 1.2's rsa_pss_rsae_*): the bare
 *   hash; salt as long as the hash, as RFC 8446 4.2.3 requires;
 * - an ECDSA algorithm (EC key): the bare hash; the signature is DER
 *   (ECDSA-Sig-Value), as TLS carries it and as GnuTLS's own signer makes.
 * The signature goes into gnutls_malloc'd memory, which GnuTLS frees. */
static int srv__tls_gnutls_ossl_sign(gnutls_privkey_t key, gnutls_sign_algorithm_t algo,
                                     void *userdata, unsigned flags,
                                     const gnutls_datum_t *hash, gnutls_datum_t *sig)
{
    (void)key;
    (void)flags;
    EVP_PKEY *pk = userdata;
    const EVP_MD *md = NULL;
    int rsa = EVP_PKEY_base_id(pk) == EVP_PKEY_RSA;
    int pad = RSA_PKCS1_PADDING;
    if (!rsa) {
        if (gnutls_sign_get_pk_algorithm(algo) != GNUTLS_PK_ECDSA)
            return GNUTLS_E_UNSUPPORTED_SIGNATURE_ALGORITHM;
    } else if (algo != GNUTLS_SIGN_RSA_RAW) {
        if (gnutls_sign_get_pk_algorithm(algo) != GNUTLS_PK_RSA_PSS)
            return GNUTLS_E_UNSUPPORTED_SIGNATURE_ALGORITHM;
        md = srv__tls_gnutls_ossl_md(gnutls_sign_get_hash_algorithm(algo));
        if (md == NULL || hash->size != (unsigned)EVP_MD_size(md))
            return GNUTLS_E_UNSUPPORTED_SIGNATURE_ALGORITHM;
        pad = RSA_PKCS1_PSS_PADDING;
    }
    sig->data = NULL;
    sig->size = 0;
    EVP_PKEY_CTX *c = EVP_PKEY_CTX_new(pk, NULL);
    size_t n = 0;
    int ok = c != NULL && EVP_PKEY_sign_init(c) > 0 &&
             (!rsa || EVP_PKEY_CTX_set_rsa_padding(c, pad) > 0);
    if (ok && md != NULL)
        ok = EVP_PKEY_CTX_set_signature_md(c, md) > 0 && EVP_PKEY_CTX_set_rsa_mgf1_md(c, md) > 0 &&
             EVP_PKEY_CTX_set_rsa_pss_saltlen(c, RSA_PSS_SALTLEN_DIGEST) > 0;
    ok = ok && EVP_PKEY_sign(c, NULL, &n, hash->data, hash->size) > 0;
    if (ok && (sig->data = gnutls_malloc(n)) == NULL)
        ok = 0;
    ok = ok && EVP_PKEY_sign(c, sig->data, &n, hash->data, hash->size) > 0;
    EVP_PKEY_CTX_free(c);
    if (!ok) {
        /* The thread's OpenSSL error queue is left empty for whatever
         * else runs on it; GnuTLS fails the handshake with this. */
        ERR_clear_error();
        gnutls_free(sig->data);
        sig->data = NULL;
        return GNUTLS_E_PK_SIGN_FAILED;
    }
    sig->size = (unsigned)n;
    return 0;
}

/* The external key's info_func: GnuTLS asks which public-key algorithm
 * it is, its size (RSA-PSS needs it), and, per signature algorithm the
 * handshake considers, whether this key makes it (-1: a question this
 * key does not answer). The algorithms are the ones GnuTLS's own key
 * makes: for RSA, PKCS#1 v1.5 with any hash (GnuTLS builds the
 * DigestInfo) and RSA-PSS with an rsaEncryption key (rsa_pss_rsae_*) for
 * the hashes srv__tls_gnutls_ossl_md knows; for EC, ECDSA with any hash
 * (GnuTLS matches the certificate's curve itself, as for its own key). */
static int srv__tls_gnutls_ossl_info(gnutls_privkey_t key, unsigned flags, void *userdata)
{
    (void)key;
    EVP_PKEY *pk = userdata;
    int rsa = EVP_PKEY_base_id(pk) == EVP_PKEY_RSA;
    if (flags == GNUTLS_PRIVKEY_INFO_PK_ALGO)
        return rsa ? GNUTLS_PK_RSA : GNUTLS_PK_ECDSA;
    if (flags == GNUTLS_PRIVKEY_INFO_PK_ALGO_BITS)
        return EVP_PKEY_bits(pk);
    if ((flags & ((1u << 20) - 1)) == GNUTLS_PRIVKEY_INFO_HAVE_SIGN_ALGO) {
        gnutls_sign_algorithm_t s = GNUTLS_FLAGS_TO_SIGN_ALGO(flags);
        switch (gnutls_sign_get_pk_algorithm(s)) {
        case GNUTLS_PK_RSA:
            return rsa;
        case GNUTLS_PK_RSA_PSS:
            return rsa && gnutls_sign_supports_pk_algorithm(s, GNUTLS_PK_RSA) &&
                   srv__tls_gnutls_ossl_md(gnutls_sign_get_hash_algorithm(s)) != NULL;
        case GNUTLS_PK_ECDSA:
            return !rsa;
        default:
            return 0;
        }
    }
    return -1;
}

static void srv__tls_gnutls_ossl_deinit(gnutls_privkey_t key, void *userdata)
{
    (void)key;
    EVP_PKEY_free(userdata);
}

/* OpenSSL's passphrase callback: no password, so an encrypted key is
 * refused (GnuTLS refused it already), never prompted for on a terminal
 * as OpenSSL's default callback would. */
static int srv__tls_gnutls_no_password(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return -1;
}

/* The SubjectPublicKeyInfo DER of an OpenSSL key and of the leaf
 * certificate (GnuTLS): equal when OpenSSL read the key GnuTLS checked. */
static int srv__tls_gnutls_ossl_matches(const srv__tls_gnutls_ctx *t, EVP_PKEY *pk)
{
    unsigned char *der = NULL;
    int n = i2d_PUBKEY(pk, &der);
    gnutls_datum_t b = {NULL, 0};
    int same = n > 0 &&
               gnutls_pubkey_export2(t->certs[0].pubkey, GNUTLS_X509_FMT_DER, &b) == 0 &&
               b.size == (unsigned)n && memcmp(der, b.data, b.size) == 0;
    OPENSSL_free(der);
    gnutls_free(b.data);
    return same;
}

/* An RSA or ECDSA key (already checked against the certificate by
 * GnuTLS) replaced by an external GnuTLS key that signs with OpenSSL,
 * parsed from the same PEM text. Other keys (Ed25519, RSA-PSS-only keys)
 * keep GnuTLS's signer, and so does RSA when static RSA key exchange is
 * allowed (it decrypts). 0, or -1 with srv->error set and t->pub.key
 * unchanged. */
static int srv__tls_gnutls_ossl_key(srv_server *srv, srv__tls_gnutls_ctx *t, const char *pem)
{
    const srv_config *c = &srv->cfg;
    int algo = gnutls_privkey_get_pk_algorithm(t->pub.key, NULL);
    if (!(algo == GNUTLS_PK_RSA && !t->static_rsa_kx) && algo != GNUTLS_PK_ECDSA)
        return 0;
    const char *what = c->tls_key_file ? c->tls_key_file : "tls_key_pem";
    BIO *bio = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *pk = bio ? PEM_read_bio_PrivateKey(bio, NULL, srv__tls_gnutls_no_password, NULL)
                       : NULL;
    BIO_free(bio);
    const char *why = NULL;
    if (pk == NULL)
        why = "OpenSSL cannot read it";
    else if (EVP_PKEY_base_id(pk) != (algo == GNUTLS_PK_RSA ? EVP_PKEY_RSA : EVP_PKEY_EC) ||
             !srv__tls_gnutls_ossl_matches(t, pk))
        why = "OpenSSL read another key than GnuTLS";
    if (why != NULL) {
        unsigned long e = ERR_peek_last_error();
        char buf[128] = "";
        if (e != 0)
            ERR_error_string_n(e, buf, sizeof buf);
        ERR_clear_error();
        EVP_PKEY_free(pk);
        srv__server_set_error(srv, "TLS key %s%s%s: %s%s%s (engine %s signs with "
                              "OpenSSL)", c->tls_key_file ? "file \"" : "(", what,
                              c->tls_key_file ? "\"" : ")", why, buf[0] ? ": " : "", buf,
                              srv->engine->name);
        return -1;
    }
    gnutls_privkey_t ext = NULL;
    int g = gnutls_privkey_init(&ext);
    if (g == 0)
        g = gnutls_privkey_import_ext4(ext, pk, NULL, srv__tls_gnutls_ossl_sign, NULL,
                                       srv__tls_gnutls_ossl_deinit, srv__tls_gnutls_ossl_info,
                                       0);
    if (g < 0) {
        if (ext != NULL)
            gnutls_privkey_deinit(ext);
        EVP_PKEY_free(pk);
        srv__server_set_error(srv, "TLS key %s%s%s: GnuTLS refused the OpenSSL signer: %s",
                              c->tls_key_file ? "file \"" : "(", what,
                              c->tls_key_file ? "\"" : ")", gnutls_strerror(g));
        return -1;
    }
    /* From here the GnuTLS key owns pk (deinit_func frees it). */
    gnutls_privkey_deinit(t->pub.key);
    t->pub.key = ext;
    return 0;
}

/* Whether the key is the leaf certificate's: their public keys match. */
static int srv__tls_gnutls_matches(const srv__tls_gnutls_ctx *t)
{
    gnutls_pubkey_t pub = NULL;
    gnutls_datum_t a = {NULL, 0}, b = {NULL, 0};
    int same = gnutls_pubkey_init(&pub) == 0 &&
               gnutls_pubkey_import_privkey(pub, t->pub.key, 0, 0) == 0 &&
               gnutls_pubkey_export2(pub, GNUTLS_X509_FMT_DER, &a) == 0 &&
               gnutls_pubkey_export2(t->certs[0].pubkey, GNUTLS_X509_FMT_DER, &b) == 0 &&
               a.size == b.size && memcmp(a.data, b.data, a.size) == 0;
    gnutls_free(a.data);
    gnutls_free(b.data);
    if (pub != NULL)
        gnutls_pubkey_deinit(pub);
    return same;
}

/* The priority string for srv->cfg: tls_ciphers is a GnuTLS priority
 * string here (an OpenSSL cipher list fails to parse and is refused); the
 * minimum version is enforced after it either way. */
static int srv__tls_gnutls_priorities(srv_server *srv, srv__tls_gnutls_ctx *t)
{
    const srv_config *c = &srv->cfg;
    const char *base = c->tls_ciphers ? c->tls_ciphers : SRV__TLS_GNUTLS_INTERMEDIATE;
    const char *floor = c->tls_min_version == SRV_TLS_1_3
                            ? ":-VERS-TLS1.2:-VERS-TLS1.1:-VERS-TLS1.0:-VERS-SSL3.0"
                            : ":-VERS-TLS1.1:-VERS-TLS1.0:-VERS-SSL3.0";
    size_t n = strlen(base) + strlen(floor) + 1;
    t->priorities = malloc(n);
    if (t->priorities == NULL) {
        srv__server_set_error(srv, "TLS: out of memory");
        return SRV_ENOMEM;
    }
    snprintf(t->priorities, n, "%s%s", base, floor);
    gnutls_priority_t p = NULL;
    const char *where = NULL;
    int rc = gnutls_priority_init(&p, t->priorities, &where);
    if (rc < 0) {
        if (c->tls_ciphers)
            srv__server_set_error(srv, "TLS tls_ciphers \"%s\": %s at \"%.24s\" (engine %s "
                                  "serves TLS with GnuTLS: tls_ciphers is a GnuTLS priority "
                                  "string, e.g. \"SECURE:-VERS-TLS1.2\", not an OpenSSL cipher "
                                  "list)", c->tls_ciphers, gnutls_strerror(rc),
                                  where ? where : "", srv->engine->name);
        else
            srv__server_set_error(srv, "TLS: GnuTLS refused the default priorities: %s",
                                  gnutls_strerror(rc));
        return SRV_ETLS;
    }
    /* Static RSA key exchange (only through a tls_ciphers that asks for
     * it) decrypts with the key: that stays with GnuTLS, whose
     * decryption is constant-time (gnutls_privkey_decrypt_data2), so such
     * a configuration keeps GnuTLS's own RSA key. */
    const unsigned *kx = NULL;
    int nkx = gnutls_priority_kx_list(p, &kx);
    for (int i = 0; i < nkx; i++)
        if (kx[i] == GNUTLS_KX_RSA || kx[i] == GNUTLS_KX_RSA_PSK)
            t->static_rsa_kx = 1;
    gnutls_priority_deinit(p);
    t->pub.priorities = t->priorities;
    return 0;
}

/* The DHE suites of the intermediate policy need a group: RFC 7919's
 * ffdhe2048, as Mozilla recommends (OpenSSL picks it by itself). */
static int srv__tls_gnutls_dh(srv__tls_gnutls_ctx *t)
{
    gnutls_dh_params_t dh = NULL;
    gnutls_datum_t pem = {NULL, 0};
    int rc = gnutls_dh_params_init(&dh);
    if (rc == 0)
        rc = gnutls_dh_params_import_raw2(dh, &gnutls_ffdhe_2048_group_prime,
                                          &gnutls_ffdhe_2048_group_generator,
                                          gnutls_ffdhe_2048_key_bits);
    if (rc == 0)
        rc = gnutls_dh_params_export2_pkcs3(dh, GNUTLS_X509_FMT_PEM, &pem);
    if (rc == 0) {
        t->dh_params_pem = strndup((const char *)pem.data, pem.size);
        rc = t->dh_params_pem != NULL ? 0 : GNUTLS_E_MEMORY_ERROR;
    }
    gnutls_free(pem.data);
    if (dh != NULL)
        gnutls_dh_params_deinit(dh);
    t->pub.dh_params_pem = t->dh_params_pem;
    return rc;
}

int srv__tls_gnutls_build(srv_server *srv, void **out)
{
    const srv_config *c = &srv->cfg;
    srv__tls_gnutls_ctx *t = calloc(1, sizeof *t);
    char *cert = NULL, *key = NULL;
    int rc = SRV_ETLS;
    if (t == NULL) {
        srv__server_set_error(srv, "TLS: out of memory");
        return SRV_ENOMEM;
    }
    atomic_init(&t->refs, 1);
    if ((rc = srv__tls_gnutls_priorities(srv, t)) != 0)
        goto fail;
    rc = SRV_ETLS;
    int g = srv__tls_gnutls_dh(t);
    if (g < 0) {
        srv__server_set_error(srv, "TLS: GnuTLS cannot set up the DH group: %s",
                              gnutls_strerror(g));
        goto fail;
    }
    if (c->tls_cert_file &&
        (cert = srv__tls_gnutls_slurp(srv, "certificate file", c->tls_cert_file)) == NULL)
        goto fail;
    if (c->tls_key_file && (key = srv__tls_gnutls_slurp(srv, "key file", c->tls_key_file)) == NULL)
        goto fail;
    g = srv__tls_gnutls_chain(t, cert ? cert : c->tls_cert_pem);
    if (g < 0) {
        if (c->tls_cert_file)
            srv__server_set_error(srv, "TLS certificate file \"%s\": %s (a PEM certificate "
                                  "chain is expected)", c->tls_cert_file, gnutls_strerror(g));
        else
            srv__server_set_error(srv, "TLS tls_cert_pem: %s (a PEM certificate chain is "
                                  "expected)", gnutls_strerror(g));
        goto fail;
    }
    g = srv__tls_gnutls_key(t, key ? key : c->tls_key_pem);
    if (g < 0) {
        if (c->tls_key_file)
            srv__server_set_error(srv, "TLS key file \"%s\": %s (an unencrypted PEM private "
                                  "key is expected)", c->tls_key_file, gnutls_strerror(g));
        else
            srv__server_set_error(srv, "TLS tls_key_pem: %s (an unencrypted PEM private key "
                                  "is expected)", gnutls_strerror(g));
        goto fail;
    }
    if (!srv__tls_gnutls_matches(t)) {
        srv__server_set_error(srv, "TLS key %s%s%s does not match the certificate %s%s%s",
                              c->tls_key_file ? "file \"" : "(tls_key_pem)",
                              c->tls_key_file ? c->tls_key_file : "",
                              c->tls_key_file ? "\"" : "",
                              c->tls_cert_file ? "file \"" : "(tls_cert_pem)",
                              c->tls_cert_file ? c->tls_cert_file : "",
                              c->tls_cert_file ? "\"" : "");
        goto fail;
    }
    if (srv__tls_gnutls_ossl_key(srv, t, key ? key : c->tls_key_pem) != 0)
        goto fail;
    if (c->tls_client_ca_file) {
        t->client_ca_pem = srv__tls_gnutls_slurp(srv, "client CA file", c->tls_client_ca_file);
        if (t->client_ca_pem == NULL)
            goto fail;
        gnutls_datum_t d = {(unsigned char *)t->client_ca_pem,
                            (unsigned)strlen(t->client_ca_pem)};
        gnutls_x509_crt_t *cas = NULL;
        unsigned n = 0;
        g = gnutls_x509_crt_list_import2(&cas, &n, &d, GNUTLS_X509_FMT_PEM, 0);
        for (unsigned i = 0; g >= 0 && i < n; i++)
            gnutls_x509_crt_deinit(cas[i]);
        gnutls_free(cas);
        if (g < 0 || n == 0) {
            srv__server_set_error(srv, "TLS client CA file \"%s\": %s (PEM CA certificates "
                                  "are expected)", c->tls_client_ca_file,
                                  g < 0 ? gnutls_strerror(g) : "no certificate found");
            goto fail;
        }
        t->pub.client_ca_pem = t->client_ca_pem;
    }
    free(cert);
    free(key);
    *out = t;
    return 0;
fail:
    free(cert);
    free(key);
    srv__tls_gnutls_free(t);
    return rc;
}

void srv__tls_gnutls_ref(void *ctx)
{
    srv__tls_gnutls_ctx *t = ctx;
    atomic_fetch_add(&t->refs, 1);
}

void srv__tls_gnutls_unref(void *ctx)
{
    srv__tls_gnutls_ctx *t = ctx;
    if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1)
        srv__tls_gnutls_free(t);
}

void srv__tls_gnutls_release(const srv_tls_gnutls *t)
{
    srv__tls_gnutls_unref((void *)t);
}
