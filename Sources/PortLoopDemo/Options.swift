// The command line of portloop-demo.

import PortLoopToolSupport

/// What the demo was asked to do.
struct Options: Equatable, Sendable {
    /// Seconds of run-loop activity (the three mode phases together); the process ends shortly after.
    var duration = 3.0
    /// Producer threads, each with a Source1 port of its own on the loop.
    var producers = 2
    /// Messages per burst.
    var burst = 16
    /// Print only the summary.
    var quiet = false

    static let durationRange = 0.3...20.0
    static let producerRange = 1...16
    static let burstRange = 1...1024

    /// The result of parsing: run with these options, or show the help.
    enum Parsed: Equatable {
        case run(Options)
        case help
    }

    /// A bad command line: what was wrong with it.
    struct UsageError: Error, Equatable {
        let message: String
    }

    /// Parses the arguments after the program name. Values go as `--flag value` or `--flag=value`.
    static func parse(_ arguments: [String]) throws(UsageError) -> Parsed {
        var options = Options()
        var flags = CommandLineFlags(arguments)
        while flags.next() {
            let flag = flags.flag
            func value() throws(UsageError) -> String {
                do { return try flags.value() } catch { throw UsageError(message: error.description) }
            }
            func noValue() throws(UsageError) {
                do { try flags.expectNoValue() } catch { throw UsageError(message: error.description) }
            }

            switch flag {
            case "-h", "--help":
                try noValue()
                return .help
            case "--quiet":
                try noValue()
                options.quiet = true
            case "--duration":
                let text = try value()
                guard let seconds = Double(text), durationRange.contains(seconds) else {
                    throw UsageError(message: "--duration wants seconds from \(durationRange.lowerBound) to "
                                     + "\(durationRange.upperBound), not '\(text)'")
                }
                options.duration = seconds
            case "--producers":
                options.producers = try integer(flag, try value(), in: producerRange)
            case "--burst":
                options.burst = try integer(flag, try value(), in: burstRange)
            default:
                throw UsageError(message: "unknown argument '\(flags.argument)'")
            }
        }
        return .run(options)
    }

    private static func integer(_ flag: String, _ text: String, in range: ClosedRange<Int>) throws(UsageError) -> Int {
        guard let value = Int(text), range.contains(value) else {
            throw UsageError(message: "\(flag) wants a whole number from \(range.lowerBound) to \(range.upperBound), "
                             + "not '\(text)'")
        }
        return value
    }

    static let usage = """
        usage: portloop-demo [--duration S] [--producers N] [--burst N] [--quiet] [--help]

        Makes port-driven wake-ups visible. A loop thread runs a PortRunLoop with an observer on all
        activities; producer threads send bursts of messages to Source1 ports on that loop; a default-mode
        timer and a common-mode timer tick while the loop runs the default mode, then a "tracking" mode
        (the seeds' scroll view being dragged), then the default mode again. Timestamps are µs since the
        start. The first passes and each mode switch are traced activity by activity, the rest one line per
        wake-up. Ends with a summary: messages, wake-ups, how many sends cost no wake-up, latency p50/p99.

          --duration S    seconds of loop activity, \(durationRange.lowerBound)…\(durationRange.upperBound) (default 3)
          --producers N   producer threads, one port each, \(producerRange.lowerBound)…\(producerRange.upperBound) (default 2)
          --burst N       messages per burst, \(burstRange.lowerBound)…\(burstRange.upperBound) (default 16)
          --quiet         print the summary only (printing the trace costs the loop thread time)
          --help, -h      show this text

        Exit status: 0 when every message sent was handled, 1 on a failure, 2 for a bad command line.
        """
}
