/*
 * portloop.h — Mach-style message ports for Linux, the C layer under PortLoop.
 *
 * Why this shim exists: Linux has no Mach IPC. CFRunLoop sleeps in mach_msg() on a port set and wakes
 * when any port in it receives; PortLoop needs the same primitive. This layer provides it: ports (bounded
 * FIFO message queues with one receive right and many send rights), port sets, messages, and timed receive.
 * It knows nothing of run loops.
 *
 * Design, chosen by three cost rules: a send to a receiver that is awake makes no system call, no lock is
 * held across a system call on the send path, and an idle port costs memory only:
 *
 *  - A port is a mutex-guarded ring of message slots that grows on demand up to the queue limit. An idle
 *    port is a heap object and nothing else: no file descriptor, no thread, no timer.
 *
 *  - Waiting is done by whoever waits, never by the port. A receiver blocked directly on a port sleeps on
 *    the port's condition variable (a futex: no descriptor, exact timeouts). A receiver blocked on a port
 *    set sleeps in the set's poller (pl_poller.c): an epoll instance holding the set's wake-up eventfd, its
 *    descriptor members and its receive timer, a timerfd of the set's own on CLOCK_MONOTONIC armed only
 *    when a receive is timed and its deadline changed. Three descriptors per set, and no exit(): the sets
 *    once slept in libevent's event_base, which holds three more descriptors a set never uses and calls
 *    exit(1) when it cannot make its signal socketpair. Every failing system call returns PL_ERR_SYSTEM
 *    and pl_last_system_call names it.
 *    One thread sleeps in the poller at a time, so further receivers on the same set sleep on the set's
 *    condition variable and take over the poller when the sleeping one leaves (leader/followers). A
 *    receiver with no descriptor to watch and no deadline waits on that condition variable as well (a
 *    futex wake costs a sender less than an eventfd write and the epoll wake-up); inserting a descriptor
 *    wakes it to take the poller.
 *
 *  - Wake-ups are coalesced. A send makes a syscall only when it turns an empty port into a non-empty one
 *    *and* somebody is asleep waiting for it; a set's eventfd is written at most once until the sleeper
 *    has consumed it. A receiver that is awake and busy costs its senders no syscall at all. The eventfd
 *    is edge-triggered and never read: each write is an edge, so a wake-up costs the sleeper no read(2).
 *
 *  - No lock is held across a syscall: senders decide under the lock whom to wake and do the eventfd
 *    write or futex wake after unlocking. Port and
 *    set mutexes spin briefly before sleeping (adaptive), as they are held for a few dozen instructions.
 *    A receive that makes room in a full port signals a waiting sender only if no signal is already on its
 *    way to each waiting sender.
 *
 *  - A set keeps a FIFO of its member ports that have messages. A receive takes the first, dequeues one
 *    message and, if the port still has more, puts it back at the tail: ready ports are served
 *    round-robin and a flooded port cannot starve the others. The cost does not depend on set size.
 *    pl_port_set_receive_batch takes several queued messages of the first ready port in one lock round.
 *
 *  - Lock order is port before set. A port's membership list is guarded by the port's lock; a set's
 *    member and ready lists by the set's lock.
 *
 *  - Across processes (pl_remote.h, and the "Across processes" and "The wire" articles): a port's rights can be
 *    sent to other processes over SOCK_SEQPACKET connections. A right to a port of another process is a proxy:
 *    a pl_port_t without a queue, on which a send becomes a frame. Queue room crosses as credit, so the queue
 *    limit holds for local and remote senders together (full at count + room lent out). One transport thread
 *    per process reads every connection; any thread writes, without blocking.
 *
 * Object lifetime: every object is reference counted. A port's receive right (from pl_port_create) is
 * ended by pl_port_destroy; its send rights (pl_port_make_send, or a reply right received in a message)
 * by pl_port_release_send. The memory goes when the last of them goes. After destruction a port is a
 * dead name: sends fail with PL_ERR_INVALID_DEST.
 *
 * Every function is safe to call from any thread, and returns a pl_status_t.
 */
#ifndef PORTLOOP_H
#define PORTLOOP_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

/// Asks the CPU to start loading the cache line at `address` (no effect if it is invalid). Why a shim: Swift
/// has no prefetch; the run loop uses it when it is about to touch many timer objects at random addresses.
static inline void pl_prefetch(const void *address) { __builtin_prefetch(address); }

/// Initialises a mutex that spins briefly before it sleeps (glibc's PTHREAD_MUTEX_ADAPTIVE_NP). Why a shim:
/// the constant needs _GNU_SOURCE, which Swift's Glibc module does not define; the Swift layer's own locks (a
/// run loop's, taken by its thread and by every thread that queues work on it) are held as briefly as a port's.
void pl_mutex_init_adaptive(pthread_mutex_t *lock);

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ */
/* Status codes                                                                                       */

/** What a call did. Each error names the Mach return code it stands for. */
typedef enum pl_status {
    PL_OK = 0,                /**< KERN_SUCCESS / MACH_MSG_SUCCESS */
    PL_ERR_TIMED_OUT = 1,     /**< MACH_SEND_TIMED_OUT / MACH_RCV_TIMED_OUT: the timeout ran out */
    PL_ERR_INVALID_DEST = 2,  /**< MACH_SEND_INVALID_DEST: the destination port was destroyed */
    PL_ERR_PORT_DIED = 3,     /**< MACH_RCV_PORT_DIED: the port or set was destroyed while waiting */
    PL_ERR_TOO_LARGE = 4,     /**< MACH_SEND_TOO_LARGE / MACH_RCV_TOO_LARGE: payload over the limit */
    PL_ERR_INVALID_ARG = 5,   /**< KERN_INVALID_ARGUMENT: an argument is out of range */
    PL_ERR_ALREADY_IN_SET = 6,/**< KERN_ALREADY_IN_SET: the port or descriptor is a member already */
    PL_ERR_NOT_IN_SET = 7,    /**< KERN_NOT_IN_SET: the port or descriptor is not a member */
    PL_ERR_INVALID_NAME = 8,  /**< MACH_RCV_INVALID_NAME / KERN_INVALID_NAME: used after destruction */
    PL_ERR_NO_MEMORY = 9,     /**< KERN_RESOURCE_SHORTAGE: allocation failed */
    PL_ERR_SYSTEM = 10,       /**< an operating-system call failed; see errno and pl_last_system_call */
    PL_ERR_WOULD_DEADLOCK = 11,/**< (no Mach equivalent) the caller would wait for a message that only its own
                                    thread can deliver; raised by the Swift layer's request, not by C calls */
    PL_ERR_NO_SENDERS = 12,   /**< MACH_NOTIFY_NO_SENDERS: the port is empty and no send right to it is left, so
                                   nothing can arrive (only with pl_port_set_no_senders_wakes) */
    PL_ERR_NAME_IN_USE = 13,  /**< BOOTSTRAP_SERVICE_ACTIVE: a live process has checked in that name */
    PL_ERR_UNKNOWN_SERVICE = 14, /**< BOOTSTRAP_UNKNOWN_SERVICE: no process has checked in that name */
    PL_ERR_REFUSED = 15,      /**< BOOTSTRAP_NOT_PRIVILEGED: the service's policy does not admit the caller */
    PL_ERR_NO_SPACE = 16,     /**< KERN_NO_SPACE: a connection's or a service's limit is reached (rights held,
                                   connections) */
} pl_status_t;

/** A short English description of a status, e.g. "timed out". Never NULL; static storage. */
const char *pl_status_describe(pl_status_t status);

/** The system call whose failure made the calling thread's most recent PL_ERR_SYSTEM, e.g. "epoll_create1"
 *  (static storage), or NULL if no call of this thread failed that way. Right after a function returned
 *  PL_ERR_SYSTEM, errno holds that call's error. */
const char *pl_last_system_call(void);

/* ------------------------------------------------------------------------------------------------ */
/* Limits and timeouts                                                                                */

/** Default queue limit of a new port (MACH_PORT_QLIMIT_DEFAULT). */
#define PL_QLIMIT_DEFAULT 5u
/** Largest queue limit (MACH_PORT_QLIMIT_MAX). The smallest is 1. */
#define PL_QLIMIT_MAX 1024u
/** Default maximum payload size of a new port, in bytes. */
#define PL_MSG_SIZE_DEFAULT 65536u /* 64 KiB */
/** Largest maximum payload size a port may be given, in bytes. */
#define PL_MSG_SIZE_MAX 67108864u /* 64 MiB */

/** Timeouts are nanoseconds: 0 polls, a positive value waits that long, this value waits forever.
 *  Any other negative value is rejected with PL_ERR_INVALID_ARG (MACH_MSG_TIMEOUT_NONE / MACH_SEND_TIMEOUT). */
#define PL_TIMEOUT_FOREVER ((int64_t)-1)

/* ------------------------------------------------------------------------------------------------ */
/* Ports                                                                                              */

/** A port: a bounded FIFO queue of messages (a Mach port with its receive right). Opaque. */
typedef struct pl_port pl_port_t;

/**
 * Creates a port and returns its receive right (mach_port_allocate with MACH_PORT_RIGHT_RECEIVE).
 * @param qlimit        queue limit, 1…PL_QLIMIT_MAX (PL_QLIMIT_DEFAULT is the usual choice)
 * @param max_msg_size  largest payload a send may carry, 1…PL_MSG_SIZE_MAX bytes
 * @param out_port      receives the port
 */
pl_status_t pl_port_create(uint32_t qlimit, uint32_t max_msg_size, pl_port_t **out_port);

/**
 * Destroys the receive right (mach_port_destroy / mach_port_mod_refs on the receive right): the port leaves
 * every set, queued messages are destroyed and their reply rights released, blocked receivers wake with
 * PL_ERR_PORT_DIED, blocked and later senders get PL_ERR_INVALID_DEST. The caller's receive right is gone
 * afterwards. The receive right's reference to the port's memory goes too, so destroying a receive right a
 * second time is undefined (a use after free) unless a send right still keeps the memory: then it returns
 * PL_ERR_INVALID_NAME. Debug builds assert on a port whose memory was freed (while the allocator has not
 * reused it).
 * A thread blocked in pl_port_receive on this port must hold a reference of its own (a send right) for the
 * port's memory to outlive the call: the receive right's reference goes here. The Swift API cannot get
 * this wrong: its receive right is ~Copyable, so nobody can destroy it while another thread receives.
 */
pl_status_t pl_port_destroy(pl_port_t *port);

/** Makes a new send right to the port (mach_port_insert_right with MACH_MSG_TYPE_MAKE_SEND).
 *  Works on a dead port too: the right is then a dead name. */
pl_status_t pl_port_make_send(pl_port_t *port);

/** Releases one send right (mach_port_deallocate). PL_ERR_INVALID_NAME, and nothing released, when the port
 *  has no send right left (KERN_INVALID_RIGHT): the count never underflows and the receive right's
 *  reference is never taken. */
pl_status_t pl_port_release_send(pl_port_t *port);

/** Number of send rights that exist for the port, including reply rights inside queued messages
 *  (mach_port_get_refs with MACH_PORT_RIGHT_SEND). For diagnostics and tests. */
uint32_t pl_port_send_right_count(const pl_port_t *port);

/** The port's name: unique for the process's lifetime, never reused, never 0. */
uint64_t pl_port_name(const pl_port_t *port);

/** Whether the receive right still exists (the port is not a dead name). */
int pl_port_is_alive(const pl_port_t *port);

/** Attaches an uninterpreted pointer to the port, reported with every message received on a set
 *  (mach_port_set_context). */
void pl_port_set_context(pl_port_t *port, void *context);

/** The pointer given to pl_port_set_context, or NULL (mach_port_get_context). */
void *pl_port_get_context(const pl_port_t *port);

/** Changes the queue limit, 1…PL_QLIMIT_MAX (mach_port_set_attributes with MACH_PORT_LIMITS_INFO).
 *  Raising it wakes blocked senders, and gives of the new room to other processes waiting for it. Lowering it
 *  below the number queued drops nothing. */
pl_status_t pl_port_set_qlimit(pl_port_t *port, uint32_t qlimit);

/** The current queue limit (mach_port_get_attributes with MACH_PORT_LIMITS_INFO). */
uint32_t pl_port_get_qlimit(const pl_port_t *port);

/** The port's maximum payload size in bytes. */
uint32_t pl_port_get_max_msg_size(const pl_port_t *port);

/** Number of messages queued now (mach_port_get_attributes with MACH_PORT_RECEIVE_STATUS, mps_msgcount). */
uint32_t pl_port_message_count(const pl_port_t *port);

/* ------------------------------------------------------------------------------------------------ */
/* Messages                                                                                           */

/**
 * Sends a message (mach_msg with MACH_SEND_MSG | MACH_SEND_TIMEOUT). The payload is copied. When the port
 * is full the call waits up to timeout_ns for room; with 0 it fails at once with PL_ERR_TIMED_OUT.
 * A payload larger than the port's maximum fails with PL_ERR_TOO_LARGE. On any error nothing is queued.
 * @param port      a send right to the destination
 * @param id        uninterpreted message id (msgh_id)
 * @param payload   bytes to copy, may be NULL when size is 0
 * @param size      payload size in bytes
 * @param reply     a port to reply on, or NULL; the message carries a new send right to it (MAKE_SEND)
 * @param timeout_ns  0, a positive wait, or PL_TIMEOUT_FOREVER
 */
pl_status_t pl_port_send(pl_port_t *port, int32_t id, const void *payload, size_t size,
                         pl_port_t *reply, int64_t timeout_ns);


/** Most rights and descriptors one message carries, its reply right not counted. */
#define PL_MAX_ATTACHMENTS 64u

/** What an attachment is. */
typedef enum pl_attachment_kind {
    PL_ATTACHMENT_SEND_RIGHT = 1, /**< a send right (MACH_MSG_TYPE_COPY_SEND in a port descriptor) */
    PL_ATTACHMENT_FD = 2,         /**< a file descriptor (as SCM_RIGHTS passes it) */
} pl_attachment_kind_t;

/** A right or a descriptor carried by a message (a Mach message's body descriptors). */
typedef struct pl_attachment {
    pl_attachment_kind_t kind;
    pl_port_t *port;              /**< PL_ATTACHMENT_SEND_RIGHT: the right; NULL once taken */
    int fd;                       /**< PL_ATTACHMENT_FD: the descriptor; -1 once taken */
} pl_attachment_t;

/** The attachments of a received message. The receiver owns them: it takes what it wants (setting port to
 *  NULL or fd to -1) and frees the rest with pl_attachments_free. */
typedef struct pl_attachments {
    uint32_t count;
    pl_attachment_t items[];
} pl_attachments_t;

/** The i-th attachment (i < count). Why a function: Swift does not import flexible array members. */
static inline pl_attachment_t *pl_attachments_item(pl_attachments_t *attachments, uint32_t i) {
    return &attachments->items[i];
}

/** Releases the rights and closes the descriptors still in `attachments`, then frees it. NULL is ignored. */
void pl_attachments_free(pl_attachments_t *attachments);

/** Who sent a message (what Mach's audit trailer tells a receiver). pid 0 means this process: the message was
 *  sent by one of its threads. */
typedef struct pl_sender {
    int32_t pid;                  /**< the sending process, when its connection was made */
    uint32_t uid, gid;            /**< its effective user and group then (SO_PEERCRED) */
    uint64_t process_id;          /**< the inode of its pidfd (SO_PEERPIDFD): unique while the system runs, so
                                       unlike a pid never reused; 0 where the kernel cannot tell */
} pl_sender_t;

/**
 * Sends a message carrying rights and descriptors (mach_msg with a complex message: port descriptors with
 * MACH_MSG_TYPE_COPY_SEND, and descriptors as SCM_RIGHTS passes them). The caller keeps its own rights and
 * descriptors: the message carries a new send right to each port and a duplicate of each descriptor. At most
 * PL_MAX_ATTACHMENTS. All or none: on any error nothing is queued and nothing is left behind. Otherwise as
 * pl_port_send; PL_ERR_NO_MEMORY also when a port's right goes to another process for the first time and its queue
 * cannot grow to its limit (room lent to another process is room the queue holds).
 */
pl_status_t pl_port_send_with(pl_port_t *port, int32_t id, const void *payload, size_t size, pl_port_t *reply,
                              const pl_attachment_t *attachments, uint32_t attachment_count, int64_t timeout_ns);

/** Payload memory handed over whole instead of copied: Mach's out-of-line memory sent with `deallocate` set
 *  (MACH_MSG_OOL_DESCRIPTOR, MACH_MSG_VIRTUAL_COPY), and what a receiver gets of it. Either malloc'd memory or,
 *  for a large payload that came from another process, a read-only mapping of the sender's sealed memfd. */
typedef struct pl_payload {
    void *base;                   /**< the bytes; NULL when size is 0 */
    size_t size;
    int mapped;                   /**< 1: a read-only mapping (munmap); 0: malloc'd (free) */
} pl_payload_t;

/** Allocates `size` bytes of payload memory to fill and hand over (vm_allocate). PL_ERR_INVALID_ARG past
 *  PL_MSG_SIZE_MAX; PL_ERR_NO_MEMORY. */
pl_status_t pl_payload_allocate(size_t size, pl_payload_t *out);

/** Frees payload memory, whichever kind it is (vm_deallocate), and zeroes *payload. NULL is ignored. */
void pl_payload_free(pl_payload_t *payload);

/**
 * Sends a message whose payload memory the port takes over, without copying it (mach_msg with an out-of-line
 * descriptor, `deallocate` set). To a port of this process the receiver gets the same memory (a payload of at
 * most PL_INLINE_PAYLOAD_SIZE bytes is copied into the queue and the memory freed); to another process the
 * payload goes out of line as a sealed memfd when it is at least pl_out_of_line_threshold() bytes, else in
 * frames, and the memory is freed once written. On PL_OK *payload is zeroed; on any error nothing is queued and
 * the caller keeps it. Errors as pl_port_send.
 */
pl_status_t pl_port_send_payload(pl_port_t *port, int32_t id, pl_payload_t *payload, pl_port_t *reply,
                                 int64_t timeout_ns);

/** Payloads up to this size are copied into a port's queue whatever way they are sent. */
#define PL_INLINE_PAYLOAD_SIZE 48u

/** The out-of-line threshold by default: payloads from this size up cross processes as a sealed memfd. */
/* Off: on the development machine a fresh memfd per message was slower than 64 KiB frames at every size measured,
 * 64 KiB to 16 MiB (large-payloads); it is there for a process that asks for it (a payload of many MiB that should
 * not hold up the connection's other messages while its frames go, a receiver that keeps the mapping). */
#define PL_OOL_THRESHOLD_DEFAULT 0xffffffffu
/** The smallest threshold: below a page a memfd costs more than the frames it replaces. */
#define PL_OOL_THRESHOLD_MIN 4096u

/** The size from which a payload sent to another process travels as a sealed memfd rather than in frames
 *  (the size above which Mach's MIG sends arrays out of line). Process-wide. */
uint32_t pl_out_of_line_threshold(void);
/** Sets it (at least PL_OOL_THRESHOLD_MIN; UINT32_MAX: never out of line). Peers of wire version 2 and older
 *  always get frames. */
void pl_set_out_of_line_threshold(uint32_t bytes);

/** While enabled, a receive on the port that finds it empty with no send right left returns PL_ERR_NO_SENDERS
 *  at once instead of waiting (a request's reply port uses it: when the replier dropped its right, or its
 *  process died, no reply can come). Releasing the last send right wakes receivers blocked on the port
 *  directly. */
void pl_port_set_no_senders_wakes(pl_port_t *port, int enabled);

/* ------------------------------------------------------------------------------------------------ */
/* Notifications (mach_port_request_notification)                                                     */

/** A pending notification request. Opaque; the caller's handle is released with pl_notification_release. */
typedef struct pl_notification pl_notification_t;

/** msgh_id of a no-senders notice (MACH_NOTIFY_NO_SENDERS, 0106). */
#define PL_NOTIFY_NO_SENDERS 70
/** msgh_id of a dead-name notice (MACH_NOTIFY_DEAD_NAME, 0110). */
#define PL_NOTIFY_DEAD_NAME 72
/** Payload size of a notice: three little-endian uint64_t: the watched port's name, the make-send count when it
 *  fired (no-senders; 0 for dead-name), and the request's id (pl_notification_id). */
#define PL_NOTICE_SIZE 24u

/** How many send rights were ever made for the port (the make-send count, mscount), by any route: made from
 *  the receive right, copied into a message, held by another process. 0 for NULL or a proxy. */
uint64_t pl_port_make_send_count(const pl_port_t *port);

/**
 * Asks to be told when no send right to the port is left (mach_port_request_notification with
 * MACH_NOTIFY_NO_SENDERS). Counted are the rights held by any thread, queued in messages, or held by other
 * processes. The notice, a message with id PL_NOTIFY_NO_SENDERS and flag PL_RECEIVED_NOTIFICATION, goes to
 * `notify` once, when the count falls to zero while the make-send count is at least `sync`; at once if it is
 * zero already. The notice carries the make-send count of that moment: a receiver that made a right since
 * (pl_port_make_send_count is higher) knows the notice is stale. Notices do not count against `notify`'s queue
 * limit, so none is lost; the request holds no send right to `notify` (so `notify` may be `port` itself). The
 * request ends, undelivered, when the port is destroyed. The request sets a slot of `notify`'s queue aside for
 * its notice (allocated now if need be), so delivering it allocates nothing and cannot fail.
 * @param port    a local port, alive (not a proxy)
 * @param notify  a local port (not a proxy) of the caller's choosing
 * @param out     the request's handle, released with pl_notification_release (which cancels it if pending)
 * @return PL_ERR_INVALID_ARG (NULL, or a proxy), PL_ERR_INVALID_NAME (port destroyed), PL_ERR_NO_MEMORY (the
 *  request or its slot: no request exists).
 */
pl_status_t pl_port_request_no_senders(pl_port_t *port, uint64_t sync, pl_port_t *notify, pl_notification_t **out);

/**
 * Asks to be told when the port becomes a dead name (mach_port_request_notification with
 * MACH_NOTIFY_DEAD_NAME): its receive right destroyed, or, for a proxy, its process gone or the connection to
 * it ended. The notice (id PL_NOTIFY_DEAD_NAME) goes to `notify` once; at once if the port is dead already. The
 * request holds no send right to `port`: the caller keeps one while it watches (a proxy whose last right goes
 * is forgotten, and its death with it). A slot of `notify`'s queue is set aside for the notice, as for no-senders.
 * @return PL_ERR_INVALID_ARG (NULL, or `notify` a proxy), PL_ERR_NO_MEMORY.
 */
pl_status_t pl_port_request_dead_name(pl_port_t *port, pl_port_t *notify, pl_notification_t **out);

/** Cancels a request. PL_OK: it had not fired, and no notice for it will come. PL_ERR_INVALID_NAME: it fired
 *  (its notice is queued, or being queued) or ended already; cancelling twice is harmless. */
pl_status_t pl_notification_cancel(pl_notification_t *request);

/** The request's id, unique in the process: the third word of its notice. */
uint64_t pl_notification_id(const pl_notification_t *request);

/** Releases the caller's handle, and cancels the request if it has not fired: keep the handle while you want
 *  the notice. */
void pl_notification_release(pl_notification_t *request);

/* ------------------------------------------------------------------------------------------------ */
/* Send-once rights (MACH_PORT_RIGHT_SEND_ONCE)                                                       */

/** msgh_id of a send-once notice (MACH_NOTIFY_SEND_ONCE, 0107): a send-once right to the port was released
 *  unused, or the message or process holding it is gone. Posted to the port itself, with flag
 *  PL_RECEIVED_NOTIFICATION and the PL_NOTICE_SIZE payload (the port's name, then two zero words). */
#define PL_NOTIFY_SEND_ONCE 71

/** Makes a send-once right to a local port (mach_port_insert_right with MACH_MSG_TYPE_MAKE_SEND_ONCE): a right
 *  good for one message, which may be used from another process when it travels as a message's reply right.
 *  The pointer is the right; it ends with pl_port_send_once or pl_port_release_send_once. Send-once rights do
 *  not count as send rights (no-senders notifications ignore them), but a port with
 *  pl_port_set_no_senders_wakes waits while one exists. A right to a destroyed port is a dead name (sending
 *  through it fails with PL_ERR_INVALID_DEST). The right sets a slot of the port's queue aside (allocated now if
 *  need be) for its message or its notice, so neither can fail for memory later. PL_ERR_INVALID_ARG for NULL or a
 *  proxy; PL_ERR_NO_MEMORY when the slot cannot be allocated (no right is made). */
pl_status_t pl_port_make_send_once(pl_port_t *port);

/** Sends one message through a send-once right and uses it up (mach_msg with MACH_MSG_TYPE_MOVE_SEND_ONCE). It
 *  never waits: a message sent this way is queued over the queue limit, as Mach queues it, since one right
 *  stands for one message (across processes too: it spends no credit). The right is used up whatever the
 *  outcome, except with PL_ERR_TOO_LARGE, PL_ERR_INVALID_ARG and PL_ERR_NO_MEMORY, which leave it to the caller.
 *  PL_ERR_INVALID_DEST: the port was destroyed, or its process is gone (the right is gone with it).
 *  PL_ERR_INVALID_NAME: no send-once right to the port is held (used already). */
pl_status_t pl_port_send_once(pl_port_t *port, int32_t id, const void *payload, size_t size);

/** Releases a send-once right unused (mach_port_deallocate of a send-once right): the port receives a
 *  PL_NOTIFY_SEND_ONCE notice, so whoever waits on it learns at once that no message will come through that
 *  right. PL_ERR_INVALID_NAME when no send-once right to the port is held. */
pl_status_t pl_port_release_send_once(pl_port_t *port);

/** How many send-once rights to the port exist (made, not yet used or released). */
uint32_t pl_port_send_once_count(const pl_port_t *port);

/** Keeps the port's memory without holding any right, and lets it go: a caller whose send-once right may be used
 *  up by one call, yet which still asks the port's name or state afterwards, holds one of these. */
void pl_port_retain_memory(pl_port_t *port);
void pl_port_release_memory(pl_port_t *port);

/**
 * Sends a request: a message whose reply right is a send-once right made for `reply`, a local port
 * (mach_msg with MACH_MSG_TYPE_MAKE_SEND_ONCE as the reply disposition, as a MIG client stub sends). The
 * receiver gets it with PL_RECEIVED_REPLY_ONCE in out->flags and answers with pl_port_send_once; if the request
 * is destroyed unanswered, or its receiver releases the right, `reply` gets a PL_NOTIFY_SEND_ONCE notice.
 * Otherwise as pl_port_send; PL_ERR_INVALID_ARG also for a `reply` that is NULL or a proxy; PL_ERR_NO_MEMORY also
 * when the right's slot on `reply` cannot be set aside (see pl_port_make_send_once).
 */
pl_status_t pl_port_send_request(pl_port_t *port, int32_t id, const void *payload, size_t size, pl_port_t *reply,
                                 int64_t timeout_ns);

/**
 * Sends a message whose reply right is the caller's send-once right to `reply` (mach_msg with
 * MACH_MSG_TYPE_MOVE_SEND_ONCE as the reply disposition): a server forwarding a request to a worker hands the
 * right on. On success the right is the message's; on PL_ERR_INVALID_DEST it was released (`reply` gets its
 * notice); on any other error the caller keeps it. Across processes the right travels as a send-once right to
 * a peer that speaks wire version 3, and as a send right to an older peer. PL_ERR_INVALID_NAME: the caller holds
 * no send-once right to `reply`; PL_ERR_INVALID_ARG also for a right to a port of a third process.
 */
pl_status_t pl_port_send_moving_once(pl_port_t *port, int32_t id, const void *payload, size_t size,
                                     pl_port_t *reply, const pl_attachment_t *attachments, uint32_t attachment_count,
                                     int64_t timeout_ns);

/** What a receive returned. */
typedef enum pl_received_kind {
    PL_RECEIVED_MESSAGE = 0,  /**< a message; id, size, reply and arrival fields are set */
    PL_RECEIVED_FD = 1,       /**< a descriptor member of the set became readable; fd is set */
} pl_received_kind_t;

/** The header of a received message (mach_msg_header_t plus the receive trailer). */
typedef struct pl_received {
    pl_received_kind_t kind;
    int32_t id;               /**< msgh_id */
    uint32_t size;            /**< payload bytes copied; with PL_ERR_TOO_LARGE, the bytes needed */
    pl_port_t *reply;         /**< a send right to reply on, or NULL; the receiver owns it */
    uint64_t arrival_name;    /**< name of the port the message arrived on */
    void *arrival_context;    /**< that port's context (pl_port_set_context) */
    int fd;                   /**< with PL_RECEIVED_FD: the readable descriptor; otherwise -1 */
    uint32_t offset;          /**< where the payload starts in the buffer: 0, except in a batch */
    pl_sender_t sender;       /**< who sent it; pid 0: this process */
    pl_attachments_t *attachments; /**< rights and descriptors it carried, or NULL; the receiver owns them */
    uint32_t flags;           /**< PL_RECEIVED_NOTIFICATION, PL_RECEIVED_REPLY_ONCE, or 0 */
} pl_received_t;

/** In pl_received_t.flags: the message is a notification the library posted (pl_notify.c), not a message any
 *  sender could forge (Mach's notifications come from the kernel, with no sender port). */
#define PL_RECEIVED_NOTIFICATION 0x1u
/** In pl_received_t.flags: `reply` is a send-once right (pl_port_send_once answers it), not a send right. */
#define PL_RECEIVED_REPLY_ONCE 0x2u

/**
 * Receives the next message of a port (mach_msg with MACH_RCV_MSG | MACH_RCV_TIMEOUT | MACH_RCV_LARGE).
 * The payload is copied into buffer. If it does not fit in capacity, the call fails with PL_ERR_TOO_LARGE,
 * out->size tells the bytes needed and the message stays first in the queue.
 * @param buffer      where the payload goes; may be NULL when capacity is 0
 * @param timeout_ns  0 polls, a positive wait, or PL_TIMEOUT_FOREVER
 */
pl_status_t pl_port_receive(pl_port_t *port, pl_received_t *out, void *buffer, size_t capacity,
                            int64_t timeout_ns);

/**
 * Receives the next message, handing its payload memory over rather than copying it into a buffer (mach_msg
 * receiving out-of-line memory). A payload another thread sent with pl_port_send_payload is the sender's memory;
 * one that came out of line from another process is a read-only mapping of its sealed memfd; any other is
 * allocated and copied once. The caller frees it with pl_payload_free. Errors as pl_port_receive, but never
 * PL_ERR_TOO_LARGE; PL_ERR_NO_MEMORY when a copy cannot be allocated (the message stays queued).
 */
pl_status_t pl_port_receive_payload(pl_port_t *port, pl_received_t *out, pl_payload_t *payload, int64_t timeout_ns);

/**
 * Puts a received message back at the head of the port's queue, ahead of every message queued now (no Mach
 * equivalent). For a receiver that took more than it can handle: a run loop whose source left the mode, or
 * whose run was stopped, while messages it had taken were still unhandled. The queue may exceed its limit
 * until the receiver catches up; senders wait meanwhile, as for a full queue. The id, size, sender, reply
 * right and attachments are those of `received`; the payload (received->size bytes) is copied, the reply right
 * and the attachments move into the message. To put several messages back in their order, return the last
 * one first. A receiver blocked on the port, or a set holding it, is woken as for a send.
 * PL_ERR_INVALID_NAME if the port was destroyed meanwhile: nothing is queued and the caller keeps the reply
 * right and the attachments (a destroyed port's messages are destroyed, so the caller releases them).
 */
pl_status_t pl_port_requeue(pl_port_t *port, const pl_received_t *received, const void *payload);

/* ------------------------------------------------------------------------------------------------ */
/* Port sets                                                                                          */

/** A set of ports and file descriptors waited on together (a Mach port set). Opaque. */
typedef struct pl_port_set pl_port_set_t;

/** Creates an empty port set (mach_port_allocate with MACH_PORT_RIGHT_PORT_SET). */
pl_status_t pl_port_set_create(pl_port_set_t **out_set);

/** Destroys a set: its members leave it (the ports themselves live on), blocked receivers wake with
 *  PL_ERR_PORT_DIED, later calls get PL_ERR_INVALID_NAME (mach_port_destroy on a port-set name).
 *  The memory stays until the last reference is released with pl_port_set_release. */
pl_status_t pl_port_set_destroy(pl_port_set_t *set);

/** Takes another reference to the set's memory (not a right: it does not keep the set alive). */
void pl_port_set_retain(pl_port_set_t *set);

/** Releases a reference; the last one frees the set, destroying it first if nobody did. */
void pl_port_set_release(pl_port_set_t *set);

/** Adds a port to a set (mach_port_insert_member). A port may be in several sets;
 *  PL_ERR_ALREADY_IN_SET if it is in this one; PL_ERR_INVALID_NAME if the port or set was destroyed. */
pl_status_t pl_port_set_insert(pl_port_set_t *set, pl_port_t *port);

/** Removes a port from a set (mach_port_extract_member); PL_ERR_NOT_IN_SET if it is not a member. */
pl_status_t pl_port_set_extract(pl_port_set_t *set, pl_port_t *port);

/** Whether the port is a member of the set. */
int pl_port_set_contains(pl_port_set_t *set, pl_port_t *port);

/** Watches a file descriptor for readability as a member of the set; a receive then reports it
 *  (PL_RECEIVED_FD) while it is readable. The set does not own or close the descriptor. */
pl_status_t pl_port_set_insert_fd(pl_port_set_t *set, int fd);

/** Stops watching a descriptor; PL_ERR_NOT_IN_SET if it is not a member. Returns after any callback
 *  for it has finished, so the caller may close it afterwards. */
pl_status_t pl_port_set_extract_fd(pl_port_set_t *set, int fd);

/** Number of member ports and descriptors. */
uint32_t pl_port_set_member_count(pl_port_set_t *set);

/**
 * Receives one message from any member port, or reports one readable descriptor member (mach_msg on a port
 * set). Ready ports are served round-robin. Same timeout and too-large rules as pl_port_receive; the
 * message's port is named in out->arrival_name and out->arrival_context. Several threads may receive on
 * one set; each message goes to exactly one of them.
 */
pl_status_t pl_port_set_receive(pl_port_set_t *set, pl_received_t *out, void *buffer, size_t capacity,
                                int64_t timeout_ns);

/**
 * pl_port_set_receive with timeout 0, less the poll's look at the set's descriptors (no Mach equivalent): takes
 * a message already queued on a member port, or a descriptor already found readable, with no system call;
 * PL_ERR_TIMED_OUT when there is none. A run loop drains a wake-up's messages with it: what its descriptors
 * (a connection's socket among them) hold, its next sleep finds at once.
 */
pl_status_t pl_port_set_receive_queued(pl_port_set_t *set, pl_received_t *out, void *buffer, size_t capacity);

/**
 * pl_port_set_receive, handing the payload memory over rather than copying it into a buffer (mach_msg on a port
 * set, receiving out-of-line memory), as pl_port_receive_payload does for one port. The caller frees it with
 * pl_payload_free; a descriptor reported (out->kind PL_RECEIVED_FD) comes with an empty payload. Never
 * PL_ERR_TOO_LARGE; PL_ERR_NO_MEMORY when a copy cannot be allocated (the message stays queued).
 */
pl_status_t pl_port_set_receive_payload(pl_port_set_t *set, pl_received_t *out, pl_payload_t *payload,
                                        int64_t timeout_ns);

/** pl_port_set_receive_queued, handing the payload memory over as pl_port_set_receive_payload does. */
pl_status_t pl_port_set_receive_queued_payload(pl_port_set_t *set, pl_received_t *out, pl_payload_t *payload);

/**
 * Takes, without waiting, up to max messages already queued on the set's next ready port (no Mach
 * equivalent: a batch of mach_msg receives). Their payloads are packed into buffer, each at outs[i].offset
 * (8-byte aligned). One lock round on the set and one on the port serve the whole batch, where a receive per
 * message takes three; the port then goes to the back of the ready ports, as after one receive.
 * Returns PL_OK with *count >= 1; PL_OK with *count == 0 when the next thing is not a port message that fits in
 * buffer (a readable descriptor first, a message too large, a port's no-senders report, or the set's periodic look
 * at its descriptors is due): the caller then uses pl_port_set_receive; or PL_ERR_TIMED_OUT with *count == 0 when
 * nothing is queued, so that a caller that has just been woken needs no second receive to find that out. That last
 * answer takes no lock (a message queued by another thread at that moment is the next receive's).
 */
pl_status_t pl_port_set_receive_batch(pl_port_set_t *set, pl_received_t *outs, uint32_t max, void *buffer,
                                      size_t capacity, uint32_t *count);

/**
 * pl_port_set_receive_batch, handing over the payloads held in memory of their own (those larger than
 * PL_INLINE_PAYLOAD_SIZE) rather than copying them into buffer, as pl_port_set_receive_payload does: takes[i]
 * holds message i's (the caller frees it with pl_payload_free), or nothing ({0}: its payload is in buffer at
 * outs[i].offset). A batch then never stops at a payload too large for buffer, and copies each payload once less.
 * It stops before a payload that would take what it hands over past PL_BATCH_TAKE_BYTES (the first is always
 * taken): each message taken makes room that senders fill again, and the caller holds what it took.
 */
#define PL_BATCH_TAKE_BYTES (1u << 20)
pl_status_t pl_port_set_receive_batch_taking(pl_port_set_t *set, pl_received_t *outs, pl_payload_t *takes,
                                             uint32_t max, void *buffer, size_t capacity, uint32_t *count);

/** A count that changes whenever one of the set's ports joins its ready ports (no Mach equivalent). A receiver
 *  that polls in a loop reads it, without the set's lock, and receives only when it changed: its polling then
 *  leaves the lock's cache line to the senders. */
uint32_t pl_port_set_ready_marks(pl_port_set_t *set);

/** The most connections a lookout looks at; the rings of any more that feed a set wake it as when it sleeps. */
#define PL_LOOKOUT_MAX 8

/** A receiver's look at the shared-memory rings that feed a set from other processes, while it polls the set
 *  without sleeping (no Mach equivalent). Filled by pl_port_set_lookout_begin; the receiver's alone. */
typedef struct pl_port_set_lookout {
    uint32_t count;
    void *conns[PL_LOOKOUT_MAX];
} pl_port_set_lookout_t;

/**
 * Before a receiver polls `set` in a loop without sleeping (with pl_port_set_ready_marks and receives that do not
 * wait): it looks at the rings of the connections from other processes whose messages go to the set's ports, so
 * that their writers put records there without ringing it (a system call on each side), and
 * pl_port_set_lookout_read takes what comes. Costs nothing when no such connection feeds the set. Every lookout
 * begun must be ended with pl_port_set_lookout_end before the receiver sleeps or goes on to other work: until
 * then, records that arrive for other sets' ports wait for this receiver's next read too.
 */
void pl_port_set_lookout_begin(pl_port_set_t *set, pl_port_set_lookout_t *lookout);

/** Reads the lookout's rings that hold records: their messages are queued on their ports, the set's among them
 *  (its ready marks change). Returns how many rings it read. */
uint32_t pl_port_set_lookout_read(pl_port_set_t *set, pl_port_set_lookout_t *lookout);

/** Ends the lookout: the rings' writers ring again for their next record, and what came meanwhile is read. */
void pl_port_set_lookout_end(pl_port_set_t *set, pl_port_set_lookout_t *lookout);

/** How many times receivers on this set have gone to sleep and how many wake-ups senders have made (eventfd
 *  writes to a receiver in the base, signals to one waiting on the set's condition variable), since creation.
 *  For tests and benchmarks of wake-up coalescing. */
void pl_port_set_wake_stats(pl_port_set_t *set, uint64_t *out_sleeps, uint64_t *out_wakes);

/* ------------------------------------------------------------------------------------------------ */
/* Across processes: named services (launchd's bootstrap_check_in / bootstrap_look_up)                 */

/*
 * A process checks in a name and keeps the port's receive right; any process of the same user looks the name
 * up and gets a send right to it. Between them runs a connection (a SOCK_SEQPACKET Unix socket), read in each
 * process by one transport thread that the first check-in or look-up starts. On a right to a port of another
 * process every call works as on a local one: sends, timeouts and queue limits, replies, rights and
 * descriptors in messages. When that process dies, the right becomes a dead name.
 *
 * The namespace is a directory only its user may enter (mode 0700), holding one socket per service and a
 * lock file that the service's process holds (flock) while it lives: a name left behind by a dead process is
 * taken over, never an error.
 */

/** Longest service name, in bytes. Names use letters, digits, '.', '_' and '-', and do not start with '.'. */
#define PL_SERVICE_NAME_MAX 64u
/** Longest namespace directory path, in bytes (a socket's path must fit in sockaddr_un). */
#define PL_NAMESPACE_PATH_MAX 80u

/** Who may connect to a service, checked against the peer's credentials when it connects (SO_PEERCRED). */
typedef struct pl_policy {
    int allow_same_user;      /**< the service's own effective uid */
    int allow_root;           /**< uid 0 */
    int allow_anyone;         /**< any uid (the namespace directory's mode still fences) */
    uint32_t uids[16];        /**< further uids admitted */
    uint32_t uid_count;
    uint32_t gids[16];        /**< further groups admitted, by the peer's effective gid */
    uint32_t gid_count;
} pl_policy_t;

/** The default policy: the same user and root. */
pl_policy_t pl_policy_default(void);

/** Whether a peer with these credentials is admitted. */
int pl_policy_admits(const pl_policy_t *policy, uint32_t uid, uint32_t gid);

/**
 * The default namespace directory into `out` (capacity bytes): $PORTLOOP_NAMESPACE when set, else
 * $XDG_RUNTIME_DIR/portloop when XDG_RUNTIME_DIR is set, else /tmp/portloop-<uid>. PL_ERR_INVALID_ARG when
 * the path is empty, relative or longer than PL_NAMESPACE_PATH_MAX.
 */
pl_status_t pl_namespace_default(char *out, size_t capacity);

/** Checks a service name: PL_ERR_INVALID_ARG (empty, too long, or a character outside the set), else PL_OK.
 *  With an error, *reason (may be NULL) says which rule it breaks (static storage). */
pl_status_t pl_service_name_check(const char *name, const char **reason);

/**
 * Checks in `name` for `port` (bootstrap_check_in): creates the namespace directory if needed (mode 0700;
 * PL_ERR_REFUSED if it exists with another owner or wider permissions), takes the name's lock, and listens.
 * Connections are admitted by `policy` (NULL: pl_policy_default()). When the process was started by systemd
 * socket activation with a descriptor named `name` (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES), that listening
 * socket is adopted instead. The service lives as long as the port: destroying the receive right withdraws it.
 * PL_ERR_NAME_IN_USE when a live process holds the name; PL_ERR_INVALID_ARG for a bad name or a port that is a
 * proxy or destroyed; PL_ERR_SYSTEM when a system call failed (pl_last_system_call); PL_ERR_NO_MEMORY (the
 * process's first check-in or look-up starts its transport thread, whose frame buffer is made first).
 */
pl_status_t pl_service_check_in(const char *directory, const char *name, pl_port_t *port, const pl_policy_t *policy);

/**
 * Looks up `name` (bootstrap_look_up) and returns a send right to the service's port in *out_right, waiting up
 * to timeout_ns for the connection's handshake. A process that looks up the same live service again shares its
 * connection. PL_ERR_UNKNOWN_SERVICE when nobody has checked the name in (or its process is gone),
 * PL_ERR_REFUSED when the service's policy does not admit this process, PL_ERR_NO_SPACE when the service has
 * its most connections or could not make this one (its process out of memory), PL_ERR_TIMED_OUT,
 * PL_ERR_INVALID_ARG for a bad name, PL_ERR_SYSTEM, PL_ERR_NO_MEMORY.
 */
pl_status_t pl_service_look_up(const char *directory, const char *name, int64_t timeout_ns, pl_port_t **out_right);

/** What a service's transport says about it when asked (pl_service_status). */
typedef struct pl_service_status {
    int32_t pid;                  /**< the service's process, as it sees itself */
    uint32_t uid, gid;            /**< its effective user and group */
    uint32_t queue_depth;         /**< messages waiting in the service port's queue */
    uint32_t queue_limit;         /**< the service port's queue limit */
    uint32_t max_message_size;    /**< the service port's largest payload */
    uint32_t connections;         /**< processes connected to the service, the asker included */
    uint64_t messages_received;   /**< messages sent to the service port since it was made, from anyone */
} pl_service_status_t;

/** Most bytes a status query may ask the service to echo (a frame's room less the answer's fixed part). */
#define PL_SERVICE_ECHO_MAX 65488u

/**
 * Asks the process behind `right` (a send right from pl_service_look_up) how its service is doing, and waits up
 * to timeout_ns for the answer. The service's side of the connection answers by itself: the application takes no
 * part and its loop may be busy. The question carries `echo` zero bytes and the answer as many (at most
 * PL_SERVICE_ECHO_MAX), for timing round trips of a size. PL_ERR_INVALID_ARG for a right that is not a looked-up
 * service port, or a service that speaks wire version 1 (which has no status query); PL_ERR_INVALID_DEST when the
 * service is gone (before or while asking); PL_ERR_TIMED_OUT; PL_ERR_NO_MEMORY.
 */
pl_status_t pl_service_status(pl_port_t *right, uint32_t echo, int64_t timeout_ns, pl_service_status_t *out);

/** The unique id of a live process (the inode of a pidfd for it, as pl_sender_t's process_id), or 0 when the
 *  process is gone or the kernel has no pidfs. */
uint64_t pl_process_unique_id(int32_t pid);

/** Whether the right is a proxy for a port of another process. */
int pl_port_is_remote(const pl_port_t *port);

/** Counts of the cross-process layer, for tests and leak checks: live connections, exports and imports (handles
 *  given out and held) in this process. */
void pl_remote_stats(uint32_t *out_connections, uint32_t *out_exports, uint32_t *out_imports);

/** Whether a sender that streams to another process has its messages held a moment and packed, many to a
 *  packet (0 by default). When on, a thread that sends back to back (eight messages, each within 2 µs of the
 *  last) has its messages wait in the connection's outgoing queue until a 64 KiB packet fills or the transport
 *  thread finds the socket writable: one system call per packet instead of per message. The cost: a message
 *  whose send returned may still be in this process, so a process that dies abruptly (SIGKILL, _exit, a crash)
 *  loses what was held; exit() sends it first. Off, a send to another process returns once the kernel has the
 *  message (unless the socket is full), as Mach's mach_msg does. Process-wide. */
int pl_stream_packing(void);
void pl_set_stream_packing(int on);

/** When a connection to another process moves its frames into shared-memory rings (wire version 4 on both sides):
 *  PL_RINGS_WHEN_BUSY (the default) once it has carried 64 frames, PL_RINGS_ALWAYS as soon as it is made,
 *  PL_RINGS_NEVER not at all (the socket carries everything; a service that says never declines every offer). The
 *  default comes from $PORTLOOP_SHARED_RINGS ("always", "never", anything else: when busy) when it is read first.
 *  A ring costs 516 KiB of shared memory (2 MiB once the connection has carried a message of 16 KiB or more) and three
 *  descriptors (pipe ends) per connection, in each process. Process-wide; it applies to connections as they decide,
 *  so set it before looking services up. */
#define PL_RINGS_NEVER 0
#define PL_RINGS_WHEN_BUSY 1
#define PL_RINGS_ALWAYS 2
int pl_shared_rings(void);
void pl_set_shared_rings(int mode);

/** Connections of this process whose peer's frames come through a shared-memory ring. A statistic. */
uint32_t pl_remote_ring_count(void);

/** Frames this process received packed behind another in one packet, since it started: a sender that streams
 *  packs its backlog (wire version 3). A statistic, for tests and benchmarks. */
uint64_t pl_remote_packed_frames(void);

/** How many times, since it started, this process's transport thread left a connection's stream to the run loops
 *  it feeds for a while (a rest) instead of reading it too. A statistic, for tests and benchmarks. */
uint64_t pl_remote_transport_rests(void);

/** How many times, since it started, this process rang the bell of a shared-memory ring's other side (a write to
 *  a pipe): to wake a reader that had stopped looking, or a writer waiting for room. A statistic, for tests and
 *  benchmarks. */
uint64_t pl_remote_ring_bells(void);

/** How many times, since it started, a sender in this process found no credit for a port of another process and
 *  asked the port's owner for room (a WANT frame): that receiver had not given room back yet. A statistic, for
 *  tests and benchmarks. */
uint64_t pl_remote_credit_requests(void);

/* ------------------------------------------------------------------------------------------------ */
/* The main dispatch queue (libdispatch's hooks for CoreFoundation)                                   */

/** The eventfd that libdispatch makes readable when the main queue has work
 *  (_dispatch_get_main_queue_handle_4CF). Owned by libdispatch: never close it. */
int pl_main_queue_handle(void);

/** Reads the eventfd's 8 bytes so that it stops being readable; returns 1 if a value was read. */
int pl_main_queue_consume(int fd);

/** Drains the main queue once, on the main thread (_dispatch_main_queue_callback_4CF(NULL)). Crashes if the
 *  process ever called dispatch_main(). */
void pl_main_queue_drain(void);

/* ------------------------------------------------------------------------------------------------ */
/* Threads                                                                                            */

/** The kernel's id of the calling thread (gettid). */
int32_t pl_thread_id(void);

/** The process id, which is also the main thread's kernel id (getpid). */
int32_t pl_process_id(void);

/** Names the calling thread (pthread_setname_np); Linux keeps at most 15 bytes, so the caller cuts the name
 *  to fit. Returns 0 or an errno value (EINVAL for NULL, ERANGE for a name too long). */
int pl_thread_set_name(const char *name);

/** Copies the calling thread's name into buf (pthread_getname_np); size 16 holds any name. Returns 0 or an
 *  errno value. */
int pl_thread_get_name(char *buf, size_t size);

/* ------------------------------------------------------------------------------------------------ */
/* Signals as a descriptor (signalfd), for a run loop source                                          */

/** Blocks the signals in the calling thread (pthread_sigmask with SIG_BLOCK). Threads created afterwards
 *  inherit the mask, so call it on the main thread before any other thread exists; a signal blocked in every
 *  thread stays pending for a signalfd. Returns 0 or an errno value (EINVAL for a number that is no signal). */
int pl_signals_block(const int *signals, size_t count);

/** Opens a nonblocking, close-on-exec signalfd for the signals, which should be blocked already
 *  (pl_signals_block); it is readable while one of them is pending. Returns the descriptor, or -1 with errno
 *  set. The caller owns it and closes it. */
int pl_signalfd_open(const int *signals, size_t count);

/** Reads one pending signal from a signalfd: returns its number, 0 when none is pending, or -1 with errno set. */
int pl_signalfd_read(int fd);

#ifdef __cplusplus
}
#endif

#endif /* PORTLOOP_H */
