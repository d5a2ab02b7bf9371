import ArgumentParser
import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Exit statuses of `portloop-echod load`, for scripts (the numbers are `sysexits.h`'s where one fits).
enum LoadExit {
    /// Every reply was right, and every planned request was answered (or, with neither --requests nor
    /// --duration, the run ended because the service stopped).
    static let success: Int32 = 0
    /// A wrong reply, or a request that failed (a timeout, an unexpected error).
    static let verificationFailed: Int32 = 1
    /// The service was not there to start with (`EX_UNAVAILABLE`).
    static let unavailable: Int32 = 69
    /// A client process crashed or ended without its report (`EX_SOFTWARE`).
    static let clientCrashed: Int32 = 70
    /// The service stopped (refused, or went) before the planned requests or duration were done (`EX_TEMPFAIL`).
    static let serviceStopped: Int32 = 75
}

/// `portloop-echod load`: client processes against a running service, each with threads, every echo
/// checked; the sum of their reports, and an exit status that says how it went.
struct LoadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Load a running portloop-echod from client processes and check every echo.",
        discussion: """
            Starts --processes copies of this executable in a client role, each with --threads threads. Every \
            thread looks the service up by name and sends requests one at a time, each with a fresh reply port, \
            and checks that the reply is its own payload echoed. Each process reports its counts and round-trip \
            times; this one adds them up and prints the throughput, the latency percentiles and every problem.

            With --requests each thread sends that many; with --duration the threads stop then; with neither \
            they run until the service stops: a thread that is refused (the daemon is stopping) waits for its \
            right to become a dead name and checks that a send then fails with invalidDestination.

            Exit status: 0 every reply right (and every planned request answered); 1 a wrong reply or a failed \
            request; 64 a bad command line; 69 no such service; 70 a client process crashed; 75 the service \
            stopped before the planned requests or duration were done.
            """)

    static let processRange = 1...64
    static let threadRange = 1...64

    @OptionGroup var address: ServiceAddress

    @Option(help: ArgumentHelp("Client processes, \(processRange.lowerBound)…\(processRange.upperBound).", valueName: "count"))
    var processes = 2

    @Option(help: ArgumentHelp("Threads per client process, \(threadRange.lowerBound)…\(threadRange.upperBound).", valueName: "count"))
    var threads = 4

    @Option(help: ArgumentHelp("Requests each thread sends (default: until --duration, or until the service stops).",
                               valueName: "count"))
    var requests: Int?

    @Option(help: ArgumentHelp("Seconds to send requests for.", valueName: "seconds"))
    var duration: Double?

    func validate() throws {
        guard Self.processRange.contains(processes) else {
            throw ValidationError("--processes \(processes): expected \(Self.processRange.lowerBound)…\(Self.processRange.upperBound)")
        }
        guard Self.threadRange.contains(threads) else {
            throw ValidationError("--threads \(threads): expected \(Self.threadRange.lowerBound)…\(Self.threadRange.upperBound)")
        }
        if let requests, !(1...1_000_000_000).contains(requests) {
            throw ValidationError("--requests \(requests): expected 1…1000000000")
        }
        if let duration, !(duration.isFinite && (0.001...31_536_000).contains(duration)) {
            throw ValidationError("--duration \(duration): expected 0.001…31536000 seconds")
        }
    }

    func run() throws {
        let status = LoadRun(address: address, processes: processes, threads: threads, requests: requests,
                             duration: duration).run()
        if status != LoadExit.success { throw ExitCode(status) }
    }
}

/// One `load` run: checks that the service is there, starts the client processes, reads their reports and
/// sums them up.
struct LoadRun {
    let address: ServiceAddress
    let processes: Int
    let threads: Int
    let requests: Int?
    let duration: Double?

    func run() -> Int32 {
        let namespace: PortNamespace
        do throws(PortError) {
            namespace = try address.resolve()
            // Fail fast and clearly when nobody serves the name, rather than once per client thread.
            _ = try namespace.lookUp(address.name)
        } catch {
            complain("portloop-echod load: \(address.name) in \(address.namespace ?? "the standard namespace"): \(error)"
                     + (error == .unknownService(address.name) ? " (is portloop-echod serving it?)" : ""))
            return LoadExit.unavailable
        }
        let deadline = duration.map { MonotonicClock.now + UInt64($0 * 1e9) }
        say("load: \(processes) process\(processes == 1 ? "" : "es") × \(threads) thread\(threads == 1 ? "" : "s") "
            + "against \(address.name) in \(namespace.path), "
            + (requests.map { "\(Format.grouped($0)) requests each" }
               ?? duration.map { "for \(Format.fixed($0, 3).trimmingZeros) s" } ?? "until the service stops"))

        var arguments = ["load-client", "--name", address.name, "--namespace", namespace.path,
                         "--threads", String(threads), "--parent-pid", String(getpid())]
        if let requests { arguments += ["--requests", String(requests)] }
        if let deadline { arguments += ["--deadline", String(deadline)] }
        let children: [ClientProcess]
        do throws(DaemonError) {
            children = try (1...processes).map { index throws(DaemonError) in
                try ClientProcess(arguments: arguments + ["--index", String(index)])
            }
        } catch {
            complain("portloop-echod load: starting a client process failed: \(error)")
            return LoadExit.clientCrashed
        }
        let outcomes = ClientProcess.collect(children)

        var reports: [LoadReport] = []
        var crashed: [String] = []
        for (index, outcome) in outcomes.enumerated() {
            if outcome.status == 0, let report = outcome.lines.lazy.compactMap(LoadReport.init(line:)).first {
                reports.append(report)
            } else {
                crashed.append("client process \(index + 1) (pid \(outcome.pid)) \(outcome.statusDescription)"
                               + (outcome.status == 0 ? " without a report" : ""))
            }
        }
        return summarize(reports, crashed: crashed)
    }

    private func summarize(_ reports: [LoadReport], crashed: [String]) -> Int32 {
        var sum = ClientTally()
        for report in reports {
            sum.add(report.tally)
            let seconds = Double(report.ended - report.started) / 1e9
            say("  process \(report.process): \(Format.grouped(report.tally.answered)) right in "
                + "\(Format.fixed(seconds, 2)) s (\(Format.rate(report.tally.answered, seconds: seconds)) req/s), "
                + "\(report.tally.wrong) wrong, \(report.tally.failed) failed, \(report.tally.refused) refused, "
                + "\(report.tally.gone) found it gone")
        }
        let started = reports.map(\.started).min() ?? 0, ended = reports.map(\.ended).max() ?? 0
        let seconds = Double(ended - started) / 1e9
        var line = "load: \(Format.grouped(sum.answered)) requests answered right in \(Format.fixed(seconds, 2)) s "
            + "(\(Format.rate(sum.answered, seconds: seconds)) req/s)"
        if let p50 = sum.latency.percentile(0.5), let p90 = sum.latency.percentile(0.9),
           let p99 = sum.latency.percentile(0.99) {
            line += "; round trip p50 \(Self.micro(p50)), p90 \(Self.micro(p90)), p99 \(Self.micro(p99)), "
                + "max \(Self.micro(sum.latency.maximum))"
        }
        line += "; \(sum.wrong) wrong, \(sum.failed) failed"
        say(line)
        let stopped = sum.refused + sum.gone > 0
        if stopped {
            say("load: the service stopped: \(sum.refused) request\(sum.refused == 1 ? "" : "s") refused, "
                + "\(sum.gone) found it gone; \(sum.deadNames) refused client\(sum.deadNames == 1 ? "" : "s") "
                + "then saw a dead name")
        }
        for problem in crashed { complain("portloop-echod load: \(problem)") }

        if sum.wrong > 0 || sum.failed > 0 {
            say("load FAILED: \(sum.wrong) wrong replies, \(sum.failed) failed requests")
            return LoadExit.verificationFailed
        }
        if !crashed.isEmpty {
            say("load FAILED: \(crashed.count) client process\(crashed.count == 1 ? "" : "es") ended without a report")
            return LoadExit.clientCrashed
        }
        if stopped && (requests != nil || duration != nil) {
            say("load INCOMPLETE: the service stopped before the run was done")
            return LoadExit.serviceStopped
        }
        say("load passed: every reply checked")
        return LoadExit.success
    }

    /// Nanoseconds as microseconds, `38.4 us`.
    private static func micro(_ nanoseconds: UInt64) -> String {
        Format.fixed(Double(nanoseconds) / 1000, 1) + " us"
    }
}
