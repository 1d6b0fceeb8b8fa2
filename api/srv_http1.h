/*
 * A sans-I/O HTTP/1.x request parser for engines (the core's, so its rules
 * are the same for every engine that uses it): the engine feeds the bytes it
 * read, the parser builds the srv_request through the srv__request_* helpers
 * (so the core's 400/414/431/413/501/505/417 apply unchanged) and de-chunks
 * the body into it. No sockets, no clock, no threads: one parser per
 * connection, used by one thread at a time.
 *
 * Decisions (docs/ARCHITECTURE.md, "HTTP/1 parsing"):
 * - Lines end in CRLF. A bare LF anywhere in the head, a chunk line or the
 *   trailers is 400; so is a CR not followed by LF.
 * - Empty lines (CRLF) before a request line are ignored, any number of
 *   them (RFC 9112 2.2; nginx and libmicrohttpd skip them too), as long as
 *   their bytes stay within max_header_bytes: past it 431, as for a head.
 *   Nothing of them is kept, and the header deadline bounds them in time.
 * - Request line: method token, one SP, a target of visible bytes, one SP,
 *   "HTTP/" DIGIT "." DIGIT. Anything else (two spaces, no version: HTTP/0.9)
 *   is 400; a well-formed version other than 1.0/1.1 is the core's 505. A
 *   request line that outgrows its bound is 414 when the target is what
 *   makes it long, else 400.
 * - Header lines: a token, ':' at once (no space before it), then a value of
 *   HTAB, SP, VCHAR or obs-text; any other control byte is 400. A line that
 *   starts with SP or HTAB (obs-fold) is 400 (RFC 9112 5.2 allows it). A
 *   Transfer-Encoding value with trailing whitespace is 400: legal, but read
 *   differently by other servers (a request-smuggling vector).
 * - Chunked bodies: the size is 1-16 hex digits (no sign, no "0x"); chunk
 *   extensions follow RFC 9112 7.1.1's grammar; CRLF must follow each
 *   chunk's data. Extensions and trailer lines together may take at most
 *   max_header_bytes per message (431 past it); trailers are checked like
 *   header lines and dropped.
 */
#ifndef SRV_HTTP1_H
#define SRV_HTTP1_H

#include "srv_engine.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest method token accepted (a longer one is 400). */
#define SRV__HTTP1_MAX_METHOD 64

/* What srv__http1_feed found. */
enum srv_http1_event {
    SRV_HTTP1_NEED_MORE,       /* all input consumed; feed more */
    SRV_HTTP1_HEAD_READY,      /* the head is complete and accepted by the
                                * core; the body (if any) comes next */
    SRV_HTTP1_MESSAGE_COMPLETE, /* the body is complete: dispatch the request;
                                 * the parser is ready for the next message */
    SRV_HTTP1_FAIL,            /* answer srv__http1_status() and close */
    SRV_HTTP1_BODY             /* srv__http1_stream_body mode: p->piece,
                                * p->piece_len are de-chunked body bytes
                                * (inside the input just fed) */
};

typedef struct srv_http1 {
    /* Read-only for engines. */
    int state;          /* internal phase */
    int status;         /* the failure's HTTP status (SRV_HTTP1_FAIL) */
    int h2_preface;     /* FAIL was the HTTP/2 connection preface */
    int started;        /* a byte of this message (not an empty line) came */
    int chunked;        /* the body is chunked */
    uint64_t remaining; /* Content-Length body / current chunk: bytes left */
    int deliver;        /* srv__http1_stream_body: pieces, not appends */
    const char *piece;  /* SRV_HTTP1_BODY's bytes */
    size_t piece_len;
    /* Internal. */
    size_t max_head, max_uri, max_body;
    size_t meta_bytes;  /* chunk extensions + trailers of this message */
    unsigned empty_lines;
    int sub;            /* chunk-line / extension sub-state */
    unsigned digits;
    char *line;         /* the head line being collected */
    size_t line_len, line_cap;
} srv_http1;

/* Ready the parser for a connection of `srv` (limits from its config). */
void srv__http1_init(srv_http1 *p, srv_server *srv);

/* Free what the parser holds (not the request). */
void srv__http1_free(srv_http1 *p);

/* Between messages (no line half collected): give the line buffer back.
 * For a connection whose request waits for a late answer, so that
 * thousands of them hold nothing the next message does not need yet (it
 * allocates again when its first line comes). */
void srv__http1_trim(srv_http1 *p);

/*
 * srv__http1_feed: consume bytes of the message being read into `req` (a
 * fresh request from srv__request_new for each message; the engine creates
 * it before feeding the message's first byte). *used receives the bytes
 * consumed, which stop right after a HEAD_READY or MESSAGE_COMPLETE event
 * (bytes left are the body or the next pipelined message: feed them again).
 * After HEAD_READY, feed again (len may be 0) to read the body; a request
 * without a body gives MESSAGE_COMPLETE at once. After FAIL the parser is
 * spent. `req` may be NULL only while srv__http1_idle() is true and no
 * byte is given.
 */
enum srv_http1_event srv__http1_feed(srv_http1 *p, srv_request *req, const char *data,
                                     size_t len, size_t *used);

/* The status of a FAIL (400, 413, 414, 431, 500, 501, 505...). */
static inline int srv__http1_status(const srv_http1 *p)
{
    return p->status;
}

/* Non-zero when no byte of a next message has been consumed (empty lines
 * before a request line do not count). */
static inline int srv__http1_idle(const srv_http1 *p)
{
    return !p->started;
}

/* Non-zero when nothing since the last message has come, not even an
 * empty line: an engine starts the next head's deadline then (a trickle
 * of CRLFs does not restart it). */
static inline int srv__http1_fresh(const srv_http1 *p)
{
    return !p->started && p->empty_lines == 0 && p->line_len == 0;
}

/* After HEAD_READY: give this message's body as SRV_HTTP1_BODY events
 * instead of appending it to the request (a streamed body: the core's
 * limits are then the engine's to apply through srv__body_data). */
static inline void srv__http1_stream_body(srv_http1 *p)
{
    p->deliver = 1;
}

/* Non-zero after HEAD_READY when a body follows (chunked or a non-zero
 * Content-Length): when the engine sends "100 Continue". */
int srv__http1_body_expected(const srv_http1 *p);

#ifdef __cplusplus
}
#endif

#endif /* SRV_HTTP1_H */
