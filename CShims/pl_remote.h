/*
 * pl_remote.h — ports across processes: connections, the rights they carry, the transport thread and the
 * namespace. Not public API; portloop.h says what a caller sees.
 *
 * A connection joins two processes over one SOCK_SEQPACKET socket. Each side gives out *handles* for its own
 * ports whose rights it sent (its exports) and keeps a *proxy* for each handle the other side gave it (its
 * imports). A proxy is a pl_port_t without a queue: a send on it becomes a MESSAGE frame, so a send right is
 * the same object to its user wherever its port lives.
 *
 * Queue room crosses as credit. The owner of a port counts, per export, the credit it lent the holder
 * (`lent`, part of the port's `reserved`); a local send finds the port full when count + reserved reaches the
 * queue limit. A holder spends one credit per message; without credit it asks (WANT) and waits, or fails at
 * once for a poll. Credit comes back as room: when the owner's receiver dequeues a message that came from a
 * connection, the slot is lent to that connection again (unless someone is waiting for room), and the peer is
 * told on the next frame that goes its way or, if it waits, at once. An owner short of room asks holders to
 * give back credit they are not using (RECLAIM / RETURN).
 *
 * Threads: one transport thread per process watches every connection and listening socket (pl_transport.c).
 * A connection is also watched by the port sets of the ports it delivers to (feeders, pl_feeder.c): a set's
 * sleeping receiver is woken by the socket itself and reads the frames, so that a message from another process
 * costs one wake-up, as from a local thread. Both watch with EPOLLEXCLUSIVE, the transport's watch queued last:
 * the kernel wakes a sleeping set's receiver, and the transport only when none sleeps; a stream that the sets keep
 * up with, the transport leaves to them for a while (it rests: pl_transport.c). Whoever reads holds the
 * connection's read_lock; frame handling, and freeing exports, happen under it alone.
 * Any thread writes: a sender writes its frames itself, without blocking (a frame the socket cannot take waits
 * in the connection's outgoing queue, which the transport thread drains).
 *
 * Lock order: a connection's read_lock, its write_lock, its lock, then a port's lock, then a set's lock; the owed
 * list's lock, the feeds lock and the transport's command lock are leaves.
 */
#ifndef PL_REMOTE_H
#define PL_REMOTE_H

#include "pl_internal.h"
#include "pl_ring.h"
#include "pl_wire.h"

/* ---- limits (documented in the "Across processes" article) ---- */

#define PL_CONN_MAX_RIGHTS 4096u        /* live exports, and live imports, per connection */
#define PL_CONN_OUTGOING_LIMIT (1u << 20) /* bytes waiting in a connection's outgoing queue, plus one message */
/* The room a sender waiting for it is woken for, when its message needs less: a woken sender finds room for a batch
 * (its message and others'), so frames leaving wake the waiters about once per 128 KiB, not once per frame, and a
 * small message waits for an eighth of the queue to leave, not for all of it (or half). */
#define PL_CONN_ROOM_BATCH (PL_CONN_OUTGOING_LIMIT / 8)
#define PL_CONN_CONTROL_LIMIT (4u << 20) /* beyond this a peer that does not read is disconnected */
#define PL_SERVICE_MAX_CONNECTIONS 1024u
#define PL_POLL_ANSWER_NS 50000000      /* how long a poll send without credit waits for the owner's answer */
#define PL_IDLE_PROXY_NS 1000000000LL   /* how long a proxy without rights is kept before it is released */
#define PL_IDLE_PROXIES_MAX 64u         /* proxies without rights kept per connection; older ones go at once */
#define PL_RING_OFFER_AFTER 64u         /* frames a client puts, or packets it reads, before it offers the ring */
#define PL_RING_RETRY_AFTER 4096u       /* and after a refusal, or a failure to make the ring */

/* ---- a small map from u32 handles to pointers (open addressing) ---- */

typedef struct pl_handle_map {
    uint32_t *keys;           /* 0: empty; UINT32_MAX: removed */
    void **values;
    uint32_t capacity, count, used;
} pl_handle_map_t;

void *pl_handle_map_get(const pl_handle_map_t *map, uint32_t key);
bool pl_handle_map_put(pl_handle_map_t *map, uint32_t key, void *value); /* false: out of memory */
void *pl_handle_map_remove(pl_handle_map_t *map, uint32_t key);
void pl_handle_map_free(pl_handle_map_t *map);
/* Calls fn for each entry; fn must not change the map. */
void pl_handle_map_each(pl_handle_map_t *map, void (*fn)(uint32_t key, void *value, void *context), void *context);

/* ---- what a queued message carries beyond id, bytes and reply ---- */

typedef struct pl_conn pl_conn_t;

/* A message's sender, attachments and origin: allocated for a message with attachments, a notice, a send-once
 * message or a mapped payload from another process; a plain message from another process points at its export's
 * `plain` (PL_MSG_SHARED); a plain local message has none. */
typedef struct pl_msg_extra {
    struct pl_export *origin; /* the export it arrived through (a reference), or NULL */
    pl_sender_t sender;
    pl_attachments_t *attachments;
    uint32_t flags;           /* PL_RECEIVED_NOTIFICATION for a notice (pl_notify.c); PL_MSG_MAPPED; PL_MSG_SHARED */
} pl_msg_extra_t;

/* In pl_msg_extra_t.flags, never shown to a receiver: the slot's heap payload is a mapping (munmap, not free). */
#define PL_MSG_MAPPED 0x100u
/* In pl_msg_extra_t.flags: the extra is an export's `plain`, shared by its plain messages; a message holds a
 * reference to the export instead of memory of its own. */
#define PL_MSG_SHARED 0x200u

/* Whether a large slot's payload is a mapping. */
static inline bool pl_slot_payload_mapped(const struct pl_msg_extra *extra) {
    return extra != NULL && (extra->flags & PL_MSG_MAPPED) != 0;
}

pl_attachments_t *pl_attachments_new(uint32_t count);

/* ---- exports: a local port whose send rights a peer holds ---- */

typedef struct pl_export {
    atomic_uint refs;         /* the connection's table, and each queued message that came through it */
    bool dropped;             /* out of every list; only its memory is left (the port's lock) */
    pl_port_t *port;          /* a send right: the peer's rights, however many, count as one */
    pl_conn_t *conn;
    uint32_t handle;
    /* the connection's lock: */
    uint32_t transfers;       /* rights sent on the connection that the peer has not released */
    uint32_t once;            /* of those, send-once rights the peer holds, not yet used or given up */
    bool released;            /* out of the connection's table: a new right needs a new export */
    /* the port's lock: */
    uint32_t lent;            /* credit lent to the peer, owed included; part of port->reserved */
    bool waiting;             /* the peer waits for credit; counted in port->want_waiters */
    bool reclaiming;          /* a RECLAIM is on its way */
    uint64_t waiting_turn;    /* while waiting: its place in line (port->want_turns when it began to wait) */
    bool dead_told;           /* DEAD was sent */
    struct pl_export *next_of_port;
    /* atomic, and the connection's owed lock for the list: */
    atomic_uint owed;         /* part of lent that the peer has not been told of */
    bool in_owed_list;
    struct pl_export *next_owed;
    /* Set when made, then read only: the extra of every message through it with no attachments that is not mapped
     * (origin this export, the peer as sender, PL_MSG_SHARED), so that such a message allocates nothing. */
    pl_msg_extra_t plain;
} pl_export_t;

/* ---- proxies: a port of the peer, seen from here ---- */

typedef struct pl_proxy {
    pl_conn_t *conn;          /* a reference */
    uint32_t handle;
    /* the connection's lock: */
    uint32_t credits;
    uint32_t transfers;       /* rights received for this handle, reported when released */
    uint32_t max_size;
    bool want_sent;           /* a WANT is unanswered */
    bool in_table;
    bool prompt;              /* the owner waits for no-senders: release at once when unused */
    bool idle;                /* unused, kept for a while in case the right comes again (the connection's list) */
    int64_t idle_since;
    struct pl_port *next_idle;
} pl_proxy_t;

/* ---- connections ---- */

typedef struct pl_out_frame {
    struct pl_out_frame *next;
    size_t length, capacity;  /* bytes held (one frame, or several packed), bytes allocated */
    size_t control_bytes;     /* the part of length that is not MESSAGE frames: in the connection's out_control_bytes */
    int fds[PL_WIRE_MAX_ATTACHMENTS];
    uint32_t fd_count;
    bool switches;            /* the frame after which this side's frames go by ring (RING_ACCEPT, RING_START) */
    bool marked;              /* its mark is in the ring: the packet itself goes on the socket next */
    bool packed;              /* several frames: by ring, it goes in the ring whatever its size */
    uint8_t bytes[];
} pl_out_frame_t;

typedef struct pl_service pl_service_t;

/* A status query waiting for its answer (on the asking thread's stack; the connection's lock). */
typedef struct pl_probe_wait {
    uint32_t seq, echo;
    bool answered;
    pl_wire_status_t status;
    struct pl_probe_wait *next;
} pl_probe_wait_t;

struct pl_conn {
    atomic_uint refs;
    int fd;
    pthread_mutex_t read_lock;/* held by whoever reads and handles frames: the transport, or a feeder's set */
    int out_fd;               /* a duplicate of fd, watched for EPOLLOUT while frames wait; -1 (write_lock) */
    pthread_mutex_t feeds_lock;
    struct pl_feed *feeds;    /* the sets this connection feeds (each a reference) */
    bool accepted;            /* the service's side */
    bool ending;              /* being ended: still among the transport's until its socket is closed (T.lock) */
    const char *ended_early;  /* a kill that came before the transport listed it (T.lock): the listing refuses it */
    bool exit_flushed;        /* its queue was sent by the exit flush, or is being (T.lock) */
    pl_sender_t peer;         /* credentials read when the connection was made */

    pthread_mutex_t write_lock;
    pthread_cond_t writable;  /* the outgoing queue drained, or has room for a sender waiting (room_under) */
    pl_out_frame_t *out_head, *out_tail;
    size_t out_bytes;
    size_t room_under;        /* out_bytes under which the least needy sender waiting for room fits, with room to
                               * spare: frames leaving below it wake the waiters (0: no wake-up is owed before the
                               * queue drains; left set by a waiter that timed out, it costs one wake-up of nobody) */
    size_t out_control_bytes; /* the part of out_bytes that is not messages: what a peer that does not read makes
                               * us queue (a message's fragments, up to its whole size, are bounded by credit) */
    bool want_writable;       /* the transport watches for EPOLLOUT */
    bool end_when_sent;       /* a client's, left with no right: ended once the outgoing queue has gone (pl_proxy.c) */
    int64_t last_put_end;     /* when the last frame was sent or queued */
    uint32_t streak;          /* frames in a row put soon after the one before: a streaming sender's are packed */
    atomic_bool backlogged;   /* out_head != NULL, readable without the write lock */
    atomic_bool packs;        /* the peer reads several frames from a packet (wire version 3) */
    atomic_bool ended;        /* teardown began: its proxies are dead names, though not all marked yet */
    uint64_t packets_read;    /* by whoever read (read_lock: every reader holds it); ring records count as packets */
    atomic_bool read_again;   /* a reader found read_lock taken: its holder reads once more before it goes */
    atomic_uint_fast64_t set_packets_read; /* by the sets it feeds: the transport sees whether they keep up */
    atomic_uint lookers;      /* receivers polling its ring without sleeping (pl_lookout.c): no reader arms it */

    pthread_mutex_t lock;
    pthread_cond_t changed;   /* credit came, the connection died, the handshake finished */
    uint64_t credit_answers;  /* CREDIT frames received: a poll's WANT was answered */
    bool dead;
    const char *death;        /* why, for the log */
    bool hello_received;
    uint32_t hello_status;
    uint32_t peer_version;    /* the wire version the peer's HELLO said */
    bool welcomed;            /* a service's: it sent this peer WELCOME, so the peer may ask for its status */
    pl_probe_wait_t *probes;  /* a client's status queries waiting for answers */
    uint32_t next_probe_seq;
    pl_handle_map_t exports;  /* handle → pl_export_t */
    pl_handle_map_t imports;  /* handle → pl_port_t (proxy) */
    pl_port_t *idle_head, *idle_tail; /* proxies with no right left, oldest first, released after a while */
    uint32_t idle_count;
    uint32_t next_handle;
    uint32_t bootstrap_handle;/* a client's: the service port's handle, from the service's HELLO */
    bool given_up;            /* a client's: its look-up failed and ends it, so no other look-up takes a right on it */

    pthread_mutex_t owed_lock;
    pl_export_t *owed_head;

    /* Work for the transport that found no memory for a command (T.lock; pl_transport.c): noted here instead. */
    uint32_t starved_work;    /* a bit per pl_command_kind_t */
    const char *starved_why;  /* the first kill's reason */
    struct pl_conn *next_starved;

    /* the shared-memory rings (pl_conn_ring.c) */
    pl_ring_t *ring;          /* write_lock to set (offered or adopted), freed at teardown; the reader's once reading */
    uint8_t ring_state;       /* write_lock: how this side's frames go (pl_conn_ring_state_t) */
    uint32_t frames_put;      /* write_lock: frames to put before the next offer (a client offers once it is busy) */
    bool hello_sent;          /* write_lock: this side's HELLO went (nothing may go before it, an offer neither) */
    bool ring_offered;        /* write_lock: a client's: it offered once already (later offers wait their turn) */
    bool socket_blocked;      /* write_lock: the outgoing queue's head waits for the socket, not the ring */
    atomic_bool ring_writing; /* ring_state is PL_CONN_RING_WRITING, readable without the write lock */
    atomic_bool ring_pending; /* a switch is under way: offered or accepted, not yet started */
    atomic_bool rings_ok;     /* the peer said version 4 */
    atomic_int bell_watched;  /* this side's bell, once its readers watch it (-1 before) */
    bool ring_reading;        /* the reader's: the peer's frames come by ring */
    uint64_t ring_offer_at;   /* the reader's: a client that has read this many packets offers the ring */
    bool ring_mark;           /* the reader's: a mark was taken; its packet is the next one on the socket */

    /* the transport thread's */
    int64_t last_read_wake;   /* when the transport last woke to read it */
    uint64_t set_read_at_wake;/* set_packets_read then */
    int64_t rest_until;       /* resting (the transport does not watch it) until then; 0 when watched */
    uint64_t set_read_at_rest;/* set_packets_read when the rest began */
    uint64_t set_read_at_flood;/* set_packets_read when the transport last handed a ring's flood back to the sets */
    struct pl_conn *next_resting;
    int64_t refused_look_at;  /* a refused write's second look for the peer's hang-up is due then; 0: none */
    struct pl_conn *next_refused;
    pl_service_t *service;    /* accepted on this service (a reference), or NULL */
    char *lookup_key;         /* a client's: the socket path it connected to */
    struct pl_conn *next;
    struct {
        bool active;
        uint32_t dest, total, received;
        int32_t id;
        uint8_t *bytes;
        bool mapped;          /* bytes is an out-of-line payload's mapping */
        pl_port_t *reply;
        bool reply_once;      /* reply is a send-once right */
        bool once;            /* the message came through a send-once right (PL_FRAME_ONCE) */
        pl_attachments_t *attachments;
        const uint8_t *in_place; /* where the packet being handled already put its bytes, if a fragment's (or NULL) */
    } rx;
    uint64_t rx_serial;       /* the reader's: messages begun (outside rx, which is cleared after each), so that a
                               * fragment read in place names the one it belongs to */
    const uint8_t *rx_bytes_in_ring; /* the reader's: where the bytes of the message frame being handled are, when
                                      * they were left in the shared ring (pl_conn_read_ring); else NULL */
};

/* How this side's frames go (ring_state). */
typedef enum pl_conn_ring_state {
    PL_CONN_RING_NONE,        /* by socket; a client offers the ring once the connection is busy */
    PL_CONN_RING_OFFERED,     /* a client's: by socket while the service answers the offer */
    PL_CONN_RING_SWITCHING,   /* by socket until the queued switch frame has gone, then by ring */
    PL_CONN_RING_WRITING,     /* by ring (a packet with descriptors: a mark in the ring, the packet on the socket) */
} pl_conn_ring_state_t;

pl_conn_t *pl_conn_new(int fd, bool accepted); /* NULL: out of memory (fd untouched) */
void pl_conn_retain(pl_conn_t *conn);
void pl_conn_release(pl_conn_t *conn);         /* the last frees memory only: teardown happened before */

/* Writes one whole frame now or queues it (write_lock held). PL_ERR_INVALID_DEST: the connection is broken. */
pl_status_t pl_conn_put_frame_locked(pl_conn_t *conn, const uint8_t *bytes, size_t length, const int *fds,
                                     uint32_t fd_count);
/* The same for a frame in two parts, its head and its payload bytes, written with one sendmsg (no copy of the
 * payload unless the frame has to wait in the outgoing queue). */
pl_status_t pl_conn_put_frame_parts_locked(pl_conn_t *conn, const uint8_t *head, size_t head_length,
                                           const uint8_t *body, size_t body_length, const int *fds,
                                           uint32_t fd_count);
/* Sends what waits in the outgoing queue, waiting for room until `deadline` (exit() does, see pl_transport.c). */
void pl_conn_flush_before_exit(pl_conn_t *conn, int64_t deadline);
/* From the exit flush on, no sender holds frames back to pack, whatever pl_stream_packing says. */
void pl_conn_stop_packing(void);
/* Writes a control frame (any thread holding no lock of the connection or of a port). */
void pl_conn_write_control(pl_conn_t *conn, pl_frame_type_t type, uint32_t handle, uint32_t count_or_flags,
                           uint32_t transfers);
/* Answers a PROBE with the service's STATUS (the reader). false: the peer may not ask (reason set). */
bool pl_conn_answer_probe(pl_conn_t *conn, const pl_wire_probe_t *probe, const char **reason);
/* Hands a STATUS to the query waiting for it (the reader); an answer nobody waits for any more is dropped. */
bool pl_conn_take_status(pl_conn_t *conn, const pl_wire_status_t *status, const char **reason);
/* Sends the connection's HELLO. */
void pl_conn_write_hello(pl_conn_t *conn, uint32_t status, pl_wire_right_t bootstrap);
/* Writes what waits in the outgoing queue (the transport thread, on EPOLLOUT). */
void pl_conn_flush_outgoing(pl_conn_t *conn);
/* Sends the credit owed to the peer: the transport thread, when asked (room for a peer that waits); a receiver
 * that took a message leaving a quarter of a window owed (pl_credit_send_due). */
void pl_conn_flush_owed(pl_conn_t *conn);
/* What reading a connection found. */
typedef enum pl_read_result {
    PL_READ_DRAINED,          /* nothing more to read now */
    PL_READ_MORE,             /* the budget ran out with frames still waiting */
    PL_READ_ENDED,            /* the end: the peer closed, the socket broke, or it broke the protocol (*why) */
} pl_read_result_t;

/* Packets one read takes at most (recvmmsg); a reader's buffer holds this many frames. */
#define PL_READ_BATCH 4
/* A reader's frame buffer: room for a batch of full frames (a thread's, pl_thread_frame_buffer; the transport's). */
#define PL_FRAME_BUFFER_BYTES ((size_t)PL_READ_BATCH * PL_WIRE_MAX_FRAME)
/* What a set's receiver reads in one turn before it hands the rest to the transport. Packets (ring records): as
 * many as one peer may have in flight to a port (half the largest queue limit), so that one peer's stream of small
 * messages is read in a turn; handing it over every 64 woke the transport, and two readers then took turns at one
 * ring for work that one does faster. Bytes: a stream of large messages is handed over as before, every 4 MiB (64
 * of the largest packets): there a second reader's copying is worth its wake-up. */
#define PL_SET_READ_PACKETS ((int)(PL_QLIMIT_MAX / 2))
#define PL_SET_READ_BYTES ((size_t)64 * PL_WIRE_MAX_FRAME)
/* What a sender out of credit reads from its connection before it asks for more (pl_proxy.c). */
#define PL_SENDER_READ_PACKETS 64
#define PL_SENDER_READ_BYTES ((size_t)4 * PL_WIRE_MAX_FRAME)
/* Reads and handles up to about `budget` frames, and about `bytes` bytes of them (read_lock held), into `buffer`
 * (PL_READ_BATCH frames' room). */
pl_read_result_t pl_conn_read_frames(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, const char **why);
/* A woken reader's turn: takes read_lock and reads, or, when another reader holds it, leaves that reader a note to
 * read once more before it lets go (a bell is an edge: what woke this thread must not be lost), and returns with
 * *took false. With PL_READ_ENDED it returns holding read_lock (the caller lets go of the connection's watches,
 * unlocks, then ends it); otherwise unlocked. *packets: packets read in the turn. */
pl_read_result_t pl_conn_read_turn(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, const char **why,
                                   bool *took, uint64_t *packets);

/* Handles one received frame (the reader). false: the peer broke the protocol (reason set). */
bool pl_conn_receive_frame(pl_conn_t *conn, const uint8_t *packet, size_t length, int *fds, uint32_t fd_count,
                           const char **reason);
/* Handles one packet: a frame, or (from a peer that said version 3, no descriptors beside it) frames back to back,
 * each through pl_conn_receive_frame. false: the first refused ends it (reason set), as for a frame. */
bool pl_conn_receive_packet(pl_conn_t *conn, const uint8_t *packet, size_t length, int *fds, uint32_t fd_count,
                            const char **reason);
/* Ends the connection: proxies become dead names, exports are dropped, waiters wake. The transport thread. */
void pl_conn_teardown(pl_conn_t *conn, const char *why);

/* ---- the shared-memory rings (pl_conn_ring.c) ---- */

/* One sendmsg of a whole frame, descriptors beside it. 1: sent; 0: the socket is full; -1: the connection is
 * broken (errno set). */
int pl_conn_sendmsg(int fd, const uint8_t *head, size_t head_length, const uint8_t *body, size_t body_length,
                    const int *fds, uint32_t fd_count);
/* Writes a packet by ring (write_lock held, ring_state PL_CONN_RING_WRITING): a record, or for a packet with
 * descriptors a mark (*marked once it is in; it rings no bell) and the packet on the socket, which wakes the reader.
 * A single frame of 16 KiB or more, not `packed` (a backlog's small frames), gives the writer the whole ring from
 * then on. 1: written; 0: it waits, for room in the ring or, with socket_blocked set, for the socket; -1: the socket
 * failed (errno); -2: the peer broke the ring (the connection is being ended). */
int pl_conn_ring_write_locked(pl_conn_t *conn, const uint8_t *head, size_t head_length, const uint8_t *body,
                              size_t body_length, const int *fds, uint32_t fd_count, bool packed, bool *marked);
/* A client offers the ring (write_lock held) once it has put enough frames, or at once if the process asked. */
void pl_conn_ring_maybe_offer_locked(pl_conn_t *conn);
/* The reader's side of the RING_ frames. false: the peer broke the protocol (*reason). */
bool pl_conn_ring_receive(pl_conn_t *conn, const pl_wire_frame_t *frame, int *fds, const char **reason);
/* A client that has read enough offers the ring too (the reader; no lock held). */
void pl_conn_ring_after_read(pl_conn_t *conn);
/* A client in a process that wants rings always offers once the service's hello is in (the reader). */
void pl_conn_ring_after_hello(pl_conn_t *conn);
/* Reads up to `budget` packets from the socket, `batch` a system call (the reader): as pl_conn_read_frames, and
 * *taken says how many it handled. */
pl_read_result_t pl_conn_read_socket(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, int batch,
                                     const char **why, int *taken);
/* Handles the ring's packets up to its next mark and takes the mark (the reader, ring_reading): for a packet read
 * from the socket in the batch that carried the switch, behind the switch frame. false: no mark was there, or the
 * peer broke the ring (*why). */
bool pl_conn_ring_take_to_mark(pl_conn_t *conn, uint8_t *scratch, const char **why);
/* Reads the ring (the reader, ring_reading): as pl_conn_read_frames. */
pl_read_result_t pl_conn_read_ring(pl_conn_t *conn, uint8_t *buffer, int budget, size_t bytes, const char **why);
/* Whether the ring holds records for its reader, looked at from outside the reader (no lock held); `take_arm`:
 * a lookout's look, which keeps the ring unarmed. */
bool pl_conn_ring_pending(pl_conn_t *conn, bool take_arm);
/* Frees the ring at the connection's end (the reader's lock held, writers stopped). */
void pl_conn_ring_teardown(pl_conn_t *conn);
/* Connections of this process whose frames come by ring (a statistic). */
uint32_t pl_remote_ring_count(void);

/* ---- exports and credit (pl_credit.c) ---- */

/* Exports `port` on the connection for one more right (the connection's lock held), lending credit with it.
 * *out_dead: the port is destroyed already, so DEAD must follow the frame. PL_ERR_NO_SPACE at the limit. */
pl_status_t pl_conn_export_locked(pl_conn_t *conn, pl_port_t *port, pl_wire_right_t *out_right, bool *out_dead);
/* Undoes exports made for a message that cannot go (the connection's lock held): the rights and credit it
 * would have carried. */
void pl_conn_unexport_locked(pl_conn_t *conn, const pl_wire_right_t *rights, uint32_t count);
/* Drops an export whose every transfer was undone (the transport thread). */
void pl_export_drop_if_unused(pl_conn_t *conn, uint32_t handle);
/* Forgets an export that the connection's table no longer holds: credit back as room, references released. */
void pl_export_drop(pl_export_t *e);
/* Takes one export's owed credit for a frame going to the peer: *handle and *count, or false if none. */
bool pl_conn_take_owed(pl_conn_t *conn, uint32_t *handle, uint32_t *count);
uint32_t pl_export_total(void);
/* The owner's side of WANT, RETURN and RELEASE (the transport thread; no lock held). false: a violation. */
bool pl_credit_want(pl_conn_t *conn, uint32_t handle, uint32_t flags, const char **reason);
bool pl_credit_returned(pl_conn_t *conn, uint32_t handle, uint32_t count, const char **reason);
bool pl_credit_released(pl_conn_t *conn, uint32_t handle, uint32_t transfers, uint32_t credits,
                        const char **reason);


/* ---- proxies (pl_proxy.c) ---- */

/* The proxy for a right the peer sent (the connection's lock held); with make_right, a new send right for the
 * caller. NULL with *reason when the peer broke a limit or memory ran out. */
pl_port_t *pl_proxy_import_locked(pl_conn_t *conn, pl_wire_right_t right, bool make_right, const char **reason);
/* The holder's side of CREDIT, RECLAIM and DEAD (the transport thread; no lock held). */
void pl_proxy_credit(pl_conn_t *conn, uint32_t handle, uint32_t count);
void pl_proxy_reclaim(pl_conn_t *conn, uint32_t handle);
void pl_proxy_dead(pl_conn_t *conn, uint32_t handle);
uint32_t pl_proxy_import_total(void);
void pl_proxy_forget_imports(uint32_t count); /* a connection's table was dropped whole */
/* The proxy send path: pl_port_send on a proxy. With PL_REPLY_MOVE_ONCE, *reply_taken says whether the
 * caller's send-once right left it (it went with the message, or was used up when the connection broke); with
 * PL_REPLY_MAKE_ONCE, whether the new right came to be (went as a send-once right), keeping the slot the caller
 * set aside for it on the reply port. */
pl_status_t pl_proxy_send(pl_port_t *proxy, int32_t id, const void *payload, size_t size, pl_port_t *reply,
                          pl_reply_mode_t mode, bool *reply_taken, const pl_attachment_t *attachments,
                          uint32_t attachment_count, int64_t timeout_ns);
/* pl_port_send_once on a proxy (the caller holds a send right to it for the call, and has taken the send-once
 * right): a MESSAGE flagged PL_FRAME_ONCE, which spends no credit. */
pl_status_t pl_proxy_send_once(pl_port_t *proxy, int32_t id, const void *payload, size_t size);
/* pl_port_release_send_once on a proxy (same conditions): ONCE_GONE tells the owner, which posts the notice. */
void pl_proxy_release_send_once(pl_port_t *proxy);
/* The last send right to a proxy was released: tell the owner (RELEASE), at once or after a while. */
void pl_proxy_unused(pl_port_t *proxy);
/* A proxy gets a send right again (the connection's lock held): it is no longer idle. */
void pl_proxy_revive_locked(pl_conn_t *conn, pl_port_t *proxy);
/* Ends a client's connection that holds no right any more, after what waits in its outgoing queue (no lock held). */
void pl_conn_end_if_unused(pl_conn_t *conn);
/* Releases the connection's proxies idle since before `cutoff` (the transport thread). */
void pl_conn_release_idle(pl_conn_t *conn, int64_t cutoff);
/* Proxies idle in this process: the transport sweeps while there are any. */
uint32_t pl_proxy_idle_total(void);
/* Frees a proxy's remote part when its memory goes. */
void pl_proxy_free(pl_proxy_t *proxy);

/* ---- hooks from the port file (port lock held unless said) ---- */

/* A message was dequeued from port, through export `origin` or, when NULL, from this process: its slot goes to a
 * peer waiting for credit, or back to `origin` (see the top). Called when origin != NULL or want_waiters > 0. */
void pl_remote_room_freed_locked(pl_port_t *port, struct pl_export *origin);
/* The port's queue limit was raised while peers waited for credit: they are given of the new room. */
void pl_remote_room_grown_locked(pl_port_t *port);
/* Takes and releases a reference to an export's memory (releasing never takes a lock). */
void pl_export_retain(struct pl_export *e);
void pl_export_release(struct pl_export *e);
/* A local sender found the port full because of credit lent out: ask holders for what they do not use.
 * Called after the port lock was released. */
void pl_remote_reclaim(pl_port_t *port);
/* The port was destroyed; its exports are told (port lock not held). */
void pl_remote_port_destroyed(pl_port_t *port);

/* ---- the transport thread (pl_transport.c) ---- */

pl_status_t pl_transport_start(void);                 /* idempotent; PL_ERR_SYSTEM when it cannot start */
/* A connection's socket being made (by a look-up, or accepted), not yet the transport's: a child of fork() closes
 * it. Listed (on the maker's stack) from pl_transport_pending_add, before the socket is made, until
 * pl_transport_add_conn takes the connection or pl_transport_pending_drop closes the socket. */
typedef struct pl_pending_socket {
    int fd;                   /* -1 until made (stored while fork() waits: PL_WHILE_FORK_WAITS) */
    struct pl_pending_socket *next;
} pl_pending_socket_t;
void pl_transport_pending_add(pl_pending_socket_t *pending);
void pl_transport_pending_drop(pl_pending_socket_t *pending); /* errno kept */
/* Watches a new connection (takes a reference); its socket stops being pending in the same hold of the lock fork()
 * waits for. On failure the socket stays pending (and open): the caller drops it, with conn->fd set to -1 first.
 * PL_ERR_INVALID_DEST: the connection was killed before (its hello could not go, or its end was read already, reason
 * in ended_early), and is not listed: the caller ends it. */
pl_status_t pl_transport_add_conn(pl_conn_t *conn, pl_pending_socket_t *pending);
/* Lists the service as opening (before its check-in opens a descriptor): a child of fork() closes its descriptors
 * too, as it closes those of the services the transport watches. pl_transport_add_service takes it off the list;
 * a check-in that gives up calls pl_transport_opening_drop, which closes its descriptors in the same hold of the
 * lock fork() waits for. */
void pl_transport_opening_add(pl_service_t *service);
void pl_transport_opening_drop(pl_service_t *service);
/* Around the system call that makes an opening service's or a pending socket's descriptor and the store of it:
 * fork() waits meanwhile, so that a child never has a descriptor its handler cannot see. */
void pl_transport_hold_fork(void);
void pl_transport_release_fork(void);
/* Closes *slot, if open, and sets it to -1, while fork() waits (errno kept). */
void pl_transport_close_descriptor(int *slot);
/* `*slot = make`, where `make` is a system call that returns a new descriptor (or -1, errno set), while fork()
 * waits. errno is kept. The hold is a leaf: nothing else is taken in it. */
#define PL_WHILE_FORK_WAITS(slot, make)            \
    do {                                           \
        pl_transport_hold_fork();                  \
        int pl_made_ = (make), pl_errno_ = errno;  \
        *(slot) = pl_made_;                        \
        pl_transport_release_fork();               \
        errno = pl_errno_;                         \
    } while (0)
/* Publishes an opening service as service->port's (taken off the opening list, watched, given a reference):
 * PL_ERR_INVALID_ARG if that port is dead or has a service already, PL_ERR_SYSTEM (errno kept) if epoll refuses. */
pl_status_t pl_transport_add_service(pl_service_t *service);
void pl_transport_want_writable(pl_conn_t *conn);     /* the outgoing queue has frames */
void pl_transport_flush_owed(pl_conn_t *conn);        /* credit is owed to a waiting peer */
void pl_transport_reclaim(pl_port_t *port);           /* send RECLAIMs for this port */
void pl_transport_withdrawal_begin(void);            /* a service's port is being destroyed (before its unlink) */
/* Withdraws the service of a destroyed port (after the begin), with the command made for it at check-in. */
void pl_transport_withdraw(pl_port_t *port, pl_service_t *service);
/* A check-in's wait for a name's lock that this process may hold itself, soon to be closed (zeroed to start). */
typedef struct {
    uint64_t withdrawals; /* the withdrawals begun when the check-in first found the lock held */
    int64_t since;        /* when that was (pl_now_ns) */
    int64_t settled;      /* when they were first seen done (or the wait for them ran out); 0: not yet */
} pl_lock_wait_t;
/* Whether a check-in that found a name's lock held should look again in a moment: a withdrawal this process began
 * before is not done yet (for 2 s at most), it has just been seen done (one more look), or this process forked less
 * than 50 ms ago (the child has copies of the locks until its fork handler closes them; for 50 ms after the
 * withdrawals at most). Never from the transport thread. */
bool pl_transport_lock_may_be_ours(pl_lock_wait_t *wait);
void pl_transport_kill(pl_conn_t *conn, const char *why); /* end a connection (a write failed) */
/* A write found the peer taking nothing more (EPIPE, ECONNRESET): the connection ends when its reader reads the end,
 * or at once if no end is coming (a peer that shut its reading side only). */
void pl_transport_peer_refused(pl_conn_t *conn);
void pl_transport_drop_export(pl_conn_t *conn, uint32_t handle); /* drop an export left with no transfer */
void pl_transport_sweep_soon(pl_conn_t *conn);         /* a proxy went idle: sweep it in time */
void pl_transport_read(pl_conn_t *conn);               /* read on where a feeder's reader stopped */
void pl_transport_rewatch(pl_conn_t *conn);            /* queue the transport's watch behind the sets' */

/* ---- feeders (pl_feeder.c) ---- */

/* A set this connection feeds (the feeds lock). */
typedef struct pl_feed {
    pl_port_set_t *set;       /* a reference */
    struct pl_feed *next;
} pl_feed_t;

/* A message from `conn` was queued on `port`: the port's sets watch the connection from now on. */
void pl_feeder_learn(pl_port_t *port, pl_conn_t *conn);
/* The connection's bell is to be watched: every set it feeds adds it to its poller. */
void pl_feeders_watch_bell(pl_conn_t *conn);
/* The connection ends: every set it feeds forgets it (before its socket is closed). */
void pl_feeders_detach_conn(pl_conn_t *conn);
/* A buffer of PL_READ_BATCH frames for the calling thread (freed with the thread), or NULL. */
uint8_t *pl_thread_frame_buffer(void);
/* A live client connection to this socket path, if any (a reference). */
pl_conn_t *pl_transport_find_client(const char *key);

/* ---- services (pl_service.c) ---- */

struct pl_service {
    atomic_uint refs;
    int listen_fd;
    int lock_fd;              /* flock held while the service lives; -1 under socket activation */
    bool activated;           /* listen_fd is systemd's (socket activation): given back, not closed, when withdrawn */
    char *path;               /* the socket's path, unlinked when withdrawn (NULL under socket activation) */
    char *lock_path;
    pl_port_t *port;          /* a memory reference to the service port */
    pl_policy_t policy;
    atomic_uint connections;  /* changed by the transport thread; read by whoever answers a status query */
    bool withdrawn;
    atomic_bool unlinked;     /* the socket's name is gone (by whoever destroyed the port, or the withdrawal) */
    void *withdraw_command;   /* the transport's, made when it lists the service: the withdrawal needs no memory */
    struct pl_service *next;
    struct pl_service *next_paused; /* among the services paused while descriptors are short (the transport thread's) */
};

void pl_service_release(pl_service_t *service);
/* The transport thread accepted a socket on the service (pending: see pl_transport_pending_add): check the peer,
 * start the connection. */
void pl_service_accepted(pl_service_t *service, pl_pending_socket_t *pending);
/* Unlinks the service's socket (once; any thread, while the service holds its lock). */
void pl_service_unlink(pl_service_t *service);
/* Closes the listening socket (gives systemd's back), unlinks the name, drops the lock (the transport thread). */
void pl_service_withdraw(pl_service_t *service);
/* Closes the listening socket and the lock file, if open (async-signal-safe: for the fork child handler too). */
void pl_service_close_descriptors(pl_service_t *service);

/* ---- out-of-line payloads (pl_ool.c) ---- */

/* A sealed memfd holding a copy of the payload (*out_fd). PL_ERR_SYSTEM (errno kept) when memfd_create, the
 * write or the seals fail: the caller sends in frames instead. */
pl_status_t pl_ool_make(const void *payload, size_t size, int *out_fd);
/* Whether a received descriptor is a memfd with every seal, exactly `size` bytes long (*reason if not). */
bool pl_ool_check(int fd, uint32_t size, const char **reason);
/* The payload of a checked memfd: mapped read-only (*out_mapped), or read into the heap when no mapping can be
 * made. NULL with *reason when neither works. */
void *pl_ool_map(int fd, uint32_t size, bool *out_mapped, const char **reason);
/* Unmaps or frees. */
void pl_ool_release(void *bytes, size_t size, bool mapped);

/* ---- control messages (pl_cmsg.c) ---- */

struct msghdr;
/* Descriptors (at most PL_WIRE_MAX_ATTACHMENTS; more are closed and *too_many set) and the sender's credentials
 * (SCM_CREDENTIALS, SCM_PIDFD: *has_sender) from a received packet's control messages. */
void pl_cmsg_collect(struct msghdr *msg, int *fds, uint32_t *fd_count, bool *too_many, pl_sender_t *sender,
                     bool *has_sender);
/* Asks the kernel to pass the sender's credentials with every packet (SO_PASSCRED, SO_PASSPIDFD), or stops. */
void pl_cmsg_ask_credentials(int fd, bool on);
/* Room for every control message a packet may come with. */
#define PL_CMSG_SPACE (CMSG_SPACE(sizeof(int) * PL_WIRE_MAX_ATTACHMENTS) + CMSG_SPACE(sizeof(int) * 3) + CMSG_SPACE(sizeof(int)))

/* ---- identity (pl_identity.c) ---- */

/* The credentials of a connected socket's peer (SO_PEERCRED, SO_PEERPIDFD). */
pl_status_t pl_identity_of_peer(int fd, pl_sender_t *out);

#endif /* PL_REMOTE_H */
