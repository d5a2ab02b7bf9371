#!/usr/bin/env python3
"""Writes the seed corpus of pl_fuzz_wire (Tests/CFuzz/wire-corpus): well-formed conversations, one per file,
in the harness's input format (see pl_fuzz_wire.c). The layout follows CShims/pl_wire.h; run it again after
changing the wire."""
import os
import struct

HELLO, MESSAGE, CREDIT, WANT, RECLAIM, RETURN, RELEASE, DEAD, PROBE, STATUS, ONCE_GONE = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
NONE, SENDERS, YOURS, FD = 0, 1, 2, 3
MORE, ONCE, OUT_OF_LINE = 0x01, 0x02, 0x04  # MESSAGE flags
PROMPT, RIGHT_ONCE = 0x01, 0x02  # right flags


def frame(kind, flags, body):
    return struct.pack("<BBHI", kind, flags, 0, 8 + len(body)) + body


def right(kind=NONE, handle=0, credits=0, max_size=0, flags=0):
    return struct.pack("<BBHIII", kind, flags, 0, handle, credits, max_size)


def hello(status=0, bootstrap=right(), version=2):
    return frame(HELLO, 0, struct.pack("<IHHI", 0x50494C50, version, status, 65536) + bootstrap)


def probe(seq, echo, padding=None):
    padding = echo if padding is None else padding
    return frame(PROBE, 0, struct.pack("<II", seq, echo) + bytes(padding))


def status(seq, pid=1234, uid=1000, gid=1000, depth=2, limit=64, max_size=65536, connections=3, received=99,
           padding=0):
    return frame(STATUS, 0, struct.pack("<IiIIIIIIQ", seq, pid, uid, gid, depth, limit, max_size, connections,
                                        received) + bytes(padding))


# The harness's descriptor byte: count in bits 0-1, what the last descriptor is in bits 2-3.
DEV_NULL, SEALED_MEMFD, UNSEALED_MEMFD, LONGER_MEMFD = 0, 1, 2, 3


def fds(count, last=DEV_NULL):
    return count | (last << 2)


def message(dest, ident, payload, total=None, offset=0, reply=right(), attachments=(), fds=0, more=False,
            credit=(0, 0), once=False, out_of_line=False):
    total = len(payload) if total is None else total
    head = struct.pack("<IiIIHHII", dest, ident, total, offset, len(attachments), fds, credit[0], credit[1])
    flags = (MORE if more else 0) | (ONCE if once else 0) | (OUT_OF_LINE if out_of_line else 0)
    return frame(MESSAGE, flags, head + reply + b"".join(attachments) + payload)


def control(kind, handle, value=None, extra=None):
    body = struct.pack("<I", handle)
    if value is not None:
        body += struct.pack("<I", value)
    if extra is not None:
        body += struct.pack("<I", extra)
    return frame(kind, 0, body)


def conversation(service_side, packets):
    out = bytes([1 if service_side else 0])
    for fd_count, packet in packets:
        out += bytes([fd_count]) + struct.pack("<H", len(packet)) + packet
    return out


seeds = {
    "service-messages-and-credit": conversation(True, [
        (0, hello()),
        (0, message(1, 7, b"hello")),
        (0, control(WANT, 1, 1)),
        (0, control(RETURN, 1, 0)),
        (0, message(1, 8, b"again", credit=(3, 1))),
        (0, control(RELEASE, 1, 1, 0)),
    ]),
    "service-reply-right-and-fragments": conversation(True, [
        (0, hello()),
        (0, message(1, 9, b"ask", reply=right(SENDERS, 7, 1, 64))),
        (0, message(1, 10, b"A" * 600, total=1000, more=True)),
        (0, message(1, 10, b"B" * 400, total=1000, offset=600)),
        (0, message(1, 11, b"", reply=right(YOURS, 1))),
    ]),
    "service-descriptor-and-rights": conversation(True, [
        (0, hello()),
        (1, message(1, 12, b"fd", attachments=[right(FD, 0), right(SENDERS, 9, 0, 128)], fds=1)),
        (0, control(WANT, 1, 0)),
    ]),
    "client-welcome": conversation(False, [
        (0, hello(0, right(SENDERS, 1, 2, 1024))),
        (0, control(CREDIT, 1, 3)),
        (0, control(RECLAIM, 1)),
        (0, control(DEAD, 1)),
        (0, message(1, 13, b"to the client's own port")),
    ]),
    "client-refused": conversation(False, [(0, hello(1))]),
    "service-version-1-messages": conversation(True, [
        (0, hello(version=1)),
        (0, message(1, 7, b"from an earlier release")),
    ]),
    "service-probes": conversation(True, [
        (0, hello()),
        (0, probe(1, 0)),
        (0, probe(2, 56)),
        (0, message(1, 14, b"between probes")),
        (0, probe(3, 1000, padding=0)),
    ]),
    "service-version-3-packed": conversation(True, [
        (0, hello(version=3)),
        (0, message(1, 7, b"one") + message(1, 8, b"two") + control(WANT, 1, 1) + message(1, 9, b"three")),
        (0, message(1, 10, b"A" * 300, total=500, more=True) + message(1, 10, b"B" * 200, total=500, offset=300)),
        (0, message(1, 11, b"whole") + message(1, 12, b"cut short")[:20]),
    ]),
    "client-version-3-packed": conversation(False, [
        (0, hello(0, right(SENDERS, 1, 2, 1024), version=3)),
        (0, control(CREDIT, 1, 3) + message(1, 13, b"to the client's own port") + control(RECLAIM, 1)),
        (0, status(1) + control(DEAD, 1)),
    ]),
    # Version 3: send-once rights. The harness's port has given the peer send-once rights (see pl_fuzz_wire.c).
    "service-send-once": conversation(True, [
        (0, hello(version=3)),
        (0, message(1, 20, b"ask once", reply=right(SENDERS, 7, 0, 64, flags=RIGHT_ONCE | PROMPT))),
        (0, message(1, 21, b"through a send-once right", once=True)),
        (0, control(ONCE_GONE, 1)),
        (0, message(1, 22, b"yours, once", reply=right(YOURS, 1, flags=RIGHT_ONCE))),
        (0, message(1, 23, b"C" * 600, total=1000, more=True, once=True)),
        (0, message(1, 23, b"D" * 400, total=1000, offset=600)),
    ]),
    "service-send-once-from-version-2": conversation(True, [
        (0, hello(version=2)),
        (0, message(1, 24, b"a version 2 peer has no send-once right", once=True)),
    ]),
    # Version 3: payloads out of line, as a sealed memfd beside the frame, and each way a peer could get it wrong.
    "service-out-of-line": conversation(True, [
        (0, hello(version=3)),
        (fds(1, SEALED_MEMFD), message(1, 15, b"", total=1000, fds=1, out_of_line=True)),
        (fds(2, SEALED_MEMFD), message(1, 16, b"", total=600, attachments=[right(FD, 0)], fds=2, out_of_line=True)),
    ]),
    "service-out-of-line-taken": b"\x03" + conversation(True, [
        (0, hello(version=3)),
        (fds(1, SEALED_MEMFD), message(1, 18, b"", total=700, fds=1, out_of_line=True)),
        (fds(1, SEALED_MEMFD), message(1, 19, b"", total=20, fds=1, out_of_line=True)),
    ])[1:],
    "service-out-of-line-unsealed": conversation(True, [
        (0, hello(version=3)),
        (fds(1, UNSEALED_MEMFD), message(1, 20, b"", total=1000, fds=1, out_of_line=True)),
    ]),
    "service-out-of-line-wrong-size": conversation(True, [
        (0, hello(version=3)),
        (fds(1, LONGER_MEMFD), message(1, 21, b"", total=1000, fds=1, out_of_line=True)),
    ]),
    "service-out-of-line-not-a-memfd": conversation(True, [
        (0, hello(version=3)),
        (fds(1, DEV_NULL), message(1, 22, b"", total=1000, fds=1, out_of_line=True)),
    ]),
    "service-out-of-line-missing-memfd": conversation(True, [
        (0, hello(version=3)),
        (0, message(1, 23, b"", total=1000, fds=0, out_of_line=True)),
    ]),
    "service-out-of-line-from-version-2": conversation(True, [
        (0, hello(version=2)),
        (fds(1, SEALED_MEMFD), message(1, 24, b"", total=1000, fds=1, out_of_line=True)),
    ]),
    "service-out-of-line-over-the-port-size": conversation(True, [
        (0, hello(version=3)),
        (fds(1, SEALED_MEMFD), message(1, 25, b"", total=2000, fds=1, out_of_line=True)),
    ]),
    "client-status": conversation(False, [
        (0, hello(0, right(SENDERS, 1, 2, 1024))),
        (0, status(1)),
        (0, status(7, padding=16)),
    ]),
}

directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire-corpus")
os.makedirs(directory, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)
