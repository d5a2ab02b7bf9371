/*
 * pl_credit.c — the owner's side of a port used by other processes: exports, and queue room lent as credit.
 *
 * Invariant, per port: count + reserved <= qlimit for everything a sender may still add, where reserved is the
 * sum of `lent` over the port's exports: credit a peer holds, credit on its way to it (in a frame or still owed),
 * and messages on their way from it. A local send waits while count + reserved reaches the limit, so the queue
 * limit holds for local and remote senders together, as one Mach port's does.
 *
 * How much is lent: at most a window of half the queue limit (at least 1) per peer, and never more than the
 * room there is. Room freed by receiving a message that came from a peer goes back to that peer, unless a local
 * sender or another peer is waiting for room: then it goes to them. Room freed by a local message, or by a raised
 * queue limit, goes to a waiting peer too (a waiting local sender takes it first). All of this runs under the
 * port's lock; the frames that tell peers are written after it.
 */
#include "pl_remote.h"

#include <stdlib.h>

static atomic_uint pl_export_count;

uint32_t pl_export_total(void) { return atomic_load_explicit(&pl_export_count, memory_order_relaxed); }

static inline uint32_t pl_window(const pl_port_t *port) { return port->qlimit / 2 > 0 ? port->qlimit / 2 : 1; }

/* The smallest window whose credit goes back before the sender asks for it (pl_remote_room_freed_locked). */
#define PL_CREDIT_EARLY_WINDOW 8u

static inline uint32_t pl_free_room_locked(pl_port_t *port) {
    uint32_t used = port->count + port->reserved;
    if (port->dead || used >= port->qlimit) return 0;
    uint32_t room = port->qlimit - used;
    /* Room lent must be in the ring already, since the transport thread queues into it without allocating: the
     * ring grows here to the whole limit, and when it cannot, only what it holds is lent. */
    uint32_t spoken = pl_ring_spoken_locked(port);
    if (spoken + room > port->ring_capacity) (void)pl_port_ring_grow_locked(port, spoken + room);
    uint32_t in_ring = port->ring_capacity > spoken ? port->ring_capacity - spoken : 0;
    return room < in_ring ? room : in_ring;
}

/* What one grant may lend: a window at most, and half the free room at most (rounded up), so that the next peer
 * to come finds room too; otherwise two peers' windows took a whole queue that held a handful of messages. */
static inline uint32_t pl_lendable_locked(const pl_port_t *port, uint32_t room) {
    uint32_t half = room - room / 2;
    return half < pl_window(port) ? half : pl_window(port);
}

/* The live export of `port` on `conn` (both locks held). One the peer released is skipped even while it is still
 * in the port's list (it leaves it a moment after the table): its handle must not be named again. */
static pl_export_t *pl_find_export_locked(pl_port_t *port, pl_conn_t *conn) {
    for (pl_export_t *e = port->exports; e != NULL; e = e->next_of_port) {
        if (e->conn == conn && !e->released) return e;
    }
    return NULL;
}

/* Adds credit the peer has not been told of; the next frame to it tells it, or the transport when it waits, or the
 * receiver once a quarter of a window is owed (pl_remote_room_freed_locked). Returns what is owed now. */
static uint32_t pl_export_owe(pl_export_t *e, uint32_t count) {
    uint32_t before = atomic_fetch_add_explicit(&e->owed, count, memory_order_acq_rel);
    if (before != 0) return before + count;
    pl_conn_t *conn = e->conn;
    pthread_mutex_lock(&conn->owed_lock);
    if (!e->in_owed_list) {
        e->in_owed_list = true;
        e->next_owed = conn->owed_head;
        conn->owed_head = e;
    }
    pthread_mutex_unlock(&conn->owed_lock);
    return count;
}

/* Gives free room to peers waiting for credit, first come first served (port lock held): by their place in
 * line, not by their place in the port's list, or the newest connections would take every room that frees and
 * an old one could wait for seconds. */
static void pl_give_room_to_waiters_locked(pl_port_t *port) {
    while (port->want_waiters > 0) {
        uint32_t room = pl_free_room_locked(port);
        if (room == 0) return;
        pl_export_t *first = NULL;
        for (pl_export_t *e = port->exports; e != NULL; e = e->next_of_port) {
            if (e->waiting && (first == NULL || e->waiting_turn < first->waiting_turn)) first = e;
        }
        if (first == NULL) return;
        uint32_t grant = pl_lendable_locked(port, room);
        first->waiting = false;
        port->want_waiters--;
        first->lent += grant;
        port->reserved += grant;
        pl_export_owe(first, grant);
        pl_transport_flush_owed(first->conn);
    }
}

/* ---- exporting -------------------------------------------------------------------------------------- */

/* The next handle to give out on a connection (its lock held; fewer than PL_CONN_MAX_RIGHTS are live). Handles go
 * up one by one; after 2^32 - 2 of them they start again from 1, skipping the live ones. A handle is reused only
 * that long after it was released, so no frame naming the old one can still be on its way (a connection giving
 * out a fresh reply port for each of 25,000 requests a second wraps after two days). */
static uint32_t pl_conn_next_handle_locked(pl_conn_t *conn) {
    for (;;) {
        uint32_t handle = conn->next_handle;
        conn->next_handle = handle + 1 >= PL_WIRE_HANDLE_NONE ? 1 : handle + 1;
        if (pl_handle_map_get(&conn->exports, handle) == NULL) return handle;
    }
}

pl_status_t pl_conn_export_locked(pl_conn_t *conn, pl_port_t *port, pl_wire_right_t *out_right, bool *out_dead) {
    pthread_mutex_lock(&port->lock);
    pl_export_t *e = pl_find_export_locked(port, conn);
    if (e == NULL) {
        if (conn->exports.count >= PL_CONN_MAX_RIGHTS) {
            pthread_mutex_unlock(&port->lock);
            return PL_ERR_NO_SPACE;
        }
        /* Credit is lent only for room the ring holds (pl_free_room_locked): the ring of a port whose right goes to
         * another process holds its whole limit first. Without memory for it the right does not go; given with no
         * credit, its holder would wait for room that nothing makes. */
        if (!port->dead && pl_port_ring_grow_locked(port, port->qlimit + port->set_aside) != PL_OK) {
            pthread_mutex_unlock(&port->lock);
            return PL_ERR_NO_MEMORY;
        }
        uint32_t handle = pl_conn_next_handle_locked(conn);
        e = calloc(1, sizeof *e);
        if (e == NULL || !pl_handle_map_put(&conn->exports, handle, e)) {
            pthread_mutex_unlock(&port->lock);
            free(e);
            return PL_ERR_NO_MEMORY;
        }
        atomic_init(&e->refs, 1); /* the table's */
        e->handle = handle;
        e->port = port;
        pl_port_make_send(port); /* the peer's rights count as one of the port's send rights */
        e->conn = conn;
        pl_conn_retain(conn);
        atomic_init(&e->owed, 0);
        /* The peer is known and stays: a service's side has it from the socket before its first export, a client's
         * from the service's hello, before which it holds no proxy to send a right through. */
        e->plain = (pl_msg_extra_t){ .origin = e, .sender = conn->peer, .flags = PL_MSG_SHARED };
        e->next_of_port = port->exports;
        port->exports = e;
        atomic_fetch_add_explicit(&pl_export_count, 1, memory_order_relaxed);
    }
    e->transfers++;
    /* Credit goes with the right: what is owed already, and a window's worth if the peer holds none. */
    uint32_t grant = atomic_exchange_explicit(&e->owed, 0, memory_order_acq_rel);
    if (e->lent == grant) {
        uint32_t room = pl_free_room_locked(port);
        uint32_t more = pl_lendable_locked(port, room);
        e->lent += more;
        port->reserved += more;
        grant += more;
    }
    *out_right = (pl_wire_right_t){ .kind = PL_RIGHT_SENDERS, .handle = e->handle, .credits = grant,
                                    .max_size = port->max_msg_size,
                                    .flags = port->no_senders_wakes || pl_notify_watches_senders_locked(port)
                                                 ? PL_RIGHT_PROMPT : 0 };
    *out_dead = port->dead;
    pthread_mutex_unlock(&port->lock);
    return PL_OK;
}

void pl_export_drop(pl_export_t *e) {
    pl_port_t *port = e->port;
    pl_conn_t *conn = e->conn;
    pthread_mutex_lock(&port->lock);
    for (pl_export_t **link = &port->exports; *link != NULL; link = &(*link)->next_of_port) {
        if (*link == e) {
            *link = e->next_of_port;
            break;
        }
    }
    port->reserved -= e->lent;
    e->lent = 0;
    e->dropped = true; /* messages still queued that came through it lend nothing back */
    if (e->waiting) port->want_waiters--;
    pl_give_room_to_waiters_locked(port);
    bool wake = port->waiting_senders > 0;
    pthread_mutex_unlock(&port->lock);
    if (wake) pthread_cond_broadcast(&port->senders);

    pthread_mutex_lock(&conn->owed_lock);
    if (e->in_owed_list) {
        for (pl_export_t **link = &conn->owed_head; *link != NULL; link = &(*link)->next_owed) {
            if (*link == e) {
                *link = e->next_owed;
                break;
            }
        }
    }
    pthread_mutex_unlock(&conn->owed_lock);
    /* Send-once rights the peer still held when it let go of the handle or ended: each is told, before the
     * port may learn that no sender is left. (Out of the table, the export is this thread's alone.) */
    for (; e->once > 0; e->once--) pl_port_post_send_once_notice(port);
    pl_port_release_send(port); /* may tell a receiver that no sender is left */
    pl_conn_release(conn);
    atomic_fetch_sub_explicit(&pl_export_count, 1, memory_order_relaxed);
    pl_export_release(e); /* the table's reference */
}

void pl_export_retain(pl_export_t *e) { atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed); }

void pl_export_release(pl_export_t *e) {
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) free(e);
}

bool pl_conn_take_owed(pl_conn_t *conn, uint32_t *handle, uint32_t *count) {
    pthread_mutex_lock(&conn->owed_lock);
    while (conn->owed_head != NULL) {
        pl_export_t *e = conn->owed_head;
        conn->owed_head = e->next_owed;
        e->in_owed_list = false;
        uint32_t owed = atomic_exchange_explicit(&e->owed, 0, memory_order_acq_rel);
        if (owed > 0) {
            *handle = e->handle;
            *count = owed;
            pthread_mutex_unlock(&conn->owed_lock);
            return true;
        }
    }
    pthread_mutex_unlock(&conn->owed_lock);
    return false;
}

void pl_conn_flush_owed(pl_conn_t *conn) {
    uint32_t handle, count;
    while (pl_conn_take_owed(conn, &handle, &count)) pl_conn_write_control(conn, PL_FRAME_CREDIT, handle, count, 0);
}

/* ---- the receiving side: room comes back ------------------------------------------------------------ */

void pl_remote_room_freed_locked(pl_port_t *port, pl_export_t *e) {
    if (port->waiting_senders > 0) return; /* the dequeuer signals one; the room is theirs */
    if (port->want_waiters > 0) {
        pl_give_room_to_waiters_locked(port);
        return;
    }
    /* No search: the message kept its export, dropped or not (dropping takes this lock too). */
    if (e == NULL || e->dropped || pl_free_room_locked(port) == 0 || e->lent >= pl_window(port)) return;
    e->lent++;
    port->reserved++;
    /* A sender streaming one way gets no reply to carry its credit back: it would spend its window, ask, and wait a
     * round trip of wake-ups for more (at 8-byte messages, every 512). Once a quarter of the window is owed, the
     * receiver sends it as soon as it lets go of the port's lock; a second connection due in the same batch, the
     * transport does. A window under 8 is a port that holds its senders back, most often a request port whose
     * replies carry its credit: a frame of its own would cost the peer a wake-up. */
    uint32_t window = pl_window(port);
    if (pl_export_owe(e, 1) != window / 4 || window < PL_CREDIT_EARLY_WINDOW) return;
    if (port->credit_due == NULL) {
        pl_conn_retain(e->conn);
        port->credit_due = e->conn;
    } else if (port->credit_due != e->conn) {
        pl_transport_flush_owed(e->conn);
    }
}

void pl_remote_room_grown_locked(pl_port_t *port) { pl_give_room_to_waiters_locked(port); }

void pl_credit_send_due(pl_conn_t *conn) {
    if (conn == NULL) return;
    pl_conn_flush_owed(conn);
    pl_conn_release(conn);
}

/* ---- frames from holders ----------------------------------------------------------------------------- */

/* The export a peer names, or NULL. Only the transport thread frees exports, and it is the caller, so the
 * entry outlives the call. */
static pl_export_t *pl_export_named(pl_conn_t *conn, uint32_t handle) {
    pthread_mutex_lock(&conn->lock);
    pl_export_t *e = pl_handle_map_get(&conn->exports, handle);
    pthread_mutex_unlock(&conn->lock);
    return e;
}

bool pl_credit_want(pl_conn_t *conn, uint32_t handle, uint32_t flags, const char **reason) {
    pl_export_t *e = pl_export_named(conn, handle);
    if (e == NULL) {
        *reason = "want: a handle never given out";
        return false;
    }
    pl_port_t *port = e->port;
    pthread_mutex_lock(&port->lock);
    uint32_t grant = atomic_exchange_explicit(&e->owed, 0, memory_order_acq_rel);
    uint32_t window = pl_window(port);
    if (window > e->lent) {
        uint32_t lendable = pl_lendable_locked(port, pl_free_room_locked(port));
        uint32_t more = lendable < window - e->lent ? lendable : window - e->lent;
        e->lent += more;
        port->reserved += more;
        grant += more;
    }
    bool waits = (flags & PL_WANT_WAIT) != 0;
    bool reclaim = false;
    if (grant == 0 && waits && !e->waiting && !port->dead) {
        e->waiting = true;
        port->want_waiters++;
        e->waiting_turn = port->want_turns++;
        /* The room may all be lent to peers that do not use it (a client that looked the port up and sits
         * idle): ask for it back, as a local sender that waits does, or this peer would wait for ever. */
        reclaim = port->reserved > 0;
    } else if (grant > 0 && e->waiting) {
        e->waiting = false;
        port->want_waiters--;
    }
    pthread_mutex_unlock(&port->lock);
    if (grant > 0 || !waits) pl_conn_write_control(conn, PL_FRAME_CREDIT, handle, grant, 0);
    if (reclaim) pl_remote_reclaim(port);
    return true;
}

/* Takes back `count` credits the peer says it holds (port lock held). false: it holds fewer. */
static bool pl_take_back_locked(pl_export_t *e, uint32_t count) {
    uint32_t held = e->lent - atomic_load_explicit(&e->owed, memory_order_acquire);
    if (count > held) return false;
    e->lent -= count;
    e->port->reserved -= count;
    return true;
}

bool pl_credit_returned(pl_conn_t *conn, uint32_t handle, uint32_t count, const char **reason) {
    pl_export_t *e = pl_export_named(conn, handle);
    if (e == NULL) return true; /* credit that crossed the holder's release: released with it already */
    pl_port_t *port = e->port;
    pthread_mutex_lock(&port->lock);
    bool held = pl_take_back_locked(e, count);
    e->reclaiming = false;
    port->reclaim_asked = false; /* answered: a sender still waiting may ask the others again */
    if (held) pl_give_room_to_waiters_locked(port);
    bool wake = held && count > 0 && port->waiting_senders > 0;
    pthread_mutex_unlock(&port->lock);
    if (wake) pthread_cond_broadcast(&port->senders);
    if (!held) *reason = "return: more credit than lent";
    return held;
}

bool pl_credit_released(pl_conn_t *conn, uint32_t handle, uint32_t transfers, uint32_t credits,
                        const char **reason) {
    pl_export_t *e = pl_export_named(conn, handle);
    if (e == NULL) {
        *reason = "release: a handle never given out";
        return false;
    }
    pl_port_t *port = e->port;
    pthread_mutex_lock(&port->lock);
    bool held = pl_take_back_locked(e, credits);
    if (held) {
        /* A RELEASE that crossed our RECLAIM answers it: the holder, no longer knowing the handle, will not. */
        e->reclaiming = false;
        port->reclaim_asked = false;
        pl_give_room_to_waiters_locked(port);
    }
    bool wake = held && credits > 0 && port->waiting_senders > 0;
    pthread_mutex_unlock(&port->lock);
    if (wake) pthread_cond_broadcast(&port->senders);
    if (!held) {
        *reason = "release: more credit than lent";
        return false;
    }

    pthread_mutex_lock(&conn->lock);
    bool counted = transfers <= e->transfers;
    if (counted) e->transfers -= transfers;
    bool last = counted && e->transfers == 0;
    if (last) {
        pl_handle_map_remove(&conn->exports, handle);
        e->released = true;
    }
    pthread_mutex_unlock(&conn->lock);
    if (!counted) {
        *reason = "release: more rights than sent";
        return false;
    }
    if (last) {
        pl_export_drop(e);
        pl_conn_end_if_unused(conn); /* a client's last right may have been this one */
    }
    return true;
}

/* ---- the sending side of the owner: reclaim, death ------------------------------------------------- */

typedef struct pl_notice {
    pl_conn_t *conn;
    uint32_t handle;
} pl_notice_t;

/* Frames are written a batch at a time, after the port's lock is let go, from an array on the stack: telling
 * peers of a port's death or asking back credit allocates nothing, so it cannot fail for memory. */
#define PL_NOTICE_BATCH 16u

/* Collects (connection, handle) for up to PL_NOTICE_BATCH exports that `pick` selects (port lock held); `pick`
 * marks what it selects, so the next batch goes on from there. The caller writes the frames. */
static uint32_t pl_collect_locked(pl_port_t *port, pl_notice_t *out, bool (*pick)(pl_export_t *e)) {
    uint32_t count = 0;
    for (pl_export_t *e = port->exports; e != NULL && count < PL_NOTICE_BATCH; e = e->next_of_port) {
        if (!pick(e)) continue;
        pl_conn_retain(e->conn);
        out[count++] = (pl_notice_t){ .conn = e->conn, .handle = e->handle };
    }
    return count;
}

static bool pl_pick_for_reclaim(pl_export_t *e) {
    /* Owed credit the peer never heard of comes back at once; what it holds it is asked for. The owed credit may
     * have been the answer to a WANT of the peer's (room given to a waiter): the RECLAIM then stands for that
     * answer, and the peer asks again, so it is sent even while an earlier one is unanswered. */
    uint32_t owed = atomic_exchange_explicit(&e->owed, 0, memory_order_acq_rel);
    e->lent -= owed;
    e->port->reserved -= owed;
    if (owed == 0 && (e->lent == 0 || e->reclaiming)) return false;
    e->reclaiming = true;
    return true;
}

static bool pl_pick_for_death(pl_export_t *e) {
    if (e->dead_told) return false;
    e->dead_told = true;
    return true;
}

static void pl_notify(const pl_notice_t *notices, uint32_t count, pl_frame_type_t type) {
    for (uint32_t i = 0; i < count; i++) {
        pl_conn_write_control(notices[i].conn, type, notices[i].handle, 0, 0);
        pl_conn_release(notices[i].conn);
    }
}

void pl_remote_reclaim(pl_port_t *port) {
    pl_notice_t notices[PL_NOTICE_BATCH];
    uint32_t count;
    do {
        pthread_mutex_lock(&port->lock);
        count = pl_collect_locked(port, notices, pl_pick_for_reclaim);
        bool room = !pl_port_full_locked(port);
        pthread_mutex_unlock(&port->lock);
        if (room) pthread_cond_broadcast(&port->senders);
        pl_notify(notices, count, PL_FRAME_RECLAIM);
    } while (count == PL_NOTICE_BATCH);
}

void pl_remote_port_destroyed(pl_port_t *port) {
    pl_notice_t notices[PL_NOTICE_BATCH];
    uint32_t count;
    pl_service_t *service;
    do {
        pthread_mutex_lock(&port->lock);
        count = pl_collect_locked(port, notices, pl_pick_for_death);
        service = port->service;
        pthread_mutex_unlock(&port->lock);
        pl_notify(notices, count, PL_FRAME_DEAD);
    } while (count == PL_NOTICE_BATCH);
    if (service != NULL) {
        /* The name goes now, on this thread, so that a process that exits right after destroying the port
         * leaves no socket behind; the listening socket and the lock are the transport thread's to close. The
         * withdrawal is counted as begun first: a check-in that finds the name gone waits for it. */
        pl_transport_withdrawal_begin();
        pl_service_unlink(service);
        pl_transport_withdraw(port, service);
    }
}

void pl_export_drop_if_unused(pl_conn_t *conn, uint32_t handle) {
    pthread_mutex_lock(&conn->lock);
    pl_export_t *e = pl_handle_map_get(&conn->exports, handle);
    bool unused = e != NULL && e->transfers == 0;
    if (unused) {
        pl_handle_map_remove(&conn->exports, handle);
        e->released = true;
    }
    pthread_mutex_unlock(&conn->lock);
    if (unused) {
        pl_export_drop(e);
        pl_conn_end_if_unused(conn);
    }
}

void pl_conn_unexport_locked(pl_conn_t *conn, const pl_wire_right_t *rights, uint32_t count) {
    for (uint32_t i = 0; i < count; i++) {
        pl_export_t *e = pl_handle_map_get(&conn->exports, rights[i].handle);
        if (e == NULL) continue;
        if (e->transfers > 1 && rights[i].credits > 0) {
            /* The peer holds the right already: the credit stays its own, owed, since it may be the answer to a
             * WANT of the peer's, which would not ask again. */
            pl_export_owe(e, rights[i].credits);
            pl_transport_flush_owed(conn);
        } else if (rights[i].credits > 0) {
            pthread_mutex_lock(&e->port->lock);
            e->lent -= rights[i].credits;
            e->port->reserved -= rights[i].credits;
            pthread_mutex_unlock(&e->port->lock);
        }
        /* An entry left with no transfer is the transport thread's to drop: only it frees exports, which lets it
         * use one after letting go of the connection's lock. */
        if (--e->transfers == 0) pl_transport_drop_export(conn, e->handle);
    }
}
