/*
 * The uv engine's TLS (engines/uv_tls.c): OpenSSL on two memory BIOs, sans I/O. engines/uv.c
 * moves the bytes - ciphertext read goes in with euv_tls_put, ciphertext to write comes out
 * with euv_tls_take - with the core's SSL_CTX (srv__tls_ctx). A connection's euv_tls is used
 * by its loop thread only. Engine-private.
 */
#ifndef SRV_ENGINES_UV_TLS_H
#define SRV_ENGINES_UV_TLS_H

#include "srv_engine.h"

#include <sys/types.h>

typedef struct euv_tls_ctx euv_tls_ctx; /* a loop's reference to the current context */
typedef struct euv_tls euv_tls;         /* one connection's session and BIOs */

/* start: NULL when TLS is off, or out of memory (*failed). */
euv_tls_ctx *euv_tls_ctx_new(srv_server *srv, int *failed);
void euv_tls_ctx_free(euv_tls_ctx *x);

/* A server-side session; a reload (srv__tls_generation) is taken first. NULL: no memory. */
euv_tls *euv_tls_new(euv_tls_ctx *x, srv_server *srv);
void euv_tls_free(euv_tls *t);

/* n bytes read from the socket. -1 when out of memory. */
int euv_tls_put(euv_tls *t, const void *d, size_t n);

enum euv_tls_hs {
    EUV_TLS_HS_WAIT, /* more bytes from the client are due */
    EUV_TLS_HS_DONE, /* euv_tls_read gives the client's bytes now */
    EUV_TLS_HS_FAIL, /* refused (an alert may wait in euv_tls_take) */
    EUV_TLS_HS_PLAIN /* plain HTTP came: answer euv_tls_plain_400 in the clear */
};
enum euv_tls_hs euv_tls_handshake(euv_tls *t);
const unsigned char *euv_tls_alpn(euv_tls *t, unsigned *len); /* *len 0: none chosen */
const char *euv_tls_plain_400(size_t *len);

/* Decrypt: > 0 bytes, 0 nothing whole yet, -1 the end (close_notify or a bad record). */
ssize_t euv_tls_read(euv_tls *t, char *buf, size_t cap);
int euv_tls_buffered(euv_tls *t); /* euv_tls_read has more without a read */

/* Encrypt n bytes (-1 on failure); queue close_notify (once, after the handshake). */
int euv_tls_write(euv_tls *t, const void *d, size_t n);
void euv_tls_close_notify(euv_tls *t);

/* The ciphertext to write, after `room` bytes of the caller's, in a malloc'd block; NULL with
 * *len 0 when none, with *len != 0 when out of memory. */
char *euv_tls_take(euv_tls *t, size_t room, size_t *len);

#endif /* SRV_ENGINES_UV_TLS_H */
