/// Why a ``RunLoopStallMonitor`` could not start.
public enum StallMonitorError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The loop refused the monitor's observers (its thread has exited, or the mode's port set could not be made).
    case runLoop(RunLoopError)
    /// The watchdog thread could not be created (`pthread_create` failed with this error number).
    case watchdogThread(errno: Int32)

    /// What failed, in words.
    public var description: String {
        switch self {
        case let .runLoop(error): "the run loop refused the monitor's observers: \(error)"
        case let .watchdogThread(errno):
            "the watchdog thread could not be created: pthread_create failed: \(errnoDescription(errno)) (errno \(errno))"
        }
    }
}
