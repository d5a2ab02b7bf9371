import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The example daemon, `portloop-echod`, run as a child process (it is built beside this test bundle, as a
/// dependency of the test target): its self-test, its graceful stop on SIGTERM and SIGINT under load, and its
/// command line.
@Suite("Example daemon (portloop-echod)", .serialized)
struct EchoDaemonTests {
    /// A running daemon whose output is collected by a reader thread, so the test can wait for a line.
    final class Daemon: @unchecked Sendable {
        let process = Process()
        private let output = Locked<[UInt8]>([])
        private let errors = Locked<[UInt8]>([])
        private var readers: [TestThread] = []

        init(_ arguments: [String]) throws {
            let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            process.executableURL = directory.appendingPathComponent("portloop-echod")
            process.arguments = arguments
            let out = Pipe(), err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            for (pipe, buffer) in [(out, output), (err, errors)] {
                let fd = pipe.fileHandleForReading.fileDescriptor
                readers.append(TestThread {
                    var chunk = [UInt8](repeating: 0, count: 4096)
                    while true {
                        let n = read(fd, &chunk, chunk.count)
                        if n < 0 && errno == EINTR { continue }
                        guard n > 0 else { return }
                        buffer.withLock { $0.append(contentsOf: chunk[..<n]) }
                    }
                })
            }
        }

        var stdout: String { String(decoding: output.current, as: UTF8.self) }
        var stderr: String { String(decoding: errors.current, as: UTF8.self) }

        /// Waits until standard output contains `text`; false on timeout.
        func waitForOutput(_ text: String, seconds: Double) -> Bool {
            let deadline = nowNanoseconds() + Int64(seconds * 1e9)
            while nowNanoseconds() < deadline {
                if stdout.contains(text) { return true }
                sleepMilliseconds(10)
            }
            return stdout.contains(text)
        }

        /// Waits for the process to exit; its status, or nil if it was still running after `seconds` (it is
        /// then killed). Returns only once the output is complete.
        func waitForExit(seconds: Double) -> Int32? {
            let deadline = nowNanoseconds() + Int64(seconds * 1e9)
            while process.isRunning && nowNanoseconds() < deadline { sleepMilliseconds(5) }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                for reader in readers { reader.join() }
                return nil
            }
            process.waitUntilExit()
            for reader in readers { reader.join() }
            return process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus
        }

        /// The line of standard output that starts with `prefix`.
        func line(startingWith prefix: String) -> String? {
            stdout.split(separator: "\n").first { $0.hasPrefix(prefix) }.map(String.init)
        }
    }

    @Test("--self-test answers every request, checks every reply and exits 0")
    func selfTest() throws {
        let daemon = try Daemon(["--self-test", "20000", "--clients", "4", "--workers", "3", "--interval", "0.2"])
        let status = daemon.waitForExit(seconds: 120)
        #expect(status == 0, "\(daemon.stdout)\n\(daemon.stderr)")
        let summary = daemon.line(startingWith: "summary:") ?? ""
        #expect(summary.contains("20,000 requests answered"), "\(daemon.stdout)")
        #expect(summary.contains("0 lost"), "\(summary)")
        #expect(summary.contains("clients: 20,000 replies checked, 0 wrong, 0 failed, 0 refused"), "\(summary)")
        #expect(daemon.stdout.contains("self-test passed: 20,000 requests from 4 clients"), "\(daemon.stdout)")
        #expect(daemon.stderr.isEmpty, "\(daemon.stderr)")
    }

    @Test("a signal under load drains the queued requests, refuses later ones and exits 0 within seconds",
          arguments: [(SIGTERM, "SIGTERM", ["--workers", "2", "--clients", "8"]),
                      (SIGINT, "SIGINT", ["--workers", "2", "--clients", "8"]),
                      // One worker and many clients: the service port holds a queue when the signal comes.
                      (SIGTERM, "SIGTERM", ["--workers", "1", "--clients", "200"])])
    func gracefulStop(signal: Int32, name: String, load: [String]) throws {
        let daemon = try Daemon(["--duration", "30", "--interval", "0.2"] + load)
        // Under load: the first throughput line has been printed.
        #expect(daemon.waitForOutput("req/s", seconds: 30), "\(daemon.stdout)\n\(daemon.stderr)")
        let signalled = nowNanoseconds()
        kill(daemon.process.processIdentifier, signal)
        let status = daemon.waitForExit(seconds: 20)
        let seconds = Double(nowNanoseconds() - signalled) / 1e9
        #expect(status == 0, "\(daemon.stdout)\n\(daemon.stderr)")
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
        let daemon = try Daemon(["--duration", "0.5", "--clients", "2"])
        #expect(daemon.waitForExit(seconds: 20) == 0, "\(daemon.stdout)\n\(daemon.stderr)")
        #expect(daemon.line(startingWith: "summary: stopped (--duration 0.5 s elapsed) after") != nil, "\(daemon.stdout)")
    }

    @Test("bad flags exit 64 (EX_USAGE) with the error and the usage on standard error",
          arguments: [["--bogus"], ["--workers", "0"], ["--workers"], ["--interval", "abc"], ["--clients", "-1"],
                      ["--duration", "nan"], ["stray"], ["--self-test", "10", "--clients", "0"]])
    func badFlags(_ arguments: [String]) throws {
        let daemon = try Daemon(arguments)
        #expect(daemon.waitForExit(seconds: 20) == 64)
        #expect(daemon.stderr.hasPrefix("Error: "), "\(daemon.stderr)")
        #expect(daemon.stderr.contains("Usage: portloop-echod"), "\(daemon.stderr)")
        #expect(daemon.stdout.isEmpty, "\(daemon.stdout)")
    }

    @Test("--help and -h list every flag and exit 0", arguments: ["--help", "-h"])
    func help(_ flag: String) throws {
        let daemon = try Daemon([flag])
        #expect(daemon.waitForExit(seconds: 20) == 0)
        #expect(daemon.stdout.hasPrefix("OVERVIEW: "), "\(daemon.stdout)")
        for option in ["--workers <count>", "--interval <seconds>", "--clients <count>", "--self-test <requests>",
                       "--duration <seconds>", "-h, --help"] {
            #expect(daemon.stdout.contains(option), "\(option) in \(daemon.stdout)")
        }
    }

    @Test("with no clients the daemon says why it serves nothing")
    func noClients() throws {
        let daemon = try Daemon(["--duration", "0.3", "--interval", "0.1"])
        #expect(daemon.waitForExit(seconds: 20) == 0, "\(daemon.stdout)\n\(daemon.stderr)")
        #expect(daemon.line(startingWith: "portloop-echod: no clients") != nil, "\(daemon.stdout)")
    }
}
