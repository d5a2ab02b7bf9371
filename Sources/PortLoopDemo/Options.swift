// The command line of portloop-demo (swift-argument-parser).

import ArgumentParser

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
}

/// `portloop-demo`: parses the flags, checks their ranges, runs the demo and exits with its status.
struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "portloop-demo",
        abstract: "Port-driven wake-ups of a PortLoop run loop, traced live.",
        discussion: """
            A loop thread runs a PortRunLoop with an observer on all activities; producer threads send bursts of \
            messages to Source1 ports on that loop; a default-mode timer and a common-mode timer tick while the \
            loop runs the default mode, then a "tracking" mode (as while a scroll view is dragged), then the \
            default mode again. Timestamps are µs since the start. The first passes and each mode switch are \
            traced activity by activity, the rest one line per wake-up. Ends with a summary: messages, wake-ups, \
            how many sends cost no wake-up, latency p50/p99.

            Exit status: 0 when every message sent was handled, 1 on a failure, 64 for a bad command line.
            """)

    @Option(help: ArgumentHelp("Seconds of loop activity, \(Options.durationRange.lowerBound)…\(Options.durationRange.upperBound).",
                               valueName: "seconds"))
    var duration = 3.0

    @Option(help: ArgumentHelp("Producer threads, one port each, \(Options.producerRange.lowerBound)…\(Options.producerRange.upperBound).",
                               valueName: "count"))
    var producers = 2

    @Option(help: ArgumentHelp("Messages per burst, \(Options.burstRange.lowerBound)…\(Options.burstRange.upperBound).",
                               valueName: "count"))
    var burst = 16

    @Flag(help: "Print the summary only (printing the trace costs the loop thread time).")
    var quiet = false

    func validate() throws {
        guard Options.durationRange.contains(duration) else {
            throw ValidationError("--duration wants seconds from \(Options.durationRange.lowerBound) to "
                                  + "\(Options.durationRange.upperBound), not \(duration)")
        }
        guard Options.producerRange.contains(producers) else {
            throw ValidationError("--producers wants \(Options.producerRange.lowerBound)…\(Options.producerRange.upperBound), not \(producers)")
        }
        guard Options.burstRange.contains(burst) else {
            throw ValidationError("--burst wants \(Options.burstRange.lowerBound)…\(Options.burstRange.upperBound), not \(burst)")
        }
    }

    func run() throws {
        let status = runDemo(Options(duration: duration, producers: producers, burst: burst, quiet: quiet))
        if status != 0 { throw ExitCode(status) }
    }
}
