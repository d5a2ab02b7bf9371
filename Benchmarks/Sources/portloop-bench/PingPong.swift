#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import PortLoop

/// `pingpong`: round-trip latency between two threads, in nanoseconds per round trip.
///
/// Thread A sends an 8-byte message on port P1; thread B receives it and sends it back on P2; A receives
/// it on P2. Each thread sleeps between messages, so every round trip pays two cross-thread wake-ups.
/// Floors: the same ping-pong over bare eventfds, and over two libevent bases woken through eventfds.
let pingPongScenario = Scenario(
    name: "pingpong",
    summary: "round trip between two threads, 8-byte payload"
) { settings in
    let roundTrips = settings.quick ? 10_000 : 100_000
    let warmup = settings.quick ? 200 : 1_000

    let samples = measureInterleaved(runs: settings.runs, [
        { portPingPong(warmup: warmup, roundTrips: roundTrips, viaSet: false) },
        { portPingPong(warmup: warmup, roundTrips: roundTrips, viaSet: true) },
        { floorNanoseconds("eventfd ping-pong", bf_eventfd_pingpong(UInt64(warmup), UInt64(roundTrips)),
                           per: roundTrips) },
        { floorNanoseconds("libevent ping-pong", bf_libevent_pingpong(UInt64(warmup), UInt64(roundTrips)),
                           per: roundTrips) },
    ])
    let unit = "ns/round trip"
    let eventfdFloor = Row(name: "C floor: eventfd, blocking read/write", sample: samples[2], unit: unit)
    let libeventFloor = Row(name: "C floor: libevent base per thread", sample: samples[3], unit: unit)
    var rows = [
        Row(name: "ports: receive(into:) on the port", sample: samples[0], unit: unit),
        Row(name: "ports: PortSet.receive", sample: samples[1], unit: unit),
    ]
    for index in rows.indices {
        rows[index].addRatio(to: eventfdFloor, label: "eventfd")
        rows[index].addRatio(to: libeventFloor, label: "libevent")
    }
    return rows + [eventfdFloor, libeventFloor]
}

/// Converts a floor's elapsed time to nanoseconds per iteration; a failed floor ends the program.
func floorNanoseconds(_ what: String, _ elapsed: Int64, per iterations: Int) -> Double {
    guard elapsed >= 0 else { fatalError("\(what) failed: errno \(errno)") }
    return Double(elapsed) / Double(iterations)
}

/// One ping-pong run through PortLoop. Returns nanoseconds per round trip, warm-up excluded.
func portPingPong(warmup: Int, roundTrips: Int, viaSet: Bool) -> Double {
    let p1 = SharedReceiveRight(must("port P1") { () throws(PortError) in try PortReceiveRight() })
    let p2 = SharedReceiveRight(must("port P2") { () throws(PortError) in try PortReceiveRight() })
    let toP1 = p1.right.makeSendRight()
    let toP2 = p2.right.makeSendRight()
    let inboxA = Inbox.make(p2, viaSet: viaSet)
    let inboxB = Inbox.make(p1, viaSet: viaSet)
    let total = warmup + roundTrips

    // Thread B: echoes every message from P1 back on P2.
    let echo = JoinableThread {
        withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
            for _ in 0..<total {
                inboxB.receive(into: buffer)
                must("send on P2") { () throws(PortError) in try toP2.send(payload: UnsafeRawBufferPointer(buffer)) }
            }
        }
    }

    // Thread A (this one): sends the round trip's number, waits for it to come back.
    var start = bf_now_ns()
    withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
        for index in 0..<total {
            if index == warmup { start = bf_now_ns() }
            buffer.storeBytes(of: UInt64(index), as: UInt64.self)
            must("send on P1") { () throws(PortError) in try toP1.send(payload: UnsafeRawBufferPointer(buffer)) }
            inboxA.receive(into: buffer)
            precondition(buffer.load(as: UInt64.self) == UInt64(index), "echo out of order")
        }
    }
    let end = bf_now_ns()
    echo.join()
    return Double(end - start) / Double(roundTrips)
}
