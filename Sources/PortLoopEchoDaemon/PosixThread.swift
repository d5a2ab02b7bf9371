import CPortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A named, joinable POSIX thread, for the load generator's clients: they block in `request(...)` and need
/// no run loop, so a plain thread is the honest tool (a ``RunLoopThread`` would be a loop that never runs).
final class PosixThread: @unchecked Sendable {
    /// What the new thread runs; handed over retained and released by the thread.
    private final class Body {
        let name: String
        let run: @Sendable () -> Void
        init(name: String, run: @escaping @Sendable () -> Void) { self.name = name; self.run = run }
    }
    /// Written once by `init` before anyone else sees the object, then read by `join` (one caller: main).
    private var handle = pthread_t()
    private var joined = false

    /// Starts the thread. Signals blocked in the caller stay blocked in it (threads inherit the mask).
    init(name: String, _ run: @escaping @Sendable () -> Void) throws(DaemonError) {
        let body = Unmanaged.passRetained(Body(name: name, run: run)).toOpaque()
        let rc = pthread_create(&handle, nil, { context in
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
    }

    /// Waits for the thread to end; once.
    func join() {
        guard !joined else { return }
        pthread_join(handle, nil)
        joined = true
    }
}
