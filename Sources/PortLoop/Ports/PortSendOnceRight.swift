import CPortLoop

/// A send-once right: a right good for exactly one message (Mach's `MACH_PORT_RIGHT_SEND_ONCE`).
///
/// It is `~Copyable`, like the right it stands for: it is used once, with ``send(id:bytes:)``, which consumes it,
/// or dropped. A right that ends without a message — dropped, handed on in a message that was destroyed
/// unreceived, or held by a process that died — posts a ``PortNotification/sendOnce(port:)`` notice to its
/// port (`MACH_NOTIFY_SEND_ONCE`), exactly once. That is how a request learns at once that no reply will come:
/// ``PortSendRight/request(id:bytes:timeout:maxReplySize:)-64pzr`` sends its reply right as a send-once right,
/// and a replier receives it as the request's ``ReceivedMessage/replyPort`` (a ``PortSendRight`` whose
/// ``PortSendRight/isSendOnce`` is true).
///
/// Send-once rights are not send rights: they do not count in ``PortReceiveRight/sendRightCount`` and a
/// no-senders notification does not wait for them.
public struct PortSendOnceRight: ~Copyable, @unchecked Sendable {
    let port: OpaquePointer

    /// Adopts a C send-once right the caller owns.
    init(adopting port: OpaquePointer) { self.port = port }

    /// Releases the right unused (`mach_port_deallocate` of a send-once right): its port gets the send-once
    /// notice.
    deinit { pl_port_release_send_once(port) }

    /// The name of the port this right sends to.
    public var name: PortName { PortName(rawValue: pl_port_name(port)) }

    /// Whether the port's receive right was destroyed, so that the send would fail.
    public var isDeadName: Bool { pl_port_is_alive(port) == 0 }

    /// Sends the one message this right allows and uses the right up (`mach_msg` with
    /// `MACH_MSG_TYPE_MOVE_SEND_ONCE`). It never waits: the message is queued even on a full port, as Mach queues
    /// it, since the right stands for its room.
    ///
    /// The right is gone whatever happens. If the message did not go (too large, memory short), the port gets
    /// the send-once notice instead.
    /// - Throws: ``PortError/tooLarge(size:limit:)``, ``PortError/invalidDestination`` (the port was destroyed),
    ///   ``PortError/outOfMemory``.
    public consuming func send(id: Int32 = 0, bytes: [UInt8] = []) throws(PortError) {
        let port = self.port
        discard self
        // Read while the right keeps the port's memory: once it is used up, the port may be gone.
        let limit = Int(pl_port_get_max_msg_size(port))
        let status = bytes.withUnsafeBytes { raw in pl_port_send_once(port, id, raw.baseAddress, raw.count) }
        // Nothing went and the right is still held: end it, so that the port is told.
        if status == PL_ERR_TOO_LARGE || status == PL_ERR_NO_MEMORY || status == PL_ERR_INVALID_ARG {
            pl_port_release_send_once(port)
        }
        try PortError.check(status, operation: "send", size: bytes.count, limit: limit)
    }

    /// Hands the right over as a ``PortSendRight`` with ``PortSendRight/isSendOnce`` set: the form a message's
    /// reply right takes, to pass as another message's `replyPort` (the right moves into that message).
    public consuming func asSendRight() -> PortSendRight {
        let port = self.port
        discard self
        return PortSendRight(adoptingSendOnce: port)
    }
}

extension PortReceiveRight {
    /// Makes a send-once right to this port (`mach_port_insert_right` with `MACH_MSG_TYPE_MAKE_SEND_ONCE`).
    ///
    /// The right sets a slot of this port's queue aside for what will come of it, the one message sent through
    /// it or the notice of its end, so that neither can be lost for want of memory later.
    /// - Throws: ``PortError/outOfMemory`` when that slot cannot be allocated (`KERN_RESOURCE_SHORTAGE`).
    public func makeSendOnceRight() throws(PortError) -> PortSendOnceRight {
        try PortError.check(pl_port_make_send_once(port), operation: "make a send-once right")
        return PortSendOnceRight(adopting: port)
    }

    /// How many send-once rights to this port this process holds, made and not yet used or ended (held by a
    /// thread or queued in a message). One held by another process counts in the connection's bookkeeping
    /// instead, and ends in a notice here just the same.
    public var sendOnceRightCount: Int { Int(pl_port_send_once_count(port)) }
}
