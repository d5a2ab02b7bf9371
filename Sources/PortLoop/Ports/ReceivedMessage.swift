import CPortLoop

/// A received message (`mach_msg_header_t`, its body and the receive trailer).
public struct ReceivedMessage: Sendable {
    /// The sender's uninterpreted id (`msgh_id`).
    public var id: Int32
    /// The payload bytes.
    public var payload: [UInt8]
    /// A right to answer on, if the sender gave one (`msgh_remote_port` on receipt): for a request, a send-once
    /// right (``PortSendRight/isSendOnce``), used up by the answer; dropped unanswered, the requester is told.
    public var replyPort: PortSendRight?
    /// The port the message arrived on; useful when receiving on a ``PortSet``.
    public var arrivalPort: PortName
    /// Who sent it (Mach's audit trailer): this process, or the process at the other end of the connection it
    /// came over.
    public var sender: SenderIdentity
    /// The rights and descriptors it carried (a complex Mach message's port and out-of-line descriptors), in
    /// the order the sender gave them. They belong to the receiver: a descriptor left in a dropped message is
    /// closed, a right released.
    public var attachments: [MessageAttachment]
    /// Whether PortLoop itself posted this message as a notification (see ``PortNotification``), as Mach's
    /// kernel does. No sender can set it, so a notification cannot be forged by sending its message id.
    public internal(set) var isNotification: Bool
}

extension ReceivedMessage {
    /// Creates a message value, as a test or a custom sink might; receives make these.
    public init(id: Int32, payload: [UInt8], replyPort: PortSendRight?, arrivalPort: PortName,
                sender: SenderIdentity = .currentProcess, attachments: [MessageAttachment] = []) {
        self.id = id
        self.payload = payload
        self.replyPort = replyPort
        self.arrivalPort = arrivalPort
        self.sender = sender
        self.attachments = attachments
        isNotification = false
    }

    /// Takes over what a received C header owns (its reply right and attachments). Made by the memberwise
    /// initializer, in one expression: an initializer of the type's own (which is why the public one is in an
    /// extension), or a field changed after the making, had the optimizer make the message twice (a copy, then the
    /// first destroyed), every reference retained and released once more per message.
    static func adopting(_ header: pl_received_t, payload: [UInt8]) -> ReceivedMessage {
        ReceivedMessage(id: header.id, payload: payload, replyPort: header.adoptReplyPort(),
                        arrivalPort: PortName(rawValue: header.arrival_name), sender: SenderIdentity(header.sender),
                        attachments: header.adoptAttachments(),
                        isNotification: header.flags & PL_RECEIVED_NOTIFICATION != 0)
    }
}

/// The header of a message received into a caller's buffer, without copying the payload into an array.
public struct ReceivedMessageHeader: Sendable {
    /// The sender's uninterpreted id (`msgh_id`).
    public var id: Int32
    /// How many payload bytes were written to the buffer.
    public var size: Int
    /// A send right to answer on, if the sender gave one.
    public var replyPort: PortSendRight?
    /// The port the message arrived on.
    public var arrivalPort: PortName
    /// Who sent it.
    public var sender: SenderIdentity
    /// The rights and descriptors it carried.
    public var attachments: [MessageAttachment]
}

extension ReceivedMessageHeader {
    /// Takes over what a received C header owns (its reply right and attachments). Made by the memberwise
    /// initializer, as ``ReceivedMessage`` is, so that it is made once.
    static func adopting(_ header: pl_received_t) -> ReceivedMessageHeader {
        ReceivedMessageHeader(id: header.id, size: Int(header.size), replyPort: header.adoptReplyPort(),
                              arrivalPort: PortName(rawValue: header.arrival_name),
                              sender: SenderIdentity(header.sender), attachments: header.adoptAttachments())
    }
}

extension pl_received_t {
    /// Takes ownership of the reply right carried by a received message: a send-once right for a request.
    func adoptReplyPort() -> PortSendRight? {
        guard let reply else { return nil }
        return flags & PL_RECEIVED_REPLY_ONCE != 0 ? PortSendRight(adoptingSendOnce: reply) : PortSendRight(adopting: reply)
    }

    /// Takes ownership of the rights and descriptors carried by a received message; frees the C list.
    func adoptAttachments() -> [MessageAttachment] {
        guard let list = attachments else { return [] }
        defer { pl_attachments_free(list) } // everything was taken: frees the list only
        return (0..<list.pointee.count).map { index in
            let item = pl_attachments_item(list, index)!
            if item.pointee.kind == PL_ATTACHMENT_FD {
                let descriptor = MessageDescriptor(adopting: item.pointee.fd)
                item.pointee.fd = -1
                return .fileDescriptor(descriptor)
            }
            let right = PortSendRight(adopting: item.pointee.port)
            item.pointee.port = nil
            return .sendRight(right)
        }
    }
}

/// A C receive call: fills the header, copies the payload into the buffer, honours the timeout.
typealias CReceive = (UnsafeMutablePointer<pl_received_t>, UnsafeMutableRawPointer?, Int, Int64) -> pl_status_t

/// Receives one message into an exactly-sized array (one allocation, none for an empty payload).
///
/// The first attempt uses a stack buffer. A larger message is reported by the C layer with the size it
/// needs while it stays queued; the array is then allocated and the receive repeated at once. If another
/// receiver took that message meanwhile, the wait resumes with what is left of the timeout.
func receiveIntoArray(timeout: PortTimeout, maxSize: Int,
                      _ receive: CReceive) throws(PortError) -> (pl_received_t, [UInt8]) {
    guard maxSize >= 0 else {
        throw .invalidArgument(argument: "maxSize", reason: "negative: \(maxSize)")
    }
    let timeoutNanoseconds = try timeout.nanoseconds()
    let deadline = timeoutNanoseconds > 0 ? monotonicNanoseconds().addingClamped(timeoutNanoseconds) : 0
    let stackCapacity = 256

    while true {
        var header = pl_received_t()
        var payload: [UInt8] = []
        var remaining = timeoutNanoseconds
        if timeoutNanoseconds > 0 {
            remaining = max(0, deadline - monotonicNanoseconds())
            if remaining == 0 { remaining = 1 }
        }
        var status = withUnsafeTemporaryAllocation(byteCount: stackCapacity, alignment: 16) { buffer in
            let status = receive(&header, buffer.baseAddress, min(stackCapacity, maxSize), remaining)
            if status == PL_OK && header.kind == PL_RECEIVED_MESSAGE && header.size > 0 {
                payload = Array(UnsafeRawBufferPointer(start: buffer.baseAddress, count: Int(header.size)))
            }
            return status
        }
        while status == PL_ERR_TOO_LARGE {
            let needed = Int(header.size)
            guard needed <= maxSize else { throw .tooLarge(size: needed, limit: maxSize) }
            payload = [UInt8](unsafeUninitializedCapacity: needed) { buffer, count in
                status = receive(&header, buffer.baseAddress, needed, 0)
                count = status == PL_OK ? Int(header.size) : 0
            }
        }
        if status == PL_ERR_TIMED_OUT && timeoutNanoseconds != 0 &&
            (timeoutNanoseconds == PL_TIMEOUT_FOREVER || monotonicNanoseconds() < deadline) {
            continue // the large message went to another receiver; keep waiting
        }
        try PortError.check(status, operation: "receive")
        return (header, payload)
    }
}

