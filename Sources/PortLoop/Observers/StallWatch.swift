import Logging

/// What a ``RunLoopStallMonitor`` shares between the loop's thread and its watchdog thread: the pass in
/// progress, per run depth, and the watchdog's loop.
///
/// The loop's thread only stamps times under the mutex; it signals the condition only when the watchdog is
/// waiting with no deadline (the loop was asleep or between runs, or the current pass was reported already),
/// so a busy loop pays a mutex per stage and no system call. The watchdog sleeps until the current pass would
/// cross the threshold, re-checks, and reports a pass at most once.
///
/// Lock order: this mutex before the loop's lock (reading the current mode); the loop never calls in here
/// with its lock held, since observer callouts run without it.
final class StallWatch: @unchecked Sendable {
    /// The pass of one run (one nesting depth) of the loop.
    private struct Pass {
        /// The run's mode.
        let mode: PortRunLoop.Mode
        /// Monotonic nanoseconds when the pass started; nil while the loop sleeps.
        var start: Int64?
        /// The last stage the loop announced in this pass.
        var stage: PortRunLoop.Activity
    }

    let thresholdNanoseconds: Int64
    private let handler: @Sendable (RunLoopStallMonitor.Report) -> Void
    private let logger: Logger?
    private let condition = MonotonicCondition()

    // Guarded by `condition`.
    /// Innermost run last; a nested run pushes its own pass and pops it at exit.
    private var passes: [Pass] = []
    /// Identifies the current pass of the innermost run; bumped whenever a pass starts or restarts.
    private var generation: UInt64 = 0
    /// The generation last reported, so that each stall is reported once.
    private var reportedGeneration: UInt64 = 0
    /// Whether the watchdog waits with no deadline, so that a starting pass must signal it.
    private var watchdogWaitsIndefinitely = false
    private var stopping = false

    init(threshold: Duration, logger: Logger?, handler: @escaping @Sendable (RunLoopStallMonitor.Report) -> Void) {
        thresholdNanoseconds = threshold.nanosecondsClamped
        self.logger = logger
        self.handler = handler
    }

    // MARK: - The loop's thread (observer callouts)

    /// The first observer of every stage (order `Int.min`): starts a pass at entry, restarts it at each
    /// iteration (beforeTimers) and on waking (afterWaiting), and records the stage otherwise. Restarting at
    /// beforeTimers is what keeps a loop that never sleeps (a source handled every pass) from looking like one
    /// endless pass.
    func stageBegins(_ activity: PortRunLoop.Activity) {
        let now = monotonicNanoseconds()
        // Read outside our mutex when we can; the mode changes only at entry and exit.
        let enteringMode = activity == .entry ? PortRunLoop.current.currentModeName : nil
        condition.lock()
        defer { condition.unlock() }
        if activity == .entry || passes.isEmpty {
            // At entry a new run starts; with no pass at all, the monitor was started in the middle of a run.
            let mode = enteringMode ?? PortRunLoop.current.currentModeName ?? .default
            passes.append(Pass(mode: mode, start: now, stage: activity))
            passStartedLocked()
            return
        }
        let top = passes.count - 1
        passes[top].stage = activity
        if activity == .beforeTimers || activity == .afterWaiting || passes[top].start == nil {
            passes[top].start = now
            passStartedLocked()
        }
    }

    /// The last observer of beforeWaiting and exit (order `Int.max`): the pass ends when the loop is about to
    /// sleep or its run returns. After a nested run returns, the outer run's pass restarts: the time the
    /// nested run spent was measured by its own passes.
    func stageEnds(_ activity: PortRunLoop.Activity) {
        let now = monotonicNanoseconds()
        condition.lock()
        defer { condition.unlock() }
        guard !passes.isEmpty else { return }
        if activity == .exit {
            passes.removeLast()
            guard !passes.isEmpty else { return }
            passes[passes.count - 1].start = now
            passStartedLocked()
        } else {
            passes[passes.count - 1].start = nil
        }
    }

    private func passStartedLocked() {
        generation &+= 1
        if watchdogWaitsIndefinitely { condition.signal() }
    }

    // MARK: - The watchdog thread

    /// The watchdog's body: sleeps until the current pass would cross the threshold and reports it then, once,
    /// with the duration so far. Returns when asked to stop.
    func watch() {
        condition.lock()
        defer { condition.unlock() }
        while !stopping {
            guard let pass = passes.last, let start = pass.start, reportedGeneration != generation else {
                // Nothing to time: the loop sleeps, is between runs, or this pass was reported already.
                watchdogWaitsIndefinitely = true
                condition.wait()
                watchdogWaitsIndefinitely = false
                continue
            }
            let deadline = start.addingClamped(thresholdNanoseconds)
            let now = monotonicNanoseconds()
            guard now >= deadline else {
                condition.wait(untilMonotonic: deadline)
                continue
            }
            reportedGeneration = generation
            let report = RunLoopStallMonitor.Report(mode: pass.mode, duration: .nanoseconds(now - start),
                                                    threshold: .nanoseconds(thresholdNanoseconds), stage: pass.stage)
            // Never call out with the mutex held: the loop's thread would block on its next stage.
            condition.unlock()
            deliver(report)
            condition.lock()
        }
    }

    private func deliver(_ report: RunLoopStallMonitor.Report) {
        logger?.warning("run loop stall: \(report)", metadata: [
            "mode": "\(report.mode.rawValue)",
            "duration_ms": "\(report.milliseconds)",
            "stage": "\(report.stage)",
        ])
        handler(report)
    }

    /// Asks the watchdog to return from ``watch()``.
    func requestStop() {
        condition.withLock {
            stopping = true
            condition.signal()
        }
    }
}
