import CPortLoop

/// What went wrong in a port operation. Each case names the Mach return code it stands for.
///
/// Bad input never crashes and never loses a queued message: the call throws one of these and leaves
/// the port as it was.
public enum PortError: Error, Hashable, Sendable {
    /// The timeout ran out (`MACH_SEND_TIMED_OUT`, `MACH_RCV_TIMED_OUT`).
    case timedOut
    /// The destination port was destroyed: the send right is a dead name (`MACH_SEND_INVALID_DEST`).
    case invalidDestination
    /// The port or set was destroyed while this thread waited on it (`MACH_RCV_PORT_DIED`).
    case portDied
    /// A payload of `size` bytes does not fit the `limit` (`MACH_SEND_TOO_LARGE`, `MACH_RCV_TOO_LARGE`).
    /// On receive the message stays queued.
    case tooLarge(size: Int, limit: Int)
    /// An argument is out of range (`KERN_INVALID_ARGUMENT`): which one, and why.
    case invalidArgument(argument: String, reason: String)
    /// The port or descriptor is a member of the set already (`KERN_ALREADY_IN_SET`).
    case alreadyInSet
    /// The port or descriptor is not a member of the set (`KERN_NOT_IN_SET`).
    case notInSet
    /// The port or set was destroyed before this call (`MACH_RCV_INVALID_NAME`, `KERN_INVALID_NAME`), or the
    /// send-once right was used up already (`MACH_SEND_INVALID_RIGHT`).
    case invalidName
    /// Memory ran out (`KERN_RESOURCE_SHORTAGE`).
    case outOfMemory
    /// An operating-system call failed: which one, and its `errno`. Resources running out end here: descriptors
    /// (`EMFILE`, `ENFILE`) for a ``PortSet`` (each holds three), threads (`EAGAIN` from `pthread_create`). Nothing
    /// was created and nothing leaked; the same call works again once the resource is back.
    case systemCallFailed(call: String, errno: Int32)
    /// The call would wait for a message that only the calling thread can deliver: a
    /// ``PortSendRight/request(id:bytes:timeout:maxReplySize:)-64pzr`` made on the thread whose run loop serves the
    /// destination port. Nothing was sent. (The counterpart of ``RunLoopThreadError/calledOnLoopThread``.)
    case calledOnLoopThread
    /// The replier released the reply right without answering, so no reply can come (MIG's `MIG_SERVER_DIED`,
    /// told by a send-once notification): its handler returned no reply, or it dropped the message.
    case noReply
    /// A live process has checked in this service name (`BOOTSTRAP_SERVICE_ACTIVE`).
    case serviceNameInUse(String)
    /// No live process has checked in this service name (`BOOTSTRAP_UNKNOWN_SERVICE`).
    case unknownService(String)
    /// The service does not admit this process: its policy refused the caller's credentials, or the namespace
    /// directory belongs to another user or is open to others (`BOOTSTRAP_NOT_PRIVILEGED`).
    case refused(String)
    /// A limit was reached (`KERN_NO_SPACE`): rights held on one connection, connections to one service.
    case limitReached(String)

    /// The C layer's status code for this error (`pl_status_t`).
    public var code: Code {
        switch self {
        case .timedOut: return .timedOut
        case .invalidDestination: return .invalidDestination
        case .portDied: return .portDied
        case .tooLarge: return .tooLarge
        case .invalidArgument: return .invalidArgument
        case .alreadyInSet: return .alreadyInSet
        case .notInSet: return .notInSet
        case .invalidName: return .invalidName
        case .outOfMemory: return .outOfMemory
        case .systemCallFailed: return .systemCallFailed
        case .calledOnLoopThread: return .wouldDeadlock
        case .noReply: return .noSenders
        case .serviceNameInUse: return .nameInUse
        case .unknownService: return .unknownService
        case .refused: return .refused
        case .limitReached: return .noSpace
        }
    }

    /// A status code of the C layer (`pl_status_t`), as a raw value with readable names.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The `pl_status_t` value.
        public let rawValue: UInt32
        /// A code from a `pl_status_t` value.
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        init(_ status: pl_status_t) { self.rawValue = status.rawValue }

        /// `PL_ERR_TIMED_OUT`
        public static let timedOut = Code(PL_ERR_TIMED_OUT)
        /// `PL_ERR_INVALID_DEST`
        public static let invalidDestination = Code(PL_ERR_INVALID_DEST)
        /// `PL_ERR_PORT_DIED`
        public static let portDied = Code(PL_ERR_PORT_DIED)
        /// `PL_ERR_TOO_LARGE`
        public static let tooLarge = Code(PL_ERR_TOO_LARGE)
        /// `PL_ERR_INVALID_ARG`
        public static let invalidArgument = Code(PL_ERR_INVALID_ARG)
        /// `PL_ERR_ALREADY_IN_SET`
        public static let alreadyInSet = Code(PL_ERR_ALREADY_IN_SET)
        /// `PL_ERR_NOT_IN_SET`
        public static let notInSet = Code(PL_ERR_NOT_IN_SET)
        /// `PL_ERR_INVALID_NAME`
        public static let invalidName = Code(PL_ERR_INVALID_NAME)
        /// `PL_ERR_NO_MEMORY`
        public static let outOfMemory = Code(PL_ERR_NO_MEMORY)
        /// `PL_ERR_SYSTEM`
        public static let systemCallFailed = Code(PL_ERR_SYSTEM)
        /// `PL_ERR_WOULD_DEADLOCK`
        public static let wouldDeadlock = Code(PL_ERR_WOULD_DEADLOCK)
        /// `PL_ERR_NO_SENDERS`
        public static let noSenders = Code(PL_ERR_NO_SENDERS)
        /// `PL_ERR_NAME_IN_USE`
        public static let nameInUse = Code(PL_ERR_NAME_IN_USE)
        /// `PL_ERR_UNKNOWN_SERVICE`
        public static let unknownService = Code(PL_ERR_UNKNOWN_SERVICE)
        /// `PL_ERR_REFUSED`
        public static let refused = Code(PL_ERR_REFUSED)
        /// `PL_ERR_NO_SPACE`
        public static let noSpace = Code(PL_ERR_NO_SPACE)

        /// The C layer's description (`pl_status_describe`).
        public var description: String { String(cString: pl_status_describe(pl_status_t(rawValue: rawValue))) }
    }
}

extension PortError: CustomStringConvertible {
    public var description: String {
        switch self {
        case let .tooLarge(size, limit):
            return "\(code.description): \(size) bytes, limit \(limit)"
        case let .invalidArgument(argument, reason):
            return "\(code.description): \(argument): \(reason)"
        case let .systemCallFailed(call, errno):
            return "\(call) failed: \(errnoDescription(errno)) (errno \(errno))"
        case let .serviceNameInUse(name):
            return "service name in use: \(name) is checked in by a live process"
        case let .unknownService(name):
            return "unknown service: no live process has checked in \(name)"
        case let .refused(why), let .limitReached(why):
            return "\(code.description): \(why)"
        default:
            return code.description
        }
    }
}

extension PortError {
    /// Maps a C status to an error; `nil` for `PL_OK`. `operation` names the call for invalid arguments
    /// the Swift layer did not catch first.
    static func from(_ status: pl_status_t, operation: String, size: Int = 0, limit: Int = 0) -> PortError? {
        switch status {
        case PL_OK: return nil
        case PL_ERR_TIMED_OUT: return .timedOut
        case PL_ERR_INVALID_DEST: return .invalidDestination
        case PL_ERR_PORT_DIED: return .portDied
        case PL_ERR_TOO_LARGE: return .tooLarge(size: size, limit: limit)
        case PL_ERR_ALREADY_IN_SET: return .alreadyInSet
        case PL_ERR_NOT_IN_SET: return .notInSet
        case PL_ERR_INVALID_NAME: return .invalidName
        case PL_ERR_NO_MEMORY: return .outOfMemory
        case PL_ERR_SYSTEM:
            let errno = currentErrno() // before anything else can change it
            let call = pl_last_system_call().map { String(cString: $0) } ?? operation
            return .systemCallFailed(call: call, errno: errno)
        case PL_ERR_WOULD_DEADLOCK: return .calledOnLoopThread
        case PL_ERR_NO_SENDERS: return .noReply
        case PL_ERR_NAME_IN_USE: return .serviceNameInUse(operation)
        case PL_ERR_UNKNOWN_SERVICE: return .unknownService(operation)
        case PL_ERR_REFUSED: return .refused(operation)
        case PL_ERR_NO_SPACE: return .limitReached(operation)
        default: return .invalidArgument(argument: operation, reason: "rejected by the port layer")
        }
    }

    /// Throws the error for a C status, if any.
    /// The limit is read only for ``tooLarge(size:limit:)``: a successful send makes no call for it, and a system
    /// error's errno is read before anything else runs.
    @inline(__always)
    static func check(_ status: pl_status_t, operation: String, size: Int = 0,
                      limit: @autoclosure () -> Int = 0) throws(PortError) {
        guard status != PL_OK else { return }
        let limit = status == PL_ERR_TOO_LARGE ? limit() : 0
        if let error = from(status, operation: operation, size: size, limit: limit) { throw error }
    }
}

