@testable import PortLoop
import Testing

/// `request(...) async`: the reply without a blocked thread, timeouts, sizes, cancellation.
@Suite("Request and reply, async", .timeLimit(.minutes(1)))
struct RequestAsyncTests {
    @Test("a request to a port source on a loop thread gets the handler's reply")
    func roundTrip() async throws {
        let server = try RunLoopThread(name: "async server")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in PortReply(id: message.id + 1, bytes: message.payload.reversed()) }
        try server.loop.add(source, mode: .default)
        let destination = source.makeSendRight()
        for round: Int32 in 0..<50 {
            let reply = try await destination.request(id: round, bytes: [1, 2, UInt8(round)], timeout: .seconds(10))
            #expect(reply.id == round + 1)
            #expect(reply.payload == [UInt8(round), 2, 1])
        }
    }

    @Test("many requests wait at once without holding threads of the pool")
    func manyWaitingAtOnce() async throws {
        // The replier answers only once all the requests have arrived: requests that each held a thread of the
        // cooperative pool (as many as cores) while waiting would never all be sent.
        let count = 32
        let box = ReceiveRightBox(try PortReceiveRight(queueLimit: 64))
        let destination = box.port.makeSendRight()
        let replier = TestThread {
            var pending: [ReceivedMessage] = []
            while pending.count < count { pending.append(try! box.port.receive(timeout: .after(.seconds(20)))) }
            for message in pending { try! message.replyPort!.send(id: message.id) }
        }
        let ids = try await withThrowingTaskGroup(of: Int32.self) { group in
            for id in Int32(0)..<Int32(count) {
                group.addTask { try await destination.request(id: id, timeout: .seconds(30)).id }
            }
            return try await group.reduce(into: Set<Int32>()) { $0.insert($1) }
        }
        replier.join()
        #expect(ids == Set(0..<Int32(count)))
    }

    @Test("no reply in time: timedOut after the timeout; a late reply finds a dead name")
    func timeout() async throws {
        let box = ReceiveRightBox(try PortReceiveRight())
        let destination = box.port.makeSendRight()
        let start = nowNanoseconds()
        await #expect(throws: PortError.timedOut) { try await destination.request(id: 1, timeout: .after(.milliseconds(100))) }
        let elapsed = Double(nowNanoseconds() - start) / 1e6
        // Not before the timeout. The upper bound is loose: the suite's synchronous tests can keep both threads
        // of a 2-core machine's cooperative pool busy for seconds, and the resumed task waits for one.
        #expect(elapsed >= 99 && elapsed < 40_000, "\(elapsed) ms")
        let late = try box.port.receive(timeout: .poll)
        #expect(throws: PortError.invalidDestination) { try late.replyPort!.send(id: 2, timeout: .poll) }
        await #expect(throws: PortError.timedOut) { try await destination.request(id: 3, timeout: .poll) }
    }

    @Test("a reply larger than maxReplySize fails with its size; a full destination times out; bad input")
    func sizesAndBadInput() async throws {
        let server = try RunLoopThread(name: "big replies async")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in PortReply(bytes: [UInt8](repeating: 1, count: Int(message.id))) }
        try server.loop.add(source, mode: .default)
        await #expect(throws: PortError.tooLarge(size: 5000, limit: 4096)) {
            try await source.makeSendRight().request(id: 5000, timeout: .seconds(10), maxReplySize: 4096)
        }
        await #expect(throws: PortError.self) { try await source.makeSendRight().request(timeout: .after(.seconds(-1))) }
        await #expect(throws: PortError.self) { try await source.makeSendRight().request(maxReplySize: 0) }

        let full = try PortReceiveRight(queueLimit: 1)
        try full.makeSendRight().send(id: 0)
        let start = nowNanoseconds()
        await #expect(throws: PortError.timedOut) { try await full.makeSendRight().request(timeout: .after(.milliseconds(50))) }
        #expect(nowNanoseconds() - start >= 49_000_000)
        #expect(full.messageCount == 1, "nothing was sent into the full queue")
        full.destroy()
    }

    @Test("on an actor of the loop that serves the destination, the await lets the loop answer")
    func fromTheServingLoop() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let source = try RunLoopPortSource { message in PortReply(id: message.id * 2) }
        try worker.loop.add(source, mode: .common)
        let actor = LoopActor(executor: worker.executor)
        let destination = source.makeSendRight()
        #expect(try await actor.request(destination, id: 21) == 42)
    }
}

extension LoopActor {
    /// A request made on the loop's own thread, from an actor job.
    func request(_ destination: PortSendRight, id: Int32) async throws -> Int32 {
        precondition(executor.loop.isCurrent)
        return try await destination.request(id: id, timeout: .seconds(10)).id
    }
}
