/*
 * bf_eventfd_throughput.c — the floor of the throughput scenario.
 *
 * Why it exists: a reference for "one syscall per message". The producer writes an eventfd once per
 * message; the consumer blocks in read(2), which returns the sum of everything written since its last read,
 * so the consumer side coalesces for free. A port layer whose senders make no syscall while the receiver
 * is awake should beat this; one that pays a wake-up per message will land near it.
 */
#include "bf_common.h"

#include <pthread.h>
#include <sys/eventfd.h>

typedef struct {
    int fd;                   /* blocking eventfd */
    uint64_t messages;
    int64_t end;              /* when the consumer had read them all */
    int failed;
    pthread_barrier_t ready;
} bf_counter_t;

static void *bf_consume(void *arg) {
    bf_counter_t *c = arg;
    pthread_barrier_wait(&c->ready);
    uint64_t sum = 0, value;
    while (sum < c->messages) {
        if (bf_efd_read(c->fd, &value) != 0) { c->failed = 1; break; }
        sum += value;
    }
    c->end = bf_now_ns();
    return NULL;
}

int64_t bf_eventfd_counter_throughput(uint64_t messages) {
    bf_counter_t c = { .fd = eventfd(0, EFD_CLOEXEC), .messages = messages };
    if (c.fd < 0) return -1;
    pthread_barrier_init(&c.ready, NULL, 2);
    pthread_t consumer;
    int64_t elapsed = -1;
    if (pthread_create(&consumer, NULL, bf_consume, &c) == 0) {
        pthread_barrier_wait(&c.ready);
        int64_t start = bf_now_ns();
        uint64_t sent = 0;
        for (; sent < messages; sent++) {
            if (bf_efd_write(c.fd, 1) != 0) break;
        }
        if (sent < messages) bf_efd_write(c.fd, messages - sent); /* unblock the consumer */
        pthread_join(consumer, NULL);
        if (sent == messages && !c.failed) elapsed = c.end - start;
    }
    pthread_barrier_destroy(&c.ready);
    close(c.fd);
    return elapsed;
}
