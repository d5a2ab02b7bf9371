import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The example daemon, `portloop-echod`, run as a child process (it is built beside this test bundle, as a
/// dependency of the test target) with its own clients: its self-test, its graceful stop on SIGTERM and SIGINT
/// under load, and its command line. EchoDaemonAcrossProcessesTests has its clients in other processes.
@Suite("Example daemon (portloop-echod)", .serialized)
struct EchoDaemonTests {
    /// `portloop-echod serve` with `arguments`, checked in under a name of its own in a namespace of its own.
    static func serve(_ arguments: [String], in namespace: TemporaryNamespace) throws -> EchodProcess {
        try EchodProcess(["--namespace", namespace.path, "--name", "echod-test"] + arguments)
    }

    @Test("--self-test answers every request, checks every reply and exits 0")
    func selfTest() throws {
        let space = TemporaryNamespace()
        let daemon = try Self.serve(["--self-test", "20000", "--clients", "4", "--workers", "3", "--interval", "0.2"], in: space)
        let status = daemon.waitForExit(seconds: 120)
        #expect(status == 0, "\(daemon.transcript)")
        let summary = daemon.line(startingWith: "summary:") ?? ""
        #expect(summary.contains("20,000 requests answered"), "\(daemon.stdout)")
        #expect(summary.contains("0 lost"), "\(summary)")
        #expect(summary.contains("clients: 20,000 replies checked, 0 wrong, 0 failed, 0 refused, 0 found it gone"),
                "\(summary)")
        #expect(daemon.stdout.contains("self-test passed: 20,000 requests from 4 clients"), "\(daemon.stdout)")
        #expect(daemon.stderr.isEmpty, "\(daemon.stderr)")
    }

    @Test("a signal under load drains the queued requests, refuses later ones and exits 0 within seconds",
          arguments: [(SIGTERM, "SIGTERM", ["--workers", "2", "--clients", "8"]),
                      (SIGINT, "SIGINT", ["--workers", "2", "--clients", "8"]),
                      // One worker and many clients: the service port holds a queue when the signal comes.
                      (SIGTERM, "SIGTERM", ["--workers", "1", "--clients", "200"])])
    func gracefulStop(signal: Int32, name: String, load: [String]) throws {
        let space = TemporaryNamespace()
        let daemon = try Self.serve(["--duration", "30", "--interval", "0.2"] + load, in: space)
        // Under load: the first throughput line has been printed.
        #expect(daemon.waitForOutput("req/s", seconds: 30), "\(daemon.transcript)")
        let signalled = nowNanoseconds()
        kill(daemon.pid, signal)
        let status = daemon.waitForExit(seconds: 20)
        let seconds = Double(nowNanoseconds() - signalled) / 1e9
        #expect(status == 0, "\(daemon.transcript)")
        #expect(seconds < 5, "took \(seconds) s to stop")
        #expect(daemon.stdout.contains("stopping (\(name)): finishing"), "\(daemon.stdout)")
        let summary = daemon.line(startingWith: "summary:") ?? ""
        #expect(summary.hasPrefix("summary: stopped (\(name)) after"), "\(daemon.stdout)")
        #expect(summary.contains("0 lost"), "\(summary)")
        #expect(summary.contains(" 0 wrong, 0 failed"), "\(summary)")
        #expect(!daemon.stdout.contains("FAILED"), "\(daemon.stdout)")
        #expect(daemon.stderr.isEmpty, "\(daemon.stderr)")
    }

    @Test("--duration stops the daemon by itself as a signal would")
    func duration() throws {
        let space = TemporaryNamespace()
        let daemon = try Self.serve(["--duration", "0.5", "--clients", "2"], in: space)
        #expect(daemon.waitForExit(seconds: 20) == 0, "\(daemon.transcript)")
        #expect(daemon.line(startingWith: "summary: stopped (--duration 0.5 s elapsed) after") != nil, "\(daemon.stdout)")
    }

    @Test("bad flags exit 64 (EX_USAGE) with the error and the usage on standard error",
          arguments: [["--bogus"], ["--workers", "0"], ["--workers"], ["--interval", "abc"], ["--clients", "-1"],
                      ["--duration", "nan"], ["stray"], ["--self-test", "10", "--clients", "0"],
                      ["--name", ".hidden"], ["--name", "a/b"], ["--name", String(repeating: "n", count: 65)],
                      ["--namespace", "relative/dir"], ["--namespace", "/" + String(repeating: "d", count: 90)],
                      ["serve", "--workers", "65"],
                      ["load", "--processes", "0"], ["load", "--threads", "65"], ["load", "--requests", "0"],
                      ["load", "--duration", "-1"], ["load", "--name", ""]])
    func badFlags(_ arguments: [String]) throws {
        let daemon = try EchodProcess(arguments)
        #expect(daemon.waitForExit(seconds: 20) == 64, "\(daemon.transcript)")
        #expect(daemon.stderr.hasPrefix("Error: "), "\(daemon.stderr)")
        #expect(daemon.stderr.contains("Usage: portloop-echod"), "\(daemon.stderr)")
        #expect(daemon.stdout.isEmpty, "\(daemon.stdout)")
    }

    @Test("--help lists the subcommands; each one's --help lists its flags", arguments: [
        ([ "--help"], ["serve", "load", "(default)"]),
        (["-h"], ["serve", "load"]),
        (["serve", "--help"], ["--name <name>", "--namespace <directory>", "--workers <count>", "--interval <seconds>",
                               "--clients <count>", "--self-test <requests>", "--duration <seconds>", "-h, --help"]),
        (["load", "--help"], ["--name <name>", "--namespace <directory>", "--processes <count>", "--threads <count>",
                              "--requests <count>", "--duration <seconds>", "Exit status: 0"]),
    ])
    func help(_ arguments: [String], mentions: [String]) throws {
        let daemon = try EchodProcess(arguments)
        #expect(daemon.waitForExit(seconds: 20) == 0)
        #expect(daemon.stdout.hasPrefix("OVERVIEW: "), "\(daemon.stdout)")
        for text in mentions {
            #expect(daemon.stdout.contains(text), "\(text) in \(daemon.stdout)")
        }
        #expect(!daemon.stdout.contains("load-client"), "the client role is not for people: \(daemon.stdout)")
    }

    @Test("the name and namespace it serves are printed, with the command that loads it")
    func announcesItsName() throws {
        let space = TemporaryNamespace()
        let daemon = try Self.serve(["--duration", "0.3", "--interval", "0.1"], in: space)
        #expect(daemon.waitForExit(seconds: 20) == 0, "\(daemon.transcript)")
        #expect(daemon.stdout.contains("portloop-echod: checked in echod-test in \(space.path); clients: "
                                       + "portloop-echod load --name echod-test --namespace \(space.path)"),
                "\(daemon.stdout)")
        #expect(daemon.stdout.contains("withdrew echod-test"), "\(daemon.stdout)")
        #expect(!FileManager.default.fileExists(atPath: space.path + "/echod-test"), "the socket file is gone")
    }
}
