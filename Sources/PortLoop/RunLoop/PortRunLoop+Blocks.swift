extension PortRunLoop {
    /// `[.common]`, made once: as a default argument, a literal would allocate an array on every call of a
    /// hot path such as ``performAndWakeUp(inModes:_:)``.
    public static let commonModesOnly: [Mode] = [.common]

    /// Queues a block to run on the loop's thread, FIFO, at the next block point of a run whose mode is one
    /// of `modes` (`.common` matches every common mode) (`CFRunLoopPerformBlock`). Like CF, this does not wake
    /// the loop; see ``performAndWakeUp(inModes:_:)``.
    /// - Throws: ``RunLoopError/threadExited`` if the loop's thread has exited.
    public func perform(inModes modes: [Mode] = PortRunLoop.commonModesOnly, _ block: @escaping @Sendable () -> Void) throws(RunLoopError) {
        try withLockThrowing { () throws(RunLoopError) in
            guard !threadExited else { throw .threadExited }
            for mode in modes where mode != .common && mode != .default { _ = try modeLocked(mode) } // names create modes
            blocks.append(PendingBlock(modes: modes, block: block))
        }
    }

    /// Queues a block like ``perform(inModes:_:)`` and wakes the loop so that it runs soon.
    public func performAndWakeUp(inModes modes: [Mode] = PortRunLoop.commonModesOnly, _ block: @escaping @Sendable () -> Void) throws(RunLoopError) {
        try perform(inModes: modes, block)
        wakeUp()
    }

    func blockMatches(_ pending: PendingBlock, _ mode: Mode, modeIsCommon: Bool) -> Bool {
        (pending.includesCommon && modeIsCommon) || pending.modes.contains(mode)
    }

    /// Runs the queued blocks for the mode, in order; others stay queued, in order, ahead of blocks queued
    /// meanwhile (`__CFRunLoopDoBlocks`). Returns whether any ran.
    @discardableResult
    func doBlocks(_ state: LoopMode) -> Bool {
        lock.lock()
        guard !blocks.isEmpty else { lock.unlock(); return false }
        let taken = blocks
        blocks.removeAll()
        let modeIsCommon = commonModes.contains(state.name)
        lock.unlock()

        // Matching needs no lock: a block's modes never change, and a mode's being common is read above.
        var ran = false
        var kept: [PendingBlock] = []
        for pending in taken {
            if blockMatches(pending, state.name, modeIsCommon: modeIsCommon) {
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
