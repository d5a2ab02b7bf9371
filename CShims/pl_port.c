/*
 * pl_port.c — ports: bounded FIFO queues with one receive right and many send rights.
 *
 * A port's queue is a ring of slots guarded by the port's mutex. Senders copy the payload before taking
 * the lock (large payloads are the only allocation on the send path), decide under the lock whom to wake,
 * and wake them after unlocking. See portloop.h for the design.
 */
#include "pl_remote.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_uint_fast64_t pl_next_port_name = 1;

/* ---- lifetime -------------------------------------------------------------------------------------- */

/* A new port with one memory reference: its receive right, or for a proxy the connection's import table. */
static pl_port_t *pl_port_alloc(uint32_t qlimit, uint32_t max_msg_size) {
    pl_port_t *port = calloc(1, sizeof *port);
    if (port == NULL) return NULL;
    port->magic = PL_PORT_MAGIC;
    pl_mutex_init_adaptive(&port->lock);
    pl_futex_cond_init(&port->receivers);
    pl_cond_init_monotonic(&port->senders);
    atomic_init(&port->refs, 1);
    atomic_init(&port->send_rights, 0);
    atomic_init(&port->send_once_rights, 0);
    atomic_init(&port->make_sends, 0);
    atomic_init(&port->context, NULL);
    port->name = atomic_fetch_add_explicit(&pl_next_port_name, 1, memory_order_relaxed);
    port->qlimit = qlimit;
    port->max_msg_size = max_msg_size;
    return port;
}

pl_status_t pl_port_create(uint32_t qlimit, uint32_t max_msg_size, pl_port_t **out_port) {
    if (out_port == NULL) return PL_ERR_INVALID_ARG;
    *out_port = NULL;
    if (qlimit < 1 || qlimit > PL_QLIMIT_MAX) return PL_ERR_INVALID_ARG;
    if (max_msg_size < 1 || max_msg_size > PL_MSG_SIZE_MAX) return PL_ERR_INVALID_ARG;
    *out_port = pl_port_alloc(qlimit, max_msg_size);
    return *out_port != NULL ? PL_OK : PL_ERR_NO_MEMORY;
}

void pl_port_retain_internal(pl_port_t *port) {
    atomic_fetch_add_explicit(&port->refs, 1, memory_order_relaxed);
}

pl_port_t *pl_port_new_proxy(pl_proxy_t *proxy) {
    pl_port_t *port = pl_port_alloc(1, proxy->max_size); /* a proxy has no queue of its own */
    if (port != NULL) port->proxy = proxy;
    return port;
}

int pl_port_is_remote(const pl_port_t *port) { return port != NULL && port->proxy != NULL; }

void pl_port_release_internal(pl_port_t *port) {
    if (atomic_fetch_sub_explicit(&port->refs, 1, memory_order_acq_rel) != 1) return;
    /* Last reference: the receive right was destroyed before (it holds a reference), so the queue is
     * empty and the port is in no set. */
    if (port->proxy != NULL) pl_proxy_free(port->proxy);
    free(port->ring);
    pthread_cond_destroy(&port->senders);
    pthread_mutex_destroy(&port->lock);
    port->magic = 0;
    free(port);
}

static void pl_extra_free(pl_msg_extra_t *extra) {
    if (extra == NULL) return;
    bool shared = (extra->flags & PL_MSG_SHARED) != 0; /* read first: the release may free the export holding it */
    pl_attachments_free(extra->attachments);
    if (extra->origin != NULL) pl_export_release(extra->origin);
    if (!shared) free(extra);
}

/* Releases what a queued message owns. Called without any port lock held. */
void pl_slot_dispose(pl_slot_t *slot) {
    if (slot->size > PL_INLINE_PAYLOAD) pl_ool_release(slot->payload.heap, slot->size, pl_slot_payload_mapped(slot->extra));
    if (slot->reply != NULL) {
        /* A request destroyed unanswered: its send-once right tells the reply port so. */
        if (slot->reply_once) pl_port_release_send_once(slot->reply); else pl_port_release_send(slot->reply);
    }
    pl_extra_free(slot->extra);
}

pl_attachments_t *pl_attachments_new(uint32_t count) {
    pl_attachments_t *a = calloc(1, sizeof *a + sizeof a->items[0] * count);
    if (a == NULL) return NULL;
    a->count = count;
    for (uint32_t i = 0; i < count; i++) a->items[i].fd = -1;
    return a;
}

void pl_attachments_free(pl_attachments_t *attachments) {
    if (attachments == NULL) return;
    for (uint32_t i = 0; i < attachments->count; i++) {
        pl_attachment_t *item = &attachments->items[i];
        if (item->port != NULL) pl_port_release_send(item->port);
        if (item->fd >= 0) close(item->fd);
    }
    free(attachments);
}

pl_status_t pl_port_destroy(pl_port_t *port) {
    if (port == NULL) return PL_ERR_INVALID_ARG;
    assert(port->magic == PL_PORT_MAGIC && "pl_port_destroy on a port whose memory was freed: destroyed twice?");
    pthread_mutex_lock(&port->lock);
    if (port->dead) {
        pthread_mutex_unlock(&port->lock);
        return PL_ERR_INVALID_NAME;
    }
    port->dead = true;

    pl_slot_t *ring = port->ring;
    uint32_t capacity = port->ring_capacity, head = port->head, count = port->count;
    port->ring = NULL;
    port->ring_capacity = port->head = port->count = 0;

    pl_membership_t *m = port->memberships;
    port->memberships = NULL;
    while (m != NULL) {
        pl_membership_t *next = m->next_of_port;
        pl_port_set_unlink_locked(m);
        free(m);
        m = next;
    }
    bool wake_receivers = port->waiting_receivers > 0;
    bool wake_senders = port->waiting_senders > 0;
    bool remote = port->exports != NULL || port->service != NULL;
    struct pl_notification *requests = pl_notify_take_all_locked(port);
    pthread_mutex_unlock(&port->lock);

    if (wake_receivers) pl_futex_cond_broadcast(&port->receivers);
    if (wake_senders) pthread_cond_broadcast(&port->senders);
    for (uint32_t i = 0; i < count; i++) pl_slot_dispose(&ring[(head + i) % capacity]);
    free(ring);
    if (remote) pl_remote_port_destroyed(port);
    pl_notify_deliver(requests);
    pl_port_release_internal(port); /* the receive right's reference */
    return PL_OK;
}

pl_status_t pl_port_make_send(pl_port_t *port) {
    if (port == NULL) return PL_ERR_INVALID_ARG;
    /* send_rights before make_sends, both sequentially consistent: pl_notify.c relies on the order. */
    atomic_fetch_add(&port->send_rights, 1);
    atomic_fetch_add(&port->make_sends, 1);
    pl_port_retain_internal(port);
    return PL_OK;
}

/* After a port's last send or send-once right went (no lock held): a receiver waiting for a reply that can no
 * longer come is woken, directly or through its sets, which report the port as PL_ERR_NO_SENDERS; no-senders
 * requests due now fire. */
static void pl_port_last_right_gone(pl_port_t *port) {
    pl_wake_list_t wakes = { .count = 0 };
    pthread_mutex_lock(&port->lock);
    struct pl_notification *due = port->notifications != NULL ? pl_notify_take_no_senders_locked(port) : NULL;
    bool senderless = pl_port_senderless_locked(port);
    bool wake = senderless && port->waiting_receivers > 0;
    if (senderless) {
        for (pl_membership_t *m = port->memberships; m != NULL; m = m->next_of_port) {
            pl_port_set_mark_ready_locked(m, false, &wakes);
        }
    }
    pthread_mutex_unlock(&port->lock);
    if (wake) pl_futex_cond_broadcast(&port->receivers);
    pl_wake_list_run(&wakes);
    pl_notify_deliver(due);
}

/* Takes one of `counter`'s rights if there is one: a release too many must not take another reference. */
static bool pl_take_right(atomic_uint *counter, unsigned *left) {
    unsigned rights = atomic_load_explicit(counter, memory_order_relaxed);
    do {
        if (rights == 0) return false;
    } while (!atomic_compare_exchange_weak_explicit(counter, &rights, rights - 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    *left = rights - 1;
    return true;
}

pl_status_t pl_port_release_send(pl_port_t *port) {
    if (port == NULL) return PL_ERR_INVALID_ARG;
    unsigned left;
    if (!pl_take_right(&port->send_rights, &left)) return PL_ERR_INVALID_NAME;
    if (left == 0) {
        if (port->proxy != NULL) {
            pl_proxy_unused(port); /* tell the owner; a transfer arriving meanwhile revives it */
        } else {
            pl_port_last_right_gone(port);
        }
    }
    pl_port_release_internal(port);
    return PL_OK;
}

void pl_port_set_no_senders_wakes(pl_port_t *port, int enabled) {
    if (port == NULL || port->proxy != NULL) return;
    pthread_mutex_lock(&port->lock);
    port->no_senders_wakes = enabled != 0;
    pthread_mutex_unlock(&port->lock);
}

uint32_t pl_port_send_right_count(const pl_port_t *port) {
    return port == NULL ? 0 : atomic_load_explicit(&port->send_rights, memory_order_relaxed);
}

uint64_t pl_port_name(const pl_port_t *port) { return port == NULL ? 0 : port->name; }

int pl_port_is_alive(const pl_port_t *port) {
    if (port == NULL) return 0;
    pl_port_t *p = (pl_port_t *)port;
    pthread_mutex_lock(&p->lock);
    bool alive = !p->dead;
    pthread_mutex_unlock(&p->lock);
    /* A proxy whose connection is ending is a dead name already: a sender woken by the end may look at once. */
    if (alive && p->proxy != NULL && atomic_load_explicit(&p->proxy->conn->ended, memory_order_acquire)) alive = false;
    return alive;
}

void pl_port_set_context(pl_port_t *port, void *context) {
    if (port != NULL) atomic_store_explicit(&port->context, context, memory_order_release);
}

void *pl_port_get_context(const pl_port_t *port) {
    if (port == NULL) return NULL;
    return atomic_load_explicit(&((pl_port_t *)port)->context, memory_order_acquire);
}

/* ---- attributes ------------------------------------------------------------------------------------ */

pl_status_t pl_port_set_qlimit(pl_port_t *port, uint32_t qlimit) {
    if (port == NULL || qlimit < 1 || qlimit > PL_QLIMIT_MAX) return PL_ERR_INVALID_ARG;
    pthread_mutex_lock(&port->lock);
    if (port->dead) {
        pthread_mutex_unlock(&port->lock);
        return PL_ERR_INVALID_NAME;
    }
    bool raised = qlimit > port->qlimit;
    port->qlimit = qlimit;
    if (raised && port->want_waiters > 0) pl_remote_room_grown_locked(port); /* peers waiting share the new room */
    bool wake = raised && port->waiting_senders > 0;
    pthread_mutex_unlock(&port->lock);
    if (wake) pthread_cond_broadcast(&port->senders);
    return PL_OK;
}

uint32_t pl_port_get_qlimit(const pl_port_t *port) {
    if (port == NULL) return 0;
    pl_port_t *p = (pl_port_t *)port;
    pthread_mutex_lock(&p->lock);
    uint32_t q = p->qlimit;
    pthread_mutex_unlock(&p->lock);
    return q;
}

uint32_t pl_port_get_max_msg_size(const pl_port_t *port) { return port == NULL ? 0 : port->max_msg_size; }

uint32_t pl_port_message_count(const pl_port_t *port) {
    if (port == NULL) return 0;
    pl_port_t *p = (pl_port_t *)port;
    pthread_mutex_lock(&p->lock);
    uint32_t n = p->count;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* ---- send ------------------------------------------------------------------------------------------ */

/* Copies a payload into a slot; false when a large payload's allocation fails. */
static bool pl_slot_fill(pl_slot_t *slot, int32_t id, const void *payload, size_t size) {
    *slot = (pl_slot_t){ .id = id, .size = (uint32_t)size, .reply = NULL, .extra = NULL };
    if (size > PL_INLINE_PAYLOAD) {
        slot->payload.heap = pl_payload_cache_take(size);
        if (slot->payload.heap == NULL) return false;
        /* Into a kept buffer that the receiver, on another thread, read last: see pl_copy.c. */
        pl_copier_copy(pl_thread_copier(), slot->payload.heap, payload, size);
    } else if (size > 0) {
        memcpy(slot->payload.bytes, payload, size);
    }
    return true;
}

/* Copies the caller's attachments for a local message: a new send right per port, a duplicate per descriptor.
 * All or none. */
static pl_status_t pl_attachments_copy(const pl_attachment_t *items, uint32_t count, pl_attachments_t **out) {
    *out = NULL;
    if (count == 0) return PL_OK;
    pl_attachments_t *copy = pl_attachments_new(count);
    if (copy == NULL) return PL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < count; i++) {
        pl_attachment_t *to = &copy->items[i];
        to->kind = items[i].kind;
        if (items[i].kind == PL_ATTACHMENT_SEND_RIGHT) {
            pl_port_make_send(items[i].port);
            to->port = items[i].port;
        } else {
            to->fd = fcntl(items[i].fd, F_DUPFD_CLOEXEC, 0);
            if (to->fd < 0) {
                pl_status_t status = errno == EBADF ? PL_ERR_INVALID_ARG : pl_system_failure("fcntl(F_DUPFD_CLOEXEC)");
                int saved = errno;
                pl_attachments_free(copy);
                errno = saved;
                return status;
            }
        }
    }
    *out = copy;
    return PL_OK;
}

/* Checks a caller's attachments before anything is made of them. */
static pl_status_t pl_attachments_check(const pl_attachment_t *items, uint32_t count) {
    if (count > PL_MAX_ATTACHMENTS || (count > 0 && items == NULL)) return PL_ERR_INVALID_ARG;
    for (uint32_t i = 0; i < count; i++) {
        switch (items[i].kind) {
        case PL_ATTACHMENT_SEND_RIGHT:
            if (items[i].port == NULL) return PL_ERR_INVALID_ARG;
            break;
        case PL_ATTACHMENT_FD:
            if (items[i].fd < 0) return PL_ERR_INVALID_ARG;
            break;
        default:
            return PL_ERR_INVALID_ARG;
        }
    }
    return PL_OK;
}

/* After a message was queued, with the port lock held: unlocks, then wakes whoever must look. Only the
 * empty → non-empty transition wakes anyone; later messages are found by the receiver that was woken, which
 * passes the baton on if others wait. A message put back first (at_head) puts the port first in its sets. */
static void pl_port_wake_after_enqueue_unlock(pl_port_t *port, bool at_head) {
    bool wake_receiver = false;
    pl_wake_list_t wakes = { .count = 0 };
    if (port->count == 1) {
        wake_receiver = port->waiting_receivers > 0;
        for (pl_membership_t *m = port->memberships; m != NULL; m = m->next_of_port) {
            pl_port_set_mark_ready_locked(m, at_head, &wakes);
        }
    }
    pthread_mutex_unlock(&port->lock);

    if (wake_receiver) pl_futex_cond_signal(&port->receivers);
    pl_wake_list_run(&wakes);
}

pl_status_t pl_port_ring_grow_locked(pl_port_t *port, uint32_t needed) {
    if (needed <= port->ring_capacity) return PL_OK;
    uint32_t capacity = port->ring_capacity == 0 ? 4 : port->ring_capacity * 2;
    if (capacity > port->qlimit + port->set_aside) capacity = port->qlimit + port->set_aside;
    if (capacity < needed) capacity = needed;
    pl_slot_t *ring = malloc(sizeof *ring * capacity);
    if (ring == NULL) return PL_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < port->count; i++) {
        ring[i] = port->ring[(port->head + i) % port->ring_capacity];
    }
    free(port->ring);
    port->ring = ring;
    port->ring_capacity = capacity;
    port->head = 0;
    return PL_OK;
}

/* Makes room for one more slot besides those spoken for; the lock is held. The queue is below its limit, except
 * when a message is put back (pl_port_requeue), which may take it over. */
static inline pl_status_t pl_ring_reserve_locked(pl_port_t *port) {
    uint32_t spoken = pl_ring_spoken_locked(port);
    return spoken < port->ring_capacity ? PL_OK : pl_port_ring_grow_locked(port, spoken + 1);
}

pl_status_t pl_port_set_aside(pl_port_t *port) {
    pthread_mutex_lock(&port->lock);
    pl_status_t status = port->dead ? PL_OK : pl_port_ring_grow_locked(port, pl_ring_spoken_locked(port) + 1);
    if (status == PL_OK) port->set_aside++;
    pthread_mutex_unlock(&port->lock);
    return status;
}

void pl_port_give_back(pl_port_t *port) {
    pthread_mutex_lock(&port->lock);
    port->set_aside--;
    pthread_mutex_unlock(&port->lock);
}

/* Queues a slot into the room set aside for it (lock held): nothing to allocate, since the ring always holds every
 * slot spoken for. The slot is taken either way; a dead port queues nothing (false). */
static bool pl_ring_put_set_aside_locked(pl_port_t *port, const pl_slot_t *slot) {
    port->set_aside--;
    if (port->dead) return false;
    port->ring[(port->head + port->count) % port->ring_capacity] = *slot;
    port->count++;
    return true;
}

/* How long a waiting sender sleeps at most before it looks for room again, signalled or not. */
#define PL_SENDER_LOOK_NS 1000000000LL

/* Waits for room as a local sender (lock held). Room lent to other processes and not used is reclaimed. */
static pl_status_t pl_port_wait_for_room_locked(pl_port_t *port, int64_t timeout_ns) {
    if (port->dead || !pl_port_full_locked(port)) return PL_OK;
    if (timeout_ns == 0) return PL_ERR_TIMED_OUT;
    int64_t deadline = pl_deadline_ns(timeout_ns);
    port->waiting_senders++;
    while (!port->dead && pl_port_full_locked(port) && !pl_deadline_passed(deadline)) {
        if (port->reserved > 0 && !port->reclaim_asked) {
            port->reclaim_asked = true;
            pthread_mutex_unlock(&port->lock);
            pl_remote_reclaim(port);
            pthread_mutex_lock(&port->lock);
            /* A dequeue meanwhile may have signalled this sender, which was not waiting: count the signal as
             * consumed, or the count stays one high and a sender that waits alone later is never signalled. */
            if (port->sender_wakes_pending > 0) port->sender_wakes_pending--;
            continue;
        }
        /* A signal that woke nobody (glibc's condition variable has been known to lose one: its bug 25847) would
         * leave this sender's wake counted as pending, and no dequeue would signal it again while it is the only
         * one waiting: so it looks for room again at least every PL_SENDER_LOOK_NS. */
        int64_t look = pl_now_ns() + PL_SENDER_LOOK_NS;
        pl_cond_wait_until(&port->senders, &port->lock, deadline < look ? deadline : look);
        /* Woken, timed out or spurious: count one signal as consumed. Counting a timeout too only
         * means a later dequeue signals once more than needed. */
        if (port->sender_wakes_pending > 0) port->sender_wakes_pending--;
    }
    /* The next sender that finds the port full asks again: other processes may hold room by then. */
    if (--port->waiting_senders == 0) port->reclaim_asked = false;
    return (!port->dead && pl_port_full_locked(port)) ? PL_ERR_TIMED_OUT : PL_OK;
}

/* Queues a filled slot from a local sender, waiting for room; the reply right — a send right or a send-once right,
 * see pl_reply_mode_t — is made only once it is in. On error the caller still owns the slot. */
static inline pl_status_t pl_port_enqueue_local(pl_port_t *port, pl_slot_t *slot, pl_port_t *reply,
                                                pl_reply_mode_t mode, bool *reply_taken, int64_t timeout_ns) {
    pthread_mutex_lock(&port->lock);
    pl_status_t status = pl_port_wait_for_room_locked(port, timeout_ns);
    if (status == PL_OK && port->dead) status = PL_ERR_INVALID_DEST;
    if (status == PL_OK) status = pl_ring_reserve_locked(port);
    if (status != PL_OK) {
        pthread_mutex_unlock(&port->lock);
        return status;
    }

    if (reply != NULL) {
        if (mode == PL_REPLY_SEND) pl_port_make_send(reply);
        else if (mode == PL_REPLY_MAKE_ONCE) pl_port_add_send_once(reply); /* its slot set aside before */
        if (mode != PL_REPLY_SEND) *reply_taken = true; /* the new right is made, or the caller's moves in */
        slot->reply = reply;
        slot->reply_once = mode != PL_REPLY_SEND;
    }
    port->ring[(port->head + port->count) % port->ring_capacity] = *slot;
    port->count++;
    port->received++;

    pl_port_wake_after_enqueue_unlock(port, false);
    return PL_OK;
}

/* A send to a local port, its arguments checked. */
static pl_status_t pl_port_send_local(pl_port_t *port, int32_t id, const void *payload, size_t size,
                                      pl_port_t *reply, pl_reply_mode_t mode, bool *reply_taken,
                                      const pl_attachment_t *attachments, uint32_t attachment_count,
                                      int64_t timeout_ns) {
    /* Copy the payload and the attachments before taking the lock. */
    pl_slot_t slot;
    if (!pl_slot_fill(&slot, id, payload, size)) return PL_ERR_NO_MEMORY;
    if (attachment_count > 0) {
        slot.extra = calloc(1, sizeof *slot.extra);
        pl_status_t status = slot.extra == NULL
                                 ? PL_ERR_NO_MEMORY
                                 : pl_attachments_copy(attachments, attachment_count, &slot.extra->attachments);
        if (status != PL_OK) {
            int saved = errno;
            pl_slot_dispose(&slot);
            errno = saved;
            return status;
        }
    }
    pl_status_t status = pl_port_enqueue_local(port, &slot, reply, mode, reply_taken, timeout_ns);
    if (status != PL_OK) pl_slot_dispose(&slot);
    return status;
}

/* A send through a send right, carrying a send right or a send-once right to `reply` (see pl_reply_mode_t). */
static pl_status_t pl_port_send_message(pl_port_t *port, int32_t id, const void *payload, size_t size,
                                        pl_port_t *reply, pl_reply_mode_t mode, bool *reply_taken,
                                        const pl_attachment_t *attachments, uint32_t attachment_count,
                                        int64_t timeout_ns) {
    if (port == NULL || !pl_timeout_valid(timeout_ns)) return PL_ERR_INVALID_ARG;
    if (size > 0 && payload == NULL) return PL_ERR_INVALID_ARG;
    pl_status_t status = pl_attachments_check(attachments, attachment_count);
    if (status != PL_OK) return status;
    if (size > port->max_msg_size) return PL_ERR_TOO_LARGE;
    /* A new send-once reply right sets its slot aside on the reply port first, as pl_port_make_send_once does;
     * given back unless the send says (through reply_taken) that the right came to be. */
    bool made = false;
    if (mode == PL_REPLY_MAKE_ONCE) {
        if ((status = pl_port_set_aside(reply)) != PL_OK) return status;
        reply_taken = &made;
    }
    if (port->proxy != NULL) {
        status = pl_proxy_send(port, id, payload, size, reply, mode, reply_taken, attachments, attachment_count,
                               timeout_ns);
    } else {
        status = pl_port_send_local(port, id, payload, size, reply, mode, reply_taken, attachments, attachment_count,
                                    timeout_ns);
    }
    if (mode == PL_REPLY_MAKE_ONCE && !made) pl_port_give_back(reply);
    return status;
}

pl_status_t pl_port_send(pl_port_t *port, int32_t id, const void *payload, size_t size,
                         pl_port_t *reply, int64_t timeout_ns) {
    return pl_port_send_message(port, id, payload, size, reply, PL_REPLY_SEND, NULL, NULL, 0, timeout_ns);
}

pl_status_t pl_port_send_with(pl_port_t *port, int32_t id, const void *payload, size_t size, pl_port_t *reply,
                              const pl_attachment_t *attachments, uint32_t attachment_count, int64_t timeout_ns) {
    return pl_port_send_message(port, id, payload, size, reply, PL_REPLY_SEND, NULL, attachments, attachment_count,
                                timeout_ns);
}

/* The payload memory becomes the slot's: no copy, no allocation but a mapping's note that it is one. */
pl_status_t pl_port_send_payload(pl_port_t *port, int32_t id, pl_payload_t *payload, pl_port_t *reply,
                                 int64_t timeout_ns) {
    if (port == NULL || payload == NULL || !pl_timeout_valid(timeout_ns)) return PL_ERR_INVALID_ARG;
    if (payload->size > 0 && payload->base == NULL) return PL_ERR_INVALID_ARG;
    if (payload->size > port->max_msg_size) return PL_ERR_TOO_LARGE;
    pl_status_t status;
    if (port->proxy != NULL || payload->size <= PL_INLINE_PAYLOAD) {
        /* Another process gets a copy anyway (a memfd or frames); a small payload fits in the slot. */
        status = port->proxy != NULL
                     ? pl_proxy_send(port, id, payload->base, payload->size, reply, PL_REPLY_SEND, NULL, NULL, 0,
                                     timeout_ns)
                     : pl_port_send_with(port, id, payload->base, payload->size, reply, NULL, 0, timeout_ns);
        if (status == PL_OK) pl_payload_free(payload);
        return status;
    }
    pl_slot_t slot = { .id = id, .size = (uint32_t)payload->size, .reply = NULL, .extra = NULL };
    slot.payload.heap = payload->base;
    if (payload->mapped) {
        slot.extra = calloc(1, sizeof *slot.extra);
        if (slot.extra == NULL) return PL_ERR_NO_MEMORY;
        slot.extra->flags = PL_MSG_MAPPED;
    }
    status = pl_port_enqueue_local(port, &slot, reply, PL_REPLY_SEND, NULL, timeout_ns);
    if (status == PL_OK) {
        *payload = (pl_payload_t){ 0 };
    } else {
        free(slot.extra); /* the memory stays the caller's */
    }
    return status;
}

pl_status_t pl_port_enqueue_remote(pl_port_t *port, pl_slot_t *slot, pl_export_t *e) {
    pthread_mutex_lock(&port->lock);
    uint32_t held = e->lent - atomic_load_explicit(&e->owed, memory_order_acquire);
    pl_status_t status = port->dead ? PL_ERR_INVALID_DEST : (held == 0 ? PL_ERR_INVALID_ARG : PL_OK);
    /* The room came with the credit, and is in the ring already (pl_free_room_locked lends only that): nothing to
     * allocate. Were it not, the message is not dropped unseen: the connection ends (pl_rx_deliver). */
    if (status == PL_OK && port->count + port->set_aside >= port->ring_capacity) {
        status = pl_port_ring_grow_locked(port, port->count + port->set_aside + 1);
    }
    if (status != PL_OK) {
        pthread_mutex_unlock(&port->lock);
        return status;
    }
    e->lent--;
    port->reserved--;
    port->ring[(port->head + port->count) % port->ring_capacity] = *slot;
    port->count++;
    port->received++;
    pl_port_wake_after_enqueue_unlock(port, false);
    return PL_OK;
}

void pl_port_post_notice(pl_port_t *port, int32_t id, const void *payload, size_t size) {
    pl_slot_t slot;
    pl_slot_fill(&slot, id, payload, size); /* PL_NOTICE_SIZE is inline: nothing to allocate */
    slot.notice = true;
    pthread_mutex_lock(&port->lock);
    /* No limit check: a notice is never refused for room (see pl_notify.c). */
    if (!pl_ring_put_set_aside_locked(port, &slot)) {
        pthread_mutex_unlock(&port->lock);
        return;
    }
    pl_port_wake_after_enqueue_unlock(port, false);
}

pl_status_t pl_port_requeue(pl_port_t *port, const pl_received_t *received, const void *payload) {
    if (port == NULL || received == NULL || (received->size > 0 && payload == NULL)) return PL_ERR_INVALID_ARG;
    if (port->proxy != NULL) return PL_ERR_INVALID_ARG;
    if (received->size > port->max_msg_size) return PL_ERR_TOO_LARGE;
    pl_slot_t slot;
    if (!pl_slot_fill(&slot, received->id, payload, received->size)) return PL_ERR_NO_MEMORY;
    slot.notice = (received->flags & PL_RECEIVED_NOTIFICATION) != 0; /* a notice put back is still one */
    if (received->sender.pid != 0 || received->attachments != NULL) {
        slot.extra = calloc(1, sizeof *slot.extra);
        if (slot.extra == NULL) {
            pl_slot_dispose(&slot);
            return PL_ERR_NO_MEMORY;
        }
        slot.extra->sender = received->sender;
    }

    pthread_mutex_lock(&port->lock);
    /* No limit check: the message was in the queue before, and senders wait while it is over the limit. */
    pl_status_t status = port->dead ? PL_ERR_INVALID_NAME : pl_ring_reserve_locked(port);
    if (status != PL_OK) {
        pthread_mutex_unlock(&port->lock);
        pl_slot_dispose(&slot); /* the reply right and attachments are not in it yet: the caller keeps them */
        return status;
    }
    slot.reply = received->reply; /* the caller's right and attachments move in */
    slot.reply_once = (received->flags & PL_RECEIVED_REPLY_ONCE) != 0;
    if (slot.extra != NULL) slot.extra->attachments = received->attachments;
    port->head = (port->head + port->ring_capacity - 1) % port->ring_capacity;
    port->ring[port->head] = slot;
    port->count++;
    pl_port_wake_after_enqueue_unlock(port, true);
    return PL_OK;
}

pl_status_t pl_port_send_request(pl_port_t *port, int32_t id, const void *payload, size_t size, pl_port_t *reply,
                                 int64_t timeout_ns) {
    if (reply == NULL || reply->proxy != NULL) return PL_ERR_INVALID_ARG;
    return pl_port_send_message(port, id, payload, size, reply, PL_REPLY_MAKE_ONCE, NULL, NULL, 0, timeout_ns);
}

pl_status_t pl_port_send_moving_once(pl_port_t *port, int32_t id, const void *payload, size_t size,
                                     pl_port_t *reply, const pl_attachment_t *attachments, uint32_t attachment_count,
                                     int64_t timeout_ns) {
    if (reply == NULL) return PL_ERR_INVALID_ARG;
    if (atomic_load_explicit(&reply->send_once_rights, memory_order_acquire) == 0) return PL_ERR_INVALID_NAME;
    bool taken = false;
    pl_status_t status = pl_port_send_message(port, id, payload, size, reply, PL_REPLY_MOVE_ONCE, &taken, attachments,
                                              attachment_count, timeout_ns);
    /* A destination that is gone takes the right with it, as a destroyed message would: its port is told. */
    if (status == PL_ERR_INVALID_DEST && !taken) pl_port_release_send_once(reply);
    return status;
}

/* ---- send-once rights ------------------------------------------------------------------------------ */

/* A send-once right holds a memory reference and counts in send_once_rights. It is not a send right: no-senders
 * ignores it. Its end is told to the port once, as a notice, unless a message went through it. A proxy's
 * send-once rights count the same way; the owner, told by a frame, posts the notice in its process. */

void pl_port_add_send_once(pl_port_t *port) {
    atomic_fetch_add(&port->send_once_rights, 1);
    pl_port_retain_internal(port);
}

/* A new right sets a slot aside for what will come of it: the message sent through it, or the notice of its end. */
pl_status_t pl_port_make_send_once(pl_port_t *port) {
    if (port == NULL || port->proxy != NULL) return PL_ERR_INVALID_ARG;
    pl_status_t status = pl_port_set_aside(port);
    if (status == PL_OK) pl_port_add_send_once(port);
    return status;
}

void pl_port_retain_memory(pl_port_t *port) { if (port != NULL) pl_port_retain_internal(port); }
void pl_port_release_memory(pl_port_t *port) { if (port != NULL) pl_port_release_internal(port); }

uint32_t pl_port_send_once_count(const pl_port_t *port) {
    return port == NULL ? 0 : atomic_load_explicit(&((pl_port_t *)port)->send_once_rights, memory_order_relaxed);
}

/* After a local port's send-once right was taken (used, released or moved away): the last right's wake-ups, and
 * its memory reference. */
static void pl_port_send_once_gone(pl_port_t *port, unsigned left) {
    if (left == 0 && atomic_load(&port->send_rights) == 0) pl_port_last_right_gone(port);
    pl_port_release_internal(port);
}

void pl_port_post_send_once_notice(pl_port_t *port) {
    unsigned char notice[PL_NOTICE_SIZE] = { 0 };
    for (int i = 0; i < 8; i++) notice[i] = (unsigned char)(port->name >> (8 * i));
    pl_port_post_notice(port, PL_NOTIFY_SEND_ONCE, notice, sizeof notice);
}

void pl_port_forget_send_once(pl_port_t *port) {
    unsigned left;
    if (!pl_take_right(&port->send_once_rights, &left)) return;
    if (port->proxy != NULL) {
        if (left == 0 && atomic_load(&port->send_rights) == 0) pl_proxy_unused(port);
        pl_port_release_internal(port);
    } else {
        pl_port_send_once_gone(port, left);
    }
}

/* A proxy's send-once right ends with a frame to the owner. A send right is held across it, so that the proxy
 * cannot be released (RELEASE) before that frame is written: the owner must see the right's end first. */
static pl_status_t pl_proxy_once_end(pl_port_t *port, bool send, int32_t id, const void *payload, size_t size) {
    pl_port_make_send(port);
    unsigned left;
    pl_status_t status = PL_OK;
    if (!pl_take_right(&port->send_once_rights, &left)) {
        status = PL_ERR_INVALID_NAME;
    } else {
        if (send) status = pl_proxy_send_once(port, id, payload, size); else pl_proxy_release_send_once(port);
        pl_port_release_internal(port); /* the send-once right's reference */
    }
    pl_port_release_send(port); /* the last right: the proxy is unused now */
    return status;
}

pl_status_t pl_port_release_send_once(pl_port_t *port) {
    if (port == NULL) return PL_ERR_INVALID_ARG;
    if (port->proxy != NULL) return pl_proxy_once_end(port, false, 0, NULL, 0);
    unsigned left;
    if (!pl_take_right(&port->send_once_rights, &left)) return PL_ERR_INVALID_NAME;
    pl_port_post_send_once_notice(port);
    pl_port_send_once_gone(port, left);
    return PL_OK;
}

pl_status_t pl_port_enqueue_once(pl_port_t *port, pl_slot_t *slot) {
    pthread_mutex_lock(&port->lock);
    /* No limit check: one right, one message, as Mach queues a send-once message, into the right's slot. */
    if (!pl_ring_put_set_aside_locked(port, slot)) {
        pthread_mutex_unlock(&port->lock);
        return PL_ERR_INVALID_DEST;
    }
    port->received++;
    pl_port_wake_after_enqueue_unlock(port, false);
    return PL_OK;
}

pl_status_t pl_port_send_once(pl_port_t *port, int32_t id, const void *payload, size_t size) {
    if (port == NULL || (size > 0 && payload == NULL)) return PL_ERR_INVALID_ARG;
    if (size > port->max_msg_size) return PL_ERR_TOO_LARGE;
    if (port->proxy != NULL) return pl_proxy_once_end(port, true, id, payload, size);
    pl_slot_t slot;
    if (!pl_slot_fill(&slot, id, payload, size)) return PL_ERR_NO_MEMORY; /* the caller keeps the right */
    /* The right is taken and the message queued in one hold of the lock: a receiver waiting for a reply never
     * sees the port with neither (which it would take for no-senders). No limit check: one right, one message,
     * as Mach queues a send-once message, into the slot set aside when the right was made. */
    pthread_mutex_lock(&port->lock);
    unsigned left;
    if (!pl_take_right(&port->send_once_rights, &left)) {
        pthread_mutex_unlock(&port->lock);
        pl_slot_dispose(&slot);
        return PL_ERR_INVALID_NAME;
    }
    pl_status_t status = pl_ring_put_set_aside_locked(port, &slot) ? PL_OK : PL_ERR_INVALID_DEST;
    if (status == PL_OK) {
        port->received++;
        pl_port_wake_after_enqueue_unlock(port, false);
    } else {
        pthread_mutex_unlock(&port->lock);
        pl_slot_dispose(&slot); /* destroyed: the right goes with the port, no notice */
    }
    pl_port_send_once_gone(port, left);
    return status;
}

/* ---- receive --------------------------------------------------------------------------------------- */

/* Dequeues the first message: its payload is copied into `buffer`, or with `take` handed over whole. */
static inline pl_status_t pl_port_dequeue_into_locked(pl_port_t *port, pl_received_t *out, void *buffer,
                                                      size_t capacity, pl_payload_t *take) {
    pl_slot_t *slot = &port->ring[port->head];
    out->kind = PL_RECEIVED_MESSAGE;
    out->id = slot->id;
    out->size = slot->size;
    out->arrival_name = port->name;
    out->arrival_context = atomic_load_explicit(&port->context, memory_order_acquire);
    out->fd = -1;
    out->reply = NULL;
    out->attachments = NULL;
    out->sender = (pl_sender_t){ 0 };
    out->flags = 0;
    if (take != NULL) {
        *take = (pl_payload_t){ .base = NULL, .size = slot->size, .mapped = 0 };
        if (slot->size > PL_INLINE_PAYLOAD) {
            take->base = slot->payload.heap;
            take->mapped = pl_slot_payload_mapped(slot->extra);
        } else if (slot->size > 0) {
            take->base = malloc(slot->size);
            if (take->base == NULL) return PL_ERR_NO_MEMORY;
            memcpy(take->base, slot->payload.bytes, slot->size);
        }
    } else {
        if (slot->size > capacity) return PL_ERR_TOO_LARGE;
        if (slot->size > PL_INLINE_PAYLOAD) {
            memcpy(buffer, slot->payload.heap, slot->size);
            pl_ool_release(slot->payload.heap, slot->size, pl_slot_payload_mapped(slot->extra));
        } else if (slot->size > 0) {
            memcpy(buffer, slot->payload.bytes, slot->size);
        }
    }
    out->reply = slot->reply; /* the send right moves to the receiver */
    out->flags = (slot->reply_once ? PL_RECEIVED_REPLY_ONCE : 0) | (slot->notice ? PL_RECEIVED_NOTIFICATION : 0);
    port->head = (port->head + 1) % port->ring_capacity;
    port->count--;
    pl_msg_extra_t *extra = slot->extra;
    pl_export_t *origin = extra != NULL ? extra->origin : NULL;
    /* The slot is lent again when it came from a peer, and whoever's it was when a peer waits for room: a peer
     * waiting behind local senders would otherwise wait for ever once the queue held only local messages. */
    if (origin != NULL || port->want_waiters > 0) pl_remote_room_freed_locked(port, origin);
    if (extra != NULL) {
        out->sender = extra->sender;
        out->attachments = extra->attachments;
        bool shared = (extra->flags & PL_MSG_SHARED) != 0; /* read first: the release may free the export holding it */
        if (origin != NULL) pl_export_release(origin); /* frees memory only, never takes a lock */
        if (!shared) free(extra);
    }
    return PL_OK;
}

pl_status_t pl_port_dequeue_locked(pl_port_t *port, pl_received_t *out, void *buffer, size_t capacity,
                                   pl_payload_t *take) {
    return pl_port_dequeue_into_locked(port, out, buffer, capacity, take);
}

static void pl_received_reset(pl_received_t *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
}

static inline pl_status_t pl_port_receive_into(pl_port_t *port, pl_received_t *out, void *buffer, size_t capacity,
                                               pl_payload_t *take, int64_t timeout_ns) {
    pthread_mutex_lock(&port->lock);
    if (port->dead) {
        pthread_mutex_unlock(&port->lock);
        return PL_ERR_INVALID_NAME;
    }
    if (port->count == 0 && timeout_ns != 0) {
        int64_t deadline = pl_deadline_ns(timeout_ns);
        port->waiting_receivers++;
        while (!port->dead && port->count == 0 && !pl_port_senderless_locked(port) && !pl_deadline_passed(deadline)) {
            pl_futex_cond_wait_until(&port->receivers, &port->lock, deadline);
        }
        port->waiting_receivers--;
    }
    pl_status_t status;
    if (port->dead) {
        status = PL_ERR_PORT_DIED;
    } else if (port->count == 0) {
        status = pl_port_senderless_locked(port) ? PL_ERR_NO_SENDERS : PL_ERR_TIMED_OUT;
    } else {
        status = pl_port_dequeue_into_locked(port, out, buffer, capacity, take);
        /* Emptied behind its sets' backs: out of their ready FIFOs, or it would keep an old turn there. */
        if (status == PL_OK && port->count == 0 && port->memberships != NULL) pl_port_emptied_locked(port, NULL);
    }
    /* Pass the baton: a message is still queued (more of them, or one too large for this receiver, which
     * leaves without it) and another receiver sleeps. */
    bool left_work = (status == PL_OK || status == PL_ERR_TOO_LARGE) && port->count > 0;
    bool wake_receiver = left_work && port->waiting_receivers > 0;
    bool wake_sender = status == PL_OK && pl_port_take_sender_wake_locked(port);
    struct pl_conn *credit_due = pl_port_take_credit_due_locked(port);
    pthread_mutex_unlock(&port->lock);

    if (wake_receiver) pl_futex_cond_signal(&port->receivers);
    if (wake_sender) pthread_cond_signal(&port->senders);
    pl_credit_send_due(credit_due);
    return status;
}

pl_status_t pl_port_receive(pl_port_t *port, pl_received_t *out, void *buffer, size_t capacity,
                            int64_t timeout_ns) {
    if (port == NULL || out == NULL || !pl_timeout_valid(timeout_ns)) return PL_ERR_INVALID_ARG;
    if (capacity > 0 && buffer == NULL) return PL_ERR_INVALID_ARG;
    if (port->proxy != NULL) return PL_ERR_INVALID_ARG;
    pl_received_reset(out);
    return pl_port_receive_into(port, out, buffer, capacity, NULL, timeout_ns);
}

pl_status_t pl_port_receive_payload(pl_port_t *port, pl_received_t *out, pl_payload_t *payload, int64_t timeout_ns) {
    if (port == NULL || out == NULL || payload == NULL || !pl_timeout_valid(timeout_ns)) return PL_ERR_INVALID_ARG;
    if (port->proxy != NULL) return PL_ERR_INVALID_ARG;
    pl_received_reset(out);
    *payload = (pl_payload_t){ 0 };
    return pl_port_receive_into(port, out, NULL, 0, payload, timeout_ns);
}
