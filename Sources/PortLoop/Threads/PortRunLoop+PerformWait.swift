extension PortRunLoop {
    /// Runs a closure on the loop's thread in the given modes, and optionally waits until it has run
    /// (`performSelector:onThread:withObject:waitUntilDone:modes:`).
    ///
    /// The block is queued as with ``perform(inModes:_:)`` and the loop is woken, so it runs at the next block
    /// point of a run whose mode matches. With `waitUntilDone`, the caller blocks until then; a loop that is not
    /// running any of those modes keeps it waiting, as Foundation does. Called on the loop's own thread with
    /// `waitUntilDone`, the block runs at once, whatever the modes (Foundation does the same; queuing it and
    /// waiting would deadlock).
    ///
    /// Two threads that wait on each other's loops deadlock, as with Foundation.
    ///
    /// - Throws: ``RunLoopError/invalidArgument(argument:reason:)`` for an empty `modes` (on the loop's own
    ///   thread too), ``RunLoopError/threadExited`` if the loop's thread has exited, or, when waiting, if it
    ///   exits before the block ran (a loop drops its pending blocks when its thread exits).
    public func perform(inModes modes: [Mode] = PortRunLoop.commonModesOnly, waitUntilDone: Bool,
                        _ block: @escaping @Sendable () -> Void) throws(RunLoopError) {
        try Mode.validate(modes)
        guard waitUntilDone else {
            try performAndWakeUp(inModes: modes, block)
            return
        }
        if isCurrent {
            block()
            return
        }
        guard try performAndWait(inModes: modes, block) != nil else { throw .threadExited }
    }

    /// Runs a closure on the loop's thread in the given modes and returns its value once it has run: the
    /// `async` form of ``perform(inModes:waitUntilDone:_:)`` with `waitUntilDone: true`
    /// (`performSelector:onThread:withObject:waitUntilDone:YES modes:`), which suspends the calling task
    /// instead of blocking its thread, so it may be awaited from the cooperative pool.
    ///
    /// The block is queued and the loop woken, as with ``performAndWakeUp(inModes:_:)``; it runs at the next
    /// block point of a run whose mode matches, and a loop that is not running any of those modes keeps the
    /// caller waiting. Cancelling the calling task does not withdraw the block: the call returns once it ran.
    ///
    /// Called on the loop's own thread, the block runs at once, whatever the modes, as the waiting form does.
    /// An `async` caller is on that thread only inside a job the loop's thread runs: a
    /// ``RunLoopSerialExecutor``'s job on this loop, or the main actor's on the main loop. Queuing would not
    /// deadlock there (the task would suspend and the job return), but running in place keeps the two forms
    /// alike and spares the round trip through the loop.
    ///
    /// Not an overload of ``perform(inModes:_:)``: in an `async` context Swift prefers an `async` overload,
    /// which would turn every call there that only queues a block into one that waits for it.
    ///
    /// - Parameters:
    ///   - modes: the modes the block may run in; `.common` matches every common mode.
    ///   - isolation: the caller's actor, filled in by the compiler. The call runs there instead of hopping
    ///     to the global executor (as a plain nonisolated `async` function would), which is how a caller on
    ///     the loop's thread is recognised.
    ///   - block: the work; its value is returned.
    /// - Returns: the block's value.
    /// - Throws: ``RunLoopError/invalidArgument(argument:reason:)`` for an empty `modes` (on the loop's own
    ///   thread too; nothing runs), ``RunLoopError/threadExited`` if the loop's thread has exited, or exits
    ///   before the block ran (a loop drops its pending blocks when its thread exits),
    ///   ``RunLoopError/portLayer(_:)`` if a mode named for the first time cannot get its port set.
    public func performAndAwait<Value: Sendable>(
        inModes modes: [Mode] = PortRunLoop.commonModesOnly, isolation: isolated (any Actor)? = #isolation,
        _ block: @escaping @Sendable () -> Value
    ) async throws(RunLoopError) -> Value {
        try Mode.validate(modes)
        if isCurrent { return block() }
        guard case let .success(value)? = try await performAndResume(inModes: modes, isolation: isolation, block)
        else { throw .threadExited }
        return value
    }

    /// Queues `body` for the loop's thread, wakes the loop and suspends until it has run. Returns its result,
    /// or nil if it was queued but dropped unrun (the thread exited with it queued). Call it off the loop's
    /// thread: on it, the caller runs the body itself.
    /// - Throws: what ``performAndWakeUp(inModes:_:)`` throws when it refuses the block (nothing was queued).
    func performAndResume<Value: Sendable, Failure: Error>(
        inModes modes: [Mode], isolation: isolated (any Actor)?, _ body: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(RunLoopError) -> Result<Value, Failure>? {
        var refusal: RunLoopError?
        let outcome = await withCheckedContinuation(isolation: isolation) { continuation in
            // The block is a temporary: if it is refused or dropped unrun, its release resumes the caller
            // (with nil; a refusal is told apart by the error kept here).
            do throws(RunLoopError) {
                try performAndWakeUp(inModes: modes, Self.resumingBlock(AsyncCompletion(continuation), body))
            } catch {
                refusal = error
            }
        }
        if let refusal { throw refusal }
        return outcome
    }

    /// A block that runs `body` and resumes `completion`'s task with its result; released unrun, it resumes
    /// the task with nil.
    private static func resumingBlock<Value: Sendable, Failure: Error>(
        _ completion: AsyncCompletion<Result<Value, Failure>>, _ body: @escaping @Sendable () throws(Failure) -> Value
    ) -> @Sendable () -> Void {
        return { completion.finish(Result { () throws(Failure) -> Value in try body() }) }
    }

    /// Queues `body` for the loop's thread, wakes the loop and waits until it has run. Returns its result, or
    /// nil if the loop dropped it unrun (the thread exited). Never call it on the loop's own thread.
    func performAndWait<Value: Sendable, Failure: Error>(
        inModes modes: [Mode], _ body: @escaping @Sendable () throws(Failure) -> Value
    ) throws(RunLoopError) -> Result<Value, Failure>? {
        let completion = Completion<Result<Value, Failure>>()
        // The block is built in a helper and passed as a temporary so that nothing in this frame holds its
        // sentinel while we wait: if the loop drops the block unrun, the sentinel goes with it.
        try performAndWakeUp(inModes: modes, Self.reportingBlock(completion, body))
        return completion.wait()
    }

    /// A block that runs `body` and delivers its result to `completion`, and that abandons `completion` if it
    /// is released without having run.
    private static func reportingBlock<Value: Sendable, Failure: Error>(
        _ completion: Completion<Result<Value, Failure>>, _ body: @escaping @Sendable () throws(Failure) -> Value
    ) -> @Sendable () -> Void {
        let sentinel = Completion<Result<Value, Failure>>.Sentinel(completion)
        return {
            withExtendedLifetime(sentinel) {
                _ = completion.finish(Result { () throws(Failure) -> Value in try body() })
            }
        }
    }
}
