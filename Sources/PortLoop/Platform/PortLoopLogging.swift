import Logging

/// Where PortLoop reports what it cannot throw: misuse it refuses (running a loop from another thread, running
/// the common-modes marker), replies it had to drop, a consumer's failures it retries.
///
/// PortLoop writes through swift-log, so a host that bootstraps `LoggingSystem` already decides where these
/// lines go. Setting ``logger`` also chooses the label, level and metadata: give PortLoop a logger of your own
/// at start-up (`PortLoopLogging.logger = Logger(label: "mydaemon.ports")`). Safe from any thread.
public enum PortLoopLogging {
    private static let lock = PThreadLock()
    nonisolated(unsafe) private static var current = Logger(label: "PortLoop")

    /// The logger every PortLoop component writes to; `Logger(label: "PortLoop")` until set.
    public static var logger: Logger {
        get { lock.withLock { current } }
        set { lock.withLock { current = newValue } }
    }
}
