/*
 * cbenchfloors.h — raw C "floors" for the PortLoop benchmarks.
 *
 * Each function runs one workload the benchmark also runs through PortLoop, written as directly as the
 * kernel or libevent allow, so a PortLoop figure can be read as "x times the floor". Each spawns its own
 * threads (the seqpacket floors fork a child process instead), does a short untimed warm-up, times only the
 * steady part and returns the elapsed time in nanoseconds, or -1 if a system call failed (errno tells which).
 */
#ifndef CBENCHFLOORS_H
#define CBENCHFLOORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Two threads ping-pong over two bare eventfds with blocking read/write.
 *  Returns the nanoseconds taken by `round_trips` round trips (after `warmup` untimed ones). With `laps`
 *  (room for `round_trips`; or NULL), times each round trip as the Swift variants do (a clock read when its
 *  answer arrives), stores the time of each after the first timed one, and sets `*lap_count`. */
int64_t bf_eventfd_pingpong(uint64_t warmup, uint64_t round_trips, int64_t *laps, uint64_t *lap_count);

/** Two threads, each looping its own libevent event_base (evthread_use_pthreads, precise timer) that
 *  watches the thread's eventfd; each callback reads its eventfd and writes the other thread's.
 *  Returns the nanoseconds taken by `round_trips` round trips (after `warmup` untimed ones); `laps` and
 *  `lap_count` as for bf_eventfd_pingpong. */
int64_t bf_libevent_pingpong(uint64_t warmup, uint64_t round_trips, int64_t *laps, uint64_t *lap_count);

/** A producer writes 1 to an eventfd `messages` times; a consumer blocks reading it until the values read
 *  add up to `messages`. Returns the nanoseconds from the producer's first write to the consumer's last
 *  read: the cost of one syscall per message with free coalescing on the reading side. */
int64_t bf_eventfd_counter_throughput(uint64_t messages);

/** On the calling thread, one libevent base (evthread_use_pthreads, precise timer) sleeps until each of
 *  `count` fire dates (CLOCK_MONOTONIC nanoseconds, sorted ascending) with a timer event re-armed for the
 *  next one, and records each date's lateness (time seen due minus fire date) in `lateness[i]`.
 *  Returns the time of the last fire (CLOCK_MONOTONIC nanoseconds), or -1 if libevent failed. */
int64_t bf_libevent_timers(const int64_t *fire_dates, uint64_t count, int64_t *lateness);

/** Two processes ping-pong 8-byte packets over a SOCK_SEQPACKET socketpair with blocking send/recv: the caller
 *  forks a child that echoes every packet until end of file, and waits for it at the end.
 *  Returns the nanoseconds taken by `round_trips` round trips (after `warmup` untimed ones). */
int64_t bf_seqpacket_pingpong(uint64_t warmup, uint64_t round_trips);

/** One-way: a forked child sends `messages` 8-byte packets on a SOCK_SEQPACKET socketpair (blocking send), the
 *  caller receives them (blocking recv). Returns the nanoseconds from the child's first send (after a go
 *  packet from the caller) to the caller's last receive. */
int64_t bf_seqpacket_throughput(uint64_t messages);

/** One-way bulk: a forked child writes `messages` payloads of `size` bytes with blocking write on a SOCK_STREAM
 *  socketpair, the caller reads each whole with blocking read. Returns the nanoseconds from the caller's go byte
 *  to its last read, or -1. */
int64_t bf_stream_copy(uint64_t messages, size_t size);

/** Two processes ping-pong messages of `size` bytes (at least 8) with blocking send/recv on a socketpair: one
 *  packet per message on SOCK_SEQPACKET (`seqpacket` nonzero; the size must fit the socket's send buffer), a
 *  4-byte length and the payload on SOCK_STREAM. The caller forks a child that echoes until end of file.
 *  Returns the nanoseconds taken by `round_trips` round trips (after `warmup` untimed ones). */
int64_t bf_socket_pingpong(int seqpacket, uint64_t size, uint64_t warmup, uint64_t round_trips);

/** One-way: a forked child sends `messages` messages of `size` bytes on a socketpair (framed as in
 *  bf_socket_pingpong), the caller receives them. Returns the nanoseconds from the child's first send (after a
 *  go message from the caller) to the caller's last receive. */
int64_t bf_socket_throughput(int seqpacket, uint64_t size, uint64_t messages);

/** CLOCK_MONOTONIC in nanoseconds, the clock every floor uses. */
int64_t bf_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* CBENCHFLOORS_H */
