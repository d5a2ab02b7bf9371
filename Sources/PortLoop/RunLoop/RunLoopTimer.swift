/// A run loop timer (`CFRunLoopTimer`): a callback at a fire date, once or on a repeating grid.
///
/// A repeating timer stays on its original grid: when a fire is late, missed fires are skipped, never
/// bunched, and the grid never drifts. The callback may invalidate the timer or move its next fire date.
/// A fire date in the past fires at the next opportunity. The loop may fire a timer up to ``tolerance``
/// late to batch wake-ups (capped at half the interval). A timer belongs to one loop; it may be in several
/// of its modes.
public final class RunLoopTimer: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// The order given at creation (`CFRunLoopTimerGetOrder`). Like CF, which documents that run loop timers
    /// ignore it, the loop does not use it: timers fire in fire-date order, and timers due at the same date in
    /// the order they were added.
    public let order: Int
    let handler: @Sendable (RunLoopTimer) -> Void
    /// Where the handler's captured context lives, read once from the closure's two words (function,
    /// context): the loop prefetches it a few firings ahead, as each callout otherwise starts with a cache miss
    /// at 100,000 timers. Only ever prefetched, never dereferenced, so a different closure layout would cost
    /// nothing but the prefetch.
    let handlerContextAddress: UnsafeRawPointer?
    let attachment = ItemAttachment.make()

    // State, guarded by the attachment's lock. Changed from outside with the loop's lock held too, so that the
    // loop's timer heaps follow it; the loop itself, firing the timer, changes it under the timer's lock and
    // puts the heaps right after the chunk (`PortRunLoop.fireDueTimers`). (`@exclusivity(unchecked)`: the
    // locks serialise every access, and the run-time checks showed in the firing path.)
    @exclusivity(unchecked) var fireDate: Int64
    let intervalNanoseconds: Int64
    @exclusivity(unchecked) var toleranceNanoseconds: Int64 = 0
    @exclusivity(unchecked) var isFiring = false

    // Where the timer is in its loop's modes, guarded by that loop's lock (read only after checking, under
    // the attachment's lock, that the timer is attached to the loop whose lock is held). Usually one mode, kept
    // inline so that a timer in one mode needs no array.
    @exclusivity(unchecked) private var firstPlacement: TimerPlacement?
    @exclusivity(unchecked) private var otherPlacements: [TimerPlacement] = []

    /// Creates a timer (`CFRunLoopTimerCreateWithHandler`).
    /// - Parameters:
    ///   - fireAt: the first fire date.
    ///   - interval: the period of a repeating timer; zero (or negative) for a one-shot timer.
    ///   - tolerance: how late the loop may fire it to batch wake-ups.
    ///   - order: kept and reported by ``order``; it does not change when the timer fires.
    ///   - handler: called on the loop's thread.
    public init(fireAt: ContinuousClock.Instant, interval: Duration = .zero, tolerance: Duration = .zero,
                order: Int = 0, handler: @escaping @Sendable (RunLoopTimer) -> Void) {
        self.fireDate = monotonicNanoseconds(for: fireAt)
        self.intervalNanoseconds = max(0, interval.nanosecondsClamped)
        self.order = order
        self.handler = handler
        self.handlerContextAddress = withUnsafeBytes(of: handler) { bytes in
            bytes.count >= 2 * MemoryLayout<UnsafeRawPointer>.size
                ? bytes.load(fromByteOffset: MemoryLayout<UnsafeRawPointer>.size, as: UnsafeRawPointer?.self) : nil
        }
        self.toleranceNanoseconds = cappedTolerance(tolerance.nanosecondsClamped)
    }

    /// Creates a timer that first fires `delay` from now.
    public convenience init(after delay: Duration, interval: Duration = .zero, tolerance: Duration = .zero,
                            order: Int = 0, handler: @escaping @Sendable (RunLoopTimer) -> Void) {
        self.init(fireAt: .now + delay, interval: interval, tolerance: tolerance, order: order, handler: handler)
    }

    private func cappedTolerance(_ tolerance: Int64) -> Int64 {
        let positive = max(0, tolerance)
        return intervalNanoseconds > 0 ? min(positive, intervalNanoseconds / 2) : positive
    }

    /// The period; zero for a one-shot timer (`CFRunLoopTimerGetInterval`).
    public var interval: Duration { .nanoseconds(intervalNanoseconds) }

    /// Whether the timer repeats (`CFRunLoopTimerDoesRepeat`).
    public var isRepeating: Bool { intervalNanoseconds > 0 }

    /// How late the loop may fire the timer (`CFRunLoopTimerGetTolerance`).
    public var tolerance: Duration { .nanoseconds(attachment.withLock { toleranceNanoseconds }) }

    /// Sets the tolerance, capped at half the interval (`CFRunLoopTimerSetTolerance`).
    public func setTolerance(_ tolerance: Duration) {
        let capped = cappedTolerance(tolerance.nanosecondsClamped)
        changeState { $0.toleranceNanoseconds = capped }
    }

    /// The next fire date (`CFRunLoopTimerGetNextFireDate`).
    public var nextFireDate: ContinuousClock.Instant {
        instant(forMonotonic: attachment.withLock { fireDate })
    }

    /// Moves the next fire date (`CFRunLoopTimerSetNextFireDate`). Safe from any thread; wakes the loop if it
    /// sleeps in a mode holding the timer, so that it sleeps for the right time.
    public func setNextFireDate(_ date: ContinuousClock.Instant) {
        let nanoseconds = monotonicNanoseconds(for: date)
        changeState { $0.fireDate = nanoseconds }
    }

    /// Moves the next fire date to `delay` from now.
    public func setNextFireDate(after delay: Duration) { setNextFireDate(.now + delay) }

    /// Applies a change to the state, with the loop's lock when attached so the loop can re-sort its heaps.
    private func changeState(_ change: (RunLoopTimer) -> Void) {
        while true {
            guard let loop = attachment.loop else {
                let done = attachment.withLock { () -> Bool in
                    guard attachment.loopLocked == nil else { return false }
                    change(self)
                    return true
                }
                if done { return } else { continue }
            }
            if loop.changeTimer(self, change) { return }
        }
    }

    // MARK: - Placements (the loop's lock held)

    /// The timer's slot in a mode, if the mode holds it.
    func placement(in mode: LoopMode) -> TimerPlacement? {
        if let first = firstPlacement, first.mode === mode { return first }
        return otherPlacements.first { $0.mode === mode }
    }

    func addPlacement(_ placement: TimerPlacement) {
        if firstPlacement == nil { firstPlacement = placement } else { otherPlacements.append(placement) }
    }

    /// Forgets the timer's slot in a mode and returns it, if the mode held the timer.
    func removePlacement(in mode: LoopMode) -> TimerPlacement? {
        if let first = firstPlacement, first.mode === mode {
            firstPlacement = otherPlacements.popLast()
            return first
        }
        guard let index = otherPlacements.firstIndex(where: { $0.mode === mode }) else { return nil }
        return otherPlacements.remove(at: index)
    }

    /// Calls `body` with every placement.
    func forEachPlacement(_ body: (TimerPlacement) -> Void) {
        guard let first = firstPlacement else { return }
        body(first)
        if otherPlacements.isEmpty { return } // no retain of the array for the usual timer, in one mode
        for placement in otherPlacements { body(placement) }
    }

    /// Forgets every placement (the loop is tearing down, or the timer leaves all its modes at once).
    func clearPlacements() {
        firstPlacement = nil
        if !otherPlacements.isEmpty { otherPlacements = [] }
    }

    /// Calls the handler now, on the calling thread (`-[NSTimer fire]`; CF has no counterpart). A repeating
    /// timer keeps its schedule; a one-shot timer is invalidated afterwards, even if its fire date has not come.
    /// An invalidated timer does nothing. Called from a thread other than the loop's, the handler may run at
    /// the same time as a firing by the loop.
    public func fire() {
        guard isValid else { return }
        __PORTLOOP_IS_CALLING_OUT_TO_A_TIMER_CALLBACK_FUNCTION__(self)
        if !isRepeating { invalidate() }
    }

    /// Removes the timer from every mode of its loop; it will not fire again (`CFRunLoopTimerInvalidate`).
    public func invalidate() {
        attachment.invalidate()?.removeEverywhere(self)
    }

    /// Whether the timer has not been invalidated (`CFRunLoopTimerIsValid`).
    public var isValid: Bool { attachment.isValid }

    public static func == (lhs: RunLoopTimer, rhs: RunLoopTimer) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String {
        let (fire, tolerance) = attachment.withLock { (fireDate, toleranceNanoseconds) }
        let inMs = (Double(fire) - Double(monotonicNanoseconds())) / 1e6
        return "RunLoopTimer(next fire in \(inMs) ms, interval: \(interval), tolerance: \(Duration.nanoseconds(tolerance)), order: \(order), valid: \(isValid))"
    }
}

extension Duration {
    /// Whole nanoseconds (truncated toward zero), saturating at the bounds of Int64: about 292 years either
    /// way, which PortLoop reads as "never" (or "long ago"). From the 128-bit attosecond count, as `components`
    /// traps once the seconds no longer fit in Int64.
    var nanosecondsClamped: Int64 {
        Int64(clamping: attoseconds / 1_000_000_000)
    }
}

/// One `ContinuousClock` instant and the monotonic-clock reading taken with it, captured once. Converting
/// through a fixed pair keeps the mapping exact and order-preserving (two timers 1 ns apart stay 1 ns apart),
/// where reading both clocks on every conversion would add the jitter between the two reads.
private let clockReference: (instant: ContinuousClock.Instant, monotonic: Int64) = {
    var best: (ContinuousClock.Instant, Int64, Int64)?
    for _ in 0..<5 { // keep the pair read closest together
        let before = monotonicNanoseconds()
        let instant = ContinuousClock.now
        let after = monotonicNanoseconds()
        if best == nil || after - before < best!.2 { best = (instant, before + (after - before) / 2, after - before) }
    }
    return (best!.0, best!.1)
}()

/// The monotonic-clock nanoseconds of a `ContinuousClock` instant.
func monotonicNanoseconds(for instant: ContinuousClock.Instant) -> Int64 {
    clockReference.monotonic.addingClamped((instant - clockReference.instant).nanosecondsClamped)
}

/// The `ContinuousClock` instant of monotonic-clock nanoseconds.
func instant(forMonotonic nanoseconds: Int64) -> ContinuousClock.Instant {
    clockReference.instant + .nanoseconds(Int128(nanoseconds) - Int128(clockReference.monotonic))
}
