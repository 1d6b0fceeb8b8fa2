/*
 * The uv engine's TLS (engines/uv_tls.c): OpenSSL on two memory BIOs, sans
 * I/O. engines/uv.c moves the bytes - ciphertext read from the socket goes
 * in with euv_tls_put, ciphertext to write comes out with euv_tls_take -
 * and this file only turns one into the other, with the core's SSL_CTX
 * (srv__tls_ctx: certificate, versions, ciphers, ALPN). One connection's
 * euv_tls is used by its loop thread only. Engine-private.
 */
#ifndef SRV_ENGINES_UV_TLS_H
#define SRV_ENGINES_UV_TLS_H

#include "srv_engine.h"

#include <stddef.h>
#include <sys/types.h>

/* A loop's reference to the server's current context (NULL: cleartext). */
typedef struct euv_tls_ctx euv_tls_ctx;
/* One connection's TLS session and its two memory BIOs. */
typedef struct euv_tls euv_tls;

/* start: the context a loop takes its sessions from; NULL when TLS is off
 * or out of memory (*failed says which). */
euv_tls_ctx *euv_tls_ctx_new(srv_server *srv, int *failed);
void euv_tls_ctx_free(euv_tls_ctx *x);

/* A server-side session from the current context (taken anew after a
 * reload: srv__tls_generation). NULL when out of memory. */
euv_tls *euv_tls_new(euv_tls_ctx *x, srv_server *srv);
void euv_tls_free(euv_tls *t);

/* n bytes read from the socket. -1 when out of memory. */
int euv_tls_put(euv_tls *t, const void *d, size_t n);

/* What euv_tls_handshake found. */
enum euv_tls_hs {
    EUV_TLS_HS_WAIT,  /* more bytes from the client are due */
    EUV_TLS_HS_DONE,  /* complete: euv_tls_read gives the client's bytes */
    EUV_TLS_HS_FAIL,  /* refused (an alert may wait in euv_tls_take) */
    EUV_TLS_HS_PLAIN  /* a plain HTTP request came: answer euv_tls_plain_400 */
};
enum euv_tls_hs euv_tls_handshake(euv_tls *t);

/* The protocol ALPN chose ("http/1.1"), *len 0 when none. */
const unsigned char *euv_tls_alpn(euv_tls *t, unsigned *len);

/* Decrypt up to cap bytes: > 0 read, 0 nothing whole yet (more bytes from
 * the socket are due), -1 the end (close_notify, or a bad record). */
ssize_t euv_tls_read(euv_tls *t, char *buf, size_t cap);

/* Decrypted or undecrypted bytes wait inside (euv_tls_read has more). */
int euv_tls_buffered(euv_tls *t);

/* Encrypt n bytes; the records wait for euv_tls_take. -1 on failure. */
int euv_tls_write(euv_tls *t, const void *d, size_t n);

/* Queue close_notify (once; not after a failure or mid-handshake). */
void euv_tls_close_notify(euv_tls *t);

/* The ciphertext waiting to be written, in a malloc'd block that starts
 * with `room` bytes for the caller's own use (the bytes follow them); NULL
 * with *len 0 when nothing waits, or with *len != 0 when out of memory. */
char *euv_tls_take(euv_tls *t, size_t room, size_t *len);

/* The answer to plain HTTP on the TLS port, in the clear (nginx's kind). */
const char *euv_tls_plain_400(size_t *len);

#endif /* SRV_ENGINES_UV_TLS_H */
