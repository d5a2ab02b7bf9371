import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A right is a right wherever its port lives: sends, requests, replies, rights and descriptors in messages,
/// the sender's identity, and the same errors as in-process.
@Suite("Across processes: messages")
struct CrossProcessMessagingTests {
    /// A helper serving a name in a fresh namespace, and a right to it. Keep it: the child is killed and the
    /// namespace removed when it goes.
    struct Served {
        let space: TemporaryNamespace
        let peer: Peer
        let right: PortSendRight
    }

    func service(_ name: String = "svc", _ extra: [String] = []) throws -> Served {
        let space = TemporaryNamespace()
        let peer = try Peer(["serve", space.path, name] + extra)
        guard peer.ready() else { throw PortError.timedOut }
        return Served(space: space, peer: peer, right: try space.namespace.lookUp(name))
    }

    @Test("a send right travels to another process, which sends back on it")
    func callbackRight() throws {
        let served = try service()
        let server = served.right
        let mine = try PortReceiveRight(queueLimit: 4)
        let reply = try server.request(id: 2, bytes: Array("ring".utf8), timeout: .seconds(10))
        #expect(reply.id == 102)
        try server.send(id: 2, bytes: Array("back".utf8), attachments: [.sendRight(mine.makeSendRight())],
                        timeout: .seconds(10))
        let called = try mine.receive(timeout: .seconds(10))
        #expect(called.id == 3)
        #expect(called.payload == Array("back".utf8))
        #expect(!called.sender.isCurrentProcess)
    }

    @Test("a descriptor travels to another process, which reads what this one wrote")
    func descriptor() throws {
        let served = try service()
        let server = served.right
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let text = Array("through a pipe".utf8)
        #expect(write(fds[1], text, text.count) == text.count)
        close(fds[1])
        let reply = try server.request(id: 4, bytes: [], timeout: .seconds(10))
        #expect(reply.payload == Array("no descriptor".utf8))
        let readEnd = try MessageDescriptor(duplicating: fds[0])
        close(fds[0])
        let replies = try PortReceiveRight(queueLimit: 1)
        try server.send(id: 4, replyPort: replies.makeSendRight(), attachments: [.fileDescriptor(readEnd)],
                        timeout: .seconds(10))
        #expect(try replies.receive(timeout: .seconds(10)).payload == text)
        #expect(readEnd.rawValue >= 0) // the sender keeps its own
    }

    @Test("every message from another process carries its pid, uid, gid and pidfd identity")
    func identity() throws {
        let served = try service()
        let (peer, server) = (served.peer, served.right)
        let reply = try server.request(id: 5, bytes: [], timeout: .seconds(10))
        let fields = String(decoding: reply.payload, as: UTF8.self).split(separator: " ").map(String.init)
        #expect(fields.count == 4)
        #expect(fields.first == "\(getpid())")
        #expect(fields[1] == "\(geteuid())")
        #expect(fields[2] == "\(getegid())")
        #expect(UInt64(fields[3]) ?? 0 > 0, "the kernel here has SO_PEERPIDFD")
        // And the other way: what the service sends carries the service's identity.
        #expect(reply.sender.processID == peer.pid)
        #expect(reply.sender.userID == geteuid())
        #expect(reply.sender.uniqueProcessID > 0)
        #expect(reply.sender.uniqueProcessID == SenderIdentity.uniqueProcessID(of: peer.pid))
    }

    @Test("a RunLoopPortSource on a checked-in port wakes its loop for another process's messages")
    func runLoopSourceServesClients() throws {
        let space = TemporaryNamespace()
        let received = Locked<[String]>([])
        let source = RunLoopPortSource(port: try space.namespace.checkIn("loop")) { message in
            received.withLock { $0.append(String(decoding: message.payload, as: UTF8.self)) }
            return PortReply(id: message.id + 100, bytes: message.payload)
        }
        let thread = try RunLoopThread(name: "ipc-source")
        defer { thread.stop() }
        try thread.loop.add(source, mode: .default)
        let lines = try runPeer(["request", space.path, "loop", "7", "from-a-child"])
        #expect(lines == ["reply 107 from-a-child"])
        #expect(received.current == ["from-a-child"])
    }

    @Test("PortSet and messages() receive from other processes unchanged")
    func setAndAsyncSequence() async throws {
        let space = TemporaryNamespace()
        let setPort = try space.namespace.checkIn("in-set")
        let set = try PortSet()
        try set.insert(setPort)
        let client = try Peer(["client", space.path, "in-set", "1", "3"])
        var ids: [String] = []
        for _ in 0..<3 {
            guard case let .message(message) = try set.receive(timeout: .seconds(10)) else { continue }
            ids.append(String(decoding: message.payload, as: UTF8.self))
        }
        #expect(ids == ["\(client.pid) 0 0", "\(client.pid) 0 1", "\(client.pid) 0 2"])
        #expect(client.finish() == 0)

        let streamed = try space.namespace.checkIn("streamed")
        let second = try Peer(["client", space.path, "streamed", "1", "3"])
        var count = 0
        for await message in PortMessages(streamed) {
            #expect(message.sender.processID == second.pid)
            count += 1
            if count == 3 { break }
        }
        #expect(count == 3)
        #expect(second.finish() == 0)
    }

    @Test("sizes: up to the remote port's limit crosses whole, above it is tooLarge with the limit, at once")
    func sizes() throws {
        let served = try service("big", ["64", "1048576"])
        let server = served.right
        let payload = (0..<1_048_576).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let reply = try server.request(id: 1, bytes: payload, timeout: .seconds(30), maxReplySize: 1_048_576)
        #expect(reply.payload == payload)
        #expect(throws: PortError.tooLarge(size: 1_048_577, limit: 1_048_576)) {
            try server.send(id: 1, bytes: payload + [0], timeout: .poll)
        }
    }

    @Test("a request the service does not answer fails at once with noReply; one it cannot answer in time times out")
    func requestErrors() throws {
        let served = try service()
        let server = served.right
        let quick = elapsedMilliseconds {
            #expect(throws: PortError.noReply) { try server.request(id: 6, timeout: .seconds(30)) }
        }
        #expect(quick < 10_000)

        let pausedService = try service("paused", ["64", "65536", "--paused"])
        let (paused, stalled) = (pausedService.peer, pausedService.right)
        let waited = elapsedMilliseconds {
            #expect(throws: PortError.timedOut) { try stalled.request(id: 1, timeout: .after(.milliseconds(200))) }
        }
        #expect(waited >= 199)
        paused.tell("go")
        let reply = try stalled.request(id: 1, bytes: [9], timeout: .seconds(10))
        #expect(reply.payload == [9])
    }

    @Test("a right to a port of a third process cannot be passed on: invalidArgument, nothing sent")
    func thirdProcessRight() throws {
        let firstService = try service("first"), secondService = try service("second")
        let (first, second) = (firstService.right, secondService.right)
        #expect {
            try first.send(id: 2, attachments: [.sendRight(second)], timeout: .seconds(5))
        } throws: { error in
            if case .invalidArgument = error as? PortError { return true }
            return false
        }
        #expect(throws: PortError.invalidArgument(argument: "replyPort", reason: "a right to a port of a third process")) {
            try first.send(id: 1, replyPort: second, timeout: .seconds(5))
        }
        // A right to the same process's port goes back as that port.
        let reply = try first.request(id: 1, bytes: [1], timeout: .seconds(10))
        #expect(reply.payload == [1])
    }
}


/// The same reply port, named in request after request while the service lets go of each right it got: the
/// holder's release of the last right and the next transfer cross on the wire.
@Suite("Across processes: a reply port reused")
struct CrossProcessReusedReplyPortTests {
    @Test("30,000 round trips naming one reply port each time: every reply arrives, the connection holds")
    func reusedReplyPort() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "echo"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("echo")
        let replies = try PortReceiveRight(queueLimit: 4)
        var buffer = [UInt8](repeating: 0, count: 16)
        var done = 0
        for round in 0..<30_000 {
            let bytes = withUnsafeBytes(of: UInt32(round)) { Array($0) }
            do {
                try right.send(id: 1, bytes: bytes, replyPort: replies.makeSendRight(), timeout: .seconds(10))
                let header = try buffer.withUnsafeMutableBytes { try replies.receive(into: $0, timeout: .seconds(10)) }
                guard header.id == 101, Array(buffer[0..<header.size]) == bytes else {
                    Issue.record("round \(round): reply \(header.id) \(buffer[0..<header.size])")
                    break
                }
            } catch {
                Issue.record("round \(round): \(error)")
                break
            }
            done += 1
        }
        #expect(done == 30_000)
        #expect(!right.isDeadName)
    }
}

extension CrossProcessReusedReplyPortTests {
    @Test("30,000 round trips between run loops, each request naming the loop's own port for the reply")
    func reusedReplyPortBetweenLoops() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "echo"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("echo")
        let rounds = 30_000
        let state = Locked((done: 0, failure: String?.none))
        let finished = Latch()
        let own = Locked<PortSendRight?>(nil)
        let source = try RunLoopPortSource(queueLimit: 8) { message in
            let next = state.withLock { s -> Int? in
                s.done += 1
                return s.done < rounds ? s.done : nil
            }
            guard let next, let mine = own.current else {
                finished.signal()
                return nil
            }
            do {
                try right.send(id: 1, bytes: withUnsafeBytes(of: UInt32(next)) { Array($0) }, replyPort: mine,
                               timeout: .seconds(10))
            } catch {
                state.withLock { $0.failure = "round \(next): \(error)" }
                finished.signal()
            }
            _ = message
            return nil
        }
        own.withLock { $0 = source.makeSendRight() }
        let thread = try RunLoopThread(name: "reply-reuse")
        defer { thread.stop() }
        try thread.loop.add(source, mode: .default)
        try right.send(id: 1, bytes: [0, 0, 0, 0], replyPort: own.current, timeout: .seconds(10))
        finished.wait() // a break ends it at once; a hang is the test runner's to report
        #expect(state.current.failure == nil, "\(state.current.failure ?? "")")
        #expect(state.current.done == rounds)
        own.withLock { $0 = nil }
    }
}
