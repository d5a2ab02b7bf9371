#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import PortLoop

/// `ipc-pingpong`: round-trip latency between run loops in two processes, in nanoseconds per round trip.
///
/// Every run starts a child process of this executable (IPCSupport.swift) that checks a service in, in a
/// namespace of the run's own, and serves it with a `RunLoopPortSource` on its main run loop whose handler
/// returns the 8-byte payload as its `PortReply`. This process looks the service up and bounces one token:
/// from a loop thread whose `RunLoopPortSource` sends the next request with its own port as the reply port
/// (both ends Source1); from a plain thread calling `request()` in a loop; and from a plain thread that sends
/// with a reply port of its own and waits in `receive(into:)`. Last, the Source1 ping-pong with both loops in
/// the low-latency mode (each polls for 200 µs before it sleeps). Floor, in the same rounds: two processes
/// (fork) ping-ponging 8-byte packets with blocking send/recv on a SOCK_SEQPACKET socketpair.
let ipcPingPongScenario = Scenario(
    name: "ipc-pingpong",
    summary: "round trip between run loops in two processes: Source1, request(), C floor (SOCK_SEQPACKET)"
) { settings in
    let roundTrips = settings.quick ? 5_000 : 50_000
    let warmup = settings.quick ? 200 : 1_000

    primeCrossProcess()
    let broken = BrokenRuns()
    let (sourceVariant, requestVariant, receiveVariant) = ("Source1", "request()", "send + receive(into:)")
    let socketVariant = "Source1, socket only"
    let spinVariant = "Source1, spin 200 µs"
    let samples = checkingDescriptors("ipc-pingpong") {
        measureInterleaved(runs: settings.runs, series: [
            "loop: Source1", "ports: request()", "ports: send + receive", "loop: Source1, socket only",
            "seqpacket floor", "loop: Source1, spin 200 µs",
        ], [
            {
                broken.retrying(sourceVariant) {
                    withEchoChild { ipcLoopPingPong($0, warmup: warmup, roundTrips: roundTrips) }
                }
            },
            {
                broken.retrying(requestVariant) {
                    withEchoChild { ipcRequestPingPong($0, warmup: warmup, roundTrips: roundTrips) }
                }
            },
            {
                broken.retrying(receiveVariant) {
                    withEchoChild { ipcReceivePingPong($0, warmup: warmup, roundTrips: roundTrips) }
                }
            },
            {
                broken.retrying(socketVariant) {
                    withRingsOff { withEchoChild { ipcLoopPingPong($0, warmup: warmup, roundTrips: roundTrips) } }
                }
            },
            { floorNanoseconds("seqpacket ping-pong", bf_seqpacket_pingpong(UInt64(warmup), UInt64(roundTrips)),
                               per: roundTrips) },
            {
                broken.retrying(spinVariant) {
                    withEchoChild(spin: lowLatencySpin) {
                        ipcLoopPingPong($0, warmup: warmup, roundTrips: roundTrips, spin: lowLatencySpin)
                    }
                }
            },
        ])
    }
    let unit = "ns/round trip"
    return [
        Row(.ours, "loop: Source1 port → Source1 service in another process", sample: samples[0], unit: unit),
        Row(.ours, "ports: request() from a thread → Source1 service in another process", sample: samples[1],
            unit: unit),
        Row(.ours, "ports: send + receive(into:) on a reply port → Source1 service in another process",
            sample: samples[2], unit: unit),
        Row(.ours, "loop: Source1 port → Source1 service in another process, socket only (sharedRings .never)",
            sample: samples[3], unit: unit),
        Row(.floor, "C floor: SOCK_SEQPACKET socketpair, two processes, blocking send/recv", sample: samples[4],
            unit: unit, short: "seqpacket"),
        Row(.ours, "loop: Source1 port → Source1 service in another process, both loops in low-latency mode (spin 200 µs)",
            sample: samples[5], unit: unit),
    ].withPeerRatios() + [sourceVariant, requestVariant, receiveVariant, socketVariant, spinVariant].map { variant in
        Row(.counter, "runs repeated, the connection to the child broke: \(variant)",
            value: Double(broken.counts[variant] ?? 0), unit: "runs", decimals: 0)
    }
}

/// `ipc-throughput`: one-way messages from one process to a run loop in another, in messages per second.
///
/// This process checks a service in (queue limit 1024, maximum message size 8) and serves it with a counting
/// `RunLoopPortSource` on a loop thread, or, without a loop, from a thread in `receive(into:)`; a child process
/// of this executable looks it up and sends 8-byte messages with timeout `.forever` (waiting for room when the
/// queue and its credit are used up). Floor: a forked child sending 8-byte packets with blocking send on a
/// SOCK_SEQPACKET socketpair, read by the caller with blocking recv. Side figure: the loop's passes that slept
/// (`afterWaiting`) per message.
let ipcThroughputScenario = Scenario(
    name: "ipc-throughput",
    summary: "one-way messages to a run loop in another process: Source1, ports, C floor (SOCK_SEQPACKET)"
) { settings in
    let messages = settings.quick ? 200_000 : 1_000_000
    let perSecond = { (seconds: Double) in Double(messages) / seconds }
    let side = SideFigures()

    primeCrossProcess()
    let samples = checkingDescriptors("ipc-throughput") {
        measureInterleaved(runs: settings.runs, [
            {
                let run = ipcSinkThroughput(messages: messages, loop: true)
                side.record("loop passes", Double(run.sleeps) / Double(messages))
                return perSecond(run.seconds)
            },
            { perSecond(ipcSinkThroughput(messages: messages, loop: false).seconds) },
            { perSecond(ipcSinkThroughput(messages: messages, loop: true, packs: true).seconds) },
            { perSecond(ipcSinkThroughput(messages: messages, loop: true, rings: false).seconds) },
            // Last, so that the descriptor count after the runs does not catch a loop thread still letting go.
            {
                let elapsed = bf_seqpacket_throughput(UInt64(messages))
                return perSecond(floorNanoseconds("seqpacket throughput", elapsed, per: 1) / 1e9)
            },
        ])
    }
    let unit = "msg/s"
    return [
        Row(.ours, "loop: Source1 service, sender in another process", sample: samples[0], unit: unit, decimals: 0),
        Row(.ours, "ports: receive(into:) on the service's port (no loop), sender in another process",
            sample: samples[1], unit: unit, decimals: 0),
        Row(.ours, "loop: Source1 service, sender in another process packing its stream (packsStreams)",
            sample: samples[2], unit: unit, decimals: 0),
        Row(.ours, "loop: Source1 service, sender in another process, socket only (sharedRings .never)",
            sample: samples[3], unit: unit, decimals: 0),
        Row(.floor, "C floor: SOCK_SEQPACKET send per message, two processes", sample: samples[4], unit: unit,
            decimals: 0, short: "seqpacket"),
    ].withPeerRatios() + [
        Row(.counter, "loop: Source1 service, passes that slept per message", sample: side.sample("loop passes"),
            unit: "per msg", decimals: 5),
    ]
}

/// Runs `body` with this process's connections kept to their sockets (`PortNamespace.sharedRings` `.never`): the
/// socket-only variants, beside the default where a busy connection moves to a shared-memory ring. This process
/// is the client there, and a client decides.
func withRingsOff<T>(_ body: () -> T) -> T {
    let saved = PortNamespace.sharedRings
    PortNamespace.sharedRings = .never
    defer { PortNamespace.sharedRings = saved }
    return body()
}

/// One untimed exchange with a child before the measured runs: the first look-up starts this process's
/// transport thread (with its descriptors, kept for the process's life), which the descriptor check must not
/// count as a leak.
func primeCrossProcess() {
    withEchoChild { service in
        _ = must("priming request") { () throws(PortError) in
            try service.request(id: IPCMessage.data, bytes: [0, 0, 0, 0, 0, 0, 0, 0], timeout: .seconds(10))
        }
        return 0
    }
}

/// Starts an echo child (``ChildEchoService``) whose port takes `maxMessageSize` bytes and whose loop spins for
/// `spin` before it sleeps, runs `body` with a right
/// to its service, then ends the child and cleans up. Every copy of the right `body` made is gone when it
/// returns, so that the connection can go. Returns nil, whatever `body` returned, when the connection broke
/// meanwhile.
@discardableResult
func withEchoChild(maxMessageSize: Int = 8, spin: Duration = .zero,
                   _ body: (PortSendRight) -> Double?) -> Double? {
    let echo = ChildEchoService(maxMessageSize: maxMessageSize, spin: spin)
    let result = body(echo.right)
    let broken = echo.isBroken
    echo.finish("ipc-pingpong")
    return broken ? nil : result
}

/// A payload buffer of a fixed size (at least 8 bytes, zeroed) whose first 8 bytes carry a word: what a
/// request of the cross-process scenarios sends. A class, so that a port source's handler can hold it.
final class RequestPayload: @unchecked Sendable {
    let bytes: UnsafeMutableRawBufferPointer

    init(size: Int) {
        precondition(size >= 8, "a request payload carries an 8-byte word")
        bytes = .allocate(byteCount: size, alignment: 8)
        bytes.initializeMemory(as: UInt8.self, repeating: 0)
    }

    deinit { bytes.deallocate() }

    /// Sends the payload, its first 8 bytes set to `value`, as an ``IPCMessage/data`` request whose reply goes
    /// to `replyPort`.
    @inline(__always)
    func send(_ right: PortSendRight, _ value: UInt64, replyPort: PortSendRight) {
        bytes.storeBytes(of: value, as: UInt64.self)
        must("send") { () throws(PortError) in
            try right.send(id: IPCMessage.data, payload: UnsafeRawBufferPointer(bytes), replyPort: replyPort,
                           timeout: .forever)
        }
    }
}

/// One Source1 ping-pong run across processes: as ``loopSource1PingPong(warmup:roundTrips:spin:)`` with B being
/// the child's echo service. A's loop sends round trip 0 before it starts running; every request carries A's
/// port as its reply port and `size` bytes (8 in ipc-pingpong; the service's port must take them); A's handler
/// starts the clock after `warmup` answers and stops its loop at the last. `spin` is A's
/// ``PortRunLoop/spinBeforeSleeping`` (the child's is its own, ``ChildEchoService``'s). `allocations`, when given, counts
/// this process's allocations over the timed round trips. Returns nanoseconds per round trip, or nil when the
/// connection broke (this thread looks once a second and then stops A's loop).
func ipcLoopPingPong(_ service: PortSendRight, warmup: Int, roundTrips: Int, size: Int = 8, spin: Duration = .zero,
                     allocations: AllocationWindow? = nil) -> Double? {
    let payload = RequestPayload(size: size)
    let portA = must("port A") { () throws(PortError) in try PortReceiveRight(maxMessageSize: size) }
    let toA = portA.makeSendRight()
    let done = must("done port") { () throws(PortError) in try PortReceiveRight(queueLimit: 1, maxMessageSize: 1) }
    let toDone = done.makeSendRight()
    let total = UInt64(warmup + roundTrips)
    let clock = RoundTripClock()

    let sourceA = RunLoopPortSource(port: portA) { message in
        let answered = loadWord(message.payload) + 1 // round trips complete
        clock.lap(Int(answered), warmup: warmup)
        if answered == UInt64(warmup) {
            allocations?.begin()
            clock.start = bf_now_ns()
        }
        if answered == total {
            clock.end = bf_now_ns()
            allocations?.end()
            PortRunLoop.current.stop()
            must("send done") { () throws(PortError) in try toDone.send(timeout: .poll) }
            return nil
        }
        payload.send(service, answered, replyPort: toA)
        return nil
    }
    let threadA = LoopThread { loop in
        loop.spinBeforeSleeping = spin
        mustLoop("add source A") { () throws(RunLoopError) in try loop.add(sourceA, mode: .default) }
        clock.start = bf_now_ns() // replaced after the warm-up, if any
        clock.lap(0, warmup: warmup)
        payload.send(service, 0, replyPort: toA)
    }
    let finished = waitOrBreak(done, service)
    if !finished { threadA.loop.stop() }
    threadA.join()
    return finished ? Double(clock.end - clock.start) / Double(roundTrips) : nil
}

/// Waits for a message on `done`; every second without one, looks whether the connection behind `service`
/// broke. Returns true when the message came, false when the connection broke first.
func waitOrBreak(_ done: borrowing PortReceiveRight, _ service: PortSendRight) -> Bool {
    while true {
        do throws(PortError) {
            _ = try done.receive(timeout: .seconds(1))
            return true
        } catch .timedOut {
            if service.isDeadName { return false }
        } catch {
            fatalError("receive done: \(error)")
        }
    }
}

/// One request() ping-pong run across processes: this thread (no loop) calls `request()` per round trip,
/// which makes a fresh reply port each time and waits on it. Returns nanoseconds per round trip.
func ipcRequestPingPong(_ service: PortSendRight, warmup: Int, roundTrips: Int) -> Double? {
    let clock = RoundTripClock()
    clock.lap(0, warmup: warmup)
    var start = bf_now_ns()
    for index in 0..<(warmup + roundTrips) {
        if index == warmup { start = bf_now_ns() }
        let reply: ReceivedMessage
        do throws(PortError) {
            reply = try service.request(id: IPCMessage.data, bytes: withUnsafeBytes(of: UInt64(index)) { Array($0) },
                                        timeout: .seconds(10))
        } catch {
            if service.isDeadName { return nil }
            fatalError("request: \(error)")
        }
        precondition(loadWord(reply.payload) == UInt64(index), "echo out of order")
        clock.lap(index + 1, warmup: warmup)
    }
    let end = bf_now_ns()
    return Double(end - start) / Double(roundTrips)
}

/// One ping-pong run across processes from a plain thread that sends with a long-lived reply port of its own
/// and waits for the echo in `receive(into:)` (no loop on this side, no port made per round trip).
/// Returns nanoseconds per round trip.
func ipcReceivePingPong(_ service: PortSendRight, warmup: Int, roundTrips: Int) -> Double? {
    let replies = must("reply port") { () throws(PortError) in try PortReceiveRight(maxMessageSize: 8) }
    let toReplies = replies.makeSendRight()
    let clock = RoundTripClock()
    clock.lap(0, warmup: warmup)
    var start = bf_now_ns()
    let completed = withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer -> Bool in
        for index in 0..<(warmup + roundTrips) {
            if index == warmup { start = bf_now_ns() }
            let failure = withUnsafeBytes(of: UInt64(index)) { raw -> PortError? in
                do throws(PortError) {
                    try service.send(id: IPCMessage.data, payload: raw, replyPort: toReplies, timeout: .forever)
                    return nil
                } catch {
                    return error
                }
            }
            if let failure {
                if service.isDeadName { return false }
                fatalError("send: \(failure)")
            }
            while true { // a second at a time, to notice a broken connection
                do throws(PortError) {
                    _ = try replies.receive(into: buffer, timeout: .seconds(1))
                    break
                } catch .timedOut {
                    if service.isDeadName { return false }
                } catch {
                    fatalError("receive(into:): \(error)")
                }
            }
            precondition(buffer.load(as: UInt64.self) == UInt64(index), "echo out of order")
            clock.lap(index + 1, warmup: warmup)
        }
        return true
    }
    let end = bf_now_ns()
    return completed ? Double(end - start) / Double(roundTrips) : nil
}

/// The receiving side of an ipc-throughput run, shared by the loop and the thread.
final class IPCSink: @unchecked Sendable {
    let messages: Int
    var count = 0
    var start: Int64 = 0
    var end: Int64 = 0
    var sleeps = 0
    var sleepsAtStart = 0
    let allocations: AllocationWindow?
    init(messages: Int, allocations: AllocationWindow? = nil) {
        self.messages = messages
        self.allocations = allocations
    }

    /// Handles one message: counts ``IPCMessage/data`` (the first carries the sender's clock), answers the
    /// warm-up and done requests. Returns the reply id to send, if any, and whether the run is over.
    @inline(__always)
    func handle(id: Int32, word: UInt64) -> (reply: Int32?, over: Bool) {
        switch id {
        case IPCMessage.data:
            count += 1
            if count == 1 {
                start = Int64(word)
                sleepsAtStart = sleeps
                allocations?.begin()
            }
            if count == messages {
                end = bf_now_ns()
                allocations?.end()
            }
            return (nil, false)
        case IPCMessage.warmUp: return (IPCMessage.warmUp + 100, false)
        case IPCMessage.done: return (IPCMessage.done + 100, true)
        default: fatalError("ipc-throughput: unexpected message id \(id)")
        }
    }
}

/// One ipc-throughput run: this process checks the service in (queue limit 1024) and receives on a loop
/// thread's `RunLoopPortSource` (`loop`) or on a plain thread in `receive(into:)`; a child sends `messages` of
/// `size` bytes. `allocations`, when given, counts this process's allocations from the first message to the
/// last. Returns the time from the child's first timed send to the last message's arrival at the handler (or
/// the receive), and (for the loop) how many passes slept meanwhile.
func ipcSinkThroughput(messages: Int, loop: Bool, size: Int = 8, packs: Bool = false, rings: Bool = true,
                       allocations: AllocationWindow? = nil) -> (seconds: Double, sleeps: Int) {
    let space = TemporaryNamespace()
    let sink = IPCSink(messages: messages, allocations: allocations)
    do {
        let port = must("checkIn") { () throws(PortError) in
            try space.namespace.checkIn(ipcServiceName, queueLimit: PortReceiveRight.maxQueueLimit,
                                        maxMessageSize: size)
        }
        if loop {
            let source = RunLoopPortSource(port: port) { message in
                let word = message.payload.isEmpty ? 0 : loadWord(message.payload)
                let (reply, over) = sink.handle(id: message.id, word: word)
                if over { PortRunLoop.current.stop() }
                return reply.map { PortReply(id: $0) }
            }
            let consumer = LoopThread { loop in
                mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) }
                mustLoop("add observer") { () throws(RunLoopError) in
                    let observer = RunLoopObserver(activities: .afterWaiting) { _, _ in sink.sleeps += 1 }
                    try loop.add(observer, mode: .default)
                }
            }
            // Packing is the socket's: a sender that packs keeps to it.
            let child = BenchChild(role: "send", [space.path, ipcServiceName, "\(messages)", "\(size)"]
                                   + (packs ? ["--pack"] : []) + (packs || !rings ? ["--no-rings"] : []))
            let status = child.finish(within: 600)
            if status != 0 { consumer.loop.stop() }
            consumer.join()
            source.invalidate()
            guard status == 0 else { fatalError("ipc-throughput: the sending child failed") }
        } else {
            let shared = SharedReceiveRight(port)
            let receiver = JoinableThread {
                withUnsafeTemporaryAllocation(byteCount: size, alignment: 8) { buffer in
                    while true {
                        let header = must("receive(into:)") { () throws(PortError) in
                            try shared.right.receive(into: buffer, timeout: .seconds(60))
                        }
                        let word = header.size >= 8 ? buffer.load(as: UInt64.self) : 0
                        let (reply, over) = sink.handle(id: header.id, word: word)
                        if let reply, let replyPort = header.replyPort {
                            must("reply") { () throws(PortError) in
                                try replyPort.send(id: reply, timeout: .seconds(10))
                            }
                        }
                        if over { break }
                    }
                }
            }
            // Packing is the socket's: a sender that packs keeps to it.
            let child = BenchChild(role: "send", [space.path, ipcServiceName, "\(messages)", "\(size)"]
                                   + (packs ? ["--pack"] : []) + (packs || !rings ? ["--no-rings"] : []))
            let status = child.finish(within: 600)
            guard status == 0 else { fatalError("ipc-throughput: the sending child failed") }
            receiver.join()
        }
    }
    space.remove("ipc-throughput")
    waitForNoConnections("ipc-throughput")
    precondition(sink.count == messages, "ipc-throughput: \(sink.count) of \(messages) messages arrived")
    return (Double(sink.end - sink.start) / 1e9, sink.sleeps - sink.sleepsAtStart)
}
