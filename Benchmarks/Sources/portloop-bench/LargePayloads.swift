#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import PortLoop

/// `large-payloads`: GB/s for 64 KiB, 256 KiB, 1 MiB and 16 MiB payloads, in one process and between two.
///
/// In one process, a producer thread sends to a port (queue limit 4) that a consumer thread empties:
/// - copy: `send(payload:)` from one filled buffer (the port copies it in) and `receive(into:)` into another
///   (copied out): two copies per message;
/// - buffers: `send(id:buffer:)` / `receiveBuffer()`, the memory handed over; the consumer returns each buffer to
///   the producer on a second port, so that four buffers (made before the clock) circulate and neither side
///   copies or allocates.
/// Neither side reads the payload beyond what the calls do.
///
/// Between processes, a child of this executable (the `send` role of IPCSupport.swift) sends payloads from one
/// filled buffer to a port of this process (queue limit 4) that a thread here empties:
/// - out of line: the payload written into a sealed memfd (one copy), mapped here; received with
///   `receiveBuffer()` (the mapping, nothing read) and with `receive(into:)` (one more copy, out of the mapping);
/// - frames: the child's out-of-line threshold off, so the payload crosses in 64 KiB frames (a copy into the
///   socket, one out, and one out of the reassembled message by `receive(into:)`).
/// Floor: a forked child writing the same payloads on a SOCK_STREAM socketpair, the caller reading each whole.
let largePayloadsScenario = Scenario(
    name: "large-payloads",
    summary: "GB/s for 64 KiB … 16 MiB: in-process copy vs handed-over buffers; across processes memfd vs frames vs C socket copy"
) { settings in
    // About 512 MiB per run and size (64 MiB with --quick).
    // 256 KiB too, between the frame size and the MiB sizes.
    let sizes = [64 << 10, 256 << 10, 1 << 20, 16 << 20]
    let bytesPerRun = settings.quick ? 64 << 20 : 512 << 20
    primeCrossProcess()
    var rows: [Row] = []
    for size in sizes {
        let messages = max(8, bytesPerRun / size)
        let gigabytesPerSecond = { (nanoseconds: Double) in Double(messages * size) / nanoseconds }
        let samples = checkingDescriptors("large-payloads") {
            measureInterleaved(runs: settings.runs, [
                { gigabytesPerSecond(inProcessCopy(size: size, messages: messages)) },
                { gigabytesPerSecond(inProcessBuffers(size: size, messages: messages)) },
                { gigabytesPerSecond(acrossProcesses(size: size, messages: messages, outOfLine: true, mapped: true)) },
                { gigabytesPerSecond(acrossProcesses(size: size, messages: messages, outOfLine: true, mapped: false)) },
                { gigabytesPerSecond(acrossProcesses(size: size, messages: messages, outOfLine: false, mapped: false)) },
                { gigabytesPerSecond(floorNanoseconds("stream copy", bf_stream_copy(UInt64(messages), size), per: 1)) },
            ])
        }
        let label = size >= 1 << 20 ? "\(size >> 20) MiB" : "\(size >> 10) KiB"
        let unit = "GB/s", key = "GB/s \(label)"
        rows += [
            Row(.counter, "\(label): in one process, send(payload:) → receive(into:) (two copies)", sample: samples[0],
                unit: unit, decimals: 2),
            Row(.counter, "\(label): in one process, send(buffer:) → receiveBuffer() (handed over)", sample: samples[1],
                unit: unit, decimals: 2),
            Row(.ours, "\(label): across processes, memfd → receiveBuffer() (mapped)", sample: samples[2], unit: unit,
                decimals: 2, key: key),
            Row(.ours, "\(label): across processes, memfd → receive(into:) (copied out of the mapping)",
                sample: samples[3], unit: unit, decimals: 2, key: key),
            Row(.ours, "\(label): across processes, 64 KiB frames → receive(into:)", sample: samples[4], unit: unit,
                decimals: 2, key: key),
            Row(.floor, "\(label): C floor: SOCK_STREAM socketpair, two processes, blocking write/read",
                sample: samples[5], unit: unit, decimals: 2, short: "socket", key: key),
        ]
    }
    return rows.withPeerRatios()
}

/// A payload of `size` bytes, filled (so that its pages exist before the clock).
private func filledBuffer(_ size: Int) -> UnsafeMutableRawBufferPointer {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 64)
    buffer.initializeMemory(as: UInt8.self, repeating: 1)
    return buffer
}

/// In one process, copying: nanoseconds for `messages` payloads from the producer's buffer to the consumer's.
private func inProcessCopy(size: Int, messages: Int) -> Double {
    let port = SharedReceiveRight(must("port") { () throws(PortError) in
        try PortReceiveRight(queueLimit: 4, maxMessageSize: size)
    })
    let sender = port.right.makeSendRight()
    let consumer = JoinableThread {
        let buffer = filledBuffer(size)
        defer { buffer.deallocate() }
        for _ in 0..<messages {
            _ = must("receive(into:)") { () throws(PortError) in
                try port.right.receive(into: buffer, timeout: .seconds(60))
            }
        }
    }
    let source = filledBuffer(size)
    defer { source.deallocate() }
    let start = bf_now_ns()
    for _ in 0..<messages {
        must("send") { () throws(PortError) in
            try sender.send(id: 1, payload: UnsafeRawBufferPointer(source), timeout: .forever)
        }
    }
    consumer.join()
    return Double(bf_now_ns() - start)
}

/// In one process, handing buffers over: four buffers circulate between the producer and the consumer.
private func inProcessBuffers(size: Int, messages: Int) -> Double {
    let port = SharedReceiveRight(must("port") { () throws(PortError) in
        try PortReceiveRight(queueLimit: 4, maxMessageSize: size)
    })
    let returns = SharedReceiveRight(must("port") { () throws(PortError) in
        try PortReceiveRight(queueLimit: 4, maxMessageSize: size)
    })
    let sender = port.right.makeSendRight()
    let giveBack = returns.right.makeSendRight()
    let consumer = JoinableThread {
        for index in 0..<messages {
            let received = must("receiveBuffer") { () throws(PortError) in
                try port.right.receiveBuffer(timeout: .seconds(60))
            }
            // The last four stay here: the producer has sent all it will.
            if index < messages - 4 {
                do { try giveBack.send(id: 2, buffer: received.takeBuffer(), timeout: .forever) } catch {
                    fatalError("give back: \(error)")
                }
            }
        }
    }
    // The four buffers are made and filled before the clock, and wait in the return port.
    for _ in 0..<4 {
        do {
            try giveBack.send(id: 2, buffer: try MessageBuffer(count: size) {
                $0.initializeMemory(as: UInt8.self, repeating: 1)
            }, timeout: .poll)
        } catch {
            fatalError("buffer: \(error)")
        }
    }
    let start = bf_now_ns()
    for _ in 0..<messages {
        do {
            try sender.send(id: 1, buffer: try returns.right.receiveBuffer(timeout: .seconds(60)).takeBuffer(),
                            timeout: .forever)
        } catch {
            fatalError("send: \(error)")
        }
    }
    consumer.join()
    return Double(bf_now_ns() - start)
}

/// Across processes: nanoseconds from the child's first timed send to the last payload's receipt here.
private func acrossProcesses(size: Int, messages: Int, outOfLine: Bool, mapped: Bool) -> Double {
    let space = TemporaryNamespace()
    let sink = IPCSink(messages: messages)
    do {
        let port = SharedReceiveRight(must("checkIn") { () throws(PortError) in
            try space.namespace.checkIn(ipcServiceName, queueLimit: 4, maxMessageSize: size)
        })
        let receiver = JoinableThread {
            let buffer = filledBuffer(size)
            defer { buffer.deallocate() }
            while true {
                let id: Int32, word: UInt64, replyPort: PortSendRight?
                if mapped {
                    let received = must("receiveBuffer") { () throws(PortError) in
                        try port.right.receiveBuffer(timeout: .seconds(60))
                    }
                    id = received.header.id
                    replyPort = received.header.replyPort
                    word = received.buffer.withUnsafeBytes { $0.count >= 8 ? $0.loadUnaligned(as: UInt64.self) : 0 }
                } else {
                    let header = must("receive(into:)") { () throws(PortError) in
                        try port.right.receive(into: buffer, timeout: .seconds(60))
                    }
                    id = header.id
                    replyPort = header.replyPort
                    word = header.size >= 8 ? buffer.load(as: UInt64.self) : 0
                }
                let (reply, over) = sink.handle(id: id, word: word)
                if let reply, let replyPort {
                    must("reply") { () throws(PortError) in try replyPort.send(id: reply, timeout: .seconds(10)) }
                }
                if over { break }
            }
        }
        var arguments = [space.path, ipcServiceName, "\(messages)", "\(size)"]
        arguments.append(outOfLine ? "\(size)" : "\(Int.max)") // the threshold: this size goes out of line, or none
        let child = BenchChild(role: "send", arguments)
        let status = child.finish(within: 600)
        guard status == 0 else { fatalError("large-payloads: the sending child failed") }
        receiver.join()
    }
    space.remove("large-payloads")
    waitForNoConnections("large-payloads")
    precondition(sink.count == messages, "large-payloads: \(sink.count) of \(messages) payloads arrived")
    return Double(sink.end - sink.start)
}
