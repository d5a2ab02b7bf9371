// portloop-demo-ipc: a touch's way from an event server process to an app's main run loop, traced live.
//
//   portloop-demo-ipc [--duration <seconds>] [--quiet] [--kill-server-after <seconds>] [--kill-app-after <seconds>]
//
// The command (Conductor.swift) makes a temporary namespace and starts itself twice: as the app (App.swift,
// AppRecord.swift), whose main run loop handles the events, and as the event server (EventServer.swift), which
// makes them; Events.swift is what passes between them. The app prints the summary (AppSummary.swift), the
// conductor how everything was cleaned up.
import ArgumentParser
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What the command line asked for; the children get theirs from the conductor.
struct Options: Sendable {
    var duration = 3.0
    var quiet = false
    var killServerAfter: Double?
    var killAppAfter: Double?

    static let durationRange = 0.5...20.0
}

/// The hidden part of a child's command line: the conductor writes it.
struct ChildContext: Sendable {
    /// The temporary namespace directory.
    let namespace: String
    /// The conductor's CLOCK_MONOTONIC reading at the start, in ns: every trace line counts from it.
    let start: Int64
    /// The conductor's pid: a child whose parent changes (the conductor died) stops.
    let conductor: Int32
}

/// `portloop-demo-ipc`: parses the flags, checks them, runs the conductor or a child, exits with its status.
struct DemoIPCCommand: ParsableCommand {
    enum Role: String, ExpressibleByArgument {
        case app, server
    }

    static let configuration = CommandConfiguration(
        commandName: "portloop-demo-ipc",
        abstract: "Input events from an event server process to an app's main run loop, traced live.",
        discussion: """
            Starts two processes in a temporary namespace. The app checks in "\(serviceName)" and runs its \
            main run loop: a Source1 on that port takes each event and signals a Source0, which handles it, \
            while DispatchQueue.main blocks (posted by a thread of the app) and a "frame" timer run on the same \
            main thread. The event server looks the name up and sends touches (a burst of moves each) and key \
            presses, each with its send time, for --duration seconds, then an end message. Both trace what \
            they do (µs since the start); the app ends with a summary: wake-ups, events per wake-up, latency \
            p50/p99 from the server's timestamp to the handler, and what else the main thread ran meanwhile. \
            The namespace is removed at the end, whatever happened.

            --kill-server-after kills the server with SIGKILL: the app sees its port become a dead name and \
            exits 3; --kill-app-after does the same to the app, and the server exits 3.

            Exit status: 0 when every event sent was handled in order and both processes ended cleanly, 3 when \
            one side died, 1 on another failure, 130 when interrupted, 64 for a bad command line.
            """)

    @Option(help: ArgumentHelp("Seconds of input, \(Options.durationRange.lowerBound)…\(Options.durationRange.upperBound).",
                               valueName: "seconds"))
    var duration = 3.0

    @Flag(help: "Print the summary and how it ended only, not the trace.")
    var quiet = false

    @Option(help: ArgumentHelp("Kill the event server with SIGKILL this many seconds after the start.",
                               valueName: "seconds"))
    var killServerAfter: Double?

    @Option(help: ArgumentHelp("Kill the app with SIGKILL this many seconds after the start.", valueName: "seconds"))
    var killAppAfter: Double?

    @Option(help: .hidden) var role: Role?
    @Option(help: .hidden) var namespace: String?
    @Option(help: .hidden) var start: Int64?
    @Option(help: .hidden) var conductor: Int32?

    func validate() throws {
        guard Options.durationRange.contains(duration) else {
            throw ValidationError("--duration wants seconds from \(Options.durationRange.lowerBound) to "
                                  + "\(Options.durationRange.upperBound), not \(duration)")
        }
        for (flag, value) in [("--kill-server-after", killServerAfter), ("--kill-app-after", killAppAfter)] {
            if let value, !(0.0...60.0).contains(value) {
                throw ValidationError("\(flag) wants seconds from 0 to 60, not \(value)")
            }
        }
        if killServerAfter != nil && killAppAfter != nil {
            throw ValidationError("--kill-server-after and --kill-app-after: one side at a time")
        }
        if role != nil && (namespace == nil || start == nil || conductor == nil) {
            throw ValidationError("--role is for the demo's own children")
        }
    }

    func run() throws {
        let options = Options(duration: duration, quiet: quiet, killServerAfter: killServerAfter,
                              killAppAfter: killAppAfter)
        let status: Int32
        if let role, let namespace, let start, let conductor {
            let context = ChildContext(namespace: namespace, start: start, conductor: conductor)
            switch role {
            case .app: status = runApp(options, context)
            case .server: status = runEventServer(options, context)
            }
        } else {
            status = conduct(options)
        }
        if status != 0 { throw ExitCode(status) }
    }
}

// A reader that goes away (`| head`) must not kill a process half-way: writes then fail, and say() lets them.
signal(SIGPIPE, SIG_IGN)
DemoIPCCommand.main()
