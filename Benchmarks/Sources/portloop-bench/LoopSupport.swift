#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import PortLoop

// Helpers shared by the run loop scenarios.

/// A one-shot hand-over of a value between threads: `set` once, `wait` blocks until it is set.
final class Latch<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var value: Value?

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func set(_ newValue: Value) {
        pthread_mutex_lock(mutex)
        value = newValue
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    func wait() -> Value {
        pthread_mutex_lock(mutex)
        while value == nil { pthread_cond_wait(condition, mutex) }
        let result = value!
        pthread_mutex_unlock(mutex)
        return result
    }
}

/// A pthread that runs its own run loop: it takes `PortRunLoop.current` on itself, calls `setUp` with it
/// there (to add sources before running), hands the loop to the creating thread, then runs it with
/// `run()` until the loop is stopped or its default mode has nothing left. The thread then exits, which
/// tears its loop down. `init` returns once the loop exists and `setUp` has run.
final class LoopThread {
    let loop: PortRunLoop
    private let thread: JoinableThread

    init(setUp: @escaping @Sendable (PortRunLoop) -> Void = { _ in }) {
        let latch = Latch<PortRunLoop>()
        thread = JoinableThread {
            let loop = PortRunLoop.current
            setUp(loop)
            latch.set(loop)
            loop.run()
        }
        loop = latch.wait()
    }

    /// Waits for the loop's run to return and the thread to exit.
    func join() { thread.join() }
}

/// Runs a run loop call that must not fail in a benchmark; a failure ends the program with the error.
func mustLoop<T>(_ what: @autoclosure () -> String, _ body: () throws(RunLoopError) -> T) -> T {
    do {
        return try body()
    } catch {
        fatalError("\(what()): \(error)")
    }
}

/// A port source whose port nobody sends to: it keeps a loop's default mode non-empty, so the loop sleeps
/// instead of returning `finished` (the usual "add a port to keep the run loop alive").
func keepAliveSource() -> RunLoopPortSource {
    must("keep-alive port source") { () throws(PortError) in
        try RunLoopPortSource(queueLimit: 1, maxMessageSize: 1) { _ in nil }
    }
}

/// Sends an 8-byte integer (send timeout `.forever`).
@inline(__always)
func sendWord(_ right: PortSendRight, _ value: UInt64) {
    withUnsafeBytes(of: value) { raw in
        must("send") { () throws(PortError) in try right.send(payload: raw, timeout: .forever) }
    }
}

/// The 8-byte integer at the start of a payload.
@inline(__always)
func loadWord(_ payload: [UInt8]) -> UInt64 {
    payload.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
}

/// How many descriptors the process has open (entries of /proc/self/fd), or nil if that cannot be read.
/// The run loop scenarios create and tear down a loop per run; a growing count would be a leak.
func openDescriptorCount() -> Int? {
    guard let directory = opendir("/proc/self/fd") else { return nil }
    defer { closedir(directory) }
    var count = 0
    while readdir(directory) != nil { count += 1 }
    return count - 3 // ".", ".." and the directory's own descriptor
}

/// Runs `body` and warns on standard error if the process holds more descriptors afterwards. A service's listening
/// socket and lock file are closed by the transport thread a moment after the last run destroys its port, so the
/// count is given a second to settle (without that, the cross-process scenarios warned of two descriptors that were
/// gone half a second later).
func checkingDescriptors<T>(_ scenario: String, _ body: () -> T) -> T {
    let before = openDescriptorCount()
    let result = body()
    if let before {
        for _ in 0..<100 {
            guard let now = openDescriptorCount(), now > before else { break }
            usleep(10_000)
        }
    }
    if let before, let after = openDescriptorCount(), after > before {
        printError("warning: \(scenario): \(after - before) more open descriptors after the runs than before (\(before) → \(after))")
    }
    return result
}
