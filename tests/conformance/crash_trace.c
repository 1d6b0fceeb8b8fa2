/*
 * A crash in any thread of the conformance binary says where it happened.
 *
 * cmocka (1.1.x) sets its own handler for SIGSEGV, SIGBUS, SIGILL and SIGFPE
 * with signal() around every case, and from that handler jumps back into the
 * main thread's case, from whichever thread crashed. A crash in a server
 * thread then ends the run as "killed by signal 11" and nothing says where;
 * CI keeps no core. So this file defines signal() for the binary (the
 * executable's definition is the one libcmocka binds to as well): a handler
 * set for a crash signal runs after the crashing thread's backtrace has gone
 * to stderr. Other signals are set as glibc's signal() sets them.
 *
 * The frames are printed by backtrace_symbols_fd: a function the binary or
 * libsrv does not export shows as module(+offset); `addr2line -f -e MODULE
 * OFFSET` on the same commit's build names it. The sanitized builds trace
 * crashes themselves and do not get this file's signal().
 */
#include "conformance.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

/* What the program asked for on each crash signal (SIG_DFL until it asks). */
static void (*volatile crash_next[NSIG])(int);

static int crash_signal(int sig)
{
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE;
}

static void crash_say(const char *s)
{
    ssize_t r = write(STDERR_FILENO, s, strlen(s));
    (void)r;
}

static void crash_trace(int sig)
{
    char num[4] = {(char)('0' + sig / 10 % 10), (char)('0' + sig % 10), '\0', '\0'};
    crash_say("\nconformance: crashed with signal ");
    crash_say(num[0] == '0' ? num + 1 : num);
    crash_say("; the crashing thread's stack:\n");
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    void (*next)(int) = crash_next[sig];
    if (next != SIG_DFL && next != SIG_IGN) {
        next(sig);
        return;
    }
    /* Die of it, as without this handler. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    raise(sig);
}

/* glibc's signal(): BSD semantics (the signal blocked while its handler
 * runs, interrupted calls restarted). */
void (*signal(int sig, void (*handler)(int)))(int)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, sig);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = handler;
    if (sig > 0 && sig < NSIG && crash_signal(sig) && handler != SIG_IGN) {
        void (*prev)(int) = crash_next[sig];
        crash_next[sig] = handler;
        sa.sa_handler = crash_trace;
        if (sigaction(sig, &sa, NULL) != 0)
            return SIG_ERR;
        return prev;
    }
    if (sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return old.sa_handler == crash_trace ? crash_next[sig] : old.sa_handler;
}

void conformance_trace_crashes(void)
{
    void *frame[1];
    backtrace(frame, 1); /* loads libgcc's unwinder now, not in a handler */
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    signal(SIGILL, SIG_DFL);
    signal(SIGFPE, SIG_DFL);
}

#else

void conformance_trace_crashes(void)
{
}

#endif
