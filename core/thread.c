/* Thread creation for the core and the engines: every libsrv thread starts
 * with asynchronous signals blocked, so SIGINT/SIGTERM reach the
 * application's thread (srv_server_run) and a handler's or an I/O thread's
 * system calls never see EINTR from them; SIGPIPE from a write to a closed
 * peer stays pending instead of killing the process. */
#include "srv_core.h"

#include <signal.h>

int srv__thread_create(pthread_t *tid, const pthread_attr_t *attr, void *(*fn)(void *),
                       void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    /* Faults are delivered to the thread that caused them whatever the
     * mask; leaving them unblocked keeps that well defined. */
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    sigdelset(&all, SIGTRAP);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(tid, attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
