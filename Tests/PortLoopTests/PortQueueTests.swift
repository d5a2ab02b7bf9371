import PortLoop
import Testing

/// A port's queue: delivery order, the queue limit, timed receive, the too-large rule.
@Suite("Port queue")
struct PortQueueTests {
    @Test("4 senders × 250,000 messages: each received once, per-sender order kept")
    func exactlyOnceFIFO() throws {
        let senders = 4, perSender = 250_000
        let port = try PortReceiveRight(queueLimit: 1024)
        let right = port.makeSendRight()
        let threads = (0..<senders).map { sender in
            TestThread {
                for sequence in 0..<perSender {
                    // A send fails only once the receiver below gave up and destroyed the port: stop there.
                    do { try right.send(id: Int32(sender), bytes: payload(sender, sequence)) } catch { return }
                }
            }
        }
        var next = [Int](repeating: 0, count: senders)
        var buffer = [UInt8](repeating: 0, count: 64)
        var failure: (any Error)?
        for _ in 0..<(senders * perSender) {
            let header: ReceivedMessageHeader
            do {
                header = try buffer.withUnsafeMutableBytes { try port.receive(into: $0, timeout: .after(.seconds(30))) }
            } catch {
                failure = error
                break
            }
            let (sender, sequence) = decode(Array(buffer[0..<header.size]))
            #expect(Int(header.id) == sender)
            #expect(sequence == next[sender], "sender \(sender) out of order")
            next[sender] = sequence + 1
        }
        if let failure {
            // Fail, not hang: senders left blocked on the full queue (no timeout) would never return, and leaving
            // this function joins them (TestThread's deinit) before the port goes. Destroying it first wakes them.
            let queued = port.messageCount
            port.destroy()
            threads.forEach { $0.join() }
            Issue.record("receive failed: \(failure); received per sender \(next), \(queued) still queued")
            return
        }
        threads.forEach { $0.join() }
        #expect(next == [Int](repeating: perSender, count: senders))
        #expect(throws: PortError.timedOut) { try port.receive(timeout: .poll) }
    }

    @Test("a full port blocks a sender until the receiver takes one")
    func fullPortBlocksSender() throws {
        let port = try PortReceiveRight(queueLimit: 2)
        let right = port.makeSendRight()
        try right.send(id: 1); try right.send(id: 2)
        let sent = Locked(false)
        let sender = TestThread { try! right.send(id: 3); sent.withLock { $0 = true } }
        sleepMilliseconds(50)
        #expect(sent.current == false)
        #expect(port.messageCount == 2)
        #expect(try port.receive(timeout: .poll).id == 1)
        sender.join()
        #expect(sent.current == true)
        #expect(try port.receive(timeout: .poll).id == 2)
        #expect(try port.receive(timeout: .poll).id == 3)
    }

    @Test("send timeout 0 on a full port fails at once with timed-out and queues nothing")
    func pollSendOnFullPort() throws {
        let port = try PortReceiveRight(queueLimit: 3)
        let right = port.makeSendRight()
        for i in 0..<3 { try right.send(id: Int32(i), timeout: .poll) }
        let ms = elapsedMilliseconds { #expect(throws: PortError.timedOut) { try right.send(id: 9, timeout: .poll) } }
        #expect(ms < 50)
        #expect(port.messageCount == 3)
        #expect((0..<3).map { _ in try! port.receive(timeout: .poll).id } == [0, 1, 2])
    }

    @Test("a send with a timeout on a full port waits that long, then fails")
    func timedSendOnFullPort() throws {
        let port = try PortReceiveRight(queueLimit: 1)
        let right = port.makeSendRight()
        try right.send()
        let ms = elapsedMilliseconds {
            #expect(throws: PortError.timedOut) { try right.send(id: 2, timeout: .after(.milliseconds(20))) }
        }
        #expect(ms >= 20)
        #expect(port.messageCount == 1)
    }

    @Test("queue limit 1 plus send timeout 0 coalesces wake-ups")
    func coalescingWakeUpPort() throws {
        let port = try PortReceiveRight(queueLimit: 1)
        let right = port.makeSendRight()
        try right.send(id: 7, timeout: .poll)
        for _ in 0..<10 { #expect(throws: PortError.timedOut) { try right.send(id: 7, timeout: .poll) } }
        #expect(port.messageCount == 1)
        _ = try port.receive(timeout: .poll)
        #expect(throws: PortError.timedOut) { try port.receive(timeout: .poll) }
        try right.send(id: 7, timeout: .poll) // room again after the wake-up was consumed
        #expect(port.messageCount == 1)
    }

    @Test("raising the queue limit wakes a blocked sender")
    func raisingLimitWakesSender() throws {
        let port = try PortReceiveRight(queueLimit: 1)
        let right = port.makeSendRight()
        try right.send(id: 1)
        let sent = Locked(false)
        let sender = TestThread { try! right.send(id: 2); sent.withLock { $0 = true } }
        sleepMilliseconds(50)
        #expect(sent.current == false)
        try port.setQueueLimit(2)
        sender.join()
        #expect(sent.current)
        #expect(port.queueLimit == 2)
        #expect(port.messageCount == 2)
    }

    @Test("receive with timeout 0 polls")
    func pollReceive() throws {
        let port = try PortReceiveRight()
        let ms = elapsedMilliseconds { #expect(throws: PortError.timedOut) { try port.receive(timeout: .poll) } }
        #expect(ms < 50)
        try port.makeSendRight().send(id: 4)
        #expect(try port.receive(timeout: .poll).id == 4)
    }

    @Test("a 20 ms receive never returns early")
    func timedReceiveNeverEarly() throws {
        let port = try PortReceiveRight()
        for timeout in [PortTimeout.after(.milliseconds(20)), .seconds(0.020)] {
            for _ in 0..<5 {
                let ms = elapsedMilliseconds { #expect(throws: PortError.timedOut) { try port.receive(timeout: timeout) } }
                #expect(ms >= 20, "returned after \(ms) ms")
                #expect(ms < 1000)
            }
        }
    }

    @Test("receive forever is woken by a send from another thread")
    func foreverWokenBySend() throws {
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        let sender = TestThread { sleepMilliseconds(30); try! right.send(id: 42, bytes: [1, 2, 3]) }
        let message = try port.receive(timeout: .forever)
        sender.join()
        #expect(message.id == 42)
        #expect(message.payload == [1, 2, 3])
        #expect(message.arrivalPort == port.name)
    }

    @Test("payloads of every size class arrive intact")
    func payloadSizes() throws {
        let port = try PortReceiveRight(queueLimit: 16)
        let right = port.makeSendRight()
        let sizes = [0, 1, 47, 48, 49, 255, 256, 257, 4096, 65536]
        for size in sizes { try right.send(id: Int32(size), bytes: (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }) }
        for size in sizes {
            let message = try port.receive(timeout: .poll)
            #expect(message.id == Int32(size))
            #expect(message.payload == (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        }
    }

    @Test("too large: the message stays queued, the size is reported, a receive with room gets it next")
    func tooLargeStaysQueued() throws {
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        try right.send(id: 1, bytes: [UInt8](repeating: 9, count: 100))
        try right.send(id: 2, bytes: [1])
        #expect(throws: PortError.tooLarge(size: 100, limit: 10)) { try port.receive(timeout: .poll, maxSize: 10) }
        var small = [UInt8](repeating: 0, count: 50)
        #expect(throws: PortError.tooLarge(size: 100, limit: 50)) {
            try small.withUnsafeMutableBytes { try port.receive(into: $0, timeout: .poll) }
        }
        #expect(port.messageCount == 2)
        let message = try port.receive(timeout: .poll)
        #expect(message.id == 1)
        #expect(message.payload == [UInt8](repeating: 9, count: 100))
        #expect(try port.receive(timeout: .poll).id == 2)
    }

    @Test("a reply port travels with the message and can be answered")
    func replyPort() throws {
        let server = try PortReceiveRight()
        let client = try PortReceiveRight()
        try server.makeSendRight().send(id: 1, bytes: [5], replyPort: client.makeSendRight())
        let request = try server.receive(timeout: .poll)
        let reply = try #require(request.replyPort)
        #expect(reply.name == client.name)
        try reply.send(id: 2, bytes: request.payload.map { $0 * 2 })
        let answer = try client.receive(timeout: .poll)
        #expect(answer.id == 2 && answer.payload == [10])
    }
}
