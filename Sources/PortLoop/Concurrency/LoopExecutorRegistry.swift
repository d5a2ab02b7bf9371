/// The ``RunLoopSerialExecutor``s of each loop, so that a thread that ends (a stopping ``RunLoopThread``, or
/// any thread whose loop is torn down as it exits) can run the jobs still queued on them and then close all of
/// that loop's executors in one step.
///
/// Why one step: jobs of one executor may enqueue jobs on another of the same loop. Closing them one at a
/// time would close an idle executor that a job still queued on another is about to enqueue on, and that
/// job would then be refused. Here every executor of the loop is checked and closed while their locks are
/// all held, and a loop once closed takes no new executor.
///
/// Entries hold loops and executors weakly: an executor does not unregister (its deinit would take this
/// lock from wherever its last reference goes), and entries of loops that are gone are pruned when an
/// executor registers.
enum LoopExecutorRegistry {
    private final class Entry {
        weak var loop: PortRunLoop?
        var executors: [WeakReference] = []
        /// Set when the loop's thread has drained and closed the executors; later ones are refused.
        var closed = false
        init(loop: PortRunLoop) { self.loop = loop }
    }

    private struct WeakReference {
        weak var executor: RunLoopSerialExecutor?
    }

    private static let lock = PThreadLock()
    nonisolated(unsafe) private static var entries: [ObjectIdentifier: Entry] = [:]

    /// Records a new executor of `executor.loop`.
    /// - Throws: ``RunLoopError/threadExited`` if the loop's thread has closed its executors (it is exiting).
    static func register(_ executor: RunLoopSerialExecutor) throws(RunLoopError) {
        let refused = lock.withLock { () -> Bool in
            entries = entries.filter { $0.value.loop != nil }
            let entry = entryLocked(for: executor.loop)
            guard !entry.closed else { return true }
            entry.executors.removeAll { $0.executor == nil }
            entry.executors.append(WeakReference(executor: executor))
            return false
        }
        if refused { throw .threadExited }
    }

    /// One step of ending `loop`'s executors, on the loop's thread, between passes (no job of the loop is
    /// running): if none of them has a job queued, closes them all and returns true; otherwise runs the jobs
    /// queued on each, whatever its modes, and returns false, as those jobs may have queued more (here or as
    /// blocks of the loop). Call it until it returns true.
    static func finishExecutors(of loop: PortRunLoop) -> Bool {
        let busy = lock.withLock { () -> [RunLoopSerialExecutor]? in
            // The entry is made if the loop never had an executor, so that it is closed too: an executor made
            // from another thread between this and the loop's teardown is refused.
            entries = entries.filter { $0.value.loop != nil }
            let entry = entryLocked(for: loop)
            let executors = entry.executors.compactMap(\.executor)
            if RunLoopSerialExecutor.closeAllIfIdle(executors) {
                entry.closed = true
                return nil
            }
            return executors
        }
        guard let busy else { return true }
        // Outside the registry's lock: a job may make another executor of the loop, which registers.
        for executor in busy { executor.runJobsAsThreadEnds() }
        return false
    }

    /// The entry of a loop, made if missing (or if its key was left by a loop that is gone); with the lock held.
    private static func entryLocked(for loop: PortRunLoop) -> Entry {
        let key = ObjectIdentifier(loop)
        if let entry = entries[key], entry.loop === loop { return entry }
        let entry = Entry(loop: loop)
        entries[key] = entry
        return entry
    }
}
