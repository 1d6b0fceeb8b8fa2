/*
 * The open-file cache of static files (static.c): per srv_static_add root,
 * a hash table of the files served lately - descriptor, identity (device,
 * inode, size, mtime, ctime), ETag and date texts, and for a small file its
 * bytes - bounded in entries and in cached bytes, least recently used out
 * first. One mutex guards the table; an entry is immutable once published
 * and reference-counted, so a response may still send from an entry the
 * table dropped. Whether an entry still names its file is the caller's
 * question (static.c compares it with a stat of the path on every request).
 */
#include "srv_core.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t srv__fcache_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211u;
    }
    return h;
}

int srv__fcache_init(srv__fcache *c, size_t max_entries, size_t max_bytes, size_t small_max)
{
    memset(c, 0, sizeof *c);
    c->max_entries = max_entries > 0 ? max_entries : 1;
    c->max_bytes = max_bytes;
    c->small_max = small_max;
    size_t nb = 16;
    while (nb < c->max_entries * 2)
        nb *= 2;
    c->buckets = calloc(nb, sizeof *c->buckets);
    if (c->buckets == NULL)
        return SRV_ENOMEM;
    c->nbuckets = nb;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c->buckets);
        c->buckets = NULL;
        return SRV_ESYS;
    }
    return 0;
}

void srv__fentry_ref(srv__fentry *e)
{
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

void srv__fentry_unref(srv__fentry *e)
{
    if (e == NULL || atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (e->fd >= 0)
        close(e->fd);
    free(e->bytes);
    free(e->gz);
    free(e);
}

/* Unlink e from the table and the LRU list and drop the table's reference
 * (c->mu held). */
static void srv__fcache_unlink(srv__fcache *c, srv__fentry *e)
{
    srv__fentry **pp = &c->buckets[e->hash & (c->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        c->lru_head = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    else
        c->lru_tail = e->lprev;
    e->hnext = e->lprev = e->lnext = NULL;
    c->count--;
    c->bytes -= e->bytes_len;
    srv__fentry_unref(e);
}

static srv__fentry *srv__fcache_find(srv__fcache *c, const char *name, size_t len, uint64_t h)
{
    for (srv__fentry *e = c->buckets[h & (c->nbuckets - 1)]; e != NULL; e = e->hnext)
        if (e->hash == h && e->name_len == len && memcmp(e->name, name, len) == 0)
            return e;
    return NULL;
}

bool srv__fentry_same(const srv__fentry *e, const struct stat *sb)
{
    return e->dev == sb->st_dev && e->ino == sb->st_ino && e->size == (uint64_t)sb->st_size &&
           e->mtim.tv_sec == sb->st_mtim.tv_sec && e->mtim.tv_nsec == sb->st_mtim.tv_nsec &&
           e->ctim.tv_sec == sb->st_ctim.tv_sec && e->ctim.tv_nsec == sb->st_ctim.tv_nsec;
}

srv__fentry *srv__fcache_get(srv__fcache *c, const char *name, const struct stat *sb)
{
    size_t len = strlen(name);
    uint64_t h = srv__fcache_hash(name, len);
    pthread_mutex_lock(&c->mu);
    srv__fentry *e = srv__fcache_find(c, name, len, h);
    if (e != NULL && (sb == NULL || !srv__fentry_same(e, sb))) {
        srv__fcache_unlink(c, e); /* changed or gone: never served again */
        e = NULL;
    } else if (e != NULL) {
        if (e != c->lru_head) { /* to the front */
            e->lprev->lnext = e->lnext;
            if (e->lnext)
                e->lnext->lprev = e->lprev;
            else
                c->lru_tail = e->lprev;
            e->lprev = NULL;
            e->lnext = c->lru_head;
            c->lru_head->lprev = e;
            c->lru_head = e;
        }
        srv__fentry_ref(e);
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

srv__fentry *srv__fentry_new(const char *name, int fd, const struct stat *sb)
{
    size_t len = strlen(name);
    srv__fentry *e = calloc(1, sizeof *e + len + 1);
    if (e == NULL)
        return NULL;
    e->name = (char *)(e + 1);
    memcpy(e->name, name, len + 1);
    e->name_len = len;
    e->hash = srv__fcache_hash(name, len);
    e->fd = fd;
    e->dev = sb->st_dev;
    e->ino = sb->st_ino;
    e->size = (uint64_t)sb->st_size;
    e->mtim = sb->st_mtim;
    e->ctim = sb->st_ctim;
    atomic_init(&e->refs, 1);
    return e;
}

void srv__fcache_put(srv__fcache *c, srv__fentry *e)
{
    if (e->bytes_len > c->max_bytes) { /* never cached: too big for the bound */
        free(e->bytes);
        free(e->gz);
        e->bytes = e->gz = NULL;
        e->bytes_len = e->gz_len = 0;
    }
    srv__fentry_ref(e); /* the table's */
    pthread_mutex_lock(&c->mu);
    srv__fentry *old = srv__fcache_find(c, e->name, e->name_len, e->hash);
    if (old != NULL)
        srv__fcache_unlink(c, old);
    while (c->lru_tail != NULL &&
           (c->count + 1 > c->max_entries || c->bytes + e->bytes_len > c->max_bytes)) {
        srv__fcache_unlink(c, c->lru_tail);
        c->evictions++;
    }
    srv__fentry **b = &c->buckets[e->hash & (c->nbuckets - 1)];
    e->hnext = *b;
    *b = e;
    e->lprev = NULL;
    e->lnext = c->lru_head;
    if (c->lru_head)
        c->lru_head->lprev = e;
    else
        c->lru_tail = e;
    c->lru_head = e;
    c->count++;
    c->bytes += e->bytes_len;
    pthread_mutex_unlock(&c->mu);
}

void srv__fcache_drop(srv__fcache *c, const char *name)
{
    size_t len = strlen(name);
    uint64_t h = srv__fcache_hash(name, len);
    pthread_mutex_lock(&c->mu);
    srv__fentry *e = srv__fcache_find(c, name, len, h);
    if (e != NULL)
        srv__fcache_unlink(c, e);
    pthread_mutex_unlock(&c->mu);
}

void srv__fcache_usage(srv__fcache *c, size_t *entries, size_t *bytes)
{
    pthread_mutex_lock(&c->mu);
    *entries = c->count;
    *bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
}

void srv__fcache_destroy(srv__fcache *c)
{
    if (c->buckets == NULL)
        return;
    while (c->lru_tail != NULL)
        srv__fcache_unlink(c, c->lru_tail);
    free(c->buckets);
    c->buckets = NULL;
    pthread_mutex_destroy(&c->mu);
}
