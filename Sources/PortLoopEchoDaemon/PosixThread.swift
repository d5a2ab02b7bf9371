import CPortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Starts named POSIX threads for clients: they block in `request(...)` and need no run loop, so a plain thread
/// is the honest tool (a ``RunLoopThread`` would be a loop that never runs).
///
/// The daemon's own clients are detached, because nobody joins them: the generator learns that its clients
/// ended from its own counter, and under open-ended load the process exits while some clients may still wait
/// for a reply. An ended thread that is neither joined nor detached is a leak (ThreadSanitizer reports it at
/// exit). A `load` client process joins its threads instead: it reports only once every one has ended.
enum PosixThread {
    /// What the new thread runs; handed over retained and released by the thread.
    private final class Body {
        let name: String
        let run: @Sendable () -> Void
        init(name: String, run: @escaping @Sendable () -> Void) { self.name = name; self.run = run }
    }

    /// Starts a detached thread. Signals blocked in the caller stay blocked in it (threads inherit the mask).
    static func detach(name: String, _ run: @escaping @Sendable () -> Void) throws(DaemonError) {
        _ = try start(name: name, detached: true, run)
    }

    /// Starts a thread that the caller must ``join(_:)``.
    static func spawn(name: String, _ run: @escaping @Sendable () -> Void) throws(DaemonError) -> pthread_t {
        try start(name: name, detached: false, run)
    }

    /// Waits for a thread from ``spawn(name:_:)`` to end.
    static func join(_ thread: pthread_t) {
        pthread_join(thread, nil)
    }

    private static func start(name: String, detached: Bool,
                              _ run: @escaping @Sendable () -> Void) throws(DaemonError) -> pthread_t {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(detached ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE))
        let body = Unmanaged.passRetained(Body(name: name, run: run)).toOpaque()
        var handle = pthread_t()
        let rc = pthread_create(&handle, &attributes, { context in
            let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
            // Linux keeps 15 bytes of a thread's name; our names are ASCII, so cutting bytes is safe.
            _ = pl_thread_set_name(String(decoding: body.name.utf8.prefix(15), as: UTF8.self))
            body.run()
            return nil
        }, body)
        guard rc == 0 else {
            Unmanaged<Body>.fromOpaque(body).release() // the thread never took it
            throw .system(call: "pthread_create", errno: rc)
        }
        return handle
    }
}
