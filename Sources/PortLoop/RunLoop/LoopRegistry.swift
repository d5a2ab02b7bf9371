#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One run loop per thread (CF's `__CFRunLoops` table and `__CFTSDKeyRunLoop`): a thread-specific slot holds
/// the calling thread's loop, and its destructor tears the loop down when the thread exits. The table keyed
/// by thread id lets any thread find the main thread's loop.
enum LoopRegistry {
    private static let lock = PThreadLock()
    nonisolated(unsafe) private static var loops: [Int32: PortRunLoop] = [:]

    /// The thread-specific key; its destructor runs on thread exit with the loop it held.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let rc = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            LoopRegistry.threadIsExiting(loop: pointer)
        }
        precondition(rc == 0, "pthread_key_create failed: \(rc)")
        return key
    }()

    /// The key's destructor, on the exiting thread: runs the jobs still queued on the loop's executors and
    /// closes them (``LoopExecutorRegistry/finishExecutors(of:)``), then tears the loop down.
    private static func threadIsExiting(loop pointer: UnsafeMutableRawPointer) {
        // The slot is empty while its destructor runs; the jobs see the loop as PortRunLoop.current again, so
        // that a job asking for it does not make a second loop for this thread.
        pthread_setspecific(key, pointer)
        let loop = Unmanaged<PortRunLoop>.fromOpaque(pointer).takeUnretainedValue()
        while !LoopExecutorRegistry.finishExecutors(of: loop) {}
        pthread_setspecific(key, nil)
        let released = Unmanaged<PortRunLoop>.fromOpaque(pointer).takeRetainedValue()
        forget(released)
        released.threadDidExit()
    }

    /// The calling thread's loop, created on first use.
    static func current() -> PortRunLoop {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<PortRunLoop>.fromOpaque(pointer).takeUnretainedValue()
        }
        let loop = loop(forThread: currentThreadID())
        // The main thread's destructor never runs (exit does not run them); others' do.
        pthread_setspecific(key, Unmanaged.passRetained(loop).toOpaque())
        return loop
    }

    /// The calling thread's loop if it has one; never creates it.
    static func currentIfExists() -> PortRunLoop? {
        pthread_getspecific(key).map { Unmanaged<PortRunLoop>.fromOpaque($0).takeUnretainedValue() }
    }

    /// The main thread's loop, from any thread.
    static func main() -> PortRunLoop { loop(forThread: mainThreadID()) }

    private static func loop(forThread thread: Int32) -> PortRunLoop {
        lock.withLock {
            if let loop = loops[thread] { return loop }
            let loop = PortRunLoop(threadID: thread)
            loops[thread] = loop
            return loop
        }
    }

    private static func forget(_ loop: PortRunLoop) {
        lock.withLock {
            if loops[loop.threadID] === loop { loops[loop.threadID] = nil }
        }
    }

    /// How many loops exist, for tests of teardown.
    static var count: Int { lock.withLock { loops.count } }
}
