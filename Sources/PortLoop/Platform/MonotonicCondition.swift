#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A `pthread_mutex_t` with a `pthread_cond_t` whose timed waits run on CLOCK_MONOTONIC, the clock the run
/// loop's passes are measured on.
///
/// Why not ``PThreadLock`` plus a condition elsewhere: a condition must be waited on with its own mutex, and
/// the default condition clock (CLOCK_REALTIME) jumps when the wall clock is set, which would fire or delay
/// a deadline computed from monotonic time. Why not `Synchronization.Mutex`: ThreadSanitizer cannot see it on
/// Linux.
final class MonotonicCondition: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Wakes one waiter. Call with the mutex held, so that a waiter cannot miss it between its check and its wait.
    func signal() { pthread_cond_signal(condition) }

    /// Wakes every waiter; with the mutex held, as `signal()`.
    func broadcast() { pthread_cond_broadcast(condition) }

    /// Waits, with the mutex held, until signalled (or woken spuriously: callers re-check their predicate).
    func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits, with the mutex held, until signalled or until the monotonic clock reaches `deadline` (nanoseconds).
    func wait(untilMonotonic deadline: Int64) {
        var time = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        pthread_cond_timedwait(condition, mutex, &time)
    }
}
