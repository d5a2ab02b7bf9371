import CPortLoop
import Synchronization

/// A send right: a copyable handle through which any thread may send to a port
/// (a Mach send right, `MACH_PORT_RIGHT_SEND`).
///
/// Copies share one underlying right, released when the last copy goes (`mach_port_deallocate`). Two send
/// rights are equal when they name the same port. A right to a destroyed port is a dead name: sends through
/// it throw ``PortError/invalidDestination``.
///
/// A received request's ``ReceivedMessage/replyPort`` is a send-once right (``isSendOnce``,
/// `MACH_PORT_RIGHT_SEND_ONCE`): the first send through it uses it up, a second throws
/// ``PortError/invalidName``, and if every copy goes unused the requester is told at once (see
/// ``PortSendOnceRight``). It may be handed on whole as another message's `replyPort`.
public struct PortSendRight: Hashable, Sendable, CustomStringConvertible {
    /// Owns one C send right, or one send-once right.
    final class Reference: @unchecked Sendable {
        let port: OpaquePointer
        /// A send-once right (`pl_port_send_once` uses it, `pl_port_release_send_once` ends it unused).
        let isOnce: Bool
        /// A send-once right's state: held, taken by a call in progress, or gone (used or moved).
        let onceState = Atomic<UInt8>(Reference.held)
        static let held: UInt8 = 0, busy: UInt8 = 1, gone: UInt8 = 2

        /// Adopts a send right (or a send-once right) the caller already owns. A send-once right's handle also
        /// keeps the port's memory: the right may be used up while copies still ask its name or state.
        init(adopting port: OpaquePointer, once: Bool = false) {
            self.port = port
            isOnce = once
            if once { pl_port_retain_memory(port) }
        }
        deinit {
            if !isOnce {
                pl_port_release_send(port)
                return
            }
            if onceState.load(ordering: .acquiring) == Reference.held {
                pl_port_release_send_once(port) // unused: its port gets the send-once notice
            }
            pl_port_release_memory(port)
        }

        /// Takes the send-once right for one call; false if it is used up, or in use by another call.
        func takeOnce() -> Bool {
            onceState.compareExchange(expected: Reference.held, desired: Reference.busy, ordering: .acquiringAndReleasing)
                .exchanged
        }
        /// Ends the call: the right is gone, or back with its holder.
        func endOnce(gone: Bool) { onceState.store(gone ? Reference.gone : Reference.held, ordering: .releasing) }
    }
    let reference: Reference

    /// Adopts a C send right (e.g. a received reply right); the new value releases it.
    init(adopting port: OpaquePointer) { reference = Reference(adopting: port) }

    /// Adopts a C send-once right (a received request's reply right).
    init(adoptingSendOnce port: OpaquePointer) { reference = Reference(adopting: port, once: true) }

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

    /// Whether this is a send-once right (`MACH_PORT_RIGHT_SEND_ONCE`): good for one message, as a received
    /// request's reply right is. It stays true after the right is used.
    public var isSendOnce: Bool { reference.isOnce }

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
    ///   ``PortError/limitReached(_:)`` (the connection holds as many rights as it may),
    ///   ``PortError/outOfMemory`` (among others when a port's right goes to another process for the first time
    ///   and its queue cannot grow to its limit: room lent to another process is room the queue holds). Nothing is
    ///   queued when it throws.
    ///
    /// Through a send-once right (``isSendOnce``) the send never waits and uses the right up
    /// (`MACH_MSG_TYPE_MOVE_SEND_ONCE`); it carries no reply port and no attachments
    /// (``PortError/invalidArgument(argument:reason:)``), and a second send throws ``PortError/invalidName``.
    /// A send-once `replyPort` moves into the message rather than being copied: the caller's right is used up
    /// when the send succeeds or throws ``PortError/invalidDestination`` (its port is then told), and kept on any
    /// other error.
    public func send(id: Int32 = 0, payload: UnsafeRawBufferPointer, replyPort: PortSendRight? = nil,
                     attachments: [MessageAttachment] = [], timeout: PortTimeout = .forever) throws(PortError) {
        let nanoseconds = try timeout.nanoseconds()
        if reference.isOnce {
            try sendOnce(id: id, payload: payload, replyPort: replyPort, attachments: attachments)
            return
        }
        if attachments.contains(where: { if case let .sendRight(right) = $0 { right.isSendOnce } else { false } }) {
            throw .invalidArgument(argument: "attachments", reason: "a send-once right travels only as a reply port")
        }
        if let replyPort, replyPort.isSendOnce {
            try sendMovingOnce(id: id, payload: payload, replyPort: replyPort, attachments: attachments,
                               nanoseconds: nanoseconds)
            return
        }
        let status: pl_status_t
        if attachments.isEmpty {
            status = pl_port_send(port, id, payload.baseAddress, payload.count, replyPort?.port, nanoseconds)
        } else {
            guard attachments.count <= MessageAttachment.maxCount else {
                throw .invalidArgument(argument: "attachments",
                                       reason: "\(attachments.count) is more than \(MessageAttachment.maxCount)")
            }
            let items = Self.cAttachments(attachments)
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

    /// The C attachments for `attachments`; the caller keeps `attachments` alive while they are used.
    private static func cAttachments(_ attachments: [MessageAttachment]) -> [pl_attachment_t] {
        attachments.map { attachment -> pl_attachment_t in
            switch attachment {
            case let .sendRight(right): return pl_attachment_t(kind: PL_ATTACHMENT_SEND_RIGHT, port: right.port, fd: -1)
            case let .fileDescriptor(descriptor):
                return pl_attachment_t(kind: PL_ATTACHMENT_FD, port: nil, fd: descriptor.rawValue)
            }
        }
    }

    /// A send through this send-once right (`pl_port_send_once`).
    private func sendOnce(id: Int32, payload: UnsafeRawBufferPointer, replyPort: PortSendRight?,
                          attachments: [MessageAttachment]) throws(PortError) {
        guard replyPort == nil, attachments.isEmpty else {
            throw .invalidArgument(argument: replyPort != nil ? "replyPort" : "attachments",
                                   reason: "a message through a send-once right carries no rights")
        }
        guard reference.takeOnce() else { throw .invalidName }
        let status = pl_port_send_once(port, id, payload.baseAddress, payload.count)
        // Too large, or no memory for the copy: nothing was sent and the right is still the caller's.
        reference.endOnce(gone: !(status == PL_ERR_TOO_LARGE || status == PL_ERR_NO_MEMORY || status == PL_ERR_INVALID_ARG))
        try PortError.check(status, operation: "send", size: payload.count, limit: Int(pl_port_get_max_msg_size(port)))
    }

    /// A send whose reply right is `replyPort`'s send-once right, moved in (`pl_port_send_moving_once`).
    private func sendMovingOnce(id: Int32, payload: UnsafeRawBufferPointer, replyPort: PortSendRight,
                                attachments: [MessageAttachment], nanoseconds: Int64) throws(PortError) {
        guard attachments.count <= MessageAttachment.maxCount else {
            throw .invalidArgument(argument: "attachments",
                                   reason: "\(attachments.count) is more than \(MessageAttachment.maxCount)")
        }
        guard replyPort.reference.takeOnce() else { throw .invalidName }
        let items = Self.cAttachments(attachments)
        let status = withExtendedLifetime(attachments) {
            pl_port_send_moving_once(port, id, payload.baseAddress, payload.count, replyPort.port, items,
                                     UInt32(items.count), nanoseconds)
        }
        replyPort.reference.endOnce(gone: status == PL_OK || status == PL_ERR_INVALID_DEST)
        if status == PL_ERR_INVALID_ARG {
            throw .invalidArgument(argument: "replyPort", reason: "a right to a port of a third process")
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
    public var description: String {
        "PortSendRight(\(name)\(isSendOnce ? ", send-once" : "")\(isDeadName ? ", dead" : ""))"
    }
}
