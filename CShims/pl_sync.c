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
 *
 * Why a condition variable of our own on a futex word (pl_futex_cond_t), for the waits a message ends: after a
 * wake-up, glibc's pthread_cond_wait takes the mutex back as if others waited for it, so the waiter's next unlock
 * makes a FUTEX_WAKE system call that wakes nobody. On a ping-pong between two loops that was one system call in
 * three. What the word orders is only the sleep: the state it guards is read and written under the mutex.
 */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include "pl_internal.h"

#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

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

void pl_futex_cond_init(pl_futex_cond_t *cond) { atomic_init(&cond->word, 0); }

void pl_futex_cond_wait_until(pl_futex_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ns) {
    /* Read under the lock: a waker changes the state under it first, and the word only after, so a wake-up meant
     * for this waiter either finds it asleep or has changed the word, and the futex does not sleep. */
    unsigned seen = atomic_load_explicit(&cond->word, memory_order_relaxed);
    pthread_mutex_unlock(lock);
    struct timespec ts;
    struct timespec *timeout = NULL;
    if (deadline_ns != INT64_MAX) {
        ts = pl_timespec_from_ns(deadline_ns);
        timeout = &ts;
    }
    /* FUTEX_WAIT_BITSET takes an absolute deadline, on CLOCK_MONOTONIC without FUTEX_CLOCK_REALTIME. A wake-up, a
     * changed word, a signal and the deadline all return here; the caller looks at the state in every case. */
    syscall(SYS_futex, &cond->word, FUTEX_WAIT_BITSET_PRIVATE, seen, timeout, NULL, FUTEX_BITSET_MATCH_ANY);
    pthread_mutex_lock(lock);
}

static void pl_futex_cond_wake(pl_futex_cond_t *cond, int waiters) {
    atomic_fetch_add_explicit(&cond->word, 1, memory_order_relaxed);
    syscall(SYS_futex, &cond->word, FUTEX_WAKE_PRIVATE, waiters, NULL, NULL, 0);
}

void pl_futex_cond_signal(pl_futex_cond_t *cond) { pl_futex_cond_wake(cond, 1); }

void pl_futex_cond_broadcast(pl_futex_cond_t *cond) { pl_futex_cond_wake(cond, INT32_MAX); }
