/*
 * bf_libevent_pingpong.c — floor 2 of the ping-pong scenario.
 *
 * Why it exists: what an event loop built on libevent pays for a wake-up (PortSet slept in a libevent
 * event_base set up like this one until it moved to epoll of its own): one base per thread
 * (evthread_use_pthreads, EVENT_BASE_FLAG_PRECISE_TIMER), one persistent read event on the thread's eventfd,
 * a callback that reads it and writes the peer's. The gap between this and floor 1 is libevent's own cost
 * (epoll_wait plus, with the precise timer, a timerfd_settime per loop).
 */
#include "bf_common.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <sys/eventfd.h>

static pthread_once_t bf_libevent_once = PTHREAD_ONCE_INIT;
static int bf_libevent_threads_ok = 0;

/* As in the port layer: libevent must be told about pthreads before the first base exists. */
static void bf_libevent_init(void) { bf_libevent_threads_ok = evthread_use_pthreads() == 0; }

typedef struct {
    int my_fd, peer_fd;       /* nonblocking eventfds: mine wakes me, the peer's wakes the peer */
    int initiator;            /* thread A: sends the first ping and stops after `total` answers */
    uint64_t warmup, total;
    uint64_t received;
    int64_t start, end;       /* A only: the timed part */
    int64_t *laps;            /* A only, or NULL: each timed round trip's time */
    uint64_t lapped;
    int64_t previous;         /* when the last answer came (the first ping was sent, for the first) */
    int failed;
    pthread_barrier_t *ready; /* both bases exist before the first ping */
} bf_side_t;

static void bf_on_readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    bf_side_t *side = arg;
    uint64_t value;
    if (bf_efd_read(fd, &value) != 0) return; /* spurious: nothing to read */
    side->received++;
    if (side->initiator) {
        if (side->laps != NULL) {
            int64_t now = bf_now_ns();
            if (side->received > side->warmup) side->laps[side->lapped++] = now - side->previous;
            side->previous = now;
        }
        if (side->received == side->warmup) side->start = bf_now_ns();
        if (side->received == side->total) { side->end = bf_now_ns(); return; }
    }
    if (bf_efd_write(side->peer_fd, 1) != 0) side->failed = 1;
}

static void *bf_side_run(void *arg) {
    bf_side_t *side = arg;
    struct event_config *config = event_config_new();
    struct event_base *base = NULL;
    struct event *event = NULL;
    if (config != NULL) {
        event_config_set_flag(config, EVENT_BASE_FLAG_PRECISE_TIMER);
        base = event_base_new_with_config(config);
        event_config_free(config);
    }
    if (base != NULL) event = event_new(base, side->my_fd, EV_READ | EV_PERSIST, bf_on_readable, side);
    if (event == NULL || event_add(event, NULL) != 0) side->failed = 1;
    pthread_barrier_wait(side->ready);

    if (!side->failed) {
        if (side->initiator) {
            side->start = bf_now_ns(); /* replaced after the warm-up, if any */
            side->previous = side->start;
            if (bf_efd_write(side->peer_fd, 1) != 0) side->failed = 1;
        }
        while (!side->failed && side->received < side->total) {
            if (event_base_loop(base, EVLOOP_ONCE) < 0) side->failed = 1;
        }
    }
    if (event != NULL) event_free(event);
    if (base != NULL) event_base_free(base);
    return NULL;
}

int64_t bf_libevent_pingpong(uint64_t warmup, uint64_t round_trips, int64_t *laps, uint64_t *lap_count) {
    if (lap_count != NULL) *lap_count = 0;
    pthread_once(&bf_libevent_once, bf_libevent_init);
    if (!bf_libevent_threads_ok) return -1;

    int fd_a = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), fd_b = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int64_t elapsed = -1;
    pthread_barrier_t ready;
    pthread_barrier_init(&ready, NULL, 2);
    bf_side_t a = { .my_fd = fd_a, .peer_fd = fd_b, .initiator = 1, .warmup = warmup,
                    .total = warmup + round_trips, .laps = laps, .ready = &ready };
    bf_side_t b = { .my_fd = fd_b, .peer_fd = fd_a, .initiator = 0, .warmup = warmup,
                    .total = warmup + round_trips, .ready = &ready };
    pthread_t thread_b;
    if (fd_a >= 0 && fd_b >= 0 && pthread_create(&thread_b, NULL, bf_side_run, &b) == 0) {
        bf_side_run(&a); /* thread A is the caller */
        if (a.failed) { b.failed = 1; bf_efd_write(fd_b, 1); } /* best effort: let B leave its loop */
        pthread_join(thread_b, NULL);
        if (!a.failed && !b.failed) elapsed = a.end - a.start;
        if (lap_count != NULL) *lap_count = a.lapped;
    }
    pthread_barrier_destroy(&ready);
    if (fd_a >= 0) close(fd_a);
    if (fd_b >= 0) close(fd_b);
    return elapsed;
}
