/*
 * pl_poller.c — what a port set sleeps in: one epoll instance watching the set's wake-up eventfd, its receive
 * timerfd and its descriptor members. Three descriptors per set, and no more.
 *
 * Why epoll directly and not libevent's event_base, which earlier versions used: libevent 2.1 sets up a
 * signal socketpair for every base and, when it cannot create one (descriptors used up), calls exit(1) from
 * inside event_base_new; a library must never end its host. The base also holds that socketpair and a
 * notification eventfd that a port set never uses, so each set cost six descriptors where it needs three.
 * What a set needs from the poller is small: sleep until a descriptor is readable or a deadline passes.
 *
 * The wake-up eventfd is edge-triggered and never read: each write is an edge of its own, so a wake-up costs
 * the sleeper no read(2) (it would take 2^64 - 2 writes for the counter to fill up and a write to fail:
 * centuries at millions of wake-ups per second). The timerfd is armed with an absolute CLOCK_MONOTONIC
 * deadline, exact to the nanosecond, and only when a timed receive's deadline changed. Descriptor members are
 * level-triggered and named in epoll by an id, never by a pointer, so that an event read just before a member
 * was removed can never lead anyone to freed memory.
 */
#include "pl_internal.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* Closes a descriptor that may be -1, keeping errno (cleanup after a failure must not hide its cause). */
static void pl_close_keeping_errno(int fd) {
    if (fd < 0) return;
    int saved = errno;
    close(fd);
    errno = saved;
}

pl_status_t pl_poller_open(pl_poller_t *poller) {
    *poller = (pl_poller_t){ .epoll_fd = -1, .wake_fd = -1, .timer_fd = -1 };
    pl_status_t status = PL_OK;
    poller->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (poller->epoll_fd < 0) {
        status = pl_system_failure("epoll_create1");
    } else if ((poller->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
        status = pl_system_failure("eventfd");
    } else if ((poller->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0) {
        status = pl_system_failure("timerfd_create");
    } else {
        struct epoll_event wake = { .events = EPOLLIN | EPOLLET, .data.u64 = PL_POLL_WAKE_ID };
        struct epoll_event timer = { .events = EPOLLIN, .data.u64 = PL_POLL_TIMER_ID };
        if (epoll_ctl(poller->epoll_fd, EPOLL_CTL_ADD, poller->wake_fd, &wake) != 0 ||
            epoll_ctl(poller->epoll_fd, EPOLL_CTL_ADD, poller->timer_fd, &timer) != 0) {
            status = pl_system_failure("epoll_ctl");
        }
    }
    if (status != PL_OK) pl_poller_close(poller);
    return status;
}

void pl_poller_close(pl_poller_t *poller) {
    pl_close_keeping_errno(poller->timer_fd);
    pl_close_keeping_errno(poller->wake_fd);
    pl_close_keeping_errno(poller->epoll_fd);
    poller->epoll_fd = poller->wake_fd = poller->timer_fd = -1;
}

void pl_poller_wake(pl_poller_t *poller) {
    uint64_t one = 1;
    ssize_t n;
    do { n = write(poller->wake_fd, &one, sizeof one); } while (n < 0 && errno == EINTR);
}

pl_status_t pl_poller_add_fd(pl_poller_t *poller, int fd, uint64_t id) {
    struct epoll_event event = { .events = EPOLLIN, .data.u64 = id };
    if (epoll_ctl(poller->epoll_fd, EPOLL_CTL_ADD, fd, &event) == 0) return PL_OK;
    switch (errno) {
    case EBADF: case EPERM: case EINVAL: case ELOOP:
        return PL_ERR_INVALID_ARG; /* closed, or a kind epoll cannot watch (a regular file) */
    case EEXIST:
        return PL_ERR_ALREADY_IN_SET;
    case ENOMEM:
        return PL_ERR_NO_MEMORY;
    default:
        return pl_system_failure("epoll_ctl"); /* ENOSPC: the user's max_user_watches */
    }
}

pl_status_t pl_poller_add_feeder(pl_poller_t *poller, int fd, uint64_t id) {
    /* Exclusive: of all the pollers watching a connection's socket, the kernel wakes one that has a thread
     * asleep in it (see pl_feeder.c). */
    struct epoll_event event = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = id };
    return epoll_ctl(poller->epoll_fd, EPOLL_CTL_ADD, fd, &event) == 0 ? PL_OK : pl_system_failure("epoll_ctl");
}

pl_status_t pl_poller_add_bell(pl_poller_t *poller, int fd, uint64_t id) {
    /* A connection's bell (pl_ring.h) is never read, and stays readable: edge-triggered, each ring is an edge of its
     * own, as for the poller's wake-up eventfd. Exclusive, as the connection's socket. */
    struct epoll_event event = { .events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE, .data.u64 = id };
    if (epoll_ctl(poller->epoll_fd, EPOLL_CTL_ADD, fd, &event) == 0 || errno == EEXIST) return PL_OK;
    return pl_system_failure("epoll_ctl");
}

void pl_poller_remove_fd(pl_poller_t *poller, int fd) {
    /* A descriptor closed before its removal has left the epoll set by itself (ENOENT, EBADF): nothing to do. */
    struct epoll_event unused;
    epoll_ctl(poller->epoll_fd, EPOLL_CTL_DEL, fd, &unused);
}

/* Arms the timerfd for `deadline` (INT64_MAX: none), unless it is armed for that very deadline already (a
 * sleep that a message cut short, resumed). An untimed sleep after a timed one that ended early disarms it,
 * which also clears an expiry not yet read, or it would wake this sleep. */
static void pl_poller_arm(pl_poller_t *poller, int64_t deadline) {
    if (deadline != INT64_MAX) {
        if (poller->timer_armed && poller->timer_deadline == deadline) return;
        struct itimerspec at = { .it_value = pl_timespec_from_ns(deadline) };
        timerfd_settime(poller->timer_fd, TFD_TIMER_ABSTIME, &at, NULL);
        poller->timer_armed = true;
        poller->timer_deadline = deadline;
    } else if (poller->timer_armed) {
        struct itimerspec off = { { 0, 0 }, { 0, 0 } };
        timerfd_settime(poller->timer_fd, 0, &off, NULL);
        poller->timer_armed = false;
    }
}

void pl_poller_wait(pl_poller_t *poller, int64_t deadline, bool nonblocking, pl_poll_result_t *result) {
    result->count = 0;
    result->woken = false;
    if (!nonblocking) pl_poller_arm(poller, deadline);
    struct epoll_event events[PL_POLL_MAX];
    int n = epoll_wait(poller->epoll_fd, events, PL_POLL_MAX, nonblocking ? 0 : -1);
    /* n < 0: EINTR (a signal), the only error a valid epoll_wait can see; the caller looks again. */
    for (int i = 0; i < n; i++) {
        uint64_t id = events[i].data.u64;
        if (id == PL_POLL_WAKE_ID) {
            result->woken = true;
        } else if (id == PL_POLL_TIMER_ID) {
            uint64_t expirations;
            ssize_t r;
            do { r = read(poller->timer_fd, &expirations, sizeof expirations); } while (r < 0 && errno == EINTR);
            poller->timer_armed = false;
        } else {
            result->ids[result->count++] = id;
        }
    }
}
