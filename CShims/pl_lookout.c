/*
 * pl_lookout.c — a receiver that polls a set without sleeping looks at its rings itself.
 *
 * A ring's writer rings the reader's bell (a system call) only when the reader armed the ring, that is, stopped
 * looking (pl_ring.h). A receiver that polls its set in a loop (the run loop's low-latency mode) is looking: it
 * takes the arm back from the rings of the connections that feed the set, reads them between its looks at the
 * ready marks, and arms them again when it stops. A message from another process then reaches it with no system
 * call on either side, as one from a thread of this process does.
 *
 * The rule that keeps records from being stranded: a ring may be unarmed only while someone looks at it. Every
 * reader that empties a ring arms it unless a lookout is registered on the connection (`lookers`); the last
 * lookout to leave arms it, and reads what came meanwhile. A reader that emptied the ring just as a lookout
 * registered may arm it behind the lookout's back (the transport thread, woken by a control frame that found the
 * ring armed between two polls): each look of the lookout takes the arm back, so that this costs at most one bell.
 *
 * Records for other sets' ports are read too and queued on those ports, as the transport would: a lookout ends
 * when its receiver stops polling, so none waits on it for longer than its poll lasts.
 */
#include "pl_remote.h"

void pl_port_set_lookout_begin(pl_port_set_t *set, pl_port_set_lookout_t *lookout) {
    lookout->count = 0;
    if (set == NULL || atomic_load_explicit(&set->feeders_watched, memory_order_relaxed) == 0) return;
    pthread_mutex_lock(&set->lock);
    for (pl_feeder_t *f = set->feeders; f != NULL && lookout->count < PL_LOOKOUT_MAX; f = f->next) {
        if (f->detached || atomic_load_explicit(&f->conn->bell_watched, memory_order_acquire) < 0) continue;
        pl_conn_retain(f->conn);
        lookout->conns[lookout->count++] = f->conn;
    }
    pthread_mutex_unlock(&set->lock);
    /* Registered, a lookout keeps other readers from arming; its first look takes the arm back. */
    for (uint32_t i = 0; i < lookout->count; i++) {
        atomic_fetch_add_explicit(&((pl_conn_t *)lookout->conns[i])->lookers, 1, memory_order_seq_cst);
    }
}

uint32_t pl_port_set_lookout_read(pl_port_set_t *set, pl_port_set_lookout_t *lookout) {
    uint32_t read = 0;
    for (uint32_t i = 0; i < lookout->count; i++) {
        pl_conn_t *conn = lookout->conns[i];
        if (!pl_conn_ring_pending(conn, true)) continue;
        pl_conn_retain(conn); /* the pump lets go of one */
        pl_feeder_pump(set, conn);
        read++;
    }
    return read;
}

void pl_port_set_lookout_end(pl_port_set_t *set, pl_port_set_lookout_t *lookout) {
    for (uint32_t i = 0; i < lookout->count; i++) {
        pl_conn_t *conn = lookout->conns[i];
        if (atomic_fetch_sub_explicit(&conn->lookers, 1, memory_order_seq_cst) == 1) {
            /* The last to look arms the ring. With the read lock taken by another reader, which may have seen this
             * lookout and left the ring unarmed, a read turn leaves it a note to read once more (and arm). */
            bool took = pthread_mutex_trylock(&conn->read_lock) == 0;
            bool came = false;
            if (took) {
                came = conn->ring_reading && !conn->ring_mark && pl_ring_arm(conn->ring);
                pthread_mutex_unlock(&conn->read_lock);
            }
            if (!took || came || atomic_load_explicit(&conn->read_again, memory_order_seq_cst)) {
                pl_conn_retain(conn);
                pl_feeder_pump(set, conn);
            }
        }
        pl_conn_release(conn);
    }
    lookout->count = 0;
}
