/*
 * Clocks: the monotonic milliseconds every deadline is counted in, and a
 * coarse one for cheap measurements on the request path. A leaf.
 */
#include "srv_core.h"

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
