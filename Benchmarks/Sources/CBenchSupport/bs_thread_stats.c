/*
 * bs_thread_stats.c — per-thread CPU time and context switches, for the `idle` scenario: an idle loop
 * should use no CPU and never wake; these read both from outside the thread, without waking it.
 */
#define _GNU_SOURCE
#include "cbenchsupport.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int32_t bs_thread_id(void) { return (int32_t)gettid(); }

void bs_heap_trim(void) { malloc_trim(0); }

int64_t bs_thread_cpu_ns(unsigned long thread) {
    clockid_t clock;
    struct timespec now;
    if (pthread_getcpuclockid((pthread_t)thread, &clock) != 0 || clock_gettime(clock, &now) != 0) return -1;
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

int64_t bs_process_cpu_ns(void) {
    struct timespec now;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now) != 0) return -1;
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

int64_t bs_thread_context_switches(int32_t tid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char text[4096];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return -1;
    text[n] = 0;
    int64_t total = 0;
    int found = 0;
    for (const char *key = text; (key = strstr(key, "ctxt_switches:")) != NULL; key++) {
        total += strtoll(key + strlen("ctxt_switches:"), NULL, 10);
        found++;
    }
    return found == 2 ? total : -1;
}
