/*
 * pl_thread.c — thread identity for the run loop's per-thread table.
 *
 * Why this shim exists: Swift's Glibc module does not export gettid(), and the run loop needs the kernel's
 * thread id to key its loops and to recognise the main thread (whose id equals the process id) from any
 * thread, without depending on Foundation. Naming threads needs _GNU_SOURCE too, which Swift's Glibc module
 * is not built with, so pthread_setname_np is wrapped here as well.
 */
#define _GNU_SOURCE
#include "portloop.h"

#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

int32_t pl_thread_id(void) { return (int32_t)syscall(SYS_gettid); }

int32_t pl_process_id(void) { return (int32_t)getpid(); }

int pl_thread_set_name(const char *name) {
    if (name == NULL) return EINVAL;
    return pthread_setname_np(pthread_self(), name);
}

int pl_thread_get_name(char *buf, size_t size) { return pthread_getname_np(pthread_self(), buf, size); }
