import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// A one-shot gate between threads, on a pthread mutex and condition (visible to ThreadSanitizer).
final class Latch: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var cond = pthread_cond_t()
    private var open = false
    init() { pthread_mutex_init(&mutex, nil); pthread_cond_init(&cond, nil) }
    deinit { pthread_cond_destroy(&cond); pthread_mutex_destroy(&mutex) }
    func signal() {
        pthread_mutex_lock(&mutex); open = true; pthread_cond_broadcast(&cond); pthread_mutex_unlock(&mutex)
    }
    func wait() {
        pthread_mutex_lock(&mutex); while !open { pthread_cond_wait(&cond, &mutex) }; pthread_mutex_unlock(&mutex)
    }
}

/// A thread that runs a loop: `setUp` runs on the thread with its loop, then `body` (which usually runs the
/// loop). The loop is handed back once `setUp` is done.
final class TestLoopThread: @unchecked Sendable {
    let thread: TestThread
    let loop: PortRunLoop
    private let result: Locked<[PortRunLoop.RunResult]>

    init(setUp: @escaping @Sendable (PortRunLoop) throws -> Void = { _ in },
         body: @escaping @Sendable (PortRunLoop) -> [PortRunLoop.RunResult]) {
        let ready = Latch()
        let box = Locked<PortRunLoop?>(nil)
        let result = Locked<[PortRunLoop.RunResult]>([])
        thread = TestThread {
            let loop = PortRunLoop.current
            try! setUp(loop)
            box.withLock { $0 = loop }
            ready.signal()
            let results = body(loop)
            result.withLock { $0 = results }
        }
        ready.wait()
        loop = box.current!
        self.result = result
    }

    /// Joins the thread and returns what its body returned.
    func join() -> [PortRunLoop.RunResult] {
        thread.join()
        return result.current
    }
}

/// Records events from several threads in order.
final class Trace<Event: Sendable>: @unchecked Sendable {
    private let events = Locked<[Event]>([])
    func append(_ event: Event) { events.withLock { $0.append(event) } }
    var all: [Event] { events.current }
}

/// Hands `body` the loop of a fresh thread that stays alive, not running its loop, until `body` returns.
/// Everything but running a loop is allowed from any thread, so tests may drive it from here.
func withIdleLoop(_ body: (PortRunLoop) throws -> Void) rethrows {
    let release = Latch()
    let worker = TestLoopThread(body: { _ in release.wait(); return [] })
    defer { release.signal(); _ = worker.join() }
    try body(worker.loop)
}

/// A loop thread whose loop runs in the default mode for `timeout` once `go` is signalled: what a test adds to
/// the mode from outside must be there before the run starts, as a run of an empty mode returns at once.
func gatedLoopThread(running timeout: Duration) -> (worker: TestLoopThread, go: Latch) {
    let go = Latch()
    let worker = TestLoopThread { loop in
        go.wait()
        return [loop.run(mode: .default, timeout: timeout)]
    }
    return (worker, go)
}
