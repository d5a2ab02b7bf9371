import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The `portloop` command against services run by PortLoopIPCPeer in a temporary namespace: help, usage
/// errors, `services` and `send`, with their output and exit codes.
@Suite("portloop: help, services, send", .serialized)
struct CommandLineTests {
    @Test("--help on the command and on every subcommand exits 0; the root's lists the exit codes")
    func help() throws {
        let root = try portloop(["--help"])
        #expect(root.status == PortloopExit.success)
        let text = root.stdout.joined(separator: "\n")
        for word in ["services", "ping", "send", "watch", "69", "74", "75", "76", "77"] {
            #expect(text.contains(word), "\(word) missing from: \(text)")
        }
        for subcommand in ["services", "ping", "send", "watch"] {
            let result = try portloop([subcommand, "--help"])
            #expect(result.status == PortloopExit.success)
            #expect(result.stdout.contains { $0.contains("USAGE: portloop \(subcommand)") }, "\(result.stdout)")
            #expect(!result.stdout.contains { $0.contains("Seconds(") }, "defaults read as numbers: \(result.stdout)")
        }
    }

    @Test("bad usage exits 64 with an error line", arguments: [
        ["ping"], ["ping", "svc", "-c", "0"], ["ping", "svc", "--size", "70000"], ["ping", "a/b"],
        ["send", "svc"], ["send", "svc", "--id", "1", "--payload", "x", "--file", "/dev/null"],
        ["watch", "svc", "--interval", "0"], ["services", "--namespace", "relative/path"], ["frobnicate"],
        ["ping", "svc", "--timeout", "-1"],
    ])
    func badUsage(_ arguments: [String]) throws {
        let result = try portloop(arguments)
        #expect(result.status == PortloopExit.usage, "\(result)")
        #expect(result.stderr.first?.hasPrefix("Error: ") == true, "\(result.stderr)")
    }

    @Test("services lists live services with pid, uid, queue depth and messages received; stale and refused are marked")
    func services() throws {
        let space = TemporaryNamespace()
        let live = try Peer(["serve", space.path, "live", "8", "--paused"]) // its loop waits: messages stay queued
        let refusing = try Peer(["serve", space.path, "refusing", "--refuse"])
        let dead = try Peer(["serve", space.path, "dead"])
        #expect(live.ready() && refusing.ready() && dead.ready())
        dead.kill() // its socket file stays: a stale name

        for _ in 0..<3 {
            let sent = try portloop(["send", "live", "--namespace", space.path, "--id", "8", "--payload", "x"])
            #expect(sent.status == PortloopExit.success, "\(sent)")
        }
        let result = try portloop(["services", "--namespace", space.path])
        #expect(result.status == PortloopExit.success, "\(result)")
        #expect(result.stdout.first?.split(separator: " ", omittingEmptySubsequences: true)
            == ["NAME", "PID", "UID", "QUEUE", "RECEIVED", "CLIENTS", "STATE"], "\(result.stdout)")
        let rows = Dictionary(result.stdout.dropFirst().map { line in
            let cells = line.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
            return (cells[0], cells)
        }, uniquingKeysWith: { $1 })
        // CLIENTS counts the listing's own connection, and those of the sends above until the service sees them end.
        #expect(rows["live"]?.prefix(5) == ["live", "\(live.pid)", "\(geteuid())", "3/8", "3"], "\(result.stdout)")
        #expect((rows["live"]?.last).flatMap { Int($0) }.map { $0 >= 1 } == true, "\(result.stdout)")
        #expect(rows["refusing"] == ["refusing", "-", "-", "-", "-", "-", "refused"], "\(result.stdout)")
        #expect(rows["dead"] == ["dead", "-", "-", "-", "-", "-", "stale"], "\(result.stdout)")
        #expect(rows.count == 3, "lock files and other entries are not services: \(result.stdout)")
        live.tell("go")
    }

    @Test("services: a namespace that does not exist lists none, a service that does not answer is marked, a namespace open to others is refused (77)")
    func servicesNamespaces() throws {
        let empty = try portloop(["services", "--namespace", "/tmp/portloop-no-such-namespace-\(getpid())"])
        #expect(empty.status == PortloopExit.success)
        #expect(empty.stdout.count == 1, "only the header: \(empty.stdout)")

        let frozenSpace = TemporaryNamespace()
        let frozen = try Peer(["serve", frozenSpace.path, "frozen"])
        #expect(frozen.ready())
        kill(frozen.pid, SIGSTOP) // nobody in it answers: not even its transport
        let silent = try portloop(["services", "--namespace", frozenSpace.path, "--timeout", "0.5"])
        kill(frozen.pid, SIGCONT)
        #expect(silent.status == PortloopExit.success, "\(silent)")
        #expect(silent.stdout.last?.hasSuffix("no answer") == true, "\(silent.stdout)")

        let space = TemporaryNamespace()
        chmod(space.path, 0o777)
        let open = try portloop(["services", "--namespace", space.path])
        #expect(open.status == PortloopExit.refused, "\(open)")
        #expect(open.stderr == ["portloop: refused: the namespace \(space.path) is another user's, or writable by others"])
    }

    @Test("send: one message, a reply printed, and every error as one line with its exit code")
    func send() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "echo", "4", "100"]) // max message size 100
        let refusing = try Peer(["serve", space.path, "refusing", "--refuse"])
        #expect(service.ready() && refusing.ready())
        let base = ["--namespace", space.path, "--timeout", "5"]

        let echoed = try portloop(["send", "echo", "--id", "1", "--payload", "hello", "--reply"] + base)
        #expect(echoed.status == PortloopExit.success, "\(echoed)")
        #expect(echoed.stdout == ["reply id=101 bytes=5: hello"])

        let binary = try portloop(["send", "echo", "--id", "1", "--file", "/proc/self/cmdline", "--reply"] + base)
        #expect(binary.status == PortloopExit.success, "\(binary)")
        #expect(binary.stdout.first?.contains("bytes=") == true)

        let plain = try portloop(["send", "echo", "--id", "8", "--payload", "1 2 0"] + base)
        #expect(plain.stdout == ["sent id=8 bytes=5 to echo"], "\(plain)")

        let dropped = try portloop(["send", "echo", "--id", "6", "--reply"] + base)
        #expect(dropped.status == PortloopExit.noReply, "\(dropped)")
        #expect(dropped.stderr == ["portloop: no reply: echo dropped the request without answering"])

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("portloop-send-\(getpid())").path
        #expect(FileManager.default.createFile(atPath: file, contents: Data(repeating: 0x61, count: 101)))
        defer { unlink(file) }
        let large = try portloop(["send", "echo", "--id", "1", "--file", file] + base)
        #expect(large.status == PortloopExit.tooLarge, "\(large)")
        #expect(large.stderr == ["portloop: too large: 101 bytes, and echo takes at most 100"])

        let missing = try portloop(["send", "echo", "--id", "1", "--file", file + ".missing"] + base)
        #expect(missing.status == PortloopExit.cannotRead, "\(missing)")
        #expect(missing.stderr.count == 1 && missing.stderr[0].hasPrefix("portloop: cannot read "), "\(missing.stderr)")

        let unknown = try portloop(["send", "nobody", "--id", "1"] + base)
        #expect(unknown.status == PortloopExit.unknownService, "\(unknown)")
        #expect(unknown.stderr == ["portloop: unknown service: nobody is not checked in by a live process"])

        let refused = try portloop(["send", "refusing", "--id", "1"] + base)
        #expect(refused.status == PortloopExit.refused, "\(refused)")
        #expect(refused.stderr.count == 1 && refused.stderr[0].hasPrefix("portloop: refused: "), "\(refused.stderr)")
    }

    @Test("send times out (75) waiting for a reply from a service whose loop does not run, and for room in its queue")
    func sendTimesOut() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "stuck", "1", "--paused"])
        #expect(service.ready())
        // Long enough for the look-up on a loaded machine; the waits that time out are the point.
        let base = ["--namespace", space.path, "--timeout", "1.5"]
        let noAnswer = try portloop(["send", "stuck", "--id", "1", "--reply"] + base)
        #expect(noAnswer.status == PortloopExit.timedOut, "\(noAnswer)")
        #expect(noAnswer.stderr == ["portloop: timed out waiting for stuck"])
        // The request above fills the queue of one: the next send finds no room.
        let full = try portloop(["send", "stuck", "--id", "8"] + base)
        #expect(full.status == PortloopExit.timedOut, "\(full)")
        #expect(full.stderr == ["portloop: timed out sending to stuck"])
        service.tell("go")
    }
}

/// A service of an earlier release, played by hand: it welcomes with a version-1 HELLO, whose wire has no status
/// query.
@Suite("portloop: a service of an earlier release", .serialized)
struct CommandLineOldServiceTests {
    @Test("services marks it old; ping and watch say it answers no status query (exit 1); send still works")
    func oldService() throws {
        typealias RawPeer = CrossProcessMisbehaviourTests.RawPeer
        let space = TemporaryNamespace()
        let listener = try listeningSocket(at: space.path + "/old")
        let accepted = Locked<[Int32]>([])
        let server = TestThread {
            // Welcomes up to four connections, one per command below, within 20 s.
            for _ in 0..<4 {
                var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                guard poll(&ready, 1, 20_000) == 1 else { break }
                let fd = accept(listener, nil, nil)
                guard fd >= 0 else { break }
                accepted.withLock { $0.append(fd) }
                // Version 1, welcome, the service port's right: handle 1, 4 credits, payloads up to 64 bytes.
                let hello = RawPeer.frame(1, RawPeer.le32(0x50494c50) + [1, 0, 0, 0] + RawPeer.le32(65536)
                                             + [1, 0, 0, 0] + RawPeer.le32(1) + RawPeer.le32(4) + RawPeer.le32(64))
                _ = Glibc.send(fd, hello, hello.count, Int32(MSG_NOSIGNAL))
            }
        }
        defer {
            shutdown(listener, Int32(SHUT_RDWR))
            server.join()
            close(listener)
            accepted.current.forEach { close($0) }
        }
        let base = ["--namespace", space.path, "--timeout", "2"]
        let listed = try portloop(["services"] + base)
        #expect(listed.status == PortloopExit.success, "\(listed)")
        #expect(listed.stdout.last?.split(separator: " ", omittingEmptySubsequences: true).last == "old", "\(listed.stdout)")

        let pinged = try portloop(["ping", "old", "-c", "1"] + base)
        #expect(pinged.status == PortloopExit.otherFailure, "\(pinged)")
        #expect(pinged.stderr == ["portloop: old answers no status query: its release predates them"])

        let watched = try portloop(["watch", "old"] + base)
        #expect(watched.status == PortloopExit.otherFailure, "\(watched)")
        #expect(watched.stderr == ["portloop: old answers no status query: its release predates them"])

        let sent = try portloop(["send", "old", "--id", "1", "--payload", "hi"] + base)
        #expect(sent.status == PortloopExit.success, "\(sent)")
    }
}
