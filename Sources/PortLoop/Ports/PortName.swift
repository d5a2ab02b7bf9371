import CPortLoop

/// A port's name: unique for the life of the process and never reused (a Mach port name, without the
/// per-task namespace). Messages received on a ``PortSet`` name the port they arrived on.
public struct PortName: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The number, never 0 (`mach_port_name_t`).
    public let rawValue: UInt64
    /// A name from its number; naming a port does not give a right to it.
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    /// `port#` and the number, as the run loop's description shows ports.
    public var description: String { "port#\(rawValue)" }
}
