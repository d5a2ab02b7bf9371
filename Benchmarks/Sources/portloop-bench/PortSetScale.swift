import CBenchFloors
import PortLoop

/// `portset`: does the size of a port set change the cost of a receive? Round-trip latency with 1, 100 and
/// 10,000 ports in the set a receiver sleeps in, exactly one of them active.
///
/// Thread A sends an 8-byte message to the active port and waits for the echo on a port of its own
/// (`receive(into:)`). Variants, per size, interleaved round-robin:
/// - ports: thread B blocks in `PortSet.receive(into:)` on a set holding all the ports (the active one
///   inserted last) and echoes to A.
/// - loop: B runs a `PortRunLoop` whose default mode holds one `RunLoopPortSource` per port (the active
///   one added last; the others never receive), so the mode's port set holds them all; the active
///   source's handler echoes to A.
/// Each row's ratio is to the same variant with a 1-port set (the target: 10,000 ports within 1.2×).
let portSetScenario = Scenario(
    name: "portset",
    summary: "round trip through a port set of 1, 100, 10,000 ports, one active (PortSet, run loop)"
) { settings in
    let sizes = [1, 100, 10_000]
    let roundTrips = settings.quick ? 5_000 : 20_000
    let warmup = settings.quick ? 200 : 1_000

    var variants: [() -> Double] = []
    for size in sizes {
        variants.append { portSetPingPong(ports: size, warmup: warmup, roundTrips: roundTrips) }
        variants.append { loopPortSetPingPong(ports: size, warmup: warmup, roundTrips: roundTrips) }
    }
    let samples = checkingDescriptors("portset") { measureInterleaved(runs: settings.runs, variants) }

    let unit = "ns/round trip"
    var rows: [Row] = []
    for (which, label) in ["ports: PortSet.receive(into:)", "loop: Source1 per port"].enumerated() {
        let oneSet = Row(.ours, "\(label), 1 port", sample: samples[which], unit: unit)
        rows.append(oneSet)
        for (index, size) in sizes.enumerated().dropFirst() {
            var row = Row(.ours, "\(label), \(formatNumber(Double(size), decimals: 0)) ports",
                          sample: samples[2 * index + which], unit: unit)
            row.addRatio(to: oneSet, label: "1-port set")
            rows.append(row)
        }
    }
    return rows
}

/// One round-trip run through a set of `ports` ports, received on by a plain thread. Set-up (creating and
/// inserting the ports) is not timed. Returns nanoseconds per round trip.
func portSetPingPong(ports: Int, warmup: Int, roundTrips: Int) -> Double {
    let members = ReceiveRights(count: ports)
    let set = must("PortSet") { () throws(PortError) in try PortSet() }
    for index in 0..<ports { members.with(index) { port throws(PortError) in try set.insert(port) } }
    let toActive = members.with(ports - 1) { port in port.makeSendRight() }
    let back = SharedReceiveRight(must("reply port") { () throws(PortError) in try PortReceiveRight() })
    let toBack = back.right.makeSendRight()
    let total = warmup + roundTrips

    let echo = JoinableThread {
        withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
            for _ in 0..<total {
                let event = must("PortSet.receive(into:)") { () throws(PortError) in
                    try set.receive(into: buffer, timeout: .forever)
                }
                guard case .message = event else { fatalError("unexpected descriptor event") }
                must("echo") { () throws(PortError) in try toBack.send(payload: UnsafeRawBufferPointer(buffer)) }
            }
        }
    }
    let nanoseconds = timePingPong(to: toActive, from: back, warmup: warmup, roundTrips: roundTrips)
    echo.join()
    _ = members // the ports live until the run is over
    return nanoseconds
}

/// One round-trip run through a run loop whose mode holds `ports` port sources. Returns nanoseconds per
/// round trip.
func loopPortSetPingPong(ports: Int, warmup: Int, roundTrips: Int) -> Double {
    let back = SharedReceiveRight(must("reply port") { () throws(PortError) in try PortReceiveRight() })
    let toBack = back.right.makeSendRight()
    let total = UInt64(warmup + roundTrips)
    let idle = (1..<max(ports, 1)).map { _ in keepAliveSource() }
    let active = must("active source") { () throws(PortError) in
        try RunLoopPortSource(queueLimit: 1, maxMessageSize: 8) { message in
            let index = loadWord(message.payload)
            sendWord(toBack, index)
            if index == total - 1 { PortRunLoop.current.stop() }
            return nil
        }
    }
    let toActive = active.makeSendRight()
    let thread = LoopThread { loop in
        for source in idle { mustLoop("add idle source") { () throws(RunLoopError) in try loop.add(source, mode: .default) } }
        mustLoop("add active source") { () throws(RunLoopError) in try loop.add(active, mode: .default) }
    }
    let nanoseconds = timePingPong(to: toActive, from: back, warmup: warmup, roundTrips: roundTrips)
    thread.join()
    return nanoseconds
}

/// The sending side of a ping-pong: sends round trip numbers to `to`, waits for each on `from`; returns
/// nanoseconds per round trip after the warm-up.
func timePingPong(to: PortSendRight, from: SharedReceiveRight, warmup: Int, roundTrips: Int) -> Double {
    var start = bf_now_ns()
    withUnsafeTemporaryAllocation(byteCount: 8, alignment: 8) { buffer in
        for index in 0..<(warmup + roundTrips) {
            if index == warmup { start = bf_now_ns() }
            buffer.storeBytes(of: UInt64(index), as: UInt64.self)
            must("send") { () throws(PortError) in try to.send(payload: UnsafeRawBufferPointer(buffer)) }
            _ = must("receive(into:)") { () throws(PortError) in try from.right.receive(into: buffer, timeout: .forever) }
            precondition(buffer.load(as: UInt64.self) == UInt64(index), "echo out of order")
        }
    }
    return Double(bf_now_ns() - start) / Double(roundTrips)
}
