import CPortLoop
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A right or a descriptor that a message carries, as a complex Mach message carries port descriptors
/// (`mach_msg_port_descriptor_t` with `MACH_MSG_TYPE_COPY_SEND`) and Unix sockets carry descriptors
/// (`SCM_RIGHTS`).
///
/// Sending copies: the message gets a new send right to each port and a duplicate of each descriptor, and the
/// sender keeps its own. At most ``maxCount`` per message; all of them arrive, or none (the send throws).
/// Across processes a send right becomes a right to the same port, wherever it lives, and a descriptor the same
/// open file.
public enum MessageAttachment: Sendable {
    /// A send right.
    case sendRight(PortSendRight)
    /// A file descriptor, owned by the attachment.
    case fileDescriptor(MessageDescriptor)

    /// The most attachments one message carries (its reply port not counted).
    public static let maxCount = Int(PL_MAX_ATTACHMENTS)
}

/// A file descriptor owned by a message: closed when the last reference to it goes, unless someone took it.
///
/// ```swift
/// let pipe = ... // a descriptor of yours
/// try server.send(id: 1, attachments: [.fileDescriptor(try MessageDescriptor(duplicating: pipe))])
/// // the receiver:
/// if case .fileDescriptor(let descriptor) = message.attachments.first, let fd = descriptor.take() {
///     // fd is yours now; close it when done
/// }
/// ```
public final class MessageDescriptor: Sendable, CustomStringConvertible {
    private let storage: Atomic<Int32>

    /// Takes ownership of `fileDescriptor`: it is closed when this object goes, unless taken.
    public init(adopting fileDescriptor: Int32) {
        storage = Atomic(fileDescriptor)
    }

    /// Owns a duplicate of `fileDescriptor` (`fcntl` with `F_DUPFD_CLOEXEC`); the caller keeps the original.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for a descriptor that is not open,
    ///   ``PortError/systemCallFailed(call:errno:)`` when no descriptor is left.
    public convenience init(duplicating fileDescriptor: Int32) throws(PortError) {
        let copy = fcntl(fileDescriptor, F_DUPFD_CLOEXEC, 0)
        if copy < 0 {
            let error = currentErrno()
            if error == EBADF {
                throw .invalidArgument(argument: "fileDescriptor", reason: "\(fileDescriptor) is not open")
            }
            throw .systemCallFailed(call: "fcntl(F_DUPFD_CLOEXEC)", errno: error)
        }
        self.init(adopting: copy)
    }

    deinit {
        let fd = storage.load(ordering: .acquiring)
        if fd >= 0 { close(fd) }
    }

    /// The descriptor, still owned by this object; -1 once taken.
    public var rawValue: Int32 { storage.load(ordering: .acquiring) }

    /// Takes the descriptor out: the caller owns it and closes it. `nil` if it was taken already.
    public func take() -> Int32? {
        let fd = storage.exchange(-1, ordering: .acquiringAndReleasing)
        return fd >= 0 ? fd : nil
    }

    public var description: String { "MessageDescriptor(\(rawValue))" }
}
