/*
 * cbenchsupport.h — measuring helpers: heap accounting (`allocs`, `memory`), per-thread CPU (`idle`), and a
 * cross-process scenarios' child tied to its parent's life.
 *
 * Allocation counting: this target defines malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc and pvalloc
 * in the executable. On ELF the executable's definitions take precedence over libc's for every library
 * (symbol interposition, no LD_PRELOAD): the Swift runtime, libdispatch, CoreFoundation, libevent and NIO
 * all allocate through them. Each forwards to glibc's own entry point (__libc_malloc, …), so memory is
 * glibc's and its free() (not interposed) releases it. While counting is switched on, each call adds one to
 * a process-wide counter (relaxed atomics); while it is off the cost is one relaxed load.
 */
#ifndef CBENCHSUPPORT_H
#define CBENCHSUPPORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Starts or stops counting (process-wide; every thread's allocations count). */
void bs_alloc_counting(int enabled);

/** Allocation calls counted so far (malloc, calloc, realloc, the aligned forms), and bytes requested. */
uint64_t bs_alloc_count(void);
uint64_t bs_alloc_bytes(void);

/** 1 if this target's malloc is the one the process uses (an allocation through libc's symbol is seen). */
int bs_alloc_interposed(void);

/** Heap bytes in use according to glibc's mallinfo2(): arena bytes allocated plus mmapped chunks,
 *  summed over every arena. */
uint64_t bs_heap_in_use(void);

/** Resident set size of the process in bytes (from /proc/self/statm), or 0 if it cannot be read. */
uint64_t bs_resident_bytes(void);

/** Returns freed heap memory to the system (malloc_trim(0)), so that an RSS delta counts new pages only. */
void bs_heap_trim(void);

/** The calling thread's kernel thread id (gettid). */
int32_t bs_thread_id(void);

/** CPU time consumed so far by a thread of this process (pthread_getcpuclockid), in nanoseconds; -1 on
 *  failure. `thread` is a pthread_t. */
int64_t bs_thread_cpu_ns(unsigned long thread);

/** CPU time consumed so far by the whole process (CLOCK_PROCESS_CPUTIME_ID), in nanoseconds. */
int64_t bs_process_cpu_ns(void);

/** Context switches of the thread with kernel id `tid` so far, voluntary plus involuntary (from
 *  /proc/self/task/TID/status); -1 if it cannot be read. A thread that sleeps and is woken counts one. */
int64_t bs_thread_context_switches(int32_t tid);

/** For a child process: asks the kernel to SIGKILL it when its parent goes (PR_SET_PDEATHSIG; the parent *thread*
 *  that spawned it, in fact, so spawn from a thread that outlives the child). Returns 0, or -1 if the prctl
 *  failed or `parent` is no longer the parent (it is gone already). */
int bs_die_with_parent(int32_t parent);

/** fork(2), for the peers-clients scenario's client processes (forked from a process that has started no thread
 *  yet). Returns the child's pid in the parent, 0 in the child, -1 with errno set. */
int32_t bs_fork(void);

#ifdef __cplusplus
}
#endif

#endif /* CBENCHSUPPORT_H */
