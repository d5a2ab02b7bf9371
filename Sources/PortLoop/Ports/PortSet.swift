import CPortLoop

/// What a receive on a ``PortSet`` returned.
public enum PortSetEvent: Sendable {
    /// A message from one of the member ports; ``ReceivedMessage/arrivalPort`` names which.
    case message(ReceivedMessage)
    /// A descriptor member became readable. It stays reported while it is readable.
    case readable(fileDescriptor: Int32)
}

/// What a receive into a caller's buffer on a ``PortSet`` returned.
public enum PortSetBufferEvent: Sendable {
    /// A message whose payload is in the buffer; ``ReceivedMessageHeader/arrivalPort`` names its port.
    case message(ReceivedMessageHeader)
    /// A descriptor member became readable.
    case readable(fileDescriptor: Int32)
}

/// A set of ports and file descriptors waited on together (a Mach port set,
/// `mach_port_allocate` with `MACH_PORT_RIGHT_PORT_SET`).
///
/// A receive returns one message from any member, serving ready ports round-robin so that a flooded port
/// cannot starve the others, or reports a readable descriptor. A port may be in several sets. Several
/// threads may receive on one set; each message goes to exactly one of them. The set is a shared
/// reference: destroy it explicitly with ``destroy()``, or let the last reference go.
public final class PortSet: @unchecked Sendable {
    let set: OpaquePointer

    /// Creates an empty set (`mach_port_allocate` with `MACH_PORT_RIGHT_PORT_SET`).
    public init() throws(PortError) {
        var raw: OpaquePointer?
        try PortError.check(pl_port_set_create(&raw), operation: "PortSet.init")
        set = raw!
    }

    deinit { pl_port_set_release(set) }

    /// Destroys the set (`mach_port_destroy` on a port-set name): its members leave it, blocked receivers
    /// wake with ``PortError/portDied``, later calls throw ``PortError/invalidName``.
    public func destroy() throws(PortError) {
        try PortError.check(pl_port_set_destroy(set), operation: "destroy")
    }

    /// Adds a port (`mach_port_insert_member`).
    /// - Throws: ``PortError/alreadyInSet``, ``PortError/invalidName`` (set destroyed).
    public func insert(_ port: borrowing PortReceiveRight) throws(PortError) {
        try PortError.check(pl_port_set_insert(set, port.port), operation: "insert")
    }

    /// Removes a port (`mach_port_extract_member`).
    /// - Throws: ``PortError/notInSet``, ``PortError/invalidName`` (set destroyed).
    public func remove(_ port: borrowing PortReceiveRight) throws(PortError) {
        try PortError.check(pl_port_set_extract(set, port.port), operation: "remove")
    }

    /// Whether the port is a member.
    public func contains(_ port: borrowing PortReceiveRight) -> Bool {
        pl_port_set_contains(set, port.port) != 0
    }

    /// Watches a file descriptor for readability; a receive reports it while it is readable. The set
    /// neither owns nor closes it.
    /// - Throws: ``PortError/alreadyInSet``, ``PortError/invalidArgument(argument:reason:)`` for a closed
    ///   descriptor or one epoll cannot watch (a regular file), ``PortError/invalidName``.
    public func insert(fileDescriptor: Int32) throws(PortError) {
        let status = pl_port_set_insert_fd(set, fileDescriptor)
        if status == PL_ERR_INVALID_ARG {
            throw .invalidArgument(argument: "fileDescriptor",
                                   reason: "\(fileDescriptor) is not an open descriptor that epoll can watch")
        }
        try PortError.check(status, operation: "insert(fileDescriptor:)")
    }

    /// Stops watching a descriptor. Once this returns, the set no longer touches it and it may be closed.
    /// - Throws: ``PortError/notInSet``, ``PortError/invalidName``.
    public func remove(fileDescriptor: Int32) throws(PortError) {
        try PortError.check(pl_port_set_extract_fd(set, fileDescriptor), operation: "remove(fileDescriptor:)")
    }

    /// Number of member ports and descriptors.
    public var memberCount: Int { Int(pl_port_set_member_count(set)) }

    /// Receives one message from any member, or a readable descriptor (`mach_msg` with `MACH_RCV_MSG` on
    /// a port-set name).
    /// - Parameters:
    ///   - timeout: `.poll`, a duration, or `.forever`.
    ///   - maxSize: the largest payload to accept; a larger message stays queued and the call throws
    ///     ``PortError/tooLarge(size:limit:)``.
    /// - Throws: ``PortError/timedOut``, ``PortError/tooLarge(size:limit:)``, ``PortError/portDied`` (set
    ///   destroyed while waiting), ``PortError/invalidName`` (set destroyed before).
    public func receive(timeout: PortTimeout = .forever, maxSize: Int = .max) throws(PortError) -> PortSetEvent {
        let set = self.set
        let (header, payload) = try receiveIntoArray(timeout: timeout, maxSize: maxSize) { out, buffer, capacity, ns in
            pl_port_set_receive(set, out, buffer, capacity, ns)
        }
        if header.kind == PL_RECEIVED_FD { return .readable(fileDescriptor: header.fd) }
        return .message(ReceivedMessage.adopting(header, payload: payload))
    }

    /// What the ``PortMessages`` waiting thread needs beyond a receive: a member port that no sender can reach
    /// any more (a request's reply port whose replier let go of it, or died), reported once.
    enum ReceiveResult {
        case event(PortSetEvent)
        case senderless(PortName)
    }

    /// ``receive(timeout:maxSize:)``, reporting a senderless member instead of throwing ``PortError/noReply``.
    func receiveNotingSenderless(timeout: PortTimeout) throws(PortError) -> ReceiveResult {
        let set = self.set
        var senderless: UInt64 = 0
        do throws(PortError) {
            let (header, payload) = try receiveIntoArray(timeout: timeout, maxSize: .max) { out, buffer, capacity, ns in
                let status = pl_port_set_receive(set, out, buffer, capacity, ns)
                if status == PL_ERR_NO_SENDERS { senderless = out.pointee.arrival_name }
                return status
            }
            if header.kind == PL_RECEIVED_FD { return .event(.readable(fileDescriptor: header.fd)) }
            return .event(.message(ReceivedMessage.adopting(header, payload: payload)))
        } catch .noReply {
            return .senderless(PortName(rawValue: senderless))
        }
    }

    /// Receives into `buffer` without allocating (`mach_msg` with `MACH_RCV_LARGE` on a port-set name).
    /// A message larger than the buffer stays queued and the call throws ``PortError/tooLarge(size:limit:)``.
    public func receive(into buffer: UnsafeMutableRawBufferPointer,
                        timeout: PortTimeout = .forever) throws(PortError) -> PortSetBufferEvent {
        var header = pl_received_t()
        let status = pl_port_set_receive(set, &header, buffer.baseAddress, buffer.count, try timeout.nanoseconds())
        try PortError.check(status, operation: "receive", size: Int(header.size), limit: buffer.count)
        if header.kind == PL_RECEIVED_FD { return .readable(fileDescriptor: header.fd) }
        return .message(ReceivedMessageHeader.adopting(header))
    }

    /// How often receivers went to sleep on this set, and how many wake-ups senders had to write, since it
    /// was created. Sends to a receiver that is awake cost no wake-up; this shows the coalescing.
    public var wakeStatistics: (sleeps: UInt64, wakeUps: UInt64) {
        var sleeps: UInt64 = 0, wakes: UInt64 = 0
        pl_port_set_wake_stats(set, &sleeps, &wakes)
        return (sleeps, wakes)
    }
}
