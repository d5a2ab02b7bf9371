/*
 * pl_wire.h — the frames two processes exchange over a connection's SOCK_SEQPACKET socket. Not public API.
 *
 * A frame is one packet, or (version 3, to a peer that said 3) one of several frames back to back in a packet
 * that carries no descriptors: a sender that streams packs what it sends. Integers are fixed-width little-endian.
 * Every frame starts with an 8-byte header (type, flags, a reserved zero, the frame's length: the packet's, or
 * the part of a packed packet it takes). The first frame in each direction is HELLO (magic, version; the
 * service's carries the service port's right and its status). After it: MESSAGE (a port message or a fragment
 * of one), and the control frames that keep rights and queue room in step (CREDIT, WANT, RECLAIM, RETURN,
 * RELEASE, DEAD). Version 2 adds PROBE and STATUS: a client asks the service's transport how the service is
 * doing (or just for an echo, timing the round trip). Version 3 adds send-once rights (a reply right flagged
 * PL_RIGHT_ONCE, a MESSAGE flagged PL_FRAME_ONCE that uses one up, ONCE_GONE for one released unused), the
 * OUT_OF_LINE message flag (the payload travels as a sealed memfd beside the frame, not in it) and packed
 * packets; a side sends these only to a peer that said version 3. Version 4 added the shared-memory rings
 * (pl_ring.h): RING_OFFER, RING_ACCEPT, RING_REFUSE and RING_START move a busy connection's frames from the socket
 * into memory both processes map. Version 5 changed what their bells are (an eventfd each side makes, where
 * version 4 had pipes the ringing side made): a side moves to rings only with a peer that said 5, and answers a
 * version 4 peer's offer with RING_REFUSE. The whole layout, with the reasons, is in the documentation's "The wire"
 * article.
 *
 * Rights are named by handles: small numbers that the port's owner gave out on this connection, valid on it
 * only. Descriptors travel as SCM_RIGHTS beside the packet and are named by their index there.
 *
 * The decoder takes untrusted bytes: it checks every length, count, kind, index and reserved field before it
 * trusts any of them, and it never allocates. What it cannot judge alone (whether a handle was given out,
 * whether credit was held) the connection checks.
 */
#ifndef PL_WIRE_H
#define PL_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_WIRE_MAGIC 0x50494c50u      /* the bytes "PLIP" */
#define PL_WIRE_VERSION 5u           /* what this side says in its HELLO */
#define PL_WIRE_VERSION_MIN 1u       /* the oldest a peer may say: version 1 has everything but PROBE / STATUS */
#define PL_WIRE_VERSION_PACKED 3u    /* from version 3 a packet without descriptors may hold several frames */
#define PL_WIRE_VERSION_OUT_OF_LINE 3u /* the first version whose peers take PL_FRAME_OUT_OF_LINE messages */
#define PL_WIRE_VERSION_RING 5u      /* the first version whose rings this side shares (bells of eventfds) */
#define PL_WIRE_MAX_FRAME 65536u       /* largest frame either side sends or accepts, header included */
#define PL_WIRE_MAX_ATTACHMENTS 64u    /* rights and descriptors per message, the reply right not counted */
#define PL_WIRE_HANDLE_NONE 0xffffffffu /* never a handle, nor is 0: handles are 1 … 2^32 - 2 */
#define PL_WIRE_HEADER_SIZE 8u
#define PL_WIRE_HELLO_SIZE (PL_WIRE_HEADER_SIZE + 28u)
#define PL_WIRE_RIGHT_SIZE 16u
#define PL_WIRE_MESSAGE_FIXED (PL_WIRE_HEADER_SIZE + 28u)
#define PL_WIRE_PROBE_FIXED (PL_WIRE_HEADER_SIZE + 8u)
#define PL_WIRE_STATUS_FIXED (PL_WIRE_HEADER_SIZE + 40u)
#define PL_WIRE_ECHO_MAX (PL_WIRE_MAX_FRAME - PL_WIRE_STATUS_FIXED) /* padding a PROBE may ask to get back */

typedef enum pl_frame_type {
    PL_FRAME_HELLO = 1,    /* version and limits; from a service, also its port's right or why it refuses */
    PL_FRAME_MESSAGE = 2,  /* a message for a port of the receiver, or the next fragment of one */
    PL_FRAME_CREDIT = 3,   /* owner → holder: you may send `count` more messages to `handle` */
    PL_FRAME_WANT = 4,     /* holder → owner: I have no credit for `handle` (flag WAIT: I am waiting for some) */
    PL_FRAME_RECLAIM = 5,  /* owner → holder: give back the credit for `handle` you are not using */
    PL_FRAME_RETURN = 6,   /* holder → owner: `count` credits for `handle` given back */
    PL_FRAME_RELEASE = 7,  /* holder → owner: I dropped `handle` after receiving it `transfers` times */
    PL_FRAME_DEAD = 8,     /* owner → holder: the port of `handle` was destroyed */
    PL_FRAME_PROBE = 9,    /* client → service (version 2): how is the service? answer `seq`, echo `echo` bytes */
    PL_FRAME_STATUS = 10,  /* service → client (version 2): the answer to PROBE `seq` */
    PL_FRAME_ONCE_GONE = 11, /* holder → owner (version 3): a send-once right for `handle` was released unused */
    PL_FRAME_RING_OFFER = 12,  /* client → service (version 5): the rings' memfd and the client's bell, beside it */
    PL_FRAME_RING_ACCEPT = 13, /* service → client (version 5): the service's bell beside it; its frames go by ring */
    PL_FRAME_RING_REFUSE = 14, /* service → client (version 4): not now; the client may offer again later */
    PL_FRAME_RING_START = 15,  /* client → service (version 5): the client's frames go by ring from here on */
} pl_frame_type_t;

/* MESSAGE flags */
#define PL_FRAME_MORE 0x01u            /* more fragments of this message follow */
#define PL_FRAME_ONCE 0x02u            /* (version 3, first fragment) sent through a send-once right for `dest`:
                                        * no credit spent, no reply right, no attachments */
#define PL_FRAME_OUT_OF_LINE 0x04u     /* version 3: the payload is the packet's last descriptor, a sealed memfd of
                                        * exactly total_size bytes; the frame carries no payload byte, the message
                                        * comes whole (offset 0, no MORE), and no attachment names that descriptor */
/* WANT flags */
#define PL_WANT_WAIT 0x01u             /* the sender waits: grant credit when room appears */

/* HELLO status (from the service; a client sends 0) */
#define PL_HELLO_WELCOME 0u
#define PL_HELLO_REFUSED 1u            /* the service's policy does not admit the peer's credentials */
#define PL_HELLO_FULL 2u               /* the service has as many connections as its limit allows */

/* What a right reference names. */
typedef enum pl_right_kind {
    PL_RIGHT_NONE = 0,
    PL_RIGHT_SENDERS = 1,  /* a send right to a port of the frame's sender (a handle in the sender's exports) */
    PL_RIGHT_YOURS = 2,    /* a send right to a port of the frame's receiver (a handle the receiver gave out) */
    PL_RIGHT_FD = 3,       /* a descriptor: `handle` is its index among the packet's SCM_RIGHTS */
} pl_right_kind_t;

/* Right flags */
#define PL_RIGHT_PROMPT 0x01u          /* (SENDERS) release it as soon as you drop it: its owner waits for no-senders */
#define PL_RIGHT_ONCE 0x02u            /* (version 3; SENDERS or YOURS, a message's reply right only) a send-once
                                        * right, not a send right: good for one message */

typedef struct pl_wire_right {
    uint8_t kind;          /* pl_right_kind_t */
    uint8_t flags;         /* PL_RIGHT_PROMPT, PL_RIGHT_ONCE */
    uint32_t handle;       /* or the descriptor's index */
    uint32_t credits;      /* PL_RIGHT_SENDERS: messages the receiver may send on it before asking */
    uint32_t max_size;     /* PL_RIGHT_SENDERS: the port's maximum payload size */
} pl_wire_right_t;

typedef struct pl_wire_hello {
    uint32_t magic, version, status;
    uint32_t max_frame;
    pl_wire_right_t bootstrap; /* from a service: the service port's right (kind PL_RIGHT_SENDERS) */
} pl_wire_hello_t;

typedef struct pl_wire_message {
    uint32_t dest;         /* a handle the receiver gave out */
    int32_t id;
    uint32_t total_size;   /* the whole payload's size */
    uint32_t offset;       /* where this fragment's bytes go; 0 in the first */
    uint32_t attachment_count, fd_count; /* first fragment only; fd_count counts an out-of-line payload's memfd */
    uint32_t credit_handle, credit_count; /* credit for a port of the sender, carried along (0, 0: none) */
    pl_wire_right_t reply; /* first fragment only */
    const uint8_t *attachments;  /* attachment_count encoded rights; pl_wire_right_at reads one */
    const uint8_t *bytes;  /* this fragment's payload bytes */
    uint32_t byte_count;
    bool out_of_line;      /* PL_FRAME_OUT_OF_LINE: the payload is descriptor fd_count - 1 (decoded from the flags) */
} pl_wire_message_t;

/* PROBE: `padding` zero bytes follow (a ping's size); STATUS: `echo` zero bytes, as the PROBE asked. */
typedef struct pl_wire_probe {
    uint32_t seq;          /* the client's number for the question, returned in the answer */
    uint32_t echo;         /* PROBE: bytes of padding the answer carries (at most PL_WIRE_ECHO_MAX) */
    uint32_t padding;      /* zero bytes this frame carried */
} pl_wire_probe_t;

typedef struct pl_wire_status {
    uint32_t seq;
    int32_t pid;           /* the service's process, as it sees itself */
    uint32_t uid, gid;     /* its effective ids */
    uint32_t queue_depth;  /* messages waiting in the service port's queue */
    uint32_t queue_limit, max_size; /* the service port's limits */
    uint32_t connections;  /* clients connected to the service */
    uint64_t received;     /* messages the service port has taken since its check-in, from anyone */
    uint32_t padding;      /* zero bytes this frame carried */
} pl_wire_status_t;

typedef struct pl_wire_frame {
    uint8_t type, flags;
    union {
        pl_wire_hello_t hello;
        pl_wire_message_t message;
        pl_wire_probe_t probe;
        pl_wire_status_t status;
        struct { uint32_t handle, count, flags, transfers; } control; /* CREDIT … DEAD, ONCE_GONE */
        struct { uint32_t ring_bytes; } ring; /* RING_OFFER: each direction's ring size; the other RING_ frames: 0 */
    } u;
} pl_wire_frame_t;

/*
 * Decodes one received packet of `length` bytes that came with `fd_count` descriptors. Returns true and fills
 * `frame` when every field is well formed; false with a short static reason (e.g. "length mismatch") otherwise.
 * `frame` points into `packet`.
 */
bool pl_wire_decode(const uint8_t *packet, size_t length, uint32_t fd_count, pl_wire_frame_t *frame,
                    const char **reason);

/* The length of the frame that starts `bytes` (the first of `remaining` bytes of a packed packet), as its header
 * says; 0 when no whole frame with a sane length starts there. pl_wire_decode checks the rest. */
size_t pl_wire_frame_length(const uint8_t *bytes, size_t remaining);

/* The i-th attachment of a decoded message (i < attachment_count; validated by pl_wire_decode). */
pl_wire_right_t pl_wire_right_at(const pl_wire_message_t *message, uint32_t i);

/* ---- encoding: each writes a whole frame into `out` (sized by the caller) and returns its length ---- */

size_t pl_wire_encode_hello(uint8_t *out, uint32_t version, uint32_t status, pl_wire_right_t bootstrap);
size_t pl_wire_encode_control(uint8_t *out, pl_frame_type_t type, uint32_t handle, uint32_t count_or_flags,
                              uint32_t transfers);

/* A RING_ frame: RING_OFFER with each direction's ring size (the memfd and the bell go beside it), the others
 * with 0 (RING_ACCEPT with the service's bell beside it). */
size_t pl_wire_encode_ring(uint8_t *out, pl_frame_type_t type, uint32_t ring_bytes);

/* PROBE and STATUS with their zero padding (`padding` bytes after the fixed part; out must have the room). */
size_t pl_wire_encode_probe(uint8_t *out, uint32_t seq, uint32_t echo, uint32_t padding);
size_t pl_wire_encode_status(uint8_t *out, const pl_wire_status_t *status);

/* The message header and its rights; the caller appends `byte_count` payload bytes at the returned length.
 * `attachments` may be NULL when attachment_count is 0. */
size_t pl_wire_encode_message_head(uint8_t *out, uint8_t flags, const pl_wire_message_t *message,
                                   const pl_wire_right_t *attachments, uint32_t byte_count);

/* Room for the payload in a first fragment with this many attachments, and in a later one. */
static inline uint32_t pl_wire_first_fragment_room(uint32_t attachment_count) {
    return PL_WIRE_MAX_FRAME - PL_WIRE_MESSAGE_FIXED - PL_WIRE_RIGHT_SIZE * (1u + attachment_count);
}
/* The head of a fragment after a message's first: the fixed fields and an empty reply right, no attachment. */
#define PL_WIRE_FRAGMENT_HEAD (PL_WIRE_MESSAGE_FIXED + PL_WIRE_RIGHT_SIZE)
static inline uint32_t pl_wire_next_fragment_room(void) {
    return PL_WIRE_MAX_FRAME - PL_WIRE_FRAGMENT_HEAD;
}

/* Whether a packet of `length` bytes that starts with `head` (PL_WIRE_FRAGMENT_HEAD bytes) says it is one MESSAGE
 * frame of that length with no attachment and no descriptor: pl_wire_decode then reads no byte past the head, and
 * the message's bytes are the rest of the packet. What it says only: pl_wire_decode checks the frame. */
bool pl_wire_plain_message_head(const uint8_t *head, size_t length);

/* pl_wire_plain_message_head, and a later fragment of its message: at an offset past 0 (*offset), with bytes. */
bool pl_wire_fragment_head(const uint8_t *head, size_t length, uint32_t *offset);

#endif /* PL_WIRE_H */
