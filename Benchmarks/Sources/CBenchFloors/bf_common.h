/*
 * bf_common.h — small helpers shared by the floors: the clock and EINTR-safe eventfd I/O.
 */
#ifndef BF_COMMON_H
#define BF_COMMON_H

#include "cbenchfloors.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* Adds `value` to an eventfd's counter. Returns 0, or -1 with errno set. */
static inline int bf_efd_write(int fd, uint64_t value) {
    ssize_t n;
    do { n = write(fd, &value, sizeof value); } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof value ? 0 : -1;
}

/* Reads and resets an eventfd's counter into *value. Returns 0, or -1 with errno set (EAGAIN when a
 * nonblocking eventfd is zero). */
static inline int bf_efd_read(int fd, uint64_t *value) {
    ssize_t n;
    do { n = read(fd, value, sizeof *value); } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *value ? 0 : -1;
}

#endif /* BF_COMMON_H */
