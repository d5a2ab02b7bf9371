/*
 * pl_copy.c — copies into memory that another core reads next: ordinary or streaming stores, as this writer's
 * measurements say.
 *
 * A message's large payload is copied by the sending thread into a buffer that the receiver, on another core, read
 * last (the payload cache hands the same buffers out again). An ordinary store must first take each line back from
 * the reader's cache. Between cores that share a cache that is cheap, and the reader then finds the bytes in that
 * shared cache. Between chiplets or sockets (where a host may put a virtual machine's CPUs, and may move them at any
 * time) it is not. Streaming (non-temporal) stores write whole lines to memory without taking them: in a C test of
 * two threads, 1 MiB copies ran two and a half times as fast that way when the cores were far, and nearly three
 * times as slow when they shared a cache. Which case holds is the host's business and changes while a process runs,
 * so a copier measures.
 *
 * It copies in *epochs*, runs of one way long enough for the lines to settle into what that way leaves them in (a
 * line written by ordinary stores and read since may still be in the writer's cache; one written by streaming
 * stores is not), so a copy of one way among copies of the other would measure the wrong thing. In each epoch's
 * second half some copies are timed with the CPU's timestamp counter, and the median of their costs per KiB is the
 * way's cost (an interrupted copy only takes longer). The copier keeps to the cheaper way and tries the other for
 * one epoch now and then: soon after a change, then half as often each time the try confirms the choice; and at
 * once when the way it keeps to costs more than the other did when last tried.
 *
 * A shared-memory ring's writer uses pl_copy_with but no copier: between processes both ways cost the writer about
 * as much whichever the case, and it goes by how far the reader is instead (pl_ring.c). A copier belongs to one
 * thread: it is not synchronised.
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

uint32_t pl_copy_epoch_copies(size_t length) {
    size_t least = (size_t)PL_COPY_STREAM_MIN << (2 * pl_copy_class_of(length)); /* the class's smallest copy */
    size_t copies = PL_COPY_EPOCH_BYTES / least;
    return copies < PL_COPY_EPOCH_MIN_COPIES ? PL_COPY_EPOCH_MIN_COPIES : (uint32_t)copies;
}

uint32_t pl_median_u32(uint32_t *values, uint32_t count) {
    for (uint32_t i = 1; i < count; i++) {
        uint32_t v = values[i], j = i;
        for (; j > 0 && values[j - 1] > v; j--) values[j] = values[j - 1];
        values[j] = v;
    }
    return values[count / 2];
}

/* Ends an epoch: its way's cost noted, and the next epoch's way chosen. */
static void pl_copy_end_epoch(pl_copy_class_t *c) {
    int tried = c->streaming, kept = c->chosen_streaming;
    if (c->sample_count > 0) c->cost[tried] = pl_median_u32(c->samples, c->sample_count);
    c->copies = c->sample_count = 0;
    uint64_t mine = c->cost[kept], other = c->cost[!kept];
    if (tried != kept) {
        /* A try of the other way: it wins by a tenth, or the choice stands and is tried half as often. */
        if (other != 0 && mine != 0 && other * 10 < mine * 9) {
            c->chosen_streaming = !kept;
            c->explore_every = PL_COPY_EXPLORE_FIRST;
        } else if (c->explore_every < PL_COPY_EXPLORE_MOST) {
            c->explore_every = c->explore_every == 0 ? PL_COPY_EXPLORE_FIRST : c->explore_every * 2;
        }
        c->epochs_left = c->explore_every;
    } else if (other == 0 || mine * 9 > other * 10) {
        c->epochs_left = 0; /* never tried, or dearer now than the other was: try it next */
    } else if (c->epochs_left > 0) {
        c->epochs_left--;
    }
    c->streaming = c->epochs_left == 0 ? !c->chosen_streaming : c->chosen_streaming;
}

pl_copy_plan_t pl_copier_plan(pl_copier_t *copier, size_t length) {
    pl_copy_plan_t plan = { .streaming = false, .timed = false };
#if defined(__x86_64__)
    if (length < PL_COPY_STREAM_MIN) return plan;
    pl_copy_class_t *c = &copier->classes[pl_copy_class_of(length)];
    uint32_t epoch = pl_copy_epoch_copies(length), half = epoch / 2;
    if (c->copies >= epoch) pl_copy_end_epoch(c);
    uint32_t at = c->copies++;
    uint32_t stride = half / PL_COPY_SAMPLES > 0 ? half / PL_COPY_SAMPLES : 1;
    plan.streaming = c->streaming;
    plan.timed = at >= half && (at - half) % stride == 0 && c->sample_count < PL_COPY_SAMPLES;
#else
    (void)copier;
    (void)length;
#endif
    return plan;
}

void pl_copier_note(pl_copier_t *copier, size_t length, uint64_t ticks) {
    if (length < PL_COPY_STREAM_MIN) return;
    pl_copy_class_t *c = &copier->classes[pl_copy_class_of(length)];
    if (c->sample_count >= PL_COPY_SAMPLES) return;
    uint64_t per_kib = ticks * 1024 / length;
    c->samples[c->sample_count++] = per_kib == 0 ? 1 : per_kib > UINT32_MAX ? UINT32_MAX : (uint32_t)per_kib;
}

bool pl_copier_streams(const pl_copier_t *copier, size_t length) {
    return length >= PL_COPY_STREAM_MIN && copier->classes[pl_copy_class_of(length)].chosen_streaming;
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
    pl_copy_plan_t plan = pl_copier_plan(copier, length); /* never timed nor streaming but on x86-64 */
#if defined(__x86_64__)
    if (plan.timed) {
        /* No fence: in a run of copies a copy's time includes waiting for the stores of the one before to leave. */
        uint64_t start = __rdtsc();
        pl_copy_with(to, from, length, plan.streaming);
        uint64_t end = __rdtsc();
        pl_copier_note(copier, length, end > start ? end - start : 0);
        return;
    }
#endif
    pl_copy_with(to, from, length, plan.streaming);
}

/* One per thread, for the large payloads it sends to ports of this process (pl_thread_copier). */
static _Thread_local pl_copier_t pl_this_thread_copier;

pl_copier_t *pl_thread_copier(void) { return &pl_this_thread_copier; }
