import Synchronization

/// A count that one thread bumps and others read, for the throughput line and the summary.
///
/// `Atomic` rather than a lock: ThreadSanitizer understands it (it does not see the standard library's
/// `Mutex` on Linux), and a relaxed increment costs the hot path of a worker almost nothing.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)

    init() {}

    func increment() { value.add(1, ordering: .relaxed) }

    func add(_ amount: Int) { value.add(amount, ordering: .relaxed) }

    var current: Int { value.load(ordering: .relaxed) }
}
