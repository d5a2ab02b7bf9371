import ArgumentParser

/// The daemon's command line.
///
/// Limits keep the numbers inside what the ports allow: a worker's fence reply needs room in the dispatcher's control port,
/// whose queue limit is the worker count, and every client has at most one request outstanding, so the
/// service port's 1024-message queue never blocks them.
struct Options: Sendable, Equatable {
    /// Worker loop threads (`--workers`).
    var workers = 2
    /// Seconds between throughput lines (`--interval`).
    var interval = 1.0
    /// Requests the built-in load generator sends before the daemon stops by itself (`--self-test`).
    var selfTestRequests: Int?
    /// Load-generating client threads (`--clients`); nil means 4 with `--self-test`, none otherwise.
    var clients: Int?
    /// Seconds to run before stopping as if signalled (`--duration`).
    var duration: Double?

    static let workerRange = 1...64
    static let clientRange = 0...256
    static let intervalRange = 0.05...3600.0
    static let selfTestRange = 1...1_000_000_000
    static let durationRange = 0.001...31_536_000.0

    /// How many client threads to start.
    var clientCount: Int { clients ?? (selfTestRequests != nil ? 4 : 0) }
}

/// `portloop-echod`: parses and checks the flags, runs the daemon and exits with its status.
struct EchoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "portloop-echod",
        abstract: "An echo service on PortLoop's run loops and ports.",
        discussion: """
            A dispatcher run loop on the main thread receives requests on a service port and hands them to worker \
            loop threads, which answer on each request's reply port with the payload uppercased and tagged with the \
            worker's number. SIGINT or SIGTERM stops it gracefully: requests already queued are answered, later ones \
            refused, then a summary is printed and it exits 0. A second signal while stopping exits at once (status \
            128 + the signal's number).

            PortLoop's ports live inside one process, so the service's clients are threads of this process: the \
            built-in load generator (--clients, --self-test). Without either it serves nobody and says so.

            Exit status: 0 success, 1 a failed self-test or a runtime error, 64 a bad command line.
            """)

    @Option(help: ArgumentHelp("Worker loop threads, \(Options.workerRange.lowerBound)…\(Options.workerRange.upperBound).",
                               valueName: "count"))
    var workers = 2

    @Option(help: ArgumentHelp("Seconds between throughput lines, \(Options.intervalRange.lowerBound)…\(Int(Options.intervalRange.upperBound)).",
                               valueName: "seconds"))
    var interval = 1.0

    @Option(help: ArgumentHelp("""
        Load-generating client threads, \(Options.clientRange.lowerBound)…\(Options.clientRange.upperBound); each \
        sends one request at a time and checks every reply (default 4 with --self-test, otherwise none).
        """, valueName: "count"))
    var clients: Int?

    @Option(name: .customLong("self-test"),
            help: ArgumentHelp("Send this many requests from the clients, check every reply, print a summary and exit: 0 if every reply was right, 1 otherwise.",
                               valueName: "requests"))
    var selfTest: Int?

    @Option(help: ArgumentHelp("Stop after this many seconds, as if signalled.", valueName: "seconds"))
    var duration: Double?

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
        if selfTest != nil && clients == 0 {
            throw ValidationError("--clients 0: at least 1 with --self-test")
        }
    }

    func run() throws {
        let options = Options(workers: workers, interval: interval, selfTestRequests: selfTest, clients: clients,
                              duration: duration)
        let status = EchoDaemon.run(options)
        if status != 0 { throw ExitCode(status) }
    }
}
