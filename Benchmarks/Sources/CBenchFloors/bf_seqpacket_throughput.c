/*
 * bf_seqpacket_throughput.c — the floor of the ipc-throughput scenario.
 *
 * Why it exists: the least one-way messaging between two processes costs on a SOCK_SEQPACKET socket: one
 * blocking send(2) per 8-byte packet in the (forked) sender, one blocking recv(2) per packet in the caller.
 * The socket's buffer lets the sender run ahead of the reader, so, as with a port's queue, neither side has
 * to sleep per message; what remains is two system calls and the kernel's per-packet cost. PortLoop's remote
 * sends write one frame per message (more when the socket is full) and the receiving process's transport
 * thread reads them and queues them on the port, whose run loop takes them in batches.
 *
 * Timing as in the PortLoop variant: the child waits for a go packet, then takes the clock (CLOCK_MONOTONIC,
 * the same in both processes) and sends it as its first packet; the caller stops the clock at the last.
 */
#include "bf_common.h"

#include <sys/socket.h>

int64_t bf_seqpacket_throughput(uint64_t messages) {
    if (messages == 0) return -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    pid_t child = fork();
    if (child < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (child == 0) { /* the sender: async-signal-safe calls only */
        close(sv[0]);
        uint64_t go;
        if (bf_packet_receive(sv[1], &go) != 0) _exit(1);
        if (bf_packet_send(sv[1], (uint64_t)bf_now_ns()) != 0) _exit(1); /* the first message: the start */
        for (uint64_t i = 1; i < messages; i++) {
            if (bf_packet_send(sv[1], i) != 0) _exit(1);
        }
        _exit(0); /* what it sent stays readable after it closes */
    }
    close(sv[1]);

    uint64_t value = 0, start = 0;
    int failed = bf_packet_send(sv[0], 0) != 0;
    for (uint64_t i = 0; i < messages && !failed; i++) {
        if (bf_packet_receive(sv[0], &value) != 0 || (i > 0 && value != i)) failed = 1;
        if (i == 0) start = value;
    }
    int64_t end = bf_now_ns();
    close(sv[0]);
    if (bf_reap(child, failed) != 0) failed = 1;
    return failed ? -1 : end - (int64_t)start;
}
