import CPortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Starts a detached, named POSIX thread that runs `body` (`pthread_create` with `PTHREAD_CREATE_DETACHED`),
/// for the library's own service threads, which nobody joins. Returns 0, or `pthread_create`'s error number
/// (then `body` was not run and is released).
func startDetachedThread(named name: String, _ body: @escaping @Sendable () -> Void) -> Int32 {
    final class Start {
        let name: String
        let body: @Sendable () -> Void
        init(_ name: String, _ body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
    }
    let start = Unmanaged.passRetained(Start(name, body)).toOpaque()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    var thread = pthread_t()
    let rc = pthread_create(&thread, &attributes, { raw in
        let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
        setCurrentThreadName(start.name)
        start.body()
        return nil
    }, start)
    pthread_attr_destroy(&attributes)
    if rc != 0 { Unmanaged<Start>.fromOpaque(start).release() } // the thread never took it
    return rc
}
