/// Which loop an item (source, timer, observer) is scheduled on, and whether it is still valid.
///
/// An item belongs to one loop at a time (CF's rule for timers and observers, applied to sources too): it
/// is attached when first added to a mode and detached when removed from its last mode or invalidated.
/// Lock order: the loop's lock before this one.
final class ItemAttachment: @unchecked Sendable {
    let lock = PThreadLock()
    private var _loop: PortRunLoop?
    private var _isValid = true
    /// How many modes of the loop hold the item.
    private var modeCount = 0

    var loop: PortRunLoop? { lock.withLock { _loop } }
    var isValid: Bool { lock.withLock { _isValid } }
    /// The same, for callers holding `lock`.
    var loopLocked: PortRunLoop? { _loop }
    var isValidLocked: Bool { _isValid }

    /// Records one more mode of `loop`; with the loop's lock held.
    func attach(to loop: PortRunLoop) throws(RunLoopError) {
        lock.lock()
        defer { lock.unlock() }
        guard _isValid else { throw .invalidated }
        if let current = _loop, current !== loop { throw .attachedToAnotherLoop }
        _loop = loop
        modeCount += 1
    }

    /// Records one mode fewer; with the loop's lock held.
    func detachOneMode() {
        lock.withLock {
            modeCount -= 1
            if modeCount <= 0 { modeCount = 0; _loop = nil }
        }
    }

    /// Marks the item invalid and returns the loop it must be removed from, if any.
    func invalidate() -> PortRunLoop? {
        lock.withLock {
            guard _isValid else { return nil }
            _isValid = false
            return _loop
        }
    }

    /// Forgets the loop entirely (its thread exited).
    func forgetLoop() { lock.withLock { _loop = nil; modeCount = 0 } }
}
