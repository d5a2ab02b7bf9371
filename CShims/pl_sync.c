/*
 * pl_sync.c — mutexes that spin before they sleep, and condition variables on the monotonic clock.
 *
 * Why adaptive mutexes: a port's lock is taken by its sender and its receiver for a few dozen instructions
 * each. With glibc's default mutex, a thread that finds it held goes straight to a futex sleep, and the
 * holder pays a futex wake when it lets go: on a busy port that made two system calls out of most messages.
 * An adaptive mutex spins for a short, bounded while first (glibc's PTHREAD_MUTEX_ADAPTIVE_NP).
 *
 * Why: pthread condition variables time out against CLOCK_REALTIME by default, so a wall-clock step would
 * make a timed receive return early or late. Ports and sets wait on CLOCK_MONOTONIC instead, which the
 * kernel's futex honours to the microsecond.
 */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include "pl_internal.h"

#include <stdint.h>

void pl_mutex_init_adaptive(pthread_mutex_t *lock) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

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
