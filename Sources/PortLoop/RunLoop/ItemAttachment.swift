import CPortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Which loop an item (source, timer, observer) is scheduled on, and whether it is still valid; its mutex
/// also guards the item's own state (a timer's fire date, a source's signal).
///
/// An item belongs to one loop at a time (CF's rule for timers and observers, applied to sources too): it
/// is attached when first added to a mode and detached when removed from its last mode or invalidated.
/// Lock order: the loop's lock before this one.
///
/// Why a `ManagedBuffer`: the mutex lives in the same allocation as the state (a `PThreadLock` would be two
/// more), which matters when a loop fires and frees 100,000 one-shot timers.
final class ItemAttachment: ManagedBuffer<ItemAttachment.State, pthread_mutex_t> {
    struct State {
        var loop: PortRunLoop?
        var isValid = true
        /// How many modes of the loop hold the item.
        var modeCount = 0
    }

    /// A valid attachment to no loop.
    static func make() -> ItemAttachment {
        let attachment = unsafeDowncast(create(minimumCapacity: 1) { _ in State() }, to: ItemAttachment.self)
        attachment.withUnsafeMutablePointerToElements { mutex in
            mutex.initialize(to: pthread_mutex_t())
            pl_mutex_init_adaptive(mutex)
        }
        return attachment
    }

    deinit {
        withUnsafeMutablePointerToElements { mutex in _ = pthread_mutex_destroy(mutex) }
    }

    /// The state, read and written through its address: `header`, a stored property of the standard library's
    /// class, gets a run-time exclusivity check at every access from this module (one per timer fired). The
    /// mutex serialises every access; the address is the object's own, stable while it lives.
    @inline(__always)
    private var state: UnsafeMutablePointer<State> { withUnsafeMutablePointerToHeader { $0 } }

    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        try withUnsafeMutablePointerToElements { mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body()
        }
    }

    var loop: PortRunLoop? { withLock { state.pointee.loop } }
    var isValid: Bool { withLock { state.pointee.isValid } }
    /// The same, for callers holding the lock.
    var loopLocked: PortRunLoop? { state.pointee.loop }
    var isValidLocked: Bool { state.pointee.isValid }
    /// Whether the item is valid and attached to `loop` (the lock held): compared in place, where going through
    /// `loopLocked` retains and releases the loop.
    @inline(__always)
    func isValidLocked(on loop: PortRunLoop) -> Bool {
        state.pointee.isValid && state.pointee.loop === loop
    }

    /// Records one more mode of `loop`; with the loop's lock held.
    func attach(to loop: PortRunLoop) throws(RunLoopError) {
        let outcome = withLock { () -> RunLoopError? in
            guard state.pointee.isValid else { return .invalidated }
            if let current = state.pointee.loop, current !== loop { return .attachedToAnotherLoop }
            state.pointee.loop = loop
            state.pointee.modeCount += 1
            return nil
        }
        if let outcome { throw outcome }
    }

    /// Records one mode fewer; with the loop's lock held.
    func detachOneMode() {
        withLock {
            state.pointee.modeCount -= 1
            if state.pointee.modeCount <= 0 { state.pointee.modeCount = 0; state.pointee.loop = nil }
        }
    }

    /// Marks the item invalid and returns the loop it must be removed from, if any — also when another thread
    /// invalidated it first and has not yet taken it out of that loop's modes. The caller removes it as well
    /// (removal under the loop's lock is idempotent), so that once its call returns the item is in no mode: a loop
    /// handling a batch from a port source relies on that to stop at once when a handler invalidates the source.
    func invalidate() -> PortRunLoop? {
        withLock {
            state.pointee.isValid = false
            return state.pointee.loop
        }
    }

    /// Marks the item invalid and detached from every mode at once; with the lock held (and the loop's, whose
    /// modes the caller empties of the item).
    func invalidateAndDetachLocked() {
        state.pointee.isValid = false
        state.pointee.loop = nil
        state.pointee.modeCount = 0
    }

    /// Forgets the loop entirely (its thread exited).
    func forgetLoop() { withLock { state.pointee.loop = nil; state.pointee.modeCount = 0 } }
}
