/* The controlling thread's side of an engine's event loops (uv, h2o): the
 * quiesce and stop requests the loops read when woken, and the counts the
 * two sides wait on (api/srv_engine.h). */
#include "srv_core.h"

void srv__loopctl_init(srv__loopctl *c)
{
    memset(c, 0, sizeof *c);
    atomic_init(&c->quiesce_req, 0);
    atomic_init(&c->stop_req, 0);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

void srv__loopctl_destroy(srv__loopctl *c)
{
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
}

static void loopctl_bump(srv__loopctl *c, unsigned *n)
{
    pthread_mutex_lock(&c->mu);
    ++*n;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void loopctl_await(srv__loopctl *c, const unsigned *n, unsigned want)
{
    pthread_mutex_lock(&c->mu);
    while (*n < want)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

void srv__loopctl_ready(srv__loopctl *c)
{
    loopctl_bump(c, &c->ready);
}

void srv__loopctl_await_ready(srv__loopctl *c, unsigned nloops)
{
    loopctl_await(c, &c->ready, nloops);
}

void srv__loopctl_quiesced(srv__loopctl *c)
{
    loopctl_bump(c, &c->quiesced);
}

void srv__loopctl_await_wakes(srv__loopctl *c)
{
    loopctl_await(c, &c->wakes_done, 1);
}

void srv__loopctl_quiesce(srv__loopctl *c, unsigned nloops, void (*wake)(void *arg, unsigned i),
                          void *arg)
{
    atomic_store(&c->quiesce_req, 1); /* first: a woken loop sees it */
    for (unsigned i = 0; i < nloops; i++)
        wake(arg, i);
    loopctl_await(c, &c->quiesced, nloops);
}

void srv__loopctl_stop(srv__loopctl *c, unsigned nloops, void (*wake)(void *arg, unsigned i),
                       void *arg)
{
    atomic_store(&c->stop_req, 1);
    for (unsigned i = 0; i < nloops; i++)
        wake(arg, i);
    loopctl_bump(c, &c->wakes_done);
}
