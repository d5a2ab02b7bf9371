/*
 * pl_payload_cache.c — payload memory kept for reuse.
 *
 * A message's payload larger than its slot holds lives in memory of its own, allocated by the thread that queues
 * the message and freed by whoever receives it, often on another thread. Two patterns made glibc slow at this:
 *  - Large payloads (a message put together from frames, a large local payload, a 64 KiB outgoing frame): glibc
 *    serves them with fresh pages, mmap and munmap from 128 KiB up, and below that (or once its threshold has
 *    grown) a heap top that it trims back on the next free. Every byte then began with a page fault and a zeroed
 *    page, which cost about as much as copying it.
 *  - A burst of smaller ones (a reader that empties a ring of 4 KiB messages into a port queues some sixty at
 *    once, and the loop frees them one by one): the heap grows by the burst, the frees give back more than
 *    glibc's trim threshold, and it trims the heap to grow it again, faulting its pages in, for the next burst.
 * So freed buffers are kept here and handed out again: large ones for a size between half their capacity and
 * their capacity; small ones (below PL_PAYLOAD_CACHE_MIN) by power-of-two class, and allocated at the class's size,
 * so that one buffer serves every size of its class.
 *
 * Bounded: PL_PAYLOAD_CACHE_ENTRIES large buffers and PL_PAYLOAD_CACHE_BYTES in all; PL_PAYLOAD_CACHE_SMALL_ENTRIES
 * small ones per class and PL_PAYLOAD_CACHE_SMALL_BYTES in all. The lock is only ever tried: a thread that finds it
 * taken allocates or frees as if there were no cache, so nothing waits for it, and a child of fork() that
 * inherited it taken simply does without.
 */
#include "pl_internal.h"

#include <malloc.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct pl_payload_cache_entry {
    void *bytes;
    size_t capacity;
} pl_payload_cache_entry_t;

static struct {
    atomic_flag busy;
    uint32_t count;
    size_t bytes;
    pl_payload_cache_entry_t entries[PL_PAYLOAD_CACHE_ENTRIES];
    uint32_t small_count[PL_PAYLOAD_CACHE_SMALL_CLASSES];
    size_t small_bytes;
    pl_payload_cache_entry_t small[PL_PAYLOAD_CACHE_SMALL_CLASSES][PL_PAYLOAD_CACHE_SMALL_ENTRIES];
} C = { .busy = ATOMIC_FLAG_INIT };

static bool pl_payload_cache_try_lock(void) {
    return !atomic_flag_test_and_set_explicit(&C.busy, memory_order_acquire);
}

static void pl_payload_cache_unlock(void) { atomic_flag_clear_explicit(&C.busy, memory_order_release); }

/* The class whose buffers hold `size` bytes: the smallest power of two at or above it (sizes up to 64 bytes are
 * class 0). */
static uint32_t pl_small_class_for(size_t size) {
    uint32_t shift = PL_PAYLOAD_CACHE_SMALL_SHIFT;
    while (((size_t)1 << shift) < size) shift++;
    return shift - PL_PAYLOAD_CACHE_SMALL_SHIFT;
}

static void *pl_payload_cache_take_small(size_t size) {
    uint32_t class = pl_small_class_for(size);
    if (class >= PL_PAYLOAD_CACHE_SMALL_CLASSES) return malloc(size); /* between the largest class and the large */
    void *bytes = NULL;
    if (pl_payload_cache_try_lock()) {
        if (C.small_count[class] > 0) {
            pl_payload_cache_entry_t entry = C.small[class][--C.small_count[class]];
            bytes = entry.bytes;
            C.small_bytes -= entry.capacity;
        }
        pl_payload_cache_unlock();
    }
    return bytes != NULL ? bytes : malloc((size_t)1 << (class + PL_PAYLOAD_CACHE_SMALL_SHIFT));
}

/* Keeps a buffer of `capacity` bytes (below PL_PAYLOAD_CACHE_MIN) in the class it can serve whole: the largest
 * power of two at or below its capacity, so less than twice the class's size (a buffer of 32 to 64 KiB goes to the
 * top class, 32 KiB). Its whole capacity counts against the bound. false: not kept (the lock is held by someone
 * else, or no room). */
static bool pl_payload_cache_give_small(void *bytes, size_t capacity) {
    if (capacity < ((size_t)1 << PL_PAYLOAD_CACHE_SMALL_SHIFT)) return false;
    uint32_t class = 0;
    while (class + 1 < PL_PAYLOAD_CACHE_SMALL_CLASSES &&
           ((size_t)1 << (class + 1 + PL_PAYLOAD_CACHE_SMALL_SHIFT)) <= capacity) {
        class++;
    }
    if (!pl_payload_cache_try_lock()) return false;
    bool kept = C.small_count[class] < PL_PAYLOAD_CACHE_SMALL_ENTRIES &&
                C.small_bytes + capacity <= PL_PAYLOAD_CACHE_SMALL_BYTES;
    if (kept) {
        C.small[class][C.small_count[class]++] = (pl_payload_cache_entry_t){ .bytes = bytes, .capacity = capacity };
        C.small_bytes += capacity;
    }
    pl_payload_cache_unlock();
    return kept;
}

void *pl_payload_cache_take(size_t size) {
    if (size < PL_PAYLOAD_CACHE_MIN) return pl_payload_cache_take_small(size);
    if (!pl_payload_cache_try_lock()) return malloc(size);
    uint32_t best = C.count;
    for (uint32_t i = 0; i < C.count; i++) {
        size_t capacity = C.entries[i].capacity;
        if (capacity >= size && capacity / 2 <= size && (best == C.count || capacity < C.entries[best].capacity)) {
            best = i;
        }
    }
    void *bytes = NULL;
    if (best < C.count) {
        bytes = C.entries[best].bytes;
        C.bytes -= C.entries[best].capacity;
        C.entries[best] = C.entries[--C.count];
    }
    pl_payload_cache_unlock();
    return bytes != NULL ? bytes : malloc(size);
}

void pl_payload_cache_give(void *bytes) {
    if (bytes == NULL) return;
    size_t capacity = malloc_usable_size(bytes);
    if (capacity < PL_PAYLOAD_CACHE_MIN) {
        if (!pl_payload_cache_give_small(bytes, capacity)) free(bytes);
        return;
    }
    if (capacity <= PL_PAYLOAD_CACHE_BYTES && pl_payload_cache_try_lock()) {
        bool kept = C.count < PL_PAYLOAD_CACHE_ENTRIES && C.bytes + capacity <= PL_PAYLOAD_CACHE_BYTES;
        if (kept) {
            C.entries[C.count++] = (pl_payload_cache_entry_t){ .bytes = bytes, .capacity = capacity };
            C.bytes += capacity;
        }
        pl_payload_cache_unlock();
        if (kept) return;
    }
    free(bytes);
}

/* For the tests' counts only: waits (yielding) for the lock that everyone else only tries. false: it stayed taken
 * for a long while. */
static bool pl_payload_cache_lock_for_counting(void) {
    for (int attempt = 0; attempt < 1000000; attempt++) {
        if (pl_payload_cache_try_lock()) return true;
        sched_yield();
    }
    return false;
}

bool pl_payload_cache_held(uint32_t *count, size_t *bytes) {
    if (!pl_payload_cache_lock_for_counting()) return false;
    *count = C.count;
    *bytes = C.bytes;
    pl_payload_cache_unlock();
    return true;
}

bool pl_payload_cache_small_held(uint32_t class, uint32_t *count, size_t *bytes) {
    if (class >= PL_PAYLOAD_CACHE_SMALL_CLASSES || !pl_payload_cache_lock_for_counting()) return false;
    *count = C.small_count[class];
    *bytes = C.small_bytes;
    pl_payload_cache_unlock();
    return true;
}
