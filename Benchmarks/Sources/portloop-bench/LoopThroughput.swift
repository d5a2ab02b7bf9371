import CBenchFloors
import PortLoop

/// `loopthroughput`: one producer thread feeding one run loop thread, in messages (or blocks) per second.
///
/// - Source1: the producer sends 8-byte messages (send timeout `.forever`) to a `RunLoopPortSource` with
///   queue limit 1024; the loop's handler counts them and stops the loop at the last.
/// - blocks: the producer calls `performAndWakeUp` with a closure that increments a counter; the loop
///   stops when the counter reaches the count. Blocks queue without bound, so the producer never waits;
///   its own cost per call is reported too.
/// Each loop counts its `afterWaiting` activities with an observer: one per pass that went to receive with
/// a sleep allowed (the receive returns at once if something is queued already), so per message they show
/// how many messages a pass handles (up to 64 queued messages, and every queued block, per pass).
/// Beside them, measured in the same run: the `throughput` scenario's `PortSet.receive` consumer (the port
/// layer without the loop) and its C floor, one eventfd write per message.
let loopThroughputScenario = Scenario(
    name: "loopthroughput",
    summary: "one producer to one run loop: Source1 messages (queue limit 1024), performAndWakeUp blocks"
) { settings in
    let messages = settings.quick ? 200_000 : 2_000_000
    let perSecond = { (seconds: Double) in Double(messages) / seconds }

    // Per-run extras, one per round (the first round is the discarded warm-up).
    var source1Sleeps: [Double] = []
    var blockSleeps: [Double] = []
    var producerNanoseconds: [Double] = []
    let samples = checkingDescriptors("loopthroughput") {
        measureInterleaved(runs: settings.runs, [
            {
                let run = loopSource1Throughput(messages: messages)
                source1Sleeps.append(Double(run.sleeps) / Double(messages))
                return perSecond(run.seconds)
            },
            {
                let run = loopBlockThroughput(blocks: messages)
                blockSleeps.append(Double(run.sleeps) / Double(messages))
                producerNanoseconds.append(run.producerSeconds * 1e9 / Double(messages))
                return perSecond(run.seconds)
            },
            { perSecond(portThroughput(messages: messages, viaSet: true).seconds) },
            {
                let elapsed = bf_eventfd_counter_throughput(UInt64(messages))
                return perSecond(floorNanoseconds("eventfd counter", elapsed, per: 1) / 1e9)
            },
        ])
    }
    // Drop the discarded warm-up round's extras.
    source1Sleeps.removeFirst()
    blockSleeps.removeFirst()
    producerNanoseconds.removeFirst()

    let unit = "msg/s"
    let floor = Row(name: "C floor: eventfd write per message", sample: samples[3], unit: unit, decimals: 0)
    let portSet = Row(name: "ports: PortSet.receive (no loop)", sample: samples[2], unit: unit, decimals: 0)
    var rows = [
        Row(name: "loop: Source1, producer sends", sample: samples[0], unit: unit, decimals: 0),
        Row(name: "loop: blocks, producer performAndWakeUp", sample: samples[1], unit: unit, decimals: 0),
    ]
    for index in rows.indices {
        rows[index].addRatio(to: floor, label: "eventfd")
        rows[index].addRatio(to: portSet, label: "PortSet")
    }
    var portSetRow = portSet
    portSetRow.addRatio(to: floor, label: "eventfd")
    rows.append(portSetRow)
    rows.append(Row(name: "loop: Source1, afterWaiting per message",
                    sample: Sample(values: source1Sleeps), unit: "per msg", decimals: 5))
    rows.append(Row(name: "loop: blocks, afterWaiting per block",
                    sample: Sample(values: blockSleeps), unit: "per msg", decimals: 5))
    rows.append(Row(name: "loop: blocks, producer time per performAndWakeUp",
                    sample: Sample(values: producerNanoseconds), unit: "ns/call"))
    return rows + [floor]
}

/// Counters of a throughput run, touched only by the loop thread until it is joined.
final class LoopCounter: @unchecked Sendable {
    let target: Int
    var count = 0
    var sleeps = 0
    var sleepsAtStart = 0
    var end: Int64 = 0
    init(target: Int) { self.target = target }

    /// An observer counting `afterWaiting`: the passes that went to receive with a sleep allowed.
    func sleepObserver() -> RunLoopObserver {
        RunLoopObserver(activities: .afterWaiting) { _, _ in self.sleeps += 1 }
    }
}

/// One Source1 throughput run: the time from the producer's first timed send to the handler's last
/// message, and how often the loop slept meanwhile. A warm-up message first makes sure the loop runs.
func loopSource1Throughput(messages: Int) -> (seconds: Double, sleeps: Int) {
    let port = must("data port") { () throws(PortError) in
        try PortReceiveRight(queueLimit: PortReceiveRight.maxQueueLimit, maxMessageSize: 8)
    }
    let ready = must("ready port") { () throws(PortError) in try PortReceiveRight() }
    let toPort = port.makeSendRight()
    let toReady = ready.makeSendRight()
    let counter = LoopCounter(target: messages + 1) // the warm-up message, then the timed ones

    let source = RunLoopPortSource(port: port) { _ in
        counter.count += 1
        if counter.count == 1 {
            counter.sleepsAtStart = counter.sleeps
            must("send ready") { () throws(PortError) in try toReady.send() }
        } else if counter.count == counter.target {
            counter.end = bf_now_ns()
            PortRunLoop.current.stop()
        }
        return nil
    }
    let consumer = LoopThread { loop in
        mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) }
        mustLoop("add observer") { () throws(RunLoopError) in try loop.add(counter.sleepObserver(), mode: .default) }
    }

    sendWord(toPort, .max) // warm-up
    _ = must("receive ready") { () throws(PortError) in try ready.receive() }
    let start = bf_now_ns()
    for index in 0..<messages { sendWord(toPort, UInt64(index)) }
    consumer.join()
    return (Double(counter.end - start) / 1e9, counter.sleeps - counter.sleepsAtStart)
}

/// One block throughput run: the time from the producer's first timed `performAndWakeUp` to the loop's
/// last block, the producer's own time for its calls, and how often the loop slept meanwhile.
func loopBlockThroughput(blocks: Int) -> (seconds: Double, producerSeconds: Double, sleeps: Int) {
    let counter = LoopCounter(target: blocks)
    let consumer = LoopThread { loop in
        mustLoop("add keep-alive") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
        mustLoop("add observer") { () throws(RunLoopError) in try loop.add(counter.sleepObserver(), mode: .default) }
    }
    let loop = consumer.loop

    // Warm-up: one block that answers, so the loop is running and asleep before the clock starts.
    let ready = must("ready port") { () throws(PortError) in try PortReceiveRight() }
    let toReady = ready.makeSendRight()
    mustLoop("warm-up block") { () throws(RunLoopError) in
        try loop.performAndWakeUp {
            counter.sleepsAtStart = counter.sleeps
            must("send ready") { () throws(PortError) in try toReady.send() }
        }
    }
    _ = must("receive ready") { () throws(PortError) in try ready.receive() }

    let start = bf_now_ns()
    for _ in 0..<blocks {
        mustLoop("performAndWakeUp") { () throws(RunLoopError) in
            try loop.performAndWakeUp {
                counter.count += 1
                if counter.count == counter.target {
                    counter.end = bf_now_ns()
                    PortRunLoop.current.stop()
                }
            }
        }
    }
    let producerEnd = bf_now_ns()
    consumer.join()
    return (Double(counter.end - start) / 1e9, Double(producerEnd - start) / 1e9,
            counter.sleeps - counter.sleepsAtStart)
}
