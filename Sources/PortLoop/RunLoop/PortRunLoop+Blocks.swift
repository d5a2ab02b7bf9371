import DequeModule

extension PortRunLoop {
    /// `[.common]`, made once: as a default argument, a literal would allocate an array on every call of a
    /// hot path such as ``performAndWakeUp(inModes:_:)``.
    public static let commonModesOnly: [Mode] = [.common]

    /// Queues a block to run on the loop's thread, FIFO, at the next block point of a run whose mode is one
    /// of `modes` (`.common` matches every common mode) (`CFRunLoopPerformBlock`). Like CF, this does not wake
    /// the loop; see ``performAndWakeUp(inModes:_:)``.
    /// - Throws: ``RunLoopError/invalidArgument(argument:reason:)`` for an empty `modes`,
    ///   ``RunLoopError/threadExited`` if the loop's thread has exited. Nothing is queued when it throws.
    public func perform(inModes modes: [Mode] = PortRunLoop.commonModesOnly, _ block: @escaping @Sendable () -> Void) throws(RunLoopError) {
        _ = try enqueue(PendingBlock(modes: modes, block: block), wake: false)
    }

    /// Queues a block like ``perform(inModes:_:)`` and wakes the loop so that it runs soon.
    ///
    /// A wake-up already on its way is not sent again: a producer queuing blocks faster than the loop runs
    /// them sends one wake-up per pass of the loop, not one per block.
    /// - Throws: as ``perform(inModes:_:)``.
    public func performAndWakeUp(inModes modes: [Mode] = PortRunLoop.commonModesOnly, _ block: @escaping @Sendable () -> Void) throws(RunLoopError) {
        if try enqueue(PendingBlock(modes: modes, block: block), wake: true) { wakeUp() }
    }

    /// Appends a block; with `wake`, returns whether the caller must send a wake-up (none is queued yet).
    private func enqueue(_ pending: PendingBlock, wake: Bool) throws(RunLoopError) -> Bool {
        if let modes = pending.modes { try Mode.validate(modes) }
        return try withLockThrowing { () throws(RunLoopError) -> Bool in
            guard !threadExited else { throw .threadExited }
            if let modes = pending.modes {
                for mode in modes where mode != .common && mode != .default { _ = try modeLocked(mode) } // names create modes
            }
            blocks.append(pending)
            blocksPending.store(true, ordering: .releasing)
            guard wake, !wakeUpQueued else { return false }
            wakeUpQueued = true
            return true
        }
    }

    func blockMatches(_ pending: PendingBlock, _ mode: Mode, modeIsCommon: Bool) -> Bool {
        guard let modes = pending.modes else { return modeIsCommon }
        return (pending.includesCommon && modeIsCommon) || modes.contains(mode)
    }

    /// Runs the queued blocks for the mode, in order; others stay queued, in order, ahead of blocks queued
    /// meanwhile (`__CFRunLoopDoBlocks`). Returns whether any ran.
    @discardableResult
    func doBlocks(_ state: LoopMode) -> Bool {
        // The queue is swapped with an empty one that kept its storage from the last pass, so that neither
        // side allocates in a steady stream of blocks. A block running a nested loop finds the spare taken
        // and uses a fresh one.
        // Without the lock first: most passes find no block queued. A block queued with a wake-up is seen
        // here, as the flag is set before the wake-up is sent and read after it is received.
        guard blocksPending.load(ordering: .acquiring) else { return false }
        var taken = Deque<PendingBlock>()
        swap(&taken, &spareBlocks)
        lock.lock()
        guard !blocks.isEmpty else {
            lock.unlock()
            swap(&taken, &spareBlocks)
            return false
        }
        swap(&taken, &blocks)
        blocksPending.store(false, ordering: .relaxed)
        // The blocks a queued wake-up was sent for are taken now; blocks queued from here on need a new one.
        // (Cleared here rather than when the wake-up is received, which would cost a lock hold of its own:
        // `wakeUpQueued` implies `blocksPending`, so the pass that received the wake-up gets here.)
        wakeUpQueued = false
        let modeIsCommon = commonModes.contains(state.name)
        lock.unlock()

        // Matching needs no lock: a block's modes never change, and a mode's being common is read above.
        var ran = false
        var kept: [PendingBlock] = []
        while let pending = taken.popFirst() {
            if blockMatches(pending, state.name, modeIsCommon: modeIsCommon) {
                __PORTLOOP_IS_CALLING_OUT_TO_A_BLOCK__(pending.block)
                ran = true
            } else {
                kept.append(pending)
            }
        }
        if !kept.isEmpty {
            lock.withLock {
                blocks.insert(contentsOf: kept, at: 0)
                blocksPending.store(true, ordering: .releasing)
            }
        }
        spareBlocks = taken // empty, with its storage
        return ran
    }
}
