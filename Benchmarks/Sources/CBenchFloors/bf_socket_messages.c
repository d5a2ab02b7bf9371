/*
 * bf_socket_messages.c — the floors of the peers-pingpong and peers-throughput scenarios: messages of any
 * size between two processes, written as directly as a socket allows.
 *
 * Why it exists: the peers scenarios compare PortLoop with SwiftNIO and gRPC at 8 B, 4 KiB and 1 MiB. What
 * the kernel alone costs depends on the socket type: on SOCK_SEQPACKET (PortLoop's connections) a message is
 * one packet, but a packet must fit the socket's send buffer (about 208 KiB by default), so 1 MiB does not
 * go; on SOCK_STREAM (what NIO and gRPC use) a message is a 4-byte length and the payload, written and read
 * until complete. Both read into one buffer per process and never copy it again: no framing beyond the
 * length, no queue, no event loop, no thread between the socket and the code that answers.
 *
 * The child is forked from the caller before anything is timed and only calls async-signal-safe functions
 * (the caller is multithreaded); its buffer is allocated before the fork.
 */
#include "bf_common.h"

#include <stdlib.h>
#include <sys/uio.h>
#include <string.h>

/* Writes all of `size` bytes (a stream may take fewer per call). Returns 0, or -1 with errno set. */
static int write_all(int fd, const uint8_t *bytes, size_t size) {
    while (size > 0) {
        ssize_t n = send(fd, bytes, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        bytes += n;
        size -= (size_t)n;
    }
    return 0;
}

/* Reads exactly `size` bytes. Returns 0, or -1 on end of file or an error. */
static int read_all(int fd, uint8_t *bytes, size_t size) {
    while (size > 0) {
        ssize_t n = recv(fd, bytes, size, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        bytes += n;
        size -= (size_t)n;
    }
    return 0;
}

/* One message: a packet on SOCK_SEQPACKET; a 4-byte length and the payload on SOCK_STREAM. */
static int message_send(int fd, int seqpacket, const uint8_t *payload, uint32_t size) {
    if (seqpacket) {
        ssize_t n;
        do { n = send(fd, payload, size, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
        return n == (ssize_t)size ? 0 : -1;
    }
    /* Length and payload in one sendmsg (as a writev-based peer does); the rest, if the socket took less. */
    struct iovec iov[2] = {{&size, sizeof size}, {(void *)payload, size}};
    struct msghdr message = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n;
    do { n = sendmsg(fd, &message, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    size_t sent = (size_t)n;
    if (sent < sizeof size) {
        if (write_all(fd, (const uint8_t *)&size + sent, sizeof size - sent) != 0) return -1;
        sent = sizeof size;
    }
    return write_all(fd, payload + (sent - sizeof size), size - (sent - sizeof size));
}

/* Receives one message of `size` bytes into `payload`; any other size is an error. */
static int message_receive(int fd, int seqpacket, uint8_t *payload, uint32_t size) {
    if (seqpacket) {
        ssize_t n;
        do { n = recv(fd, payload, size, MSG_TRUNC); } while (n < 0 && errno == EINTR);
        return n == (ssize_t)size ? 0 : -1;
    }
    /* Length and payload in one recvmsg that waits for all of them (the rest, if a signal cut it short). */
    uint32_t length = 0;
    struct iovec iov[2] = {{&length, sizeof length}, {payload, size}};
    struct msghdr message = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n;
    do { n = recvmsg(fd, &message, MSG_WAITALL); } while (n < 0 && errno == EINTR);
    if (n <= 0) return -1;
    size_t got = (size_t)n;
    if (got < sizeof length) {
        if (read_all(fd, (uint8_t *)&length + got, sizeof length - got) != 0) return -1;
        got = sizeof length;
    }
    if (length != size) return -1;
    return read_all(fd, payload + (got - sizeof length), size - (got - sizeof length));
}

/* A socketpair of the type asked for, and a buffer of `size` bytes (at least 8: the first 8 carry a word). */
static int prepare(int seqpacket, uint64_t size, int sv[2], uint8_t **buffer) {
    if (size < 8 || size > UINT32_MAX) {
        errno = EINVAL;
        return -1;
    }
    *buffer = calloc(1, size);
    if (*buffer == NULL) return -1;
    if (socketpair(AF_UNIX, (seqpacket ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0, sv) != 0) {
        free(*buffer);
        return -1;
    }
    return 0;
}

/* prepare(), then fork. Returns the child's pid (0 in the child), or -1 with everything undone. */
static pid_t prepare_and_fork(int seqpacket, uint64_t size, int sv[2], uint8_t **buffer) {
    if (prepare(seqpacket, size, sv, buffer) != 0) return -1;
    pid_t child = fork();
    if (child < 0) {
        close(sv[0]);
        close(sv[1]);
        free(*buffer);
    }
    return child;
}

int64_t bf_socket_pingpong(int seqpacket, uint64_t size, uint64_t warmup, uint64_t round_trips) {
    int sv[2];
    uint8_t *buffer;
    pid_t child = prepare_and_fork(seqpacket, size, sv, &buffer);
    if (child < 0) return -1;
    if (child == 0) { /* the echo: answers every message until end of file */
        close(sv[0]);
        while (message_receive(sv[1], seqpacket, buffer, (uint32_t)size) == 0) {
            if (message_send(sv[1], seqpacket, buffer, (uint32_t)size) != 0) _exit(1);
        }
        _exit(0);
    }
    close(sv[1]);

    uint64_t total = warmup + round_trips;
    int failed = 0;
    int64_t start = bf_now_ns();
    for (uint64_t i = 0; i < total && !failed; i++) {
        if (i == warmup) start = bf_now_ns();
        memcpy(buffer, &i, sizeof i);
        uint64_t echoed = ~i;
        if (message_send(sv[0], seqpacket, buffer, (uint32_t)size) != 0
            || message_receive(sv[0], seqpacket, buffer, (uint32_t)size) != 0) failed = 1;
        memcpy(&echoed, buffer, sizeof echoed);
        if (echoed != i) failed = 1;
    }
    int64_t end = bf_now_ns();
    close(sv[0]);
    if (bf_reap(child, failed) != 0) failed = 1;
    free(buffer);
    return failed ? -1 : end - start;
}

int64_t bf_socket_throughput(int seqpacket, uint64_t size, uint64_t messages) {
    if (messages == 0) return -1;
    int sv[2];
    uint8_t *buffer;
    pid_t child = prepare_and_fork(seqpacket, size, sv, &buffer);
    if (child < 0) return -1;
    if (child == 0) { /* the sender: waits for a go, then sends; the first message carries its clock */
        close(sv[0]);
        if (message_receive(sv[1], seqpacket, buffer, (uint32_t)size) != 0) _exit(1);
        for (uint64_t i = 0; i < messages; i++) {
            uint64_t word = i == 0 ? (uint64_t)bf_now_ns() : i;
            memcpy(buffer, &word, sizeof word);
            if (message_send(sv[1], seqpacket, buffer, (uint32_t)size) != 0) _exit(1);
        }
        _exit(0); /* what it sent stays readable after it closes */
    }
    close(sv[1]);

    uint64_t value = 0, start = 0;
    int failed = message_send(sv[0], seqpacket, buffer, (uint32_t)size) != 0;
    for (uint64_t i = 0; i < messages && !failed; i++) {
        if (message_receive(sv[0], seqpacket, buffer, (uint32_t)size) != 0) failed = 1;
        memcpy(&value, buffer, sizeof value);
        if (i == 0) start = value;
        else if (value != i) failed = 1;
    }
    int64_t end = bf_now_ns();
    close(sv[0]);
    if (bf_reap(child, failed) != 0) failed = 1;
    free(buffer);
    return failed ? -1 : end - (int64_t)start;
}
