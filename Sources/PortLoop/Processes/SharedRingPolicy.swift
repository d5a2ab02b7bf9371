import CPortLoop

/// When a connection to another process moves its messages from the socket into shared memory.
///
/// Between two processes of this release, a busy connection's frames go through two rings in a memfd both
/// processes map, one per direction: a message costs its sender a copy into the ring, and a system call only when
/// the receiving side had stopped looking (then a write to its eventfd wakes it), instead of a socket send and a socket receive
/// each. Messages with descriptors still cross the socket, in order with the rest. A connection that has a ring
/// holds 516 KiB of shared memory (2 MiB once it has carried a message of 16 KiB or more, whose fragments then
/// flow through the whole rings) and three more descriptors in each process, so a connection gets one only once it
/// is busy. See *Across processes* for how the switch happens and what it changes.
public enum SharedRingPolicy: Sendable, Hashable, CustomStringConvertible {
    /// Every message goes through the socket; a service that says so declines every offer.
    case never
    /// A connection moves to a ring once it has carried 64 messages or control frames (the default).
    case whenBusy
    /// A connection moves to a ring as soon as it is made.
    case always

    public var description: String {
        switch self {
        case .never: "never"
        case .whenBusy: "whenBusy"
        case .always: "always"
        }
    }
}

extension PortNamespace {
    /// When this process's connections to other processes move their messages into shared-memory rings.
    /// Process-wide, and read as a connection decides (a client, when it is busy), so set it before looking
    /// services up or checking them in. The default is ``SharedRingPolicy/whenBusy``, or what
    /// `$PORTLOOP_SHARED_RINGS` says (`always`, `never`) when the process starts with it set.
    ///
    /// C: `pl_set_shared_rings` (no Mach counterpart: the kernel moves every Mach message).
    public static var sharedRings: SharedRingPolicy {
        get {
            switch pl_shared_rings() {
            case PL_RINGS_NEVER: .never
            case PL_RINGS_ALWAYS: .always
            default: .whenBusy
            }
        }
        set {
            switch newValue {
            case .never: pl_set_shared_rings(PL_RINGS_NEVER)
            case .whenBusy: pl_set_shared_rings(PL_RINGS_WHEN_BUSY)
            case .always: pl_set_shared_rings(PL_RINGS_ALWAYS)
            }
        }
    }
}
