/*
 * pl_thread.c — thread identity for the run loop's per-thread table.
 *
 * Why this shim exists: Swift's Glibc module does not export gettid(), and the run loop needs the kernel's
 * thread id to key its loops and to recognise the main thread (whose id equals the process id) from any
 * thread, without depending on Foundation. Thread naming is here for the same reason: pthread_setname_np
 * needs _GNU_SOURCE, which Swift's Glibc module is not built with.
 */
#define _GNU_SOURCE
#include "portloop.h"

#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int32_t pl_thread_id(void) { return (int32_t)syscall(SYS_gettid); }

int32_t pl_process_id(void) { return (int32_t)getpid(); }

void pl_thread_set_name(const char *name) {
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = '\0';
    pthread_setname_np(pthread_self(), truncated);
}
