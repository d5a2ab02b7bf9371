/*
 * pl_ring.h — a connection's shared-memory rings: frames between two processes without a system call each.
 * Not public API.
 *
 * A busy connection between two version 5 peers moves its frames through memory both processes map: a memfd the
 * client makes, sealed against shrinking and growing, holding one ring per direction. A ring carries *records*,
 * each a packet exactly as the socket would carry it (one frame, or several packed), so the frame handling
 * behind it is the socket's. A packet with descriptors cannot cross through memory: its record is a *mark*, and
 * the packet itself follows on the socket, so that order holds across the two paths.
 *
 * Waking: each side has a *bell* that its readers (the transport thread, the port sets the connection feeds) watch,
 * edge-triggered: an eventfd it made and gave the peer a copy of, rung by writing zero (pl_ring.c says why). A
 * reader that finds its ring empty *arms* it before it stops looking, and a writer that takes the arm rings the
 * peer's bell: a reader that is still at work costs the writer no system call, and a stream costs one per
 * pass of the reader, not one per message. A writer that finds no room asks to be told; the reader that makes room
 * rings the writer's bell, and whoever answers that bell on the writer's side sends what waited.
 *
 * The peer shares the memory and may write anything into it at any moment: every index is read once and checked
 * against the ring's size, every record header is checked before its bytes are used, and the bytes are copied
 * out before anyone decodes them. A peer that breaks these rules is disconnected as one that sends a malformed
 * packet is; it cannot make this process read or write outside the mapping, nor loop.
 */
#ifndef PL_RING_H
#define PL_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "portloop.h"
#include "pl_wire.h"

#define PL_RING_BYTES (1024u * 1024u) /* each direction's records: a power of two, sixteen of the largest packets */
#define PL_RING_NEAR_BYTES (256u * 1024u) /* where a connection's writer wraps until it puts a large frame */
#define PL_RING_HEADER_BYTES 4096u    /* the indices and flags, a page */
#define PL_RING_MAP_BYTES (PL_RING_HEADER_BYTES + 2u * PL_RING_BYTES)
#define PL_RING_RECORD_HEADER 8u      /* u32 length, u16 kind, u16 zero */
#define PL_RING_DISTANCE_SAMPLES 5u   /* the writer's timed loads of the reader's moved index weighed (their median) */
#define PL_RING_FAR_NS 60u            /* a reader farther than this (under a load from memory): the writer streams */

typedef struct pl_ring pl_ring_t;

/* What taking a record found. */
typedef enum pl_ring_take_result {
    PL_RING_EMPTY,            /* no record */
    PL_RING_PACKET,           /* a packet (copied out by pl_ring_take) */
    PL_RING_MARK,             /* the next packet on the socket comes here, in order */
    PL_RING_BROKEN,           /* the peer broke the ring's rules (*reason) */
} pl_ring_take_result_t;

/* What putting a record did. */
typedef enum pl_ring_put_result {
    PL_RING_PUT,              /* it is in the ring; the peer's bell was rung if its reader had armed */
    PL_RING_FULL,             /* no room: the peer's reader rings this side's bell when it has made some */
    PL_RING_CORRUPT,          /* the peer broke the ring's rules (an index out of bounds) */
} pl_ring_put_result_t;

/* The client's side: a new memfd of PL_RING_MAP_BYTES (sealed against shrinking and growing), mapped, and this
 * side's bell, an eventfd the ring keeps for its readers to watch. *out_memfd and *out_ringer (a copy of the bell,
 * for the peer to ring it through) are to be sent to the peer, then closed by the caller. PL_ERR_SYSTEM (errno
 * kept) or PL_ERR_NO_MEMORY: nothing is left open. */
pl_status_t pl_ring_create(pl_ring_t **out, int *out_memfd, int *out_ringer);

/* The service's side: checks a memfd the client sent (a memfd, sealed against shrinking and growing but not against
 * writing, exactly PL_RING_MAP_BYTES long, holding a ring of this layout) and maps it, with a bell of its own
 * (*out_ringer, its copy for the client, to be sent back and then closed by the caller). NULL with *reason when the
 * memfd is not one (the peer broke the protocol: *peer_fault) or when this process lacks memory or descriptors (not
 * the peer's fault: the offer is declined). The caller keeps `memfd` and closes it. */
pl_ring_t *pl_ring_adopt(int memfd, int *out_ringer, bool *peer_fault, const char **reason);

/* Takes the peer's bell, the descriptor it sent for this side to ring it through: checks that it is an eventfd, and
 * keeps it. false with *reason when it is not, or when the ring has one already (the peer broke the protocol:
 * *peer_fault), or when this process cannot tell (no /proc: not the peer's fault); the caller still owns `fd`. */
bool pl_ring_take_ringer(pl_ring_t *ring, int fd, bool *peer_fault, const char **reason);

/* This side's bell: watched by its readers, edge-triggered. */
int pl_ring_bell(const pl_ring_t *ring);

/* How many times this side has rung the peer's bell. */
uint64_t pl_ring_rung(pl_ring_t *ring);

/* Notes how long the writer took to load the reader's index when it had moved since the last load: the line came
 * from the reader's cache, so that is how far the reader's core is (with the clock's own cost; 30 ns on the project's
 * VM when the two cores shared a cache, 130 when not). The writer streams a record's bytes from 256 on while the
 * median of the last PL_RING_DISTANCE_SAMPLES is over PL_RING_FAR_NS, and before it has that many. Called by the
 * writer (and by tests). */
void pl_ring_note_distance(pl_ring_t *ring, int64_t took_ns);
/* Whether the writer now streams its records' bytes (for tests). */
bool pl_ring_streams(const pl_ring_t *ring);

/* Unmaps and closes everything (no reader or writer may be using it). NULL is ignored. */
void pl_ring_free(pl_ring_t *ring);
/* In a child after fork(): closes the descriptors, leaves the memory (not inherited: MADV_DONTFORK). */
void pl_ring_forget_in_child(pl_ring_t *ring);

/* ---- writing (one writer at a time: the connection's write lock) ---- */

/* Where this side's writer wraps: at `bytes` from the start (rounded down to 8, at least room for the largest
 * record and a pad's header, at most PL_RING_BYTES, which is where a new ring wraps). A writer that wraps early pads
 * to the ring's end, as at the end, so the reader sees no difference; the pages past the wrap are never touched,
 * and cost no memory. A writer that stands at or past a reach set below it wraps at its next put.
 * A connection keeps its writer near (PL_RING_NEAR_BYTES) until it puts a large frame: a busy connection of small
 * messages then holds no more memory than it needs, and one that carries large ones gets the whole ring, which lets
 * a large message's fragments flow while the reader copies out the ones before. */
void pl_ring_set_reach(pl_ring_t *ring, uint32_t bytes);
uint32_t pl_ring_reach(const pl_ring_t *ring);

/* Puts one packet, `head` then `body`, as a record (length at most PL_WIRE_MAX_FRAME), or, with `mark`, a mark
 * (no bytes). */
pl_ring_put_result_t pl_ring_put(pl_ring_t *ring, const uint8_t *head, size_t head_length, const uint8_t *body,
                                 size_t body_length, bool mark);
/* Puts a mark whose packet (one with descriptors) the caller sends on the socket next, which wakes the reader as the
 * bell would (its readers watch both): the bell is rung only if a pad went in with it, or the mark did not fit. Such
 * a packet then costs its writer one system call, not two. */
pl_ring_put_result_t pl_ring_put_mark_for_socket(pl_ring_t *ring);

/* ---- reading (one reader at a time: the connection's read lock) ---- */

/* Takes the next record: a packet copied into `out` (room for PL_WIRE_MAX_FRAME bytes), *out_length its length. */
pl_ring_take_result_t pl_ring_take(pl_ring_t *ring, uint8_t *out, size_t *out_length, const char **reason);

/* Takes the next record without copying it: a packet's *out_length bytes are at *shared, in memory the peer writes
 * and may change meanwhile, so the caller copies each byte it uses once and decodes only its copy. They stay the
 * reader's (the writer gets their room back) until the next take or pl_ring_done_reading. */
pl_ring_take_result_t pl_ring_take_shared(pl_ring_t *ring, const uint8_t **shared, size_t *out_length,
                                          const char **reason);

/* After a pass of takes: gives the room back to the writer and rings its bell if it waits for room. */
void pl_ring_done_reading(pl_ring_t *ring);

/* Before the reader stops looking: asks the writer to ring this side's bell for the next record. Returns true
 * when a record came meanwhile (take it: the bell may not ring for it). */
bool pl_ring_arm(pl_ring_t *ring);

/* A reader that goes on looking (a lookout, pl_lookout.c) takes the arm back, if it is set: the writer puts records
 * without ringing, and the reader must arm again (pl_ring_arm) before it stops looking. */
void pl_ring_disarm(pl_ring_t *ring);

/* Records the peer has put and this side has not taken, as far as the shared indices say (a statistic; 0 when
 * they make no sense). */
uint32_t pl_ring_pending_bytes(pl_ring_t *ring);

#endif /* PL_RING_H */
