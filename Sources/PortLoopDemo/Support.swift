// The in-process demo's helpers: a gate, the loop thread's context switches, the shared counters, the message
// payload (the clock, formatting and threads are in PortLoopDemoSupport).
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PortLoopDemoSupport
import Synchronization

/// A one-shot gate: `wait()` returns once `open()` was called. Built on a pthread mutex and condition so
/// that ThreadSanitizer sees the ordering.
final class Gate: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var condition = pthread_cond_t()
    private var isOpen = false

    init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&condition, nil)
    }

    deinit {
        pthread_cond_destroy(&condition)
        pthread_mutex_destroy(&mutex)
    }

    func open() {
        pthread_mutex_lock(&mutex)
        isOpen = true
        pthread_cond_broadcast(&condition)
        pthread_mutex_unlock(&mutex)
    }

    func wait() {
        pthread_mutex_lock(&mutex)
        while !isOpen { pthread_cond_wait(&condition, &mutex) }
        pthread_mutex_unlock(&mutex)
    }
}

/// The calling thread's voluntary context switches so far (how often it blocked in the kernel), from
/// /proc/thread-self/status; nil where that file does not exist.
func voluntaryContextSwitches() -> Int? {
    guard let file = fopen("/proc/thread-self/status", "r") else { return nil }
    defer { fclose(file) }
    var line: UnsafeMutablePointer<CChar>?
    var capacity = 0
    defer { free(line) }
    let key = "voluntary_ctxt_switches:"
    while getline(&line, &capacity, file) > 0, let line {
        let text = String(cString: line)
        if text.hasPrefix(key) {
            return Int(text.dropFirst(key.count).filter { !$0.isWhitespace })
        }
    }
    return nil
}

// MARK: - Shared state

/// What the producers report and the loop thread reads: atomics only.
final class Counters: Sendable {
    /// Messages sent so far (counted after each send returns, so it never runs ahead of the ports).
    let sent = Atomic<Int>(0)
    let burstsSent = Atomic<Int>(0)
    let sendFailures = Atomic<Int>(0)
    let producersFinished = Atomic<Int>(0)
}

/// The 16 bytes each message carries: when it was sent, and which burst it belongs to.
struct Payload {
    var sentAt: Int64
    var burst: UInt32
    var index: UInt16
    var burstSize: UInt16

    func withBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        var copy = self
        return try withUnsafeBytes(of: &copy, body)
    }

    init(sentAt: Int64, burst: UInt32, index: UInt16, burstSize: UInt16) {
        self.sentAt = sentAt
        self.burst = burst
        self.index = index
        self.burstSize = burstSize
    }

    /// Decodes a received payload; nil if it is not one of ours.
    init?(_ bytes: [UInt8]) {
        guard bytes.count == MemoryLayout<Payload>.size else { return nil }
        self = bytes.withUnsafeBytes { $0.loadUnaligned(as: Payload.self) }
    }
}
