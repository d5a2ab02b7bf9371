/*
 * bs_malloc_counter.c — counting allocator entry points (see include/cbenchsupport.h) and heap figures.
 *
 * Why it exists: the `allocs` scenario reports heap allocations per message (the target: at most one per port
 * message in steady state). glibc has no allocation counter and its hooks are gone (2.34), so the
 * executable defines the allocation functions itself and forwards them to glibc's exported __libc_*
 * functions. free() is not wrapped: every block still comes from glibc.
 */
#define _GNU_SOURCE
#include "cbenchsupport.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

static atomic_int bs_enabled;
static atomic_uint_fast64_t bs_count;
static atomic_uint_fast64_t bs_bytes;


static inline void bs_note(size_t size) {
    if (__builtin_expect(atomic_load_explicit(&bs_enabled, memory_order_relaxed), 0)) {
        atomic_fetch_add_explicit(&bs_count, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&bs_bytes, size, memory_order_relaxed);
    }
}

void *malloc(size_t size) { bs_note(size); return __libc_malloc(size); }
void *calloc(size_t count, size_t size) { bs_note(count * size); return __libc_calloc(count, size); }
void *realloc(void *pointer, size_t size) { bs_note(size); return __libc_realloc(pointer, size); }
void *memalign(size_t alignment, size_t size) { bs_note(size); return __libc_memalign(alignment, size); }
void *aligned_alloc(size_t alignment, size_t size) { bs_note(size); return __libc_memalign(alignment, size); }
void *valloc(size_t size) { bs_note(size); return __libc_valloc(size); }
void *pvalloc(size_t size) { bs_note(size); return __libc_pvalloc(size); }

int posix_memalign(void **result, size_t alignment, size_t size) {
    if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    bs_note(size);
    void *pointer = __libc_memalign(alignment, size);
    if (pointer == NULL) return ENOMEM;
    *result = pointer;
    return 0;
}

void bs_alloc_counting(int enabled) { atomic_store_explicit(&bs_enabled, enabled, memory_order_relaxed); }
uint64_t bs_alloc_count(void) { return atomic_load_explicit(&bs_count, memory_order_relaxed); }
uint64_t bs_alloc_bytes(void) { return atomic_load_explicit(&bs_bytes, memory_order_relaxed); }

int bs_alloc_interposed(void) {
    /* Call malloc through the symbol libc's own users would bind to, and see whether it was counted. */
    void *(*libc_visible_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
    if (libc_visible_malloc != malloc) return 0;
    int was = atomic_exchange(&bs_enabled, 1);
    uint64_t before = bs_alloc_count();
    void *volatile pointer = libc_visible_malloc(24);
    uint64_t after = bs_alloc_count();
    atomic_store(&bs_enabled, was);
    atomic_fetch_sub(&bs_count, after - before);
    free(pointer);
    return after > before;
}

uint64_t bs_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return (uint64_t)info.uordblks + (uint64_t)info.hblkhd;
}

uint64_t bs_resident_bytes(void) {
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[128];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = 0;
    /* "size resident shared text lib data dt", in pages */
    char *cursor = text;
    while (*cursor && *cursor != ' ') cursor++;
    uint64_t pages = strtoull(cursor, NULL, 10);
    return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}
