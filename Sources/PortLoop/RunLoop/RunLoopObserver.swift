/// A run loop observer (`CFRunLoopObserver`): a callback for chosen stages of a run.
///
/// Observers of a mode fire in ascending ``order``, insertion order among equals. A non-repeating observer
/// is invalidated after its first callout. An observer does not fire re-entrantly: while its callback runs
/// (say it runs the loop again), the nested run skips it.
public final class RunLoopObserver: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// The stages it watches (`CFRunLoopObserverGetActivities`).
    public let activities: PortRunLoop.Activity
    /// Whether it stays after its first callout (`CFRunLoopObserverDoesRepeat`).
    public let repeats: Bool
    /// Callout order, lower first (`CFRunLoopObserverGetOrder`).
    public let order: Int
    let handler: @Sendable (RunLoopObserver, PortRunLoop.Activity) -> Void
    let attachment = ItemAttachment.make()
    /// Guarded by the attachment's lock.
    var isFiring = false

    /// Creates an observer (`CFRunLoopObserverCreateWithHandler`).
    public init(activities: PortRunLoop.Activity, repeats: Bool = true, order: Int = 0,
                handler: @escaping @Sendable (RunLoopObserver, PortRunLoop.Activity) -> Void) {
        self.activities = activities
        self.repeats = repeats
        self.order = order
        self.handler = handler
    }

    /// Removes the observer from its loop and makes it unusable (`CFRunLoopObserverInvalidate`).
    public func invalidate() {
        attachment.invalidate()?.removeEverywhere(self)
    }

    /// Whether the observer has not been invalidated (`CFRunLoopObserverIsValid`).
    public var isValid: Bool { attachment.isValid }

    /// Marks the observer firing; false if it is invalid or firing already (no re-entrant callouts).
    func beginFiring() -> Bool {
        attachment.withLock {
            guard !isFiring, attachment.isValidLocked else { return false }
            isFiring = true
            return true
        }
    }

    func endFiring() { attachment.withLock { isFiring = false } }

    public static func == (lhs: RunLoopObserver, rhs: RunLoopObserver) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String {
        "RunLoopObserver(activities: \(activities), repeats: \(repeats), order: \(order), valid: \(isValid))"
    }
}
