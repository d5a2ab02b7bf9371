import CPortLoop

/// The receive right of a port: the one owner of a bounded FIFO message queue
/// (`mach_port_allocate` with `MACH_PORT_RIGHT_RECEIVE`).
///
/// There is exactly one receive right per port, so this type is `~Copyable`: it can be moved, borrowed and
/// consumed, never duplicated. Destroying it, or letting it go out of scope, destroys the port
/// (`mach_port_destroy`): queued messages are destroyed and their reply rights released, the port leaves
/// every ``PortSet``, threads blocked receiving wake with ``PortError/portDied``, and every
/// ``PortSendRight`` to it becomes a dead name.
///
/// ```swift
/// let port = try PortReceiveRight()
/// let sender = port.makeSendRight()
/// try sender.send(id: 1, bytes: [1, 2, 3])
/// let message = try port.receive(timeout: .after(.seconds(1)))
/// ```
public struct PortReceiveRight: ~Copyable, @unchecked Sendable {
    let port: OpaquePointer

    /// The default queue limit (`MACH_PORT_QLIMIT_DEFAULT`).
    public static let defaultQueueLimit = Int(PL_QLIMIT_DEFAULT)
    /// The largest queue limit (`MACH_PORT_QLIMIT_MAX`).
    public static let maxQueueLimit = Int(PL_QLIMIT_MAX)
    /// The default maximum payload size, in bytes.
    public static let defaultMaxMessageSize = Int(PL_MSG_SIZE_DEFAULT)
    /// The largest maximum payload size a port may be given, in bytes.
    public static let maxMessageSizeLimit = Int(PL_MSG_SIZE_MAX)

    /// Creates a port (`mach_port_allocate` with `MACH_PORT_RIGHT_RECEIVE`, then `mach_port_set_attributes`
    /// with `MACH_PORT_LIMITS_INFO`).
    /// - Parameters:
    ///   - queueLimit: how many messages may wait, 1…1024 (`mach_port_qlimit_t`).
    ///   - maxMessageSize: the largest payload a send may carry, in bytes.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for a value out of range.
    public init(queueLimit: Int = PortReceiveRight.defaultQueueLimit,
                maxMessageSize: Int = PortReceiveRight.defaultMaxMessageSize) throws(PortError) {
        try Self.validate(queueLimit: queueLimit)
        guard (1...Self.maxMessageSizeLimit).contains(maxMessageSize) else {
            throw .invalidArgument(argument: "maxMessageSize",
                                   reason: "\(maxMessageSize) is outside 1…\(Self.maxMessageSizeLimit)")
        }
        var raw: OpaquePointer?
        try PortError.check(pl_port_create(UInt32(queueLimit), UInt32(maxMessageSize), &raw), operation: "create")
        port = raw!
    }

    deinit { pl_port_destroy(port) }

    /// Destroys the port now (`mach_port_destroy`); see the type's description for what happens to
    /// queued messages, sets, receivers and senders.
    public consuming func destroy() {
        pl_port_destroy(port)
        discard self
    }

    static func validate(queueLimit: Int) throws(PortError) {
        guard (1...maxQueueLimit).contains(queueLimit) else {
            throw .invalidArgument(argument: "queueLimit", reason: "\(queueLimit) is outside 1…\(maxQueueLimit)")
        }
    }

    /// The port's name, unique for the life of the process.
    public var name: PortName { PortName(rawValue: pl_port_name(port)) }

    /// Makes a new send right to this port (`mach_port_insert_right` with `MACH_MSG_TYPE_MAKE_SEND`).
    public func makeSendRight() -> PortSendRight { PortSendRight(makingFor: port) }

    /// How many send rights to this port exist, reply rights in queued messages included
    /// (`mach_port_get_refs` with `MACH_PORT_RIGHT_SEND`).
    public var sendRightCount: Int { Int(pl_port_send_right_count(port)) }

    /// The queue limit (`mach_port_get_attributes` with `MACH_PORT_LIMITS_INFO`).
    public var queueLimit: Int { Int(pl_port_get_qlimit(port)) }

    /// Changes the queue limit, 1…1024 (`mach_port_set_attributes` with `MACH_PORT_LIMITS_INFO`). Raising it
    /// wakes senders blocked on a full queue, those of other processes included; lowering it below the number
    /// queued drops nothing.
    public func setQueueLimit(_ limit: Int) throws(PortError) {
        try Self.validate(queueLimit: limit)
        try PortError.check(pl_port_set_qlimit(port, UInt32(limit)), operation: "setQueueLimit")
    }

    /// The largest payload a send may carry, in bytes.
    public var maxMessageSize: Int { Int(pl_port_get_max_msg_size(port)) }

    /// How many messages are queued now (`mach_port_get_attributes` with `MACH_PORT_RECEIVE_STATUS`).
    public var messageCount: Int { Int(pl_port_message_count(port)) }

    /// Receives the next message (`mach_msg` with `MACH_RCV_MSG | MACH_RCV_TIMEOUT | MACH_RCV_LARGE`).
    /// - Parameters:
    ///   - timeout: `.poll`, a duration, or `.forever`.
    ///   - maxSize: the largest payload to accept; a larger message stays queued and the call throws
    ///     ``PortError/tooLarge(size:limit:)`` with the size needed.
    /// - Throws: ``PortError/timedOut``, ``PortError/tooLarge(size:limit:)``, ``PortError/portDied``,
    ///   ``PortError/invalidArgument(argument:reason:)``.
    public func receive(timeout: PortTimeout = .forever, maxSize: Int = .max) throws(PortError) -> ReceivedMessage {
        let port = self.port
        let (header, payload) = try receiveIntoArray(timeout: timeout, maxSize: maxSize) { out, buffer, capacity, ns in
            pl_port_receive(port, out, buffer, capacity, ns)
        }
        return ReceivedMessage.adopting(header, payload: payload)
    }

    /// Receives the next message into `buffer`, without allocating (`mach_msg` with `MACH_RCV_LARGE`).
    /// A message larger than the buffer stays queued and the call throws ``PortError/tooLarge(size:limit:)``.
    public func receive(into buffer: UnsafeMutableRawBufferPointer,
                        timeout: PortTimeout = .forever) throws(PortError) -> ReceivedMessageHeader {
        var header = pl_received_t()
        let status = pl_port_receive(port, &header, buffer.baseAddress, buffer.count, try timeout.nanoseconds())
        try PortError.check(status, operation: "receive", size: Int(header.size), limit: buffer.count)
        return ReceivedMessageHeader.adopting(header)
    }

    /// Receives the next message with its payload memory handed over, not copied into an array or a buffer
    /// (`mach_msg` receiving out-of-line memory). A payload sent in this process with
    /// ``PortSendRight/send(id:buffer:replyPort:timeout:)`` is the sender's memory; one that came out of line
    /// from another process is a read-only mapping of its sealed memfd (``MessageBuffer/isMapped``); any other
    /// is copied once into a new buffer.
    /// - Throws: ``PortError/timedOut``, ``PortError/portDied``, ``PortError/outOfMemory`` (the message stays
    ///   queued), ``PortError/invalidArgument(argument:reason:)``.
    public func receiveBuffer(timeout: PortTimeout = .forever) throws(PortError) -> ReceivedBuffer {
        var header = pl_received_t()
        var raw = pl_payload_t()
        try PortError.check(pl_port_receive_payload(port, &header, &raw, try timeout.nanoseconds()),
                            operation: "receive")
        return ReceivedBuffer(header: ReceivedMessageHeader.adopting(header), buffer: MessageBuffer(adopting: raw))
    }
}
