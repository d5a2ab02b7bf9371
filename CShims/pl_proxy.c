/*
 * pl_proxy.c — the holder's side: a proxy is a send right to a port of another process.
 *
 * A send on a proxy spends one credit (asking the owner with WANT when it has none, and waiting as a send to a
 * full local port waits), waits for room in the connection's outgoing queue, then writes the message: rights
 * it carries become handles (this process's ports are exported; a proxy of the same connection is named by the
 * owner's handle), descriptors travel as SCM_RIGHTS, and a payload larger than a frame goes in fragments,
 * written under the connection's write lock so that they are never interleaved, or, from the out-of-line
 * threshold up and to a peer of version 3, whole in one frame as a sealed memfd (pl_ool.c).
 *
 * Send-once rights (wire version 3): a reply right sent as one is flagged PL_RIGHT_ONCE and counted in the
 * owner's export (`once`); the holder's proxy counts it in send_once_rights and keeps the proxy while it lasts.
 * A message through it (PL_FRAME_ONCE) spends no credit: the right stands for its room, as in Mach. Dropped
 * unused, it sends ONCE_GONE; when the connection ends, the owner counts what is left. Either way the owner
 * posts the send-once notice in its process.
 */
#include "pl_remote.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_uint pl_import_count;

/* ---- imports ---------------------------------------------------------------------------------------- */

/* The proxy for a right the peer sent (the connection's lock held); with `make_right`, one more send right to it
 * for the caller. NULL with *reason: the peer broke a limit or memory ran out. */
pl_port_t *pl_proxy_import_locked(pl_conn_t *conn, pl_wire_right_t right, bool make_right, const char **reason) {
    pl_port_t *port = pl_handle_map_get(&conn->imports, right.handle);
    if (port == NULL) {
        if (conn->imports.count >= PL_CONN_MAX_RIGHTS) {
            *reason = "the peer sent more rights than a connection may hold";
            return NULL;
        }
        pl_proxy_t *proxy = calloc(1, sizeof *proxy);
        if (proxy == NULL) {
            *reason = "out of memory for a proxy";
            return NULL;
        }
        proxy->conn = conn;
        pl_conn_retain(conn); /* the proxy's, released when its memory goes (pl_proxy_free) */
        proxy->handle = right.handle;
        proxy->max_size = right.max_size;
        port = pl_port_new_proxy(proxy);
        if (port == NULL || !pl_handle_map_put(&conn->imports, right.handle, port)) {
            if (port != NULL) {
                pl_port_release_internal(port); /* frees the proxy too */
            } else {
                pl_conn_release(conn);
                free(proxy);
            }
            *reason = "out of memory for a proxy";
            return NULL;
        }
        proxy->in_table = true;
        atomic_fetch_add_explicit(&pl_import_count, 1, memory_order_relaxed);
    }
    /* A port's largest payload never changes: it was read from the first right, and senders read it unlocked. */
    pl_proxy_t *proxy = port->proxy;
    proxy->transfers++;
    proxy->credits += right.credits;
    if (right.flags & PL_RIGHT_PROMPT) proxy->prompt = true;
    if (make_right) {
        pl_proxy_revive_locked(conn, port);
        pl_port_make_send(port);
    }
    if (right.credits > 0) {
        /* Credit the owner owed may be the answer to our WANT, come with a right instead of a CREDIT frame: a
         * sender out of credit later asks again (a WANT too many only repeats a question the owner holds). */
        proxy->want_sent = false;
        pthread_cond_broadcast(&conn->changed);
    }
    return port;
}

void pl_proxy_free(pl_proxy_t *proxy) {
    pl_conn_release(proxy->conn);
    free(proxy);
}

uint32_t pl_proxy_import_total(void) { return atomic_load_explicit(&pl_import_count, memory_order_relaxed); }

void pl_proxy_forget_imports(uint32_t count) {
    atomic_fetch_sub_explicit(&pl_import_count, count, memory_order_relaxed);
}

/* Takes a proxy out of the table (the connection's lock held); the caller releases the table's reference. */
static void pl_proxy_unlink_locked(pl_conn_t *conn, pl_port_t *port) {
    pl_handle_map_remove(&conn->imports, port->proxy->handle);
    port->proxy->in_table = false;
    atomic_fetch_sub_explicit(&pl_import_count, 1, memory_order_relaxed);
}

static atomic_uint pl_idle_total;

uint32_t pl_proxy_idle_total(void) { return atomic_load_explicit(&pl_idle_total, memory_order_seq_cst); }

/* Takes a proxy off its connection's idle list (the connection's lock held). */
static void pl_proxy_unidle_locked(pl_conn_t *conn, pl_port_t *port) {
    pl_proxy_t *proxy = port->proxy;
    if (!proxy->idle) return;
    pl_port_t **link = &conn->idle_head, *previous = NULL;
    while (*link != NULL && *link != port) {
        previous = *link;
        link = &(*link)->proxy->next_idle;
    }
    if (*link == port) {
        *link = proxy->next_idle;
        if (conn->idle_tail == port) conn->idle_tail = previous;
        conn->idle_count--;
    }
    proxy->idle = false;
    proxy->next_idle = NULL;
    atomic_fetch_sub_explicit(&pl_idle_total, 1, memory_order_relaxed);
}

void pl_proxy_revive_locked(pl_conn_t *conn, pl_port_t *port) { pl_proxy_unidle_locked(conn, port); }

/* Whether a client's connection holds no right either way (the write lock and the connection's lock held): no
 * look-up can use it again, its service right gone, so it ends. Messages still in the outgoing queue go first (the
 * end drops the queue): then it ends once the queue has drained (pl_conn.c), and false is returned. */
static bool pl_conn_unused_locked(pl_conn_t *conn) {
    if (conn->accepted || conn->dead || conn->imports.count != 0 || conn->exports.count != 0) return false;
    if (conn->out_head == NULL) return true;
    conn->end_when_sent = true;
    return false;
}

void pl_conn_end_if_unused(pl_conn_t *conn) {
    if (conn->accepted) return; /* set when made: a service's side never ends for this, and takes no lock for it */
    /* Most often the client still holds the service's right (a reply port's release, request after request): one
     * look under the connection's lock says so, without the write lock. */
    pthread_mutex_lock(&conn->lock);
    bool holds = conn->imports.count != 0 || conn->exports.count != 0;
    pthread_mutex_unlock(&conn->lock);
    if (holds) return;
    pthread_mutex_lock(&conn->write_lock);
    pthread_mutex_lock(&conn->lock);
    bool unused = pl_conn_unused_locked(conn);
    pthread_mutex_unlock(&conn->lock);
    pthread_mutex_unlock(&conn->write_lock);
    if (unused) pl_transport_kill(conn, "no right left on the connection");
}

/* Tells the owner that this process holds no right for the proxy's handle any more (RELEASE), unless one came
 * back meanwhile (a transfer, a look-up). */
static void pl_proxy_release_now(pl_port_t *port) {
    pl_proxy_t *proxy = port->proxy;
    pl_conn_t *conn = proxy->conn;
    pthread_mutex_lock(&conn->write_lock);
    pthread_mutex_lock(&conn->lock);
    bool unused = proxy->in_table && !conn->dead &&
                  atomic_load_explicit(&port->send_rights, memory_order_acquire) == 0 &&
                  atomic_load_explicit(&port->send_once_rights, memory_order_acquire) == 0;
    uint32_t transfers = proxy->transfers, credits = proxy->credits;
    if (unused) {
        pl_proxy_unidle_locked(conn, port);
        pl_proxy_unlink_locked(conn, port);
        proxy->credits = 0;
    }
    pthread_mutex_unlock(&conn->lock);
    bool idle = false;
    if (unused) {
        uint8_t frame[PL_WIRE_HEADER_SIZE + 12];
        size_t length = pl_wire_encode_control(frame, PL_FRAME_RELEASE, proxy->handle, credits, transfers);
        pl_conn_put_frame_locked(conn, frame, length, NULL, 0);
        pthread_mutex_lock(&conn->lock);
        idle = pl_conn_unused_locked(conn); /* behind the RELEASE, which the end must not drop */
        pthread_mutex_unlock(&conn->lock);
    }
    pthread_mutex_unlock(&conn->write_lock);
    if (!unused) return;
    if (idle) pl_transport_kill(conn, "no right left on the connection"); /* a client's connection ends when idle */
    pl_port_release_internal(port); /* the table's reference */
}

/* A proxy whose last right went is kept a while (PL_IDLE_PROXY_NS), in the table and on the connection's idle
 * list: a right to the same port often comes again soon (a loop's port named for the reply to each request), and
 * then no RELEASE, no new export and no new proxy are needed. A right whose owner waits for no-senders (a
 * request's reply port) is released at once; so is the oldest idle proxy when a connection keeps too many. */
void pl_proxy_unused(pl_port_t *port) {
    pl_proxy_t *proxy = port->proxy;
    pl_conn_t *conn = proxy->conn;
    if (proxy->prompt) {
        pl_proxy_release_now(port);
        return;
    }
    pl_port_t *oldest = NULL;
    bool went_idle = false;
    pthread_mutex_lock(&conn->lock);
    if (proxy->in_table && !conn->dead && !proxy->idle &&
        atomic_load_explicit(&port->send_rights, memory_order_acquire) == 0 &&
        atomic_load_explicit(&port->send_once_rights, memory_order_acquire) == 0) {
        proxy->idle = true;
        proxy->idle_since = pl_now_ns();
        proxy->next_idle = NULL;
        if (conn->idle_tail != NULL) conn->idle_tail->proxy->next_idle = port; else conn->idle_head = port;
        conn->idle_tail = port;
        conn->idle_count++;
        atomic_fetch_add_explicit(&pl_idle_total, 1, memory_order_seq_cst);
        went_idle = true;
        if (conn->idle_count > PL_IDLE_PROXIES_MAX) {
            oldest = conn->idle_head;
            pl_port_retain_internal(oldest);
        }
    }
    pthread_mutex_unlock(&conn->lock);
    /* A transport not armed to sweep sleeps without a timeout: it is woken, so that it sweeps this one in time
     * (a client that looked a service up once and dropped the right would otherwise hold its credit for ever). */
    if (went_idle) pl_transport_sweep_soon(conn);
    if (oldest != NULL) {
        pl_proxy_release_now(oldest);
        pl_port_release_internal(oldest);
    }
}

void pl_conn_release_idle(pl_conn_t *conn, int64_t cutoff) {
    for (;;) {
        pthread_mutex_lock(&conn->lock);
        pl_port_t *port = conn->idle_head;
        bool due = port != NULL && port->proxy->idle_since <= cutoff;
        if (due) pl_port_retain_internal(port);
        pthread_mutex_unlock(&conn->lock);
        if (!due) return;
        pl_proxy_release_now(port);
        pl_port_release_internal(port);
    }
}

/* ---- frames from the owner -------------------------------------------------------------------------- */

void pl_proxy_credit(pl_conn_t *conn, uint32_t handle, uint32_t count) {
    pthread_mutex_lock(&conn->lock);
    pl_port_t *port = pl_handle_map_get(&conn->imports, handle);
    if (port != NULL) {
        port->proxy->credits += count;
        port->proxy->want_sent = false;
        conn->credit_answers++;
    }
    pthread_mutex_unlock(&conn->lock);
    if (port != NULL) {
        pthread_cond_broadcast(&conn->changed);
    } else if (count > 0) {
        pl_conn_write_control(conn, PL_FRAME_RETURN, handle, count, 0); /* released meanwhile: give it back */
    }
}

/* The owner asks for its room back. It may have taken back credit it meant as the answer to our WANT, so the
 * RECLAIM answers that WANT too: senders still without credit ask again. */
void pl_proxy_reclaim(pl_conn_t *conn, uint32_t handle) {
    pthread_mutex_lock(&conn->lock);
    pl_port_t *port = pl_handle_map_get(&conn->imports, handle);
    uint32_t unused = 0;
    if (port != NULL) {
        unused = port->proxy->credits;
        port->proxy->credits = 0;
        port->proxy->want_sent = false;
        conn->credit_answers++;
    }
    pthread_mutex_unlock(&conn->lock);
    if (port != NULL) {
        pthread_cond_broadcast(&conn->changed);
        pl_conn_write_control(conn, PL_FRAME_RETURN, handle, unused, 0);
    }
}

void pl_proxy_dead(pl_conn_t *conn, uint32_t handle) {
    pthread_mutex_lock(&conn->lock);
    pl_port_t *port = pl_handle_map_get(&conn->imports, handle);
    struct pl_notification *requests = NULL;
    if (port != NULL) {
        pthread_mutex_lock(&port->lock);
        port->dead = true;
        requests = pl_notify_take_all_locked(port);
        pthread_mutex_unlock(&port->lock);
    }
    pthread_mutex_unlock(&conn->lock);
    if (port != NULL) pthread_cond_broadcast(&conn->changed);
    pl_notify_deliver(requests);
}

/* ---- sending ---------------------------------------------------------------------------------------- */

/* Whether frames wait in the outgoing queue: the peer is not keeping up with what we write. (Read without the
 * write lock, which ranks before the connection's lock held here.) */
static bool pl_conn_backlogged(pl_conn_t *conn) {
    return atomic_load_explicit(&conn->backlogged, memory_order_acquire);
}

static bool pl_proxy_dead_name(pl_port_t *port) {
    pthread_mutex_lock(&port->lock);
    bool dead = port->dead;
    pthread_mutex_unlock(&port->lock);
    return dead;
}

static atomic_uint_fast64_t pl_credit_requests; /* WANT frames sent since the process started */

uint64_t pl_remote_credit_requests(void) { return atomic_load_explicit(&pl_credit_requests, memory_order_relaxed); }

/* Reads the connection on this thread, one short pass, if its ring holds records and no other reader is at it (no
 * lock held): whether it did. A sender reads no more than that: what is left, and a note another reader left
 * meanwhile (pl_conn_read_turn), are the transport's. */
static bool pl_proxy_read_connection(pl_conn_t *conn) {
    if (!pl_conn_ring_pending(conn, false) || pthread_mutex_trylock(&conn->read_lock) != 0) return false;
    uint8_t *buffer = pl_thread_frame_buffer();
    if (buffer == NULL) {
        pthread_mutex_unlock(&conn->read_lock);
        return false;
    }
    atomic_store_explicit(&conn->read_again, false, memory_order_relaxed); /* this pass covers any note so far */
    const char *why;
    pl_read_result_t result = pl_conn_read_frames(conn, buffer, PL_SENDER_READ_PACKETS, PL_SENDER_READ_BYTES, &why);
    pthread_mutex_unlock(&conn->read_lock);
    if (result == PL_READ_ENDED) {
        pl_transport_kill(conn, why);
    } else if (result == PL_READ_MORE || atomic_load_explicit(&conn->read_again, memory_order_seq_cst)) {
        pl_transport_read(conn);
    }
    return true;
}

/* Spends one credit, asking for more and waiting as needed (no lock held). */
static pl_status_t pl_proxy_take_credit(pl_port_t *port, int64_t timeout_ns, int64_t deadline) {
    pl_proxy_t *proxy = port->proxy;
    pl_conn_t *conn = proxy->conn;
    /* A poll without credit waits for the owner's answer only, never for room. */
    int64_t answer_deadline = timeout_ns == 0 ? pl_now_ns() + PL_POLL_ANSWER_NS : deadline;
    pthread_mutex_lock(&conn->lock);
    uint64_t answers = conn->credit_answers;
    bool asked = false;
    bool read_first = false;
    for (;;) {
        if (conn->dead || pl_proxy_dead_name(port)) {
            pthread_mutex_unlock(&conn->lock);
            return PL_ERR_INVALID_DEST;
        }
        if (proxy->credits > 0) {
            proxy->credits--;
            pthread_mutex_unlock(&conn->lock);
            return PL_OK;
        }
        if (!read_first && !proxy->want_sent) {
            /* Credit the owner sent before we asked may be in the ring while our reader has yet to wake for it
             * (pl_remote_room_freed_locked): read it here, rather than ask and wait for the answer. */
            read_first = true;
            pthread_mutex_unlock(&conn->lock);
            bool read = pl_proxy_read_connection(conn);
            pthread_mutex_lock(&conn->lock);
            if (read) continue;
        }
        if (timeout_ns == 0 && asked && conn->credit_answers != answers && !proxy->want_sent) break;
        /* A poll asks once and waits briefly for the answer, unless the owner has not answered the last WANT or
         * does not read what we write: then it has no room as far as we can know, and the poll fails at once. */
        if (timeout_ns == 0 && !asked && (proxy->want_sent || pl_conn_backlogged(conn))) break;
        if (!proxy->want_sent || (timeout_ns == 0 && !asked)) {
            proxy->want_sent = true;
            asked = true;
            answers = conn->credit_answers;
            uint32_t handle = proxy->handle;
            pthread_mutex_unlock(&conn->lock);
            atomic_fetch_add_explicit(&pl_credit_requests, 1, memory_order_relaxed);
            pl_conn_write_control(conn, PL_FRAME_WANT, handle, timeout_ns == 0 ? 0 : PL_WANT_WAIT, 0);
            pthread_mutex_lock(&conn->lock);
            continue;
        }
        if (pl_deadline_passed(answer_deadline)) break;
        pl_cond_wait_until(&conn->changed, &conn->lock, answer_deadline);
    }
    pthread_mutex_unlock(&conn->lock);
    return PL_ERR_TIMED_OUT;
}

static void pl_proxy_give_back_credit(pl_port_t *port) {
    pl_conn_t *conn = port->proxy->conn;
    pthread_mutex_lock(&conn->lock);
    port->proxy->credits++;
    pthread_mutex_unlock(&conn->lock);
    pthread_cond_broadcast(&conn->changed);
}

/* Whether a right can be named on this connection: a port of this process, or a proxy of the same one. */
static bool pl_right_nameable(pl_conn_t *conn, pl_port_t *port) {
    return port->proxy == NULL || port->proxy->conn == conn;
}

/* What a message's rights became on the wire, to undo if the message cannot go. */
typedef struct pl_encoded {
    pl_wire_right_t reply;
    pl_wire_right_t rights[PL_WIRE_MAX_ATTACHMENTS];
    int fds[PL_WIRE_MAX_ATTACHMENTS + 1];  /* an out-of-line payload's memfd last */
    uint32_t fd_count;
    pl_wire_right_t exported[PL_WIRE_MAX_ATTACHMENTS + 1];
    uint32_t exported_count;
    uint32_t dead[PL_WIRE_MAX_ATTACHMENTS + 1]; /* handles of destroyed ports among them */
    uint32_t dead_count;
} pl_encoded_t;

static pl_status_t pl_encode_right_locked(pl_conn_t *conn, pl_port_t *port, pl_wire_right_t *out,
                                          pl_encoded_t *encoded) {
    if (port->proxy != NULL) {
        *out = (pl_wire_right_t){ .kind = PL_RIGHT_YOURS, .handle = port->proxy->handle };
        return PL_OK;
    }
    bool dead = false;
    pl_status_t status = pl_conn_export_locked(conn, port, out, &dead);
    if (status != PL_OK) return status;
    encoded->exported[encoded->exported_count++] = *out;
    if (dead) encoded->dead[encoded->dead_count++] = out->handle;
    return PL_OK;
}

/* The owner's count of a send-once right it gave out on a message that could not go (the connection broke):
 * taken back if the connection's end has not counted it already. Returns whether it was (the right's notice is
 * then the caller's to post). No lock held. */
static bool pl_proxy_unsend_once(pl_conn_t *conn, uint32_t handle) {
    pthread_mutex_lock(&conn->lock);
    pl_export_t *e = pl_handle_map_get(&conn->exports, handle);
    bool counted = e != NULL && e->once > 0;
    if (counted) e->once--;
    pthread_mutex_unlock(&conn->lock);
    return counted;
}

/* Writes one message (its credit taken, unless `once`: a message through a send-once right). */
static pl_status_t pl_proxy_write(pl_port_t *port, int32_t id, const void *payload, size_t size, pl_port_t *reply,
                                  pl_reply_mode_t mode, bool *reply_taken, const pl_attachment_t *attachments,
                                  uint32_t attachment_count, int64_t timeout_ns, int64_t deadline, bool once) {
    pl_conn_t *conn = port->proxy->conn;
    pl_status_t status = PL_OK;

    /* A large payload goes out of line when the peer takes it: written to a sealed memfd here, before the write
     * lock, so that the copy does not hold up the connection's other senders. If the memfd cannot be made (no
     * descriptor or memory left for it), the message goes in frames, as to an older peer. The memfd is one more
     * descriptor, so a message already carrying the most a packet may have goes in frames too. */
    int ool_fd = -1;
    if (size >= pl_out_of_line_threshold() && attachment_count < PL_WIRE_MAX_ATTACHMENTS) {
        pthread_mutex_lock(&conn->lock);
        bool takes = conn->peer_version >= PL_WIRE_VERSION_OUT_OF_LINE;
        pthread_mutex_unlock(&conn->lock);
        if (takes && pl_ool_make(payload, size, &ool_fd) != PL_OK) ool_fd = -1;
    }
    bool ool = ool_fd >= 0;

    /* Room in the outgoing queue for the whole message, fragments and all. */
    uint32_t first_room = pl_wire_first_fragment_room(attachment_count);
    uint32_t fragments = ool || size <= first_room
                             ? 1
                             : 1 + (uint32_t)((size - first_room + pl_wire_next_fragment_room() - 1) /
                                              pl_wire_next_fragment_room());
    size_t head_size = PL_WIRE_MESSAGE_FIXED + PL_WIRE_RIGHT_SIZE * (1 + (size_t)attachment_count);
    size_t need = (ool ? 0 : size) + (size_t)fragments * head_size;
    /* Each frame's head is built here; its payload bytes are written from the caller's memory (sendmsg's second
     * part), never copied unless the frame has to wait in the outgoing queue. */
    uint8_t frame[PL_WIRE_MESSAGE_FIXED + PL_WIRE_RIGHT_SIZE * (1 + PL_WIRE_MAX_ATTACHMENTS)];
    pthread_mutex_lock(&conn->write_lock);
    /* A message through a send-once right never waits: like a control frame, it is bounded by the rights. */
    while (!once && conn->fd >= 0 && conn->out_head != NULL && conn->out_bytes + need > PL_CONN_OUTGOING_LIMIT) {
        if (timeout_ns == 0 || pl_deadline_passed(deadline)) {
            pthread_mutex_unlock(&conn->write_lock);
            pl_proxy_give_back_credit(port);
            if (ool) close(ool_fd);
            return PL_ERR_TIMED_OUT;
        }
        /* Woken when frames leaving bring out_bytes under room_under (pl_conn.c), or when the queue drains. */
        size_t wanted = need > PL_CONN_ROOM_BATCH ? need : PL_CONN_ROOM_BATCH;
        size_t under = wanted <= PL_CONN_OUTGOING_LIMIT ? PL_CONN_OUTGOING_LIMIT + 1 - wanted : 0;
        if (under > conn->room_under) conn->room_under = under;
        pl_cond_wait_until(&conn->writable, &conn->write_lock, deadline);
    }
    if (conn->fd < 0) {
        pthread_mutex_unlock(&conn->write_lock);
        if (ool) close(ool_fd);
        return PL_ERR_INVALID_DEST;
    }

    /* Rights become handles, descriptors indexes. */
    pl_encoded_t encoded;
    encoded.reply = (pl_wire_right_t){ 0 };
    encoded.fd_count = encoded.exported_count = encoded.dead_count = 0;
    pl_wire_message_t message = { .dest = port->proxy->handle, .id = id, .total_size = (uint32_t)size,
                                  .attachment_count = attachment_count };
    pthread_mutex_lock(&conn->lock);
    if (reply != NULL) status = pl_encode_right_locked(conn, reply, &encoded.reply, &encoded);
    /* A send-once reply right goes as one to a peer that knows them; an older peer gets a send right, and the
     * reply port learns of its end from no-senders, as before version 3. */
    uint32_t once_export = 0;
    if (status == PL_OK && reply != NULL && mode != PL_REPLY_SEND && conn->peer_version >= 3) {
        encoded.reply.flags |= PL_RIGHT_ONCE;
        if (reply->proxy == NULL) {
            pl_export_t *e = pl_handle_map_get(&conn->exports, encoded.reply.handle);
            e->once++;
            once_export = e->handle;
        }
    }
    for (uint32_t i = 0; i < attachment_count && status == PL_OK; i++) {
        if (attachments[i].kind == PL_ATTACHMENT_SEND_RIGHT) {
            status = pl_encode_right_locked(conn, attachments[i].port, &encoded.rights[i], &encoded);
        } else {
            encoded.rights[i] = (pl_wire_right_t){ .kind = PL_RIGHT_FD, .handle = encoded.fd_count };
            encoded.fds[encoded.fd_count++] = attachments[i].fd;
        }
    }
    if (status != PL_OK) {
        if (once_export != 0) ((pl_export_t *)pl_handle_map_get(&conn->exports, once_export))->once--;
        pl_conn_unexport_locked(conn, encoded.exported, encoded.exported_count);
        pthread_mutex_unlock(&conn->lock);
        pthread_mutex_unlock(&conn->write_lock);
        if (!once) pl_proxy_give_back_credit(port);
        if (ool) close(ool_fd);
        return status;
    }
    pthread_mutex_unlock(&conn->lock);
    message.reply = encoded.reply;
    if (ool) encoded.fds[encoded.fd_count++] = ool_fd;
    message.fd_count = encoded.fd_count;
    pl_conn_take_owed(conn, &message.credit_handle, &message.credit_count);

    if (ool) {
        /* One frame, no payload byte in it: the memfd carries them (the frame's queue, if it waits, has a
         * duplicate of the descriptor, so ours is closed either way). */
        uint8_t flags = (uint8_t)(PL_FRAME_OUT_OF_LINE | (once ? PL_FRAME_ONCE : 0));
        size_t head = pl_wire_encode_message_head(frame, flags, &message, encoded.rights, 0);
        status = pl_conn_put_frame_locked(conn, frame, head, encoded.fds, message.fd_count);
        close(ool_fd);
    } else {
        /* The fragments, written back to back. */
        const uint8_t *bytes = payload;
        uint32_t offset = 0;
        do {
            uint32_t room = offset == 0 ? first_room : pl_wire_next_fragment_room();
            uint32_t chunk = size - offset < room ? (uint32_t)(size - offset) : room;
            bool more = offset + chunk < size;
            message.offset = offset;
            uint8_t flags = (uint8_t)((more ? PL_FRAME_MORE : 0) | (once && offset == 0 ? PL_FRAME_ONCE : 0));
            size_t head = pl_wire_encode_message_head(frame, flags, &message, encoded.rights, chunk);
            status = pl_conn_put_frame_parts_locked(conn, frame, head, bytes + offset, chunk, encoded.fds,
                                                    message.fd_count);
            /* Later fragments carry bytes only. */
            message.attachment_count = message.fd_count = 0;
            message.reply = (pl_wire_right_t){ 0 };
            message.credit_handle = message.credit_count = 0;
            offset += chunk;
        } while (status == PL_OK && offset < size);
    }
    for (uint32_t i = 0; i < encoded.dead_count && status == PL_OK; i++) {
        /* A right to a port destroyed before it went: the peer learns it is a dead name. */
        uint8_t control[PL_WIRE_HEADER_SIZE + 12];
        size_t length = pl_wire_encode_control(control, PL_FRAME_DEAD, encoded.dead[i], 0, 0);
        status = pl_conn_put_frame_locked(conn, control, length, NULL, 0);
    }
    pthread_mutex_unlock(&conn->write_lock);

    /* A send-once right given out on a message that did not go (the connection broke) is counted back; a moved
     * one ends there, and its port is told. One that went is the peer's now: the caller's is forgotten. */
    bool unsent_once = status != PL_OK && once_export != 0 && pl_proxy_unsend_once(conn, once_export);
    if (mode == PL_REPLY_MOVE_ONCE && reply != NULL) {
        *reply_taken = true;
        if (unsent_once) pl_port_post_send_once_notice(reply);
        else if (once_export == 0 && reply->proxy == NULL) pl_port_give_back(reply); /* went as a send right */
        pl_port_forget_send_once(reply);
    } else if (mode == PL_REPLY_MAKE_ONCE && reply_taken != NULL) {
        /* The new right exists, counted in the export, which keeps the slot its reply port set aside for it: the
         * peer's message or notice will take it, or the connection's end (pl_credit.c). */
        *reply_taken = once_export != 0 && !unsent_once;
    }
    return status;
}

pl_status_t pl_proxy_send(pl_port_t *port, int32_t id, const void *payload, size_t size, pl_port_t *reply,
                          pl_reply_mode_t mode, bool *reply_taken, const pl_attachment_t *attachments,
                          uint32_t attachment_count, int64_t timeout_ns) {
    pl_conn_t *conn = port->proxy->conn;
    if (reply != NULL && !pl_right_nameable(conn, reply)) return PL_ERR_INVALID_ARG;
    for (uint32_t i = 0; i < attachment_count; i++) {
        if (attachments[i].kind == PL_ATTACHMENT_SEND_RIGHT && !pl_right_nameable(conn, attachments[i].port)) {
            return PL_ERR_INVALID_ARG;
        }
    }
    int64_t deadline = pl_deadline_ns(timeout_ns);
    pl_status_t status = pl_proxy_take_credit(port, timeout_ns, deadline);
    if (status != PL_OK) return status;
    return pl_proxy_write(port, id, payload, size, reply, mode, reply_taken, attachments, attachment_count, timeout_ns,
                          deadline, false);
}

pl_status_t pl_proxy_send_once(pl_port_t *port, int32_t id, const void *payload, size_t size) {
    pl_conn_t *conn = port->proxy->conn;
    pthread_mutex_lock(&conn->lock);
    bool dead = conn->dead;
    pthread_mutex_unlock(&conn->lock);
    /* Gone with its port or its process: the owner has posted the notice, or destroyed the port. */
    if (dead || pl_proxy_dead_name(port)) return PL_ERR_INVALID_DEST;
    return pl_proxy_write(port, id, payload, size, NULL, PL_REPLY_SEND, NULL, NULL, 0, PL_TIMEOUT_FOREVER, 0, true);
}

void pl_proxy_release_send_once(pl_port_t *port) {
    /* To a dead connection the frame goes nowhere: the owner counted the right when the connection ended. */
    pl_conn_write_control(port->proxy->conn, PL_FRAME_ONCE_GONE, port->proxy->handle, 0, 0);
}
