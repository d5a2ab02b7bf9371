@testable import PortLoop
import Testing

/// Request/reply over ports: `mach_msg` send-and-receive with a reply port, as MIG stubs do.
@Suite("Request and reply")
struct RequestReplyTests {
    @Test("a request to a port source on a loop thread gets the handler's reply")
    func roundTripWithPortSource() throws {
        let server = try RunLoopThread(name: "server")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in
            PortReply(id: message.id + 1, bytes: message.payload.reversed())
        }
        try server.loop.add(source, mode: .default)
        let destination = source.makeSendRight()
        for round in 0..<100 {
            let reply = try destination.request(id: Int32(round), bytes: [1, 2, UInt8(round)], timeout: .after(.seconds(10)))
            #expect(reply.id == Int32(round) + 1)
            #expect(reply.payload == [UInt8(round), 2, 1])
        }
    }

    @Test("a request to a plain receiver gets the reply it sends on the message's reply port")
    func roundTripWithPlainReceiver() throws {
        let box = ReceiveRightBox(try PortReceiveRight())
        let destination = box.port.makeSendRight()
        let replier = TestThread {
            let message = try! box.port.receive(timeout: .after(.seconds(10)))
            try! message.replyPort!.send(id: 99, bytes: Array(message.payload.map { $0 * 2 }))
        }
        let reply = try destination.request(id: 1, bytes: [1, 2, 3], timeout: .seconds(10))
        replier.join()
        #expect(reply.id == 99)
        #expect(reply.payload == [2, 4, 6])
    }

    @Test("a timed-out request's late reply is discarded, not delivered to the next request")
    func lateReplyDiscarded() throws {
        let box = ReceiveRightBox(try PortReceiveRight())
        let destination = box.port.makeSendRight()
        let firstTimedOut = Latch()
        let lateSend = Locked<PortError?>(nil)
        let replier = TestThread {
            // Answer the first request only after its requester gave up.
            let first = try! box.port.receive(timeout: .after(.seconds(10)))
            firstTimedOut.wait()
            do throws(PortError) {
                try first.replyPort!.send(id: first.id, bytes: [1], timeout: .poll)
            } catch {
                lateSend.withLock { $0 = error }
            }
            let second = try! box.port.receive(timeout: .after(.seconds(10)))
            try! second.replyPort!.send(id: second.id, bytes: [2])
        }
        #expect(throws: PortError.timedOut) {
            try destination.request(id: 1, bytes: [], timeout: .after(.milliseconds(50)))
        }
        firstTimedOut.signal()
        let reply = try destination.request(id: 2, bytes: [], timeout: .after(.seconds(10)))
        replier.join()
        #expect(reply.id == 2)
        #expect(reply.payload == [2])
        #expect(lateSend.current == .invalidDestination, "the late reply went to a destroyed reply port")
    }

    @Test("a slow port source: a timed-out request's reply never reaches the next request")
    func lateReplyFromPortSource() throws {
        let server = try RunLoopThread(name: "slow server")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in
            if message.id == 1 { sleepMilliseconds(300) } // answers after the requester's timeout
            return PortReply(id: message.id, bytes: [UInt8(message.id)])
        }
        try server.loop.add(source, mode: .default)
        let destination = source.makeSendRight()
        #expect(throws: PortError.timedOut) {
            try destination.request(id: 1, timeout: .after(.milliseconds(50)))
        }
        for id: Int32 in 2...5 {
            let reply = try destination.request(id: id, timeout: .after(.seconds(10)))
            #expect(reply.id == id)
            #expect(reply.payload == [UInt8(id)])
        }
    }

    @Test("a reply larger than maxReplySize fails the request at once with the reply's size")
    func replyTooLarge() throws {
        let server = try RunLoopThread(name: "big replies")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in
            PortReply(id: message.id, bytes: [UInt8](repeating: 7, count: Int(message.id)))
        }
        try server.loop.add(source, mode: .default)
        let destination = source.makeSendRight()
        var error: PortError?
        let elapsed = elapsedMilliseconds {
            do throws(PortError) {
                _ = try destination.request(id: 5000, timeout: .seconds(3), maxReplySize: 4096)
            } catch let caught { error = caught }
        }
        #expect(error == .tooLarge(size: 5000, limit: 4096))
        #expect(elapsed < 2500, "at once, not after the timeout")
        // A reply that fits still comes back whole afterwards.
        #expect(try destination.request(id: 4096, timeout: .seconds(10), maxReplySize: 4096).payload.count == 4096)
        #expect(server.loop.errorsLogged.load(ordering: .relaxed) == 0, "the server's reply was not refused")
    }

    @Test("a request on the loop thread that serves the destination throws instead of deadlocking")
    func requestOnServingThread() throws {
        let server = try RunLoopThread(name: "self-request")
        defer { server.stop() }
        let source = try RunLoopPortSource { _ in PortReply(id: 1) }
        try server.loop.add(source, mode: "other")
        let destination = source.makeSendRight()
        let outcome = try server.executeAndWait { () -> PortError? in
            do throws(PortError) {
                _ = try destination.request(timeout: .seconds(5))
                return nil
            } catch { return error }
        }
        #expect(outcome == .calledOnLoopThread)
        #expect(source.queuedMessageCount == 0, "nothing was sent")
        // Another thread's request is served as usual once the loop runs that mode.
        try server.execute { _ = PortRunLoop.current.run(mode: "other", timeout: .seconds(5), returnAfterSourceHandled: true) }
        #expect(try destination.request(timeout: .seconds(10)).id == 1)
    }

    @Test("bad input: dead destination, negative timeout, bad reply size, no reply within a poll")
    func badInput() throws {
        let port = try PortReceiveRight()
        let destination = port.makeSendRight()
        #expect(invalidArgument { try destination.request(timeout: .after(.seconds(-1))) } == "timeout")
        #expect(invalidArgument { try destination.request(timeout: .seconds(.nan)) } == "timeout")
        #expect(invalidArgument { try destination.request(timeout: .seconds(1), maxReplySize: 0) } == "maxReplySize")
        #expect(port.messageCount == 0, "nothing was sent for bad input")
        #expect(throws: PortError.tooLarge(size: 100_000, limit: PortReceiveRight.defaultMaxMessageSize)) {
            try destination.request(bytes: [UInt8](repeating: 0, count: 100_000), timeout: .seconds(1))
        }
        #expect(throws: PortError.timedOut) { try destination.request(id: 3, timeout: .poll) }
        #expect(port.messageCount == 1, "the polled request was sent; only the reply was not waited for")
        port.destroy()
        #expect(throws: PortError.invalidDestination) { try destination.request(timeout: .seconds(1)) }
    }
}

/// The argument named by the ``PortError/invalidArgument(argument:reason:)`` that `body` throws, or nil.
func invalidArgument(_ body: () throws -> ReceivedMessage) -> String? {
    do {
        _ = try body()
        return nil
    } catch {
        guard case let .invalidArgument(argument, _)? = error as? PortError else { return nil }
        return argument
    }
}

/// Shares a receive right with a replier thread.
final class ReceiveRightBox: @unchecked Sendable {
    let port: PortReceiveRight
    init(_ port: consuming PortReceiveRight) { self.port = port }
}
