import Synchronization

/// Per-pass setup and teardown around a run loop's work, as CF brackets the main thread's passes with
/// autorelease pools (the two `CFRunLoopObserver`s that UIKit installs on the main loop for them).
///
/// Two observers, as in CF:
/// - at entry, with the highest priority (order `Int.min`), `setUp` opens a scope before any other callout;
/// - at beforeWaiting, with the lowest priority (order `Int.max`), `tearDown` closes the scope and `setUp`
///   opens the next one (CF's pop and push), after every other callout of the pass;
/// - at exit, also with order `Int.max`, `tearDown` closes the last scope.
///
/// So every timer, source, block and observer callout of a run happens inside exactly one scope, and each
/// scope that opens is closed once, in order. `setUp` returns a value (a pool, an arena, a transaction, a
/// start time) that its `tearDown` receives. Nested runs in a hooked mode open and close scopes of their
/// own, inside the outer one, like nested autorelease pools; the outer scope stays open across them.
///
/// ```swift
/// let hooks = try RunLoopScopeHooks(loop: .current,
///                                   setUp: { Arena() },           // a fresh arena per pass
///                                   tearDown: { arena in arena.releaseAll() })
/// ```
///
/// The hooks are active while the object lives: dropping it or calling ``invalidate()`` removes the
/// observers. Callbacks run on the loop's thread.
public final class RunLoopScopeHooks<Scope>: @unchecked Sendable {
    /// The open scopes, innermost last. Touched only on the loop's thread (by the observers, and by the
    /// closing block), which is what makes the unchecked `Sendable` sound.
    private final class Scopes: @unchecked Sendable {
        let setUp: @Sendable () -> Scope
        let tearDown: @Sendable (Scope) -> Void
        private var open: [Scope] = []
        /// Cleared by `invalidate()` before the observers go, from any thread. The two observers cannot be
        /// removed at once, and removing the first wakes a sleeping loop, which may pass through the other
        /// meanwhile: it must close but no longer open.
        let opening = Atomic<Bool>(true)

        init(setUp: @escaping @Sendable () -> Scope, tearDown: @escaping @Sendable (Scope) -> Void) {
            self.setUp = setUp
            self.tearDown = tearDown
        }

        /// Opens a scope, unless the hooks are being invalidated.
        func push() {
            guard opening.load(ordering: .acquiring) else { return }
            open.append(setUp())
        }

        /// Closes the innermost scope, if any. The scope leaves the stack before `tearDown` runs, so a
        /// teardown that invalidates the hooks does not close it twice.
        func pop() {
            guard let scope = open.popLast() else { return }
            tearDown(scope)
        }

        /// Closes every open scope, innermost first.
        func closeAll() { while !open.isEmpty { pop() } }

        var count: Int { open.count }
    }

    /// The loop whose passes are bracketed.
    public let loop: PortRunLoop
    /// The modes whose runs are bracketed.
    public let modes: [PortRunLoop.Mode]
    private let scopes: Scopes
    private let opener: RunLoopObserver
    private let closer: RunLoopObserver

    /// Creates the hooks and adds their two observers to the loop's modes.
    /// - Parameters:
    ///   - loop: the loop whose passes are bracketed; any thread may create the hooks.
    ///   - modes: the modes to bracket; `.common` (the default) means every common mode, as CF's pool
    ///     observers use.
    ///   - setUp: opens a scope, on the loop's thread; its result goes to the matching `tearDown`.
    ///   - tearDown: closes a scope, on the loop's thread.
    /// - Throws: ``RunLoopError/invalidArgument(argument:reason:)`` for an empty `modes`,
    ///   ``RunLoopError/threadExited`` if the loop's thread has exited.
    public init(loop: PortRunLoop, modes: [PortRunLoop.Mode] = [.common],
                setUp: @escaping @Sendable () -> Scope,
                tearDown: @escaping @Sendable (Scope) -> Void) throws(RunLoopError) {
        try PortRunLoop.Mode.validate(modes)
        self.loop = loop
        self.modes = modes
        let scopes = Scopes(setUp: setUp, tearDown: tearDown)
        self.scopes = scopes
        opener = RunLoopObserver(activities: .entry, order: .min) { _, _ in scopes.push() }
        closer = RunLoopObserver(activities: [.beforeWaiting, .exit], order: .max) { _, activity in
            scopes.pop()
            // Before sleeping: pop and push. A scope opened here spans the sleep and the next pass, as CF's
            // pool does; when the hooks were added mid-run, this is where the first scope opens. (Not if the
            // teardown just invalidated the hooks: `push` checks.)
            if activity == .beforeWaiting { scopes.push() }
        }
        do throws(RunLoopError) {
            for mode in modes {
                try loop.add(opener, mode: mode)
                try loop.add(closer, mode: mode)
            }
        } catch {
            scopes.opening.store(false, ordering: .releasing) // nothing for deinit to undo
            opener.invalidate()
            closer.invalidate()
            throw error
        }
    }

    deinit { invalidate() }

    /// Removes the observers. Scopes still open are closed on the loop's thread: at once when called there
    /// (innermost first, including those of outer runs that are still going), otherwise by a block queued for
    /// the hooks' modes at the loop's next block point. Calling it again does nothing.
    public func invalidate() {
        guard scopes.opening.exchange(false, ordering: .acquiringAndReleasing) else { return }
        opener.invalidate()
        closer.invalidate()
        if loop.isCurrent {
            scopes.closeAll()
        } else {
            // The scopes belong to the loop's thread; if it has exited, its runs closed them at exit.
            let scopes = scopes
            try? loop.performAndWakeUp(inModes: modes) { scopes.closeAll() }
        }
    }

    /// Whether the hooks are installed.
    public var isValid: Bool { scopes.opening.load(ordering: .acquiring) }

    /// How many scopes are open; meaningful on the loop's thread only.
    var openScopeCount: Int { scopes.count }
}

extension RunLoopScopeHooks where Scope == Void {
    /// Creates hooks whose scopes carry no value: `setUp` and `tearDown` act on state of their own.
    /// - Throws: ``RunLoopError/threadExited`` if the loop's thread has exited.
    public convenience init(loop: PortRunLoop, modes: [PortRunLoop.Mode] = [.common],
                            setUp: @escaping @Sendable () -> Void,
                            tearDown: @escaping @Sendable () -> Void) throws(RunLoopError) {
        try self.init(loop: loop, modes: modes, setUp: setUp, tearDown: { (_: Void) in tearDown() })
    }
}
