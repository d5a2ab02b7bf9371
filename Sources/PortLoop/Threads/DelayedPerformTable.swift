/// A loop's delayed performs that have neither run nor been cancelled (what Foundation keeps per thread for
/// `cancelPreviousPerformRequestsWithTarget:`).
///
/// Taking a request out of the table is how its fate is decided: the timer's callout, ``PerformRequest/cancel()``
/// and ``PortRunLoop/cancelPerformRequests()`` each take it under the lock, and only the one that gets it acts.
/// So a cancel racing the fire from another thread either wins (the block never runs) or loses (it reports
/// false), never both. The lock is a leaf: nothing else is locked while it is held.
final class DelayedPerformTable: @unchecked Sendable {
    private let lock = PThreadLock()
    private var pending: [ObjectIdentifier: PerformRequest] = [:]

    func insert(_ request: PerformRequest) {
        lock.withLock { pending[ObjectIdentifier(request.timer)] = request }
    }

    /// Takes the request of a timer out; nil if it fired or was cancelled already.
    func take(_ timer: RunLoopTimer) -> PerformRequest? {
        lock.withLock { pending.removeValue(forKey: ObjectIdentifier(timer)) }
    }

    /// Takes every pending request out.
    func takeAll() -> [PerformRequest] {
        lock.withLock {
            let all = Array(pending.values)
            pending.removeAll()
            return all
        }
    }

    func contains(_ timer: RunLoopTimer) -> Bool {
        lock.withLock { pending[ObjectIdentifier(timer)] != nil }
    }

    var count: Int { lock.withLock { pending.count } }
}
