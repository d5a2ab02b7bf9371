/*
 * pl_alloc_fail.c — the C layer with its allocations failing: each one in turn, then all from one on. Run by
 * `make alloc-fail` (part of `make leakcheck`) under AddressSanitizer, LeakSanitizer and UBSan.
 *
 * It is linked with `-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup`: every call the layer makes to
 * those comes here first, and fails (NULL, errno ENOMEM) when the thread's count of them reaches the one chosen.
 * One workload uses what the layer allocates for: ports and sets, a descriptor member, messages with payloads
 * (copied, handed over, too large for a batch's buffer), with rights and descriptors, with reply rights and
 * send-once rights, a request forwarded with its right, a message put back, notifications (no senders, dead name,
 * an unused send-once right).
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
 * After every run: no descriptor left open, and nothing leaked (LeakSanitizer, asked after each run, names the run).
 *
 * Usage: pl_alloc_fail [-v]     -v prints each mode's run count and where the failures surfaced.
 */
#include "portloop.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sanitizer/lsan_interface.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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

static bool allocation_fails(void) {
    if (!counting) return false;
    long n = ++allocations;
    if (fail_from == 0 || n < fail_from || n >= fail_until) return false;
    injected++;
    errno = ENOMEM;
    return true;
}

void *__wrap_malloc(size_t size) { return allocation_fails() ? NULL : __real_malloc(size); }
void *__wrap_calloc(size_t count, size_t size) { return allocation_fails() ? NULL : __real_calloc(count, size); }
void *__wrap_realloc(void *old, size_t size) { return allocation_fails() ? NULL : __real_realloc(old, size); }
char *__wrap_strdup(const char *s) { return allocation_fails() ? NULL : __real_strdup(s); }

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
    bool stopped;                /* the all-fail mode hit PL_ERR_NO_MEMORY: the rest is skipped */
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
 * was, and the call is made again in the one-failure mode (and must then succeed) or stops the workload in the
 * other. `ports` are the ports whose queue and rights the call could change. */
typedef struct snapshot {
    uint32_t queued[3], sends[3], once[3];
    int descriptors;
} snapshot_t;

static snapshot_t snapshot(const world_t *w) {
    snapshot_t s = { .descriptors = open_descriptors() };
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
        if (status_ == PL_ERR_NO_MEMORY) unchanged_at(w, __LINE__, #expr, before_); \
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

static bool step_at(world_t *w, int line, const char *call, pl_status_t status) {
    if (status == PL_OK) return true;
    if (status == PL_ERR_NO_MEMORY && !w->once) {
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

typedef struct outcome {
    long allocations, injected, surfaced;
    char trace[4096];
} outcome_t;

static outcome_t run(bool once, long from, long until) {
    world_t *w = __real_calloc(1, sizeof *w);
    w->once = once;
    w->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(w->bell >= 0 && pipe(w->pipe_fds) == 0);
    int descriptors = open_descriptors();
    allocations = injected = 0;
    fail_from = from;
    fail_until = until;
    counting = true;
    work(w);
    tear_down(w);
    counting = false;
    outcome_t outcome = { .allocations = allocations, .injected = injected, .surfaced = w->surfaced };
    memcpy(outcome.trace, w->trace, sizeof outcome.trace);
    CHECK(open_descriptors() == descriptors);
    close(w->bell);
    close(w->pipe_fds[0]);
    close(w->pipe_fds[1]);
    free(w);
    if (__lsan_do_recoverable_leak_check() != 0) fail_at(__LINE__, "memory leaked (LeakSanitizer's report above)", -1);
    return outcome;
}

int main(int argc, char **argv) {
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* The first run fills the layer's caches of payload memory; the second is the reference. */
    run_name = "the run where nothing fails";
    run(true, 0, 0);
    outcome_t reference = run(true, 0, 0);
    CHECK(reference.allocations > 0 && reference.surfaced == 0);
    if (verbose) printf("reference: %ld allocations; received: %s\n", reference.allocations, reference.trace);

    /* Until a run makes fewer allocations than the one to fail (a run where a call failed may make more, or fewer,
     * than the reference: a failed call's retry, or memory a cache kept). */
    run_name = "one allocation failing";
    long runs = 0, surfaced = 0;
    for (run_n = 1; run_n <= 4 * reference.allocations; run_n++, runs++) {
        outcome_t o = run(true, run_n, run_n + 1);
        if (o.injected == 0) break;
        if (strcmp(o.trace, reference.trace) != 0) {
            fail_at(__LINE__, "the receiver saw something else than when nothing fails", -1);
            fprintf(stderr, "  saw:      %s\n  expected: %s\n", o.trace, reference.trace);
        }
        surfaced += o.surfaced;
    }
    if (verbose) printf("one failing: %ld runs, %ld failures surfaced as PL_ERR_NO_MEMORY\n", runs, surfaced);

    run_name = "every allocation failing from one on";
    runs = surfaced = 0;
    for (run_n = 1; run_n <= 4 * reference.allocations; run_n++, runs++) {
        outcome_t o = run(false, run_n, LONG_MAX);
        if (o.injected == 0) break;
        surfaced += o.surfaced;
    }
    if (verbose) printf("all failing: %ld runs, %ld stopped by PL_ERR_NO_MEMORY\n", runs, surfaced);

    printf("pl_alloc_fail: %s (%ld allocations in the workload, each made to fail)\n",
           failures == 0 ? "ok" : "FAILED", reference.allocations);
    return failures == 0 ? 0 : 1;
}
