/*
 * bf_stream_copy.c — the socket floor of the large-payloads scenario.
 *
 * Why it exists: what moving large payloads between two processes through the kernel costs at the least, with
 * no framing and no queue: a forked child writes `messages` payloads of `size` bytes with blocking write(2) on
 * a SOCK_STREAM socketpair, and the caller reads each whole with blocking read(2) into one buffer. Every byte is
 * copied twice (into the socket's buffer, out of it), as PortLoop's 64 KiB frames copy it; a sealed memfd copies
 * it once (into the memfd) and the receiver maps it.
 *
 * Timing: from the go byte the caller sends to the last byte read (CLOCK_MONOTONIC).
 */
#include "bf_common.h"

#include <stdlib.h>
#include <string.h>

/* Reads or writes exactly `size` bytes (blocking). Returns 0, or -1. */
static int bf_full(int fd, uint8_t *bytes, size_t size, int writing) {
    size_t done = 0;
    while (done < size) {
        ssize_t n = writing ? write(fd, bytes + done, size - done) : read(fd, bytes + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return 0;
}

int64_t bf_stream_copy(uint64_t messages, size_t size) {
    if (messages == 0 || size == 0) return -1;
    uint8_t *buffer = malloc(size);
    if (buffer == NULL) return -1;
    memset(buffer, 1, size); /* touched before the clock, in both processes (the child inherits it) */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        free(buffer);
        return -1;
    }
    pid_t child = fork();
    if (child < 0) {
        close(sv[0]);
        close(sv[1]);
        free(buffer);
        return -1;
    }
    if (child == 0) { /* the writer: async-signal-safe calls only */
        close(sv[0]);
        uint8_t go;
        if (bf_full(sv[1], &go, 1, 0) != 0) _exit(1);
        for (uint64_t i = 0; i < messages; i++) {
            if (bf_full(sv[1], buffer, size, 1) != 0) _exit(1);
        }
        _exit(0);
    }
    close(sv[1]);
    uint8_t go = 1;
    int64_t start = bf_now_ns();
    int failed = bf_full(sv[0], &go, 1, 1) != 0;
    for (uint64_t i = 0; i < messages && !failed; i++) {
        if (bf_full(sv[0], buffer, size, 0) != 0) failed = 1;
    }
    int64_t end = bf_now_ns();
    close(sv[0]);
    free(buffer);
    if (bf_reap(child, failed) != 0) failed = 1;
    return failed ? -1 : end - start;
}
