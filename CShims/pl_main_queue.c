/*
 * pl_main_queue.c — the main dispatch queue's hooks for run loops.
 *
 * Why this shim exists: libdispatch on Linux exports, for CoreFoundation, an eventfd that becomes readable
 * when blocks are queued on the main queue, and a function that drains the queue once. They are private
 * symbols with no header; this file declares them and adds the one thing libdispatch leaves to the run
 * loop: reading the eventfd's 8 bytes, without which it stays readable and the loop spins.
 */
#include "portloop.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

extern int _dispatch_get_main_queue_handle_4CF(void);
extern void _dispatch_main_queue_callback_4CF(void *msg);

int pl_main_queue_handle(void) { return _dispatch_get_main_queue_handle_4CF(); }

int pl_main_queue_consume(int fd) {
    uint64_t value;
    ssize_t n;
    do { n = read(fd, &value, sizeof value); } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof value;
}

void pl_main_queue_drain(void) { _dispatch_main_queue_callback_4CF(NULL); }
