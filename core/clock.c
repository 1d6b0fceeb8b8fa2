/*
 * Clocks and deadlines: the monotonic milliseconds every deadline is
 * counted in (the core's and the engines'), a coarse clock for cheap
 * measurements on the request path, and the arithmetic that turns a
 * deadline into a poll timeout or a pthread_cond_timedwait time. A leaf.
 */
#include "srv_core.h"

#include <limits.h>
#include <time.h>

uint64_t srv__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* CLOCK_MONOTONIC_COARSE: a few ms of resolution, no system call. */
uint64_t srv__coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int srv__ms_left(uint64_t deadline_ms, uint64_t now_ms)
{
    if (deadline_ms <= now_ms)
        return 0;
    uint64_t left = deadline_ms - now_ms;
    return left > INT_MAX ? INT_MAX : (int)left;
}

void srv__timespec_in(struct timespec *ts, clockid_t clock, uint64_t ms)
{
    clock_gettime(clock, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}
