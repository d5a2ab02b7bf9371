/// Sleeps for tasks that must not depend on descriptors: a `PortMessages` consumer retrying after they ran out,
/// the timeout and send back-off of an `async` request. A thread of its own waits on a condition variable,
/// which needs no descriptor.
///
/// Why not `Task.sleep`: on Linux its timers are libdispatch's, which needs descriptors of its own for them;
/// in a process with every descriptor in use, a first `Task.sleep` stops the program (checked with Swift
/// 6.3.1's libdispatch). The thread starts with the first sleeper and ends once none has come for a second.
final class RetryClock: @unchecked Sendable {
    static let shared = RetryClock()

    private struct Sleeper {
        let id: UInt64
        let deadline: Int64
        let continuation: CheckedContinuation<Bool, Never>
    }

    private let condition = MonotonicCondition()
    /// Guarded by `condition`.
    private var sleepers: [Sleeper] = []
    private var nextID: UInt64 = 0
    private var threadRunning = false

    /// Suspends the calling task for `duration`; false if it was cancelled first (it then returns at once).
    func sleep(for duration: Duration) async -> Bool {
        let deadline = monotonicNanoseconds().addingClamped(duration.nanosecondsClamped)
        let id = condition.withLock { () -> UInt64 in
            nextID += 1
            return nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                if Task.isCancelled {
                    continuation.resume(returning: false)
                    return
                }
                let start = condition.withLock { () -> Bool in
                    sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    condition.signal()
                    defer { threadRunning = true }
                    return !threadRunning
                }
                if start && !startThread() {
                    // No thread to spare either: resume now; the caller polls again at once.
                    take(id)?.resume(returning: true)
                }
            }
        } onCancel: {
            take(id)?.resume(returning: false)
        }
    }

    /// Takes a sleeper out, if it is still waiting, and wakes the thread: it may be waiting for this sleeper's
    /// deadline, which can be years away (an `async` request's timeout, cancelled once the reply came), and
    /// must look again, to wait for the next deadline or to end a second after the last sleeper.
    private func take(_ id: UInt64) -> CheckedContinuation<Bool, Never>? {
        condition.withLock {
            guard let index = sleepers.firstIndex(where: { $0.id == id }) else { return nil }
            condition.signal()
            return sleepers.remove(at: index).continuation
        }
    }

    /// Whether the clock's thread is running, for tests.
    var isServing: Bool { condition.withLock { threadRunning } }

    private func startThread() -> Bool {
        let rc = startDetachedThread(named: "portloop.clock") { [self] in serve() }
        if rc != 0 { condition.withLock { threadRunning = false } }
        return rc == 0
    }

    /// The thread's body: resumes sleepers as their deadlines pass; ends after a second without any.
    private func serve() {
        let linger: Int64 = 1_000_000_000
        var idleSince = monotonicNanoseconds()
        while true {
            var due: [CheckedContinuation<Bool, Never>] = []
            let done = condition.withLock { () -> Bool in
                let now = monotonicNanoseconds()
                due = sleepers.filter { $0.deadline <= now }.map(\.continuation)
                sleepers.removeAll { $0.deadline <= now }
                if !due.isEmpty { return false }
                if sleepers.isEmpty {
                    if now - idleSince >= linger {
                        threadRunning = false
                        return true
                    }
                    condition.wait(untilMonotonic: idleSince + linger)
                } else {
                    idleSince = now
                    condition.wait(untilMonotonic: sleepers.map(\.deadline).min()!)
                }
                return false
            }
            if done { return }
            for continuation in due { continuation.resume(returning: true) }
            if !due.isEmpty { idleSince = monotonicNanoseconds() }
        }
    }
}
