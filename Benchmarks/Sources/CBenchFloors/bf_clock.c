/*
 * bf_clock.c — the one clock of the benchmarks (CLOCK_MONOTONIC, as the port layer's timeouts use), so that
 * Swift and C figures are taken on the same clock.
 */
#include "cbenchfloors.h"

#include <time.h>

int64_t bf_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
