/*
 * The open-file cache of static files (core/static_cache.c) without a
 * server: both bounds (entries and cached bytes) hold whatever is put,
 * the least recently used go first, an entry a response still holds
 * outlives its eviction and closes its descriptor with the last
 * reference, a stat that differs drops the entry, and threads that put
 * and get at once keep the bounds.
 */
#include "srv_core.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* A stat of a made-up file `id` of `size` bytes. */
static struct stat fake_stat(unsigned id, off_t size)
{
    struct stat sb;
    memset(&sb, 0, sizeof sb);
    sb.st_dev = 1;
    sb.st_ino = id;
    sb.st_size = size;
    sb.st_mtim.tv_sec = 1000 + id;
    sb.st_ctim.tv_sec = 1000 + id;
    sb.st_mode = S_IFREG | 0644;
    return sb;
}

/* Put a new entry `name` (an open /dev/null, `bytes` cached bytes);
 * returns it with the caller's reference. */
static srv__fentry *put(srv__fcache *c, const char *name, unsigned id, size_t bytes)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    struct stat sb = fake_stat(id, (off_t)bytes);
    srv__fentry *e = srv__fentry_new(name, fd, &sb);
    assert_non_null(e);
    if (bytes > 0) {
        e->bytes = calloc(1, bytes);
        assert_non_null(e->bytes);
        e->bytes_len = bytes;
    }
    srv__fcache_put(c, e);
    return e;
}

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1;
}

/* Descriptors open in this process now. */
static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fd_open(fd);
    return n;
}

static void test_entry_bound(void **state)
{
    (void)state;
    srv__fcache c;
    assert_int_equal(srv__fcache_init(&c, 4, 1000, 100), 0);
    int before = open_fds();
    char name[16];
    for (unsigned i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "f%u", i);
        srv__fentry_unref(put(&c, name, i, 10));
        size_t n, b;
        srv__fcache_usage(&c, &n, &b);
        assert_true(n <= 4);
        assert_true(b <= 40);
        /* an evicted entry's descriptor is closed at once */
        assert_int_equal(open_fds(), before + (int)n);
    }
    /* The last four stay; the first six went. */
    for (unsigned i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "f%u", i);
        struct stat sb = fake_stat(i, 10);
        srv__fentry *e = srv__fcache_get(&c, name, &sb);
        if (i < 6) {
            assert_null(e);
        } else {
            assert_non_null(e);
            srv__fentry_unref(e);
        }
    }
    srv__fcache_destroy(&c);
    assert_int_equal(open_fds(), before);
}

static void test_byte_bound(void **state)
{
    (void)state;
    srv__fcache c;
    assert_int_equal(srv__fcache_init(&c, 100, 100, 50), 0);
    char name[16];
    for (unsigned i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "b%u", i);
        srv__fentry_unref(put(&c, name, i, 40));
        size_t n, b;
        srv__fcache_usage(&c, &n, &b);
        assert_true(b <= 100);
        assert_true(n <= 2); /* two of 40 fit in 100, a third does not */
    }
    /* Bytes over the whole bound are not kept; the entry is (fd, stat). */
    srv__fentry *big = put(&c, "big", 99, 500);
    assert_null(big->bytes);
    assert_int_equal(big->bytes_len, 0);
    srv__fentry_unref(big);
    struct stat sb = fake_stat(99, 500);
    srv__fentry *e = srv__fcache_get(&c, "big", &sb);
    assert_non_null(e);
    srv__fentry_unref(e);
    size_t n, b;
    srv__fcache_usage(&c, &n, &b);
    assert_true(b <= 100);
    srv__fcache_destroy(&c);
}

/* Using an entry makes it the most recent: the least recently used goes. */
static void test_lru(void **state)
{
    (void)state;
    srv__fcache c;
    assert_int_equal(srv__fcache_init(&c, 2, 1000, 100), 0);
    srv__fentry_unref(put(&c, "a", 1, 0));
    srv__fentry_unref(put(&c, "b", 2, 0));
    struct stat sa = fake_stat(1, 0), sb = fake_stat(2, 0), sc = fake_stat(3, 0);
    srv__fentry *e = srv__fcache_get(&c, "a", &sa); /* a is now newer than b */
    assert_non_null(e);
    srv__fentry_unref(e);
    srv__fentry_unref(put(&c, "c", 3, 0));
    assert_null(srv__fcache_get(&c, "b", &sb));
    e = srv__fcache_get(&c, "a", &sa);
    assert_non_null(e);
    srv__fentry_unref(e);
    e = srv__fcache_get(&c, "c", &sc);
    assert_non_null(e);
    srv__fentry_unref(e);
    srv__fcache_destroy(&c);
}

/* A response's reference keeps an evicted (or replaced, or dropped)
 * entry's descriptor open until it lets go. */
static void test_held_entry(void **state)
{
    (void)state;
    srv__fcache c;
    assert_int_equal(srv__fcache_init(&c, 1, 1000, 100), 0);
    srv__fentry *held = put(&c, "x", 1, 5);
    int fd = held->fd;
    srv__fentry_unref(put(&c, "y", 2, 5)); /* x evicted */
    assert_true(fd_open(fd));
    assert_non_null(held->bytes);
    srv__fentry_unref(held);
    assert_false(fd_open(fd));

    held = put(&c, "y", 3, 5); /* replaces y */
    fd = held->fd;
    srv__fcache_drop(&c, "y");
    assert_true(fd_open(fd));
    srv__fentry_unref(held);
    assert_false(fd_open(fd));
    size_t n, b;
    srv__fcache_usage(&c, &n, &b);
    assert_int_equal(n, 0);
    assert_int_equal(b, 0);
    srv__fcache_destroy(&c);
}

/* Any difference in the stat, or no stat (the path is gone), drops it. */
static void test_changed(void **state)
{
    (void)state;
    srv__fcache c;
    assert_int_equal(srv__fcache_init(&c, 8, 1000, 100), 0);
    struct stat base = fake_stat(7, 10);
    struct stat diff[5];
    for (int i = 0; i < 5; i++)
        diff[i] = base;
    diff[0].st_ino++;
    diff[1].st_size++;
    diff[2].st_mtim.tv_nsec++;
    diff[3].st_ctim.tv_nsec++; /* chmod, a rewrite under the same mtime */
    diff[4].st_dev++;
    for (int i = 0; i < 6; i++) {
        srv__fentry_unref(put(&c, "f", 7, 10));
        srv__fentry *e = srv__fcache_get(&c, "f", i < 5 ? &diff[i] : NULL);
        assert_null(e);
        /* dropped: even the right stat finds nothing now */
        assert_null(srv__fcache_get(&c, "f", &base));
    }
    srv__fcache_destroy(&c);
}

#define CT_THREADS 4
#define CT_OPS 20000

static void *churn(void *arg)
{
    srv__fcache *c = arg;
    unsigned seed = (unsigned)(uintptr_t)pthread_self();
    char name[16];
    for (int i = 0; i < CT_OPS; i++) {
        unsigned id = (unsigned)rand_r(&seed) % 64;
        snprintf(name, sizeof name, "t%u", id);
        struct stat sb = fake_stat(id, 16);
        srv__fentry *e = srv__fcache_get(c, name, &sb);
        if (e == NULL)
            e = put(c, name, id, 16);
        assert_int_equal(e->ino, id);
        srv__fentry_unref(e);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    srv__fcache c;
    assert_int_equal(srv__fcache_init(&c, 8, 100, 50), 0);
    pthread_t t[CT_THREADS];
    for (int i = 0; i < CT_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, &c), 0);
    for (int i = 0; i < CT_THREADS; i++)
        pthread_join(t[i], NULL);
    size_t n, b;
    srv__fcache_usage(&c, &n, &b);
    assert_true(n <= 8);
    assert_true(b <= 100);
    srv__fcache_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entry_bound), cmocka_unit_test(test_byte_bound),
        cmocka_unit_test(test_lru),         cmocka_unit_test(test_held_entry),
        cmocka_unit_test(test_changed),     cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
