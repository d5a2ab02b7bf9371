extension PortRunLoop {
    /// Runs a closure on the loop's thread after a delay, in the given modes
    /// (`performSelector:withObject:afterDelay:inModes:`).
    ///
    /// Like Foundation, this schedules a one-shot ``RunLoopTimer`` in each mode: the block runs in the first
    /// run of one of those modes that passes after the delay, never before it, and once. While it is pending
    /// the timer keeps those modes from being empty. Safe from any thread. A zero delay still waits for the
    /// loop's next pass in a matching mode; it never runs the block inside this call. A negative delay is a
    /// delay of zero, as for `performSelector:afterDelay:` and for a timer whose fire date has passed.
    ///
    /// - Parameters:
    ///   - delay: how long to wait.
    ///   - modes: the modes it may run in (`.common` for every common mode); not empty.
    ///   - block: the work, called on the loop's thread as a timer callout.
    /// - Returns: a token that cancels the perform; dropping it does not.
    /// - Throws: ``RunLoopError/invalidArgument(argument:reason:)`` for an empty `modes`,
    ///   ``RunLoopError/threadExited`` if the loop's thread has exited.
    @discardableResult
    public func perform(afterDelay delay: Duration, inModes modes: [Mode] = [.default],
                        _ block: @escaping @Sendable () -> Void) throws(RunLoopError) -> PerformRequest {
        try Mode.validate(modes)
        let table = delayedPerforms
        // The table decides whether the fire or a cancel gets the request; only the winner acts.
        let timer = RunLoopTimer(after: max(delay, .zero)) { timer in
            guard table.take(timer) != nil else { return }
            block()
        }
        let request = PerformRequest(timer: timer, table: table, modes: modes)
        table.insert(request)
        do {
            for mode in modes { try add(timer, mode: mode) }
        } catch {
            // A short delay may fire (and invalidate the one-shot timer) before it is in every mode, and a
            // cancel from another thread may invalidate it meanwhile: either way it is settled, not failed.
            if error == .invalidated && !table.contains(timer) { return request }
            _ = table.take(timer)
            timer.invalidate()
            throw error
        }
        return request
    }

    /// Cancels every delayed perform of this loop that has not started
    /// (`cancelPreviousPerformRequestsWithTarget:`, for all targets). Blocks queued with
    /// ``perform(inModes:waitUntilDone:_:)`` are not affected, as in Foundation. Safe from any thread.
    /// - Returns: how many performs were cancelled.
    @discardableResult
    public func cancelPerformRequests() -> Int {
        let cancelled = delayedPerforms.takeAll()
        for request in cancelled { request.timer.invalidate() }
        return cancelled.count
    }

    /// The delayed performs that have neither run nor been cancelled.
    public var pendingPerformRequestCount: Int { delayedPerforms.count }
}
