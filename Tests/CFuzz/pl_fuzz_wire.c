/*
 * pl_fuzz_wire.c — a fuzz harness for what another process can send: frames and the handshake (libFuzzer).
 *
 * Each input drives one connection, as its peer would, with a sequence of packets:
 *
 *   input   := flags:u8 packet*
 *   packet  := fds:u8 length:u16le bytes[length]
 *
 * fds: bits 0-1 the descriptor count (0-3); bits 2-3 what the last one is, so that an out-of-line payload
 * (version 3) meets every kind a peer could pass: 0 /dev/null (not a memfd), 1 a memfd of the size the frame
 * declares with every seal, 2 the same without F_SEAL_WRITE (a sender could still change the bytes), 3 a sealed
 * memfd one byte longer than declared. The others are /dev/null.
 *
 * flags bit 0: the connection is a service's (it expects the client's hello) or a client's (it expects the
 * service's hello, with the service port's right). The connection runs on one end of a socketpair with a port
 * of its own exported as handle 1 (queue limit 4, payloads up to 1024 bytes, 2 credits lent), exactly as a
 * service's connection is after its hello, and as if 4 send-once rights to it had gone to the peer with reply
 * rights (so that version 3's send-once messages and ONCE_GONE reach the connection's checks); the other end is
 * drained and dropped. Each packet goes through pl_conn_receive_packet, as the reader hands it over (several
 * frames back to back once the peer's hello said version 3 and no descriptors came), with fd_count fresh
 * descriptors beside it;
 * the first packet refused ends the input, as a disconnection would. Between packets the port is drained.
 * A service's connection belongs to a service of that port which welcomed the peer, so that PROBE is answered
 * (when the peer's hello said version 2); a client's connection has a status query waiting for STATUS 1
 * (no echo), so that an answer meets a waiter as well as none. flags bit 1: the port is drained with
 * pl_port_receive_payload (payload memory handed over) instead of pl_port_receive.
 *
 * PL_FUZZ_TRACE=1 prints what became of each packet (taken, or the reason it was refused).
 *
 * Checked: no crash, no undefined behaviour, no leak (LeakSanitizer: every proxy, export, message, descriptor
 * and buffer of the connection is gone after its teardown), every descriptor handed over closed or owned, and
 * for each packet the decoder accepts, encoding what it decoded gives the same bytes back (the layout is one).
 */
#define _GNU_SOURCE /* memfd_create */
#include "pl_remote.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void fail(const char *what) {
    fprintf(stderr, "pl_fuzz_wire: %s\n", what);
    abort();
}

/* Re-encodes a decoded frame and compares it with the packet. */
static void check_round_trip(const uint8_t *packet, size_t length, const pl_wire_frame_t *frame) {
    uint8_t again[PL_WIRE_MAX_FRAME];
    size_t n = 0;
    switch (frame->type) {
    case PL_FRAME_HELLO:
        n = pl_wire_encode_hello(again, frame->u.hello.version, frame->u.hello.status, frame->u.hello.bootstrap);
        break;
    case PL_FRAME_MESSAGE: {
        const pl_wire_message_t *m = &frame->u.message;
        pl_wire_right_t rights[PL_WIRE_MAX_ATTACHMENTS];
        for (uint32_t i = 0; i < m->attachment_count; i++) rights[i] = pl_wire_right_at(m, i);
        n = pl_wire_encode_message_head(again, frame->flags, m, rights, m->byte_count);
        memcpy(again + n, m->bytes, m->byte_count);
        n += m->byte_count;
        break;
    }
    case PL_FRAME_PROBE:
        n = pl_wire_encode_probe(again, frame->u.probe.seq, frame->u.probe.echo, frame->u.probe.padding);
        break;
    case PL_FRAME_STATUS:
        n = pl_wire_encode_status(again, &frame->u.status);
        break;
    case PL_FRAME_WANT:
        n = pl_wire_encode_control(again, PL_FRAME_WANT, frame->u.control.handle, frame->u.control.flags, 0);
        break;
    case PL_FRAME_RELEASE:
        n = pl_wire_encode_control(again, PL_FRAME_RELEASE, frame->u.control.handle, frame->u.control.count,
                                   frame->u.control.transfers);
        break;
    case PL_FRAME_RING_OFFER: case PL_FRAME_RING_ACCEPT: case PL_FRAME_RING_REFUSE: case PL_FRAME_RING_START:
        n = pl_wire_encode_ring(again, (pl_frame_type_t)frame->type, frame->u.ring.ring_bytes);
        break;
    default:
        n = pl_wire_encode_control(again, frame->type, frame->u.control.handle, frame->u.control.count, 0);
        break;
    }
    if (n != length || memcmp(again, packet, length) != 0) fail("a decoded frame does not encode to its bytes");
}

static void drain_port(pl_port_t *port, bool take) {
    uint8_t buffer[1024];
    pl_received_t out;
    pl_payload_t payload;
    while ((take ? pl_port_receive_payload(port, &out, &payload, 0)
                 : pl_port_receive(port, &out, buffer, sizeof buffer, 0)) == PL_OK) {
        if (out.reply != NULL) {
            if (out.flags & PL_RECEIVED_REPLY_ONCE) pl_port_release_send_once(out.reply); else pl_port_release_send(out.reply);
        }
        pl_attachments_free(out.attachments);
        if (take) {
            if (payload.size != out.size || (payload.size > 0 && payload.base == NULL)) fail("a payload handed over short");
            pl_payload_free(&payload);
        }
    }
}

/* A memfd of `size` zero bytes with the given seals (see the top). */
static int make_memfd(uint32_t size, int seals) {
    int fd = memfd_create("pl_fuzz_wire", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, size) != 0) fail("memfd");
    if (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) fail("seals");
    return fd;
}

static void drain_socket(int fd) {
    uint8_t buffer[PL_WIRE_MAX_FRAME];
    union { char bytes[PL_CMSG_SPACE]; struct cmsghdr align; } control;
    for (;;) {
        struct iovec iov = { .iov_base = buffer, .iov_len = sizeof buffer };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes,
                              .msg_controllen = sizeof control.bytes };
        if (recvmsg(fd, &msg, MSG_DONTWAIT) <= 0) return;
        int fds[PL_WIRE_MAX_ATTACHMENTS];
        uint32_t count = 0;
        bool too_many = false, has_sender = false;
        pl_sender_t sender;
        pl_cmsg_collect(&msg, fds, &count, &too_many, &sender, &has_sender);
        for (uint32_t i = 0; i < count; i++) close(fds[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool accepted = data[0] & 1;
    bool take = (data[0] & 2) != 0;
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) fail("socketpair");
    pl_conn_t *conn = pl_conn_new(pair[0], accepted);
    pl_port_t *port = NULL;
    if (conn == NULL || pl_port_create(4, 1024, &port) != PL_OK) fail("set-up");
    /* The four send-once rights below: each set a slot of the port's queue aside when it was made. */
    for (int i = 0; i < 4; i++) {
        if (pl_port_set_aside(port) != PL_OK) fail("set-up");
    }
    pthread_mutex_lock(&conn->lock);
    pl_wire_right_t right;
    bool dead;
    if (pl_conn_export_locked(conn, port, &right, &dead) != PL_OK || right.handle != 1) fail("export");
    ((pl_export_t *)pl_handle_map_get(&conn->exports, 1))->once = 4; /* their notices come at the teardown */
    /* What pl_service_accepted and pl_service_status would have set up (see the top). */
    pl_service_t service = { .listen_fd = -1, .lock_fd = -1, .port = port };
    atomic_init(&service.refs, 1);
    atomic_init(&service.connections, 1);
    pl_probe_wait_t waiting = { .seq = 1 };
    if (accepted) {
        conn->service = &service;
        conn->welcomed = true;
    } else {
        conn->probes = &waiting;
    }
    pthread_mutex_unlock(&conn->lock);

    size_t at = 1;
    while (at + 3 <= size) {
        uint32_t fd_count = data[at] & 3;
        uint32_t last_kind = (data[at] >> 2) & 3;
        size_t length = (size_t)data[at + 1] | ((size_t)data[at + 2] << 8);
        at += 3;
        if (length > size - at) length = size - at;
        const uint8_t *packet = data + at;
        at += length;

        pl_wire_frame_t frame;
        const char *reason;
        if (pl_wire_decode(packet, length, fd_count, &frame, &reason)) check_round_trip(packet, length, &frame);
        else if (reason == NULL) fail("a refusal without a reason");
        /* A packed packet's frames, one by one, as the connection will take them. */
        for (size_t inner = 0, frame_length; inner < length; inner += frame_length) {
            frame_length = pl_wire_frame_length(packet + inner, length - inner);
            if (frame_length == 0) break;
            if (frame_length > length - inner) fail("a frame length past the packet");
            if (pl_wire_decode(packet + inner, frame_length, 0, &frame, &reason)) {
                check_round_trip(packet + inner, frame_length, &frame);
            }
        }

        int fds[3];
        for (uint32_t i = 0; i < fd_count; i++) {
            fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fds[i] < 0) fail("open");
        }
        if (fd_count > 0 && last_kind != 0) {
            /* The declared size, as far as the bytes say one (capped: the port takes 1024 at most anyway). */
            uint32_t declared = length >= PL_WIRE_HEADER_SIZE + 12
                                    ? ((uint32_t)packet[16] | (uint32_t)packet[17] << 8 | (uint32_t)packet[18] << 16 |
                                       (uint32_t)packet[19] << 24)
                                    : 0;
            if (declared > 4096) declared = 4096;
            const int all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
            close(fds[fd_count - 1]);
            fds[fd_count - 1] = last_kind == 1   ? make_memfd(declared, all)
                                : last_kind == 2 ? make_memfd(declared, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
                                                 : make_memfd(declared + 1, all);
        }
        bool ok = pl_conn_receive_packet(conn, packet, length, fds, fd_count, &reason);
        drain_port(port, take);
        drain_socket(pair[1]);
        if (getenv("PL_FUZZ_TRACE") != NULL) fprintf(stderr, "packet type %u: %s\n", length > 0 ? packet[0] : 0, ok ? "taken" : reason);
        if (!ok) {
            if (reason == NULL) fail("a refused frame without a reason");
            break;
        }
    }
    pl_conn_teardown(conn, "end of input");
    conn->service = NULL;
    conn->probes = NULL;
    drain_port(port, take);
    pl_port_destroy(port);
    drain_socket(pair[1]);
    close(pair[1]);
    pl_conn_release(conn);
    return 0;
}
