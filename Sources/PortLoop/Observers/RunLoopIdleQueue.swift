import DequeModule

/// Work deferred until a run loop is idle, a classic use of a beforeWaiting `CFRunLoopObserver`. Tasks run on the loop's
/// thread when it is about to sleep (beforeWaiting), a bounded number per pass, so that a timer, a source or
/// a message arriving meanwhile waits for at most one batch.
///
/// While tasks remain after a batch, the queue wakes the loop, so that its sleep returns at once and the next
/// pass runs the next batch: the loop never sleeps with idle work pending. Once the queue is empty, nothing
/// wakes the loop and it sleeps as usual; queuing a task into an empty queue wakes it.
///
/// ```swift
/// let idle = try RunLoopIdleQueue(loop: .current, maxTasksPerPass: 2)
/// for n in 1...10 { try idle.enqueue { print("idle task", n) } } // 5 passes of 2 tasks
/// ```
///
/// Like any observer, the queue does not keep a run going: a mode with nothing but idle work finishes at
/// once. And like CF's beforeWaiting, it runs only in passes that are about to sleep: a run with a zero
/// timeout, or a pass that just handled a source, skips it (the next pass that would sleep picks it up). The
/// queue's observer has `order` 0 by default, so its tasks run inside ``RunLoopScopeHooks`` (teardown at
/// `Int.max`) and are timed by ``RunLoopStallMonitor``. Dropping the queue removes its observer and drops
/// the tasks not yet run.
public final class RunLoopIdleQueue: @unchecked Sendable {
    /// The tasks and their bookkeeping, shared with the observer (which must not hold the queue object, or
    /// the loop would keep it alive through the observer).
    private final class Tasks: @unchecked Sendable {
        let lock = PThreadLock()
        var pending = Deque<@Sendable () -> Void>()
        /// Set while the loop's thread runs a batch: the batch wakes the loop itself if work remains, so an
        /// enqueue meanwhile need not.
        var draining = false
        var invalidated = false
        let maxPerPass: Int
        init(maxPerPass: Int) { self.maxPerPass = maxPerPass }

        /// Runs one batch; called by the observer on the loop's thread at beforeWaiting.
        func runBatch() {
            let batch = lock.withLock { () -> [@Sendable () -> Void] in
                let count = min(maxPerPass, pending.count)
                guard count > 0 else { return [] }
                draining = true
                let batch = Array(pending.prefix(count))
                pending.removeFirst(count)
                return batch
            }
            guard !batch.isEmpty else { return }
            for task in batch { task() }
            let more = lock.withLock { () -> Bool in
                draining = false
                return !pending.isEmpty && !invalidated
            }
            // The pending wake-up makes the sleep just ahead return at once: one more pass, one more batch.
            if more { PortRunLoop.current.wakeUp() }
        }
    }

    /// The loop whose idle time runs the tasks.
    public let loop: PortRunLoop
    /// The modes whose passes run tasks.
    public let modes: [PortRunLoop.Mode]
    /// The most tasks one pass runs (at least 1).
    public var maxTasksPerPass: Int { tasks.maxPerPass }
    private let tasks: Tasks
    private let observer: RunLoopObserver

    /// Creates the queue and adds its beforeWaiting observer to the loop's modes.
    /// - Parameters:
    ///   - loop: the loop whose thread runs the tasks; any thread may create the queue and enqueue.
    ///   - modes: the modes whose passes run tasks; the default mode by default, so that work deferred for
    ///     idle time stays out of a private mode such as a tracking one. `.common` means every common mode.
    ///   - maxTasksPerPass: how many tasks one pass runs; raised to 1 if smaller.
    ///   - order: the observer's order among the beforeWaiting observers.
    /// - Throws: ``RunLoopError/invalidArgument(argument:reason:)`` for an empty `modes`,
    ///   ``RunLoopError/threadExited`` if the loop's thread has exited.
    public init(loop: PortRunLoop, modes: [PortRunLoop.Mode] = [.default], maxTasksPerPass: Int = 1,
                order: Int = 0) throws(RunLoopError) {
        try PortRunLoop.Mode.validate(modes)
        self.loop = loop
        self.modes = modes
        let tasks = Tasks(maxPerPass: max(1, maxTasksPerPass))
        self.tasks = tasks
        observer = RunLoopObserver(activities: .beforeWaiting, order: order) { _, _ in tasks.runBatch() }
        do throws(RunLoopError) {
            for mode in modes { try loop.add(observer, mode: mode) }
        } catch {
            observer.invalidate()
            throw error
        }
    }

    deinit { invalidate() }

    /// Queues a task to run on the loop's thread when it is next idle, after the tasks queued before it.
    /// Safe from any thread, including from a task.
    /// - Throws: ``RunLoopError/invalidated`` after ``invalidate()``, ``RunLoopError/threadExited`` if the
    ///   loop's thread has exited; the task is not queued.
    public func enqueue(_ task: @escaping @Sendable () -> Void) throws(RunLoopError) {
        let exited = loop.lock.withLock { loop.threadExited }
        let outcome = tasks.lock.withLock { () -> Result<Bool, RunLoopError> in
            guard !tasks.invalidated else { return .failure(.invalidated) }
            guard !exited else { return .failure(.threadExited) }
            tasks.pending.append(task)
            return .success(tasks.pending.count == 1 && !tasks.draining)
        }
        let wake = try outcome.get()
        // A loop asleep with an empty queue would not pass again by itself. (On the loop's own thread this
        // may cost one extra pass; never a missed task.)
        if wake { loop.wakeUp() }
    }

    /// How many tasks wait to run.
    public var pendingCount: Int { tasks.lock.withLock { tasks.pending.count } }

    /// Drops the tasks not yet run and returns how many there were. The queue stays usable.
    @discardableResult
    public func removeAll() -> Int {
        tasks.lock.withLock {
            defer { tasks.pending.removeAll() }
            return tasks.pending.count
        }
    }

    /// Removes the queue's observer from the loop and drops the tasks not yet run; later ``enqueue(_:)``
    /// calls throw. A batch already running finishes.
    public func invalidate() {
        observer.invalidate()
        tasks.lock.withLock {
            tasks.invalidated = true
            tasks.pending.removeAll()
        }
    }

    /// Whether the queue has not been invalidated.
    public var isValid: Bool { tasks.lock.withLock { !tasks.invalidated } }
}
