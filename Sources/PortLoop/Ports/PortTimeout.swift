import CPortLoop

/// How long a send or receive may wait: poll, a duration, or forever
/// (`mach_msg`'s `MACH_SEND_TIMEOUT` / `MACH_RCV_TIMEOUT` with a `timeout` in milliseconds, here exact to
/// the microsecond).
public struct PortTimeout: Hashable, Sendable, CustomStringConvertible {
    enum Storage: Hashable, Sendable {
        case poll
        case forever
        case duration(Duration)
        case seconds(Double)
    }
    let storage: Storage

    /// Do not wait: fail at once with ``PortError/timedOut`` if nothing can be done now.
    public static let poll = PortTimeout(storage: .poll)
    /// Wait as long as it takes (`MACH_MSG_TIMEOUT_NONE`).
    public static let forever = PortTimeout(storage: .forever)
    /// Wait at most `duration`. A negative duration is rejected when used, with
    /// ``PortError/invalidArgument(argument:reason:)``.
    public static func after(_ duration: Duration) -> PortTimeout { PortTimeout(storage: .duration(duration)) }
    /// Wait at most `seconds`, as CF's `CFTimeInterval` timeouts do. Negative and NaN values are rejected
    /// when used; `.infinity` means forever.
    public static func seconds(_ seconds: Double) -> PortTimeout { PortTimeout(storage: .seconds(seconds)) }

    public var description: String {
        switch storage {
        case .poll: return "poll"
        case .forever: return "forever"
        case let .duration(d): return "\(d)"
        case let .seconds(s): return "\(s) seconds"
        }
    }

    /// The C layer's encoding: 0, a positive count of nanoseconds, or `PL_TIMEOUT_FOREVER`.
    func nanoseconds() throws(PortError) -> Int64 {
        switch storage {
        case .poll:
            return 0
        case .forever:
            return PL_TIMEOUT_FOREVER
        case let .duration(d):
            if d < .zero { throw .invalidArgument(argument: "timeout", reason: "negative duration \(d)") }
            // Round up so that a wait never ends before the duration has passed; past Int64 (292 years), forever.
            let nanoseconds = (d.attoseconds + 999_999_999) / 1_000_000_000
            return nanoseconds >= Int128(Int64.max) ? PL_TIMEOUT_FOREVER : Int64(nanoseconds)
        case let .seconds(s):
            if s.isNaN { throw .invalidArgument(argument: "timeout", reason: "not a number") }
            if s < 0 { throw .invalidArgument(argument: "timeout", reason: "negative: \(s) seconds") }
            if s >= Double(Int64.max / 1_000_000_000 - 1) { return PL_TIMEOUT_FOREVER }
            return Int64((s * 1e9).rounded(.up))
        }
    }
}
