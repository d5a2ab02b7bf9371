import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Wires the daemon together on the calling thread, which must be the main thread, runs its loop until the
/// graceful stop completes, and prints the summary.
enum EchoDaemon {
    /// Runs the daemon; returns the exit status.
    static func run(_ options: Options) -> Int32 {
        do throws(DaemonError) {
            return try runOrThrow(options)
        } catch {
            complain("portloop-echod: \(error)")
            return 1
        }
    }

    private static func runOrThrow(_ options: Options) throws(DaemonError) -> Int32 {
        // First, before any other thread exists, so that every thread inherits the blocked mask and a signal sent
        // to the process can only be taken by the signal source.
        do throws(PortError) { try RunLoopSignalSource.block(ShutdownSignals.numbers) } catch { throw .port(error) }

        let loop = PortRunLoop.current // the main thread's loop: PortRunLoop.main
        let workers = try (1...options.workers).map { number throws(DaemonError) in
            try EchoWorker(number: number, delay: options.delay)
        }
        let dispatcher = Dispatcher(loop: loop, workers: workers)
        let namespace: PortNamespace
        do throws(PortError) {
            if let path = options.namespacePath { namespace = PortNamespace(path: path) } else { namespace = try .standard }
        } catch { throw .port(error) }
        let endpoint = try dispatcher.start(name: options.name, in: namespace)

        let signals: RunLoopSignalSource
        do throws(PortError) {
            signals = try RunLoopSignalSource(signals: ShutdownSignals.numbers) { signal in
                ShutdownSignals.received(signal, by: dispatcher)
            }
        } catch { throw .port(error) }
        defer { signals.invalidate() }
        do throws(RunLoopError) { try loop.add(signals, mode: .default) } catch { throw .runLoop(error) }


        let started = ContinuousClock.now
        let reporter = ThroughputReporter(workers: workers, started: started)
        try reporter.start(on: loop, every: .seconds(options.interval))

        if let duration = options.duration {
            let reason = "--duration \(Format.fixed(duration, 3).trimmingZeros) s elapsed"
            let timer = RunLoopTimer(after: .seconds(duration)) { _ in dispatcher.beginStop(reason: reason) }
            do throws(RunLoopError) { try loop.add(timer, mode: .default) } catch { throw .runLoop(error) }
        }

        var load: LoadGenerator?
        if options.clientCount > 0 {
            let generator = LoadGenerator(endpoint: endpoint, clients: options.clientCount,
                                          requests: options.selfTestRequests)
            let selfTest = options.selfTestRequests
            try generator.start {
                guard let selfTest else { return } // open-ended clients end only once the stop has begun
                // On the last client's thread: hand the stop to the dispatcher's loop, which owns it.
                try? loop.performAndWakeUp(inModes: [.default]) {
                    dispatcher.beginStop(reason: "self-test: the clients sent their \(Format.grouped(selfTest)) requests")
                }
            }
            load = generator
        }

        say("portloop-echod: pid \(getpid()), \(workers.count) worker\(workers.count == 1 ? "" : "s"), "
            + "\(options.clientCount) client\(options.clientCount == 1 ? "" : "s")"
            + (options.selfTestRequests.map { ", self-test of \(Format.grouped($0)) requests" } ?? "")
            + "; throughput every \(Format.fixed(options.interval, 3).trimmingZeros) s; SIGINT or SIGTERM stops")
        say("portloop-echod: \(activatedBySystemd(options.name) ? "adopted systemd's socket for" : "checked in") "
            + "\(options.name) in \(namespace.path); clients: portloop-echod load --name \(options.name) "
            + "--namespace \(namespace.path)")

        loop.run() // until the dispatcher's last fence is answered and the name withdrawn

        let elapsed = (ContinuousClock.now - started).seconds
        reporter.stop()
        for worker in workers { worker.stop() }
        // The port is gone, so the in-process clients end at once (refused, or a dead name): let them finish
        // so that the summary counts every request they sent.
        if let load {
            let giveUp = MonotonicClock.now + 5_000_000_000
            while !load.allFinished && MonotonicClock.now < giveUp { usleep(1_000) }
        }
        return summarize(dispatcher: dispatcher, load: load, options: options, elapsed: elapsed)
    }

    /// Prints the summary and decides the exit status: 0 when every accepted request was answered and every
    /// reply a client checked was right (and, for a self-test, every planned request was answered).
    private static func summarize(dispatcher: Dispatcher, load: LoadGenerator?, options: Options,
                                  elapsed: Double) -> Int32 {
        let served = dispatcher.served
        let perWorker = dispatcher.workers.map { "w\($0.number) \(Format.grouped($0.served.current))" }
        var line = "summary: stopped (\(dispatcher.stopReason ?? "?")) after \(Format.fixed(elapsed, 2)) s; "
        line += "\(Format.grouped(served)) requests answered (\(Format.rate(served, seconds: elapsed)) req/s): "
        line += perWorker.joined(separator: ", ")
        line += "; \(dispatcher.drained) drained at stop, \(dispatcher.refused) refused, \(dispatcher.lost) lost"
        let tally = load?.tally
        if let tally {
            line += "; clients: \(Format.grouped(tally.answered)) replies checked, \(tally.wrong) wrong, "
            line += "\(tally.failed) failed, \(tally.refused) refused, \(tally.gone) found it gone"
        }
        say(line)

        // The fences guarantee this; it is the drain's promise, so check it rather than assume it.
        var problems: [String] = []
        if served != dispatcher.forwarded {
            problems.append("\(dispatcher.forwarded) requests accepted but \(served) answered")
        }
        if dispatcher.lost > 0 { problems.append("\(dispatcher.lost) requests could not be forwarded") }
        if let tally, tally.wrong > 0 { problems.append("\(tally.wrong) wrong replies") }
        if let tally, tally.failed > 0 { problems.append("\(tally.failed) requests failed") }

        if let planned = options.selfTestRequests, let load {
            problems += selfTestProblems(planned: planned, load: load, dispatcher: dispatcher)
            if problems.isEmpty {
                say("self-test passed: \(Format.grouped(planned)) requests from \(load.clients) client"
                    + "\(load.clients == 1 ? "" : "s"), every reply checked; the clients' per-worker tallies match "
                    + "the workers' counts")
            } else {
                say("self-test FAILED: " + problems.joined(separator: "; "))
            }
        } else if !problems.isEmpty {
            say("FAILED: " + problems.joined(separator: "; "))
        }
        return problems.isEmpty ? 0 : 1
    }

    private static func selfTestProblems(planned: Int, load: LoadGenerator, dispatcher: Dispatcher) -> [String] {
        guard load.allFinished else {
            return ["stopped (\(dispatcher.stopReason ?? "?")) before the clients had sent every request"]
        }
        let tally = load.tally
        var problems: [String] = []
        if tally.answered != planned {
            problems.append("\(tally.answered) of \(planned) requests answered right")
        }
        if tally.refused > 0 { problems.append("\(tally.refused) requests refused") }
        if tally.gone > 0 { problems.append("\(tally.gone) requests found the service gone") }
        for (worker, seen) in zip(dispatcher.workers, tally.byWorker) where worker.served.current != seen {
            problems.append("w\(worker.number) answered \(worker.served.current) but the clients saw \(seen)")
        }
        return problems
    }
}

/// Whether systemd (or `systemd-socket-activate`) passed this process a socket named `name`, which the
/// check-in then adopted: the same test the C layer makes.
private func activatedBySystemd(_ name: String) -> Bool {
    guard let pid = getenv("LISTEN_PID").map({ String(cString: $0) }), Int32(pid) == getpid(),
          let names = getenv("LISTEN_FDNAMES").map({ String(cString: $0) }) else { return false }
    return names.split(separator: ":", omittingEmptySubsequences: false).contains { $0 == name }
}

extension String {
    /// `"1.500"` as `"1.5"`, `"2.000"` as `"2"`.
    var trimmingZeros: String {
        guard contains(".") else { return self }
        var trimmed = self
        while trimmed.hasSuffix("0") { trimmed.removeLast() }
        if trimmed.hasSuffix(".") { trimmed.removeLast() }
        return trimmed
    }
}
