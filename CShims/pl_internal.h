/*
 * pl_internal.h — object layouts shared by the port and port-set files. Not part of the public API.
 */
#ifndef PL_INTERNAL_H
#define PL_INTERNAL_H

#include "portloop.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

/* Payloads up to this size live inside the slot; larger ones are one allocation per message (a buffer kept for
 * reuse when there is one: pl_payload_cache.c). */
#define PL_INLINE_PAYLOAD PL_INLINE_PAYLOAD_SIZE

/* ---- copies into memory another core reads next (pl_copy.c) ---- */

#define PL_COPY_STREAM_MIN 256u           /* shorter copies are always ordinary */
#define PL_COPY_CLASSES 7u                /* size classes by powers of four: from 256 B, 1 KiB, …, 1 MiB and up */
#define PL_COPY_EPOCH_BYTES (2u << 20)    /* an epoch, copies of a class in one way: this many bytes of them … */
#define PL_COPY_EPOCH_MIN_COPIES 16u      /* … and at least this many copies */
#define PL_COPY_SAMPLES 32u               /* copies timed in an epoch's second half, evenly spread */
#define PL_COPY_EXPLORE_FIRST 8u          /* epochs kept to a way before the other is tried, after a change … */
#define PL_COPY_EXPLORE_MOST 512u         /* … doubling with each try that confirms the choice, up to this */

typedef struct pl_copy_class {
    bool streaming;                   /* the current epoch's way */
    bool chosen_streaming;            /* the way kept to; the current epoch may be a try of the other */
    uint32_t copies;                  /* copies in the current epoch */
    uint32_t sample_count;
    uint32_t samples[PL_COPY_SAMPLES]; /* the current epoch's timed copies, TSC ticks per KiB */
    uint32_t cost[2];                 /* each way's cost in its last epoch: [0] ordinary, [1] streaming; 0: none */
    uint32_t epochs_left;             /* epochs kept to the chosen way before the other is tried */
    uint32_t explore_every;           /* epochs between tries now */
} pl_copy_class_t;

/* One writer's copier (zeroed to start: an epoch of ordinary stores, then one of streaming ones, then its choice). */
typedef struct pl_copier {
    pl_copy_class_t classes[PL_COPY_CLASSES];
} pl_copier_t;

/* What the next copy of a size does. */
typedef struct pl_copy_plan {
    bool streaming; /* with streaming stores */
    bool timed;     /* timed, its cost noted */
} pl_copy_plan_t;

/* memcpy into memory that another core reads next, with ordinary or streaming stores (x86-64), whichever this
 * copier measured to be the cheaper for the size; a streaming copy ends with a store fence, so a release store after
 * it publishes every byte. Elsewhere a memcpy. */
void pl_copier_copy(pl_copier_t *copier, void *to, const void *from, size_t length);
/* This thread's copier, for payloads it sends within the process into memory of their own (a kept buffer). */
pl_copier_t *pl_thread_copier(void);
/* A copy with streaming stores (on x86-64, from PL_COPY_STREAM_MIN bytes, ending with a store fence) or ordinary. */
void pl_copy_with(void *to, const void *from, size_t length, bool streaming);
/* The plan for the next copy of `length` bytes, counted as made (pl_copier_copy's first step; for tests). */
pl_copy_plan_t pl_copier_plan(pl_copier_t *copier, size_t length);
/* Notes a timed copy's cost (pl_copier_copy's last step; for tests). */
void pl_copier_note(pl_copier_t *copier, size_t length, uint64_t ticks);
/* Whether the copier keeps to streaming for copies of `length` bytes (tries of the other way apart; for tests). */
bool pl_copier_streams(const pl_copier_t *copier, size_t length);
/* How many copies an epoch of copies of `length` bytes has (for tests). */
uint32_t pl_copy_epoch_copies(size_t length);
/* The median of `count` values (at least one; a few dozen at most), sorting them in place. */
uint32_t pl_median_u32(uint32_t *values, uint32_t count);

/* ---- payload memory kept for reuse (pl_payload_cache.c) ---- */

#define PL_PAYLOAD_CACHE_MIN 65536u         /* large buffers: from this size up */
#define PL_PAYLOAD_CACHE_ENTRIES 16u        /* large buffers kept at most */
#define PL_PAYLOAD_CACHE_BYTES (8u << 20)   /* and their bytes in all */
#define PL_PAYLOAD_CACHE_SMALL_SHIFT 6u     /* small buffers: one class per power of two, from 64 bytes */
#define PL_PAYLOAD_CACHE_SMALL_CLASSES 10u  /* to 32 KiB */
#define PL_PAYLOAD_CACHE_SMALL_ENTRIES 128u /* small buffers kept at most per class */
#define PL_PAYLOAD_CACHE_SMALL_BYTES (1u << 20) /* and their bytes in all */

/* malloc(size), or a kept buffer of at least size (and less than four times it), holding what it held before:
 * only for memory whose every byte is written before anyone reads it. Below PL_PAYLOAD_CACHE_MIN a new buffer is
 * allocated at the next power of two, so that it serves every size of its class again: what a caller counts as
 * `size` may then occupy up to twice that. NULL: out of memory. */
void *pl_payload_cache_take(size_t size);
/* free(bytes), or keeps the buffer for a later take. Any malloc'd memory may be given, and memory taken may be
 * freed with free() instead. */
void pl_payload_cache_give(void *bytes);
/* How many large buffers, and their bytes, are kept (for tests). false: the lock stayed taken for a long while. */
bool pl_payload_cache_held(uint32_t *count, size_t *bytes);
/* How many small buffers of a class (0: 64 bytes, 1: 128, …) are kept, and the bytes of all small ones (for tests).
 * false: no such class, or the lock stayed taken for a long while. */
bool pl_payload_cache_small_held(uint32_t class, uint32_t *count, size_t *bytes);

/* One queued message. */
typedef struct pl_slot {
    int32_t id;
    uint32_t size;
    pl_port_t *reply; /* a send right owned by the message, or NULL */
    bool reply_once;  /* reply is a send-once right (pl_port_make_send_once), not a send right */
    bool notice;      /* a notice the library posted (PL_RECEIVED_NOTIFICATION) */
    struct pl_msg_extra *extra; /* sender and attachments (pl_remote.h); NULL for a plain local message */
    union {
        unsigned char bytes[PL_INLINE_PAYLOAD];
        void *heap;
    } payload;
} pl_slot_t;

/* A port's membership in one set. Linked into the port's list (port lock) and into the set's member
 * list and, while the port has messages, the set's ready FIFO (set lock). Freed by whoever unlinks it,
 * holding both locks. */
typedef struct pl_membership {
    pl_port_t *port;
    pl_port_set_t *set;
    struct pl_membership *next_of_port;
    struct pl_membership *prev_in_set, *next_in_set;
    struct pl_membership *prev_ready, *next_ready;
    bool in_ready;
} pl_membership_t;

/* A condition variable on one futex word, for the waits a message ends: a set's followers (a loop's sleep), a
 * port's direct receivers. glibc's pthread_cond_wait takes its mutex back marked contended, so the next unlock of
 * that mutex makes a futex system call although nobody waits: one system call more per wake-up. A waiter here
 * takes the mutex back as any other locker does. Waiters wait for the word to change; a waker changes it and wakes
 * (after changing the state the waiters look at, under the mutex). */
typedef struct pl_futex_cond {
    atomic_uint word;
} pl_futex_cond_t;

/* A live port's `magic`; cleared just before its memory is freed, so that debug builds catch a port used
 * after that (assert) as long as the allocator has not reused the memory. */
#define PL_PORT_MAGIC 0x506f7274u /* "Port" */

struct pl_port {
    uint32_t magic;
    pthread_mutex_t lock;
    pl_futex_cond_t receivers; /* direct receivers wait here for a message */
    pthread_cond_t senders;   /* senders wait here for room */
    atomic_uint refs;         /* memory references: the receive right, send rights, in-flight users */
    atomic_uint send_rights;  /* send rights only, for pl_port_send_right_count */
    atomic_uint send_once_rights; /* send-once rights not yet used or released */
    _Atomic(void *) context;
    uint64_t name;
    uint32_t qlimit;
    uint32_t max_msg_size;
    bool dead;
    uint32_t waiting_receivers;
    uint32_t waiting_senders;
    uint32_t sender_wakes_pending; /* signals sent to waiting senders that they have not yet woken from */
    pl_slot_t *ring;          /* capacity grows on demand up to qlimit, plus set_aside */
    uint32_t ring_capacity, head, count;
    uint32_t set_aside;       /* free slots kept for what must never fail for memory: one notice per pending
                               * notification request aimed here, one message or notice per send-once right.
                               * The ring always holds count + reserved + set_aside slots (pl_ring_spoken_locked) */
    uint64_t received;        /* messages sent to it since it was made, from anywhere (put-backs not counted) */
    pl_membership_t *memberships;
    /* Across processes (pl_remote.h): */
    uint32_t reserved;        /* queue room lent to other processes as credit: full at count + reserved */
    uint32_t want_waiters;    /* exports whose peer waits for credit */
    uint64_t want_turns;      /* waits for credit begun so far: the next waiter's place in line */
    bool reclaim_asked;       /* a local sender asked for lent room back and no answer came yet */
    bool no_senders_wakes;    /* pl_port_set_no_senders_wakes */
    struct pl_export *exports;/* rights to this port held by other processes, one entry per connection */
    struct pl_proxy *proxy;   /* set for a proxy: this port lives in another process; fixed at creation */
    struct pl_service *service; /* checked in under a name (the transport thread's) */
    _Atomic(struct pl_conn *) last_feeder; /* the connection last found feeding every set of this port */
    struct pl_conn *credit_due; /* a connection owed a quarter of its share by a dequeue, retained: that dequeue's
                                 * caller takes it before it lets go of the lock and sends the credit after */
    /* Notifications (pl_notify.c): */
    atomic_uint_fast64_t make_sends; /* the make-send count: rights ever made (after send_rights goes up) */
    struct pl_notification *notifications; /* pending requests watching this port (port lock) */
};

/* Whether a receive on the port can never succeed (lock held): empty, no send or send-once right left anywhere,
 * and its receiver asked to be told (pl_port_set_no_senders_wakes). */
static inline bool pl_port_senderless_locked(const pl_port_t *port) {
    return port->no_senders_wakes && port->count == 0 &&
           atomic_load_explicit(&port->send_rights, memory_order_acquire) == 0 &&
           atomic_load_explicit(&port->send_once_rights, memory_order_acquire) == 0;
}

/* The slots of a port's ring spoken for (lock held): its messages, the room lent to other processes and the slots
 * set aside. The ring always holds at least these, so that what fills them allocates nothing. */
static inline uint32_t pl_ring_spoken_locked(const pl_port_t *port) {
    return port->count + port->reserved + port->set_aside;
}

/* Grows a port's ring to hold `needed` slots, at most doubling it up to the limit plus the slots set aside (lock
 * held). */
pl_status_t pl_port_ring_grow_locked(pl_port_t *port, uint32_t needed);

/* Whether a port has no room for one more message from a local sender (lock held). */
static inline bool pl_port_full_locked(const pl_port_t *port) {
    return port->count + port->reserved >= port->qlimit;
}

/* A descriptor member of a set. Guarded by the set's lock; epoll knows it by `id` only. */
typedef struct pl_fd_member {
    int fd;
    uint64_t id;              /* its epoll data: never reused within the set */
    bool ready;               /* in the set's ready-descriptor FIFO */
    struct pl_fd_member *next_member;
    struct pl_fd_member *next_ready;
} pl_fd_member_t;

/* ---- the poller a set sleeps in (pl_poller.c) ---- */

/* Most events one wait collects; more stay pending in epoll for the next one (members are level-triggered). */
#define PL_POLL_MAX 32
/* epoll data of the set's own descriptors; members' ids start above them. */
#define PL_POLL_WAKE_ID 0u
#define PL_POLL_TIMER_ID 1u
#define PL_POLL_FIRST_MEMBER_ID 2u

typedef struct pl_poller {
    int epoll_fd;
    int wake_fd;              /* eventfd, edge-triggered, never read: senders write it to wake the sleeper */
    int timer_fd;             /* timerfd on CLOCK_MONOTONIC, armed only for timed receives */
    bool timer_armed;         /* timer_fd is set for timer_deadline and has not fired; the polling thread's */
    int64_t timer_deadline;
} pl_poller_t;

/* What one wait saw. */
typedef struct pl_poll_result {
    uint64_t ids[PL_POLL_MAX]; /* readable descriptor members, by id */
    uint32_t count;
    bool woken;                /* the wake-up eventfd was written */
} pl_poll_result_t;

/* Opens the three descriptors; PL_ERR_SYSTEM (with the failed call noted, errno kept) leaves none open. */
pl_status_t pl_poller_open(pl_poller_t *poller);
void pl_poller_close(pl_poller_t *poller);
/* Wakes the thread sleeping in pl_poller_wait. */
void pl_poller_wake(pl_poller_t *poller);
/* Watches / stops watching a member descriptor. add: PL_ERR_INVALID_ARG for a descriptor epoll refuses. */
pl_status_t pl_poller_add_fd(pl_poller_t *poller, int fd, uint64_t id);
void pl_poller_remove_fd(pl_poller_t *poller, int fd);
/* Watches a connection's socket for a feeder (pl_feeder.c), exclusively. */
pl_status_t pl_poller_add_feeder(pl_poller_t *poller, int fd, uint64_t id);
/* Watches a connection's bell for a feeder (edge-triggered, exclusive; watched already is no error). */
pl_status_t pl_poller_add_bell(pl_poller_t *poller, int fd, uint64_t id);
/* Sleeps until a wake-up, a readable member or `deadline` (INT64_MAX: none), or with `nonblocking` only
 * collects what is ready. One thread at a time (the set's `polling` flag). */
void pl_poller_wait(pl_poller_t *poller, int64_t deadline, bool nonblocking, pl_poll_result_t *result);

/* A connection whose frames may carry messages for a set's ports, watched in the set's poller so that the set's
 * sleeping receiver reads them itself (pl_feeder.c). The feeder holds a reference to the connection; the
 * connection lists the sets it feeds, each with a reference, so either end can detach the other. */
typedef struct pl_feeder {
    struct pl_conn *conn;
    uint64_t id;              /* its epoll data, from the set's member ids */
    bool detached;            /* out of the poller already (the connection ended) */
    struct pl_feeder *next;
} pl_feeder_t;

struct pl_port_set {
    pthread_mutex_t lock;
    pl_futex_cond_t followers; /* receivers waiting while another thread leads, or with nothing to poll */
    atomic_uint refs;
    bool dead;
    pl_poller_t poller;       /* the polling thread's, but for wake_fd, which any sender writes */
    bool polling;             /* a thread is inside pl_poller_wait */
    bool wake_pending;        /* wake_fd was written and the sleeper has not seen it yet */
    uint64_t next_fd_id;
    uint32_t sleeping_followers;
    uint32_t port_count, fd_count;
    pl_membership_t *members_head;
    pl_membership_t *ready_head, *ready_tail;
    pl_fd_member_t *fds;
    pl_fd_member_t *fd_ready_head, *fd_ready_tail;
    uint32_t receives_since_fd_poll;
    uint64_t sleeps, wakes;
    pl_feeder_t *feeders;
    uint32_t feeder_count;
    atomic_uint feeders_watched; /* feeder_count, readable without the lock (a lookout that finds 0 takes no lock) */
    bool pumping;             /* the leader is reading a feeder: what it delivers needs no wake-up */
    atomic_uint ready_marks;  /* bumped when a port joins the ready FIFO; read without the lock by spinners */
    atomic_bool batch_must_lock; /* dead, or ready_head or fd_ready_head set: a batch that finds it clear takes no lock */
};

/* ---- feeders (pl_feeder.c) ---- */

/* With the set lock held, right after a poll: the feeders among the events' ids, each retained, at most `max`. */
uint32_t pl_feeders_collect_locked(pl_port_set_t *set, const uint64_t *ids, uint32_t count, struct pl_conn **out,
                                   uint32_t max);
/* Before a receiver sleeps (set lock held, and held again on return): reads the rings of the connections this set
 * feeds from that hold records. A ring's writer rings only a reader that stopped looking, so records that a reader
 * left (the transport, handing a flood over) bring no bell: whoever sleeps must look first. The set lock may be let go
 * meanwhile, so the caller looks at the ready FIFO again. */
void pl_feeders_pump_pending_locked(pl_port_set_t *set);
/* Reads what a feeder has for us (the set's leader, no lock held); releases the reference. */
void pl_feeder_pump(pl_port_set_t *set, struct pl_conn *conn);
/* The set is destroyed: every connection it watches forgets it. */
void pl_feeders_detach_set(pl_port_set_t *set);

/* ---- port internals used by the set file ---- */

/* Keeps the memory of a port alive across an unlocked section. */
void pl_port_retain_internal(pl_port_t *port);
void pl_port_release_internal(pl_port_t *port);

/* Dequeues the first message into out/buffer, or with `take` (else NULL) hands its payload memory over; the port
 * lock must be held and count > 0. Returns PL_ERR_TOO_LARGE (message left in place) when it does not fit, or
 * PL_ERR_NO_MEMORY when a taken inline payload cannot be copied out. The message's sender, attachments and reply
 * right move to out; room freed for another process is lent again (pl_remote.h). The caller takes the credit the
 * dequeues found due before it lets go of the lock (pl_port_take_credit_due_locked), and sends it after. */
pl_status_t pl_port_dequeue_locked(pl_port_t *port, pl_received_t *out, void *buffer, size_t capacity,
                                   pl_payload_t *take);

/* The connection a dequeue found owed a quarter of a window (port lock held; NULL: none), and, once the lock is let
 * go, sending what it is owed (pl_credit.c; NULL does nothing). */
static inline struct pl_conn *pl_port_take_credit_due_locked(pl_port_t *port) {
    struct pl_conn *conn = port->credit_due;
    port->credit_due = NULL;
    return conn;
}
void pl_credit_send_due(struct pl_conn *conn);

/* ---- set internals used by the port file ---- */

/* What a sender must do after unlocking, at most one entry per set it touched. */
typedef struct pl_wake_list {
    pl_port_set_t *sets[8];
    uint8_t actions[8];       /* PL_WAKE_EVENTFD or PL_WAKE_FOLLOWER */
    uint32_t count;
    pl_port_set_t **more_sets;/* overflow for a port in more than eight sets */
    uint8_t *more_actions;
    uint32_t more_capacity;
} pl_wake_list_t;

#define PL_WAKE_EVENTFD 1
#define PL_WAKE_FOLLOWER 2

/* With the port lock held: the port just became non-empty; queue it as ready in the set (set lock taken
 * inside) and note in wakes whom to wake. at_head puts it first (a too-large retry). */
void pl_port_set_mark_ready_locked(pl_membership_t *m, bool at_head, pl_wake_list_t *wakes);

/* With the port lock held: the port was emptied; it leaves the ready FIFO of every set holding it (each set's
 * lock taken in turn), so that its next message queues it at the back of each, whichever receiver (direct, or
 * through any one of its sets) took its last message. `except`: a set whose FIFO it has left already. */
void pl_port_emptied_locked(pl_port_t *port, pl_port_set_t *except);

/* After unlocking: perform the wake-ups collected, release the set references they held. */
void pl_wake_list_run(pl_wake_list_t *wakes);

/* With the port lock held: unlink m from its set (set lock taken inside). The caller frees m. */
void pl_port_set_unlink_locked(pl_membership_t *m);

/* Creates a proxy port for a port of another process (pl_conn.c); its receive right is the connection's. */
pl_port_t *pl_port_new_proxy(struct pl_proxy *proxy);

/* Queues a message that came over a connection through export `e`, spending one credit the peer held, in one
 * hold of the port's lock (so that no local sender can take the room meanwhile). PL_ERR_INVALID_ARG: the peer
 * held no credit; PL_ERR_INVALID_DEST: the port was destroyed. On error the caller still owns the slot. */
pl_status_t pl_port_enqueue_remote(pl_port_t *port, pl_slot_t *slot, struct pl_export *e);

/* Releases what a queued message owns (no lock held). */
void pl_slot_dispose(pl_slot_t *slot);

/* How a message carries its reply right. */
typedef enum pl_reply_mode {
    PL_REPLY_SEND = 0,        /* a new send right (MACH_MSG_TYPE_MAKE_SEND) */
    PL_REPLY_MAKE_ONCE = 1,   /* a new send-once right to a local port (MACH_MSG_TYPE_MAKE_SEND_ONCE) */
    PL_REPLY_MOVE_ONCE = 2,   /* the caller's send-once right moves in (MACH_MSG_TYPE_MOVE_SEND_ONCE) */
} pl_reply_mode_t;

/* Queues a message that came over a connection through a send-once right the peer held: no credit is spent,
 * since one right stands for one message (as pl_port_send_once queues locally). PL_ERR_INVALID_DEST: the port
 * was destroyed; on error the caller still owns the slot. */
pl_status_t pl_port_enqueue_once(pl_port_t *port, pl_slot_t *slot);

/* Takes one send-once right to `port` without a notice: it moved elsewhere (into a frame that went to another
 * process). No lock held. */
void pl_port_forget_send_once(pl_port_t *port);

/* Counts one more send-once right to a local port whose slot is set aside already: made for a message whose room
 * was set aside before (pl_port_set_aside), or come back from another process. */
void pl_port_add_send_once(pl_port_t *port);

/* Posts the send-once notice (PL_NOTIFY_SEND_ONCE) to a local port: one of its send-once rights went unused. It
 * takes the slot set aside for that right. */
void pl_port_post_send_once_notice(pl_port_t *port);

/* Sets a slot of a local port's ring aside (growing the ring now if need be) for a notice or a send-once message
 * that will come, so that posting it later cannot fail for memory: PL_ERR_NO_MEMORY now instead. Posting takes
 * the slot; pl_port_give_back returns one nothing will take. No lock held. */
pl_status_t pl_port_set_aside(pl_port_t *port);
void pl_port_give_back(pl_port_t *port);

/* The cross-process part of a destroyed port's clean-up (pl_conn.c); no lock held. */
void pl_remote_port_destroyed(pl_port_t *port);

/* ---- notifications (pl_notify.c) ---- */

/* Posts a notice (at most PL_INLINE_PAYLOAD bytes) to a local port, over its queue limit if need be, into the
 * slot set aside for it when it was asked for (pl_port_set_aside): notices are never lost, never wait and
 * allocate nothing. Dropped if the port is dead. No lock held. */
void pl_port_post_notice(pl_port_t *port, int32_t id, const void *payload, size_t size);

/* With the port lock held, just after its send rights fell to zero: the no-senders requests due now leave the
 * port's list; returns them for pl_notify_deliver after unlocking (NULL if none). */
struct pl_notification *pl_notify_take_no_senders_locked(pl_port_t *port);

/* With the port lock held, as the port becomes a dead name: every request leaves the port's list; dead-name
 * requests are returned to be delivered, no-senders requests to end without a notice. */
struct pl_notification *pl_notify_take_all_locked(pl_port_t *port);

/* With the port lock held: whether a no-senders request is pending, so that other processes should release
 * their rights as soon as they drop them (PL_RIGHT_PROMPT) rather than after a while. */
bool pl_notify_watches_senders_locked(const pl_port_t *port);

/* No lock held: delivers the notices of requests taken by the functions above (or ends them), releasing them. */
void pl_notify_deliver(struct pl_notification *taken);

/* ---- errors ---- */

/* Records that `call` failed, for pl_last_system_call; errno is left as the call set it. Returns PL_ERR_SYSTEM. */
pl_status_t pl_system_failure(const char *call);

/* ---- time ---- */

static inline int64_t pl_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline struct timespec pl_timespec_from_ns(int64_t ns) {
    struct timespec ts = { .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };
    return ts;
}

/* Deadline for a validated timeout; INT64_MAX for forever. */
static inline int64_t pl_deadline_ns(int64_t timeout_ns) {
    if (timeout_ns == PL_TIMEOUT_FOREVER) return INT64_MAX;
    if (timeout_ns == 0) return 0; /* already past, without reading the clock on every poll */
    int64_t now = pl_now_ns();
    return (timeout_ns > INT64_MAX - now) ? INT64_MAX : now + timeout_ns;
}

/* Whether a deadline from pl_deadline_ns has passed. Forever (INT64_MAX) never does, and reads no clock: a waiter
 * with no deadline would otherwise read it on every wake-up. */
static inline bool pl_deadline_passed(int64_t deadline_ns) {
    return deadline_ns != INT64_MAX && pl_now_ns() >= deadline_ns;
}

static inline bool pl_timeout_valid(int64_t timeout_ns) {
    return timeout_ns >= 0 || timeout_ns == PL_TIMEOUT_FOREVER;
}

/* Condition variables use CLOCK_MONOTONIC so that timed waits are immune to wall-clock changes. */
void pl_cond_init_monotonic(pthread_cond_t *cond);

/* Waits on cond until deadline (INT64_MAX: forever). Spurious returns are the caller's to handle. */
void pl_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ns);

/* pl_futex_cond_t (above). */
void pl_futex_cond_init(pl_futex_cond_t *cond);
/* With `lock` held: lets it go, waits until woken, the deadline (CLOCK_MONOTONIC; INT64_MAX: none) or a signal,
 * and takes it back. Spurious returns are the caller's to handle, as with pthread_cond_wait. */
void pl_futex_cond_wait_until(pl_futex_cond_t *cond, pthread_mutex_t *lock, int64_t deadline_ns);
void pl_futex_cond_signal(pl_futex_cond_t *cond);
void pl_futex_cond_broadcast(pl_futex_cond_t *cond);

/* Whether a dequeue that made room should signal a waiting sender; the port lock is held. One signal per
 * waiting sender is enough: until the signalled sender has woken, further dequeues do not signal again. (A
 * signal per dequeue made the receiver of a flooded port pay a futex call for most messages.) */
static inline bool pl_port_take_sender_wake_locked(pl_port_t *port) {
    if (port->waiting_senders <= port->sender_wakes_pending) return false;
    port->sender_wakes_pending++;
    return true;
}

#endif /* PL_INTERNAL_H */
