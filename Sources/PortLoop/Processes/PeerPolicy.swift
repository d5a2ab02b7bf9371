import CPortLoop

/// Which processes may connect to a service, judged by the credentials the kernel reports for the connecting
/// process (`SO_PEERCRED`) before it gets any right: systemd's varlink servers check the same way.
///
/// The default admits the service's own user and root. The namespace directory (mode 0700) is the first fence;
/// a policy that admits other users only helps a service whose socket they can reach, such as one started by
/// systemd socket activation.
public struct PeerPolicy: Sendable, Hashable {
    /// Admits processes of the service's own effective user.
    public var allowsSameUser: Bool
    /// Admits root.
    public var allowsRoot: Bool
    /// Admits every process that can reach the socket.
    public var allowsAnyone: Bool
    /// Further users admitted, by effective uid (at most 16).
    public var userIDs: [UInt32]
    /// Further groups admitted, by the peer's effective gid (at most 16).
    public var groupIDs: [UInt32]

    /// A policy from its parts.
    public init(allowsSameUser: Bool = true, allowsRoot: Bool = true, allowsAnyone: Bool = false,
                userIDs: [UInt32] = [], groupIDs: [UInt32] = []) {
        self.allowsSameUser = allowsSameUser
        self.allowsRoot = allowsRoot
        self.allowsAnyone = allowsAnyone
        self.userIDs = userIDs
        self.groupIDs = groupIDs
    }

    /// The service's own user and root: the default.
    public static let sameUser = PeerPolicy()
    /// Any process that can reach the socket.
    public static let anyone = PeerPolicy(allowsAnyone: true)

    /// Whether a process with these credentials is admitted.
    public func admits(userID: UInt32, groupID: UInt32) -> Bool {
        guard var c = try? cPolicy() else { return false }
        return pl_policy_admits(&c, userID, groupID) != 0
    }

    func cPolicy() throws(PortError) -> pl_policy_t {
        guard userIDs.count <= 16, groupIDs.count <= 16 else {
            throw .invalidArgument(argument: "policy", reason: "at most 16 user ids and 16 group ids")
        }
        var c = pl_policy_t()
        c.allow_same_user = allowsSameUser ? 1 : 0
        c.allow_root = allowsRoot ? 1 : 0
        c.allow_anyone = allowsAnyone ? 1 : 0
        withUnsafeMutableBytes(of: &c.uids) { raw in
            for (index, uid) in userIDs.enumerated() { raw.storeBytes(of: uid, toByteOffset: index * 4, as: UInt32.self) }
        }
        withUnsafeMutableBytes(of: &c.gids) { raw in
            for (index, gid) in groupIDs.enumerated() { raw.storeBytes(of: gid, toByteOffset: index * 4, as: UInt32.self) }
        }
        c.uid_count = UInt32(userIDs.count)
        c.gid_count = UInt32(groupIDs.count)
        return c
    }
}
