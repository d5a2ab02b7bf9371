import Synchronization

/// Orders signals across threads: ties in `order` are performed in signal order.
let sourceSignalCounter = Atomic<UInt64>(0)

/// A version-0 run loop source (`CFRunLoopSource` with a `CFRunLoopSourceContext` version 0): a callback that
/// the loop performs after someone has *signalled* the source. A signal does not wake the loop; call
/// ``PortRunLoop/wakeUp()`` after ``signal()``, or use ``signalAndWakeUp()``.
///
/// Ready sources are performed in ascending ``order``, ties by signal time. A source is un-signalled just
/// before it is performed.
public final class RunLoopSource: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// Performance order: lower first (`CFRunLoopSourceGetOrder`).
    public let order: Int
    let perform: @Sendable () -> Void
    let schedule: (@Sendable (PortRunLoop, PortRunLoop.Mode) -> Void)?
    let cancel: (@Sendable (PortRunLoop, PortRunLoop.Mode) -> Void)?
    let attachment = ItemAttachment.make()
    /// 0 when not signalled, otherwise the signal's position in `sourceSignalCounter`.
    private let signalStamp = Atomic<UInt64>(0)

    /// Creates a source (`CFRunLoopSourceCreate` with a version-0 context).
    /// - Parameters:
    ///   - order: performance order among ready sources, lower first.
    ///   - schedule: called on the adding thread when the source is added to a mode (`schedule`).
    ///   - cancel: called when it leaves a mode, by removal or invalidation (`cancel`).
    ///   - perform: the work, called on the loop's thread (`perform`).
    public init(order: Int = 0,
                schedule: (@Sendable (PortRunLoop, PortRunLoop.Mode) -> Void)? = nil,
                cancel: (@Sendable (PortRunLoop, PortRunLoop.Mode) -> Void)? = nil,
                perform: @escaping @Sendable () -> Void) {
        self.order = order
        self.schedule = schedule
        self.cancel = cancel
        self.perform = perform
    }

    /// Marks the source ready to perform (`CFRunLoopSourceSignal`). Safe from any thread; does not wake
    /// the loop. Signalling a signalled source keeps its first signal time.
    public func signal() {
        let stamp = sourceSignalCounter.add(1, ordering: .relaxed).newValue
        _ = signalStamp.compareExchange(expected: 0, desired: stamp, ordering: .relaxed)
    }

    /// Signals the source and wakes the loop it is scheduled on, the usual pair of CF calls in one.
    public func signalAndWakeUp() {
        signal()
        attachment.loop?.wakeUp()
    }

    /// Whether the source is signalled and not yet performed.
    public var isSignalled: Bool { signalStamp.load(ordering: .relaxed) != 0 }

    /// The signal stamp, 0 when not signalled.
    var stamp: UInt64 { signalStamp.load(ordering: .relaxed) }

    /// Clears the signal; true if it was set (the caller then performs the source).
    func takeSignal() -> Bool { signalStamp.exchange(0, ordering: .relaxed) != 0 }

    /// Removes the source from every mode of its loop, calling `cancel` for each, and makes it unusable
    /// (`CFRunLoopSourceInvalidate`).
    public func invalidate() {
        attachment.invalidate()?.removeEverywhere(self)
    }

    /// Whether the source has not been invalidated (`CFRunLoopSourceIsValid`).
    public var isValid: Bool { attachment.isValid }

    public static func == (lhs: RunLoopSource, rhs: RunLoopSource) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String {
        "RunLoopSource(order: \(order), signalled: \(isSignalled), valid: \(isValid))"
    }
}
