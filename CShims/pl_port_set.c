/*
 * pl_port_set.c — port sets: ports and descriptors waited on together, over one poller (pl_poller.c).
 *
 * The poller holds the set's wake-up eventfd, its descriptor members and the receive timer. One receiving
 * thread at a time sleeps in it (the leader); other receivers wait on the set's condition variable (the
 * followers) and one of them is signalled when the leader leaves or when work is left over for them.
 */
#include "pl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

/* A set looks at its descriptors at least this often while its ports are flooded, so that a busy port
 * cannot starve a descriptor member. */
#define PL_FD_POLL_EVERY 64u

/* Publishes whether a batch receive must take the lock (something is ready, or the set was destroyed), for its look
 * without it; after every change of either (set lock held). */
static inline void pl_ready_note(pl_port_set_t *set) {
    atomic_store_explicit(&set->batch_must_lock, set->dead || set->ready_head != NULL || set->fd_ready_head != NULL,
                          memory_order_relaxed);
}

/* ---- lifetime -------------------------------------------------------------------------------------- */

static void pl_port_set_free(pl_port_set_t *set) {
    pl_poller_close(&set->poller);
    pthread_mutex_destroy(&set->lock);
    free(set);
}

pl_status_t pl_port_set_create(pl_port_set_t **out_set) {
    if (out_set == NULL) return PL_ERR_INVALID_ARG;
    *out_set = NULL;
    pl_port_set_t *set = calloc(1, sizeof *set);
    if (set == NULL) return PL_ERR_NO_MEMORY;
    pl_status_t status = pl_poller_open(&set->poller);
    if (status != PL_OK) {
        free(set); /* free keeps errno on glibc, as pl_last_system_call's caller needs */
        return status;
    }
    pl_mutex_init_adaptive(&set->lock);
    pl_futex_cond_init(&set->followers);
    atomic_init(&set->refs, 1);
    set->next_fd_id = PL_POLL_FIRST_MEMBER_ID;
    *out_set = set;
    return PL_OK;
}

void pl_port_set_retain(pl_port_set_t *set) {
    if (set != NULL) atomic_fetch_add_explicit(&set->refs, 1, memory_order_relaxed);
}

void pl_port_set_release(pl_port_set_t *set) {
    if (set == NULL) return;
    if (atomic_fetch_sub_explicit(&set->refs, 1, memory_order_acq_rel) != 1) return;
    pl_port_set_destroy(set); /* no-op if destroyed already */
    pl_port_set_free(set);
}

static void pl_wake_fd_write(pl_port_set_t *set) { pl_poller_wake(&set->poller); }

/* Removes every port membership. Lock order is port before set, so each is taken, the set unlocked,
 * and the port locked to unlink it; one that a port's destruction unlinked meanwhile is skipped. */
static void pl_port_set_remove_all_ports(pl_port_set_t *set) {
    for (;;) {
        pthread_mutex_lock(&set->lock);
        pl_membership_t *m = set->members_head;
        if (m == NULL) { pthread_mutex_unlock(&set->lock); return; }
        pl_port_t *port = m->port;
        pl_port_retain_internal(port);
        pthread_mutex_unlock(&set->lock);

        pthread_mutex_lock(&port->lock);
        pl_membership_t **link = &port->memberships;
        while (*link != NULL && !(*link == m && m->set == set)) link = &(*link)->next_of_port;
        bool found = *link != NULL;
        if (found) {
            *link = m->next_of_port;
            pl_port_set_unlink_locked(m);
        }
        pthread_mutex_unlock(&port->lock);
        if (found) free(m);
        pl_port_release_internal(port);
    }
}

pl_status_t pl_port_set_destroy(pl_port_set_t *set) {
    if (set == NULL) return PL_ERR_INVALID_ARG;
    pthread_mutex_lock(&set->lock);
    if (set->dead) { pthread_mutex_unlock(&set->lock); return PL_ERR_INVALID_NAME; }
    set->dead = true;
    bool wake_leader = set->polling && !set->wake_pending;
    if (wake_leader) set->wake_pending = true;
    bool wake_followers = set->sleeping_followers > 0;
    pl_fd_member_t *fds = set->fds;
    for (pl_fd_member_t *f = fds; f != NULL; f = f->next_member) pl_poller_remove_fd(&set->poller, f->fd);
    set->fds = NULL;
    set->fd_ready_head = set->fd_ready_tail = NULL;
    pl_ready_note(set);
    set->fd_count = 0;
    pthread_mutex_unlock(&set->lock);

    if (wake_leader) pl_wake_fd_write(set);
    if (wake_followers) pl_futex_cond_broadcast(&set->followers);
    pl_feeders_detach_set(set);
    pl_port_set_remove_all_ports(set);
    while (fds != NULL) { /* a leader's event for one of them finds no member by its id */
        pl_fd_member_t *next = fds->next_member;
        free(fds);
        fds = next;
    }
    return PL_OK;
}

/* ---- ready lists (set lock held) ------------------------------------------------------------------- */

static void pl_ready_push(pl_port_set_t *set, pl_membership_t *m, bool at_head) {
    m->in_ready = true;
    atomic_fetch_add_explicit(&set->ready_marks, 1, memory_order_release);
    if (at_head) {
        m->prev_ready = NULL;
        m->next_ready = set->ready_head;
        if (set->ready_head) set->ready_head->prev_ready = m; else set->ready_tail = m;
        set->ready_head = m;
    } else {
        m->next_ready = NULL;
        m->prev_ready = set->ready_tail;
        if (set->ready_tail) set->ready_tail->next_ready = m; else set->ready_head = m;
        set->ready_tail = m;
    }
    pl_ready_note(set);
}

static void pl_ready_remove(pl_port_set_t *set, pl_membership_t *m) {
    if (!m->in_ready) return;
    if (m->prev_ready) m->prev_ready->next_ready = m->next_ready; else set->ready_head = m->next_ready;
    if (m->next_ready) m->next_ready->prev_ready = m->prev_ready; else set->ready_tail = m->prev_ready;
    m->prev_ready = m->next_ready = NULL;
    m->in_ready = false;
    pl_ready_note(set);
}

static void pl_wake_list_add(pl_wake_list_t *wakes, pl_port_set_t *set, uint8_t action) {
    pl_port_set_retain(set);
    if (wakes->count < 8) {
        wakes->sets[wakes->count] = set;
        wakes->actions[wakes->count] = action;
    } else {
        uint32_t extra = wakes->count - 8;
        if (extra == wakes->more_capacity) {
            uint32_t capacity = wakes->more_capacity ? wakes->more_capacity * 2 : 8;
            pl_port_set_t **sets = realloc(wakes->more_sets, capacity * sizeof *sets);
            uint8_t *actions = sets ? realloc(wakes->more_actions, capacity) : NULL;
            if (sets) wakes->more_sets = sets;
            if (actions == NULL) {
                /* Out of memory: wake this set now, under the lock, rather than lose the wake-up. */
                if (action == PL_WAKE_EVENTFD) pl_wake_fd_write(set); else pl_futex_cond_signal(&set->followers);
                atomic_fetch_sub_explicit(&set->refs, 1, memory_order_relaxed);
                return;
            }
            wakes->more_actions = actions;
            wakes->more_capacity = capacity;
        }
        wakes->more_sets[extra] = set;
        wakes->more_actions[extra] = action;
    }
    wakes->count++;
}

/* With the set lock held and work left in the set: make sure somebody asleep on it will look. */
static void pl_wake_one_locked(pl_port_set_t *set, pl_wake_list_t *wakes) {
    if (set->sleeping_followers > 0) {
        set->wakes++;
        pl_wake_list_add(wakes, set, PL_WAKE_FOLLOWER);
    } else if (set->polling && !set->wake_pending) {
        set->wake_pending = true;
        set->wakes++;
        pl_wake_list_add(wakes, set, PL_WAKE_EVENTFD);
    }
}

void pl_port_set_mark_ready_locked(pl_membership_t *m, bool at_head, pl_wake_list_t *wakes) {
    pl_port_set_t *set = m->set;
    pthread_mutex_lock(&set->lock);
    if (!set->dead && !m->in_ready) {
        pl_ready_push(set, m, at_head);
        /* A leader in the poller is woken first: it may be the only thread that will look. Not while it reads a
         * feeder: it looks at the ready FIFO when done. */
        if (set->polling && !set->wake_pending && !set->pumping) {
            set->wake_pending = true;
            set->wakes++;
            pl_wake_list_add(wakes, set, PL_WAKE_EVENTFD);
        } else if (set->sleeping_followers > 0) {
            set->wakes++;
            pl_wake_list_add(wakes, set, PL_WAKE_FOLLOWER);
        }
    }
    pthread_mutex_unlock(&set->lock);
}

void pl_port_emptied_locked(pl_port_t *port, pl_port_set_t *except) {
    for (pl_membership_t *m = port->memberships; m != NULL; m = m->next_of_port) {
        pl_port_set_t *set = m->set;
        if (set == except) continue;
        pthread_mutex_lock(&set->lock);
        pl_ready_remove(set, m);
        pthread_mutex_unlock(&set->lock);
    }
}

void pl_wake_list_run(pl_wake_list_t *wakes) {
    for (uint32_t i = 0; i < wakes->count; i++) {
        pl_port_set_t *set = i < 8 ? wakes->sets[i] : wakes->more_sets[i - 8];
        uint8_t action = i < 8 ? wakes->actions[i] : wakes->more_actions[i - 8];
        if (action == PL_WAKE_EVENTFD) pl_wake_fd_write(set); else pl_futex_cond_signal(&set->followers);
        pl_port_set_release(set);
    }
    free(wakes->more_sets);
    free(wakes->more_actions);
    wakes->count = 0;
}

void pl_port_set_unlink_locked(pl_membership_t *m) {
    pl_port_set_t *set = m->set;
    pthread_mutex_lock(&set->lock);
    pl_ready_remove(set, m);
    if (m->prev_in_set) m->prev_in_set->next_in_set = m->next_in_set; else set->members_head = m->next_in_set;
    if (m->next_in_set) m->next_in_set->prev_in_set = m->prev_in_set;
    set->port_count--;
    pthread_mutex_unlock(&set->lock);
}

/* ---- membership ------------------------------------------------------------------------------------ */

static pl_membership_t *pl_find_membership_locked(pl_port_t *port, pl_port_set_t *set) {
    for (pl_membership_t *m = port->memberships; m != NULL; m = m->next_of_port) {
        if (m->set == set) return m;
    }
    return NULL;
}

pl_status_t pl_port_set_insert(pl_port_set_t *set, pl_port_t *port) {
    if (set == NULL || port == NULL) return PL_ERR_INVALID_ARG;
    pl_membership_t *m = calloc(1, sizeof *m);
    if (m == NULL) return PL_ERR_NO_MEMORY;
    m->port = port;
    m->set = set;

    pl_wake_list_t wakes = { .count = 0 };
    pl_status_t status = PL_OK;
    pthread_mutex_lock(&port->lock);
    if (port->dead) {
        status = PL_ERR_INVALID_NAME;
    } else if (pl_find_membership_locked(port, set) != NULL) {
        status = PL_ERR_ALREADY_IN_SET;
    } else {
        pthread_mutex_lock(&set->lock);
        if (set->dead) {
            status = PL_ERR_INVALID_NAME;
        } else {
            m->next_in_set = set->members_head;
            if (set->members_head) set->members_head->prev_in_set = m;
            set->members_head = m;
            set->port_count++;
        }
        pthread_mutex_unlock(&set->lock);
        if (status == PL_OK) {
            m->next_of_port = port->memberships;
            port->memberships = m;
            atomic_store_explicit(&port->last_feeder, NULL, memory_order_relaxed); /* a new set to teach */
            /* Ready at once with messages, or with none that can ever come (its last right went before it
             * joined: the release found no set to tell). */
            if (port->count > 0 || pl_port_senderless_locked(port)) pl_port_set_mark_ready_locked(m, false, &wakes);
        }
    }
    pthread_mutex_unlock(&port->lock);
    pl_wake_list_run(&wakes);
    if (status != PL_OK) free(m);
    return status;
}

pl_status_t pl_port_set_extract(pl_port_set_t *set, pl_port_t *port) {
    if (set == NULL || port == NULL) return PL_ERR_INVALID_ARG;
    pthread_mutex_lock(&set->lock);
    bool dead = set->dead;
    pthread_mutex_unlock(&set->lock);
    if (dead) return PL_ERR_INVALID_NAME;

    pthread_mutex_lock(&port->lock);
    pl_membership_t **link = &port->memberships;
    while (*link != NULL && (*link)->set != set) link = &(*link)->next_of_port;
    pl_membership_t *m = *link;
    if (m != NULL) {
        *link = m->next_of_port;
        pl_port_set_unlink_locked(m);
    }
    pthread_mutex_unlock(&port->lock);
    if (m == NULL) return PL_ERR_NOT_IN_SET;
    free(m);
    return PL_OK;
}

int pl_port_set_contains(pl_port_set_t *set, pl_port_t *port) {
    if (set == NULL || port == NULL) return 0;
    pthread_mutex_lock(&port->lock);
    bool found = pl_find_membership_locked(port, set) != NULL;
    pthread_mutex_unlock(&port->lock);
    return found;
}

pl_status_t pl_port_set_insert_fd(pl_port_set_t *set, int fd) {
    if (set == NULL || fd < 0 || fcntl(fd, F_GETFD) == -1) return PL_ERR_INVALID_ARG;
    pl_fd_member_t *member = calloc(1, sizeof *member);
    if (member == NULL) return PL_ERR_NO_MEMORY;
    member->fd = fd;

    pl_status_t status = PL_OK;
    pthread_mutex_lock(&set->lock);
    if (set->dead) {
        status = PL_ERR_INVALID_NAME;
    } else {
        for (pl_fd_member_t *f = set->fds; f != NULL; f = f->next_member) {
            if (f->fd == fd) { status = PL_ERR_ALREADY_IN_SET; break; }
        }
    }
    if (status == PL_OK) {
        /* Under the lock, so that the duplicate check and the registration are one step, and a leader reading
         * this member's first event already finds it in the list (events are matched under this lock). */
        member->id = set->next_fd_id++;
        status = pl_poller_add_fd(&set->poller, fd, member->id);
        if (status == PL_OK) {
            member->next_member = set->fds;
            set->fds = member;
            set->fd_count++;
        }
    }
    /* A receiver waiting without the poller (no descriptors until now) must come and watch this one. */
    bool wake_waiter = status == PL_OK && !set->polling && set->sleeping_followers > 0;
    pthread_mutex_unlock(&set->lock);
    if (wake_waiter) pl_futex_cond_signal(&set->followers);
    if (status != PL_OK) free(member);
    return status;
}

pl_status_t pl_port_set_extract_fd(pl_port_set_t *set, int fd) {
    if (set == NULL) return PL_ERR_INVALID_ARG;
    pthread_mutex_lock(&set->lock);
    if (set->dead) { pthread_mutex_unlock(&set->lock); return PL_ERR_INVALID_NAME; }
    pl_fd_member_t **link = &set->fds;
    while (*link != NULL && (*link)->fd != fd) link = &(*link)->next_member;
    pl_fd_member_t *member = *link;
    if (member != NULL) {
        *link = member->next_member;
        /* Under the lock, so that the same number inserted again by another thread is not removed with it. A
         * leader holding an event for this member finds no member by its id and drops the event. */
        pl_poller_remove_fd(&set->poller, fd);
        set->fd_count--;
        if (member->ready) {
            pl_fd_member_t **r = &set->fd_ready_head, *prev = NULL;
            while (*r != member) { prev = *r; r = &(*r)->next_ready; }
            *r = member->next_ready;
            if (set->fd_ready_tail == member) set->fd_ready_tail = prev;
            pl_ready_note(set);
        }
    }
    pthread_mutex_unlock(&set->lock);
    if (member == NULL) return PL_ERR_NOT_IN_SET;
    free(member);
    return PL_OK;
}

uint32_t pl_port_set_member_count(pl_port_set_t *set) {
    if (set == NULL) return 0;
    pthread_mutex_lock(&set->lock);
    uint32_t n = set->port_count + set->fd_count;
    pthread_mutex_unlock(&set->lock);
    return n;
}

uint32_t pl_port_set_ready_marks(pl_port_set_t *set) {
    return atomic_load_explicit(&set->ready_marks, memory_order_acquire);
}

void pl_port_set_wake_stats(pl_port_set_t *set, uint64_t *out_sleeps, uint64_t *out_wakes) {
    if (set == NULL) return;
    pthread_mutex_lock(&set->lock);
    if (out_sleeps) *out_sleeps = set->sleeps;
    if (out_wakes) *out_wakes = set->wakes;
    pthread_mutex_unlock(&set->lock);
}

/* ---- receive --------------------------------------------------------------------------------------- */

/* Sleeps in the poller without the set lock until something happens or the deadline (INT64_MAX: no timer),
 * or only collects what is ready (nonblocking); then takes the set lock and records what it saw: the wake-up
 * seen, readable members queued as ready. Returns with the set lock held. The caller has set `polling`. */
static void pl_poll_and_lock(pl_port_set_t *set, int64_t deadline, bool nonblocking) {
    pl_poll_result_t result;
    pl_poller_wait(&set->poller, deadline, nonblocking, &result);
    pthread_mutex_lock(&set->lock);
    /* Connections that woke us are read first, without the lock: what they carry is queued on ports, this set's
     * among them, and found in the ready FIFO below. Meanwhile what is delivered here needs no wake-up. */
    struct pl_conn *feeders[PL_POLL_MAX];
    uint32_t feeder_count = pl_feeders_collect_locked(set, result.ids, result.count, feeders, PL_POLL_MAX);
    if (feeder_count > 0) {
        set->pumping = true;
        pthread_mutex_unlock(&set->lock);
        for (uint32_t i = 0; i < feeder_count; i++) pl_feeder_pump(set, feeders[i]);
        pthread_mutex_lock(&set->lock);
        set->pumping = false;
    }
    if (result.woken) set->wake_pending = false;
    for (uint32_t i = 0; i < result.count; i++) {
        /* By id: a member removed since the event was read is simply not found. */
        pl_fd_member_t *member = set->fds;
        while (member != NULL && member->id != result.ids[i]) member = member->next_member;
        if (member == NULL || member->ready) continue;
        member->ready = true;
        member->next_ready = NULL;
        if (set->fd_ready_tail) set->fd_ready_tail->next_ready = member; else set->fd_ready_head = member;
        set->fd_ready_tail = member;
        pl_ready_note(set);
    }
}

/* Whether the set has something in its poller to look at: descriptors, or connections that feed it (set lock held). */
static inline bool pl_set_watches_locked(const pl_port_set_t *set) {
    return set->fd_count > 0 || set->feeder_count > 0;
}

/* Ends a nonblocking look at the poller (set lock held). A waiter that found the poller taken by it went back to
 * waiting as a follower, and a follower waits for the leader to hand over: with descriptors to watch and
 * nobody left in the poller, one of them must look again and lead. */
static void pl_end_nonblocking_poll_locked(pl_port_set_t *set) {
    set->polling = false;
    if (set->sleeping_followers > 0 && pl_set_watches_locked(set)) {
        pl_futex_cond_signal(&set->followers);
    }
}

/* Takes one message from the first ready port, its payload into buffer or, with `take`, handed over. Called with
 * the set lock held and ready_head set; returns with the set lock released. *handled is false when the port turned
 * out empty (another receiver took it). */
static pl_status_t pl_take_from_ready_port(pl_port_set_t *set, pl_received_t *out, void *buffer,
                                           size_t capacity, pl_payload_t *take, bool *handled) {
    pl_membership_t *m = set->ready_head;
    pl_ready_remove(set, m);
    pl_port_t *port = m->port;
    pl_port_retain_internal(port);
    pl_wake_list_t wakes = { .count = 0 };
    if (set->ready_head != NULL || set->fd_ready_head != NULL) pl_wake_one_locked(set, &wakes);
    pthread_mutex_unlock(&set->lock);

    pl_status_t status = PL_OK;
    bool wake_receiver = false, wake_sender = false;
    struct pl_conn *credit_due = NULL;
    pthread_mutex_lock(&port->lock);
    *handled = port->count > 0;
    if (!*handled && pl_port_senderless_locked(port)) {
        /* Nothing can arrive any more: report the port, once (it has left the ready FIFO). */
        *handled = true;
        status = PL_ERR_NO_SENDERS;
        out->kind = PL_RECEIVED_MESSAGE;
        out->arrival_name = port->name;
        out->arrival_context = atomic_load_explicit(&port->context, memory_order_acquire);
        out->fd = -1;
    } else if (*handled) {
        status = pl_port_dequeue_locked(port, out, buffer, capacity, take);
        /* m may have been freed while unlocked; look the membership up again under the port lock. */
        pl_membership_t *again = pl_find_membership_locked(port, set);
        if (again != NULL && port->count > 0) {
            /* Round-robin: a port with more goes to the back; a too-large message stays first. */
            pl_port_set_mark_ready_locked(again, status == PL_ERR_TOO_LARGE, &wakes);
        }
        /* Emptied: out of its other sets' ready FIFOs too, so that it does not keep an old turn there. */
        if (status == PL_OK && port->count == 0 && port->memberships != NULL) pl_port_emptied_locked(port, set);
        wake_receiver = port->count > 0 && port->waiting_receivers > 0; /* also after a too-large leave */
        wake_sender = status == PL_OK && pl_port_take_sender_wake_locked(port);
        credit_due = pl_port_take_credit_due_locked(port);
    }
    pthread_mutex_unlock(&port->lock);
    if (wake_receiver) pl_futex_cond_signal(&port->receivers);
    if (wake_sender) pthread_cond_signal(&port->senders);
    pl_wake_list_run(&wakes);
    pl_credit_send_due(credit_due);
    pl_port_release_internal(port);
    return status;
}

pl_status_t pl_port_set_receive_batch(pl_port_set_t *set, pl_received_t *outs, uint32_t max, void *buffer,
                                      size_t capacity, uint32_t *count) {
    return pl_port_set_receive_batch_taking(set, outs, NULL, max, buffer, capacity, count);
}

pl_status_t pl_port_set_receive_batch_taking(pl_port_set_t *set, pl_received_t *outs, pl_payload_t *takes,
                                             uint32_t max, void *buffer, size_t capacity, uint32_t *count) {
    if (count != NULL) *count = 0;
    if (set == NULL || outs == NULL || count == NULL || max == 0) return PL_ERR_INVALID_ARG;
    if (capacity > 0 && buffer == NULL) return PL_ERR_INVALID_ARG;

    bool counted = false;
next_ready_port:
    /* Nothing queued, as far as a look without the lock can tell: a message queued meanwhile is the next receive's,
     * as one queued just after the lock was let go would be. This thread's own sends it sees. */
    if (!atomic_load_explicit(&set->batch_must_lock, memory_order_relaxed)) return PL_ERR_TIMED_OUT;
    pthread_mutex_lock(&set->lock);
    if (set->dead) { pthread_mutex_unlock(&set->lock); return PL_ERR_INVALID_NAME; }
    /* Descriptors first, and their periodic look under a flood: both are pl_port_set_receive's business. The
     * batch stops short of the receive that is due to look (counted as if it were full). */
    bool fd_look_due = false;
    if (pl_set_watches_locked(set) && !counted) {
        uint32_t room = PL_FD_POLL_EVERY - 1 - set->receives_since_fd_poll;
        fd_look_due = set->receives_since_fd_poll + 1 >= PL_FD_POLL_EVERY;
        if (!fd_look_due && max > room) max = room;
    }
    if (set->ready_head == NULL && set->fd_ready_head == NULL) {
        pthread_mutex_unlock(&set->lock);
        return PL_ERR_TIMED_OUT; /* nothing queued: a receive without waiting would find nothing either */
    }
    if (set->fd_ready_head != NULL || set->polling || fd_look_due) {
        pthread_mutex_unlock(&set->lock);
        return PL_OK; /* *count 0: something for pl_port_set_receive */
    }
    if (pl_set_watches_locked(set) && !counted) set->receives_since_fd_poll += max;
    counted = true;
    pl_membership_t *m = set->ready_head;
    pl_ready_remove(set, m);
    pl_port_t *port = m->port;
    pl_port_retain_internal(port);
    pl_wake_list_t wakes = { .count = 0 };
    if (set->ready_head != NULL) pl_wake_one_locked(set, &wakes);
    pthread_mutex_unlock(&set->lock);

    uint32_t taken = 0, sender_wakes = 0;
    size_t used = 0;
    pthread_mutex_lock(&port->lock);
    if (port->count == 0 && pl_port_senderless_locked(port)) {
        /* A no-senders report is pl_port_set_receive's to make: back to the head, and the caller falls back. */
        pl_membership_t *again = pl_find_membership_locked(port, set);
        if (again != NULL) pl_port_set_mark_ready_locked(again, true, &wakes);
        pthread_mutex_unlock(&port->lock);
        pl_wake_list_run(&wakes);
        pl_port_release_internal(port);
        return PL_OK;
    }
    if (port->count == 0) {
        /* Emptied by another receiver since it was queued as ready: the next ready port may hold messages. */
        pthread_mutex_unlock(&port->lock);
        pl_wake_list_run(&wakes);
        pl_port_release_internal(port);
        goto next_ready_port;
    }
    size_t taken_bytes = 0;
    while (taken < max && port->count > 0) {
        /* A payload in memory of its own is handed over (nothing to allocate, so it cannot fail), up to
         * PL_BATCH_TAKE_BYTES a batch: each one taken makes room in the queue that senders fill again, so a batch
         * of the largest would otherwise hold dozens of them beside a full queue. One held in the slot is copied
         * into the buffer, if it fits. */
        uint32_t size = port->ring[port->head].size;
        bool take = takes != NULL && size > PL_INLINE_PAYLOAD;
        if (take && taken > 0 && taken_bytes + size > PL_BATCH_TAKE_BYTES) break;
        size_t offset = (used + 7) & ~(size_t)7;
        if (!take && (offset > capacity || size > capacity - offset)) break;
        if (take) taken_bytes += size;
        pl_received_t *out = &outs[taken];
        memset(out, 0, sizeof *out);
        if (take) {
            pl_port_dequeue_locked(port, out, NULL, 0, &takes[taken]);
        } else {
            pl_port_dequeue_locked(port, out, (char *)buffer + offset, capacity - offset, NULL);
            if (takes != NULL) takes[taken] = (pl_payload_t){ 0 };
            out->offset = (uint32_t)offset;
            used = offset + out->size;
        }
        taken++;
        if (pl_port_take_sender_wake_locked(port)) sender_wakes++;
    }
    /* m may have been freed while unlocked; look the membership up again under the port lock. */
    pl_membership_t *again = pl_find_membership_locked(port, set);
    if (again != NULL && port->count > 0) {
        /* Round-robin, as after one receive; a message that did not fit as the first stays first. */
        pl_port_set_mark_ready_locked(again, taken == 0, &wakes);
    }
    if (taken > 0 && port->count == 0 && port->memberships != NULL) pl_port_emptied_locked(port, set);
    bool wake_receiver = port->count > 0 && port->waiting_receivers > 0;
    struct pl_conn *credit_due = pl_port_take_credit_due_locked(port);
    pthread_mutex_unlock(&port->lock);

    if (wake_receiver) pl_futex_cond_signal(&port->receivers);
    for (uint32_t i = 0; i < sender_wakes; i++) pthread_cond_signal(&port->senders);
    pl_wake_list_run(&wakes);
    pl_credit_send_due(credit_due);
    pl_port_release_internal(port);
    *count = taken;
    return PL_OK; /* none taken: the first does not fit in buffer */
}

/* A receive; `look` false (with timeout 0 only) skips the one look at the descriptors that a poll makes. With
 * `take`, the payload is handed over instead of copied into buffer. */
static pl_status_t pl_port_set_receive_looking(pl_port_set_t *set, pl_received_t *out, void *buffer,
                                               size_t capacity, pl_payload_t *take, int64_t timeout_ns,
                                               bool look) {
    if (set == NULL || out == NULL || !pl_timeout_valid(timeout_ns)) return PL_ERR_INVALID_ARG;
    if (capacity > 0 && buffer == NULL) return PL_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    out->fd = -1;

    int64_t deadline = pl_deadline_ns(timeout_ns);
    bool polled_once = false;   /* for timeout 0: descriptors were looked at */
    bool rings_read = false;    /* the rings of the connections this set feeds from were looked at */
    bool was_leader = false;
    pl_status_t status;

    pthread_mutex_lock(&set->lock);
    if (set->dead) { pthread_mutex_unlock(&set->lock); return PL_ERR_INVALID_NAME; }
    for (;;) {
        if (set->dead) { status = PL_ERR_PORT_DIED; break; }

        /* Under a flood of messages, look at the descriptors (and the connections that feed us) now and then. */
        if (pl_set_watches_locked(set) && set->ready_head != NULL && !set->polling &&
            ++set->receives_since_fd_poll >= PL_FD_POLL_EVERY) {
            set->receives_since_fd_poll = 0;
            set->polling = true;
            pthread_mutex_unlock(&set->lock);
            pl_poll_and_lock(set, 0, true);
            pl_end_nonblocking_poll_locked(set);
        }

        if (set->fd_ready_head != NULL) {
            pl_fd_member_t *member = set->fd_ready_head;
            set->fd_ready_head = member->next_ready;
            if (set->fd_ready_head == NULL) set->fd_ready_tail = NULL;
            pl_ready_note(set);
            member->ready = false;
            out->kind = PL_RECEIVED_FD;
            out->fd = member->fd;
            status = PL_OK;
            break;
        }
        if (set->ready_head != NULL) {
            bool handled;
            status = pl_take_from_ready_port(set, out, buffer, capacity, take, &handled);
            if (handled && !was_leader) return status; /* the common case: one lock round per message */
            pthread_mutex_lock(&set->lock);
            if (handled) break;
            continue;
        }

        if (timeout_ns == 0 || pl_deadline_passed(deadline)) {
            /* A poll, or a deadline that passed before this receive slept in the poller (1 ns, or a thread
             * preempted): look at the descriptors, and at the sockets and bells of the connections that feed us,
             * once, as a leader's sleep would have. */
            if (look && !polled_once && !was_leader && pl_set_watches_locked(set) && !set->polling) {
                polled_once = true;
                set->polling = true;
                pthread_mutex_unlock(&set->lock);
                pl_poll_and_lock(set, 0, true);
                pl_end_nonblocking_poll_locked(set);
                continue;
            }
            status = PL_ERR_TIMED_OUT;
            break;
        }

        if (!set->polling && !rings_read && set->feeder_count > 0) {
            /* Once per receive, before sleeping: records left in a ring ring no bell (pl_internal.h). The set
             * lock was let go meanwhile, and a port that became ready then woke nobody (no thread was polling
             * or waiting): look at the ready FIFO again before sleeping, whether this read anything or not. */
            rings_read = true;
            pl_feeders_pump_pending_locked(set);
            continue;
        }
        if (!set->polling && (pl_set_watches_locked(set) || deadline != INT64_MAX)) {
            /* Become the leader: sleep in the poller until a wake-up, a descriptor or the deadline. */
            set->polling = true;
            was_leader = true;
            set->sleeps++;
            pthread_mutex_unlock(&set->lock);
            pl_poll_and_lock(set, deadline, false);
            set->polling = false;
        } else {
            /* A follower while another receiver leads. Or, with no descriptor to watch and no deadline, there
             * is nothing for the poller to do: wait on the condition variable, which a sender wakes with one
             * futex call where the poller costs an eventfd write and an epoll wake-up (a timed wait stays in the
             * poller, whose timerfd is exact where a futex timeout gets the thread's timer slack). A descriptor
             * inserted meanwhile wakes this waiter to become the leader. */
            if (!set->polling) set->sleeps++;
            set->sleeping_followers++;
            pl_futex_cond_wait_until(&set->followers, &set->lock, deadline);
            set->sleeping_followers--;
        }
    }

    /* A leader that leaves hands the poller to a follower, who may still be waiting for something. */
    bool hand_over = was_leader && !set->polling && set->sleeping_followers > 0;
    pthread_mutex_unlock(&set->lock);
    if (hand_over) pl_futex_cond_signal(&set->followers);
    return status;
}

pl_status_t pl_port_set_receive(pl_port_set_t *set, pl_received_t *out, void *buffer, size_t capacity,
                                int64_t timeout_ns) {
    return pl_port_set_receive_looking(set, out, buffer, capacity, NULL, timeout_ns, true);
}

pl_status_t pl_port_set_receive_queued(pl_port_set_t *set, pl_received_t *out, void *buffer, size_t capacity) {
    return pl_port_set_receive_looking(set, out, buffer, capacity, NULL, 0, false);
}

pl_status_t pl_port_set_receive_payload(pl_port_set_t *set, pl_received_t *out, pl_payload_t *payload,
                                        int64_t timeout_ns) {
    if (payload == NULL) return PL_ERR_INVALID_ARG;
    *payload = (pl_payload_t){ 0 };
    return pl_port_set_receive_looking(set, out, NULL, 0, payload, timeout_ns, true);
}

pl_status_t pl_port_set_receive_queued_payload(pl_port_set_t *set, pl_received_t *out, pl_payload_t *payload) {
    if (payload == NULL) return PL_ERR_INVALID_ARG;
    *payload = (pl_payload_t){ 0 };
    return pl_port_set_receive_looking(set, out, NULL, 0, payload, 0, false);
}
