import PortLoop

/// The periodic throughput line: a repeating ``RunLoopTimer`` in the dispatcher loop's default mode.
///
/// The timer stays on its grid (a late fire does not push the next one later) and the line divides by the time
/// that really passed since the previous one, so a late fire shows a true rate rather than a spike. Workers
/// only bump their counters; all the arithmetic and printing happens here, on the dispatcher's thread.
final class ThroughputReporter: @unchecked Sendable {
    private let workers: [EchoWorker]
    private let started: ContinuousClock.Instant
    private var timer: RunLoopTimer?
    // Touched only in the timer's callout, on the loop's thread.
    private var previousAt: ContinuousClock.Instant
    private var previousCounts: [Int]

    init(workers: [EchoWorker], started: ContinuousClock.Instant) {
        self.workers = workers
        self.started = started
        previousAt = started
        previousCounts = Array(repeating: 0, count: workers.count)
    }

    /// Adds the timer to the loop: first line one interval after the start.
    func start(on loop: PortRunLoop, every interval: Duration) throws(DaemonError) {
        // A little tolerance lets the loop fold the fire into a wake-up it takes anyway.
        let tolerance = min(.milliseconds(10), interval / 10)
        let timer = RunLoopTimer(fireAt: started + interval, interval: interval, tolerance: tolerance) {
            [unowned self] _ in report()
        }
        self.timer = timer
        do throws(RunLoopError) { try loop.add(timer, mode: .default) } catch { throw .runLoop(error) }
    }

    /// Removes the timer; no line after this.
    func stop() { timer?.invalidate() }

    /// `[  3.0 s]  412,337 req/s  total 1,236,001  w1 206,170/s  w2 206,167/s`
    private func report() {
        let now = ContinuousClock.now
        let counts = workers.map(\.served.current)
        let seconds = (now - previousAt).seconds
        let delta = zip(counts, previousCounts).map { $0 - $1 }
        let total = counts.reduce(0, +)
        var line = "[\(Format.padded(Format.fixed((now - started).seconds, 1), 6)) s] "
        line += "\(Format.padded(Format.rate(delta.reduce(0, +), seconds: seconds), 10)) req/s"
        line += "  total \(Format.padded(Format.grouped(total), 11))"
        for (worker, count) in zip(workers, delta) {
            line += "  w\(worker.number) \(Format.rate(count, seconds: seconds))/s"
        }
        say(line)
        previousAt = now
        previousCounts = counts
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
