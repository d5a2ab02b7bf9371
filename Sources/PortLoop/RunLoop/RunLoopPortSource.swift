import CPortLoop

/// A reply that a ``RunLoopPortSource`` handler sends back on the message's reply port, as a MIG server's
/// routine fills in the reply message that `mach_msg_server` then sends to `msgh_remote_port`.
public struct PortReply: Sendable {
    /// The reply's id (`msgh_id`); by MIG's convention a reply's id is the request's plus 100, but any value works.
    public var id: Int32
    /// The reply's payload, copied when it is sent.
    public var bytes: [UInt8]
    /// Creates a reply.
    public init(id: Int32 = 0, bytes: [UInt8] = []) {
        self.id = id
        self.bytes = bytes
    }
}

/// A version-1 run loop source over a port (`CFRunLoopSource` with a version-1 context, as `CFMachPort` /
/// `NSMachPort` make): it owns a port's receive right, wakes the loop by itself when the port receives, and
/// calls its handler with each message on the loop's thread. A non-nil return value is sent to the message's
/// reply port.
///
/// The message is lent to the handler for the call. Its payload array is one the loop reuses for the next
/// message once the handler lets go of it, so a handler that does not keep payloads costs no allocation for them
/// (up to 16 KiB, while sizes stay close); one that keeps `message.payload` keeps it whole (arrays copy on write).
///
/// ```swift
/// let source = try RunLoopPortSource { message in PortReply(id: message.id, bytes: message.payload) }
/// try PortRunLoop.current.add(source, mode: .default)
/// let sender = source.makeSendRight() // give this to other threads
/// ```
public final class RunLoopPortSource: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// Performance order (`CFRunLoopSourceGetOrder`); ports are otherwise served round-robin.
    public let order: Int
    let port: PortReceiveRight
    let handler: @Sendable (ReceivedMessage) -> PortReply?
    let attachment = ItemAttachment.make()

    /// Creates a source that owns `port` (`CFMachPortCreateRunLoopSource`).
    public init(port: consuming PortReceiveRight, order: Int = 0,
                handler: @escaping @Sendable (ReceivedMessage) -> PortReply?) {
        self.port = port
        self.order = order
        self.handler = handler
    }

    /// Creates a source with a new port of the given limits (`CFMachPortCreate` then
    /// `CFMachPortCreateRunLoopSource`).
    public convenience init(queueLimit: Int = 64, maxMessageSize: Int = PortReceiveRight.defaultMaxMessageSize,
                            order: Int = 0, handler: @escaping @Sendable (ReceivedMessage) -> PortReply?) throws(PortError) {
        self.init(port: try PortReceiveRight(queueLimit: queueLimit, maxMessageSize: maxMessageSize),
                  order: order, handler: handler)
    }

    /// A send right to the source's port, for any thread to send on.
    public func makeSendRight() -> PortSendRight { port.makeSendRight() }

    /// The name of the source's port.
    public var portName: PortName { port.name }

    /// How many messages wait in the source's port, not yet received by its loop (`mach_port_get_attributes`
    /// with `MACH_PORT_RECEIVE_STATUS`). The port is a FIFO and its loop its only receiver, so on the loop's
    /// thread this says exactly how many of the next messages the handler sees were sent before now: what a
    /// server needs to finish the requests already queued when it decides to stop.
    public var queuedMessageCount: Int { port.messageCount }

    /// Removes the source from every mode of its loop and makes it unusable (`CFRunLoopSourceInvalidate`).
    /// When the call returns the source is in no mode, even if another thread invalidated it at the same time;
    /// on the loop's thread, a handler that invalidates the source sees none of its messages after that. The port
    /// lives until the source is released.
    public func invalidate() {
        attachment.invalidate()?.removeEverywhere(self)
    }

    /// Whether the source has not been invalidated (`CFRunLoopSourceIsValid`).
    public var isValid: Bool { attachment.isValid }

    public static func == (lhs: RunLoopPortSource, rhs: RunLoopPortSource) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String {
        "RunLoopPortSource(\(portName), order: \(order), queued: \(port.messageCount), valid: \(isValid))"
    }
}
