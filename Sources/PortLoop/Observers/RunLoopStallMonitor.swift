import Logging

/// Reports passes of a run loop that take longer than a threshold: the stall monitor Darwin apps build from
/// `CFRunLoopObserver`s around each pass plus a watchdog thread.
///
/// **What a pass is.** The work the loop does between two rests: from a run's entry, from the start of each
/// iteration (beforeTimers) or from waking (afterWaiting), until the loop is about to sleep (beforeWaiting),
/// starts its next iteration, or returns (exit). The monitor marks the start with an observer of order
/// `Int.min` (before every other observer) and the end with one of order `Int.max` (after every other one), so
/// a long timer, port source, version-0 source, block, main-queue drain or observer callout all fall inside a
/// pass; the loop's sleep never does. Observers of the same extreme order added before the monitor (at entry,
/// afterWaiting) or after it (at beforeWaiting, exit) are the exception: they run outside the bracket. A
/// nested run has passes of its own; when it returns, the outer pass restarts. Time between runs (code
/// around `run(mode:)`) is not a pass.
///
/// **When it reports.** Once per stalled pass, from the watchdog thread, as soon as the pass crosses the
/// threshold, with the duration so far (see ``Report``): a loop stuck for good is reported too, and the
/// report arrives while the culprit is still on the loop's stack. The handler runs on the watchdog thread;
/// keep it short, since the watchdog times nothing while it runs. With a `Logger`, each report is also logged
/// at warning level.
///
/// **Cost.** A busy loop takes an uncontended mutex per stage and makes no system call for the monitor; the
/// watchdog wakes about once per threshold while the loop is busy, and not at all while it sleeps.
///
/// ```swift
/// let monitor = RunLoopStallMonitor(loop: .current, threshold: .milliseconds(100)) { report in
///     print("stall:", report) // e.g. "pass in mode kCFRunLoopDefaultMode running for 100.2 ms …"
/// }
/// try monitor.start()
/// PortRunLoop.current.run()
/// monitor.stop()
/// ```
///
/// The monitor holds the loop, its observers hold only the shared timing state, and the watchdog thread holds
/// only that state too, so nothing holds the monitor: dropping it stops it (and joins the watchdog). A handler
/// that captures the monitor strongly makes a cycle; capture it weakly.
public final class RunLoopStallMonitor: @unchecked Sendable {
    /// One started monitor: its state, its two observers and its watchdog.
    private struct Session {
        let watch: StallWatch
        let observers: [RunLoopObserver]
        let watchdog: WatchdogThread
    }

    /// The loop watched.
    public let loop: PortRunLoop
    /// How long a pass may run before it is reported (at least 1 ms).
    public let threshold: Duration
    /// The modes watched; `.common` watches every common mode, now and later.
    public let modes: [PortRunLoop.Mode]
    private let logger: Logger?
    private let handler: @Sendable (Report) -> Void
    /// Guards `session`.
    private let lock = PThreadLock()
    private var session: Session?

    /// Creates a stopped monitor; ``start()`` starts it.
    /// - Parameters:
    ///   - loop: the loop to watch; any thread may start and stop the monitor.
    ///   - threshold: how long a pass may take before it is a stall; raised to 1 ms if smaller.
    ///   - modes: the modes whose passes are timed; `.common` (the default) means every common mode. Add the
    ///     private modes you run (CF's own tracking modes are common for this reason).
    ///   - logger: if given, each report is logged at warning level, with `mode`, `duration_ms` and `stage`
    ///     metadata.
    ///   - handler: called on the watchdog thread with each report.
    public init(loop: PortRunLoop, threshold: Duration, modes: [PortRunLoop.Mode] = [.common],
                logger: Logger? = nil, handler: @escaping @Sendable (Report) -> Void = { _ in }) {
        self.loop = loop
        self.threshold = max(threshold, .milliseconds(1))
        self.modes = modes
        self.logger = logger
        self.handler = handler
    }

    deinit { stop() }

    /// Whether the monitor is started.
    public var isRunning: Bool { lock.withLock { session != nil } }

    /// Starts the watchdog and adds the monitor's observers to the loop; does nothing if started already. May
    /// be called from any thread, also while the loop runs: timing then begins at the loop's next stage.
    /// - Throws: ``StallMonitorError/runLoop(_:)`` if the loop refuses the observers (its thread has exited) or
    ///   ``modes`` is empty (``RunLoopError/invalidArgument(argument:reason:)``),
    ///   ``StallMonitorError/watchdogThread(errno:)`` if no thread can be created. Nothing is left running.
    public func start() throws(StallMonitorError) {
        do throws(RunLoopError) { try PortRunLoop.Mode.validate(modes) } catch { throw .runLoop(error) }
        lock.lock()
        defer { lock.unlock() }
        guard session == nil else { return }
        let watch = StallWatch(threshold: threshold, logger: logger, handler: handler)
        let begins = RunLoopObserver(activities: .allActivities, order: .min) { _, activity in
            watch.stageBegins(activity)
        }
        let ends = RunLoopObserver(activities: [.beforeWaiting, .exit], order: .max) { _, activity in
            watch.stageEnds(activity)
        }
        let watchdog = try WatchdogThread(name: "portloop-stall") { watch.watch() }
        do throws(RunLoopError) {
            for mode in modes {
                try loop.add(begins, mode: mode)
                try loop.add(ends, mode: mode)
            }
        } catch {
            begins.invalidate()
            ends.invalidate()
            watch.requestStop()
            watchdog.finish()
            throw .runLoop(error)
        }
        session = Session(watch: watch, observers: [begins, ends], watchdog: watchdog)
    }

    /// Removes the observers and stops the watchdog, waiting for it to end (and so for a report being handled
    /// to return); does nothing if stopped. Safe from any thread, including from the handler, which then
    /// returns before the watchdog ends. The monitor can be started again.
    public func stop() {
        guard let session = lock.withLock({ () -> Session? in
            defer { session = nil }
            return session
        }) else { return }
        for observer in session.observers { observer.invalidate() }
        session.watch.requestStop()
        session.watchdog.finish()
    }

    /// The shared state of the running session, for tests of teardown.
    var currentWatch: StallWatch? { lock.withLock { session?.watch } }
}
