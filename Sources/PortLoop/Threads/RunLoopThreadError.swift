/// Why a ``RunLoopThread`` did not run a task, or why the task did not return a value.
///
/// Generic over the task's own error so that ``RunLoopThread/executeAndWait(_:)`` and ``RunLoopThread/run(isolation:_:)``
/// can rethrow it typed:
/// a task that cannot throw gives `RunLoopThreadError<Never>`, which has only the thread's own cases.
public enum RunLoopThreadError<Failure: Error>: Error, CustomStringConvertible {
    /// The task threw this error.
    case failed(Failure)
    /// ``RunLoopThread/executeAndWait(_:)`` was called on the loop thread itself: it would wait for a task
    /// that can only run after it returns. (`performSelector:onThread:waitUntilDone:YES` runs the task in
    /// place instead; call the closure directly for that.)
    case calledOnLoopThread
    /// The thread was stopped, or its loop ended, before the task could run; the task did not run.
    case stopped

    public var description: String {
        switch self {
        case let .failed(error): "the task failed: \(error)"
        case .calledOnLoopThread: "executeAndWait called on the loop thread itself: waiting would deadlock"
        case .stopped: "the loop thread was stopped before the task ran"
        }
    }
}

extension RunLoopThreadError: Equatable where Failure: Equatable {}
extension RunLoopThreadError: Hashable where Failure: Hashable {}
