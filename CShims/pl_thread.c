/*
 * pl_thread.c — thread identity for the run loop's per-thread table.
 *
 * Why this shim exists: Swift's Glibc module does not export gettid(), and the run loop needs the kernel's
 * thread id to key its loops and to recognise the main thread (whose id equals the process id) from any
 * thread, without depending on Foundation.
 */
#define _GNU_SOURCE
#include "portloop.h"

#include <sys/syscall.h>
#include <unistd.h>

int32_t pl_thread_id(void) { return (int32_t)syscall(SYS_gettid); }

int32_t pl_process_id(void) { return (int32_t)getpid(); }
