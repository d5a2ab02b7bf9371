/*
 * pl_sync.c — condition variables on the monotonic clock.
 *
 * Why: pthread condition variables time out against CLOCK_REALTIME by default, so a wall-clock step would
 * make a timed receive return early or late. Ports and sets wait on CLOCK_MONOTONIC instead, which the
 * kernel's futex honours to the microsecond.
 */
#include "pl_internal.h"

#include <stdint.h>

void pl_cond_init_monotonic(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

void pl_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ns) {
    if (deadline_ns == INT64_MAX) {
        pthread_cond_wait(cond, lock);
    } else {
        struct timespec ts = pl_timespec_from_ns(deadline_ns);
        pthread_cond_timedwait(cond, lock, &ts);
    }
}
