import CBenchFloors
import PortLoop

/// `throughput`: one producer thread streams 8-byte messages to one consumer thread through a port with
/// queue limit 1024 (sends wait forever for room), in messages per second. The consumer receives on the
/// port itself or on a set containing it; for the set, its wake-up statistics show how far wake-ups were
/// coalesced (ideally far fewer than one per message). Floor: one eventfd write per message.
let throughputScenario = Scenario(
    name: "throughput",
    summary: "one producer to one consumer, 8-byte payload, queue limit 1024"
) { settings in
    let messages = settings.quick ? 200_000 : 2_000_000

    let perSecond = { (seconds: Double) in Double(messages) / seconds }

    // The set variant also reports its wake-up counters per message, one pair per run.
    var setStats: [(sleeps: Double, wakeUps: Double)] = []
    let samples = measureInterleaved(runs: settings.runs, [
        { perSecond(portThroughput(messages: messages, viaSet: false).seconds) },
        {
            let run = portThroughput(messages: messages, viaSet: true)
            setStats.append((Double(run.sleeps) / Double(messages), Double(run.wakeUps) / Double(messages)))
            return perSecond(run.seconds)
        },
        {
            let elapsed = bf_eventfd_counter_throughput(UInt64(messages))
            return perSecond(floorNanoseconds("eventfd counter", elapsed, per: 1) / 1e9)
        },
    ])
    setStats.removeFirst() // the discarded warm-up round
    let unit = "msg/s"
    let floor = Row(name: "C floor: eventfd write per message", sample: samples[2], unit: unit, decimals: 0)
    var rows = [
        Row(name: "ports: receive(into:) on the port", sample: samples[0], unit: unit, decimals: 0),
        Row(name: "ports: PortSet.receive", sample: samples[1], unit: unit, decimals: 0),
    ]
    for index in rows.indices { rows[index].addRatio(to: floor, label: "eventfd") }
    rows.append(Row(name: "PortSet: sleeps per message",
                    sample: Sample(values: setStats.map(\.sleeps)), unit: "per msg", decimals: 5))
    rows.append(Row(name: "PortSet: wake-ups per message",
                    sample: Sample(values: setStats.map(\.wakeUps)), unit: "per msg", decimals: 5))
    return rows + [floor]
}

/// One throughput run through PortLoop: the time from the first send to the consumer's last receive, and
/// (for a set) how often the consumer slept and how many eventfd wake-ups the producer wrote meanwhile.
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
