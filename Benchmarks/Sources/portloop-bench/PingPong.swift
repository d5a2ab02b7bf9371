#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import PortLoop

/// `pingpong`: round-trip latency between two threads, in nanoseconds per round trip.
///
/// Every variant bounces one token between two threads that sleep between messages, so each round trip
/// pays two cross-thread wake-ups. PortLoop's run loop (two loop threads, see PingPongLoops.swift):
/// Source1 ports, and `performAndWakeUp` blocks. Peers, in the same rounds: CFRunLoop with
/// `CFRunLoopPerformBlock` + `CFRunLoopWakeUp`, CFRunLoop with a version-0 source signalled + woken, and
/// SwiftNIO's `EventLoop.execute` between two event loops. PortLoop's ports without a loop: a thread blocked
/// receiving on the port, and on a one-port `PortSet` (what a loop sleeps in). C floors: two blocking
/// eventfds, and one libevent base per thread woken through an eventfd.
let pingPongScenario = Scenario(
    name: "pingpong",
    summary: "round trip between two threads: run loops (ours, CF, NIO), ports, C floors"
) { settings in
    let roundTrips = settings.quick ? 5_000 : 50_000
    let warmup = settings.quick ? 200 : 1_000

    let samples = checkingDescriptors("pingpong") {
        measureInterleaved(runs: settings.runs, series: [
            "loop: Source1", "loop: performAndWakeUp", "CF blocks", "CF source0", "NIO", "ports: receive",
            "ports: PortSet", "eventfd floor", "libevent floor", "loop: Source1, spin 200 µs",
        ], [
            { loopSource1PingPong(warmup: warmup, roundTrips: roundTrips) },
            { loopBlockPingPong(warmup: warmup, roundTrips: roundTrips) },
            { cfBlockPingPong(warmup: warmup, roundTrips: roundTrips) },
            { cfSource0PingPong(warmup: warmup, roundTrips: roundTrips) },
            { nioPingPong(warmup: warmup, roundTrips: roundTrips) },
            { portPingPong(warmup: warmup, roundTrips: roundTrips, viaSet: false) },
            { portPingPong(warmup: warmup, roundTrips: roundTrips, viaSet: true) },
            { floorLapping("eventfd ping-pong", roundTrips: roundTrips) {
                bf_eventfd_pingpong(UInt64(warmup), UInt64(roundTrips), $0, $1)
            } },
            { floorLapping("libevent ping-pong", roundTrips: roundTrips) {
                bf_libevent_pingpong(UInt64(warmup), UInt64(roundTrips), $0, $1)
            } },
            { loopSource1PingPong(warmup: warmup, roundTrips: roundTrips, spin: lowLatencySpin) },
        ])
    }
    let unit = "ns/round trip"
    return [
        Row(.ours, "loop: Source1 port → Source1 port", sample: samples[0], unit: unit),
        Row(.ours, "loop: performAndWakeUp → performAndWakeUp", sample: samples[1], unit: unit),
        Row(.peer, "CF: CFRunLoopPerformBlock + CFRunLoopWakeUp", sample: samples[2], unit: unit, short: "CF blocks"),
        Row(.peer, "CF: Source0 CFRunLoopSourceSignal + CFRunLoopWakeUp", sample: samples[3], unit: unit,
            short: "CF source0"),
        Row(.peer, "NIO: EventLoop.execute → execute", sample: samples[4], unit: unit, short: "NIO"),
        Row(.ours, "ports: receive(into:) on the port (no loop)", sample: samples[5], unit: unit),
        Row(.ours, "ports: PortSet.receive(into:) (no loop)", sample: samples[6], unit: unit),
        Row(.floor, "C floor: eventfd, blocking read/write", sample: samples[7], unit: unit, short: "eventfd"),
        Row(.floor, "C floor: libevent base per thread", sample: samples[8], unit: unit, short: "libevent"),
        Row(.ours, "loop: Source1 port → Source1 port, low-latency mode (spin 200 µs)", sample: samples[9], unit: unit),
    ].withPeerRatios()
}

/// The spin of the low-latency row: longer than a round trip on this class of machine, so that the answer
/// usually arrives while the loop still polls (it burns a core for that long after each pass).
let lowLatencySpin = Duration.microseconds(200)

/// Runs a ping-pong floor that times its laps as the Swift variants do (room for `roundTrips` of them), keeps
/// them for the latency histograms, and returns nanoseconds per round trip.
func floorLapping(_ what: String, roundTrips: Int,
                  _ body: (UnsafeMutablePointer<Int64>, UnsafeMutablePointer<UInt64>) -> Int64) -> Double {
    let clock = RoundTripClock()
    let laps = UnsafeMutableBufferPointer<Int64>.allocate(capacity: roundTrips)
    defer { laps.deallocate() }
    var count: UInt64 = 0
    let elapsed = body(laps.baseAddress!, &count)
    clock.keep(laps: UnsafeBufferPointer(rebasing: laps[..<Int(min(count, UInt64(roundTrips)))]))
    return floorNanoseconds(what, elapsed, per: roundTrips)
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
    let clock = RoundTripClock()
    clock.lap(0, warmup: warmup)
    var start = bf_now_ns()
    withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
        for index in 0..<total {
            if index == warmup { start = bf_now_ns() }
            buffer.storeBytes(of: UInt64(index), as: UInt64.self)
            must("send on P1") { () throws(PortError) in try toP1.send(payload: UnsafeRawBufferPointer(buffer)) }
            inboxA.receive(into: buffer)
            precondition(buffer.load(as: UInt64.self) == UInt64(index), "echo out of order")
            clock.lap(index + 1, warmup: warmup)
        }
    }
    let end = bf_now_ns()
    echo.join()
    return Double(end - start) / Double(roundTrips)
}
