/*
 * The elastic worker pool: up to worker_threads threads taking srv_jobs from
 * one bounded FIFO. It starts worker_threads_min threads, starts more when
 * jobs wait and no idle worker is left to wake (below), and lets a thread above
 * the minimum exit after worker_idle_timeout_ms without work (Tomcat's
 * minSpareThreads/maxThreads/maxIdleTime). The offloading engines queue
 * handler jobs here; the threadpool engine queues connections.
 *
 * Waking a sleeping worker costs a futex call and a context switch, more
 * than a light handler itself, and on a busy machine every extra runnable
 * worker costs more switches. So a job is left to the workers already
 * awake (spinning, woken, or running a job they loop back from) while the
 * queue keeps moving; once nothing has been taken from it for
 * SRV__POOL_STALL_NS, the busy workers are taken to be blocked (a sleeping
 * handler) and as many more are woken or started, doubling every tenth of
 * that while the backlog stands still (srv__pool_stalled). A watcher
 * thread makes that check when no submit comes.
 */
#include "srv_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { SRV__SLOT_FREE, SRV__SLOT_RUNNING, SRV__SLOT_EXITED };

struct srv__worker {
    srv__pool *pool;
    pthread_t tid;
    int state; /* SRV__SLOT_*, pool mutex */
    bool woken; /* started for a queued job: counted in wakes until it runs */
};

/* How long the queue may stand still before the busy workers are taken to
 * be blocked: a light handler takes microseconds; a job queued behind
 * blocked ones waits about this long (0.1% of a one-second handler). */
#define SRV__POOL_STALL_NS 1000000ull
/* The watcher checks every SRV__POOL_STALL_NS while jobs were left to the
 * awake workers this recently, then sleeps until the next one is: under
 * load it is not woken per job. */
#define SRV__POOL_WATCH_NS 10000000ull

int srv__pool_init(srv__pool *p)
{
    p->head = p->tail = NULL;
    p->moved_ns = p->deferred_ns = 0;
    p->stalls = 0;
    p->watching = p->watcher_asleep = false;
    p->waiting = 0;
    p->shutdown = false;
    p->workers = NULL;
    p->alive = p->idle = p->wakes = p->spinning = 0;
    p->min = p->max = p->max_waiting = 0;
    p->idle_ms = 0;
    atomic_init(&p->busy, 0);
    atomic_init(&p->alive_now, 0);
    atomic_init(&p->queued_now, 0);
    atomic_init(&p->rejected, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return SRV_ESYS;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* idle timeouts ignore clock jumps */
    int rc = pthread_cond_init(&p->cv, &ca);
    if (rc == 0 && pthread_cond_init(&p->watch_cv, &ca) != 0) {
        pthread_cond_destroy(&p->cv);
        rc = -1;
    }
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&p->mu);
        return SRV_ESYS;
    }
    return 0;
}

static void srv__pool_idle_deadline(const srv__pool *p, struct timespec *ts)
{
    srv__timespec_in(ts, CLOCK_MONOTONIC, p->idle_ms);
}

/* The worker leaves the pool (mutex held): its slot waits to be joined. */
static void srv__pool_leave(srv__pool *p, srv__worker *w)
{
    p->alive--;
    atomic_store(&p->alive_now, p->alive);
    w->state = SRV__SLOT_EXITED;
}

/*
 * How long a worker that ran out of jobs keeps looking before it sleeps.
 * Under steady load the next job comes within microseconds; catching it
 * awake saves the submitter a futex wake and this worker a context switch
 * (the hand-off cost that dominates light handlers). One worker at a time
 * spins, so an idle pool burns at most this much CPU after each burst.
 */
#define SRV__POOL_SPIN_NS 50000

static inline void srv__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t srv__pool_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Mutex held on entry and on return. Spin (without the mutex) for a job
 * while no other worker does; the submitter sees `spinning` under the mutex
 * and then does not signal, and the spinner re-checks under the mutex
 * before it sleeps, so no job is left behind. */
static void srv__pool_spin(srv__pool *p)
{
    if (p->spinning > 0 || p->shutdown)
        return;
    p->spinning++;
    pthread_mutex_unlock(&p->mu);
    uint64_t until = srv__pool_now_ns() + SRV__POOL_SPIN_NS;
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(&p->queued_now, memory_order_relaxed) != 0)
            break;
        if ((i & 63) == 63 && srv__pool_now_ns() >= until)
            break;
        srv__cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    p->spinning--;
}

static void *srv__pool_main(void *arg)
{
    srv__worker *w = arg;
    srv__pool *p = w->pool;
    pthread_mutex_lock(&p->mu);
    if (w->woken) {
        w->woken = false;
        if (p->wakes > 0)
            p->wakes--;
    }
    for (;;) {
        if (p->head == NULL)
            srv__pool_spin(p);
        while (p->head == NULL && !p->shutdown) {
            int rc;
            p->idle++;
            if (p->alive > p->min) {
                struct timespec ts;
                srv__pool_idle_deadline(p, &ts);
                rc = pthread_cond_timedwait(&p->cv, &p->mu, &ts);
            } else {
                rc = pthread_cond_wait(&p->cv, &p->mu);
            }
            p->idle--;
            if (p->wakes > 0)
                p->wakes--;
            if (rc == ETIMEDOUT && p->head == NULL && !p->shutdown && p->alive > p->min) {
                srv__pool_leave(p, w); /* idle past the timeout: retire */
                pthread_mutex_unlock(&p->mu);
                return NULL;
            }
        }
        srv_job *job = p->head;
        if (job == NULL) { /* shut down and drained */
            srv__pool_leave(p, w);
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->waiting--;
        p->moved_ns = srv__pool_now_ns();
        if (p->waiting == 0)
            p->stalls = 0; /* the backlog is gone */
        atomic_store_explicit(&p->queued_now, p->waiting, memory_order_relaxed);
        atomic_fetch_add(&p->busy, 1);
        pthread_mutex_unlock(&p->mu);

        /* Run jobs back to back: the next one is taken under the same lock
         * round trip that ends this one, never after a sleep. */
        job->next = NULL;
        job->run(job);
        atomic_fetch_sub(&p->busy, 1);
        pthread_mutex_lock(&p->mu);
    }
}

/* Start one more worker (mutex held), `woken` when it is counted in wakes
 * for a queued job. Returns 0 or SRV_ETHREAD. */
static int srv__pool_spawn(srv__pool *p, bool woken)
{
    srv__worker *w = NULL;
    for (unsigned i = 0; i < p->max && w == NULL; i++)
        if (p->workers[i].state != SRV__SLOT_RUNNING)
            w = &p->workers[i];
    if (w == NULL)
        return SRV_ETHREAD;
    if (w->state == SRV__SLOT_EXITED) { /* retired: it is returning, join is short */
        pthread_join(w->tid, NULL);
        w->state = SRV__SLOT_FREE;
    }
    /* Handlers block (the Greetings one sleeps), so many threads are the
     * point; a smaller stack keeps hundreds of them cheap in address space
     * while leaving handlers ample room. Workers take no SIGINT/SIGTERM:
     * those belong to the application (srv_server_run). */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1024 * 1024);
    w->pool = p;
    w->woken = woken;
    int rc = srv__thread_create(&w->tid, &attr, srv__pool_main, w);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        return SRV_ETHREAD;
    w->state = SRV__SLOT_RUNNING;
    p->alive++;
    atomic_store(&p->alive_now, p->alive);
    return 0;
}

/* Start a worker for a queued job (mutex held): awake until it runs. */
static int srv__pool_spawn_woken(srv__pool *p)
{
    int rc = srv__pool_spawn(p, true);
    if (rc == 0)
        p->wakes++;
    return rc;
}

/* Jobs are queued that the awake workers may not take soon (mutex held):
 * wake an idle worker, or start one, for each job nobody was woken for, at
 * most `n` of them. */
static void srv__pool_grow(srv__pool *p, unsigned n)
{
    for (; n > 0 && p->waiting > p->wakes + p->spinning; n--) {
        if (p->idle > p->wakes) {
            p->wakes++;
            pthread_cond_signal(&p->cv);
        } else if (p->alive < p->max) {
            if (srv__pool_spawn_woken(p) != 0) {
                if (p->alive == 0)
                    fprintf(stderr, "libsrv: cannot start a worker thread; requests wait\n");
                return;
            }
        } else {
            return; /* every worker is busy: the jobs wait their turn */
        }
    }
}

static uint64_t srv__pool_awake(const srv__pool *p)
{
    return (uint64_t)p->spinning + p->wakes + atomic_load(&p->busy);
}

/* A worker can be woken or started (mutex held). If not, every worker is
 * busy and queued jobs wait for one to loop back: nothing to decide. */
static bool srv__pool_can_grow(const srv__pool *p)
{
    return p->idle > p->wakes || p->alive < p->max;
}

/* How long the queue has stood still when it counts as stalled: the first
 * time in a backlog, and again once workers were added for it. */
static uint64_t srv__pool_stall_ns(const srv__pool *p)
{
    return p->stalls == 0 ? SRV__POOL_STALL_NS : SRV__POOL_STALL_NS / 10;
}

/* The queue stood still (mutex held). Workers woken that have not run yet
 * mean no core is free: more would not run sooner. Else the busy ones are
 * blocked (a sleeping handler) or were preempted: add as many as are busy,
 * so a backlog of blocking jobs gets its workers in a few doublings, while
 * a preempted light handler gets one more worker, not one per job. */
static void srv__pool_stalled(srv__pool *p, uint64_t now)
{
    p->moved_ns = now; /* what is woken now gets its own period */
    if (p->wakes != 0)
        return;
    unsigned busy = atomic_load(&p->busy);
    p->stalls++;
    srv__pool_grow(p, busy > 0 ? busy : 1);
}

/* Jobs are left queued for workers that may not take them soon (mutex
 * held): the watcher looks again within SRV__POOL_STALL_NS. */
static void srv__pool_watch_on(srv__pool *p, uint64_t now)
{
    p->deferred_ns = now;
    if (p->watcher_asleep) {
        p->watcher_asleep = false;
        pthread_cond_signal(&p->watch_cv);
    }
}

/* Sleep until the next check is due (mutex held, CLOCK_MONOTONIC). */
static void srv__pool_watch_wait(srv__pool *p, uint64_t at_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(at_ns / 1000000000u),
                          .tv_nsec = (long)(at_ns % 1000000000u)};
    (void)pthread_cond_timedwait(&p->watch_cv, &p->mu, &ts);
}

/* The watcher: jobs left to the awake workers must not wait on blocked
 * ones when no further submit comes to notice the stall. */
static void *srv__pool_watch(void *arg)
{
    srv__pool *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->shutdown) {
        uint64_t now = srv__pool_now_ns();
        bool backlog = p->waiting > 0 && srv__pool_can_grow(p);
        if (backlog && now - p->moved_ns >= srv__pool_stall_ns(p))
            srv__pool_stalled(p, now);
        if (backlog) {
            srv__pool_watch_wait(p, p->moved_ns + srv__pool_stall_ns(p));
        } else if (now - p->deferred_ns < SRV__POOL_WATCH_NS) {
            srv__pool_watch_wait(p, now + SRV__POOL_STALL_NS);
        } else {
            p->watcher_asleep = true;
            pthread_cond_wait(&p->watch_cv, &p->mu);
            p->watcher_asleep = false;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int srv__pool_start(srv__pool *p, const srv_config *cfg)
{
    /* A failed srv_server_start shut the pool down and leaves the server
     * NEW, so start may run again: accept jobs again (otherwise every
     * submit would fail and every routed request be answered 503). No
     * worker runs here, so nothing is queued. */
    pthread_mutex_lock(&p->mu);
    p->shutdown = false;
    p->head = p->tail = NULL;
    p->waiting = 0;
    p->min = cfg->worker_threads_min;
    p->max = cfg->worker_threads;
    p->max_waiting = cfg->max_queued;
    p->idle_ms = cfg->worker_idle_timeout_ms;
    p->workers = calloc(p->max, sizeof *p->workers);
    int rc = p->workers == NULL ? SRV_ENOMEM : 0;
    for (unsigned i = 0; rc == 0 && i < p->min; i++)
        rc = srv__pool_spawn(p, false);
    if (rc == 0) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        p->watcher_asleep = false;
        p->deferred_ns = 0;
        rc = srv__thread_create(&p->watcher, &attr, srv__pool_watch, p) == 0 ? 0 : SRV_ETHREAD;
        p->watching = rc == 0;
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&p->mu);
    if (rc != 0)
        srv__pool_shutdown(p);
    return rc;
}

int srv__pool_submit(srv_server *srv, srv_job *job)
{
    srv__pool *p = &srv->pool;
    job->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->shutdown) {
        pthread_mutex_unlock(&p->mu);
        return SRV_ESTATE;
    }
    if (p->waiting >= p->max_waiting) {
        pthread_mutex_unlock(&p->mu);
        atomic_fetch_add(&p->rejected, 1);
        return SRV_ETOOBIG;
    }
    if (p->tail != NULL)
        p->tail->next = job;
    else
        p->head = job;
    p->tail = job;
    p->waiting++;
    atomic_store_explicit(&p->queued_now, p->waiting, memory_order_relaxed);
    uint64_t now = srv__pool_now_ns();
    if (p->waiting == 1)
        p->moved_ns = now; /* the queue starts here */
    /* A spinning worker takes it within microseconds. Else, while the queue
     * moves, leave it to the awake workers (the watcher checks later);
     * nobody awake, or the queue stood still: wake or start workers. */
    if ((p->spinning > 0 && p->waiting <= p->spinning) || !srv__pool_can_grow(p)) {
        /* taken within microseconds, or when a busy worker loops back */
    } else if (p->watching && srv__pool_awake(p) > 0 && now - p->moved_ns < srv__pool_stall_ns(p)) {
        srv__pool_watch_on(p, now);
    } else if (srv__pool_awake(p) > 0) {
        srv__pool_stalled(p, now);
        /* It adds no worker while one woken earlier has not run yet (a
         * loaded machine), and only as many as are busy: without the
         * watcher, the rest would wait for a blocked handler to return. */
        if (p->watching)
            srv__pool_watch_on(p, now);
    } else if (p->idle > p->wakes) {
        p->wakes++; /* one: it takes the jobs behind this one too */
        pthread_cond_signal(&p->cv);
    } else if (p->alive < p->max) {
        if (srv__pool_spawn_woken(p) != 0 && p->alive == 0)
            fprintf(stderr, "libsrv: cannot start a worker thread; requests wait\n");
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

unsigned srv__pool_waiting(const srv_server *srv)
{
    return atomic_load_explicit(&srv->pool.queued_now, memory_order_relaxed);
}

void srv__pool_shutdown(srv__pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->shutdown = true;
    bool watching = p->watching;
    p->watching = false;
    pthread_cond_signal(&p->watch_cv);
    /* Queued jobs always run: with no worker left (a minimum of 0 and all
     * retired), start one to drain them. */
    if (p->head != NULL && p->alive == 0 && p->workers != NULL)
        (void)srv__pool_spawn(p, false);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (watching)
        pthread_join(p->watcher, NULL);
    for (unsigned i = 0; p->workers != NULL && i < p->max; i++) {
        /* No spawn after shutdown: the slots only move to EXITED now. */
        pthread_mutex_lock(&p->mu);
        int state = p->workers[i].state;
        pthread_mutex_unlock(&p->mu);
        if (state != SRV__SLOT_FREE)
            pthread_join(p->workers[i].tid, NULL);
    }
    free(p->workers);
    p->workers = NULL;
    p->alive = p->idle = p->wakes = 0;
    atomic_store(&p->alive_now, 0);
}

void srv__pool_destroy(srv__pool *p)
{
    pthread_cond_destroy(&p->watch_cv);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}
