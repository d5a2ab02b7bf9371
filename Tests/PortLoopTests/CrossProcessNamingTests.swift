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
