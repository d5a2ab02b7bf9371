import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `portloop-demo-ipc` (Sources/PortLoopDemoIPC), run as a child process: it starts the app and the event
/// server as processes of its own, in a temporary namespace.
@Suite("portloop-demo-ipc")
struct DemoIPCTests {
    func run(_ arguments: [String], interruptAfter: Duration? = nil) throws -> DemoOutcome {
        try runDemoExecutable("portloop-demo-ipc", arguments, limit: .seconds(45), interruptAfter: interruptAfter)
    }

    /// The integer of `key` in `fields`; an expectation fails if it is missing.
    func int(_ fields: [String: String], _ key: String, sourceLocation: SourceLocation = #_sourceLocation) -> Int {
        let value = fields[key].flatMap { Int($0) }
        #expect(value != nil, "field \(key) in \(fields)", sourceLocation: sourceLocation)
        return value ?? -1
    }

    func double(_ fields: [String: String], _ key: String, sourceLocation: SourceLocation = #_sourceLocation) -> Double {
        let value = fields[key].flatMap { Double($0) }
        #expect(value != nil, "field \(key) in \(fields)", sourceLocation: sourceLocation)
        return value ?? -1
    }

    /// Nothing left behind: the namespace directory is gone and neither child process exists any more.
    func expectNothingLeft(_ cleanup: [String: String], sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(cleanup["removed"] == "1" && cleanup["children_left"] == "0", "\(cleanup)", sourceLocation: sourceLocation)
        let namespace = cleanup["namespace"] ?? ""
        #expect(namespace.hasPrefix("/tmp/portloop-demo-ipc-"), "\(cleanup)", sourceLocation: sourceLocation)
        #expect(!FileManager.default.fileExists(atPath: namespace), "\(namespace) is still there",
                sourceLocation: sourceLocation)
        for key in ["app_pid", "server_pid"] {
            guard let pid = cleanup[key].flatMap({ Int32($0) }), pid > 0 else {
                Issue.record("no \(key) in \(cleanup)", sourceLocation: sourceLocation)
                continue
            }
            // Reaped by the demo: the pid names no process (it would take a wrap of the pid space to reuse it).
            #expect(kill(pid, 0) == -1 && errno == ESRCH, "\(key) \(pid) still exists", sourceLocation: sourceLocation)
        }
    }

    @Test("--quiet run: every event handled in order, latency figures, main-queue work and timer fires meanwhile, nothing left")
    func quietRun() throws {
        let outcome = try run(["--duration", "1", "--quiet"])
        #expect(outcome.status == 0, "stderr: \(outcome.errors)\n\(outcome.output)")
        #expect(outcome.errors.isEmpty, "\(outcome.errors)")
        // No gesture starts after the second is up; the last one starts within a gesture period (150 ± 40 ms) of it.
        #expect(outcome.elapsed >= .milliseconds(750) && outcome.elapsed < .seconds(30), "took \(outcome.elapsed)")
        // Quiet: no trace lines, only the summary and how it ended.
        #expect(!outcome.output.contains("afterWaiting"), "\(outcome.output)")

        let summary = keyValueFields(outcome.output, line: "summary: ")
        #expect(summary["ending"] == "complete", "\(outcome.output)")
        let sent = int(summary, "events_sent")
        #expect(sent > 10, "a second of touches and keys is more than 10 events")
        #expect(int(summary, "events_received") == sent)
        #expect(int(summary, "events_handled") == sent)
        #expect(summary["in_order"] == "1")
        #expect(int(summary, "stray") == 0)

        // Every wake-up is counted once, by what woke the main loop; events came in some of them.
        let source1 = int(summary, "source1_wakeups")
        #expect(int(summary, "wakeups") == source1 + int(summary, "timer_wakeups") + int(summary, "main_queue_wakeups")
                + int(summary, "other_wakeups"))
        #expect((1...sent).contains(source1))
        let perWakeUp = double(summary, "events_per_wakeup")
        #expect(perWakeUp >= 1 && perWakeUp <= Double(int(summary, "max_events_per_wakeup")))
        #expect((0...int(summary, "bursts")).contains(int(summary, "bursts_one_wakeup")))
        #expect(int(summary, "bursts") >= 1)

        let p50 = double(summary, "p50_us"), p99 = double(summary, "p99_us"), max = double(summary, "max_us")
        #expect(p50 > 0 && p50 <= p99 && p99 <= max, "p50 \(p50) p99 \(p99) max \(max)")

        // Meanwhile on the same main thread: main-queue blocks (every one posted ran) and timer fires.
        let posted = int(summary, "main_queue_posted")
        #expect(posted >= 3)
        #expect(int(summary, "main_queue_ran") == posted)
        #expect(int(summary, "frame_fires") >= 3)
        #expect(int(summary, "off_main_thread") == 0)

        let cleanup = keyValueFields(outcome.output, line: "cleanup: ")
        #expect(cleanup["app_status"] == "0" && cleanup["server_status"] == "0", "\(cleanup)")
        #expect(cleanup["socket_left"] == "0", "the app withdrew its name: \(cleanup)")
        expectNothingLeft(cleanup)
    }

    @Test("without --quiet both processes trace live: the main loop's activities, Source1 → Source0, main queue, timer")
    func trace() throws {
        let outcome = try run(["--duration", "0.6"])
        #expect(outcome.status == 0, "stderr: \(outcome.errors)")
        for text in ["app    entry", "app    beforeWaiting", "app    afterWaiting", "woken by Source1",
                     "↳ Source1 port#", "↳ Source0 \"dispatch\"", "DispatchQueue.main block", "timer \"frame\" fire",
                     "server looked up", "server touch 1 ", "began at", "moves, back to back", "app    exit",
                     "summary: ending=complete", "demo   ended: app exited 0, event server exited 0"] {
            #expect(outcome.output.contains(text), "no \(text) in \(outcome.output)")
        }
        expectNothingLeft(keyValueFields(outcome.output, line: "cleanup: "))
    }

    @Test("the event server killed with SIGKILL: the app sees a dead name, says so, exits 3; nothing left")
    func serverKilled() throws {
        let outcome = try run(["--duration", "8", "--quiet", "--kill-server-after", "1.5"])
        #expect(outcome.status == 3, "stderr: \(outcome.errors)\n\(outcome.output)")
        // Noticed within moments, not at the end of the 8 s of input.
        #expect(outcome.elapsed < .seconds(6), "took \(outcome.elapsed)")
        #expect(outcome.output.contains("killed the event server"), "\(outcome.output)")
        #expect(outcome.output.contains("is gone: its port port#"), "\(outcome.output)")
        #expect(outcome.output.contains("the app exits 3"), "\(outcome.output)")

        let summary = keyValueFields(outcome.output, line: "summary: ")
        #expect(summary["ending"] == "server-gone", "\(outcome.output)")
        #expect(summary["events_sent"] == "none")
        let received = int(summary, "events_received")
        #expect(received > 0)
        #expect(int(summary, "events_handled") == received, "what the server sent before it died is handled")
        #expect(summary["in_order"] == "1")

        let cleanup = keyValueFields(outcome.output, line: "cleanup: ")
        #expect(cleanup["app_status"] == "3" && cleanup["server_status"] == "signal", "\(cleanup)")
        expectNothingLeft(cleanup)
    }

    @Test("the event server killed before its hello: the app gives up waiting for it after 5 s and says why; nothing left")
    func serverKilledAtOnce() throws {
        let outcome = try run(["--duration", "8", "--quiet", "--kill-server-after", "0"])
        #expect(outcome.status == 1, "stderr: \(outcome.errors)\n\(outcome.output)")
        #expect(outcome.elapsed >= .seconds(5) && outcome.elapsed < .seconds(12), "took \(outcome.elapsed)")
        #expect(outcome.output.contains("failed: no event server said hello within 5 s"), "\(outcome.output)")
        #expect(outcome.errors.contains("the app exited 1 after the other side was killed"), "\(outcome.errors)")
        let summary = keyValueFields(outcome.output, line: "summary: ")
        #expect(summary["ending"] == "failed" && summary["events_received"] == "0", "\(outcome.output)")
        let cleanup = keyValueFields(outcome.output, line: "cleanup: ")
        #expect(cleanup["app_status"] == "1" && cleanup["server_status"] == "signal", "\(cleanup)")
        expectNothingLeft(cleanup)
    }

    @Test("the app killed with SIGKILL: the server's next send finds a dead name, it exits 3; its socket is removed")
    func appKilled() throws {
        let outcome = try run(["--duration", "8", "--quiet", "--kill-app-after", "1.5"])
        #expect(outcome.status == 3, "stderr: \(outcome.errors)\n\(outcome.output)")
        #expect(outcome.elapsed < .seconds(6), "took \(outcome.elapsed)")
        #expect(outcome.output.contains("the app is gone"), "\(outcome.output)")
        #expect(!outcome.output.contains("summary: "), "a killed app prints no summary")

        let cleanup = keyValueFields(outcome.output, line: "cleanup: ")
        #expect(cleanup["app_status"] == "signal" && cleanup["server_status"] == "3", "\(cleanup)")
        #expect(cleanup["socket_left"] == "1", "a killed app cannot withdraw its name: \(cleanup)")
        expectNothingLeft(cleanup)
    }

    @Test("SIGINT to the demo stops both processes and removes the namespace; exit 130")
    func interrupted() throws {
        let outcome = try run(["--duration", "8", "--quiet"], interruptAfter: .milliseconds(700))
        #expect(outcome.status == 130, "stderr: \(outcome.errors)\n\(outcome.output)")
        #expect(outcome.elapsed < .seconds(6), "took \(outcome.elapsed)")
        #expect(outcome.errors.contains("interrupted"), "\(outcome.errors)")
        expectNothingLeft(keyValueFields(outcome.output, line: "cleanup: "))
    }

    @Test("a bad command line prints the error and the usage on stderr and exits 64 (EX_USAGE)",
          arguments: [["--bogus"], ["--duration", "0.1"], ["--kill-server-after", "-1"],
                      ["--kill-server-after", "1", "--kill-app-after", "1"], ["--role", "app"]])
    func badArguments(_ arguments: [String]) throws {
        expectUsageError(try run(arguments), command: "portloop-demo-ipc")
    }

    @Test("--help lists the flags, not the hidden ones the demo gives its children")
    func help() throws {
        let outcome = try run(["--help"])
        #expect(outcome.status == 0)
        for option in ["--duration <seconds>", "--quiet", "--kill-server-after <seconds>", "--kill-app-after <seconds>"] {
            #expect(outcome.output.contains(option), "\(option) in \(outcome.output)")
        }
        #expect(!outcome.output.contains("--role"), "\(outcome.output)")
    }
}
