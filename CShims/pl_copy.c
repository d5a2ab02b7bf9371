/*
 * pl_copy.c — copies into memory that another core reads next: ordinary or streaming stores, whichever this
 * writer measures to be cheaper.
 *
 * A ring's record or a local message's payload is written by one core and read by another, and the lines it goes
 * into were last read by that other core (the ring laps, the payload cache hands the same buffers out again). An
 * ordinary store must first take each line back from the reader's cache. Between cores that share a cache that is
 * cheap, and the reader then finds the bytes in that shared cache. Between chiplets or sockets (where a host may
 * put a virtual machine's CPUs, and may move them at any time) it is not: a 4 KiB copy took its writer about 2 µs.
 * Streaming (non-temporal) stores write whole lines to memory without taking them, which is several times faster
 * there and two to three times slower between cores that share a cache. Which case holds is the host's business
 * and changes while a process runs, so a copier measures: it times some of its copies with the CPU's timestamp
 * counter, keeps each way's cost per KiB for each size class (the least of its last few timed copies, since being
 * interrupted only adds time), copies the cheaper way, and now and then tries the other way to see whether that
 * changed.
 *
 * A copier belongs to one writer at a time (a ring's writer, a thread): it is not synchronised.
 */
#include "pl_internal.h"

#include <string.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* The class of a copy of `length` bytes (at least PL_COPY_STREAM_MIN): by powers of four from 256 bytes. */
static uint32_t pl_copy_class_of(size_t length) {
    uint32_t class = 0;
    for (size_t bound = (size_t)PL_COPY_STREAM_MIN * 4; length >= bound && class + 1 < PL_COPY_CLASSES; bound *= 4) {
        class++;
    }
    return class;
}

/* A way's cost: the least of its timed copies kept, 0 when it has none. */
static uint32_t pl_copy_cost(const pl_copy_class_t *c, int way) {
    uint32_t least = 0;
    for (uint32_t i = 0; i < PL_COPY_WINDOW; i++) {
        uint32_t cost = c->cost[way][i];
        if (cost != 0 && (least == 0 || cost < least)) least = cost;
    }
    return least;
}

pl_copy_plan_t pl_copier_plan(pl_copier_t *copier, size_t length) {
    pl_copy_plan_t plan = { .streaming = false, .timed = false };
#if defined(__x86_64__)
    if (length < PL_COPY_STREAM_MIN) return plan;
    pl_copy_class_t *c = &copier->classes[pl_copy_class_of(length)];
    plan.streaming = c->streaming;
    bool unknown = c->cost[0][0] == 0 || c->cost[1][0] == 0;
    plan.timed = unknown || length >= PL_COPY_TIME_ALL_FROM || ++c->untimed >= PL_COPY_TIME_EVERY;
    if (plan.timed) {
        c->untimed = 0;
        if (c->cost[!c->streaming][0] == 0 || ++c->since_probe >= PL_COPY_PROBE_EVERY) {
            plan.streaming = !c->streaming;
            c->since_probe = 0;
        }
    }
#else
    (void)copier;
    (void)length;
#endif
    return plan;
}

void pl_copier_note(pl_copier_t *copier, size_t length, bool streaming, uint64_t ticks) {
    if (length < PL_COPY_STREAM_MIN) return;
    pl_copy_class_t *c = &copier->classes[pl_copy_class_of(length)];
    uint64_t per_kib = ticks * 1024 / length;
    uint32_t cost = per_kib == 0 ? 1 : per_kib > UINT32_MAX ? UINT32_MAX : (uint32_t)per_kib; /* 0 means none */
    int way = streaming ? 1 : 0;
    c->cost[way][c->next[way]] = cost;
    c->next[way] = (uint8_t)((c->next[way] + 1) % PL_COPY_WINDOW);
    uint32_t ordinary = pl_copy_cost(c, 0), streamed = pl_copy_cost(c, 1);
    if (ordinary != 0 && streamed != 0) c->streaming = streamed < ordinary;
}

bool pl_copier_streams(const pl_copier_t *copier, size_t length) {
    return length >= PL_COPY_STREAM_MIN && copier->classes[pl_copy_class_of(length)].streaming;
}

/* Whole lines with streaming stores, the partial lines at either end as usual. The fence orders the streamed lines
 * before whatever the caller publishes them with (a release store does not). */
void pl_copy_with(void *to, const void *from, size_t length, bool streaming) {
#if defined(__x86_64__)
    if (streaming && length >= PL_COPY_STREAM_MIN) {
        uint8_t *t = to;
        const uint8_t *f = from;
        size_t lead = (64u - ((uintptr_t)t & 63u)) & 63u;
        memcpy(t, f, lead);
        t += lead;
        f += lead;
        length -= lead;
        for (; length >= 64; t += 64, f += 64, length -= 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)f), b = _mm_loadu_si128((const __m128i *)(f + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(f + 32)), d = _mm_loadu_si128((const __m128i *)(f + 48));
            _mm_stream_si128((__m128i *)t, a);
            _mm_stream_si128((__m128i *)(t + 16), b);
            _mm_stream_si128((__m128i *)(t + 32), c);
            _mm_stream_si128((__m128i *)(t + 48), d);
        }
        _mm_sfence();
        memcpy(t, f, length);
        return;
    }
#else
    (void)streaming;
#endif
    memcpy(to, from, length);
}

void pl_copier_copy(pl_copier_t *copier, void *to, const void *from, size_t length) {
#if defined(__x86_64__)
    pl_copy_plan_t plan = pl_copier_plan(copier, length);
    if (!plan.timed) {
        pl_copy_with(to, from, length, plan.streaming);
        return;
    }
    /* Timed to the last store: the fences keep the counter from being read before the stores have left. */
    _mm_lfence();
    uint64_t start = __rdtsc();
    _mm_lfence();
    pl_copy_with(to, from, length, plan.streaming);
    _mm_mfence();
    _mm_lfence();
    uint64_t end = __rdtsc();
    pl_copier_note(copier, length, plan.streaming, end > start ? end - start : 0);
#else
    (void)copier;
    memcpy(to, from, length);
#endif
}

/* One per thread, for the payload memory its messages are put together in (pl_thread_copier). */
static _Thread_local pl_copier_t pl_this_thread_copier;

pl_copier_t *pl_thread_copier(void) { return &pl_this_thread_copier; }
