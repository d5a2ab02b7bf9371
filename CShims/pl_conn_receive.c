/*
 * pl_conn_receive.c — what a connection does with each frame that arrives (on the transport thread).
 *
 * Every frame has been through pl_wire_decode, so its lengths and counts are sound; here each is checked
 * against the connection's state: a handle must be one this side gave out (or, for a proxy's frames, one the
 * peer gave), a message must have had credit, fragments must continue the message in progress, a message may
 * not exceed its port's size, an out-of-line payload must be a sealed memfd of the size the frame declares. A
 * frame that fails a check ends the connection (the caller tears it down): the
 * peer broke the protocol, and this process goes on serving everyone else.
 */
#define _GNU_SOURCE /* recvmmsg */
#include "pl_remote.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A right named in a message, as a send right the message will own (the connection's lock held). */
static pl_port_t *pl_right_received_locked(pl_conn_t *conn, pl_wire_right_t right, const char **reason) {
    if (right.kind == PL_RIGHT_SENDERS) return pl_proxy_import_locked(conn, right, true, reason);
    /* PL_RIGHT_YOURS: one of our ports, given back. */
    pl_export_t *e = pl_handle_map_get(&conn->exports, right.handle);
    if (e == NULL) {
        *reason = "message: names a right this side never gave out";
        return NULL;
    }
    pl_port_make_send(e->port);
    return e->port;
}

/* A message's reply right flagged PL_RIGHT_ONCE, as a send-once right the message will own (the connection's
 * lock held): a proxy's send-once right, or one of our ports' coming home, which the export counted. */
static pl_port_t *pl_once_right_received_locked(pl_conn_t *conn, pl_wire_right_t right, const char **reason) {
    if (conn->peer_version < 3) {
        *reason = "message: a send-once right from a peer older than version 3";
        return NULL;
    }
    if (right.kind == PL_RIGHT_SENDERS) {
        pl_port_t *port = pl_proxy_import_locked(conn, right, false, reason);
        if (port == NULL) return NULL;
        pl_proxy_revive_locked(conn, port);
        atomic_fetch_add(&port->send_once_rights, 1);
        pl_port_retain_internal(port);
        return port;
    }
    pl_export_t *e = pl_handle_map_get(&conn->exports, right.handle);
    if (e == NULL || e->once == 0) {
        *reason = "message: returns a send-once right this side never gave out";
        return NULL;
    }
    e->once--;
    pl_port_add_send_once(e->port); /* back from the peer, with the slot set aside when it was made */
    return e->port;
}

/* Drops what a message under construction owns (no lock held). A message through a send-once right that is lost
 * (memory ran out) uses the right up and leaves its port the notice, as if the right had been dropped; unless the
 * export went meanwhile, whose drop told it with the others. */
static void pl_rx_discard(pl_conn_t *conn) {
    if (conn->rx.once) {
        pthread_mutex_lock(&conn->lock);
        pl_export_t *e = pl_handle_map_get(&conn->exports, conn->rx.dest);
        pl_port_t *port = e != NULL && e->once > 0 ? e->port : NULL;
        if (port != NULL) {
            e->once--;
            pl_port_retain_internal(port);
        }
        pthread_mutex_unlock(&conn->lock);
        if (port != NULL) {
            pl_port_post_send_once_notice(port);
            pl_port_release_internal(port);
        }
    }
    pl_ool_release(conn->rx.bytes, conn->rx.total, conn->rx.mapped);
    if (conn->rx.reply != NULL) {
        if (conn->rx.reply_once) pl_port_release_send_once(conn->rx.reply); else pl_port_release_send(conn->rx.reply);
    }
    pl_attachments_free(conn->rx.attachments);
    memset(&conn->rx, 0, sizeof conn->rx);
}

/* Queues the completed message on its port. `inline_bytes`: a small message that came whole, read from its frame
 * (no reassembly buffer); else NULL. false: the peer sent it without credit. */
static bool pl_rx_deliver(pl_conn_t *conn, const uint8_t *inline_bytes, const char **reason) {
    pthread_mutex_lock(&conn->lock);
    pl_export_t *e = pl_handle_map_get(&conn->exports, conn->rx.dest);
    pthread_mutex_unlock(&conn->lock);
    if (e == NULL) {
        *reason = "message: its port's handle was released while it arrived";
        pl_rx_discard(conn);
        return false;
    }
    pl_slot_t slot = { .id = conn->rx.id, .size = conn->rx.total, .reply = conn->rx.reply,
                       .reply_once = conn->rx.reply_once };
    bool once = conn->rx.once;
    bool mapped = conn->rx.mapped;
    if (conn->rx.total > PL_INLINE_PAYLOAD) {
        slot.payload.heap = conn->rx.bytes; /* the reassembly buffer (or the mapping) becomes the message's */
        conn->rx.bytes = NULL;
    } else if (conn->rx.total > 0) {
        memcpy(slot.payload.bytes, inline_bytes != NULL ? inline_bytes : conn->rx.bytes, conn->rx.total);
    }
    bool large_mapping = mapped && conn->rx.total > PL_INLINE_PAYLOAD;
    if (!once && conn->rx.attachments == NULL && !large_mapping) {
        slot.extra = &e->plain; /* the usual message: nothing to allocate */
        pl_export_retain(e);
    } else {
        slot.extra = calloc(1, sizeof *slot.extra);
        if (slot.extra == NULL) {
            if (conn->rx.total > PL_INLINE_PAYLOAD) conn->rx.bytes = slot.payload.heap;
            pl_rx_discard(conn);
            *reason = "out of memory for a message";
            return false;
        }
        if (!once) {
            slot.extra->origin = e; /* its slot is lent to the peer again when it is taken */
            pl_export_retain(e);
        }
        slot.extra->sender = conn->peer;
        slot.extra->attachments = conn->rx.attachments;
        if (large_mapping) slot.extra->flags = PL_MSG_MAPPED;
    }
    conn->rx.reply = NULL;
    conn->rx.attachments = NULL;
    pl_ool_release(conn->rx.bytes, conn->rx.total, mapped); /* a small payload's, copied into the slot */
    memset(&conn->rx, 0, sizeof conn->rx);

    pl_port_t *port = e->port;
    if (once) {
        /* The right is used up now (the export stays while this reader runs: only readers drop exports). */
        pthread_mutex_lock(&conn->lock);
        if (e->once > 0) e->once--;
        pthread_mutex_unlock(&conn->lock);
    }
    pl_status_t status = once ? pl_port_enqueue_once(port, &slot) : pl_port_enqueue_remote(port, &slot, e);
    if (status == PL_OK) {
        pl_feeder_learn(port, conn); /* next time, the port's receiver reads the socket itself */
        return true;
    }
    pl_slot_dispose(&slot); /* a destroyed port's messages are destroyed */
    if (status == PL_ERR_INVALID_ARG) {
        *reason = "message: sent without credit";
        return false;
    }
    if (status == PL_ERR_NO_MEMORY) {
        *reason = "out of memory for a message";
        return false;
    }
    return true;
}

/* The first fragment: its rights and descriptors become the message's. A reassembly buffer is made for a message
 * that comes in fragments or is larger than a slot holds inline. */
static bool pl_rx_begin(pl_conn_t *conn, const pl_wire_message_t *m, bool more, bool once, int *fds,
                        const char **reason) {
    if (m->out_of_line && conn->peer_version < PL_WIRE_VERSION_OUT_OF_LINE) {
        *reason = "message: out of line from a peer whose version has no such messages";
        return false;
    }
    if (conn->rx.active) {
        *reason = "message: a new message inside another";
        return false;
    }
    pthread_mutex_lock(&conn->lock);
    pl_export_t *e = pl_handle_map_get(&conn->exports, m->dest);
    uint32_t max_size = e != NULL ? e->port->max_msg_size : 0;
    bool ok = e != NULL && m->total_size <= max_size;
    if (e == NULL) *reason = "message: to a handle this side never gave out";
    else if (!ok) *reason = "message: larger than its port takes";
    if (ok && once && (conn->peer_version < 3 || e->once == 0)) {
        /* Through a send-once right: one this side gave out and the peer has not used. It stays counted in the
         * export until its message is queued, so that its end is told once whatever ends it first: a discard here
         * (pl_rx_discard), or the export's drop or the connection's end, which tell each right counted. */
        *reason = "message: through a send-once right this side never gave out";
        ok = false;
    }
    conn->rx.active = ok;
    conn->rx.once = ok && once;
    if (ok && m->reply.kind != PL_RIGHT_NONE) {
        conn->rx.reply_once = (m->reply.flags & PL_RIGHT_ONCE) != 0;
        conn->rx.reply = conn->rx.reply_once ? pl_once_right_received_locked(conn, m->reply, reason)
                                             : pl_right_received_locked(conn, m->reply, reason);
        ok = conn->rx.reply != NULL;
    }
    if (ok && m->attachment_count > 0) {
        conn->rx.attachments = pl_attachments_new(m->attachment_count);
        if (conn->rx.attachments == NULL) *reason = "out of memory for attachments";
        ok = conn->rx.attachments != NULL;
    }
    for (uint32_t i = 0; ok && i < m->attachment_count; i++) {
        pl_wire_right_t right = pl_wire_right_at(m, i);
        pl_attachment_t *item = &conn->rx.attachments->items[i];
        if (right.kind == PL_RIGHT_FD) {
            item->kind = PL_ATTACHMENT_FD;
            item->fd = fds[right.handle];
            fds[right.handle] = -1; /* the message owns it now */
        } else {
            item->kind = PL_ATTACHMENT_SEND_RIGHT;
            item->port = pl_right_received_locked(conn, right, reason);
            ok = item->port != NULL;
        }
    }
    pthread_mutex_unlock(&conn->lock);
    conn->rx.dest = m->dest; /* before a discard: a send-once right used up above is told to its port there */
    if (!ok) {
        pl_rx_discard(conn);
        return false;
    }
    conn->rx.id = m->id;
    conn->rx.total = m->total_size;
    conn->rx.received = 0;
    conn->rx_serial++;
    if (m->out_of_line) {
        /* Checked before it is mapped: a memfd with every seal, of the declared size (within the port's maximum,
         * checked above), so that the sender can neither change the bytes nor shrink them under the mapping. */
        int fd = fds[m->fd_count - 1];
        if (!pl_ool_check(fd, m->total_size, reason)) {
            pl_rx_discard(conn);
            return false;
        }
        conn->rx.bytes = pl_ool_map(fd, m->total_size, &conn->rx.mapped, reason);
        if (conn->rx.bytes == NULL) {
            pl_rx_discard(conn);
            return false;
        }
        conn->rx.received = m->total_size;
        /* The descriptor is closed with the frame's others: the mapping outlives it. */
    } else if (m->total_size > 0 && (more || m->total_size > PL_INLINE_PAYLOAD)) {
        conn->rx.bytes = pl_payload_cache_take(m->total_size);
        if (conn->rx.bytes == NULL) {
            *reason = "out of memory for a message";
            pl_rx_discard(conn);
            return false;
        }
    }
    return true;
}

static bool pl_receive_message(pl_conn_t *conn, const pl_wire_frame_t *frame, int *fds, const char **reason) {
    const pl_wire_message_t *m = &frame->u.message;
    bool more = (frame->flags & PL_FRAME_MORE) != 0;
    /* Bytes left in the ring are copied from there once, straight to where they belong. */
    const uint8_t *bytes = conn->rx_bytes_in_ring != NULL ? conn->rx_bytes_in_ring : m->bytes;
    if (m->offset == 0) {
        if (!pl_rx_begin(conn, m, more, (frame->flags & PL_FRAME_ONCE) != 0, fds, reason)) return false;
        if (conn->rx.bytes == NULL || m->out_of_line) {
            /* Small and whole: straight from the frame; or out of line, whole in its mapping. */
            if (m->credit_count > 0) pl_proxy_credit(conn, m->credit_handle, m->credit_count);
            return pl_rx_deliver(conn, m->out_of_line ? NULL : bytes, reason);
        }
    } else if (!conn->rx.active || m->dest != conn->rx.dest || m->id != conn->rx.id ||
               m->total_size != conn->rx.total || m->offset != conn->rx.received) {
        *reason = "message: a fragment that does not continue the message in progress";
        return false;
    }
    /* A fragment read straight into the buffer (pl_conn_read_socket) is there already: it continues the message,
     * so its bytes start where the read put them. */
    uint8_t *to = conn->rx.bytes + m->offset;
    if (m->byte_count > 0 && to != conn->rx.in_place) memcpy(to, bytes, m->byte_count);
    conn->rx.received = m->offset + m->byte_count;
    if (m->credit_count > 0) pl_proxy_credit(conn, m->credit_handle, m->credit_count);
    if (more) return true;
    return pl_rx_deliver(conn, NULL, reason);
}

/* ONCE_GONE: the peer released a send-once right to one of our ports unused; the port is told. */
static bool pl_receive_once_gone(pl_conn_t *conn, uint32_t handle, const char **reason) {
    pthread_mutex_lock(&conn->lock);
    pl_export_t *e = pl_handle_map_get(&conn->exports, handle);
    bool held = conn->peer_version >= 3 && e != NULL && e->once > 0;
    if (held) e->once--;
    pthread_mutex_unlock(&conn->lock);
    if (!held) {
        *reason = "once-gone: a send-once right this side never gave out";
        return false;
    }
    /* The export stays while this reader runs (only readers free exports), and its send right keeps the port. */
    pl_port_post_send_once_notice(e->port);
    return true;
}

static bool pl_receive_hello(pl_conn_t *conn, const pl_wire_hello_t *hello, const char **reason) {
    bool ok = true;
    pthread_mutex_lock(&conn->lock);
    if (conn->hello_received) {
        *reason = "hello: a second one";
        ok = false;
    } else if (conn->accepted) {
        /* A client says hello with nothing in it. */
        if (hello->status != PL_HELLO_WELCOME || hello->bootstrap.kind != PL_RIGHT_NONE) {
            *reason = "hello: a client's carries a status or a right";
            ok = false;
        }
    } else if (hello->status == PL_HELLO_WELCOME) {
        if (hello->bootstrap.kind != PL_RIGHT_SENDERS) {
            *reason = "hello: a service's welcome without its port";
            ok = false;
        } else if (pl_proxy_import_locked(conn, hello->bootstrap, false, reason) == NULL) {
            ok = false;
        } else {
            conn->bootstrap_handle = hello->bootstrap.handle;
        }
    } else if (hello->bootstrap.kind != PL_RIGHT_NONE) {
        *reason = "hello: a refusal with a right";
        ok = false;
    }
    if (ok) {
        conn->hello_received = true;
        conn->hello_status = hello->status;
        conn->peer_version = hello->version;
        if (hello->version >= PL_WIRE_VERSION_PACKED) atomic_store_explicit(&conn->packs, true, memory_order_release);
        if (hello->version >= PL_WIRE_VERSION_RING) atomic_store_explicit(&conn->rings_ok, true, memory_order_release);
    }
    pthread_mutex_unlock(&conn->lock);
    pthread_cond_broadcast(&conn->changed);
    return ok;
}

bool pl_conn_receive_frame(pl_conn_t *conn, const uint8_t *packet, size_t length, int *fds, uint32_t fd_count,
                           const char **reason) {
    pl_wire_frame_t frame;
    bool ok = pl_wire_decode(packet, length, fd_count, &frame, reason);
    if (ok && !conn->hello_received && frame.type != PL_FRAME_HELLO) {
        *reason = "frame: before the hello";
        ok = false;
    }
    if (ok) {
        switch (frame.type) {
        case PL_FRAME_HELLO: ok = pl_receive_hello(conn, &frame.u.hello, reason); break;
        case PL_FRAME_MESSAGE: ok = pl_receive_message(conn, &frame, fds, reason); break;
        case PL_FRAME_CREDIT: pl_proxy_credit(conn, frame.u.control.handle, frame.u.control.count); break;
        case PL_FRAME_WANT: ok = pl_credit_want(conn, frame.u.control.handle, frame.u.control.flags, reason); break;
        case PL_FRAME_RECLAIM: pl_proxy_reclaim(conn, frame.u.control.handle); break;
        case PL_FRAME_RETURN:
            ok = pl_credit_returned(conn, frame.u.control.handle, frame.u.control.count, reason);
            break;
        case PL_FRAME_RELEASE:
            ok = pl_credit_released(conn, frame.u.control.handle, frame.u.control.transfers, frame.u.control.count,
                                    reason);
            break;
        case PL_FRAME_DEAD: pl_proxy_dead(conn, frame.u.control.handle); break;
        case PL_FRAME_ONCE_GONE: ok = pl_receive_once_gone(conn, frame.u.control.handle, reason); break;
        case PL_FRAME_PROBE: ok = pl_conn_answer_probe(conn, &frame.u.probe, reason); break;
        case PL_FRAME_STATUS: ok = pl_conn_take_status(conn, &frame.u.status, reason); break;
        case PL_FRAME_RING_OFFER: case PL_FRAME_RING_ACCEPT: case PL_FRAME_RING_REFUSE: case PL_FRAME_RING_START:
            ok = pl_conn_ring_receive(conn, &frame, fds, reason);
            break;
        default: break;
        }
    }
    if (ok && frame.type == PL_FRAME_HELLO) pl_conn_ring_after_hello(conn);
    /* Descriptors no message took are closed: a frame never leaves one behind. */
    for (uint32_t i = 0; i < fd_count; i++) {
        if (fds[i] >= 0) close(fds[i]);
    }
    return ok;
}

/* Frames that came packed behind another in a packet, in this process's life (a statistic). */
static atomic_uint_fast64_t pl_packed_frames;

bool pl_conn_receive_packet(pl_conn_t *conn, const uint8_t *packet, size_t length, int *fds, uint32_t fd_count,
                            const char **reason) {
    if (fd_count > 0 || !conn->hello_received || conn->peer_version < PL_WIRE_VERSION_PACKED) {
        return pl_conn_receive_frame(conn, packet, length, fds, fd_count, reason);
    }
    /* Frames back to back (one frame is the same case), each checked as a packet of its own would be. */
    size_t at = 0;
    uint64_t frames = 0;
    while (at < length) {
        size_t frame_length = pl_wire_frame_length(packet + at, length - at);
        if (frame_length == 0) {
            *reason = "packet: a frame runs past its end";
            return false;
        }
        if (!pl_conn_receive_frame(conn, packet + at, frame_length, fds, 0, reason)) return false;
        at += frame_length;
        frames++;
    }
    if (frames > 1) atomic_fetch_add_explicit(&pl_packed_frames, frames - 1, memory_order_relaxed);
    return true;
}

uint64_t pl_remote_packed_frames(void) { return atomic_load_explicit(&pl_packed_frames, memory_order_relaxed); }

/* Handles one packet read with its control messages. false: the end (*why set). */
static bool pl_handle_packet(pl_conn_t *conn, uint8_t *packet, size_t length, struct msghdr *msg, const char **why) {
    /* Descriptors first: whatever happens to the frame, none may leak. */
    int fds[PL_WIRE_MAX_ATTACHMENTS];
    uint32_t fd_count = 0;
    bool extra_fds = false, has_sender = false;
    pl_sender_t sender = { 0 };
    pl_cmsg_collect(msg, fds, &fd_count, &extra_fds, &sender, &has_sender);
    bool awaiting_hello = !conn->accepted && !conn->hello_received;
    if (awaiting_hello && has_sender) conn->peer = sender; /* the service itself, as the kernel saw it send */
    const char *reason = NULL;
    if (msg->msg_flags & MSG_CTRUNC) reason = "frame: descriptors cut off";
    else if (msg->msg_flags & MSG_TRUNC) reason = "frame: over the largest frame";
    else if (extra_fds) reason = "frame: too many descriptors";
    if (reason != NULL) {
        for (uint32_t k = 0; k < fd_count; k++) close(fds[k]);
    } else if (pl_conn_receive_packet(conn, packet, length, fds, fd_count, &reason)) {
        if (awaiting_hello) pl_cmsg_ask_credentials(conn->fd, false); /* the hello was all we needed */
        return true;
    }
    *why = reason;
    return false;
}

/* Closes the descriptors that came with packets [from, to) of a batch left unhandled (the connection ends). */
static void pl_close_packets_fds(struct mmsghdr *batch, int from, int to) {
    for (int k = from; k < to; k++) {
        int fds[PL_WIRE_MAX_ATTACHMENTS];
        uint32_t count;
        bool extra, has;
        pl_sender_t ignored;
        pl_cmsg_collect(&batch[k].msg_hdr, fds, &count, &extra, &ignored, &has);
        for (uint32_t j = 0; j < count; j++) close(fds[j]);
    }
}

/* Where packet slot `k` of a batch was read to, while a message comes in fragments: its head into the slot, its
 * bytes straight to `at` in the message being put together (`serial` names that message). */
typedef struct pl_fragment_read {
    uint32_t chunk;  /* bytes expected in place; 0: the whole packet went to the slot */
    uint32_t at;     /* their offset in the message */
    uint64_t serial; /* conn->rx_serial of that message */
} pl_fragment_read_t;

/* Lays out the read of packet slot `k` of a batch (iov: three entries). While a message comes in fragments, its
 * next ones are expected: each packet's head goes to its slot and its bytes straight to where they belong in the
 * reassembly buffer, the rest (if the packet is something else) to the slot after them; pl_fragment_landed says
 * which it was. Otherwise the whole slot takes the packet. */
static pl_fragment_read_t pl_fragment_scatter(const pl_conn_t *conn, uint8_t *slot, int k, struct iovec *iov,
                                              int *count) {
    uint32_t room = pl_wire_next_fragment_room();
    uint64_t at = (uint64_t)conn->rx.received + (uint64_t)k * room;
    if (!conn->rx.active || conn->rx.bytes == NULL || conn->rx.mapped || at >= conn->rx.total) {
        iov[0] = (struct iovec){ .iov_base = slot, .iov_len = PL_WIRE_MAX_FRAME };
        *count = 1;
        return (pl_fragment_read_t){ 0 };
    }
    uint32_t chunk = conn->rx.total - (uint32_t)at < room ? conn->rx.total - (uint32_t)at : room;
    iov[0] = (struct iovec){ .iov_base = slot, .iov_len = PL_WIRE_FRAGMENT_HEAD };
    iov[1] = (struct iovec){ .iov_base = conn->rx.bytes + at, .iov_len = chunk };
    iov[2] = (struct iovec){ .iov_base = slot + PL_WIRE_FRAGMENT_HEAD + chunk,
                             .iov_len = PL_WIRE_MAX_FRAME - PL_WIRE_FRAGMENT_HEAD - chunk };
    *count = 3;
    return (pl_fragment_read_t){ .chunk = chunk, .at = (uint32_t)at, .serial = conn->rx_serial };
}

/* Puts a packet read by pl_fragment_scatter back together in its slot: its bytes copied back from where they went
 * in the reassembly buffer (while that buffer is still the reader's and those bytes untouched). */
static void pl_fragment_put_back(uint8_t *slot, size_t length, const struct iovec *iov, pl_fragment_read_t read) {
    if (length <= PL_WIRE_FRAGMENT_HEAD) return;
    size_t moved = length - PL_WIRE_FRAGMENT_HEAD < read.chunk ? length - PL_WIRE_FRAGMENT_HEAD : read.chunk;
    memcpy(slot + PL_WIRE_FRAGMENT_HEAD, iov[1].iov_base, moved);
}

/* Right after the read, before any packet of the batch is handled (handling one may complete the message and hand
 * its memory over): whether a packet read by pl_fragment_scatter is the fragment expected in place, as long as
 * expected and saying it is a later fragment at the offset expected. Anything else is put back together in its
 * slot now. A packet that only says so is still decoded and checked when handled. */
static bool pl_fragment_landed(uint8_t *slot, size_t length, const struct iovec *iov, pl_fragment_read_t read) {
    uint32_t offset;
    if (length == PL_WIRE_FRAGMENT_HEAD + read.chunk && pl_wire_fragment_head(slot, length, &offset) &&
        offset == read.at) {
        return true;
    }
    pl_fragment_put_back(slot, length, iov, read);
    return false;
}

/* When a landed fragment's turn comes: its bytes went to the message in progress when the batch was read. Its
 * handler checks that the frame continues the message in progress at that offset; this, that it is still the same
 * message, whose memory holds the bytes. Only records read from the ring could have ended that message in between,
 * and a switch to the ring in the batch puts the packets behind it back together first (pl_conn_read_socket): a
 * guard, one comparison, against a change that would break that. */
static bool pl_fragment_still_expected(const pl_conn_t *conn, pl_fragment_read_t read) {
    return conn->rx.active && conn->rx_serial == read.serial && conn->rx.received == read.at;
}

pl_read_result_t pl_conn_read_socket(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, int batch_size,
                                     const char **why, int *taken) {
    *taken = 0;
    int read = 0;
    size_t read_bytes = 0;
    if (batch_size > PL_READ_BATCH) batch_size = PL_READ_BATCH;
    while (read < budget && read_bytes < bytes) {
        /* Up to PL_READ_BATCH packets a system call: a lone one costs no second call that finds nothing. */
        union {
            char bytes[PL_CMSG_SPACE];
            struct cmsghdr align;
        } control[PL_READ_BATCH];
        struct iovec iov[PL_READ_BATCH][3];
        pl_fragment_read_t fragment[PL_READ_BATCH];
        bool landed[PL_READ_BATCH];
        struct mmsghdr batch[PL_READ_BATCH];
        for (int k = 0; k < batch_size; k++) {
            int count;
            fragment[k] = pl_fragment_scatter(conn, buffer + (size_t)k * PL_WIRE_MAX_FRAME, k, iov[k], &count);
            batch[k].msg_hdr = (struct msghdr){ .msg_iov = iov[k], .msg_iovlen = (size_t)count,
                                                .msg_control = control[k].bytes,
                                                .msg_controllen = sizeof control[k].bytes };
            batch[k].msg_len = 0;
        }
        int fd = conn->fd; /* the reader's: only a teardown, which takes the read lock, closes it */
        if (fd < 0) return PL_READ_DRAINED;
        int n = recvmmsg(fd, batch, (unsigned)batch_size, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
        /* ECONNRESET: the peer closed with our frames unread. The kernel says so once, ahead of what the peer
         * sent before closing (a refusal, its last messages), which is still to be read; the end follows it. */
        if (n < 0 && (errno == EINTR || errno == ECONNRESET)) { read++; continue; }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return PL_READ_DRAINED;
        if (n < 0) {
            *why = "the connection broke";
            return PL_READ_ENDED;
        }
        for (int k = 0; k < n; k++) {
            landed[k] = fragment[k].chunk > 0 &&
                        pl_fragment_landed(buffer + (size_t)k * PL_WIRE_MAX_FRAME, batch[k].msg_len, iov[k], fragment[k]);
        }
        bool by_ring = conn->ring_reading;
        for (int k = 0; k < n; k++) {
            if (batch[k].msg_len == 0) {
                /* The end of the stream (an empty packet is never a frame), or an empty packet that a peer sent,
                 * perhaps with descriptors: closed with the rest. */
                pl_close_packets_fds(batch, k, n);
                if (!by_ring && conn->ring_reading) {
                    /* Behind the switch to the ring in this batch: the records the peer put before it closed come
                     * first. The end stays in the socket, where the ring's reader finds it once they are read. */
                    conn->packets_read += (uint64_t)k;
                    return PL_READ_DRAINED;
                }
                *why = "the peer closed the connection";
                return PL_READ_ENDED;
            }
            /* Behind the frame that switched to the ring in this batch: the peer sent this packet behind a mark,
             * which is in the ring already (it puts a mark before it sends), so the ring's packets ahead of the mark
             * go first. The switch frame's buffer, handled, holds them. Those packets may continue the message in
             * progress, or end it and begin the next: the packets read in place behind the switch are therefore put
             * back together first, while the message's memory is still this reader's, and handled as what they are. */
            uint8_t *slot = buffer + (size_t)k * PL_WIRE_MAX_FRAME;
            if (!by_ring && conn->ring_reading) {
                for (int m = k; m < n; m++) { /* at the first packet behind the switch; none is left landed after */
                    if (!landed[m]) continue;
                    pl_fragment_put_back(buffer + (size_t)m * PL_WIRE_MAX_FRAME, batch[m].msg_len, iov[m], fragment[m]);
                    landed[m] = false;
                }
                if (!pl_conn_ring_take_to_mark(conn, buffer + (size_t)(k - 1) * PL_WIRE_MAX_FRAME, why)) {
                    pl_close_packets_fds(batch, k, n);
                    return PL_READ_ENDED;
                }
            }
            if (landed[k]) {
                if (!pl_fragment_still_expected(conn, fragment[k])) {
                    *why = "message: a fragment that does not continue the message in progress";
                    pl_close_packets_fds(batch, k, n);
                    return PL_READ_ENDED;
                }
                conn->rx.in_place = conn->rx.bytes + fragment[k].at;
            }
            bool handled = pl_handle_packet(conn, slot, batch[k].msg_len, &batch[k].msg_hdr, why);
            conn->rx.in_place = NULL;
            if (!handled) {
                pl_close_packets_fds(batch, k + 1, n); /* packets after the fatal one */
                return PL_READ_ENDED;
            }
            (*taken)++;
            read_bytes += batch[k].msg_len;
        }
        read += n;
        if (n > 0) conn->packets_read += (uint64_t)n;
        if (n == 0) {
            *why = "the peer closed the connection";
            return PL_READ_ENDED;
        }
        /* It took what there was; or a switch to the ring happened: the ring is read next. */
        if (n < batch_size || conn->ring_reading) return PL_READ_DRAINED;
    }
    return PL_READ_MORE;
}

pl_read_result_t pl_conn_read_frames(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, const char **why) {
    *why = NULL;
    pl_read_result_t result = PL_READ_DRAINED;
    int taken = 0;
    if (!conn->ring_reading) result = pl_conn_read_socket(conn, buffer, budget, bytes, PL_READ_BATCH, why, &taken);
    /* A switch to the ring in the socket's batch: the ring has the turn's whole byte budget (a socket's part is
     * packets before the switch, a handful). A switch that came as the budget's last packet leaves the ring unread
     * and unarmed, so its writer rings for nothing: the turn says MORE, and the reader's caller reads on (it said
     * DRAINED, and a stream that switched just then stopped there for good). */
    if (result != PL_READ_ENDED && conn->ring_reading) {
        result = taken < budget ? pl_conn_read_ring(conn, buffer, budget - taken, bytes, why) : PL_READ_MORE;
    }
    if (result == PL_READ_ENDED) return result;
    /* The peer may have made room in the ring for what waits in our outgoing queue: this side's bell rang. */
    if (atomic_load_explicit(&conn->backlogged, memory_order_acquire) &&
        atomic_load_explicit(&conn->ring_writing, memory_order_acquire)) {
        pl_conn_flush_outgoing(conn);
    }
    pl_conn_ring_after_read(conn);
    return result;
}

pl_read_result_t pl_conn_read_turn(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, const char **why,
                                   bool *took, uint64_t *packets) {
    *packets = 0;
    *took = pthread_mutex_trylock(&conn->read_lock) == 0;
    if (!*took) {
        /* The note first, then a second try: either the holder sees the note after it unlocks, or it has unlocked
         * already and the second try succeeds. */
        atomic_store_explicit(&conn->read_again, true, memory_order_seq_cst);
        *took = pthread_mutex_trylock(&conn->read_lock) == 0;
        if (!*took) return PL_READ_DRAINED;
    }
    for (;;) {
        atomic_store_explicit(&conn->read_again, false, memory_order_relaxed); /* this read covers any note so far */
        uint64_t before = conn->packets_read;
        pl_read_result_t result = pl_conn_read_frames(conn, buffer, budget, bytes, why);
        *packets += conn->packets_read - before;
        if (result == PL_READ_ENDED) return result; /* still locked */
        pthread_mutex_unlock(&conn->read_lock);
        if (result == PL_READ_MORE) return result; /* the caller hands the flood on, and the note with it */
        if (!atomic_load_explicit(&conn->read_again, memory_order_seq_cst)) return result;
        if (pthread_mutex_trylock(&conn->read_lock) != 0) return result; /* the new holder reads */
    }
}
