/*
 * pl_notify.c — notification requests: no-senders and dead-name (mach_port_request_notification).
 *
 * A request is linked into the list of the port it watches and guarded by that port's lock, so that it fires
 * or is cancelled exactly once: whichever of the two takes it off the list first wins. Firing takes it off
 * under the lock and posts the notice after unlocking, to a port the asker chose. A notice is posted over that
 * port's queue limit: Mach sends notifications with send-once rights, which a full queue takes anyway, and a
 * notice that waited for room or was dropped would break the exactly-once promise.
 *
 * A request holds memory references (not send rights) to both ports: a send right to the watched port would
 * keep no-senders from ever firing, and one to the notify port would do the same when a port is told about
 * itself. It is referenced by the watched port's list and by its asker's handle; releasing the handle cancels.
 *
 * Delivery cannot fail for memory: the request sets a slot of the notify port's queue aside when it is made
 * (pl_port_set_aside), which is where the notice goes, and which a request that ends without one gives back.
 */
#include "pl_remote.h"

#include <stdlib.h>
#include <string.h>

typedef enum { PL_NOTIFY_KIND_NO_SENDERS, PL_NOTIFY_KIND_DEAD_NAME } pl_notify_kind_t;

struct pl_notification {
    atomic_uint refs;           /* the watched port's list while linked, and the asker's handle */
    pl_notify_kind_t kind;
    bool linked;                /* in the watched port's list (its lock) */
    uint64_t id;
    uint64_t sync;              /* no-senders: fire only once the make-send count reaches this */
    uint64_t fired_count;       /* no-senders: the make-send count when it fired */
    bool deliver;               /* taken to fire (not to end silently) */
    bool posted;                /* its notice went into the slot set aside for it */
    pl_port_t *port;            /* watched; a memory reference */
    pl_port_t *notify;          /* where the notice goes; a memory reference */
    struct pl_notification *next;
};

static atomic_uint_fast64_t pl_next_notification_id = 1;

uint64_t pl_port_make_send_count(const pl_port_t *port) {
    if (port == NULL || port->proxy != NULL) return 0;
    return atomic_load(&((pl_port_t *)port)->make_sends);
}

static void pl_notification_unref(pl_notification_t *n) {
    if (atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) != 1) return;
    if (!n->posted) pl_port_give_back(n->notify);
    pl_port_release_internal(n->port);
    pl_port_release_internal(n->notify);
    free(n);
}

static pl_notification_t *pl_notification_new(pl_notify_kind_t kind, pl_port_t *port, pl_port_t *notify,
                                              uint64_t sync) {
    pl_notification_t *n = calloc(1, sizeof *n);
    if (n == NULL) return NULL;
    if (pl_port_set_aside(notify) != PL_OK) {
        free(n);
        return NULL;
    }
    atomic_init(&n->refs, 2); /* the list and the handle */
    n->kind = kind;
    n->id = atomic_fetch_add_explicit(&pl_next_notification_id, 1, memory_order_relaxed);
    n->sync = sync;
    n->port = port;
    n->notify = notify;
    pl_port_retain_internal(port);
    pl_port_retain_internal(notify);
    return n;
}

/* Unlinks n from its port's list (lock held). */
static void pl_notification_unlink_locked(pl_notification_t *n) {
    pl_notification_t **link = &n->port->notifications;
    while (*link != n) link = &(*link)->next;
    *link = n->next;
    n->next = NULL;
    n->linked = false;
}

/* Whether no send right is left and the make-send count has reached `sync`; fills in the count it fired at.
 * The make-send count is read before the send rights: a right is counted in send_rights before it is counted
 * in make_sends, so every right the count includes was made before the read of send_rights, and zero there
 * means all of them are gone (a right made later raises the count past the one the notice reports). */
static bool pl_no_senders_due(pl_port_t *port, pl_notification_t *n) {
    uint64_t made = atomic_load(&port->make_sends);
    if (atomic_load(&port->send_rights) != 0 || made < n->sync) return false;
    n->fired_count = made;
    return true;
}

/* Links a new request into its port's list, or, when `fires_now` says it is due already (port lock held), hands
 * it straight to delivery. A no-senders request on a destroyed port is refused instead. */
static pl_status_t pl_notification_arm(pl_notification_t *n, bool (*fires_now)(pl_port_t *, pl_notification_t *),
                                       pl_notification_t **out) {
    pl_port_t *port = n->port;
    pthread_mutex_lock(&port->lock);
    if (port->dead && n->kind == PL_NOTIFY_KIND_NO_SENDERS) {
        pthread_mutex_unlock(&port->lock);
        atomic_store(&n->refs, 1);
        pl_notification_unref(n);
        return PL_ERR_INVALID_NAME;
    }
    bool now = fires_now(port, n);
    if (!now) {
        n->linked = true;
        n->next = port->notifications;
        port->notifications = n;
    }
    pthread_mutex_unlock(&port->lock);
    if (now) {
        n->deliver = true;
        pl_notify_deliver(n); /* takes the list's reference */
    }
    *out = n;
    return PL_OK;
}

static bool pl_dead_already(pl_port_t *port, pl_notification_t *n) {
    (void)n;
    return port->dead;
}

pl_status_t pl_port_request_no_senders(pl_port_t *port, uint64_t sync, pl_port_t *notify, pl_notification_t **out) {
    if (out == NULL) return PL_ERR_INVALID_ARG;
    *out = NULL;
    if (port == NULL || notify == NULL || port->proxy != NULL || notify->proxy != NULL) return PL_ERR_INVALID_ARG;
    pl_notification_t *n = pl_notification_new(PL_NOTIFY_KIND_NO_SENDERS, port, notify, sync);
    return n == NULL ? PL_ERR_NO_MEMORY : pl_notification_arm(n, pl_no_senders_due, out);
}

pl_status_t pl_port_request_dead_name(pl_port_t *port, pl_port_t *notify, pl_notification_t **out) {
    if (out == NULL) return PL_ERR_INVALID_ARG;
    *out = NULL;
    if (port == NULL || notify == NULL || notify->proxy != NULL) return PL_ERR_INVALID_ARG;
    pl_notification_t *n = pl_notification_new(PL_NOTIFY_KIND_DEAD_NAME, port, notify, 0);
    return n == NULL ? PL_ERR_NO_MEMORY : pl_notification_arm(n, pl_dead_already, out);
}

pl_status_t pl_notification_cancel(pl_notification_t *n) {
    if (n == NULL) return PL_ERR_INVALID_ARG;
    pthread_mutex_lock(&n->port->lock);
    bool pending = n->linked;
    if (pending) pl_notification_unlink_locked(n);
    pthread_mutex_unlock(&n->port->lock);
    if (!pending) return PL_ERR_INVALID_NAME;
    pl_notification_unref(n); /* the list's reference */
    return PL_OK;
}

uint64_t pl_notification_id(const pl_notification_t *n) { return n == NULL ? 0 : n->id; }

void pl_notification_release(pl_notification_t *n) {
    if (n == NULL) return;
    pl_notification_cancel(n);
    pl_notification_unref(n);
}

bool pl_notify_watches_senders_locked(const pl_port_t *port) {
    for (const pl_notification_t *n = port->notifications; n != NULL; n = n->next) {
        if (n->kind == PL_NOTIFY_KIND_NO_SENDERS) return true;
    }
    return false;
}

/* ---- firing ---------------------------------------------------------------------------------------------- */

pl_notification_t *pl_notify_take_no_senders_locked(pl_port_t *port) {
    /* Kept in the list's order, newest first, as pl_notify_deliver expects. */
    pl_notification_t *taken = NULL, **tail = &taken;
    pl_notification_t **link = &port->notifications;
    while (*link != NULL) {
        pl_notification_t *n = *link;
        if (n->kind == PL_NOTIFY_KIND_NO_SENDERS && pl_no_senders_due(port, n)) {
            *link = n->next;
            n->linked = false;
            n->deliver = true;
            n->next = NULL;
            *tail = n;
            tail = &n->next;
        } else {
            link = &n->next;
        }
    }
    return taken;
}

pl_notification_t *pl_notify_take_all_locked(pl_port_t *port) {
    pl_notification_t *taken = port->notifications;
    port->notifications = NULL;
    for (pl_notification_t *n = taken; n != NULL; n = n->next) {
        n->linked = false;
        n->deliver = n->kind == PL_NOTIFY_KIND_DEAD_NAME;
    }
    return taken;
}

static void pl_put_u64(unsigned char *to, uint64_t value) {
    for (int i = 0; i < 8; i++) to[i] = (unsigned char)(value >> (8 * i));
}

void pl_notify_deliver(pl_notification_t *taken) {
    /* The list was built newest first; post in the order the requests were made. */
    pl_notification_t *ordered = NULL;
    while (taken != NULL) {
        pl_notification_t *next = taken->next;
        taken->next = ordered;
        ordered = taken;
        taken = next;
    }
    while (ordered != NULL) {
        pl_notification_t *n = ordered;
        ordered = n->next;
        n->next = NULL;
        if (n->deliver) {
            unsigned char notice[PL_NOTICE_SIZE];
            bool no_senders = n->kind == PL_NOTIFY_KIND_NO_SENDERS;
            pl_put_u64(notice, n->port->name);
            pl_put_u64(notice + 8, no_senders ? n->fired_count : 0);
            pl_put_u64(notice + 16, n->id);
            pl_port_post_notice(n->notify, no_senders ? PL_NOTIFY_NO_SENDERS : PL_NOTIFY_DEAD_NAME, notice,
                                sizeof notice);
            n->posted = true;
        }
        pl_notification_unref(n); /* the list's reference */
    }
}
