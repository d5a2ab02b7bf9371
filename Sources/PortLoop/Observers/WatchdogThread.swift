#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A named POSIX thread running one closure, joined by whoever stops it.
///
/// A pthread rather than a Dispatch queue or a task: a watchdog must keep running when the cooperative pool
/// or the main queue is the thing that is stuck, and it must be joinable so that stopping it is synchronous.
final class WatchdogThread: @unchecked Sendable {
    /// Carries the closure to the new thread; retained across `pthread_create`.
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    private var handle = pthread_t()
    private var finished = false

    /// Starts the thread.
    /// - Parameter name: shown by debuggers and `top -H`; the kernel keeps at most 15 bytes.
    /// - Throws: the `pthread_create` error number when the thread cannot be created.
    init(name: String, _ body: @escaping @Sendable () -> Void) throws(StallMonitorError) {
        let context = Unmanaged.passRetained(Body {
            setCurrentThreadName(name)
            body()
        }).toOpaque()
        let rc = pthread_create(&handle, nil, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        guard rc == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            throw .watchdogThread(errno: rc)
        }
    }

    /// Whether the calling thread is this one.
    var isCurrent: Bool { pthread_equal(pthread_self(), handle) != 0 }

    /// Waits for the thread to end; called from the thread itself (its body stopping its own monitor), it
    /// detaches instead, since a thread cannot join itself. Call once, after asking the body to return.
    func finish() {
        guard !finished else { return }
        finished = true
        if isCurrent { pthread_detach(handle) } else { pthread_join(handle, nil) }
    }
}
