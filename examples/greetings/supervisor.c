/*
 * greetings --processes N (nginx's worker processes): N children serve the
 * same port - each its own SO_REUSEPORT listener, or one inherited socket -
 * and this parent only watches them. Each child runs in its own process
 * group, so a terminal's Ctrl-C reaches the parent alone and every child
 * gets exactly one SIGTERM (a second signal during its grace period would
 * end it at once); a child also gets SIGTERM if the parent dies.
 */
#include "supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 256

static volatile sig_atomic_t g_stopping;
static volatile pid_t g_children[MAX_CHILDREN];
static unsigned g_n;

/* Async-signal-safe: kill() only. */
static void on_stop(int sig)
{
    (void)sig;
    if (g_stopping)
        return;
    g_stopping = 1;
    for (unsigned i = 0; i < g_n; i++)
        if (g_children[i] > 0)
            kill(g_children[i], SIGTERM);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 0 in the child; the child's pid in the parent. */
static pid_t spawn(pid_t parent)
{
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "greetings: cannot start a process: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* the parent died before prctl */
            _exit(1);
        return 0;
    }
    return pid;
}

void greetings_supervise(unsigned n)
{
    if (n > MAX_CHILDREN) {
        fprintf(stderr, "greetings: --processes %u is over the maximum of %d\n", n,
                MAX_CHILDREN);
        exit(2);
    }
    g_n = n;
    pid_t parent = getpid();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop; /* no SA_RESTART: waitpid returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    double started[MAX_CHILDREN];
    for (unsigned i = 0; i < n; i++) {
        pid_t pid = spawn(parent);
        if (pid == 0)
            return;
        g_children[i] = pid;
        started[i] = now_s();
        if (pid < 0)
            on_stop(SIGTERM);
    }
    fprintf(stderr, "greetings: supervisor %d keeps %u processes\n", (int)parent, n);
    int failed = 0, quick_deaths = 0;
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0)
            break; /* ECHILD: every child is gone */
        unsigned i = 0;
        while (i < n && g_children[i] != pid)
            i++;
        if (i == n)
            continue;
        g_children[i] = 0;
        int clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (g_stopping) {
            failed |= !clean;
            continue;
        }
        if (WIFSIGNALED(st))
            fprintf(stderr, "greetings: process %d died of signal %d; starting another\n",
                    (int)pid, WTERMSIG(st));
        else
            fprintf(stderr, "greetings: process %d exited with status %d; starting another\n",
                    (int)pid, WEXITSTATUS(st));
        /* A child that cannot start (port taken, bad certificate) would be
         * restarted forever: three deaths in a row within a second each
         * stop everything. */
        quick_deaths = now_s() - started[i] < 1.0 ? quick_deaths + 1 : 0;
        if (quick_deaths >= 3) {
            fprintf(stderr, "greetings: processes keep failing at start; stopping\n");
            failed = 1;
            on_stop(SIGTERM);
            continue;
        }
        pid_t again = spawn(parent);
        if (again == 0)
            return;
        g_children[i] = again;
        started[i] = now_s();
        if (again < 0 || g_stopping) { /* a stop that came during the fork */
            failed |= again < 0;
            g_stopping = 0;
            on_stop(SIGTERM);
        }
    }
    exit(failed ? 1 : 0);
}
