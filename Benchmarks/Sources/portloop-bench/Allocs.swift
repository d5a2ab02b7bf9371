import CBenchFloors
import CBenchSupport
import CoreFoundation
import Dispatch
import NIOCore
import NIOPosix
import PortLoop

/// `allocs`: heap allocations per message in steady state, counted by the executable's own malloc
/// (CBenchSupport: every malloc, calloc, realloc and aligned allocation in the process, whichever thread,
/// while counting is on). Each run first sends a warm-up batch (caches, ring growth, first-pass set-up),
/// then counts over the measured batch and divides by its size. Blocks and tasks are non-capturing closures
/// (they count through globals), so a closure context is never what is counted; what a peer's API does with
/// the closure (CF copies it to a heap block) is.
/// - loop, Source1, streamed: a producer floods a `RunLoopPortSource` (queue limit 1024) with 8-byte messages,
///   and with empty ones; the loop drains up to 64 per pass.
/// - loop, Source1, one per pass: a thread sends 8 bytes to the source and waits for the handler's 8-byte
///   echo on its own port (`receive(into:)`): every message is a pass of its own. Per round trip.
/// - loop, performAndWakeUp, streamed and one per pass (the block echoes on a port), likewise; and streamed
///   with one `[.common]` modes array made once and passed each time (the default argument is an array
///   literal, built per call), which shows what that default costs.
/// - Peers, streamed: CF `CFRunLoopPerformBlock` + `CFRunLoopWakeUp`, NIO `execute`, `DispatchQueue.async`.
let allocsScenario = Scenario(
    name: "allocs",
    summary: "heap allocations per message in steady state (ours, CF, NIO, dispatch)"
) { settings in
    guard bs_alloc_interposed() != 0 else {
        printError("allocs: the executable's malloc is not the process's (symbol interposition failed); skipped")
        return []
    }
    let messages = settings.quick ? 20_000 : 100_000
    let roundTrips = settings.quick ? 5_000 : 20_000
    let warmup = 2_000

    let samples = measureInterleaved(runs: settings.runs, [
        { allocsSource1Streamed(warmup: warmup, messages: messages, payloadBytes: 8) },
        { allocsSource1Streamed(warmup: warmup, messages: messages, payloadBytes: 0) },
        { allocsSource1OnePerPass(warmup: warmup, roundTrips: roundTrips) },
        { allocsBlocksStreamed(warmup: warmup, blocks: messages, reusedModes: false) },
        { allocsBlocksStreamed(warmup: warmup, blocks: messages, reusedModes: true) },
        { allocsBlocksOnePerPass(warmup: warmup, roundTrips: roundTrips) },
        { allocsCFBlocksStreamed(warmup: warmup, blocks: messages) },
        { allocsNIOExecuteStreamed(warmup: warmup, tasks: messages) },
        { allocsDispatchStreamed(warmup: warmup, blocks: messages) },
    ])
    let unit = "allocs/msg", key = "allocs"
    return [
        Row(.ours, "loop: port → Source1, 8-byte payload, streamed", sample: samples[0], unit: unit, decimals: 3, key: key),
        Row(.ours, "loop: port → Source1, empty payload, streamed", sample: samples[1], unit: unit, decimals: 3, key: key),
        Row(.ours, "loop: port → Source1 → echo port, one per pass (per round trip)", sample: samples[2],
            unit: "allocs/round trip", decimals: 3, key: key),
        Row(.ours, "loop: performAndWakeUp, streamed", sample: samples[3], unit: unit, decimals: 3, key: key),
        Row(.ours, "loop: performAndWakeUp(inModes: one reused [.common] array), streamed", sample: samples[4],
            unit: unit, decimals: 3, key: key),
        Row(.ours, "loop: performAndWakeUp → echo port, one per pass (per round trip)", sample: samples[5],
            unit: "allocs/round trip", decimals: 3, key: key),
        Row(.peer, "CF: CFRunLoopPerformBlock + CFRunLoopWakeUp, streamed", sample: samples[6], unit: unit,
            decimals: 3, short: "CF blocks", key: key),
        Row(.peer, "NIO: EventLoop.execute, streamed", sample: samples[7], unit: unit, decimals: 4, short: "NIO",
            key: key),
        Row(.peer, "dispatch: DispatchQueue.async, serial queue, streamed", sample: samples[8], unit: unit,
            decimals: 3, short: "dispatch", key: key),
    ].withPeerRatios()
}

/// Counts allocations while `body` runs; returns them per `items`.
func allocationsPer(_ items: Int, _ body: () -> Void) -> Double {
    bs_alloc_counting(1)
    let before = bs_alloc_count()
    body()
    let after = bs_alloc_count()
    bs_alloc_counting(0)
    return Double(after - before) / Double(items)
}

/// What the non-capturing blocks and handlers of a run count with (one run at a time).
final class AllocsRun: @unchecked Sendable {
    var count = 0
    var warmup = 0
    var target = 0
    let warmed = Latch<Bool>()
    let done = Latch<Bool>()
    var echo: PortSendRight?

    /// Counts one item: marks the end of the warm-up and of the run.
    @inline(__always)
    func tick() {
        count += 1
        if count == warmup { warmed.set(true) }
        if count == target { done.set(true) }
    }
}

/// The current run's state, reached from non-capturing closures. Set before a run's threads start, read by
/// them only after (thread creation orders it).
nonisolated(unsafe) var allocsRun = AllocsRun()

func allocsSource1Streamed(warmup: Int, messages: Int, payloadBytes: Int) -> Double {
    let run = AllocsRun()
    run.warmup = warmup
    run.target = warmup + messages
    allocsRun = run
    let port = must("port") { () throws(PortError) in
        try PortReceiveRight(queueLimit: PortReceiveRight.maxQueueLimit, maxMessageSize: 8)
    }
    let toPort = port.makeSendRight()
    let source = RunLoopPortSource(port: port) { _ in
        allocsRun.tick()
        return nil
    }
    let consumer = LoopThread { loop in mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) } }
    let send = { (value: UInt64) in
        if payloadBytes == 0 {
            must("send") { () throws(PortError) in try toPort.send(timeout: .forever) }
        } else {
            sendWord(toPort, value)
        }
    }
    for index in 0..<warmup { send(UInt64(index)) }
    _ = run.warmed.wait()
    let perMessage = allocationsPer(messages) {
        for index in 0..<messages { send(UInt64(index)) }
        _ = run.done.wait()
    }
    consumer.loop.stop()
    consumer.join()
    return perMessage
}

func allocsSource1OnePerPass(warmup: Int, roundTrips: Int) -> Double {
    let back = SharedReceiveRight(must("echo port") { () throws(PortError) in try PortReceiveRight() })
    let run = AllocsRun()
    run.echo = back.right.makeSendRight()
    allocsRun = run
    let source = must("source") { () throws(PortError) in
        try RunLoopPortSource(queueLimit: 1, maxMessageSize: 8) { message in
            sendWord(allocsRun.echo!, loadWord(message.payload))
            return nil
        }
    }
    let toSource = source.makeSendRight()
    let consumer = LoopThread { loop in mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) } }
    _ = timePingPong(to: toSource, from: back, warmup: 0, roundTrips: warmup)
    let perRoundTrip = allocationsPer(roundTrips) {
        _ = timePingPong(to: toSource, from: back, warmup: 0, roundTrips: roundTrips)
    }
    consumer.loop.stop()
    consumer.join()
    return perRoundTrip
}

func allocsBlocksStreamed(warmup: Int, blocks: Int, reusedModes: Bool) -> Double {
    let run = AllocsRun()
    run.warmup = warmup
    run.target = warmup + blocks
    allocsRun = run
    let consumer = LoopThread { loop in
        mustLoop("add keep-alive") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
    }
    let loop = consumer.loop
    let common: [PortRunLoop.Mode] = [.common]
    let perform = {
        mustLoop("performAndWakeUp") { () throws(RunLoopError) in
            if reusedModes {
                try loop.performAndWakeUp(inModes: common) { allocsRun.tick() }
            } else {
                try loop.performAndWakeUp { allocsRun.tick() }
            }
        }
    }
    for _ in 0..<warmup { perform() }
    _ = run.warmed.wait()
    let perBlock = allocationsPer(blocks) {
        for _ in 0..<blocks { perform() }
        _ = run.done.wait()
    }
    loop.stop()
    consumer.join()
    return perBlock
}

func allocsBlocksOnePerPass(warmup: Int, roundTrips: Int) -> Double {
    let back = SharedReceiveRight(must("echo port") { () throws(PortError) in try PortReceiveRight() })
    let run = AllocsRun()
    run.echo = back.right.makeSendRight()
    allocsRun = run
    let consumer = LoopThread { loop in
        mustLoop("add keep-alive") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
    }
    let loop = consumer.loop
    let pingPong = { (count: Int) in
        withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
            for _ in 0..<count {
                mustLoop("performAndWakeUp") { () throws(RunLoopError) in
                    try loop.performAndWakeUp { sendWord(allocsRun.echo!, 1) }
                }
                _ = must("receive(into:)") { () throws(PortError) in try back.right.receive(into: buffer, timeout: .forever) }
            }
        }
    }
    pingPong(warmup)
    let perRoundTrip = allocationsPer(roundTrips) { pingPong(roundTrips) }
    loop.stop()
    consumer.join()
    return perRoundTrip
}

func allocsCFBlocksStreamed(warmup: Int, blocks: Int) -> Double {
    let run = AllocsRun()
    run.warmup = warmup
    run.target = warmup + blocks
    allocsRun = run
    let consumer = CFLoopThread()
    let loop = consumer.loop
    for _ in 0..<warmup { loop.performAndWakeUp { allocsRun.tick() } }
    _ = run.warmed.wait()
    let perBlock = allocationsPer(blocks) {
        for _ in 0..<blocks { loop.performAndWakeUp { allocsRun.tick() } }
        _ = run.done.wait()
    }
    loop.stop()
    consumer.join()
    return perBlock
}

func allocsNIOExecuteStreamed(warmup: Int, tasks: Int) -> Double {
    let run = AllocsRun()
    run.warmup = warmup
    run.target = warmup + tasks
    allocsRun = run
    let nio = NIOLoops(threads: 1)
    let loop = nio.loops[0]
    for _ in 0..<warmup { loop.execute { allocsRun.tick() } }
    _ = run.warmed.wait()
    let perTask = allocationsPer(tasks) {
        for _ in 0..<tasks { loop.execute { allocsRun.tick() } }
        _ = run.done.wait()
    }
    nio.shutDown()
    return perTask
}

func allocsDispatchStreamed(warmup: Int, blocks: Int) -> Double {
    let run = AllocsRun()
    run.warmup = warmup
    run.target = warmup + blocks
    allocsRun = run
    let queue = DispatchQueue(label: "portloop-bench.allocs")
    for _ in 0..<warmup { queue.async { allocsRun.tick() } }
    _ = run.warmed.wait()
    let perBlock = allocationsPer(blocks) {
        for _ in 0..<blocks { queue.async { allocsRun.tick() } }
        _ = run.done.wait()
    }
    return perBlock
}
