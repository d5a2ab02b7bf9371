import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `portloop ping` and `portloop watch` against services run by PortLoopIPCPeer: their lines, summaries and
/// exit codes, Ctrl-C, and a service that stops answering or goes away.
@Suite("portloop: ping, watch", .serialized)
struct CommandLinePingWatchTests {
    @Test("ping prints a line per request and a min/p50/p99/max summary; the service's loop need not run")
    func ping() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc", "--paused"]) // the transport answers, not the loop
        #expect(service.ready())
        let result = try portloop(["ping", "svc", "--namespace", space.path, "-c", "4", "-i", "0.05", "--size", "1000"])
        #expect(result.status == PortloopExit.success, "\(result)")
        #expect(result.stdout.first == "PING svc in \(space.path): 1000 bytes, answered by the service's transport")
        let replies = result.stdout.filter { $0.hasPrefix("1000 bytes from svc (pid \(service.pid)): seq=") }
        #expect(replies.count == 4, "\(result.stdout)")
        #expect(result.stdout.contains { $0.hasPrefix("4 requests, 4 answered, 0% unanswered, time ") }, "\(result.stdout)")
        let summary = try #require(result.stdout.last)
        #expect(summary.hasPrefix("rtt min/p50/p99/max = ") && summary.hasSuffix(" ms"), "\(summary)")
        let values = summary.dropFirst("rtt min/p50/p99/max = ".count).dropLast(3).split(separator: "/").compactMap { Double($0) }
        #expect(values.count == 4 && values == values.sorted(), "\(summary)")
        service.tell("go")
    }

    @Test("ping: an unknown service (69), a refusing one (77), one that does not answer (75)")
    func pingErrors() throws {
        let space = TemporaryNamespace()
        let refusing = try Peer(["serve", space.path, "refusing", "--refuse"])
        let frozen = try Peer(["serve", space.path, "frozen"])
        #expect(refusing.ready() && frozen.ready())
        let base = ["--namespace", space.path, "-c", "1", "--timeout", "5"]

        let unknown = try portloop(["ping", "nobody"] + base)
        #expect(unknown.status == PortloopExit.unknownService, "\(unknown)")
        #expect(unknown.stderr == ["portloop: unknown service: nobody is not checked in by a live process"])

        let refused = try portloop(["ping", "refusing"] + base)
        #expect(refused.status == PortloopExit.refused, "\(refused)")
        #expect(refused.stderr.count == 1 && refused.stderr[0].hasPrefix("portloop: refused: "), "\(refused.stderr)")

        kill(frozen.pid, SIGSTOP) // nobody in it answers: not even its transport
        defer { kill(frozen.pid, SIGCONT) }
        let silent = try portloop(["ping", "frozen", "--namespace", space.path, "-c", "1", "--timeout", "0.5"])
        #expect(silent.status == PortloopExit.timedOut, "\(silent)")
        #expect(silent.stderr.count == 1 && silent.stderr[0].hasPrefix("portloop: timed out "), "\(silent.stderr)")
    }

    @Test("ping: a request without an answer is a line, the summary counts it, and the exit code is 75")
    func pingLoss() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc"])
        #expect(service.ready())
        let run = try CommandRun(["ping", "svc", "--namespace", space.path, "-c", "3", "-i", "0.3", "--timeout", "1.5"])
        #expect(run.waitForLine(containing: "seq=1 time=") != nil, "\(run.stdout)")
        kill(service.pid, SIGSTOP) // the next requests go unanswered
        let status = run.finish(within: 30)
        kill(service.pid, SIGCONT)
        #expect(status == PortloopExit.timedOut, "\(run.stdout) \(run.stderr)")
        #expect(run.stdout.contains { $0.hasPrefix("no answer from svc: seq=") && $0.contains("timed out") }, "\(run.stdout)")
        #expect(run.stdout.contains { $0.hasPrefix("3 requests, 1 answered, 66% unanswered") }, "\(run.stdout)")
        #expect(run.stderr == ["portloop: 2 of 3 requests to svc timed out"])
    }

    @Test("ping: the service going away mid-ping ends it with the summary, one error line and 74")
    func pingServiceGone() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc"])
        #expect(service.ready())
        let run = try CommandRun(["ping", "svc", "--namespace", space.path, "-i", "0.1"])
        #expect(run.waitForLine(containing: "seq=1 time=") != nil, "\(run.stdout)")
        service.kill()
        #expect(run.finish(within: 20) == PortloopExit.wentAway, "\(run.stdout) \(run.stderr)")
        #expect(run.stderr == ["portloop: svc went away"])
        #expect(run.stdout.contains("--- svc ping statistics ---"), "\(run.stdout)")
    }

    @Test("ping until Ctrl-C prints its summary and exits 0")
    func pingInterrupted() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc"])
        #expect(service.ready())
        let run = try CommandRun(["ping", "svc", "--namespace", space.path, "-i", "0.05"])
        #expect(run.waitForLine(containing: "seq=2 time=") != nil, "\(run.stdout)")
        run.interrupt()
        #expect(run.finish(within: 10) == PortloopExit.success, "\(run.stderr)")
        #expect(run.stdout.contains { $0 == "--- svc ping statistics ---" }, "\(run.stdout)")
        #expect(run.stdout.last?.hasPrefix("rtt min/p50/p99/max = ") == true, "\(run.stdout)")
    }

    @Test("watch shows the messages a service receives per second; the service going away ends it with 74")
    func watch() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc", "1024"])
        #expect(service.ready())
        let run = try CommandRun(["watch", "svc", "--namespace", space.path, "--interval", "0.2"])
        #expect(run.waitForLine(containing: "watching svc (pid \(service.pid)) every 0.2 s") != nil, "\(run.stdout)")
        let client = try Peer(["client", space.path, "svc", "2", "500"])
        #expect(client.line(startingWith: "sent 1000") != nil, "\(client.allLines)")
        // Lines look like "12:34:56  2500 msg/s  queue 0/1024  received 1000"; one of them counts the burst.
        let counted = run.waitForLine(containing: "received 1000")
        #expect(counted != nil, "\(run.stdout)")
        #expect(run.stdout.contains { line in
            line.contains(" msg/s  queue ") && (Int(line.split(separator: " ")[1]) ?? 0) > 0
        }, "a line with a rate above 0: \(run.stdout)")
        service.kill()
        #expect(run.finish(within: 20) == PortloopExit.wentAway, "\(run.stdout) \(run.stderr)")
        #expect(run.stderr == ["portloop: svc went away"])
    }

    @Test("watch stops after -c lines, or at Ctrl-C, with exit code 0; an unknown service is 69")
    func watchEnds() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "svc"])
        #expect(service.ready())
        let counted = try portloop(["watch", "svc", "--namespace", space.path, "--interval", "0.05", "-c", "3"])
        #expect(counted.status == PortloopExit.success, "\(counted)")
        #expect(counted.stdout.filter { $0.contains(" msg/s  queue 0/64  received ") }.count == 3, "\(counted.stdout)")

        let run = try CommandRun(["watch", "svc", "--namespace", space.path, "--interval", "0.05"])
        #expect(run.waitForLine(containing: "msg/s") != nil)
        run.interrupt()
        #expect(run.finish(within: 10) == PortloopExit.success, "\(run.stderr)")

        let frozen = try CommandRun(["watch", "svc", "--namespace", space.path, "--interval", "0.05", "--timeout", "1.5"])
        #expect(frozen.waitForLine(containing: "msg/s") != nil)
        kill(service.pid, SIGSTOP) // its transport stops answering
        let status = frozen.finish(within: 20)
        kill(service.pid, SIGCONT)
        #expect(status == PortloopExit.timedOut, "\(frozen.stderr)")
        #expect(frozen.stderr == ["portloop: timed out watching svc"])

        let unknown = try portloop(["watch", "nobody", "--namespace", space.path])
        #expect(unknown.status == PortloopExit.unknownService, "\(unknown)")
        #expect(unknown.stderr == ["portloop: unknown service: nobody is not checked in by a live process"])
    }
}
