import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What SIGINT and SIGTERM mean to the daemon. They arrive through a ``RunLoopSignalSource`` on the dispatcher's
/// loop, so the stop runs as ordinary loop work, on the loop's thread, between two requests.
enum ShutdownSignals {
    static let numbers: [Int32] = [SIGINT, SIGTERM]

    /// The first signal begins the graceful stop; a second one while stopping exits at once, as with most
    /// daemons.
    static func received(_ signal: Int32, by dispatcher: Dispatcher) {
        let name = name(signal)
        guard !dispatcher.beginStop(reason: name) else { return }
        say("\(name) again while stopping: exiting at once")
        // _exit, not exit: other threads are still running, and exit handlers should not run under them;
        // say() has flushed the output already.
        _exit(128 + signal)
    }

    /// `SIGINT`, `SIGTERM`, or the number.
    static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGINT: "SIGINT"
        case SIGTERM: "SIGTERM"
        default: "signal \(signal)"
        }
    }
}
