#if canImport(Glibc)
import Glibc
#endif

/// A joinable POSIX thread for tests that need real threads (not tasks): blocking receives, senders.
final class TestThread: @unchecked Sendable {
    private final class Body { let run: @Sendable () -> Void; init(_ run: @escaping @Sendable () -> Void) { self.run = run } }
    private var handle = pthread_t()
    private var joined = false

    init(_ body: @escaping @Sendable () -> Void) {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        let rc = pthread_create(&handle, nil, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        precondition(rc == 0, "pthread_create failed: \(rc)")
    }

    func join() {
        guard !joined else { return }
        pthread_join(handle, nil)
        joined = true
    }

    deinit { join() }
}

/// A value guarded by a pthread mutex (ThreadSanitizer sees it, unlike Synchronization.Mutex on Linux).
final class Locked<Value>: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var value: Value
    init(_ value: Value) { self.value = value; pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return try body(&value)
    }
    var current: Value { withLock { $0 } }
}

/// Monotonic time in nanoseconds.
func nowNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// Milliseconds that `body` took.
func elapsedMilliseconds(_ body: () throws -> Void) rethrows -> Double {
    let start = nowNanoseconds()
    try body()
    return Double(nowNanoseconds() - start) / 1e6
}

func sleepMilliseconds(_ ms: Int) { usleep(UInt32(ms * 1000)) }

/// Encodes two integers as a 16-byte payload.
func payload(_ a: Int, _ b: Int) -> [UInt8] {
    withUnsafeBytes(of: (a.littleEndian, b.littleEndian)) { Array($0) }
}

func decode(_ bytes: [UInt8]) -> (Int, Int) {
    bytes.withUnsafeBytes { ($0.loadUnaligned(fromByteOffset: 0, as: Int.self),
                             $0.loadUnaligned(fromByteOffset: 8, as: Int.self)) }
}

/// A pipe: (read end, write end).
func makePipe() throws -> (Int32, Int32) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { throw PipeError() }
    return (fds[0], fds[1])
}
struct PipeError: Error {}
