import CPortLoop

/// Named services that other processes reach: launchd's bootstrap namespace, on one host and per user.
///
/// A process checks in a name and keeps the receive right of the service's port; any process of the same user
/// looks the name up and gets a send right to it, which works exactly as a local one: the same sends, timeouts,
/// queue limits, replies and errors, with rights and descriptors carried in messages. Put the receive right in a
/// ``RunLoopPortSource`` and the loop wakes for other processes' messages as for its own threads'.
///
/// ```swift
/// // the service
/// let namespace = try PortNamespace.standard
/// let source = RunLoopPortSource(port: try namespace.checkIn("com.example.echo")) { message in
///     PortReply(id: message.id, bytes: message.payload)
/// }
/// // a client, in another process
/// let echo = try PortNamespace.standard.lookUp("com.example.echo")
/// let reply = try echo.request(id: 1, bytes: Array("hi".utf8), timeout: .seconds(1))
/// ```
///
/// The namespace is a directory only its user may enter (mode 0700): ``standard`` is `$PORTLOOP_NAMESPACE` when
/// set, else `$XDG_RUNTIME_DIR/portloop`, else `/tmp/portloop-<uid>`. Tests use a directory of their own.
public struct PortNamespace: Sendable, Hashable, CustomStringConvertible {
    /// The directory that holds the services' sockets.
    public let path: String

    /// A namespace in `path`, an absolute directory path of at most 80 bytes, made (0700) at the first check-in.
    public init(path: String) {
        self.path = path
    }

    /// The payload size from which a message to another process travels out of line: written once into a
    /// sealed memfd that the receiver maps, rather than copied through the socket in 64 KiB frames (Mach's
    /// out-of-line memory, which MIG uses for large arrays). Process-wide; at least 4 KiB; `Int.max` (or any
    /// value from 4 GiB), the default, sends everything in frames: in the `large-payloads` benchmark a fresh memfd per message was slower than
    /// frames at every size from 64 KiB to 16 MiB. Set it where a large payload should not hold up the
    /// connection's other messages while its frames go, or where the receiver keeps the mapping
    /// (``PortReceiveRight/receiveBuffer(timeout:)``). Processes of an earlier PortLoop always get frames.
    public static var outOfLineThreshold: Int {
        get { pl_out_of_line_threshold() == UInt32.max ? Int.max : Int(pl_out_of_line_threshold()) }
        set { pl_set_out_of_line_threshold(UInt32(clamping: newValue)) }
    }

    /// Whether a thread that streams messages to other processes has them held a moment and packed, many to a
    /// packet. Process-wide; `false` by default.
    ///
    /// When `true`, a sender that sends back to back (eight messages in a row, each within 2 µs of the last)
    /// has its messages wait in the connection's outgoing queue until a 64 KiB packet fills or the transport
    /// thread finds the socket writable, microseconds later: a system call per packet rather than per message,
    /// which multiplies one-way throughput through the socket (see the benchmarks). A connection that has moved to
    /// a shared-memory ring (``sharedRings``) holds nothing back: a ring needs no system call per message, and
    /// streams faster than a packed socket. A message sent after a pause goes at once, so round trips do not
    /// change. The cost is Mach's guarantee that a message whose `send` returned is
    /// delivered even if the sender then dies: a process killed with SIGKILL, or ending through `_exit` or a
    /// crash, loses what it held. `exit()` sends it first. Leave it off where that matters, or make the last
    /// message of a stream a `request`.
    ///
    /// C: `pl_set_stream_packing` (no Mach counterpart: `mach_msg` always hands the message to the kernel).
    public static var packsStreams: Bool {
        get { pl_stream_packing() != 0 }
        set { pl_set_stream_packing(newValue ? 1 : 0) }
    }

    /// The user's namespace: `$PORTLOOP_NAMESPACE`, else `$XDG_RUNTIME_DIR/portloop`, else `/tmp/portloop-<uid>`.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` when that path is relative or too long.
    public static var standard: PortNamespace {
        get throws(PortError) {
            var buffer = [CChar](repeating: 0, count: 256)
            guard pl_namespace_default(&buffer, buffer.count) == PL_OK else {
                throw .invalidArgument(argument: "PORTLOOP_NAMESPACE",
                                       reason: "the namespace path must be absolute and at most \(PL_NAMESPACE_PATH_MAX) bytes")
            }
            let length = buffer.firstIndex(of: 0) ?? buffer.count
            return PortNamespace(path: String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }

    /// The longest service name, in bytes.
    public static let maxNameLength = Int(PL_SERVICE_NAME_MAX)

    /// Checks a service name: 1 to 64 bytes of letters, digits, `.`, `_` and `-`, not starting with `.`.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` naming the rule the name breaks.
    public static func validate(name: String) throws(PortError) {
        var reason: UnsafePointer<CChar>?
        guard pl_service_name_check(name, &reason) == PL_OK else {
            throw .invalidArgument(argument: "name", reason: "\"\(name)\": " + (reason.map { String(cString: $0) } ?? "invalid"))
        }
    }

    /// Checks in `name` and returns the receive right of its new port (`bootstrap_check_in`). The service lives
    /// as long as the port: destroying the receive right withdraws the name, and every process's right to it
    /// becomes a dead name. The name goes at once, its lock a moment later on the transport thread; a check-in of
    /// the same name from this process waits for that (up to 2 seconds), and, in the first 50 ms after a `fork()`,
    /// for the child to let go of its copy of the lock, rather than finding the name in use. When the process was
    /// started by systemd socket activation with a socket named `name`, that socket is adopted.
    ///
    /// - Parameters:
    ///   - name: the service's name (see ``validate(name:)``).
    ///   - queueLimit: the port's queue limit, shared by local and remote senders.
    ///   - maxMessageSize: the largest payload a sender may send.
    ///   - policy: who may connect (the same user and root by default).
    /// - Throws: ``PortError/serviceNameInUse(_:)`` when a live process holds the name (a name left by a dead
    ///   one is taken over), ``PortError/refused(_:)`` when the directory is another user's or open to others,
    ///   ``PortError/invalidArgument(argument:reason:)`` for a bad name, limit or policy,
    ///   ``PortError/systemCallFailed(call:errno:)`` when a system call failed (descriptors used up, say).
    public func checkIn(_ name: String, queueLimit: Int = 64,
                        maxMessageSize: Int = PortReceiveRight.defaultMaxMessageSize,
                        policy: PeerPolicy = .sameUser) throws(PortError) -> PortReceiveRight {
        try Self.validate(name: name)
        var cPolicy = try policy.cPolicy()
        let port = try PortReceiveRight(queueLimit: queueLimit, maxMessageSize: maxMessageSize)
        let status = pl_service_check_in(path, name, port.port, &cPolicy)
        switch status {
        case PL_OK: return port
        case PL_ERR_NAME_IN_USE: throw .serviceNameInUse(name)
        case PL_ERR_REFUSED:
            throw .refused("the namespace directory \(path) must be a directory of this user with mode 0700")
        case PL_ERR_INVALID_ARG:
            throw .invalidArgument(argument: "path", reason: "\(path) is not an absolute path of at most \(PL_NAMESPACE_PATH_MAX) bytes, or systemd passed a socket that is not a listening SOCK_SEQPACKET socket")
        default:
            try PortError.check(status, operation: "checkIn(\(name))")
            return port
        }
    }

    /// Looks `name` up and returns a send right to the service's port (`bootstrap_look_up`). Looking up a live
    /// service again from the same process shares its connection (and gives an equal right).
    ///
    /// - Parameters:
    ///   - name: the service's name.
    ///   - timeout: how long to wait for the service to answer the connection.
    /// - Throws: ``PortError/unknownService(_:)`` when no live process has checked the name in,
    ///   ``PortError/refused(_:)`` when the service's policy does not admit this process (or the directory is
    ///   not this user's alone), ``PortError/limitReached(_:)`` when the service has its most connections,
    ///   ``PortError/timedOut``, ``PortError/invalidArgument(argument:reason:)``,
    ///   ``PortError/systemCallFailed(call:errno:)``.
    public func lookUp(_ name: String, timeout: PortTimeout = .seconds(10)) throws(PortError) -> PortSendRight {
        try Self.validate(name: name)
        var raw: OpaquePointer?
        let status = pl_service_look_up(path, name, try timeout.nanoseconds(), &raw)
        switch status {
        case PL_OK: return PortSendRight(adopting: raw!)
        case PL_ERR_UNKNOWN_SERVICE: throw .unknownService(name)
        case PL_ERR_REFUSED: throw .refused("\(name) does not admit this process, or \(path) is not this user's alone")
        case PL_ERR_NO_SPACE: throw .limitReached("\(name) has as many connections as it takes")
        case PL_ERR_INVALID_ARG:
            throw .invalidArgument(argument: "path", reason: "\(path)/\(name) is too long for a socket address")
        default:
            try PortError.check(status, operation: "lookUp(\(name))")
            throw .invalidArgument(argument: "name", reason: "unexpected status \(status.rawValue)")
        }
    }

    public var description: String { "PortNamespace(\(path))" }
}

/// What this process's connections to other processes hold now: for leak checks and diagnostics.
public struct CrossProcessStatistics: Sendable, Hashable {
    /// Live connections, services' and clients'.
    public let connections: Int
    /// Handles given out: ports of this process that other processes hold rights to (per connection).
    public let exportedRights: Int
    /// Handles held: rights to ports of other processes (per connection).
    public let importedRights: Int
    /// Messages and control frames this process has received packed behind another frame in one packet, since
    /// it started. A sender that streams (sends back to back) packs what it sends into few large packets, a
    /// system call per packet rather than per message; this counts what arrived that way.
    public let packedFramesReceived: Int
    /// How many times, since it started, this process's transport thread left a stream to the run loops it
    /// feeds instead of reading it as well: while a loop keeps up with a connection, the loop alone reads it
    /// (one thread woken per packet, not two); what the loop leaves, the transport reads within milliseconds.
    public let transportRests: Int
    /// Connections whose peer's messages come through a shared-memory ring (see ``SharedRingPolicy``).
    public let sharedRingConnections: Int
    /// How many times, since it started, this process woke the other side of a shared-memory ring, a system call
    /// each: a reader that had stopped looking, or a writer waiting for room. A reader still at work costs its
    /// writers none, nor does a loop polling in the low-latency mode (``PortRunLoop/spinBeforeSleeping``).
    public let sharedRingWakeUps: Int
    /// How many times, since it started, a sender in this process had no room lent for a port of another
    /// process and asked the port's owner for some (a WANT frame; the send then waits for the answer within its
    /// timeout). Room freed at the receiver goes back with its next message to this process, or, for a port whose
    /// queue limit is 16 or more, as soon as a quarter of this process's share is owed; and a sender out of room
    /// reads the connection before it asks. So a sender streaming one way asks only when it gets ahead of its
    /// receiver by its whole share.
    public let creditRequests: Int

    /// The counts now.
    public static var current: CrossProcessStatistics {
        var connections: UInt32 = 0, exports: UInt32 = 0, imports: UInt32 = 0
        pl_remote_stats(&connections, &exports, &imports)
        return CrossProcessStatistics(connections: Int(connections), exportedRights: Int(exports),
                                      importedRights: Int(imports), packedFramesReceived: Int(pl_remote_packed_frames()),
                                      transportRests: Int(pl_remote_transport_rests()),
                                      sharedRingConnections: Int(pl_remote_ring_count()),
                                      sharedRingWakeUps: Int(pl_remote_ring_bells()),
                                      creditRequests: Int(pl_remote_credit_requests()))
    }
}
