/*
 * pl_feeder.c — port sets that read connections themselves.
 *
 * Through the transport thread alone, a message from another process would cost two wake-ups: the transport's,
 * then the receiver's, woken by the transport's send. A set whose ports receive from a connection therefore
 * watches the connection's socket in its own poller (a feeder). Its sleeping receiver is woken by the socket,
 * reads the frames under the connection's read lock and goes on with the messages it queued itself: one wake-up,
 * as for a message from a thread of the same process.
 *
 * Who wakes: every watch of a connection's socket is EPOLLEXCLUSIVE, and the transport's is queued behind the
 * sets' (it is moved to the back whenever a set starts watching). The kernel goes down the queue and stops at the
 * first watcher with a thread asleep in it: a set's sleeping receiver if there is one, else the transport. A set
 * that is awake still finds the socket readable the next time it looks, and reads what is left.
 *
 * A connection that moved to its shared-memory ring (pl_conn_ring.c) is watched at its bell as well, under the same
 * feeder id: the bell says that records came, the socket that a packet with descriptors came, or the end.
 *
 * How a set learns: a message queued on a port from a connection makes each of the port's sets a watcher of that
 * connection, once. Nothing unlearns it while both live: a set may be woken for frames to another port, reads them
 * and hands them on, as the transport would. The connection's end and the set's destruction each detach the other.
 */
#include "pl_remote.h"

#include <stdlib.h>

/* ---- learning ---------------------------------------------------------------------------------------- */

/* Adds `conn` to `set`'s poller, unless it is there already. */
static void pl_feeder_add(pl_port_set_t *set, pl_conn_t *conn) {
    pthread_mutex_lock(&conn->feeds_lock);
    for (pl_feed_t *f = conn->feeds; f != NULL; f = f->next) {
        if (f->set == set) {
            pthread_mutex_unlock(&conn->feeds_lock);
            return;
        }
    }
    pl_feed_t *feed = calloc(1, sizeof *feed);
    pl_feeder_t *feeder = calloc(1, sizeof *feeder);
    if (feed == NULL || feeder == NULL) {
        /* Out of memory: the transport goes on reading for this set, at a wake-up more per message. */
        pthread_mutex_unlock(&conn->feeds_lock);
        free(feed);
        free(feeder);
        return;
    }
    feed->set = set;
    pl_port_set_retain(set);
    feed->next = conn->feeds;
    conn->feeds = feed;
    pthread_mutex_unlock(&conn->feeds_lock);

    bool added = false;
    pthread_mutex_lock(&conn->write_lock); /* keeps the descriptor open while the poller takes it */
    pthread_mutex_lock(&set->lock);
    if (!set->dead && conn->fd >= 0) {
        feeder->conn = conn;
        feeder->id = set->next_fd_id++;
        int bell = atomic_load_explicit(&conn->bell_watched, memory_order_acquire);
        if (pl_poller_add_feeder(&set->poller, conn->fd, feeder->id) == PL_OK &&
            (bell < 0 || pl_poller_add_bell(&set->poller, bell, feeder->id) == PL_OK)) {
            pl_conn_retain(conn);
            feeder->next = set->feeders;
            set->feeders = feeder;
            set->feeder_count++;
            atomic_store_explicit(&set->feeders_watched, set->feeder_count, memory_order_relaxed);
            added = true;
        } else {
            pl_poller_remove_fd(&set->poller, conn->fd); /* watched whole or not at all */
        }
    }
    /* A receiver waiting without the poller (it had nothing to watch) must come and watch this. */
    bool wake_waiter = added && !set->polling && set->sleeping_followers > 0;
    pthread_mutex_unlock(&set->lock);
    pthread_mutex_unlock(&conn->write_lock);
    if (wake_waiter) pl_futex_cond_signal(&set->followers);
    if (added) {
        pl_transport_rewatch(conn); /* behind this set's watch */
        return;
    }
    free(feeder);
    /* Not watched after all (the set or the connection ended meanwhile): forget the feed again. */
    pthread_mutex_lock(&conn->feeds_lock);
    for (pl_feed_t **link = &conn->feeds; *link != NULL; link = &(*link)->next) {
        if (*link == feed) {
            *link = feed->next;
            break;
        }
    }
    pthread_mutex_unlock(&conn->feeds_lock);
    free(feed);
    pl_port_set_release(set);
}

void pl_feeder_learn(pl_port_t *port, pl_conn_t *conn) {
    if (atomic_load_explicit(&port->last_feeder, memory_order_acquire) == conn) return; /* the usual case */
    pl_port_set_t *sets[8];
    uint32_t count = 0;
    pthread_mutex_lock(&port->lock);
    for (pl_membership_t *m = port->memberships; m != NULL && count < 8; m = m->next_of_port) {
        pl_port_set_retain(m->set);
        sets[count++] = m->set;
    }
    /* Compared, never followed: a connection freed and another made at its address only costs the new one a
     * look through the port's sets the first time round. */
    atomic_store_explicit(&port->last_feeder, conn, memory_order_release);
    pthread_mutex_unlock(&port->lock);
    for (uint32_t i = 0; i < count; i++) {
        pl_feeder_add(sets[i], conn);
        pl_port_set_release(sets[i]);
    }
}

/* ---- reading ----------------------------------------------------------------------------------------- */

uint32_t pl_feeders_collect_locked(pl_port_set_t *set, const uint64_t *ids, uint32_t count, pl_conn_t **out,
                                   uint32_t max) {
    uint32_t found = 0;
    if (set->feeder_count == 0) return 0;
    for (uint32_t i = 0; i < count && found < max; i++) {
        for (pl_feeder_t *f = set->feeders; f != NULL; f = f->next) {
            if (f->id != ids[i] || f->detached) continue;
            bool twice = false; /* its socket and its bell, both ready */
            for (uint32_t k = 0; k < found; k++) twice = twice || out[k] == f->conn;
            if (twice) break;
            pl_conn_retain(f->conn);
            out[found++] = f->conn;
            break;
        }
    }
    return found;
}

void pl_feeder_pump(pl_port_set_t *set, pl_conn_t *conn) {
    uint8_t *buffer = pl_thread_frame_buffer();
    if (buffer == NULL) {
        pl_transport_read(conn); /* no buffer: the transport it is */
        pl_conn_release(conn);
        return;
    }
    const char *why;
    bool took = false;
    uint64_t packets = 0;
    pl_read_result_t result = pl_conn_read_turn(conn, buffer, PL_SET_READ_PACKETS, PL_SET_READ_BYTES, &why, &took,
                                                 &packets);
    /* What the sets read, the transport need not: while they keep up with a stream, it leaves it to them. */
    if (took) atomic_fetch_add_explicit(&conn->set_packets_read, packets, memory_order_relaxed);
    if (took && result == PL_READ_ENDED) {
        /* The transport ends it; meanwhile this poller must stop seeing a socket that stays readable. */
        int bell = atomic_load_explicit(&conn->bell_watched, memory_order_acquire);
        pthread_mutex_lock(&set->lock);
        for (pl_feeder_t *f = set->feeders; f != NULL; f = f->next) {
            if (f->conn != conn || f->detached) continue;
            pl_poller_remove_fd(&set->poller, conn->fd);
            if (bell >= 0) pl_poller_remove_fd(&set->poller, bell);
            f->detached = true;
        }
        pthread_mutex_unlock(&set->lock);
        pthread_mutex_unlock(&conn->read_lock);
        pl_transport_kill(conn, why);
    } else if (took && result == PL_READ_MORE) {
        pl_transport_read(conn); /* a flood: the transport reads on */
    }
    pl_conn_release(conn);
}

void pl_feeders_watch_bell(pl_conn_t *conn) {
    /* The sets, each with a reference, out from under the feeds lock (a leaf: no set lock inside it). A set that
     * cannot be listed (no memory) reads the ring through the transport, which watches the bell too. */
    pthread_mutex_lock(&conn->feeds_lock);
    uint32_t count = 0;
    for (pl_feed_t *f = conn->feeds; f != NULL; f = f->next) count++;
    pl_port_set_t **sets = count > 0 ? calloc(count, sizeof *sets) : NULL;
    uint32_t taken = 0;
    for (pl_feed_t *f = conn->feeds; f != NULL && sets != NULL; f = f->next) {
        pl_port_set_retain(f->set);
        sets[taken++] = f->set;
    }
    pthread_mutex_unlock(&conn->feeds_lock);
    for (uint32_t i = 0; i < taken; i++) {
        pl_port_set_t *set = sets[i];
        pthread_mutex_lock(&conn->write_lock); /* keeps the bell open */
        int bell = atomic_load_explicit(&conn->bell_watched, memory_order_acquire);
        pthread_mutex_lock(&set->lock);
        for (pl_feeder_t *f = set->feeders; f != NULL && bell >= 0 && !set->dead; f = f->next) {
            if (f->conn == conn && !f->detached) pl_poller_add_bell(&set->poller, bell, f->id);
        }
        pthread_mutex_unlock(&set->lock);
        pthread_mutex_unlock(&conn->write_lock);
        pl_port_set_release(set);
    }
    free(sets);
}

void pl_feeders_pump_pending_locked(pl_port_set_t *set) {
    if (set->feeder_count == 0) return;
    pl_conn_t *conns[PL_POLL_MAX];
    uint32_t count = 0;
    for (pl_feeder_t *f = set->feeders; f != NULL && count < PL_POLL_MAX; f = f->next) {
        if (f->detached || atomic_load_explicit(&f->conn->bell_watched, memory_order_acquire) < 0) continue;
        pl_conn_retain(f->conn);
        conns[count++] = f->conn;
    }
    if (count == 0) return;
    pthread_mutex_unlock(&set->lock);
    for (uint32_t i = 0; i < count; i++) {
        if (pl_conn_ring_pending(conns[i], false)) {
            pl_feeder_pump(set, conns[i]); /* releases the reference */
        } else {
            pl_conn_release(conns[i]);
        }
    }
    pthread_mutex_lock(&set->lock);
}

/* ---- detaching --------------------------------------------------------------------------------------- */

/* Takes `conn`'s feeder out of `set` (its poller too, unless detached already). */
static void pl_feeder_remove(pl_port_set_t *set, pl_conn_t *conn) {
    pl_feeder_t *gone = NULL;
    pthread_mutex_lock(&set->lock);
    for (pl_feeder_t **link = &set->feeders; *link != NULL; link = &(*link)->next) {
        if ((*link)->conn != conn) continue;
        gone = *link;
        *link = gone->next;
        set->feeder_count--;
        atomic_store_explicit(&set->feeders_watched, set->feeder_count, memory_order_relaxed);
        if (!gone->detached && conn->fd >= 0) pl_poller_remove_fd(&set->poller, conn->fd);
        /* Removed by hand always: the peer holds the bell open, so closing ours would leave it watched. */
        int bell = atomic_load_explicit(&conn->bell_watched, memory_order_acquire);
        if (bell >= 0) pl_poller_remove_fd(&set->poller, bell);
        break;
    }
    pthread_mutex_unlock(&set->lock);
    if (gone != NULL) {
        pl_conn_release(conn);
        free(gone);
    }
}

void pl_feeders_detach_conn(pl_conn_t *conn) {
    pthread_mutex_lock(&conn->feeds_lock);
    pl_feed_t *feeds = conn->feeds;
    conn->feeds = NULL;
    pthread_mutex_unlock(&conn->feeds_lock);
    while (feeds != NULL) {
        pl_feed_t *next = feeds->next;
        pl_feeder_remove(feeds->set, conn);
        pl_port_set_release(feeds->set);
        free(feeds);
        feeds = next;
    }
}

void pl_feeders_detach_set(pl_port_set_t *set) {
    pthread_mutex_lock(&set->lock);
    pl_feeder_t *feeders = set->feeders;
    set->feeders = NULL;
    set->feeder_count = 0;
    atomic_store_explicit(&set->feeders_watched, 0, memory_order_relaxed);
    pthread_mutex_unlock(&set->lock);
    while (feeders != NULL) {
        pl_feeder_t *next = feeders->next;
        pl_conn_t *conn = feeders->conn;
        pl_feed_t *gone = NULL;
        pthread_mutex_lock(&conn->feeds_lock);
        for (pl_feed_t **link = &conn->feeds; *link != NULL; link = &(*link)->next) {
            if ((*link)->set != set) continue;
            gone = *link;
            *link = gone->next;
            break;
        }
        pthread_mutex_unlock(&conn->feeds_lock);
        if (gone != NULL) {
            pl_port_set_release(set);
            free(gone);
        }
        pl_conn_release(conn);
        free(feeders);
        feeders = next;
    }
}

/* ---- the frame buffer -------------------------------------------------------------------------------- */

static pthread_key_t pl_buffer_key;
static pthread_once_t pl_buffer_once = PTHREAD_ONCE_INIT;

static void pl_buffer_key_make(void) { pthread_key_create(&pl_buffer_key, free); }

uint8_t *pl_thread_frame_buffer(void) {
    pthread_once(&pl_buffer_once, pl_buffer_key_make);
    uint8_t *buffer = pthread_getspecific(pl_buffer_key);
    if (buffer == NULL) {
        buffer = malloc(PL_FRAME_BUFFER_BYTES);
        if (buffer != NULL && pthread_setspecific(pl_buffer_key, buffer) != 0) {
            free(buffer);
            buffer = NULL;
        }
    }
    return buffer;
}
