import Synchronization

/// A value handed once from one thread to another that waits for it: the outcome of a block queued on a
/// loop's thread (`performSelector:onThread:…waitUntilDone:YES`), or a new thread's start-up report.
///
/// The first ``finish(_:)`` wins; later ones are ignored. A block that may be dropped unrun (a loop drops
/// its pending blocks when its thread exits) carries a ``Sentinel``: when the last reference to it goes
/// without a value having been delivered, the waiter is released with nil instead of waiting forever.
///
/// On ``MonotonicCondition`` (a pthread mutex and condition), not `Synchronization.Mutex`, so ThreadSanitizer
/// sees it.
///
/// ``AsyncCompletion`` is the same for a waiter that is a suspended task rather than a blocked thread.
final class Completion<Value: Sendable>: @unchecked Sendable {
    private let condition = MonotonicCondition()
    /// nil while pending; `.some(nil)` when dropped unrun; `.some(value)` when finished. Guarded by `condition`.
    private var outcome: Value??

    /// Delivers the value and wakes the waiter. Returns false if an outcome was delivered already.
    @discardableResult
    func finish(_ value: Value) -> Bool { deliver(.some(value)) }

    /// Releases the waiter with nil: the work will never run.
    @discardableResult
    func abandon() -> Bool { deliver(.none) }

    private func deliver(_ value: Value?) -> Bool {
        condition.withLock {
            guard outcome == nil else { return false }
            outcome = .some(value)
            condition.broadcast()
            return true
        }
    }

    /// Blocks until an outcome is delivered: the value, or nil if the work was abandoned.
    func wait() -> Value? {
        condition.withLock {
            while outcome == nil { condition.wait() }
            return outcome!
        }
    }

    /// Whether an outcome was delivered.
    var isDone: Bool { condition.withLock { outcome != nil } }

    /// Abandons the completion when released, unless it was finished first. Capture it in the queued
    /// closure: the closure is released after it runs (the completion is finished by then, so nothing
    /// happens) or when the loop drops it unrun (the waiter is released).
    final class Sentinel: Sendable {
        let completion: Completion<Value>
        init(_ completion: Completion<Value>) { self.completion = completion }
        deinit { completion.abandon() }
    }
}

/// A value handed once to a suspended task: the outcome of a block queued on a loop's thread for an `async`
/// caller, which must not block a thread of the cooperative pool as ``Completion/wait()`` would.
///
/// Capture it in the queued closure, as a ``Completion/Sentinel``: the block resumes the task with its value;
/// if the loop drops the block unrun (its thread exited), the release of the closure resumes the task with
/// nil. Either way the continuation is resumed exactly once.
final class AsyncCompletion<Value: Sendable>: Sendable {
    private let continuation: CheckedContinuation<Value?, Never>
    private let resumed = Atomic<Bool>(false)

    init(_ continuation: CheckedContinuation<Value?, Never>) { self.continuation = continuation }

    /// Resumes the task with the value, unless it was resumed already.
    func finish(_ value: Value) {
        guard !resumed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        continuation.resume(returning: value)
    }

    deinit {
        // Released without a value: the work will never run.
        if !resumed.exchange(true, ordering: .acquiringAndReleasing) { continuation.resume(returning: nil) }
    }
}
