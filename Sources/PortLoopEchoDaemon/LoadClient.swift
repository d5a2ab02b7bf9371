import ArgumentParser
import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `portloop-echod load-client`: one client process of `portloop-echod load`, which starts it (hidden from
/// `--help`; nobody else needs to).
///
/// It runs its threads, each of which looks the service up (the look-ups share one connection) and runs an
/// ``EchoClient``; when all have ended it prints one `report` line (``LoadReport``) for the parent to add up,
/// and exits 0. Problems go to standard error as they happen, the first few of them.
struct LoadClientCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load-client",
        abstract: "One client process of `portloop-echod load` (started by it).",
        shouldDisplay: false)

    @OptionGroup var address: ServiceAddress
    @Option var threads: Int
    @Option var requests: Int?
    /// `MonotonicClock` nanoseconds after which no request is sent: the parent's, so every process stops
    /// at the same moment.
    @Option var deadline: UInt64?
    /// This process's number (1-based), which makes its clients' numbers, and payloads, unique in the run.
    @Option var index: Int
    /// The parent's pid: this process asks to be killed when the parent dies, and checks that it has not already.
    @Option(name: .customLong("parent-pid")) var parentPID: Int32

    func validate() throws {
        guard LoadCommand.threadRange.contains(threads) else { throw ValidationError("--threads \(threads)") }
        if let requests, requests < 1 { throw ValidationError("--requests \(requests)") }
    }

    func run() throws {
        // No orphans: if `load` is killed, its clients end too rather than load the service forever. A thread
        // that looks for a new parent every 100 ms (Glibc's Swift module does not carry prctl's
        // PR_SET_PDEATHSIG); `_exit`, as the other threads may be blocked in a request.
        guard getppid() == parentPID else { throw ExitCode(LoadExit.clientCrashed) }
        let parent = parentPID
        do throws(DaemonError) {
            try PosixThread.detach(name: "echo-load-watch") {
                while getppid() == parent { usleep(100_000) }
                complain("portloop-echod load-client: the load process \(parent) is gone; exiting")
                _exit(LoadExit.clientCrashed)
            }
        } catch {
            complain("portloop-echod load-client: \(error)")
            throw ExitCode(LoadExit.clientCrashed)
        }

        let namespace: PortNamespace
        do throws(PortError) { namespace = try address.resolve() } catch {
            complain("portloop-echod load-client: \(error)")
            throw ExitCode(LoadExit.unavailable)
        }
        let sum = Guarded(ClientTally())
        let problems = Guarded(0)
        let report: @Sendable (String) -> Void = { problem in
            if problems.withLock({ $0 += 1; return $0 }) <= 5 { complain("portloop-echod load: \(problem)") }
        }
        let name = address.name, requests = requests, deadline = deadline, base = (index - 1) * threads
        let started = MonotonicClock.now
        var handles: [pthread_t] = []
        for thread in 1...threads {
            let client = base + thread
            do throws(DaemonError) {
                handles.append(try PosixThread.spawn(name: "echo-load-\(client)") {
                    var tally = ClientTally()
                    do throws(PortError) {
                        let endpoint = try namespace.lookUp(name)
                        tally = EchoClient(endpoint: endpoint, number: client, requests: requests, deadline: deadline,
                                           awaitDeadName: true, report: report).run()
                    } catch {
                        tally.failed += 1
                        report("client \(client): looking \(name) up failed: \(error)")
                    }
                    sum.withLock { $0.add(tally) }
                })
            } catch {
                complain("portloop-echod load-client: \(error)")
                break // the threads started still run, are joined and reported
            }
        }
        for handle in handles { PosixThread.join(handle) }
        let tally = sum.withLock { $0 }
        say(LoadReport(process: index, threads: handles.count, started: started, ended: MonotonicClock.now,
                       tally: tally).encoded)
    }
}

/// The one line a client process prints for its parent: `report process=1 threads=4 started=… ended=…
/// answered=… wrong=… refused=… gone=… failed=… dead-names=… latency=…`.
struct LoadReport: Sendable {
    var process: Int
    var threads: Int
    /// `MonotonicClock` nanoseconds.
    var started: UInt64
    var ended: UInt64
    var tally: ClientTally

    var encoded: String {
        "report process=\(process) threads=\(threads) started=\(started) ended=\(ended) answered=\(tally.answered) "
            + "wrong=\(tally.wrong) refused=\(tally.refused) gone=\(tally.gone) failed=\(tally.failed) "
            + "dead-names=\(tally.deadNames) "
            + "latency=\(tally.latency.encoded)"
    }

    init(process: Int, threads: Int, started: UInt64, ended: UInt64, tally: ClientTally) {
        self.process = process
        self.threads = threads
        self.started = started
        self.ended = ended
        self.tally = tally
    }

    /// Reads a `report` line; nil if `line` is not a whole one.
    init?(line: String) {
        var fields: [Substring: Substring] = [:]
        let words = line.split(separator: " ")
        guard words.first == "report" else { return nil }
        for word in words.dropFirst() {
            guard let equals = word.firstIndex(of: "=") else { return nil }
            fields[word[..<equals]] = word[word.index(after: equals)...]
        }
        func int(_ key: Substring) -> Int? { fields[key].flatMap { Int($0) } }
        guard let process = int("process"), let threads = int("threads"),
              let started = fields["started"].flatMap({ UInt64($0) }), let ended = fields["ended"].flatMap({ UInt64($0) }),
              let answered = int("answered"), let wrong = int("wrong"), let refused = int("refused"),
              let gone = int("gone"), let failed = int("failed"), let deadNames = int("dead-names"),
              let latencyText = fields["latency"],
              let latency = LatencyHistogram(encoded: latencyText) else { return nil }
        var tally = ClientTally()
        tally.answered = answered
        tally.wrong = wrong
        tally.refused = refused
        tally.gone = gone
        tally.failed = failed
        tally.deadNames = deadNames
        tally.latency = latency
        self.init(process: process, threads: threads, started: started, ended: ended, tally: tally)
    }
}
