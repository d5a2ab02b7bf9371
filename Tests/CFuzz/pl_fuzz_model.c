/*
 * pl_fuzz_model.c — a model-checked fuzz harness of the C port layer (libFuzzer).
 *
 * Each input is a program: a sequence of operations on up to four ports and two sets (create and destroy
 * ports and sets, send, direct receive, set receive, batch receive, insert, extract, queue-limit changes, put a
 * taken message back). Every operation runs on the real layer and on a small reference model, and every
 * result is checked against the model: the status the header documents, the message (id, size, payload,
 * reply right) each receive returns, per-port FIFO order, exactly-once delivery, round-robin among a set's
 * ready ports, too-large messages staying first, send-right counts. Single-threaded, timeouts of zero only, so
 * every run is deterministic; the stress program covers the races. Everything is freed at the end of each
 * input, so LeakSanitizer checks ownership too.
 *
 *   make fuzz          long runs (FUZZ_SECONDS, default 600)
 *   make fuzz-quick    a short run, part of `make test`
 *
 * A failed check aborts with a message naming the operation: libFuzzer then saves the input as a crash file.
 */
#include "portloop.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PORTS 4
#define SETS 2
#define MAX_QLIMIT 8
#define STASH 8
#define MAX_QUEUED (MAX_QLIMIT + STASH) /* put-back messages may take a queue over its limit */
#define BIG 4096

static void fail(const char *what, int line) {
    fprintf(stderr, "pl_fuzz_model: check failed at line %d: %s\n", line, what);
    abort();
}
#define CHECK(cond) do { if (!(cond)) fail(#cond, __LINE__); } while (0)
#define EXPECT(status, expected) do { pl_status_t got_ = (status); \
        if (got_ != (expected)) { fprintf(stderr, "got %s, expected %s\n", pl_status_describe(got_), \
                                          pl_status_describe(expected)); fail(#status, __LINE__); } } while (0)

/* ---- the model ---- */

typedef struct {
    int32_t id;
    uint32_t size;
    int reply;                /* index of the port its reply right is for, or -1 */
} model_message_t;

typedef struct {
    pl_port_t *port;          /* NULL: the slot is free */
    bool alive;
    uint32_t qlimit, max_size;
    model_message_t queue[MAX_QUEUED];
    uint32_t count;
    uint32_t reply_rights;    /* reply rights to this port inside queued or stashed messages */
} model_port_t;

typedef struct {
    pl_port_set_t *set;       /* NULL: the slot is free */
    bool member[PORTS];
    int ready[PORTS];         /* ready FIFO: port indexes */
    int ready_count;
} model_set_t;

/* A message taken and not yet handled: put back later (pl_port_requeue) or dropped. */
typedef struct {
    int port;
    int32_t id;
    uint32_t size;
    pl_port_t *reply;         /* the right the message carried, owned here */
    int reply_index;
    unsigned char payload[BIG];
} stash_entry_t;

static model_port_t ports[PORTS];
static model_set_t sets[SETS];
static stash_entry_t stash[STASH];
static int stash_count;
static int32_t next_id;

static unsigned char pattern(int32_t id, uint32_t i) { return (unsigned char)((uint32_t)id * 131u + i * 17u + 3u); }

/* ---- the input ---- */

typedef struct { const uint8_t *data; size_t size, at; } input_t;

static uint8_t take(input_t *in) { return in->at < in->size ? in->data[in->at++] : 0; }

/* ---- ready FIFOs ---- */

static bool ready_contains(model_set_t *s, int p) {
    for (int i = 0; i < s->ready_count; i++) if (s->ready[i] == p) return true;
    return false;
}

static void ready_remove(model_set_t *s, int p) {
    for (int i = 0; i < s->ready_count; i++) {
        if (s->ready[i] != p) continue;
        memmove(&s->ready[i], &s->ready[i + 1], sizeof s->ready[0] * (size_t)(s->ready_count - i - 1));
        s->ready_count--;
        return;
    }
}

static void ready_push(model_set_t *s, int p, bool at_head) {
    if (ready_contains(s, p)) return;
    if (at_head) {
        memmove(&s->ready[1], &s->ready[0], sizeof s->ready[0] * (size_t)s->ready_count);
        s->ready[0] = p;
    } else {
        s->ready[s->ready_count] = p;
    }
    s->ready_count++;
}

/* The port became non-empty: it joins the ready FIFO of each set holding it. */
static void became_ready(int p, bool at_head) {
    for (int s = 0; s < SETS; s++) {
        if (sets[s].set != NULL && sets[s].member[p]) ready_push(&sets[s], p, at_head);
    }
}

static void became_empty(int p) {
    for (int s = 0; s < SETS; s++) if (sets[s].set != NULL) ready_remove(&sets[s], p);
}

/* ---- helpers ---- */

static uint32_t size_choice(uint8_t b) {
    static const uint32_t sizes[] = { 0, 1, 7, 48, 49, 64, 65, 300, 4096 };
    return sizes[b % (sizeof sizes / sizeof sizes[0])];
}

/* Checks a received message against the model's head of port p, pops it, and takes over its reply right. */
static void check_received(int p, const pl_received_t *h, const unsigned char *payload, pl_port_t **reply_out,
                           int *reply_index_out) {
    model_port_t *m = &ports[p];
    CHECK(m->count > 0);
    model_message_t expected = m->queue[0];
    CHECK(h->kind == PL_RECEIVED_MESSAGE);
    CHECK(h->id == expected.id);
    CHECK(h->size == expected.size);
    CHECK(h->arrival_name == pl_port_name(m->port));
    for (uint32_t i = 0; i < h->size; i++) CHECK(payload[i] == pattern(h->id, i));
    if (expected.reply < 0) {
        CHECK(h->reply == NULL);
    } else {
        CHECK(h->reply == ports[expected.reply].port);
    }
    memmove(&m->queue[0], &m->queue[1], sizeof m->queue[0] * (m->count - 1));
    m->count--;
    if (m->count == 0) became_empty(p);
    *reply_out = h->reply;
    *reply_index_out = expected.reply;
}

/* A message is done with: its reply right is released. */
static void release_reply(pl_port_t *reply, int reply_index) {
    if (reply == NULL) return;
    EXPECT(pl_port_release_send(reply), PL_OK);
    ports[reply_index].reply_rights--;
}

/* Keeps a received message for a later put-back, or drops it if the stash is full. */
static void keep_or_drop(int p, const pl_received_t *h, const unsigned char *payload, pl_port_t *reply, int reply_index,
                         bool keep) {
    if (!keep || stash_count == STASH) {
        release_reply(reply, reply_index);
        return;
    }
    stash_entry_t *e = &stash[stash_count++];
    e->port = p;
    e->id = h->id;
    e->size = h->size;
    e->reply = reply;
    e->reply_index = reply_index;
    memcpy(e->payload, payload, h->size);
}

static int port_of_name(uint64_t name) {
    for (int p = 0; p < PORTS; p++) if (ports[p].port != NULL && pl_port_name(ports[p].port) == name) return p;
    return -1;
}

static void check_rights(void) {
    for (int p = 0; p < PORTS; p++) {
        if (ports[p].port == NULL) continue;
        /* The harness's own send right, plus the reply rights in queued and stashed messages. */
        CHECK(pl_port_send_right_count(ports[p].port) == 1 + ports[p].reply_rights);
        CHECK(pl_port_message_count(ports[p].port) == ports[p].count);
    }
    for (int s = 0; s < SETS; s++) {
        if (sets[s].set == NULL) continue;
        uint32_t members = 0;
        for (int p = 0; p < PORTS; p++) {
            if (sets[s].member[p]) members++;
            if (ports[p].port != NULL) CHECK(pl_port_set_contains(sets[s].set, ports[p].port) == (int)sets[s].member[p]);
        }
        CHECK(pl_port_set_member_count(sets[s].set) == members);
    }
}

/* ---- operations ---- */

static void op_create_port(input_t *in) {
    int p = take(in) % PORTS;
    if (ports[p].port != NULL) return;
    uint32_t qlimit = 1 + take(in) % MAX_QLIMIT;
    uint32_t max_size = (take(in) & 1) ? 64 : BIG;
    model_port_t *m = &ports[p];
    memset(m, 0, sizeof *m);
    EXPECT(pl_port_create(qlimit, max_size, &m->port), PL_OK);
    EXPECT(pl_port_make_send(m->port), PL_OK); /* keeps the memory after the receive right is destroyed */
    m->alive = true;
    m->qlimit = qlimit;
    m->max_size = max_size;
}

static void op_destroy_port(input_t *in) {
    int p = take(in) % PORTS;
    model_port_t *m = &ports[p];
    if (m->port == NULL) return;
    if (!m->alive) {
        EXPECT(pl_port_destroy(m->port), PL_ERR_INVALID_NAME); /* our send right keeps the memory */
        return;
    }
    EXPECT(pl_port_destroy(m->port), PL_OK);
    m->alive = false;
    for (uint32_t i = 0; i < m->count; i++) {
        if (m->queue[i].reply >= 0) ports[m->queue[i].reply].reply_rights--;
    }
    m->count = 0;
    became_empty(p);
    for (int s = 0; s < SETS; s++) sets[s].member[p] = false;
}

static void op_send(input_t *in) {
    int p = take(in) % PORTS;
    uint32_t size = size_choice(take(in));
    uint8_t r = take(in);
    model_port_t *m = &ports[p];
    if (m->port == NULL) return;
    int reply = (r & 0x80) ? (r % PORTS) : -1;
    if (reply >= 0 && ports[reply].port == NULL) reply = -1;
    unsigned char payload[BIG];
    int32_t id = next_id++;
    for (uint32_t i = 0; i < size; i++) payload[i] = pattern(id, i);
    /* The size is checked before the port's state is looked at. */
    pl_status_t expected = size > m->max_size ? PL_ERR_TOO_LARGE
        : !m->alive ? PL_ERR_INVALID_DEST
        : m->count >= m->qlimit ? PL_ERR_TIMED_OUT : PL_OK;
    EXPECT(pl_port_send(m->port, id, size ? payload : NULL, size, reply >= 0 ? ports[reply].port : NULL, 0), expected);
    if (expected != PL_OK) return;
    m->queue[m->count++] = (model_message_t){ .id = id, .size = size, .reply = reply };
    if (reply >= 0) ports[reply].reply_rights++;
    if (m->count == 1) became_ready(p, false);
}

static void op_receive(input_t *in) {
    int p = take(in) % PORTS;
    bool small = take(in) & 1, keep = take(in) & 1;
    model_port_t *m = &ports[p];
    if (m->port == NULL) return;
    unsigned char buffer[BIG];
    size_t capacity = small ? 48 : sizeof buffer;
    pl_received_t h;
    pl_status_t status = pl_port_receive(m->port, &h, buffer, capacity, 0);
    if (!m->alive) { EXPECT(status, PL_ERR_INVALID_NAME); return; }
    if (m->count == 0) { EXPECT(status, PL_ERR_TIMED_OUT); return; }
    if (m->queue[0].size > capacity) {
        EXPECT(status, PL_ERR_TOO_LARGE);
        CHECK(h.size == m->queue[0].size && h.reply == NULL);
        return;
    }
    EXPECT(status, PL_OK);
    pl_port_t *reply; int reply_index;
    check_received(p, &h, buffer, &reply, &reply_index);
    keep_or_drop(p, &h, buffer, reply, reply_index, keep);
}

static void op_set_receive(input_t *in) {
    int s = take(in) % SETS;
    bool small = take(in) & 1, keep = take(in) & 1;
    model_set_t *ms = &sets[s];
    if (ms->set == NULL) return;
    unsigned char buffer[BIG];
    size_t capacity = small ? 48 : sizeof buffer;
    pl_received_t h;
    pl_status_t status = pl_port_set_receive(ms->set, &h, buffer, capacity, 0);
    if (ms->ready_count == 0) { EXPECT(status, PL_ERR_TIMED_OUT); return; }
    int p = ms->ready[0]; /* round-robin: the first ready port */
    if (ports[p].queue[0].size > capacity) {
        EXPECT(status, PL_ERR_TOO_LARGE);
        CHECK(h.size == ports[p].queue[0].size);
        CHECK(h.arrival_name == pl_port_name(ports[p].port));
        return; /* the message, and the port's turn, stay first */
    }
    EXPECT(status, PL_OK);
    CHECK(port_of_name(h.arrival_name) == p);
    pl_port_t *reply; int reply_index;
    check_received(p, &h, buffer, &reply, &reply_index);
    if (ports[p].count > 0) { /* served: to the back */
        ready_remove(ms, p);
        ready_push(ms, p, false);
    }
    keep_or_drop(p, &h, buffer, reply, reply_index, keep);
}

static void op_batch(input_t *in) {
    int s = take(in) % SETS;
    uint32_t max = 1 + take(in) % 6;
    uint8_t mode = take(in);
    size_t capacity = (mode & 1) ? 128 : BIG;
    bool taking = (mode & 2) != 0; /* pl_port_set_receive_batch_taking: payloads over 48 bytes handed over */
    model_set_t *ms = &sets[s];
    if (ms->set == NULL) return;
    static unsigned char buffer[BIG];
    pl_received_t outs[8];
    pl_payload_t takes[8];
    uint32_t count = 99;
    pl_status_t status = taking ? pl_port_set_receive_batch_taking(ms->set, outs, takes, max, buffer, capacity, &count)
                                : pl_port_set_receive_batch(ms->set, outs, max, buffer, capacity, &count);
    if (ms->ready_count == 0) { EXPECT(status, PL_ERR_TIMED_OUT); CHECK(count == 0); return; }
    int p = ms->ready[0];
    /* The model of a batch: whole messages of the first ready port while they fit, 8-byte aligned; taking, a
     * payload over 48 bytes needs no room. */
    uint32_t expect = 0;
    size_t used = 0;
    while (expect < max && expect < ports[p].count) {
        size_t size = ports[p].queue[expect].size;
        if (taking && size > PL_INLINE_PAYLOAD_SIZE) { expect++; continue; }
        size_t offset = (used + 7) & ~(size_t)7;
        if (offset > capacity || size > capacity - offset) break;
        used = offset + size;
        expect++;
    }
    if (expect == 0) { EXPECT(status, PL_OK); CHECK(count == 0); return; } /* queued, but not for a batch */
    EXPECT(status, PL_OK);
    CHECK(count == expect);
    for (uint32_t i = 0; i < count; i++) {
        CHECK(port_of_name(outs[i].arrival_name) == p);
        bool handed = taking && outs[i].size > PL_INLINE_PAYLOAD_SIZE;
        CHECK(!taking || handed == (takes[i].base != NULL));
        pl_port_t *reply; int reply_index;
        check_received(p, &outs[i], handed ? takes[i].base : buffer + outs[i].offset, &reply, &reply_index);
        release_reply(reply, reply_index);
        if (taking) pl_payload_free(&takes[i]);
    }
    if (ports[p].count > 0) {
        ready_remove(ms, p);
        ready_push(ms, p, false);
    }
}

static void op_requeue(input_t *in) {
    if (stash_count == 0) return;
    int i = take(in) % stash_count;
    stash_entry_t e = stash[i];
    stash[i] = stash[--stash_count];
    model_port_t *m = &ports[e.port];
    pl_received_t taken = { .kind = PL_RECEIVED_MESSAGE, .id = e.id, .size = e.size, .reply = e.reply, .fd = -1 };
    pl_status_t status = pl_port_requeue(m->port, &taken, e.payload);
    if (!m->alive) {
        EXPECT(status, PL_ERR_INVALID_NAME);
        release_reply(e.reply, e.reply_index); /* still ours */
        return;
    }
    EXPECT(status, PL_OK);
    CHECK(m->count < MAX_QUEUED);
    memmove(&m->queue[1], &m->queue[0], sizeof m->queue[0] * m->count);
    m->queue[0] = (model_message_t){ .id = e.id, .size = e.size, .reply = e.reply_index };
    m->count++;
    if (m->count == 1) became_ready(e.port, true);
}

static void op_create_set(input_t *in) {
    int s = take(in) % SETS;
    if (sets[s].set != NULL) return;
    memset(&sets[s], 0, sizeof sets[s]);
    EXPECT(pl_port_set_create(&sets[s].set), PL_OK);
}

static void op_destroy_set(input_t *in) {
    int s = take(in) % SETS;
    if (sets[s].set == NULL) return;
    EXPECT(pl_port_set_destroy(sets[s].set), PL_OK);
    EXPECT(pl_port_set_destroy(sets[s].set), PL_ERR_INVALID_NAME);
    pl_received_t h;
    EXPECT(pl_port_set_receive(sets[s].set, &h, NULL, 0, 0), PL_ERR_INVALID_NAME);
    pl_port_set_release(sets[s].set);
    memset(&sets[s], 0, sizeof sets[s]);
}

static void op_insert(input_t *in) {
    int s = take(in) % SETS, p = take(in) % PORTS;
    model_set_t *ms = &sets[s];
    if (ms->set == NULL || ports[p].port == NULL) return;
    pl_status_t expected = !ports[p].alive ? PL_ERR_INVALID_NAME : ms->member[p] ? PL_ERR_ALREADY_IN_SET : PL_OK;
    EXPECT(pl_port_set_insert(ms->set, ports[p].port), expected);
    if (expected != PL_OK) return;
    ms->member[p] = true;
    if (ports[p].count > 0) ready_push(ms, p, false);
}

static void op_extract(input_t *in) {
    int s = take(in) % SETS, p = take(in) % PORTS;
    model_set_t *ms = &sets[s];
    if (ms->set == NULL || ports[p].port == NULL) return;
    EXPECT(pl_port_set_extract(ms->set, ports[p].port), ms->member[p] ? PL_OK : PL_ERR_NOT_IN_SET);
    ms->member[p] = false;
    ready_remove(ms, p);
}

static void op_qlimit(input_t *in) {
    int p = take(in) % PORTS;
    uint32_t qlimit = take(in) % (MAX_QLIMIT + 1); /* 0 is out of range */
    model_port_t *m = &ports[p];
    if (m->port == NULL) return;
    pl_status_t expected = qlimit == 0 ? PL_ERR_INVALID_ARG : !m->alive ? PL_ERR_INVALID_NAME : PL_OK;
    EXPECT(pl_port_set_qlimit(m->port, qlimit), expected);
    if (expected == PL_OK) m->qlimit = qlimit; /* lowering it below the count drops nothing */
}

/* ---- one input ---- */

static void reset(void) {
    for (int i = 0; i < stash_count; i++) release_reply(stash[i].reply, stash[i].reply_index);
    stash_count = 0;
    for (int s = 0; s < SETS; s++) {
        if (sets[s].set == NULL) continue;
        pl_port_set_release(sets[s].set); /* the last reference destroys it */
        memset(&sets[s], 0, sizeof sets[s]);
    }
    for (int p = 0; p < PORTS; p++) {
        if (ports[p].port != NULL && ports[p].alive) EXPECT(pl_port_destroy(ports[p].port), PL_OK);
    }
    for (int p = 0; p < PORTS; p++) {
        if (ports[p].port == NULL) continue;
        EXPECT(pl_port_release_send(ports[p].port), PL_OK); /* the last reference frees it */
        memset(&ports[p], 0, sizeof ports[p]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input_t in = { .data = data, .size = size, .at = 0 };
    next_id = 1;
    /* Start with something to work on: two ports and a set holding the first. */
    uint8_t seed[] = { 0, 3, 0, 1, 5, 1 };
    input_t start = { .data = seed, .size = sizeof seed, .at = 0 };
    op_create_port(&start);
    op_create_port(&start);
    op_create_set(&(input_t){ .data = (const uint8_t[]){ 0 }, .size = 1 });
    op_insert(&(input_t){ .data = (const uint8_t[]){ 0, 0 }, .size = 2 });
    bool trace = getenv("PL_FUZZ_TRACE") != NULL;
    while (in.at < in.size) {
        uint8_t op = take(&in) % 13;
        if (trace) {
            fprintf(stderr, "op %u at %zu:", op, in.at);
            for (int s = 0; s < SETS; s++) {
                if (sets[s].set == NULL) continue;
                fprintf(stderr, " set%d[", s);
                for (int i = 0; i < sets[s].ready_count; i++) fprintf(stderr, "%d", sets[s].ready[i]);
                fprintf(stderr, "]");
            }
            for (int p = 0; p < PORTS; p++) if (ports[p].port) fprintf(stderr, " p%d:%u%s", p, ports[p].count, ports[p].alive ? "" : "x");
            fprintf(stderr, " args %u %u %u\n", in.at < in.size ? in.data[in.at] : 0,
                    in.at + 1 < in.size ? in.data[in.at + 1] : 0, in.at + 2 < in.size ? in.data[in.at + 2] : 0);
        }
        switch (op) {
        case 0: op_create_port(&in); break;
        case 1: op_destroy_port(&in); break;
        case 2: case 3: op_send(&in); break;
        case 4: op_receive(&in); break;
        case 5: case 6: op_set_receive(&in); break;
        case 7: op_batch(&in); break;
        case 8: op_requeue(&in); break;
        case 9: op_insert(&in); break;
        case 10: op_extract(&in); break;
        case 11: op_qlimit(&in); break;
        case 12: if (take(&in) & 1) op_create_set(&in); else op_destroy_set(&in); break;
        }
        check_rights();
    }
    reset();
    return 0;
}
