/*
 * The request arena: a bump allocator for the parts of a request built on
 * the engine's thread, freed at once with the request. A leaf: it calls
 * no other core file.
 */
#include "srv_core.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct srv__arena_chunk {
    srv__arena_chunk *next;
    size_t used;
    size_t cap;
    alignas(max_align_t) unsigned char data[];
};

/* A typical request (method, target, a dozen headers) fits the first,
 * small chunk; with thousands of requests waiting on an event-loop engine
 * (2700 in the benchmark) the difference is megabytes of RSS. With its
 * header the first chunk stays under glibc's large-bin size (1,000 bytes
 * asked for): a large-bin malloc first consolidates every freed small
 * block (malloc_consolidate), once per request. */
#define SRV__ARENA_FIRST_CHUNK (1000 - sizeof(srv__arena_chunk))
#define SRV__ARENA_CHUNK 4096

void *srv__arena_alloc(srv__arena *a, size_t n)
{
    n = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    srv__arena_chunk *c = a->chunks;
    if (c == NULL || c->cap - c->used < n) {
        size_t chunk = c == NULL ? SRV__ARENA_FIRST_CHUNK : SRV__ARENA_CHUNK;
        size_t cap = n > chunk ? n : chunk;
        c = malloc(sizeof *c + cap);
        if (c == NULL)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->chunks;
        a->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

char *srv__arena_strndup(srv__arena *a, const char *s, size_t n)
{
    char *p = srv__arena_alloc(a, n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

void srv__arena_free(srv__arena *a)
{
    srv__arena_chunk *c = a->chunks;
    while (c != NULL) {
        srv__arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->chunks = NULL;
}
