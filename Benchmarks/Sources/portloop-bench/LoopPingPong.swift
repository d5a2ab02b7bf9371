import CBenchFloors
import PortLoop

/// `looppingpong`: round-trip latency between two run loop threads, in nanoseconds per round trip.
///
/// Two threads each run their own `PortRunLoop`. Variants:
/// - Source1: each loop has a `RunLoopPortSource`; A's handler sends an 8-byte message to B's port, B's
///   handler sends it back to A's port. Every round trip is two Source1 wake-ups of a sleeping loop.
/// - blocks: A queues `loopB.performAndWakeUp { loopA.performAndWakeUp { next round trip } }`; each loop is
///   kept alive by an idle port source. Every round trip is two blocks and two wake-up-port messages.
/// Beside them, measured in the same run: the `pingpong` scenario's `PortSet.receive` ping-pong (the port
/// layer the loop sleeps in, without the loop), and the C floors over eventfds and libevent.
let loopPingPongScenario = Scenario(
    name: "looppingpong",
    summary: "round trip between two run loop threads (Source1 ports, performAndWakeUp)"
) { settings in
    let roundTrips = settings.quick ? 10_000 : 100_000
    let warmup = settings.quick ? 200 : 1_000

    let samples = checkingDescriptors("looppingpong") {
        measureInterleaved(runs: settings.runs, [
            { loopSource1PingPong(warmup: warmup, roundTrips: roundTrips) },
            { loopBlockPingPong(warmup: warmup, roundTrips: roundTrips) },
            { portPingPong(warmup: warmup, roundTrips: roundTrips, viaSet: true) },
            { floorNanoseconds("eventfd ping-pong", bf_eventfd_pingpong(UInt64(warmup), UInt64(roundTrips)),
                               per: roundTrips) },
            { floorNanoseconds("libevent ping-pong", bf_libevent_pingpong(UInt64(warmup), UInt64(roundTrips)),
                               per: roundTrips) },
        ])
    }
    let unit = "ns/round trip"
    let eventfdFloor = Row(name: "C floor: eventfd, blocking read/write", sample: samples[3], unit: unit)
    let libeventFloor = Row(name: "C floor: libevent base per thread", sample: samples[4], unit: unit)
    var rows = [
        Row(name: "loop: Source1 port → Source1 port", sample: samples[0], unit: unit),
        Row(name: "loop: performAndWakeUp → performAndWakeUp", sample: samples[1], unit: unit),
        Row(name: "ports: PortSet.receive (no loop)", sample: samples[2], unit: unit),
    ]
    for index in rows.indices {
        rows[index].addRatio(to: eventfdFloor, label: "eventfd")
        rows[index].addRatio(to: libeventFloor, label: "libevent")
    }
    return rows + [eventfdFloor, libeventFloor]
}

/// Times written by the loop threads and read after joining them.
final class RoundTripClock: @unchecked Sendable {
    var start: Int64 = 0
    var end: Int64 = 0
    var nanosecondsPerRoundTrip: Double = 0
}

/// One Source1 ping-pong run. A's loop sends round trip 0 before it starts running; the message carries
/// the round trip's number; A's handler starts the clock after `warmup` answers and stops it (and its
/// loop) at the last; B's handler stops B after echoing the last. Returns nanoseconds per round trip.
func loopSource1PingPong(warmup: Int, roundTrips: Int) -> Double {
    let portA = must("port A") { () throws(PortError) in try PortReceiveRight(maxMessageSize: 8) }
    let portB = must("port B") { () throws(PortError) in try PortReceiveRight(maxMessageSize: 8) }
    let toA = portA.makeSendRight()
    let toB = portB.makeSendRight()
    let total = UInt64(warmup + roundTrips)
    let clock = RoundTripClock()

    let sourceB = RunLoopPortSource(port: portB) { message in
        let index = loadWord(message.payload)
        sendWord(toA, index)
        if index == total - 1 { PortRunLoop.current.stop() }
        return nil
    }
    let sourceA = RunLoopPortSource(port: portA) { message in
        let answered = loadWord(message.payload) + 1 // round trips complete
        if answered == UInt64(warmup) { clock.start = bf_now_ns() }
        if answered == total {
            clock.end = bf_now_ns()
            PortRunLoop.current.stop()
            return nil
        }
        sendWord(toB, answered)
        return nil
    }

    let threadB = LoopThread { loop in mustLoop("add source B") { () throws(RunLoopError) in try loop.add(sourceB, mode: .default) } }
    let threadA = LoopThread { loop in
        mustLoop("add source A") { () throws(RunLoopError) in try loop.add(sourceA, mode: .default) }
        clock.start = bf_now_ns() // replaced after the warm-up, if any
        sendWord(toB, 0)
    }
    threadA.join()
    threadB.join()
    return Double(clock.end - clock.start) / Double(roundTrips)
}

/// The state of a block ping-pong: both loops, the counts, the clock.
final class BlockPingPong: @unchecked Sendable {
    let warmup: Int
    let total: Int
    let clock = RoundTripClock()
    /// Set before any block runs (B's by the creating thread, A's on A before it runs).
    var loopA: PortRunLoop?
    var loopB: PortRunLoop?

    init(warmup: Int, total: Int) {
        self.warmup = warmup
        self.total = total
    }

    /// On A, with `completed` round trips done: starts the next, or stops both loops after the last.
    func ping(_ completed: Int) {
        guard let loopA, let loopB else { fatalError("loops not set") }
        if completed == warmup { clock.start = bf_now_ns() }
        if completed == total {
            clock.end = bf_now_ns()
            loopB.stop()
            loopA.stop()
            return
        }
        mustLoop("perform on B") { () throws(RunLoopError) in
            try loopB.performAndWakeUp {
                mustLoop("perform on A") { () throws(RunLoopError) in
                    try loopA.performAndWakeUp { self.ping(completed + 1) }
                }
            }
        }
    }
}

/// One performAndWakeUp ping-pong run. Each loop has an idle port source so that it sleeps between
/// blocks. Returns nanoseconds per round trip.
func loopBlockPingPong(warmup: Int, roundTrips: Int) -> Double {
    let state = BlockPingPong(warmup: warmup, total: warmup + roundTrips)
    let threadB = LoopThread { loop in
        mustLoop("add keep-alive B") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
    }
    state.loopB = threadB.loop
    let threadA = LoopThread { loop in
        mustLoop("add keep-alive A") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
        state.loopA = loop
        state.clock.start = bf_now_ns() // replaced after the warm-up, if any
        mustLoop("first block") { () throws(RunLoopError) in try loop.perform { state.ping(0) } }
    }
    threadA.join()
    threadB.join()
    return Double(state.clock.end - state.clock.start) / Double(roundTrips)
}
