import CPortLoop

/// A send right: a copyable handle through which any thread may send to a port
/// (a Mach send right, `MACH_PORT_RIGHT_SEND`).
///
/// Copies share one underlying right, released when the last copy goes (`mach_port_deallocate`). Two send
/// rights are equal when they name the same port. A right to a destroyed port is a dead name: sends through
/// it throw ``PortError/invalidDestination``.
public struct PortSendRight: Hashable, Sendable, CustomStringConvertible {
    /// Owns one C send right.
    final class Reference: @unchecked Sendable {
        let port: OpaquePointer
        /// Adopts a send right the caller already owns.
        init(adopting port: OpaquePointer) { self.port = port }
        deinit { pl_port_release_send(port) }
    }
    let reference: Reference

    /// Adopts a C send right (e.g. a received reply right); the new value releases it.
    init(adopting port: OpaquePointer) { reference = Reference(adopting: port) }

    /// Makes a new send right to a port (`MACH_MSG_TYPE_MAKE_SEND`).
    init(makingFor port: OpaquePointer) {
        pl_port_make_send(port)
        reference = Reference(adopting: port)
    }

    var port: OpaquePointer { reference.port }

    /// The name of the port this right sends to.
    public var name: PortName { PortName(rawValue: pl_port_name(port)) }

    /// Whether the port's receive right was destroyed, so that sends will fail.
    public var isDeadName: Bool { pl_port_is_alive(port) == 0 }

    /// Whether the port lives in another process: this right is a proxy that sends over a connection (see
    /// ``PortNamespace``). Every call works the same on either kind of right.
    public var isRemote: Bool { pl_port_is_remote(port) != 0 }

    /// Sends a message (`mach_msg` with `MACH_SEND_MSG`, and `MACH_SEND_TIMEOUT` unless `timeout` is
    /// `.forever`). The payload is copied.
    ///
    /// - Parameters:
    ///   - id: an uninterpreted message id (`msgh_id`).
    ///   - payload: the bytes to send, at most the port's ``PortReceiveRight/maxMessageSize``.
    ///   - replyPort: a port the receiver may answer on (`msgh_local_port`); the message carries a new send
    ///     right to it.
    ///   - attachments: rights and descriptors to carry (a complex message's descriptors), at most
    ///     ``MessageAttachment/maxCount``; the message gets copies, the caller keeps its own.
    ///   - timeout: how long to wait for room when the queue is full; `.poll` fails at once.
    /// - Throws: ``PortError/timedOut`` (full), ``PortError/tooLarge(size:limit:)``,
    ///   ``PortError/invalidDestination`` (destroyed port, or its process gone),
    ///   ``PortError/invalidArgument(argument:reason:)`` (bad timeout, too many attachments, a closed
    ///   descriptor, or a right to a port of a third process sent to another process),
    ///   ``PortError/limitReached(_:)`` (the connection holds as many rights as it may). Nothing is queued when
    ///   it throws.
    public func send(id: Int32 = 0, payload: UnsafeRawBufferPointer, replyPort: PortSendRight? = nil,
                     attachments: [MessageAttachment] = [], timeout: PortTimeout = .forever) throws(PortError) {
        let nanoseconds = try timeout.nanoseconds()
        let status: pl_status_t
        if attachments.isEmpty {
            status = pl_port_send(port, id, payload.baseAddress, payload.count, replyPort?.port, nanoseconds)
        } else {
            guard attachments.count <= MessageAttachment.maxCount else {
                throw .invalidArgument(argument: "attachments",
                                       reason: "\(attachments.count) is more than \(MessageAttachment.maxCount)")
            }
            let items = attachments.map { attachment -> pl_attachment_t in
                switch attachment {
                case let .sendRight(right): return pl_attachment_t(kind: PL_ATTACHMENT_SEND_RIGHT, port: right.port, fd: -1)
                case let .fileDescriptor(descriptor):
                    return pl_attachment_t(kind: PL_ATTACHMENT_FD, port: nil, fd: descriptor.rawValue)
                }
            }
            status = withExtendedLifetime(attachments) {
                pl_port_send_with(port, id, payload.baseAddress, payload.count, replyPort?.port, items,
                                  UInt32(items.count), nanoseconds)
            }
        }
        if status == PL_ERR_INVALID_ARG {
            throw attachments.isEmpty
                ? .invalidArgument(argument: "replyPort", reason: "a right to a port of a third process")
                : .invalidArgument(argument: "attachments",
                                   reason: "a closed descriptor, or a right to a port of a third process")
        }
        try PortError.check(status, operation: "send", size: payload.count,
                            limit: Int(pl_port_get_max_msg_size(port)))
    }

    /// Sends a message whose payload is `bytes` (`mach_msg` with `MACH_SEND_MSG`); see
    /// ``send(id:payload:replyPort:attachments:timeout:)-(_,UnsafeRawBufferPointer,_,_,_)``.
    public func send(id: Int32 = 0, bytes: [UInt8] = [], replyPort: PortSendRight? = nil,
                     attachments: [MessageAttachment] = [], timeout: PortTimeout = .forever) throws(PortError) {
        // withUnsafeBytes cannot rethrow a typed error, so the result travels out as a value.
        let result: Result<Void, PortError> = bytes.withUnsafeBytes { raw in
            Result { () throws(PortError) in
                try send(id: id, payload: raw, replyPort: replyPort, attachments: attachments, timeout: timeout)
            }
        }
        try result.get()
    }

    /// Sends a message whose payload memory moves with it instead of being copied (`mach_msg` with an
    /// out-of-line descriptor whose `deallocate` is set).
    ///
    /// To a port of this process the receiver gets the same memory (``PortReceiveRight/receiveBuffer(timeout:)``),
    /// or a copy through the receive calls that fill an array or a buffer. To another process the payload goes
    /// as a sealed memfd from ``PortNamespace/outOfLineThreshold`` up, in frames below it, and the memory is
    /// freed once written. Queue limits, timeouts and errors are those of
    /// ``send(id:payload:replyPort:attachments:timeout:)-(_,UnsafeRawBufferPointer,_,_,_)``.
    /// - Throws: as that call. When it throws nothing is queued and the buffer is freed.
    public func send(id: Int32 = 0, buffer: consuming MessageBuffer, replyPort: PortSendRight? = nil,
                     timeout: PortTimeout = .forever) throws(PortError) {
        let nanoseconds = try timeout.nanoseconds()
        var raw = buffer.take()
        let size = raw.size
        let status = pl_port_send_payload(port, id, &raw, replyPort?.port, nanoseconds)
        if status != PL_OK { pl_payload_free(&raw) }
        if status == PL_ERR_INVALID_ARG {
            throw .invalidArgument(argument: "replyPort", reason: "a right to a port of a third process")
        }
        try PortError.check(status, operation: "send", size: size, limit: Int(pl_port_get_max_msg_size(port)))
    }

    public static func == (lhs: PortSendRight, rhs: PortSendRight) -> Bool { lhs.port == rhs.port }
    public func hash(into hasher: inout Hasher) { hasher.combine(name) }
    public var description: String { "PortSendRight(\(name)\(isDeadName ? ", dead" : ""))" }
}
