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
