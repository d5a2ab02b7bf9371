import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `portloop-echod serve` answering other processes: `portloop-echod load` client processes, and this test
/// process itself as a client. Every test has a namespace of its own and ends with no process of it left.
@Suite("Example daemon across processes (portloop-echod serve and load)", .serialized)
struct EchoDaemonAcrossProcessesTests {
    static let name = "echod-ipc"

    static func serve(_ arguments: [String], in space: TemporaryNamespace) throws -> EchodProcess {
        try EchodProcess(["serve", "--namespace", space.path, "--name", name, "--interval", "0.2"] + arguments)
    }

    static func load(_ arguments: [String], in space: TemporaryNamespace) throws -> EchodProcess {
        try EchodProcess(["load", "--namespace", space.path, "--name", name] + arguments)
    }

    /// Waits for the daemon to check in: its name is then in the namespace.
    static func waitForCheckIn(_ daemon: EchodProcess) -> Bool {
        daemon.waitForOutput("checked in \(name)", seconds: 30)
    }

    @Test("load: client processes × threads get every echo right; the daemon counts what they sent")
    func loadAnswered() throws {
        let space = TemporaryNamespace()
        let daemon = try Self.serve(["--workers", "2"], in: space)
        #expect(Self.waitForCheckIn(daemon), "\(daemon.transcript)")
        let load = try Self.load(["--processes", "3", "--threads", "4", "--requests", "500"], in: space)
        #expect(load.waitForExit(seconds: 120) == 0, "\(load.transcript)")
        let summary = load.line(startingWith: "load: 6,000 requests answered right in") ?? ""
        #expect(summary.contains("round trip p50 "), "\(load.transcript)")
        #expect(summary.hasSuffix("0 wrong, 0 failed"), "\(summary)")
        for process in 1...3 {
            #expect(load.stdout.contains("  process \(process): 2,000 right in"), "\(load.stdout)")
        }
        #expect(load.stdout.contains("load passed: every reply checked"), "\(load.stdout)")
        #expect(load.stderr.isEmpty, "\(load.stderr)")

        kill(daemon.pid, SIGTERM)
        #expect(daemon.waitForExit(seconds: 30) == 0, "\(daemon.transcript)")
        let served = daemon.line(startingWith: "summary:") ?? ""
        #expect(served.contains("6,000 requests answered"), "\(daemon.transcript)")
        #expect(processesMentioning(space.path).isEmpty)
    }

    @Test("SIGTERM under load from other processes: the requests in flight are answered, later ones refused, then the name is withdrawn, clients' rights are dead names and the daemon exits 0")
    func gracefulStopAcrossProcesses() throws {
        let space = TemporaryNamespace()
        // One worker that spends 20 ms on each request, and 48 client threads: requests wait their turn at the
        // daemon, so when the signal comes nearly all 48 are there (a few may be on their way: they get
        // refusals).
        let daemon = try Self.serve(["--workers", "1", "--delay", "0.02"], in: space)
        #expect(Self.waitForCheckIn(daemon), "\(daemon.transcript)")
        // This process is a client too: its right must turn into a dead name.
        let right = try space.namespace.lookUp(Self.name)
        #expect(right.isRemote)
        let load = try Self.load(["--processes", "3", "--threads", "16"], in: space)
        // Every thread has had an answer, so every thread is running: each has one request outstanding.
        #expect(eventually(within: 60) { (daemon.servedSoFar ?? 0) >= 60 }, "\(daemon.transcript)")

        kill(daemon.pid, SIGTERM)
        #expect(daemon.waitForExit(seconds: 60) == 0, "\(daemon.transcript)")
        // The requests in flight: queued at the service port, or given to the worker, when the signal came.
        let stopping = daemon.line(startingWith: "stopping (SIGTERM): finishing ") ?? ""
        let inFlight = (number(before: "request", in: stopping) ?? 0) + (number(before: "given to workers", in: stopping) ?? 0)
        #expect(inFlight >= 24, "most of the 48 requests were at the daemon when the signal came: \(stopping)")
        #expect(daemon.stdout.contains("withdrew \(Self.name): clients' rights are dead names now"), "\(daemon.stdout)")
        // The daemon exits 0 only if every request it accepted was answered; none was lost.
        let summary = daemon.line(startingWith: "summary: stopped (SIGTERM)") ?? ""
        #expect(summary.contains(" 0 lost"), "\(daemon.transcript)")
        #expect(daemon.stderr.isEmpty, "\(daemon.stderr)")

        // The load ends by itself: every thread was refused (or found the port gone) and saw a dead name.
        #expect(load.waitForExit(seconds: 60) == 0, "\(load.transcript)")
        let total = load.line(startingWith: "load: ") { $0.contains("requests answered right") } ?? ""
        #expect(total.hasSuffix("0 wrong, 0 failed"), "no request failed or timed out: \(load.transcript)")
        let stopped = load.line(startingWith: "load: the service stopped: ") ?? ""
        let refused = number(before: "request", in: stopped) ?? -1
        let gone = number(before: "found it gone", in: stopped) ?? -1
        let deadNames = number(before: "refused client", in: stopped) ?? -1
        #expect(refused + gone == 48, "every client thread ended with the stop: \(stopped)")
        #expect(deadNames == refused, "every refused thread then saw a dead name: \(stopped)")
        // Every echo the daemon sent, those of the requests in flight included, reached its client and was right.
        let answered = number(before: "requests answered right", in: total)
        #expect(answered != nil && answered == number(before: "requests answered", in: summary),
                "\(load.transcript)\n\(daemon.transcript)")

        // Afterwards: this process's send fails typed, at once; the name is gone; nothing is left.
        #expect(right.isDeadName)
        #expect(throws: PortError.invalidDestination) {
            try right.send(id: 1, bytes: Array("late".utf8), timeout: .seconds(5))
        }
        #expect(throws: PortError.unknownService(Self.name)) { try space.namespace.lookUp(Self.name) }
        #expect(!FileManager.default.fileExists(atPath: space.path + "/" + Self.name))
        #expect(processesMentioning(space.path).isEmpty)
    }

    @Test("load exits 69 when nobody serves the name, and says so")
    func loadWithoutService() throws {
        let space = TemporaryNamespace()
        let load = try Self.load(["--requests", "1"], in: space)
        #expect(load.waitForExit(seconds: 30) == 69, "\(load.transcript)")
        #expect(load.stderr.contains("unknown service"), "\(load.stderr)")
        #expect(load.stderr.contains("is portloop-echod serving it?"), "\(load.stderr)")
        #expect(load.stdout.isEmpty, "\(load.stdout)")
    }

    @Test("load exits 75 when the service stops before the planned requests are done")
    func loadServiceStops() throws {
        let space = TemporaryNamespace()
        let daemon = try Self.serve(["--workers", "1"], in: space)
        #expect(Self.waitForCheckIn(daemon), "\(daemon.transcript)")
        // One thread per process: two threads of a process that look the name up at the same moment may each
        // open a connection, and the count below would then not show that both processes connected.
        let load = try Self.load(["--processes", "2", "--threads", "1", "--requests", "100000000"], in: space)
        #expect(eventually(within: 60) { daemon.stdout.split(separator: "\n").contains {
            $0.hasPrefix("[") && !$0.contains("total           0")
        } }, "\(daemon.transcript)")
        // Both client processes connected (and this one): stopped before the second had looked the name up, it
        // would count its failed look-up as a failure, not as a service that stopped. The load command looks the
        // name up itself before it starts its clients, and that connection lasts a second or two after (its proxy
        // is kept a while): three connections count only once they have lasted longer than that.
        let watcher = try space.namespace.lookUp("echod-ipc")
        var threeSince: Int64?
        #expect(eventually(within: 60) {
            guard ((try? watcher.serviceStatus())?.connections ?? 0) >= 3 else {
                threeSince = nil
                return false
            }
            let since = threeSince ?? nowNanoseconds()
            threeSince = since
            return nowNanoseconds() - since >= 4_000_000_000
        })
        kill(daemon.pid, SIGTERM)
        #expect(daemon.waitForExit(seconds: 60) == 0, "\(daemon.transcript)")
        #expect(load.waitForExit(seconds: 60) == 75, "\(load.transcript)")
        #expect(load.stdout.contains("load INCOMPLETE: the service stopped before the run was done"), "\(load.stdout)")
        #expect(processesMentioning(space.path).isEmpty)
    }

    @Test("load exits 70 when a client process dies (SIGKILL), and the others' reports still count")
    func loadClientKilled() throws {
        let space = TemporaryNamespace()
        let daemon = try Self.serve(["--workers", "2"], in: space)
        #expect(Self.waitForCheckIn(daemon), "\(daemon.transcript)")
        let load = try Self.load(["--processes", "2", "--threads", "2", "--duration", "8"], in: space)
        // The client processes mention the namespace too; kill the first one found.
        var victim: pid_t?
        #expect(eventually(within: 30) {
            victim = processesMentioning(space.path).first { pid in
                let line = (try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8)) ?? ""
                return line.contains("load-client") && line.contains("--index\u{0}1\u{0}")
            }
            return victim != nil
        })
        if let victim { kill(victim, SIGKILL) }
        #expect(load.waitForExit(seconds: 60) == 70, "\(load.transcript)")
        #expect(load.stderr.contains("client process 1 (pid \(victim ?? 0)) was killed by signal 9"), "\(load.stderr)")
        #expect(load.stdout.contains("  process 2: "), "\(load.stdout)")
        kill(daemon.pid, SIGTERM)
        #expect(daemon.waitForExit(seconds: 60) == 0, "\(daemon.transcript)")
        #expect(processesMentioning(space.path).isEmpty)
    }

    @Test("a second daemon for a name in use exits 1 and says why; the first one serves on")
    func nameInUse() throws {
        let space = TemporaryNamespace()
        let first = try Self.serve([], in: space)
        #expect(Self.waitForCheckIn(first), "\(first.transcript)")
        let second = try Self.serve([], in: space)
        #expect(second.waitForExit(seconds: 30) == 1, "\(second.transcript)")
        #expect(second.stderr.contains("could not check in \(Self.name) at \(space.path)"), "\(second.stderr)")
        #expect(second.stderr.contains("in use"), "\(second.stderr)")
        let load = try Self.load(["--processes", "1", "--threads", "1", "--requests", "10"], in: space)
        #expect(load.waitForExit(seconds: 60) == 0, "\(load.transcript)")
        kill(first.pid, SIGTERM)
        #expect(first.waitForExit(seconds: 30) == 0, "\(first.transcript)")
        #expect(processesMentioning(space.path).isEmpty)
    }

    @Test("a namespace directory others may enter is refused at check-in: exit 1, nothing served")
    func namespaceRefused() throws {
        let space = TemporaryNamespace()
        chmod(space.path, 0o777)
        let daemon = try Self.serve([], in: space)
        #expect(daemon.waitForExit(seconds: 30) == 1, "\(daemon.transcript)")
        #expect(daemon.stderr.contains("could not check in \(Self.name) at \(space.path)"), "\(daemon.stderr)")
        #expect(daemon.stderr.contains("mode 0700"), "\(daemon.stderr)")
    }
}

extension EchodProcess {
    /// The running total of the daemon's latest throughput line (`[  1.0 s]  … total 1,234  …`).
    var servedSoFar: Int? {
        stdout.split(separator: "\n").last { $0.hasPrefix("[") }.flatMap { line in
            line.range(of: "total ").flatMap { range in
                Int(line[range.upperBound...].drop { $0 == " " }.prefix { $0.isNumber || $0 == "," }
                    .replacingOccurrences(of: ",", with: ""))
            }
        }
    }

    /// The first line of standard output that starts with `prefix` and satisfies `where`.
    func line(startingWith prefix: String, where condition: (Substring) -> Bool) -> String? {
        stdout.split(separator: "\n").first { $0.hasPrefix(prefix) && condition($0) }.map(String.init)
    }
}
