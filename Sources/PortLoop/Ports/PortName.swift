import CPortLoop

/// A port's name: unique for the life of the process and never reused (a Mach port name, without the
/// per-task namespace). Messages received on a ``PortSet`` name the port they arrived on.
public struct PortName: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public var description: String { "port#\(rawValue)" }
}
