import CPortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Who sent a message: what Mach's audit trailer (`audit_token_t`, `MACH_RCV_TRAILER_AUDIT`) tells a receiver.
///
/// A message sent by a thread of this process says so (``isCurrentProcess``). A message that came from another
/// process carries the credentials that process had when it connected (`SO_PEERCRED`), and, where the kernel
/// gives one (`SO_PEERPIDFD`), an identifier that names that process alone for as long as the system runs: a
/// pid can be reused once its process is gone, ``uniqueProcessID`` cannot.
public struct SenderIdentity: Hashable, Sendable, CustomStringConvertible {
    // For this process the ids are read when asked for: a receive must not cost three system calls.
    private let pid: Int32
    private let uid: UInt32
    private let gid: UInt32

    /// The sending process's id (`audit_token_to_pid`).
    public var processID: Int32 { isCurrentProcess ? getpid() : pid }
    /// Its effective user id (`audit_token_to_euid`).
    public var userID: UInt32 { isCurrentProcess ? geteuid() : uid }
    /// Its effective group id (`audit_token_to_egid`).
    public var groupID: UInt32 { isCurrentProcess ? getegid() : gid }
    /// The inode number of the sender's pidfd (`audit_token_to_pidversion` plays this part on Darwin): unique
    /// among all processes since boot. 0 when the kernel cannot tell, and for this process.
    public let uniqueProcessID: UInt64
    /// Whether a thread of this process sent the message.
    public let isCurrentProcess: Bool

    /// This process, as the sender of its own messages.
    public static let currentProcess = SenderIdentity(pid: 0, uid: 0, gid: 0, uniqueProcessID: 0, isCurrentProcess: true)

    private init(pid: Int32, uid: UInt32, gid: UInt32, uniqueProcessID: UInt64, isCurrentProcess: Bool) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.uniqueProcessID = uniqueProcessID
        self.isCurrentProcess = isCurrentProcess
    }

    /// The unique id of the live process `pid`, as ``uniqueProcessID`` reports it for a sender (the inode of a
    /// pidfd opened for it, `pidfd_open`); nil when no such process lives or the kernel cannot tell. A service that
    /// knows a client by pid compares the two to be sure it is still the same process.
    public static func uniqueProcessID(of pid: Int32) -> UInt64? {
        let id = pl_process_unique_id(pid)
        return id == 0 ? nil : id
    }

    /// The C layer's sender: pid 0 stands for this process.
    init(_ sender: pl_sender_t) {
        if sender.pid == 0 {
            self = .currentProcess
        } else {
            self.init(pid: sender.pid, uid: sender.uid, gid: sender.gid, uniqueProcessID: sender.process_id,
                      isCurrentProcess: false)
        }
    }

    public var description: String {
        isCurrentProcess ? "this process (pid \(processID))"
            : "pid \(processID) uid \(userID) gid \(groupID)" + (uniqueProcessID != 0 ? " #\(uniqueProcessID)" : "")
    }
}
