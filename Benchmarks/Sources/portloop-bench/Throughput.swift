import CBenchFloors
import PortLoop

/// `throughput`: one producer thread streams work to one consumer, in messages per second.
///
/// PortLoop's run loop (ThroughputLoops.swift): 8-byte port messages to a `RunLoopPortSource` (queue limit
/// 1024, the producer's sends wait for room), and `performAndWakeUp` blocks. Peers, in the same rounds:
/// CFRunLoop `CFRunLoopPerformBlock` + `CFRunLoopWakeUp`, SwiftNIO `EventLoop.execute`, and
/// `DispatchQueue.async` on a serial queue (blocks and tasks queue without bound, so those producers never
/// wait). PortLoop's ports without a loop: a thread receiving on the port, and on a one-port `PortSet`.
/// Floor: one eventfd write per message. Side figures: passes that slept per message (the loops'
/// `afterWaiting`), the set's sleeps and wake-ups per message, and each unbounded producer's own time
/// per call.
let throughputScenario = Scenario(
    name: "throughput",
    summary: "one producer to one consumer: run loops (ours, CF, NIO), a serial DispatchQueue, ports, C floor"
) { settings in
    let messages = settings.quick ? 200_000 : 1_000_000
    let perSecond = { (seconds: Double) in Double(messages) / seconds }
    let side = SideFigures()
    let perMessage = { (count: Int) in Double(count) / Double(messages) }
    let nanosecondsPerCall = { (seconds: Double) in seconds * 1e9 / Double(messages) }

    let samples = checkingDescriptors("throughput") {
        measureInterleaved(runs: settings.runs, [
            {
                let run = loopSource1Throughput(messages: messages)
                side.record("source1 passes", perMessage(run.sleeps))
                return perSecond(run.seconds)
            },
            {
                let run = loopBlockThroughput(blocks: messages)
                side.record("blocks passes", perMessage(run.sleeps))
                side.record("blocks producer", nanosecondsPerCall(run.producerSeconds))
                return perSecond(run.seconds)
            },
            {
                let run = cfBlockThroughput(blocks: messages)
                side.record("cf passes", perMessage(run.sleeps))
                side.record("cf producer", nanosecondsPerCall(run.producerSeconds))
                return perSecond(run.seconds)
            },
            {
                let run = nioExecuteThroughput(tasks: messages)
                side.record("nio producer", nanosecondsPerCall(run.producerSeconds))
                return perSecond(run.seconds)
            },
            {
                let run = dispatchThroughput(blocks: messages)
                side.record("dispatch producer", nanosecondsPerCall(run.producerSeconds))
                return perSecond(run.seconds)
            },
            { perSecond(portThroughput(messages: messages, viaSet: false).seconds) },
            {
                let run = portThroughput(messages: messages, viaSet: true)
                side.record("set sleeps", Double(run.sleeps) / Double(messages))
                side.record("set wake-ups", Double(run.wakeUps) / Double(messages))
                return perSecond(run.seconds)
            },
            {
                let elapsed = bf_eventfd_counter_throughput(UInt64(messages))
                return perSecond(floorNanoseconds("eventfd counter", elapsed, per: 1) / 1e9)
            },
        ])
    }
    let unit = "msg/s"
    let rows = [
        Row(.ours, "loop: Source1, producer sends", sample: samples[0], unit: unit, decimals: 0),
        Row(.ours, "loop: blocks, producer performAndWakeUp", sample: samples[1], unit: unit, decimals: 0),
        Row(.peer, "CF: CFRunLoopPerformBlock + CFRunLoopWakeUp", sample: samples[2], unit: unit, decimals: 0,
            short: "CF blocks"),
        Row(.peer, "NIO: EventLoop.execute", sample: samples[3], unit: unit, decimals: 0, short: "NIO"),
        Row(.peer, "dispatch: DispatchQueue.async, serial queue", sample: samples[4], unit: unit, decimals: 0,
            short: "dispatch"),
        Row(.ours, "ports: receive(into:) on the port (no loop)", sample: samples[5], unit: unit, decimals: 0),
        Row(.ours, "ports: PortSet.receive(into:) (no loop)", sample: samples[6], unit: unit, decimals: 0),
        Row(.floor, "C floor: eventfd write per message", sample: samples[7], unit: unit, decimals: 0,
            short: "eventfd"),
    ].withPeerRatios()
    let counters = [
        Row(.counter, "loop: Source1, passes that slept per message", sample: side.sample("source1 passes"),
            unit: "per msg", decimals: 5),
        Row(.counter, "loop: blocks, passes that slept per block", sample: side.sample("blocks passes"),
            unit: "per msg", decimals: 5),
        Row(.counter, "CF: passes that slept per block", sample: side.sample("cf passes"), unit: "per msg",
            decimals: 5),
        Row(.counter, "PortSet: sleeps per message", sample: side.sample("set sleeps"), unit: "per msg",
            decimals: 5),
        Row(.counter, "PortSet: wake-ups per message", sample: side.sample("set wake-ups"),
            unit: "per msg", decimals: 5),
        Row(.counter, "loop: producer time per performAndWakeUp", sample: side.sample("blocks producer"),
            unit: "ns/call"),
        Row(.counter, "CF: producer time per CFRunLoopPerformBlock + CFRunLoopWakeUp",
            sample: side.sample("cf producer"), unit: "ns/call"),
        Row(.counter, "NIO: producer time per execute", sample: side.sample("nio producer"), unit: "ns/call"),
        Row(.counter, "dispatch: producer time per async", sample: side.sample("dispatch producer"),
            unit: "ns/call"),
    ]
    return rows + counters
}

/// One throughput run through PortLoop: the time from the first send to the consumer's last receive, and
/// (for a set) how often the consumer slept and how many wake-ups (eventfd writes or condition-variable
/// signals) the producer made meanwhile.
func portThroughput(messages: Int, viaSet: Bool) -> (seconds: Double, sleeps: UInt64, wakeUps: UInt64) {
    let port = SharedReceiveRight(must("data port") { () throws(PortError) in
        try PortReceiveRight(queueLimit: PortReceiveRight.maxQueueLimit)
    })
    let ready = must("ready port") { () throws(PortError) in try PortReceiveRight() }
    let toPort = port.right.makeSendRight()
    let toReady = ready.makeSendRight()
    let inbox = Inbox.make(port, viaSet: viaSet)
    let end = SharedValue<Int64>(0)

    let consumer = JoinableThread {
        withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
            inbox.receive(into: buffer) // the warm-up message: the consumer is running and has the set's base
            must("send ready") { () throws(PortError) in try toReady.send() }
            for _ in 0..<messages { inbox.receive(into: buffer) }
        }
        end.value = bf_now_ns()
    }

    var before: (sleeps: UInt64, wakeUps: UInt64) = (0, 0)
    var start: Int64 = 0
    withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
        buffer.storeBytes(of: UInt64.max, as: UInt64.self)
        must("send warm-up") { () throws(PortError) in try toPort.send(payload: UnsafeRawBufferPointer(buffer)) }
        _ = must("receive ready") { () throws(PortError) in try ready.receive() }
        before = inbox.set?.wakeStatistics ?? (0, 0)
        start = bf_now_ns()
        for index in 0..<messages {
            buffer.storeBytes(of: UInt64(index), as: UInt64.self)
            must("send") { () throws(PortError) in
                try toPort.send(payload: UnsafeRawBufferPointer(buffer), timeout: .forever)
            }
        }
    }
    consumer.join()
    let after: (sleeps: UInt64, wakeUps: UInt64) = inbox.set?.wakeStatistics ?? (0, 0)
    return (Double(end.value - start) / 1e9, after.sleeps - before.sleeps, after.wakeUps - before.wakeUps)
}
