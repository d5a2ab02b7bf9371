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
public final class RunLoopSerialExecutor: SerialExecutor, @unchecked Sendable, CustomStringConvertible {
    /// The loop whose thread runs the jobs.
    public let loop: PortRunLoop
    /// The modes in which the loop runs jobs.
    public let modes: [PortRunLoop.Mode]

    private let source: RunLoopSource
    private let lock = PThreadLock()
    /// Jobs waiting for the loop; guarded by `lock`.
    private var pending = Deque<UnownedJob>()
    /// Set once the source has left the loop (its thread exited); guarded by `lock`.
    private var detached = false

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
    /// - Throws: ``RunLoopError/threadExited`` if the loop's thread has exited.
    public init(loop: PortRunLoop, modes: [PortRunLoop.Mode] = [.common], order: Int = 0) throws(RunLoopError) {
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
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        lock.lock()
        pending.append(job)
        let first = pending.count == 1
        let gone = detached
        lock.unlock()
        if gone {
            PortRunLoop.logError("RunLoopSerialExecutor: job enqueued after the loop's thread exited; it will never run")
            return
        }
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

    /// The source's cancel callout: the loop dropped it (its thread exited, or the executor was released).
    private func sourceLeftLoop() {
        let stranded = lock.withLock { () -> Int in
            detached = true
            return pending.count
        }
        if stranded > 0 {
            PortRunLoop.logError("RunLoopSerialExecutor: the loop left with \(stranded) jobs queued; they will never run")
        }
    }
}

/// The executor as its source's callbacks see it: weakly, so that the loop does not keep it alive.
private final class WeakExecutor: @unchecked Sendable {
    /// Set once, before the source is added to the loop.
    weak var executor: RunLoopSerialExecutor?
}
