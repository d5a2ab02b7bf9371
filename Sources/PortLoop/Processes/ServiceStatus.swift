import CPortLoop

/// How a service is doing, in its own process's words: what ``PortSendRight/serviceStatus(echoing:timeout:)``
/// returns.
///
/// The service's side of the connection answers by itself, from the service port's counters: the application
/// neither takes part nor can refuse (beyond its ``PeerPolicy``, which keeps a refused process from asking), and
/// a service whose run loop is stuck still answers, its ``queueDepth`` showing what piles up.
public struct ServiceStatus: Sendable, Hashable {
    /// The service's process id, as the service sees itself.
    public let processID: Int32
    /// The service process's effective user id.
    public let userID: UInt32
    /// The service process's effective group id.
    public let groupID: UInt32
    /// Messages waiting in the service port's queue.
    public let queueDepth: Int
    /// The service port's queue limit.
    public let queueLimit: Int
    /// The largest payload the service port takes, in bytes.
    public let maxMessageSize: Int
    /// Processes connected to the service, the asking one included.
    public let connections: Int
    /// Messages sent to the service port since it was made, from this process and others (a message a receiver
    /// put back is not counted twice). Two answers apart in time give the service's rate.
    public let messagesReceived: UInt64

    /// The most bytes ``PortSendRight/serviceStatus(echoing:timeout:)`` may ask the service to echo.
    public static let maxEcho = Int(PL_SERVICE_ECHO_MAX)

    init(_ c: pl_service_status_t) {
        processID = c.pid
        userID = c.uid
        groupID = c.gid
        queueDepth = Int(c.queue_depth)
        queueLimit = Int(c.queue_limit)
        maxMessageSize = Int(c.max_message_size)
        connections = Int(c.connections)
        messagesReceived = c.messages_received
    }
}

extension PortSendRight {
    /// Asks the service this right was looked up for how it is doing (``PortNamespace/lookUp(_:timeout:)``), and
    /// waits for the answer. The question and its answer each carry `echoing` bytes, so timing the call measures
    /// a round trip of that size through both processes' transports; the service's application code is not
    /// involved (a request it answers measures that instead).
    ///
    /// - Parameters:
    ///   - echoing: bytes the question carries and the answer returns, 0 … ``ServiceStatus/maxEcho``.
    ///   - timeout: how long to wait for the answer.
    /// - Throws: ``PortError/invalidDestination`` when the service is gone (before or while asking),
    ///   ``PortError/timedOut``, ``PortError/invalidArgument(argument:reason:)`` for a right that is not a
    ///   looked-up service port, a service built with an earlier release (its wire has no status query), or
    ///   an echo size out of range; ``PortError/outOfMemory``.
    public func serviceStatus(echoing: Int = 0, timeout: PortTimeout = .seconds(10)) throws(PortError) -> ServiceStatus {
        guard (0...ServiceStatus.maxEcho).contains(echoing) else {
            throw .invalidArgument(argument: "echoing", reason: "\(echoing) is not in 0...\(ServiceStatus.maxEcho)")
        }
        var status = pl_service_status_t()
        let result = pl_service_status(port, UInt32(echoing), try timeout.nanoseconds(), &status)
        if result == PL_ERR_INVALID_ARG {
            throw .invalidArgument(argument: "right", reason: "not a service port looked up by name, or the service's wire (version 1) has no status query")
        }
        try PortError.check(result, operation: "serviceStatus")
        return ServiceStatus(status)
    }
}
