import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The status query (PROBE / STATUS on the wire): what a service's transport says about it, and to whom.
@Suite("Across processes: service status", .serialized)
struct ServiceStatusTests {
    @Test("a service's transport reports its pid, ids, queue and counters, while its loop does not run")
    func status() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc", "16", "4096", "--paused"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("svc")
        for i in 0..<5 { try right.send(id: 8, bytes: Array("\(getpid()) 0 \(i)".utf8), timeout: .seconds(5)) }
        let status = try right.serviceStatus(timeout: .seconds(5))
        #expect(status.processID == service.pid)
        #expect(status.userID == geteuid())
        #expect(status.groupID == getegid())
        #expect(status.queueDepth == 5)
        #expect(status.queueLimit == 16)
        #expect(status.maxMessageSize == 4096)
        #expect(status.messagesReceived == 5)
        #expect(status.connections == 1)
        // An echo of the largest size comes back as asked.
        let echoed = try right.serviceStatus(echoing: ServiceStatus.maxEcho, timeout: .seconds(5))
        #expect(echoed.processID == service.pid)

        service.tell("go") // the loop takes the five: the depth falls, the count stays
        #expect(eventually { (try? right.serviceStatus(timeout: .seconds(5)))?.queueDepth == 0 })
        #expect(try right.serviceStatus(timeout: .seconds(5)).messagesReceived == 5)

        service.kill()
        #expect(eventually { right.isDeadName })
        #expect(throws: PortError.invalidDestination) { try right.serviceStatus(timeout: .seconds(5)) }
    }

    @Test("threads asking at once over one connection, while messages flow, each get their own answers")
    func concurrentQueries() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc", "1024"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("svc")
        let failures = Locked<[String]>([])
        let askers = (0..<4).map { thread in
            TestThread {
                var last: UInt64 = 0
                for i in 0..<200 {
                    do {
                        let status = try right.serviceStatus(echoing: (thread * 997 + i * 31) % 4096, timeout: .seconds(20))
                        if status.processID != service.pid || status.messagesReceived < last {
                            failures.withLock { $0.append("\(thread)/\(i): \(status)") }
                        }
                        last = status.messagesReceived
                    } catch {
                        failures.withLock { $0.append("\(thread)/\(i): \(error)") }
                    }
                }
            }
        }
        let sender = TestThread {
            for seq in 0..<500 {
                do { try right.send(id: 8, bytes: Array("\(getpid()) 0 \(seq)".utf8), timeout: .seconds(20)) } catch {
                    failures.withLock { $0.append("send \(seq): \(error)") }
                }
            }
        }
        askers.forEach { $0.join() }
        sender.join()
        #expect(failures.current.isEmpty, "\(failures.current.prefix(5))")
        #expect(eventually { (try? right.serviceStatus(timeout: .seconds(5)))?.messagesReceived == 500 })
    }

    @Test("bad arguments: an echo out of range, a right that is not a looked-up service port")
    func badArguments() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("svc")
        for echo in [-1, ServiceStatus.maxEcho + 1] {
            #expect { _ = try right.serviceStatus(echoing: echo) } throws: { error in
                guard case let .invalidArgument(argument, _) = error as? PortError else { return false }
                return argument == "echoing"
            }
        }
        let local = try PortReceiveRight()
        #expect { _ = try local.makeSendRight().serviceStatus() } throws: { error in
            guard case let .invalidArgument(argument, _) = error as? PortError else { return false }
            return argument == "right"
        }
        // A right to a port of the service other than its service port is not one either.
        let mine = try PortReceiveRight(queueLimit: 4)
        try right.send(id: 2, bytes: Array("x".utf8), attachments: [.sendRight(mine.makeSendRight())], timeout: .seconds(5))
        let back = try mine.receive(timeout: .seconds(10)) // id 3 from the service, through our own port
        #expect(back.id == 3)
    }

    @Test("the wire: a welcomed peer gets STATUS for its PROBE; a refused one, and one that said version 1, get none")
    func wire() throws {
        typealias RawPeer = CrossProcessMisbehaviourTests.RawPeer
        let space = TemporaryNamespace()
        let open = try Peer(["serve", space.path, "open"])
        let refusing = try Peer(["serve", space.path, "refusing", "--refuse"])
        #expect(open.ready() && refusing.ready())

        let welcomed = try RawPeer(path: space.path + "/open")
        #expect(welcomed.send(RawPeer.hello(version: 2)))
        #expect(welcomed.send(RawPeer.probe(seq: 77, echo: 3)))
        let frames = welcomed.packets(until: 2)
        #expect(frames.map { $0.first } == [1, 10], "HELLO then STATUS: \(frames)")
        if frames.count == 2 {
            let status = frames[1]
            #expect(status.count == 48 + 3)
            #expect(RawPeer.u32(status, 8) == 77, "the seq comes back")
            #expect(Int32(bitPattern: RawPeer.u32(status, 12)) == open.pid)
        }

        let refused = try RawPeer(path: space.path + "/refusing")
        // The service may have closed the connection before these arrive: it refuses as soon as it accepts.
        _ = refused.send(RawPeer.hello(version: 2))
        _ = refused.send(RawPeer.probe(seq: 1, echo: 0))
        let answer = refused.packets(until: nil)
        #expect(answer.count == 1 && answer[0].first == 1, "only the refusing HELLO, then the end: \(answer)")
        #expect(answer.first.map { RawPeer.u32($0, 12) & 0xffff0000 } == 1 << 16, "status REFUSED")

        let old = try RawPeer(path: space.path + "/open")
        #expect(old.send(RawPeer.hello(version: 1)))
        #expect(old.send(RawPeer.probe(seq: 5, echo: 0)))
        let oldFrames = old.packets(until: nil)
        #expect(oldFrames.map { $0.first } == [1], "HELLO, then the end without STATUS: \(oldFrames)")
    }
}

/// The status query by hand, on the misbehaving-peer tests' raw connection.
extension CrossProcessMisbehaviourTests.RawPeer {
    /// A client's HELLO saying `version`.
    static func hello(version: UInt8) -> [UInt8] {
        frame(1, le32(0x50494C50) + [version, 0, 0, 0] + le32(65536) + [UInt8](repeating: 0, count: 16))
    }

    /// A PROBE asking for `echo` bytes back, carrying as many.
    static func probe(seq: UInt32, echo: UInt32) -> [UInt8] {
        frame(9, le32(seq) + le32(echo) + [UInt8](repeating: 0, count: Int(echo)))
    }

    static func u32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
    }

    /// Packets received until `count` came, or the end of the connection (or 10 s without anything).
    func packets(until count: Int?) -> [[UInt8]] {
        var packets: [[UInt8]] = []
        while count.map({ packets.count < $0 }) ?? true, case let .packet(bytes) = receive() { packets.append(bytes) }
        return packets
    }
}
