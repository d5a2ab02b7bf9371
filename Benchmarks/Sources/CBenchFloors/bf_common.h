/*
 * bf_common.h — small helpers shared by the floors: the clock, EINTR-safe eventfd I/O, 8-byte packets on a
 * SOCK_SEQPACKET socket and reaping a forked child.
 */
#ifndef BF_COMMON_H
#define BF_COMMON_H

#include "cbenchfloors.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
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

/* Sends one 8-byte packet, blocking while the socket is full (MSG_NOSIGNAL: a peer that is gone is an error,
 * not SIGPIPE; otherwise write(2)). Returns 0, or -1 with errno set. */
static inline int bf_packet_send(int fd, uint64_t value) {
    ssize_t n;
    do { n = send(fd, &value, sizeof value, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof value ? 0 : -1;
}

/* Receives one 8-byte packet, blocking until one comes. Returns 0, or -1 (end of file, an error, or a packet
 * of another size). */
static inline int bf_packet_receive(int fd, uint64_t *value) {
    ssize_t n;
    do { n = recv(fd, value, sizeof *value, 0); } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *value ? 0 : -1;
}

/* Waits for a forked child, after SIGKILL when `kill_it`. Returns 0 if it exited with status 0, else -1. */
static inline int bf_reap(pid_t child, int kill_it) {
    if (kill_it) kill(child, SIGKILL);
    int status = 0;
    pid_t got;
    do { got = waitpid(child, &status, 0); } while (got < 0 && errno == EINTR);
    return got == child && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

#endif /* BF_COMMON_H */
