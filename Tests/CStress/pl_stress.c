/*
 * pl_stress.c — send/receive/destroy stress for the C port layer, run by `make leakcheck` under AddressSanitizer,
 * LeakSanitizer and UBSan, then under valgrind's memcheck (`make stress-valgrind`), ThreadSanitizer (`make
 * stress-tsan`) and helgrind, which reports two locks ever taken in opposite orders (`make stress-helgrind`).
 *
 * Each scenario is one check. It passes when no CHECK in it failed; leaks and memory errors are caught by
 * the sanitizer (which makes the process exit non-zero) rather than by the checks. Under memcheck, `make
 * stress-valgrind` silences forked processes (their leak reports would list the memory they inherited), and that
 * hides their other errors too: so a scenario's own process (run_in_own_process) and every helper child a scenario
 * forks (fork_helper, fork_or_end) look at memcheck's count of errors as they end (child_exit, or exit()), and
 * errors found fail the scenario, with the command that shows them. Children killed by design cannot look.
 * Scenarios:
 *
 *   queued_reply_rights      ports destroyed with messages still queued that carry reply rights (some to
 *                            the port itself); the too-large rule; reply counts return to zero
 *   destroy_under_traffic    a port destroyed while receivers block on it and senders block on its full
 *                            queue: receivers get port-died, senders invalid-destination
 *   set_members_destroyed    ports inserted into a set, filled, extracted and destroyed while receivers
 *                            block on the set with timeouts
 *   ports_in_two_sets        every port in two sets, three receivers: exactly-once delivery; then the
 *                            ports and the sets are destroyed under blocked receivers
 *   descriptor_members       a pipe inserted into and extracted from a set while a receiver waits on it;
 *                            sets destroyed or released with the descriptor still a member
 *   send_rights_elsewhere    send rights made on one thread, used and released on others, the receive
 *                            right destroyed before, during or after
 *   set_last_release         a set's last reference dropped by another thread, with members, queued
 *                            messages and a descriptor still in it
 *   too_large_race           direct and set receivers with small and large buffers racing for large
 *                            messages: exactly-once, too-large leaves the message queued
 *   descriptor_for_waiter    a descriptor becomes readable while every receiver waits without the poller
 *   woken_set_sleeps_again   the never-read, edge-triggered wake-up eventfd does not end later sleeps
 *   emptied_ports            a port emptied by a direct receive: batch receives go on to the next port,
 *                            and its next message queues it at the back (round-robin)
 *   expired_timeout_looks    a timeout already over still looks at descriptor members once
 *   misuse                   a send right released once too often, a second destroy, a NULL thread name
 *   requeue_race             messages put back at the head of their port while senders, receivers, batch
 *                            receives and membership changes race: exactly-once, reply rights kept
 *   blocking_senders_fifo    four senders block on a full port (queue limits 1, 2, 1024), one with short timeouts
 *                            it tries again; one receiver, direct (slow, or with short timeouts) or through a set:
 *                            each message once, in its sender's order; a receive that waits 3 s is a lost wake-up
 *   lost_sender_signal       a sender waiting on a full port whose signal was counted but never sent (as a lost
 *                            one leaves it) looks for room again within a second: its message comes (3 rounds);
 *                            one whose timeout is shorter finds the room at its deadline and sends
 *   descriptors              three descriptors per set; descriptor exhaustion gives PL_ERR_SYSTEM naming
 *                            each system call in turn, leaks nothing, and recovers
 *   send_once_race           400 requests with a send-once reply right, the replier answering (once, or
 *                            twice: the second is invalid-name), releasing the right, or leaving the
 *                            request to be destroyed, while the requester waits on the reply port or its
 *                            set: an answer or one send-once notice each, never a wait for the timeout
 *   status_queries           four threads ask a service in a child process for its status over one
 *                            connection, with echoes of every size, until the child is killed: each gets
 *                            answers from the child's pid, then invalid-destination, none waits longer
 *   fork_child               a child forked after the transport started looks the parent's service up and sends
 *                            to it; a child that lives on holds none of the service's descriptors, so the parent
 *                            withdraws the name and checks it in again at once
 *   destroy_during_check_in  ports destroyed by another thread at every moment of their check-in: each check-in
 *                            succeeds or says the port is dead, nothing is freed twice, the name is free after
 *   activation_given_back    a socket passed as systemd passes one outlives a check-in that fails (a dead port):
 *                            the next check-in adopts it
 *   fork_while_writing       a child forked while a connection waits for room to write in a full socket holds
 *                            none of the parent's sockets (the duplicate watched for room included)
 *   fork_during_connections  100 children forked while connections' sockets are made (accepted from a process
 *                            that connects and hangs up, and by look-ups that are refused): none holds a socket
 *   fork_during_check_in     100 children forked while another thread checks a name in and withdraws it over and
 *                            over: none holds the name's lock once its fork handler ran, the check-ins succeed
 *   ring_bells               a shared-memory ring's wake-ups step by step: one ring per pass for an armed
 *                            reader, a writer that found no room is rung once its room goes back (on the way
 *                            through a long pass, or at its end), a pad alone rings; a
 *                            bell (an eventfd) is never read, its counter stays at one however often rung
 *   ring_shared_take         a packet taken in place stays the reader's: a writer filling every room it sees never
 *                            writes over it, though the room of those taken before goes back on the way
 *   copy_both_ways           a copy with streaming stores and an ordinary one, at every offset of its start in a
 *                            cache line and lengths just under and over the size from which copies may stream, up
 *                            to past a MiB: the bytes arrive intact, none before or after is written
 *   copier_chooses           a copier, given costs as if it had timed them, keeps for each size class to the way
 *                            that measured cheaper in epochs of each, tries the other ever less often while the
 *                            choice holds and at once when it costs more than the other did, and turns when the
 *                            costs do, by a tenth (an epoch's median: a few disturbed copies do not turn it)
 *   ring_copied_in           a record's bytes copied into the ring with ordinary stores (a near reader) and with
 *                            streaming ones (a far reader), at every alignment of its head and body (ends in the
 *                            middle of a cache line, bodies just under and over the size from which they stream):
 *                            each taken intact, and nothing written past its end
 *   ring_distance            the writer streams before it has timed enough loads of the reader's index, then while
 *                            their median says the reader is far; a few outliers do not turn it
 *   ring_hostile             each rule a peer can break in the shared memory gives BROKEN or CORRUPT; what is
 *                            not a ring's memfd (or one sealed against writing), or not an eventfd for a bell (a
 *                            pipe, file, FIFO, socket, timerfd, epoll set), or a second bell, is refused
 *   ring_stuck_bell          a peer makes its bell blocking with its counter at the top, and closes it: rings still
 *                            return at once (a timer fails the scenario instead of a hang), and
 *                            no ring raises SIGPIPE
 *   ring_fork_stream         200,000 records from a child process through a ring, each checked, both sides
 *                            sleeping on their bells (edge-triggered epoll, as a connection's readers): a lost
 *                            wake-up fails on a timeout; neither bell holds more than 512 rings
 *   ring_stream_to_set       rounds of 100,000 small and of 30,000 4 KiB messages from a child process, through
 *                            its connection's ring, into a port of a set (queue limit 1024) that this process
 *                            receives from: each in order, no receive slow enough to have slept on a ready port
 *                            until its deadline, no sender left waiting on a ring that had room
 *   senders_to_checked_in_port  three processes stream 5,000 messages each to a checked-in port whose queue holds
 *                            8, so that they wait for credit, received in batches: each message once, in its
 *                            sender's order. Under helgrind it also checks that check-in, the credit given back to
 *                            waiting senders and the transport take their locks in one order
 *   exit_flush               a child process queues 1 MiB or more for a stopped service and calls exit(): with the
 *                            service resumed 100 ms later, its exit flush delivers every message; with the service
 *                            left stopped, exit() returns after the flush's bound (a second); with its connection's
 *                            shared-memory ring broken just before exit() (the read index out of bounds), the flush
 *                            ends the connection and exit() returns; a send on the connection from another thread
 *                            while the flush waits for room returns at once (the flush leaves the lock meanwhile)
 *   exit_handler_sends       a child's own atexit handler, registered before its transport first started, queues
 *                            1 MiB or more for a stopped service: resumed once the child has ended or 300 ms later,
 *                            the service gets every message (the exit flush runs after the program's handlers); a
 *                            handler that runs after the flush streams 200 small messages, packing on, to a
 *                            service with room: each arrives
 *   fragments_in_place       a connection driven by hand with a message of four fragments: later fragments are
 *                            read straight into the reassembly buffer, one packet or a batch at a time; a control
 *                            frame between fragments, a last fragment packed with another message, and a fragment
 *                            that skips ahead are put back together in the packet buffer and handled as what they
 *                            are (the last one ends the connection); the bytes arrive intact; an empty packet with a
 *                            descriptor ends the connection and leaves no descriptor open
 *   once_message_cut_short   a connection driven by hand with a message through a send-once right, whole, cut by
 *                            the connection's end after its first fragment, by a release of its handle between
 *                            fragments, and refused as it begins (out of line, no memfd): the port gets the message
 *                            or the right's notice, exactly one, and the right's set-aside slot comes back
 *   ring_switch_mid_batch    a connection driven by hand through the switch to a ring, with packets behind RING_START
 *                            read in the same batch: the ring's records up to each one's mark go first (a message
 *                            in fragments crosses the switch intact, a descriptor arrives, none is left open); a
 *                            packet read in place as the message's next fragment, when the ring's records ahead of
 *                            it finish that message and begin the next, is handled as what it is: the next
 *                            message's fragment arrives, a repeat of the finished one's ends the connection
 *   payload_cache            large payload memory kept for reuse: a buffer comes back only for a size it fits
 *                            (at least half its capacity), no more are kept than the bounds allow, and four
 *                            threads taking and giving at once never get one buffer twice
 *   want_behind_local_senders, wake_during_reclaim, reclaim_crossed_by_release, undone_right_keeps_want_answer
 *                            a service's connection driven by hand through the ways a sender waited for room for
 *                            ever on a port with room (credit, reclaim, release, undone rights)
 *   released_right_keeps_queue, want_answered_by_right, unused_client_ends
 *                            a client's connection driven by hand (hand_client_t): messages still queued when the
 *                            last right goes are delivered; credit inside a right answers a WANT; a connection with
 *                            no right either way ends
 *   ring_end_after_records, ring_end_behind_switch
 *                            the peer's last records before it closes are read, whether the end is found between
 *                            the reader's two looks (held there by userfaultfd, skipped where refused) or in one
 *                            batch with the switch to the ring
 *   notice_order             no-senders notices of several requests come in the order the requests were made
 *   activation_after_withdrawal  a socket systemd passed outlives its service's port: the name is checked in again
 *   look_up_abandoned        a look-up that gives up ends its connection; another thread's look-up in that moment
 *                            connects anew instead of taking a right that dies at once
 *   look_up_meets_death      a look-up whose service port dies right after the welcome: its right, once returned,
 *                            reports the death (dead-name notice, invalid-destination, the connection ends when it
 *                            is let go); DEAD read first makes the look-up say unknown service; none waits
 *   room_watch_without_descriptor  a message queued behind a full socket while descriptors are used up (no
 *                            duplicate to watch for room with) leaves once room and descriptors are back
 *   listeners_paused         72 services whose peers wait while descriptors are used up: the transport thread
 *                            does not spin on their failing accepts (its time, running or waiting to run, over
 *                            200 ms), and once descriptors are back each peer is welcomed, services withdrawn
 *                            meanwhile left out (not under valgrind, whose limit on descriptors drops the peers)
 *   peer_stops_reading       a peer that shuts its reading side (SHUT_RD), socket kept open, while messages wait
 *                            for room: the connection ends, and a sender waiting for room is told so
 *   sender_woken_for_room    three senders wait for room in a full outgoing queue while the peer reads a packet (or
 *                            takes a ring record) every 10 ms: each gets in once room for it appears, long before
 *                            the queue has drained
 *   refused_before_watched   the same refusal met by a connection's hello before the transport watches it: with
 *                            no end coming, the listing refuses the connection the transport ended; with an end
 *                            coming, the connection is listed and ends when its end is read
 *   kill_before_listed       a kill for a look-up's connection that the transport runs before the connection is
 *                            listed: the listing refuses it, instead of a connection living on
 *   refused_after_messages   messages a peer sent before it shut its reading side, still unread when this side's
 *                            write is refused (the reader held back by the read lock): delivered before the end,
 *                            from the socket and from the peer's shared-memory ring
 *   refusing_peers_hold_nothing  40 peers connect and shut only their reading side, their status answers refused
 *                            at once, twice: the transport does not wait for hang-ups that never come (it waited
 *                            10 ms a refusal): while the 40 connections end, the process idles under 200 ms in
 *                            all, and round trips over another connection take under 200 ms beyond its CPU time
 *   fork_with_queued_descriptor  a child forked while a descriptor sent as an attachment waits in a full socket's
 *                            outgoing queue holds no copy of it
 *   ring_bell_held           a peer in the middle of a read or write of its bell, its page fault unserved: this
 *                            side's ring of that bell still returns
 *   ring_without_proc        in a mount namespace whose /proc is empty: a client makes no ring and leaves nothing
 *                            open; a service answers an offer with RING_REFUSE and goes on by socket
 *
 * Payloads are small (inline, <= 48 bytes) and large (heap) and carry a pattern derived from the message
 * id, checked on receipt.
 *
 * Contract used throughout (see portloop.h, "Object lifetime"): a thread that may still be inside a call on
 * a port or set when another thread destroys it holds its own reference (a send right, or a set retain).
 *
 * Usage: pl_stress [-v] [scenario ...]
 *                           -v prints one line per scenario with its time; names run only those scenarios
 *                           (and the named-only ones, which the default run leaves out).
 * Prints "stress: N passed, M failed" and exits 1 if any check failed.
 */
#define _GNU_SOURCE
#include "portloop.h"
#include "pl_remote.h" /* the handle wrap-around scenario drives a connection by hand */
#include "pl_ring.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/userfaultfd.h>
#include <unistd.h>
/* Memcheck's client requests (Debian's valgrind package ships the header), to count its errors in a scenario's own
 * process; without the header there is no valgrind to ask. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define PL_STRESS_HAVE_MEMCHECK_H 1
#endif
#endif

/* ---- checks ------------------------------------------------------------------------------------ */

static const char *current_scenario = "";
static atomic_int scenario_failures;
static bool verbose; /* -v: scenarios may print their figures */

/* Records a failed check; status is a pl_status_t, or -1 when there is none to show. */
static void fail_at(int line, const char *what, int status) {
    int n = atomic_fetch_add(&scenario_failures, 1);
    if (n < 10) {
        if (status >= 0) {
            fprintf(stderr, "FAIL %s (line %d): %s [status: %s]\n", current_scenario, line, what,
                    pl_status_describe((pl_status_t)status));
        } else {
            fprintf(stderr, "FAIL %s (line %d): %s\n", current_scenario, line, what);
        }
    }
}

#define CHECK(cond) do { if (!(cond)) fail_at(__LINE__, #cond, -1); } while (0)
#define CHECK_STATUS(expr, expected) do { \
        pl_status_t check_status_ = (expr); \
        if (check_status_ != (expected)) fail_at(__LINE__, #expr " == " #expected, (int)check_status_); \
    } while (0)
#define CHECK_OK(expr) CHECK_STATUS(expr, PL_OK)

/* ---- helpers ----------------------------------------------------------------------------------- */

#define MS ((int64_t)1000000)
#define BIG_BUFFER 8192

static int64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static void sleep_us(unsigned us) {
    struct timespec ts = { .tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L };
    nanosleep(&ts, NULL);
}

static uint32_t rnd(uint64_t *state) { /* xorshift64 */
    uint64_t x = *state;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    *state = x;
    return (uint32_t)(x >> 32);
}

static void start_thread(pthread_t *thread, void *(*body)(void *), void *arg) {
    int rc = pthread_create(thread, NULL, body, arg);
    if (rc != 0) { fprintf(stderr, "pthread_create: %s\n", strerror(rc)); exit(2); }
}

/* Payload sizes by id: inline ones (<= 48 bytes) and heap ones. */
static const uint32_t payload_sizes[] = { 0, 1, 8, 47, 48, 49, 200, 1000, 4096 };
#define SIZE_KINDS (sizeof payload_sizes / sizeof payload_sizes[0])

static uint32_t size_for(int32_t id) { return payload_sizes[(uint32_t)id % SIZE_KINDS]; }

static unsigned char pattern(int32_t id, uint32_t i) { return (unsigned char)((uint32_t)id * 31u + i * 7u + 1u); }

static pl_status_t send_msg(pl_port_t *port, int32_t id, pl_port_t *reply, int64_t timeout_ns) {
    unsigned char buffer[4096];
    uint32_t size = size_for(id);
    for (uint32_t i = 0; i < size; i++) buffer[i] = pattern(id, i);
    return pl_port_send(port, id, size ? buffer : NULL, size, reply, timeout_ns);
}

/* Whether a received message has the size and bytes its id promises. */
static bool message_intact(const pl_received_t *header, const unsigned char *buffer) {
    if (header->kind != PL_RECEIVED_MESSAGE || header->id < 0) return false;
    if (header->size != size_for(header->id)) return false;
    for (uint32_t i = 0; i < header->size; i++) {
        if (buffer[i] != pattern(header->id, i)) return false;
    }
    return true;
}

static void release_reply(pl_received_t *header) {
    if (header->reply != NULL) {
        if (header->flags & PL_RECEIVED_REPLY_ONCE) pl_port_release_send_once(header->reply);
        else pl_port_release_send(header->reply);
        header->reply = NULL;
    }
}

static pl_port_t *new_port(uint32_t qlimit) {
    pl_port_t *port = NULL;
    pl_status_t status = pl_port_create(qlimit, BIG_BUFFER, &port);
    if (status != PL_OK) { fprintf(stderr, "pl_port_create: %s\n", pl_status_describe(status)); exit(2); }
    return port;
}

static pl_port_set_t *new_set(void) {
    pl_port_set_t *set = NULL;
    pl_status_t status = pl_port_set_create(&set);
    if (status != PL_OK) { fprintf(stderr, "pl_port_set_create: %s\n", pl_status_describe(status)); exit(2); }
    return set;
}

/* Waits until *counter reaches target or the deadline; returns whether it did. */
static bool wait_for_count(atomic_uint *counter, unsigned target, int64_t timeout_ns) {
    int64_t deadline = now_ns() + timeout_ns;
    while (atomic_load(counter) < target) {
        if (now_ns() > deadline) return false;
        sleep_us(200);
    }
    return true;
}

/* ---- queued_reply_rights ------------------------------------------------------------------------ */

typedef struct { int index; int iterations; } qr_arg_t;

static void *qr_worker(void *raw) {
    qr_arg_t *arg = raw;
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(arg->index + 1);
    unsigned char buffer[BIG_BUFFER];
    for (int it = 0; it < arg->iterations; it++) {
        pl_port_t *reply = new_port(16);
        uint32_t qlimit = 1 + rnd(&seed) % 8;
        pl_port_t *port = new_port(qlimit);
        bool self_reply = rnd(&seed) % 4 == 0;
        int32_t first_id = (it * 16) % 100000;
        for (uint32_t i = 0; i < qlimit; i++) {
            pl_port_t *r = (self_reply && i == 0) ? port : reply;
            CHECK_OK(send_msg(port, first_id + (int32_t)i, r, 0));
        }
        CHECK_STATUS(send_msg(port, 7, reply, 0), PL_ERR_TIMED_OUT); /* full: nothing queued */
        CHECK(pl_port_send_right_count(reply) == qlimit - (self_reply ? 1u : 0u));

        uint32_t take = rnd(&seed) % (qlimit + 1), replies = 0;
        for (uint32_t j = 0; j < take; j++) {
            pl_received_t header;
            CHECK_OK(pl_port_receive(port, &header, buffer, sizeof buffer, 0));
            CHECK(message_intact(&header, buffer));
            if (header.reply == reply) {
                CHECK_OK(pl_port_send(header.reply, header.id, NULL, 0, NULL, 0));
                replies++;
            }
            release_reply(&header);
        }
        if (take < qlimit) {
            /* Too large: the message stays first and its size is reported. */
            int32_t next = first_id + (int32_t)take;
            pl_received_t header;
            if (size_for(next) > 8) {
                CHECK_STATUS(pl_port_receive(port, &header, buffer, 8, 0), PL_ERR_TOO_LARGE);
                CHECK(header.size == size_for(next) && header.reply == NULL);
                CHECK(pl_port_message_count(port) == qlimit - take);
            }
        }
        CHECK_OK(pl_port_destroy(port)); /* with qlimit - take messages still queued */
        CHECK(pl_port_send_right_count(reply) == 0);
        CHECK(pl_port_message_count(reply) == replies);
        for (uint32_t j = 0; j + 1 < replies; j++) { /* leave the last reply queued for destroy */
            pl_received_t header;
            CHECK_OK(pl_port_receive(reply, &header, NULL, 0, 0));
        }
        CHECK_OK(pl_port_destroy(reply));
    }
    return NULL;
}

static void scenario_queued_reply_rights(void) {
    enum { THREADS = 4 };
    pthread_t threads[THREADS];
    qr_arg_t args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (qr_arg_t){ .index = i, .iterations = 6000 };
        start_thread(&threads[i], qr_worker, &args[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
}

/* ---- destroy_under_traffic ---------------------------------------------------------------------- */

typedef struct {
    pl_port_t *port;          /* this thread holds a send right to it (its memory reference) */
    pl_port_t *reply;
    atomic_uint *sent, *received;
    pl_status_t end;
    int32_t first_id;
} dt_arg_t;

static void *dt_receiver(void *raw) {
    dt_arg_t *arg = raw;
    unsigned char buffer[BIG_BUFFER];
    for (;;) {
        pl_received_t header;
        pl_status_t status = pl_port_receive(arg->port, &header, buffer, sizeof buffer, PL_TIMEOUT_FOREVER);
        if (status != PL_OK) { arg->end = status; break; }
        CHECK(message_intact(&header, buffer));
        release_reply(&header);
        atomic_fetch_add(arg->received, 1);
    }
    pl_port_release_send(arg->port);
    return NULL;
}

static void *dt_sender(void *raw) {
    dt_arg_t *arg = raw;
    for (int32_t id = arg->first_id;; id++) {
        pl_status_t status = send_msg(arg->port, id, id % 3 == 0 ? arg->reply : NULL, PL_TIMEOUT_FOREVER);
        if (status != PL_OK) { arg->end = status; break; }
        atomic_fetch_add(arg->sent, 1);
    }
    pl_port_release_send(arg->port);
    return NULL;
}

static void scenario_destroy_under_traffic(void) {
    uint64_t seed = 12345;
    for (int it = 0; it < 300; it++) {
        pl_port_t *port = new_port(2);
        pl_port_t *reply = new_port(1);
        atomic_uint sent = 0, received = 0;
        dt_arg_t args[4];
        pthread_t threads[4];
        for (int i = 0; i < 4; i++) {
            CHECK_OK(pl_port_make_send(port));
            args[i] = (dt_arg_t){ .port = port, .reply = reply, .sent = &sent, .received = &received,
                                  .end = PL_OK, .first_id = i * 1000000 };
            start_thread(&threads[i], i < 2 ? dt_receiver : dt_sender, &args[i]);
        }
        sleep_us(50 + rnd(&seed) % 1000);
        CHECK_OK(pl_port_destroy(port));
        for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
        for (int i = 0; i < 2; i++) CHECK(args[i].end == PL_ERR_PORT_DIED || args[i].end == PL_ERR_INVALID_NAME);
        for (int i = 2; i < 4; i++) CHECK_STATUS(args[i].end, PL_ERR_INVALID_DEST);
        CHECK(atomic_load(&received) <= atomic_load(&sent));
        CHECK(pl_port_send_right_count(reply) == 0); /* queued reply rights were released */
        CHECK_OK(pl_port_destroy(reply));
    }
}

/* ---- set_members_destroyed ---------------------------------------------------------------------- */

typedef struct {
    pl_port_set_t *set;       /* retained for this thread */
    pl_port_t *reply;
    atomic_bool *stop;
    atomic_uint *sent, *received;
    uint64_t seed;
} sm_arg_t;

static void *sm_receiver(void *raw) {
    sm_arg_t *arg = raw;
    unsigned char buffer[BIG_BUFFER];
    while (!atomic_load(arg->stop)) {
        pl_received_t header;
        int64_t timeout = (int64_t)(100 + rnd(&arg->seed) % 2000) * 1000; /* 0.1–2.1 ms */
        /* Every other round, a batch first: it races the mutator's inserts, extracts and destroys. */
        pl_received_t batch[8];
        uint32_t count = 0;
        if (rnd(&arg->seed) % 2 &&
            pl_port_set_receive_batch(arg->set, batch, 8, buffer, sizeof buffer, &count) == PL_OK) {
            for (uint32_t i = 0; i < count; i++) {
                CHECK(message_intact(&batch[i], buffer + batch[i].offset));
                release_reply(&batch[i]);
                atomic_fetch_add(arg->received, 1);
            }
            continue;
        }
        pl_status_t status = pl_port_set_receive(arg->set, &header, buffer, sizeof buffer, timeout);
        if (status == PL_OK) {
            CHECK(message_intact(&header, buffer));
            release_reply(&header);
            atomic_fetch_add(arg->received, 1);
        } else {
            CHECK_STATUS(status, PL_ERR_TIMED_OUT);
        }
    }
    pl_port_set_release(arg->set);
    return NULL;
}

static void *sm_mutator(void *raw) {
    sm_arg_t *arg = raw;
    for (int it = 0; it < 2500; it++) {
        pl_port_t *ports[3];
        for (int p = 0; p < 3; p++) {
            ports[p] = new_port(1 + rnd(&arg->seed) % 6);
            CHECK_OK(pl_port_set_insert(arg->set, ports[p]));
            CHECK_STATUS(pl_port_set_insert(arg->set, ports[p]), PL_ERR_ALREADY_IN_SET);
        }
        for (int p = 0; p < 3; p++) {
            uint32_t n = 1 + rnd(&arg->seed) % pl_port_get_qlimit(ports[p]);
            for (uint32_t i = 0; i < n; i++) {
                int32_t id = (int32_t)(rnd(&arg->seed) % 1000000);
                CHECK_OK(send_msg(ports[p], id, i % 2 ? arg->reply : NULL, 0));
                atomic_fetch_add(arg->sent, 1);
            }
        }
        if (rnd(&arg->seed) % 2) sleep_us(rnd(&arg->seed) % 200);
        if (rnd(&arg->seed) % 3 == 0) CHECK_OK(pl_port_set_extract(arg->set, ports[0]));
        for (int p = 0; p < 3; p++) CHECK_OK(pl_port_destroy(ports[p])); /* often with messages queued */
    }
    return NULL;
}

static void scenario_set_members_destroyed(void) {
    pl_port_set_t *set = new_set();
    pl_port_t *reply = new_port(1);
    atomic_bool stop = false;
    atomic_uint sent = 0, received = 0;
    enum { RECEIVERS = 2, MUTATORS = 2 };
    pthread_t receivers[RECEIVERS], mutators[MUTATORS];
    sm_arg_t rargs[RECEIVERS], margs[MUTATORS];
    for (int i = 0; i < RECEIVERS; i++) {
        pl_port_set_retain(set);
        rargs[i] = (sm_arg_t){ .set = set, .reply = reply, .stop = &stop, .sent = &sent, .received = &received,
                               .seed = 777u + (uint64_t)i };
        start_thread(&receivers[i], sm_receiver, &rargs[i]);
    }
    for (int i = 0; i < MUTATORS; i++) {
        margs[i] = (sm_arg_t){ .set = set, .reply = reply, .stop = &stop, .sent = &sent, .received = &received,
                               .seed = 999u + (uint64_t)i };
        start_thread(&mutators[i], sm_mutator, &margs[i]);
    }
    for (int i = 0; i < MUTATORS; i++) pthread_join(mutators[i], NULL);
    atomic_store(&stop, true);
    for (int i = 0; i < RECEIVERS; i++) pthread_join(receivers[i], NULL);
    CHECK(atomic_load(&received) <= atomic_load(&sent));
    CHECK(atomic_load(&received) > 0);
    CHECK(pl_port_set_member_count(set) == 0);
    CHECK(pl_port_send_right_count(reply) == 0);
    CHECK_OK(pl_port_set_destroy(set));
    pl_port_set_release(set);
    CHECK_OK(pl_port_destroy(reply));
}

/* ---- ports_in_two_sets -------------------------------------------------------------------------- */

enum { TS_PORTS = 4, TS_PER_SENDER = 40000, TS_SENDERS = 2, TS_EXTRA = 4 * 64 };
#define TS_IDS (TS_SENDERS * TS_PER_SENDER + TS_EXTRA)

typedef struct {
    pl_port_set_t *set;
    pl_port_t **ports;
    pl_port_t *reply;
    atomic_uchar *seen;
    atomic_uint *received;
    int index;
    pl_status_t end;
} ts_arg_t;

static void ts_handle(ts_arg_t *arg, pl_received_t *header, const unsigned char *payload) {
    CHECK(message_intact(header, payload));
    if (header->id >= 0 && header->id < TS_IDS) {
        CHECK(atomic_fetch_add(&arg->seen[header->id], 1) == 0); /* never twice */
    } else {
        CHECK(!"id out of range");
    }
    release_reply(header);
    atomic_fetch_add(arg->received, 1);
}

/* Receivers 1 and 2 take batches when messages are queued, racing the others: receiver 1 copies every payload
 * (pl_port_set_receive_batch), receiver 2 takes the larger ones over (pl_port_set_receive_batch_taking). */
static void *ts_receiver(void *raw) {
    ts_arg_t *arg = raw;
    unsigned char buffer[BIG_BUFFER];
    for (;;) {
        if (arg->index == 1 || arg->index == 2) {
            pl_received_t batch[16];
            pl_payload_t takes[16];
            uint32_t count = 0;
            pl_status_t status = arg->index == 1
                ? pl_port_set_receive_batch(arg->set, batch, 16, buffer, sizeof buffer, &count)
                : pl_port_set_receive_batch_taking(arg->set, batch, takes, 16, buffer, 256, &count);
            if (status == PL_OK && count > 0) {
                CHECK(count <= 16);
                for (uint32_t i = 0; i < count; i++) {
                    bool taken = arg->index == 2 && takes[i].base != NULL;
                    CHECK(arg->index == 1 || taken == (batch[i].size > PL_INLINE_PAYLOAD_SIZE));
                    ts_handle(arg, &batch[i], taken ? takes[i].base : buffer + batch[i].offset);
                    if (taken) pl_payload_free(&takes[i]);
                }
                continue;
            }
            if (status != PL_ERR_TIMED_OUT && status != PL_OK) { CHECK(count == 0); arg->end = status; break; }
        }
        pl_received_t header;
        pl_status_t status = pl_port_set_receive(arg->set, &header, buffer, sizeof buffer, PL_TIMEOUT_FOREVER);
        if (status != PL_OK) { arg->end = status; break; }
        ts_handle(arg, &header, buffer);
    }
    pl_port_set_release(arg->set);
    return NULL;
}

static void *ts_sender(void *raw) {
    ts_arg_t *arg = raw;
    int32_t first = arg->index * TS_PER_SENDER;
    for (int32_t id = first; id < first + TS_PER_SENDER; id++) {
        CHECK_OK(send_msg(arg->ports[id % TS_PORTS], id, id % 5 == 0 ? arg->reply : NULL, PL_TIMEOUT_FOREVER));
    }
    for (int p = 0; p < TS_PORTS; p++) pl_port_release_send(arg->ports[p]);
    return NULL;
}

static void scenario_ports_in_two_sets(void) {
    pl_port_set_t *sets[2] = { new_set(), new_set() };
    pl_port_t *ports[TS_PORTS];
    pl_port_t *reply = new_port(1);
    atomic_uchar *seen = calloc(TS_IDS, sizeof *seen);
    atomic_uint received = 0;
    for (int p = 0; p < TS_PORTS; p++) {
        ports[p] = new_port(64);
        CHECK_OK(pl_port_set_insert(sets[0], ports[p]));
        CHECK_OK(pl_port_set_insert(sets[1], ports[p]));
        CHECK(pl_port_set_contains(sets[0], ports[p]) && pl_port_set_contains(sets[1], ports[p]));
    }
    enum { RECEIVERS = 3 };
    pthread_t receivers[RECEIVERS], senders[TS_SENDERS];
    ts_arg_t rargs[RECEIVERS], sargs[TS_SENDERS];
    for (int i = 0; i < RECEIVERS; i++) {
        pl_port_set_t *set = sets[i % 2];
        pl_port_set_retain(set);
        rargs[i] = (ts_arg_t){ .set = set, .ports = ports, .reply = reply, .seen = seen, .received = &received,
                               .index = i, .end = PL_OK };
        start_thread(&receivers[i], ts_receiver, &rargs[i]);
    }
    for (int i = 0; i < TS_SENDERS; i++) {
        for (int p = 0; p < TS_PORTS; p++) CHECK_OK(pl_port_make_send(ports[p]));
        sargs[i] = (ts_arg_t){ .ports = ports, .reply = reply, .index = i };
        start_thread(&senders[i], ts_sender, &sargs[i]);
    }
    for (int i = 0; i < TS_SENDERS; i++) pthread_join(senders[i], NULL);
    unsigned expected = TS_SENDERS * TS_PER_SENDER;
    CHECK(wait_for_count(&received, expected, 30000 * MS));
    for (unsigned id = 0; id < expected; id++) {
        if (atomic_load(&seen[id]) != 1) { CHECK(!"a message was lost"); break; }
    }

    /* Destroy the ports with messages queued while the receivers are busy, then the sets under the
     * receivers blocked on them. */
    int32_t id = (int32_t)expected;
    for (int p = 0; p < TS_PORTS; p++) {
        for (int i = 0; i < 60; i++) {
            pl_status_t status = send_msg(ports[p], id++, reply, 0);
            CHECK(status == PL_OK || status == PL_ERR_TIMED_OUT);
        }
    }
    for (int p = 0; p < TS_PORTS; p++) CHECK_OK(pl_port_destroy(ports[p]));
    CHECK(pl_port_set_member_count(sets[0]) == 0 && pl_port_set_member_count(sets[1]) == 0);
    sleep_us(2000);
    CHECK_OK(pl_port_set_destroy(sets[0]));
    CHECK_OK(pl_port_set_destroy(sets[1]));
    for (int i = 0; i < RECEIVERS; i++) pthread_join(receivers[i], NULL);
    /* A receiver blocked on a set wakes with port-died; one that was between two receives when the set
     * went finds it destroyed (invalid name). */
    int died = 0;
    for (int i = 0; i < RECEIVERS; i++) {
        CHECK(rargs[i].end == PL_ERR_PORT_DIED || rargs[i].end == PL_ERR_INVALID_NAME);
        died += rargs[i].end == PL_ERR_PORT_DIED;
    }
    CHECK(died > 0);
    CHECK(pl_port_send_right_count(reply) == 0);
    CHECK_STATUS(pl_port_set_destroy(sets[0]), PL_ERR_INVALID_NAME);
    pl_port_set_release(sets[0]);
    pl_port_set_release(sets[1]);
    CHECK_OK(pl_port_destroy(reply));
    free(seen);
}

/* ---- descriptor_members ------------------------------------------------------------------------- */

typedef struct {
    pl_port_set_t *set;
    pl_port_t *port;
    int read_fd, write_fd;
    atomic_bool *stop;
    atomic_uint *received, *fd_reports;
    uint64_t seed;
} dm_arg_t;

static void drain_pipe(int fd) {
    char junk[256];
    while (read(fd, junk, sizeof junk) > 0) {}
}

static void *dm_receiver(void *raw) {
    dm_arg_t *arg = raw;
    unsigned char buffer[BIG_BUFFER];
    while (!atomic_load(arg->stop)) {
        pl_received_t header;
        pl_status_t status = pl_port_set_receive(arg->set, &header, buffer, sizeof buffer, 1 * MS);
        if (status == PL_ERR_TIMED_OUT) continue;
        CHECK_OK(status);
        if (status != PL_OK) continue;
        if (header.kind == PL_RECEIVED_FD) {
            CHECK(header.fd == arg->read_fd);
            drain_pipe(arg->read_fd);
            atomic_fetch_add(arg->fd_reports, 1);
        } else {
            CHECK(message_intact(&header, buffer));
            release_reply(&header);
            atomic_fetch_add(arg->received, 1);
        }
    }
    pl_port_set_release(arg->set);
    return NULL;
}

static void *dm_toggler(void *raw) {
    dm_arg_t *arg = raw;
    while (!atomic_load(arg->stop)) {
        pl_status_t status = pl_port_set_insert_fd(arg->set, arg->read_fd);
        CHECK(status == PL_OK || status == PL_ERR_ALREADY_IN_SET);
        sleep_us(rnd(&arg->seed) % 100);
        status = pl_port_set_extract_fd(arg->set, arg->read_fd);
        CHECK(status == PL_OK || status == PL_ERR_NOT_IN_SET);
        if (rnd(&arg->seed) % 2) sleep_us(rnd(&arg->seed) % 100);
    }
    pl_port_set_release(arg->set);
    return NULL;
}

static void scenario_descriptor_members(void) {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) { perror("pipe2"); exit(2); }
    pl_port_set_t *set = new_set();
    pl_port_t *port = new_port(64);
    CHECK_OK(pl_port_set_insert(set, port));
    atomic_bool stop = false;
    atomic_uint received = 0, fd_reports = 0;
    dm_arg_t arg = { .set = set, .port = port, .read_fd = fds[0], .write_fd = fds[1], .stop = &stop,
                     .received = &received, .fd_reports = &fd_reports, .seed = 4242 };
    dm_arg_t targ = arg;
    targ.seed = 5151;
    pthread_t receiver, toggler;
    pl_port_set_retain(set);
    start_thread(&receiver, dm_receiver, &arg);
    pl_port_set_retain(set);
    start_thread(&toggler, dm_toggler, &targ);

    enum { MESSAGES = 12000 };
    for (int32_t id = 0; id < MESSAGES; id++) {
        if (id % 4 == 0) { char c = 'x'; ssize_t n = write(fds[1], &c, 1); (void)n; }
        CHECK_OK(send_msg(port, id, NULL, PL_TIMEOUT_FOREVER));
        if (id % 16 == 0) sleep_us(20);
    }
    CHECK(wait_for_count(&received, MESSAGES, 30000 * MS));
    atomic_store(&stop, true);
    pthread_join(toggler, NULL);
    pthread_join(receiver, NULL);

    /* The descriptor is reported by a receive once it is a member and readable. */
    pl_status_t status = pl_port_set_insert_fd(set, fds[0]);
    CHECK(status == PL_OK || status == PL_ERR_ALREADY_IN_SET);
    char c = 'y';
    CHECK(write(fds[1], &c, 1) == 1);
    pl_received_t header;
    CHECK_OK(pl_port_set_receive(set, &header, NULL, 0, 1000 * MS));
    CHECK(header.kind == PL_RECEIVED_FD && header.fd == fds[0]);
    drain_pipe(fds[0]);

    /* A second set holding the same descriptor is released (not destroyed) with it still a member; the
     * first is destroyed with it still a member. Both free the descriptor's event. */
    pl_port_set_t *other = new_set();
    CHECK_OK(pl_port_set_insert_fd(other, fds[0]));
    CHECK_OK(pl_port_set_insert(other, port));
    pl_port_set_release(other);
    CHECK_OK(pl_port_set_destroy(set));
    pl_port_set_release(set);
    close(fds[0]);
    close(fds[1]);
    CHECK(atomic_load(&received) == MESSAGES);
    CHECK_OK(pl_port_destroy(port));
}

/* ---- send_rights_elsewhere ---------------------------------------------------------------------- */

enum { SE_THREADS = 4, SE_RIGHTS_PER_THREAD = 8 };

typedef struct {
    pl_port_t *port;          /* SE_RIGHTS_PER_THREAD send rights to it belong to this thread */
    pl_port_t *reply;         /* one send right to it belongs to this thread */
    int32_t first_id;
    atomic_uint *sent;
    bool may_die;
} se_arg_t;

static void *se_worker(void *raw) {
    se_arg_t *arg = raw;
    for (int i = 0; i < SE_RIGHTS_PER_THREAD; i++) {
        pl_status_t status = send_msg(arg->port, arg->first_id + i, i % 2 ? arg->reply : NULL, PL_TIMEOUT_FOREVER);
        if (status == PL_OK) atomic_fetch_add(arg->sent, 1);
        else if (arg->may_die) CHECK_STATUS(status, PL_ERR_INVALID_DEST);
        else CHECK_OK(status);
        pl_port_release_send(arg->port);
    }
    pl_port_release_send(arg->reply);
    return NULL;
}

static void scenario_send_rights_elsewhere(void) {
    uint64_t seed = 31337;
    unsigned char buffer[BIG_BUFFER];
    for (int round = 0; round < 240; round++) {
        pl_port_t *port = new_port(PL_QLIMIT_MAX);
        pl_port_t *reply = new_port(1);
        int mode = round % 3; /* 0: receive all, then destroy; 1: destroy at once; 2: destroy after a while */
        atomic_uint sent = 0;
        pthread_t threads[SE_THREADS];
        se_arg_t args[SE_THREADS];
        for (int t = 0; t < SE_THREADS; t++) {
            for (int i = 0; i < SE_RIGHTS_PER_THREAD; i++) CHECK_OK(pl_port_make_send(port));
            CHECK_OK(pl_port_make_send(reply));
            args[t] = (se_arg_t){ .port = port, .reply = reply, .first_id = t * 100, .sent = &sent,
                                  .may_die = mode != 0 };
            start_thread(&threads[t], se_worker, &args[t]);
        }
        if (mode == 0) {
            for (int i = 0; i < SE_THREADS * SE_RIGHTS_PER_THREAD; i++) {
                pl_received_t header;
                CHECK_OK(pl_port_receive(port, &header, buffer, sizeof buffer, 10000 * MS));
                CHECK(message_intact(&header, buffer));
                release_reply(&header);
            }
            for (int t = 0; t < SE_THREADS; t++) pthread_join(threads[t], NULL);
            CHECK(pl_port_send_right_count(port) == 0);
            CHECK_OK(pl_port_destroy(port)); /* the last reference: freed here */
        } else {
            if (mode == 2) sleep_us(rnd(&seed) % 300);
            CHECK_OK(pl_port_destroy(port)); /* the last send right, released on a worker, frees it */
            for (int t = 0; t < SE_THREADS; t++) pthread_join(threads[t], NULL);
        }
        CHECK(pl_port_send_right_count(reply) == 0);
        CHECK_OK(pl_port_destroy(reply));
    }
}

/* ---- set_last_release --------------------------------------------------------------------------- */

typedef struct { pl_port_set_t *set; } sl_arg_t;

static void *sl_worker(void *raw) {
    sl_arg_t *arg = raw;
    unsigned char buffer[BIG_BUFFER];
    pl_received_t header;
    pl_status_t status = pl_port_set_receive(arg->set, &header, buffer, sizeof buffer, 0);
    CHECK(status == PL_OK || status == PL_ERR_TIMED_OUT);
    if (status == PL_OK && header.kind == PL_RECEIVED_MESSAGE) {
        CHECK(message_intact(&header, buffer));
        release_reply(&header);
    }
    pl_port_set_release(arg->set);
    return NULL;
}

static void scenario_set_last_release(void) {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) { perror("pipe2"); exit(2); }
    char c = 'z';
    CHECK(write(fds[1], &c, 1) == 1);
    for (int it = 0; it < 800; it++) {
        pl_port_set_t *set = new_set();
        pl_port_t *a = new_port(8), *b = new_port(8);
        CHECK_OK(pl_port_set_insert(set, a));
        CHECK_OK(pl_port_set_insert(set, b));
        if (it % 3 == 0) CHECK_OK(pl_port_set_insert_fd(set, fds[0]));
        for (int i = 0; i < 3; i++) {
            CHECK_OK(send_msg(a, it * 8 + i, b, 0));
            CHECK_OK(send_msg(b, it * 8 + 4 + i, a, 0));
        }
        pl_port_set_retain(set);
        sl_arg_t arg = { .set = set };
        pthread_t worker;
        start_thread(&worker, sl_worker, &arg);
        if (it % 2) sleep_us(50);
        pl_port_set_release(set); /* whichever release is last destroys and frees the set */
        pthread_join(worker, NULL);
        /* The ports live on, outside any set. */
        CHECK_OK(send_msg(a, 1, NULL, 0));
        CHECK(pl_port_message_count(a) >= 3);
        CHECK_OK(pl_port_destroy(a)); /* queued reply rights to b released */
        CHECK_OK(pl_port_destroy(b)); /* queued reply rights to a (already dead) released */
    }
    close(fds[0]);
    close(fds[1]);
}

/* ---- too_large_race ----------------------------------------------------------------------------- */

enum { TL_MESSAGES = 16000 };

typedef struct {
    pl_port_t *port;          /* a send right belongs to this thread */
    pl_port_set_t *set;       /* NULL: receive on the port; otherwise retained */
    atomic_uchar *seen;
    atomic_uint *received, *too_large;
    bool small_first;
} tl_arg_t;

static pl_status_t tl_receive(tl_arg_t *arg, pl_received_t *header, void *buffer, size_t capacity,
                              int64_t timeout) {
    return arg->set ? pl_port_set_receive(arg->set, header, buffer, capacity, timeout)
                    : pl_port_receive(arg->port, header, buffer, capacity, timeout);
}

static void *tl_receiver(void *raw) {
    tl_arg_t *arg = raw;
    unsigned char buffer[BIG_BUFFER];
    while (atomic_load(arg->received) < TL_MESSAGES) {
        pl_received_t header;
        size_t capacity = arg->small_first ? 16 : sizeof buffer;
        pl_status_t status = tl_receive(arg, &header, buffer, capacity, 1 * MS);
        if (status == PL_ERR_TOO_LARGE) {
            CHECK(header.size > capacity && header.size <= 4096 && header.reply == NULL);
            atomic_fetch_add(arg->too_large, 1);
            /* Still queued (unless another receiver got it first): take it with room. */
            status = tl_receive(arg, &header, buffer, sizeof buffer, 0);
            if (status == PL_ERR_TIMED_OUT) continue;
        }
        if (status == PL_ERR_TIMED_OUT) continue;
        CHECK_OK(status);
        if (status != PL_OK) break;
        CHECK(message_intact(&header, buffer));
        if (header.id >= 0 && header.id < TL_MESSAGES) CHECK(atomic_fetch_add(&arg->seen[header.id], 1) == 0);
        release_reply(&header);
        atomic_fetch_add(arg->received, 1);
    }
    if (arg->set) pl_port_set_release(arg->set);
    pl_port_release_send(arg->port);
    return NULL;
}

static void scenario_too_large_race(void) {
    pl_port_t *port = new_port(8);
    pl_port_t *reply = new_port(1);
    pl_port_set_t *set = new_set();
    CHECK_OK(pl_port_set_insert(set, port));
    atomic_uchar *seen = calloc(TL_MESSAGES, sizeof *seen);
    atomic_uint received = 0, too_large = 0;
    enum { RECEIVERS = 4 };
    pthread_t threads[RECEIVERS];
    tl_arg_t args[RECEIVERS];
    for (int i = 0; i < RECEIVERS; i++) {
        CHECK_OK(pl_port_make_send(port));
        pl_port_set_t *s = i >= 2 ? set : NULL;
        if (s) pl_port_set_retain(s);
        args[i] = (tl_arg_t){ .port = port, .set = s, .seen = seen, .received = &received,
                              .too_large = &too_large, .small_first = i % 2 == 0 };
        start_thread(&threads[i], tl_receiver, &args[i]);
    }
    for (int32_t id = 0; id < TL_MESSAGES; id++) {
        CHECK_OK(send_msg(port, id, id % 7 == 0 ? reply : NULL, PL_TIMEOUT_FOREVER));
    }
    for (int i = 0; i < RECEIVERS; i++) pthread_join(threads[i], NULL);
    CHECK(atomic_load(&received) == TL_MESSAGES);
    for (int id = 0; id < TL_MESSAGES; id++) {
        if (atomic_load(&seen[id]) != 1) { CHECK(!"a message was lost or duplicated"); break; }
    }
    CHECK(atomic_load(&too_large) > 0);

    /* A too-large message left queued is destroyed with the port. */
    CHECK_OK(send_msg(port, 8, reply, 0)); /* 4096 bytes */
    pl_received_t header;
    CHECK_STATUS(pl_port_set_receive(set, &header, NULL, 0, 0), PL_ERR_TOO_LARGE);
    /* A batch leaves it queued too, takes nothing, and refuses bad arguments. */
    pl_received_t batch[4];
    uint32_t count = 7;
    unsigned char small[64];
    CHECK_STATUS(pl_port_set_receive_batch(set, batch, 4, small, sizeof small, &count), PL_OK);
    CHECK(count == 0 && pl_port_message_count(port) == 1);
    CHECK_STATUS(pl_port_set_receive_batch(NULL, batch, 4, small, sizeof small, &count), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_set_receive_batch(set, NULL, 4, small, sizeof small, &count), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_set_receive_batch(set, batch, 0, small, sizeof small, &count), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_set_receive_batch(set, batch, 4, NULL, 64, &count), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_set_receive_batch(set, batch, 4, small, sizeof small, NULL), PL_ERR_INVALID_ARG);
    CHECK(header.size == 4096);
    CHECK(pl_port_message_count(port) == 1);
    CHECK_OK(pl_port_destroy(port));
    CHECK(pl_port_set_member_count(set) == 0);
    CHECK(pl_port_send_right_count(reply) == 0);
    pl_port_set_release(set);
    CHECK_OK(pl_port_destroy(reply));
    free(seen);
}

/* ---- main --------------------------------------------------------------------------------------- */

typedef struct { const char *name; void (*run)(void); } scenario_t;

/* ---- descriptor_for_waiter ---------------------------------------------------------------------------- */
/* A receiver waiting with no descriptor and no deadline (on the set's condition variable) while a descriptor
 * is inserted and other threads keep polling the set (each poll holds the base for a moment): the waiter must
 * end up watching the descriptor. A poller that left the base without handing it over left the waiter asleep
 * with the descriptor readable. */

typedef struct { pl_port_set_t *set; atomic_int done; pl_received_t got; } dw_waiter_t;
typedef struct { pl_port_set_t *set; atomic_int *stop; } dw_poller_t;

static void *dw_wait(void *raw) {
    dw_waiter_t *arg = raw;
    unsigned char buffer[64];
    CHECK_OK(pl_port_set_receive(arg->set, &arg->got, buffer, sizeof buffer, PL_TIMEOUT_FOREVER));
    atomic_store(&arg->done, 1);
    return NULL;
}

static void *dw_poll(void *raw) {
    dw_poller_t *arg = raw;
    unsigned char buffer[64];
    while (!atomic_load(arg->stop)) {
        pl_received_t header;
        pl_status_t status = pl_port_set_receive(arg->set, &header, buffer, sizeof buffer, 0);
        CHECK(status == PL_OK || status == PL_ERR_TIMED_OUT);
    }
    return NULL;
}

static void scenario_descriptor_for_waiter(void) {
    for (int round = 0; round < 100; round++) {
        pl_port_set_t *set = new_set();
        int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        CHECK(fd >= 0);
        dw_waiter_t waiter = { .set = set, .done = 0 };
        atomic_int stop = 0;
        dw_poller_t poller = { .set = set, .stop = &stop };
        pthread_t waiting, polling[2];
        start_thread(&waiting, dw_wait, &waiter);
        sleep_us(500); /* the waiter is asleep by now, or soon */
        CHECK_OK(pl_port_set_insert_fd(set, fd));
        for (int i = 0; i < 2; i++) start_thread(&polling[i], dw_poll, &poller);
        sleep_us(300);
        atomic_store(&stop, 1);
        for (int i = 0; i < 2; i++) pthread_join(polling[i], NULL);
        uint64_t one = 1;
        CHECK(write(fd, &one, sizeof one) == sizeof one);
        int64_t deadline = now_ns() + 2000 * MS;
        while (!atomic_load(&waiter.done) && now_ns() < deadline) sleep_us(200);
        if (!atomic_load(&waiter.done)) {
            CHECK(!"the waiter never looked at the readable descriptor");
            pl_port_set_destroy(set); /* lets it go */
            pthread_join(waiting, NULL);
            close(fd);
            pl_port_set_release(set);
            return;
        }
        pthread_join(waiting, NULL);
        CHECK(waiter.got.kind == PL_RECEIVED_FD && waiter.got.fd == fd);
        CHECK_OK(pl_port_set_destroy(set));
        pl_port_set_release(set);
        close(fd);
    }
}

/* ---- woken_set_sleeps_again --------------------------------------------------------------------------- */
/* The wake-up eventfd is edge-triggered and never read: a set woken through it must still sleep the next time
 * (a level-triggered, unread eventfd would end every later sleep at once, and the receiver would spin). */

typedef struct { pl_port_t *port; } ws_arg_t;

static void *ws_send_later(void *raw) {
    ws_arg_t *arg = raw;
    sleep_us(20000);
    CHECK_OK(send_msg(arg->port, 1, NULL, PL_TIMEOUT_FOREVER));
    return NULL;
}

static void scenario_woken_set_sleeps_again(void) {
    pl_port_set_t *set = new_set();
    pl_port_t *port = new_port(4);
    CHECK_OK(pl_port_set_insert(set, port));
    ws_arg_t arg = { .port = port };
    pthread_t sender;
    start_thread(&sender, ws_send_later, &arg);
    unsigned char buffer[BIG_BUFFER];
    pl_received_t header;
    /* Timed: the receiver sleeps in the poller and the send wakes it through the eventfd. */
    CHECK_OK(pl_port_set_receive(set, &header, buffer, sizeof buffer, 1000 * MS));
    pthread_join(sender, NULL);
    uint64_t sleeps_before = 0, sleeps_after = 0;
    pl_port_set_wake_stats(set, &sleeps_before, NULL);
    int64_t start = now_ns();
    CHECK_STATUS(pl_port_set_receive(set, &header, buffer, sizeof buffer, 50 * MS), PL_ERR_TIMED_OUT);
    CHECK(now_ns() - start >= 50 * MS);
    pl_port_set_wake_stats(set, &sleeps_after, NULL);
    CHECK(sleeps_after - sleeps_before <= 3); /* one sleep until the deadline, not thousands */
    CHECK_OK(pl_port_destroy(port));
    CHECK_OK(pl_port_set_destroy(set));
    pl_port_set_release(set);
}

/* ---- emptied_ports ------------------------------------------------------------------------------------- */
/* A port emptied by a direct receive while it is in a set: a batch receive on the set goes on to the next
 * ready port instead of stopping, and the emptied port's next message queues it behind the ports that became
 * ready meanwhile (round-robin). */

static void scenario_emptied_ports(void) {
    unsigned char buffer[BIG_BUFFER];
    pl_received_t header, batch[8];
    uint32_t count = 0;
    for (int round = 0; round < 200; round++) {
        pl_port_set_t *set = new_set();
        pl_port_t *a = new_port(8), *b = new_port(8);
        CHECK_OK(pl_port_set_insert(set, a));
        CHECK_OK(pl_port_set_insert(set, b));
        CHECK_OK(send_msg(a, 1, NULL, 0));
        CHECK_OK(send_msg(b, 2, NULL, 0));
        CHECK_OK(pl_port_receive(a, &header, buffer, sizeof buffer, 0)); /* a empties behind the set's back */
        CHECK_OK(pl_port_set_receive_batch(set, batch, 8, buffer, sizeof buffer, &count));
        CHECK(count == 1 && batch[0].id == 2);

        /* Round-robin: a emptied directly, then b sent, then a sent: b is served first. */
        CHECK_OK(send_msg(a, 3, NULL, 0));
        CHECK_OK(pl_port_receive(a, &header, buffer, sizeof buffer, 0));
        CHECK_OK(send_msg(b, 4, NULL, 0));
        CHECK_OK(send_msg(a, 5, NULL, 0));
        CHECK_OK(pl_port_set_receive(set, &header, buffer, sizeof buffer, 0));
        CHECK(header.id == 4);
        CHECK_OK(pl_port_set_receive(set, &header, buffer, sizeof buffer, 0));
        CHECK(header.id == 5);
        CHECK_STATUS(pl_port_set_receive(set, &header, buffer, sizeof buffer, 0), PL_ERR_TIMED_OUT);
        CHECK_OK(pl_port_destroy(a));
        CHECK_OK(pl_port_destroy(b));
        CHECK_OK(pl_port_set_destroy(set));
        pl_port_set_release(set);
    }
}

/* ---- expired_timeout_looks --------------------------------------------------------------------------- */
/* A positive timeout that has passed by the receive's first check still looks at descriptor members once, as
 * a poll does: a readable descriptor is reported now, not a pass later. */

static void scenario_expired_timeout_looks(void) {
    for (int round = 0; round < 200; round++) {
        pl_port_set_t *set = new_set();
        int fd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC); /* readable from the start */
        CHECK(fd >= 0);
        CHECK_OK(pl_port_set_insert_fd(set, fd));
        pl_received_t header;
        CHECK_OK(pl_port_set_receive(set, &header, NULL, 0, 1)); /* 1 ns: over before the first check */
        CHECK(header.kind == PL_RECEIVED_FD && header.fd == fd);
        CHECK_OK(pl_port_set_destroy(set));
        pl_port_set_release(set);
        close(fd);
    }
}

/* ---- queued_only --------------------------------------------------------------------------------------- */
/* pl_port_set_receive_queued takes what is queued and never looks at the descriptors (a run loop drains with it);
 * pl_port_set_ready_marks changes when a port becomes ready, and only then (a spinning loop reads it). */

static void scenario_queued_only(void) {
    pl_port_set_t *set = new_set();
    pl_port_t *port = new_port(4);
    CHECK_OK(pl_port_make_send(port));
    CHECK_OK(pl_port_set_insert(set, port));
    int fd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC); /* readable from the start */
    CHECK(fd >= 0);
    CHECK_OK(pl_port_set_insert_fd(set, fd));
    unsigned char buffer[4096];
    pl_received_t header;
    CHECK_STATUS(pl_port_set_receive_queued(NULL, &header, buffer, sizeof buffer), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_set_receive_queued(set, NULL, buffer, sizeof buffer), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_set_receive_queued(set, &header, NULL, 8), PL_ERR_INVALID_ARG);

    /* Nothing queued: no message, and the readable descriptor is not looked at... */
    uint32_t marks = pl_port_set_ready_marks(set);
    CHECK_STATUS(pl_port_set_receive_queued(set, &header, buffer, sizeof buffer), PL_ERR_TIMED_OUT);
    CHECK(pl_port_set_ready_marks(set) == marks);
    /* ...while a poll finds it. */
    CHECK_OK(pl_port_set_receive(set, &header, buffer, sizeof buffer, 0));
    CHECK(header.kind == PL_RECEIVED_FD && header.fd == fd);

    /* A message marks the set and is taken, in order with the next. */
    CHECK_OK(send_msg(port, 41, NULL, 0));
    uint32_t after_first = pl_port_set_ready_marks(set);
    CHECK(after_first != marks);
    CHECK_OK(send_msg(port, 42, NULL, 0)); /* the port is ready already: no new mark */
    CHECK(pl_port_set_ready_marks(set) == after_first);
    CHECK_OK(pl_port_set_receive_queued(set, &header, buffer, sizeof buffer));
    CHECK(header.kind == PL_RECEIVED_MESSAGE && header.id == 41);
    CHECK_OK(pl_port_set_receive_queued(set, &header, buffer, sizeof buffer));
    CHECK(header.kind == PL_RECEIVED_MESSAGE && header.id == 42);
    CHECK_STATUS(pl_port_set_receive_queued(set, &header, buffer, sizeof buffer), PL_ERR_TIMED_OUT);
    CHECK_OK(send_msg(port, 43, NULL, 0)); /* ready again: marked again */
    CHECK(pl_port_set_ready_marks(set) != after_first);
    CHECK_OK(pl_port_set_receive_queued(set, &header, buffer, sizeof buffer));
    CHECK(header.id == 43);

    CHECK_OK(pl_port_set_destroy(set));
    pl_port_set_release(set);
    CHECK_OK(pl_port_release_send(port));
    CHECK_OK(pl_port_destroy(port));
    close(fd);
}

/* ---- misuse ---------------------------------------------------------------------------------------------- */
/* Misuse that the header promises to refuse: a send right released once too often is refused without
 * touching the receive right's reference; a NULL thread name is EINVAL. */

static void scenario_misuse(void) {
    pl_port_t *port = new_port(4);
    CHECK_STATUS(pl_port_release_send(port), PL_ERR_INVALID_NAME);
    CHECK_OK(pl_port_make_send(port));
    CHECK_OK(pl_port_release_send(port));
    CHECK_STATUS(pl_port_release_send(port), PL_ERR_INVALID_NAME);
    CHECK(pl_port_send_right_count(port) == 0);
    CHECK_OK(send_msg(port, 1, NULL, 0)); /* the port is still alive and whole */
    CHECK(pl_port_message_count(port) == 1);
    /* Destroyed while a send right keeps the memory: a second destroy is refused. */
    CHECK_OK(pl_port_make_send(port));
    CHECK_OK(pl_port_destroy(port));
    CHECK_STATUS(pl_port_destroy(port), PL_ERR_INVALID_NAME);
    CHECK_OK(pl_port_release_send(port));
    CHECK(pl_thread_set_name(NULL) == EINVAL);
    CHECK(pl_port_release_send(NULL) == PL_ERR_INVALID_ARG);
}

/* ---- requeue_race ------------------------------------------------------------------------------------ */
/* Receivers on a set that put some of what they take back at the head of its port (as a run loop does when a
 * source leaves mid-batch), racing senders, batch receives and a membership that comes and goes: every
 * message is received for good exactly once, reply rights included. */

typedef struct {
    pl_port_set_t *set;
    pl_port_t *port;
    pl_port_t *reply;
    atomic_uint *kept;          /* messages received for good */
    unsigned char *seen;        /* per id, set once */
    atomic_bool *stop;
    uint64_t seed;
} rq_arg_t;

#define RQ_MESSAGES 20000

static void rq_keep(rq_arg_t *arg, pl_received_t *header, const unsigned char *payload) {
    CHECK(message_intact(header, payload));
    if (header->id >= 0 && header->id < RQ_MESSAGES) {
        unsigned char before = __atomic_exchange_n(&arg->seen[header->id], 1, __ATOMIC_RELAXED);
        CHECK(before == 0); /* never twice */
    }
    release_reply(header);
    atomic_fetch_add(arg->kept, 1);
}

static void *rq_receiver(void *raw) {
    rq_arg_t *arg = raw;
    unsigned char buffer[BIG_BUFFER];
    pl_received_t batch[16];
    unsigned char *payloads = malloc(16 * 4104);
    while (!atomic_load(arg->stop)) {
        uint32_t count = 0;
        pl_status_t status = pl_port_set_receive_batch(arg->set, batch, 16, payloads, 16 * 4104, &count);
        if (status == PL_OK) {
            /* Keep a prefix, put the rest back, last first. */
            uint32_t keep = rnd(&arg->seed) % (count + 1);
            for (uint32_t i = 0; i < keep; i++) rq_keep(arg, &batch[i], payloads + batch[i].offset);
            for (uint32_t i = count; i > keep; i--) {
                pl_received_t *h = &batch[i - 1];
                pl_status_t back = pl_port_requeue(arg->port, h, payloads + h->offset);
                CHECK_OK(back);
                if (back != PL_OK) release_reply(h);
            }
            continue;
        }
        pl_received_t header;
        status = pl_port_set_receive(arg->set, &header, buffer, sizeof buffer, 2 * MS);
        if (status == PL_OK && header.kind == PL_RECEIVED_MESSAGE) {
            if (rnd(&arg->seed) % 4 == 0) {
                CHECK_OK(pl_port_requeue(arg->port, &header, buffer));
            } else {
                rq_keep(arg, &header, buffer);
            }
        }
    }
    free(payloads);
    return NULL;
}

static void *rq_sender(void *raw) {
    rq_arg_t *arg = raw;
    for (int32_t id = 0; id < RQ_MESSAGES; id++) {
        CHECK_OK(send_msg(arg->port, id, id % 5 == 0 ? arg->reply : NULL, PL_TIMEOUT_FOREVER));
    }
    return NULL;
}

static void *rq_toggler(void *raw) {
    rq_arg_t *arg = raw;
    while (!atomic_load(arg->stop)) {
        pl_status_t status = pl_port_set_extract(arg->set, arg->port);
        CHECK(status == PL_OK);
        sleep_us(50);
        CHECK_OK(pl_port_set_insert(arg->set, arg->port));
        sleep_us(200);
    }
    return NULL;
}

static void scenario_requeue_race(void) {
    pl_port_set_t *set = new_set();
    pl_port_t *port = new_port(64), *reply = new_port(4);
    CHECK_OK(pl_port_set_insert(set, port));
    atomic_uint kept = 0;
    atomic_bool stop = false;
    unsigned char *seen = calloc(RQ_MESSAGES, 1);
    enum { RECEIVERS = 3 };
    rq_arg_t args[RECEIVERS + 2];
    pthread_t threads[RECEIVERS + 2];
    for (int i = 0; i < RECEIVERS + 2; i++) {
        args[i] = (rq_arg_t){ .set = set, .port = port, .reply = reply, .kept = &kept, .seen = seen, .stop = &stop,
                              .seed = 0x2545F4914F6CDD1Dull * (uint64_t)(i + 1) };
    }
    for (int i = 0; i < RECEIVERS; i++) start_thread(&threads[i], rq_receiver, &args[i]);
    start_thread(&threads[RECEIVERS], rq_sender, &args[RECEIVERS]);
    start_thread(&threads[RECEIVERS + 1], rq_toggler, &args[RECEIVERS + 1]);
    pthread_join(threads[RECEIVERS], NULL);
    CHECK(wait_for_count(&kept, RQ_MESSAGES, 30000 * MS));
    atomic_store(&stop, true);
    for (int i = 0; i < RECEIVERS; i++) pthread_join(threads[i], NULL);
    pthread_join(threads[RECEIVERS + 1], NULL);
    CHECK(atomic_load(&kept) == RQ_MESSAGES);
    CHECK(pl_port_message_count(port) == 0);
    CHECK(pl_port_send_right_count(reply) == 0); /* every reply right released once */
    for (int i = 0; i < RQ_MESSAGES; i++) CHECK(seen[i] == 1);
    free(seen);
    CHECK_OK(pl_port_destroy(port));
    CHECK_OK(pl_port_destroy(reply));
    CHECK_OK(pl_port_set_destroy(set));
    pl_port_set_release(set);
}

/* ---- blocking_senders_fifo ------------------------------------------------------------------------ */
/* Four senders stream into one port with a small queue limit, blocking on the full queue, and one receiver takes
 * every message: directly (waiting as long as needed, slowly, or with short timeouts it retries) or through a set
 * the port is in. Each message arrives once and in its sender's order. One sender sends with short timeouts and
 * tries again when they pass, so that timed-out waits mix with signalled ones in the count of sender wake-ups a
 * dequeue keeps. A receiver that waits more than BS_STALL_NS for the next message prints the port's state (a sender
 * left asleep on a port with room is a lost wake-up) and ends the round by destroying the port. */

enum { BS_SENDERS = 4 };
#define BS_STALL_NS (3000 * MS)

typedef struct {
    pl_port_t *port;           /* a send right of this thread's own */
    uint32_t sender, messages;
    bool timed;                /* short timeouts, tried again */
    atomic_bool *stop;
    atomic_uint sent;
    uint64_t seed;
} bs_sender_t;

static void *bs_send(void *raw) {
    bs_sender_t *arg = raw;
    for (uint32_t seq = 0; seq < arg->messages && !atomic_load(arg->stop); seq++) {
        uint32_t words[2] = { arg->sender, seq };
        pl_status_t status;
        do {
            int64_t timeout = arg->timed ? (int64_t)(rnd(&arg->seed) % 200) * 1000 : PL_TIMEOUT_FOREVER; /* 0–0.2 ms */
            status = pl_port_send(arg->port, (int32_t)arg->sender, words, sizeof words, NULL, timeout);
        } while (status == PL_ERR_TIMED_OUT && !atomic_load(arg->stop));
        if (status != PL_OK) {
            if (!atomic_load(arg->stop)) CHECK_OK(status);
            break;
        }
        atomic_fetch_add(&arg->sent, 1);
    }
    pl_port_release_send(arg->port);
    return NULL;
}

static void bs_print_state(pl_port_t *port, const char *mode, const bs_sender_t *senders, const uint32_t *next) {
    pthread_mutex_lock(&port->lock);
    fprintf(stderr, "blocking_senders_fifo (%s, limit %u): no message for %.0f ms: count %u, waiting senders %u, "
                    "sender wakes pending %u, waiting receivers %u\n", mode, port->qlimit, (double)BS_STALL_NS / 1e6,
            port->count, port->waiting_senders, port->sender_wakes_pending, port->waiting_receivers);
    pthread_mutex_unlock(&port->lock);
    for (int s = 0; s < BS_SENDERS; s++) {
        fprintf(stderr, "  sender %d: sent %u of %u, received %u\n", s, atomic_load(&senders[s].sent),
                senders[s].messages, next[s]);
    }
}

static void scenario_blocking_senders_fifo(void) {
    static const uint32_t limits[] = { 1, 2, 1024 };
    static const char *const modes[] = { "direct", "slow", "timeouts", "set" };
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
        for (int mode = 0; mode < 4; mode++) {
            const uint32_t per_sender = limits[l] > 2 ? 10000 : 1500;
            int64_t round_start = now_ns();
            pl_port_t *port = new_port(limits[l]);
            pl_port_set_t *set = mode == 3 ? new_set() : NULL;
            if (set != NULL) CHECK_OK(pl_port_set_insert(set, port));
            atomic_bool stop = false;
            bs_sender_t senders[BS_SENDERS];
            pthread_t threads[BS_SENDERS];
            for (int s = 0; s < BS_SENDERS; s++) {
                CHECK_OK(pl_port_make_send(port));
                senders[s] = (bs_sender_t){ .port = port, .sender = (uint32_t)s, .messages = per_sender,
                                            .timed = s == BS_SENDERS - 1, .stop = &stop,
                                            .seed = seed + (uint64_t)s * 0x2545F4914F6CDD1Dull };
                atomic_init(&senders[s].sent, 0);
                start_thread(&threads[s], bs_send, &senders[s]);
            }
            uint32_t next[BS_SENDERS] = { 0 };
            bool stalled = false;
            for (uint32_t n = 0; n < BS_SENDERS * per_sender && !stalled; n++) {
                pl_received_t header;
                uint32_t words[2] = { 0, 0 };
                int64_t waited_since = now_ns();
                pl_status_t status;
                for (;;) {
                    int64_t left = BS_STALL_NS - (now_ns() - waited_since);
                    if (left <= 0) { status = PL_ERR_TIMED_OUT; break; }
                    int64_t timeout = left;
                    if (mode == 2) timeout = rnd(&seed) % 8 == 0 ? 0 : (int64_t)(rnd(&seed) % 300) * 1000;
                    if (timeout > left) timeout = left;
                    status = set != NULL ? pl_port_set_receive(set, &header, words, sizeof words, timeout)
                                         : pl_port_receive(port, &header, words, sizeof words, timeout);
                    if (status != PL_ERR_TIMED_OUT) break;
                }
                if (status == PL_ERR_TIMED_OUT) {
                    CHECK(!"a receive waited for a message longer than BS_STALL_NS");
                    bs_print_state(port, modes[mode], senders, next);
                    stalled = true;
                    break;
                }
                CHECK_OK(status);
                if (status != PL_OK) { stalled = true; break; }
                uint32_t sender = words[0];
                if (header.size != sizeof words || sender >= BS_SENDERS || (uint32_t)header.id != sender) {
                    CHECK(!"a message not as sent");
                    continue;
                }
                if (words[1] != next[sender]) {
                    fprintf(stderr, "blocking_senders_fifo (%s, limit %u): sender %u's message %u came when %u was "
                                    "next\n", modes[mode], limits[l], sender, words[1], next[sender]);
                    CHECK(!"a sender's messages out of order, lost or repeated");
                }
                next[sender] = words[1] + 1;
                if (mode == 1 && rnd(&seed) % 128 == 0) sleep_us(rnd(&seed) % 200); /* the senders fill the queue */
            }
            if (stalled) {
                atomic_store(&stop, true);
                CHECK_OK(pl_port_destroy(port)); /* wakes a sender left asleep: invalid-destination */
            }
            for (int s = 0; s < BS_SENDERS; s++) pthread_join(threads[s], NULL);
            if (!stalled) {
                for (int s = 0; s < BS_SENDERS; s++) CHECK(next[s] == per_sender);
                pl_received_t header;
                CHECK_STATUS(pl_port_receive(port, &header, NULL, 0, 0), PL_ERR_TIMED_OUT);
                CHECK_OK(pl_port_destroy(port));
            }
            if (set != NULL) {
                CHECK(pl_port_set_member_count(set) == 0);
                CHECK_OK(pl_port_set_destroy(set));
                pl_port_set_release(set);
            }
            if (verbose) printf("    %-8s limit %-4u %6.0f ms\n", modes[mode], limits[l], (double)(now_ns() - round_start) / 1e6);
            seed += 0x9E3779B97F4A7C15ull;
        }
    }
}

/* ---- lost_sender_signal -------------------------------------------------------------------------- */
/* A signal to a waiting sender that wakes nobody (glibc's condition variable has been known to lose one) leaves the
 * sender's wake counted as pending, and no later dequeue signals it. Made by hand: a sender waits on a full port, the
 * test counts a signal for it that is never sent, and the receiver takes every queued message, directly, through a
 * set, or in one batch. The sender looks for room again within a second, signalled or not, and its message comes;
 * before, it slept on with room in the port. */

typedef struct {
    pl_port_t *port; /* a send right of this thread's own */
    int64_t timeout_ns;
    _Atomic int64_t started; /* when it called send */
    pl_status_t status;
} ls_sender_t;

static void *ls_send(void *raw) {
    ls_sender_t *arg = raw;
    uint32_t word = 99;
    atomic_store(&arg->started, now_ns());
    arg->status = pl_port_send(arg->port, 9, &word, sizeof word, NULL, arg->timeout_ns);
    pl_port_release_send(arg->port);
    return NULL;
}

/* how: 0 direct, 1 through a set, 2 a batch through a set; 3 direct, the sender's timeout (900 ms) shorter than
 * its look for room: at its deadline it finds the room and sends, it does not time out. (Room made after that
 * deadline, on a machine slow enough, proves nothing: the round says so and checks nothing more.) */
static void lost_sender_signal_round(int how) {
    pl_port_t *port = new_port(4);
    pl_port_set_t *set = how == 1 || how == 2 ? new_set() : NULL;
    if (set != NULL) CHECK_OK(pl_port_set_insert(set, port));
    uint32_t word = 1;
    for (int32_t i = 0; i < 4; i++) CHECK_OK(pl_port_send(port, i, &word, sizeof word, NULL, 0));
    CHECK_OK(pl_port_make_send(port));
    ls_sender_t sender = { .port = port, .timeout_ns = (how == 3 ? 900 : 10000) * MS,
                           .status = PL_ERR_INVALID_ARG };
    pthread_t thread;
    start_thread(&thread, ls_send, &sender);
    bool waiting = false;
    for (int64_t since = now_ns(); !waiting && now_ns() - since < 5000 * MS;) {
        pthread_mutex_lock(&port->lock);
        waiting = port->waiting_senders == 1;
        if (waiting) port->sender_wakes_pending = 1; /* a signal counted for it, never sent */
        pthread_mutex_unlock(&port->lock);
        if (!waiting) sleep_us(1000);
    }
    CHECK(waiting);
    pl_received_t header;
    uint32_t words[8];
    if (how == 2) {
        pl_received_t headers[8];
        uint32_t got = 0; /* the four are queued: no wait */
        CHECK_OK(pl_port_set_receive_batch(set, headers, 8, words, sizeof words, &got));
        CHECK(got == 4);
    } else {
        for (int i = 0; i < 4; i++) {
            CHECK_OK(set != NULL ? pl_port_set_receive(set, &header, words, sizeof words, 1000 * MS)
                                 : pl_port_receive(port, &header, words, sizeof words, 1000 * MS));
            CHECK(header.id == i);
        }
    }
    if (how == 3 && now_ns() >= atomic_load(&sender.started) + sender.timeout_ns) {
        fprintf(stderr, "  lost_sender_signal (3): room made after the sender's deadline, nothing to check\n");
        pthread_join(thread, NULL);
        CHECK_OK(pl_port_destroy(port));
        return;
    }
    pl_status_t status = set != NULL ? pl_port_set_receive(set, &header, words, sizeof words, 3000 * MS)
                                     : pl_port_receive(port, &header, words, sizeof words, 3000 * MS);
    if (status != PL_OK) fprintf(stderr, "lost_sender_signal (%d): the waiting sender's message did not come\n", how);
    CHECK_OK(status);
    CHECK(status != PL_OK || (header.id == 9 && words[0] == 99));
    if (status != PL_OK) CHECK_OK(pl_port_destroy(port)); /* the sender returns, with invalid-destination */
    pthread_join(thread, NULL);
    CHECK(status != PL_OK || sender.status == PL_OK);
    if (status == PL_OK) CHECK_OK(pl_port_destroy(port));
    if (set != NULL) {
        CHECK_OK(pl_port_set_destroy(set));
        pl_port_set_release(set);
    }
}

static void scenario_lost_sender_signal(void) {
    for (int how = 0; how < 4; how++) lost_sender_signal_round(how);
}

/* ---- descriptors ------------------------------------------------------------------------------------- */
/* A set holds exactly three descriptors (epoll, wake-up eventfd, timerfd). With the process's descriptors
 * used up, creating a set fails with PL_ERR_SYSTEM naming each of its three system calls in turn, EMFILE in
 * errno, never exits, leaks nothing, and works again once descriptors are free. */

static int open_descriptors(void) {
    int count = 0;
    for (int fd = 0; fd < 4096; fd++) {
        if (fcntl(fd, F_GETFD) != -1) count++;
    }
    return count;
}

static void scenario_descriptors(void) {
    int before = open_descriptors();
    pl_port_set_t *set = new_set();
    CHECK(open_descriptors() - before == 3);
    CHECK_OK(pl_port_set_destroy(set));
    pl_port_set_release(set);
    CHECK(open_descriptors() == before);

    /* Use every descriptor up under a low limit, then free them one at a time. */
    struct rlimit saved, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    low = saved;
    low.rlim_cur = (rlim_t)before + 32;
    if (low.rlim_cur > saved.rlim_cur || setrlimit(RLIMIT_NOFILE, &low) != 0) return; /* cannot lower it here */
    enum { HELD = 256 };
    int held[HELD], n = 0;
    while (n < HELD) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) break;
        held[n++] = fd;
    }
    CHECK(n < HELD);
    const char *expected[] = { "epoll_create1", "eventfd", "timerfd_create" };
    for (int free_count = 0; free_count <= 3; free_count++) {
        for (int i = 0; i < free_count; i++) close(held[--n]);
        int open_now = open_descriptors();
        pl_port_set_t *attempt = NULL;
        errno = 0;
        pl_status_t status = pl_port_set_create(&attempt);
        if (free_count < 3) {
            CHECK_STATUS(status, PL_ERR_SYSTEM);
            CHECK(errno == EMFILE);
            CHECK(attempt == NULL);
            const char *call = pl_last_system_call();
            CHECK(call != NULL && strcmp(call, expected[free_count]) == 0);
            CHECK(open_descriptors() == open_now);
        } else {
            CHECK_OK(status);
            CHECK_OK(pl_port_set_destroy(attempt));
            pl_port_set_release(attempt);
        }
        for (int i = 0; i < free_count; i++) {
            held[n] = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (held[n] >= 0) n++;
        }
    }
    for (int i = 0; i < n; i++) close(held[i]);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    pl_port_set_t *again = new_set(); /* descriptors are back: sets work again */
    CHECK_OK(pl_port_set_destroy(again));
    pl_port_set_release(again);
}

/* A connection that has given out nearly every handle starts again from 1, skipping handles still live. */
static void scenario_handle_wrap(void) {
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) == 0);
    pl_conn_t *conn = pl_conn_new(pair[0], true);
    CHECK(conn != NULL);
    pl_port_t *ports[4];
    for (int i = 0; i < 4; i++) CHECK_OK(pl_port_create(4, 64, &ports[i]));
    pl_wire_right_t rights[4];
    bool dead;
    pthread_mutex_lock(&conn->lock);
    CHECK_OK(pl_conn_export_locked(conn, ports[0], &rights[0], &dead)); /* handle 1, kept live */
    conn->next_handle = PL_WIRE_HANDLE_NONE - 2;                        /* as after 2^32 - 4 more */
    for (int i = 1; i < 4; i++) CHECK_OK(pl_conn_export_locked(conn, ports[i], &rights[i], &dead));
    pthread_mutex_unlock(&conn->lock);
    CHECK(rights[0].handle == 1);
    CHECK(rights[1].handle == PL_WIRE_HANDLE_NONE - 2);
    CHECK(rights[2].handle == PL_WIRE_HANDLE_NONE - 1);
    CHECK(rights[3].handle == 2); /* 2^32 - 1 is never a handle, and 1 is still live */
    pl_conn_teardown(conn, "done");
    for (int i = 0; i < 4; i++) pl_port_destroy(ports[i]);
    close(pair[1]);
    pl_conn_release(conn);
}

/* How many errors memcheck has found in this process (a child's count starts from its parent's at the fork), or 0
 * when not under memcheck. It counts them even where --child-silent-after-fork keeps them from being printed. Only
 * memcheck answers a request for a byte's validity bits: other tools count their own reports, some of which
 * helgrind-verdict.sh lets pass. */
static unsigned memcheck_errors(void) {
#ifdef PL_STRESS_HAVE_MEMCHECK_H
    unsigned char probe = 0, bits;
    if (VALGRIND_GET_VBITS(&probe, &bits, 1) != 1) return 0;
    return VALGRIND_COUNT_ERRORS;
#else
    return 0;
#endif
}

/* ---- helper children's memcheck errors ---------------------------------------------------------------- */
/* `make stress-valgrind` silences forked children (--child-silent-after-fork), and a child's exit status cannot say
 * that memcheck found errors in it: with --error-exitcode=1 valgrind makes it 1 whatever the child passed to _exit,
 * the status it also gives for the parent's memory the child inherited, which the scenarios accept. So a helper
 * child forked by fork_helper counts memcheck's errors from its fork, and when it ends (child_exit, or exit(),
 * whose handler below runs after the library's exit flush) says how many it found and adds one to a counter shared
 * by every process of the program (set up in main), which fails the running scenario. */
static unsigned child_errors_at_fork; /* memcheck's count in the parent just before the fork */
static bool in_helper_child;          /* set in a child of fork_helper */
static atomic_int *children_with_memcheck_errors;

/* Whether memcheck found errors in this process since its count was `since`; if so, says how many and how to see
 * them (snprintf and write only, for a child of a process with threads). `whose`: the process, for the message. */
static bool memcheck_found_errors(unsigned since, const char *whose) {
    unsigned errors = memcheck_errors() - since;
    if (errors == 0) return false;
    char line[320];
    int length = snprintf(line, sizeof line, "FAIL %s: memcheck errors in %s, not printed: %u; to see them, run "
                          "`valgrind -q --child-silent-after-fork=no pl_stress %s`\n", current_scenario, whose,
                          errors, current_scenario);
    if (length > 0) {
        ssize_t written = write(STDERR_FILENO, line, (size_t)length < sizeof line ? (size_t)length : sizeof line - 1);
        (void)written;
    }
    return true;
}

/* In a helper child that is ending: memcheck's errors since the fork fail the scenario. Once per process. */
static void child_memcheck_verdict(void) {
    if (!in_helper_child) return;
    in_helper_child = false;
    if (memcheck_found_errors(child_errors_at_fork, "a child process") && children_with_memcheck_errors != NULL) {
        atomic_fetch_add(children_with_memcheck_errors, 1);
    }
}

/* Registered before every other atexit handler (101, the first constructor priority a program may use;
 * eh_register_late_handler takes the next), so that it runs last: after the library's exit flush and after the
 * handler that sends once the flush is over. */
__attribute__((constructor(101))) static void register_child_memcheck_verdict(void) {
    atexit(child_memcheck_verdict);
}

/* What a helper child calls instead of _exit. */
static _Noreturn void child_exit(int status) {
    child_memcheck_verdict();
    _exit(status);
}

/* fork(), for a helper child that ends through child_exit or exit(). Memcheck's count is read before the fork, so
 * that errors in the library's fork handlers count as the child's (an error another thread of the parent makes in
 * that moment counts in both: it is still an error). */
static pid_t fork_helper(void) {
    unsigned errors_before = memcheck_errors();
    pid_t child = fork();
    if (child == 0) {
        child_errors_at_fork = errors_before;
        in_helper_child = true;
    }
    return child;
}

/* fork_helper(), where the scenario cannot go on without the child: a failed fork ends the calling process at once (a
 * scenario's own process, which then fails its scenario; or the stress program) rather than leave -1 as the child's
 * pid, which kill() would take for every process there is. */
static pid_t fork_or_end(void) {
    pid_t child = fork_helper();
    if (child < 0) {
        fprintf(stderr, "%s: fork: %s\n", current_scenario, strerror(errno));
        _exit(6);
    }
    return child;
}

/* Removes a scenario's namespace directory with what service "svc" may have left in it (its lock, its socket). */
static void remove_service_dir(const char *dir) {
    char path[96];
    snprintf(path, sizeof path, "%s/.svc.lock", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/svc", dir);
    unlink(path);
    rmdir(dir);
}

/* A child forked after the transport started makes a transport of its own: it looks the parent's service up and
 * sends to it, and nothing it does reaches the parent's epoll (which fork would otherwise share). */
static void fork_child_body(void) {
    char dir[] = "/tmp/pl-stress-fork-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pl_port_t *port;
    CHECK_OK(pl_port_create(64, 64, &port));
    CHECK_OK(pl_service_check_in(dir, "svc", port, NULL));
    pid_t child = fork_or_end();
    if (child == 0) {
        pl_port_t *service = NULL;
        pl_status_t status = pl_service_look_up(dir, "svc", 5000 * MS, &service);
        if (status != PL_OK) {
            fprintf(stderr, "fork_child: the child's look-up failed: %s\n", pl_status_describe(status));
            child_exit(2);
        }
        char byte = 7;
        for (int i = 0; i < 200; i++) {
            status = pl_port_send(service, i, &byte, 1, NULL, PL_TIMEOUT_FOREVER);
            if (status != PL_OK) {
                fprintf(stderr, "fork_child: the child's send %d failed: %s\n", i, pl_status_describe(status));
                child_exit(3);
            }
        }
        child_exit(0);
    }
    pl_received_t out;
    char buffer[64];
    int received = 0;
    while (received < 200 && pl_port_receive(port, &out, buffer, sizeof buffer, 10000 * MS) == PL_OK) {
        CHECK(out.id == received && out.sender.pid == child);
        received++;
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    /* 2 and 3 are the child's own failures. (Under valgrind the child also reports the parent's memory it
     * inherited as leaked, and exits 1: that is valgrind's verdict on the copy, not the child's.) */
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 2 && WEXITSTATUS(status) != 3);
    CHECK(received == 200);

    /* A child that lives on holds none of the service's descriptors (its fork handler closed its copies): the
     * parent withdraws the name, lock and all, and checks it in again at once. */
    pid_t sleeper = fork_or_end();
    if (sleeper == 0) {
        for (;;) pause();
    }
    CHECK_OK(pl_port_destroy(port));
    pl_port_t *again;
    CHECK_OK(pl_port_create(64, 64, &again));
    int64_t begun = now_ns();
    pl_status_t checked_in = pl_service_check_in(dir, "svc", again, NULL);
    if (checked_in != PL_OK) fprintf(stderr, "fork_child: checking in again: %s\n", pl_status_describe(checked_in));
    CHECK(checked_in == PL_OK);
    CHECK(now_ns() - begun < 1000 * MS); /* not after the wait for this process's own withdrawals ran out */
    CHECK(kill(sleeper, SIGKILL) == 0);
    CHECK(waitpid(sleeper, &status, 0) == sleeper);
    CHECK_OK(pl_port_destroy(again));
    remove_service_dir(dir);
}

/* Forks a child that checks "svc" in under `dir` with a port of the given limits, says so, and waits to be killed
 * (or for this process to end); returns once the name is checked in. The child allocates and starts threads: call
 * it before this process has threads of its own. */
static pid_t fork_idle_service(const char *dir, uint32_t queue_limit, uint32_t max_size) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = fork_or_end();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        pl_port_t *port;
        if (pl_port_create(queue_limit, max_size, &port) != PL_OK || pl_service_check_in(dir, "svc", port, NULL) != PL_OK) {
            child_exit(2);
        }
        char byte = 1;
        if (write(ready[1], &byte, 1) != 1) child_exit(3);
        for (;;) pause(); /* the parent kills it */
    }
    char byte = 0;
    CHECK(read(ready[0], &byte, 1) == 1);
    close(ready[0]);
    close(ready[1]);
    return child;
}

/* What descriptor `fd` of this process is open on, as /proc/self/fd says: the length written to `target` (not
 * terminated), or -1 when it is not open. Async-signal-safe: for a child of fork(). */
static ssize_t descriptor_target(int fd, char *target, size_t size) {
    char name[32] = "/proc/self/fd/";
    char digits[12];
    int count = 0;
    for (int value = fd; count == 0 || value > 0; value /= 10) digits[count++] = (char)('0' + value % 10);
    size_t at = strlen(name);
    while (count > 0) name[at++] = digits[--count];
    name[at] = '\0';
    return readlink(name, target, size);
}

/* How far a child of fork() looks: these scenarios' processes use a few dozen descriptors. */
#define SCANNED_DESCRIPTORS 1024

/* Whether this process has a descriptor open on `path` (async-signal-safe). */
static bool holds_descriptor_on(const char *path) {
    size_t length = strlen(path);
    for (int fd = 0; fd < SCANNED_DESCRIPTORS; fd++) {
        char target[256];
        ssize_t n = descriptor_target(fd, target, sizeof target);
        if (n == (ssize_t)length && memcmp(target, path, length) == 0) return true;
    }
    return false;
}

/* Forks a child that answers `check(what)` and exits: 1 (true), 0 (false), or -1 if it could not be forked or said
 * nothing. The answer comes through a pipe, since valgrind replaces a child's exit status (it finds the memory the
 * child inherited leaked). `check` must be async-signal-safe if the process has threads. */
static int in_child(bool (*check)(const char *what), const char *what) {
    int report[2];
    CHECK(pipe2(report, O_CLOEXEC) == 0);
    pid_t child = fork_helper();
    CHECK(child >= 0);
    if (child == 0) {
        char answer = check(what) ? 1 : 0;
        child_exit(write(report[1], &answer, 1) == 1 ? 0 : 2);
    }
    close(report[1]);
    char answer = 0;
    ssize_t n = -1;
    if (child > 0) {
        do n = read(report[0], &answer, 1); while (n < 0 && errno == EINTR);
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
    }
    close(report[0]);
    return n == 1 ? answer : -1;
}

/* A thread that does something with a namespace over and over, beside forks. */
typedef struct {
    const char *dir;
    atomic_bool stop;
    int rounds, failures;
    pthread_t thread;
} churn_t;

static void churn_start(churn_t *churn, const char *dir, void *(*body)(void *)) {
    *churn = (churn_t){ .dir = dir };
    atomic_init(&churn->stop, false);
    CHECK(pthread_create(&churn->thread, NULL, body, churn) == 0);
}

static void churn_stop(churn_t *churn) {
    atomic_store(&churn->stop, true);
    CHECK(pthread_join(churn->thread, NULL) == 0);
}

/* Forks 100 children (in 20 s at most), each of which exits at once, after its fork handler: how many found
 * something open that they must not hold (`holds`, async-signal-safe, given `what`). *out_forks: how many forked. */
static int children_holding(bool (*holds)(const char *what), const char *what, int *out_forks) {
    int forks = 0, holding = 0;
    int64_t deadline = now_ns() + 20000 * MS;
    while (forks < 100 && now_ns() < deadline) {
        int answer = in_child(holds, what);
        CHECK(answer >= 0);
        if (answer < 0) break;
        holding += answer;
        forks++;
    }
    *out_forks = forks;
    return holding;
}

/* Checks "svc" in and destroys its port until told to stop. */
static void *check_in_churn(void *arg) {
    churn_t *churn = arg;
    while (!atomic_load(&churn->stop)) {
        pl_port_t *port;
        if (pl_port_create(16, 16, &port) != PL_OK) { churn->failures++; break; }
        pl_status_t status = pl_service_check_in(churn->dir, "svc", port, NULL);
        if (status != PL_OK) {
            if (churn->failures++ < 3) {
                fprintf(stderr, "fork_during_check_in: round %d: %s\n", churn->rounds, pl_status_describe(status));
            }
        }
        pl_port_destroy(port);
        churn->rounds++;
    }
    return NULL;
}

/* 100 children forked while another thread checks a name in and withdraws it, over and over: none holds the name's
 * lock file once its fork handler has run (such a child would keep the parent from checking the name in again for
 * as long as it lives), and the check-ins succeed (but for a child not yet through its handler 50 ms after its fork).
 * A check-in's descriptors are made while fork() is held off, on a service the fork handler closes in the child. */
static void fork_during_check_in_body(void) {
    char dir[] = "/tmp/pl-stress-forkcheckin-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    /* As /proc names it: the directory's real path (a temporary directory may be reached through a link). */
    char real_dir[PATH_MAX], lock_path[PATH_MAX + 16];
    CHECK(realpath(dir, real_dir) != NULL);
    snprintf(lock_path, sizeof lock_path, "%s/.svc.lock", real_dir);
    churn_t churn;
    churn_start(&churn, dir, check_in_churn);
    int forks = 0;
    int holding = children_holding(holds_descriptor_on, lock_path, &forks);
    churn_stop(&churn);
    if (holding > 0) fprintf(stderr, "fork_during_check_in: %d of %d children held the lock\n", holding, forks);
    if (churn.failures > 0) {
        fprintf(stderr, "fork_during_check_in: %d of %d check-ins failed\n", churn.failures, churn.rounds);
    }
    CHECK(holding == 0);
    CHECK(forks > 0 && churn.rounds > 0);
    /* A check-in fails only if a child has not run its fork handler 50 ms after the fork (a child not scheduled for
     * that long, on a loaded machine: 18 of 23,244 once, beside a compiler and valgrind). Without that wait, some 500
     * of 6,000 check-ins fail. */
    CHECK(churn.failures * 100 <= churn.rounds);
    remove_service_dir(dir);
}

typedef struct {
    pl_port_t *port;
    int64_t delay_ns;
    atomic_bool running;      /* the destroying thread has started */
    atomic_bool go;           /* the check-in begins */
} delayed_destroy_t;

/* Destroys the port `delay_ns` after the check-in begins. Yields while it waits: valgrind runs one thread at a time.
 * Says it runs first: a thread valgrind has not yet run when the check-in begins would start only after it. */
static void *destroy_after_delay(void *arg) {
    delayed_destroy_t *destroy = arg;
    atomic_store(&destroy->running, true);
    while (!atomic_load(&destroy->go)) sched_yield();
    int64_t until = now_ns() + destroy->delay_ns;
    while (now_ns() < until) sched_yield();
    pl_port_destroy(destroy->port);
    return NULL;
}

/* Ports destroyed by another thread at every moment of their check-in: each check-in succeeds (the service is then
 * withdrawn with the port) or says the port is dead, and the name is free again afterwards. The port learns of its
 * service in the same hold of the transport's lock that lists the service, so a withdrawal never meets a service
 * still being checked in. */
static void destroy_during_check_in_body(void) {
    char dir[] = "/tmp/pl-stress-destroycheckin-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    /* The delays span twice an undisturbed check-in's time (the fastest of five, of names not just withdrawn),
     * however slow this machine or valgrind makes it. */
    int64_t check_in_ns = INT64_MAX;
    for (int i = 0; i < 5; i++) {
        char name[8], lock_path[96];
        snprintf(name, sizeof name, "cal%d", i);
        pl_port_t *port;
        CHECK_OK(pl_port_create(16, 16, &port));
        int64_t begun = now_ns();
        CHECK_OK(pl_service_check_in(dir, name, port, NULL));
        int64_t took = now_ns() - begun;
        if (took < check_in_ns) check_in_ns = took;
        CHECK_OK(pl_port_destroy(port));
        snprintf(lock_path, sizeof lock_path, "%s/.%s.lock", dir, name);
        unlink(lock_path);
    }
    /* Until both outcomes have been seen a while (or for 3 s at most). */
    int succeeded = 0, refused = 0, rounds = 0;
    int64_t deadline = now_ns() + 3000 * MS;
    unsigned seed = 7;
    while (rounds < 3000 && now_ns() < deadline && (succeeded < 20 || refused < 20)) {
        pl_port_t *port;
        CHECK_OK(pl_port_create(16, 16, &port));
        CHECK_OK(pl_port_make_send(port)); /* keeps the memory the check-in uses past the destruction */
        delayed_destroy_t destroy = { .port = port, .delay_ns = rand_r(&seed) % (2 * check_in_ns + 1) };
        atomic_init(&destroy.go, false);
        atomic_init(&destroy.running, false);
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, destroy_after_delay, &destroy) == 0);
        while (!atomic_load(&destroy.running)) sched_yield();
        atomic_store(&destroy.go, true);
        pl_status_t status = pl_service_check_in(dir, "svc", port, NULL);
        CHECK(pthread_join(thread, NULL) == 0);
        CHECK_OK(pl_port_release_send(port));
        if (status == PL_OK) succeeded++;
        else if (status == PL_ERR_INVALID_ARG) refused++;
        else fprintf(stderr, "destroy_during_check_in: round %d: %s\n", rounds, pl_status_describe(status));
        CHECK(status == PL_OK || status == PL_ERR_INVALID_ARG);
        rounds++;
    }
    if (succeeded == 0 || refused == 0) {
        fprintf(stderr, "destroy_during_check_in: %d succeeded, %d refused of %d (delays up to %lld ns)\n", succeeded,
                refused, rounds, (long long)(2 * check_in_ns));
    }
    CHECK(succeeded > 0 && refused > 0);
    pl_port_t *again;
    CHECK_OK(pl_port_create(16, 16, &again));
    CHECK_OK(pl_service_check_in(dir, "svc", again, NULL));
    CHECK_OK(pl_port_destroy(again));
    remove_service_dir(dir);
}

/* How many sockets this process has open (async-signal-safe). */
static int open_sockets(void) {
    int count = 0;
    for (int fd = 0; fd < SCANNED_DESCRIPTORS; fd++) {
        char target[16];
        ssize_t n = descriptor_target(fd, target, sizeof target);
        if (n >= 7 && memcmp(target, "socket:", 7) == 0) count++;
    }
    return count;
}

static bool holds_a_socket(const char *unused) {
    (void)unused;
    return open_sockets() > 0;
}

/* A child forked while the parent's connection waits for room to write holds none of its sockets: neither the
 * connection's nor the duplicate the transport watches for room (so the service sees the connection end when the
 * parent closes it). The service is a stopped process, whose socket fills. */
static void fork_while_writing_body(void) {
    char dir[] = "/tmp/pl-stress-forkwriting-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pid_t service = fork_idle_service(dir, 256, 65536);
    pl_set_shared_rings(PL_RINGS_NEVER); /* everything goes by the socket */
    CHECK(open_sockets() == 0);
    pl_port_t *right = NULL;
    CHECK_OK(pl_service_look_up(dir, "svc", 5000 * MS, &right));
    CHECK(kill(service, SIGSTOP) == 0); /* reads nothing more: the parent's socket fills */
    int status = 0;
    CHECK(waitpid(service, &status, WUNTRACED) == service && WIFSTOPPED(status));
    static char payload[16384];
    int sent = 0;
    int64_t deadline = now_ns() + 5000 * MS;
    /* Sends return once their frames are queued; those behind a full socket wait, watched on a duplicate of it. */
    while (open_sockets() < 2 && now_ns() < deadline) {
        if (pl_port_send(right, sent, payload, sizeof payload, NULL, 0) != PL_OK) break;
        sent++;
    }
    if (open_sockets() != 2) fprintf(stderr, "fork_while_writing: %d sockets after %d sends\n", open_sockets(), sent);
    CHECK(open_sockets() == 2);

    int held = in_child(holds_a_socket, NULL);
    if (held != 0) fprintf(stderr, "fork_while_writing: the child kept a socket (%d)\n", held);
    CHECK(held == 0);

    CHECK(kill(service, SIGKILL) == 0);
    CHECK(waitpid(service, &status, 0) == service);
    pl_port_release_send(right);
    remove_service_dir(dir);
}

/* Looks up a name whose socket nobody listens on (a socket made and refused each time) until told to stop. */
static void *refused_look_ups(void *arg) {
    churn_t *churn = arg;
    while (!atomic_load(&churn->stop)) {
        pl_port_t *right = NULL;
        if (pl_service_look_up(churn->dir, "gone", 1000 * MS, &right) != PL_ERR_UNKNOWN_SERVICE) churn->failures++;
        churn->rounds++;
    }
    return NULL;
}

/* 100 children forked while connections' sockets are being made: a process that connects to this one's service and
 * hangs up, over and over (each accepted by the transport), and a thread that looks up a name no one serves (a
 * socket made and refused). A child holds none of these sockets once its fork handler ran: a connection's socket
 * is listed from before it is made until the transport has the connection, or the socket is closed. */
static void fork_during_connections_body(void) {
    char dir[] = "/tmp/pl-stress-forkconns-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pl_port_t *port;
    CHECK_OK(pl_port_create(16, 16, &port));
    CHECK_OK(pl_service_check_in(dir, "svc", port, NULL));
    struct sockaddr_un service_address = { .sun_family = AF_UNIX }, gone_address = { .sun_family = AF_UNIX };
    snprintf(service_address.sun_path, sizeof service_address.sun_path, "%s/svc", dir);
    snprintf(gone_address.sun_path, sizeof gone_address.sun_path, "%s/gone", dir);
    int stale = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    CHECK(stale >= 0 && bind(stale, (struct sockaddr *)&gone_address, sizeof gone_address) == 0);
    close(stale); /* the name stays, refusing */

    pid_t connector = fork_or_end();
    if (connector == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never left spinning */
        if (getppid() == 1) child_exit(4);
        for (;;) {
            int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
            if (fd < 0) child_exit(2);
            if (connect(fd, (struct sockaddr *)&service_address, sizeof service_address) != 0 && errno != EAGAIN) {
                child_exit(3);
            }
            close(fd);
            sched_yield();
        }
    }
    churn_t churn;
    churn_start(&churn, dir, refused_look_ups);
    int forks = 0;
    int holding = children_holding(holds_a_socket, NULL, &forks);
    churn_stop(&churn);
    int status = 0;
    CHECK(waitpid(connector, &status, WNOHANG) == 0); /* still connecting: it never failed */
    CHECK(kill(connector, SIGKILL) == 0);
    CHECK(waitpid(connector, &status, 0) == connector);
    if (holding > 0) fprintf(stderr, "fork_during_connections: %d of %d children held a socket\n", holding, forks);
    CHECK(holding == 0);
    CHECK(forks >= 20 && churn.rounds > 0 && churn.failures == 0);
    CHECK_OK(pl_port_destroy(port));
    unlink(gone_address.sun_path);
    remove_service_dir(dir);
}

/* Passes this process a listening socket "act" in `dir` as systemd does: descriptor 3, LISTEN_PID, LISTEN_FDS and
 * LISTEN_FDNAMES (in a child: it changes the environment and descriptor 3). */
static bool activation_pass_socket(const char *dir) {
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    snprintf(address.sun_path, sizeof address.sun_path, "%s/act", dir);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, 8) != 0) return false;
    if (fd != 3 && (dup2(fd, 3) != 3 || close(fd) != 0)) return false;
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "1", 1);
    setenv("LISTEN_FDNAMES", "act", 1);
    return true;
}

/* In a child (it changes the environment and descriptor 3): a socket passed as systemd passes one, whose first
 * check-in fails (its port is dead), is still there for the next, which adopts it. */
static bool activation_given_back_in_child(const char *dir) {
    if (!activation_pass_socket(dir)) return false;
    pl_port_t *dead, *live, *right = NULL;
    if (pl_port_create(8, 64, &dead) != PL_OK || pl_port_make_send(dead) != PL_OK || pl_port_destroy(dead) != PL_OK) {
        return false;
    }
    pl_status_t first = pl_service_check_in(dir, "act", dead, NULL);
    bool kept = fcntl(3, F_GETFD) >= 0;
    if (pl_port_create(8, 64, &live) != PL_OK) return false;
    pl_status_t second = pl_service_check_in(dir, "act", live, NULL);
    pl_status_t look_up = pl_service_look_up(dir, "act", 5000 * MS, &right);
    if (first != PL_ERR_INVALID_ARG || !kept || second != PL_OK || look_up != PL_OK) {
        fprintf(stderr, "activation_given_back: first %s, socket %s, second %s, look-up %s\n",
                pl_status_describe(first), kept ? "kept" : "closed", pl_status_describe(second),
                pl_status_describe(look_up));
        return false;
    }
    return true;
}

/* Runs `in_child_body` in a child with a namespace of its own, which it leaves clean. */
static void activation_in_child(bool (*in_child_body)(const char *dir)) {
    char dir[] = "/tmp/pl-stress-activation-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(in_child(in_child_body, dir) == 1);
    char path[96];
    snprintf(path, sizeof path, "%s/act", dir);
    unlink(path);
    remove_service_dir(dir);
}

static void activation_given_back_body(void) { activation_in_child(activation_given_back_in_child); }

/* In a child (it changes the environment and descriptor 3): a socket passed as systemd passes one, which systemd
 * keeps a copy of, adopted by a check-in whose port is then destroyed. The name is systemd's still: the next
 * check-in of it in this process adopts the same socket again, and a look-up is answered. */
static bool activation_after_withdrawal_in_child(const char *dir) {
    if (!activation_pass_socket(dir)) return false;
    int manager = dup(3); /* systemd's own copy of the listening socket */
    if (manager < 0) return false;
    pl_port_t *first, *second, *right = NULL;
    if (pl_port_create(8, 64, &first) != PL_OK || pl_port_create(8, 64, &second) != PL_OK) return false;
    pl_status_t checked_in = pl_service_check_in(dir, "act", first, NULL);
    pl_status_t in_use = pl_service_check_in(dir, "act", second, NULL); /* while the first lives */
    pl_status_t destroyed = pl_port_destroy(first);
    pl_status_t again = pl_service_check_in(dir, "act", second, NULL);
    pl_status_t look_up = pl_service_look_up(dir, "act", 2000 * MS, &right);
    if (checked_in != PL_OK || in_use != PL_ERR_NAME_IN_USE || destroyed != PL_OK || again != PL_OK ||
        look_up != PL_OK) {
        fprintf(stderr, "activation_after_withdrawal: check-in %s, meanwhile %s, destroy %s, check-in again %s, "
                "look-up %s\n", pl_status_describe(checked_in), pl_status_describe(in_use),
                pl_status_describe(destroyed), pl_status_describe(again), pl_status_describe(look_up));
        return false;
    }
    return true;
}

static void activation_after_withdrawal_body(void) { activation_in_child(activation_after_withdrawal_in_child); }

/* Runs a scenario that starts a transport in a process of its own: the transport thread lives as long as its
 * process, which under valgrind would otherwise be this whole program. The child says over a pipe that its body
 * ran to the end, and how: its exit status alone cannot tell, since valgrind exits 1 for the memory a forked
 * process inherits, and so does a sanitizer that stopped the body half-way. Memcheck's errors in the child count
 * as a failure: `make stress-valgrind` silences children (their leak reports would be the inherited memory), so
 * the child asks memcheck how many it found and says where to see them. */
static void run_in_own_process(void (*body)(void)) {
    int report[2];
    CHECK(pipe2(report, O_CLOEXEC) == 0);
    pid_t scenario = fork();
    CHECK(scenario >= 0);
    if (scenario == 0) {
        close(report[0]);
        unsigned errors_before = memcheck_errors();
        body();
        if (memcheck_found_errors(errors_before, "the scenario's process")) atomic_fetch_add(&scenario_failures, 1);
        uint8_t failed = atomic_load(&scenario_failures) > 0;
        if (write(report[1], &failed, 1) != 1) _exit(5);
        _exit(failed ? 4 : 0);
    }
    close(report[1]);
    uint8_t failed = 1;
    ssize_t n;
    do n = read(report[0], &failed, 1); while (n < 0 && errno == EINTR);
    close(report[0]);
    int status = 0;
    CHECK(waitpid(scenario, &status, 0) == scenario);
    CHECK(n == 1 && failed == 0); /* a failed check is printed by the child; no report: the body did not finish */
    CHECK(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));
}

/* ---- send_once_race ------------------------------------------------------------------------------- */

enum { SO_ROUNDS = 400 };

typedef struct {
    pl_port_t *dest;          /* a send right belongs to this thread */
    int mode;                 /* 0 answer, 1 answer twice, 2 release the right, 3 destroy the request's port */
} so_arg_t;

static void *so_replier(void *raw) {
    so_arg_t *arg = raw;
    if (arg->mode == 3) {
        sleep_us(20);
        CHECK_OK(pl_port_destroy(arg->dest)); /* the queued request goes, and its right with it */
    } else {
        unsigned char buffer[64];
        pl_received_t header;
        CHECK_OK(pl_port_receive(arg->dest, &header, buffer, sizeof buffer, 5000 * MS));
        CHECK(header.reply != NULL && (header.flags & PL_RECEIVED_REPLY_ONCE));
        if (arg->mode == 2) {
            CHECK_OK(pl_port_release_send_once(header.reply));
        } else {
            CHECK_OK(pl_port_send_once(header.reply, header.id + 1, buffer, header.size));
            if (arg->mode == 1) CHECK_STATUS(pl_port_send_once(header.reply, 0, NULL, 0), PL_ERR_INVALID_NAME);
        }
        CHECK_OK(pl_port_destroy(arg->dest));
    }
    pl_port_release_send(arg->dest);
    return NULL;
}

static void scenario_send_once_race(void) {
    for (int round = 0; round < SO_ROUNDS; round++) {
        pl_port_t *dest = new_port(4), *reply = new_port(1);
        pl_port_set_no_senders_wakes(reply, 1);
        pl_port_set_t *set = NULL;
        if (round % 2) {
            set = new_set();
            CHECK_OK(pl_port_set_insert(set, reply));
        }
        int mode = round % 4;
        CHECK_OK(pl_port_send_request(dest, round, "ask", 3, reply, 0));
        CHECK(pl_port_send_once_count(reply) == 1 && pl_port_send_right_count(reply) == 0);
        pl_port_make_send(dest);
        so_arg_t arg = { .dest = dest, .mode = mode };
        pthread_t replier;
        start_thread(&replier, so_replier, &arg);

        /* The requester: an answer, or the notice (or no-senders, which a right ending just before its notice
         * is queued may show first), and never the timeout. */
        unsigned char buffer[64];
        pl_received_t header;
        int64_t t0 = now_ns();
        pl_status_t status = set ? pl_port_set_receive(set, &header, buffer, sizeof buffer, 10000 * MS)
                                 : pl_port_receive(reply, &header, buffer, sizeof buffer, 10000 * MS);
        CHECK(now_ns() - t0 < 5000 * MS);
        int answers = 0, notices = 0;
        if (status == PL_OK) {
            if (header.flags & PL_RECEIVED_NOTIFICATION) {
                CHECK(header.id == PL_NOTIFY_SEND_ONCE && header.size == PL_NOTICE_SIZE);
                notices++;
            } else {
                CHECK(header.id == round + 1 && header.size == 3 && memcmp(buffer, "ask", 3) == 0);
                answers++;
            }
        } else {
            CHECK_STATUS(status, PL_ERR_NO_SENDERS);
        }
        pthread_join(replier, NULL);
        /* What else came: the notice behind a no-senders, and nothing more. */
        while (pl_port_receive(reply, &header, buffer, sizeof buffer, 0) == PL_OK) {
            if (header.flags & PL_RECEIVED_NOTIFICATION) notices++; else answers++;
        }
        CHECK(answers == (mode <= 1 ? 1 : 0));
        CHECK(notices == (mode <= 1 ? 0 : 1));
        CHECK(pl_port_send_once_count(reply) == 0);
        if (set) pl_port_set_release(set);
        CHECK_OK(pl_port_destroy(reply));
    }
}

/* ---- notifications --------------------------------------------------------------------------------- */

/* Rights released, requests cancelled and the port destroyed, all at once: every dead-name request is delivered
 * or cancelled, never both and never twice; a no-senders request at most once and never once cancelled; nothing
 * leaks (the sanitizers and valgrind watch the requests and their notices). */
#define NT_DEAD_NAMES 3

typedef struct {
    pl_port_t *port;
    int rights;
    uint64_t seed;
} nt_release_arg_t;

static void *nt_releaser(void *raw) {
    nt_release_arg_t *arg = raw;
    for (int i = 0; i < arg->rights; i++) {
        sleep_us(rnd(&arg->seed) % 50);
        CHECK_OK(pl_port_release_send(arg->port));
    }
    return NULL;
}

typedef struct {
    pl_notification_t **requests;
    int count;
    bool *cancelled;
    uint64_t seed;
} nt_cancel_arg_t;

static void *nt_canceller(void *raw) {
    nt_cancel_arg_t *arg = raw;
    for (int i = 0; i < arg->count; i++) {
        sleep_us(rnd(&arg->seed) % 80);
        pl_status_t status = pl_notification_cancel(arg->requests[i]);
        CHECK(status == PL_OK || status == PL_ERR_INVALID_NAME);
        arg->cancelled[i] = status == PL_OK;
        CHECK_STATUS(pl_notification_cancel(arg->requests[i]), PL_ERR_INVALID_NAME); /* twice: harmless */
    }
    return NULL;
}

static void *nt_release_one(void *raw) {
    CHECK_OK(pl_port_release_send(raw));
    return NULL;
}

static uint64_t nt_word(const unsigned char *bytes, int index) {
    uint64_t value = 0;
    for (int i = 0; i < 8; i++) value |= (uint64_t)bytes[index * 8 + i] << (8 * i);
    return value;
}

static void scenario_notifications(void) {
    uint64_t seed = 4242;
    for (int round = 0; round < 300; round++) {
        pl_port_t *port = new_port(8);
        pl_port_t *inbox = new_port(1);
        for (int i = 0; i < 4; i++) CHECK_OK(pl_port_make_send(port));
        pl_notification_t *requests[NT_DEAD_NAMES + 1];
        for (int i = 0; i < NT_DEAD_NAMES; i++) CHECK_OK(pl_port_request_dead_name(port, inbox, &requests[i]));
        CHECK_OK(pl_port_request_no_senders(port, 4, inbox, &requests[NT_DEAD_NAMES]));
        bool cancelled[NT_DEAD_NAMES + 1] = { false };

        pthread_t releasers[2], canceller;
        nt_release_arg_t release_args[2];
        for (int t = 0; t < 2; t++) {
            release_args[t] = (nt_release_arg_t){ .port = port, .rights = 2, .seed = seed + (uint64_t)t };
            start_thread(&releasers[t], nt_releaser, &release_args[t]);
        }
        nt_cancel_arg_t cancel_arg = { .requests = requests, .count = NT_DEAD_NAMES + 1, .cancelled = cancelled,
                                       .seed = seed ^ 0x5555 };
        start_thread(&canceller, nt_canceller, &cancel_arg);
        sleep_us(rnd(&seed) % 150);
        CHECK_OK(pl_port_destroy(port)); /* the releasers' rights keep its memory */
        for (int t = 0; t < 2; t++) pthread_join(releasers[t], NULL);
        pthread_join(canceller, NULL);

        int delivered[NT_DEAD_NAMES + 1] = { 0 };
        unsigned char buffer[64];
        pl_received_t header;
        while (pl_port_receive(inbox, &header, buffer, sizeof buffer, 0) == PL_OK) {
            CHECK(header.flags == PL_RECEIVED_NOTIFICATION && header.size == PL_NOTICE_SIZE);
            uint64_t id = nt_word(buffer, 2);
            for (int i = 0; i <= NT_DEAD_NAMES; i++) {
                if (pl_notification_id(requests[i]) != id) continue;
                delivered[i]++;
                CHECK(header.id == (i < NT_DEAD_NAMES ? PL_NOTIFY_DEAD_NAME : PL_NOTIFY_NO_SENDERS));
            }
        }
        for (int i = 0; i < NT_DEAD_NAMES; i++) CHECK(delivered[i] + (cancelled[i] ? 1 : 0) == 1);
        CHECK(delivered[NT_DEAD_NAMES] <= 1 && !(delivered[NT_DEAD_NAMES] && cancelled[NT_DEAD_NAMES]));
        for (int i = 0; i <= NT_DEAD_NAMES; i++) pl_notification_release(requests[i]);
        CHECK_OK(pl_port_destroy(inbox));
        seed = seed * 6364136223846793005ULL + 1;
    }

    /* Misuse: refused, typed, nothing made. */
    pl_notification_t *request = NULL;
    pl_port_t *port = new_port(1);
    CHECK_STATUS(pl_port_request_no_senders(NULL, 0, port, &request), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_request_dead_name(port, NULL, &request), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_port_request_no_senders(port, 0, port, NULL), PL_ERR_INVALID_ARG);
    CHECK_STATUS(pl_notification_cancel(NULL), PL_ERR_INVALID_ARG);
    CHECK(request == NULL);
    pl_port_t *dead = new_port(1);
    CHECK_OK(pl_port_make_send(dead));
    CHECK_OK(pl_port_destroy(dead));
    CHECK_STATUS(pl_port_request_no_senders(dead, 0, port, &request), PL_ERR_INVALID_NAME);
    CHECK_OK(pl_port_request_dead_name(dead, port, &request)); /* fires at once */
    CHECK(pl_port_message_count(port) == 1);
    /* A notice put back (as a run loop puts back what it took for a source that left its mode) is still one. */
    unsigned char notice[64];
    pl_received_t header;
    CHECK_OK(pl_port_receive(port, &header, notice, sizeof notice, 0));
    CHECK(header.flags == PL_RECEIVED_NOTIFICATION);
    CHECK_OK(pl_port_requeue(port, &header, notice));
    CHECK_OK(pl_port_receive(port, &header, notice, sizeof notice, 0));
    CHECK(header.flags == PL_RECEIVED_NOTIFICATION && header.id == PL_NOTIFY_DEAD_NAME);
    CHECK_OK(pl_port_requeue(port, &header, notice));
    pl_notification_release(request);
    CHECK_OK(pl_port_release_send(dead));
    CHECK_OK(pl_port_destroy(port)); /* the notice still queued goes with it */

    /* A port told to wake on no senders whose last right goes just before, or while, it joins a set: the set
     * reports it at once (as an async request's reply port is parked in a set after a poll found it empty). */
    for (int round = 0; round < 300; round++) {
        pl_port_set_t *set = new_set();
        pl_port_t *reply = new_port(1);
        pl_port_set_no_senders_wakes(reply, 1);
        CHECK_OK(pl_port_make_send(reply));
        pthread_t releaser;
        if (round % 2 == 0) {
            CHECK_OK(pl_port_release_send(reply));
        } else {
            start_thread(&releaser, nt_release_one, reply);
        }
        CHECK_OK(pl_port_set_insert(set, reply));
        if (round % 2 == 1) pthread_join(releaser, NULL);
        int64_t started = now_ns();
        pl_received_t out;
        CHECK_STATUS(pl_port_set_receive(set, &out, NULL, 0, 5000 * MS), PL_ERR_NO_SENDERS);
        CHECK(now_ns() - started < 4000 * MS);
        pl_port_set_release(set);
        CHECK_OK(pl_port_destroy(reply));
    }
}

/* Notices of several requests that fire at once come in the order the requests were made (pl_notify_deliver), for
 * no-senders requests as for dead-name ones. */
static void scenario_notice_order(void) {
    enum { REQUESTS = 3 };
    for (int kind = 0; kind < 2; kind++) {
        pl_port_t *port = new_port(1), *inbox = new_port(REQUESTS);
        CHECK_OK(pl_port_make_send(port));
        pl_notification_t *requests[REQUESTS];
        for (int i = 0; i < REQUESTS; i++) {
            if (kind == 0) CHECK_OK(pl_port_request_no_senders(port, 0, inbox, &requests[i]));
            else CHECK_OK(pl_port_request_dead_name(port, inbox, &requests[i]));
        }
        if (kind == 0) CHECK_OK(pl_port_release_send(port)); else CHECK_OK(pl_port_destroy(port));
        for (int i = 0; i < REQUESTS; i++) {
            unsigned char buffer[64];
            pl_received_t header;
            CHECK_OK(pl_port_receive(inbox, &header, buffer, sizeof buffer, 0));
            uint64_t id = nt_word(buffer, 2);
            if (id != pl_notification_id(requests[i])) {
                fprintf(stderr, "notice_order: %s notice %d is of request %llu, not %llu\n",
                        kind == 0 ? "no-senders" : "dead-name", i, (unsigned long long)id,
                        (unsigned long long)pl_notification_id(requests[i]));
            }
            CHECK(id == pl_notification_id(requests[i]));
        }
        for (int i = 0; i < REQUESTS; i++) pl_notification_release(requests[i]);
        if (kind == 0) CHECK_OK(pl_port_destroy(port)); else CHECK_OK(pl_port_release_send(port));
        CHECK_OK(pl_port_destroy(inbox));
    }
    /* Releasing a request's handle cancels it (portloop.h): no notice comes for it, and its slot is given back. */
    pl_port_t *port = new_port(1), *inbox = new_port(1);
    pl_notification_t *request;
    CHECK_OK(pl_port_request_dead_name(port, inbox, &request));
    pl_notification_release(request);
    CHECK(inbox->set_aside == 0);
    CHECK_OK(pl_port_destroy(port));
    CHECK(pl_port_message_count(inbox) == 0);
    CHECK_OK(pl_port_destroy(inbox));
}

static void scenario_fork_child(void) { run_in_own_process(fork_child_body); }
static void scenario_fork_while_writing(void) { run_in_own_process(fork_while_writing_body); }
static void scenario_activation_given_back(void) { run_in_own_process(activation_given_back_body); }
static void scenario_activation_after_withdrawal(void) { run_in_own_process(activation_after_withdrawal_body); }
static void scenario_fork_during_connections(void) { run_in_own_process(fork_during_connections_body); }
static void scenario_destroy_during_check_in(void) { run_in_own_process(destroy_during_check_in_body); }
static void scenario_fork_during_check_in(void) { run_in_own_process(fork_during_check_in_body); }

/* Asks for the service's status until it fails; the last status and how many answers came back. */
typedef struct status_asker {
    pl_port_t *service;
    int32_t pid;
    int answers;
    pl_status_t last;
    uint64_t seed;
} status_asker_t;

static void *status_asker_body(void *arg) {
    status_asker_t *a = arg;
    for (;;) {
        pl_service_status_t status;
        uint32_t echo = rnd(&a->seed) % (PL_SERVICE_ECHO_MAX + 1);
        a->last = pl_service_status(a->service, echo, 5000 * MS, &status);
        if (a->last != PL_OK) return NULL;
        CHECK(status.pid == a->pid && status.queue_limit == 8);
        a->answers++;
    }
}

static void status_queries_body(void) {
    char dir[] = "/tmp/pl-stress-status-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pid_t child = fork_idle_service(dir, 8, 64);
    pl_port_t *service = NULL;
    CHECK_OK(pl_service_look_up(dir, "svc", 5000 * MS, &service));
    status_asker_t askers[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        askers[i] = (status_asker_t){ .service = service, .pid = child, .seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) };
        start_thread(&threads[i], status_asker_body, &askers[i]);
    }
    sleep_us(200000);
    int64_t killed_at = now_ns();
    kill(child, SIGKILL);
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        CHECK(askers[i].answers > 0);
        CHECK_STATUS(askers[i].last, PL_ERR_INVALID_DEST);
    }
    CHECK(now_ns() - killed_at < 4000 * MS); /* woken by the end of the connection, not by their timeouts */
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK_OK(pl_port_release_send(service));
    remove_service_dir(dir);
}

static void scenario_status_queries(void) { run_in_own_process(status_queries_body); }

/* ---- look_up_abandoned ------------------------------------------------------------------------------ */

/* A listening socket named `name` in `dir`, played by this test as a service would be. */
static int fake_service_listen(const char *dir, const char *name) {
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    snprintf(address.sun_path, sizeof address.sun_path, "%s/%s", dir, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&address, sizeof address) == 0);
    CHECK(listen(fd, 8) == 0);
    return fd;
}

/* Accepts a client and reads its hello; the service's side of the connection. */
static int fake_service_accept(int listen_fd) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    CHECK(fd >= 0);
    uint8_t hello[PL_WIRE_HELLO_SIZE + 64];
    CHECK(recv(fd, hello, sizeof hello, 0) == (ssize_t)PL_WIRE_HELLO_SIZE);
    return fd;
}

static void fake_service_welcome(int fd) {
    uint8_t hello[PL_WIRE_HELLO_SIZE];
    pl_wire_right_t port = { .kind = PL_RIGHT_SENDERS, .handle = 1, .credits = 2, .max_size = 64 };
    size_t length = pl_wire_encode_hello(hello, PL_WIRE_VERSION, PL_HELLO_WELCOME, port);
    CHECK(send(fd, hello, length, 0) == (ssize_t)length);
}

typedef struct look_up_call {
    const char *dir, *name;
    int64_t timeout;
    pl_port_t *right;
    pl_status_t status;
} look_up_call_t;

static void *look_up_body(void *arg) {
    look_up_call_t *call = arg;
    call->status = pl_service_look_up(call->dir, call->name, call->timeout, &call->right);
    return NULL;
}

/* The connection a look-up of `name` in `dir` would share, retained, or NULL. */
static pl_conn_t *client_conn_of(const char *dir, const char *name) {
    char path[108];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return pl_transport_find_client(path);
}

/* The same, once the look-up that connects has handed its connection to the transport (after the accept). */
static pl_conn_t *client_conn_added(const char *dir, const char *name) {
    pl_conn_t *conn;
    for (int i = 0; (conn = client_conn_of(dir, name)) == NULL && i < 1000; i++) sleep_us(100);
    CHECK(conn != NULL);
    return conn;
}

/* A look-up that gives up ends its connection; a look-up by another thread must not take a right on it in the
 * moment between the two. The moment is held open: the transport thread is kept busy ending a second connection
 * whose reader this test plays, and the test reads the late welcome itself, as a set's receiver would. */
static void look_up_abandoned_body(void) {
    char dir[] = "/tmp/pl-stress-abandon-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int svc = fake_service_listen(dir, "svc"), stall = fake_service_listen(dir, "stall");

    look_up_call_t a = { .dir = dir, .name = "svc", .timeout = 1000 * MS };
    pthread_t a_thread;
    start_thread(&a_thread, look_up_body, &a);
    int a_fd = fake_service_accept(svc);

    /* The transport thread stops at the end of the stalled connection, whose reader this test is. */
    look_up_call_t s = { .dir = dir, .name = "stall", .timeout = 300 * MS };
    pthread_t s_thread;
    start_thread(&s_thread, look_up_body, &s);
    int s_fd = fake_service_accept(stall);
    pl_conn_t *s_conn = client_conn_added(dir, "stall");
    if (s_conn == NULL) return;
    pthread_mutex_lock(&s_conn->read_lock);
    pthread_join(s_thread, NULL);
    CHECK_STATUS(s.status, PL_ERR_TIMED_OUT);
    pl_conn_t *ending;
    while ((ending = client_conn_of(dir, "stall")) != NULL) { /* marked ending: the transport is in its end */
        pl_conn_release(ending);
        sleep_us(1000);
    }

    /* The first look-up gives up; the welcome comes after, and is read before its connection is ended. */
    pthread_join(a_thread, NULL);
    CHECK_STATUS(a.status, PL_ERR_TIMED_OUT);
    fake_service_welcome(a_fd);
    pl_conn_t *a_conn = client_conn_added(dir, "svc");
    if (a_conn == NULL) return;
    uint8_t *buffer = malloc(PL_FRAME_BUFFER_BYTES);
    CHECK(buffer != NULL);
    const char *why = NULL;
    int taken = 0;
    pthread_mutex_lock(&a_conn->read_lock);
    (void)pl_conn_read_socket(a_conn, buffer, PL_READ_BATCH, SIZE_MAX, 1, &why, &taken);
    pthread_mutex_unlock(&a_conn->read_lock);
    CHECK(taken == 1);
    pl_conn_release(a_conn);

    /* Another look-up now: it must connect anew, not take the connection given up. */
    look_up_call_t b = { .dir = dir, .name = "svc", .timeout = 5000 * MS };
    pthread_t b_thread;
    start_thread(&b_thread, look_up_body, &b);
    sleep_us(20000);
    pthread_mutex_unlock(&s_conn->read_lock);
    pl_conn_release(s_conn);
    struct pollfd waiting = { .fd = svc, .events = POLLIN };
    int b_fd = -1;
    if (poll(&waiting, 1, 2000) == 1) {
        b_fd = fake_service_accept(svc);
        fake_service_welcome(b_fd);
    }
    pthread_join(b_thread, NULL);
    CHECK_STATUS(b.status, PL_OK);
    CHECK(b_fd >= 0); /* a connection of its own */
    if (b.status == PL_OK) {
        sleep_us(50000); /* the first connection's end, had it been taken */
        CHECK(pl_port_is_alive(b.right));
        CHECK_OK(pl_port_release_send(b.right));
    }
    free(buffer);
    if (b_fd >= 0) close(b_fd);
    close(a_fd);
    close(s_fd);
    close(svc);
    close(stall);
    char path[96];
    snprintf(path, sizeof path, "%s/stall", dir);
    unlink(path);
    remove_service_dir(dir);
}

static void scenario_look_up_abandoned(void) { run_in_own_process(look_up_abandoned_body); }

/* ---- look_up_meets_death ------------------------------------------------------------------------------ */

/* Reads what a client sends until its connection's end (or `ms`): whether the end came. */
static bool fake_service_reads_to_end(int fd, int64_t ms) {
    static uint8_t packet[PL_WIRE_MAX_FRAME];
    for (int64_t deadline = now_ns() + ms * MS; now_ns() < deadline;) {
        ssize_t n = recv(fd, packet, sizeof packet, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
        if (n < 0) {
            struct pollfd readable = { .fd = fd, .events = POLLIN };
            poll(&readable, 1, 10);
        }
    }
    return false;
}

static void fake_service_dead(int fd) {
    uint8_t frame[64];
    size_t length = pl_wire_encode_control(frame, PL_FRAME_DEAD, 1, 0, 0);
    CHECK(send(fd, frame, length, 0) == (ssize_t)length);
}

/* A right that reports its port's death as a dead name does: not alive, a send says the destination is gone, a
 * dead-name request fires at once; released, its connection ends. */
static void check_dead_name(pl_port_t *right, pl_port_t *notify, int service_fd) {
    for (int64_t deadline = now_ns() + 2000 * MS; pl_port_is_alive(right) && now_ns() < deadline;) sleep_us(1000);
    CHECK(!pl_port_is_alive(right));
    CHECK_STATUS(pl_port_send(right, 1, "x", 1, NULL, 0), PL_ERR_INVALID_DEST);
    pl_notification_t *request = NULL;
    CHECK_OK(pl_port_request_dead_name(right, notify, &request));
    pl_received_t header;
    unsigned char notice[64];
    CHECK_OK(pl_port_receive(notify, &header, notice, sizeof notice, 0));
    CHECK(header.flags == PL_RECEIVED_NOTIFICATION && header.id == PL_NOTIFY_DEAD_NAME);
    pl_notification_release(request);
    CHECK_OK(pl_port_release_send(right));
    if (service_fd >= 0) CHECK(fake_service_reads_to_end(service_fd, 3000));
}

/* A look-up whose service port dies right after the service's welcome (a port destroyed as its service admits a
 * peer: the welcome, then DEAD). Once the look-up has returned its right, the death must reach the right: a dead-name
 * request made before fires, a send says the destination is gone, and the connection ends once the right is let
 * go. When DEAD is read before the look-up takes its right, the look-up says the service is unknown, and its
 * connection ends; never a wait for the timeout. */
static void look_up_meets_death_body(void) {
    char dir[] = "/tmp/pl-stress-death-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int svc = fake_service_listen(dir, "svc");
    pl_port_t *notify;
    CHECK_OK(pl_port_create(8, 1024, &notify));
    CHECK_OK(pl_transport_start());
    int before = open_descriptors();

    /* DEAD after the look-up returned. */
    look_up_call_t a = { .dir = dir, .name = "svc", .timeout = 5000 * MS };
    pthread_t thread;
    start_thread(&thread, look_up_body, &a);
    int fd = fake_service_accept(svc);
    fake_service_welcome(fd);
    pthread_join(thread, NULL);
    CHECK_OK(a.status);
    if (a.status == PL_OK) {
        pl_notification_t *request = NULL;
        CHECK_OK(pl_port_request_dead_name(a.right, notify, &request));
        fake_service_dead(fd);
        pl_received_t header;
        unsigned char notice[64];
        CHECK_OK(pl_port_receive(notify, &header, notice, sizeof notice, 2000 * MS));
        CHECK(header.flags == PL_RECEIVED_NOTIFICATION && header.id == PL_NOTIFY_DEAD_NAME);
        pl_notification_release(request);
        check_dead_name(a.right, notify, fd);
    }
    close(fd);

    /* DEAD right behind the welcome, read with it or just after, as the look-up wakes: either answer is right. */
    for (int round = 0; round < 40; round++) {
        look_up_call_t b = { .dir = dir, .name = "svc", .timeout = 5000 * MS };
        int64_t t0 = now_ns();
        start_thread(&thread, look_up_body, &b);
        fd = fake_service_accept(svc);
        fake_service_welcome(fd);
        fake_service_dead(fd);
        pthread_join(thread, NULL);
        CHECK(now_ns() - t0 < 2000 * MS);
        if (b.status == PL_OK) {
            check_dead_name(b.right, notify, -1); /* its end after a while (an idle proxy's), or the service's */
        } else {
            CHECK_STATUS(b.status, PL_ERR_UNKNOWN_SERVICE);
            CHECK(fake_service_reads_to_end(fd, 3000));
        }
        close(fd);
    }
    for (int64_t deadline = now_ns() + 2000 * MS; open_descriptors() != before && now_ns() < deadline;) sleep_us(1000);
    if (open_descriptors() != before) fprintf(stderr, "  descriptors: %d before, %d after\n", before, open_descriptors());
    CHECK(open_descriptors() == before);
    CHECK(pl_port_message_count(notify) == 0);
    pl_port_destroy(notify);
    close(svc);
    remove_service_dir(dir);
}

static void scenario_look_up_meets_death(void) { run_in_own_process(look_up_meets_death_body); }

/* ---- shared-memory rings ------------------------------------------------------------------------------ */

/* The two sides of a ring in one process, each ringing the other through the end of its bell the other sent, and
 * the memory as the service's process could write it: plain bytes. */
typedef struct {
    pl_ring_t *client, *service;
    int client_ringer, service_ringer; /* the bells each side rings the other through (the rings own them) */
    int client_watch, service_watch;   /* each side's bell watched edge-triggered, as its readers watch it */
    uint8_t *view;
    uint64_t client_rings_seen, service_rings_seen; /* each bell's rings when ring_bell_rings last looked */
} ring_pair_t;

/* Where pl_ring.c (layout 1) keeps a direction's indices and flags (0 client to service, 1 service to client) and
 * records; ring_pair_open checks the indices against a put, ring_stuck_bell the flags. */
#define RING_TAIL(direction) (64u + 192u * (direction))
#define RING_HEAD(direction) (RING_TAIL(direction) + 64u)
#define RING_ARMED(direction) (RING_TAIL(direction) + 128u)   /* the reader's: ring me */
#define RING_WAITING(direction) (RING_TAIL(direction) + 132u) /* the writer's: ring me for room */
#define RING_RECORDS(direction) (PL_RING_HEADER_BYTES + PL_RING_BYTES * (direction))
enum { RING_PACKET = 1, RING_MARK = 2, RING_PAD = 3 };

static uint8_t ring_pattern[2 * PL_WIRE_MAX_FRAME];

/* The bytes of a packet with sequence number `seq`: a window on a fixed pattern, one of 65,536. */
static const uint8_t *ring_content(uint32_t seq) {
    static bool made;
    if (!made) {
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i < sizeof ring_pattern; i++) ring_pattern[i] = (uint8_t)rnd(&x);
        made = true;
    }
    return ring_pattern + (seq * 7919u) % PL_WIRE_MAX_FRAME;
}

/* Puts packet `seq` of `length` bytes, as a head and a body. */
static pl_ring_put_result_t ring_put(pl_ring_t *ring, uint32_t seq, uint32_t length) {
    const uint8_t *bytes = ring_content(seq);
    return pl_ring_put(ring, bytes, length / 3, bytes + length / 3, length - length / 3, false);
}

static uint32_t *ring_word(ring_pair_t *p, uint32_t offset) { return (uint32_t *)(p->view + offset); }

static void ring_write_record_header(ring_pair_t *p, uint32_t offset, uint32_t length, uint16_t kind,
                                     uint16_t reserved) {
    memcpy(p->view + offset, &length, 4);
    memcpy(p->view + offset + 4, &kind, 2);
    memcpy(p->view + offset + 6, &reserved, 2);
}

static int rs_watch(int bell);

/* An eventfd's counter, as the kernel shows it in /proc (a bell's stays at one: rings write zero). -1 if unread. */
static long long ring_bell_count(int fd) {
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    FILE *info = fopen(path, "re");
    long long count = -1;
    while (info != NULL && fgets(line, sizeof line, info) != NULL) {
        if (sscanf(line, "eventfd-count: %llx", &count) == 1) break;
    }
    if (info != NULL) fclose(info);
    return count;
}

/* Whether the bell `watch` watches was rung since the last look. */
static bool ring_bell_woken(int watch) {
    struct epoll_event event;
    return epoll_wait(watch, &event, 1, 0) == 1;
}

/* The rings of a side's bell since the last call (the other side's count of them), checked to have woken that
 * side's watch. */
static int ring_bell_rings(ring_pair_t *p, pl_ring_t *ring) {
    pl_ring_t *ringer = ring == p->client ? p->service : p->client;
    uint64_t *seen = ring == p->client ? &p->client_rings_seen : &p->service_rings_seen;
    int rings = (int)(pl_ring_rung(ringer) - *seen);
    *seen = pl_ring_rung(ringer);
    bool woken = ring_bell_woken(ring == p->client ? p->client_watch : p->service_watch);
    CHECK(woken == (rings > 0));
    return rings;
}

static void ring_pair_open(ring_pair_t *p) {
    int memfd, client_ringer, service_ringer;
    bool peer_fault;
    const char *reason = NULL;
    CHECK_OK(pl_ring_create(&p->client, &memfd, &client_ringer));
    p->service = pl_ring_adopt(memfd, &service_ringer, &peer_fault, &reason);
    CHECK(p->service != NULL);
    /* Each side rings the other through the end the other made for it (a connection sends it, then closes its
     * copy); here the peer's process is this one. */
    CHECK(pl_ring_take_ringer(p->client, service_ringer, &peer_fault, &reason));
    CHECK(pl_ring_take_ringer(p->service, client_ringer, &peer_fault, &reason));
    p->client_ringer = service_ringer;
    p->service_ringer = client_ringer;
    p->client_watch = rs_watch(pl_ring_bell(p->client));
    p->service_watch = rs_watch(pl_ring_bell(p->service));
    CHECK(p->client_watch >= 0 && p->service_watch >= 0);
    /* A bell is readable from the start (its counter is one): the watch's first look says so, once. */
    CHECK(ring_bell_woken(p->client_watch) && ring_bell_woken(p->service_watch));
    p->client_rings_seen = p->service_rings_seen = 0;
    p->view = mmap(NULL, PL_RING_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    CHECK(p->view != MAP_FAILED);
    close(memfd);
    /* The layout this file assumes: a mark and a packet of 100 bytes from the service, and one back. */
    CHECK(pl_ring_put(p->service, NULL, 0, NULL, 0, true) == PL_RING_PUT);
    CHECK(ring_put(p->service, 0, 100) == PL_RING_PUT);
    CHECK(*ring_word(p, RING_TAIL(1)) == 8 + 8 + 104);
    uint32_t length;
    memcpy(&length, p->view + RING_RECORDS(1) + 8, 4);
    CHECK(length == 100);
    CHECK(ring_put(p->client, 1, 8) == PL_RING_PUT);
    CHECK(*ring_word(p, RING_TAIL(0)) == 16);
    uint8_t out[PL_WIRE_MAX_FRAME];
    size_t taken;
    CHECK(pl_ring_take(p->client, out, &taken, &reason) == PL_RING_MARK);
    CHECK(pl_ring_take(p->client, out, &taken, &reason) == PL_RING_PACKET && taken == 100);
    CHECK(pl_ring_take(p->service, out, &taken, &reason) == PL_RING_PACKET && taken == 8);
    pl_ring_done_reading(p->client);
    pl_ring_done_reading(p->service);
    CHECK(*ring_word(p, RING_HEAD(1)) == 120 && *ring_word(p, RING_HEAD(0)) == 16);
}

static void ring_pair_close(ring_pair_t *p) {
    close(p->client_watch);
    close(p->service_watch);
    munmap(p->view, PL_RING_MAP_BYTES);
    pl_ring_free(p->client);
    pl_ring_free(p->service);
}

/* ---- ring_bells ---------------------------------------------------------------------------------------- */
/* The wake-up protocol, one step at a time: a reader that armed is rung once for a pass of records, a writer that
 * found no room is rung by the reader's done, and a writer that pads to the ring's end and then finds no room rings
 * a reader that had armed (it had not: both sides slept, each waiting for the other). Rings are counted by the
 * process's count of them, each checked to have woken the right bell's watch. */
static void scenario_ring_bells(void) {
    ring_pair_t p;
    ring_pair_open(&p);
    uint8_t out[PL_WIRE_MAX_FRAME];
    size_t length;
    const char *reason;
    CHECK(!pl_ring_arm(p.client));
    CHECK(ring_put(p.service, 1, 64) == PL_RING_PUT);
    CHECK(ring_bell_rings(&p, p.client) == 1);
    CHECK(ring_put(p.service, 2, 64) == PL_RING_PUT);
    CHECK(ring_bell_rings(&p, p.client) == 0); /* not armed again: one ring for the pass */
    CHECK(pl_ring_arm(p.client));            /* records wait: take them, the bell may not ring for them */
    uint32_t seq = 3;
    while (ring_put(p.service, seq, PL_WIRE_MAX_FRAME) == PL_RING_PUT) seq++;
    /* 144 bytes of the two small records, then as many of the largest as fit (the next one's pad is FULL). */
    CHECK(seq == 3 + (PL_RING_BYTES - 144) / (PL_WIRE_MAX_FRAME + PL_RING_RECORD_HEADER) &&
          ring_bell_rings(&p, p.service) == 0);
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET && length == 64);
    pl_ring_done_reading(p.client);
    CHECK(ring_bell_rings(&p, p.service) == 1); /* it waited for room */
    while (pl_ring_take(p.client, out, &length, &reason) != PL_RING_EMPTY) {}
    pl_ring_done_reading(p.client);
    CHECK(ring_bell_rings(&p, p.service) == 0); /* it did not wait again */
    ring_pair_close(&p);

    /* A writer that found no room is rung on the way through a long pass, once the room of the packets taken before
     * goes back (at the next take), not only when the pass ends: it fills the ring again while the reader reads on. */
    ring_pair_open(&p);
    seq = 1;
    while (ring_put(p.service, seq, PL_WIRE_MAX_FRAME) == PL_RING_PUT) seq++;
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET);
    CHECK(ring_bell_rings(&p, p.service) == 0); /* the packet's room is still the reader's */
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET);
    CHECK(ring_bell_rings(&p, p.service) == 1);
    CHECK(ring_put(p.service, seq++, PL_WIRE_MAX_FRAME) == PL_RING_PUT);
    while (pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET) {}
    pl_ring_done_reading(p.client);
    CHECK(ring_bell_rings(&p, p.service) == 0); /* it did not wait again */
    ring_pair_close(&p);

    /* The writer at the ring's middle (65,536 after the 120 bytes of ring_pair_open and a record of 65,416), the
     * reader armed: the largest packet pads to the end, and fits only once the pad is taken. Only a ring that
     * holds less than two of the largest records has such a middle. */
    if (PL_RING_BYTES >= 2 * (PL_WIRE_MAX_FRAME + PL_RING_RECORD_HEADER)) goto counter;
    ring_pair_open(&p);
    CHECK(ring_put(p.service, 1, 65536 - 120 - 8) == PL_RING_PUT);
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET);
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_EMPTY);
    pl_ring_done_reading(p.client);
    ring_bell_rings(&p, p.client);
    CHECK(!pl_ring_arm(p.client));
    CHECK(ring_put(p.service, 2, PL_WIRE_MAX_FRAME) == PL_RING_FULL);
    CHECK(ring_bell_rings(&p, p.client) == 1);
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_EMPTY); /* the pad */
    pl_ring_done_reading(p.client);
    CHECK(ring_bell_rings(&p, p.service) == 1);
    CHECK(ring_put(p.service, 2, PL_WIRE_MAX_FRAME) == PL_RING_PUT);
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET && length == PL_WIRE_MAX_FRAME &&
          memcmp(out, ring_content(2), length) == 0);
    ring_pair_close(&p);

counter:
    /* A pass a ring, and however many rings, each bell's counter stays at one: nothing fills, nothing is emptied. */
    ring_pair_open(&p);
    for (int pass = 1; pass <= 1000; pass++) {
        CHECK(!pl_ring_arm(p.client));
        CHECK(ring_put(p.service, (uint32_t)pass, 8) == PL_RING_PUT);
        CHECK(ring_bell_rings(&p, p.client) == 1);
        CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET && length == 8);
        CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_EMPTY);
        pl_ring_done_reading(p.client);
    }
    CHECK(ring_bell_count(pl_ring_bell(p.client)) == 1 && ring_bell_count(pl_ring_bell(p.service)) == 1);
    ring_pair_close(&p);
}

/* ---- ring_shared_take ---------------------------------------------------------------------------------- */
/* A packet taken in place (pl_ring_take_shared) stays the reader's while it copies it out: a writer that fills all
 * the room it sees, before and while the reader holds each packet, never writes over the one held, though the room
 * of those taken before goes back at every take. Every packet arrives whole, in order, the writer's record being
 * the largest packet with the ring's reach near and whole. */
static void scenario_ring_shared_take(void) {
    ring_pair_t p;
    ring_pair_open(&p);
    uint32_t reaches[] = { PL_RING_NEAR_BYTES, PL_RING_BYTES };
    uint32_t put = 1, taken = 1;
    const char *reason = NULL;
    for (int r = 0; r < 2; r++) {
        pl_ring_set_reach(p.service, reaches[r]);
        uint32_t given_back = 0;
        for (int round = 0; round < 48; round++) {
            while (ring_put(p.service, put, PL_WIRE_MAX_FRAME) == PL_RING_PUT) put++;
            const uint8_t *shared = NULL;
            size_t length = 0;
            uint32_t head_before = *ring_word(&p, RING_HEAD(1));
            CHECK(pl_ring_take_shared(p.client, &shared, &length, &reason) == PL_RING_PACKET &&
                  length == PL_WIRE_MAX_FRAME);
            if (*ring_word(&p, RING_HEAD(1)) != head_before) given_back++;
            while (ring_put(p.service, put, PL_WIRE_MAX_FRAME) == PL_RING_PUT) put++;
            CHECK(memcmp(shared, ring_content(taken), length) == 0);
            taken++;
        }
        CHECK(given_back >= 40); /* room went back on the way, not only when the reader was done */
        static uint8_t out[PL_WIRE_MAX_FRAME];
        size_t length = 0;
        pl_ring_take_result_t took;
        while ((took = pl_ring_take(p.client, out, &length, &reason)) == PL_RING_PACKET) {
            CHECK(length == PL_WIRE_MAX_FRAME && memcmp(out, ring_content(taken), length) == 0);
            taken++;
        }
        CHECK(took == PL_RING_EMPTY && taken == put);
        pl_ring_done_reading(p.client);
    }
    ring_pair_close(&p);
}

/* ---- copy_both_ways ------------------------------------------------------------------------------------ */
/* A streaming copy writes whole cache lines with streaming stores and the partial lines at either end as usual
 * (pl_copy.c). Both ways, at every offset of the destination in a line and a few of the source: the bytes arrive, and
 * those just before and after the destination keep what was there (a copy that rounded to whole lines would not). */
static void scenario_copy_both_ways(void) {
    enum { EDGE = 80 };
    static const size_t lengths[] = { 1, 63, 200, 255, 256, 257, 319, 320, 383, 1000, 4031, 4096, 4159, 65000,
                                      300001, 1100000 };
    size_t largest = lengths[sizeof lengths / sizeof lengths[0] - 1];
    uint8_t *from = malloc(largest + 16), *to = malloc(EDGE + 128 + largest + EDGE);
    CHECK(from != NULL && to != NULL);
    for (size_t i = 0; i < largest + 16; i++) from[i] = (uint8_t)(i * 131u + 7u);
    uint32_t copies = 0;
    for (int streaming = 0; streaming < 2; streaming++) {
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            size_t length = lengths[l];
            for (uint32_t offset = 0; offset < 64; offset++) {
                if (length > 65536 && offset % 21 != 0) continue; /* the largest at four: their middles are alike */
                uint8_t *line = (uint8_t *)(((uintptr_t)to + EDGE + 63) & ~(uintptr_t)63);
                uint8_t *dest = line + offset;
                const uint8_t *source = from + offset % 16;
                memset(dest - EDGE, 0xA5, EDGE + length + EDGE);
                pl_copy_with(dest, source, length, streaming != 0);
                CHECK(memcmp(dest, source, length) == 0);
                bool edges_kept = true;
                for (size_t i = 1; i <= EDGE; i++) {
                    edges_kept &= dest[-(ptrdiff_t)i] == 0xA5 && dest[length + i - 1] == 0xA5;
                }
                CHECK(edges_kept);
                copies++;
            }
        }
    }
    CHECK(copies == 2 * (14 * 64 + 2 * 4)); /* both ways: 64 offsets for fourteen lengths, four for the two largest */
    free(from);
    free(to);
}

/* ---- copier_chooses ------------------------------------------------------------------------------------ */
/* A copier's choice, fed costs in place of its own timings (pl_copier_plan and pl_copier_note are the two halves of
 * pl_copier_copy). Per size class it copies in epochs of one way, times PL_COPY_SAMPLES copies of each epoch's second
 * half and takes their median; it starts with an epoch of each way, keeps to the cheaper, tries the other after
 * PL_COPY_EXPLORE_FIRST epochs and twice as many after each try that confirms the choice, at once when the way kept
 * to costs more than the other did, and turns only for a tenth cheaper. (An epoch ends at the next copy's plan.) */

/* Makes `copies` copies of `length` bytes by plan, noting `ordinary` or `streamed` ticks for the timed ones; counts
 * the plans that streamed and those timed. */
static void copier_run(pl_copier_t *c, size_t length, uint32_t copies, uint64_t ordinary, uint64_t streamed,
                       uint32_t *streams, uint32_t *timed) {
    *streams = *timed = 0;
    for (uint32_t i = 0; i < copies; i++) {
        pl_copy_plan_t plan = pl_copier_plan(c, length);
        *streams += plan.streaming;
        *timed += plan.timed;
        if (plan.timed) pl_copier_note(c, length, plan.streaming ? streamed : ordinary);
    }
}

static void scenario_copier_chooses(void) {
    pl_copier_t c;
    memset(&c, 0, sizeof c);
    uint32_t streams, timed;
    /* Short copies never stream nor are timed. */
    copier_run(&c, PL_COPY_STREAM_MIN - 1, 100, 1, 1, &streams, &timed);
    CHECK(streams == 0 && timed == 0 && !pl_copier_streams(&c, PL_COPY_STREAM_MIN - 1));
#if defined(__x86_64__)
    uint32_t e = pl_copy_epoch_copies(4096);
    CHECK(e == 512 && pl_copy_epoch_copies(4095) == 2048 && pl_copy_epoch_copies(1u << 20) == PL_COPY_EPOCH_MIN_COPIES);
    /* 4 KiB, ordinary cheaper: an epoch of each way, then ordinary, with tries of streaming after F, 2F and 4F epochs
     * (F: PL_COPY_EXPLORE_FIRST). */
    const uint32_t F = PL_COPY_EXPLORE_FIRST;
    _Static_assert(PL_COPY_EXPLORE_FIRST > 5, "the counts below assume no second try within F + 4 epochs");
    uint32_t epochs = 2 + F + 1 + 2 * F + 1 + 4 * F + 1;
    copier_run(&c, 4096, e * epochs, 1000, 3000, &streams, &timed);
    CHECK(streams == 4 * e && timed == epochs * PL_COPY_SAMPLES && !pl_copier_streams(&c, 4096));
    /* Ordinary copies turn slow (the reader moved to another chiplet): the epoch that finds it is followed by a try of
     * streaming at once, and streaming is kept. */
    copier_run(&c, 4096, e, 9000, 3000, &streams, &timed);
    CHECK(streams == 0);
    copier_run(&c, 4096, e, 9000, 3000, &streams, &timed);
    CHECK(streams == e && !pl_copier_streams(&c, 4096));
    copier_run(&c, 4096, e, 9000, 3000, &streams, &timed);
    CHECK(streams == e && pl_copier_streams(&c, 4096));
    /* A few disturbed copies (an interrupt) do not move an epoch's median: no try of ordinary follows. */
    for (uint32_t i = 0, noted = 0; i < e; i++) {
        pl_copy_plan_t plan = pl_copier_plan(&c, 4096);
        if (plan.timed) pl_copier_note(&c, 4096, noted++ < PL_COPY_SAMPLES / 3 ? 1000000000 : 3000);
    }
    copier_run(&c, 4096, e, 9000, 3000, &streams, &timed);
    CHECK(streams == e && pl_copier_streams(&c, 4096));
    /* Ordinary cheap again: found at the next try, F epochs after the turn to streaming (three of them run above),
     * and kept. */
    copier_run(&c, 4096, (F + 4) * e, 1000, 3000, &streams, &timed);
    CHECK(streams == (F - 3) * e && !pl_copier_streams(&c, 4096));
    /* Another class has learnt nothing from it; and a try must win by a tenth: streaming at 0.95 times ordinary's cost
     * does not take over from it, at 0.85 times it does. */
    uint32_t e16 = pl_copy_epoch_copies(16384);
    CHECK(!pl_copier_streams(&c, 16384) && !pl_copier_streams(&c, 1024) && !pl_copier_streams(&c, 1u << 20));
    copier_run(&c, 16384, 2 * e16 + 1, 1000, 950, &streams, &timed);
    CHECK(streams == e16 && !pl_copier_streams(&c, 16384));
    copier_run(&c, 16384, (F + 1) * e16, 1000, 850, &streams, &timed);
    CHECK(pl_copier_streams(&c, 16384));
    /* A real copy (timed or not) either way, through pl_copier_copy: the bytes arrive. */
    static uint8_t from[8192], to[8192];
    for (size_t i = 0; i < sizeof from; i++) from[i] = (uint8_t)(i * 7u);
    for (uint32_t i = 0; i < 3 * pl_copy_epoch_copies(3000); i++) {
        uint32_t length = 3000 + i % 1000;
        memset(to, 0, sizeof to);
        pl_copier_copy(&c, to, from, length);
        CHECK(memcmp(to, from, length) == 0 && to[length] == 0);
    }
#else
    /* Elsewhere a copier never streams. */
    copier_run(&c, 4096, 10000, 9000, 1, &streams, &timed);
    CHECK(streams == 0 && timed == 0);
#endif
}

/* ---- ring_copied_in ------------------------------------------------------------------------------------ */
/* The writer copies a record's parts with ordinary stores while the reader is near, and the larger ones with streaming
 * stores while it is far (pl_ring.c), told so here before each record. Both ways, records whose heads (0 to 71 bytes)
 * put their bodies at every offset in a line, with bodies from under the streaming size to a few lines over, and
 * around 4 KiB: each arrives intact, and the bytes after it, up to where the next record begins, keep what was there
 * (a copy that rounded up to whole lines would write them). */
static void scenario_ring_copied_in(void) {
    ring_pair_t p;
    ring_pair_open(&p);
    static uint8_t out[PL_WIRE_MAX_FRAME];
    uint8_t *records = p.view + RING_RECORDS(1);
    const char *reason = NULL;
    uint32_t bodies[] = { 200, 255, 256, 257, 319, 320, 383, 4031, 4096, 4159, 65000 };
    uint32_t seq = 1, records_put = 0;
    for (int far = 0; far < 2; far++) {
        for (uint32_t head = 0; head < 72; head++) {
            for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
                for (uint32_t i = 0; i < PL_RING_DISTANCE_SAMPLES; i++) {
                    pl_ring_note_distance(p.service, far ? 500 : 20);
                }
                CHECK(pl_ring_streams(p.service) == (far != 0));
                const uint8_t *bytes = ring_content(seq);
                uint32_t length = head + bodies[b], need = PL_RING_RECORD_HEADER + ((length + 7u) & ~7u);
                uint32_t at = *ring_word(&p, RING_TAIL(1)) % PL_RING_BYTES;
                if (at + need > PL_RING_BYTES) at = 0; /* after a pad to the end (the reach is the whole ring) */
                uint32_t end = at + need; /* where the next record begins */
                memset(records + at, 0xA5, need);
                CHECK(pl_ring_put(p.service, bytes, head, bytes + head, bodies[b], false) == PL_RING_PUT);
                bool after_kept = true;
                for (uint32_t i = at + PL_RING_RECORD_HEADER + length; i < end; i++) after_kept &= records[i] == 0xA5;
                CHECK(after_kept);
                size_t taken = 0;
                CHECK(pl_ring_take(p.client, out, &taken, &reason) == PL_RING_PACKET && taken == length &&
                      memcmp(out, bytes, length) == 0);
                pl_ring_done_reading(p.client);
                seq++;
                records_put++;
            }
        }
    }
    CHECK(records_put == 2 * 72 * sizeof bodies / sizeof bodies[0]);
    ring_pair_close(&p);
}

/* ---- ring_distance ------------------------------------------------------------------------------------- */
/* How far the writer finds the reader, from the times it took to load the reader's moved index: it streams before it
 * has PL_RING_DISTANCE_SAMPLES of them, then while their median is over PL_RING_FAR_NS; a few slow loads among fast
 * ones (an interrupt) do not turn it, nor a few fast ones among slow. Each side of a ring pair decides for itself. */
static void scenario_ring_distance(void) {
    ring_pair_t p;
    ring_pair_open(&p);
    CHECK(pl_ring_streams(p.service) && pl_ring_streams(p.client));
    for (uint32_t i = 0; i + 1 < PL_RING_DISTANCE_SAMPLES; i++) pl_ring_note_distance(p.service, 30);
    CHECK(pl_ring_streams(p.service));
    pl_ring_note_distance(p.service, 30);
    CHECK(!pl_ring_streams(p.service) && pl_ring_streams(p.client));
    for (uint32_t i = 0; i < PL_RING_DISTANCE_SAMPLES / 2; i++) pl_ring_note_distance(p.service, 1000000);
    CHECK(!pl_ring_streams(p.service));
    pl_ring_note_distance(p.service, 130);
    CHECK(pl_ring_streams(p.service));
    for (uint32_t i = 0; i < PL_RING_DISTANCE_SAMPLES / 2; i++) pl_ring_note_distance(p.service, 20);
    CHECK(pl_ring_streams(p.service));
    pl_ring_note_distance(p.service, PL_RING_FAR_NS);
    pl_ring_note_distance(p.service, PL_RING_FAR_NS);
    CHECK(!pl_ring_streams(p.service)); /* at the bound itself: near */
    pl_ring_note_distance(p.service, -5); /* a clock that went back counts as near */
    CHECK(!pl_ring_streams(p.service));
    ring_pair_close(&p);
}

/* ---- ring_reach ---------------------------------------------------------------------------------------- */
/* A writer's reach: near, it wraps there and never touches the ring's bytes past it, and holds no more than its
 * near part; set to the whole ring, its records go past and it holds the whole ring; shortened while past the near
 * part, it wraps at once. The reader takes every record intact throughout. */

/* Puts packets of varying sizes (`seq` on) until `bytes` more have been put, taking each at once; checks them. */
static uint32_t ring_reach_stream(ring_pair_t *p, uint32_t seq, uint32_t bytes) {
    static uint8_t out[PL_WIRE_MAX_FRAME];
    const char *reason = NULL;
    size_t length;
    uint32_t start = *ring_word(p, RING_TAIL(1));
    while (*ring_word(p, RING_TAIL(1)) - start < bytes) {
        uint32_t size = 16 + (seq * 7919u) % 30000u;
        CHECK(ring_put(p->service, seq, size) == PL_RING_PUT);
        CHECK(pl_ring_take(p->client, out, &length, &reason) == PL_RING_PACKET && length == size &&
              memcmp(out, ring_content(seq), size) == 0);
        seq++;
    }
    pl_ring_done_reading(p->client);
    return seq;
}

/* Whether the service's ring holds only zero bytes from `from` to its end. */
static bool ring_reach_untouched(ring_pair_t *p, uint32_t from) {
    const uint8_t *records = p->view + RING_RECORDS(1);
    for (uint32_t i = from; i < PL_RING_BYTES; i++) {
        if (records[i] != 0) return false;
    }
    return true;
}

/* How many packets of 1,000 bytes go in before the ring is full (none taken), then takes them all. */
static uint32_t ring_reach_holds(ring_pair_t *p, uint32_t seq) {
    static uint8_t out[PL_WIRE_MAX_FRAME];
    const char *reason = NULL;
    size_t length;
    uint32_t put = 0;
    while (ring_put(p->service, seq + put, 1000) == PL_RING_PUT) put++;
    for (uint32_t i = 0; i < put; i++) {
        CHECK(pl_ring_take(p->client, out, &length, &reason) == PL_RING_PACKET && length == 1000 &&
              memcmp(out, ring_content(seq + i), length) == 0);
    }
    CHECK(pl_ring_take(p->client, out, &length, &reason) == PL_RING_EMPTY);
    pl_ring_done_reading(p->client);
    return put;
}

static void scenario_ring_reach(void) {
    ring_pair_t p;
    ring_pair_open(&p);
    CHECK(pl_ring_reach(p.service) == PL_RING_BYTES); /* a new ring's writer uses all of it */
    pl_ring_set_reach(p.service, 5);
    CHECK(pl_ring_reach(p.service) == PL_WIRE_MAX_FRAME + 2 * PL_RING_RECORD_HEADER); /* a record and a pad fit */
    pl_ring_set_reach(p.service, UINT32_MAX);
    CHECK(pl_ring_reach(p.service) == PL_RING_BYTES);

    /* Near: records up to the last 8 bytes before the reach, where the pad's header goes, and nothing past it. */
    pl_ring_set_reach(p.service, PL_RING_NEAR_BYTES);
    uint32_t seq = 1, tail;
    static uint8_t out[PL_WIRE_MAX_FRAME];
    size_t taken;
    const char *reason = NULL;
    while ((tail = *ring_word(&p, RING_TAIL(1))) < PL_RING_NEAR_BYTES - 8) {
        uint32_t left = PL_RING_NEAR_BYTES - 8 - tail; /* a record of `left` bytes, header included, at most */
        CHECK(ring_put(p.service, seq++, left > 65544 ? 65536 : left - 8) == PL_RING_PUT);
    }
    CHECK(tail == PL_RING_NEAR_BYTES - 8);
    /* Even a mark, which would just fit, goes after a pad from the reach's last 8 bytes, at the start. */
    CHECK(pl_ring_put(p.service, NULL, 0, NULL, 0, true) == PL_RING_PUT);
    CHECK(*ring_word(&p, RING_TAIL(1)) == PL_RING_BYTES + 8 && ring_reach_untouched(&p, PL_RING_NEAR_BYTES));
    pl_ring_take_result_t took;
    while ((took = pl_ring_take(p.client, out, &taken, &reason)) == PL_RING_PACKET) {}
    CHECK(took == PL_RING_MARK && pl_ring_take(p.client, out, &taken, &reason) == PL_RING_EMPTY);
    CHECK(pl_ring_pending_bytes(p.client) == 0);
    pl_ring_done_reading(p.client);
    /* Several laps of the near part, nothing past it written. */
    seq = ring_reach_stream(&p, seq, 5 * PL_RING_BYTES);
    CHECK(*ring_word(&p, RING_TAIL(1)) > 5 * PL_RING_BYTES && ring_reach_untouched(&p, PL_RING_NEAR_BYTES));
    uint32_t near = ring_reach_holds(&p, seq);
    seq += near;
    CHECK(near * 1008u <= PL_RING_NEAR_BYTES && near * 1008u > PL_RING_NEAR_BYTES - 2 * 1008u);
    CHECK(ring_reach_untouched(&p, PL_RING_NEAR_BYTES));

    /* The whole ring: its records go past the near part, and it holds about four times as many. */
    pl_ring_set_reach(p.service, PL_RING_BYTES);
    seq = ring_reach_stream(&p, seq, 2 * PL_RING_BYTES);
    CHECK(!ring_reach_untouched(&p, PL_RING_NEAR_BYTES));
    uint32_t whole = ring_reach_holds(&p, seq);
    seq += whole;
    CHECK(whole * 1008u <= PL_RING_BYTES && whole * 1008u > PL_RING_BYTES - 2 * 1008u);

    /* Shortened while past the near part: it wraps at its next put, then keeps near again. */
    while (*ring_word(&p, RING_TAIL(1)) % PL_RING_BYTES <= PL_RING_NEAR_BYTES) seq = ring_reach_stream(&p, seq, 1);
    pl_ring_set_reach(p.service, PL_RING_NEAR_BYTES);
    uint32_t lap = *ring_word(&p, RING_TAIL(1)) / PL_RING_BYTES;
    seq = ring_reach_stream(&p, seq, 1);
    CHECK(*ring_word(&p, RING_TAIL(1)) / PL_RING_BYTES == lap + 1 &&
          *ring_word(&p, RING_TAIL(1)) % PL_RING_BYTES < PL_RING_NEAR_BYTES);
    seq = ring_reach_stream(&p, seq, 2 * PL_RING_BYTES);
    uint32_t again = ring_reach_holds(&p, seq); /* as near as before, give or take one from where it starts */
    CHECK(again + 1 >= near && again <= near + 1);
    ring_pair_close(&p);
}

/* Sends one packet of `length` bytes over `socket` with up to two descriptors beside it (SCM_RIGHTS): whether it
 * went whole. */
static bool send_with_descriptors(int socket, const void *packet, size_t length, const int *fds, int count) {
    union { char bytes[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = { .iov_base = (void *)packet, .iov_len = length };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = length > 0 ? 1 : 0, .msg_control = control.bytes,
                          .msg_controllen = CMSG_SPACE((size_t)count * sizeof(int)) };
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN((size_t)count * sizeof(int));
    memcpy(CMSG_DATA(cmsg), fds, (size_t)count * sizeof(int));
    return sendmsg(socket, &msg, MSG_NOSIGNAL) == (ssize_t)length;
}

/* Sends `fd` over the socket `channel`, beside a byte. */
static bool send_one_descriptor(int channel, int fd) { return send_with_descriptors(channel, "", 1, &fd, 1); }

/* The descriptor send_one_descriptor sent over `channel`, or -1. */
static int receive_one_descriptor(int channel) {
    union { char bytes[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    char byte;
    struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes,
                          .msg_controllen = sizeof control.bytes };
    int fd = -1;
    struct cmsghdr *c;
    if (recvmsg(channel, &msg, MSG_CMSG_CLOEXEC) == 1 && (c = CMSG_FIRSTHDR(&msg)) != NULL &&
        c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    }
    return fd;
}

/* ---- ring_hostile -------------------------------------------------------------------------------------- */
/* What a peer can write into the shared memory: each broken rule ends the ring (BROKEN for the reader, CORRUPT for
 * the writer), and a descriptor that is not a ring's memfd, or not an end of a bell the peer made, is refused. */

typedef struct {
    const char *what;
    uint32_t tail;            /* the service's tail, as written (the reader's head is 120) */
    bool record;              /* a record's header written at 120 (each case breaks one rule only): */
    uint32_t length;
    uint16_t kind, reserved;
} ring_spoil_t;

static void ring_hostile_writes(void) {
    static const ring_spoil_t spoils[] = {
        { "a tail past the ring", 120 + PL_RING_BYTES + 8, true, 100, RING_PACKET, 0 },
        { "a tail behind the head", 112, true, 100, RING_PACKET, 0 },
        { "a misaligned tail", 120 + 112 + 4, true, 100, RING_PACKET, 0 },
        { "a record past the tail", 120 + 16, true, 100, RING_PACKET, 0 },
        { "a record over the largest packet", 120 + 65536 + 16, true, 65537, RING_PACKET, 0 },
        { "a reserved byte", 120 + 112, true, 100, RING_PACKET, 1 },
        { "the other reserved byte", 120 + 112, true, 100, RING_PACKET, 0x100 },
        { "an unknown kind", 120 + 112, true, 100, 4, 0 },
        { "kind 0", 120 + 112, true, 100, 0, 0 },
        { "a mark with bytes", 120 + 112, true, 100, RING_MARK, 0 },
        { "a packet shorter than a frame", 120 + 16, true, 4, RING_PACKET, 0 },
        { "a packet of no bytes", 120 + 8, true, 0, RING_PACKET, 0 },
        { "a pad not ending at the end", PL_RING_BYTES, true, 104, RING_PAD, 0 },
        { "a pad past the tail", 120 + 112, true, PL_RING_BYTES - 120 - 8, RING_PAD, 0 },
    };
    uint8_t out[PL_WIRE_MAX_FRAME];
    size_t length;
    for (size_t i = 0; i < sizeof spoils / sizeof spoils[0]; i++) {
        const ring_spoil_t *s = &spoils[i];
        ring_pair_t p;
        ring_pair_open(&p);
        if (s->record) ring_write_record_header(&p, RING_RECORDS(1) + 120, s->length, s->kind, s->reserved);
        *ring_word(&p, RING_TAIL(1)) = s->tail;
        const char *reason = NULL;
        pl_ring_take_result_t result = pl_ring_take(p.client, out, &length, &reason);
        if (result != PL_RING_BROKEN || reason == NULL) {
            fprintf(stderr, "ring_hostile: %s: take gave %d\n", s->what, (int)result);
            CHECK(!"taken as broken");
        }
        ring_pair_close(&p);
    }

    /* A record that runs past the ring's end: the reader 16 bytes before it, the tail well after. */
    ring_pair_t p;
    ring_pair_open(&p);
    const char *reason = NULL;
    for (uint32_t seq = 1, tail; (tail = *ring_word(&p, RING_TAIL(1))) < PL_RING_BYTES - 16; seq++) {
        uint32_t left = PL_RING_BYTES - 16 - tail; /* records of at most 65,536 bytes up to 16 before the end */
        CHECK(ring_put(p.service, seq, left > 65536 ? 65536 - 8 : left - 8) == PL_RING_PUT);
    }
    CHECK(*ring_word(&p, RING_TAIL(1)) == PL_RING_BYTES - 16);
    while (pl_ring_take(p.client, out, &length, &reason) == PL_RING_PACKET) {}
    ring_write_record_header(&p, RING_RECORDS(1) + PL_RING_BYTES - 16, 64, RING_PACKET, 0);
    *ring_word(&p, RING_TAIL(1)) = PL_RING_BYTES - 16 + 80;
    CHECK(pl_ring_take(p.client, out, &length, &reason) == PL_RING_BROKEN && reason != NULL);
    ring_pair_close(&p);

    /* The reader's head as the client's writer finds it once it rereads it (when room runs short: its second
     * largest packet, padding to the end): taken more than was put, misaligned, or so far behind that more than
     * the ring would wait. */
    const uint32_t heads[] = { PL_RING_BYTES + 16 + 8, 16 + 4, (uint32_t)-8 };
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        ring_pair_open(&p);
        CHECK(ring_put(p.client, 1, PL_WIRE_MAX_FRAME) == PL_RING_PUT);
        *ring_word(&p, RING_HEAD(0)) = heads[i];
        /* The largest packets until room runs short and the head is read again. */
        pl_ring_put_result_t put = PL_RING_PUT;
        for (uint32_t seq = 2; put == PL_RING_PUT && seq <= 2 + PL_RING_BYTES / PL_WIRE_MAX_FRAME; seq++) {
            put = ring_put(p.client, seq, PL_WIRE_MAX_FRAME);
        }
        CHECK(put == PL_RING_CORRUPT);
        ring_pair_close(&p);
    }
}

/* A memfd of `size` bytes with the given seals, beginning with a real ring's header when `magic`. */
static int ring_memfd(uint32_t size, int seals, bool magic) {
    int memfd = memfd_create("pl_stress-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(memfd >= 0 && ftruncate(memfd, size) == 0);
    if (magic) {
        pl_ring_t *ring;
        int real, bell;
        uint8_t header[64];
        CHECK_OK(pl_ring_create(&ring, &real, &bell));
        CHECK(pread(real, header, sizeof header, 0) == sizeof header);
        CHECK(pwrite(memfd, header, sizeof header, 0) == sizeof header);
        pl_ring_free(ring);
        close(real);
        close(bell);
    }
    if (seals != 0) CHECK(fcntl(memfd, F_ADD_SEALS, seals) == 0);
    return memfd;
}

static void ring_refused_descriptors(void) {
    const int sealed = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    int pipe_fds[2];
    CHECK(pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) == 0);
    struct { const char *what; int fd; } offers[] = {
        { "a pipe", pipe_fds[0] },
        { "/dev/null", open("/dev/null", O_RDWR | O_CLOEXEC) },
        { "a memfd not sealed against shrinking", ring_memfd(PL_RING_MAP_BYTES, F_SEAL_GROW | F_SEAL_SEAL, true) },
        { "a memfd not sealed against growing", ring_memfd(PL_RING_MAP_BYTES, F_SEAL_SHRINK | F_SEAL_SEAL, true) },
        { "a memfd sealed against writing", ring_memfd(PL_RING_MAP_BYTES, sealed | F_SEAL_WRITE, true) },
        { "a memfd sealed against future writes", ring_memfd(PL_RING_MAP_BYTES, sealed | F_SEAL_FUTURE_WRITE, true) },
        { "a memfd a page short", ring_memfd(PL_RING_MAP_BYTES - 4096, sealed, true) },
        { "a memfd a page long", ring_memfd(PL_RING_MAP_BYTES + 4096, sealed, true) },
        { "a memfd without the magic", ring_memfd(PL_RING_MAP_BYTES, sealed, false) },
    };
    for (size_t i = 0; i < sizeof offers / sizeof offers[0]; i++) {
        int bell = 0;
        bool peer_fault = false;
        const char *reason = NULL;
        pl_ring_t *ring = pl_ring_adopt(offers[i].fd, &bell, &peer_fault, &reason);
        if (ring != NULL || bell != -1 || !peer_fault || reason == NULL) {
            fprintf(stderr, "ring_hostile: %s was not refused as the peer's fault\n", offers[i].what);
            CHECK(!"refused");
            pl_ring_free(ring);
        }
        close(offers[i].fd);
    }
    int memfd = ring_memfd(PL_RING_MAP_BYTES, sealed, true), ringer;
    bool peer_fault;
    const char *reason;
    pl_ring_t *ring = pl_ring_adopt(memfd, &ringer, &peer_fault, &reason); /* and a real one is not */
    CHECK(ring != NULL && ringer >= 0 && pl_ring_bell(ring) >= 0);
    close(memfd);
    close(ringer); /* the end the peer is to ring this side through: sent, say */

    /* The peer's bell, which this side rings by writing to it, must be an eventfd: a pipe's write end (what bells
     * were), a regular file, a FIFO, a socket, a timerfd and an epoll set (two other files the kernel names
     * "anon_inode") are refused as the peer's fault, and the caller keeps them; an eventfd is taken, and a second
     * one after it refused. */
    char name[] = "/tmp/pl_stress-bell-XXXXXX";
    int file = mkstemp(name);
    CHECK(file >= 0);
    unlink(name);
    char fifo[] = "/tmp/pl_stress-fifo-XXXXXX";
    int fifo_fd = -1;
    if (mkdtemp(fifo) != NULL) {
        char path[64];
        snprintf(path, sizeof path, "%s/f", fifo);
        if (mkfifo(path, 0600) == 0) fifo_fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        unlink(path);
        rmdir(fifo);
    }
    CHECK(fifo_fd >= 0);
    int sockets[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) == 0);
    const struct { const char *what; int fd; } refused[] = {
        { "a pipe's write end", pipe_fds[1] },
        { "a regular file", file },
        { "a FIFO", fifo_fd },
        { "a socket", sockets[0] },
        { "a timerfd", timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC) },
        { "an epoll set", epoll_create1(EPOLL_CLOEXEC) },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(refused[i].fd >= 0);
        if (refused[i].fd < 0) continue;
        reason = NULL;
        peer_fault = false;
        bool taken = pl_ring_take_ringer(ring, refused[i].fd, &peer_fault, &reason);
        if (taken || reason == NULL || !peer_fault) {
            fprintf(stderr, "ring_hostile: %s was not refused as the peer's fault\n", refused[i].what);
            CHECK(!"refused");
        }
        if (!taken) CHECK(close(refused[i].fd) == 0); /* still the caller's */
    }
    close(sockets[1]);
    int bell = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC), second = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);
    reason = NULL;
    CHECK(pl_ring_take_ringer(ring, bell, &peer_fault, &reason));
    reason = NULL;
    CHECK(!pl_ring_take_ringer(ring, second, &peer_fault, &reason) && reason != NULL && peer_fault);
    CHECK(close(second) == 0);
    pl_ring_free(ring);
}

static void scenario_ring_hostile(void) {
    ring_hostile_writes();
    ring_refused_descriptors();
}

/* ---- ring_stuck_bell ----------------------------------------------------------------------------------- */
/* The peer shares the open file description of the bell this side rings (it made the eventfd and sent a copy): it
 * can make it blocking and raise its counter to the largest value, where a write of anything but zero would wait,
 * and close its copy. None of that may make a ring (under a connection's write lock) wait, nor raise SIGPIPE. A
 * timer ends the program with a failure instead of a hang. The service plays the hostile peer, the client this
 * side. */

static void ring_stuck_alarm(int sig) {
    (void)sig;
    static const char message[] = "FAIL ring_stuck_bell: a ring blocked (10 s)\n";
    ssize_t written = write(STDERR_FILENO, message, sizeof message - 1);
    (void)written;
    _exit(1);
}

static void scenario_ring_stuck_bell(void) {
    ring_pair_t p;
    ring_pair_open(&p);
    struct sigaction on_alarm = { .sa_handler = ring_stuck_alarm }, before;
    sigemptyset(&on_alarm.sa_mask);
    CHECK(sigaction(SIGALRM, &on_alarm, &before) == 0);
    alarm(10);

    /* The peer makes its bell blocking and raises its counter to the top (through the copy this side holds: the
     * same description), then says in the memory that its writer waits for room, and this side's done rings it,
     * again and again; a put for its reader, armed as the memory says, rings it too. Each returns, the counter
     * unchanged. */
    int flags = fcntl(p.client_ringer, F_GETFL);
    CHECK(flags >= 0 && fcntl(p.client_ringer, F_SETFL, flags & ~O_NONBLOCK) == 0);
    uint64_t top = UINT64_MAX - 1 - 1; /* the counter is one: one more than this is the most it holds */
    CHECK(write(p.client_ringer, &top, sizeof top) == sizeof top);
    CHECK(ring_bell_count(p.client_ringer) == (long long)(UINT64_MAX - 1));
    for (int i = 0; i < 1000; i++) {
        *ring_word(&p, RING_WAITING(1)) = 1;
        pl_ring_done_reading(p.client);
        CHECK(*ring_word(&p, RING_WAITING(1)) == 0);
    }
    *ring_word(&p, RING_ARMED(0)) = 1;
    CHECK(ring_put(p.client, 2, 8) == PL_RING_PUT);
    CHECK(*ring_word(&p, RING_ARMED(0)) == 0 && ring_bell_count(p.client_ringer) == (long long)(UINT64_MAX - 1));
    CHECK(ring_bell_rings(&p, p.service) == 1001);

    /* The peer gone: its copies closed. A ring then is no SIGPIPE, which would end this process (an eventfd never
     * raises it; a pipe, what bells were, did). SIGPIPE is blocked meanwhile, to be found pending whatever its
     * disposition. */
    pl_ring_free(p.service);
    p.service = NULL;
    sigset_t pipe_only, mask, pending;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    CHECK(pthread_sigmask(SIG_BLOCK, &pipe_only, &mask) == 0);
    *ring_word(&p, RING_ARMED(0)) = 1;
    CHECK(ring_put(p.client, 3, 8) == PL_RING_PUT && *ring_word(&p, RING_ARMED(0)) == 0);
    *ring_word(&p, RING_WAITING(1)) = 1;
    pl_ring_done_reading(p.client);
    CHECK(sigpending(&pending) == 0);
    bool piped = sigismember(&pending, SIGPIPE);
    CHECK(!piped);
    if (piped) {
        int sig;
        sigwait(&pipe_only, &sig);
    }
    CHECK(pthread_sigmask(SIG_SETMASK, &mask, NULL) == 0);

    alarm(0);
    CHECK(sigaction(SIGALRM, &before, NULL) == 0);
    ring_pair_close(&p);
}

/* ---- ring_bell_held ------------------------------------------------------------------------------------ */
/* The kernel copies a read's bytes to, and a write's from, the caller's memory, and a peer can make that copy last
 * as long as it likes: its buffer a page whose fault it never serves (userfaultfd here; a page of a file it serves
 * through FUSE does the same without privileges). A pipe holds its one mutex across the copy, so bells that were
 * pipes were held up this way. A ring (under a connection's write or read lock) must not wait for the peer's read
 * or write of the bell it rings. The peer is a thread here, as the kernel cannot tell; skipped where userfaultfd is
 * refused. */

typedef struct {
    pl_ring_t *ring;    /* this side's */
    int fd;             /* the peer's bell */
    bool writes;        /* the peer writes from its page, or reads into it */
    uint8_t *page;      /* registered with userfaultfd: its first touch waits until it is served */
    atomic_bool done;
} held_bell_t;

static void *held_bell_peer(void *arg) {
    held_bell_t *h = arg;
    ssize_t n = h->writes ? write(h->fd, h->page, 8) : read(h->fd, h->page, 8);
    (void)n;
    return NULL;
}

static void *held_bell_this_side(void *arg) {
    held_bell_t *h = arg;
    pl_ring_done_reading(h->ring); /* the peer's writer waits for room: it rings */
    atomic_store(&h->done, true);
    return NULL;
}

/* The peer in the middle of its copy (its fault pending), then this side rings; whether that returned within a
 * second. The fault is served afterwards, whatever happened, so that nothing stays stuck. */
static bool held_bell_returns(held_bell_t *h) {
    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = { .api = UFFD_API };
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0) {
        if (uffd >= 0) close(uffd);
        return true; /* no userfaultfd here: nothing to show */
    }
    h->page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(h->page != MAP_FAILED);
    struct uffdio_register reg = { .range = { (uintptr_t)h->page, 4096 }, .mode = UFFDIO_REGISTER_MODE_MISSING };
    CHECK(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0);
    pthread_t peer, side;
    CHECK(pthread_create(&peer, NULL, held_bell_peer, h) == 0);
    struct pollfd fault = { .fd = uffd, .events = POLLIN };
    CHECK(poll(&fault, 1, 5000) == 1); /* the peer is in the copy */
    struct uffd_msg msg;
    CHECK(read(uffd, &msg, sizeof msg) == (ssize_t)sizeof msg && msg.event == UFFD_EVENT_PAGEFAULT);
    atomic_store(&h->done, false);
    CHECK(pthread_create(&side, NULL, held_bell_this_side, h) == 0);
    for (int i = 0; i < 100 && !atomic_load(&h->done); i++) usleep(10000);
    bool returned = atomic_load(&h->done);
    struct uffdio_zeropage zero = { .range = { (uintptr_t)h->page, 4096 } };
    CHECK(ioctl(uffd, UFFDIO_ZEROPAGE, &zero) == 0);
    pthread_join(peer, NULL);
    pthread_join(side, NULL);
    munmap(h->page, 4096);
    close(uffd);
    return returned;
}

static void scenario_ring_bell_held(void) {
    ring_pair_t p;
    ring_pair_open(&p);
    /* A ring while the peer reads its bell (its counter, one) into the page. */
    held_bell_t h = { .ring = p.client, .fd = pl_ring_bell(p.service) };
    *ring_word(&p, RING_WAITING(1)) = 1;
    bool rang = held_bell_returns(&h);
    if (!rang) fprintf(stderr, "ring_bell_held: a ring waited for the peer's read of its bell\n");
    CHECK(rang);
    /* A ring while the peer writes to its bell from the page (zero: the page is served zeroed). */
    h = (held_bell_t){ .ring = p.client, .fd = pl_ring_bell(p.service), .writes = true };
    *ring_word(&p, RING_WAITING(1)) = 1;
    rang = held_bell_returns(&h);
    if (!rang) fprintf(stderr, "ring_bell_held: a ring waited for the peer's write to its bell\n");
    CHECK(rang);
    ring_pair_close(&p);
}

/* ---- ring_fork_stream ---------------------------------------------------------------------------------- */
/* A child process writes 200,000 records through a ring, the parent reads them: marks and packets of 8 to 65,536
 * bytes, each checked. Each side sleeps on its bell (the reader when empty and armed, the writer when full): a lost
 * wake-up leaves both asleep, and fails on a 10 s timeout. Each side's read end reaches the other as a connection's
 * does (the parent's by inheritance, the child's over a socket), and neither side reads its bell: its arms empty it,
 * and no more than 512 rings ever wait in it. */

enum { RS_RECORDS = 200000, RS_ROUND = 20000 };

static uint32_t rs_lengths[RS_RECORDS]; /* 0 a mark, else a packet's length */

/* The stream's records: mostly small, a few of the largest, and, in a ring that holds less than two of the largest
 * records, at the end of each round two that bring the writer's tail to the ring's middle, then the largest
 * packet, which pads to the end and, when the reader has taken everything before it (the writer pauses to let it),
 * fits only once the reader has taken the pad too. */
static void rs_plan(void) {
    uint32_t tail = 0; /* the writer's, as pl_ring_put moves it */
    bool middle = PL_RING_BYTES < 2 * (PL_WIRE_MAX_FRAME + PL_RING_RECORD_HEADER);
    for (uint32_t seq = 0; seq < RS_RECORDS; seq++) {
        uint32_t at = tail % PL_RING_BYTES, length;
        uint64_t x = 0x9E3779B97F4A7C15ull * (seq + 1);
        uint32_t r = rnd(&x);
        if (!middle) {
            length = r % 16 == 0 ? 0 : r % 256 == 1 ? PL_WIRE_MAX_FRAME - 8 * ((r >> 8) % 4)
                     : r % 8 == 2 ? 8 + (r >> 8) % 4089 : 8 + (r >> 8) % 249;
        } else if (seq % RS_ROUND == RS_ROUND - 3) {
            length = at > PL_RING_BYTES / 2 - 16 ? PL_RING_BYTES - at - 8 : 0; /* to the start, if past the middle */
        } else if (seq % RS_ROUND == RS_ROUND - 2) {
            length = PL_RING_BYTES / 2 - at - 8;
        } else if (seq % RS_ROUND == RS_ROUND - 1) {
            length = PL_WIRE_MAX_FRAME;
        } else if (r % 16 == 0) {
            length = 0;
        } else if (r % 256 == 1) {
            length = PL_WIRE_MAX_FRAME - 8 * ((r >> 8) % 4);
        } else if (r % 8 == 2) {
            length = 8 + (r >> 8) % 4089;
        } else {
            length = 8 + (r >> 8) % 249;
        }
        rs_lengths[seq] = length;
        uint32_t need = PL_RING_RECORD_HEADER + ((length + 7u) & ~7u);
        if (need > PL_RING_BYTES - at) tail += PL_RING_BYTES - at; /* a pad */
        tail += need;
    }
}

/* An epoll set watching `bell` edge-triggered, as a connection's readers watch it (pl_poller_add_bell): poll() would
 * find a bell that is never read readable from its first ring until its side's arm next empties it. -1 on failure. */
static int rs_watch(int bell) {
    int watch = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = { .events = EPOLLIN | EPOLLET };
    if (watch >= 0 && epoll_ctl(watch, EPOLL_CTL_ADD, bell, &event) != 0) {
        close(watch);
        watch = -1;
    }
    return watch;
}

/* Waits for a ring of the bell `watch` watches (10 s at most). */
static bool rs_wait(int watch) {
    struct epoll_event event;
    int n;
    do { n = epoll_wait(watch, &event, 1, 10000); } while (n < 0 && errno == EINTR);
    return n == 1;
}

/* The child: the service's side of the ring, on the inherited memfd, ringing the parent through the inherited end
 * the parent made for it; the end of its own bell the parent is to ring goes to the parent over `channel`. Exit
 * codes: 2 set-up, 3 CORRUPT, 4 no room for 10 s, 5 its bell's counter moved (rings write zero). */
static void rs_writer(pl_ring_t *parents, int memfd, int parent_ringer, int channel) {
    pl_ring_forget_in_child(parents);
    int ringer;
    bool peer_fault;
    const char *reason;
    pl_ring_t *ring = pl_ring_adopt(memfd, &ringer, &peer_fault, &reason);
    if (ring == NULL || !pl_ring_take_ringer(ring, parent_ringer, &peer_fault, &reason)) child_exit(2);
    int watch = rs_watch(pl_ring_bell(ring));
    if (watch < 0) child_exit(2);
    if (!send_one_descriptor(channel, ringer)) child_exit(2);
    close(ringer); /* sent */
    for (uint32_t seq = 0; seq < RS_RECORDS; seq++) {
        uint32_t length = rs_lengths[seq];
        if (seq % RS_ROUND == RS_ROUND - 1) sleep_us(10000);
        pl_ring_put_result_t result;
        while ((result = length == 0 ? pl_ring_put(ring, NULL, 0, NULL, 0, true) : ring_put(ring, seq, length)) !=
               PL_RING_PUT) {
            if (result == PL_RING_CORRUPT) child_exit(3);
            if (!rs_wait(watch)) child_exit(4);
            /* Woken: its reader's pass over its (empty) ring, whose arm empties the bell now and then, and only
             * then the put again, as a connection sends what waited after reading (pl_conn_read_frames): a ring
             * for room that came after the wait and was emptied with the rest is not lost. */
            pl_ring_done_reading(ring);
            pl_ring_arm(ring);
            if (ring_bell_count(pl_ring_bell(ring)) != 1) child_exit(5);
        }
    }
    child_exit(0);
}

static void scenario_ring_fork_stream(void) {
    pl_ring_t *ring;
    int memfd, ringer, channel[2];
    CHECK_OK(pl_ring_create(&ring, &memfd, &ringer));
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) == 0);
    rs_plan();
    pid_t child = fork_or_end();
    if (child == 0) {
        close(channel[0]);
        rs_writer(ring, memfd, ringer, channel[1]);
    }
    close(memfd);
    close(ringer); /* the child has it */
    close(channel[1]);
    int child_ringer = receive_one_descriptor(channel[0]);
    close(channel[0]);
    const char *reason = "no bell from the child";
    bool peer_fault;
    bool ok = child_ringer >= 0 && pl_ring_take_ringer(ring, child_ringer, &peer_fault, &reason);
    if (!ok) {
        fprintf(stderr, "ring_fork_stream: %s\n", reason);
        if (child_ringer >= 0) close(child_ringer); /* refused: still ours */
    }
    CHECK(ok);
    int bell = pl_ring_bell(ring);
    int watch = ok ? rs_watch(bell) : -1;
    CHECK(!ok || watch >= 0);
    ok = ok && watch >= 0;

    static uint8_t out[PL_WIRE_MAX_FRAME];
    uint32_t seq = 0, pass = 0;
    while (ok && seq < RS_RECORDS) {
        size_t length = 0;
        pl_ring_take_result_t result = pl_ring_take(ring, out, &length, &reason);
        if (result == PL_RING_EMPTY) {
            pl_ring_done_reading(ring);
            pass = 0;
            if (pl_ring_arm(ring)) continue;
            ok = rs_wait(watch);
            if (!ok) fprintf(stderr, "ring_fork_stream: no wake-up in 10 s at record %u\n", seq);
            continue;
        }
        uint32_t expected = rs_lengths[seq];
        ok = expected == 0 ? result == PL_RING_MARK
                           : result == PL_RING_PACKET && length == expected &&
                                 memcmp(out, ring_content(seq), length) == 0;
        if (!ok) fprintf(stderr, "ring_fork_stream: record %u: %d, %zu bytes (%s)\n", seq, (int)result, length,
                         result == PL_RING_BROKEN ? reason : "not the record put");
        seq++;
        if (++pass == 64) { /* a reader's pass: room back to the writer */
            pl_ring_done_reading(ring);
            pass = 0;
        }
    }
    CHECK(ok && seq == RS_RECORDS);
    CHECK(ring_bell_count(bell) == 1); /* the child's rings wrote zero */
    if (!ok) kill(child, SIGKILL);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    /* 1: valgrind's --error-exitcode for the memory a forked process inherits; 2-5: the child's own failures. */
    if (ok && !(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1))) {
        fprintf(stderr, "ring_fork_stream: the child ended with status %#x\n", (unsigned)status);
    }
    CHECK(!ok || (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1)));
    if (watch >= 0) close(watch);
    pl_ring_free(ring);
}

/* ---- ring_stream_to_set ------------------------------------------------------------------------------ */

enum { RSS_ROUNDS = 6, RSS_LARGEST = 4096 };

/* A streaming child's end: a last message (id 9) with a port for the answer, which the receiver gives once it has
 * taken everything before it (stream_answer_last); then child_exit, 0 or 4 when that failed. What still waited in
 * this process's outgoing queue would die with the _exit. */
static _Noreturn void stream_end_and_exit(pl_port_t *service) {
    pl_port_t *reply = NULL;
    pl_received_t answer;
    if (pl_port_create(1, 16, &reply) != PL_OK || pl_port_send(service, 9, NULL, 0, reply, PL_TIMEOUT_FOREVER) != PL_OK ||
        pl_port_receive(reply, &answer, NULL, 0, 20000 * MS) != PL_OK) {
        child_exit(4);
    }
    child_exit(0);
}

/* The receiver's side of stream_end_and_exit: answers the last message `out` on its reply port. */
static void stream_answer_last(const pl_received_t *out) {
    CHECK(out->reply != NULL);
    if (out->reply == NULL) return;
    CHECK_OK(pl_port_send(out->reply, 10, NULL, 0, NULL, 5000 * MS));
    pl_port_release_send(out->reply);
}

/* Rounds of small messages, then of 4 KiB ones, which fill the ring faster than the receiver, slowed down, empties it.
 *
 * The receiver reads the connection's ring itself (the set feeds from it) while the transport reads it too, when
 * the stream outruns the receiver; before sleeping, the receiver lets go of the set's lock to empty the ring. A port
 * the transport makes ready in that moment wakes nobody: the receiver must look again, or it sleeps on a full queue
 * while the sender waits for room.
 *
 * The sender, finding the ring full, queues the message; the receiver may make room and ring the sender's bell
 * before the message is queued, and the sender's transport, woken, finds nothing to send: the sender must look at
 * the ring again once the message is queued, or the queue waits for a bell that has rung already. */
static void ring_stream_to_set_body(void) {
    static const uint32_t sizes[RSS_ROUNDS] = { 16, 16, 16, RSS_LARGEST, RSS_LARGEST, RSS_LARGEST };
    static const uint32_t counts[RSS_ROUNDS] = { 100000, 100000, 100000, 30000, 30000, 30000 };
    char dir[] = "/tmp/pl-stress-rss-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pl_set_shared_rings(PL_RINGS_WHEN_BUSY);
    pl_port_t *port;
    pl_port_set_t *set;
    CHECK_OK(pl_port_create(1024, RSS_LARGEST, &port));
    CHECK_OK(pl_port_set_create(&set));
    CHECK_OK(pl_port_set_insert(set, port));
    CHECK_OK(pl_service_check_in(dir, "svc", port, NULL));
    static uint32_t payload[RSS_LARGEST / 4];
    for (int round = 0; round < RSS_ROUNDS && atomic_load(&scenario_failures) == 0; round++) {
        uint32_t size = sizes[round], count = counts[round], words = size / 4;
        pid_t child = fork_or_end();
        if (child == 0) {
            pl_port_t *service = NULL;
            if (pl_service_look_up(dir, "svc", 5000 * MS, &service) != PL_OK) child_exit(2);
            for (uint32_t seq = 0; seq < count; seq++) {
                payload[0] = seq;
                payload[1] = ~seq;
                payload[words - 1] = seq * 7919u;
                pl_status_t status = pl_port_send(service, 8, payload, size, NULL, PL_TIMEOUT_FOREVER);
                if (status != PL_OK) {
                    fprintf(stderr, "ring_stream_to_set: the child's send %u failed: %s\n", seq,
                            pl_status_describe(status));
                    child_exit(3);
                }
            }
            stream_end_and_exit(service);
        }
        uint32_t expected = 0;
        int64_t slowest = 0;
        pl_status_t status = PL_OK;
        while (expected < count) {
            pl_received_t out;
            /* A receiver asleep on a ready port wakes at its deadline with the message: the time tells. */
            int64_t start = now_ns();
            status = pl_port_set_receive(set, &out, payload, sizeof payload, 20000 * MS);
            int64_t took = now_ns() - start;
            if (took > slowest) slowest = took;
            if (status != PL_OK) break;
            if (out.kind != PL_RECEIVED_MESSAGE || out.id != 8 || out.size != size || payload[0] != expected ||
                payload[1] != ~expected || payload[words - 1] != expected * 7919u) {
                status = PL_ERR_SYSTEM;
                break;
            }
            expected++;
            /* Large rounds: a receiver slower than its sender, whose ring stays full. */
            if (size == RSS_LARGEST) {
                int64_t until = now_ns() + 2000;
                while (now_ns() < until) {}
            }
        }
        if (expected < count) {
            fprintf(stderr, "ring_stream_to_set: round %d (%u B): message %u of %u: %s\n", round, size, expected,
                    count, status == PL_ERR_SYSTEM ? "not the one due" : pl_status_describe(status));
            kill(child, SIGKILL);
        }
        if (expected == count) {
            /* The sender's last message, with a port for the answer it waits for before it ends. */
            pl_received_t out;
            status = pl_port_set_receive(set, &out, payload, sizeof payload, 20000 * MS);
            CHECK(status == PL_OK && out.id == 9);
            if (status == PL_OK && out.id == 9) stream_answer_last(&out);
        }
        CHECK(expected == count);
        if (slowest >= 10000 * MS) {
            fprintf(stderr, "ring_stream_to_set: round %d (%u B): a receive took %.1f s\n", round, size,
                    (double)slowest / 1e9);
        }
        CHECK(slowest < 10000 * MS);
        int wait_status = 0;
        CHECK(waitpid(child, &wait_status, 0) == child);
        /* 1: valgrind's verdict on the memory the child inherited; 2 to 4: the child's own failures. */
        CHECK(expected < count ||
              (WIFEXITED(wait_status) && (WEXITSTATUS(wait_status) == 0 || WEXITSTATUS(wait_status) == 1)));
    }
    CHECK_OK(pl_port_destroy(port));
    pl_port_set_release(set);
    remove_service_dir(dir);
}

static void scenario_ring_stream_to_set(void) { run_in_own_process(ring_stream_to_set_body); }

/* ---- senders_to_checked_in_port --------------------------------------------------------------------- */

enum { SC_SENDERS = 3, SC_MESSAGES = 5000, SC_BATCH = 16 };

/* One child: looks the service up, streams SC_MESSAGES of {sender, seq} to it, and ends (stream_end_and_exit). */
static void sc_sender(const char *dir, uint32_t sender) {
    pl_port_t *service = NULL;
    if (pl_service_look_up(dir, "svc", 5000 * MS, &service) != PL_OK) child_exit(2);
    for (uint32_t seq = 0; seq < SC_MESSAGES; seq++) {
        uint32_t words[2] = { sender, seq };
        if (pl_port_send(service, 20, words, sizeof words, NULL, PL_TIMEOUT_FOREVER) != PL_OK) child_exit(3);
    }
    stream_end_and_exit(service);
}

/* Checks one received message against what its sender sent so far; answers a sender's last message. */
static bool sc_take(const pl_received_t *out, const uint32_t *words, uint32_t *next, int *done) {
    if (out->kind != PL_RECEIVED_MESSAGE) return false;
    if (out->id == 9) {
        stream_answer_last(out);
        (*done)++;
        return out->reply != NULL;
    }
    if (out->id != 20 || out->size != 8 || words[0] >= SC_SENDERS || words[1] != next[words[0]]) {
        fprintf(stderr, "senders_to_checked_in_port: id %d, %u bytes, sender %u, seq %u (expected %u)\n", out->id,
                out->size, words[0], words[1], words[0] < SC_SENDERS ? next[words[0]] : 0);
        return false;
    }
    next[words[0]]++;
    return true;
}

static void senders_to_checked_in_port_body(void) {
    char dir[] = "/tmp/pl-stress-sc-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pl_port_t *port;
    pl_port_set_t *set;
    /* A short queue: the senders wait for credit most of the time, and each receive gives room back. */
    CHECK_OK(pl_port_create(8, 64, &port));
    CHECK_OK(pl_port_set_create(&set));
    CHECK_OK(pl_port_set_insert(set, port));
    CHECK_OK(pl_service_check_in(dir, "svc", port, NULL));
    pid_t children[SC_SENDERS];
    for (uint32_t i = 0; i < SC_SENDERS; i++) {
        children[i] = fork_or_end();
        if (children[i] == 0) sc_sender(dir, i);
    }
    uint32_t next[SC_SENDERS] = { 0 };
    int done = 0;
    bool intact = true;
    pl_status_t status = PL_OK;
    pl_received_t outs[SC_BATCH];
    uint64_t buffer[SC_BATCH * 2];
    while (intact && done < SC_SENDERS) {
        uint32_t count = 0;
        status = pl_port_set_receive_batch_taking(set, outs, NULL, SC_BATCH, buffer, sizeof buffer, &count);
        for (uint32_t i = 0; i < count && intact; i++) {
            intact = sc_take(&outs[i], (const uint32_t *)((const char *)buffer + outs[i].offset), next, &done);
        }
        if (count > 0 || !intact) continue;
        status = pl_port_set_receive(set, &outs[0], buffer, sizeof buffer, 20000 * MS);
        if (status != PL_OK) break;
        intact = sc_take(&outs[0], (const uint32_t *)buffer, next, &done);
    }
    for (uint32_t i = 0; i < SC_SENDERS; i++) {
        if (next[i] != SC_MESSAGES) {
            fprintf(stderr, "senders_to_checked_in_port: sender %u: %u of %u messages (%s)\n", i, next[i], SC_MESSAGES,
                    intact ? pl_status_describe(status) : "out of order");
        }
        CHECK(next[i] == SC_MESSAGES);
    }
    CHECK(intact && done == SC_SENDERS);
    for (uint32_t i = 0; i < SC_SENDERS; i++) {
        if (done < SC_SENDERS) kill(children[i], SIGKILL);
        int wait_status = 0;
        CHECK(waitpid(children[i], &wait_status, 0) == children[i]);
        /* 1: valgrind's verdict on the memory the child inherited; 2 to 4: the child's own failures. */
        CHECK(done < SC_SENDERS || (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) <= 1));
    }
    CHECK_OK(pl_port_destroy(port));
    pl_port_set_release(set);
    remove_service_dir(dir);
}

static void scenario_senders_to_checked_in_port(void) { run_in_own_process(senders_to_checked_in_port_body); }

/* ---- exit_flush ------------------------------------------------------------------------------------- */

enum { EF_SIZE = 32768, EF_MOST = 64 };

/* How a round ends: the service resumes during the exit flush; it stays stopped; it stays stopped and the child's
 * connection goes by shared-memory ring, whose read index the child breaks just before exit(); or it stays stopped,
 * the connection goes by socket only, and another thread of the child sends on it while the flush waits. */
typedef enum { EF_RESUMED, EF_STOPPED, EF_BROKEN_RING, EF_SENDER_MEANWHILE } ef_round_t;

/* The child's thread of EF_SENDER_MEANWHILE: 100 ms into the flush (which waits a second for the stopped service),
 * sends on the connection without waiting, and tells the scenario's process how long the send took. The flush must
 * not keep the connection's writers out while it waits for room. */
typedef struct {
    pl_port_t *service;
    int to_parent;
} ef_meanwhile_t;

static void *ef_send_meanwhile(void *raw) {
    ef_meanwhile_t *arg = raw;
    sleep_us(100000);
    uint64_t word = 0;
    int64_t start = now_ns();
    (void)pl_port_send(arg->service, 33, &word, sizeof word, NULL, 0); /* queued, or timed out: no matter */
    int64_t took = now_ns() - start;
    if (write(arg->to_parent, &took, sizeof took) != sizeof took) child_exit(4);
    return NULL;
}

/* This process's copy of the read index of the client's direction of a shared-memory ring (the one a writer reads
 * to find room), found through /proc/self/maps; NULL when no ring is mapped. */
static _Atomic uint32_t *ef_ring_head(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL) return NULL;
    char line[512];
    unsigned long start = 0;
    while (fgets(line, sizeof line, maps) != NULL) {
        if (strstr(line, "portloop-ring") != NULL && sscanf(line, "%lx-", &start) == 1) break;
        start = 0;
    }
    fclose(maps);
    return start != 0 ? (_Atomic uint32_t *)(uintptr_t)(start + RING_HEAD(0)) : NULL;
}

/* Queues what it can of EF_MOST messages of EF_SIZE bytes for `service` (a send waits 100 ms at most): how many. */
static uint32_t ef_send_what_fits(pl_port_t *service, int32_t id) {
    static uint8_t payload[EF_SIZE];
    uint32_t sent = 0;
    while (sent < EF_MOST && pl_port_send(service, id, payload, sizeof payload, NULL, 100 * MS) == PL_OK) sent++;
    return sent;
}

/* What the exit scenarios share: an idle service process, and a child that talks to the scenario's process over two
 * pipes (it says 'L' once it has looked the service up, waits for the go, says how many it sent) and then calls
 * exit(). */
typedef struct {
    char dir[40];
    pid_t service, child;
    int up, down;             /* from the child, to the child */
} exit_rig_t;

/* Makes the service in a new directory named after `prefix` and forks the child, which runs `child_body` (it never
 * returns); once the child has said 'L', stops the service if `stop` (and waits for the stop: it takes effect only
 * when each of its threads next runs), gives the go, and returns how many the child says it sent. */
static uint32_t exit_rig_open(exit_rig_t *rig, const char *prefix, bool stop,
                              void (*child_body)(const char *dir, int to_parent, int from_parent, int round), int round) {
    snprintf(rig->dir, sizeof rig->dir, "/tmp/pl-stress-%s-XXXXXX", prefix);
    CHECK(mkdtemp(rig->dir) != NULL);
    rig->service = fork_idle_service(rig->dir, 1024, EF_SIZE);
    int up[2], down[2];
    CHECK(pipe2(up, O_CLOEXEC) == 0 && pipe2(down, O_CLOEXEC) == 0);
    rig->child = fork_or_end();
    if (rig->child == 0) child_body(rig->dir, up[1], down[0], round);
    close(up[1]);
    close(down[0]);
    rig->up = up[0];
    rig->down = down[1];
    char byte = 0;
    uint32_t sent = 0;
    CHECK(read(rig->up, &byte, 1) == 1 && byte == 'L');
    if (stop) {
        int status = 0;
        CHECK(kill(rig->service, SIGSTOP) == 0);
        CHECK(waitpid(rig->service, &status, WUNTRACED) == rig->service && WIFSTOPPED(status));
    }
    byte = 'G';
    CHECK(write(rig->down, &byte, 1) == 1);
    CHECK(read(rig->up, &sent, sizeof sent) == sizeof sent);
    return sent;
}

/* Whether the child has ended, without reaping it. */
static bool exit_rig_child_ended(exit_rig_t *rig) {
    siginfo_t info = { 0 };
    return waitid(P_PID, (id_t)rig->child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == rig->child;
}

/* Reaps the child, waiting 10 s at most from `since` (then it is killed and the check fails); it must have exited with
 * 0, or 1 (valgrind's verdict on the memory it inherited). Returns how long after `since` it had ended. */
static int64_t exit_rig_reap(exit_rig_t *rig, int64_t since, const char *scenario) {
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(rig->child, &status, WNOHANG)) == 0 && now_ns() - since < 10000 * MS) sleep_us(1000);
    int64_t took = now_ns() - since;
    if (done == 0) {
        fprintf(stderr, "%s: the child's exit() did not return in 10 s\n", scenario);
        kill(rig->child, SIGKILL);
        waitpid(rig->child, &status, 0);
    }
    CHECK(done == rig->child && WIFEXITED(status) && WEXITSTATUS(status) <= 1);
    return took;
}

/* The service's queue depth, asked again until it reaches `expected` for `settle_ns` at most (the service reads its
 * connections in turns); then the service, the pipes and the directory go. */
static uint32_t exit_rig_close(exit_rig_t *rig, uint32_t expected, int64_t settle_ns) {
    pl_port_t *right = NULL;
    pl_service_status_t answer = { 0 };
    CHECK_OK(pl_service_look_up(rig->dir, "svc", 5000 * MS, &right));
    int64_t asked = now_ns();
    for (;;) {
        CHECK_OK(pl_service_status(right, 0, 5000 * MS, &answer));
        if (answer.queue_depth >= expected || now_ns() - asked >= settle_ns) break;
        sleep_us(10000);
    }
    CHECK_OK(pl_port_release_send(right));
    int status = 0;
    kill(rig->service, SIGKILL);
    CHECK(waitpid(rig->service, &status, 0) == rig->service);
    close(rig->up);
    close(rig->down);
    remove_service_dir(rig->dir);
    return answer.queue_depth;
}

/* A child of the scenario's process, forked before that process has threads: looks the service up, says so, waits
 * for the go (the service is stopped by then), queues what it can of EF_MOST messages (a send waits 100 ms at most),
 * says how many, and calls exit(): what still waits in its connection's queue is the exit flush's. With a broken
 * ring, the flush's first look for room finds the read index out of bounds and ends the connection. */
static void ef_sender(const char *dir, int to_parent, int from_parent, int round) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (round == EF_BROKEN_RING) pl_set_shared_rings(PL_RINGS_ALWAYS);
    if (round == EF_SENDER_MEANWHILE) pl_set_shared_rings(PL_RINGS_NEVER); /* the flush waits on the socket */
    pl_port_t *service = NULL;
    char byte = 'L';
    if (pl_service_look_up(dir, "svc", 5000 * MS, &service) != PL_OK) child_exit(2);
    _Atomic uint32_t *head = NULL;
    if (round == EF_BROKEN_RING) {
        /* The ring offer went with the look-up; the answer to a status query comes after the service's acceptance,
         * on the same connection. */
        pl_service_status_t status;
        if (pl_service_status(service, 0, 5000 * MS, &status) != PL_OK || (head = ef_ring_head()) == NULL) {
            child_exit(5);
        }
    }
    if (write(to_parent, &byte, 1) != 1 || read(from_parent, &byte, 1) != 1) child_exit(3);
    uint32_t sent = ef_send_what_fits(service, 30);
    if (write(to_parent, &sent, sizeof sent) != sizeof sent) child_exit(4);
    if (head != NULL) atomic_store(head, 0xfffffff1u); /* read ahead of the tail, and misaligned */
    static ef_meanwhile_t meanwhile;
    if (round == EF_SENDER_MEANWHILE) {
        meanwhile = (ef_meanwhile_t){ .service = service, .to_parent = to_parent };
        pthread_t thread;
        if (pthread_create(&thread, NULL, ef_send_meanwhile, &meanwhile) != 0) child_exit(5);
        pthread_detach(thread);
    }
    exit(0);
}

/* A child streams into a stopped service's full socket or ring and calls exit(), which returns however the round
 * ends: when the service resumes 100 ms later, the flush delivers every message; when it stays stopped, exit()
 * gives up after the flush's bound (a second); when the ring breaks, the flush ends the connection, which takes the
 * transport's lock: a flush that held it would wait for itself. */
static void exit_flush_round(ef_round_t round) {
    exit_rig_t rig;
    uint32_t sent = exit_rig_open(&rig, "ef", true, ef_sender, (int)round);
    /* More than a Unix socket holds (212,992 bytes by default) or than the ring lets a writer use: the rest waits in
     * the child's queue at exit. */
    CHECK(sent * EF_SIZE > 1024 * 1024);
    int64_t exiting = now_ns();
    if (round == EF_SENDER_MEANWHILE) {
        /* Nothing comes if the send returned only when the flush gave up, the process ending before it could tell. */
        int64_t send_took = -1;
        struct pollfd told = { .fd = rig.up, .events = POLLIN };
        CHECK(poll(&told, 1, 5000) == 1);
        CHECK(read(rig.up, &send_took, sizeof send_took) == sizeof send_took);
        if (send_took < 0) fprintf(stderr, "  exit_flush: the send during the flush did not return in time\n");
        else if (verbose || send_took >= 300 * MS) {
            fprintf(stderr, "  exit_flush: a send during the flush took %.1f ms\n", (double)send_took / 1e6);
        }
        CHECK(send_took >= 0 && send_took < 300 * MS); /* the flush waits a second */
    }
    if (round == EF_RESUMED) {
        sleep_us(100000);
        CHECK(kill(rig.service, SIGCONT) == 0);
    }
    int64_t took = exit_rig_reap(&rig, exiting, "exit_flush");
    if (round != EF_RESUMED) {
        CHECK(took < 5000 * MS); /* the flush's bound is a second */
        CHECK(kill(rig.service, SIGCONT) == 0);
    }
    uint32_t arrived = exit_rig_close(&rig, sent, 0);
    if (round == EF_RESUMED && arrived != sent) fprintf(stderr, "exit_flush: %u messages sent, %u arrived\n", sent, arrived);
    /* What a broken ring held may or may not be read before its connection ends: only that not all came. */
    CHECK(round == EF_RESUMED ? arrived == sent : arrived < sent);
}

static void exit_flush_resumed_body(void) { exit_flush_round(EF_RESUMED); }
static void exit_flush_stopped_body(void) { exit_flush_round(EF_STOPPED); }
static void exit_flush_broken_ring_body(void) { exit_flush_round(EF_BROKEN_RING); }
static void exit_flush_sender_meanwhile_body(void) { exit_flush_round(EF_SENDER_MEANWHILE); }
static void scenario_exit_flush(void) {
    run_in_own_process(exit_flush_resumed_body);
    run_in_own_process(exit_flush_stopped_body);
    run_in_own_process(exit_flush_broken_ring_body);
    run_in_own_process(exit_flush_sender_meanwhile_body);
}

/* ---- exit_handler_sends ------------------------------------------------------------------------------ */

enum { EH_LATE = 200 };

/* The child's right to the service and its pipe to the scenario's process, for its atexit handlers; whether the late
 * handler sends (only in the late round's child). */
static pl_port_t *eh_service;
static int eh_to_parent = -1;
static bool eh_late;

/* The child's own atexit handler, registered before its transport first started: queues what it can of EF_MOST
 * messages for the stopped service (a send waits 100 ms at most) and says how many. */
static void eh_exit_handler(void) {
    uint32_t sent = ef_send_what_fits(eh_service, 31);
    if (write(eh_to_parent, &sent, sizeof sent) != sizeof sent) child_exit(4);
}

/* Registered before the library's exit flush (a constructor of a lower priority runs first), so it runs after the
 * flush (and before child_memcheck_verdict, registered before it): in the late round's child, streams EH_LATE small
 * messages, packing on (and still said to be), to the running service, and says how many sends returned. Every
 * process of this program has it; it does nothing elsewhere. */
static void eh_late_handler(void) {
    if (!eh_late) return;
    if (pl_stream_packing() != 1) child_exit(6); /* the flush packs nothing more, but leaves the setting as it was */
    uint64_t word = 0;
    uint32_t sent = 0;
    while (sent < EH_LATE && pl_port_send(eh_service, 32, &word, sizeof word, NULL, 100 * MS) == PL_OK) sent++;
    if (write(eh_to_parent, &sent, sizeof sent) != sizeof sent) child_exit(4);
}
__attribute__((constructor(102))) static void eh_register_late_handler(void) { atexit(eh_late_handler); }

/* A child of the scenario's process, forked before either has started a transport, whose connection goes by socket
 * only: registers its handler (or arms the late one, with packing on), then looks the service up (which starts its transport), says so, waits for the go
 * and calls exit(). */
static void eh_sender(const char *dir, int to_parent, int from_parent, int late) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    pl_set_shared_rings(PL_RINGS_NEVER); /* a ring would take what the socket cannot, and nothing would wait */
    eh_to_parent = to_parent;
    if (late) {
        eh_late = true;
        pl_set_stream_packing(1);
    } else if (atexit(eh_exit_handler) != 0) {
        child_exit(2);
    }
    char byte = 'L';
    if (pl_service_look_up(dir, "svc", 5000 * MS, &eh_service) != PL_OK) child_exit(2);
    if (write(to_parent, &byte, 1) != 1 || read(from_parent, &byte, 1) != 1) child_exit(3);
    exit(0);
}

/* What a program's own atexit handler sends is flushed too, however early the handler was registered: the child's
 * handler, registered before its transport started, streams into the stopped service's full socket; the service
 * resumes once the child has ended or 300 ms after the handler's last send, and every message arrives. Late: a
 * handler that runs after the flush streams into a service with room, and every message arrives (none is held back
 * to be packed). */
static void exit_handler_sends_round(bool late) {
    exit_rig_t rig;
    uint32_t sent = exit_rig_open(&rig, "eh", !late, eh_sender, late);
    /* More than the socket holds: the rest waits in the child's queue when its handler returns. */
    CHECK(late ? sent == EH_LATE : sent * EF_SIZE > 1024 * 1024);
    int64_t handled = now_ns();
    if (!late) {
        while (!exit_rig_child_ended(&rig) && now_ns() - handled < 300 * MS) sleep_us(1000);
        CHECK(kill(rig.service, SIGCONT) == 0);
    }
    exit_rig_reap(&rig, handled, "exit_handler_sends");
    uint32_t arrived = exit_rig_close(&rig, sent, 2000 * MS);
    if (arrived != sent) {
        fprintf(stderr, "exit_handler_sends: %u messages sent from the %s exit handler, %u arrived\n", sent,
                late ? "late" : "early", arrived);
    }
    CHECK(arrived == sent);
}

static void exit_handler_sends_early_body(void) { exit_handler_sends_round(false); }
static void exit_handler_sends_late_body(void) { exit_handler_sends_round(true); }
static void scenario_exit_handler_sends(void) {
    run_in_own_process(exit_handler_sends_early_body);
    run_in_own_process(exit_handler_sends_late_body);
}

/* ---- fragments_in_place ------------------------------------------------------------------------- */

#define FRAGMENTED_SIZE 200000u /* four fragments: three full, the last 3,548 bytes */

static uint8_t fragmented_byte(uint32_t i) { return (uint8_t)(i * 131u + (i >> 8)); }

/* A connection as a service's is after the client's hello (version 4), its port exported as handle 1 with two
 * credits lent; the peer is the other end of a socketpair. */
typedef struct hand_conn {
    int pair[2];
    pl_conn_t *conn;
    pl_port_t *port;
    pl_service_t service;
    uint8_t *buffer; /* the reader's: PL_READ_BATCH frames */
} hand_conn_t;

static void hand_conn_open(hand_conn_t *h) {
    memset(h, 0, sizeof *h);
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, h->pair) == 0);
    h->conn = pl_conn_new(h->pair[0], true);
    CHECK(h->conn != NULL);
    CHECK_OK(pl_identity_of_peer(h->pair[0], &h->conn->peer)); /* as a service's accept does */
    CHECK_OK(pl_port_create(4, 1u << 20, &h->port));
    h->service = (pl_service_t){ .listen_fd = -1, .lock_fd = -1, .port = h->port };
    atomic_init(&h->service.refs, 1);
    atomic_init(&h->service.connections, 1);
    pthread_mutex_lock(&h->conn->lock);
    pl_wire_right_t right;
    bool dead;
    CHECK_OK(pl_conn_export_locked(h->conn, h->port, &right, &dead));
    CHECK(right.handle == 1);
    h->conn->service = &h->service;
    h->conn->welcomed = true;
    pthread_mutex_unlock(&h->conn->lock);
    h->buffer = malloc(PL_FRAME_BUFFER_BYTES);
    CHECK(h->buffer != NULL);
    uint8_t hello[PL_WIRE_HELLO_SIZE];
    size_t length = pl_wire_encode_hello(hello, PL_WIRE_VERSION, 0, (pl_wire_right_t){ 0 });
    CHECK(send(h->pair[1], hello, length, 0) == (ssize_t)length);
}

static void hand_conn_close(hand_conn_t *h) {
    pl_conn_teardown(h->conn, "done");
    h->conn->service = NULL;
    pl_received_t out;
    while (pl_port_receive(h->port, &out, NULL, 0, 0) == PL_ERR_TOO_LARGE) {
        pl_payload_t payload;
        if (pl_port_receive_payload(h->port, &out, &payload, 0) == PL_OK) pl_payload_free(&payload);
    }
    pl_port_destroy(h->port);
    close(h->pair[1]);
    pl_conn_release(h->conn);
    free(h->buffer);
}

/* Sends one packet: frames back to back, as a peer that packs does. */
static void hand_send(hand_conn_t *h, const uint8_t *packet, size_t length) {
    CHECK(send(h->pair[1], packet, length, 0) == (ssize_t)length);
}

/* Sends one packet with up to two descriptors beside it (SCM_RIGHTS). */
static void hand_send_fds(hand_conn_t *h, const uint8_t *packet, size_t length, const int *fds, int count) {
    CHECK(send_with_descriptors(h->pair[1], packet, length, fds, count));
}

/* Appends a MESSAGE frame for handle 1 with the given flags (the fragment of `total` bytes at `offset`, `count` of
 * them) to `out`. */
static size_t hand_frame(uint8_t *out, uint8_t flags, int32_t id, uint32_t total, uint32_t offset, uint32_t count) {
    pl_wire_message_t m = { .dest = 1, .id = id, .total_size = total, .offset = offset };
    size_t head = pl_wire_encode_message_head(out, flags, &m, NULL, count);
    for (uint32_t i = 0; i < count; i++) out[head + i] = fragmented_byte(offset + i);
    return head + count;
}

static size_t hand_fragment(uint8_t *out, int32_t id, uint32_t total, uint32_t offset, uint32_t count, bool more) {
    return hand_frame(out, more ? PL_FRAME_MORE : 0, id, total, offset, count);
}

/* Reads what the socket holds, `batch` packets a system call; returns the last result. */
static pl_read_result_t hand_read(hand_conn_t *h, int batch, const char **why) {
    int taken;
    pl_read_result_t result;
    do {
        result = pl_conn_read_socket(h->conn, h->buffer, PL_READ_BATCH, SIZE_MAX, batch, why, &taken);
    } while (result == PL_READ_MORE);
    return result;
}

/* Receives message `id` from the port and checks its size and bytes. */
static void hand_expect(hand_conn_t *h, int32_t id, uint32_t size) {
    pl_received_t out;
    pl_payload_t payload;
    pl_status_t status = pl_port_receive_payload(h->port, &out, &payload, 0);
    CHECK_OK(status);
    if (status != PL_OK) return;
    CHECK(out.id == id && out.size == size && payload.size == size);
    bool intact = true;
    for (uint32_t i = 0; i < size && intact; i++) intact = ((uint8_t *)payload.base)[i] == fragmented_byte(i);
    CHECK(intact);
    pl_payload_free(&payload);
}

static void fragments_in_place_run(int batch) {
    hand_conn_t h;
    hand_conn_open(&h);
    const char *why = NULL;
    uint8_t *packet = malloc(2 * PL_WIRE_MAX_FRAME);
    CHECK(packet != NULL);
    uint32_t first = pl_wire_first_fragment_room(0), room = pl_wire_next_fragment_room();

    /* The hello and the first fragment, read before the rest is sent: the message is in progress. */
    hand_send(&h, packet, hand_fragment(packet, 7, FRAGMENTED_SIZE, 0, first, true));
    CHECK(hand_read(&h, batch, &why) == PL_READ_DRAINED);
    /* Two full fragments (read in place, in one batch or one by one), a control frame between fragments, and the
     * last fragment packed with a small whole message. */
    uint32_t offset = first;
    for (int i = 0; i < 2; i++, offset += room) hand_send(&h, packet, hand_fragment(packet, 7, FRAGMENTED_SIZE, offset, room, true));
    size_t length = pl_wire_encode_control(packet, PL_FRAME_WANT, 1, 0, 0);
    hand_send(&h, packet, length);
    length = hand_fragment(packet, 7, FRAGMENTED_SIZE, offset, FRAGMENTED_SIZE - offset, false);
    length += hand_fragment(packet + length, 8, 40, 0, 40, false);
    hand_send(&h, packet, length);
    CHECK(hand_read(&h, batch, &why) == PL_READ_DRAINED);
    hand_expect(&h, 7, FRAGMENTED_SIZE);
    hand_expect(&h, 8, 40);
    hand_conn_close(&h);

    /* A later fragment that skips ahead to where the next one would go: refused, the connection ends. */
    hand_conn_open(&h);
    hand_send(&h, packet, hand_fragment(packet, 9, FRAGMENTED_SIZE, 0, first, true));
    CHECK(hand_read(&h, batch, &why) == PL_READ_DRAINED);
    hand_send(&h, packet, hand_fragment(packet, 9, FRAGMENTED_SIZE, first + room, room, true));
    CHECK(hand_read(&h, batch, &why) == PL_READ_ENDED);
    CHECK(why != NULL && strstr(why, "does not continue") != NULL);
    hand_conn_close(&h);

    /* A short middle fragment, then one where a full one would have ended: in a batch, the second was read in place
     * where the first should have filled, and no longer continues the message when its turn comes. Refused. */
    hand_conn_open(&h);
    hand_send(&h, packet, hand_fragment(packet, 10, FRAGMENTED_SIZE, 0, first, true));
    CHECK(hand_read(&h, batch, &why) == PL_READ_DRAINED);
    hand_send(&h, packet, hand_fragment(packet, 10, FRAGMENTED_SIZE, first, 1000, true));
    hand_send(&h, packet, hand_fragment(packet, 10, FRAGMENTED_SIZE, first + room, room, true));
    CHECK(hand_read(&h, batch, &why) == PL_READ_ENDED);
    CHECK(why != NULL && strstr(why, "does not continue") != NULL);
    hand_conn_close(&h);
    free(packet);
}

/* Descriptors open in this process (/proc/self/fd, the directory's own descriptor not counted). */
static int open_descriptor_count(void) {
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL) return -1;
    int count = 0;
    for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
        if (entry->d_name[0] != '.') count++;
    }
    closedir(dir);
    return count - 1;
}

static void scenario_fragments_in_place(void) {
    fragments_in_place_run(1);
    fragments_in_place_run(PL_READ_BATCH);

    /* An empty packet ends the connection, as the end of the stream does; descriptors a peer sent with it are
     * closed, not left open in this process. */
    hand_conn_t h;
    hand_conn_open(&h);
    const char *why = NULL;
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
    int before = open_descriptor_count();
    int passed = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(passed >= 0);
    hand_send_fds(&h, NULL, 0, &passed, 1);
    close(passed);
    CHECK(hand_read(&h, PL_READ_BATCH, &why) == PL_READ_ENDED);
    CHECK(why != NULL && strstr(why, "closed") != NULL);
    CHECK(open_descriptor_count() == before);
    hand_conn_close(&h);
}

/* ---- once_message_cut_short --------------------------------------------------------------------- */

/* Takes what the port holds: the message through the right, or that right's notice. */
static void hand_expect_once(hand_conn_t *h, bool message) {
    pl_received_t out;
    pl_payload_t payload;
    CHECK_OK(pl_port_receive_payload(h->port, &out, &payload, 0));
    if (message) CHECK(out.id == 30 && out.size == FRAGMENTED_SIZE && (out.flags & PL_RECEIVED_NOTIFICATION) == 0);
    else CHECK(out.id == PL_NOTIFY_SEND_ONCE && (out.flags & PL_RECEIVED_NOTIFICATION) != 0);
    pl_payload_free(&payload);
    CHECK_STATUS(pl_port_receive(h->port, &out, NULL, 0, 0), PL_ERR_TIMED_OUT); /* once: nothing else */
}

/* A peer holds one send-once right to the port (handle 1) and sends a message in fragments through it. However
 * the message ends (whole, the connection's end after its first fragment, the handle released between two of its
 * fragments, refused as it begins), the port gets the message or the right's notice: exactly one, never neither,
 * and the slot the right set aside is taken or given back. */
static void scenario_once_message_cut_short(void) {
    enum { WHOLE, CONNECTION_ENDS, HANDLE_RELEASED, REFUSED_AT_ONCE };
    static const char *const cases[] = { "whole", "the connection ends", "the handle is released", "refused" };
    uint8_t *packet = malloc(PL_WIRE_MAX_FRAME);
    CHECK(packet != NULL);
    for (int c = WHOLE; c <= REFUSED_AT_ONCE && packet != NULL; c++) {
        int failures_before = atomic_load(&scenario_failures);
        hand_conn_t h;
        hand_conn_open(&h);
        const char *why = NULL;
        CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED); /* the hello */
        /* The right, as a reply right of ours that went to the peer: a slot set aside, counted in the export. */
        CHECK_OK(pl_port_set_aside(h.port));
        pthread_mutex_lock(&h.conn->lock);
        ((pl_export_t *)pl_handle_map_get(&h.conn->exports, 1))->once = 1;
        pthread_mutex_unlock(&h.conn->lock);

        uint32_t first = pl_wire_first_fragment_room(0);
        pl_read_result_t result;
        if (c == REFUSED_AT_ONCE) {
            /* Whole, out of line, its payload said to be the descriptor beside it, which is no sealed memfd. */
            pl_wire_message_t m = { .dest = 1, .id = 30, .total_size = FRAGMENTED_SIZE, .fd_count = 1 };
            size_t length = pl_wire_encode_message_head(packet, PL_FRAME_ONCE | PL_FRAME_OUT_OF_LINE, &m, NULL, 0);
            int before = open_descriptor_count();
            int not_memfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            CHECK(not_memfd >= 0);
            hand_send_fds(&h, packet, length, &not_memfd, 1);
            close(not_memfd);
            result = hand_read(&h, 1, &why);
            CHECK(result == PL_READ_ENDED && why != NULL && strstr(why, "memfd") != NULL);
            CHECK(open_descriptor_count() == before); /* the descriptor that came with it is closed */
        } else {
            /* Its first fragment, flagged as sent through the send-once right. */
            hand_send(&h, packet, hand_frame(packet, PL_FRAME_ONCE | PL_FRAME_MORE, 30, FRAGMENTED_SIZE, 0, first));
            CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
        }
        if (c == HANDLE_RELEASED) {
            /* What no peer of this library sends (a message's fragments go back to back), but any peer could. */
            size_t length = pl_wire_encode_control(packet, PL_FRAME_RELEASE, 1, 0, 1);
            hand_send(&h, packet, length);
            CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
            pthread_mutex_lock(&h.conn->lock);
            CHECK(pl_handle_map_get(&h.conn->exports, 1) == NULL); /* the export went */
            pthread_mutex_unlock(&h.conn->lock);
        }
        if (c == WHOLE || c == HANDLE_RELEASED) {
            for (uint32_t offset = first, room; offset < FRAGMENTED_SIZE; offset += room) {
                room = FRAGMENTED_SIZE - offset < pl_wire_next_fragment_room() ? FRAGMENTED_SIZE - offset
                                                                                : pl_wire_next_fragment_room();
                hand_send(&h, packet, hand_fragment(packet, 30, FRAGMENTED_SIZE, offset, room,
                                                    offset + room < FRAGMENTED_SIZE));
            }
            result = hand_read(&h, 1, &why);
            CHECK(result == (c == WHOLE ? PL_READ_DRAINED : PL_READ_ENDED));
            if (c == HANDLE_RELEASED) CHECK(why != NULL && strstr(why, "released while it arrived") != NULL);
        }
        pl_conn_teardown(h.conn, "done");
        hand_expect_once(&h, c == WHOLE);
        CHECK(h.port->set_aside == 0);
        if (atomic_load(&scenario_failures) > failures_before) fprintf(stderr, "  (case: %s)\n", cases[c]);
        hand_conn_close(&h);
    }
    free(packet);
}

/* ---- want_behind_local_senders ------------------------------------------------------------------ */

static void *local_sender_forever(void *raw) {
    CHECK_OK(pl_port_send(raw, 50, "local", 5, NULL, PL_TIMEOUT_FOREVER));
    return NULL;
}

/* Waits (up to `ms`) until the port holds `count` messages and `waiting` local senders wait for room. */
static bool hand_port_settles_within(pl_port_t *port, uint32_t count, uint32_t waiting, int64_t ms) {
    for (int64_t deadline = now_ns() + ms * MS; now_ns() < deadline; sleep_us(200)) {
        pthread_mutex_lock(&port->lock);
        bool settled = port->count == count && port->waiting_senders == waiting;
        pthread_mutex_unlock(&port->lock);
        if (settled) return true;
    }
    return false;
}

static bool hand_port_settles(pl_port_t *port, uint32_t count, uint32_t waiting) {
    return hand_port_settles_within(port, count, waiting, 10000);
}

/* Frames of `type` the peer has been sent for handle 1: how many; *sum gets their counts summed. */
static uint32_t hand_frames_of(hand_conn_t *h, pl_frame_type_t type, uint32_t *sum) {
    uint32_t frames = 0;
    if (sum != NULL) *sum = 0;
    uint8_t packet[PL_WIRE_MAX_FRAME];
    ssize_t n;
    while ((n = recv(h->pair[1], packet, sizeof packet, MSG_DONTWAIT)) > 0) {
        for (size_t at = 0, length; at < (size_t)n; at += length) {
            length = pl_wire_frame_length(packet + at, (size_t)n - at);
            pl_wire_frame_t frame;
            const char *why;
            bool decoded = length > 0 && pl_wire_decode(packet + at, length, 0, &frame, &why);
            CHECK(decoded);
            if (!decoded) break;
            if (frame.type == type && frame.u.control.handle == 1) {
                frames++;
                if (sum != NULL) *sum += frame.u.control.count;
            }
        }
    }
    return frames;
}

/* The credit the peer has been sent for handle 1, summed. */
static uint32_t hand_credit_received(hand_conn_t *h) {
    uint32_t credit;
    hand_frames_of(h, PL_FRAME_CREDIT, &credit);
    return credit;
}

/* Fills the port (limit 4) as a peer and this process share it: the peer spends both its credits (messages 40 and
 * 41), then two local messages (50) take the rest. */
static void hand_fill_port(hand_conn_t *h) {
    uint8_t packet[128];
    const char *why = NULL;
    size_t length = hand_frame(packet, 0, 40, 8, 0, 8);
    length += hand_frame(packet + length, 0, 41, 8, 0, 8);
    hand_send(h, packet, length);
    CHECK(hand_read(h, 1, &why) == PL_READ_DRAINED);
    for (int i = 0; i < 2; i++) CHECK_OK(pl_port_send(h->port, 50, "local", 5, NULL, 0));
}

/* The peer asks for credit for handle 1 (WANT with `flags`), and the owner reads the question. */
static void hand_want(hand_conn_t *h, uint32_t flags) {
    uint8_t packet[PL_WIRE_HEADER_SIZE + 16];
    const char *why = NULL;
    hand_send(h, packet, pl_wire_encode_control(packet, PL_FRAME_WANT, 1, flags, 0));
    CHECK(hand_read(h, 1, &why) == PL_READ_DRAINED);
}

/* A peer waits for credit while the port is full, and local senders wait too. Room freed by the peer's own messages
 * goes to the local senders (they asked first); the queue then holds local messages only. As those are received,
 * the peer must be given room: it has nothing else to wait for, and a send of its without a timeout would wait for
 * ever on a port that empties. */
static void scenario_want_behind_local_senders(void) {
    hand_conn_t h;
    hand_conn_open(&h);
    const char *why = NULL;
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED); /* the hello */
    uint8_t packet[256];
    /* The port full of the peer's messages and local ones; two local senders wait. */
    hand_fill_port(&h);
    pthread_t senders[2];
    for (int i = 0; i < 2; i++) start_thread(&senders[i], local_sender_forever, h.port);
    CHECK(hand_port_settles(h.port, 4, 2));
    /* The peer asks for credit and waits for it. */
    hand_want(&h, PL_WANT_WAIT);
    CHECK(hand_credit_received(&h) == 0);
    /* Its two messages are received; each one's room goes to a local sender. */
    pl_received_t out;
    for (uint32_t i = 0; i < 2; i++) {
        CHECK_OK(pl_port_receive(h.port, &out, packet, sizeof packet, 0));
        CHECK(out.id == 40 + (int32_t)i);
        CHECK(hand_port_settles(h.port, 4, 1 - i));
    }
    for (int i = 0; i < 2; i++) pthread_join(senders[i], NULL);
    /* Local messages only, now: receiving them makes room, and the waiting peer is given it. */
    for (int i = 0; i < 4; i++) {
        CHECK_OK(pl_port_receive(h.port, &out, packet, sizeof packet, 0));
        CHECK(out.id == 50);
    }
    pthread_mutex_lock(&h.port->lock);
    pl_export_t *e = pl_handle_map_get(&h.conn->exports, 1);
    CHECK(e != NULL && !e->waiting && h.port->want_waiters == 0);
    pthread_mutex_unlock(&h.port->lock);
    pl_conn_flush_owed(h.conn);
    CHECK(hand_credit_received(&h) > 0);
    hand_conn_close(&h);

    /* A full port whose queue limit is raised while the peer waits: the peer is given of the new room at once. */
    hand_conn_open(&h);
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
    hand_fill_port(&h);
    hand_want(&h, PL_WANT_WAIT);
    CHECK(hand_credit_received(&h) == 0);
    CHECK_OK(pl_port_set_qlimit(h.port, 8));
    pl_conn_flush_owed(h.conn);
    CHECK(hand_credit_received(&h) > 0);
    hand_conn_close(&h);
}

/* ---- credit: wake-ups and answers that must not be lost ------------------------------------------- */

/* A local sender that waits for room asks for lent room back (pl_remote_reclaim), with the port unlocked. A
 * dequeue in that window signals it (sender_wakes_pending++) while it is not on the condition variable; it finds
 * room when it relocks and leaves. That signal must not stay counted as pending: if it did, the next sender that
 * waits alone would never be signalled by a dequeue, and would wait on a port with room. */
static void scenario_wake_during_reclaim(void) {
    hand_conn_t h;
    hand_conn_open(&h);
    const char *why = NULL;
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED); /* the hello; 2 credits lent: reserved 2 of 4 */
    CHECK_OK(pl_port_send(h.port, 50, "local", 5, NULL, 0));
    CHECK_OK(pl_port_send(h.port, 50, "local", 5, NULL, 0)); /* full: count 2 + reserved 2 */
    /* Hold the connection's write lock: the sender's RECLAIM frame waits for it, with the port unlocked. */
    pthread_mutex_lock(&h.conn->write_lock);
    pthread_t s1;
    start_thread(&s1, local_sender_forever, h.port);
    bool inside = false;
    for (int64_t deadline = now_ns() + 5000 * MS; !inside && now_ns() < deadline; sleep_us(200)) {
        pthread_mutex_lock(&h.port->lock);
        inside = h.port->waiting_senders == 1 && h.port->reclaim_asked;
        pthread_mutex_unlock(&h.port->lock);
    }
    CHECK(inside);
    sleep_us(20000); /* it is blocked on the write lock in pl_notify */
    pl_received_t out;
    uint8_t buffer[64];
    CHECK_OK(pl_port_receive(h.port, &out, buffer, sizeof buffer, 0)); /* room: a signal no one waits for */
    pthread_mutex_unlock(&h.conn->write_lock);
    pthread_join(s1, NULL);
    pthread_mutex_lock(&h.port->lock);
    uint32_t pending = h.port->sender_wakes_pending, waiting = h.port->waiting_senders;
    pthread_mutex_unlock(&h.port->lock);
    if (pending != 0) fprintf(stderr, "  sender_wakes_pending = %u with %u senders waiting\n", pending, waiting);
    CHECK(pending == 0);
    /* The consequence: a sender without a timeout waits on a full port; a message is received; it is not woken. */
    pthread_t s2;
    start_thread(&s2, local_sender_forever, h.port);
    CHECK(hand_port_settles_within(h.port, 2, 1, 5000));
    CHECK_OK(pl_port_receive(h.port, &out, buffer, sizeof buffer, 0)); /* count 1 + reserved 2 < 4 */
    bool woken = hand_port_settles_within(h.port, 2, 0, 2000);
    if (!woken) fprintf(stderr, "  a sender waits for ever on a port with room (count 1, reserved 2, limit 4)\n");
    CHECK(woken);
    if (!woken) pthread_cond_broadcast(&h.port->senders); /* let it go, to end the scenario */
    pthread_join(s2, NULL);
    hand_conn_close(&h);
}

typedef struct { pl_port_t *port; int64_t timeout_ns; pl_status_t status; } timed_send_t;
static void *local_sender_timed(void *raw) {
    timed_send_t *t = raw;
    t->status = pl_port_send(t->port, 51, "local", 5, NULL, t->timeout_ns);
    return NULL;
}

/* The owner asks a peer for its credit back (RECLAIM, e->reclaiming). The peer, not having read it, lets go of
 * its right (RELEASE with its credits) and ignores the RECLAIM (the handle is no longer in its table): no RETURN
 * will come. A second right to the port was on its way, so the export stays. The RELEASE must count as the answer:
 * when the peer holds credit again and sits idle, a local sender on a port whose room is all lent to it must get a
 * RECLAIM sent, not wait on an empty port. */
static void scenario_reclaim_crossed_by_release(void) {
    hand_conn_t h;
    hand_conn_open(&h);
    const char *why = NULL;
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
    /* A second right to the port goes to the peer (in some message): no credit with it, the peer holds 2. */
    pthread_mutex_lock(&h.conn->lock);
    pl_wire_right_t right;
    bool dead;
    CHECK_OK(pl_conn_export_locked(h.conn, h.port, &right, &dead));
    CHECK(right.handle == 1 && right.credits == 0);
    pthread_mutex_unlock(&h.conn->lock);
    /* A local sender finds the port full and asks for the lent room back. */
    CHECK_OK(pl_port_send(h.port, 50, "local", 5, NULL, 0));
    CHECK_OK(pl_port_send(h.port, 50, "local", 5, NULL, 0));
    CHECK_STATUS(pl_port_send(h.port, 50, "local", 5, NULL, 100 * MS), PL_ERR_TIMED_OUT);
    CHECK(hand_frames_of(&h, PL_FRAME_RECLAIM, NULL) == 1);
    pl_received_t out;
    uint8_t packet[256];
    for (int i = 0; i < 2; i++) CHECK_OK(pl_port_receive(h.port, &out, packet, sizeof packet, 0));
    /* The peer had let go of its first right before it read the RECLAIM: RELEASE, one transfer, its 2 credits. */
    hand_send(&h, packet, pl_wire_encode_control(packet, PL_FRAME_RELEASE, 1, 2, 1));
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
    pthread_mutex_lock(&h.conn->lock);
    pl_export_t *e = pl_handle_map_get(&h.conn->exports, 1);
    pthread_mutex_unlock(&h.conn->lock);
    CHECK(e != NULL);
    if (e == NULL) { hand_conn_close(&h); return; }
    pthread_mutex_lock(&h.port->lock);
    bool stuck = e->reclaiming;
    pthread_mutex_unlock(&h.port->lock);
    if (stuck) fprintf(stderr, "  e->reclaiming still set after the RELEASE that answered the RECLAIM\n");
    CHECK(!stuck);
    /* The peer takes its second right, asks for credit and gets it; it then sits idle. */
    hand_want(&h, 0);
    uint32_t credit = 0;
    hand_frames_of(&h, PL_FRAME_CREDIT, &credit);
    CHECK(credit == 2);
    /* The queue limit is lowered to 2: the port is empty, and full of the peer's idle credit. */
    CHECK_OK(pl_port_set_qlimit(h.port, 2));
    timed_send_t t = { .port = h.port, .timeout_ns = 3000 * MS };
    pthread_t s;
    start_thread(&s, local_sender_timed, &t);
    /* Play a well-behaved peer: answer a RECLAIM with a RETURN of the idle credit. */
    bool reclaimed = false;
    for (int64_t deadline = now_ns() + 2000 * MS; !reclaimed && now_ns() < deadline; sleep_us(1000)) {
        reclaimed = hand_frames_of(&h, PL_FRAME_RECLAIM, NULL) > 0;
    }
    if (reclaimed) {
        hand_send(&h, packet, pl_wire_encode_control(packet, PL_FRAME_RETURN, 1, credit, 0));
        CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
    } else {
        fprintf(stderr, "  no RECLAIM: a local sender waits on an empty port lent whole to an idle peer\n");
    }
    CHECK(reclaimed);
    pthread_join(s, NULL);
    CHECK_OK(t.status);
    hand_conn_close(&h);
}

/* A WANT|WAIT answered with room given to the waiter (owed, e->waiting cleared). Before the transport flushes it,
 * a message of ours carrying a right to the port is encoded on the same connection: the owed credit goes into the
 * right (pl_conn_export_locked). A later right of that message cannot be encoded (NO_SPACE at PL_CONN_MAX_RIGHTS,
 * or NO_MEMORY), and pl_conn_unexport_locked undoes the right. The credit must still reach the peer, which waits
 * for that answer and will not ask again. */
static void scenario_undone_right_keeps_want_answer(void) {
    hand_conn_t h;
    hand_conn_open(&h);
    const char *why = NULL;
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED);
    uint8_t packet[256];
    hand_fill_port(&h);
    hand_want(&h, PL_WANT_WAIT);
    CHECK(hand_frames_of(&h, PL_FRAME_CREDIT, NULL) == 0);
    pl_received_t out;
    for (int i = 0; i < 2; i++) CHECK_OK(pl_port_receive(h.port, &out, packet, sizeof packet, 0)); /* 40, 41 */
    pthread_mutex_lock(&h.conn->lock);
    pl_export_t *e = pl_handle_map_get(&h.conn->exports, 1);
    pthread_mutex_lock(&h.port->lock);
    CHECK(!e->waiting && h.port->want_waiters == 0 && atomic_load(&e->owed) > 0); /* answered, not yet flushed */
    pthread_mutex_unlock(&h.port->lock);
    /* pl_proxy_write: the right is encoded (export), then a later right fails and the export is undone. */
    pl_wire_right_t right;
    bool dead;
    CHECK_OK(pl_conn_export_locked(h.conn, h.port, &right, &dead));
    pl_conn_unexport_locked(h.conn, &right, 1);
    pthread_mutex_unlock(&h.conn->lock);
    /* The local messages are received: the queue empties. */
    for (int i = 0; i < 2; i++) CHECK_OK(pl_port_receive(h.port, &out, packet, sizeof packet, 0));
    pl_conn_flush_owed(h.conn);
    uint32_t credit = 0;
    hand_frames_of(&h, PL_FRAME_CREDIT, &credit);
    pthread_mutex_lock(&h.port->lock);
    bool waiting = e->waiting;
    uint32_t count = h.port->count, reserved = h.port->reserved;
    pthread_mutex_unlock(&h.port->lock);
    bool answered = credit > 0 || waiting;
    if (!answered) {
        fprintf(stderr, "  WANT|WAIT never answered: port empty (count %u, reserved %u), export not waiting\n",
                count, reserved);
    }
    CHECK(answered);
    hand_conn_close(&h);
}

/* ---- released_right_keeps_queue ----------------------------------------------------------------- */

/* A client's connection as a look-up makes it, watched by the transport: the peer, at the other end of a socketpair,
 * plays the service. Its hello (wire `version`) welcomes the client with its port as handle 1, `credits` lent and
 * `flags` on the right; `right` is a send right to that port's proxy, as the look-up gives. */
typedef struct hand_client {
    int pair[2];
    pl_conn_t *conn;
    pl_port_t *right;
} hand_client_t;

static void hand_client_open(hand_client_t *h, uint32_t version, uint32_t credits, uint8_t flags) {
    memset(h, 0, sizeof *h);
    CHECK_OK(pl_transport_start());
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, h->pair) == 0);
    pl_pending_socket_t pending;
    pl_transport_pending_add(&pending);
    pending.fd = h->pair[0];
    h->conn = pl_conn_new(h->pair[0], false);
    CHECK(h->conn != NULL);
    pl_conn_write_hello(h->conn, PL_HELLO_WELCOME, (pl_wire_right_t){ 0 });
    CHECK_OK(pl_transport_add_conn(h->conn, &pending));
    pl_wire_right_t bootstrap = { .kind = PL_RIGHT_SENDERS, .flags = flags, .handle = 1, .credits = credits,
                                  .max_size = 1u << 20 };
    uint8_t hello[PL_WIRE_HELLO_SIZE];
    size_t length = pl_wire_encode_hello(hello, version, PL_HELLO_WELCOME, bootstrap);
    CHECK(send(h->pair[1], hello, length, 0) == (ssize_t)length);
    int64_t deadline = pl_deadline_ns(10000 * MS);
    pthread_mutex_lock(&h->conn->lock);
    while (!h->conn->hello_received && !h->conn->dead && pl_now_ns() < deadline) {
        pl_cond_wait_until(&h->conn->changed, &h->conn->lock, deadline);
    }
    pl_port_t *proxy = h->conn->hello_received ? pl_handle_map_get(&h->conn->imports, 1) : NULL;
    CHECK(proxy != NULL);
    if (proxy != NULL) {
        pl_proxy_revive_locked(h->conn, proxy);
        pl_port_make_send(proxy);
    }
    pthread_mutex_unlock(&h->conn->lock);
    h->right = proxy;
}

static void hand_send_to_client(hand_client_t *h, const uint8_t *packet, size_t length) {
    CHECK(send(h->pair[1], packet, length, 0) == (ssize_t)length);
}

/* The first byte of the filler packets below: not a frame's, so the peer's reads skip them. */
#define HAND_FILLER_BYTE 0xee

/* Fills the client's socket with filler packets, as a service that does not read leaves it: the client's next frame
 * waits in its outgoing queue. Returns how many went in. */
static int hand_client_fill_socket(hand_client_t *h) {
    static uint8_t filler[4096];
    memset(filler, HAND_FILLER_BYTE, sizeof filler);
    int filled = 0;
    while (send(h->pair[0], filler, sizeof filler, MSG_DONTWAIT) == (ssize_t)sizeof filler) filled++;
    return filled;
}

/* Ends the connection (the peer closes its end; the transport reads the end) and lets go of it. */
static void hand_client_close(hand_client_t *h) {
    close(h->pair[1]);
    for (int64_t deadline = now_ns() + 5000 * MS; !atomic_load(&h->conn->ended) && now_ns() < deadline;) sleep_us(1000);
    CHECK(atomic_load(&h->conn->ended));
    pl_conn_release(h->conn);
}

/* What the peer reads until the connection's end (or `ms`): MESSAGE frames that begin a message, and whether a
 * RELEASE came. Whether the end came is returned. */
static bool hand_client_read_to_end(hand_client_t *h, int64_t ms, uint32_t *messages, bool *released) {
    *messages = 0;
    *released = false;
    uint8_t *packet = malloc(PL_WIRE_MAX_FRAME);
    CHECK(packet != NULL);
    bool ended = false;
    for (int64_t deadline = now_ns() + ms * MS; packet != NULL && !ended && now_ns() < deadline;) {
        ssize_t n = recv(h->pair[1], packet, PL_WIRE_MAX_FRAME, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            ended = true;
        } else if (n < 0) {
            struct pollfd readable = { .fd = h->pair[1], .events = POLLIN };
            poll(&readable, 1, 10);
        }
        for (size_t at = 0, length; n > 0 && at < (size_t)n; at += length) {
            length = pl_wire_frame_length(packet + at, (size_t)n - at);
            pl_wire_frame_t frame;
            const char *why;
            bool decoded = length > 0 && pl_wire_decode(packet + at, length, 0, &frame, &why);
            CHECK(decoded);
            if (!decoded) break;
            if (frame.type == PL_FRAME_MESSAGE && frame.u.message.offset == 0) (*messages)++;
            if (frame.type == PL_FRAME_RELEASE && frame.u.control.handle == 1) *released = true;
        }
    }
    free(packet);
    return ended;
}

/* A client sends messages while the service reads slowly, so that some wait in the connection's outgoing queue,
 * then lets go of its only right. The client's connection ends then (nothing is left on it), but only after what it
 * queued has gone: every message sent with PL_OK must reach the service, and the RELEASE behind them. */
static void released_right_keeps_queue_body(void) {
    for (int prompt = 0; prompt < 2; prompt++) {
        hand_client_t h;
        hand_client_open(&h, 3, 1000, prompt ? PL_RIGHT_PROMPT : 0);
        if (h.right == NULL) return;
        static uint8_t payload[16000];
        uint32_t sent = 0;
        int room = 65536; /* a small socket buffer, whatever the system's default: the queue fills surely */
        CHECK(setsockopt(h.pair[0], SOL_SOCKET, SO_SNDBUF, &room, sizeof room) == 0);
        /* The service does not read: the socket fills, then the outgoing queue takes the rest. */
        while (sent < 200 && pl_port_send(h.right, 60, payload, sizeof payload, NULL, 0) == PL_OK) sent++;
        CHECK(sent > 0 && atomic_load(&h.conn->backlogged));
        CHECK_OK(pl_port_release_send(h.right));
        if (!prompt) {
            /* Idle now; the transport sweeps it after PL_IDLE_PROXY_NS and releases it. */
            for (int64_t deadline = now_ns() + 5000 * MS; pl_proxy_idle_total() > 0 && now_ns() < deadline;) {
                sleep_us(10000);
            }
        }
        sleep_us(100000); /* time for the transport to act on the release */
        uint32_t messages;
        bool released;
        bool ended = hand_client_read_to_end(&h, 10000, &messages, &released);
        if (messages != sent) fprintf(stderr, "  (%s) %u messages sent with PL_OK, %u arrived\n",
                                      prompt ? "prompt" : "idle", sent, messages);
        CHECK(messages == sent && released && ended);
        close(h.pair[1]);
        pl_conn_release(h.conn);
    }
}

static void scenario_released_right_keeps_queue(void) { run_in_own_process(released_right_keeps_queue_body); }

/* ---- want_answered_by_right --------------------------------------------------------------------- */

/* Reads what the client sends until a packet holds a frame of `type` (for handle `handle` when a control frame), up
 * to `ms`, skipping filler: whether one came; *out gets it (a MESSAGE's bytes are not kept). */
static bool hand_client_await(hand_client_t *h, pl_frame_type_t type, uint32_t handle, int64_t ms,
                              pl_wire_frame_t *out) {
    uint8_t packet[PL_WIRE_MAX_FRAME];
    for (int64_t deadline = now_ns() + ms * MS; now_ns() < deadline;) {
        ssize_t n = recv(h->pair[1], packet, sizeof packet, MSG_DONTWAIT);
        if (n <= 0) {
            if (n == 0 || errno != EAGAIN) return false;
            struct pollfd readable = { .fd = h->pair[1], .events = POLLIN };
            poll(&readable, 1, 10);
            continue;
        }
        if (packet[0] == HAND_FILLER_BYTE) continue; /* hand_client_fill_socket's */
        bool found = false;
        for (size_t at = 0, length; at < (size_t)n; at += length) {
            length = pl_wire_frame_length(packet + at, (size_t)n - at);
            pl_wire_frame_t frame;
            const char *why;
            bool decoded = length > 0 && pl_wire_decode(packet + at, length, 0, &frame, &why);
            CHECK(decoded);
            if (!decoded) break;
            bool control = frame.type != PL_FRAME_MESSAGE;
            if (!found && frame.type == type && (!control || frame.u.control.handle == handle)) {
                found = true;
                if (out != NULL) *out = frame;
            }
        }
        if (found) return true;
    }
    return false;
}

static void *proxy_sender_forever(void *raw) {
    CHECK_OK(pl_port_send(raw, 61, "wait", 4, NULL, PL_TIMEOUT_FOREVER));
    return NULL;
}

static void *proxy_sender_3s(void *raw) {
    CHECK_OK(pl_port_send(raw, 62, "again", 5, NULL, 3000 * MS));
    return NULL;
}

/* A sender out of credit asks (WANT) and waits. The owner answers with credit that goes, owed, with a right to the
 * same port in a message of its (as a service naming its port for the reply does): the credit comes in the right.
 * It answers the WANT: the next sender out of credit must ask again, not wait for an answer that has come. */
static void want_answered_by_right_body(void) {
    hand_client_t h;
    hand_client_open(&h, 3, 1, 0);
    if (h.right == NULL) return;
    pl_port_t *local;
    CHECK_OK(pl_port_create(4, 1024, &local));
    /* The one credit goes on a message naming a local port: the peer gets a right to it (an export of ours). */
    CHECK_OK(pl_port_send(h.right, 60, "first", 5, local, 0));
    pl_wire_frame_t frame;
    CHECK(hand_client_await(&h, PL_FRAME_MESSAGE, 0, 5000, &frame));
    uint32_t local_handle = frame.u.message.reply.handle;
    CHECK(frame.u.message.reply.kind == PL_RIGHT_SENDERS && frame.u.message.reply.credits > 0);
    /* Out of credit: a sender asks and waits. */
    pthread_t sender;
    start_thread(&sender, proxy_sender_forever, h.right);
    CHECK(hand_client_await(&h, PL_FRAME_WANT, 1, 5000, NULL));
    /* The answer: one credit, in a right to handle 1 on a message to our port. */
    uint8_t packet[256];
    pl_wire_message_t m = { .dest = local_handle, .id = 70,
                            .reply = { .kind = PL_RIGHT_SENDERS, .handle = 1, .credits = 1, .max_size = 1u << 20 } };
    hand_send_to_client(&h, packet, pl_wire_encode_message_head(packet, 0, &m, NULL, 0));
    pthread_join(sender, NULL);
    CHECK(hand_client_await(&h, PL_FRAME_MESSAGE, 0, 5000, NULL));
    pl_received_t out;
    CHECK_OK(pl_port_receive(local, &out, NULL, 0, 5000 * MS));
    CHECK(out.id == 70 && out.reply == h.right);
    if (out.reply != NULL) CHECK_OK(pl_port_release_send(out.reply));
    /* Out of credit again: the next sender asks. */
    start_thread(&sender, proxy_sender_3s, h.right);
    bool asked = hand_client_await(&h, PL_FRAME_WANT, 1, 2000, NULL);
    if (!asked) fprintf(stderr, "  a sender out of credit waits for the answer to a WANT answered already\n");
    CHECK(asked);
    if (asked) hand_send_to_client(&h, packet, pl_wire_encode_control(packet, PL_FRAME_CREDIT, 1, 1, 0));
    pthread_join(sender, NULL);
    CHECK_OK(pl_port_release_send(h.right));
    pl_port_destroy(local);
    hand_client_close(&h);
}

static void scenario_want_answered_by_right(void) { run_in_own_process(want_answered_by_right_body); }

/* ---- unused_client_ends ------------------------------------------------------------------------- */

/* A client names a port of its own in a request (the reply port), then lets go of its right to the service while
 * the service still holds the reply port's right. When the service lets go of that too (RELEASE), the client's
 * connection holds nothing: no look-up can use it again (its service right is gone), so it must end, as it does
 * when the service right goes last. Otherwise every such look-up leaves a connection open on both sides. */
static void unused_client_ends_body(void) {
    hand_client_t h;
    hand_client_open(&h, 3, 2, PL_RIGHT_PROMPT);
    if (h.right == NULL) return;
    pl_port_t *reply;
    CHECK_OK(pl_port_create(4, 1024, &reply));
    CHECK_OK(pl_port_send(h.right, 60, "request", 7, reply, 0));
    pl_wire_frame_t frame;
    CHECK(hand_client_await(&h, PL_FRAME_MESSAGE, 0, 5000, &frame));
    pl_wire_right_t named = frame.u.message.reply;
    CHECK(named.kind == PL_RIGHT_SENDERS);
    /* The service right goes (at once: PROMPT); the reply port's export keeps the connection. */
    CHECK_OK(pl_port_release_send(h.right));
    CHECK(hand_client_await(&h, PL_FRAME_RELEASE, 1, 5000, NULL));
    /* The service lets go of the reply port's right: nothing is left on the connection. */
    uint8_t packet[64];
    hand_send_to_client(&h, packet, pl_wire_encode_control(packet, PL_FRAME_RELEASE, named.handle, named.credits, 1));
    uint32_t messages;
    bool released;
    bool ended = hand_client_read_to_end(&h, 2000, &messages, &released);
    if (!ended) fprintf(stderr, "  a client's connection with no right left stays open\n");
    CHECK(ended);
    pl_port_destroy(reply);
    hand_client_close(&h);
}

static void scenario_unused_client_ends(void) { run_in_own_process(unused_client_ends_body); }

/* ---- room_watch_without_descriptor ------------------------------------------------------------- */

/* A message queued behind a full socket is sent when the transport finds room, watched on a duplicate of the
 * socket. With descriptors used up, the duplicate cannot be made: the transport must still send the message once
 * room and descriptors are back, instead of leaving it (and the senders waiting for room behind it) for ever. */
static void room_watch_without_descriptor_body(void) {
    hand_client_t h;
    hand_client_open(&h, 3, 1000, 0);
    if (h.right == NULL) return;
    int filled = hand_client_fill_socket(&h); /* the peer does not read */
    CHECK(filled > 0 && errno == EAGAIN);
    /* Every descriptor in use: the message queues, and its watch for room finds no descriptor to watch with. */
    struct rlimit saved, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    low = saved;
    low.rlim_cur = (rlim_t)open_descriptors() + 16;
    CHECK(low.rlim_cur <= saved.rlim_cur && setrlimit(RLIMIT_NOFILE, &low) == 0);
    enum { HELD = 64 };
    int held[HELD], n = 0;
    while (n < HELD && (held[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) n++;
    CHECK(n < HELD);
    CHECK_OK(pl_port_send(h.right, 60, "queued", 6, NULL, 0));
    pthread_mutex_lock(&h.conn->write_lock); /* out_fd is the transport's, under it */
    bool unwatched = h.conn->out_fd < 0;
    pthread_mutex_unlock(&h.conn->write_lock);
    CHECK(atomic_load(&h.conn->backlogged) && unwatched);
    sleep_us(50000); /* the transport tries its watch, and fails */
    for (int i = 0; i < n; i++) close(held[i]);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    /* Room and descriptors are back: the message must come. */
    pl_wire_frame_t frame;
    bool arrived = hand_client_await(&h, PL_FRAME_MESSAGE, 0, 3000, &frame) && frame.u.message.id == 60;
    if (!arrived) fprintf(stderr, "  a message queued while descriptors were short never left (backlogged %d)\n",
                          (int)atomic_load(&h.conn->backlogged));
    CHECK(arrived);
    CHECK_OK(pl_port_release_send(h.right));
    hand_client_close(&h);
}
static void scenario_room_watch_without_descriptor(void) { run_in_own_process(room_watch_without_descriptor_body); }

/* ---- listeners_paused ------------------------------------------------------------------------------ */

/* With descriptors used up, a service whose accept fails has its listening socket taken out of the transport's
 * epoll until they are back: level-triggered, it would wake the transport at once again. So is every such service,
 * however many: one left in keeps the transport thread spinning. Once descriptors are back, each peer still queued
 * is welcomed; services withdrawn meanwhile are not put back. */
enum { PAUSED_SERVICES = 72, PAUSED_WITHDRAWN = 8 };

/* The transport thread's id (it is named portloop-ipc), or -1. */
static pid_t transport_tid(void) {
    pid_t found = -1;
    DIR *tasks = opendir("/proc/self/task");
    CHECK(tasks != NULL);
    for (struct dirent *entry; tasks != NULL && found < 0 && (entry = readdir(tasks)) != NULL;) {
        if (entry->d_name[0] == '.') continue;
        char path[64], name[32] = "";
        pid_t tid = (pid_t)atoi(entry->d_name);
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
        FILE *comm = fopen(path, "re");
        if (comm == NULL) continue;
        if (fgets(name, sizeof name, comm) != NULL && strcmp(name, "portloop-ipc\n") == 0) found = tid;
        fclose(comm);
    }
    if (tasks != NULL) closedir(tasks);
    return found;
}

/* Nanoseconds thread `tid` of this process has been running or, where the kernel keeps schedstat (`schedstat`, read
 * again from its start), waiting to run: a thread that spins is busy the whole time, however loaded the machine. */
static int64_t thread_busy_ns(pid_t tid, int schedstat) {
    clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6u); /* its CPU clock, as pthread_getcpuclockid makes one */
    struct timespec ts = { 0 };
    CHECK(clock_gettime(clock, &ts) == 0);
    int64_t busy = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    char text[128];
    ssize_t n = schedstat >= 0 ? pread(schedstat, text, sizeof text - 1, 0) : -1;
    unsigned long long ran, waited;
    if (n > 0) {
        text[n] = '\0';
        if (sscanf(text, "%llu %llu", &ran, &waited) == 2) busy += (int64_t)waited;
    }
    return busy;
}

static void listeners_paused_body(void) {
    char dir[] = "/tmp/pl-stress-paused-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pl_port_t *ports[PAUSED_SERVICES];
    int clients[PAUSED_SERVICES];
    struct sockaddr_un addresses[PAUSED_SERVICES];
    for (int i = 0; i < PAUSED_SERVICES; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%02d", i);
        ports[i] = new_port(4);
        CHECK_OK(pl_service_check_in(dir, name, ports[i], NULL));
        addresses[i] = (struct sockaddr_un){ .sun_family = AF_UNIX };
        snprintf(addresses[i].sun_path, sizeof addresses[i].sun_path, "%s/%s", dir, name);
        clients[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0); /* made now: connecting needs none */
        CHECK(clients[i] >= 0);
    }
    pid_t tid = transport_tid();
    CHECK(tid > 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
    int schedstat = open(path, O_RDONLY | O_CLOEXEC); /* -1: the CPU time alone */
    /* A listener of the test's own, to tell a real shortage from valgrind's: valgrind only emulates the limit (the
     * kernel accepts, and valgrind closes what it accepted, so a peer that waits is dropped, not kept waiting). */
    int probe = fake_service_listen(dir, "probe"), probe_client = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(probe_client >= 0);

    /* Every descriptor in use: each peer waits in its service's backlog, and each accept fails. */
    struct rlimit saved, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    low = saved;
    low.rlim_cur = (rlim_t)open_descriptors() + 16;
    CHECK(low.rlim_cur <= saved.rlim_cur && setrlimit(RLIMIT_NOFILE, &low) == 0);
    enum { HELD = 64 };
    int held[HELD], n = 0;
    while (n < HELD && (held[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) n++;
    CHECK(n < HELD);
    struct sockaddr_un probe_address = { .sun_family = AF_UNIX };
    snprintf(probe_address.sun_path, sizeof probe_address.sun_path, "%s/probe", dir);
    CHECK(connect(probe_client, (struct sockaddr *)&probe_address, sizeof probe_address) == 0);
    int refused = accept4(probe, NULL, NULL, SOCK_CLOEXEC);
    CHECK(refused < 0 && errno == EMFILE);
    struct pollfd probe_waits = { .fd = probe, .events = POLLIN };
    bool kernel_short = poll(&probe_waits, 1, 0) == 1;
    for (int i = 0; i < PAUSED_SERVICES; i++) {
        CHECK(connect(clients[i], (struct sockaddr *)&addresses[i], sizeof addresses[i]) == 0);
    }
    /* The transport meets each failing accept; a listener it left in would wake it at once again, and again. */
    sleep_us(100000);
    int64_t busy = thread_busy_ns(tid, schedstat), wall = now_ns();
    sleep_us(200000);
    busy = thread_busy_ns(tid, schedstat) - busy;
    wall = now_ns() - wall;
    if (busy * 4 > wall) {
        fprintf(stderr, "  the transport thread was busy %.0f ms of %.0f while descriptors were short\n",
                (double)busy / 1e6, (double)wall / 1e6);
    }
    CHECK(busy * 4 <= wall);

    /* Withdrawn while paused (their descriptors, closed, let another service or two accept meanwhile). */
    for (int i = PAUSED_SERVICES - PAUSED_WITHDRAWN; i < PAUSED_SERVICES; i++) CHECK_OK(pl_port_destroy(ports[i]));
    sleep_us(150000); /* a look at the paused listeners */
    for (int i = 0; i < n; i++) close(held[i]);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);

    /* Descriptors are back: every peer still queued is accepted and welcomed. */
    int welcomed = 0, expected = kernel_short ? PAUSED_SERVICES - PAUSED_WITHDRAWN : 0;
    int64_t deadline = now_ns() + 5000 * MS;
    for (int i = 0; i < expected; i++) {
        struct pollfd ready = { .fd = clients[i], .events = POLLIN };
        int64_t left = deadline - now_ns();
        uint8_t packet[256];
        ssize_t got = poll(&ready, 1, left > 0 ? (int)(left / MS) : 0) == 1
                          ? recv(clients[i], packet, sizeof packet, MSG_DONTWAIT) : -1;
        pl_wire_frame_t frame;
        const char *why;
        if (got > 0 && pl_wire_decode(packet, (size_t)got, 0, &frame, &why) && frame.type == PL_FRAME_HELLO &&
            frame.u.hello.status == PL_HELLO_WELCOME) {
            welcomed++;
        }
    }
    if (welcomed != expected) {
        fprintf(stderr, "  %d of %d peers queued while descriptors were short were welcomed\n", welcomed, expected);
    }
    CHECK(welcomed == expected);

    for (int i = 0; i < PAUSED_SERVICES; i++) close(clients[i]);
    for (int i = 0; i < PAUSED_SERVICES - PAUSED_WITHDRAWN; i++) CHECK_OK(pl_port_destroy(ports[i]));
    if (schedstat >= 0) close(schedstat);
    if (refused >= 0) close(refused);
    close(probe_client);
    close(probe);
    unlink(probe_address.sun_path);
    for (int i = 0; i < PAUSED_SERVICES; i++) {
        unlink(addresses[i].sun_path);
        snprintf(path, sizeof path, "%s/.p%02d.lock", dir, i);
        unlink(path);
    }
    CHECK(rmdir(dir) == 0);
}
static void scenario_listeners_paused(void) { run_in_own_process(listeners_paused_body); }

/* ---- peer_stops_reading ------------------------------------------------------------------------ */

static void *proxy_sender_16k_3s(void *raw) {
    static uint8_t payload[16000];
    pl_status_t status = pl_port_send(raw, 63, payload, sizeof payload, NULL, 3000 * MS);
    if (status != PL_ERR_INVALID_DEST) fprintf(stderr, "  a sender waiting for room got status %d\n", (int)status);
    CHECK_STATUS(status, PL_ERR_INVALID_DEST);
    return NULL;
}

/* A peer that shuts its reading side (shutdown SHUT_RD) but keeps the socket open takes nothing more: every write
 * fails with EPIPE, yet no end ever comes to read. The connection must end (its rights dead names, a sender waiting
 * for room told the destination is gone), not stay half-ended with its queue and its waiters for ever. */
static void peer_stops_reading_body(void) {
    hand_client_t h;
    hand_client_open(&h, 3, 1000, 0);
    if (h.right == NULL) return;
    int room = 65536;
    CHECK(setsockopt(h.pair[0], SOL_SOCKET, SO_SNDBUF, &room, sizeof room) == 0);
    static uint8_t payload[16000];
    int sent = 0;
    while (sent < 500 && pl_port_send(h.right, 60, payload, sizeof payload, NULL, 0) == PL_OK) sent++;
    CHECK(atomic_load(&h.conn->backlogged));
    pthread_t sender;
    start_thread(&sender, proxy_sender_16k_3s, h.right); /* waits for room */
    sleep_us(50000);
    CHECK(shutdown(h.pair[1], SHUT_RD) == 0);
    /* What came before stays readable; once it is read, the socket has room again, which takes nothing. */
    uint8_t *packet = malloc(PL_WIRE_MAX_FRAME);
    CHECK(packet != NULL);
    while (packet != NULL && recv(h.pair[1], packet, PL_WIRE_MAX_FRAME, MSG_DONTWAIT) > 0) {}
    free(packet);
    bool ended = false;
    for (int64_t deadline = now_ns() + 2000 * MS; !ended && now_ns() < deadline; sleep_us(10000)) {
        ended = atomic_load(&h.conn->ended);
    }
    if (!ended) fprintf(stderr, "  the connection lives on, backlogged %d\n", (int)atomic_load(&h.conn->backlogged));
    CHECK(ended);
    pthread_join(sender, NULL);
    pl_port_release_send(h.right);
    close(h.pair[1]);
    pl_conn_release(h.conn);
}
static void scenario_peer_stops_reading(void) { run_in_own_process(peer_stops_reading_body); }

/* ---- sender_woken_for_room --------------------------------------------------------------------- */

static pl_ring_t *hand_client_accept_ring(hand_client_t *h);

/* The peer as a slow, steady reader: one packet, then a pause of WR_PACE_US, from the go until the stop. */
#define WR_PACE_US 10000u
#define WR_SENDERS 3

typedef struct {
    int fd;
    pl_ring_t *ring;          /* by ring: records taken from it instead (the room given back, the writer rung) */
    atomic_bool go, stop;
    atomic_uint packets;      /* read since the go */
} wr_reader_t;

static void *wr_paced_reader(void *raw) {
    wr_reader_t *r = raw;
    uint8_t *packet = malloc(PL_WIRE_MAX_FRAME);
    CHECK(packet != NULL);
    while (!atomic_load(&r->go) && !atomic_load(&r->stop)) sleep_us(1000);
    while (packet != NULL && !atomic_load(&r->stop)) {
        if (r->ring != NULL) {
            size_t length = 0;
            const char *why = NULL;
            pl_ring_take_result_t took = pl_ring_take(r->ring, packet, &length, &why);
            CHECK(took != PL_RING_BROKEN);
            if (took == PL_RING_BROKEN) break;
            if (took == PL_RING_EMPTY) {
                sleep_us(1000);
                continue;
            }
            pl_ring_done_reading(r->ring);
            atomic_fetch_add(&r->packets, 1);
            sleep_us(WR_PACE_US);
            continue;
        }
        ssize_t n = recv(r->fd, packet, PL_WIRE_MAX_FRAME, MSG_DONTWAIT);
        if (n > 0) {
            atomic_fetch_add(&r->packets, 1);
            sleep_us(WR_PACE_US);
        } else if (n == 0 || errno != EAGAIN) {
            break;
        } else {
            struct pollfd readable = { .fd = r->fd, .events = POLLIN };
            poll(&readable, 1, 10);
        }
    }
    free(packet);
    return NULL;
}

typedef struct {
    pl_port_t *right;
    wr_reader_t *reader;
    pl_status_t status;
    unsigned packets;         /* the reader's count when the send returned */
    int64_t waited_ns;
} wr_sender_t;

static void *wr_sender(void *raw) {
    wr_sender_t *s = raw;
    static uint8_t payload[16000];
    int64_t start = now_ns();
    s->status = pl_port_send(s->right, 61, payload, sizeof payload, NULL, 20000 * MS);
    s->packets = atomic_load(&s->reader->packets);
    s->waited_ns = now_ns() - start;
    return NULL;
}

/* A sender that finds the outgoing queue full waits for room, and is woken once room for its message (and a batch
 * more) has appeared, not once the whole queue has gone. The peer reads a packet every WR_PACE_US; the queue, full,
 * holds some 64 frames of 16 KB; three senders wait: each must get in before the reader has read a third of them
 * (room for the three comes after about eight). Woken only when the queue drained, they got in after about as many
 * packets as the queue held, a wait as long as draining the megabyte. Counted in packets, not timed: a slow machine
 * slows the reader too. By socket, then by the shared-memory ring (the peer takes records, and its done rings the
 * client's bell: the transport sends what the ring has room for). */
static void sender_woken_for_room_run(bool by_ring) {
    pl_set_shared_rings(PL_RINGS_NEVER);
    hand_client_t h;
    hand_client_open(&h, PL_WIRE_VERSION, 1000, 0);
    if (h.right == NULL) return;
    /* A socket that holds a packet or two: each packet read lets a frame or two leave the queue. */
    int room = 16384;
    CHECK(setsockopt(h.pair[0], SOL_SOCKET, SO_SNDBUF, &room, sizeof room) == 0);
    static uint8_t payload[16000];
    pl_ring_t *ring = NULL;
    if (by_ring) {
        /* The peer takes the ring offered after the next message; the client writes by ring once RING_START went. */
        pl_set_shared_rings(PL_RINGS_ALWAYS);
        CHECK_OK(pl_port_send(h.right, 60, "offer", 5, NULL, 0));
        ring = hand_client_accept_ring(&h);
        for (int64_t deadline = now_ns() + 5000 * MS; ring != NULL && !atomic_load(&h.conn->ring_writing) &&
                                                     now_ns() < deadline;) {
            sleep_us(1000);
        }
        CHECK(atomic_load(&h.conn->ring_writing));
        if (ring == NULL || !atomic_load(&h.conn->ring_writing)) return;
    }
    int sent = 0;
    pl_status_t status = PL_OK;
    while (sent < 500 && (status = pl_port_send(h.right, 60, payload, sizeof payload, NULL, 0)) == PL_OK) sent++;
    CHECK_STATUS(status, PL_ERR_TIMED_OUT); /* the queue is full */
    pthread_mutex_lock(&h.conn->write_lock);
    unsigned queued = 0;
    for (pl_out_frame_t *frame = h.conn->out_head; frame != NULL; frame = frame->next) queued++;
    size_t bytes = h.conn->out_bytes;
    pthread_mutex_unlock(&h.conn->write_lock);
    CHECK(bytes + sizeof payload > PL_CONN_OUTGOING_LIMIT && queued >= 48);

    wr_reader_t reader = { .fd = h.pair[1], .ring = ring };
    pthread_t reading, senders[WR_SENDERS];
    wr_sender_t s[WR_SENDERS];
    start_thread(&reading, wr_paced_reader, &reader);
    for (int i = 0; i < WR_SENDERS; i++) {
        s[i] = (wr_sender_t){ .right = h.right, .reader = &reader, .status = PL_ERR_SYSTEM };
        start_thread(&senders[i], wr_sender, &s[i]);
    }
    sleep_us(50000); /* the senders wait for room */
    atomic_store(&reader.go, true);
    for (int i = 0; i < WR_SENDERS; i++) {
        pthread_join(senders[i], NULL);
        CHECK_OK(s[i].status);
        if (s[i].status != PL_OK || s[i].packets > queued / 3 || verbose) {
            fprintf(stderr, "  %s: sender %d got in after %u packets read of %u queued, %.0f ms\n",
                    by_ring ? "by ring" : "by socket", i, s[i].packets, queued, (double)s[i].waited_ns / 1e6);
        }
        CHECK(s[i].packets <= queued / 3);
    }
    atomic_store(&reader.stop, true);
    pthread_join(reading, NULL);
    pl_port_release_send(h.right);
    hand_client_close(&h);
    if (ring != NULL) pl_ring_free(ring);
}
static void sender_woken_for_room_body(void) {
    sender_woken_for_room_run(false);
    sender_woken_for_room_run(true);
}
static void scenario_sender_woken_for_room(void) { run_in_own_process(sender_woken_for_room_body); }

/* A client's connection as a look-up makes it, its hello written, not yet among the transport's: the look-up's moment
 * between its hello and pl_transport_add_conn, held open. The service is the other end of a socketpair. */
typedef struct early_conn {
    int pair[2];
    pl_pending_socket_t pending;
    pl_conn_t *conn;
} early_conn_t;

static bool early_conn_open(early_conn_t *e, int service_shut) {
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, e->pair) == 0);
    if (service_shut >= 0) CHECK(shutdown(e->pair[1], service_shut) == 0);
    pl_transport_pending_add(&e->pending);
    e->pending.fd = e->pair[0];
    e->conn = pl_conn_new(e->pair[0], false);
    CHECK(e->conn != NULL);
    if (e->conn == NULL) return false;
    pl_conn_write_hello(e->conn, PL_HELLO_WELCOME, (pl_wire_right_t){ 0 });
    return true;
}

/* Waits until the transport has run the commands posted for the connection (each holds a reference). */
static void early_conn_commands_run(early_conn_t *e) {
    for (int64_t deadline = now_ns() + 2000 * MS; atomic_load(&e->conn->refs) > 1 && now_ns() < deadline;) sleep_us(1000);
    CHECK(atomic_load(&e->conn->refs) == 1);
}

/* Lists a connection the transport was told to end before: the listing must refuse it, and the caller ends it as the
 * look-up does. Listed, it must not live on: the service welcomes it, and it must end all the same. */
static void early_conn_list_killed(early_conn_t *e, const char *what) {
    pl_status_t listed = pl_transport_add_conn(e->conn, &e->pending);
    if (listed == PL_OK) {
        fake_service_welcome(e->pair[1]);
        bool ended = false;
        for (int64_t deadline = now_ns() + 1000 * MS; !ended && now_ns() < deadline; sleep_us(10000)) {
            ended = atomic_load(&e->conn->ended);
        }
        if (!ended) fprintf(stderr, "  %s: the kill that came before the listing was lost, the connection lives on\n", what);
        CHECK(ended);
        close(e->pair[1]); /* the end, for the transport to read */
        for (int64_t deadline = now_ns() + 2000 * MS; !atomic_load(&e->conn->ended) && now_ns() < deadline;) sleep_us(1000);
    } else {
        CHECK_STATUS(listed, PL_ERR_INVALID_DEST);
        e->conn->fd = -1; /* the pending socket's, closed with it */
        pthread_mutex_lock(&e->conn->read_lock);
        pl_conn_teardown(e->conn, "killed before it was listed");
        pthread_mutex_unlock(&e->conn->read_lock);
        pl_transport_pending_drop(&e->pending);
        close(e->pair[1]);
    }
    CHECK(atomic_load(&e->conn->ended));
    pl_conn_release(e->conn);
}

/* The same refusal met by a look-up's hello, before its connection is among the transport's. A service that shut its
 * reading side at once sends no end: the transport's look at the refusal ends the connection, before it is listed,
 * and the listing must refuse it rather than leave it to live on. A service that closed sends its end: the
 * transport, finding the connection not yet its own, must leave it to be ended when the end is read, not mark it
 * ended-already so that its real end, when it comes, is ignored. */
static void refused_before_watched_body(void) {
    CHECK_OK(pl_transport_start());
    int before = open_descriptors();
    early_conn_t e;
    if (!early_conn_open(&e, SHUT_RD)) return; /* the hello is refused: EPIPE */
    early_conn_commands_run(&e); /* the transport looks at the refusal: no end is coming */
    early_conn_list_killed(&e, "a service that stopped reading");

    if (!early_conn_open(&e, SHUT_RDWR)) return; /* refused, and the end is there to read */
    early_conn_commands_run(&e);
    CHECK_OK(pl_transport_add_conn(e.conn, &e.pending));
    bool ended = false;
    for (int64_t deadline = now_ns() + 2000 * MS; !ended && now_ns() < deadline; sleep_us(10000)) {
        ended = atomic_load(&e.conn->ended);
    }
    if (!ended) fprintf(stderr, "  the connection's end was ignored\n");
    CHECK(ended);
    close(e.pair[1]);
    pl_conn_release(e.conn);
    CHECK(open_descriptors() == before);
}
static void scenario_refused_before_watched(void) { run_in_own_process(refused_before_watched_body); }

/* ---- refused_after_messages --------------------------------------------------------------------- */

#define REFUSED_MESSAGES 3

/* The peer (playing the service) takes the client's ring offer, which follows the client's next message: maps the
 * memfd, keeps the client's bell and answers RING_ACCEPT with its own. Returns its end of the rings, NULL if the
 * offer did not come. */
static pl_ring_t *hand_client_accept_ring(hand_client_t *h) {
    uint8_t *packet = malloc(PL_WIRE_MAX_FRAME);
    CHECK(packet != NULL);
    pl_ring_t *ring = NULL;
    for (int64_t deadline = now_ns() + 5000 * MS; packet != NULL && ring == NULL && now_ns() < deadline;) {
        union { char bytes[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } control;
        struct iovec iov = { .iov_base = packet, .iov_len = PL_WIRE_MAX_FRAME };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes,
                              .msg_controllen = sizeof control.bytes };
        ssize_t n = recvmsg(h->pair[1], &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n <= 0) {
            CHECK(n < 0 && errno == EAGAIN);
            if (n == 0 || errno != EAGAIN) break;
            struct pollfd readable = { .fd = h->pair[1], .events = POLLIN };
            poll(&readable, 1, 10);
            continue;
        }
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        int fds[2] = { -1, -1 };
        if (cmsg != NULL && cmsg->cmsg_type == SCM_RIGHTS && cmsg->cmsg_len == CMSG_LEN(2 * sizeof(int))) {
            memcpy(fds, CMSG_DATA(cmsg), sizeof fds);
        }
        pl_wire_frame_t frame;
        const char *why;
        bool offer = fds[0] >= 0 && pl_wire_decode(packet, (size_t)n, 2, &frame, &why) &&
                     frame.type == PL_FRAME_RING_OFFER;
        if (offer) {
            int ringer = -1;
            bool peer_fault = false;
            ring = pl_ring_adopt(fds[0], &ringer, &peer_fault, &why);
            CHECK(ring != NULL);
            if (ring != NULL && pl_ring_take_ringer(ring, fds[1], &peer_fault, &why)) fds[1] = -1;
            CHECK(fds[1] < 0);
            uint8_t accept[PL_WIRE_HEADER_SIZE + 8];
            size_t length = pl_wire_encode_ring(accept, PL_FRAME_RING_ACCEPT, 0);
            union { char bytes[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } out;
            memset(&out, 0, sizeof out);
            struct iovec out_iov = { .iov_base = accept, .iov_len = length };
            struct msghdr out_msg = { .msg_iov = &out_iov, .msg_iovlen = 1, .msg_control = out.bytes,
                                      .msg_controllen = sizeof out.bytes };
            struct cmsghdr *out_cmsg = CMSG_FIRSTHDR(&out_msg);
            out_cmsg->cmsg_level = SOL_SOCKET;
            out_cmsg->cmsg_type = SCM_RIGHTS;
            out_cmsg->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(out_cmsg), &ringer, sizeof(int));
            if (ring != NULL) CHECK(sendmsg(h->pair[1], &out_msg, 0) == (ssize_t)length);
            if (ringer >= 0) close(ringer);
        }
        for (int i = 0; i < 2; i++) if (fds[i] >= 0) close(fds[i]);
    }
    free(packet);
    CHECK(ring != NULL);
    return ring;
}

/* A peer sends messages, then shuts its reading side; this side's next write is refused before the transport has
 * read them. Messages the peer handed to the kernel (or put in its ring) before it stopped reading must be
 * delivered, as a closing peer's are, before the connection ends. The reader is held back by holding the
 * connection's read lock, as another reader (a set's, a sender's short pass) holds it: the transport leaves the
 * reading to the holder (a note), and the holder, once it lets go, hands what it left on to the transport, as those
 * readers do. The lock is let go only once the transport is ending the connection (a look-up no longer finds it),
 * so the refusal comes first for sure. By ring, the peer's messages are records in its ring, and the refused write
 * is one with a descriptor, which takes the socket. */
static void refused_after_messages_run(bool by_ring) {
    CHECK_OK(pl_transport_start()); /* its descriptors, kept for the process's life, are not the scenario's */
    int descriptors = open_descriptor_count();
    pl_set_shared_rings(PL_RINGS_NEVER);
    hand_client_t h;
    hand_client_open(&h, PL_WIRE_VERSION, 1000, 0);
    if (h.right == NULL) return;
    h.conn->lookup_key = strdup("refused-after-messages"); /* for pl_transport_find_client: not found once ending */
    CHECK(h.conn->lookup_key != NULL);
    pl_port_t *local;
    CHECK_OK(pl_port_create(16, 1024, &local));
    /* The peer gets a right to a local port (an export of ours), with credit for the messages below. */
    CHECK_OK(pl_port_send(h.right, 60, "first", 5, local, 0));
    pl_wire_frame_t frame;
    CHECK(hand_client_await(&h, PL_FRAME_MESSAGE, 0, 5000, &frame));
    uint32_t local_handle = frame.u.message.reply.handle;
    CHECK(frame.u.message.reply.kind == PL_RIGHT_SENDERS && frame.u.message.reply.credits >= REFUSED_MESSAGES);
    pl_ring_t *ring = NULL;
    if (by_ring) {
        pl_set_shared_rings(PL_RINGS_ALWAYS);
        CHECK_OK(pl_port_send(h.right, 60, "second", 6, NULL, 0)); /* the offer follows it */
        ring = hand_client_accept_ring(&h);
        bool reading = false; /* the transport reads RING_ACCEPT, and reads by ring from there */
        for (int64_t deadline = now_ns() + 5000 * MS; ring != NULL && !reading && now_ns() < deadline;) {
            pthread_mutex_lock(&h.conn->read_lock);
            reading = h.conn->ring_reading;
            pthread_mutex_unlock(&h.conn->read_lock);
            if (!reading) sleep_us(1000);
        }
        CHECK(reading);
    }
    pthread_mutex_lock(&h.conn->read_lock); /* no reader reads the connection from here on */
    uint8_t packet[256];
    for (int i = 0; i < REFUSED_MESSAGES; i++) {
        pl_wire_message_t m = { .dest = local_handle, .id = 80 + i };
        size_t length = pl_wire_encode_message_head(packet, 0, &m, NULL, 0);
        if (ring != NULL) CHECK(pl_ring_put(ring, packet, length, NULL, 0, false) == PL_RING_PUT);
        else hand_send_to_client(&h, packet, length);
    }
    CHECK(shutdown(h.pair[1], SHUT_RD) == 0);
    /* This side's write is refused (EPIPE): the transport is told. */
    if (!by_ring) {
        CHECK_STATUS(pl_port_send(h.right, 61, "refused", 7, NULL, 0), PL_ERR_INVALID_DEST);
    } else {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        pl_attachment_t attachment = { .kind = PL_ATTACHMENT_FD, .fd = fd };
        pl_port_send_with(h.right, 61, "refused", 7, NULL, &attachment, 1, 0);
        close(fd);
    }
    bool ending = false;
    for (int64_t deadline = now_ns() + 5000 * MS; !ending && now_ns() < deadline; sleep_us(1000)) {
        pl_conn_t *found = pl_transport_find_client("refused-after-messages");
        ending = found == NULL;
        if (found != NULL) pl_conn_release(found);
    }
    CHECK(ending);
    bool noted = atomic_load(&h.conn->read_again);
    pthread_mutex_unlock(&h.conn->read_lock);
    if (noted) pl_transport_read(h.conn); /* what a holder leaves, the transport reads */
    bool ended = false;
    for (int64_t deadline = now_ns() + 5000 * MS; !ended && now_ns() < deadline; sleep_us(1000)) {
        ended = atomic_load(&h.conn->ended);
    }
    CHECK(ended);
    int arrived = 0;
    pl_received_t out;
    while (pl_port_receive(local, &out, NULL, 0, 0) == PL_OK) {
        CHECK(out.id == 80 + arrived);
        arrived++;
    }
    if (arrived != REFUSED_MESSAGES) {
        fprintf(stderr, "  (%s) %d messages sent before the peer stopped reading, %d arrived\n",
                by_ring ? "ring" : "socket", REFUSED_MESSAGES, arrived);
    }
    CHECK(arrived == REFUSED_MESSAGES);
    pl_port_release_send(h.right);
    pl_port_destroy(local);
    close(h.pair[1]);
    if (ring != NULL) pl_ring_free(ring);
    pl_conn_release(h.conn);
    int left = open_descriptor_count();
    if (left != descriptors) fprintf(stderr, "  (%s) %d descriptors open, %d before\n", by_ring ? "ring" : "socket",
                                     left, descriptors);
    CHECK(left == descriptors);
}

static void refused_after_messages_body(void) {
    refused_after_messages_run(false);
    refused_after_messages_run(true);
}
static void scenario_refused_after_messages(void) { run_in_own_process(refused_after_messages_body); }

/* ---- refusing_peers_hold_nothing ------------------------------------------------------------------ */

/* A write a peer refuses makes the transport look for the peer's hang-up, which a closing peer's kernel marks a
 * moment after the refusal; a peer that only shut its reading side never hangs up. The transport serves every
 * connection of its process: a look that waited for the hang-up (10 ms) held all of them up that long per such
 * peer, and a local peer that connects again and again only to stop reading held them up as long as it liked. The
 * refusals here come in one batch (each peer's probe, answered by the transport, is refused), so the waits added up
 * to REFUSING_PEERS × 10 ms in one stretch, which a round trip over another connection waited out. */
enum { REFUSING_PEERS = 40 };
#define REFUSING_BOUND_MS 200 /* half of what the waiting looks held the transport for */

/* The scenario bounds the time in which no thread of the process ran (wall time less the process's CPU time): a
 * look that waits idles the transport, and with it every thread waiting on a connection, while work keeps threads
 * running however much a tool (helgrind's clocks grow with every thread a run has made) slows it. The round trips'
 * bound is then the waits' share plus the CPU time spent meanwhile. */

typedef struct round_trips {
    pl_port_t *right, *replies; /* the service's port, looked up; where its echoes come */
    atomic_bool stop;
    atomic_int count;
    _Atomic int64_t longest;    /* ns; set to 0 by the scenario once round trips run */
} round_trips_t;

/* Sends to the service and waits for its echo, again and again until told to stop; then asks the echo to end. */
static void *round_trips_body(void *raw) {
    round_trips_t *rt = raw;
    bool first = true;
    while (!atomic_load(&rt->stop)) {
        int64_t start = now_ns();
        pl_status_t sent = pl_port_send(rt->right, 1, "ping", 4, first ? rt->replies : NULL, 5000 * MS);
        CHECK_OK(sent);
        pl_received_t out;
        pl_status_t got = sent == PL_OK ? pl_port_receive(rt->replies, &out, NULL, 0, 5000 * MS) : sent;
        CHECK_OK(got);
        if (got != PL_OK) break;
        first = false;
        int64_t took = now_ns() - start, longest = atomic_load(&rt->longest);
        while (took > longest && !atomic_compare_exchange_weak(&rt->longest, &longest, took)) {}
        atomic_fetch_add(&rt->count, 1);
    }
    CHECK_OK(pl_port_send(rt->right, 2, NULL, 0, NULL, 5000 * MS));
    return NULL;
}

/* The service: echoes each message on the reply right the first one brought, until a message says to end. */
static void *echo_body(void *raw) {
    pl_port_t *port = raw, *back = NULL;
    for (;;) {
        pl_received_t in;
        char buffer[16];
        pl_status_t got = pl_port_receive(port, &in, buffer, sizeof buffer, 10000 * MS);
        CHECK_OK(got);
        if (got != PL_OK) break;
        if (back == NULL) back = in.reply;
        else release_reply(&in);
        if (in.id == 2) break;
        CHECK(back != NULL);
        if (back != NULL) CHECK_OK(pl_port_send(back, 1, NULL, 0, NULL, 5000 * MS));
    }
    if (back != NULL) CHECK_OK(pl_port_release_send(back));
    return NULL;
}

static uint32_t connection_count(void) {
    uint32_t connections = 0;
    pl_remote_stats(&connections, NULL, NULL);
    return connections;
}

static void refusing_peers_hold_nothing_body(void) {
    char dir[] = "/tmp/pl-stress-refusing-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pl_port_t *service = new_port(64);
    CHECK_OK(pl_service_check_in(dir, "svc", service, NULL));
    round_trips_t rt = { .replies = new_port(64) };
    CHECK_OK(pl_service_look_up(dir, "svc", 5000 * MS, &rt.right));
    if (rt.right == NULL) return;
    uint32_t connections = connection_count(); /* the look-up's, both sides */
    pthread_t echo, trips;
    start_thread(&echo, echo_body, service);
    start_thread(&trips, round_trips_body, &rt);
    for (int64_t deadline = now_ns() + 5000 * MS; atomic_load(&rt.count) < 20 && now_ns() < deadline;) sleep_us(1000);

    /* The peers connect, say hello and read the service's welcome, then stop reading. */
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    snprintf(address.sun_path, sizeof address.sun_path, "%s/svc", dir);
    uint8_t hello[PL_WIRE_HELLO_SIZE], packet[256];
    size_t hello_length = pl_wire_encode_hello(hello, 3, PL_HELLO_WELCOME, (pl_wire_right_t){ 0 });
    int peers[REFUSING_PEERS];
    for (int i = 0; i < REFUSING_PEERS; i++) {
        peers[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        CHECK(peers[i] >= 0);
        CHECK(connect(peers[i], (struct sockaddr *)&address, sizeof address) == 0);
        CHECK(send(peers[i], hello, hello_length, 0) == (ssize_t)hello_length);
    }
    for (int i = 0; i < REFUSING_PEERS; i++) {
        struct pollfd welcome = { .fd = peers[i], .events = POLLIN };
        CHECK(poll(&welcome, 1, 5000) == 1 && recv(peers[i], packet, sizeof packet, MSG_DONTWAIT) > 0);
        CHECK(shutdown(peers[i], SHUT_RD) == 0);
    }
    /* Each asks for the service's status: the transport's answer is refused. Then each asks again, once the
     * transport has met the first refusals and while their second looks are still to come, most likely (a
     * connection ended already refuses the question: no matter). */
    uint8_t probe[PL_WIRE_PROBE_FIXED];
    size_t probe_length = pl_wire_encode_probe(probe, 1, 0, 0);
    atomic_store(&rt.longest, 0);
    int before = atomic_load(&rt.count);
    for (int i = 0; i < REFUSING_PEERS; i++) CHECK(send(peers[i], probe, probe_length, 0) == (ssize_t)probe_length);
    int64_t sent = now_ns(), cpu_at_sent = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    sleep_us(3000);
    for (int i = 0; i < REFUSING_PEERS; i++) {
        ssize_t again = send(peers[i], probe, probe_length, MSG_NOSIGNAL);
        (void)again;
    }
    bool ended = false;
    for (int64_t deadline = sent + 10000 * MS; !ended && now_ns() < deadline; sleep_us(1000)) {
        ended = connection_count() == connections;
    }
    int64_t taken = now_ns() - sent, cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu_at_sent;
    if (!ended) fprintf(stderr, "  %u connections of the refusing peers left\n", connection_count() - connections);
    CHECK(ended);
    sleep_us(20000); /* a round trip or two after the last end */
    atomic_store(&rt.stop, true);
    pthread_join(trips, NULL);
    pthread_join(echo, NULL);
    double longest = (double)atomic_load(&rt.longest) / 1e6, busy = (double)cpu / 1e6;
    double idle = (double)taken / 1e6 - busy; /* below zero where threads ran side by side */
    bool held = idle >= REFUSING_BOUND_MS || longest >= REFUSING_BOUND_MS + busy;
    if (verbose || held) {
        fprintf(stderr, "  %d refusing peers: their connections ended in %.1f ms, %.1f ms of it with no thread "
                "running; %d round trips meanwhile, the longest %.1f ms\n", REFUSING_PEERS, (double)taken / 1e6,
                idle, atomic_load(&rt.count) - before, longest);
    }
    CHECK(idle < REFUSING_BOUND_MS);
    CHECK(longest < REFUSING_BOUND_MS + busy);

    for (int i = 0; i < REFUSING_PEERS; i++) close(peers[i]);
    CHECK_OK(pl_port_release_send(rt.right));
    CHECK_OK(pl_port_destroy(rt.replies));
    CHECK_OK(pl_port_destroy(service));
    remove_service_dir(dir);
}
static void scenario_refusing_peers_hold_nothing(void) { run_in_own_process(refusing_peers_hold_nothing_body); }

/* ---- kill_before_listed ------------------------------------------------------------------------- */

/* A kill posted for a look-up's connection between its hello and its listing (the hello could not go: no memory for the
 * outgoing queue, a write the socket refused) and run by the transport before the listing: the listing must refuse
 * the connection, not list it to live on with a hello that never went (the service would end it at its first frame,
 * after the look-up had said PL_OK). */
static void kill_before_listed_body(void) {
    CHECK_OK(pl_transport_start());
    int before = open_descriptors();
    early_conn_t e;
    if (!early_conn_open(&e, -1)) return;
    pl_transport_kill(e.conn, "no memory or descriptors for the outgoing queue");
    early_conn_commands_run(&e);
    early_conn_list_killed(&e, "a kill before the listing");
    CHECK(open_descriptors() == before);
}
static void scenario_kill_before_listed(void) { run_in_own_process(kill_before_listed_body); }

/* A descriptor sent as an attachment waits, duplicated, in the outgoing queue of a full socket; the sender closed its
 * own. A child forked then must not hold that duplicate: the queue is the parent's, and a child that lives on would
 * keep the file open (a pipe's end never reaching its end) long after the message has gone. */
static void fork_with_queued_descriptor_body(void) {
    hand_client_t h;
    hand_client_open(&h, 3, 1000, 0);
    if (h.right == NULL) return;
    hand_client_fill_socket(&h);
    char path[] = "/tmp/pl-stress-queuedfd-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    pl_attachment_t attachment = { .kind = PL_ATTACHMENT_FD, .fd = fd };
    CHECK_OK(pl_port_send_with(h.right, 64, "fd", 2, NULL, &attachment, 1, 0));
    close(fd);
    CHECK(atomic_load(&h.conn->backlogged) && holds_descriptor_on(path)); /* the queue's duplicate */
    int held = in_child(holds_descriptor_on, path);
    if (held != 0) fprintf(stderr, "  the child holds the queued descriptor (%d)\n", held);
    CHECK(held == 0);
    unlink(path);
    CHECK_OK(pl_port_release_send(h.right));
    hand_client_close(&h);
}
static void scenario_fork_with_queued_descriptor(void) { run_in_own_process(fork_with_queued_descriptor_body); }

/* ---- ring_switch_mid_batch ---------------------------------------------------------------------- */

/* Plays the client's part of the switch up to its RING_START: offers a ring, reads the service's acceptance and
 * takes the bell that came with it. Returns the client's end of the ring; the service side now waits for
 * RING_START. */
static pl_ring_t *hand_offer_ring(hand_conn_t *h) {
    pl_ring_t *ring;
    int memfd, ringer;
    CHECK_OK(pl_ring_create(&ring, &memfd, &ringer));
    uint8_t frame[PL_WIRE_HEADER_SIZE + 8];
    size_t length = pl_wire_encode_ring(frame, PL_FRAME_RING_OFFER, PL_RING_BYTES);
    int fds[2] = { memfd, ringer };
    hand_send_fds(h, frame, length, fds, 2);
    close(memfd);
    close(ringer);
    const char *why = NULL;
    CHECK(hand_read(h, 1, &why) == PL_READ_DRAINED);
    CHECK(atomic_load(&h->conn->ring_pending) && !h->conn->ring_reading);

    uint8_t answer[64];
    union { char bytes[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct iovec iov = { .iov_base = answer, .iov_len = sizeof answer };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes,
                          .msg_controllen = sizeof control.bytes };
    ssize_t n = recvmsg(h->pair[1], &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    pl_wire_frame_t accepted;
    CHECK(n > 0 && pl_wire_decode(answer, (size_t)n, 1, &accepted, &why) && accepted.type == PL_FRAME_RING_ACCEPT);
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    CHECK(cmsg != NULL && cmsg->cmsg_type == SCM_RIGHTS && cmsg->cmsg_len == CMSG_LEN(sizeof(int)));
    int service_ringer;
    memcpy(&service_ringer, CMSG_DATA(cmsg), sizeof(int));
    bool peer_fault;
    CHECK(pl_ring_take_ringer(ring, service_ringer, &peer_fault, &why));
    return ring;
}

/* A hand-driven connection taken up to its RING_START, and a packet buffer (the caller frees it). */
static pl_ring_t *hand_open_to_switch(hand_conn_t *h, uint8_t **packet) {
    hand_conn_open(h);
    *packet = malloc(PL_WIRE_MAX_FRAME);
    CHECK(*packet != NULL);
    return hand_offer_ring(h);
}

static void hand_send_ring_start(hand_conn_t *h) {
    uint8_t frame[PL_WIRE_HEADER_SIZE + 8];
    hand_send(h, frame, pl_wire_encode_ring(frame, PL_FRAME_RING_START, 0));
}

/* Puts a frame in the ring, or the mark of a packet that follows on the socket (frame NULL). */
static void hand_ring_put(pl_ring_t *ring, const uint8_t *frame, size_t length) {
    CHECK((frame != NULL ? pl_ring_put(ring, frame, length, NULL, 0, false) : pl_ring_put_mark_for_socket(ring)) ==
          PL_RING_PUT);
}

/* Reads by ring until the ring and the socket hold nothing more. */
static pl_read_result_t hand_read_ring(hand_conn_t *h, const char **why) {
    pl_read_result_t result;
    do {
        result = pl_conn_read_ring(h->conn, h->buffer, PL_READ_BATCH, SIZE_MAX, why);
    } while (result == PL_READ_MORE);
    return result;
}

static void hand_expect_nothing(hand_conn_t *h) {
    pl_received_t out;
    CHECK(pl_port_receive(h->port, &out, NULL, 0, 0) == PL_ERR_TIMED_OUT);
}

/* A message of four fragments crossing the switch, as a peer that keeps the rules sends it: the first by socket,
 * then RING_START; the second in the ring, the third by socket behind a mark (read in place), the last in the
 * ring; then a small message with a descriptor, by socket behind a mark. Read a packet at a time, or in one batch
 * where the packets behind RING_START wait for the ring's records up to their marks. */
static void ring_switch_in_order(int batch) {
    int descriptors = open_descriptor_count();
    hand_conn_t h;
    uint8_t *packet;
    pl_ring_t *ring = hand_open_to_switch(&h, &packet);
    const char *why = NULL;
    uint32_t first = pl_wire_first_fragment_room(0), room = pl_wire_next_fragment_room();

    hand_send(&h, packet, hand_fragment(packet, 7, FRAGMENTED_SIZE, 0, first, true));
    CHECK(hand_read(&h, batch, &why) == PL_READ_DRAINED);
    hand_send_ring_start(&h);
    hand_ring_put(ring, packet, hand_fragment(packet, 7, FRAGMENTED_SIZE, first, room, true));
    hand_ring_put(ring, NULL, 0);
    hand_send(&h, packet, hand_fragment(packet, 7, FRAGMENTED_SIZE, first + room, room, true));
    uint32_t last = first + 2 * room;
    hand_ring_put(ring, packet, hand_fragment(packet, 7, FRAGMENTED_SIZE, last, FRAGMENTED_SIZE - last, false));
    hand_ring_put(ring, NULL, 0);
    pl_wire_message_t small = { .dest = 1, .id = 8, .total_size = 40, .attachment_count = 1, .fd_count = 1 };
    pl_wire_right_t descriptor = { .kind = PL_RIGHT_FD, .handle = 0 };
    size_t length = pl_wire_encode_message_head(packet, 0, &small, &descriptor, 40);
    for (uint32_t i = 0; i < 40; i++) packet[length + i] = fragmented_byte(i);
    int passed = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(passed >= 0);
    hand_send_fds(&h, packet, length + 40, &passed, 1);
    close(passed);

    CHECK(hand_read(&h, batch, &why) == PL_READ_DRAINED);
    CHECK(h.conn->ring_reading);
    CHECK(hand_read_ring(&h, &why) == PL_READ_DRAINED);
    hand_expect(&h, 7, FRAGMENTED_SIZE);
    pl_received_t out;
    pl_payload_t payload;
    CHECK_OK(pl_port_receive_payload(h.port, &out, &payload, 0));
    CHECK(out.id == 8 && out.size == 40 && out.attachments != NULL && out.attachments->count == 1 &&
          out.attachments->items[0].kind == PL_ATTACHMENT_FD && out.attachments->items[0].fd >= 0);
    pl_attachments_free(out.attachments);
    pl_payload_free(&payload);
    hand_expect_nothing(&h);

    hand_conn_close(&h);
    pl_ring_free(ring);
    CHECK(open_descriptor_count() == descriptors);
    free(packet);
}

/* RING_START, then one packet on the socket behind a mark that the second slot of the batch reads in place, as the
 * continuation of message 7 it expects: the last fragment of message 7 (`repeat`) or of message 9. Ahead of the
 * mark the ring holds the rest of message 7 and, for message 9, its first two fragments, which take it to the very
 * offset the socket's packet was read to. Message 7 arrives whole, as the ring gave it, and once. Message 9's last
 * fragment is then handled as what it is, and message 9 arrives whole; a repeat of message 7's last fragment
 * continues no message, and the connection ends. */
static void ring_switch_overtaken(bool repeat) {
    hand_conn_t h;
    uint8_t *packet;
    pl_ring_t *ring = hand_open_to_switch(&h, &packet);
    const char *why = NULL;
    uint32_t first = pl_wire_first_fragment_room(0), room = pl_wire_next_fragment_room();
    uint32_t total = first + room + 1000; /* three fragments, the last 1,000 bytes */

    hand_send(&h, packet, hand_fragment(packet, 7, total, 0, first, true));
    CHECK(hand_read(&h, PL_READ_BATCH, &why) == PL_READ_DRAINED);
    hand_send_ring_start(&h);
    hand_send(&h, packet, hand_fragment(packet, repeat ? 7 : 9, total, first + room, 1000, false));
    hand_ring_put(ring, packet, hand_fragment(packet, 7, total, first, room, true));
    hand_ring_put(ring, packet, hand_fragment(packet, 7, total, first + room, 1000, false));
    if (!repeat) {
        hand_ring_put(ring, packet, hand_fragment(packet, 9, total, 0, first, true));
        hand_ring_put(ring, packet, hand_fragment(packet, 9, total, first, room, true));
    }
    hand_ring_put(ring, NULL, 0);

    if (repeat) {
        CHECK(hand_read(&h, PL_READ_BATCH, &why) == PL_READ_ENDED);
        CHECK(why != NULL && strstr(why, "fragment") != NULL);
        hand_expect(&h, 7, total);
    } else {
        CHECK(hand_read(&h, PL_READ_BATCH, &why) == PL_READ_DRAINED);
        CHECK(h.conn->ring_reading);
        CHECK(hand_read_ring(&h, &why) == PL_READ_DRAINED);
        hand_expect(&h, 7, total);
        hand_expect(&h, 9, total);
    }
    hand_expect_nothing(&h);

    hand_conn_close(&h);
    pl_ring_free(ring);
    free(packet);
}

/* RING_START as the last packet of a reader's turn: the turn has read the socket up to its budget and left the ring,
 * which nobody has armed yet, so its writer will ring no bell for what it holds. The turn must say MORE, and the
 * next one reads the ring. With budget left for more than the ring holds, the same turn reads the ring itself. */
static void ring_switch_at_turn_end(int budget_past_switch) {
    hand_conn_t h;
    uint8_t *packet;
    pl_ring_t *ring = hand_open_to_switch(&h, &packet);
    const char *why = NULL;
    hand_send(&h, packet, hand_fragment(packet, 7, 100, 0, 100, false));
    hand_send_ring_start(&h);
    hand_ring_put(ring, packet, hand_fragment(packet, 8, 200, 0, 200, false));

    pl_read_result_t result = pl_conn_read_frames(h.conn, h.buffer, 2 + budget_past_switch, SIZE_MAX, &why);
    CHECK(h.conn->ring_reading);
    hand_expect(&h, 7, 100);
    if (budget_past_switch == 0) {
        CHECK(result == PL_READ_MORE);
        hand_expect_nothing(&h);
        CHECK(pl_conn_read_frames(h.conn, h.buffer, 2, SIZE_MAX, &why) == PL_READ_DRAINED);
    } else {
        CHECK(result == PL_READ_DRAINED);
    }
    hand_expect(&h, 8, 200);
    hand_expect_nothing(&h);

    hand_conn_close(&h);
    pl_ring_free(ring);
    free(packet);
}

static void ring_switch_mid_batch_body(void) {
    pl_set_shared_rings(PL_RINGS_WHEN_BUSY);
    ring_switch_in_order(1);
    ring_switch_in_order(PL_READ_BATCH);
    ring_switch_at_turn_end(0);
    ring_switch_at_turn_end(2);
    ring_switch_overtaken(false);
    ring_switch_overtaken(true);
}

/* In a process of its own: the switch makes the connection's readers watch its bell, and a transport started by an
 * earlier scenario would then watch this connection, which it does not own. */
static void scenario_ring_switch_mid_batch(void) { run_in_own_process(ring_switch_mid_batch_body); }

/* ---- ring_without_proc ---------------------------------------------------------------------------------- */
/* Without /proc nothing can say whether a descriptor is an eventfd. A client then makes no ring (and leaves nothing
 * open), and a service answers an offer with RING_REFUSE, not blaming the client: the connection goes on by socket.
 * In a process of its own, in a mount namespace of its own whose /proc is an empty tmpfs; skipped where such a
 * namespace cannot be made (no privileges). */

static int descriptors_in_use(void) { /* /proc/self/fd is gone here */
    int count = 0;
    for (int fd = 0; fd < 4096; fd++) count += fcntl(fd, F_GETFD) >= 0;
    return count;
}

static void ring_without_proc_body(void) {
    pl_set_shared_rings(PL_RINGS_WHEN_BUSY);
    hand_conn_t h;
    hand_conn_open(&h);
    /* What the offer carries, made while /proc is there (a real ring's header needs a ring). */
    int offer[2] = { ring_memfd(PL_RING_MAP_BYTES, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, true),
                     eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC) };
    CHECK(offer[0] >= 0 && offer[1] >= 0);
    /* A change of propagation ignores the file system type, but memcheck reads it as a string: not NULL. */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("none", "/proc", "tmpfs", 0, NULL) != 0) {
        fprintf(stderr, "ring_without_proc: skipped (no mount namespace of its own: %s)\n", strerror(errno));
        close(offer[0]);
        close(offer[1]);
        hand_conn_close(&h);
        return;
    }
    pl_ring_t *ring = NULL;
    int memfd = 0, ringer = 0, before = descriptors_in_use();
    CHECK_STATUS(pl_ring_create(&ring, &memfd, &ringer), PL_ERR_SYSTEM);
    const char *call = pl_last_system_call();
    CHECK(call != NULL && strcmp(call, "readlink(/proc/self/fd)") == 0);
    CHECK(ring == NULL && memfd == -1 && ringer == -1 && descriptors_in_use() == before);

    uint8_t frame[PL_WIRE_HEADER_SIZE + 8];
    hand_send_fds(&h, frame, pl_wire_encode_ring(frame, PL_FRAME_RING_OFFER, PL_RING_BYTES), offer, 2);
    close(offer[0]);
    close(offer[1]);
    const char *why = NULL;
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED); /* the hello and the offer: not an error */
    CHECK(h.conn->ring == NULL && !atomic_load(&h.conn->ring_pending) && h.conn->fd >= 0);
    uint8_t answer[64];
    pl_wire_frame_t refused;
    ssize_t n = recv(h.pair[1], answer, sizeof answer, MSG_DONTWAIT);
    CHECK(n > 0 && pl_wire_decode(answer, (size_t)n, 0, &refused, &why) && refused.type == PL_FRAME_RING_REFUSE);
    /* None left behind by the refused offer: those sent are closed (here, and by the service), and the ring it
     * began to make for the offer too. */
    CHECK(descriptors_in_use() == before - 2);
    hand_conn_close(&h);
}
static void scenario_ring_without_proc(void) { run_in_own_process(ring_without_proc_body); }

/* ---- ring_end_after_records --------------------------------------------------------------------------- */
/* The end is seen after the peer's last records: a reader that found its ring empty, and then the socket ended,
 * must look at the ring again, since the peer may have put its last records between the two looks (it puts them,
 * then closes). Here the reader is held between the two by userfaultfd: the first page of its mapping of the ring
 * (the shared indices) is write-protected, and its done with the pass, which answers the peer's writer that waited
 * for room, writes there. A lookout is registered meanwhile, so the reader does not arm the ring (an arm looks at
 * the tail, and would find the record) and goes straight to the socket. Skipped where userfaultfd cannot
 * write-protect shared memory. */

typedef struct {
    hand_conn_t *h;
    pl_read_result_t result;
    const char *why;
} end_reader_t;

static void *end_reader_body(void *arg) {
    end_reader_t *r = arg;
    r->result = pl_conn_read_ring(r->h->conn, r->h->buffer, PL_READ_BATCH, SIZE_MAX, &r->why);
    return NULL;
}

static void ring_end_after_records_body(void) {
    pl_set_shared_rings(PL_RINGS_WHEN_BUSY);
    hand_conn_t h;
    uint8_t *packet;
    pl_ring_t *ring = hand_open_to_switch(&h, &packet);
    const char *why = NULL;
    hand_send_ring_start(&h);
    CHECK(hand_read(&h, 1, &why) == PL_READ_DRAINED && h.conn->ring_reading);
    hand_ring_put(ring, packet, hand_fragment(packet, 7, 100, 0, 100, false));
    CHECK(hand_read_ring(&h, &why) == PL_READ_DRAINED);
    hand_expect(&h, 7, 100);

    /* The reader's mapping: the first field of its ring (pl_ring.c), as RING_TAIL and the rest assume its layout. */
    uint8_t *map = *(uint8_t **)h.conn->ring;
    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM };
    struct uffdio_register reg = { .range = { (uintptr_t)map, 4096 }, .mode = UFFDIO_REGISTER_MODE_WP };
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0 || ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) {
        if (uffd >= 0) close(uffd);
        hand_conn_close(&h);
        pl_ring_free(ring);
        free(packet);
        return; /* nothing to show here */
    }
    *(_Atomic uint32_t *)(map + RING_WAITING(0)) = 1; /* the peer's writer waits for room */
    atomic_store(&h.conn->lookers, 1);
    struct uffdio_writeprotect protect = { .range = { (uintptr_t)map, 4096 }, .mode = UFFDIO_WRITEPROTECT_MODE_WP };
    CHECK(ioctl(uffd, UFFDIO_WRITEPROTECT, &protect) == 0);

    end_reader_t r = { .h = &h };
    pthread_t reader;
    CHECK(pthread_create(&reader, NULL, end_reader_body, &r) == 0);
    struct pollfd fault = { .fd = uffd, .events = POLLIN };
    CHECK(poll(&fault, 1, 5000) == 1); /* the reader found the ring empty, and answers the waiting writer */
    struct uffd_msg msg;
    CHECK(read(uffd, &msg, sizeof msg) == (ssize_t)sizeof msg && msg.event == UFFD_EVENT_PAGEFAULT &&
          (msg.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) != 0);
    /* The peer's last message, then its end. */
    hand_ring_put(ring, packet, hand_fragment(packet, 8, 100, 0, 100, false));
    CHECK(shutdown(h.pair[1], SHUT_WR) == 0);
    protect.mode = 0;
    CHECK(ioctl(uffd, UFFDIO_WRITEPROTECT, &protect) == 0);
    pthread_join(reader, NULL);
    atomic_store(&h.conn->lookers, 0);
    close(uffd);

    pl_read_result_t result = r.result;
    if (result != PL_READ_ENDED) result = hand_read_ring(&h, &why);
    CHECK(result == PL_READ_ENDED);
    pl_received_t out;
    pl_payload_t payload;
    bool delivered = pl_port_receive_payload(h.port, &out, &payload, 0) == PL_OK;
    if (!delivered) fprintf(stderr, "ring_end_after_records: the last record, put before the end, was lost\n");
    CHECK(delivered && out.id == 8 && out.size == 100);
    if (delivered) pl_payload_free(&payload);
    hand_expect_nothing(&h);

    hand_conn_close(&h);
    pl_ring_free(ring);
    free(packet);
}

static void scenario_ring_end_after_records(void) { run_in_own_process(ring_end_after_records_body); }

/* ---- ring_end_behind_switch ---------------------------------------------------------------------------- */
/* A peer that switches and ends at once: RING_START on the socket, its last messages in the ring, then its end. A
 * reader that takes several packets a system call gets the switch frame and the end in one batch (recvmmsg reports
 * the end as an empty packet, again and again to the batch's end); the ring's records, put before the end, are
 * read first, and the end is seen after them. Read in batches, as the transport and the sets do, and a packet at a
 * time. */
static void ring_end_behind_switch(int batch) {
    hand_conn_t h;
    uint8_t *packet;
    pl_ring_t *ring = hand_open_to_switch(&h, &packet);
    const char *why = NULL;
    hand_send_ring_start(&h);
    hand_ring_put(ring, packet, hand_fragment(packet, 7, 100, 0, 100, false));
    hand_ring_put(ring, packet, hand_fragment(packet, 8, 200, 0, 200, false));
    CHECK(shutdown(h.pair[1], SHUT_WR) == 0);

    pl_read_result_t result = PL_READ_MORE;
    for (int turns = 0; turns < 8 && result != PL_READ_ENDED; turns++) {
        if (!h.conn->ring_reading) {
            int taken;
            result = pl_conn_read_socket(h.conn, h.buffer, PL_READ_BATCH, SIZE_MAX, batch, &why, &taken);
        } else {
            result = pl_conn_read_frames(h.conn, h.buffer, PL_READ_BATCH, SIZE_MAX, &why);
        }
    }
    CHECK(result == PL_READ_ENDED && why != NULL && strstr(why, "closed") != NULL);
    uint32_t count = pl_port_message_count(h.port);
    if (count != 2) fprintf(stderr, "ring_end_behind_switch (batch %d): %u of the ring's 2 records\n", batch, count);
    CHECK(count == 2);
    if (count == 2) {
        hand_expect(&h, 7, 100);
        hand_expect(&h, 8, 200);
    }
    hand_expect_nothing(&h);
    hand_conn_close(&h);
    pl_ring_free(ring);
    free(packet);
}

static void ring_end_behind_switch_body(void) {
    pl_set_shared_rings(PL_RINGS_WHEN_BUSY);
    ring_end_behind_switch(1);
    ring_end_behind_switch(PL_READ_BATCH);
}

static void scenario_ring_end_behind_switch(void) { run_in_own_process(ring_end_behind_switch_body); }

/* ---- payload_cache ------------------------------------------------------------------------------ */

/* Takes and gives buffers of 64 KiB to 256 KiB, marking both ends with its own byte and checking them after a
 * yield: a buffer handed to two threads at once would show the other's mark. */
static void *payload_cache_churn(void *arg) {
    unsigned char mark = (unsigned char)(uintptr_t)arg;
    uint64_t state = 0x9e3779b97f4a7c15ull * (mark + 1u);
    for (int i = 0; i < 5000; i++) {
        size_t size = i % 2 == 0 ? PL_PAYLOAD_CACHE_MIN + rnd(&state) % (192u << 10)
                                 : 128 + rnd(&state) % (PL_PAYLOAD_CACHE_MIN - 128); /* the small classes */
        unsigned char *bytes = pl_payload_cache_take(size);
        CHECK(bytes != NULL);
        if (bytes == NULL) return NULL;
        memset(bytes, mark, 64);
        memset(bytes + size - 64, mark, 64);
        sched_yield();
        for (size_t j = 0; j < 64; j++) {
            if (bytes[j] != mark || bytes[size - 64 + j] != mark) {
                CHECK(!"a cached buffer was handed to two threads");
                break;
            }
        }
        pl_payload_cache_give(bytes);
    }
    return NULL;
}

static void scenario_payload_cache(void) {
    /* A buffer given back is taken again for a size it fits, at least half its capacity... */
    void *a = pl_payload_cache_take(1u << 20);
    CHECK(a != NULL);
    pl_payload_cache_give(a);
    void *b = pl_payload_cache_take((1u << 20) - 4096);
    CHECK(b == a);
    pl_payload_cache_give(b);
    /* ...never for a size below half of it or above it, and memory taken may go back with free(). */
    void *smaller = pl_payload_cache_take(400u << 10);
    void *larger = pl_payload_cache_take((1u << 20) + (64u << 10));
    CHECK(smaller != NULL && smaller != a && larger != NULL && larger != a);
    free(smaller);
    free(larger);
    void *again = pl_payload_cache_take(1u << 20);
    CHECK(again == a);
    free(again);

    /* Bounded: of 32 buffers of 512 KiB given back, no more are kept than the bounds allow (earlier scenarios may
     * have left some), and taking as many back takes kept ones. */
    enum { MANY = 32 };
    void *many[MANY];
    uint32_t kept, kept_after;
    size_t kept_bytes, kept_bytes_after;
    for (int i = 0; i < MANY; i++) {
        many[i] = pl_payload_cache_take(512u << 10);
        CHECK(many[i] != NULL);
    }
    for (int i = 0; i < MANY; i++) pl_payload_cache_give(many[i]);
    CHECK(pl_payload_cache_held(&kept, &kept_bytes));
    CHECK(kept >= 1 && kept <= PL_PAYLOAD_CACHE_ENTRIES && kept_bytes <= PL_PAYLOAD_CACHE_BYTES);
    for (int i = 0; i < MANY; i++) many[i] = pl_payload_cache_take(512u << 10);
    CHECK(pl_payload_cache_held(&kept_after, &kept_bytes_after));
    CHECK(kept_after < kept && kept_bytes_after < kept_bytes);
    for (int i = 0; i < MANY; i++) free(many[i]);

    /* Small buffers, by power-of-two class: one given back serves every size of its class, not a larger one. */
    void *small = pl_payload_cache_take(4096);
    CHECK(small != NULL);
    pl_payload_cache_give(small);
    void *same = pl_payload_cache_take(2049);
    CHECK(same == small);
    void *larger_class = pl_payload_cache_take(4097);
    CHECK(larger_class != NULL && larger_class != small);
    pl_payload_cache_give(same);
    pl_payload_cache_give(larger_class);
    void *smaller_class = pl_payload_cache_take(2048);
    CHECK(smaller_class != small && smaller_class != larger_class);
    free(smaller_class);
    /* Between the largest class (32 KiB) and the large buffers: allocated as asked, kept in the largest class. */
    void *between = pl_payload_cache_take(40000);
    CHECK(between != NULL);
    memset(between, 1, 40000);
    pl_payload_cache_give(between);
    void *from_class = pl_payload_cache_take(32768);
    CHECK(from_class == between);
    free(from_class);
    /* Bounded per class and in all. */
    enum { SMALL_MANY = 300 };
    void *smalls[SMALL_MANY];
    uint32_t small_kept = 0;
    size_t small_bytes = 0;
    for (int i = 0; i < SMALL_MANY; i++) {
        smalls[i] = pl_payload_cache_take(4096);
        CHECK(smalls[i] != NULL);
        memset(smalls[i], 2, 4096); /* every byte writable: the class's whole size was allocated */
    }
    for (int i = 0; i < SMALL_MANY; i++) pl_payload_cache_give(smalls[i]);
    CHECK(pl_payload_cache_small_held(12 - PL_PAYLOAD_CACHE_SMALL_SHIFT, &small_kept, &small_bytes));
    CHECK(small_kept >= 1 && small_kept <= PL_PAYLOAD_CACHE_SMALL_ENTRIES && small_bytes <= PL_PAYLOAD_CACHE_SMALL_BYTES);
    for (int i = 0; i < SMALL_MANY; i++) smalls[i] = pl_payload_cache_take(4000);
    CHECK(pl_payload_cache_small_held(12 - PL_PAYLOAD_CACHE_SMALL_SHIFT, &small_kept, &small_bytes));
    CHECK(small_kept == 0);
    for (int i = 0; i < SMALL_MANY; i++) free(smalls[i]);
    CHECK(!pl_payload_cache_small_held(PL_PAYLOAD_CACHE_SMALL_CLASSES, &small_kept, &small_bytes));

    /* Four threads at once. */
    pthread_t threads[4];
    for (uintptr_t i = 0; i < 4; i++) CHECK(pthread_create(&threads[i], NULL, payload_cache_churn, (void *)(i + 1)) == 0);
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
}

/* ---- batch_taking ------------------------------------------------------------------------------------ */
/* pl_port_set_receive_batch_taking: payloads held in the slot (up to PL_INLINE_PAYLOAD_SIZE) are copied into the
 * buffer, larger ones handed over, so that a batch goes on past a payload larger than its buffer; in order, each
 * intact, and what is handed over is the caller's to free (ASan and valgrind count it). */

static void scenario_batch_taking(void) {
    enum { LARGE = 200000, BUDGETED = 300000 };
    unsigned char buffer[512];
    pl_received_t batch[40];
    pl_payload_t takes[40];
    uint32_t count = 0;
    unsigned char *large = malloc(LARGE), *budgeted = malloc(BUDGETED);
    CHECK(large != NULL && budgeted != NULL);
    for (uint32_t i = 0; i < LARGE; i++) large[i] = (unsigned char)(i * 13u + 5u);
    for (uint32_t i = 0; i < BUDGETED; i++) budgeted[i] = (unsigned char)(i * 7u + 3u);
    for (int round = 0; round < 50; round++) {
        pl_port_set_t *set = new_set();
        pl_port_t *port = NULL;
        CHECK_OK(pl_port_create(64, LARGE, &port));
        CHECK_OK(pl_port_set_insert(set, port));
        /* Three rounds of every size (the inline ones take about 120 bytes of buffer per round), a message larger
         * than the whole buffer, then three more. */
        for (int32_t id = 0; id < 27; id++) CHECK_OK(send_msg(port, id, NULL, 0));
        CHECK_OK(pl_port_send(port, 1000, large, LARGE, NULL, 0));
        for (int32_t id = 27; id < 30; id++) CHECK_OK(send_msg(port, id, NULL, 0));
        /* Copying, the batch stops before the large message; taking, it goes on to the end. */
        CHECK_OK(pl_port_set_receive_batch(set, batch, 40, buffer, sizeof buffer, &count));
        CHECK(count >= 1 && count < 27);
        uint32_t copied = count;
        for (uint32_t i = 0; i < copied; i++) CHECK(batch[i].id == (int32_t)i && message_intact(&batch[i], buffer + batch[i].offset));
        CHECK_OK(pl_port_set_receive_batch_taking(set, batch, takes, 40, buffer, sizeof buffer, &count));
        CHECK(count == 31 - copied);
        for (uint32_t i = 0; i < count; i++) {
            int32_t expected = (int32_t)(copied + i) < 27 ? (int32_t)(copied + i)
                             : (int32_t)(copied + i) == 27 ? 1000 : (int32_t)(copied + i) - 1;
            CHECK(batch[i].id == expected);
            bool held = batch[i].size <= PL_INLINE_PAYLOAD_SIZE;
            CHECK(held == (takes[i].base == NULL));
            CHECK(held || takes[i].size == batch[i].size);
            const unsigned char *bytes = held ? buffer + batch[i].offset : takes[i].base;
            if (expected == 1000) CHECK(batch[i].size == LARGE && memcmp(bytes, large, LARGE) == 0);
            else CHECK(message_intact(&batch[i], bytes));
            pl_payload_free(&takes[i]); /* nothing for a held one */
        }
        CHECK_STATUS(pl_port_set_receive_batch_taking(set, batch, takes, 40, buffer, sizeof buffer, &count),
                     PL_ERR_TIMED_OUT);
        CHECK(count == 0);
        CHECK_STATUS(pl_port_set_receive_batch_taking(NULL, batch, takes, 4, buffer, sizeof buffer, &count),
                     PL_ERR_INVALID_ARG);
        /* What a batch hands over stops short of PL_BATCH_TAKE_BYTES: five of 300,000 bytes go three, then two;
         * one larger than the budget goes alone. */
        pl_port_t *big = NULL;
        CHECK_OK(pl_port_create(8, PL_BATCH_TAKE_BYTES + 4096, &big));
        CHECK_OK(pl_port_set_insert(set, big));
        for (int32_t id = 0; id < 5; id++) CHECK_OK(pl_port_send(big, 2000 + id, budgeted, BUDGETED, NULL, 0));
        uint32_t per_batch = PL_BATCH_TAKE_BYTES / BUDGETED;
        CHECK_OK(pl_port_set_receive_batch_taking(set, batch, takes, 40, buffer, sizeof buffer, &count));
        CHECK(count == per_batch);
        for (uint32_t i = 0; i < count; i++) {
            CHECK(batch[i].id == 2000 + (int32_t)i && takes[i].size == BUDGETED);
            CHECK(memcmp(takes[i].base, budgeted, BUDGETED) == 0);
            pl_payload_free(&takes[i]);
        }
        CHECK_OK(pl_port_set_receive_batch_taking(set, batch, takes, 40, buffer, sizeof buffer, &count));
        CHECK(count == 5 - per_batch && batch[0].id == 2000 + (int32_t)per_batch);
        for (uint32_t i = 0; i < count; i++) pl_payload_free(&takes[i]);
        unsigned char *huge = calloc(1, PL_BATCH_TAKE_BYTES + 4096);
        CHECK(huge != NULL);
        CHECK_OK(pl_port_send(big, 3000, huge, PL_BATCH_TAKE_BYTES + 4096, NULL, 0));
        CHECK_OK(pl_port_send(big, 3001, huge, 100, NULL, 0));
        CHECK_OK(pl_port_set_receive_batch_taking(set, batch, takes, 40, buffer, sizeof buffer, &count));
        CHECK(count == 1 && batch[0].id == 3000 && takes[0].size == PL_BATCH_TAKE_BYTES + 4096);
        pl_payload_free(&takes[0]);
        CHECK_OK(pl_port_set_receive_batch_taking(set, batch, takes, 40, buffer, sizeof buffer, &count));
        CHECK(count == 1 && batch[0].id == 3001);
        pl_payload_free(&takes[0]);
        free(huge);
        CHECK_OK(pl_port_destroy(big));
        CHECK_OK(pl_port_destroy(port));
        CHECK_OK(pl_port_set_destroy(set));
        pl_port_set_release(set);
    }
    free(large);
    free(budgeted);
}

int main(int argc, char **argv) {
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    int first_name = verbose ? 2 : 1;
    setvbuf(stdout, NULL, _IOLBF, 0); /* the summary must survive LeakSanitizer's exit */
    void *shared = mmap(NULL, sizeof(atomic_int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    children_with_memcheck_errors = shared; /* zeroed */
    static const scenario_t scenarios[] = {
        { "queued_reply_rights", scenario_queued_reply_rights },
        { "destroy_under_traffic", scenario_destroy_under_traffic },
        { "set_members_destroyed", scenario_set_members_destroyed },
        { "ports_in_two_sets", scenario_ports_in_two_sets },
        { "descriptor_members", scenario_descriptor_members },
        { "send_rights_elsewhere", scenario_send_rights_elsewhere },
        { "set_last_release", scenario_set_last_release },
        { "too_large_race", scenario_too_large_race },
        { "descriptor_for_waiter", scenario_descriptor_for_waiter },
        { "woken_set_sleeps_again", scenario_woken_set_sleeps_again },
        { "emptied_ports", scenario_emptied_ports },
        { "expired_timeout_looks", scenario_expired_timeout_looks },
        { "queued_only", scenario_queued_only },
        { "misuse", scenario_misuse },
        { "requeue_race", scenario_requeue_race },
        { "blocking_senders_fifo", scenario_blocking_senders_fifo },
        { "lost_sender_signal", scenario_lost_sender_signal },
        { "descriptors", scenario_descriptors },
        { "handle_wrap", scenario_handle_wrap },
        { "notifications", scenario_notifications },
        { "notice_order", scenario_notice_order },
        { "send_once_race", scenario_send_once_race },
        { "fork_child", scenario_fork_child },
        { "fork_while_writing", scenario_fork_while_writing },
        { "activation_given_back", scenario_activation_given_back },
        { "activation_after_withdrawal", scenario_activation_after_withdrawal },
        { "fork_during_connections", scenario_fork_during_connections },
        { "destroy_during_check_in", scenario_destroy_during_check_in },
        { "fork_during_check_in", scenario_fork_during_check_in },
        { "status_queries", scenario_status_queries },
        { "look_up_abandoned", scenario_look_up_abandoned },
        { "look_up_meets_death", scenario_look_up_meets_death },
        { "ring_bells", scenario_ring_bells },
        { "copy_both_ways", scenario_copy_both_ways },
        { "copier_chooses", scenario_copier_chooses },
        { "ring_copied_in", scenario_ring_copied_in },
        { "ring_distance", scenario_ring_distance },
        { "ring_reach", scenario_ring_reach },
        { "ring_shared_take", scenario_ring_shared_take },
        { "ring_hostile", scenario_ring_hostile },
        { "ring_stuck_bell", scenario_ring_stuck_bell },
        { "ring_fork_stream", scenario_ring_fork_stream },
        { "ring_stream_to_set", scenario_ring_stream_to_set },
        { "senders_to_checked_in_port", scenario_senders_to_checked_in_port },
        { "exit_flush", scenario_exit_flush },
        { "exit_handler_sends", scenario_exit_handler_sends },
        { "fragments_in_place", scenario_fragments_in_place },
        { "once_message_cut_short", scenario_once_message_cut_short },
        { "want_behind_local_senders", scenario_want_behind_local_senders },
        { "wake_during_reclaim", scenario_wake_during_reclaim },
        { "reclaim_crossed_by_release", scenario_reclaim_crossed_by_release },
        { "undone_right_keeps_want_answer", scenario_undone_right_keeps_want_answer },
        { "ring_switch_mid_batch", scenario_ring_switch_mid_batch },
        { "ring_end_after_records", scenario_ring_end_after_records },
        { "ring_end_behind_switch", scenario_ring_end_behind_switch },
        { "payload_cache", scenario_payload_cache },
        { "batch_taking", scenario_batch_taking },
        { "released_right_keeps_queue", scenario_released_right_keeps_queue },
        { "want_answered_by_right", scenario_want_answered_by_right },
        { "unused_client_ends", scenario_unused_client_ends },
        { "room_watch_without_descriptor", scenario_room_watch_without_descriptor },
        { "listeners_paused", scenario_listeners_paused },
        { "peer_stops_reading", scenario_peer_stops_reading },
        { "sender_woken_for_room", scenario_sender_woken_for_room },
        { "refused_before_watched", scenario_refused_before_watched },
        { "refused_after_messages", scenario_refused_after_messages },
        { "refusing_peers_hold_nothing", scenario_refusing_peers_hold_nothing },
        { "kill_before_listed", scenario_kill_before_listed },
        { "fork_with_queued_descriptor", scenario_fork_with_queued_descriptor },
        { "ring_bell_held", scenario_ring_bell_held },
        { "ring_without_proc", scenario_ring_without_proc },
    };
    const size_t count = sizeof scenarios / sizeof scenarios[0];
    int passed = 0, failed = 0;
    int64_t start = now_ns();
    for (size_t i = 0; i < count; i++) {
        const scenario_t *scenario = &scenarios[i];
        bool named = first_name >= argc;
        for (int a = first_name; a < argc && !named; a++) named = strcmp(argv[a], scenario->name) == 0;
        if (!named) continue;
        current_scenario = scenario->name;
        atomic_store(&scenario_failures, 0);
        int children_failed = atomic_load(children_with_memcheck_errors);
        int64_t t0 = now_ns();
        scenario->run();
        int failures = atomic_load(&scenario_failures) + atomic_load(children_with_memcheck_errors) - children_failed;
        if (failures == 0) passed++; else failed++;
        if (verbose || failures > 0) {
            printf("  %-4s %-30s %6.0f ms%s\n", failures ? "FAIL" : "ok", scenario->name,
                   (double)(now_ns() - t0) / 1e6, failures ? " (see above)" : "");
        }
    }
    if (verbose) printf("  total %.1f s\n", (double)(now_ns() - start) / 1e9);
    printf("stress: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
