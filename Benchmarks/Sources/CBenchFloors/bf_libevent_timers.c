/*
 * bf_libevent_timers.c — the floor of the timers scenario.
 *
 * Why it exists: a run loop sleeps until its next timer in a port set's libevent base (evthread_use_pthreads,
 * EVENT_BASE_FLAG_PRECISE_TIMER, so a timerfd), with a one-shot timer event armed for the earliest fire
 * date, rounded up to the microsecond. This floor is that sleep with nothing else: fire dates in a sorted
 * array, one timer event re-armed for the next date, and a "fire" that records the lateness. Its lateness
 * is what the kernel, the hypervisor and libevent's wake-up cost; the loop's lateness beyond it is the
 * loop's own (timer heap, locks, callouts), and with many timers due close together, its per-timer cost.
 */
#include "bf_common.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <sys/time.h>

static pthread_once_t bf_timers_once = PTHREAD_ONCE_INIT;
static int bf_timers_threads_ok = 0;

/* As in the port layer (which has set the same callbacks already; setting them again is accepted). */
static void bf_timers_init(void) { bf_timers_threads_ok = evthread_use_pthreads() == 0; }

static void bf_on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd; (void)what; (void)arg; /* its only job is to end event_base_loop(EVLOOP_ONCE) */
}

int64_t bf_libevent_timers(const int64_t *fire_dates, uint64_t count, int64_t *lateness) {
    pthread_once(&bf_timers_once, bf_timers_init);
    if (!bf_timers_threads_ok) return -1;

    struct event_config *config = event_config_new();
    if (config == NULL) return -1;
    event_config_set_flag(config, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *base = event_base_new_with_config(config);
    event_config_free(config);
    if (base == NULL) return -1;
    struct event *timer = evtimer_new(base, bf_on_timer, NULL);
    if (timer == NULL) { event_base_free(base); return -1; }

    int64_t last = -1;
    uint64_t next = 0;
    int failed = 0;
    while (next < count && !failed) {
        int64_t now = bf_now_ns();
        if (fire_dates[next] > now) {
            int64_t micros = (fire_dates[next] - now + 999) / 1000; /* round up, as the port set does */
            struct timeval tv = { .tv_sec = micros / 1000000, .tv_usec = micros % 1000000 };
            if (event_add(timer, &tv) != 0 || event_base_loop(base, EVLOOP_ONCE) < 0) failed = 1;
            event_del(timer);
            now = bf_now_ns();
        }
        while (next < count && fire_dates[next] <= now) {
            last = bf_now_ns();
            lateness[next] = last - fire_dates[next];
            next++;
        }
    }
    event_free(timer);
    event_base_free(base);
    return failed ? -1 : last;
}
