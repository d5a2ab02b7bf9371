/*
 * pl_probe.c — the status query: a client asks a service how it is doing, and the service's side of the
 * connection answers without the application's help (PROBE / STATUS, wire version 2).
 *
 * Whoever reads the service's side of the connection answers: the transport thread, or the service port's set
 * when it reads the socket itself. Either way the answer reads the port under its lock and nothing else waits
 * for the application, so a service whose loop is stuck still answers, and its queue depth shows it. Only a
 * peer the service welcomed may ask: a refused peer's connection is closed after its HELLO, and a PROBE on it
 * ends the connection unanswered.
 *
 * The asking thread waits on the connection's `changed` condition with its question on the connection's list;
 * an answer that comes after the asker gave up finds nobody and is dropped.
 */
#include "pl_remote.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(PL_WIRE_ECHO_MAX == PL_SERVICE_ECHO_MAX, "portloop.h states the largest echo");

bool pl_conn_answer_probe(pl_conn_t *conn, const pl_wire_probe_t *probe, const char **reason) {
    pthread_mutex_lock(&conn->lock);
    bool may_ask = conn->accepted && conn->welcomed && conn->service != NULL && conn->peer_version >= 2;
    pthread_mutex_unlock(&conn->lock);
    if (!may_ask) {
        *reason = "probe: from a peer that may not ask";
        return false;
    }
    pl_service_t *service = conn->service;
    pl_port_t *port = service->port;
    pl_wire_status_t status = {
        .seq = probe->seq, .pid = (int32_t)getpid(), .uid = (uint32_t)geteuid(), .gid = (uint32_t)getegid(),
        .connections = atomic_load_explicit(&service->connections, memory_order_relaxed), .padding = probe->echo,
    };
    pthread_mutex_lock(&port->lock);
    status.queue_depth = port->count;
    status.queue_limit = port->qlimit;
    status.max_size = port->max_msg_size;
    status.received = port->received;
    pthread_mutex_unlock(&port->lock);

    uint8_t small[PL_WIRE_STATUS_FIXED];
    uint8_t *frame = status.padding == 0 ? small : malloc(PL_WIRE_STATUS_FIXED + (size_t)status.padding);
    if (frame == NULL) {
        *reason = "out of memory for a status answer";
        return false;
    }
    size_t length = pl_wire_encode_status(frame, &status);
    /* As with control frames: a peer that asks without reading the answers is cut off. */
    pthread_mutex_lock(&conn->write_lock);
    bool flooded = conn->out_control_bytes > PL_CONN_CONTROL_LIMIT;
    if (!flooded) pl_conn_put_frame_locked(conn, frame, length, NULL, 0);
    pthread_mutex_unlock(&conn->write_lock);
    if (frame != small) free(frame);
    if (flooded) *reason = "the peer does not read the status it asks for";
    return !flooded;
}

bool pl_conn_take_status(pl_conn_t *conn, const pl_wire_status_t *status, const char **reason) {
    if (conn->accepted) {
        *reason = "status: sent to a service";
        return false;
    }
    bool ok = true;
    pthread_mutex_lock(&conn->lock);
    for (pl_probe_wait_t *wait = conn->probes; wait != NULL; wait = wait->next) {
        if (wait->seq != status->seq || wait->answered) continue;
        if (status->padding != wait->echo) {
            *reason = "status: an echo of another size than asked";
            ok = false;
        } else {
            wait->status = *status;
            wait->answered = true;
        }
        break;
    }
    pthread_mutex_unlock(&conn->lock);
    pthread_cond_broadcast(&conn->changed);
    return ok;
}

/* The connection a send right to a service port came through, with a reference; NULL when it is not one. */
static pl_conn_t *pl_service_conn(pl_port_t *right) {
    if (right->proxy == NULL) return NULL;
    pl_conn_t *conn = right->proxy->conn;
    pthread_mutex_lock(&conn->lock);
    bool is_service = !conn->accepted && conn->hello_received && conn->bootstrap_handle == right->proxy->handle;
    pthread_mutex_unlock(&conn->lock);
    if (!is_service) return NULL;
    pl_conn_retain(conn);
    return conn;
}

pl_status_t pl_service_status(pl_port_t *right, uint32_t echo, int64_t timeout_ns, pl_service_status_t *out) {
    if (right == NULL || out == NULL || echo > PL_SERVICE_ECHO_MAX || !pl_timeout_valid(timeout_ns)) {
        return PL_ERR_INVALID_ARG;
    }
    memset(out, 0, sizeof *out);
    if (!pl_port_is_alive(right)) return PL_ERR_INVALID_DEST;
    pl_conn_t *conn = pl_service_conn(right);
    if (conn == NULL) return PL_ERR_INVALID_ARG;
    int64_t deadline = pl_deadline_ns(timeout_ns);

    pl_probe_wait_t wait = { .echo = echo };
    pthread_mutex_lock(&conn->lock);
    pl_status_t status = PL_OK;
    if (conn->dead) status = PL_ERR_INVALID_DEST;
    else if (conn->peer_version < 2) status = PL_ERR_INVALID_ARG; /* version 1 has no PROBE */
    if (status == PL_OK) {
        wait.seq = ++conn->next_probe_seq;
        wait.next = conn->probes;
        conn->probes = &wait;
    }
    pthread_mutex_unlock(&conn->lock);
    if (status != PL_OK) {
        pl_conn_release(conn);
        return status;
    }

    /* The question carries as many bytes as it asks back, so that a ping of N bytes moves N each way. */
    uint8_t small[PL_WIRE_PROBE_FIXED];
    uint8_t *frame = echo == 0 ? small : malloc(PL_WIRE_PROBE_FIXED + (size_t)echo);
    if (frame == NULL) status = PL_ERR_NO_MEMORY;
    if (status == PL_OK) {
        size_t length = pl_wire_encode_probe(frame, wait.seq, echo, echo);
        pthread_mutex_lock(&conn->write_lock);
        status = pl_conn_put_frame_locked(conn, frame, length, NULL, 0);
        pthread_mutex_unlock(&conn->write_lock);
    }
    if (frame != small) free(frame);

    pthread_mutex_lock(&conn->lock);
    while (status == PL_OK && !wait.answered && !conn->dead && pl_now_ns() < deadline) {
        pl_cond_wait_until(&conn->changed, &conn->lock, deadline);
    }
    if (status == PL_OK) status = wait.answered ? PL_OK : (conn->dead ? PL_ERR_INVALID_DEST : PL_ERR_TIMED_OUT);
    pl_probe_wait_t **link = &conn->probes;
    while (*link != NULL && *link != &wait) link = &(*link)->next;
    if (*link != NULL) *link = wait.next;
    pthread_mutex_unlock(&conn->lock);
    pl_conn_release(conn);
    if (status != PL_OK) return status;

    *out = (pl_service_status_t){
        .pid = wait.status.pid, .uid = wait.status.uid, .gid = wait.status.gid,
        .queue_depth = wait.status.queue_depth, .queue_limit = wait.status.queue_limit,
        .max_message_size = wait.status.max_size, .connections = wait.status.connections,
        .messages_received = wait.status.received,
    };
    return PL_OK;
}
