/*
 * pl_conn.c — a connection to another process: its life, writing frames, and its end.
 *
 * Writing never blocks. A frame goes straight to the socket (sendmsg with MSG_DONTWAIT) when nothing waits
 * before it; otherwise, or when the socket is full, it joins the outgoing queue, which the transport thread
 * drains when the socket becomes writable. Senders of messages wait for the queue to have room (their timeout
 * applies; they are woken once room for their message or PL_CONN_ROOM_BATCH, whichever is more, appears), so a
 * peer that stops reading cannot grow this process's memory; control frames always go in, and a peer that lets
 * them pile up past PL_CONN_CONTROL_LIMIT is disconnected.
 */
#include "pl_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

pl_conn_t *pl_conn_new(int fd, bool accepted) {
    pl_conn_t *conn = calloc(1, sizeof *conn);
    if (conn == NULL) return NULL;
    atomic_init(&conn->refs, 1);
    conn->fd = fd;
    conn->out_fd = -1;
    conn->accepted = accepted;
    conn->next_handle = 1;
    conn->frames_put = PL_RING_OFFER_AFTER;
    conn->ring_offer_at = PL_RING_OFFER_AFTER;
    atomic_init(&conn->bell_watched, -1);
    pthread_mutex_init(&conn->read_lock, NULL);
    pthread_mutex_init(&conn->feeds_lock, NULL);
    pl_mutex_init_adaptive(&conn->write_lock);
    pl_cond_init_monotonic(&conn->writable);
    pl_mutex_init_adaptive(&conn->lock);
    pl_cond_init_monotonic(&conn->changed);
    pthread_mutex_init(&conn->owed_lock, NULL);
    return conn;
}

void pl_conn_retain(pl_conn_t *conn) { atomic_fetch_add_explicit(&conn->refs, 1, memory_order_relaxed); }

void pl_conn_release(pl_conn_t *conn) {
    if (atomic_fetch_sub_explicit(&conn->refs, 1, memory_order_acq_rel) != 1) return;
    /* Teardown emptied the tables, the queues and closed the socket; what is left is memory. */
    pl_handle_map_free(&conn->exports);
    pl_handle_map_free(&conn->imports);
    free(conn->lookup_key);
    pthread_mutex_destroy(&conn->owed_lock);
    pthread_mutex_destroy(&conn->feeds_lock);
    pthread_mutex_destroy(&conn->read_lock);
    pthread_cond_destroy(&conn->changed);
    pthread_mutex_destroy(&conn->lock);
    pthread_cond_destroy(&conn->writable);
    pthread_mutex_destroy(&conn->write_lock);
    free(conn);
}

/* ---- writing ---------------------------------------------------------------------------------------- */

int pl_conn_sendmsg(int fd, const uint8_t *head, size_t head_length, const uint8_t *body, size_t body_length,
                           const int *fds, uint32_t fd_count) {
    struct iovec iov[2] = { { .iov_base = (void *)head, .iov_len = head_length },
                            { .iov_base = (void *)body, .iov_len = body_length } };
    union {
        char buffer[CMSG_SPACE(sizeof(int) * PL_WIRE_MAX_ATTACHMENTS)];
        struct cmsghdr align;
    } control;
    struct msghdr msg = { .msg_iov = iov, .msg_iovlen = body_length > 0 ? 2 : 1 };
    if (fd_count > 0) {
        memset(control.buffer, 0, sizeof control.buffer);
        msg.msg_control = control.buffer;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
        memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * fd_count);
    }
    for (;;) {
        ssize_t n = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) return 1; /* a SOCK_SEQPACKET packet goes whole or not at all */
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return 0;
        return -1;
    }
}

/* A frame without descriptors joins the last queued one when the peer reads packed packets and there is room:
 * a backlog then leaves in a few large packets, a system call and a wake-up of the reader for many messages
 * instead of one each. Packets are allocated this large (or the frame's size, if larger). */
#define PL_CONN_PACK_BYTES 65536u
_Static_assert(PL_CONN_PACK_BYTES <= PL_WIRE_MAX_FRAME, "a pack is one packet: a ring record or a socket packet");

/* Appends a copy of a frame to the outgoing queue (write_lock held); the descriptors are duplicated, since the
 * caller's go back to it. out_bytes counts what the queue asked for, room for packing included, so packing never
 * lets it hold more than its limits say (a small frame's memory, from the payload cache, may be up to twice what
 * it asked for). false: out of memory or descriptors. */
static bool pl_conn_queue_frame_locked(pl_conn_t *conn, const uint8_t *head, size_t head_length,
                                       const uint8_t *body, size_t body_length, const int *fds, uint32_t fd_count) {
    bool packs = fd_count == 0 && atomic_load_explicit(&conn->packs, memory_order_acquire);
    size_t length = head_length + body_length;
    size_t control = head[0] != PL_FRAME_MESSAGE ? length : 0;
    pl_out_frame_t *tail = conn->out_tail;
    if (packs && tail != NULL && tail->fd_count == 0 && !tail->switches && tail->capacity - tail->length >= length) {
        memcpy(tail->bytes + tail->length, head, head_length);
        if (body_length > 0) memcpy(tail->bytes + tail->length + head_length, body, body_length);
        tail->length += length;
        tail->packed = true;
        tail->control_bytes += control;
        conn->out_control_bytes += control;
        return true;
    }
    /* Room for more only behind a small frame: a large one (a fragment, a big payload) would leave most of it idle. */
    size_t capacity = packs && length <= PL_CONN_PACK_BYTES / 8 ? PL_CONN_PACK_BYTES : length;
    pl_out_frame_t *frame = pl_payload_cache_take(sizeof *frame + capacity);
    if (frame == NULL) return false;
    frame->next = NULL;
    frame->length = length;
    frame->capacity = capacity;
    frame->control_bytes = control;
    frame->fd_count = 0;
    frame->switches = false;
    frame->marked = false;
    frame->packed = false;
    for (uint32_t i = 0; i < fd_count; i++) {
        int copy = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (copy < 0) {
            for (uint32_t j = 0; j < frame->fd_count; j++) close(frame->fds[j]);
            pl_payload_cache_give(frame);
            return false;
        }
        frame->fds[frame->fd_count++] = copy;
    }
    memcpy(frame->bytes, head, head_length);
    if (body_length > 0) memcpy(frame->bytes + head_length, body, body_length);
    if (conn->out_tail != NULL) conn->out_tail->next = frame; else conn->out_head = frame;
    conn->out_tail = frame;
    conn->out_bytes += capacity;
    conn->out_control_bytes += control;
    atomic_store_explicit(&conn->backlogged, true, memory_order_release);
    return true;
}

/* Sends queued packets from the head while the socket (or the ring) takes them (write_lock held), all of them or
 * all but the last (which a streaming sender is still filling). false: the connection broke (the caller unlocks,
 * then kills it unless `*gone`: the peer takes nothing more, and the transport is told (pl_transport_peer_refused);
 * or the ring's writer ended it). */
static bool pl_conn_send_queued_locked(pl_conn_t *conn, bool keep_tail, bool *gone) {
    while (conn->out_head != NULL && conn->fd >= 0 && !(keep_tail && conn->out_head == conn->out_tail)) {
        pl_out_frame_t *frame = conn->out_head;
        int sent = conn->ring_state == PL_CONN_RING_WRITING
                       ? pl_conn_ring_write_locked(conn, frame->bytes, frame->length, NULL, 0, frame->fds,
                                                   frame->fd_count, frame->packed, &frame->marked)
                       : pl_conn_sendmsg(conn->fd, frame->bytes, frame->length, NULL, 0, frame->fds, frame->fd_count);
        if (sent == 0) break;
        if (sent < 0) {
            bool refused = sent == -1 && (errno == EPIPE || errno == ECONNRESET);
            *gone = sent == -2 || refused;
            if (refused) pl_transport_peer_refused(conn); /* the end to read may never come */
            return false;
        }
        if (frame->switches) {
            /* The switch frame has left: what follows goes by ring. */
            conn->ring_state = PL_CONN_RING_WRITING;
            atomic_store_explicit(&conn->ring_writing, true, memory_order_release);
        }
        conn->out_head = frame->next;
        if (conn->out_head == NULL) conn->out_tail = NULL;
        conn->out_bytes -= frame->capacity;
        conn->out_control_bytes -= frame->control_bytes;
        for (uint32_t i = 0; i < frame->fd_count; i++) close(frame->fds[i]);
        pl_payload_cache_give(frame);
    }
    /* Every frame leaves the queue here (by socket or ring, from a sender, the transport or the exit flush): room
     * for a waiting sender wakes it now rather than when the whole queue has gone. One compare when none waits. */
    if (conn->out_bytes < conn->room_under) {
        conn->room_under = 0; /* the ones woken that still find no room say again what they need */
        pthread_cond_broadcast(&conn->writable);
    }
    return true;
}

/* Whether the transport is to watch the socket for room: by socket, whenever frames wait; by ring, only when the
 * head waits for the socket (a packet with descriptors), since room in the ring comes with this side's bell. */
static bool pl_conn_needs_socket_room_locked(const pl_conn_t *conn) {
    return conn->out_head != NULL && (conn->ring_state != PL_CONN_RING_WRITING || conn->socket_blocked);
}

/* A sender is streaming when its last PL_CONN_STREAK frames each came within PL_CONN_CORK_NS of the end of the
 * one before. Then, if the process asked for it (pl_set_stream_packing) and the peer reads packed packets, a
 * frame waits in the queue, packed with the ones that follow: full packets go out from the sender at once, the
 * last one when the transport finds the socket writable — a system call per packet instead of per message. A
 * frame after a pause (a request, an answer, a ping, the control frame or two that follow one) goes out at once.
 * Off by default: a held frame dies with its process if that process dies abruptly. */
#define PL_CONN_CORK_NS 2000
#define PL_CONN_STREAK 8u

static atomic_bool pl_stream_packing_on;
/* Set by the exit flush: from then on nothing is held back, whatever the setting says (the setting itself stays what
 * the process made it, for whoever reads it in a later exit handler). */
static atomic_bool pl_stream_packing_over;
int pl_stream_packing(void) { return atomic_load_explicit(&pl_stream_packing_on, memory_order_relaxed); }
void pl_set_stream_packing(int on) { atomic_store_explicit(&pl_stream_packing_on, on != 0, memory_order_relaxed); }
void pl_conn_stop_packing(void) { atomic_store_explicit(&pl_stream_packing_over, true, memory_order_relaxed); }

/* The outgoing queue has emptied (write_lock held): nothing is backlogged, and a client's connection left with no
 * right (end_when_sent, pl_proxy.c) ends now that what it sent has gone. */
static void pl_conn_drained_locked(pl_conn_t *conn) {
    atomic_store_explicit(&conn->backlogged, false, memory_order_release);
    if (conn->end_when_sent) pl_transport_kill(conn, "no right left on the connection");
}

pl_status_t pl_conn_put_frame_locked(pl_conn_t *conn, const uint8_t *bytes, size_t length, const int *fds,
                                     uint32_t fd_count) {
    return pl_conn_put_frame_parts_locked(conn, bytes, length, NULL, 0, fds, fd_count);
}

pl_status_t pl_conn_put_frame_parts_locked(pl_conn_t *conn, const uint8_t *head, size_t head_length,
                                           const uint8_t *body, size_t body_length, const int *fds,
                                           uint32_t fd_count) {
    if (conn->fd < 0) return PL_ERR_INVALID_DEST;
    bool ring = conn->ring_state == PL_CONN_RING_WRITING;
    /* The streak of quick puts is kept only while packing is on (a put reads no clock otherwise), and not by ring,
     * which packs nothing: a stream crosses it without a system call per message anyway. */
    bool packing = !ring && atomic_load_explicit(&pl_stream_packing_on, memory_order_relaxed) &&
                   !atomic_load_explicit(&pl_stream_packing_over, memory_order_relaxed);
    int64_t start = packing ? pl_now_ns() : 0;
    if (packing && start - conn->last_put_end < PL_CONN_CORK_NS) {
        if (conn->streak < PL_CONN_STREAK) conn->streak++;
    } else {
        conn->streak = 0;
    }
    bool streaming = packing && conn->streak == PL_CONN_STREAK && fd_count == 0 &&
                     atomic_load_explicit(&conn->packs, memory_order_acquire);
    bool marked = false;
    if (conn->out_head == NULL && !streaming) {
        int sent = ring ? pl_conn_ring_write_locked(conn, head, head_length, body, body_length, fds, fd_count, false,
                                                    &marked)
                        : pl_conn_sendmsg(conn->fd, head, head_length, body, body_length, fds, fd_count);
        if (packing) conn->last_put_end = pl_now_ns();
        if (sent > 0) {
            if (conn->ring_state == PL_CONN_RING_NONE) pl_conn_ring_maybe_offer_locked(conn);
            return PL_OK;
        }
        if (sent < 0) {
            /* The peer is gone. What it sent before going is still to be read (a refusal, its last messages):
             * the transport ends the connection when it reads the end (or now, if no end is coming: a peer that
             * only stopped reading). Any other failure ends it now. */
            if (sent == -1 && errno != EPIPE && errno != ECONNRESET) pl_transport_kill(conn, "the socket refused a write");
            else if (sent == -1) pl_transport_peer_refused(conn);
            return PL_ERR_INVALID_DEST;
        }
    }
    if (!pl_conn_queue_frame_locked(conn, head, head_length, body, body_length, fds, fd_count)) {
        pl_transport_kill(conn, "no memory or descriptors for the outgoing queue");
        return PL_ERR_INVALID_DEST;
    }
    if (marked) conn->out_tail->marked = true; /* alone in the queue: a frame with descriptors is never packed */
    bool gone = false;
    /* By socket, the queue's last frame stays, to be packed with the frames that follow; the transport sends it
     * when the socket has room. By ring, which holds no frame back, all of it goes that can: a frame left behind
     * would wait for a bell that may never ring (the ring has room), and the ring's reader may even have made room,
     * and rung for it, between the look that found the ring full and this queueing, when the transport, woken,
     * found nothing queued yet. With still no room, the ring asks its reader to ring again, and the transport will find
     * the queue. */
    bool by_ring = conn->ring_state == PL_CONN_RING_WRITING && !conn->socket_blocked;
    if ((by_ring || conn->out_head != conn->out_tail) && !pl_conn_send_queued_locked(conn, !by_ring, &gone)) {
        if (!gone) pl_transport_kill(conn, "the socket refused a write");
        return PL_ERR_INVALID_DEST;
    }
    if (conn->out_head == NULL) {
        pl_conn_drained_locked(conn);
        pthread_cond_broadcast(&conn->writable);
        return PL_OK;
    }
    if (!conn->want_writable && pl_conn_needs_socket_room_locked(conn)) {
        conn->want_writable = true;
        pl_transport_want_writable(conn);
    }
    conn->last_put_end = start; /* queueing took a moment: no second look at the clock */
    if (conn->ring_state == PL_CONN_RING_NONE) pl_conn_ring_maybe_offer_locked(conn);
    return PL_OK;
}

void pl_conn_flush_outgoing(pl_conn_t *conn) {
    pthread_mutex_lock(&conn->write_lock);
    bool gone = false;
    if (!pl_conn_send_queued_locked(conn, false, &gone)) {
        pthread_mutex_unlock(&conn->write_lock);
        if (!gone) pl_transport_kill(conn, "the socket refused a write");
        return;
    }
    bool drained = conn->out_head == NULL;
    if (drained) pl_conn_drained_locked(conn);
    /* Waiting for room in the ring, not in the socket: the transport stops watching the socket for it. A packet
     * with descriptors that the socket would not take now (a reader flushed, woken by this side's bell): it does. */
    bool needs = pl_conn_needs_socket_room_locked(conn);
    if (needs && !conn->want_writable) pl_transport_want_writable(conn);
    conn->want_writable = needs;
    pthread_mutex_unlock(&conn->write_lock);
    if (drained) pthread_cond_broadcast(&conn->writable);
}

/* The waits leave the write lock to the connection's other writers (a sender, the transport's control frames), and
 * last PL_EXIT_FLUSH_LOOK_MS at most: the transport may close the socket meanwhile, and its number be reused. */
#define PL_EXIT_FLUSH_LOOK_MS 10
void pl_conn_flush_before_exit(pl_conn_t *conn, int64_t deadline) {
    pthread_mutex_lock(&conn->write_lock);
    bool gone = false;
    while (conn->out_head != NULL && conn->fd >= 0 && pl_conn_send_queued_locked(conn, false, &gone) &&
           conn->out_head != NULL) {
        int64_t left = deadline - pl_now_ns();
        if (left <= 0) break;
        bool socket_room = pl_conn_needs_socket_room_locked(conn);
        struct pollfd writable = { .fd = conn->fd, .events = POLLOUT };
        pthread_mutex_unlock(&conn->write_lock);
        if (!socket_room) {
            /* Room in the ring comes with a ring of this side's bell, which its readers take: look again shortly. */
            struct timespec pause = { .tv_sec = 0, .tv_nsec = 200000 };
            nanosleep(&pause, NULL);
        } else {
            int64_t wait_ms = left / 1000000 + 1;
            if (wait_ms > PL_EXIT_FLUSH_LOOK_MS) wait_ms = PL_EXIT_FLUSH_LOOK_MS;
            (void)poll(&writable, 1, (int)wait_ms); /* an error only means looking again, until the deadline */
        }
        pthread_mutex_lock(&conn->write_lock);
    }
    pthread_mutex_unlock(&conn->write_lock);
}

/* A frame the transport or any thread sends to keep the two sides in step. A peer that does not read while
 * making us answer it is cut off before its answers grow without bound. */
void pl_conn_write_control(pl_conn_t *conn, pl_frame_type_t type, uint32_t handle, uint32_t count_or_flags,
                           uint32_t transfers) {
    uint8_t frame[PL_WIRE_HEADER_SIZE + 12];
    size_t length = pl_wire_encode_control(frame, type, handle, count_or_flags, transfers);
    pthread_mutex_lock(&conn->write_lock);
    bool flooded = conn->out_control_bytes > PL_CONN_CONTROL_LIMIT;
    if (!flooded) pl_conn_put_frame_locked(conn, frame, length, NULL, 0);
    pthread_mutex_unlock(&conn->write_lock);
    if (flooded) pl_transport_kill(conn, "the peer does not read its control frames");
}

void pl_conn_write_hello(pl_conn_t *conn, uint32_t status, pl_wire_right_t bootstrap) {
    uint8_t frame[PL_WIRE_HELLO_SIZE];
    size_t length = pl_wire_encode_hello(frame, PL_WIRE_VERSION, status, bootstrap);
    pthread_mutex_lock(&conn->write_lock);
    conn->hello_sent = true;
    pl_conn_put_frame_locked(conn, frame, length, NULL, 0);
    pthread_mutex_unlock(&conn->write_lock);
}

/* ---- the end ---------------------------------------------------------------------------------------- */

/* A proxy of the ended connection leaves the idle list (the connection's lock held). */
static void pl_conn_unlist_import_locked(uint32_t handle, void *value, void *context) {
    (void)handle;
    pl_port_t *proxy = value;
    pl_proxy_revive_locked(context, proxy);
    proxy->proxy->in_table = false;
}

/* A proxy of the ended connection becomes a dead name, and the table's reference to it goes (no lock held). */
static void pl_conn_kill_import(uint32_t handle, void *value, void *context) {
    (void)handle;
    (void)context;
    pl_port_t *proxy = value;
    pthread_mutex_lock(&proxy->lock);
    proxy->dead = true;
    struct pl_notification *requests = pl_notify_take_all_locked(proxy);
    pthread_mutex_unlock(&proxy->lock);
    pl_notify_deliver(requests);
    pl_port_release_internal(proxy);
}

/* The peer's rights to one of our ports go with it; credit lent to it comes back as room (no lock held). */
static void pl_conn_drop_export(uint32_t handle, void *value, void *context) {
    (void)handle;
    (void)context;
    pl_export_drop(value);
}

void pl_conn_teardown(pl_conn_t *conn, const char *why) {
    /* The sets that watch the socket let go of it while it is still open. */
    pl_feeders_detach_conn(conn);
    /* Before any waiter wakes with PL_ERR_INVALID_DEST, the rights it holds read as dead names. */
    atomic_store_explicit(&conn->ended, true, memory_order_release);
    /* Stop writers first: nothing more goes out, queued frames are dropped. */
    pthread_mutex_lock(&conn->write_lock);
    pl_out_frame_t *frames = conn->out_head;
    conn->out_head = conn->out_tail = NULL;
    conn->out_bytes = 0;
    conn->out_control_bytes = 0;
    atomic_store_explicit(&conn->backlogged, false, memory_order_release);
    /* Each closed as it is forgotten, while fork() waits: a child's handler closes the descriptors it finds. */
    pl_transport_close_descriptor(&conn->out_fd);
    pl_transport_close_descriptor(&conn->fd);
    pthread_mutex_unlock(&conn->write_lock);
    pthread_cond_broadcast(&conn->writable);
    while (frames != NULL) {
        pl_out_frame_t *next = frames->next;
        for (uint32_t i = 0; i < frames->fd_count; i++) close(frames->fds[i]);
        free(frames);
        frames = next;
    }
    pl_conn_ring_teardown(conn);

    /* Take the tables out under the lock, whole, and deal with their entries after it: walking them needs no
     * memory, so an ended connection's rights always become dead names and its credit always comes back. */
    pthread_mutex_lock(&conn->lock);
    conn->dead = true;
    conn->death = why;
    /* A message through a send-once right cut off half-way: its right is still counted in its export, and its port
     * is told with the others the peer held (pl_conn_receive.c). */
    pl_handle_map_t imports = conn->imports, exports = conn->exports;
    conn->imports = conn->exports = (pl_handle_map_t){ 0 };
    pl_handle_map_each(&imports, pl_conn_unlist_import_locked, conn);
    pl_proxy_forget_imports(imports.count);
    pthread_mutex_unlock(&conn->lock);
    pthread_cond_broadcast(&conn->changed);

    pl_handle_map_each(&imports, pl_conn_kill_import, NULL);
    pl_handle_map_each(&exports, pl_conn_drop_export, NULL);
    pl_handle_map_free(&imports);
    pl_handle_map_free(&exports);

    /* A message in reassembly is discarded with what it carried. */
    if (conn->rx.active) {
        free(conn->rx.bytes);
        if (conn->rx.reply != NULL) {
            if (conn->rx.reply_once) pl_port_release_send_once(conn->rx.reply); else pl_port_release_send(conn->rx.reply);
        }
        pl_attachments_free(conn->rx.attachments);
        conn->rx.active = false;
        conn->rx.bytes = NULL;
        conn->rx.reply = NULL;
        conn->rx.attachments = NULL;
    }
}
