/*
 * The timer service behind srv_after and the request-timeout sweep: one
 * libevent 2.1 base on its own thread. Timers are added from any thread,
 * which is why evthread_use_pthreads() runs before the base exists.
 */
#include "srv_core.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

struct srv__timer_entry {
    struct event *ev;
    void (*fn)(void *);
    void *arg;
    srv__timer *timer;
    srv__timer_entry *prev;
    srv__timer_entry *next;
};

static pthread_once_t srv__evthread_once = PTHREAD_ONCE_INIT;
static int srv__evthread_rc;

static void srv__evthread_init(void)
{
    srv__evthread_rc = evthread_use_pthreads();
}

static void srv__timer_unlink(srv__timer *t, srv__timer_entry *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        t->entries = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
}

static void srv__timer_fire(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    srv__timer_entry *e = arg;
    srv__timer *t = e->timer;
    pthread_mutex_lock(&t->mu);
    srv__timer_unlink(t, e);
    pthread_mutex_unlock(&t->mu);
    event_free(e->ev);
    void (*fn)(void *) = e->fn;
    void *fn_arg = e->arg;
    free(e);
    fn(fn_arg);
}

static void srv__timer_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    srv__timer *t = arg;
    t->tick_fn(t->tick_arg);
}

/* Runs inside the loop, so the break cannot be lost: event_base_loop
 * clears a loopbreak requested before the loop started. */
static void srv__timer_on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    srv__timer *t = arg;
    event_base_loopbreak(t->base);
}

static void *srv__timer_main(void *arg)
{
    srv__timer *t = arg;
    event_base_loop(t->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

int srv__timer_start(srv__timer *t, unsigned tick_ms, void (*tick_fn)(void *), void *tick_arg)
{
    t->entries = NULL;
    t->running = false;
    t->closing = false;
    t->tick_fn = tick_fn;
    t->tick_arg = tick_arg;
    pthread_once(&srv__evthread_once, srv__evthread_init);
    if (srv__evthread_rc != 0)
        return SRV_ESYS;
    if (pthread_mutex_init(&t->mu, NULL) != 0)
        return SRV_ESYS;

    /* libevent exits the process when its epoll base cannot get a descriptor
     * (evsig_init_'s socketpair): make sure the base will get its few first. */
    int probe[6], got = 0;
    for (; got < 6; got++) {
        probe[got] = got == 0 ? open("/dev/null", O_RDONLY | O_CLOEXEC)
                              : fcntl(probe[0], F_DUPFD_CLOEXEC, 0);
        if (probe[got] < 0)
            break;
    }
    for (int i = 0; i < got; i++)
        close(probe[i]);
    if (got < 6) {
        pthread_mutex_destroy(&t->mu);
        return SRV_ESYS;
    }

    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        goto fail_mu;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    t->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (t->base == NULL)
        goto fail_mu;

    t->tick = event_new(t->base, -1, EV_PERSIST, srv__timer_tick, t);
    t->stop = event_new(t->base, -1, 0, srv__timer_on_stop, t);
    struct timeval tv = {.tv_sec = tick_ms / 1000, .tv_usec = (tick_ms % 1000) * 1000};
    if (t->tick == NULL || t->stop == NULL || event_add(t->tick, &tv) != 0)
        goto fail_base;
    if (srv__thread_create(&t->thread, NULL, srv__timer_main, t) != 0) {
        event_free(t->stop);
        event_free(t->tick);
        event_base_free(t->base);
        pthread_mutex_destroy(&t->mu);
        return SRV_ETHREAD;
    }
    t->running = true;
    return 0;

fail_base:
    if (t->stop != NULL)
        event_free(t->stop);
    if (t->tick != NULL)
        event_free(t->tick);
    event_base_free(t->base);
fail_mu:
    pthread_mutex_destroy(&t->mu);
    return SRV_ENOMEM;
}

int srv__timer_add(srv__timer *t, unsigned ms, void (*fn)(void *), void *arg)
{
    srv__timer_entry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return SRV_ENOMEM;
    e->fn = fn;
    e->arg = arg;
    e->timer = t;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

    pthread_mutex_lock(&t->mu);
    if (!t->running || t->closing) {
        pthread_mutex_unlock(&t->mu);
        free(e);
        return SRV_ESTATE;
    }
    e->ev = event_new(t->base, -1, 0, srv__timer_fire, e);
    if (e->ev == NULL) {
        pthread_mutex_unlock(&t->mu);
        free(e);
        return SRV_ENOMEM;
    }
    /* Linked before it is armed, under the lock, so the callback (which
     * unlinks under the same lock) always finds it. */
    e->next = t->entries;
    if (t->entries != NULL)
        t->entries->prev = e;
    t->entries = e;
    if (event_add(e->ev, &tv) != 0) {
        srv__timer_unlink(t, e);
        pthread_mutex_unlock(&t->mu);
        event_free(e->ev);
        free(e);
        return SRV_ENOMEM;
    }
    pthread_mutex_unlock(&t->mu);
    return 0;
}

void srv__timer_stop(srv__timer *t)
{
    if (!t->running)
        return;
    pthread_mutex_lock(&t->mu);
    t->closing = true;
    pthread_mutex_unlock(&t->mu);
    event_active(t->stop, EV_TIMEOUT, 0);
    pthread_join(t->thread, NULL);
    t->running = false;

    /* Callbacks that never fired are dropped, as srv_after documents. */
    srv__timer_entry *e = t->entries;
    while (e != NULL) {
        srv__timer_entry *next = e->next;
        event_free(e->ev);
        free(e);
        e = next;
    }
    t->entries = NULL;
    event_free(t->stop);
    event_free(t->tick);
    event_base_free(t->base);
    pthread_mutex_destroy(&t->mu);
}
