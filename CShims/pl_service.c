/*
 * pl_service.c — the namespace: checking a name in, looking it up, and admitting the processes that connect.
 *
 * A namespace is a directory that only its user may enter (0700). A service named N is the SOCK_SEQPACKET socket
 * N in it, and its process holds an exclusive flock on ".N.lock" beside it for as long as the service lives. The
 * kernel drops the lock when that process dies, however it dies, so a second check-in tells a live holder (the
 * lock is taken: PL_ERR_NAME_IN_USE) from a stale socket (the lock is free: the socket is unlinked and made
 * anew). Lock files are never unlinked: a process that opened one must always meet the same file.
 *
 * Under systemd socket activation the listening socket comes from the service manager (LISTEN_FDS,
 * LISTEN_FDNAMES) and the name is systemd's to hold: no lock file, nothing to unlink, and the socket is not closed
 * when the service is withdrawn (systemd's copy keeps it listening): the next check-in of the name adopts it again.
 */
#define _GNU_SOURCE
#include "pl_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- names and the directory ------------------------------------------------------------------------ */

pl_status_t pl_service_name_check(const char *name, const char **reason) {
    const char *why = NULL;
    if (name == NULL || name[0] == '\0') {
        why = "a name is 1 to 64 bytes long";
    } else if (strlen(name) > PL_SERVICE_NAME_MAX) {
        why = "a name is at most 64 bytes long";
    } else if (name[0] == '.') {
        why = "a name does not start with '.'";
    } else {
        for (const char *c = name; *c != '\0' && why == NULL; c++) {
            bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                      *c == '.' || *c == '_' || *c == '-';
            if (!ok) why = "a name holds only letters, digits, '.', '_' and '-'";
        }
    }
    if (reason != NULL) *reason = why;
    return why == NULL ? PL_OK : PL_ERR_INVALID_ARG;
}

pl_status_t pl_namespace_default(char *out, size_t capacity) {
    const char *explicit = getenv("PORTLOOP_NAMESPACE");
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    int n;
    if (explicit != NULL && explicit[0] != '\0') {
        n = snprintf(out, capacity, "%s", explicit);
    } else if (runtime != NULL && runtime[0] == '/') {
        n = snprintf(out, capacity, "%s/portloop", runtime);
    } else {
        n = snprintf(out, capacity, "/tmp/portloop-%u", (unsigned)geteuid());
    }
    if (n <= 0 || (size_t)n >= capacity || (size_t)n > PL_NAMESPACE_PATH_MAX || out[0] != '/') {
        return PL_ERR_INVALID_ARG;
    }
    return PL_OK;
}

/* A squatter must not be able to stand in for a service. Checking in, the directory must be ours and closed to
 * everyone else (0700). Looking up, it must be ours or root's (a system-wide namespace, such as one systemd
 * makes for socket-activated services) and writable by nobody else. */
static pl_status_t pl_directory_check(const char *directory, bool create) {
    if (directory == NULL || directory[0] != '/' || strlen(directory) > PL_NAMESPACE_PATH_MAX) return PL_ERR_INVALID_ARG;
    if (create && mkdir(directory, 0700) != 0 && errno != EEXIST) return pl_system_failure("mkdir");
    struct stat st;
    if (lstat(directory, &st) != 0) {
        if ((errno == ENOENT || errno == ENOTDIR) && !create) return PL_ERR_UNKNOWN_SERVICE;
        if (errno == EACCES) return PL_ERR_REFUSED;
        return pl_system_failure("lstat");
    }
    if (!S_ISDIR(st.st_mode)) return PL_ERR_REFUSED;
    if (create) return st.st_uid == geteuid() && (st.st_mode & 077) == 0 ? PL_OK : PL_ERR_REFUSED;
    return (st.st_uid == geteuid() || st.st_uid == 0) && (st.st_mode & 022) == 0 ? PL_OK : PL_ERR_REFUSED;
}

static pl_status_t pl_socket_address(const char *directory, const char *name, struct sockaddr_un *address) {
    memset(address, 0, sizeof *address);
    address->sun_family = AF_UNIX;
    int n = snprintf(address->sun_path, sizeof address->sun_path, "%s/%s", directory, name);
    return n > 0 && (size_t)n < sizeof address->sun_path ? PL_OK : PL_ERR_INVALID_ARG;
}

/* ---- socket activation ------------------------------------------------------------------------------ */

static pthread_mutex_t pl_activation_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t pl_activation_taken; /* descriptors 3… already adopted, as bits */

/* The listening socket systemd passed for `name`, or -1. PL_ERR_NAME_IN_USE if it was adopted already. */
static pl_status_t pl_activation_fd(const char *name, int *out_fd) {
    *out_fd = -1;
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS"), *names = getenv("LISTEN_FDNAMES");
    if (pid == NULL || fds == NULL || names == NULL) return PL_OK;
    if (strtol(pid, NULL, 10) != (long)getpid()) return PL_OK;
    long count = strtol(fds, NULL, 10);
    const char *start = names;
    size_t length = strlen(name);
    for (long i = 0; i < count && i < 64 && start != NULL; i++) {
        const char *end = strchr(start, ':');
        size_t field = end != NULL ? (size_t)(end - start) : strlen(start);
        if (field == length && memcmp(start, name, length) == 0) {
            pthread_mutex_lock(&pl_activation_lock);
            bool taken = (pl_activation_taken >> i) & 1u;
            pl_activation_taken |= 1ull << i;
            pthread_mutex_unlock(&pl_activation_lock);
            if (taken) return PL_ERR_NAME_IN_USE;
            *out_fd = 3 + (int)i;
            return PL_OK;
        }
        start = end != NULL ? end + 1 : NULL;
    }
    return PL_OK;
}

/* A check-in that adopted a socket systemd passed failed, or its service was withdrawn: the socket stays open, for the
 * next check-in of the name. */
static void pl_activation_give_back(int fd) {
    pthread_mutex_lock(&pl_activation_lock);
    pl_activation_taken &= ~(1ull << (fd - 3));
    pthread_mutex_unlock(&pl_activation_lock);
}

/* A descriptor systemd passed must be a listening SOCK_SEQPACKET socket. */
static pl_status_t pl_activation_check(int fd) {
    int type = 0, listening = 0;
    socklen_t length = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0) return pl_system_failure("getsockopt(SO_TYPE)");
    length = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0) {
        return pl_system_failure("getsockopt(SO_ACCEPTCONN)");
    }
    if (type != SOCK_SEQPACKET || !listening) return PL_ERR_INVALID_ARG;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return pl_system_failure("fcntl(O_NONBLOCK)");
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return pl_system_failure("fcntl(FD_CLOEXEC)");
    return PL_OK;
}

/* ---- check-in ---------------------------------------------------------------------------------------- */

void pl_service_close_descriptors(pl_service_t *service) {
    if (service->listen_fd >= 0) close(service->listen_fd);
    service->listen_fd = -1;
    if (service->lock_fd >= 0) close(service->lock_fd);
    service->lock_fd = -1;
}

void pl_service_release(pl_service_t *service) {
    if (atomic_fetch_sub_explicit(&service->refs, 1, memory_order_acq_rel) != 1) return;
    pl_service_close_descriptors(service);
    free(service->withdraw_command); /* a plain allocation (pl_transport.c), unused */
    if (service->port != NULL) pl_port_release_internal(service->port);
    free(service->path);
    free(service->lock_path);
    free(service);
}

void pl_service_unlink(pl_service_t *service) {
    /* Only while our lock is held: no other process can have bound the name since. */
    if (service->path != NULL && !atomic_exchange(&service->unlinked, true)) unlink(service->path);
}

void pl_service_withdraw(pl_service_t *service) {
    if (service->withdrawn) return;
    service->withdrawn = true;
    if (service->activated && service->listen_fd >= 0) {
        /* systemd's socket: it still listens on systemd's copy, so it stays open for the next check-in of the
         * name, which serves the peers queued on it meanwhile (closed, the name could never be served again). */
        pl_activation_give_back(service->listen_fd);
        service->listen_fd = -1;
    }
    /* The name goes before the lock does, so that the next holder never finds our socket. */
    pl_service_unlink(service);
    pl_service_close_descriptors(service);
}

/* Whether a name held by this process may be on its way out (pl_transport_lock_may_be_ours); if so, pauses a
 * millisecond before the caller looks again. */
static bool pl_own_withdrawal_pending(pl_lock_wait_t *wait) {
    if (!pl_transport_lock_may_be_ours(wait)) return false;
    struct timespec pause = { .tv_sec = 0, .tv_nsec = 1000000 };
    nanosleep(&pause, NULL);
    return true;
}

/* Takes the name's lock and listens on a fresh socket. */
static pl_status_t pl_listen_on_name(const char *directory, const char *name, pl_service_t *service) {
    struct sockaddr_un address;
    if (pl_socket_address(directory, name, &address) != PL_OK) return PL_ERR_INVALID_ARG;
    size_t lock_size = strlen(directory) + strlen(name) + 8;
    service->lock_path = malloc(lock_size);
    service->path = strdup(address.sun_path);
    if (service->lock_path == NULL || service->path == NULL) return PL_ERR_NO_MEMORY;
    snprintf(service->lock_path, lock_size, "%s/.%s.lock", directory, name);

    /* Made while fork() waits: a child's handler closes an opening service's descriptors, and must not miss one. */
    PL_WHILE_FORK_WAITS(&service->lock_fd, open(service->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (service->lock_fd < 0) return pl_system_failure("open");
    pl_lock_wait_t wait = { 0 };
    while (flock(service->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) return pl_system_failure("flock");
        /* The holder may be this process, withdrawing the name (the name goes with the service's port at once, the
         * lock a moment later, when the transport closes it), or a child it forked a moment ago, not yet through
         * its fork handler. Otherwise the name is another live service's. */
        if (!pl_own_withdrawal_pending(&wait)) return PL_ERR_NAME_IN_USE;
    }
    /* The lock is ours: whatever socket is there was left by a process that is gone. */
    if (unlink(address.sun_path) != 0 && errno != ENOENT) return pl_system_failure("unlink");
    PL_WHILE_FORK_WAITS(&service->listen_fd, socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (service->listen_fd < 0) return pl_system_failure("socket");
    if (bind(service->listen_fd, (struct sockaddr *)&address, sizeof address) != 0) return pl_system_failure("bind");
    if (listen(service->listen_fd, 128) != 0) return pl_system_failure("listen");
    return PL_OK;
}

pl_status_t pl_service_check_in(const char *directory, const char *name, pl_port_t *port, const pl_policy_t *policy) {
    if (port == NULL || port->proxy != NULL) return PL_ERR_INVALID_ARG;
    pl_status_t status = pl_service_name_check(name, NULL);
    if (status != PL_OK) return status;
    int activated = -1;
    pl_lock_wait_t wait = { 0 };
    while ((status = pl_activation_fd(name, &activated)) == PL_ERR_NAME_IN_USE) {
        /* Adopted by a service of this process whose port was destroyed: the transport gives it back a moment
         * later, when it withdraws that service. */
        if (!pl_own_withdrawal_pending(&wait)) return status;
    }
    if (status != PL_OK) return status;
    if (activated < 0 && (status = pl_directory_check(directory, true)) != PL_OK) return status;
    pl_service_t *service = NULL;
    if ((status = pl_transport_start()) != PL_OK || (service = calloc(1, sizeof *service)) == NULL) {
        if (activated >= 0) pl_activation_give_back(activated);
        return status != PL_OK ? status : PL_ERR_NO_MEMORY;
    }
    atomic_init(&service->refs, 1); /* the port's */
    service->listen_fd = service->lock_fd = -1;
    service->policy = policy != NULL ? *policy : pl_policy_default();
    pl_transport_opening_add(service);
    if (activated >= 0) {
        status = pl_activation_check(activated);
        if (status == PL_OK) {
            service->listen_fd = activated;
            service->activated = true;
        }
    } else {
        status = pl_listen_on_name(directory, name, service);
    }
    if (status == PL_OK) {
        service->port = port;
        pl_port_retain_internal(port);
        status = pl_transport_add_service(service); /* where the port learns of it: nothing to undo if refused */
    }
    if (status != PL_OK) {
        int saved = errno;
        if (service->path != NULL && service->listen_fd >= 0 && activated < 0) unlink(service->path);
        if (activated >= 0) {
            service->listen_fd = -1; /* systemd's: kept open */
            pl_activation_give_back(activated);
        }
        pl_transport_opening_drop(service);
        pl_service_release(service);
        errno = saved;
    }
    return status;
}

/* ---- admitting a peer -------------------------------------------------------------------------------- */

/* Turns a peer away with a hello that says the service is full, written straight on its new socket (no connection
 * could be made for it: no memory, or no watch), so that its look-up answers that rather than that nobody is there. */
static void pl_service_turn_away(int fd) {
    uint8_t frame[PL_WIRE_HELLO_SIZE];
    size_t length = pl_wire_encode_hello(frame, PL_WIRE_VERSION, PL_HELLO_FULL, (pl_wire_right_t){ 0 });
    ssize_t sent;
    do { sent = send(fd, frame, length, MSG_NOSIGNAL | MSG_DONTWAIT); } while (sent < 0 && errno == EINTR);
}

void pl_service_accepted(pl_service_t *service, pl_pending_socket_t *pending) {
    pl_sender_t peer;
    pl_conn_t *conn = NULL;
    if (pl_identity_of_peer(pending->fd, &peer) != PL_OK || (conn = pl_conn_new(pending->fd, true)) == NULL) {
        pl_service_turn_away(pending->fd);
        pl_transport_pending_drop(pending);
        return;
    }
    conn->peer = peer;
    conn->service = service;
    atomic_fetch_add_explicit(&service->refs, 1, memory_order_relaxed);
    if (pl_transport_add_conn(conn, pending) != PL_OK) {
        pl_service_turn_away(pending->fd);
        conn->fd = -1; /* the pending socket's, closed with it */
        pl_conn_teardown(conn, "could not watch the connection");
        pl_transport_pending_drop(pending);
        pl_service_release(service);
        conn->service = NULL;
        pl_conn_release(conn);
        return;
    }
    service->connections++;
    uint32_t status = PL_HELLO_WELCOME;
    if (!pl_policy_admits(&service->policy, peer.uid, peer.gid)) status = PL_HELLO_REFUSED;
    else if (service->connections > PL_SERVICE_MAX_CONNECTIONS) status = PL_HELLO_FULL;
    pl_wire_right_t right = { 0 };
    bool dead = false;
    if (status == PL_HELLO_WELCOME) {
        pthread_mutex_lock(&conn->lock);
        if (pl_conn_export_locked(conn, service->port, &right, &dead) != PL_OK) status = PL_HELLO_FULL;
        pthread_mutex_unlock(&conn->lock);
    }
    if (status == PL_HELLO_WELCOME) {
        pthread_mutex_lock(&conn->lock);
        conn->welcomed = true; /* before the hello goes: the peer may ask for status once it has it */
        pthread_mutex_unlock(&conn->lock);
    }
    pl_conn_write_hello(conn, status, right);
    if (dead) pl_conn_write_control(conn, PL_FRAME_DEAD, right.handle, 0, 0);
    if (status != PL_HELLO_WELCOME) pl_transport_kill(conn, "refused");
    pl_conn_release(conn); /* the transport holds its own */
}

/* ---- look-up ----------------------------------------------------------------------------------------- */

/* A send right to the service port of a live, welcomed connection (the connection's lock held), or NULL. */
static pl_port_t *pl_bootstrap_right_locked(pl_conn_t *conn) {
    if (conn->dead || conn->given_up || !conn->hello_received || conn->hello_status != PL_HELLO_WELCOME) return NULL;
    pl_port_t *proxy = pl_handle_map_get(&conn->imports, conn->bootstrap_handle);
    if (proxy == NULL || !pl_port_is_alive(proxy)) return NULL; /* withdrawn: look again */
    pl_proxy_revive_locked(conn, proxy);
    pl_port_make_send(proxy);
    return proxy;
}

/* The status of a look-up whose connection ended before the service's hello: the service is gone, or this side's
 * transport ended a connection it had no memory for (its reasons say so). */
static pl_status_t pl_gone_before_hello(const char *why) {
    return why != NULL && strstr(why, "memory") != NULL ? PL_ERR_NO_MEMORY : PL_ERR_UNKNOWN_SERVICE;
}

/* Connects the pending socket (made here) to the address; the caller drops it on failure. */
static pl_status_t pl_connect(const struct sockaddr_un *address, int64_t deadline, pl_pending_socket_t *pending) {
    PL_WHILE_FORK_WAITS(&pending->fd, socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int fd = pending->fd;
    if (fd < 0) return pl_system_failure("socket");
    /* The service's hello will say who it is, in the kernel's words (see pl_cmsg.c). */
    pl_cmsg_ask_credentials(fd, true);
    for (;;) {
        if (connect(fd, (const struct sockaddr *)address, sizeof *address) == 0) break;
        if (errno == EINTR) continue;
        int error = errno;
        if (error == EAGAIN && pl_now_ns() < deadline) {
            /* The service's backlog is full: it is alive and busy. Try again shortly. */
            struct timespec pause = { .tv_sec = 0, .tv_nsec = 1000000 };
            nanosleep(&pause, NULL);
            continue;
        }
        if (error == ENOENT || error == ECONNREFUSED || error == ENOTDIR) return PL_ERR_UNKNOWN_SERVICE;
        if (error == EACCES || error == EPERM) return PL_ERR_REFUSED;
        if (error == EAGAIN) return PL_ERR_TIMED_OUT;
        errno = error;
        return pl_system_failure("connect");
    }
    return PL_OK;
}

pl_status_t pl_service_look_up(const char *directory, const char *name, int64_t timeout_ns, pl_port_t **out_right) {
    if (out_right == NULL || !pl_timeout_valid(timeout_ns)) return PL_ERR_INVALID_ARG;
    *out_right = NULL;
    pl_status_t status = pl_service_name_check(name, NULL);
    if (status != PL_OK) return status;
    struct sockaddr_un address;
    if (pl_socket_address(directory, name, &address) != PL_OK) return PL_ERR_INVALID_ARG;
    if ((status = pl_directory_check(directory, false)) != PL_OK) return status;
    if ((status = pl_transport_start()) != PL_OK) return status;

    /* A live connection to the same service serves again. */
    pl_conn_t *conn = pl_transport_find_client(address.sun_path);
    if (conn != NULL) {
        pthread_mutex_lock(&conn->lock);
        *out_right = pl_bootstrap_right_locked(conn);
        pthread_mutex_unlock(&conn->lock);
        pl_conn_release(conn);
        if (*out_right != NULL) return PL_OK;
    }

    int64_t deadline = pl_deadline_ns(timeout_ns);
    pl_pending_socket_t pending;
    pl_transport_pending_add(&pending);
    pl_sender_t peer;
    conn = NULL;
    if ((status = pl_connect(&address, deadline, &pending)) != PL_OK ||
        (status = pl_identity_of_peer(pending.fd, &peer)) != PL_OK || (conn = pl_conn_new(pending.fd, false)) == NULL ||
        (conn->lookup_key = strdup(address.sun_path)) == NULL) {
        if (status == PL_OK) status = PL_ERR_NO_MEMORY;
        if (conn != NULL) pl_conn_release(conn);
        pl_transport_pending_drop(&pending);
        return status;
    }
    conn->peer = peer;
    /* Our hello goes first, before the connection can be found: the service's may come back at once, and another
     * thread's look-up that finds the connection welcomed then sends on it, which must not overtake our hello (the
     * service ends a connection whose first frame is not a hello). The socket is new: the frame fits. */
    pl_conn_write_hello(conn, PL_HELLO_WELCOME, (pl_wire_right_t){ 0 });
    if ((status = pl_transport_add_conn(conn, &pending)) != PL_OK) {
        conn->fd = -1; /* the pending socket's, closed with it */
        if (status == PL_ERR_INVALID_DEST) {
            /* Killed before it was listed: a hello that could not go, or the service's end read already. What the
             * connection holds (a queued frame, a right read meanwhile) goes with it; a reader still at it (a command
             * for it the transport has yet to run) finishes first. */
            pthread_mutex_lock(&conn->read_lock);
            pl_conn_teardown(conn, conn->ended_early);
            pthread_mutex_unlock(&conn->read_lock);
            status = pl_gone_before_hello(conn->ended_early);
        }
        pl_conn_release(conn);
        pl_transport_pending_drop(&pending);
        return status;
    }

    pthread_mutex_lock(&conn->lock);
    while (!conn->hello_received && !conn->dead && pl_now_ns() < deadline) {
        pl_cond_wait_until(&conn->changed, &conn->lock, deadline);
    }
    if (conn->hello_received) {
        switch (conn->hello_status) {
        case PL_HELLO_WELCOME:
            *out_right = pl_bootstrap_right_locked(conn);
            status = *out_right != NULL ? PL_OK : PL_ERR_UNKNOWN_SERVICE;
            break;
        case PL_HELLO_REFUSED: status = PL_ERR_REFUSED; break;
        default: status = PL_ERR_NO_SPACE; break;
        }
    } else if (conn->dead) {
        status = pl_gone_before_hello(conn->death);
    } else {
        status = PL_ERR_TIMED_OUT;
    }
    /* Said under the lock that decided: a hello read after it must not hand another thread's look-up a right on a
     * connection this one is ending. */
    if (status != PL_OK) conn->given_up = true;
    pthread_mutex_unlock(&conn->lock);
    if (status != PL_OK) pl_transport_kill(conn, "look-up failed");
    pl_conn_release(conn); /* the transport holds its own */
    return status;
}
