import CPortLoop

/// Payload memory that moves with a message instead of being copied: Mach's out-of-line memory
/// (`mach_msg_ool_descriptor_t` sent with `deallocate`, the memory `vm_allocate` gives and `vm_deallocate`
/// frees).
///
/// A buffer has one owner (`~Copyable`), so handing it over is a move. Sent with
/// ``PortSendRight/send(id:buffer:replyPort:timeout:)`` to a port of this process, the very same memory reaches
/// the receiver of ``PortReceiveRight/receiveBuffer(timeout:)``: no copy at either end. To another process the
/// payload crosses as a sealed memfd from ``PortNamespace/outOfLineThreshold`` up, and the receiver's buffer is
/// a read-only mapping of it (``isMapped``); the copy into the memfd is the only one. The memory is freed, or
/// unmapped, when the buffer goes.
///
/// ```swift
/// let port = try PortReceiveRight(maxMessageSize: 1 << 20)
/// let other = try PortReceiveRight(maxMessageSize: 1 << 20).makeSendRight()
/// let buffer = try MessageBuffer(count: 1 << 20) { bytes in bytes.initializeMemory(as: UInt8.self, repeating: 7) }
/// try port.makeSendRight().send(id: 1, buffer: buffer)   // the buffer moves into the queue
/// let received = try port.receiveBuffer(timeout: .after(.seconds(1)))
/// print(received.header.id, received.buffer.count)       // the sender's memory, not a copy
/// try other.send(id: 2, buffer: received.takeBuffer())   // and on it goes, still not copied
/// ```
public struct MessageBuffer: ~Copyable, @unchecked Sendable {
    // Sendable: the memory is reachable only through this one owner, and never written once filled.
    var raw: pl_payload_t

    /// Adopts payload memory the C layer handed over.
    init(adopting raw: pl_payload_t) { self.raw = raw }

    /// Allocates `count` bytes and lets `initialize` fill them, every byte (`vm_allocate`).
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for a negative count or one over
    ///   ``PortReceiveRight/maxMessageSizeLimit``, ``PortError/outOfMemory``.
    public init(count: Int, initializingWith initialize: (UnsafeMutableRawBufferPointer) -> Void) throws(PortError) {
        guard (0...PortReceiveRight.maxMessageSizeLimit).contains(count) else {
            throw .invalidArgument(argument: "count",
                                   reason: "\(count) is outside 0…\(PortReceiveRight.maxMessageSizeLimit)")
        }
        var raw = pl_payload_t()
        try PortError.check(pl_payload_allocate(count, &raw), operation: "allocate")
        initialize(UnsafeMutableRawBufferPointer(start: raw.base, count: count))
        self.raw = raw
    }

    /// Allocates a buffer holding a copy of `bytes`.
    /// - Throws: as ``init(count:initializingWith:)``.
    public init(copying bytes: UnsafeRawBufferPointer) throws(PortError) {
        try self.init(count: bytes.count) { buffer in
            if bytes.count > 0 { buffer.copyMemory(from: bytes) }
        }
    }

    /// Allocates a buffer holding a copy of `bytes`.
    /// - Throws: as ``init(count:initializingWith:)``.
    public init(copying bytes: [UInt8]) throws(PortError) {
        try self.init(count: bytes.count) { buffer in
            bytes.withUnsafeBytes { if $0.count > 0 { buffer.copyMemory(from: $0) } }
        }
    }

    deinit {
        var raw = self.raw
        pl_payload_free(&raw)
    }

    /// The payload's size in bytes.
    public var count: Int { raw.size }

    /// Whether the memory is a read-only mapping of another process's sealed memfd (a payload that came out of
    /// line) rather than memory of this process's heap.
    public var isMapped: Bool { raw.mapped != 0 }

    /// Calls `body` with the payload's bytes, valid only during the call.
    public func withUnsafeBytes<Result, Failure: Error>(
        _ body: (UnsafeRawBufferPointer) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try body(UnsafeRawBufferPointer(start: raw.base, count: raw.size))
    }

    /// A copy of the payload as an array.
    public var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Gives the memory up to the C layer, which frees it from now on.
    consuming func take() -> pl_payload_t {
        let raw = self.raw
        discard self
        return raw
    }
}

/// A message received with its payload memory handed over rather than copied (``PortReceiveRight/receiveBuffer(timeout:)``).
public struct ReceivedBuffer: ~Copyable, Sendable {
    /// The message's id, size, reply right, arrival port, sender and attachments.
    public let header: ReceivedMessageHeader
    /// Its payload: the sender's memory when it was sent with ``PortSendRight/send(id:buffer:replyPort:timeout:)``
    /// in this process, a mapping of the sender's sealed memfd when it came out of line from another one.
    public var buffer: MessageBuffer

    /// Takes the payload out to keep or send on; the header goes with the rest of the message.
    public consuming func takeBuffer() -> MessageBuffer { buffer }
}
