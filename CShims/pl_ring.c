/*
 * pl_ring.c — a connection's shared-memory rings (see pl_ring.h for what they are and why).
 *
 * The memfd holds a header page, then the client-to-service ring, then the service-to-client ring. Each ring has
 * its writer's index (`tail`) and its reader's (`head`) on cache lines of their own; both count bytes ever put or
 * taken, modulo 2^32, so `tail - head` is what waits and never exceeds the ring's size when both sides keep the
 * rules. A record is 8-byte aligned and never wraps: a writer that reaches the end with too little room left pads
 * the rest (a PAD record) and goes on at the start. A writer may wrap early, at its *reach*, with a pad to the end
 * that it never writes beyond its header: the reader cannot tell, and the pages past the reach stay untouched.
 *
 * Each side keeps its own indices in private memory and treats the shared copies of the other side's as claims
 * to be checked: the writer trusts only its own tail, the reader only its own head.
 *
 * Memory order: the writer stores its tail after the record's bytes (release), the reader loads it before reading
 * them (acquire), and likewise the other way for head. Arming and asking for room are Dekker pairs: each side
 * stores its flag, then loads the other's index, both sequentially consistent, so that one of the two always sees
 * the other.
 */
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#include "pl_ring.h"
#include "pl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PL_RING_MAGIC 0x474e5252u /* "RRNG" */
#define PL_RING_LAYOUT 1u
#define PL_RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

enum { PL_RECORD_PACKET = 1, PL_RECORD_MARK = 2, PL_RECORD_PAD = 3 };

/* One direction's shared words. */
typedef struct pl_ring_side {
    _Alignas(64) _Atomic uint32_t tail;          /* the writer's: bytes put */
    _Alignas(64) _Atomic uint32_t head;          /* the reader's: bytes taken */
    _Alignas(64) _Atomic uint32_t reader_armed;  /* 1: the reader stopped looking; ring its bell for the next record */
    _Atomic uint32_t writer_waiting;             /* 1: the writer found no room; ring its bell once there is some */
} pl_ring_side_t;

typedef struct pl_ring_shared {
    uint32_t magic, layout, ring_bytes, reserved;
    _Alignas(64) pl_ring_side_t side[2];         /* [0] client to service, [1] service to client */
} pl_ring_shared_t;

_Static_assert(sizeof(pl_ring_shared_t) <= PL_RING_HEADER_BYTES, "the shared header fits its page");
_Static_assert((PL_RING_BYTES & (PL_RING_BYTES - 1)) == 0, "indices count modulo 2^32: the ring's size divides it");
/* The largest record fits an empty ring wherever its indices stand: the writer pads to the end first, then starts
 * at the beginning. A writer short of the ring's end keeps room for a pad's header before its reach, so that the pad
 * it wraps with is written inside it too. (With the least reach, a record after a pad may have to wait for the
 * reader to take the pad, as in a ring of that size.) */
#define PL_RING_LEAST_REACH (PL_WIRE_MAX_FRAME + 2u * PL_RING_RECORD_HEADER)
_Static_assert(PL_RING_NEAR_BYTES % 8 == 0 && PL_RING_NEAR_BYTES >= PL_RING_LEAST_REACH &&
               PL_RING_NEAR_BYTES <= PL_RING_BYTES, "a near writer's part of the ring holds the largest record");
/* A long pass of the reader gives room back every this many bytes, not only at its end. */
#define PL_RING_GIVE_BACK_BYTES (PL_RING_NEAR_BYTES / 4)

struct pl_ring {
    uint8_t *map;
    pl_ring_side_t *out, *in;
    uint8_t *out_data, *in_data;
    uint32_t out_tail;        /* what this side has put: the authority (the shared tail is a copy) */
    uint32_t out_head_seen;   /* the reader's head as last read: reread only when room seems short */
    uint32_t out_reach;       /* where this side's writer wraps (pl_ring_set_reach) */
    bool out_streaming;       /* whether this side's writer streams its records' bytes (pl_ring_note_distance) */
    uint8_t out_distance_next, out_distance_count;
    uint32_t out_distance_ns[PL_RING_DISTANCE_SAMPLES]; /* the last times taken to load the reader's index anew */
    uint32_t in_head;         /* what this side has taken: the authority */
    uint32_t in_head_shared;  /* the head last stored where the writer sees it */
    uint32_t in_tail_seen;    /* the writer's tail as last read: reread only once this side has taken up to it */
    int bell;                 /* this side's bell: an eventfd the peer rings it through (a copy of it) */
    int ringer;               /* the peer's bell, which the peer sent (-1 before it is taken) */
    _Atomic uint64_t rung;    /* times this side rang it (its writer and its reader both ring) */
};

/* A bell is an eventfd that the side it wakes makes, with its counter at one, and never reads: the peer rings it
 * by writing zero. Zero, because the peer shares the eventfd's one open file description and so could clear
 * O_NONBLOCK and raise the counter to its limit, where a write of anything else would wait; a write of zero cannot
 * wait, and it still wakes whoever watches (the kernel wakes the eventfd's waiters on every write, and its readers
 * find it readable while the counter is not zero). Nothing fills, so nothing is ever emptied. The eventfd's lock is
 * a spinlock the kernel never holds while it copies from or to a process's memory: unlike a pipe's mutex, a peer
 * whose own page fault never ends inside a read or write of it holds up no one. A peer that reads a bell's counter
 * down to zero silences that bell, as it could by never ringing: only its own traffic stalls. */
static uint32_t pl_align8(uint32_t n) { return (n + 7u) & ~7u; }

static atomic_uint_fast64_t pl_bells_rung;

uint64_t pl_remote_ring_bells(void) { return atomic_load_explicit(&pl_bells_rung, memory_order_relaxed); }

static void pl_ring_bell_ring(pl_ring_t *ring) {
    if (ring->ringer < 0) return;
    atomic_fetch_add_explicit(&ring->rung, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pl_bells_rung, 1, memory_order_relaxed);
    static const uint64_t zero = 0;
    ssize_t n;
    do { n = write(ring->ringer, &zero, sizeof zero); } while (n < 0 && errno == EINTR);
}

static void pl_close_quietly(int fd) {
    if (fd < 0) return;
    int saved = errno;
    close(fd);
    errno = saved;
}

/* Whether `fd` is an eventfd, as the kernel names it in /proc. A ringer is only written to, with zeros; written
 * to, another kind of file could wait (a pipe, a FIFO on a file system the peer serves) or change something with
 * this process's credentials. Without /proc nothing can be checked, and the socket serves on. */
typedef enum { PL_IS_EVENTFD, PL_IS_OTHER, PL_CANNOT_TELL } pl_eventfd_kind_t;

static pl_eventfd_kind_t pl_eventfd_kind(int fd) {
    static const char eventfd_name[] = "anon_inode:[eventfd]";
    char path[32], name[sizeof eventfd_name + 1];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t length = readlink(path, name, sizeof name);
    if (length < 0) return errno == EBADF ? PL_IS_OTHER : PL_CANNOT_TELL;
    return (size_t)length == sizeof eventfd_name - 1 && memcmp(name, eventfd_name, (size_t)length) == 0 ? PL_IS_EVENTFD
                                                                                                        : PL_IS_OTHER;
}

/* This side's bell (*bell), and a duplicate of it for the peer to ring it through (*to_send). */
static bool pl_bell_make(int *bell, int *to_send) {
    int fd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return false;
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
        pl_close_quietly(fd);
        return false;
    }
    *bell = fd;
    *to_send = copy;
    return true;
}

static pl_ring_t *pl_ring_new(uint8_t *map, bool client, int bell) {
    pl_ring_t *ring = calloc(1, sizeof *ring);
    if (ring == NULL) return NULL;
    ring->out_streaming = true; /* until the reader's distance is known */
    pl_ring_shared_t *shared = (pl_ring_shared_t *)map;
    uint8_t *data0 = map + PL_RING_HEADER_BYTES, *data1 = data0 + PL_RING_BYTES;
    ring->map = map;
    ring->out = &shared->side[client ? 0 : 1];
    ring->in = &shared->side[client ? 1 : 0];
    ring->out_data = client ? data0 : data1;
    ring->in_data = client ? data1 : data0;
    ring->out_reach = PL_RING_BYTES;
    ring->bell = bell;
    ring->ringer = -1;
    return ring;
}


pl_status_t pl_ring_create(pl_ring_t **out, int *out_memfd, int *out_ringer) {
    *out = NULL;
    *out_memfd = *out_ringer = -1;
    pl_status_t status = PL_OK;
    uint8_t *map = MAP_FAILED;
    int bell = -1, ringer = -1;
    int fd = memfd_create("portloop-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        status = pl_system_failure("memfd_create");
    } else if (ftruncate(fd, PL_RING_MAP_BYTES) != 0) {
        status = pl_system_failure("ftruncate(memfd)");
    } else if (fcntl(fd, F_ADD_SEALS, PL_RING_SEALS) != 0) {
        status = pl_system_failure("fcntl(F_ADD_SEALS)");
    } else if ((map = mmap(NULL, PL_RING_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        status = pl_system_failure("mmap(ring)");
    } else if (!pl_bell_make(&bell, &ringer)) {
        status = pl_system_failure("eventfd(bell)");
    } else if (pl_eventfd_kind(bell) != PL_IS_EVENTFD) {
        status = pl_system_failure("readlink(/proc/self/fd)"); /* the service's bell could not be checked */
    }
    pl_ring_t *ring = NULL;
    if (status == PL_OK) {
        /* A child of fork() does not get the mapping: it could not use the connection, and must not write into it. */
        madvise(map, PL_RING_MAP_BYTES, MADV_DONTFORK);
        pl_ring_shared_t *shared = (pl_ring_shared_t *)map;
        shared->magic = PL_RING_MAGIC;
        shared->layout = PL_RING_LAYOUT;
        shared->ring_bytes = PL_RING_BYTES;
        ring = pl_ring_new(map, true, bell);
        if (ring == NULL) status = PL_ERR_NO_MEMORY;
    }
    if (status != PL_OK) {
        if (map != MAP_FAILED) munmap(map, PL_RING_MAP_BYTES);
        pl_close_quietly(bell);
        pl_close_quietly(ringer);
        pl_close_quietly(fd);
        return status;
    }
    *out = ring;
    *out_memfd = fd;
    *out_ringer = ringer;
    return PL_OK;
}

pl_ring_t *pl_ring_adopt(int memfd, int *out_ringer, bool *peer_fault, const char **reason) {
    *out_ringer = -1;
    *peer_fault = true;
    /* Without the shrink seal the peer could truncate the file under our mapping, and reading it would kill this
     * process with SIGBUS. F_GET_SEALS works only on memory files. */
    int seals = fcntl(memfd, F_GET_SEALS);
    struct stat st;
    if (seals < 0) {
        *reason = "ring: the offered descriptor is not a memfd";
        return NULL;
    }
    if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        *reason = "ring: the offered memfd is not sealed against shrinking and growing";
        return NULL;
    }
    if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
        *reason = "ring: the offered memfd is sealed against writing";
        return NULL;
    }
    if (fstat(memfd, &st) != 0 || st.st_size != (off_t)PL_RING_MAP_BYTES) {
        *reason = "ring: the offered memfd is not the ring's size";
        return NULL;
    }
    *peer_fault = false;
    uint8_t *map = mmap(NULL, PL_RING_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (map == MAP_FAILED) {
        *reason = "ring: no address space to map it";
        return NULL;
    }
    madvise(map, PL_RING_MAP_BYTES, MADV_DONTFORK);
    pl_ring_shared_t *shared = (pl_ring_shared_t *)map;
    if (shared->magic != PL_RING_MAGIC || shared->layout != PL_RING_LAYOUT || shared->ring_bytes != PL_RING_BYTES) {
        munmap(map, PL_RING_MAP_BYTES);
        *peer_fault = true;
        *reason = "ring: the offered memfd does not hold a ring of this layout";
        return NULL;
    }
    int bell = -1, ringer = -1;
    pl_ring_t *ring = pl_bell_make(&bell, &ringer) ? pl_ring_new(map, false, bell) : NULL;
    if (ring == NULL) {
        munmap(map, PL_RING_MAP_BYTES);
        pl_close_quietly(bell);
        pl_close_quietly(ringer);
        *reason = "ring: no descriptor or memory for it";
        return NULL;
    }
    *out_ringer = ringer;
    return ring;
}

bool pl_ring_take_ringer(pl_ring_t *ring, int fd, bool *peer_fault, const char **reason) {
    *peer_fault = true;
    if (ring->ringer >= 0) {
        *reason = "ring: a second bell";
        return false;
    }
    switch (pl_eventfd_kind(fd)) {
    case PL_IS_EVENTFD: break;
    case PL_IS_OTHER:
        *reason = "ring: the peer's bell is not an eventfd";
        return false;
    case PL_CANNOT_TELL:
        *peer_fault = false;
        *reason = "ring: /proc cannot say what the peer's bell is";
        return false;
    }
    ring->ringer = fd;
    return true;
}

int pl_ring_bell(const pl_ring_t *ring) { return ring->bell; }

uint64_t pl_ring_rung(pl_ring_t *ring) { return atomic_load_explicit(&ring->rung, memory_order_relaxed); }

void pl_ring_free(pl_ring_t *ring) {
    if (ring == NULL) return;
    munmap(ring->map, PL_RING_MAP_BYTES);
    pl_close_quietly(ring->bell);
    pl_close_quietly(ring->ringer);
    free(ring);
}

void pl_ring_forget_in_child(pl_ring_t *ring) {
    if (ring == NULL) return;
    pl_close_quietly(ring->bell);
    pl_close_quietly(ring->ringer);
    ring->bell = ring->ringer = -1;
}

/* ---- writing ---------------------------------------------------------------------------------------- */

void pl_ring_set_reach(pl_ring_t *ring, uint32_t bytes) {
    bytes &= ~7u;
    if (bytes < PL_RING_LEAST_REACH) bytes = PL_RING_LEAST_REACH;
    ring->out_reach = bytes < PL_RING_BYTES ? bytes : PL_RING_BYTES;
}

uint32_t pl_ring_reach(const pl_ring_t *ring) { return ring->out_reach; }

void pl_ring_note_distance(pl_ring_t *ring, int64_t took) {
    ring->out_distance_ns[ring->out_distance_next] = took < 0 ? 0 : took > UINT32_MAX ? UINT32_MAX : (uint32_t)took;
    ring->out_distance_next = (uint8_t)((ring->out_distance_next + 1) % PL_RING_DISTANCE_SAMPLES);
    if (ring->out_distance_count < PL_RING_DISTANCE_SAMPLES) ring->out_distance_count++;
    if (ring->out_distance_count < PL_RING_DISTANCE_SAMPLES) return;
    uint32_t sorted[PL_RING_DISTANCE_SAMPLES]; /* the window keeps its order: it is circular */
    memcpy(sorted, ring->out_distance_ns, sizeof sorted);
    ring->out_streaming = pl_median_u32(sorted, PL_RING_DISTANCE_SAMPLES) > PL_RING_FAR_NS;
}

bool pl_ring_streams(const pl_ring_t *ring) { return ring->out_streaming; }

/* Room for `bytes` more, rereading the reader's head when the last one read leaves too little, and asking to be
 * told of room when there is none; the first reread is timed (pl_ring_note_distance). -1: the head is out of bounds. */
static int pl_ring_room(pl_ring_t *ring, uint32_t bytes) {
    if (PL_RING_BYTES - (ring->out_tail - ring->out_head_seen) >= bytes) return 1;
    for (int asked = 0; asked < 2; asked++) {
        int64_t before = asked ? 0 : pl_now_ns();
        uint32_t head = atomic_load_explicit(&ring->out->head, asked ? memory_order_seq_cst : memory_order_acquire);
        if (!asked && head != ring->out_head_seen) pl_ring_note_distance(ring, pl_now_ns() - before);
        uint32_t used = ring->out_tail - head;
        if (used > PL_RING_BYTES || (used & 7u) != 0) return -1; /* taken more than was put, or misaligned */
        ring->out_head_seen = head;
        if (PL_RING_BYTES - used >= bytes) return 1;
        if (!asked) atomic_store_explicit(&ring->out->writer_waiting, 1, memory_order_seq_cst);
    }
    return 0;
}

/* A record's parts from 256 bytes on go in with streaming stores while the reader is far (pl_ring_note_distance).
 * An ordinary store must first take back the line, which the reader read a lap ago: when the reader's core is near
 * (they share a cache) that is cheap and the reader then finds the record in that cache, and streaming would cost a
 * stream of 4 KiB messages about a tenth; when it is far (another chiplet or socket, as the host may decide and
 * change at any moment) it cost such a stream a third of its speed, or three quarters. Neither side's copy times
 * tell the two apart (between processes both ways cost the writer about as much), the time a line takes to come from
 * the reader does. */
static void pl_ring_write_header(uint8_t *at, uint32_t length, uint16_t kind) {
    uint8_t header[PL_RING_RECORD_HEADER] = {
        (uint8_t)length, (uint8_t)(length >> 8), (uint8_t)(length >> 16), (uint8_t)(length >> 24),
        (uint8_t)kind, (uint8_t)(kind >> 8), 0, 0,
    };
    memcpy(at, header, sizeof header);
}

static pl_ring_put_result_t pl_ring_put_record(pl_ring_t *ring, const uint8_t *head, size_t head_length,
                                               const uint8_t *body, size_t body_length, bool mark, bool quiet) {
    uint32_t length = mark ? 0 : (uint32_t)(head_length + body_length);
    uint32_t need = PL_RING_RECORD_HEADER + pl_align8(length);
    uint32_t at = ring->out_tail % PL_RING_BYTES;
    uint32_t to_end = PL_RING_BYTES - at;
    /* Where this record must end: before the room a pad's header needs at the reach, or at the ring's end. A writer
     * whose reach was shortened to where it stands or behind wraps at once. */
    uint32_t end = ring->out_reach < PL_RING_BYTES ? ring->out_reach - PL_RING_RECORD_HEADER : PL_RING_BYTES;
    if (at > end) end = at;
    bool padded = false;
    if (need > end - at) {
        /* Too little left before the end, or the reach: pad to the end (the bytes past the reach are not touched),
         * and go on at the start. */
        int room = pl_ring_room(ring, to_end);
        if (room <= 0) return room < 0 ? PL_RING_CORRUPT : PL_RING_FULL;
        pl_ring_write_header(ring->out_data + at, to_end - PL_RING_RECORD_HEADER, PL_RECORD_PAD);
        ring->out_tail += to_end;
        at = 0;
        padded = true;
    }
    int room = pl_ring_room(ring, need);
    if (room < 0) return PL_RING_CORRUPT;
    if (room > 0) {
        uint8_t *record = ring->out_data + at;
        pl_ring_write_header(record, length, mark ? PL_RECORD_MARK : PL_RECORD_PACKET);
        uint8_t *bytes = record + PL_RING_RECORD_HEADER;
        if (head_length > 0 && !mark) pl_copy_with(bytes, head, head_length, ring->out_streaming);
        if (body_length > 0 && !mark) pl_copy_with(bytes + head_length, body, body_length, ring->out_streaming);
        ring->out_tail += need;
    }
    /* Published with the pad, if only the pad went in (the reader skips it meanwhile). */
    atomic_store_explicit(&ring->out->tail, ring->out_tail, memory_order_seq_cst);
    /* A pad alone rings too: the largest record, padding from the ring's middle, fits only once the reader has
     * taken the pad, and a reader that had armed would sleep on while this side waited for its room. A quiet
     * mark's packet wakes the reader from the socket, and the reader can go no further than the mark before that
     * packet anyway: the arm stays for the next record. */
    bool rings = !quiet || padded || room == 0;
    if (rings && atomic_load_explicit(&ring->out->reader_armed, memory_order_seq_cst) != 0 &&
        atomic_exchange_explicit(&ring->out->reader_armed, 0, memory_order_seq_cst) != 0) {
        pl_ring_bell_ring(ring);
    }
    return room == 0 ? PL_RING_FULL : PL_RING_PUT;
}

pl_ring_put_result_t pl_ring_put(pl_ring_t *ring, const uint8_t *head, size_t head_length, const uint8_t *body,
                                 size_t body_length, bool mark) {
    return pl_ring_put_record(ring, head, head_length, body, body_length, mark, false);
}

pl_ring_put_result_t pl_ring_put_mark_for_socket(pl_ring_t *ring) {
    return pl_ring_put_record(ring, NULL, 0, NULL, 0, true, true);
}

/* ---- reading ---------------------------------------------------------------------------------------- */

/* Gives the room of the records taken so far back to the writer, and rings its bell if it waits for room. The
 * head's store is sequentially consistent, the half of a Dekker pair with writer_waiting: the writer that asks to be
 * rung looks at the head again after it asked. */
static void pl_ring_give_back(pl_ring_t *ring) {
    if (ring->in_head != ring->in_head_shared) {
        atomic_store_explicit(&ring->in->head, ring->in_head, memory_order_seq_cst);
        ring->in_head_shared = ring->in_head;
    }
    if (atomic_load_explicit(&ring->in->writer_waiting, memory_order_seq_cst) != 0 &&
        atomic_exchange_explicit(&ring->in->writer_waiting, 0, memory_order_seq_cst) != 0) {
        pl_ring_bell_ring(ring);
    }
}

pl_ring_take_result_t pl_ring_take_shared(pl_ring_t *ring, const uint8_t **shared, size_t *out_length,
                                          const char **reason) {
    /* A long pass gives room back on the way, not only at its end: the room of the records taken before this one,
     * which their reader is done with. A writer that waits for it is rung then, so that it fills the ring again
     * while this side reads on, rather than after the whole pass. */
    if (ring->in_head - ring->in_head_shared >= PL_RING_GIVE_BACK_BYTES) pl_ring_give_back(ring);
    /* A load of the writer's tail for every record would pull its cache line over for each message, and make the
     * writer's next store pull it back: what one load said is taken first, and the tail is loaded again only then
     * (or when only pads were left of it). */
    for (bool fresh = ring->in_tail_seen == ring->in_head;; fresh = true) {
        if (fresh) ring->in_tail_seen = atomic_load_explicit(&ring->in->tail, memory_order_acquire);
        uint32_t waiting = ring->in_tail_seen - ring->in_head;
        if (waiting > PL_RING_BYTES || (waiting & 7u) != 0) {
            *reason = "ring: the writer's index is out of bounds";
            return PL_RING_BROKEN;
        }
        /* Each pass takes a pad or a record, so `waiting` shrinks every time round: a ring of pads ends too. */
        while (waiting > 0) {
            uint32_t at = ring->in_head % PL_RING_BYTES;
            uint32_t to_end = PL_RING_BYTES - at;
            uint8_t h[PL_RING_RECORD_HEADER];
            memcpy(h, ring->in_data + at, sizeof h); /* read once: the peer may change it under us */
            uint32_t length = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
            uint16_t kind = (uint16_t)(h[4] | h[5] << 8);
            if (h[6] != 0 || h[7] != 0) {
                *reason = "ring: a record's reserved bytes are not zero";
                return PL_RING_BROKEN;
            }
            if (kind == PL_RECORD_PAD) {
                if (length != to_end - PL_RING_RECORD_HEADER || to_end > waiting) {
                    *reason = "ring: a pad that does not end at the ring's end";
                    return PL_RING_BROKEN;
                }
                ring->in_head += to_end;
                waiting -= to_end;
                continue;
            }
            if (length > PL_WIRE_MAX_FRAME) {
                *reason = "ring: a record over the largest packet";
                return PL_RING_BROKEN;
            }
            uint32_t need = PL_RING_RECORD_HEADER + pl_align8(length);
            if (need > to_end || need > waiting) {
                *reason = "ring: a record runs past the ring's end or the writer's index";
                return PL_RING_BROKEN;
            }
            if (kind == PL_RECORD_MARK) {
                if (length != 0) {
                    *reason = "ring: a mark with bytes";
                    return PL_RING_BROKEN;
                }
            } else if (kind != PL_RECORD_PACKET || length < PL_WIRE_HEADER_SIZE) {
                *reason = kind != PL_RECORD_PACKET ? "ring: a record of no known kind"
                                                   : "ring: a packet shorter than a frame";
                return PL_RING_BROKEN;
            } else {
                *shared = ring->in_data + at + PL_RING_RECORD_HEADER;
                *out_length = length;
            }
            ring->in_head += need; /* given back at the next take, or by pl_ring_done_reading */
            return kind == PL_RECORD_MARK ? PL_RING_MARK : PL_RING_PACKET;
        }
        if (fresh) return PL_RING_EMPTY;
    }
}

pl_ring_take_result_t pl_ring_take(pl_ring_t *ring, uint8_t *out, size_t *out_length, const char **reason) {
    const uint8_t *shared = NULL;
    pl_ring_take_result_t took = pl_ring_take_shared(ring, &shared, out_length, reason);
    if (took == PL_RING_PACKET) memcpy(out, shared, *out_length); /* decoded from our copy only */
    return took;
}

void pl_ring_done_reading(pl_ring_t *ring) { pl_ring_give_back(ring); }

bool pl_ring_arm(pl_ring_t *ring) {
    atomic_store_explicit(&ring->in->reader_armed, 1, memory_order_seq_cst);
    return atomic_load_explicit(&ring->in->tail, memory_order_seq_cst) != ring->in_head;
}

void pl_ring_disarm(pl_ring_t *ring) {
    /* Looked at first: a lookout calls this on every turn, and a store would take the line from the writer each time. */
    if (atomic_load_explicit(&ring->in->reader_armed, memory_order_relaxed) != 0) {
        atomic_store_explicit(&ring->in->reader_armed, 0, memory_order_seq_cst);
    }
}

uint32_t pl_ring_pending_bytes(pl_ring_t *ring) {
    uint32_t waiting = atomic_load_explicit(&ring->in->tail, memory_order_relaxed) - ring->in_head;
    return waiting > PL_RING_BYTES ? 0 : waiting;
}
