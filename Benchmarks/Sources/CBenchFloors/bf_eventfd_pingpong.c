/*
 * bf_eventfd_pingpong.c — floor 1 of the ping-pong scenario.
 *
 * Why it exists: this is the least a cross-thread round trip can cost on Linux with a sleeping receiver:
 * per direction one write(2) that wakes the peer and one blocking read(2) that sleeps. Nothing in
 * user space (no locks, no queue, no event loop). A PortLoop round trip cannot beat it by much; the ratio
 * to it shows what the port layer adds on top of the kernel's wake-up.
 */
#include "bf_common.h"

#include <pthread.h>
#include <sys/eventfd.h>

typedef struct {
    int to_a, to_b;          /* blocking eventfds: written to wake A, written to wake B */
    uint64_t total;          /* warm-up plus timed round trips */
    int failed;
} bf_pingpong_t;

/* Thread B: answers every ping. */
static void *bf_echo(void *arg) {
    bf_pingpong_t *pp = arg;
    uint64_t value;
    for (uint64_t i = 0; i < pp->total; i++) {
        if (bf_efd_read(pp->to_b, &value) != 0 || bf_efd_write(pp->to_a, 1) != 0) {
            pp->failed = 1;
            break;
        }
    }
    return NULL;
}

int64_t bf_eventfd_pingpong(uint64_t warmup, uint64_t round_trips, int64_t *laps, uint64_t *lap_count) {
    if (lap_count != NULL) *lap_count = 0;
    bf_pingpong_t pp = { .to_a = eventfd(0, EFD_CLOEXEC), .to_b = eventfd(0, EFD_CLOEXEC),
                         .total = warmup + round_trips, .failed = 0 };
    int64_t elapsed = -1;
    pthread_t echo;
    if (pp.to_a < 0 || pp.to_b < 0 || pthread_create(&echo, NULL, bf_echo, &pp) != 0) goto out;

    /* Thread A (the caller): pings, waits for the answer. */
    int64_t start = bf_now_ns();
    int64_t previous = start; /* laps: the time the last answer came (the first ping's, for the first) */
    uint64_t lapped = 0;
    uint64_t value;
    for (uint64_t i = 0; i < pp.total; i++) {
        if (i == warmup) start = bf_now_ns();
        if (bf_efd_write(pp.to_b, 1) != 0 || bf_efd_read(pp.to_a, &value) != 0) {
            pp.failed = 1;
            break;
        }
        if (laps != NULL) {
            int64_t now = bf_now_ns();
            if (i + 1 > warmup && lapped < round_trips) laps[lapped++] = now - previous;
            previous = now;
        }
    }
    if (lap_count != NULL) *lap_count = lapped;
    int64_t end = bf_now_ns();
    if (pp.failed) bf_efd_write(pp.to_b, 1); /* best effort: let B finish; a write error ends B too */
    pthread_join(echo, NULL);
    if (!pp.failed) elapsed = end - start;
out:
    if (pp.to_a >= 0) close(pp.to_a);
    if (pp.to_b >= 0) close(pp.to_b);
    return elapsed;
}
