/*
 * pl_payload_cache.c — large payload memory kept for reuse.
 *
 * A message from another process that spans several frames is put together in memory of its own, which becomes
 * the message's payload and is freed by whoever receives it, often on another thread; a large local send copies
 * its payload into such memory too. glibc serves these sizes with fresh pages: mmap and munmap from 128 KiB up,
 * and below that (or once its threshold has grown) a heap top that it trims back on the next free. Every byte of
 * every large message then began with a page fault and a zeroed page, which cost about as much as copying it.
 * So a few freed buffers are kept here and handed out again for the next payload of about their size.
 *
 * Bounded: at most PL_PAYLOAD_CACHE_ENTRIES buffers and PL_PAYLOAD_CACHE_BYTES in all, each reused only for a
 * size between half its capacity and its capacity, so that a smaller payload never holds a larger buffer. The
 * lock is only ever tried: a thread that finds it taken allocates or frees as if there were no cache, so nothing
 * waits for it, and a child of fork() that inherited it taken simply does without.
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
} C = { .busy = ATOMIC_FLAG_INIT };

static bool pl_payload_cache_try_lock(void) {
    return !atomic_flag_test_and_set_explicit(&C.busy, memory_order_acquire);
}

static void pl_payload_cache_unlock(void) { atomic_flag_clear_explicit(&C.busy, memory_order_release); }

void *pl_payload_cache_take(size_t size) {
    if (size < PL_PAYLOAD_CACHE_MIN || !pl_payload_cache_try_lock()) return malloc(size);
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
    if (capacity >= PL_PAYLOAD_CACHE_MIN && capacity <= PL_PAYLOAD_CACHE_BYTES && pl_payload_cache_try_lock()) {
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

bool pl_payload_cache_held(uint32_t *count, size_t *bytes) {
    for (int attempt = 0; attempt < 1000000; attempt++) {
        if (pl_payload_cache_try_lock()) {
            *count = C.count;
            *bytes = C.bytes;
            pl_payload_cache_unlock();
            return true;
        }
        sched_yield();
    }
    return false;
}
