@testable import PortLoop
import Testing

/// Send-once rights in one process (`MACH_PORT_RIGHT_SEND_ONCE`): one message each; a right that ends without
/// one (dropped, destroyed in a message, released by a replier) posts exactly one send-once notice to its port;
/// requests send their reply right as one.
@Suite("Send-once rights")
struct SendOnceRightTests {
    /// The next message of `port`, or nil if none comes within 50 ms.
    private func next(_ port: borrowing PortReceiveRight) -> ReceivedMessage? {
        try? port.receive(timeout: .after(.milliseconds(50)))
    }

    private func isSendOnceNotice(_ message: ReceivedMessage?, for port: PortName) -> Bool {
        guard let message, message.isNotification, case let .sendOnce(name)? = PortNotification(message) else {
            return false
        }
        return name == port
    }

    @Test("a send-once right carries one message, and no notice follows")
    func usedOnce() throws {
        let port = try PortReceiveRight()
        let right = try port.makeSendOnceRight()
        #expect(port.sendOnceRightCount == 1)
        #expect(port.sendRightCount == 0, "a send-once right is not a send right")
        let name = right.name
        #expect(name == port.name)
        try right.send(id: 7, bytes: [1, 2, 3])
        let message = try port.receive(timeout: .poll)
        #expect(message.id == 7 && message.payload == [1, 2, 3] && !message.isNotification)
        #expect(next(port) == nil, "a used right posts no notice")
        #expect(port.sendOnceRightCount == 0)
    }

    @Test("a send-once right dropped unused posts one notice to its port, flagged as PortLoop's")
    func droppedUnused() throws {
        let port = try PortReceiveRight()
        do { _ = try port.makeSendOnceRight() }
        let notice = next(port)
        #expect(isSendOnceNotice(notice, for: port.name))
        #expect(notice?.id == PortNotification.sendOnceMessageID)
        #expect(PortNotification(notice!)?.port == port.name)
        #expect(next(port) == nil, "exactly one notice")
        #expect(port.sendOnceRightCount == 0)
        // The same id from an ordinary sender is not a notice.
        try port.makeSendRight().send(id: PortNotification.sendOnceMessageID, bytes: Array(repeating: 0, count: 24))
        let forged = try port.receive(timeout: .poll)
        #expect(!forged.isNotification && PortNotification(forged) == nil)
    }

    @Test("a second send through the same send-once right is invalidName; one message, no notice")
    func doubleSend() throws {
        let port = try PortReceiveRight()
        let right = try port.makeSendOnceRight().asSendRight()
        #expect(right.isSendOnce)
        try right.send(id: 1)
        #expect(throws: PortError.invalidName) { try right.send(id: 2) }
        let copy = right // copies share the one right
        #expect(throws: PortError.invalidName) { try copy.send(id: 3) }
        #expect(try port.receive(timeout: .poll).id == 1)
        #expect(next(port) == nil)
    }

    @Test("a send-once send never waits for room: the right stands for its message")
    func sendsToAFullPort() throws {
        let port = try PortReceiveRight(queueLimit: 1)
        try port.makeSendRight().send(id: 1)
        #expect(throws: PortError.timedOut) { try port.makeSendRight().send(id: 2, timeout: .poll) }
        try port.makeSendOnceRight().send(id: 3)
        #expect(port.messageCount == 2)
    }

    @Test("a too-large send uses the right up all the same, and the port is told")
    func tooLarge() throws {
        let port = try PortReceiveRight(maxMessageSize: 8)
        var thrown: PortError?
        do { try port.makeSendOnceRight().send(bytes: Array(repeating: 0, count: 9)) } catch { thrown = error }
        #expect(thrown == .tooLarge(size: 9, limit: 8))
        #expect(isSendOnceNotice(next(port), for: port.name))
        #expect(port.sendOnceRightCount == 0)
    }

    @Test("a send-once right to a destroyed port: the send is invalidDestination")
    func deadName() throws {
        let port = try PortReceiveRight()
        let right = try port.makeSendOnceRight()
        port.destroy()
        let dead = right.isDeadName
        #expect(dead)
        var thrown: PortError?
        do { try right.send(id: 1) } catch { thrown = error }
        #expect(thrown == .invalidDestination)
    }

    @Test("a message carrying a send-once reply right, destroyed unreceived, posts the notice to the reply port")
    func destroyedInQueue() throws {
        let replies = try PortReceiveRight()
        let destination = try PortReceiveRight()
        let reply = try replies.makeSendOnceRight().asSendRight()
        try destination.makeSendRight().send(id: 1, replyPort: reply)
        #expect(throws: PortError.invalidName, "the right moved into the message") { try reply.send(id: 9) }
        #expect(next(replies) == nil, "nothing while the message waits")
        destination.destroy()
        #expect(isSendOnceNotice(next(replies), for: replies.name))
        #expect(next(replies) == nil)
        #expect(replies.sendOnceRightCount == 0)
    }

    @Test("a moved send-once reply right answers once from its new holder")
    func movedAndUsed() throws {
        let replies = try PortReceiveRight()
        let destination = try PortReceiveRight()
        try destination.makeSendRight().send(id: 1, replyPort: replies.makeSendOnceRight().asSendRight())
        let request = try destination.receive(timeout: .poll)
        let reply = try #require(request.replyPort)
        #expect(reply.isSendOnce && reply.name == replies.name)
        try reply.send(id: 2, bytes: [5])
        #expect(throws: PortError.invalidName) { try reply.send(id: 3) }
        let answer = try replies.receive(timeout: .poll)
        #expect(answer.id == 2 && answer.payload == [5])
        #expect(next(replies) == nil)
    }

    @Test("a send-once right travels only as a reply port; a request cannot go through one")
    func misuse() throws {
        let port = try PortReceiveRight()
        let destination = port.makeSendRight()
        let once = try port.makeSendOnceRight().asSendRight()
        #expect(throws: PortError.self) { try destination.send(id: 1, attachments: [.sendRight(once)]) }
        #expect(throws: PortError.self) { try once.send(id: 1, replyPort: destination) }
        #expect(throws: PortError.self) { try once.request(id: 1, timeout: .poll) }
        #expect(port.messageCount == 0, "nothing was sent")
        try once.send(id: 4) // still good for its one message
        #expect(try port.receive(timeout: .poll).id == 4)
    }

    @Test("a full queue takes every send-once right's message or notice: each right has its slot from the start")
    func fullQueueTakesEveryRight() throws {
        let port = try PortReceiveRight(queueLimit: 2)
        let sender = port.makeSendRight()
        var rights: [PortSendRight] = []
        for _ in 0..<100 { rights.append(try port.makeSendOnceRight().asSendRight()) }
        try sender.send(id: 1, timeout: .poll)
        try sender.send(id: 2, timeout: .poll)
        #expect(throws: PortError.timedOut, "the queue is full") { try sender.send(id: 3, timeout: .poll) }
        for (i, right) in rights.enumerated() where i % 2 == 0 { try right.send(id: 1000 + Int32(i)) }
        rights.removeAll() // the other 50 end unused: a notice each
        #expect(port.messageCount == 102, "two messages, 50 through send-once rights, 50 notices")
        var ids: [Int32] = [], notices = 0
        while let message = next(port) {
            if isSendOnceNotice(message, for: port.name) { notices += 1 } else { ids.append(message.id) }
        }
        #expect(ids == [1, 2] + stride(from: 0, to: 100, by: 2).map { 1000 + Int32($0) })
        #expect(notices == 50)
        #expect(port.sendOnceRightCount == 0)
    }

    @Test("a request's reply right is a send-once right: the answer uses it up")
    func requestReplyIsSendOnce() throws {
        let box = ReceiveRightBox(try PortReceiveRight())
        let destination = box.port.makeSendRight()
        let second = Locked<PortError?>(nil)
        let replier = TestThread {
            let request = try! box.port.receive(timeout: .after(.seconds(10)))
            precondition(request.replyPort!.isSendOnce)
            try! request.replyPort!.send(id: 2, bytes: request.payload)
            do throws(PortError) { try request.replyPort!.send(id: 3) } catch { second.withLock { $0 = error } }
        }
        let reply = try destination.request(id: 1, bytes: [9], timeout: .after(.seconds(10)))
        replier.join()
        #expect(reply.id == 2 && reply.payload == [9])
        #expect(second.current == .invalidName)
    }

    @Test("a replier that drops the request fails it at once with noReply, sync and async")
    func requestDropped() async throws {
        let box = ReceiveRightBox(try PortReceiveRight())
        let destination = box.port.makeSendRight()
        let replier = TestThread {
            for _ in 0..<2 { _ = try! box.port.receive(timeout: .after(.seconds(30))) }
        }
        // Long timeouts on purpose: noReply rather than timedOut shows the call did not wait them out.
        #expect(throws: PortError.noReply) { try destination.request(id: 1, timeout: .seconds(60)) }
        await #expect(throws: PortError.noReply) { try await destination.request(id: 1, timeout: .seconds(60)) }
        replier.join()
    }

    @Test("race: 300 rounds of a replier dropping the request or its reply right while the requester waits")
    func dropRace() throws {
        let box = ReceiveRightBox(try PortReceiveRight())
        let destination = box.port.makeSendRight()
        let rounds = 300
        let replier = TestThread {
            for round in 0..<rounds {
                let request = try! box.port.receive(timeout: .after(.seconds(30)))
                switch round % 3 {
                case 0: continue // the whole request goes, with its right
                case 1: try! request.replyPort!.send(id: Int32(round)) // answered
                default:
                    // Dropped on another thread: the notice comes from there.
                    TestThread { [request] in _ = request.id }.join()
                }
            }
        }
        var answered = 0, refused = 0
        for round in 0..<rounds {
            do {
                let reply = try destination.request(id: Int32(round), timeout: .seconds(30))
                #expect(reply.id == Int32(round) && !reply.isNotification)
                answered += 1
            } catch .noReply {
                refused += 1
            }
        }
        replier.join()
        #expect(answered == rounds / 3)
        #expect(refused == rounds - rounds / 3)
    }
}
