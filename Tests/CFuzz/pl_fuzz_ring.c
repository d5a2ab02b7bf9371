/*
 * pl_fuzz_ring.c — a fuzz harness for a connection's shared-memory rings against a hostile peer (libFuzzer).
 *
 * Each input makes the two sides of a ring as a connection does: the client's (pl_ring_create) and the service's
 * (pl_ring_adopt on the same memfd), each ringing the other through the bell the other made (a connection
 * sends it), plus a third mapping of the memfd: the memory as a hostile service sees it, plain bytes. The input is
 * a sequence of operations:
 *
 *   input := op*
 *   op    := code:u8 args
 *
 * code bits 0-6 (% 8) say what is done, bit 7 by which side (0 the client, 1 the service) for put, take, done,
 * arm, block and disarm:
 *
 *   0 poke  region:u8 offset:u24le n:u8 bytes[n]  the fuzzer writes bytes into the memory: region % 3 is the header
 *                                                 page, the client's incoming records or the service's
 *   1 add   word:u8 delta:u32le                   the fuzzer adds delta to the 32-bit word at 4 × word of the
 *                                                 header page (an index moved by a few records, say)
 *   2 put   flags:u8 length:u16le split:u8        the side puts a packet of 8 + length % 65529 bytes, filled
 *                                                 from its sequence number and passed as head and body cut at
 *                                                 split / 255 of it, or with flags bit 0 a mark (given the same
 *                                                 bytes, which it ignores); flags bit 1 sets the side's reach
 *                                                 near first (where a connection's writer wraps), bit 2 to the
 *                                                 whole ring, both to the least a writer may have
 *   3 take  count:u8                              the side takes count records, or with 0 until it gets EMPTY
 *   4 done                                        pl_ring_done_reading
 *   5 arm                                         pl_ring_arm, the rings of its bell so far forgotten just before
 *   6 block                                       the side's bell (its description, which the peer shares)
 *                                                 made blocking, or nonblocking again: the peer can, and it
 *                                                 changes nothing
 *   7 disarm                                      pl_ring_disarm: the side looks at its ring (a polling loop)
 *
 * A bell is never read here, as in a connection: a ring writes zero to the peer's eventfd, and the rings of a side's
 * bell are its peer's count of them (pl_ring_rung). A poke or add that changes a byte is the hostile peer at work;
 * until the first, both sides keep the rules, and a model of each direction (what was put and not yet taken)
 * holds the results to the exact ones. Checked, aborting on a violation:
 *   - take gives a packet only of 8 to PL_WIRE_MAX_FRAME bytes, BROKEN only with a reason; a side that got
 *     BROKEN or CORRUPT is not used again (its connection would end there);
 *   - a side's takes that find something, in a row with nothing written into the memory meanwhile by anyone else,
 *     number at most PL_RING_BYTES / 8 (a record takes 8 bytes at least): a take cannot loop;
 *   - before any hostile change: every record comes out as it went in, in order, and EMPTY only when none waits;
 *     puts are never CORRUPT, takes never BROKEN; a writer writes nothing past the farthest reach it has put
 *     with; a reader that armed and then finds bytes waiting had its bell rung; a reader that disarmed, until it
 *     arms again, has its bell rung by no put; a writer that got FULL has its bell rung by the reader's next done,
 *     or before it by a take that gave room back;
 *   - always: an arm rings nothing, whether the side's bell's description blocks or not; no operation blocks (a 10 s timer per input aborts, rather than libFuzzer's
 *     timeout after 20 minutes).
 * Out-of-bounds accesses are AddressSanitizer's; everything is freed at the end of each input (LeakSanitizer).
 *
 * The seeds in ring-corpus/ are written by make_ring_seeds.py (which knows the shared header's layout, for the
 * hostile ones). PL_FUZZ_TRACE=1 prints each operation and what it gave.
 */
#define _GNU_SOURCE /* memfd */
#include "pl_ring.h"

#include <fcntl.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_RECORDS (PL_RING_BYTES / PL_RING_RECORD_HEADER) /* the most a ring holds: marks only */
#define LEAST_REACH (PL_WIRE_MAX_FRAME + 2 * PL_RING_RECORD_HEADER) /* a record, and a pad's header after it */

static void fail(const char *what, int line) {
    fprintf(stderr, "pl_fuzz_ring: check failed at line %d: %s\n", line, what);
    abort();
}
#define CHECK(cond) do { if (!(cond)) fail(#cond, __LINE__); } while (0)

/* One direction's records put and not taken, by sequence number: a record's bytes follow from it. */
typedef struct {
    uint32_t seq[MAX_RECORDS], length[MAX_RECORDS]; /* length UINT32_MAX: a mark */
    uint32_t first, count;
    uint32_t bytes;                                  /* the records' room in the ring, headers included */
} model_t;

typedef struct {
    pl_ring_t *ring;
    bool broken;           /* got BROKEN or CORRUPT: not used again */
    uint32_t next_seq;     /* of this side's next put */
    uint32_t streak;       /* takes that found something since anyone else last wrote */
    bool idle;             /* armed, found nothing, not taken since */
    bool looking;          /* disarmed, not armed since: the peer's puts ring no bell */
    bool full;             /* a put got FULL: the peer's next done rings this side's bell, unless a take of the
                            * peer's that gave room back rang it first */
    uint64_t banked;       /* rings counted off this side's bell since it armed (rings for room as well) */
    uint64_t bell_seen;    /* its bell's rings when last counted */
    uint32_t reach_most;   /* the farthest reach its writer has put with: nothing is written past it */
    model_t in;            /* the records the other side put for this one */
} side_t;

static uint8_t pattern[2 * PL_WIRE_MAX_FRAME];
static uint8_t taken[PL_WIRE_MAX_FRAME];
static side_t sides[2];

/* The bytes of record `seq`: a window on the pattern, a different one for each of 65,536 sequence numbers. */
static const uint8_t *content(uint32_t seq) { return pattern + (seq * 7919u) % PL_WIRE_MAX_FRAME; }

static uint32_t record_bytes(uint32_t length) {
    return PL_RING_RECORD_HEADER + (length == UINT32_MAX ? 0 : (length + 7u) & ~7u);
}

/* The rings of a side's bell so far: the other side's count of them. */
static uint64_t bell_bytes(side_t *side) { return pl_ring_rung(sides[side == &sides[0]].ring); }

/* The rings of a side's bell since it was last counted. */
static uint64_t bell_read(side_t *side) {
    uint64_t now = bell_bytes(side);
    uint64_t rings = now - side->bell_seen;
    side->bell_seen = now;
    return rings;
}

/* A ring or an emptying that blocks would hang the input: this timer, armed for each, aborts it instead (a signal
 * of its own: libFuzzer's -timeout has SIGALRM). */
static void on_stuck(int sig) {
    (void)sig;
    static const char message[] = "pl_fuzz_ring: an operation blocked for 10 s\n";
    ssize_t written = write(STDERR_FILENO, message, sizeof message - 1);
    (void)written;
    abort();
}

static void watchdog(bool on) {
    static timer_t timer;
    static bool made;
    if (!made) {
        struct sigaction action = { .sa_handler = on_stuck };
        sigemptyset(&action.sa_mask);
        struct sigevent event = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGRTMIN + 3 };
        if (sigaction(SIGRTMIN + 3, &action, NULL) != 0 || timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) {
            fail("the watchdog timer", __LINE__);
        }
        made = true;
    }
    struct itimerspec when = { .it_value = { .tv_sec = on ? 10 : 0 } };
    timer_settime(timer, 0, &when, NULL);
}

/* A little-endian field of `n` bytes, or false at the input's end. */
static bool field(const uint8_t *data, size_t size, size_t *at, size_t n, uint32_t *out) {
    if (size - *at < n) return false;
    *out = 0;
    for (size_t i = 0; i < n; i++) *out |= (uint32_t)data[*at + i] << (8 * i);
    *at += n;
    return true;
}

static void put(side_t *writer, side_t *reader, bool hostile, uint32_t flags, uint32_t length, uint32_t split,
                bool trace) {
    bool mark = flags & 1;
    if (flags & 6) { /* the writer's reach first: near, the whole ring, or (both bits) the least there is */
        uint32_t reach = (flags & 6) == 6 ? LEAST_REACH : flags & 4 ? PL_RING_BYTES : PL_RING_NEAR_BYTES;
        pl_ring_set_reach(writer->ring, (flags & 6) == 6 ? 0 : reach);
        CHECK(pl_ring_reach(writer->ring) == reach);
    }
    if (pl_ring_reach(writer->ring) > writer->reach_most) writer->reach_most = pl_ring_reach(writer->ring);
    length = PL_WIRE_HEADER_SIZE + length % (PL_WIRE_MAX_FRAME - PL_WIRE_HEADER_SIZE + 1);
    size_t head_length = (size_t)length * split / 255;
    const uint8_t *bytes = content(writer->next_seq);
    uint64_t bell_before = bell_bytes(reader);
    pl_ring_put_result_t result = pl_ring_put(writer->ring, bytes, head_length, bytes + head_length,
                                              length - head_length, mark); /* a mark ignores the bytes */
    if (mark) length = UINT32_MAX;
    if (trace) fprintf(stderr, "  put %s %u: %s\n", mark ? "mark" : "packet", mark ? 0 : length,
                       result == PL_RING_PUT ? "put" : result == PL_RING_FULL ? "full" : "corrupt");
    reader->streak = 0; /* even FULL may have put a pad in */
    CHECK(hostile || !reader->looking || bell_bytes(reader) == bell_before);
    if (result == PL_RING_CORRUPT) {
        CHECK(hostile);
        writer->broken = true;
        return;
    }
    if (result == PL_RING_FULL) {
        writer->full = true;
        return;
    }
    uint32_t seq = writer->next_seq++;
    if (hostile) return; /* the model is over */
    model_t *m = &reader->in;
    CHECK(m->count < MAX_RECORDS); /* a ring holds no more */
    uint32_t slot = (m->first + m->count++) % MAX_RECORDS;
    m->seq[slot] = seq;
    m->length[slot] = length;
    m->bytes += record_bytes(length);
    CHECK(m->bytes <= PL_RING_BYTES);
}

/* One take; false when it gave EMPTY or BROKEN. */
static bool take(side_t *reader, bool hostile, bool trace) {
    if (reader->idle && !hostile && pl_ring_pending_bytes(reader->ring) > 0) {
        /* Bytes came after the reader armed and saw none: the writer rang (a pad counts: it leads to room). */
        CHECK(reader->banked + bell_read(reader) > 0);
    }
    reader->idle = false;
    size_t length = 0;
    const char *reason = NULL;
    pl_ring_take_result_t result = pl_ring_take(reader->ring, taken, &length, &reason);
    if (trace) fprintf(stderr, "  take: %s %s\n", result == PL_RING_EMPTY ? "empty" : result == PL_RING_PACKET
                       ? "packet" : result == PL_RING_MARK ? "mark" : "broken", result == PL_RING_BROKEN ? reason : "");
    model_t *m = &reader->in;
    if (result == PL_RING_EMPTY) {
        CHECK(hostile || m->count == 0);
        reader->streak = 0;
        return false;
    }
    if (result == PL_RING_BROKEN) {
        CHECK(reason != NULL);
        CHECK(hostile);
        reader->broken = true;
        return false;
    }
    CHECK(++reader->streak <= MAX_RECORDS);
    if (result == PL_RING_PACKET) CHECK(length >= PL_WIRE_HEADER_SIZE && length <= PL_WIRE_MAX_FRAME);
    else CHECK(result == PL_RING_MARK);
    if (!hostile) {
        CHECK(m->count > 0);
        uint32_t slot = m->first;
        if (result == PL_RING_MARK) {
            CHECK(m->length[slot] == UINT32_MAX);
        } else {
            CHECK(m->length[slot] == length);
            CHECK(memcmp(taken, content(m->seq[slot]), length) == 0);
        }
        m->bytes -= record_bytes(m->length[slot]);
        m->first = (m->first + 1) % MAX_RECORDS;
        m->count--;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i < sizeof pattern; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            pattern[i] = (uint8_t)(x >> 56);
        }
        ready = true;
    }
    bool trace = getenv("PL_FUZZ_TRACE") != NULL;
    watchdog(true);
    for (int i = 0; i < 2; i++) { /* the model's arrays are read only below its count */
        memset(&sides[i], 0, offsetof(side_t, in));
        sides[i].in.first = sides[i].in.count = sides[i].in.bytes = 0;
    }
    side_t *client = &sides[0], *service = &sides[1];
    int memfd, client_ringer, service_ringer;
    bool peer_fault;
    const char *reason;
    if (pl_ring_create(&client->ring, &memfd, &client_ringer) != PL_OK) fail("pl_ring_create", __LINE__);
    service->ring = pl_ring_adopt(memfd, &service_ringer, &peer_fault, &reason);
    if (service->ring == NULL) fail(reason, __LINE__);
    /* Each side rings the other through the bell the other made, as a connection sends it. */
    if (!pl_ring_take_ringer(client->ring, service_ringer, &peer_fault, &reason) ||
        !pl_ring_take_ringer(service->ring, client_ringer, &peer_fault, &reason)) {
        fail(reason, __LINE__);
    }
    uint8_t *view = mmap(NULL, PL_RING_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (view == MAP_FAILED) fail("mmap", __LINE__);
    close(memfd);
    /* The regions a poke writes into: the header page, then the client's incoming records (the service's outgoing:
     * the second ring), then the service's. */
    uint8_t *const regions[3] = { view, view + PL_RING_HEADER_BYTES + PL_RING_BYTES, view + PL_RING_HEADER_BYTES };
    const uint32_t region_bytes[3] = { PL_RING_HEADER_BYTES, PL_RING_BYTES, PL_RING_BYTES };

    bool hostile = false;
    size_t at = 0;
    uint32_t code, a, b, c, d;
    while (!(client->broken && service->broken) && field(data, size, &at, 1, &code)) {
        side_t *self = &sides[code >> 7], *peer = &sides[!(code >> 7)];
        switch ((code & 0x7f) % 8) {
        case 0: { /* poke */
            if (!field(data, size, &at, 1, &a) || !field(data, size, &at, 3, &b) || !field(data, size, &at, 1, &c))
                goto end;
            uint32_t region = a % 3, offset = b % region_bytes[a % 3];
            uint32_t n = c;
            if (n > size - at) n = (uint32_t)(size - at);
            if (n > region_bytes[region] - offset) n = region_bytes[region] - offset;
            if (memcmp(regions[region] + offset, data + at, n) != 0) hostile = true;
            memcpy(regions[region] + offset, data + at, n);
            at += c > size - at ? size - at : c;
            if (trace) fprintf(stderr, "poke %u bytes at %u of region %u%s\n", n, offset, region,
                               hostile ? " (hostile)" : "");
            client->streak = service->streak = 0;
            break;
        }
        case 1: { /* add */
            if (!field(data, size, &at, 1, &a) || !field(data, size, &at, 4, &b)) goto end;
            uint32_t word;
            memcpy(&word, view + 4 * a, sizeof word);
            word += b;
            memcpy(view + 4 * a, &word, sizeof word);
            if (b != 0) hostile = true;
            if (trace) fprintf(stderr, "add %d to the word at %u\n", (int32_t)b, 4 * a);
            client->streak = service->streak = 0;
            break;
        }
        case 2: /* put */
            if (!field(data, size, &at, 1, &a) || !field(data, size, &at, 2, &b) || !field(data, size, &at, 1, &c))
                goto end;
            if (trace) fprintf(stderr, "%s:\n", self == client ? "client" : "service");
            if (!self->broken) put(self, peer, hostile, a, b, c, trace);
            break;
        case 3: /* take */
            if (!field(data, size, &at, 1, &a)) goto end;
            if (trace) fprintf(stderr, "%s: take %u\n", self == client ? "client" : "service", a);
            /* Until EMPTY: a record at least each time, bounded by the streak check inside. */
            for (d = 0; !self->broken && (a == 0 || d < a); d++) {
                /* A take that gives the room of those before it back rings a writer that got FULL on the way. */
                if (peer->full) peer->banked += bell_read(peer);
                bool took = take(self, hostile, trace);
                if (peer->full && !peer->broken) {
                    uint64_t rung = bell_read(peer);
                    peer->banked += rung;
                    if (rung > 0) peer->full = false;
                }
                if (!took) break;
            }
            break;
        case 4: /* done */
            if (self->broken) break;
            if (peer->full) peer->banked += bell_read(peer);
            pl_ring_done_reading(self->ring);
            if (trace) fprintf(stderr, "%s: done\n", self == client ? "client" : "service");
            if (peer->full && !peer->broken) {
                uint64_t rung = bell_read(peer);
                CHECK(hostile || rung > 0);
                peer->banked += rung;
                peer->full = false;
            }
            break;
        case 5: { /* arm */
            if (self->broken) break;
            bell_read(self);
            self->banked = 0;
            d = pl_ring_arm(self->ring);
            /* Nothing rings meanwhile (one thread), and an arm rings nothing. */
            if (trace) fprintf(stderr, "%s: arm: %s\n", self == client ? "client" : "service",
                               d ? "more came" : "armed");
            CHECK(bell_bytes(self) == self->bell_seen);
            CHECK(hostile || d || self->in.count == 0);
            self->idle = !d;
            self->looking = false;
            break;
        }
        case 6: { /* block */
            if (self->broken) break;
            int fd = pl_ring_bell(self->ring), flags = fcntl(fd, F_GETFL);
            CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags ^ O_NONBLOCK) == 0);
            if (trace) fprintf(stderr, "%s: its bell %s\n", self == client ? "client" : "service",
                               flags & O_NONBLOCK ? "blocking" : "nonblocking");
            break;
        }
        case 7: /* disarm */
            if (self->broken) break;
            pl_ring_disarm(self->ring);
            if (trace) fprintf(stderr, "%s: disarm\n", self == client ? "client" : "service");
            self->idle = false;
            self->looking = true;
            break;
        }
        CHECK(pl_ring_pending_bytes(client->ring) <= PL_RING_BYTES);
        CHECK(pl_ring_pending_bytes(service->ring) <= PL_RING_BYTES);
        if (!hostile) {
            CHECK(pl_ring_pending_bytes(client->ring) >= client->in.bytes);
            CHECK(pl_ring_pending_bytes(service->ring) >= service->in.bytes);
        }
    }
end:;
    /* A writer that kept short of the ring's end never wrote past its reach: those bytes of its ring are as the
     * memfd began, zero. */
    static const uint8_t zeros[4096];
    for (int i = 0; i < 2 && !hostile; i++) {
        const uint8_t *out = regions[i == 0 ? 2 : 1];
        for (uint32_t b = sides[i].reach_most; b > 0 && b < PL_RING_BYTES; b += sizeof zeros) {
            CHECK(memcmp(out + b, zeros, sizeof zeros < PL_RING_BYTES - b ? sizeof zeros : PL_RING_BYTES - b) == 0);
        }
    }
    munmap(view, PL_RING_MAP_BYTES);
    pl_ring_free(client->ring);
    pl_ring_free(service->ring);
    watchdog(false);
    return 0;
}
