import CBenchFloors
import CoreFoundation
import Histogram
import NIOCore
import NIOPosix
import PortLoop

// The event-loop variants of the `pingpong` scenario: a token bounced between two threads that each run
// an event loop, PortLoop's (Source1 ports, performAndWakeUp blocks) and the peers' (CFRunLoop blocks and
// version-0 sources, NIO's execute). Each returns nanoseconds per round trip, warm-up excluded; each creates
// its loops (threads) per run and tears them down after.

/// Times written by the loop threads and read after joining them; and each round trip's time (`laps`, only
/// on the side calling `lap`), for the latency histograms (Latency.swift).
///
/// A lap is a clock read and a store, as the C floors' laps are, so that timing costs every variant alike; the
/// histogram is made after the run (the properties skip the run-time exclusivity checks, which would cost a
/// round trip more than the lap itself).
final class RoundTripClock: @unchecked Sendable {
    var start: Int64 = 0
    var end: Int64 = 0
    var nanosecondsPerRoundTrip: Double = 0
    @exclusivity(unchecked) private var lapTimes: [Int64] = []
    @exclusivity(unchecked) private var previous: Int64 = 0

    /// Laps kept without growing the array: the most a scenario times in one run.
    static let reservedLaps = 60_000

    init() {
        lapTimes.reserveCapacity(Self.reservedLaps)
        LatencyHistograms.shared.clockMade(self)
    }

    /// Called on the sending side when `completed` round trips are complete (0 when the first is sent): keeps
    /// the time since the previous call if the round trip that just completed came after the warm-up.
    @inline(__always)
    func lap(_ completed: Int, warmup: Int) {
        let now = bf_now_ns()
        if completed > warmup && previous != 0 { lapTimes.append(now - previous) }
        previous = now
    }

    /// Keeps laps timed elsewhere (a C floor's), in nanoseconds.
    func keep(laps: UnsafeBufferPointer<Int64>) { lapTimes.append(contentsOf: laps) }

    /// The laps kept so far (call after the run).
    var laps: Histogram<UInt64> {
        var histogram = LatencyHistograms.makeHistogram()
        for lap in lapTimes { _ = histogram.record(UInt64(max(0, lap))) }
        return histogram
    }
}

/// One Source1 ping-pong run. A's loop sends round trip 0 before it starts running; the message carries
/// the round trip's number; A's handler starts the clock after `warmup` answers and stops it (and its
/// loop) at the last; B's handler stops B after echoing the last. Returns nanoseconds per round trip.
/// `spin` sets both loops' opt-in low-latency mode (``PortRunLoop/spinBeforeSleeping``); zero is the default.
func loopSource1PingPong(warmup: Int, roundTrips: Int, spin: Duration = .zero) -> Double {
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
        clock.lap(Int(answered), warmup: warmup)
        if answered == UInt64(warmup) { clock.start = bf_now_ns() }
        if answered == total {
            clock.end = bf_now_ns()
            PortRunLoop.current.stop()
            return nil
        }
        sendWord(toB, answered)
        return nil
    }

    let threadB = LoopThread { loop in
        loop.spinBeforeSleeping = spin
        mustLoop("add source B") { () throws(RunLoopError) in try loop.add(sourceB, mode: .default) }
    }
    let threadA = LoopThread { loop in
        loop.spinBeforeSleeping = spin
        mustLoop("add source A") { () throws(RunLoopError) in try loop.add(sourceA, mode: .default) }
        clock.start = bf_now_ns() // replaced after the warm-up, if any
        clock.lap(0, warmup: warmup)
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
        clock.lap(completed, warmup: warmup)
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

/// One CFRunLoop block ping-pong run: A queues `CFRunLoopPerformBlock(B) { CFRunLoopPerformBlock(A) { next } }`
/// with a `CFRunLoopWakeUp` after each, as ``loopBlockPingPong(warmup:roundTrips:)`` does with
/// `performAndWakeUp`. Each loop is kept alive by an unsignalled version-0 source.
func cfBlockPingPong(warmup: Int, roundTrips: Int) -> Double {
    final class State: @unchecked Sendable {
        let warmup: Int, total: Int
        let clock = RoundTripClock()
        var loopA: CFLoop?
        var loopB: CFLoop?
        init(warmup: Int, total: Int) { self.warmup = warmup; self.total = total }

        func ping(_ completed: Int) {
            guard let loopA, let loopB else { fatalError("loops not set") }
            clock.lap(completed, warmup: warmup)
            if completed == warmup { clock.start = bf_now_ns() }
            if completed == total {
                clock.end = bf_now_ns()
                loopB.stop()
                loopA.stop()
                return
            }
            loopB.performAndWakeUp { loopA.performAndWakeUp { self.ping(completed + 1) } }
        }
    }
    let state = State(warmup: warmup, total: warmup + roundTrips)
    let threadB = CFLoopThread()
    state.loopB = threadB.loop
    let threadA = CFLoopThread { loop in
        state.loopA = loop
        state.clock.start = bf_now_ns() // replaced after the warm-up, if any
        CFRunLoopPerformBlock(loop.loop, kCFRunLoopDefaultMode) { state.ping(0) }
    }
    threadA.join()
    threadB.join()
    return Double(state.clock.end - state.clock.start) / Double(roundTrips)
}

/// One CFRunLoop version-0 source ping-pong run: each loop has a source; A's perform signals B's source
/// and wakes B (`CFRunLoopSourceSignal` + `CFRunLoopWakeUp`), B's does the same back. No allocation per
/// round trip on CF's side: the closest CF gets to a port message between two loops on Linux (CF has no
/// Mach ports there).
func cfSource0PingPong(warmup: Int, roundTrips: Int) -> Double {
    final class State: @unchecked Sendable {
        let warmup: Int, total: Int
        let clock = RoundTripClock()
        var answered = 0
        var loopA: CFLoop?, loopB: CFLoop?
        var sourceA: CFSource?, sourceB: CFSource?
        init(warmup: Int, total: Int) { self.warmup = warmup; self.total = total }

        /// B's perform: answer A, or stop after echoing the last.
        func onB() {
            CFRunLoopSourceSignal(sourceA!.source)
            CFRunLoopWakeUp(loopA!.loop)
        }

        /// A's perform: one more round trip complete.
        func onA() {
            answered += 1
            clock.lap(answered, warmup: warmup)
            if answered == warmup { clock.start = bf_now_ns() }
            if answered == total {
                clock.end = bf_now_ns()
                loopB!.stop()
                loopA!.stop()
                return
            }
            sendToB()
        }

        func sendToB() {
            CFRunLoopSourceSignal(sourceB!.source)
            CFRunLoopWakeUp(loopB!.loop)
        }
    }
    let state = State(warmup: warmup, total: warmup + roundTrips)
    let threadB = CFLoopThread { loop in
        let source = makeCFSource0 { state.onB() }
        CFRunLoopAddSource(loop.loop, source, kCFRunLoopDefaultMode)
        state.sourceB = CFSource(source)
        state.loopB = loop
    }
    let threadA = CFLoopThread { loop in
        let source = makeCFSource0 { state.onA() }
        CFRunLoopAddSource(loop.loop, source, kCFRunLoopDefaultMode)
        state.sourceA = CFSource(source)
        state.loopA = loop
        state.clock.start = bf_now_ns() // replaced after the warm-up, if any
        state.sendToB()
    }
    threadA.join()
    threadB.join()
    for source in [state.sourceA, state.sourceB] { CFRunLoopSourceInvalidate(source!.source) }
    // Each source's closure holds the state, which holds the sources and loops: break the cycle, or both
    // loops (and their descriptors) outlive their threads.
    state.sourceA = nil
    state.sourceB = nil
    state.loopA = nil
    state.loopB = nil
    return Double(state.clock.end - state.clock.start) / Double(roundTrips)
}

/// One SwiftNIO ping-pong run between two event loops of one `MultiThreadedEventLoopGroup`: A calls
/// `loopB.execute { loopA.execute { next } }`. Returns nanoseconds per round trip.
func nioPingPong(warmup: Int, roundTrips: Int) -> Double {
    final class State: @unchecked Sendable {
        let warmup: Int, total: Int
        let loopA: EventLoop, loopB: EventLoop
        let clock = RoundTripClock()
        let done = Latch<Bool>()
        init(warmup: Int, total: Int, loopA: EventLoop, loopB: EventLoop) {
            self.warmup = warmup; self.total = total; self.loopA = loopA; self.loopB = loopB
        }

        func ping(_ completed: Int) {
            clock.lap(completed, warmup: warmup)
            if completed == warmup { clock.start = bf_now_ns() }
            if completed == total {
                clock.end = bf_now_ns()
                done.set(true)
                return
            }
            loopB.execute { self.loopA.execute { self.ping(completed + 1) } }
        }
    }
    let nio = NIOLoops(threads: 2)
    let state = State(warmup: warmup, total: warmup + roundTrips, loopA: nio.loops[0], loopB: nio.loops[1])
    state.loopA.execute {
        state.clock.start = bf_now_ns() // replaced after the warm-up, if any
        state.ping(0)
    }
    _ = state.done.wait()
    nio.shutDown()
    return Double(state.clock.end - state.clock.start) / Double(roundTrips)
}
