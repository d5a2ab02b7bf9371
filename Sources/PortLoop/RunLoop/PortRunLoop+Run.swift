import CPortLoop

extension PortRunLoop {
    /// How many Source1 messages one pass may handle: enough for throughput, few enough that a flood of messages
    /// cannot keep a pass from its timers and blocks for long.
    static let messageBatch = 64

    /// Runs the default mode until the loop is stopped or the mode has nothing left (`CFRunLoopRun`).
    public func run() {
        while true {
            let result = run(mode: .default)
            if result == .stopped || result == .finished { return }
        }
    }

    /// Runs the loop once in a mode (`CFRunLoopRunInMode`): passes until a source is handled (if asked),
    /// the timeout passes, the loop is stopped, or the mode has nothing left.
    ///
    /// - Parameters:
    ///   - mode: the mode to run; `.common` is a marker, not a mode, and returns ``RunResult/finished``
    ///     at once with an error logged.
    ///   - timeout: how long to run; nil for no limit, zero or negative to make one pass without sleeping.
    ///   - returnAfterSourceHandled: return after the first source performed (Source0 or Source1).
    /// - Returns: why the run ended. Called on a thread other than the loop's, it logs an error and
    ///   returns ``RunResult/finished``: a loop is run only by its own thread.
    @discardableResult
    public func run(mode: Mode = .default, timeout: Duration? = nil,
                    returnAfterSourceHandled: Bool = false) -> RunResult {
        guard isCurrent else {
            logError("run(mode:) called on a thread that does not own the loop; returning finished")
            return .finished
        }
        if mode == .common {
            logError("attempt to run a run loop in the common-modes marker; returning finished")
            return .finished
        }
        lock.lock()
        guard !threadExited, let state = modes[mode], !isEmptyLocked(state) else {
            lock.unlock()
            return .finished
        }
        let previousMode = currentMode
        currentMode = state
        runDepth += 1
        let nested = runDepth > 1
        state.activeRuns += 1
        lock.unlock()

        // A nested run (from a callout of an outer one) receives into a buffer of its own: the outer run's may
        // hold the message that woke it, still to be performed after the callout returns (CF receives into each
        // run's stack).
        let outerBuffer = nested ? receiveBuffer : nil
        let outerTakenPayload = takenPayload
        if nested {
            receiveBuffer = .allocate(byteCount: Self.receiveBufferSize, alignment: 16)
            takenPayload = pl_payload_t()
        }
        let heldMainQueue = setMainQueueMember(state, servicesMainQueue(mode))
        doObservers(state, .entry)
        let result = runPasses(state, timeout: timeout, returnAfterSourceHandled: returnAfterSourceHandled)
        doObservers(state, .exit)
        if let outerBuffer {
            receiveBuffer.deallocate()
            receiveBuffer = outerBuffer
            pl_payload_free(&takenPayload) // empty: each message's is freed once it is dealt with
            takenPayload = outerTakenPayload
        }
        setMainQueueMember(state, heldMainQueue)

        let (departed, lastRun) = lock.withLock { () -> ([PortName: RunLoopPortSource]?, Bool) in
            currentMode = previousMode
            runDepth -= 1
            state.activeRuns -= 1
            return state.activeRuns == 0 ? (state.takeDepartedSources(), true) : (nil, false)
        }
        if lastRun { state.lastLookup = nil }
        withExtendedLifetime(departed) {} // released outside the lock: a handler's captures may call into the loop
        return result
    }

    /// Runs the loop once in a mode until an instant (`-[NSRunLoop runMode:beforeDate:]`): as
    /// ``run(mode:timeout:returnAfterSourceHandled:)`` with the time left until `deadline` as the timeout; an
    /// instant already past makes one pass without sleeping.
    @discardableResult
    public func run(mode: Mode = .default, until deadline: ContinuousClock.Instant,
                    returnAfterSourceHandled: Bool = false) -> RunResult {
        let timeout = Duration.nanoseconds(monotonicNanoseconds(for: deadline).subtractingClamped(monotonicNanoseconds()))
        return run(mode: mode, timeout: timeout, returnAfterSourceHandled: returnAfterSourceHandled)
    }

    /// The passes of one run (`__CFRunLoopRun`).
    private func runPasses(_ state: LoopMode, timeout: Duration?, returnAfterSourceHandled: Bool) -> RunResult {
        let timeoutNanoseconds = timeout?.nanosecondsClamped ?? .max
        let pollOnly = timeoutNanoseconds <= 0
        let deadline = pollOnly ? monotonicNanoseconds() : monotonicNanoseconds().addingClamped(timeoutNanoseconds)

        while true {
            mainQueueSkipThisPass = mainQueueServicedLastPass
            mainQueueServicedLastPass = false
            doObservers(state, .beforeTimers)
            doObservers(state, .beforeSources)
            doBlocks(state)
            var handled = doSources0(state)
            if handled { doBlocks(state) }

            // A mode that has just become empty (its last block ran, its last source left) finishes
            // instead of sleeping until the deadline. Unless someone observes the waiting activities (which
            // must not be reported around a sleep that does not happen), the check is made in the same lock
            // hold as the sleep's preparation.
            var poll = handled || pollOnly
            let waitingObserved = state.observedActivities.load(ordering: .relaxed)
                & (Activity.beforeWaiting.rawValue | Activity.afterWaiting.rawValue) != 0
            if !poll && waitingObserved { poll = lock.withLock { isEmptyLocked(state) } }
            if !poll { doObservers(state, .beforeWaiting) }
            var header = pl_received_t()
            let status = sleep(in: state, poll: poll, pollIfEmpty: !poll && !waitingObserved, deadline: deadline,
                               header: &header)
            if !poll { doObservers(state, .afterWaiting) }

            // Handle whatever woke the loop.
            fireDueTimers(state)
            if status == PL_OK {
                handled = handleMessages(state, first: header, batch: !returnAfterSourceHandled) || handled
            }
            doBlocks(state)

            if handled && returnAfterSourceHandled { return .handledSource }
            if deadline != .max && monotonicNanoseconds() >= deadline { return .timedOut }
            // Without the lock when no stop is pending and the mode holds a source or a timer: it cannot be empty.
            // (A stop or a removal racing with these loads is seen at the next pass, which its wake-up brings.)
            if !stopPending.load(ordering: .acquiring) && state.hasSourcesOrTimers.load(ordering: .acquiring) {
                continue
            }
            let (stopped, empty) = lock.withLock { () -> (Bool, Bool) in
                if stopRequested {
                    stopRequested = false
                    return (true, false)
                }
                return (false, isEmptyLocked(state))
            }
            if stopped { return .stopped }
            if empty { return .finished }
        }
    }

    /// Receives on the mode's port set: at once when polling, otherwise until a message arrives, the mode's
    /// next timer is due (within tolerance) or the run's deadline passes. This is the loop's sleep.
    ///
    /// With `pollIfEmpty`, a mode found empty in the same lock hold is polled instead.
    private func sleep(in state: LoopMode, poll: Bool, pollIfEmpty: Bool, deadline: Int64,
                       header: inout pl_received_t) -> pl_status_t {
        var departed: [PortName: RunLoopPortSource]?
        let (timerWake, empty) = lock.withLock { () -> (Int64?, Bool) in
            sleepingModeID.store(UInt(bitPattern: ObjectIdentifier(state)), ordering: .releasing)
            // Every message this run took has been dealt with; unless an outer run in the mode still holds some,
            // the sources that left meanwhile need no keeping.
            departed = state.activeRuns == 1 ? state.takeDepartedSources() : nil
            return (state.timers.wakeDeadline(), pollIfEmpty && isEmptyLocked(state))
        }
        // Let go of here, outside the lock and before the sleep: a constant would live to the end of the function
        // in a debug build, and keep a removed source's port alive through the sleep.
        withExtendedLifetime(departed) {}
        departed = nil
        state.dropStaleLookup()
        let poll = poll || empty
        var timeout: Int64 = 0
        var status = PL_ERR_TIMED_OUT
        if !poll {
            let until = min(deadline, timerWake ?? .max)
            status = spin(on: state, until: until, timerDue: timerWake != nil && until == timerWake, header: &header)
            if status == PL_ERR_TIMED_OUT {
                timeout = until == .max ? PL_TIMEOUT_FOREVER : max(0, until.subtractingClamped(monotonicNanoseconds()))
                waiting.store(true, ordering: .releasing)
                status = receive(on: state, header: &header, timeout: timeout)
                waiting.store(false, ordering: .releasing)
            }
        } else {
            status = receive(on: state, header: &header, timeout: 0)
        }
        // Without the lock: an item added from here on finds the loop not sleeping, and its next sleep, which
        // takes the lock, sees the item.
        sleepingModeID.store(0, ordering: .releasing)
        return status
    }

    /// The low-latency mode: before sleeping, poll the mode's port set for up to ``spinBeforeSleeping``
    /// (never past `until`). A message that arrives meanwhile is taken without either side making a system
    /// call: the sender finds no sleeper to wake. Returns `PL_ERR_TIMED_OUT` when nothing came.
    ///
    /// Whatever the setting, a loop whose next timer is due within ``imminentTimerSpin`` polls until then
    /// rather than sleeping: arming the timer, sleeping and waking take longer than that, and would make the
    /// timer late by as much (`timerDue`: `until` is that timer's).
    private func spin(on state: LoopMode, until: Int64, timerDue: Bool, header: inout pl_received_t) -> pl_status_t {
        var spin = spinNanoseconds.load(ordering: .relaxed)
        var now: Int64 = 0
        if timerDue {
            now = monotonicNanoseconds()
            let left = until.subtractingClamped(now)
            if left <= Self.imminentTimerSpin { spin = max(spin, left) }
        }
        guard spin > 0 else { return PL_ERR_TIMED_OUT }
        if !timerDue { now = monotonicNanoseconds() }
        let spinUntil = min(until, now.addingClamped(spin))
        // Between full polls (which look at the descriptors too, a system call when there are any), the spin
        // reads the set's ready marks, with no lock, and receives only when a port became ready. The shared-memory
        // rings of connections from other processes that feed the set, it reads itself: their writers, finding it
        // looking, put messages there without waking anyone.
        let set = state.portSet.set
        var lookout = pl_port_set_lookout_t()
        pl_port_set_lookout_begin(set, &lookout)
        defer { pl_port_set_lookout_end(set, &lookout) }
        let readsRings = lookout.count > 0
        var marks = pl_port_set_ready_marks(set)
        var nextFullPoll = now
        var turns = 0
        while true {
            if now >= nextFullPoll {
                let status = receive(on: state, header: &header, timeout: 0)
                if status != PL_ERR_TIMED_OUT { return status }
                nextFullPoll = now.addingClamped(Self.spinFullPollInterval)
            }
            if readsRings { _ = pl_port_set_lookout_read(set, &lookout) }
            let current = pl_port_set_ready_marks(set)
            if current != marks {
                marks = current
                let status = receive(on: state, header: &header, timeout: 0, queuedOnly: true)
                if status != PL_ERR_TIMED_OUT { return status }
            }
            turns &+= 1
            if turns & 15 == 0 {
                now = monotonicNanoseconds()
                if now >= spinUntil { return PL_ERR_TIMED_OUT }
            }
        }
    }

    /// How often a spinning loop makes a full poll of its port set, descriptors included.
    static let spinFullPollInterval: Int64 = 20_000

    /// One receive into the loop's buffer; a message larger than the buffer (which stays queued meanwhile) is
    /// then taken with its payload memory handed over, into ``takenPayload``: a large payload already sits in
    /// memory of its own (its sender's, or where its frames were put together), and copying it here too would add
    /// a pass over every byte to the one that makes the handler's array. With `queuedOnly`, a receive without
    /// waiting that takes only what is queued already (`pl_port_set_receive_queued`): no system call to look at
    /// the descriptors.
    func receive(on state: LoopMode, header: inout pl_received_t, timeout: Int64,
                 queuedOnly: Bool = false) -> pl_status_t {
        let set = state.portSet.set
        let status = queuedOnly
            ? pl_port_set_receive_queued(set, &header, receiveBuffer.baseAddress, receiveBuffer.count)
            : pl_port_set_receive(set, &header, receiveBuffer.baseAddress, receiveBuffer.count, timeout)
        guard status == PL_ERR_TOO_LARGE else { return status }
        return pl_port_set_receive_queued_payload(set, &header, &takenPayload)
    }

    /// Where the payload of the message ``receive(on:header:timeout:queuedOnly:)`` took last is.
    var receivedPayload: UnsafeRawPointer? {
        if let taken = takenPayload.base { return UnsafeRawPointer(taken) }
        return UnsafeRawPointer(receiveBuffer.baseAddress)
    }

    /// Frees the payload memory taken for the last received message, once it has been handled or put back.
    func releaseTakenPayload() {
        if takenPayload.base != nil { pl_payload_free(&takenPayload) }
    }

    /// Fires the mode's timers that are due, in fire-date order (`__CFRunLoopDoTimers`): those due and
    /// scheduled when the pass reaches its timers. One that a callback adds or moves into the past fires in the
    /// next pass, as in CF.
    ///
    /// Due timers are taken from the heap in chunks of at most ``timerChunk``, into a batch the loop keeps
    /// between passes, so that firing allocates nothing however many are due (a list that grew with a backlog
    /// would reallocate, and a large allocation makes glibc consolidate the chunks of the timers just freed).
    /// Each timer is claimed and released under its own lock; the loop's lock is taken once per chunk, to take
    /// the next chunk and settle the previous one in the heaps.
    private func fireDueTimers(_ state: LoopMode) {
        // Most passes have no timer due: they find it out with no lock round, and without reading the clock when
        // there is no timer. (A timer added meanwhile from another thread fires at the next pass, as if added a
        // moment later; its adder wakes the loop if it sleeps.)
        let first = state.firstFireDate.load(ordering: .acquiring)
        guard first != .max else { return }
        let now = monotonicNanoseconds()
        guard first <= now else { return }
        // A nested run from a callback finds the batch taken and makes its own.
        var batch = TimerBatch()
        swap(&batch, &timerBatchScratch)
        batch.reserve(Self.timerChunk)
        var mark: UInt32?
        var more = true
        while more {
            lock.withLock {
                if mark == nil { mark = state.timers.schedulingMark }
                state.timers.popDue(by: now, scheduledUpTo: mark!, limit: Self.timerChunk, into: &batch.timers,
                                    slots: &batch.slots)
            }
            more = batch.slots.count == Self.timerChunk
            if batch.timers.isEmpty { break }
            let count = batch.timers.count
            for index in 0..<count {
                // The timers themselves were fetched when popped; fetch each one's lock and its handler's
                // context a few firings ahead. The batch holds every timer until it is emptied below, so neither
                // the look ahead nor the firing needs a retain and release of its own.
                if index + Self.attachmentLookahead < count {
                    unowned(unsafe) let ahead = batch.timers[index + Self.attachmentLookahead]
                    let attachment = UnsafeRawPointer(Unmanaged.passUnretained(ahead.attachment).toOpaque())
                    pl_prefetch(attachment)
                    pl_prefetch(attachment + 64)
                    pl_prefetch(ahead.handlerContextAddress)
                }
                let outcome = Unmanaged.passUnretained(batch.timers[index])._withUnsafeGuaranteedRef { fire($0, now: now) }
                batch.outcomes.append(outcome)
            }
            lock.withLock { settleLocked(batch) }
            // Released outside the lock: a retired timer's captures may run code that calls into this loop.
            batch.removeAll()
        }
        swap(&batch, &timerBatchScratch)
    }

    /// How close a due timer must be for the loop to poll until it rather than sleep (see `spin`).
    static let imminentTimerSpin: Int64 = 10_000

    /// How many due timers one lock hold takes from the heap.
    static let timerChunk = 256
    /// How many firings ahead a timer's attachment (its lock) is fetched from memory.
    static let attachmentLookahead = 4

    /// What the heaps must do about a timer after ``fire(_:now:)``.
    enum TimerOutcome {
        /// Nothing: invalidated (its remover takes it out), or fired by an outer callout that settles it.
        case none
        /// A fired one-shot timer, already invalid: free its slots.
        case retire
        /// A repeating timer that fired, or one moved later since it was popped: put it back in order.
        case reposition
    }

    private enum TimerClaim {
        case claimed(scheduled: Int64)
        case skipped(TimerOutcome)
    }

    /// Fires one popped timer and says what its heap entries need. The timer's state changes under its own
    /// lock (the loop's lock is not needed to keep it consistent, only to move it in the heaps).
    private func fire(_ timer: RunLoopTimer, now: Int64) -> TimerOutcome {
        // The timer's for its life, lent without a retain and release.
        Unmanaged.passUnretained(timer.attachment)._withUnsafeGuaranteedRef { fire(timer, attachment: $0, now: now) }
    }

    private func fire(_ timer: RunLoopTimer, attachment: ItemAttachment, now: Int64) -> TimerOutcome {
        let claim = attachment.withLock { () -> TimerClaim in
            guard attachment.isValidLocked(on: self) else { return .skipped(.none) }
            if timer.isFiring { return .skipped(.none) } // this callout runs in the timer's own callout
            guard timer.fireDate <= now else { return .skipped(.reposition) } // moved later
            timer.isFiring = true
            return .claimed(scheduled: timer.fireDate)
        }
        let scheduled: Int64
        switch claim {
        case let .claimed(date): scheduled = date
        case let .skipped(outcome): return outcome
        }

        __PORTLOOP_IS_CALLING_OUT_TO_A_TIMER_CALLBACK_FUNCTION__(timer)

        return attachment.withLock { () -> TimerOutcome in
            timer.isFiring = false
            guard attachment.isValidLocked(on: self) else { return .none }
            if timer.intervalNanoseconds == 0 {
                // A one-shot timer is done. Invalid and detached from now on (`contains` says no at once);
                // its slots are freed when the chunk settles.
                attachment.invalidateAndDetachLocked()
                return .retire
            }
            if timer.fireDate > scheduled { return .reposition } // the callback moved it later
            // Stay on the grid: the first grid point after now, skipping missed fires.
            let after = monotonicNanoseconds()
            let steps = after.subtractingClamped(scheduled) / timer.intervalNanoseconds + 1
            timer.fireDate = scheduled.addingClamped(steps.multipliedReportingOverflow(by: timer.intervalNanoseconds).overflow
                ? .max : steps * timer.intervalNanoseconds)
            return .reposition
        }
    }

    /// Brings the heaps in line with a fired chunk; with the lock held.
    private func settleLocked(_ batch: TimerBatch) {
        for index in batch.timers.indices {
            let outcome = batch.outcomes[index]
            if outcome == .none { continue }
            // Lent by the batch, which holds it: no retain and release per timer.
            Unmanaged.passUnretained(batch.timers[index])._withUnsafeGuaranteedRef { timer in
                if outcome == .reposition { return repositionLocked(timer) }
                timer.forEachPlacement { placement in placement.withMode { $0.timers.remove(slot: placement.slot) } }
                timer.clearPlacements()
                if !commonItems.isEmpty { commonItems.removeAll { $0.identity == ObjectIdentifier(timer) } }
            }
        }
    }

    /// Performs the signalled version-0 sources in ascending order, ties by signal time
    /// (`__CFRunLoopDoSources0`).
    private func doSources0(_ state: LoopMode) -> Bool {
        guard state.hasSources0.load(ordering: .relaxed) else { return false }
        let ready = lock.withLock { () -> [RunLoopSource] in
            state.sources0.isEmpty ? [] : state.sources0.filter(\.isSignalled)
        }
        guard !ready.isEmpty else { return false }
        var handled = false
        let ordered = ready.count == 1 ? ready : ready.sorted {
            $0.order != $1.order ? $0.order < $1.order : $0.stamp < $1.stamp
        }
        for source in ordered where source.isValid && source.takeSignal() {
            __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE0_PERFORM_FUNCTION__(source)
            handled = true
        }
        return handled
    }

    /// Calls the mode's observers of one activity, in order (`__CFRunLoopDoObservers`).
    @inline(__always)
    func doObservers(_ state: LoopMode, _ activity: Activity) {
        // Without the lock: a pass checks six activities, and most loops observe few or none of them.
        guard state.observedActivities.load(ordering: .relaxed) & activity.rawValue != 0 else { return }
        callObservers(state, activity)
    }

    @inline(never)
    private func callObservers(_ state: LoopMode, _ activity: Activity) {
        let observers = lock.withLock { () -> [RunLoopObserver] in
            state.observers.isEmpty ? [] : state.observers.filter { $0.activities.contains(activity) }
        }
        for observer in observers where observer.beginFiring() {
            __PORTLOOP_IS_CALLING_OUT_TO_AN_OBSERVER_CALLBACK_FUNCTION__(observer, activity)
            observer.endFiring()
            if !observer.repeats { observer.invalidate() }
        }
    }

    /// Whether a run in this mode has nothing to do. With the lock held.
    func isEmptyLocked(_ state: LoopMode) -> Bool {
        // On the main loop, the main dispatch queue is a source of every common mode.
        guard state.hasNoSourcesOrTimers else { return false }
        let modeIsCommon = commonModes.contains(state.name)
        if isMainLoop && modeIsCommon { return false }
        return !blocks.contains { blockMatches($0, state.name, modeIsCommon: modeIsCommon) }
    }
}
