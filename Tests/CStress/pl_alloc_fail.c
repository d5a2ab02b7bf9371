/*
 * pl_alloc_fail.c — the C layer with its allocations failing: each one in turn, then all from one on. Run by
 * `make alloc-fail` (part of `make leakcheck`) under AddressSanitizer, LeakSanitizer and UBSan.
 *
 * It is linked with `-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup`: every call the layer makes to
 * those comes here first, and fails (NULL, errno ENOMEM) when the thread's count of them reaches the one chosen.
 * Two workloads use what the layer allocates for. In one process: ports and sets, a descriptor member, messages
 * with payloads (copied, handed over, too large for a batch's buffer), with rights and descriptors, with reply
 * rights and send-once rights, a request forwarded with its right, a message put back, notifications (no senders,
 * dead name, an unused send-once right) into a full queue. Across processes: a service in a process of its own is
 * looked up and sent messages every way (small, in fragments, with rights and a descriptor, a request), asked its
 * status, and answers each; only the client's calling thread fails, not its transport thread.
 *
 * Once: for n = 1, 2, … until a run makes fewer than n allocations, the workload runs with only its n-th allocation
 * failing. Every call must return PL_OK or PL_ERR_NO_MEMORY; after PL_ERR_NO_MEMORY the call must have changed
 * nothing (messages queued, send rights, open descriptors) and must succeed when made again. What the receiver
 * sees, message by message, must be exactly what it sees in a run where nothing fails: nothing lost, doubled or
 * changed.
 *
 * From then on: for each n, every allocation from the n-th on fails, the workload stops at its first
 * PL_ERR_NO_MEMORY, and tears down what it made while the allocator is still out: destroying and releasing must
 * need no memory.
 *
 * Across processes, two more modes count every thread's allocations, the client's transport thread's among them
 * (so the numbering varies a little from run to run): one failing, then all from one on. A run must then either
 * see what it sees when nothing fails or be told why (a call's error, the connection's end, a send-once notice for
 * a lost answer), never wait in vain; and the connection must end cleanly. Last, a connection whose socket is full
 * (the service's process stopped) when memory runs out for good must end: the send that found no memory says the
 * destination is gone, and the transport, with no memory for the command either, ends the connection all the same.
 * And work posted to the transport with no memory for its command (a credit flush, a read, a drop) is run all the
 * same, the connection still carrying a message and its answer afterwards. A port whose rights 20 peer processes
 * hold (more than one batch of those told at a time) is destroyed while no thread of its process can allocate:
 * each peer must be told of that port's death, and its connection, which carries another port, must live on. A
 * process whose messages wait in its connection's queue (the service stopped) calls exit() with no memory left: the
 * exit flush must send them all. A fresh process (this program exec'd) with no memory for its transport's buffer
 * must be refused at once by the check-in and the look-up that would start it, then start once memory is back.
 * Last, the service's own process fails one allocation at a time, then every one from the n-th on (from its
 * check-in on): the client sees what it sees when nothing fails or is told why (turned away, the connection's end,
 * a notice), never waits in vain, and what it saw before being told is the reference's beginning (the service's
 * count of messages received included, so a message dropped unseen shows); the service's process lives until it is
 * killed.
 *
 * After every run: no descriptor left open, no connection left, and nothing leaked (LeakSanitizer, asked after each
 * run, names the run).
 *
 * Usage: pl_alloc_fail [-v]     -v prints each mode's run count and where the failures surfaced.
 */
#include "pl_remote.h" /* a port's set_aside, checked to come back to zero; a connection's noted work */

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <sanitizer/lsan_interface.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the allocator, failing on request ---------------------------------------------------------- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *old, size_t size);
char *__real_strdup(const char *s);

/* Per thread: only the workload's thread counts, so a run is the same every time. */
static _Thread_local bool counting;
static _Thread_local long allocations; /* made in this run, failed ones included */
static _Thread_local long fail_from;   /* the first allocation that fails (0: none) */
static _Thread_local long fail_until;  /* the first after it that succeeds again (LONG_MAX: none) */
static _Thread_local long injected;    /* failures handed out in this run */

/* The third mode counts every thread's allocations, the transport thread's among them, and fails one. */
static atomic_bool every_thread;
static atomic_long shared_allocations, shared_fail_from, shared_fail_until, shared_injected;

/* In one mode the service's process fails one of its allocations (every thread's, from its check-in on); its counts
 * are kept in memory both processes map, for the client to read. */
typedef struct service_counts {
    atomic_long allocations, injected;
} service_counts_t;
static service_counts_t *service_counts;
static bool in_service;     /* this process is the service */
static long service_fail_at; /* the service's allocation to fail (0: none); read by the child after fork() */
static bool service_fail_all; /* and every one after it too */

static bool allocation_fails(void) {
    if (atomic_load_explicit(&every_thread, memory_order_relaxed)) {
        long n = atomic_fetch_add(in_service ? &service_counts->allocations : &shared_allocations, 1) + 1;
        if (n < atomic_load(&shared_fail_from) || n >= atomic_load(&shared_fail_until)) return false;
        atomic_fetch_add(in_service ? &service_counts->injected : &shared_injected, 1);
        errno = ENOMEM;
        return true;
    }
    if (!counting) return false;
    long n = ++allocations;
    if (fail_from == 0 || n < fail_from || n >= fail_until) return false;
    injected++;
    errno = ENOMEM;
    return true;
}

/* In the transport-start check's process: allocations of exactly this size fail (0: none). */
static size_t fail_size;

void *__wrap_malloc(size_t size) {
    if (fail_size != 0 && size == fail_size) {
        errno = ENOMEM;
        return NULL;
    }
    return allocation_fails() ? NULL : __real_malloc(size);
}
void *__wrap_calloc(size_t count, size_t size) { return allocation_fails() ? NULL : __real_calloc(count, size); }
void *__wrap_realloc(void *old, size_t size) { return allocation_fails() ? NULL : __real_realloc(old, size); }
char *__wrap_strdup(const char *s) { return allocation_fails() ? NULL : __real_strdup(s); }

/* From now on, every thread's allocations count, and those from the from-th to before the until-th fail. */
static void fail_every_thread(long from, long until) {
    atomic_store(&shared_allocations, 0);
    atomic_store(&shared_injected, 0);
    atomic_store(&shared_fail_from, from);
    atomic_store(&shared_fail_until, until);
    atomic_store(&every_thread, true);
}

/* ---- checks -------------------------------------------------------------------------------------- */

static const char *run_name = "";
static long run_n;
static int failures;

static void fail_at(int line, const char *what, int status) {
    bool was = counting;
    counting = false;
    if (failures++ < 20) {
        fprintf(stderr, "FAIL %s, allocation %ld (line %d): %s%s%s\n", run_name, run_n, line, what,
                status >= 0 ? " — status: " : "", status >= 0 ? pl_status_describe((pl_status_t)status) : "");
    }
    counting = was;
}

#define CHECK(cond) do { if (!(cond)) fail_at(__LINE__, #cond, -1); } while (0)

static int open_descriptors(void) {
    bool was = counting;
    counting = false;
    int count = 0;
    DIR *dir = opendir("/proc/self/fd");
    if (dir != NULL) {
        for (struct dirent *entry; (entry = readdir(dir)) != NULL;) count += entry->d_name[0] != '.';
        closedir(dir);
    }
    counting = was;
    return count - 1; /* the directory's own */
}

/* ---- one run of the workload --------------------------------------------------------------------- */

typedef struct world {
    bool once;                   /* the one-failure mode: retry after PL_ERR_NO_MEMORY */
    bool any_thread;             /* the transport thread's allocations fail too: see step_at */
    bool remote;                 /* the workload across processes */
    bool stopped;                /* told to stop (out of memory for good, the connection ended, a notice): the rest
                                  * is skipped */
    long surfaced;               /* calls that returned PL_ERR_NO_MEMORY */
    pl_port_t *service, *replies, *watched;
    pl_port_set_t *set;
    int bell;                    /* an eventfd member of the set */
    int pipe_fds[2];             /* sent as an attachment */
    pl_notification_t *no_senders, *dead_name;
    char trace[4096];            /* what the receiver saw */
    size_t traced;
} world_t;

/* What a call that may fail for memory does: PL_OK goes on; PL_ERR_NO_MEMORY must have left the counted state as it
 * was (the world's ports' queues and rights, and the open descriptors), and the call is made again in the
 * one-failure mode (and must then succeed) or stops the workload in the other. */
typedef struct snapshot {
    uint32_t queued[3], sends[3], once[3];
    int descriptors;
} snapshot_t;

static snapshot_t snapshot(const world_t *w) {
    snapshot_t s = { .descriptors = open_descriptors() };
    if (w->remote) return s; /* answers arrive meanwhile, and the service lets go of rights */
    const pl_port_t *ports[3] = { w->service, w->replies, w->watched };
    for (int i = 0; i < 3; i++) {
        if (ports[i] == NULL) continue;
        s.queued[i] = pl_port_message_count(ports[i]);
        s.sends[i] = pl_port_send_right_count(ports[i]);
        s.once[i] = pl_port_send_once_count(ports[i]);
    }
    return s;
}

#define STEP(w, expr) step_at(w, __LINE__, #expr, ({ snapshot_t before_ = snapshot(w); \
        pl_status_t status_ = (expr); \
        if (status_ == PL_ERR_NO_MEMORY && !(w)->any_thread) unchanged_at(w, __LINE__, #expr, before_); \
        if (status_ == PL_ERR_NO_MEMORY && (w)->once) status_ = (expr); \
        status_; }))

static bool verbose;

static void unchanged_at(world_t *w, int line, const char *call, snapshot_t before) {
    w->surfaced++;
    if (verbose) {
        counting = false;
        printf("  %s, allocation %ld: %s: out of memory\n", run_name, run_n, call);
        counting = true;
    }
    snapshot_t after = snapshot(w);
    if (memcmp(&before, &after, sizeof before) != 0) {
        char what[256];
        snprintf(what, sizeof what, "%s failed for memory but changed the ports or descriptors", call);
        fail_at(line, what, -1);
    }
}

/* With the transport thread's or the service's allocations failing, a call may also find the connection ended (a
 * transport ends one whose message it cannot take: its rights die) or the service full, and the workload stops
 * there. What must never happen is a wait that runs out: a message lost without a word. */
static bool step_at(world_t *w, int line, const char *call, pl_status_t status) {
    if (status == PL_OK) return true;
    bool connection_ended = status == PL_ERR_INVALID_DEST || status == PL_ERR_NO_SENDERS ||
                            status == PL_ERR_NO_SPACE; /* the service could not take the connection */
    if ((status == PL_ERR_NO_MEMORY && !w->once) || (w->any_thread && connection_ended)) {
        if (verbose && w->any_thread) {
            bool was = counting;
            counting = false;
            printf("  %s, allocation %ld: %s: %s\n", run_name, run_n, call, pl_status_describe(status));
            counting = was;
        }
        w->stopped = true;
        return false;
    }
    fail_at(line, call, (int)status);
    w->stopped = true;
    return false;
}

static uint32_t hash(const void *bytes, size_t size) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < size; i++) h = (h ^ ((const uint8_t *)bytes)[i]) * 16777619u;
    return h;
}

static void trace(world_t *w, const pl_received_t *m, const void *payload) {
    uint32_t attachments = m->attachments != NULL ? m->attachments->count : 0;
    uint32_t digest = hash(payload, m->size);
    /* A notice names a port and a request, new in every run: only its make-send count is the same. */
    if ((m->flags & PL_RECEIVED_NOTIFICATION) != 0 && m->size == PL_NOTICE_SIZE) digest = hash((const uint8_t *)payload + 8, 8);
    int written = snprintf(w->trace + w->traced, sizeof w->trace - w->traced, "%d/%u/%x/%d/%u/%08x ",
                           m->kind == PL_RECEIVED_FD ? -1 : m->id, m->size, m->flags, m->reply != NULL, attachments,
                           digest);
    if (written > 0 && (size_t)written < sizeof w->trace - w->traced) w->traced += (size_t)written;
}

static const pl_received_t no_message = { .fd = -1 };

/* The workload, up to where it stops; returns with whatever it made still in `w`, for tear_down. */
static void work(world_t *w) {
    static uint8_t big[3000], medium[200];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof medium; i++) medium[i] = (uint8_t)(i * 13);
    uint8_t buffer[4096];
    pl_received_t m = no_message;

    if (!STEP(w, pl_port_create(8, 65536, &w->service))) return;
    if (!STEP(w, pl_port_create(PL_QLIMIT_DEFAULT, 4096, &w->replies))) return;
    if (!STEP(w, pl_port_create(1, 64, &w->watched))) return;
    if (!STEP(w, pl_port_set_create(&w->set))) return;
    if (!STEP(w, pl_port_set_insert(w->set, w->service))) return;
    if (!STEP(w, pl_port_set_insert_fd(w->set, w->bell))) return;
    if (!STEP(w, pl_port_make_send(w->watched))) return;
    if (!STEP(w, pl_port_request_dead_name(w->watched, w->replies, &w->dead_name))) return;
    if (!STEP(w, pl_port_request_no_senders(w->service, 1, w->replies, &w->no_senders))) return;
    if (!STEP(w, pl_port_make_send(w->service))) return;

    /* Five messages, each a different way. */
    if (!STEP(w, pl_port_send(w->service, 1, "hello", 5, NULL, 0))) return;
    if (!STEP(w, pl_port_send(w->service, 2, medium, sizeof medium, w->replies, 0))) return;
    pl_attachment_t attachments[2] = {
        { .kind = PL_ATTACHMENT_SEND_RIGHT, .port = w->watched, .fd = -1 },
        { .kind = PL_ATTACHMENT_FD, .port = NULL, .fd = w->pipe_fds[1] },
    };
    if (!STEP(w, pl_port_send_with(w->service, 3, "rights", 6, NULL, attachments, 2, 0))) return;
    pl_payload_t handed = { 0 };
    if (!STEP(w, pl_payload_allocate(sizeof big, &handed))) return;
    memcpy(handed.base, big, sizeof big);
    pl_status_t handed_status = STEP(w, pl_port_send_payload(w->service, 4, &handed, NULL, 0)) ? PL_OK : PL_ERR_NO_MEMORY;
    pl_payload_free(&handed); /* zeroed on success: frees nothing; the caller's on an error */
    if (handed_status != PL_OK) return;
    if (!STEP(w, pl_port_send_request(w->service, 5, "request", 7, w->replies, 0))) return;

    /* Received five ways. */
    if (!STEP(w, pl_port_set_receive(w->set, &m, buffer, sizeof buffer, 0))) return;
    trace(w, &m, buffer);
    pl_payload_t taken = { 0 };
    if (!STEP(w, pl_port_set_receive_payload(w->set, &m, &taken, 0))) return;
    trace(w, &m, taken.base);
    pl_payload_free(&taken);
    pl_port_t *reply = m.reply;
    bool replied = STEP(w, pl_port_send(reply, 20, "answer", 6, NULL, 0));
    CHECK(pl_port_release_send(reply) == PL_OK);
    if (!replied) return;

    m = no_message;
    if (!STEP(w, pl_port_receive(w->service, &m, buffer, sizeof buffer, 0))) return;
    trace(w, &m, buffer);
    /* Put back, with its right and descriptor, and received again. */
    if (!STEP(w, pl_port_requeue(w->service, &m, buffer))) {
        pl_attachments_free(m.attachments);
        return;
    }
    m = no_message;
    if (!STEP(w, pl_port_receive_payload(w->service, &m, &taken, 0))) return;
    trace(w, &m, taken.base);
    pl_payload_free(&taken);
    CHECK(m.attachments != NULL && m.attachments->count == 2);
    pl_attachments_free(m.attachments);

    /* A batch holding a small buffer: the 3000 bytes are handed over, the request's copied. */
    pl_received_t batch[4];
    pl_payload_t takes[4] = { 0 };
    uint32_t count = 0;
    if (!STEP(w, pl_port_set_receive_batch_taking(w->set, batch, takes, 4, buffer, 64, &count))) return;
    CHECK(count == 2);
    for (uint32_t i = 0; i < count; i++) {
        trace(w, &batch[i], takes[i].base != NULL ? takes[i].base : buffer + batch[i].offset);
        pl_payload_free(&takes[i]);
    }
    if (count != 2) return;

    /* The request goes on to the service again with its send-once right, and is answered from there. */
    if (!STEP(w, pl_port_send_moving_once(w->service, 6, "forwarded", 9, batch[1].reply, NULL, 0, 0))) {
        pl_port_release_send_once(batch[1].reply);
        return;
    }
    m = no_message;
    if (!STEP(w, pl_port_set_receive(w->set, &m, buffer, sizeof buffer, 0))) return;
    trace(w, &m, buffer);
    if (!STEP(w, pl_port_send_once(m.reply, 50, "done", 4))) {
        pl_port_release_send_once(m.reply);
        return;
    }

    /* The descriptor member. */
    CHECK(eventfd_write(w->bell, 1) == 0);
    m = no_message;
    if (!STEP(w, pl_port_set_receive(w->set, &m, buffer, sizeof buffer, 0))) return;
    trace(w, &m, buffer);
    eventfd_t ignored;
    CHECK(m.kind == PL_RECEIVED_FD && eventfd_read(w->bell, &ignored) == 0);

    /* The reply port filled to its limit: the notices below go in over it, into room set aside when they were
     * asked for. */
    while (pl_port_message_count(w->replies) < pl_port_get_qlimit(w->replies)) {
        if (!STEP(w, pl_port_send(w->replies, 30, medium, 100, NULL, 0))) return;
    }
    CHECK(pl_port_send(w->replies, 31, NULL, 0, NULL, 0) == PL_ERR_TIMED_OUT);

    /* Notices: the service's last send right, the watched port's death, a send-once right released unused. */
    if (!STEP(w, pl_port_release_send(w->service))) return;
    if (!STEP(w, pl_port_destroy(w->watched))) return;
    if (!STEP(w, pl_port_make_send_once(w->replies))) return;
    if (!STEP(w, pl_port_release_send_once(w->replies))) return;

    /* The replies and notices, in a batch that copies. (The reply port joins the set only now, so that which port
     * a receive on the set serves never depends on where a failed call left the set's round-robin.) */
    if (!STEP(w, pl_port_set_insert(w->set, w->replies))) return;
    if (!STEP(w, pl_port_set_receive_batch(w->set, batch, 4, buffer, sizeof buffer, &count))) return;
    for (uint32_t i = 0; i < count; i++) trace(w, &batch[i], buffer + batch[i].offset);
    for (pl_status_t s; (s = pl_port_receive(w->replies, &m, buffer, sizeof buffer, 0)) != PL_ERR_TIMED_OUT;) {
        if (!step_at(w, __LINE__, "pl_port_receive(w->replies)", s)) return;
        trace(w, &m, buffer);
    }
    if (!STEP(w, pl_port_set_extract(w->set, w->replies))) return;
    if (!STEP(w, pl_port_set_extract_fd(w->set, w->bell))) return;
}

/* Tears down what `work` made, in whatever state it stopped. */
static void tear_down(world_t *w) {
    if (w->no_senders != NULL) { pl_notification_cancel(w->no_senders); pl_notification_release(w->no_senders); }
    if (w->dead_name != NULL) { pl_notification_cancel(w->dead_name); pl_notification_release(w->dead_name); }
    if (w->set != NULL) { pl_port_set_destroy(w->set); pl_port_set_release(w->set); }
    /* Send rights left by a stop between make and release; the receive rights go last. */
    if (w->service != NULL) { while (pl_port_release_send(w->service) == PL_OK) {} pl_port_destroy(w->service); }
    if (w->watched != NULL) {
        bool alive = pl_port_is_alive(w->watched);
        pl_port_retain_memory(w->watched);
        if (alive) pl_port_destroy(w->watched);
        while (pl_port_release_send(w->watched) == PL_OK) {}
        pl_port_release_memory(w->watched);
    }
    if (w->replies != NULL) { while (pl_port_release_send(w->replies) == PL_OK) {} pl_port_destroy(w->replies); }
}

/* ---- the workload across processes ---------------------------------------------------------------- */

static char namespace_dir[PL_NAMESPACE_PATH_MAX + 1];
#define SERVICE_NAME "alloc-fail"
#define BIG_REMOTE 100000 /* in fragments */

/* A service in a process of its own (never failing for memory): every message it receives is answered on its
 * reply right, through it, with the id plus 100 and the same bytes. Ready when this returns; killed at the run's
 * end. */
static pid_t start_service(void) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid < 0) {
        fail_at(__LINE__, "fork", -1);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(ready[0]);
        pl_port_t *port = NULL;
        if (pl_port_create(64, 2 * BIG_REMOTE, &port) != PL_OK ||
            pl_service_check_in(namespace_dir, SERVICE_NAME, port, NULL) != PL_OK) {
            _exit(2);
        }
        if (write(ready[1], "r", 1) != 1) _exit(3);
        if (service_fail_at > 0) {
            in_service = true; /* counted where the client reads them */
            fail_every_thread(service_fail_at, service_fail_all ? LONG_MAX : service_fail_at + 1);
        }
        uint8_t *buffer = __real_malloc(2 * BIG_REMOTE);
        for (;;) {
            pl_received_t m;
            if (pl_port_receive(port, &m, buffer, 2 * BIG_REMOTE, PL_TIMEOUT_FOREVER) != PL_OK) _exit(4);
            pl_attachments_free(m.attachments);
            if (m.reply == NULL) continue;
            if (m.flags & PL_RECEIVED_REPLY_ONCE) {
                /* Not sent for memory: the right is let go, so that the requester is told (its notice). */
                if (pl_port_send_once(m.reply, m.id + 100, buffer, m.size) == PL_ERR_NO_MEMORY) {
                    pl_port_release_send_once(m.reply);
                }
            } else {
                pl_port_send(m.reply, m.id + 100, buffer, m.size, NULL, PL_TIMEOUT_FOREVER);
                pl_port_release_send(m.reply);
            }
        }
    }
    close(ready[1]);
    char byte;
    CHECK(read(ready[0], &byte, 1) == 1);
    close(ready[0]);
    return pid;
}

#define REMOTE_TIMEOUT (10 * 1000000000LL)

/* A client of that service: looks it up, sends it messages every way with `replies` as their reply port, asks its
 * status, and takes the answers. Only this thread's allocations fail (the transport thread's do not). */
static void work_remote(world_t *w) {
    static uint8_t big[BIG_REMOTE], medium[5000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 11);
    for (size_t i = 0; i < sizeof medium; i++) medium[i] = (uint8_t)(i * 5);
    static uint8_t buffer[2 * BIG_REMOTE];
    pl_received_t m = no_message;

    if (!STEP(w, pl_port_create(PL_QLIMIT_DEFAULT, 2 * BIG_REMOTE, &w->replies))) return;
    pl_port_set_no_senders_wakes(w->replies, 1); /* a service that can no longer answer says so at once */
    if (!STEP(w, pl_service_look_up(namespace_dir, SERVICE_NAME, REMOTE_TIMEOUT, &w->service))) return;
    if (!STEP(w, pl_port_send(w->service, 1, "hello", 5, w->replies, REMOTE_TIMEOUT))) return;
    if (!STEP(w, pl_port_send(w->service, 2, medium, sizeof medium, w->replies, REMOTE_TIMEOUT))) return;
    pl_attachment_t attachments[2] = {
        { .kind = PL_ATTACHMENT_SEND_RIGHT, .port = w->replies, .fd = -1 },
        { .kind = PL_ATTACHMENT_FD, .port = NULL, .fd = w->pipe_fds[1] },
    };
    if (!STEP(w, pl_port_send_with(w->service, 3, "rights", 6, w->replies, attachments, 2, REMOTE_TIMEOUT))) return;
    if (!STEP(w, pl_port_send_request(w->service, 4, big, sizeof big, w->replies, REMOTE_TIMEOUT))) return;
    pl_service_status_t status;
    if (!STEP(w, pl_service_status(w->service, 16, REMOTE_TIMEOUT, &status))) return;
    char line[64];
    snprintf(line, sizeof line, "status %u/%llu ", status.queue_limit, (unsigned long long)status.messages_received);
    strncat(w->trace, line, sizeof w->trace - strlen(w->trace) - 1);
    w->traced = strlen(w->trace);
    for (int i = 0; i < 4; i++) {
        m = no_message;
        if (!STEP(w, pl_port_receive(w->replies, &m, buffer, sizeof buffer, REMOTE_TIMEOUT))) return;
        /* A request's answer lost to memory comes as its right's notice: the requester is told. */
        if (w->any_thread && (m.flags & PL_RECEIVED_NOTIFICATION) != 0) {
            w->stopped = true;
            return;
        }
        trace(w, &m, buffer);
    }
}

/* Kills the service's process, which must have lived until then whatever failed in it, and waits (5 s at most) for
 * this process's connection to it to be gone, with every right it carried. */
static void end_service(pid_t service) {
    if (service > 0) {
        kill(service, SIGKILL);
        int status = 0;
        CHECK(waitpid(service, &status, 0) == service);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    uint32_t connections = 1, exports = 1, imports = 1;
    for (int i = 0; i < 1000 && connections + exports + imports > 0; i++) {
        pl_remote_stats(&connections, &exports, &imports);
        if (connections + exports + imports > 0) usleep(5000);
    }
    CHECK(connections == 0 && exports == 0 && imports == 0);
}

/* Lets go of the service's right and the reply port, and ends the service. */
static void tear_down_remote(world_t *w, pid_t service) {
    if (w->service != NULL) pl_port_release_send(w->service);
    if (w->replies != NULL) pl_port_destroy(w->replies);
    end_service(service);
}

static void check_no_leak(void) {
    if (__lsan_do_recoverable_leak_check() != 0) fail_at(__LINE__, "memory leaked (LeakSanitizer's report above)", -1);
}

/* ---- runs ---------------------------------------------------------------------------------------------- */

typedef enum { IN_PROCESS, ACROSS_PROCESSES } workload_t;

typedef struct outcome {
    long allocations, injected, surfaced;
    bool stopped;
    char trace[4096];
} outcome_t;

/* One run of a workload; `first` skips the descriptor check (the first run starts the transport thread, whose
 * descriptors stay). */
static outcome_t run(workload_t workload, bool first, bool once, long from, long until, bool any_thread,
                     long service_fail) {
    world_t *w = __real_calloc(1, sizeof *w);
    w->once = once;
    w->any_thread = any_thread || service_fail > 0; /* the connection may end: see step_at */
    service_fail_at = service_fail;
    atomic_store(&service_counts->allocations, 0);
    atomic_store(&service_counts->injected, 0);
    w->remote = workload == ACROSS_PROCESSES;
    w->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(w->bell >= 0 && pipe(w->pipe_fds) == 0);
    pid_t service = workload == ACROSS_PROCESSES ? start_service() : -1;
    int descriptors = open_descriptors();
    allocations = injected = 0;
    fail_from = from;
    fail_until = until;
    if (any_thread) fail_every_thread(from == 0 ? LONG_MAX : from, until);
    counting = !any_thread;
    if (workload == IN_PROCESS) work(w); else work_remote(w);
    /* Each slot set aside (a notification request's, a send-once right's) is taken or given back by the end. */
    pl_port_t *kept[3] = { w->service, w->replies, w->watched };
    for (int i = 0; i < 3; i++) {
        if (kept[i] != NULL) pl_port_retain_memory(kept[i]);
    }
    if (workload == IN_PROCESS) tear_down(w); else tear_down_remote(w, service);
    for (int i = 0; i < 3; i++) {
        if (kept[i] == NULL) continue;
        CHECK(kept[i]->set_aside == 0);
        pl_port_release_memory(kept[i]);
    }
    counting = false;
    atomic_store(&every_thread, false);
    outcome_t outcome = { .allocations = allocations, .injected = injected, .surfaced = w->surfaced,
                          .stopped = w->stopped };
    if (any_thread) {
        outcome.allocations = atomic_load(&shared_allocations);
        outcome.injected = atomic_load(&shared_injected);
    } else if (service_fail > 0) {
        outcome.allocations = atomic_load(&service_counts->allocations);
        outcome.injected = atomic_load(&service_counts->injected);
    }
    service_fail_at = 0;
    memcpy(outcome.trace, w->trace, sizeof outcome.trace);
    CHECK(first || open_descriptors() == descriptors);
    close(w->bell);
    close(w->pipe_fds[0]);
    close(w->pipe_fds[1]);
    free(w);
    check_no_leak();
    return outcome;
}

/* Whether a run saw what the reference saw, or, if it was stopped (told why), the beginning of it: what came before
 * the error must still be what comes when nothing fails (a message dropped unseen shows in the service's count). */
static bool same_or_told(const outcome_t *o, const outcome_t *reference) {
    if (!o->stopped) return strcmp(o->trace, reference->trace) == 0;
    return strncmp(o->trace, reference->trace, strlen(o->trace)) == 0;
}

/* Runs one workload in both modes; returns how many allocations its reference run made. */
static long run_all(workload_t workload, const char *name) {
    static char names[3][128]; /* run_name points here after the return */
    snprintf(names[0], sizeof names[0], "%s, nothing failing", name);
    snprintf(names[1], sizeof names[1], "%s, one allocation failing", name);
    snprintf(names[2], sizeof names[2], "%s, every allocation failing from one on", name);

    /* The first run fills the layer's caches (payload memory; the transport thread); the second is the reference. */
    run_name = names[0];
    run_n = 0;
    run(workload, true, true, 0, 0, false, 0);
    outcome_t reference = run(workload, false, true, 0, 0, false, 0);
    CHECK(reference.allocations > 0 && reference.surfaced == 0);
    if (verbose) printf("%s: %ld allocations; received: %s\n", name, reference.allocations, reference.trace);

    /* Until a run makes fewer allocations than the one to fail (a run where a call failed may make more, or fewer,
     * than the reference: a failed call's retry, or memory a cache kept). */
    run_name = names[1];
    long runs = 0, surfaced = 0;
    for (run_n = 1; run_n <= 4 * reference.allocations; run_n++, runs++) {
        outcome_t o = run(workload, false, true, run_n, run_n + 1, false, 0);
        if (o.injected == 0) break;
        if (strcmp(o.trace, reference.trace) != 0) {
            fail_at(__LINE__, "the receiver saw something else than when nothing fails", -1);
            fprintf(stderr, "  saw:      %s\n  expected: %s\n", o.trace, reference.trace);
        }
        surfaced += o.surfaced;
    }
    if (verbose) printf("%s: %ld runs, %ld failures surfaced as PL_ERR_NO_MEMORY\n", names[1], runs, surfaced);

    run_name = names[2];
    runs = surfaced = 0;
    for (run_n = 1; run_n <= 4 * reference.allocations; run_n++, runs++) {
        outcome_t o = run(workload, false, false, run_n, LONG_MAX, false, 0);
        if (o.injected == 0) break;
        surfaced += o.surfaced;
    }
    if (verbose) printf("%s: %ld runs, %ld stopped by PL_ERR_NO_MEMORY\n", names[2], runs, surfaced);
    if (workload != ACROSS_PROCESSES) return reference.allocations;

    /* Every thread's allocations, one failing: the transport thread's too. Each run either sees what it sees when
     * nothing fails, or learns that the connection ended (or that memory ran out); it never waits in vain. */
    static char name_any[128];
    snprintf(name_any, sizeof name_any, "%s, one allocation of any thread failing", name);
    run_name = name_any;
    run_n = 0;
    outcome_t counted = run(workload, false, true, 0, 0, true, 0);
    runs = 0;
    long stopped = 0;
    for (run_n = 1; run_n <= 4 * counted.allocations; run_n++, runs++) {
        outcome_t o = run(workload, false, true, run_n, run_n + 1, true, 0);
        if (o.injected == 0) break;
        if (!same_or_told(&o, &reference)) {
            fail_at(__LINE__, "the receiver saw something else than when nothing fails, and was not told why", -1);
            fprintf(stderr, "  saw:      %s\n  expected: %s\n", o.trace, reference.trace);
        }
        stopped += o.stopped;
    }
    if (verbose) printf("%s: %ld allocations, %ld runs, %ld stopped by an error\n", name_any, counted.allocations, runs, stopped);

    /* Every thread's allocations failing from one on: the transport thread can no longer make anything, yet the
     * connection must still end when the service's process dies, and leave nothing behind. */
    static char name_all_any[128];
    snprintf(name_all_any, sizeof name_all_any, "%s, every allocation of any thread failing from one on", name);
    run_name = name_all_any;
    runs = 0;
    for (run_n = 1; run_n <= 4 * counted.allocations; run_n++, runs++) {
        outcome_t o = run(workload, false, false, run_n, LONG_MAX, true, 0);
        if (o.injected == 0) break;
    }
    if (verbose) printf("%s: %ld runs\n", name_all_any, runs);

    /* The service's process failing one of its allocations (any thread's, from its check-in on), then every one from
     * the n-th on: the client sees what it sees when nothing fails or is told why (turned away, the connection's end,
     * the reply right's notice, no senders left for its reply port); the service's process lives on. */
    static char name_service[2][128];
    snprintf(name_service[0], sizeof name_service[0], "%s, one allocation of the service's process failing", name);
    snprintf(name_service[1], sizeof name_service[1], "%s, every allocation of the service's process failing from one on",
             name);
    for (int all = 0; all < 2; all++) {
        run_name = name_service[all];
        runs = stopped = 0;
        service_fail_all = all;
        for (run_n = 1; run_n <= 1000; run_n++, runs++) {
            outcome_t o = run(workload, false, true, 0, 0, false, run_n);
            if (o.injected == 0) break;
            if (!same_or_told(&o, &reference)) {
                fail_at(__LINE__, "the client saw something else than when nothing fails, and was not told why", -1);
                fprintf(stderr, "  saw:      %s\n  expected: %s\n", o.trace, reference.trace);
            }
            stopped += o.stopped;
        }
        if (verbose) printf("%s: %ld runs, %ld stopped by an error\n", name_service[all], runs, stopped);
    }
    service_fail_all = false;
    return reference.allocations;
}

/* A connection whose frame finds no memory to wait in the outgoing queue must end (the send says the destination
 * is gone), even when the transport's command to end it finds no memory either: the service's process is stopped,
 * so that its socket fills, and from then on every allocation of every thread fails. */
static void check_full_socket(void) {
    run_name = "across processes, a full socket with no memory left";
    run_n = 0;
    pid_t service = start_service();
    pl_port_t *right = NULL;
    CHECK(service > 0 && pl_service_look_up(namespace_dir, SERVICE_NAME, REMOTE_TIMEOUT, &right) == PL_OK);
    if (right == NULL) return;
    CHECK(kill(service, SIGSTOP) == 0);
    static uint8_t big[BIG_REMOTE];
    fail_every_thread(1, LONG_MAX);
    pl_status_t status = PL_OK;
    for (int i = 0; i < 64 && status == PL_OK; i++) status = pl_port_send(right, 1, big, sizeof big, NULL, 0);
    CHECK(status == PL_ERR_INVALID_DEST || status == PL_ERR_TIMED_OUT);
    bool queue_failed = status == PL_ERR_INVALID_DEST;
    uint32_t connections = 1;
    for (int i = 0; i < 400 && connections > 0 && queue_failed; i++) {
        pl_remote_stats(&connections, NULL, NULL);
        if (connections > 0) usleep(5000);
    }
    atomic_store(&every_thread, false);
    CHECK(queue_failed); /* not the credit running out first: the service's queue holds 64 */
    CHECK(connections == 0);
    if (verbose) printf("%s: the send found the destination gone, and the connection ended\n", run_name);
    pl_port_release_send(right);
    end_service(service);
    check_no_leak();
}

/* Work for the transport that finds no memory for its command (a credit flush, a read, a drop) is noted on its
 * connection and run all the same: with every allocation failing, each of the three is posted, the transport takes
 * them, and once memory is back the connection still carries a message and its answer. */
static void check_starved_work(void) {
    run_name = "across processes, transport work with no memory for its command";
    run_n = 0;
    pid_t service = start_service();
    pl_port_t *right = NULL, *replies = NULL;
    CHECK(pl_port_create(PL_QLIMIT_DEFAULT, 64, &replies) == PL_OK);
    CHECK(service > 0 && pl_service_look_up(namespace_dir, SERVICE_NAME, REMOTE_TIMEOUT, &right) == PL_OK);
    if (right != NULL && replies != NULL) {
        pl_conn_t *conn = right->proxy->conn;
        fail_every_thread(1, LONG_MAX);
        pl_transport_flush_owed(conn);
        pl_transport_read(conn);
        pl_transport_drop_export(conn, 1u << 30); /* a handle never given out: nothing unused is found */
        long failed = atomic_load(&shared_injected);
        bool taken = false;
        for (int i = 0; i < 400 && !taken; i++) {
            taken = __atomic_load_n(&conn->starved_work, __ATOMIC_ACQUIRE) == 0;
            if (!taken) usleep(5000);
        }
        atomic_store(&every_thread, false);
        CHECK(failed >= 3); /* the three commands found no memory */
        CHECK(taken);
        uint8_t buffer[64];
        pl_received_t m = no_message;
        CHECK(pl_port_send(right, 7, "x", 1, replies, REMOTE_TIMEOUT) == PL_OK);
        CHECK(pl_port_receive(replies, &m, buffer, sizeof buffer, REMOTE_TIMEOUT) == PL_OK && m.id == 107);
        if (verbose) printf("%s: %ld commands noted on the connection and run\n", run_name, failed);
    }
    if (right != NULL) pl_port_release_send(right);
    if (replies != NULL) pl_port_destroy(replies);
    end_service(service);
    check_no_leak();
}

/* What a process's connection still holds when it calls exit() is sent by the exit flush, which needs no memory: a
 * child streams into the service while it is stopped (its socket full, the rest waiting in the child's queue), then
 * every allocation of its process fails from there on, and it calls exit(). The service, resumed, must count every
 * message the child sent. */
#define EXIT_FLUSH_MOST 64
static bool exit_flush_child;
/* Registered before the library's exit flush (a constructor of a lower priority runs first, and atexit handlers
 * run in the reverse order), so it runs after the flush: the child ends there, before LeakSanitizer looks at a heap
 * copied from a parent with threads the child does not have. */
static void end_exit_flush_child(void) {
    if (exit_flush_child) _exit(0);
}
__attribute__((constructor(101))) static void register_end_exit_flush_child(void) { atexit(end_exit_flush_child); }

static void check_exit_flush(void) {
    run_name = "across processes, the exit flush with no memory left";
    run_n = 0;
    pid_t service = start_service();
    int up[2], down[2];
    CHECK(service > 0 && pipe(up) == 0 && pipe(down) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        static uint8_t big[BIG_REMOTE];
        pl_port_t *right = NULL;
        char byte = 'L';
        if (pl_service_look_up(namespace_dir, SERVICE_NAME, REMOTE_TIMEOUT, &right) != PL_OK) _exit(2);
        if (write(up[1], &byte, 1) != 1 || read(down[0], &byte, 1) != 1) _exit(3); /* the service is stopped */
        uint32_t sent = 0;
        while (sent < EXIT_FLUSH_MOST && pl_port_send(right, 9, big, sizeof big, NULL, 100 * 1000000LL) == PL_OK) sent++;
        if (write(up[1], &sent, sizeof sent) != sizeof sent) _exit(4);
        fail_every_thread(1, LONG_MAX);
        exit_flush_child = true;
        exit(0);
    }
    /* The child's ends: a child that ends early makes the reads below see the end of the pipe, not wait forever. */
    close(up[1]);
    close(down[0]);
    char byte = 0;
    uint32_t sent = 0;
    CHECK(read(up[0], &byte, 1) == 1);
    CHECK(kill(service, SIGSTOP) == 0);
    CHECK(write(down[1], "G", 1) == 1);
    CHECK(read(up[0], &sent, sizeof sent) == sizeof sent);
    CHECK(sent * (uint64_t)BIG_REMOTE > 1024 * 1024); /* more than the socket holds: the rest waits at exit */
    usleep(100000);
    CHECK(kill(service, SIGCONT) == 0);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child); /* the flush gives up after a second */
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    pl_port_t *right = NULL;
    pl_service_status_t answer = { 0 };
    CHECK(pl_service_look_up(namespace_dir, SERVICE_NAME, REMOTE_TIMEOUT, &right) == PL_OK);
    for (int i = 0; i < 200 && right != NULL; i++) {
        CHECK(pl_service_status(right, 0, REMOTE_TIMEOUT, &answer) == PL_OK);
        if (answer.messages_received >= sent) break;
        usleep(10000);
    }
    if (answer.messages_received != sent) {
        fail_at(__LINE__, "messages queued at exit were lost", -1);
        fprintf(stderr, "  sent %u, the service received %llu\n", sent, (unsigned long long)answer.messages_received);
    }
    if (verbose) printf("%s: %u messages sent, %llu received\n", run_name, sent, (unsigned long long)answer.messages_received);
    if (right != NULL) pl_port_release_send(right);
    end_service(service);
    close(up[0]);
    close(down[1]);
    check_no_leak();
}

/* ---- the transport's start with no memory for its buffer --------------------------------------------- */

#define START_SERVICE "alloc-fail-start"
#define START_TIMEOUT (3 * 1000000000LL)

/* The body of a fresh process (this program exec'd again), which has not started its transport: with no memory for
 * the transport thread's frame buffer, the check-in and the look-up that would start it answer PL_ERR_NO_MEMORY at
 * once, leaving no descriptor open and no name behind; with memory back, both succeed and a request is answered.
 * Returns the exit status: 0, or the step that failed. */
static int transport_start_child(void) {
    pl_port_t *own = NULL, *replies = NULL, *service = NULL;
    if (pl_port_create(8, 64, &own) != PL_OK || pl_port_create(8, 64, &replies) != PL_OK) return 2;
    int before = open_descriptors();
    fail_size = PL_FRAME_BUFFER_BYTES;
    if (pl_service_check_in(namespace_dir, START_SERVICE, own, NULL) != PL_ERR_NO_MEMORY) return 10;
    if (pl_service_look_up(namespace_dir, SERVICE_NAME, START_TIMEOUT, &service) != PL_ERR_NO_MEMORY) return 11;
    if (open_descriptors() != before) return 12;
    char path[PL_NAMESPACE_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", namespace_dir, START_SERVICE);
    if (access(path, F_OK) == 0) return 13;
    fail_size = 0;
    if (pl_service_look_up(namespace_dir, SERVICE_NAME, START_TIMEOUT, &service) != PL_OK) return 14;
    if (pl_port_send(service, 5, "start", 5, replies, START_TIMEOUT) != PL_OK) return 15;
    uint8_t answer[64];
    pl_received_t m;
    if (pl_port_receive(replies, &m, answer, sizeof answer, START_TIMEOUT) != PL_OK || m.id != 105) return 16;
    if (m.reply != NULL) pl_port_release_send(m.reply);
    if (pl_service_check_in(namespace_dir, START_SERVICE, own, NULL) != PL_OK) return 17;
    pl_port_release_send(service);
    pl_port_destroy(replies);
    pl_port_destroy(own);
    return 0;
}

static void check_transport_start(void) {
    run_name = "the transport's start with no memory for its buffer";
    run_n = 0;
    pid_t service = start_service();
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl("/proc/self/exe", "pl_alloc_fail", "--transport-start", namespace_dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail_at(__LINE__, "a process without memory for its transport's buffer", -1);
        fprintf(stderr, "  its status: %s %d (10, 11: not PL_ERR_NO_MEMORY; 12: a descriptor left open; 13: a name left; "
                        "14-17: no start once memory was back)\n",
                WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    } else if (verbose) {
        printf("%s: refused at once, then started\n", run_name);
    }
    end_service(service);
}

/* ---- a port's death told to its peers with no memory left ----------------------------------------------- */

#define DEATH_SERVICE "alloc-fail-death"
#define DEATH_PEERS 20 /* more than one batch of the peers told at a time */

/* One peer (a child process): it asks the service for a right to the port that will die and watches both that
 * port and the service's port for their deaths. Its connection carries both, so the notice it must get is the
 * port's alone: the connection's end would kill both. Returns its exit status (0: told, and only of that). */
static int death_peer(int ready) {
    pl_port_t *bootstrap = NULL, *mine = NULL, *doomed = NULL;
    pl_notification_t *watch_doomed = NULL, *watch_bootstrap = NULL;
    uint8_t buffer[PL_NOTICE_SIZE];
    pl_received_t m = no_message;
    if (pl_port_create(PL_QLIMIT_DEFAULT, sizeof buffer, &mine) != PL_OK) return 10;
    if (pl_service_look_up(namespace_dir, DEATH_SERVICE, REMOTE_TIMEOUT, &bootstrap) != PL_OK) return 11;
    if (pl_port_send(bootstrap, 1, NULL, 0, mine, REMOTE_TIMEOUT) != PL_OK) return 12;
    if (pl_port_receive(mine, &m, buffer, sizeof buffer, REMOTE_TIMEOUT) != PL_OK || m.attachments == NULL ||
        m.attachments->count != 1 || m.attachments->items[0].port == NULL) {
        return 13;
    }
    doomed = m.attachments->items[0].port;
    m.attachments->items[0].port = NULL;
    pl_attachments_free(m.attachments);
    if (pl_port_request_dead_name(doomed, mine, &watch_doomed) != PL_OK ||
        pl_port_request_dead_name(bootstrap, mine, &watch_bootstrap) != PL_OK) {
        return 14;
    }
    if (write(ready, "r", 1) != 1) return 15;
    m = no_message;
    if (pl_port_receive(mine, &m, buffer, sizeof buffer, REMOTE_TIMEOUT) != PL_OK) return 16; /* never told */
    uint64_t name = 0;
    for (int i = 7; i >= 0; i--) name = name << 8 | buffer[i];
    if (m.id != PL_NOTIFY_DEAD_NAME || (m.flags & PL_RECEIVED_NOTIFICATION) == 0 || name != pl_port_name(doomed)) {
        return 17;
    }
    /* The service's port lives on: the connection did not end. */
    if (pl_port_receive(mine, &m, buffer, sizeof buffer, 300 * 1000000LL) != PL_ERR_TIMED_OUT) return 18;
    return 0;
}

/* A port whose rights are held by more peers than one batch tells is destroyed while no thread of its process can
 * allocate: every peer must be told of its death (a DEAD frame each), not of its connection's end. */
static void check_death_told(void) {
    run_name = "across processes, a port's death told to its peers with no memory left";
    run_n = 0;
    pl_port_t *bootstrap = NULL, *doomed = NULL;
    CHECK(pl_port_create(PL_QLIMIT_DEFAULT, 64, &bootstrap) == PL_OK && pl_port_create(8, 64, &doomed) == PL_OK);
    CHECK(pl_service_check_in(namespace_dir, DEATH_SERVICE, bootstrap, NULL) == PL_OK);
    CHECK(pl_port_make_send(doomed) == PL_OK);
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t peers[DEATH_PEERS];
    for (int i = 0; i < DEATH_PEERS; i++) {
        peers[i] = fork();
        CHECK(peers[i] >= 0);
        if (peers[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(ready[0]);
            _exit(death_peer(ready[1]));
        }
    }
    close(ready[1]);
    /* Each peer's request for the right, answered while memory is there. */
    for (int i = 0; i < DEATH_PEERS; i++) {
        pl_received_t m = no_message;
        if (pl_port_receive(bootstrap, &m, NULL, 0, REMOTE_TIMEOUT) != PL_OK || m.reply == NULL) {
            fail_at(__LINE__, "a peer's request for the right did not come", -1);
            break;
        }
        pl_attachment_t right = { .kind = PL_ATTACHMENT_SEND_RIGHT, .port = doomed, .fd = -1 };
        CHECK(pl_port_send_with(m.reply, 2, NULL, 0, NULL, &right, 1, REMOTE_TIMEOUT) == PL_OK);
        pl_port_release_send(m.reply);
    }
    int watching = 0;
    for (char byte; watching < DEATH_PEERS && read(ready[0], &byte, 1) == 1;) watching++;
    close(ready[0]);
    CHECK(watching == DEATH_PEERS); /* short: a peer ended early (its status says where) */
    uint32_t exports = 0;
    pl_remote_stats(NULL, &exports, NULL);
    CHECK(exports == 2 * DEATH_PEERS);

    fail_every_thread(1, LONG_MAX);
    CHECK(pl_port_destroy(doomed) == PL_OK);
    int told = 0;
    for (int i = 0; i < DEATH_PEERS; i++) {
        int status = 0;
        CHECK(waitpid(peers[i], &status, 0) == peers[i]); /* each waits 10 s at most */
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            told++;
        } else {
            fail_at(__LINE__, "a peer was not told of the port's death, or not of it alone", -1);
            fprintf(stderr, "  peer %d: exit status %d, signal %d (see death_peer)\n", i,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        }
    }
    long failed = atomic_load(&shared_injected);
    atomic_store(&every_thread, false);
    if (verbose) printf("%s: %d peers of %d told (%ld allocations failed meanwhile)\n", run_name, told, DEATH_PEERS, failed);
    pl_port_release_send(doomed);
    pl_port_destroy(bootstrap);
    end_service(-1);
    check_no_leak();
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--transport-start") == 0) {
        /* The transport-start check's process (the child ends with _exit: its transport thread still runs). */
        snprintf(namespace_dir, sizeof namespace_dir, "%s", argv[2]);
        _exit(transport_start_child());
    }
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    service_counts = mmap(NULL, sizeof *service_counts, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (service_counts == MAP_FAILED) {
        perror("pl_alloc_fail: mmap");
        return 1;
    }
    /* Under PL_ALLOC_FAIL_TMP when set and short enough for a namespace (make puts it in the build directory, so
     * that a run that aborts leaves nothing elsewhere), else /tmp. */
    const char *parent = getenv("PL_ALLOC_FAIL_TMP");
    int length = parent != NULL ? snprintf(namespace_dir, sizeof namespace_dir, "%s/pl-alloc-fail-XXXXXX", parent) : -1;
    if (length < 0 || (size_t)length >= sizeof namespace_dir) {
        snprintf(namespace_dir, sizeof namespace_dir, "/tmp/pl-alloc-fail-XXXXXX");
    }
    if (mkdtemp(namespace_dir) == NULL) {
        perror("pl_alloc_fail: mkdtemp");
        return 1;
    }

    long in_process = run_all(IN_PROCESS, "in one process");
    long across = run_all(ACROSS_PROCESSES, "across processes");
    check_full_socket();
    check_starved_work();
    check_death_told();
    check_exit_flush();
    check_transport_start();

    /* What the service left in the namespace: its socket and its lock file. */
    DIR *dir = opendir(namespace_dir);
    if (dir != NULL) {
        for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
            if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) unlinkat(dirfd(dir), entry->d_name, 0);
        }
        closedir(dir);
    }
    run_name = "the end";
    CHECK(rmdir(namespace_dir) == 0);

    printf("pl_alloc_fail: %s (allocations each made to fail: %ld in one process, %ld across processes)\n",
           failures == 0 ? "ok" : "FAILED", in_process, across);
    return failures == 0 ? 0 : 1;
}
