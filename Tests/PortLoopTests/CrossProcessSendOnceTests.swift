import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Send-once rights across processes: a request's reply right reaches the service as a send-once right; it is
/// good for one answer there; dropped, or held by a process that is killed, it comes back to the requester as
/// one send-once notice, at once.
@Suite("Across processes: send-once rights", .serialized)
struct CrossProcessSendOnceTests {
    /// A send-once notice about `port`, or nil for anything else.
    private func sendOnceNotice(_ message: ReceivedMessage) -> PortName? {
        guard message.isNotification, case let .sendOnce(name)? = PortNotification(message) else { return nil }
        return name
    }

    @Test("the service answers through the send-once reply right once; a second answer is invalidName there")
    func answeredOnce() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "once"])
        defer { service.kill() }
        #expect(service.ready())
        let right = try space.namespace.lookUp("once")
        let reply = try right.request(id: 11, bytes: [4, 2], timeout: .seconds(20))
        #expect(reply.id == 111 && reply.payload == [4, 2])
        let report = try right.request(id: 12, timeout: .seconds(20))
        #expect(String(decoding: report.payload, as: UTF8.self) == "\(PortError.invalidName)")

        // The same through a reply port of our own: one answer, then nothing, not even a notice.
        let replies = try PortReceiveRight()
        try right.send(id: 1, bytes: [7], replyPort: replies.makeSendOnceRight().asSendRight(), timeout: .seconds(20))
        let answer = try replies.receive(timeout: .seconds(20))
        #expect(answer.id == 101 && answer.payload == [7] && !answer.isNotification)
        #expect(throws: PortError.timedOut) { try replies.receive(timeout: .after(.milliseconds(200))) }
    }

    @Test("the service drops the send-once right: the request fails at once, and a reply port gets one notice")
    func droppedByService() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "dropper"])
        defer { service.kill() }
        #expect(service.ready())
        let right = try space.namespace.lookUp("dropper")
        // A long timeout on purpose: noReply rather than timedOut shows the call did not wait for it.
        let took = elapsedMilliseconds {
            #expect(throws: PortError.noReply) { try right.request(id: 6, timeout: .seconds(60)) }
        }
        #expect(took < 10_000, "took \(took) ms")

        let replies = try PortReceiveRight()
        try right.send(id: 6, replyPort: replies.makeSendOnceRight().asSendRight(), timeout: .seconds(20))
        let notice = try replies.receive(timeout: .seconds(20))
        #expect(sendOnceNotice(notice) == replies.name)
        #expect(throws: PortError.timedOut, "exactly one notice") { try replies.receive(timeout: .after(.milliseconds(200))) }
    }

    @Test("a send-once right handed back to its own process answers there")
    func handedBack() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "back"])
        defer { service.kill() }
        #expect(service.ready())
        let right = try space.namespace.lookUp("back")
        let inbox = try PortReceiveRight()
        let replies = try PortReceiveRight()
        try right.send(id: 14, bytes: [3], replyPort: replies.makeSendOnceRight().asSendRight(),
                       attachments: [.sendRight(inbox.makeSendRight())], timeout: .seconds(20))
        let handed = try inbox.receive(timeout: .seconds(20))
        #expect(handed.id == 114)
        let reply = try #require(handed.replyPort)
        #expect(reply.isSendOnce && reply.name == replies.name && !reply.isRemote)
        try reply.send(id: 5, bytes: [8])
        let answer = try replies.receive(timeout: .seconds(5))
        #expect(answer.id == 5 && answer.payload == [8] && !answer.isNotification)
        #expect(throws: PortError.timedOut) { try replies.receive(timeout: .after(.milliseconds(200))) }
        #expect(replies.sendOnceRightCount == 0)
    }

    @Test("a service killed while it holds send-once reply rights: a notice for each, and the request fails at once")
    func holderKilled() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "holder"])
        defer { service.kill() }
        #expect(service.ready())
        let right = try space.namespace.lookUp("holder")
        let replies = try PortReceiveRight()
        for _ in 0..<3 {
            try right.send(id: 13, replyPort: replies.makeSendOnceRight().asSendRight(), timeout: .seconds(20))
        }
        #expect(service.line(startingWith: "holding 3") != nil)
        // A request waiting on another thread, with a timeout it must not need.
        let outcome = Locked<Result<ReceivedMessage, PortError>?>(nil)
        let requester = TestThread {
            let result = Result { () throws(PortError) in try right.request(id: 13, timeout: .seconds(60)) }
            outcome.withLock { $0 = result }
        }
        #expect(service.line(startingWith: "holding 4") != nil)
        #expect(throws: PortError.timedOut, "nothing while the holder lives") {
            try replies.receive(timeout: .after(.milliseconds(100)))
        }
        let killedAt = nowNanoseconds()
        service.kill()
        requester.join()
        let took = Double(nowNanoseconds() - killedAt) / 1e6
        // The service's death makes the destination a dead name: the request says so.
        switch outcome.current {
        case .failure(.invalidDestination)?, .failure(.noReply)?: break
        default: Issue.record("the request ended with \(String(describing: outcome.current))")
        }
        #expect(took < 5_000, "the request failed \(took) ms after the kill")
        for _ in 0..<3 {
            let notice = try replies.receive(timeout: .seconds(10))
            #expect(sendOnceNotice(notice) == replies.name)
        }
        #expect(throws: PortError.timedOut, "one notice per right") { try replies.receive(timeout: .after(.milliseconds(200))) }
    }

    @Test("a request handed on to another process, killed while it holds the reply right: noReply at once")
    func forwardedHolderKilled() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "far"])
        defer { service.kill() }
        #expect(service.ready())
        let far = try space.namespace.lookUp("far")
        // A local dispatcher hands the request on with its reply right; the destination here stays alive.
        let front = ReceiveRightBox(try PortReceiveRight())
        let destination = front.port.makeSendRight()
        let forwarder = TestThread {
            do {
                let request = try front.port.receive(timeout: .seconds(20))
                try far.send(id: 13, bytes: request.payload, replyPort: request.replyPort, timeout: .seconds(20))
            } catch {
                Issue.record("forwarding: \(error)")
            }
        }
        let outcome = Locked<Result<ReceivedMessage, PortError>?>(nil)
        let requester = TestThread {
            let result = Result { () throws(PortError) in try destination.request(id: 1, timeout: .seconds(60)) }
            outcome.withLock { $0 = result }
        }
        forwarder.join()
        #expect(service.line(startingWith: "holding 1") != nil)
        let killedAt = nowNanoseconds()
        service.kill()
        requester.join()
        let took = Double(nowNanoseconds() - killedAt) / 1e6
        switch outcome.current {
        case .failure(.noReply)?: break
        default: Issue.record("the request ended with \(String(describing: outcome.current))")
        }
        #expect(took < 5_000, "the request failed \(took) ms after the kill")
    }
}
