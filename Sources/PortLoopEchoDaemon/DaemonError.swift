import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why the daemon could not start or run: something the port layer, a run loop or the system refused.
enum DaemonError: Error, CustomStringConvertible {
    case port(PortError)
    /// Checking the service's name in failed (in use, a namespace that is not this user's, a bad path).
    case checkIn(name: String, namespace: String, PortError)
    case runLoop(RunLoopError)
    /// A system call failed: which one, with its errno.
    case system(call: String, errno: Int32)

    var description: String {
        switch self {
        case let .port(error): "port layer: \(error)"
        case let .checkIn(name, namespace, error): "could not check in \(name) at \(namespace): \(error)"
        case let .runLoop(error): "run loop: \(error)"
        case let .system(call, errno): "\(call) failed: \(String(cString: strerror(errno))) (errno \(errno))"
        }
    }
}
