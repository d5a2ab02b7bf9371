extension PortRunLoop {
    /// Queues a block to run on the loop's thread, FIFO, at the next block point of a run whose mode is one
    /// of `modes` (`.common` matches every common mode) (`CFRunLoopPerformBlock`). Like CF, this does not wake
    /// the loop; see ``performAndWakeUp(inModes:_:)``.
    /// - Throws: ``RunLoopError/threadExited`` if the loop's thread has exited.
    public func perform(inModes modes: [Mode] = [.common], _ block: @escaping @Sendable () -> Void) throws(RunLoopError) {
        try withLockThrowing { () throws(RunLoopError) in
            guard !threadExited else { throw .threadExited }
            for mode in modes where mode != .common { _ = try modeLocked(mode) } // names create modes
            blocks.append(PendingBlock(modes: Set(modes), block: block))
        }
    }

    /// Queues a block like ``perform(inModes:_:)`` and wakes the loop so that it runs soon.
    public func performAndWakeUp(inModes modes: [Mode] = [.common], _ block: @escaping @Sendable () -> Void) throws(RunLoopError) {
        try perform(inModes: modes, block)
        wakeUp()
    }

    func blockMatches(_ pending: PendingBlock, _ mode: Mode) -> Bool {
        pending.modes.contains(mode) || (pending.modes.contains(.common) && commonModes.contains(mode))
    }

    /// Runs the queued blocks for the mode, in order; others stay queued, in order, ahead of blocks queued
    /// meanwhile (`__CFRunLoopDoBlocks`). Returns whether any ran.
    @discardableResult
    func doBlocks(_ state: LoopMode) -> Bool {
        lock.lock()
        guard !blocks.isEmpty else { lock.unlock(); return false }
        let taken = blocks
        blocks.removeAll()
        let matching = taken.map { blockMatches($0, state.name) }
        lock.unlock()

        var ran = false
        var kept: [PendingBlock] = []
        for (pending, matches) in zip(taken, matching) {
            if matches {
                __PORTLOOP_IS_CALLING_OUT_TO_A_BLOCK__(pending.block)
                ran = true
            } else {
                kept.append(pending)
            }
        }
        if !kept.isEmpty { lock.withLock { blocks.insert(contentsOf: kept, at: 0) } }
        return ran
    }
}
