/*
 * pl_transport.c — the one thread per process that reads every connection and every service's listening socket.
 *
 * It starts with the first check-in or look-up and lives as long as the process. It sleeps in an epoll of its
 * own; other threads reach it through a command queue and an eventfd (a connection to end, credit to send, a
 * service to withdraw). Each wake-up reads at most a batch of frames per connection, so that one busy peer
 * cannot starve the others. Connections it ends are freed at the end of the batch of events, so that a later
 * event of the same batch never reaches freed memory.
 *
 * A connection that feeds port sets (pl_feeder.c) wakes the transport only when none of its sets' receivers is
 * asleep in its poller: they are awake, and will find the frames when they next look. While frames stream in,
 * reading them here too would make two threads take turns at the socket, each woken by the peer's sends (and, on a
 * shared vCPU, preempting the sender). So a wake-up that comes soon after the last one (a stream), for a
 * connection whose sets have read since that one (they keep up), makes the transport stop watching it for a while
 * (it *rests*): the sets read what comes. When the rest ends, a connection whose sets read meanwhile rests on; one
 * they left alone is watched again and read at once, and its next wake-up reads too unless they read by then, so
 * that sets busy elsewhere (a loop blocked in a request whose answer comes over this very connection) hold nothing
 * up for more than a rest or two. A hang-up that wakes the transport is read at once; one that comes while the
 * connection rests, the sets see, or the rest's end.
 */
#define _GNU_SOURCE /* accept4 */
#include "pl_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define PL_TAG_WAKE 0u
#define PL_TAG_CONN 1u
#define PL_TAG_SERVICE 2u
#define PL_TAG_CONN_OUT 3u  /* a connection's duplicate, watched for room to write */
#define PL_TAG_CONN_BELL 4u /* a connection's bell, once its frames come by ring (pl_conn_ring.c) */
#define PL_FRAMES_PER_WAKE 64
#define PL_STREAM_GAP_NS 1000000LL /* a wake-up to read this soon after the last one finds a stream */
#define PL_REST_NS 1000000LL       /* how long a streaming connection is left to the sets it feeds */

typedef enum pl_command_kind {
    PL_CMD_FLUSH_OWED,
    PL_CMD_KILL,
    PL_CMD_WITHDRAW,
    PL_CMD_DROP_EXPORT,
    PL_CMD_READ,
    PL_CMD_REFUSED,
} pl_command_kind_t;

typedef struct pl_command {
    struct pl_command *next;
    pl_command_kind_t kind;
    pl_conn_t *conn;          /* a reference */
    pl_port_t *port;          /* a memory reference */
    const char *why;
    uint32_t handle;
} pl_command_t;

static struct {
    pthread_mutex_t lock;     /* everything below */
    bool started;
    int epoll_fd, wake_fd;
    pl_command_t *head, *tail;
    pl_conn_t *starved;       /* connections with work noted on them, no memory for a command (pl_post_starved) */
    bool wake_pending;
    pl_conn_t *conns;
    pl_service_t *services;
    pl_service_t *opening;    /* services being checked in, not yet in `services` (pl_transport_opening_add) */
    pl_pending_socket_t *pending; /* connections' sockets being made, not yet in `conns` (pl_transport_pending_add) */
    uint32_t connection_count;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER, .epoll_fd = -1, .wake_fd = -1 };

static void *pl_transport_main(void *unused);

/* Connections the transport does not watch for now (see the top), each with a reference; the transport thread's. */
static pl_conn_t *pl_resting;
static atomic_uint_fast64_t pl_rests; /* rests begun since the process started */
/* Withdrawals begun and done, counted since the process started. A destroyed service's name goes at once, but its
 * lock only when the transport closes it a moment later: a check-in of the same name from this process in that
 * moment would find the lock held, and waits for the withdrawals begun before it (pl_transport_lock_may_be_ours). */
static atomic_uint_fast64_t pl_withdrawals_begun, pl_withdrawals_done;
/* When this process last forked (pl_now_ns; 0: never). A child holds copies of the services' locks from the fork
 * until its handler closes them, and a check-in meanwhile finds the name held. */
static atomic_int_fast64_t pl_last_fork_ns;
/* Held while a descriptor of a service or a connection is made and stored, or closed and forgotten, and by fork()
 * (after T.lock): a child never has a descriptor its handler cannot see. A leaf: nothing else is taken in it. Apart
 * from T.lock, which is held for longer and more often; a slow open() of a lock file still holds up the transport
 * when it makes or closes a connection's socket meanwhile. */
static pthread_mutex_t pl_fork_gate = PTHREAD_MUTEX_INITIALIZER;

/* Connections ended and services withdrawn during a batch of events, freed after it (the transport thread's). */
static pl_conn_t *pl_graveyard;
static pl_service_t *pl_withdrawn;
/* Services whose listening socket is out of the epoll while descriptors are short (accept said EMFILE), linked
 * through next_paused, each with a reference: however many there are, since one left in would wake the transport
 * at once again and again. They are put back when pl_resume_at comes, not at every wake-up: put back, they are
 * ready at once, and more of them than one wait reports would keep the transport taking turns between them. */
#define PL_PAUSE_NS 100000000LL
static pl_service_t *pl_paused;
static int64_t pl_resume_at;
/* Connections a write found refused, their peer's hang-up not seen yet, each with a reference, linked through
 * next_refused in the order they came, so that the first is the first due (see pl_run_refused). */
static pl_conn_t *pl_refused;
static pl_conn_t **pl_refused_tail = &pl_refused;
/* The transport thread's frame buffer, made by pl_transport_start before the thread, so that a transport that
 * starts can always read: it is where work goes that another thread cannot do for want of a buffer. A child of
 * fork() keeps its copy for its own transport. */
static uint8_t *pl_transport_buffer;

uint64_t pl_remote_transport_rests(void) { return atomic_load_explicit(&pl_rests, memory_order_relaxed); }

/* fork() copies the process with only the forking thread: the child has no transport thread but would share the
 * parent's epoll instance, and a connection it made would be registered there, under an address that means
 * nothing in the parent. The child therefore forgets the parent's transport (its copies of the descriptors
 * closed, its connections and services left alone: they are the parent's) and starts its own when it first
 * needs one. Connections and rights inherited from the parent are not usable in the child. */
static void pl_transport_before_fork(void) {
    pthread_mutex_lock(&T.lock);
    pthread_mutex_lock(&pl_fork_gate);
}
static void pl_transport_after_fork_parent(void) {
    atomic_store_explicit(&pl_last_fork_ns, pl_now_ns(), memory_order_release);
    pthread_mutex_unlock(&pl_fork_gate);
    pthread_mutex_unlock(&T.lock);
}
static void pl_transport_after_fork_child(void) {
    if (T.started) {
        close(T.epoll_fd);
        close(T.wake_fd);
        for (pl_conn_t *conn = T.conns; conn != NULL; conn = conn->next) {
            conn->dead = true; /* its locks may be held by threads that do not exist here: nothing is taken */
            if (conn->fd >= 0) close(conn->fd);
            if (conn->out_fd >= 0) close(conn->out_fd);
            conn->fd = conn->out_fd = -1;
            /* The descriptors sent as attachments that wait in its queue (duplicates) are the parent's to send: a
             * child that kept them would hold the files open after the message went. */
            for (pl_out_frame_t *frame = conn->out_head; frame != NULL; frame = frame->next) {
                for (uint32_t i = 0; i < frame->fd_count; i++) close(frame->fds[i]);
                frame->fd_count = 0;
            }
            pl_ring_forget_in_child(conn->ring);
        }
        for (int list = 0; list < 2; list++) {
            for (pl_service_t *service = list == 0 ? T.services : T.opening; service != NULL; service = service->next) {
                pl_service_close_descriptors(service);
                service->withdrawn = true;
                service->path = NULL; /* the parent's name: never unlinked from here (leaked, as the copy is) */
            }
        }
    }
    /* Made by threads that do not exist here (their stacks are copied too). A look-up can make one before its
     * process's transport starts. */
    for (pl_pending_socket_t *pending = T.pending; pending != NULL; pending = pending->next) {
        if (pending->fd >= 0) close(pending->fd);
        pending->fd = -1;
    }
    T.pending = NULL;
    T.started = false;
    T.epoll_fd = T.wake_fd = -1;
    T.head = T.tail = NULL; /* the parent's commands (leaked in the child) */
    T.starved = NULL;
    /* The parent's withdrawals are the parent's, as its commands are. */
    atomic_store_explicit(&pl_withdrawals_done, atomic_load(&pl_withdrawals_begun), memory_order_relaxed);
    T.wake_pending = false;
    T.conns = NULL;
    T.services = NULL;
    T.opening = NULL; /* the check-ins of threads that do not exist here (leaked, as the copies are) */
    T.connection_count = 0;
    /* The transport thread's own lists: the parent's (their references leaked in the child, as the connections
     * and services are). */
    pl_resting = NULL;
    pl_graveyard = NULL;
    pl_withdrawn = NULL;
    pl_paused = NULL;
    pl_refused = NULL;
    pl_refused_tail = &pl_refused;
    pthread_mutex_unlock(&pl_fork_gate);
    pthread_mutex_unlock(&T.lock);
}

/* A message whose send returned may still wait in its connection's outgoing queue: packed with others while its
 * sender streams, or for room in a full socket. exit() sends what waits, as stdio flushes its buffers, so that a
 * process that sends and then ends normally loses nothing; a peer that does not read holds it up a second at most. */
#define PL_EXIT_FLUSH_NS 1000000000LL
/* Set when this process (or the parent it was forked from) first starts a transport, with its fork handlers: the
 * flush does nothing before, not even take T.lock, which a process with no fork handlers may have copied held. */
static atomic_bool pl_exit_flush_armed;
/* One connection at a time, each marked as it is taken, so that the flush needs no memory: T.lock cannot be held
 * while a connection is flushed (a write that fails there posts to the transport). From the flush on, a sender that
 * streams holds nothing back to pack: a send made after it (from an atexit handler that runs later) goes at once if
 * the socket or ring has room. */
static void pl_transport_flush_at_exit(void) {
    if (!atomic_load_explicit(&pl_exit_flush_armed, memory_order_acquire)) return;
    pl_conn_stop_packing();
    int64_t deadline = pl_now_ns() + PL_EXIT_FLUSH_NS;
    for (;;) {
        pthread_mutex_lock(&T.lock);
        pl_conn_t *conn = T.conns;
        while (conn != NULL && (conn->ending || conn->exit_flushed)) conn = conn->next;
        if (conn != NULL) {
            conn->exit_flushed = true;
            pl_conn_retain(conn);
        }
        pthread_mutex_unlock(&T.lock);
        if (conn == NULL) return;
        pl_conn_flush_before_exit(conn, deadline);
        pl_conn_release(conn);
    }
}

/* atexit handlers run in the reverse order of their registration. Registered when the library is loaded, before
 * main() runs, the flush runs after every handler the program registers, whenever it does: what such a handler
 * sends is flushed too. */
__attribute__((constructor)) static void pl_register_exit_flush(void) { atexit(pl_transport_flush_at_exit); }

static pthread_once_t pl_fork_handlers_once = PTHREAD_ONCE_INIT;
static void pl_install_fork_handlers(void) {
    pthread_atfork(pl_transport_before_fork, pl_transport_after_fork_parent, pl_transport_after_fork_child);
    atomic_store_explicit(&pl_exit_flush_armed, true, memory_order_release);
}

pl_status_t pl_transport_start(void) {
    pthread_once(&pl_fork_handlers_once, pl_install_fork_handlers);
    pthread_mutex_lock(&T.lock);
    pl_status_t status = PL_OK;
    if (!T.started) {
        if (pl_transport_buffer == NULL) pl_transport_buffer = malloc(PL_FRAME_BUFFER_BYTES);
        int epoll_fd = pl_transport_buffer == NULL ? -1 : epoll_create1(EPOLL_CLOEXEC);
        int wake_fd = epoll_fd < 0 ? -1 : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        struct epoll_event wake = { .events = EPOLLIN, .data.u64 = PL_TAG_WAKE };
        pthread_t thread;
        pthread_attr_t attr;
        int error = 0;
        if (pl_transport_buffer == NULL) {
            status = PL_ERR_NO_MEMORY;
        } else if (epoll_fd < 0) {
            status = pl_system_failure("epoll_create1");
        } else if (wake_fd < 0) {
            status = pl_system_failure("eventfd");
        } else if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &wake) != 0) {
            status = pl_system_failure("epoll_ctl");
        } else {
            T.epoll_fd = epoll_fd;
            T.wake_fd = wake_fd;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            error = pthread_create(&thread, &attr, pl_transport_main, NULL);
            pthread_attr_destroy(&attr);
            if (error != 0) {
                errno = error;
                status = pl_system_failure("pthread_create");
            }
        }
        if (status == PL_OK) {
            T.started = true;
        } else {
            int saved = errno;
            if (wake_fd >= 0) close(wake_fd);
            if (epoll_fd >= 0) close(epoll_fd);
            T.epoll_fd = T.wake_fd = -1;
            errno = saved;
        }
    }
    pthread_mutex_unlock(&T.lock);
    return status;
}

/* ---- commands --------------------------------------------------------------------------------------- */

/* Wakes the transport for work just queued, unless a wake-up is pending already, and lets go of T.lock. */
static void pl_wake_transport_unlock(void) {
    bool wake = !T.wake_pending;
    T.wake_pending = true;
    int fd = T.wake_fd;
    pthread_mutex_unlock(&T.lock);
    if (wake && fd >= 0) {
        uint64_t one = 1;
        ssize_t n;
        do { n = write(fd, &one, sizeof one); } while (n < 0 && errno == EINTR);
    }
}

/* Fills in `command` (allocated by the caller) and queues it: whether it was. If not, it is freed. */
static bool pl_post_command(pl_command_t *command, pl_command_kind_t kind, pl_conn_t *conn, pl_port_t *port,
                            const char *why, uint32_t handle) {
    *command = (pl_command_t){ .kind = kind, .handle = handle, .conn = conn, .port = port, .why = why };
    if (conn != NULL) pl_conn_retain(conn);
    if (port != NULL) pl_port_retain_internal(port);
    pthread_mutex_lock(&T.lock);
    if (!T.started) {
        /* No transport (a connection driven by hand, as the fuzz harness does): nothing to hand the work to. */
        pthread_mutex_unlock(&T.lock);
        if (conn != NULL) pl_conn_release(conn);
        if (port != NULL) pl_port_release_internal(port);
        free(command);
        return false;
    }
    if (T.tail != NULL) T.tail->next = command; else T.head = command;
    T.tail = command;
    pl_wake_transport_unlock();
    return true;
}

/* Work for a connection with no memory for its command: a bit on the connection, which the transport runs as the
 * command would (a drop becomes a look at every export for unused ones), so that no kill, read or drop is lost.
 * Whether it was noted. */
static bool pl_post_starved(pl_command_kind_t kind, pl_conn_t *conn, const char *why) {
    pthread_mutex_lock(&T.lock);
    if (!T.started) {
        pthread_mutex_unlock(&T.lock);
        return false;
    }
    if (conn->starved_work == 0) {
        pl_conn_retain(conn);
        conn->next_starved = T.starved;
        T.starved = conn;
    }
    conn->starved_work |= 1u << kind;
    if (kind == PL_CMD_KILL && conn->starved_why == NULL) conn->starved_why = why;
    pl_wake_transport_unlock();
    return true;
}

/* Whether the command was queued. */
static bool pl_post_handle(pl_command_kind_t kind, pl_conn_t *conn, pl_port_t *port, const char *why,
                           uint32_t handle) {
    pl_command_t *command = calloc(1, sizeof *command);
    if (command == NULL) return conn != NULL && pl_post_starved(kind, conn, why);
    return pl_post_command(command, kind, conn, port, why, handle);
}

static void pl_post(pl_command_kind_t kind, pl_conn_t *conn, pl_port_t *port, const char *why) {
    pl_post_handle(kind, conn, port, why, 0);
}

void pl_transport_flush_owed(pl_conn_t *conn) { pl_post(PL_CMD_FLUSH_OWED, conn, NULL, NULL); }
void pl_transport_drop_export(pl_conn_t *conn, uint32_t handle) {
    pl_post_handle(PL_CMD_DROP_EXPORT, conn, NULL, NULL, handle);
}
void pl_transport_read(pl_conn_t *conn) { pl_post(PL_CMD_READ, conn, NULL, NULL); }

/* Set while the transport wakes at least once a second to sweep idle proxies. A proxy that goes idle wakes the
 * transport only when it is not set: a reply port's proxy goes idle after every reply, and a wake-up per round
 * trip would cost a context switch each. The transport lets it go only when a timed-out wait finds no idle proxy
 * (pl_sweep_timeout); both sides use sequentially consistent order, so one of them always sees the other. */
static atomic_bool pl_sweep_armed;

void pl_transport_sweep_soon(pl_conn_t *conn) {
    if (!atomic_load_explicit(&pl_sweep_armed, memory_order_seq_cst)) pl_post(PL_CMD_FLUSH_OWED, conn, NULL, NULL);
}

/* The next wait's timeout for sweeping idle proxies: 1 s while armed, else none (-1). */
static int pl_sweep_timeout(bool timed_out) {
    bool armed = atomic_load_explicit(&pl_sweep_armed, memory_order_relaxed);
    if (armed && !timed_out) return 1000;
    if (armed) atomic_store_explicit(&pl_sweep_armed, false, memory_order_seq_cst);
    if (pl_proxy_idle_total() == 0) return -1;
    atomic_store_explicit(&pl_sweep_armed, true, memory_order_seq_cst);
    return 1000;
}
void pl_transport_kill(pl_conn_t *conn, const char *why) { pl_post(PL_CMD_KILL, conn, NULL, why); }
void pl_transport_peer_refused(pl_conn_t *conn) { pl_post(PL_CMD_REFUSED, conn, NULL, NULL); }
void pl_transport_withdrawal_begin(void) { atomic_fetch_add_explicit(&pl_withdrawals_begun, 1, memory_order_seq_cst); }

void pl_transport_withdraw(pl_port_t *port, pl_service_t *service) {
    /* With the command made at check-in: a withdrawal is never lost for want of memory. */
    pl_command_t *command = service->withdraw_command;
    service->withdraw_command = NULL;
    if (command == NULL || !pl_post_command(command, PL_CMD_WITHDRAW, NULL, port, NULL, 0)) {
        atomic_fetch_add_explicit(&pl_withdrawals_done, 1, memory_order_release); /* no transport: nothing to do */
    }
}

/* How long a check-in waits for this process's own withdrawals before it calls a held name in use. */
#define PL_WITHDRAW_WAIT_NS 2000000000LL
/* How long after a fork() a check-in waits for the child's copy of a lock to close (its fork handler's first work). */
#define PL_FORK_COPY_WAIT_NS 50000000LL

bool pl_transport_lock_may_be_ours(pl_lock_wait_t *wait) {
    int64_t now = pl_now_ns();
    if (wait->since == 0) {
        wait->since = now;
        wait->withdrawals = atomic_load_explicit(&pl_withdrawals_begun, memory_order_seq_cst);
    }
    /* Commands run in order: once as many are done as had begun, those that had begun are done. */
    if (atomic_load_explicit(&pl_withdrawals_done, memory_order_acquire) < wait->withdrawals &&
        now - wait->since < PL_WITHDRAW_WAIT_NS) {
        return true;
    }
    if (wait->settled == 0) {
        /* One more look: the withdrawal may have closed the lock after the check-in found it held. */
        wait->settled = now;
        return true;
    }
    /* A child's copy is of a lock held when it was forked: after this process's withdrawals, a fork made more than
     * 50 ms ago has no copy left, and one made since copied another holder's lock, or none. */
    int64_t forked = atomic_load_explicit(&pl_last_fork_ns, memory_order_acquire);
    return forked != 0 && now - forked < PL_FORK_COPY_WAIT_NS && now - wait->settled < PL_FORK_COPY_WAIT_NS;
}
void pl_transport_reclaim(pl_port_t *port) { pl_remote_reclaim(port); }

/* ---- registration ----------------------------------------------------------------------------------- */

/* The transport's watch of a connection's socket: exclusive, so that the kernel wakes one watcher, and after the
 * sets' (it is added after theirs, and moved behind each new one), so that a set's sleeping receiver is that one. */
static struct epoll_event pl_conn_watch(pl_conn_t *conn) {
    return (struct epoll_event){ .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = (uint64_t)(uintptr_t)conn | PL_TAG_CONN };
}

/* The same for its bell, once its frames come by ring: edge-triggered, since a bell is never read. */
static struct epoll_event pl_bell_watch(pl_conn_t *conn) {
    return (struct epoll_event){ .events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE,
                                 .data.u64 = (uint64_t)(uintptr_t)conn | PL_TAG_CONN_BELL };
}

/* Puts the transport's watch of the connection at the back of the socket's queue (and of the bell's). false: it
 * could not be added (no memory, or the user's epoll watches are used up), and the connection is not watched. */
static bool pl_watch_at_back(pl_conn_t *conn) {
    bool watched = true;
    pthread_mutex_lock(&conn->write_lock); /* keeps the descriptors open */
    int bell = atomic_load_explicit(&conn->bell_watched, memory_order_acquire);
    if (conn->fd >= 0 && T.epoll_fd >= 0) {
        struct epoll_event event = pl_conn_watch(conn);
        epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, conn->fd, NULL);
        /* level-triggered: readiness now is not lost */
        watched = epoll_ctl(T.epoll_fd, EPOLL_CTL_ADD, conn->fd, &event) == 0 || errno == EEXIST;
    }
    if (watched && bell >= 0 && T.epoll_fd >= 0) {
        /* An edge that came while it was not watched is not lost either: adding a rung bell reports it. */
        struct epoll_event event = pl_bell_watch(conn);
        epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, bell, NULL);
        watched = epoll_ctl(T.epoll_fd, EPOLL_CTL_ADD, bell, &event) == 0 || errno == EEXIST;
    }
    pthread_mutex_unlock(&conn->write_lock);
    return watched;
}

/* Takes the transport's watches of a connection away (write_lock held). The bell always by hand: the peer holds it
 * open, so closing ours would not take it out of the epoll. */
static void pl_unwatch_locked(pl_conn_t *conn) {
    int bell = atomic_load_explicit(&conn->bell_watched, memory_order_acquire);
    if (conn->fd >= 0) epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, conn->fd, NULL);
    if (bell >= 0) epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, bell, NULL);
}

void pl_transport_rewatch(pl_conn_t *conn) { (void)pl_watch_at_back(conn); }

/* Takes `pending` off T.pending (T.lock held). */
static void pl_pending_remove_locked(pl_pending_socket_t *pending) {
    pl_pending_socket_t **link = &T.pending;
    while (*link != NULL && *link != pending) link = &(*link)->next;
    if (*link != NULL) *link = pending->next;
    pending->next = NULL;
}

void pl_transport_pending_add(pl_pending_socket_t *pending) {
    pending->fd = -1;
    pthread_mutex_lock(&T.lock);
    pending->next = T.pending;
    T.pending = pending;
    pthread_mutex_unlock(&T.lock);
}

void pl_transport_pending_drop(pl_pending_socket_t *pending) {
    int saved = errno;
    pthread_mutex_lock(&T.lock);
    pl_pending_remove_locked(pending);
    if (pending->fd >= 0) close(pending->fd);
    pending->fd = -1;
    pthread_mutex_unlock(&T.lock);
    errno = saved;
}

pl_status_t pl_transport_add_conn(pl_conn_t *conn, pl_pending_socket_t *pending) {
    struct epoll_event event = pl_conn_watch(conn);
    pthread_mutex_lock(&T.lock);
    if (conn->ended_early != NULL) {
        pthread_mutex_unlock(&T.lock);
        return PL_ERR_INVALID_DEST;
    }
    if (epoll_ctl(T.epoll_fd, EPOLL_CTL_ADD, conn->fd, &event) != 0) {
        pl_status_t status = pl_system_failure("epoll_ctl");
        int saved = errno;
        pthread_mutex_unlock(&T.lock);
        errno = saved;
        return status;
    }
    pl_pending_remove_locked(pending);
    pending->fd = -1; /* the connection's now */
    pl_conn_retain(conn);
    conn->next = T.conns;
    T.conns = conn;
    T.connection_count++;
    pthread_mutex_unlock(&T.lock);
    return PL_OK;
}

/* Takes `service` off a list of T's, if it is there (T.lock held): whether it was. */
static bool pl_service_list_remove(pl_service_t **head, pl_service_t *service) {
    pl_service_t **link = head;
    while (*link != NULL && *link != service) link = &(*link)->next;
    if (*link == NULL) return false;
    *link = service->next;
    service->next = NULL;
    return true;
}

void pl_transport_opening_add(pl_service_t *service) {
    pthread_mutex_lock(&T.lock);
    service->next = T.opening;
    T.opening = service;
    pthread_mutex_unlock(&T.lock);
}

void pl_transport_opening_drop(pl_service_t *service) {
    pthread_mutex_lock(&T.lock);
    pl_service_list_remove(&T.opening, service);
    pl_service_close_descriptors(service);
    pthread_mutex_unlock(&T.lock);
}

void pl_transport_hold_fork(void) { pthread_mutex_lock(&pl_fork_gate); }
void pl_transport_release_fork(void) { pthread_mutex_unlock(&pl_fork_gate); }
void pl_transport_close_descriptor(int *slot) {
    int saved = errno;
    pthread_mutex_lock(&pl_fork_gate);
    if (*slot >= 0) close(*slot);
    *slot = -1;
    pthread_mutex_unlock(&pl_fork_gate);
    errno = saved;
}

pl_status_t pl_transport_add_service(pl_service_t *service) {
    pl_port_t *port = service->port;
    struct epoll_event event = { .events = EPOLLIN, .data.u64 = (uint64_t)(uintptr_t)service | PL_TAG_SERVICE };
    pl_status_t status = PL_OK;
    if (service->withdraw_command == NULL && (service->withdraw_command = calloc(1, sizeof(pl_command_t))) == NULL) {
        return PL_ERR_NO_MEMORY;
    }
    /* The port learns of its service in the same hold of T.lock that lists it: a destruction of the port that sees
     * the service finds it among T.services when its withdrawal runs (the transport takes T.lock for that). The
     * port's lock first: the credit code posts to the transport (T.lock) while it holds a port's. */
    pthread_mutex_lock(&port->lock);
    pthread_mutex_lock(&T.lock);
    if (port->dead || port->service != NULL) {
        status = PL_ERR_INVALID_ARG;
    } else if (epoll_ctl(T.epoll_fd, EPOLL_CTL_ADD, service->listen_fd, &event) != 0) {
        status = pl_system_failure("epoll_ctl");
    } else {
        port->service = service;
        atomic_fetch_add_explicit(&service->refs, 1, memory_order_relaxed);
        pl_service_list_remove(&T.opening, service);
        service->next = T.services;
        T.services = service;
    }
    int saved = errno;
    pthread_mutex_unlock(&T.lock);
    pthread_mutex_unlock(&port->lock);
    errno = saved;
    return status;
}

/* Set when a wait for room found no descriptor to watch with: the transport then looks, a tenth of a second
 * apart, at the connections left so (want_writable, no out_fd), until each is watched or drained. */
static atomic_bool pl_room_unwatched;

/* Room to write is watched on a duplicate of the socket: an exclusive watch cannot be modified (EPOLL_CTL_MOD),
 * and a second watch of the same descriptor is refused. write_lock held: the descriptor is open. */
void pl_transport_want_writable(pl_conn_t *conn) {
    if (T.epoll_fd < 0 || conn->out_fd >= 0) return;
    PL_WHILE_FORK_WAITS(&conn->out_fd, fcntl(conn->fd, F_DUPFD_CLOEXEC, 0));
    struct epoll_event event = { .events = EPOLLOUT, .data.u64 = (uint64_t)(uintptr_t)conn | PL_TAG_CONN_OUT };
    if (conn->out_fd < 0 || epoll_ctl(T.epoll_fd, EPOLL_CTL_ADD, conn->out_fd, &event) != 0) {
        /* No descriptor to watch with: the transport, woken to take up its tenth-second looks, tries again. */
        pl_transport_close_descriptor(&conn->out_fd);
        if (!atomic_exchange_explicit(&pl_room_unwatched, true, memory_order_seq_cst)) pl_transport_read(conn);
    }
}

static void pl_transport_writable_done(pl_conn_t *conn) {
    pthread_mutex_lock(&conn->write_lock);
    if (conn->out_fd >= 0 && !conn->want_writable) {
        epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, conn->out_fd, NULL);
        pl_transport_close_descriptor(&conn->out_fd);
    }
    pthread_mutex_unlock(&conn->write_lock);
}

pl_conn_t *pl_transport_find_client(const char *key) {
    pthread_mutex_lock(&T.lock);
    pl_conn_t *found = NULL;
    for (pl_conn_t *conn = T.conns; conn != NULL; conn = conn->next) {
        if (!conn->accepted && !conn->ending && conn->lookup_key != NULL && strcmp(conn->lookup_key, key) == 0) {
            found = conn;
            pl_conn_retain(found);
            break;
        }
    }
    pthread_mutex_unlock(&T.lock);
    return found;
}

void pl_remote_stats(uint32_t *out_connections, uint32_t *out_exports, uint32_t *out_imports) {
    pthread_mutex_lock(&T.lock);
    uint32_t connections = T.connection_count;
    pthread_mutex_unlock(&T.lock);
    if (out_connections != NULL) *out_connections = connections;
    if (out_exports != NULL) *out_exports = pl_export_total();
    if (out_imports != NULL) *out_imports = pl_proxy_import_total();
}

/* ---- ending connections ----------------------------------------------------------------------------- */

/* What a peer that stopped reading sent before (frames in the socket, records in the ring) is read before its
 * connection ends, as a closing peer's last frames are (read lock held): turns of PL_FRAMES_PER_WAKE packets or
 * records and PL_END_READ_TURN_BYTES (plus the one that crosses it) until nothing is left. At most
 * PL_END_READ_TURNS of them, for a peer that sends on and on: 65,536 packets or records, or 16 MiB and some, past
 * what a full socket and a full ring of the smallest records hold. Returns why the connection ends: `why`, or what the
 * reading found (the peer's end, a frame that breaks the rules). */
#define PL_END_READ_TURNS 1024
#define PL_END_READ_TURN_BYTES ((size_t)16 * 1024)
static const char *pl_read_before_end(pl_conn_t *conn, const char *why) {
    for (int turn = 0; turn < PL_END_READ_TURNS; turn++) {
        const char *found = NULL;
        atomic_store_explicit(&conn->read_again, false, memory_order_relaxed); /* this reading covers any note */
        pl_read_result_t result = pl_conn_read_frames(conn, pl_transport_buffer, PL_FRAMES_PER_WAKE,
                                                      PL_END_READ_TURN_BYTES, &found);
        if (result == PL_READ_ENDED) return found;
        if (result == PL_READ_DRAINED) break;
    }
    return why;
}

/* The connection stays among T.conns, marked ending, until its teardown has closed its sockets: a child of fork()
 * meanwhile closes its copies, as of any connection of the transport's. With `read_first`, what the peer sent is
 * read before the teardown (pl_read_before_end). */
static void pl_transport_end_reading(pl_conn_t *conn, const char *why, bool read_first) {
    pthread_mutex_lock(&T.lock);
    pl_conn_t **link = &T.conns;
    while (*link != NULL && *link != conn) link = &(*link)->next;
    bool first = *link != NULL && !conn->ending;
    /* Only a listed connection: one not listed yet (a look-up's, before pl_transport_add_conn) would otherwise have
     * its real end, read once it is, taken for a second one and ignored. Its kill is noted instead, for the listing
     * to refuse: dropped, it would leave the connection to live on (its hello may never have gone). */
    if (first) conn->ending = true;
    else if (*link == NULL && !conn->ending && conn->ended_early == NULL) {
        conn->ended_early = why != NULL ? why : "ended";
    }
    pthread_mutex_unlock(&T.lock);
    if (!first) return; /* ended already, being ended, or not the transport's (yet) */
    pthread_mutex_lock(&conn->read_lock); /* a set's receiver reading it finishes first */
    if (read_first) why = pl_read_before_end(conn, why);
    pthread_mutex_lock(&conn->write_lock);
    pl_unwatch_locked(conn);
    if (conn->out_fd >= 0) epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, conn->out_fd, NULL);
    pthread_mutex_unlock(&conn->write_lock);
    if (conn->service != NULL) conn->service->connections--;
    pl_conn_teardown(conn, why);
    pthread_mutex_unlock(&conn->read_lock);
    /* Counted gone only now that its rights are released: statistics that say no connection say no right. */
    pthread_mutex_lock(&T.lock);
    for (link = &T.conns; *link != NULL && *link != conn;) link = &(*link)->next;
    if (*link != NULL) *link = conn->next;
    T.connection_count--;
    pthread_mutex_unlock(&T.lock);
    conn->next = pl_graveyard;
    pl_graveyard = conn;
}

static void pl_transport_end(pl_conn_t *conn, const char *why) { pl_transport_end_reading(conn, why, false); }

static void pl_bury(void) {
    while (pl_graveyard != NULL) {
        pl_conn_t *conn = pl_graveyard;
        pl_graveyard = conn->next;
        pl_service_t *service = conn->service;
        conn->service = NULL;
        if (service != NULL) pl_service_release(service);
        pl_conn_release(conn); /* the transport's reference */
    }
    while (pl_withdrawn != NULL) {
        pl_service_t *service = pl_withdrawn;
        pl_withdrawn = service->next;
        pl_service_release(service); /* the transport's reference */
        pl_service_release(service); /* the port's */
    }
}

static bool pl_is_withdrawn(const pl_service_t *service) {
    for (pl_service_t *s = pl_withdrawn; s != NULL; s = s->next) {
        if (s == service) return true;
    }
    return false;
}

/* Puts paused listeners back: a look now and then until descriptors are free again. One whose watch cannot be
 * made (no memory, or the user's epoll watches used up) stays paused for the next look: dropped, it would never be
 * watched again. */
static void pl_resume_listeners(int64_t now) {
    if (pl_paused == NULL || now < pl_resume_at) return;
    pl_service_t *paused = pl_paused;
    pl_paused = NULL;
    pl_resume_at = now + PL_PAUSE_NS;
    while (paused != NULL) {
        pl_service_t *service = paused;
        paused = service->next_paused;
        service->next_paused = NULL;
        if (!service->withdrawn) {
            struct epoll_event event = { .events = EPOLLIN, .data.u64 = (uint64_t)(uintptr_t)service | PL_TAG_SERVICE };
            if (epoll_ctl(T.epoll_fd, EPOLL_CTL_ADD, service->listen_fd, &event) != 0 && errno != EEXIST) {
                service->next_paused = pl_paused;
                pl_paused = service;
                continue;
            }
        }
        pl_service_release(service);
    }
}

/* ---- resting: streams left to the sets they feed (see the top) ------------------------------------- */

static pl_read_result_t pl_read_conn(pl_conn_t *conn, uint8_t *buffer);

static bool pl_feeds_sets(pl_conn_t *conn) {
    pthread_mutex_lock(&conn->feeds_lock);
    bool feeds = conn->feeds != NULL;
    pthread_mutex_unlock(&conn->feeds_lock);
    return feeds;
}

static void pl_unwatch(pl_conn_t *conn) {
    pthread_mutex_lock(&conn->write_lock); /* keeps the descriptors open */
    pl_unwatch_locked(conn);
    pthread_mutex_unlock(&conn->write_lock);
}

/* Stops watching a connection for PL_REST_NS (it is not resting already). */
static void pl_rest_begin(pl_conn_t *conn, int64_t now) {
    pl_unwatch(conn);
    atomic_fetch_add_explicit(&pl_rests, 1, memory_order_relaxed);
    conn->rest_until = now + PL_REST_NS;
    conn->set_read_at_rest = atomic_load_explicit(&conn->set_packets_read, memory_order_relaxed);
    pl_conn_retain(conn);
    conn->next_resting = pl_resting;
    pl_resting = conn;
}

/* Whether to leave what woke the transport (`events` on `conn`, at `now`) to the sets the connection feeds. */
static bool pl_rest(pl_conn_t *conn, uint32_t events, int64_t now) {
    if ((events & (EPOLLHUP | EPOLLERR)) != 0) return false;
    int64_t last = conn->last_read_wake;
    uint64_t set_read = atomic_load_explicit(&conn->set_packets_read, memory_order_relaxed);
    bool sets_kept_up = set_read != conn->set_read_at_wake; /* they read since the last wake-up */
    conn->last_read_wake = now;
    conn->set_read_at_wake = set_read;
    if (conn->rest_until != 0) {
        /* Resting, and watched again meanwhile (a set that started to watch moves the transport's watch behind its
         * own): the rest goes on. */
        pl_unwatch(conn);
        return true;
    }
    /* By ring, the sets read only what the transport leaves them: it must leave first. A set that is awake finds
     * the bell's edge in its poller when it next looks; one that sleeps is woken by it, now that the transport's
     * watch is off; and the rest's end reads what no set took. */
    bool ring = atomic_load_explicit(&conn->bell_watched, memory_order_acquire) >= 0;
    if (now - last > PL_STREAM_GAP_NS || !(sets_kept_up || ring) || !pl_feeds_sets(conn)) return false;
    pl_rest_begin(conn, now);
    return true;
}

/* Ends the rests that are due (see the top). Returns the milliseconds until the next one is due, or -1. */
static int pl_end_rests(int64_t now, uint8_t *buffer) {
    int64_t next = INT64_MAX;
    for (pl_conn_t **link = &pl_resting; *link != NULL;) {
        pl_conn_t *conn = *link;
        bool ended = atomic_load_explicit(&conn->ended, memory_order_acquire);
        if (!ended && conn->rest_until > now) {
            if (conn->rest_until < next) next = conn->rest_until;
            link = &conn->next_resting;
            continue;
        }
        uint64_t read = atomic_load_explicit(&conn->set_packets_read, memory_order_relaxed);
        /* The sets are reading: rest on. Or the watch cannot be put back (no memory, the user's epoll watches used
         * up): try again after another rest, reading meanwhile what waits. */
        bool rest_on = !ended && read != conn->set_read_at_rest && pl_feeds_sets(conn);
        if (!ended && !rest_on && !pl_watch_at_back(conn)) {
            pl_read_conn(conn, buffer);
            rest_on = true;
        }
        if (rest_on) {
            conn->set_read_at_rest = read;
            conn->rest_until = now + PL_REST_NS;
            if (conn->rest_until < next) next = conn->rest_until;
            link = &conn->next_resting;
            continue;
        }
        *link = conn->next_resting;
        conn->rest_until = 0;
        conn->set_read_at_wake = read; /* left alone by the sets: the next wake-up reads, unless they read by then */
        if (!ended) pl_read_conn(conn, buffer); /* what waits (nothing, most likely) */
        pl_conn_release(conn);
    }
    if (next == INT64_MAX) return -1;
    return (int)((next - now + 999999) / 1000000);
}

/* Ends a connection's rest at once, if it rests; if its watch cannot be put back, the rest's end tries again. */
static void pl_end_rest_now(pl_conn_t *conn) {
    if (conn->rest_until == 0) return;
    for (pl_conn_t **link = &pl_resting; *link != NULL; link = &(*link)->next_resting) {
        if (*link != conn) continue;
        if (!atomic_load_explicit(&conn->ended, memory_order_acquire) && !pl_watch_at_back(conn)) return;
        *link = conn->next_resting;
        conn->rest_until = 0;
        pl_conn_release(conn); /* the caller holds a reference of its own */
        return;
    }
}

/* ---- the loop --------------------------------------------------------------------------------------- */

/* PL_CMD_READ: a reader handed over a flood; on a resting connection, the watch must report what is left. */
static void pl_run_read(pl_conn_t *conn) {
    if (pl_read_conn(conn, pl_transport_buffer) == PL_READ_MORE &&
        atomic_load_explicit(&conn->bell_watched, memory_order_acquire) < 0) {
        pl_end_rest_now(conn);
    }
}

/* PL_CMD_REFUSED: a write found the peer taking nothing more. A peer that closed (or shut its writing side) left an
 * end to read after its last frames, and the reader ends the connection there; one that only shut its reading side
 * sends on, and no end comes: nothing more can reach it, and its connection ends now, once what it sent before is
 * read (whoever held the reading back: another reader, or this thread's turn not come yet). A closing peer's kernel
 * marks its own side, which refuses the write, a moment before ours: a connection whose mark is not there yet is
 * looked at again PL_REFUSED_LOOK_NS later (pl_look_again_at_refused). The looks never wait: this thread serves
 * every connection, and a peer that connects again and again only to stop reading would otherwise hold it. */
#define PL_REFUSED_LOOK_NS 10000000LL

/* Whether the connection's end is coming (its peer's hang-up is marked) or it is gone already. Only this thread
 * closes a listed connection's socket, so it stays open without the write lock, which senders want. */
static bool pl_refused_end_coming(pl_conn_t *conn) {
    if (atomic_load_explicit(&conn->ended, memory_order_acquire)) return true;
    pthread_mutex_lock(&conn->write_lock);
    int fd = conn->fd;
    pthread_mutex_unlock(&conn->write_lock);
    struct pollfd hangup = { .fd = fd, .events = POLLRDHUP }; /* pending frames are no end */
    return fd < 0 || (poll(&hangup, 1, 0) > 0 && (hangup.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0);
}

static void pl_run_refused(pl_conn_t *conn) {
    /* One in the list already has its second look coming. */
    if (conn->refused_look_at != 0 || pl_refused_end_coming(conn)) return;
    pl_conn_retain(conn);
    conn->refused_look_at = pl_now_ns() + PL_REFUSED_LOOK_NS;
    conn->next_refused = NULL;
    *pl_refused_tail = conn;
    pl_refused_tail = &conn->next_refused;
}

/* The second looks that are due: a connection with no hang-up by then has a peer that does not read. Returns the
 * milliseconds until the next one is due, or -1. */
static int pl_look_again_at_refused(int64_t now) {
    while (pl_refused != NULL && pl_refused->refused_look_at <= now) {
        pl_conn_t *conn = pl_refused;
        pl_refused = conn->next_refused;
        if (pl_refused == NULL) pl_refused_tail = &pl_refused;
        conn->next_refused = NULL;
        conn->refused_look_at = 0;
        if (!pl_refused_end_coming(conn)) pl_transport_end_reading(conn, "the peer does not read any more", true);
        pl_conn_release(conn); /* the list's */
    }
    if (pl_refused == NULL) return -1;
    return (int)((pl_refused->refused_look_at - now + 999999) / 1000000);
}

/* Gathers the handles of unused exports, as many as fit (the connection's lock held). */
#define PL_UNUSED_BATCH 32u
typedef struct pl_unused_exports {
    uint32_t handles[PL_UNUSED_BATCH];
    uint32_t count;
} pl_unused_exports_t;

static void pl_gather_unused_export(uint32_t handle, void *value, void *context) {
    pl_unused_exports_t *unused = context;
    if (((pl_export_t *)value)->transfers == 0 && unused->count < PL_UNUSED_BATCH) {
        unused->handles[unused->count++] = handle;
    }
}

/* PL_CMD_DROP_EXPORT: the export `handle` if no right to it is left in flight; with `every`, each such export of
 * the connection (the drops noted when no command could be had). */
static void pl_run_drop(pl_conn_t *conn, uint32_t handle, bool every) {
    pthread_mutex_lock(&conn->read_lock); /* exports are freed by the reader only */
    if (!every) {
        pl_export_drop_if_unused(conn, handle);
    } else {
        pl_unused_exports_t unused;
        do {
            unused.count = 0;
            pthread_mutex_lock(&conn->lock);
            pl_handle_map_each(&conn->exports, pl_gather_unused_export, &unused);
            pthread_mutex_unlock(&conn->lock);
            for (uint32_t i = 0; i < unused.count; i++) pl_export_drop_if_unused(conn, unused.handles[i]);
        } while (unused.count == PL_UNUSED_BATCH);
    }
    pthread_mutex_unlock(&conn->read_lock);
    /* A reader woken meanwhile left the reading to the holder: this thread (see pl_conn_read_turn). */
    if (atomic_load_explicit(&conn->read_again, memory_order_seq_cst)) pl_read_conn(conn, pl_transport_buffer);
}

/* Runs the work noted on connections for want of commands (pl_post_starved): the list as it is when this begins,
 * taken whole as commands are, so that work noted meanwhile (a read that finds a flood, with memory still out)
 * waits for the next wake-up instead of keeping the transport from its other connections. A connection's work and
 * link are read as its turn comes: one whose work is still noted is not linked again, and one taken already may
 * be, into the new list. */
static void pl_run_starved(void) {
    pthread_mutex_lock(&T.lock);
    pl_conn_t *next = T.starved;
    T.starved = NULL;
    pthread_mutex_unlock(&T.lock);
    while (next != NULL) {
        pl_conn_t *conn = next;
        pthread_mutex_lock(&T.lock);
        next = conn->next_starved;
        uint32_t work = conn->starved_work;
        const char *why = conn->starved_why;
        conn->starved_work = 0;
        conn->starved_why = NULL;
        pthread_mutex_unlock(&T.lock);
        if (work & (1u << PL_CMD_KILL)) {
            pl_transport_end(conn, why != NULL ? why : "ended");
        } else {
            if (work & (1u << PL_CMD_FLUSH_OWED)) pl_conn_flush_owed(conn);
            if (work & (1u << PL_CMD_DROP_EXPORT)) pl_run_drop(conn, 0, true);
            if (work & (1u << PL_CMD_READ)) pl_run_read(conn);
            if (work & (1u << PL_CMD_REFUSED)) pl_run_refused(conn);
        }
        pl_conn_release(conn); /* the list's */
    }
}

static void pl_run_commands(void) {
    uint64_t value;
    ssize_t ignored = read(T.wake_fd, &value, sizeof value);
    (void)ignored;
    pthread_mutex_lock(&T.lock);
    pl_command_t *command = T.head;
    T.head = T.tail = NULL;
    T.wake_pending = false;
    pthread_mutex_unlock(&T.lock);
    while (command != NULL) {
        pl_command_t *next = command->next;
        switch (command->kind) {
        case PL_CMD_FLUSH_OWED: pl_conn_flush_owed(command->conn); break;
        case PL_CMD_KILL: pl_transport_end(command->conn, command->why); break;
        case PL_CMD_DROP_EXPORT: pl_run_drop(command->conn, command->handle, false); break;
        case PL_CMD_READ: pl_run_read(command->conn); break;
        case PL_CMD_REFUSED: pl_run_refused(command->conn); break;
        case PL_CMD_WITHDRAW: {
            pl_port_t *port = command->port;
            pthread_mutex_lock(&port->lock);
            pl_service_t *service = port->service;
            port->service = NULL;
            pthread_mutex_unlock(&port->lock);
            if (service != NULL) {
                /* Closed in the same hold of T.lock that takes it off the list: a fork() meanwhile would leave the
                 * child holding the descriptors of a service its handler no longer sees (and the lock with them).
                 * Not listed: a service of the parent's, in a child of fork() (left alone, as the copy is). */
                pthread_mutex_lock(&T.lock);
                bool listed = pl_service_list_remove(&T.services, service);
                if (listed) {
                    epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, service->listen_fd, NULL);
                    pl_service_withdraw(service);
                }
                pthread_mutex_unlock(&T.lock);
                if (listed) {
                    service->next = pl_withdrawn;
                    pl_withdrawn = service;
                }
            }
            atomic_fetch_add_explicit(&pl_withdrawals_done, 1, memory_order_release);
            break;
        }
        }
        if (command->conn != NULL) pl_conn_release(command->conn);
        if (command->port != NULL) pl_port_release_internal(command->port);
        free(command);
        command = next;
    }
    pl_run_starved();
}

static pl_read_result_t pl_read_conn(pl_conn_t *conn, uint8_t *buffer) {
    /* A set's receiver reading it already reads what woke us too (pl_conn_read_turn leaves it a note). */
    const char *why;
    bool took = false;
    uint64_t packets = 0;
    pl_read_result_t result = pl_conn_read_turn(conn, buffer, PL_FRAMES_PER_WAKE, SIZE_MAX, &why, &took, &packets);
    if (!took) return PL_READ_DRAINED;
    if (result == PL_READ_ENDED) {
        pthread_mutex_unlock(&conn->read_lock);
        pl_transport_end(conn, why);
    }
    /* PL_READ_MORE: a flood. The next wait reports a socket that stays readable, but a bell is an edge. A ring that
     * feeds sets is left to them (they empty their rings before they sleep), for a rest whose end reads what they
     * left; one that feeds none, the transport reads on, after whatever else woke it. */
    if (result == PL_READ_MORE && atomic_load_explicit(&conn->bell_watched, memory_order_acquire) >= 0) {
        /* Left to the sets only while they read it too; sets that did not since the last flood are busy elsewhere
         * (a loop blocked in a request whose answer is in this very ring), and the transport reads on. */
        uint64_t set_read = atomic_load_explicit(&conn->set_packets_read, memory_order_relaxed);
        bool sets_reading = set_read != conn->set_read_at_flood && pl_feeds_sets(conn);
        conn->set_read_at_flood = set_read;
        if (!sets_reading) pl_transport_read(conn);
        else if (conn->rest_until == 0) pl_rest_begin(conn, pl_now_ns());
    }
    return result;
}

static void pl_accept_on(pl_service_t *service) {
    for (int i = 0; i < 16; i++) {
        pl_pending_socket_t pending;
        pl_transport_pending_add(&pending);
        PL_WHILE_FORK_WAITS(&pending.fd, accept4(service->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (pending.fd >= 0) {
            pl_service_accepted(service, &pending);
            continue;
        }
        pl_transport_pending_drop(&pending);
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            /* The backlog keeps the peer waiting; the listener, level-triggered, would wake us at once again. */
            epoll_ctl(T.epoll_fd, EPOLL_CTL_DEL, service->listen_fd, NULL);
            atomic_fetch_add_explicit(&service->refs, 1, memory_order_relaxed);
            if (pl_paused == NULL) pl_resume_at = pl_now_ns() + PL_PAUSE_NS;
            service->next_paused = pl_paused;
            pl_paused = service;
        }
        return; /* EAGAIN: done */
    }
}

/* The connections the transport has, not being ended, each with a reference taken, in an array to free (NULL, and
 * *out_count 0, when there are none or no memory for the array). Their work is done after T.lock is let go: it takes
 * their write locks, and a write that fails there posts to the transport (T.lock). */
static pl_conn_t **pl_retain_conns(uint32_t *out_count) {
    pthread_mutex_lock(&T.lock);
    uint32_t count = 0;
    for (pl_conn_t *conn = T.conns; conn != NULL; conn = conn->next) count++;
    pl_conn_t **conns = count > 0 ? calloc(count, sizeof *conns) : NULL;
    uint32_t taken = 0;
    for (pl_conn_t *conn = T.conns; conn != NULL && conns != NULL; conn = conn->next) {
        if (conn->ending) continue;
        pl_conn_retain(conn);
        conns[taken++] = conn;
    }
    pthread_mutex_unlock(&T.lock);
    *out_count = taken;
    return conns;
}

/* Releases proxies that have had no right for PL_IDLE_PROXY_NS, at most once a second's tenth. */
static void pl_sweep_idle_proxies(void) {
    static int64_t last_sweep;
    if (pl_proxy_idle_total() == 0) return;
    int64_t now = pl_now_ns();
    if (now - last_sweep < PL_IDLE_PROXY_NS / 10) return;
    last_sweep = now;
    uint32_t taken = 0;
    pl_conn_t **conns = pl_retain_conns(&taken);
    for (uint32_t i = 0; i < taken; i++) {
        pl_conn_release_idle(conns[i], now - PL_IDLE_PROXY_NS);
        pl_conn_release(conns[i]);
    }
    free(conns);
}

/* Sends what waits on connections whose watch for room could not be made, and tries the watch again (see
 * pl_room_unwatched), at most once a second's tenth. */
static void pl_watch_room_again(int64_t now) {
    static int64_t last_look;
    if (!atomic_load_explicit(&pl_room_unwatched, memory_order_seq_cst) || now - last_look < 100000000LL) return;
    last_look = now;
    atomic_store_explicit(&pl_room_unwatched, false, memory_order_seq_cst); /* a failure from here on sets it */
    uint32_t taken = 0;
    pl_conn_t **conns = pl_retain_conns(&taken);
    if (conns == NULL && taken == 0) {
        pthread_mutex_lock(&T.lock);
        bool any = T.conns != NULL;
        pthread_mutex_unlock(&T.lock);
        if (any) atomic_store_explicit(&pl_room_unwatched, true, memory_order_seq_cst); /* no memory: later */
    }
    for (uint32_t i = 0; i < taken; i++) {
        pl_conn_t *conn = conns[i];
        pthread_mutex_lock(&conn->write_lock);
        bool unwatched = conn->want_writable && conn->out_fd < 0;
        pthread_mutex_unlock(&conn->write_lock);
        if (unwatched) {
            pl_conn_flush_outgoing(conn); /* what the socket takes now; a drained queue wants no watch */
            pthread_mutex_lock(&conn->write_lock);
            if (conn->want_writable && conn->fd >= 0) pl_transport_want_writable(conn);
            pthread_mutex_unlock(&conn->write_lock);
        }
        pl_conn_release(conn);
    }
    free(conns);
}

static void *pl_transport_main(void *unused) {
    (void)unused;
    pl_thread_set_name("portloop-ipc");
    uint8_t *buffer = pl_transport_buffer;
    struct epoll_event events[64];
    bool timed_out = false;
    int rest = -1, look = -1;
    for (;;) {
        int sweep = pl_sweep_timeout(timed_out);
        bool looks = atomic_load_explicit(&pl_room_unwatched, memory_order_relaxed);
        int timeout = looks && (sweep < 0 || sweep > 100) ? 100 : sweep;
        if (pl_paused != NULL) {
            int64_t due = pl_resume_at - pl_now_ns();
            int resume = due > 0 ? (int)((due + 999999) / 1000000) : 0;
            if (timeout < 0 || resume < timeout) timeout = resume;
        }
        /* A wait cut short for a rest or a look at a refused peer is not the sweep's: the sweep stays armed (see
         * pl_sweep_timeout). */
        int soon = rest < 0 || (look >= 0 && look < rest) ? look : rest;
        bool cut_short = soon >= 0 && (timeout < 0 || soon < timeout);
        if (cut_short) timeout = soon;
        int n = epoll_wait(T.epoll_fd, events, 64, timeout);
        timed_out = n == 0 && !cut_short;
        int64_t now = pl_now_ns();
        pl_resume_listeners(now);
        pl_watch_room_again(now);
        pl_sweep_idle_proxies();
        for (int i = 0; i < n; i++) {
            uint64_t data = events[i].data.u64;
            uint32_t tag = (uint32_t)(data & 7u);
            void *object = (void *)(uintptr_t)(data & ~(uint64_t)7u);
            if (tag == PL_TAG_WAKE) {
                pl_run_commands();
            } else if (tag == PL_TAG_SERVICE) {
                if (!pl_is_withdrawn(object)) pl_accept_on(object);
            } else {
                pl_conn_t *conn = object;
                bool ended = false;
                for (pl_conn_t *g = pl_graveyard; g != NULL; g = g->next) ended = ended || g == conn;
                if (ended) continue;
                if (tag == PL_TAG_CONN_OUT) {
                    pl_conn_flush_outgoing(conn);
                    pl_transport_writable_done(conn);
                } else if (!pl_rest(conn, events[i].events, now)) {
                    pl_read_conn(conn, buffer);
                }
            }
        }
        rest = pl_resting != NULL ? pl_end_rests(now, buffer) : -1;
        /* A fresh reading, not `now`: the events took a while, and a look due meanwhile would wait a wake-up more. */
        look = pl_refused != NULL ? pl_look_again_at_refused(pl_now_ns()) : -1;
        pl_bury();
    }
    return NULL;
}
