import DequeModule

/// A `SerialExecutor` that runs jobs on a run loop's thread, between the loop's other work: the Swift
/// concurrency counterpart of CF's main-queue servicing (`__CFRUNLOOP_IS_SERVICING_THE_MAIN_DISPATCH_QUEUE__`),
/// for any loop.
///
/// Jobs are queued FIFO and run by a version-0 source (``RunLoopSource``) that ``enqueue(_:)`` signals and
/// wakes. Each time the source is performed it runs the jobs that were queued when it started; jobs queued
/// meanwhile wait for the next pass, so timers, Source1 messages and blocks interleave with a stream of
/// jobs instead of starving behind it.
///
/// **The loop must be running** in one of the executor's modes (by default any common mode, e.g. `.default`)
/// for jobs to run: enqueued jobs wait while it is not. The source also keeps those modes from running
/// empty, so `run()` on the loop's thread keeps serving jobs until the loop is stopped or the executor is
/// released.
///
/// An actor adopts it through `unownedExecutor`:
///
/// ```swift
/// actor Counter {
///     let executor: RunLoopSerialExecutor
///     nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
///     var value = 0
///     init(loop: PortRunLoop) throws(RunLoopError) { executor = try RunLoopSerialExecutor(loop: loop) }
///     func increment() -> Int { value += 1; return value } // runs on the loop's thread
/// }
/// ```
///
/// Jobs never run re-entrantly: if a job runs the loop again (a nested run), the jobs queued meanwhile
/// wait until that job has returned, so an actor's jobs stay strictly one at a time.
///
/// **When the loop's thread ends.** A job is a promise that a suspended task will resume, so none may be
/// dropped silently. One rule for every thread but the main one (whose loop lives as long as the process):
/// the jobs queued when the thread ends run on it before it goes, then its loop's executors *close*.
/// - On a ``RunLoopThread``'s loop, ``RunLoopThread/stop()`` runs every job queued before the thread exits,
///   on every executor of the loop, including jobs that those jobs enqueue meanwhile (a call chain between
///   two actors finishes), between passes of its loop that also run its last blocks and sources. When nothing
///   is left, the thread closes the loop's executors, all in one step, and exits.
/// - A plain thread (any other thread with a loop) decides itself when it stops running its loop. When it
///   exits, its loop's teardown, still on that thread, runs the jobs queued on the loop's executors, whatever
///   their modes, including jobs those jobs enqueue on them meanwhile, then closes them in one step. The jobs
///   run outside any run of the loop: code in them that waits for the loop to run something else (a timer, a
///   port source) gets no answer.
/// - A job enqueued on a closed executor **stops the program** (`preconditionFailure`, naming the executor
///   and its loop's thread), as SwiftNIO does for a task scheduled on an event loop that has shut down: the
///   job could never run, so its caller would wait forever, and a trap at the enqueue shows which call it
///   was. This is a programming error: an actor was used after its thread ended (typically a task that was
///   suspended elsewhere, for a sleep or another actor, across the end, and came back). A thread that exits
///   in the middle of one of the executor's jobs (`pthread_exit` inside an actor's method) cannot run the
///   jobs queued behind it either, and stops the program the same way.
public final class RunLoopSerialExecutor: SerialExecutor, @unchecked Sendable, CustomStringConvertible {
    /// The loop whose thread runs the jobs.
    public let loop: PortRunLoop
    /// The modes in which the loop runs jobs.
    public let modes: [PortRunLoop.Mode]

    private let source: RunLoopSource
    private let lock = PThreadLock()
    /// Jobs waiting for the loop; guarded by `lock`.
    private var pending = Deque<UnownedJob>()
    /// Set once jobs can no longer run: the loop's thread drained and closed its executors, or exited. A job
    /// enqueued from then on stops the program. Guarded by `lock`.
    private var closed = false

    // Touched only on the loop's thread.
    /// The jobs being run; swapped with `pending` so that neither buffer is reallocated in steady state.
    private var batch = Deque<UnownedJob>()
    private var isRunningJobs = false
    private var skippedNestedDrain = false

    /// Creates an executor for `loop` (safe from any thread) and schedules its source there.
    /// - Parameters:
    ///   - loop: the loop whose thread runs the jobs.
    ///   - modes: the modes in which jobs run; `.common` (the default) means every common mode.
    ///   - order: the source's order among the loop's Source0s (`CFRunLoopSourceGetOrder`).
    /// - Throws: ``RunLoopError/invalidArgument(argument:reason:)`` for an empty `modes`,
    ///   ``RunLoopError/threadExited`` if the loop's thread has exited, or is exiting and has run its last
    ///   jobs.
    public init(loop: PortRunLoop, modes: [PortRunLoop.Mode] = [.common], order: Int = 0) throws(RunLoopError) {
        try PortRunLoop.Mode.validate(modes)
        self.loop = loop
        self.modes = modes
        // The loop holds the source and the source must not keep the executor alive (actors own their
        // executor, and dropping the last actor should release it), so the callbacks reach it weakly.
        let box = WeakExecutor()
        source = RunLoopSource(order: order, cancel: { _, _ in box.executor?.sourceLeftLoop() }) {
            box.executor?.runJobs()
        }
        box.executor = self
        do {
            // Before the source is added: a loop that closed its executors has no thread left to run jobs.
            try LoopExecutorRegistry.register(self)
            for mode in modes { try loop.add(source, mode: mode) }
        } catch {
            source.invalidate()
            throw error
        }
    }

    deinit {
        // Leave the loop, so that a loop kept alive only by this source may finish.
        source.invalidate()
    }

    /// Queues a job to run on the loop's thread (`SerialExecutor.enqueue`). Safe from any thread.
    ///
    /// Stops the program (`preconditionFailure`) if the executor is closed: its loop's thread has exited, or
    /// is exiting and has run its last jobs. Such a job could never run and its caller would wait forever;
    /// see "When the loop's thread ends" in the type's description.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        lock.lock()
        guard !closed else {
            lock.unlock()
            refuseJob()
        }
        pending.append(job)
        let first = pending.count == 1
        lock.unlock()
        // Only the empty → non-empty transition needs a signal: a non-empty queue is already signalled, or is
        // being drained and will be signalled again by the drain.
        if first {
            source.signal()
            loop.wakeUp()
        }
    }

    /// The executor as the runtime refers to it. Uses complex equality so that two executors of the same
    /// loop are recognised as one execution context (see ``isSameExclusiveExecutionContext(other:)``).
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(complexEquality: self)
    }

    /// Whether two executors run their jobs on the same thread, one at a time: true for executors of the
    /// same loop (`SerialExecutor.isSameExclusiveExecutionContext`).
    public func isSameExclusiveExecutionContext(other: RunLoopSerialExecutor) -> Bool {
        loop === other.loop
    }

    /// Stops the program unless called on the loop's thread (`SerialExecutor.checkIsolated`); this is what
    /// `assumeIsolated` and `assertIsolated` fall back to when the current job is not this executor's.
    public func checkIsolated() {
        precondition(loop.isCurrent,
                     "expected to run on the run loop's thread \(loop.threadID), but running on thread \(currentThreadID())")
    }

    /// Whether the calling thread is the loop's thread (`SerialExecutor.isIsolatingCurrentContext`): the
    /// loop's thread is the one place this executor's jobs run, and it runs one thing at a time.
    public func isIsolatingCurrentContext() -> Bool? {
        loop.isCurrent
    }

    /// How many jobs are waiting for the loop.
    public var pendingJobCount: Int { lock.withLock { pending.count } }

    /// Whether the executor takes no more jobs (its loop's thread has exited or is exiting), for tests.
    var isClosed: Bool { lock.withLock { closed } }

    /// Stops the program for a job that arrived after the executor closed.
    private func refuseJob() -> Never {
        preconditionFailure("\(self) received a job after its loop's thread \(loop.threadID) exited (or, exiting, "
            + "ran its last jobs): the job can never run, and the task awaiting it would never resume. An actor on "
            + "this executor was used after its thread ended.")
    }

    public var description: String {
        "RunLoopSerialExecutor(loop thread \(loop.threadID), modes: \(modes), pending: \(pendingJobCount))"
    }

    // MARK: - On the loop's thread

    /// The source's perform callout: runs the jobs queued now, in order.
    private func runJobs() {
        guard !isRunningJobs else {
            // A job is running the loop (a nested run). Running more jobs here would run two jobs of one
            // serial executor at once; they wait for the outer drain, which signals the source again.
            skippedNestedDrain = true
            return
        }
        isRunningJobs = true
        lock.lock()
        swap(&pending, &batch)
        lock.unlock()
        let executor = asUnownedSerialExecutor()
        while let job = batch.popFirst() {
            job.runSynchronously(on: executor)
        }
        isRunningJobs = false
        if skippedNestedDrain {
            skippedNestedDrain = false
            // The nested run consumed a signal without running the jobs it stood for.
            if lock.withLock({ !pending.isEmpty }) { source.signal() }
        }
    }

    /// The source's cancel callout, once per mode it was in: the loop dropped it because its thread exited
    /// (when the executor is released, the callout finds no executor). The thread ran the queued jobs and
    /// closed the executor before that (``LoopExecutorRegistry/finishExecutors(of:)``), so none can be left;
    /// one that were would never run, and that must not pass in silence.
    private func sourceLeftLoop() {
        let stranded = lock.withLock { () -> Int in
            closed = true
            return pending.count
        }
        if stranded > 0 {
            preconditionFailure("\(self): the loop's thread \(loop.threadID) exited with \(stranded) jobs queued that "
                + "it did not run; they can never run, and the tasks awaiting them would never resume.")
        }
    }

    /// Runs the jobs queued now, on the loop's thread, outside any run of the loop: for a thread that is ending
    /// (``LoopExecutorRegistry/finishExecutors(of:)``). Stops the program if one of this executor's jobs is
    /// running (the thread is exiting from inside it): the jobs behind it cannot run without breaking the
    /// executor's one-at-a-time rule, and cannot be left to wait for a thread that is going.
    func runJobsAsThreadEnds() {
        precondition(loop.isCurrent, "\(self): jobs run on the loop's thread only")
        if isRunningJobs {
            preconditionFailure("\(self): the loop's thread \(loop.threadID) is exiting in the middle of one of the "
                + "executor's jobs (pthread_exit in an actor's method?) with \(pendingJobCount) jobs queued behind it; "
                + "they can never run, and the tasks awaiting them would never resume.")
        }
        runJobs()
    }

    /// Closes `executors`, all of one loop, if none has a job queued; returns whether it did. Holding every
    /// lock at once makes the check and the closing one step for enqueuers on any of them. Called with the
    /// registry's lock held.
    static func closeAllIfIdle(_ executors: [RunLoopSerialExecutor]) -> Bool {
        for executor in executors { executor.lock.lock() }
        defer { for executor in executors { executor.lock.unlock() } }
        guard executors.allSatisfy({ $0.pending.isEmpty }) else { return false }
        for executor in executors { executor.closed = true }
        return true
    }
}

/// The executor as its source's callbacks see it: weakly, so that the loop does not keep it alive.
private final class WeakExecutor: @unchecked Sendable {
    /// Set once, before the source is added to the loop.
    weak var executor: RunLoopSerialExecutor?
}
