/*
 * bf_seqpacket_pingpong.c — the floor of the ipc-pingpong scenario.
 *
 * Why it exists: this is the least a round trip between two processes can cost on Linux with a sleeping
 * receiver on the socket type PortLoop's connections use: one SOCK_SEQPACKET socketpair, the child forked from
 * the caller, and per direction one blocking send(2) that wakes the peer and one blocking recv(2) that sleeps.
 * No framing, no queue, no event loop, no thread between the socket and the code that answers. A PortLoop
 * round trip across processes pays this plus its wire format, the transport thread that reads each
 * connection, the hand-over to the receiving run loop, and the reply right a message carries.
 *
 * The child only calls async-signal-safe functions (the caller is multithreaded: fork copies one thread) and
 * echoes until the socket reaches end of file, so it also ends when the caller dies.
 */
#include "bf_common.h"

#include <sys/socket.h>

int64_t bf_seqpacket_pingpong(uint64_t warmup, uint64_t round_trips) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    pid_t child = fork();
    if (child < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (child == 0) { /* the echo: answers every packet until end of file */
        close(sv[0]);
        uint64_t value;
        while (bf_packet_receive(sv[1], &value) == 0) {
            if (bf_packet_send(sv[1], value) != 0) _exit(1);
        }
        _exit(0);
    }
    close(sv[1]);

    /* The caller: sends the round trip's number, waits for it to come back. */
    uint64_t total = warmup + round_trips, value = 0;
    int failed = 0;
    int64_t start = bf_now_ns();
    for (uint64_t i = 0; i < total; i++) {
        if (i == warmup) start = bf_now_ns();
        if (bf_packet_send(sv[0], i) != 0 || bf_packet_receive(sv[0], &value) != 0 || value != i) {
            failed = 1;
            break;
        }
    }
    int64_t end = bf_now_ns();
    close(sv[0]); /* end of file: the child leaves its loop and exits */
    if (bf_reap(child, failed) != 0) failed = 1;
    return failed ? -1 : end - start;
}
