import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Check-in and look-up by name across processes: the bootstrap namespace.
@Suite("Across processes: names")
struct CrossProcessNamingTests {
    @Test("a name checked in by one process is looked up by another, and requests reach it")
    func checkInAndLookUp() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "echo"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("echo")
        #expect(right.isRemote)
        #expect(!right.isDeadName)
        let reply = try right.request(id: 1, bytes: Array("hello".utf8), timeout: .seconds(10))
        #expect(reply.id == 101)
        #expect(reply.payload == Array("hello".utf8))
        #expect(reply.sender.processID == service.pid)
        // A second look-up shares the connection and names the same port.
        let again = try space.namespace.lookUp("echo")
        #expect(again == right)
    }

    @Test("threads that look a name up at once share one new connection, and everything they send on it arrives")
    func concurrentFirstLookUps() throws {
        // The first look-up of a name opens the connection; the others find it and, once the service's hello is in,
        // send on it. Nothing they send may overtake this side's own hello: the service ends a connection whose
        // first frame is anything else. Many rounds, each with a new name and so a new connection, give a thread
        // that opens one many chances to be overtaken.
        let space = TemporaryNamespace()
        let threads = 8
        for round in 0..<400 {
            let name = "first-\(round)"
            let port = try space.namespace.checkIn(name)
            let failures = Locked<[String]>([])
            let clients = (0..<threads).map { thread in
                TestThread {
                    do {
                        let right = try space.namespace.lookUp(name, timeout: .seconds(10))
                        try right.send(id: Int32(thread), bytes: [UInt8(thread)], timeout: .seconds(10))
                    } catch {
                        failures.withLock { $0.append("round \(round), thread \(thread): \(error)") }
                    }
                }
            }
            for client in clients { client.join() }
            #expect(failures.current.isEmpty, "\(failures.current)")
            var ids: Set<Int32> = []
            for _ in 0..<threads - failures.current.count {
                ids.insert(try port.receive(timeout: .seconds(10)).id)
            }
            #expect(ids.count == threads - failures.current.count)
            if !failures.current.isEmpty { break }
        }
    }

    @Test("names outside the rules are invalidArgument, for check-in and look-up alike",
          arguments: ["", ".hidden", "a/b", "with space", "ünïcode", String(repeating: "n", count: 65)])
    func badNames(_ name: String) throws {
        let space = TemporaryNamespace()
        #expect {
            _ = try space.namespace.checkIn(name)
        } throws: { error in
            guard case let .invalidArgument(argument, _) = error as? PortError else { return false }
            return argument == "name"
        }
        #expect {
            _ = try space.namespace.lookUp(name)
        } throws: { error in
            guard case let .invalidArgument(argument, _) = error as? PortError else { return false }
            return argument == "name"
        }
    }

    @Test("the longest name and every allowed character work")
    func longestName() throws {
        let space = TemporaryNamespace()
        let name = "a-Z_0.9" + String(repeating: "x", count: PortNamespace.maxNameLength - 7)
        let port = try space.namespace.checkIn(name)
        let right = try space.namespace.lookUp(name)
        try right.send(id: 7, bytes: [1], timeout: .seconds(5))
        let message = try port.receive(timeout: .seconds(5))
        #expect(message.id == 7)
        #expect(message.sender.isCurrentProcess == false) // it came over the connection, from this very process
        #expect(message.sender.processID == getpid())
    }

    @Test("looking up a name nobody checked in is unknownService")
    func unknown() throws {
        let space = TemporaryNamespace()
        #expect(throws: PortError.unknownService("nobody-here")) { try space.namespace.lookUp("nobody-here") }
        let missing = PortNamespace(path: space.path + "/not-made-yet")
        #expect(throws: PortError.unknownService("x")) { try missing.lookUp("x") }
    }

    @Test("checking in a name a live process holds is serviceNameInUse; in this process too")
    func nameInUse() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "taken"])
        #expect(service.ready())
        #expect(throws: PortError.serviceNameInUse("taken")) { _ = try space.namespace.checkIn("taken") }
        let mine = try space.namespace.checkIn("mine")
        #expect(throws: PortError.serviceNameInUse("mine")) { _ = try space.namespace.checkIn("mine") }
        // Said at once: the 50 ms a check-in may wait for a forked child's copy of the lock are for a process that
        // forked just before (this one does not: its helpers are spawned), and every try would take them.
        var fastest = Duration.seconds(60)
        for _ in 0..<3 {
            let took = ContinuousClock().measure { _ = try? space.namespace.checkIn("taken") }
            fastest = min(fastest, took)
        }
        #expect(fastest < .milliseconds(40))
        _ = mine
    }

    @Test("a name left by a process killed with SIGKILL is taken over, and its old clients hold dead names")
    func staleNameReclaimed() throws {
        let space = TemporaryNamespace()
        let first = try Peer(["serve", space.path, "svc"])
        #expect(first.ready())
        let old = try space.namespace.lookUp("svc")
        first.kill()
        #expect(eventually { old.isDeadName })
        #expect(throws: PortError.invalidDestination) { try old.send(id: 1, timeout: .seconds(1)) }
        #expect(throws: PortError.unknownService("svc")) { try space.namespace.lookUp("svc") }

        let port = try space.namespace.checkIn("svc")
        let fresh = try space.namespace.lookUp("svc")
        #expect(fresh != old)
        try fresh.send(id: 2, timeout: .seconds(5))
        #expect(try port.receive(timeout: .seconds(5)).id == 2)
    }

    @Test("destroying the service's receive right withdraws the name; clients hold dead names")
    func withdrawn() throws {
        let space = TemporaryNamespace()
        var port: PortReceiveRight? = try space.namespace.checkIn("gone")
        let right = try space.namespace.lookUp("gone")
        port = nil
        _ = port
        #expect(eventually { right.isDeadName })
        #expect(throws: PortError.invalidDestination) { try right.send(id: 1, timeout: .seconds(1)) }
        #expect(eventually { (try? space.namespace.lookUp("gone")) == nil })
        #expect(!FileManager.default.fileExists(atPath: space.path + "/gone"))
        _ = try space.namespace.checkIn("gone") // free again
    }

    @Test("a name checked in again the moment its port is destroyed is free: the check-in waits for the withdrawal")
    func checkInAgainAtOnce() throws {
        // The name goes with the port at once, its lock a moment later when the transport thread closes it; a
        // check-in from this process in that moment found the lock held (serviceNameInUse) before it waited.
        let space = TemporaryNamespace()
        for _ in 0..<50 {
            var port: PortReceiveRight? = try space.namespace.checkIn("again")
            port = nil
            _ = port
            let again = try space.namespace.checkIn("again")
            _ = again
        }
        let last = try space.namespace.checkIn("again")
        try space.namespace.lookUp("again").send(id: 7, timeout: .seconds(5))
        #expect(try last.receive(timeout: .seconds(5)).id == 7)
    }

    @Test("a namespace directory open to others, or another user's, is refused")
    func unsafeDirectory() throws {
        let space = TemporaryNamespace()
        chmod(space.path, 0o777)
        #expect {
            _ = try space.namespace.checkIn("x")
        } throws: { error in
            if case .refused = error as? PortError { return true }
            return false
        }
        #expect {
            _ = try space.namespace.lookUp("x")
        } throws: { error in
            if case .refused = error as? PortError { return true }
            return false
        }
    }

    @Test("the standard namespace follows PORTLOOP_NAMESPACE in a child process")
    func standardNamespace() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("env-echo")
        let source = RunLoopPortSource(port: port) { PortReply(id: 101, bytes: $0.payload) }
        let thread = try RunLoopThread(name: "env-echo")
        try thread.loop.add(source, mode: .default)
        defer { thread.stop() }
        // "-": the helper uses PortNamespace.standard, which the environment points here.
        let peer = try Peer(["request", "-", "env-echo", "1", "via-environment"],
                            environment: ["PORTLOOP_NAMESPACE": space.path])
        peer.finish()
        #expect(peer.allLines.contains("reply 101 via-environment"), "\(peer.allLines)")
        let elsewhere = try Peer(["request", "-", "env-echo", "1", "x"],
                                 environment: ["PORTLOOP_NAMESPACE": space.path + "-other"])
        elsewhere.finish()
        #expect(elsewhere.allLines.contains { $0.hasPrefix("error unknown service") }, "\(elsewhere.allLines)")
    }
}

/// Socket activation and who may connect: the service's policy judges the peer's credentials.
@Suite("Across processes: activation and policy")
struct CrossProcessPolicyTests {
    /// A root-owned directory others may enter (0755) holding a socket anyone may connect to, passed to a
    /// service started as systemd's socket activation starts one.
    func activatedService(_ name: String) throws -> (TemporaryNamespace, ActivatedPeer) {
        let space = TemporaryNamespace()
        chmod(space.path, 0o755)
        let listener = try listeningSocket(at: space.path + "/" + name)
        defer { close(listener) }
        let service = try ActivatedPeer(["serve", space.path, name], listener: listener, name: name)
        return (space, service)
    }

    @Test("checkIn adopts the listening socket systemd passed under the service's name")
    func socketActivation() throws {
        let (space, service) = try activatedService("activated")
        #expect(service.ready())
        let right = try space.namespace.lookUp("activated")
        let reply = try right.request(id: 1, bytes: Array("on demand".utf8), timeout: .seconds(10))
        #expect(reply.payload == Array("on demand".utf8))
        #expect(reply.sender.processID == service.pid)
        // No lock file: the name is the service manager's to hold.
        #expect(!FileManager.default.fileExists(atPath: space.path + "/.activated.lock"))
    }

    @Test("a process of another user (a child that drops to nobody) is refused by the default policy",
          .enabled(if: geteuid() == 0, "dropping to nobody needs root"))
    func otherUserRefused() throws {
        let (space, service) = try activatedService("guarded")
        #expect(service.ready())
        let lines = try runPeer(["lookup", space.path, "guarded", "--as-nobody"])
        #expect(lines.count == 1 && lines[0].hasPrefix("error refused"), "\(lines)")
        // The same child as this user is admitted.
        #expect(try runPeer(["lookup", space.path, "guarded"]) == ["ok"])
    }

    @Test("a policy that admits neither this user nor root refuses this process; one that names its uid admits it")
    func narrowedPolicy() throws {
        let space = TemporaryNamespace()
        let closed = PeerPolicy(allowsSameUser: false, allowsRoot: false, userIDs: [geteuid() &+ 12345])
        let port = try space.namespace.checkIn("closed", policy: closed)
        #expect {
            _ = try space.namespace.lookUp("closed")
        } throws: { error in
            if case .refused = error as? PortError { return true }
            return false
        }
        let named = PeerPolicy(allowsSameUser: false, allowsRoot: false, userIDs: [geteuid()])
        let open = try space.namespace.checkIn("named", policy: named)
        let right = try space.namespace.lookUp("named")
        try right.send(id: 4, timeout: .seconds(5))
        #expect(try open.receive(timeout: .seconds(5)).id == 4)
        #expect(CrossProcessStatistics.current.connections >= 1)
        _ = port
        #expect(!PeerPolicy.sameUser.admits(userID: geteuid() &+ 1, groupID: 0) || geteuid() &+ 1 == 0)
        #expect(PeerPolicy.anyone.admits(userID: 4242, groupID: 4242))
        #expect(PeerPolicy(allowsSameUser: false, allowsRoot: false, groupIDs: [77]).admits(userID: 4242, groupID: 77))
        #expect(throws: PortError.self) {
            _ = try space.namespace.checkIn("too-many", policy: PeerPolicy(userIDs: Array(0..<17)))
        }
    }
}

/// A peer that breaks the protocol is cut off; the service goes on serving everyone else.
@Suite("Across processes: misbehaving peers")
struct CrossProcessMisbehaviourTests {
    /// A raw connection to a service's socket, speaking the wire by hand.
    final class RawPeer {
        let fd: Int32

        init(path: String) throws {
            fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8).prefix($0.count - 1)) }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard connected == 0 else { throw PortError.systemCallFailed(call: "connect", errno: errno) }
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close(fd) }

        static func le32(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        static func frame(_ type: UInt8, _ body: [UInt8]) -> [UInt8] {
            [type, 0, 0, 0] + le32(UInt32(8 + body.count)) + body
        }
        /// The client's hello: magic, version 1, status 0, largest frame 65,536, no right.
        static let hello = frame(1, le32(0x50494C50) + [1, 0, 0, 0] + le32(65536) + [UInt8](repeating: 0, count: 16))
        /// A one-byte message to `handle`, with no reply port.
        static func message(to handle: UInt32) -> [UInt8] {
            frame(2, le32(handle) + le32(7) + le32(1) + le32(0) + [0, 0, 0, 0] + le32(0) + le32(0)
                  + [UInt8](repeating: 0, count: 16) + [42])
        }

        func send(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count }

        enum Received: Equatable { case packet([UInt8]), end, nothingFor10Seconds }

        func receive() -> Received {
            var buffer = [UInt8](repeating: 0, count: 65536)
            let n = read(fd, &buffer, buffer.count)
            if n > 0 { return .packet(Array(buffer[0..<n])) }
            return n == 0 ? .end : .nothingFor10Seconds
        }
    }

    @Test("a forged handle, a malformed frame and a frame before the hello each end that connection only",
          arguments: ["forged handle", "malformed", "before hello"])
    func cutOff(_ fault: String) throws {
        let space = TemporaryNamespace()
        let source = RunLoopPortSource(port: try space.namespace.checkIn("strict")) { PortReply(id: 101, bytes: $0.payload) }
        let thread = try RunLoopThread(name: "strict")
        defer { thread.stop() }
        try thread.loop.add(source, mode: .default)
        let honest = try space.namespace.lookUp("strict")

        let raw = try RawPeer(path: space.path + "/strict")
        switch fault {
        case "before hello":
            #expect(raw.send(RawPeer.message(to: 1)))
        case "malformed":
            #expect(raw.send(RawPeer.hello))
            #expect(raw.send([2, 0, 0, 0, 200, 0, 0, 0, 1, 2, 3])) // its length lies
        default:
            #expect(raw.send(RawPeer.hello))
            #expect(raw.send(RawPeer.message(to: 999))) // a handle it was never given
        }
        // The service hung up on it: what it reads is the service's hello, then the end.
        var packets = 0
        var last = raw.receive()
        while case .packet = last {
            packets += 1
            last = raw.receive()
        }
        #expect(last == .end)
        #expect(packets == 1)
        #expect(source.queuedMessageCount == 0)
        // Everyone else is served as before.
        let reply = try honest.request(id: 1, bytes: [1], timeout: .seconds(10))
        #expect(reply.payload == [1])
    }
}
