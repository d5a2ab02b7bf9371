import CPortLoop

/// A notification message that PortLoop posted to a port (Mach's notifications, which the kernel sends:
/// `MACH_NOTIFY_NO_SENDERS`, `MACH_NOTIFY_DEAD_NAME`, `MACH_NOTIFY_SEND_ONCE`).
///
/// Ask for one with ``PortReceiveRight/requestNoSendersNotification(to:makeSendCount:)`` or
/// ``PortSendRight/requestDeadNameNotification(to:)``; it arrives as a message on the port you named, in order
/// with that port's other messages, so a run loop handles it in a ``RunLoopPortSource`` like any other. Read it
/// back with ``init(_:)``. Each request is delivered exactly once, unless it is cancelled first. A send-once
/// notice needs no request: it goes to the port of a ``PortSendOnceRight`` that ended unused, once per right.
public enum PortNotification: Hashable, Sendable, CustomStringConvertible {
    /// No send right to `port` is left anywhere — held by a thread, queued in a message, or held by another
    /// process (`MACH_NOTIFY_NO_SENDERS`). `makeSendCount` is the port's ``PortReceiveRight/makeSendCount`` at
    /// that moment: if the port's count is higher now, a right was made since, and the notice is stale.
    case noSenders(port: PortName, makeSendCount: UInt64, request: PortNotificationRequest.ID)
    /// `port` became a dead name: its receive right was destroyed, or the process holding it is gone
    /// (`MACH_NOTIFY_DEAD_NAME`).
    case deadName(port: PortName, request: PortNotificationRequest.ID)
    /// A send-once right to `port` ended without a message: its holder dropped it, the message carrying it was
    /// destroyed unreceived, or the process holding it is gone (`MACH_NOTIFY_SEND_ONCE`). Posted to `port`
    /// itself, once for each such right; a request's reply port receiving it means that no reply will come.
    case sendOnce(port: PortName)

    /// The message id of a no-senders notification (`MACH_NOTIFY_NO_SENDERS`, 0106).
    public static let noSendersMessageID = Int32(PL_NOTIFY_NO_SENDERS)
    /// The message id of a dead-name notification (`MACH_NOTIFY_DEAD_NAME`, 0110).
    public static let deadNameMessageID = Int32(PL_NOTIFY_DEAD_NAME)
    /// The message id of a send-once notification (`MACH_NOTIFY_SEND_ONCE`, 0107).
    public static let sendOnceMessageID = Int32(PL_NOTIFY_SEND_ONCE)

    /// Reads a notification from a received message; `nil` for any message PortLoop did not post as one
    /// (``ReceivedMessage/isNotification`` is false), whatever its id.
    public init?(_ message: ReceivedMessage) {
        guard message.isNotification, message.payload.count == Int(PL_NOTICE_SIZE) else { return nil }
        func word(_ index: Int) -> UInt64 {
            (0..<8).reduce(UInt64(0)) { value, byte in value | UInt64(message.payload[index * 8 + byte]) << (8 * byte) }
        }
        let port = PortName(rawValue: word(0)), request = PortNotificationRequest.ID(rawValue: word(2))
        switch message.id {
        case Self.noSendersMessageID: self = .noSenders(port: port, makeSendCount: word(1), request: request)
        case Self.deadNameMessageID: self = .deadName(port: port, request: request)
        case Self.sendOnceMessageID: self = .sendOnce(port: port)
        default: return nil
        }
    }

    /// The port the notification is about.
    public var port: PortName {
        switch self {
        case let .noSenders(port, _, _), let .deadName(port, _), let .sendOnce(port): port
        }
    }

    /// The request it answers; id 0 for a send-once notice, which answers none.
    public var request: PortNotificationRequest.ID {
        switch self {
        case let .noSenders(_, _, request), let .deadName(_, request): request
        case .sendOnce: PortNotificationRequest.ID(rawValue: 0)
        }
    }

    public var description: String {
        switch self {
        case let .noSenders(port, count, request): "no senders for \(port) (make-send count \(count), \(request))"
        case let .deadName(port, request): "\(port) is a dead name (\(request))"
        case let .sendOnce(port): "a send-once right to \(port) ended unused"
        }
    }
}

/// A pending notification request (`mach_port_request_notification`): keep it while you want the notice.
///
/// Releasing the last reference cancels a request that has not fired. ``cancel()`` tells whether the notice
/// was stopped in time.
public final class PortNotificationRequest: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// A request's id, unique in the process; a ``PortNotification`` names the request it answers with it.
    public struct ID: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The id's value.
        public let rawValue: UInt64
        /// Wraps a value.
        public init(rawValue: UInt64) { self.rawValue = rawValue }
        public var description: String { "request#\(rawValue)" }
    }

    let request: OpaquePointer
    /// A dead-name request keeps a send right to the port it watches: a right to another process's port is
    /// forgotten, and its death with it, once the last right goes.
    let watchedRight: PortSendRight?
    /// The request's id, as its notification will carry it.
    public let id: ID
    /// The port the request watches.
    public let port: PortName

    init(adopting request: OpaquePointer, port: PortName, watchedRight: PortSendRight?) {
        self.request = request
        self.port = port
        self.watchedRight = watchedRight
        id = ID(rawValue: pl_notification_id(request))
    }

    deinit { pl_notification_release(request) }

    /// Cancels the request (`mach_port_request_notification` with `MACH_PORT_NULL`). Returns `true` if it had
    /// not fired, so that no notice for it will come; `false` if it fired already (its notice is queued on the
    /// notify port, or was received) or was cancelled before.
    @discardableResult
    public func cancel() -> Bool { pl_notification_cancel(request) == PL_OK }

    public static func == (lhs: PortNotificationRequest, rhs: PortNotificationRequest) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
    public var description: String { "PortNotificationRequest(\(id), \(port))" }
}

/// The port a notice goes to must be one of this process's, alive.
private func checkNotifyPort(_ notifyPort: PortSendRight) throws(PortError) {
    guard !notifyPort.isRemote else {
        throw .invalidArgument(argument: "notifyPort",
                               reason: "notifications are posted in this process: name a port of this process")
    }
    guard !notifyPort.isDeadName else { throw .invalidDestination }
}

extension PortReceiveRight {
    /// How many send rights to this port were ever made, by any route (Mach's make-send count, `mscount`):
    /// made from this receive right, copied into a message, or held by another process. A
    /// ``PortNotification/noSenders(port:makeSendCount:request:)`` notice is current only while this has not
    /// grown past the count it carries.
    public var makeSendCount: UInt64 { pl_port_make_send_count(port) }

    /// Asks to be told, by a message on `notifyPort`, when no send right to this port is left
    /// (`mach_port_request_notification` with `MACH_NOTIFY_NO_SENDERS`).
    ///
    /// Counted are rights held by any thread, carried in queued messages, or held by other processes (a process
    /// that dies gives its rights up; one that drops its last right tells this process at once). The notice
    /// fires once, when the count falls to zero while ``makeSendCount`` is at least `makeSendCount` — at once if
    /// there are no rights now. Notices never count against the notify port's queue limit, so none is lost. The
    /// request ends, without a notice, when this port is destroyed.
    /// - Parameters:
    ///   - notifyPort: a port of this process (this port itself is fine: the request holds no right to it).
    ///   - makeSendCount: Mach's `sync`: no notice before this many rights were made; 0 by default.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for a notify port of another process,
    ///   ``PortError/invalidDestination`` for a dead one, ``PortError/outOfMemory``.
    public func requestNoSendersNotification(to notifyPort: PortSendRight,
                                             makeSendCount: UInt64 = 0) throws(PortError) -> PortNotificationRequest {
        try checkNotifyPort(notifyPort)
        var request: OpaquePointer?
        try PortError.check(pl_port_request_no_senders(port, makeSendCount, notifyPort.port, &request),
                            operation: "request a no-senders notification")
        return PortNotificationRequest(adopting: request!, port: name, watchedRight: nil)
    }
}

extension PortSendRight {
    /// Asks to be told, by a message on `notifyPort`, when this right becomes a dead name
    /// (`mach_port_request_notification` with `MACH_NOTIFY_DEAD_NAME`): the port's receive right destroyed, or
    /// — for a port of another process — that process gone or its connection lost. The notice fires once; at
    /// once if the right is dead already. The request keeps a copy of this right while it is pending.
    /// - Parameter notifyPort: a port of this process.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for a notify port of another process,
    ///   ``PortError/invalidDestination`` for a dead one, ``PortError/outOfMemory``.
    public func requestDeadNameNotification(to notifyPort: PortSendRight) throws(PortError) -> PortNotificationRequest {
        try checkNotifyPort(notifyPort)
        var request: OpaquePointer?
        try PortError.check(pl_port_request_dead_name(port, notifyPort.port, &request),
                            operation: "request a dead-name notification")
        return PortNotificationRequest(adopting: request!, port: name, watchedRight: self)
    }
}
