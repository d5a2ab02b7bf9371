import Testing

/// `portloop-demo` (Sources/PortLoopDemo), run as a child process: the executable is built beside this test
/// bundle because the test target depends on it.
@Suite("portloop-demo")
struct DemoTests {
    /// Runs the demo with `arguments`; kills it if it has not ended after `limit`.
    func runDemo(_ arguments: [String], limit: Duration = .seconds(25)) throws -> DemoOutcome {
        try runDemoExecutable("portloop-demo", arguments, limit: limit)
    }

    /// The `summary:` line's key=value fields.
    func summaryFields(_ output: String) -> [String: String] { keyValueFields(output, line: "summary: ") }

    @Test("--duration 1 --quiet ends by itself, exits 0 and prints a consistent summary line")
    func quietRun() throws {
        let burst = 8
        let outcome = try runDemo(["--duration", "1", "--quiet", "--producers", "2", "--burst", "\(burst)"])
        #expect(outcome.status == 0, "stderr: \(outcome.errors)")
        #expect(outcome.elapsed >= .seconds(1) && outcome.elapsed < .seconds(20), "took \(outcome.elapsed)")
        #expect(outcome.errors.isEmpty, "\(outcome.errors)")
        // Quiet: the summary only, no trace lines.
        #expect(!outcome.output.contains("µs] "), "\(outcome.output)")

        let fields = summaryFields(outcome.output)
        func int(_ key: String) -> Int {
            let value = fields[key].flatMap { Int($0) }
            #expect(value != nil, "field \(key) in \(outcome.output)")
            return value ?? -1
        }
        func double(_ key: String) -> Double {
            let value = fields[key].flatMap { Double($0) }
            #expect(value != nil, "field \(key) in \(outcome.output)")
            return value ?? -1
        }

        // Every message sent was handled, in whole bursts.
        let messages = int("messages"), bursts = int("bursts")
        #expect(messages > 0)
        #expect(int("handled") == messages)
        #expect(bursts * burst == messages)
        #expect((0...bursts).contains(int("bursts_one_wakeup")))

        // Every afterWaiting is counted once: woken by a port, a timer, a run's timeout, or it did not sleep.
        let wakeUps = int("wakeups"), portWakeUps = int("port_wakeups")
        #expect(wakeUps == portWakeUps + int("timer_wakeups") + int("other_wakeups") + int("no_sleep_wakeups"))
        #expect(int("passes") >= wakeUps)
        #expect((1...messages).contains(portWakeUps))
        #expect(int("free_sends") == messages - portWakeUps)
        #expect(abs(double("msgs_per_port_wakeup") - Double(messages) / Double(portWakeUps)) < 0.01)

        // The scrolling example: the default-mode timer never fires while the loop runs "tracking",
        // the common-mode one does.
        #expect(int("default_fires") >= 1)
        #expect(int("default_fires_tracking") == 0)
        #expect(int("common_fires_tracking") >= 1)
        #expect(int("common_fires") > int("common_fires_tracking"))

        let p50 = double("p50_us"), p99 = double("p99_us"), max = double("max_us")
        #expect(p50 > 0 && p50 <= p99 && p99 <= max)
    }

    @Test("without --quiet it prints the activity trace, the mode switches and the summary")
    func trace() throws {
        let outcome = try runDemo(["--duration", "0.6", "--producers", "1", "--burst", "4"])
        #expect(outcome.status == 0, "stderr: \(outcome.errors)")
        for activity in ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "exit"] {
            #expect(outcome.output.contains("µs] \(activity)"), "no \(activity) in \(outcome.output)")
        }
        #expect(outcome.output.contains("mode tracking"), "\(outcome.output)")
        #expect(outcome.output.contains("woken by port#"), "\(outcome.output)")
        #expect(outcome.output.contains("summary: messages="), "\(outcome.output)")
    }

    @Test("a bad command line prints the error and the usage on stderr and exits 64 (EX_USAGE)",
          arguments: [["--bogus"], ["--burst", "0"], ["--producers", "x"], ["--duration"], ["--duration=60"],
                      ["--quiet=yes"]])
    func badArguments(_ arguments: [String]) throws {
        expectUsageError(try runDemo(arguments), command: "portloop-demo")
    }

    @Test("--help and -h list every flag on stdout and exit 0", arguments: ["--help", "-h"])
    func help(_ flag: String) throws {
        let outcome = try runDemo([flag])
        #expect(outcome.status == 0)
        #expect(outcome.output.hasPrefix("OVERVIEW: "), "\(outcome.output)")
        for option in ["--duration <seconds>", "--producers <count>", "--burst <count>", "--quiet", "-h, --help"] {
            #expect(outcome.output.contains(option), "\(option) in \(outcome.output)")
        }
        #expect(outcome.errors.isEmpty)
    }
}
