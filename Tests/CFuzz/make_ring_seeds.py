#!/usr/bin/env python3
"""Writes the seed corpus of pl_fuzz_ring (Tests/CFuzz/ring-corpus): operation sequences in the harness's input
format (see pl_fuzz_ring.c), well-formed streams, bells emptied by their side's 256th arm (blocking or not), and one
of each rule a hostile writer can break. The hostile ones use the shared header's layout (CShims/pl_ring.c, layout
1); run it again after changing that."""
import os
import struct

CLIENT, SERVICE = 0, 0x80
HEADER, CLIENT_RECORDS, SERVICE_RECORDS = 0, 1, 2  # poke regions
# pl_ring_shared_t: the side of each direction at 64 + 192 × direction (0 client to service, 1 service to client),
# its tail at +0, head at +64, reader_armed at +128, writer_waiting at +132.
C2S_HEAD = 64 + 64
C2S_ARMED = 64 + 128  # the service's reader asks the client's put to ring it
C2S_WAITING = 64 + 132  # the client's writer asks the service's done to ring it
S2C_TAIL = 64 + 192
PACKET, MARK, PAD = 1, 2, 3  # record kinds
RING = 1048576  # each direction's ring (PL_RING_BYTES)
NEAR = 262144  # where a connection's writer wraps until it puts a large frame (PL_RING_NEAR_BYTES)


def poke(region, offset, data):
    return bytes([0, region]) + struct.pack("<I", offset)[:3] + bytes([len(data)]) + data


def add(offset, delta):
    return bytes([1, offset // 4]) + struct.pack("<I", delta & 0xFFFFFFFF)


def put(side, length=8, mark=False, split=128, reach=None):
    """A packet of `length` bytes (8 to 65,536), or a mark; with reach "near", "whole" or "least" (room for one
    largest record and a pad's header: a ring that holds one), the side's writer wraps there from this put on."""
    flags = (1 if mark else 0) | {None: 0, "near": 2, "whole": 4, "least": 6}[reach]
    return bytes([2 | side, flags]) + struct.pack("<H", 0 if mark else length - 8) + bytes([split])


def take(side, count=0):
    return bytes([3 | side, count])


def done(side):
    return bytes([4 | side])


def arm(side):
    return bytes([5 | side])


def block(side):
    """The side's bell made blocking (or nonblocking again): the peer shares its description."""
    return bytes([6 | side])


def disarm(side):
    """The side looks at its ring without sleeping (a polling loop): the peer's puts ring no bell."""
    return bytes([7 | side])


def record_header(length, kind, reserved=0):
    return struct.pack("<IHH", length, kind, reserved)


def sleep(side):
    """A reader's pass: everything taken, room given back, armed."""
    return take(side) + done(side) + arm(side)


# The service puts one packet of 100 bytes (its record at the client's offset 0, 112 bytes), then breaks a rule.
ONE = put(SERVICE, 100)

seeds = {
    "stream": put(SERVICE, 8) + put(SERVICE, 100, split=0) + put(SERVICE, mark=True) + put(SERVICE, 1000, split=255)
    + sleep(CLIENT) + put(SERVICE, 36) + take(CLIENT, 1) + sleep(CLIENT)
    + put(CLIENT, 64) + put(CLIENT, mark=True) + sleep(SERVICE) + put(CLIENT, 9) + sleep(SERVICE),
    # The largest packets: a pad at the end, then the start again.
    "wrap": (put(SERVICE, 65536, reach="near") + put(SERVICE, 40000) + sleep(CLIENT)) * 3,
    # The same over the whole ring, then near again while past the near part (it wraps at once).
    "wrap-whole-then-near": (put(SERVICE, 65536, reach="whole") + put(SERVICE, 40000) + sleep(CLIENT)) * 3
    + (put(SERVICE, 65536, reach="near") + put(SERVICE, 40000) + sleep(CLIENT)) * 12,
    # A full ring (its near part: the fourth largest packet pads from the reach and finds no room at the start):
    # the reader's done rings the writer, whose put then goes in.
    "full-then-room": put(SERVICE, 65536, reach="near") + put(SERVICE, 65536) * 3 + take(CLIENT, 1)
    + done(CLIENT) + put(SERVICE, 65536) + sleep(CLIENT),
    # The reader goes on from a tail it loaded earlier, which ends with a pad (the writer's fourth put found no room
    # past it); the packet put meanwhile at the start is found by loading the tail again, not left for a later pass.
    "seen-then-pad": put(SERVICE, 65536, reach="near") + put(SERVICE, 65536) * 3 + take(CLIENT, 1) + done(CLIENT)
    + put(SERVICE, 65536) + take(CLIENT) + done(CLIENT),
    # The writer at the middle of a ring that holds one largest packet (the least reach) with the reader armed: the
    # largest packet pads to the end and does not fit before the pad is taken; the reader must be rung for the pad (it was not: the writer slept, the reader too).
    "pad-after-arm": put(SERVICE, 65528, reach="least") + sleep(CLIENT) + put(SERVICE, 65536) + take(CLIENT)
    + done(CLIENT) + put(SERVICE, 65536) + sleep(CLIENT),
    # A pass a ring, 260 of them: the client's 256th arm empties its bell, which holds 255 rings then.
    "bell-emptied": (put(SERVICE, 8) + sleep(CLIENT)) * 260,
    # The same with the bell made blocking first (by the peer): the emptying does not wait, full or empty; and
    # the writer's bell, rung for room, blocking too.
    "bell-emptied-blocking": block(CLIENT) + block(SERVICE) + (put(SERVICE, 8) + sleep(CLIENT)) * 256
    + arm(CLIENT) * 256 + put(SERVICE, 65536, reach="least") + put(SERVICE, 65536) + take(CLIENT, 1) + done(CLIENT)
    + put(SERVICE, 65536) + sleep(CLIENT),
    # A hostile peer says, again and again, that its reader armed or its writer waits for room: each put or done
    # rings, and the bell is emptied all the same.
    "rung-by-lies": (add(C2S_ARMED, 1) + put(CLIENT, 8) + add(C2S_WAITING, 1) + done(SERVICE) + arm(CLIENT)
                     + arm(SERVICE)) * 300,
    # A polling reader: disarmed, it takes what comes, rung by nothing, and arms again when it stops looking (the
    # pad included: a reader that looks needs no bell for it).
    "polling-reader": sleep(CLIENT) + disarm(CLIENT) + (put(SERVICE, 100) + take(CLIENT) + done(CLIENT)) * 20
    + put(SERVICE, 65528, reach="least") + put(SERVICE, 65536) + take(CLIENT) + done(CLIENT) + put(SERVICE, 65536)
    + arm(CLIENT)
    + sleep(CLIENT) + put(SERVICE, 8) + sleep(CLIENT),
    "tail-past-the-ring": ONE + add(S2C_TAIL, RING) + take(CLIENT),
    "tail-misaligned": ONE + add(S2C_TAIL, 4) + take(CLIENT),
    "tail-behind-the-head": ONE + take(CLIENT) + add(S2C_TAIL, -8) + take(CLIENT),
    "record-past-the-tail": ONE + poke(CLIENT_RECORDS, 0, record_header(200, PACKET)) + take(CLIENT),
    "record-over-the-largest": ONE + poke(CLIENT_RECORDS, 0, record_header(65537, PACKET)) + take(CLIENT),
    "record-reserved-bytes": ONE + poke(CLIENT_RECORDS, 0, record_header(100, PACKET, 1)) + take(CLIENT),
    "record-unknown-kind": ONE + poke(CLIENT_RECORDS, 0, record_header(100, 4)) + take(CLIENT),
    "mark-with-bytes": ONE + poke(CLIENT_RECORDS, 0, record_header(100, MARK)) + take(CLIENT),
    "packet-shorter-than-a-frame": ONE + poke(CLIENT_RECORDS, 0, record_header(4, PACKET)) + take(CLIENT),
    "pad-not-at-the-end": ONE + poke(CLIENT_RECORDS, 0, record_header(104, PAD)) + take(CLIENT),
    # A pad from the record after ONE to the ring's end, all of it waiting: taken as nothing.
    "pad-to-the-end": ONE + take(CLIENT) + poke(CLIENT_RECORDS, 112, record_header(RING - 112 - 8, PAD))
    + add(S2C_TAIL, RING - 112) + take(CLIENT) + done(CLIENT) + put(SERVICE, 20) + take(CLIENT),
    # The reader's head moved past what the client put, or misaligned: the client's fourth put rereads it (after
    # padding from the near reach, where its tail is the ring's size) and is CORRUPT.
    "head-ahead": put(CLIENT, 65536, reach="near") + add(C2S_HEAD, RING + 8) + put(CLIENT, 65536) * 3,
    "head-misaligned": put(CLIENT, 65536, reach="near") + add(C2S_HEAD, 4) + put(CLIENT, 65536) * 3,
    # The same found by the pad's room check (the least reach): the client's third largest packet pads, after a
    # lap, with the head it read on the way stale.
    "head-misaligned-at-the-pad": put(CLIENT, 65536, reach="least") + take(SERVICE) + done(SERVICE) + put(CLIENT, 65536)
    + take(SERVICE) + done(SERVICE) + add(C2S_HEAD, 4) + put(CLIENT, 65536),
}

directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ring-corpus")
os.makedirs(directory, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)
