/*
 * pl_conn_ring.c — a connection moving its frames from the socket to shared-memory rings, and reading them there.
 *
 * Why: a packet through a socket costs its sender a system call and its reader another, plus, when the reader
 * sleeps, a wake-up by the kernel's socket code; through memory, a frame costs two copies, and a system call only
 * to ring the bell of a reader that had stopped looking (pl_ring.h). A stream then crosses without a system call
 * per message, and a round trip pays an eventfd write and an epoll wake-up each way instead of a socket's send and
 * receive.
 *
 * The switch, between version 5 peers. The client offers: RING_OFFER on the socket with the rings' memfd and its
 * bell beside it, once it has put PL_RING_OFFER_AFTER frames (a connection that carries a few requests is never
 * worth the memory: PL_RING_MAP_BYTES and two descriptors a side), or at once in a process that asked for rings
 * always (pl_set_shared_rings). The service checks and maps the memfd and answers RING_ACCEPT with its own bell;
 * its frames after that one go by ring. When it cannot — no descriptor or memory, frames waiting in its outgoing
 * queue, rings turned off in its process — it answers RING_REFUSE, and the client offers again after
 * PL_RING_RETRY_AFTER more frames. The client, reading RING_ACCEPT, reads by ring from there, and sends
 * RING_START, after which its frames go by ring; the service reads by ring once it has read RING_START. A switch
 * frame that has to wait in the outgoing queue switches its side when it leaves, so frames never overtake it. A
 * reader that takes several socket packets at once may find some behind the switch frame: each came behind a mark,
 * so the ring's records up to its mark are handled first (pl_conn_read_socket).
 *
 * After the switch the socket carries only the packets with descriptors, each announced by a mark in the ring
 * (its reader, at the mark, takes the next socket packet, and waits for it if it is not there yet), and the end:
 * a reader that finds its ring empty looks at the socket for it. The peer's records put before it died are still
 * in the memory, so the end is seen after them, and a message whose send returned is delivered, as by socket.
 */
#include "pl_remote.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_int pl_rings_mode = -1; /* -1: not read from the environment yet */
static atomic_uint pl_rings_in_use;

int pl_shared_rings(void) {
    int mode = atomic_load_explicit(&pl_rings_mode, memory_order_relaxed);
    if (mode >= 0) return mode;
    /* The default may come from the environment, so that a whole test suite, helper processes and all, can run
     * with rings always (or never) without a line of code. */
    const char *value = getenv("PORTLOOP_SHARED_RINGS");
    mode = PL_RINGS_WHEN_BUSY;
    if (value != NULL && strcmp(value, "always") == 0) mode = PL_RINGS_ALWAYS;
    if (value != NULL && strcmp(value, "never") == 0) mode = PL_RINGS_NEVER;
    int unset = -1;
    atomic_compare_exchange_strong(&pl_rings_mode, &unset, mode);
    return atomic_load_explicit(&pl_rings_mode, memory_order_relaxed);
}

void pl_set_shared_rings(int mode) {
    if (mode < PL_RINGS_NEVER || mode > PL_RINGS_ALWAYS) mode = PL_RINGS_WHEN_BUSY;
    atomic_store_explicit(&pl_rings_mode, mode, memory_order_relaxed);
}

uint32_t pl_remote_ring_count(void) { return atomic_load_explicit(&pl_rings_in_use, memory_order_relaxed); }

/* ---- the switch ------------------------------------------------------------------------------------- */

/* Puts a switch frame (write_lock held): this side's frames go by ring once it has left the socket. */
static pl_status_t pl_conn_put_switch_locked(pl_conn_t *conn, const uint8_t *frame, size_t length, const int *fds,
                                             uint32_t fd_count) {
    conn->ring_state = PL_CONN_RING_SWITCHING;
    pl_status_t status = pl_conn_put_frame_parts_locked(conn, frame, length, NULL, 0, fds, fd_count);
    if (status != PL_OK) return status;
    if (conn->out_tail != NULL) {
        conn->out_tail->switches = true; /* it waits, last in the queue: the switch happens when it leaves */
    } else {
        conn->ring_state = PL_CONN_RING_WRITING;
        atomic_store_explicit(&conn->ring_writing, true, memory_order_release);
    }
    return PL_OK;
}

static void pl_conn_ring_write_frame(pl_conn_t *conn, pl_frame_type_t type) {
    uint8_t frame[PL_WIRE_HEADER_SIZE + 8];
    size_t length = pl_wire_encode_ring(frame, type, 0);
    pthread_mutex_lock(&conn->write_lock);
    pl_conn_put_frame_locked(conn, frame, length, NULL, 0);
    pthread_mutex_unlock(&conn->write_lock);
}

void pl_conn_ring_maybe_offer_locked(pl_conn_t *conn) {
    /* The peer's hello says whether it takes rings; this side's must have gone first (a client's transport may read
     * the service's before the looking-up thread has written its own). */
    if (conn->accepted || conn->ring_state != PL_CONN_RING_NONE || conn->fd < 0 || !conn->hello_sent ||
        !atomic_load_explicit(&conn->rings_ok, memory_order_acquire)) {
        return;
    }
    int mode = pl_shared_rings();
    if (mode == PL_RINGS_NEVER) return;
    /* Always: the first offer at once. Any later one (this one failed, or was refused) only after a while. */
    if (conn->frames_put > 0 && (mode != PL_RINGS_ALWAYS || conn->ring_offered)) {
        conn->frames_put--;
        return;
    }
    conn->ring_offered = true;
    conn->frames_put = PL_RING_RETRY_AFTER;
    pl_ring_t *ring;
    int memfd, ringer;
    if (pl_ring_create(&ring, &memfd, &ringer) != PL_OK) return; /* the socket serves; an offer later */
    pl_ring_set_reach(ring, PL_RING_NEAR_BYTES);
    conn->ring = ring;
    conn->ring_state = PL_CONN_RING_OFFERED;
    atomic_store_explicit(&conn->ring_pending, true, memory_order_seq_cst);
    uint8_t frame[PL_WIRE_HEADER_SIZE + 8];
    size_t length = pl_wire_encode_ring(frame, PL_FRAME_RING_OFFER, PL_RING_BYTES);
    int fds[2] = { memfd, ringer };
    pl_conn_put_frame_locked(conn, frame, length, fds, 2); /* a queued frame holds duplicates */
    close(memfd);
    close(ringer);
}

void pl_conn_ring_after_hello(pl_conn_t *conn) {
    if (conn->accepted || pl_shared_rings() != PL_RINGS_ALWAYS) return;
    pthread_mutex_lock(&conn->write_lock);
    pl_conn_ring_maybe_offer_locked(conn);
    pthread_mutex_unlock(&conn->write_lock);
}

void pl_conn_ring_after_read(pl_conn_t *conn) {
    /* A client that mostly receives (a subscriber, say) puts few frames: what it reads counts too. */
    if (conn->accepted || conn->ring_reading || conn->packets_read < conn->ring_offer_at) return;
    conn->ring_offer_at = conn->packets_read + PL_RING_RETRY_AFTER;
    pthread_mutex_lock(&conn->write_lock);
    if (conn->ring_state == PL_CONN_RING_NONE) {
        conn->frames_put = 0;
        pl_conn_ring_maybe_offer_locked(conn);
    }
    pthread_mutex_unlock(&conn->write_lock);
}

/* The readers of this side (the sets the connection feeds, the transport) watch its bell from now on. */
static void pl_conn_ring_watch_bell(pl_conn_t *conn, int bell) {
    pthread_mutex_lock(&conn->write_lock);
    atomic_store_explicit(&conn->bell_watched, conn->fd >= 0 ? bell : -1, memory_order_release);
    pthread_mutex_unlock(&conn->write_lock);
    pl_feeders_watch_bell(conn);
    pl_transport_rewatch(conn);
}

/* RING_OFFER, on the service's side. */
static bool pl_conn_ring_offered(pl_conn_t *conn, const pl_wire_frame_t *frame, int *fds, const char **reason) {
    if (!conn->accepted) {
        *reason = "ring: an offer to a client";
        return false;
    }
    if (conn->ring_reading || atomic_load_explicit(&conn->ring_pending, memory_order_acquire)) {
        *reason = "ring: an offer while a ring is in use";
        return false;
    }
    pl_ring_t *ring = NULL;
    int ringer = -1; /* the end of this side's bell the client is to ring it through */
    if (pl_shared_rings() != PL_RINGS_NEVER && frame->u.ring.ring_bytes == PL_RING_BYTES) {
        bool peer_fault = false;
        ring = pl_ring_adopt(fds[0], &ringer, &peer_fault, reason); /* the memfd is closed with the frame's others */
        if (ring == NULL && peer_fault) return false;
        if (ring != NULL && !pl_ring_take_ringer(ring, fds[1], &peer_fault, reason)) {
            pl_ring_free(ring);
            ring = NULL;
            close(ringer);
            ringer = -1;
            if (peer_fault) return false;
        }
        if (ring != NULL) {
            fds[1] = -1; /* the ring's now */
            pl_ring_set_reach(ring, PL_RING_NEAR_BYTES);
        }
    }
    pthread_mutex_lock(&conn->write_lock);
    /* Frames waiting in the outgoing queue would have to go before the acceptance: not now, then. */
    bool accept = ring != NULL && conn->fd >= 0 && conn->out_head == NULL;
    if (accept) {
        conn->ring = ring;
        atomic_store_explicit(&conn->ring_pending, true, memory_order_seq_cst);
        uint8_t accepted[PL_WIRE_HEADER_SIZE];
        size_t length = pl_wire_encode_ring(accepted, PL_FRAME_RING_ACCEPT, 0);
        pl_conn_put_switch_locked(conn, accepted, length, &ringer, 1);
    }
    pthread_mutex_unlock(&conn->write_lock);
    if (ringer >= 0) close(ringer); /* sent, or not to be */
    if (!accept) {
        pl_ring_free(ring);
        pl_conn_ring_write_frame(conn, PL_FRAME_RING_REFUSE);
        return true;
    }
    /* Watched before the client can ring it: it rings for room as soon as it reads the ring. */
    pl_conn_ring_watch_bell(conn, pl_ring_bell(ring));
    return true;
}

/* RING_ACCEPT, on the client's side: read by ring from here, write by ring after RING_START. */
static bool pl_conn_ring_accepted(pl_conn_t *conn, int *fds, const char **reason) {
    pthread_mutex_lock(&conn->write_lock);
    pl_ring_t *ring = conn->ring;
    bool peer_fault = true;
    bool ok = conn->ring_state == PL_CONN_RING_OFFERED && ring != NULL &&
              pl_ring_take_ringer(ring, fds[0], &peer_fault, reason);
    if (ok) {
        fds[0] = -1;
        uint8_t start[PL_WIRE_HEADER_SIZE];
        size_t length = pl_wire_encode_ring(start, PL_FRAME_RING_START, 0);
        pl_conn_put_switch_locked(conn, start, length, NULL, 0);
    } else if (conn->ring_state != PL_CONN_RING_OFFERED) {
        *reason = "ring: an acceptance of no offer";
    }
    pthread_mutex_unlock(&conn->write_lock);
    if (!ok) return false;
    pl_conn_ring_watch_bell(conn, pl_ring_bell(ring));
    conn->ring_reading = true;
    atomic_store_explicit(&conn->ring_pending, false, memory_order_release);
    atomic_fetch_add_explicit(&pl_rings_in_use, 1, memory_order_relaxed);
    return true;
}

/* RING_REFUSE, on the client's side: the socket serves on; an offer again later. */
static bool pl_conn_ring_refused(pl_conn_t *conn, const char **reason) {
    pthread_mutex_lock(&conn->write_lock);
    bool offered = conn->ring_state == PL_CONN_RING_OFFERED;
    pl_ring_t *ring = offered ? conn->ring : NULL;
    if (offered) {
        conn->ring = NULL;
        conn->ring_state = PL_CONN_RING_NONE;
    }
    pthread_mutex_unlock(&conn->write_lock);
    if (!offered) {
        *reason = "ring: a refusal of no offer";
        return false;
    }
    atomic_store_explicit(&conn->ring_pending, false, memory_order_release);
    pl_ring_free(ring);
    return true;
}

bool pl_conn_ring_receive(pl_conn_t *conn, const pl_wire_frame_t *frame, int *fds, const char **reason) {
    if (!atomic_load_explicit(&conn->rings_ok, memory_order_acquire)) {
        /* A version 4 client offers rings whose bells are pipes: not taken (pl_ring.c says why), the socket serves. */
        if (conn->accepted && conn->peer_version == 4 && frame->type == PL_FRAME_RING_OFFER) {
            pl_conn_ring_write_frame(conn, PL_FRAME_RING_REFUSE);
            return true;
        }
        *reason = "ring: a ring frame from a peer older than version 4";
        return false;
    }
    bool client = !conn->accepted;
    switch (frame->type) {
    case PL_FRAME_RING_OFFER: return pl_conn_ring_offered(conn, frame, fds, reason);
    case PL_FRAME_RING_ACCEPT:
        if (client && !conn->ring_reading) return pl_conn_ring_accepted(conn, fds, reason);
        break;
    case PL_FRAME_RING_REFUSE:
        if (client && !conn->ring_reading) return pl_conn_ring_refused(conn, reason);
        break;
    case PL_FRAME_RING_START:
        if (!client && !conn->ring_reading && atomic_load_explicit(&conn->ring_pending, memory_order_acquire)) {
            conn->ring_reading = true;
            atomic_store_explicit(&conn->ring_pending, false, memory_order_release);
            atomic_fetch_add_explicit(&pl_rings_in_use, 1, memory_order_relaxed);
            return true;
        }
        break;
    default: break;
    }
    *reason = "ring: a ring frame out of turn";
    return false;
}

/* ---- writing ---------------------------------------------------------------------------------------- */

/* A single frame from this size up (a large message's fragment, in practice) lets the writer use the whole ring
 * from then on. Through the socket, such a frame cost its sender a copy into pages the kernel had just allocated and
 * charged, which measured three times the reader's copy out; and with only the near part of the ring, a message of
 * sixteen fragments made the writer wait for room, and the two sides ring each other's bells, every few fragments.
 * A pack of a backlog's small frames does not count: it says the reader is behind, not that messages are large. */
#define PL_RING_FAR_FROM 16384u

int pl_conn_ring_write_locked(pl_conn_t *conn, const uint8_t *head, size_t head_length, const uint8_t *body,
                              size_t body_length, const int *fds, uint32_t fd_count, bool packed, bool *marked) {
    pl_ring_put_result_t put = PL_RING_PUT;
    bool by_socket = fd_count > 0;
    conn->socket_blocked = false;
    if (!packed && head_length + body_length >= PL_RING_FAR_FROM) pl_ring_set_reach(conn->ring, PL_RING_BYTES);
    if (!by_socket) {
        put = pl_ring_put(conn->ring, head, head_length, body, body_length, false);
    } else if (!*marked) {
        put = pl_ring_put_mark_for_socket(conn->ring);
        *marked = put == PL_RING_PUT;
    }
    if (put == PL_RING_FULL) return 0; /* the reader rings this side's bell when it has made room */
    if (put == PL_RING_CORRUPT) {
        pl_transport_kill(conn, "the peer broke the ring (its read index)");
        return -2;
    }
    if (!by_socket) return 1;
    /* The packet follows its mark on the socket. */
    int sent = pl_conn_sendmsg(conn->fd, head, head_length, body, body_length, fds, fd_count);
    conn->socket_blocked = sent == 0;
    return sent;
}

/* ---- reading ---------------------------------------------------------------------------------------- */

/* What the socket holds while the ring is empty: nothing (DRAINED), the end (ENDED), or a packet (MORE). */
static pl_read_result_t pl_conn_ring_look_at_socket(pl_conn_t *conn, const char **why) {
    for (int tries = 0; tries < 2; tries++) {
        char byte;
        ssize_t n = recv(conn->fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
        if (n > 0) return PL_READ_MORE;
        if (n == 0) {
            *why = "the peer closed the connection";
            return PL_READ_ENDED;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) return PL_READ_DRAINED;
        if (errno != EINTR && errno != ECONNRESET) break; /* ECONNRESET is said once, ahead of the rest */
    }
    *why = "the connection broke";
    return PL_READ_ENDED;
}

/* Takes the ring's next record and handles a packet: PL_RING_BROKEN with *reason when the packet breaks a rule too.
 * The packet is copied into `buffer` first, and decoded there only. A message frame with more bytes than a message
 * keeps in its slot, and no attachment, leaves its bytes in the ring: they are copied once, from there straight to
 * the memory the message is put together in (rx_bytes_in_ring), not into `buffer` and then again. */
static pl_ring_take_result_t pl_conn_ring_take_packet(pl_conn_t *conn, uint8_t *buffer, size_t *length,
                                                      const char **reason) {
    const uint8_t *shared = NULL;
    pl_ring_take_result_t took = pl_ring_take_shared(conn->ring, &shared, length, reason);
    if (took != PL_RING_PACKET) return took;
    size_t head = *length > PL_WIRE_FRAGMENT_HEAD + PL_INLINE_PAYLOAD ? PL_WIRE_FRAGMENT_HEAD : *length;
    memcpy(buffer, shared, head);
    if (head < *length) {
        if (pl_wire_plain_message_head(buffer, *length)) conn->rx_bytes_in_ring = shared + head;
        else memcpy(buffer + head, shared + head, *length - head);
    }
    conn->packets_read++;
    bool handled = pl_conn_receive_packet(conn, buffer, *length, NULL, 0, reason);
    conn->rx_bytes_in_ring = NULL;
    return handled ? PL_RING_PACKET : PL_RING_BROKEN;
}

bool pl_conn_ring_take_to_mark(pl_conn_t *conn, uint8_t *scratch, const char **why) {
    for (;;) {
        size_t length = 0;
        const char *reason = NULL;
        pl_ring_take_result_t took = pl_conn_ring_take_packet(conn, scratch, &length, &reason);
        if (took == PL_RING_MARK) return true;
        if (took == PL_RING_PACKET) continue;
        if (took == PL_RING_EMPTY) reason = "ring: a packet on the socket that no mark announced";
        *why = reason;
        return false;
    }
}

pl_read_result_t pl_conn_read_ring(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, const char **why) {
    pl_ring_t *ring = conn->ring; /* the reader's while it reads by ring: only the teardown, under read_lock, frees it */
    pl_read_result_t result = PL_READ_DRAINED;
    int read = 0;
    size_t read_bytes = 0;
    bool looked_again = false;
    while (read < budget && read_bytes < bytes) {
        if (conn->ring_mark) {
            int taken = 0;
            result = pl_conn_read_socket(conn, buffer, 1, SIZE_MAX, 1, why, &taken);
            if (result == PL_READ_ENDED) break;
            if (taken == 0) break; /* its packet is on its way: the socket wakes us */
            conn->ring_mark = false;
            read++;
            continue;
        }
        size_t length = 0;
        const char *reason = NULL;
        pl_ring_take_result_t took = pl_conn_ring_take_packet(conn, buffer, &length, &reason);
        if (took == PL_RING_PACKET) {
            read++;
            read_bytes += length;
            continue;
        }
        if (took == PL_RING_MARK) {
            conn->ring_mark = true;
            continue;
        }
        if (took == PL_RING_BROKEN) {
            *why = reason;
            result = PL_READ_ENDED;
            break;
        }
        pl_ring_done_reading(ring);
        /* A lookout still looks at the ring, and arms it when it stops (pl_lookout.c). */
        bool looked_at = atomic_load_explicit(&conn->lookers, memory_order_seq_cst) > 0;
        if (!looked_at && pl_ring_arm(ring)) continue; /* a record came as we armed: its writer may not ring for it */
        /* Woken for nothing in the ring: the socket, then, which holds nothing but the end, or a packet whose mark
         * the peer put in the ring after this side looked (a mark goes in before its packet is sent): the ring
         * holds it now. A ring still empty means that no mark announced the packet. Likewise the end may follow
         * records the peer put after this side looked (it puts its last ones, then closes): they are read first. */
        if (read == 0) {
            result = pl_conn_ring_look_at_socket(conn, why);
            if (result != PL_READ_DRAINED && !looked_again && pl_ring_pending_bytes(ring) > 0) {
                looked_again = true;
                result = PL_READ_DRAINED;
                continue;
            }
            if (result == PL_READ_MORE) {
                *why = "ring: a packet on the socket that no mark announced";
                result = PL_READ_ENDED;
            }
        }
        break;
    }
    if (result != PL_READ_ENDED) {
        pl_ring_done_reading(ring);
        if (read >= budget || read_bytes >= bytes) result = PL_READ_MORE;
    }
    return result;
}

/* A look from outside the reader: whether the ring holds records for its reader. Under the read lock, which keeps
 * the ring; while another thread holds it, only that reader's note to read once more counts (it reads on). A
 * lookout (`take_arm`) also takes the arm back from a reader that armed the ring behind its back (pl_lookout.c). */
bool pl_conn_ring_pending(pl_conn_t *conn, bool take_arm) {
    if (pthread_mutex_trylock(&conn->read_lock) != 0) {
        return atomic_load_explicit(&conn->read_again, memory_order_seq_cst);
    }
    bool pending = false;
    if (conn->ring_reading) {
        if (take_arm) pl_ring_disarm(conn->ring);
        pending = !conn->ring_mark && pl_ring_pending_bytes(conn->ring) > 0;
    }
    pthread_mutex_unlock(&conn->read_lock);
    return pending || atomic_load_explicit(&conn->read_again, memory_order_seq_cst);
}

/* ---- the end ---------------------------------------------------------------------------------------- */

void pl_conn_ring_teardown(pl_conn_t *conn) {
    pthread_mutex_lock(&conn->write_lock);
    pl_ring_t *ring = conn->ring;
    conn->ring = NULL;
    conn->ring_state = PL_CONN_RING_NONE;
    atomic_store_explicit(&conn->ring_writing, false, memory_order_release);
    atomic_store_explicit(&conn->bell_watched, -1, memory_order_release);
    pthread_mutex_unlock(&conn->write_lock);
    if (conn->ring_reading) atomic_fetch_sub_explicit(&pl_rings_in_use, 1, memory_order_relaxed);
    conn->ring_reading = false;
    conn->ring_mark = false;
    atomic_store_explicit(&conn->ring_pending, false, memory_order_release);
    pl_ring_free(ring); /* its bell has left every poller: the feeders and the transport let go first */
}
