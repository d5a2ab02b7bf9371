import ArgumentParser
import PortLoop

/// The daemon's settings, from `portloop-echod serve` (the default subcommand).
///
/// Limits keep the numbers inside what the ports allow: a worker's fence reply needs room in the dispatcher's
/// control port, whose queue limit is the worker count, and every in-process client has at most one request
/// outstanding, so the service port's 1024-message queue never blocks them.
struct Options: Sendable, Equatable {
    /// The service name checked in (`--name`).
    var name = ServiceAddress.defaultName
    /// The namespace directory (`--namespace`); nil for ``PortNamespace/standard``.
    var namespacePath: String?
    /// Worker loop threads (`--workers`).
    var workers = 2
    /// Seconds between throughput lines (`--interval`).
    var interval = 1.0
    /// Requests the built-in load generator sends before the daemon stops by itself (`--self-test`).
    var selfTestRequests: Int?
    /// Load-generating client threads in this process (`--clients`); nil means 4 with `--self-test`, none
    /// otherwise.
    var clients: Int?
    /// Seconds to run before stopping as if signalled (`--duration`).
    var duration: Double?
    /// Seconds a worker spends on each request before it answers (`--delay`): simulated work.
    var delay = 0.0

    static let workerRange = 1...64
    static let clientRange = 0...256
    static let intervalRange = 0.05...3600.0
    static let selfTestRange = 1...1_000_000_000
    static let durationRange = 0.001...31_536_000.0
    static let delayRange = 0.0...10.0

    /// How many client threads to start.
    var clientCount: Int { clients ?? (selfTestRequests != nil ? 4 : 0) }
}

/// Where the service is: a name in a namespace. `serve`, `load` and the load's client processes share these
/// flags, so that they always meet at the same socket.
struct ServiceAddress: ParsableArguments, Sendable {
    /// The name `serve` checks in when `--name` is not given; the shipped systemd units use it too.
    static let defaultName = "portloop-echod"

    @Option(help: ArgumentHelp("The service's name in the namespace (letters, digits, '.', '_', '-'; at most 64 bytes).",
                               valueName: "name"))
    var name = ServiceAddress.defaultName

    @Option(help: ArgumentHelp("""
        The namespace directory (an absolute path of at most 80 bytes); default $PORTLOOP_NAMESPACE, else \
        $XDG_RUNTIME_DIR/portloop, else /tmp/portloop-<uid>.
        """, valueName: "directory"))
    var namespace: String?

    func validate() throws {
        do throws(PortError) { try PortNamespace.validate(name: name) } catch {
            throw ValidationError("--name \(name): \(error)")
        }
        if let namespace, !namespace.hasPrefix("/") {
            throw ValidationError("--namespace \(namespace): expected an absolute path")
        }
        if let namespace, namespace.utf8.count > 80 {
            throw ValidationError("--namespace \(namespace): longer than 80 bytes")
        }
    }

    /// The namespace these flags name.
    func resolve() throws(PortError) -> PortNamespace {
        if let namespace { return PortNamespace(path: namespace) }
        return try PortNamespace.standard
    }
}

/// `portloop-echod`: `serve` (the default) runs the daemon, `load` runs client processes against it.
struct EchoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "portloop-echod",
        abstract: "An echo service on PortLoop's run loops and ports, and a load generator for it.",
        discussion: """
            `portloop-echod` (or `portloop-echod serve`) checks in a service name and answers requests from any \
            process of the same user; `portloop-echod load` starts client processes that look the name up, send \
            requests, check every echo and report throughput and latency. `portloop-echod <subcommand> --help` \
            lists each one's flags.
            """,
        subcommands: [ServeCommand.self, LoadCommand.self, LoadClientCommand.self],
        defaultSubcommand: ServeCommand.self)
}

/// `portloop-echod serve`: parses and checks the flags, runs the daemon and exits with its status.
struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Check in the service and answer requests until SIGINT or SIGTERM (the default subcommand).",
        discussion: """
            A dispatcher run loop on the main thread receives requests on the service's port and hands them to \
            worker loop threads, which answer on each request's reply port with the payload uppercased and tagged \
            with the worker's number. Requests come from other processes (`portloop-echod load`, or any program \
            that looks the name up) and, with --clients or --self-test, from client threads of this process. \
            Under systemd socket activation the listening socket systemd passes for the name is adopted.

            SIGINT or SIGTERM stops it gracefully: requests already queued are answered, later ones refused, \
            then the name is withdrawn (clients' rights become dead names), a summary is printed and it exits 0. \
            A second signal while stopping exits at once (status 128 + the signal's number).

            Exit status: 0 success, 1 a failed self-test or a runtime error (the name in use, say), 64 a bad \
            command line.
            """)

    @OptionGroup var address: ServiceAddress

    @Option(help: ArgumentHelp("Worker loop threads, \(Options.workerRange.lowerBound)…\(Options.workerRange.upperBound).",
                               valueName: "count"))
    var workers = 2

    @Option(help: ArgumentHelp("Seconds between throughput lines, \(Options.intervalRange.lowerBound)…\(Int(Options.intervalRange.upperBound)).",
                               valueName: "seconds"))
    var interval = 1.0

    @Option(help: ArgumentHelp("""
        Load-generating client threads in this process, \(Options.clientRange.lowerBound)…\(Options.clientRange.upperBound); \
        each sends one request at a time and checks every reply (default 4 with --self-test, otherwise none).
        """, valueName: "count"))
    var clients: Int?

    @Option(name: .customLong("self-test"),
            help: ArgumentHelp("Send this many requests from the clients, check every reply, print a summary and exit: 0 if every reply was right, 1 otherwise.",
                               valueName: "requests"))
    var selfTest: Int?

    @Option(help: ArgumentHelp("Stop after this many seconds, as if signalled.", valueName: "seconds"))
    var duration: Double?

    @Option(help: ArgumentHelp("""
        Seconds each worker spends on a request before it answers, \(Int(Options.delayRange.lowerBound))…\(Int(Options.delayRange.upperBound)) \
        (simulated work: requests queue up, and a stop has something to drain).
        """, valueName: "seconds"))
    var delay = 0.0

    func validate() throws {
        func check<T: Comparable>(_ value: T?, _ range: ClosedRange<T>, _ flag: String) throws {
            if let value, !range.contains(value) {
                throw ValidationError("\(flag) \(value): expected \(range.lowerBound)…\(range.upperBound)")
            }
        }
        try check(workers, Options.workerRange, "--workers")
        try check(clients, Options.clientRange, "--clients")
        try check(selfTest, Options.selfTestRange, "--self-test")
        guard interval.isFinite else { throw ValidationError("--interval \(interval): expected seconds") }
        try check(interval, Options.intervalRange, "--interval")
        if let duration, !duration.isFinite { throw ValidationError("--duration \(duration): expected seconds") }
        try check(duration, Options.durationRange, "--duration")
        guard delay.isFinite else { throw ValidationError("--delay \(delay): expected seconds") }
        try check(delay, Options.delayRange, "--delay")
        if selfTest != nil && clients == 0 {
            throw ValidationError("--clients 0: at least 1 with --self-test")
        }
    }

    func run() throws {
        let options = Options(name: address.name, namespacePath: address.namespace, workers: workers,
                              interval: interval, selfTestRequests: selfTest, clients: clients, duration: duration,
                              delay: delay)
        let status = EchoDaemon.run(options)
        if status != 0 { throw ExitCode(status) }
    }
}
