/// A pending delayed perform, from ``PortRunLoop/perform(afterDelay:inModes:_:)``: the token that cancels it
/// (what `cancelPreviousPerformRequestsWithTarget:selector:object:` names by target, selector and argument).
///
/// Dropping the token does not cancel the perform; it runs as scheduled.
public final class PerformRequest: Hashable, Sendable, CustomStringConvertible {
    /// The one-shot timer that runs the block; it is in each of ``modes`` of the loop.
    let timer: RunLoopTimer
    let table: DelayedPerformTable
    /// The modes the block may run in.
    public let modes: [PortRunLoop.Mode]

    init(timer: RunLoopTimer, table: DelayedPerformTable, modes: [PortRunLoop.Mode]) {
        self.timer = timer
        self.table = table
        self.modes = modes
    }

    /// When the block becomes due; it runs at the first pass after that of a run in one of ``modes``.
    public var fireDate: ContinuousClock.Instant { timer.nextFireDate }

    /// Whether the block has neither started nor been cancelled.
    public var isPending: Bool { table.contains(timer) }

    /// Cancels the perform if it has not started (`cancelPreviousPerformRequestsWithTarget:selector:object:`
    /// for this one request). Safe from any thread.
    /// - Returns: true if this call cancelled it, so the block will never run; false if it had run, started,
    ///   or was cancelled before.
    @discardableResult
    public func cancel() -> Bool {
        guard table.take(timer) != nil else { return false }
        timer.invalidate()
        return true
    }

    public static func == (lhs: PerformRequest, rhs: PerformRequest) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String {
        "PerformRequest(modes: \(modes.map(\.rawValue)), pending: \(isPending), \(timer))"
    }
}
