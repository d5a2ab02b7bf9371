/*
 * pl_wire.c — encoding and validating frames (layout in pl_wire.h). Pure functions: no state, no allocation,
 * no system call, so that the fuzz harness can drive the decoder with any bytes.
 */
#include "pl_wire.h"
#include "portloop.h"

#include <string.h>

static inline uint16_t pl_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t pl_get32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void pl_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void pl_put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* ---- rights ---------------------------------------------------------------------------------------- */

static pl_wire_right_t pl_read_right(const uint8_t *p) {
    return (pl_wire_right_t){ .kind = p[0], .flags = p[1], .handle = pl_get32(p + 4), .credits = pl_get32(p + 8),
                              .max_size = pl_get32(p + 12) };
}

static void pl_write_right(uint8_t *p, pl_wire_right_t right) {
    memset(p, 0, PL_WIRE_RIGHT_SIZE);
    p[0] = right.kind;
    p[1] = right.flags;
    pl_put32(p + 4, right.handle);
    pl_put32(p + 8, right.credits);
    pl_put32(p + 12, right.max_size);
}

pl_wire_right_t pl_wire_right_at(const pl_wire_message_t *message, uint32_t i) {
    return pl_read_right(message->attachments + (size_t)i * PL_WIRE_RIGHT_SIZE);
}

/* A right reference is well formed on its own: known kind, zero padding, fields that mean nothing for its kind
 * left zero, a non-zero handle, a maximum size a port can have. Descriptor indexes are checked by the caller. */
static bool pl_right_valid(const uint8_t *p, bool may_be_none, bool may_be_fd, bool may_be_once,
                           const char **reason) {
    pl_wire_right_t right = pl_read_right(p);
    if (p[2] != 0 || p[3] != 0) { *reason = "right: reserved bytes not zero"; return false; }
    /* PROMPT on a right of the sender's; ONCE on a port right where a send-once right may travel (a reply). */
    uint8_t allowed = (right.kind == PL_RIGHT_SENDERS ? PL_RIGHT_PROMPT : 0) |
                      (may_be_once && (right.kind == PL_RIGHT_SENDERS || right.kind == PL_RIGHT_YOURS) ? PL_RIGHT_ONCE : 0);
    if (right.flags & ~allowed) {
        *reason = (right.flags & PL_RIGHT_ONCE & ~allowed) ? "right: a send-once right where it may not travel"
                                                           : "right: unknown flags";
        return false;
    }
    switch (right.kind) {
    case PL_RIGHT_NONE:
        if (!may_be_none) { *reason = "right: empty attachment"; return false; }
        if (right.handle != 0 || right.credits != 0 || right.max_size != 0) {
            *reason = "right: fields set on an empty right"; return false;
        }
        return true;
    case PL_RIGHT_SENDERS:
        if (right.handle == 0 || right.handle == PL_WIRE_HANDLE_NONE) { *reason = "right: reserved handle"; return false; }
        if (right.max_size < 1 || right.max_size > PL_MSG_SIZE_MAX) { *reason = "right: max size out of range"; return false; }
        if (right.credits > PL_QLIMIT_MAX) { *reason = "right: credits over the queue limit"; return false; }
        return true;
    case PL_RIGHT_YOURS:
        if (right.handle == 0 || right.handle == PL_WIRE_HANDLE_NONE) { *reason = "right: reserved handle"; return false; }
        if (right.credits != 0 || right.max_size != 0) { *reason = "right: credits on a returned right"; return false; }
        return true;
    case PL_RIGHT_FD:
        if (!may_be_fd) { *reason = "right: a descriptor where a port right belongs"; return false; }
        if (right.credits != 0 || right.max_size != 0) { *reason = "right: fields set on a descriptor"; return false; }
        return true;
    default:
        *reason = "right: unknown kind";
        return false;
    }
}

/* ---- decoding -------------------------------------------------------------------------------------- */

static bool pl_decode_hello(const uint8_t *body, size_t size, pl_wire_frame_t *frame, const char **reason) {
    if (size != PL_WIRE_HELLO_SIZE - PL_WIRE_HEADER_SIZE) { *reason = "hello: wrong size"; return false; }
    pl_wire_hello_t *hello = &frame->u.hello;
    hello->magic = pl_get32(body);
    hello->version = pl_get16(body + 4);
    hello->status = pl_get16(body + 6);
    hello->max_frame = pl_get32(body + 8);
    if (hello->magic != PL_WIRE_MAGIC) { *reason = "hello: bad magic"; return false; }
    if (hello->version < PL_WIRE_VERSION_MIN || hello->version > PL_WIRE_VERSION) {
        *reason = "hello: unsupported version"; return false;
    }
    if (hello->status > PL_HELLO_FULL) { *reason = "hello: unknown status"; return false; }
    /* Frames of versions 1 to 5 are at most PL_WIRE_MAX_FRAME bytes either way; the field lets a later version differ. */
    if (hello->max_frame != PL_WIRE_MAX_FRAME) { *reason = "hello: a largest frame versions 1 to 5 do not use"; return false; }
    if (!pl_right_valid(body + 12, true, false, false, reason)) return false;
    hello->bootstrap = pl_read_right(body + 12);
    if (hello->bootstrap.kind == PL_RIGHT_YOURS) { *reason = "hello: bootstrap names a right of the receiver"; return false; }
    return true;
}

static bool pl_decode_message(const uint8_t *body, size_t size, uint8_t flags, uint32_t fd_count,
                              pl_wire_frame_t *frame, const char **reason) {
    const size_t fixed = PL_WIRE_MESSAGE_FIXED - PL_WIRE_HEADER_SIZE;
    if (size < fixed + PL_WIRE_RIGHT_SIZE) { *reason = "message: shorter than its header"; return false; }
    if (flags & ~(PL_FRAME_MORE | PL_FRAME_ONCE | PL_FRAME_OUT_OF_LINE)) { *reason = "message: unknown flags"; return false; }
    pl_wire_message_t *m = &frame->u.message;
    m->out_of_line = (flags & PL_FRAME_OUT_OF_LINE) != 0;
    m->dest = pl_get32(body);
    m->id = (int32_t)pl_get32(body + 4);
    m->total_size = pl_get32(body + 8);
    m->offset = pl_get32(body + 12);
    m->attachment_count = pl_get16(body + 16);
    m->fd_count = pl_get16(body + 18);
    m->credit_handle = pl_get32(body + 20);
    m->credit_count = pl_get32(body + 24);
    if (m->dest == 0 || m->dest == PL_WIRE_HANDLE_NONE) { *reason = "message: reserved destination handle"; return false; }
    if (m->credit_handle == PL_WIRE_HANDLE_NONE) { *reason = "message: reserved credit handle"; return false; }
    if (m->total_size > PL_MSG_SIZE_MAX) { *reason = "message: larger than any port takes"; return false; }
    if ((m->credit_handle == 0) != (m->credit_count == 0)) { *reason = "message: half a credit"; return false; }
    if (m->credit_count > PL_QLIMIT_MAX) { *reason = "message: credit over the queue limit"; return false; }
    if (m->attachment_count > PL_WIRE_MAX_ATTACHMENTS) { *reason = "message: too many attachments"; return false; }
    if (m->fd_count != fd_count) { *reason = "message: descriptor count differs from those received"; return false; }
    if (m->out_of_line) {
        /* Whole, in one frame, with its memfd last among the descriptors; the bytes are in the memfd only. */
        if (flags & PL_FRAME_MORE) { *reason = "message: out of line in fragments"; return false; }
        if (m->offset != 0) { *reason = "message: out of line at an offset"; return false; }
        if (m->total_size == 0) { *reason = "message: out of line and empty"; return false; }
        if (fd_count == 0) { *reason = "message: out of line without its memfd"; return false; }
    }
    /* Descriptors the attachments name: all but an out-of-line payload's. */
    uint32_t attached_fds = fd_count - (m->out_of_line ? 1u : 0u);

    const uint8_t *rights = body + fixed;
    size_t rights_size = PL_WIRE_RIGHT_SIZE * (1u + (size_t)m->attachment_count);
    if (size < fixed + rights_size) { *reason = "message: attachments past its end"; return false; }
    if (m->offset > 0) {
        /* A later fragment carries the bytes only: no rights, no descriptors. */
        if (m->attachment_count != 0 || m->fd_count != 0 || rights[0] != PL_RIGHT_NONE) {
            *reason = "message: rights in a later fragment"; return false;
        }
    }
    if (!pl_right_valid(rights, true, false, true, reason)) return false;
    m->reply = pl_read_right(rights);
    if (flags & PL_FRAME_ONCE) {
        /* A message through a send-once right: its first fragment says so, and it carries no right. */
        if (m->offset != 0) { *reason = "message: send-once flag on a later fragment"; return false; }
        if (m->reply.kind != PL_RIGHT_NONE || m->attachment_count != 0) {
            *reason = "message: rights in a message sent through a send-once right"; return false;
        }
    }
    m->attachments = rights + PL_WIRE_RIGHT_SIZE;

    /* Each received descriptor is named by exactly one attachment. */
    uint64_t used[PL_WIRE_MAX_ATTACHMENTS / 64 + 1] = { 0 };
    uint32_t named = 0;
    for (uint32_t i = 0; i < m->attachment_count; i++) {
        const uint8_t *p = m->attachments + (size_t)i * PL_WIRE_RIGHT_SIZE;
        if (!pl_right_valid(p, false, true, false, reason)) return false;
        pl_wire_right_t right = pl_read_right(p);
        if (right.kind != PL_RIGHT_FD) continue;
        if (right.handle >= attached_fds) { *reason = "message: descriptor index past those received"; return false; }
        if (used[right.handle / 64] & (1ull << (right.handle % 64))) {
            *reason = "message: a descriptor named twice"; return false;
        }
        used[right.handle / 64] |= 1ull << (right.handle % 64);
        named++;
    }
    if (named != attached_fds) { *reason = "message: a received descriptor is not named"; return false; }

    m->bytes = rights + rights_size;
    m->byte_count = (uint32_t)(size - fixed - rights_size);
    if (m->out_of_line && m->byte_count != 0) { *reason = "message: out of line with bytes in the frame"; return false; }
    if (m->out_of_line) return true; /* its size is the memfd's, which the connection checks */
    if (m->offset > m->total_size || m->byte_count > m->total_size - m->offset) {
        *reason = "message: fragment past the message's size"; return false;
    }
    bool last = !(flags & PL_FRAME_MORE);
    if (last && m->offset + m->byte_count != m->total_size) { *reason = "message: last fragment short"; return false; }
    if (!last && m->byte_count == 0) { *reason = "message: empty fragment"; return false; }
    return true;
}

static bool pl_decode_control(const uint8_t *body, size_t size, uint8_t type, uint8_t flags,
                              pl_wire_frame_t *frame, const char **reason) {
    size_t expected = type == PL_FRAME_RELEASE
                          ? 12 : (type == PL_FRAME_RECLAIM || type == PL_FRAME_DEAD || type == PL_FRAME_ONCE_GONE ? 4 : 8);
    if (size != expected) { *reason = "control: wrong size"; return false; }
    if (flags != 0) { *reason = "control: flags set"; return false; }
    frame->u.control.handle = pl_get32(body);
    frame->u.control.count = size >= 8 ? pl_get32(body + 4) : 0;
    frame->u.control.flags = 0;
    frame->u.control.transfers = 0;
    if (frame->u.control.handle == 0 || frame->u.control.handle == PL_WIRE_HANDLE_NONE) {
        *reason = "control: reserved handle";
        return false;
    }
    switch (type) {
    case PL_FRAME_CREDIT:
        if (frame->u.control.count > PL_QLIMIT_MAX) { *reason = "credit: over the queue limit"; return false; }
        break;
    case PL_FRAME_WANT:
        frame->u.control.flags = frame->u.control.count;
        frame->u.control.count = 0;
        if (frame->u.control.flags & ~PL_WANT_WAIT) { *reason = "want: unknown flags"; return false; }
        break;
    case PL_FRAME_RETURN:
        if (frame->u.control.count > PL_QLIMIT_MAX) { *reason = "return: over the queue limit"; return false; }
        break;
    case PL_FRAME_RELEASE:
        frame->u.control.transfers = frame->u.control.count;
        frame->u.control.count = pl_get32(body + 8);
        if (frame->u.control.transfers == 0) { *reason = "release: no transfers"; return false; }
        if (frame->u.control.count > PL_QLIMIT_MAX) { *reason = "release: credits over the queue limit"; return false; }
        break;
    default:
        break;
    }
    return true;
}

/* Padding carries nothing: every byte of it is zero, so that a later version can give it a meaning. */
static bool pl_padding_zero(const uint8_t *p, size_t size) {
    for (size_t i = 0; i < size; i++) {
        if (p[i] != 0) return false;
    }
    return true;
}

static bool pl_decode_probe(const uint8_t *body, size_t size, pl_wire_frame_t *frame, const char **reason) {
    const size_t fixed = PL_WIRE_PROBE_FIXED - PL_WIRE_HEADER_SIZE;
    if (size < fixed) { *reason = "probe: shorter than its fixed part"; return false; }
    pl_wire_probe_t *probe = &frame->u.probe;
    probe->seq = pl_get32(body);
    probe->echo = pl_get32(body + 4);
    probe->padding = (uint32_t)(size - fixed);
    if (probe->echo > PL_WIRE_ECHO_MAX) { *reason = "probe: asks for more echo than a frame holds"; return false; }
    if (!pl_padding_zero(body + fixed, probe->padding)) { *reason = "probe: padding not zero"; return false; }
    return true;
}

static bool pl_decode_status(const uint8_t *body, size_t size, pl_wire_frame_t *frame, const char **reason) {
    const size_t fixed = PL_WIRE_STATUS_FIXED - PL_WIRE_HEADER_SIZE;
    if (size < fixed) { *reason = "status: shorter than its fixed part"; return false; }
    pl_wire_status_t *status = &frame->u.status;
    status->seq = pl_get32(body);
    status->pid = (int32_t)pl_get32(body + 4);
    status->uid = pl_get32(body + 8);
    status->gid = pl_get32(body + 12);
    status->queue_depth = pl_get32(body + 16);
    status->queue_limit = pl_get32(body + 20);
    status->max_size = pl_get32(body + 24);
    status->connections = pl_get32(body + 28);
    status->received = (uint64_t)pl_get32(body + 32) | ((uint64_t)pl_get32(body + 36) << 32);
    status->padding = (uint32_t)(size - fixed);
    if (status->pid <= 0) { *reason = "status: not a process id"; return false; }
    if (status->queue_limit < 1 || status->queue_limit > PL_QLIMIT_MAX) { *reason = "status: queue limit out of range"; return false; }
    /* A queue holds more than its limit only for a while (the limit lowered, a taken message put back while a
     * sender filled its slot): a deeper one than twice the largest limit is no queue's. */
    if (status->queue_depth > 2 * PL_QLIMIT_MAX) { *reason = "status: queue depth out of range"; return false; }
    if (status->max_size < 1 || status->max_size > PL_MSG_SIZE_MAX) { *reason = "status: max size out of range"; return false; }
    if (!pl_padding_zero(body + fixed, status->padding)) { *reason = "status: padding not zero"; return false; }
    return true;
}

/* The ring frames: an offer carries the ring size and exactly two descriptors (the memfd, the client's bell), an
 * acceptance one (the service's bell), the others nothing. */
static bool pl_decode_ring(const uint8_t *body, size_t size, uint8_t type, uint8_t flags, uint32_t fd_count,
                           pl_wire_frame_t *frame, const char **reason) {
    bool offer = type == PL_FRAME_RING_OFFER;
    uint32_t fds = offer ? 2 : (type == PL_FRAME_RING_ACCEPT ? 1 : 0);
    if (flags != 0) { *reason = "ring: flags set"; return false; }
    if (size != (offer ? 8u : 0u)) { *reason = "ring: wrong size"; return false; }
    if (fd_count != fds) { *reason = "ring: wrong number of descriptors"; return false; }
    frame->u.ring.ring_bytes = offer ? pl_get32(body) : 0;
    if (offer && pl_get32(body + 4) != 0) { *reason = "ring: reserved bytes not zero"; return false; }
    if (offer && (frame->u.ring.ring_bytes == 0 || frame->u.ring.ring_bytes % 8 != 0)) {
        *reason = "ring: a ring size no ring has";
        return false;
    }
    return true;
}

size_t pl_wire_frame_length(const uint8_t *bytes, size_t remaining) {
    if (remaining < PL_WIRE_HEADER_SIZE) return 0;
    uint32_t length = pl_get32(bytes + 4);
    if (length < PL_WIRE_HEADER_SIZE || length > remaining || length > PL_WIRE_MAX_FRAME) return 0;
    return length;
}

bool pl_wire_plain_message_head(const uint8_t *head, size_t length) {
    const uint8_t *body = head + PL_WIRE_HEADER_SIZE;
    return length >= PL_WIRE_FRAGMENT_HEAD && length <= PL_WIRE_MAX_FRAME && head[0] == PL_FRAME_MESSAGE &&
           pl_get32(head + 4) == length && pl_get16(body + 16) == 0 && pl_get16(body + 18) == 0;
}

bool pl_wire_fragment_head(const uint8_t *head, size_t length, uint32_t *offset) {
    *offset = pl_get32(head + PL_WIRE_HEADER_SIZE + 12);
    return length > PL_WIRE_FRAGMENT_HEAD && *offset > 0 && pl_wire_plain_message_head(head, length);
}

bool pl_wire_decode(const uint8_t *packet, size_t length, uint32_t fd_count, pl_wire_frame_t *frame,
                    const char **reason) {
    *reason = NULL;
    memset(frame, 0, sizeof *frame);
    if (length < PL_WIRE_HEADER_SIZE) { *reason = "frame: shorter than a header"; return false; }
    if (length > PL_WIRE_MAX_FRAME) { *reason = "frame: over the largest frame"; return false; }
    frame->type = packet[0];
    frame->flags = packet[1];
    if (pl_get16(packet + 2) != 0) { *reason = "frame: reserved bytes not zero"; return false; }
    if (pl_get32(packet + 4) != length) { *reason = "frame: length differs from the packet's"; return false; }
    bool takes_fds = frame->type == PL_FRAME_MESSAGE || frame->type == PL_FRAME_RING_OFFER ||
                     frame->type == PL_FRAME_RING_ACCEPT;
    if (!takes_fds && fd_count != 0) { *reason = "frame: descriptors beside a control frame"; return false; }
    const uint8_t *body = packet + PL_WIRE_HEADER_SIZE;
    size_t size = length - PL_WIRE_HEADER_SIZE;
    switch (frame->type) {
    case PL_FRAME_HELLO:
        if (frame->flags != 0) { *reason = "hello: flags set"; return false; }
        return pl_decode_hello(body, size, frame, reason);
    case PL_FRAME_MESSAGE:
        return pl_decode_message(body, size, frame->flags, fd_count, frame, reason);
    case PL_FRAME_CREDIT: case PL_FRAME_WANT: case PL_FRAME_RECLAIM:
    case PL_FRAME_RETURN: case PL_FRAME_RELEASE: case PL_FRAME_DEAD: case PL_FRAME_ONCE_GONE:
        return pl_decode_control(body, size, frame->type, frame->flags, frame, reason);
    case PL_FRAME_RING_OFFER: case PL_FRAME_RING_ACCEPT: case PL_FRAME_RING_REFUSE: case PL_FRAME_RING_START:
        return pl_decode_ring(body, size, frame->type, frame->flags, fd_count, frame, reason);
    case PL_FRAME_PROBE: case PL_FRAME_STATUS:
        if (frame->flags != 0) { *reason = frame->type == PL_FRAME_PROBE ? "probe: flags set" : "status: flags set"; return false; }
        return frame->type == PL_FRAME_PROBE ? pl_decode_probe(body, size, frame, reason)
                                             : pl_decode_status(body, size, frame, reason);
    default:
        *reason = "frame: unknown type";
        return false;
    }
}

/* ---- encoding -------------------------------------------------------------------------------------- */

static void pl_write_header(uint8_t *out, uint8_t type, uint8_t flags, size_t length) {
    out[0] = type;
    out[1] = flags;
    pl_put16(out + 2, 0);
    pl_put32(out + 4, (uint32_t)length);
}

size_t pl_wire_encode_hello(uint8_t *out, uint32_t version, uint32_t status, pl_wire_right_t bootstrap) {
    uint8_t *body = out + PL_WIRE_HEADER_SIZE;
    pl_write_header(out, PL_FRAME_HELLO, 0, PL_WIRE_HELLO_SIZE);
    pl_put32(body, PL_WIRE_MAGIC);
    pl_put16(body + 4, (uint16_t)version);
    pl_put16(body + 6, (uint16_t)status);
    pl_put32(body + 8, PL_WIRE_MAX_FRAME);
    pl_write_right(body + 12, bootstrap);
    return PL_WIRE_HELLO_SIZE;
}

size_t pl_wire_encode_control(uint8_t *out, pl_frame_type_t type, uint32_t handle, uint32_t count_or_flags,
                              uint32_t transfers) {
    uint8_t *body = out + PL_WIRE_HEADER_SIZE;
    size_t size;
    pl_put32(body, handle);
    switch (type) {
    case PL_FRAME_RECLAIM: case PL_FRAME_DEAD: case PL_FRAME_ONCE_GONE:
        size = 4;
        break;
    case PL_FRAME_RELEASE:
        pl_put32(body + 4, transfers);
        pl_put32(body + 8, count_or_flags);
        size = 12;
        break;
    default:
        pl_put32(body + 4, count_or_flags);
        size = 8;
        break;
    }
    pl_write_header(out, (uint8_t)type, 0, PL_WIRE_HEADER_SIZE + size);
    return PL_WIRE_HEADER_SIZE + size;
}

size_t pl_wire_encode_ring(uint8_t *out, pl_frame_type_t type, uint32_t ring_bytes) {
    size_t size = type == PL_FRAME_RING_OFFER ? 8 : 0;
    if (size > 0) {
        pl_put32(out + PL_WIRE_HEADER_SIZE, ring_bytes);
        pl_put32(out + PL_WIRE_HEADER_SIZE + 4, 0);
    }
    pl_write_header(out, (uint8_t)type, 0, PL_WIRE_HEADER_SIZE + size);
    return PL_WIRE_HEADER_SIZE + size;
}

size_t pl_wire_encode_probe(uint8_t *out, uint32_t seq, uint32_t echo, uint32_t padding) {
    uint8_t *body = out + PL_WIRE_HEADER_SIZE;
    pl_put32(body, seq);
    pl_put32(body + 4, echo);
    memset(out + PL_WIRE_PROBE_FIXED, 0, padding);
    pl_write_header(out, PL_FRAME_PROBE, 0, PL_WIRE_PROBE_FIXED + (size_t)padding);
    return PL_WIRE_PROBE_FIXED + (size_t)padding;
}

size_t pl_wire_encode_status(uint8_t *out, const pl_wire_status_t *status) {
    uint8_t *body = out + PL_WIRE_HEADER_SIZE;
    pl_put32(body, status->seq);
    pl_put32(body + 4, (uint32_t)status->pid);
    pl_put32(body + 8, status->uid);
    pl_put32(body + 12, status->gid);
    pl_put32(body + 16, status->queue_depth);
    pl_put32(body + 20, status->queue_limit);
    pl_put32(body + 24, status->max_size);
    pl_put32(body + 28, status->connections);
    pl_put32(body + 32, (uint32_t)status->received);
    pl_put32(body + 36, (uint32_t)(status->received >> 32));
    memset(out + PL_WIRE_STATUS_FIXED, 0, status->padding);
    pl_write_header(out, PL_FRAME_STATUS, 0, PL_WIRE_STATUS_FIXED + (size_t)status->padding);
    return PL_WIRE_STATUS_FIXED + (size_t)status->padding;
}

size_t pl_wire_encode_message_head(uint8_t *out, uint8_t flags, const pl_wire_message_t *message,
                                   const pl_wire_right_t *attachments, uint32_t byte_count) {
    uint8_t *body = out + PL_WIRE_HEADER_SIZE;
    pl_put32(body, message->dest);
    pl_put32(body + 4, (uint32_t)message->id);
    pl_put32(body + 8, message->total_size);
    pl_put32(body + 12, message->offset);
    pl_put16(body + 16, (uint16_t)message->attachment_count);
    pl_put16(body + 18, (uint16_t)message->fd_count);
    pl_put32(body + 20, message->credit_handle);
    pl_put32(body + 24, message->credit_count);
    uint8_t *rights = out + PL_WIRE_MESSAGE_FIXED;
    pl_write_right(rights, message->reply);
    for (uint32_t i = 0; i < message->attachment_count; i++) {
        pl_write_right(rights + PL_WIRE_RIGHT_SIZE * (1 + (size_t)i), attachments[i]);
    }
    size_t head = PL_WIRE_MESSAGE_FIXED + PL_WIRE_RIGHT_SIZE * (1 + (size_t)message->attachment_count);
    pl_write_header(out, PL_FRAME_MESSAGE, flags, head + byte_count);
    return head;
}
