/*
 * The bounded worker pool: worker_threads threads taking srv_jobs from one
 * FIFO. The offloading engines queue handler jobs here; the threadpool
 * engine queues whole connections (its workers own one connection each).
 */
#include "srv_core.h"

#include <stdlib.h>

int srv__pool_init(srv__pool *p)
{
    p->head = p->tail = NULL;
    p->waiting = 0;
    p->shutdown = false;
    p->threads = NULL;
    p->nthreads = 0;
    atomic_init(&p->busy, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return SRV_ESYS;
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        return SRV_ESYS;
    }
    return 0;
}

static void *srv__pool_main(void *arg)
{
    srv__pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->head == NULL && !p->shutdown)
            pthread_cond_wait(&p->cv, &p->mu);
        srv_job *job = p->head;
        if (job == NULL) { /* shut down and drained */
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->waiting--;
        atomic_fetch_add(&p->busy, 1);
        pthread_mutex_unlock(&p->mu);

        job->next = NULL;
        job->run(job);
        atomic_fetch_sub(&p->busy, 1);
    }
}

int srv__pool_start(srv__pool *p, unsigned n)
{
    p->threads = calloc(n, sizeof *p->threads);
    if (p->threads == NULL)
        return SRV_ENOMEM;
    /* Handlers block (the Greetings one sleeps), so many threads are the
     * point; a smaller stack keeps hundreds of them cheap in address
     * space while leaving handlers ample room. */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1024 * 1024);
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&p->threads[i], &attr, srv__pool_main, p) != 0) {
            pthread_attr_destroy(&attr);
            srv__pool_shutdown(p);
            return SRV_ETHREAD;
        }
        p->nthreads++;
    }
    pthread_attr_destroy(&attr);
    return 0;
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
    if (p->tail != NULL)
        p->tail->next = job;
    else
        p->head = job;
    p->tail = job;
    p->waiting++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

unsigned srv__pool_waiting(const srv_server *srv)
{
    srv__pool *p = (srv__pool *)&srv->pool;
    pthread_mutex_lock(&p->mu);
    unsigned n = p->waiting;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void srv__pool_shutdown(srv__pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->shutdown = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
    free(p->threads);
    p->threads = NULL;
}

void srv__pool_destroy(srv__pool *p)
{
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}
