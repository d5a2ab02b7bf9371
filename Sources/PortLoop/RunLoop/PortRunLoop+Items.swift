/// Any item a mode can hold.
enum LoopItem {
    case source(RunLoopSource)
    case portSource(RunLoopPortSource)
    case descriptorSource(RunLoopDescriptorSource)
    case timer(RunLoopTimer)
    case observer(RunLoopObserver)

    var attachment: ItemAttachment {
        switch self {
        case let .source(item): item.attachment
        case let .portSource(item): item.attachment
        case let .descriptorSource(item): item.attachment
        case let .timer(item): item.attachment
        case let .observer(item): item.attachment
        }
    }

    var identity: ObjectIdentifier {
        switch self {
        case let .source(item): ObjectIdentifier(item)
        case let .portSource(item): ObjectIdentifier(item)
        case let .descriptorSource(item): ObjectIdentifier(item)
        case let .timer(item): ObjectIdentifier(item)
        case let .observer(item): ObjectIdentifier(item)
        }
    }
}

extension PortRunLoop {
    // MARK: - Public API (CFRunLoopAdd/Remove/Contains Source, Timer, Observer)

    /// Adds a version-0 source to a mode, or to every common mode with `.common` (`CFRunLoopAddSource`).
    /// Adding it twice to one mode has no effect. Its `schedule` callback runs for each mode it joins.
    /// - Throws: ``RunLoopError/threadExited``, ``RunLoopError/attachedToAnotherLoop``,
    ///   ``RunLoopError/invalidated``.
    public func add(_ source: RunLoopSource, mode: Mode) throws(RunLoopError) { try add(.source(source), mode: mode) }
    /// Adds a port source to a mode or to `.common` (`CFRunLoopAddSource` with a version-1 source): its port
    /// joins the mode's port set, so a message wakes the loop.
    public func add(_ source: RunLoopPortSource, mode: Mode) throws(RunLoopError) { try add(.portSource(source), mode: mode) }
    /// Adds a descriptor source to a mode or to `.common` (`CFRunLoopAddSource` with a `CFFileDescriptor`'s
    /// source): its descriptor joins the mode's port set, so its becoming readable wakes the loop.
    /// - Throws: as for the other sources, and ``RunLoopError/portLayer(_:)`` with
    ///   ``PortError/invalidArgument(argument:reason:)`` for a descriptor epoll cannot watch, or with
    ///   ``PortError/alreadyInSet`` when another source of the mode watches the same descriptor.
    public func add(_ source: RunLoopDescriptorSource, mode: Mode) throws(RunLoopError) {
        try add(.descriptorSource(source), mode: mode)
    }
    /// Adds a timer to a mode or to `.common` (`CFRunLoopAddTimer`). A timer belongs to one loop.
    public func add(_ timer: RunLoopTimer, mode: Mode) throws(RunLoopError) { try add(.timer(timer), mode: mode) }
    /// Adds an observer to a mode or to `.common` (`CFRunLoopAddObserver`). An observer belongs to one loop.
    public func add(_ observer: RunLoopObserver, mode: Mode) throws(RunLoopError) { try add(.observer(observer), mode: mode) }

    /// Removes a version-0 source from a mode or from `.common` (`CFRunLoopRemoveSource`); its `cancel`
    /// callback runs for each mode it leaves.
    public func remove(_ source: RunLoopSource, mode: Mode) { remove(.source(source), mode: mode) }
    /// Removes a port source from a mode or from `.common` (`CFRunLoopRemoveSource`).
    public func remove(_ source: RunLoopPortSource, mode: Mode) { remove(.portSource(source), mode: mode) }
    /// Removes a descriptor source from a mode or from `.common` (`CFRunLoopRemoveSource`); once this returns,
    /// that mode's port set no longer watches the descriptor.
    public func remove(_ source: RunLoopDescriptorSource, mode: Mode) { remove(.descriptorSource(source), mode: mode) }
    /// Removes a timer from a mode or from `.common` (`CFRunLoopRemoveTimer`).
    public func remove(_ timer: RunLoopTimer, mode: Mode) { remove(.timer(timer), mode: mode) }
    /// Removes an observer from a mode or from `.common` (`CFRunLoopRemoveObserver`).
    public func remove(_ observer: RunLoopObserver, mode: Mode) { remove(.observer(observer), mode: mode) }

    /// Whether the mode (or the common items, for `.common`) holds the source (`CFRunLoopContainsSource`).
    public func contains(_ source: RunLoopSource, mode: Mode) -> Bool { contains(.source(source), mode: mode) }
    /// Whether the mode holds the port source (`CFRunLoopContainsSource`).
    public func contains(_ source: RunLoopPortSource, mode: Mode) -> Bool { contains(.portSource(source), mode: mode) }
    /// Whether the mode holds the descriptor source (`CFRunLoopContainsSource`).
    public func contains(_ source: RunLoopDescriptorSource, mode: Mode) -> Bool {
        contains(.descriptorSource(source), mode: mode)
    }
    /// Whether the mode holds the timer (`CFRunLoopContainsTimer`).
    public func contains(_ timer: RunLoopTimer, mode: Mode) -> Bool { contains(.timer(timer), mode: mode) }
    /// Whether the mode holds the observer (`CFRunLoopContainsObserver`).
    public func contains(_ observer: RunLoopObserver, mode: Mode) -> Bool { contains(.observer(observer), mode: mode) }

    /// Whether a port source of any mode receives on the port: the loop's thread is then the one that must
    /// run for the port's messages to be handled.
    func servesPort(_ name: PortName) -> Bool {
        lock.withLock { modes.values.contains { $0.sources1[name] != nil } }
    }

    /// The earliest fire date among the mode's timers, or nil (`CFRunLoopGetNextTimerFireDate`).
    public func nextTimerFireDate(in mode: Mode) -> ContinuousClock.Instant? {
        let next = lock.withLock { modes[mode]?.timers.firstFireDate }
        return next.map { instant(forMonotonic: $0) }
    }

    // MARK: - Common-mode bookkeeping

    func add(_ item: LoopItem, mode: Mode) throws(RunLoopError) {
        let (scheduled, wake) = try withLockThrowing { () throws(RunLoopError) -> ([(RunLoopSource, Mode)], Bool) in
            guard !threadExited else { throw .threadExited }
            var targets: [Mode] = [mode]
            if mode == .common {
                if !commonItems.contains(where: { $0.identity == item.identity }) { commonItems.append(item) }
                targets = Array(commonModes)
            }
            var scheduled: [(RunLoopSource, Mode)] = []
            var wake = false
            for target in targets {
                let state = try modeLocked(target)
                guard try insertLocked(item, into: state) else { continue }
                if case let .source(source) = item { scheduled.append((source, target)) }
                if case .timer = item, isSleeping(in: state) { wake = true }
            }
            return (scheduled, wake)
        }
        callScheduleCallouts(scheduled)
        if wake { wakeUp() }
    }

    func remove(_ item: LoopItem, mode: Mode) {
        remove(item, fromCommonItems: mode == .common) { [mode] in mode == .common ? commonModes.contains($0) : $0 == mode }
    }

    func contains(_ item: LoopItem, mode: Mode) -> Bool {
        lock.withLock {
            if mode == .common { return commonItems.contains { $0.identity == item.identity } }
            guard let state = modes[mode] else { return false }
            return containsLocked(item, in: state)
        }
    }

    /// Removes an invalidated item from every mode of the loop.
    func removeEverywhere(_ source: RunLoopSource) { removeEverywhere(.source(source)) }
    func removeEverywhere(_ source: RunLoopPortSource) { removeEverywhere(.portSource(source)) }
    func removeEverywhere(_ source: RunLoopDescriptorSource) { removeEverywhere(.descriptorSource(source)) }
    func removeEverywhere(_ timer: RunLoopTimer) { removeEverywhere(.timer(timer)) }
    func removeEverywhere(_ observer: RunLoopObserver) { removeEverywhere(.observer(observer)) }

    private func removeEverywhere(_ item: LoopItem) {
        remove(item, fromCommonItems: true) { _ in true }
    }

    /// Removes the item from every mode whose name passes `selected` (and from the common items when asked),
    /// calls the cancel callouts, and wakes a loop sleeping in an affected mode: its mode may now be empty,
    /// or its next timer later.
    private func remove(_ item: LoopItem, fromCommonItems: Bool, modes selected: (Mode) -> Bool) {
        let (cancelled, wake) = lock.withLock { () -> ([(RunLoopSource, Mode)], Bool) in
            if fromCommonItems { commonItems.removeAll { $0.identity == item.identity } }
            var wake = false
            let cancelled = modes.compactMap { name, state -> (RunLoopSource, Mode)? in
                guard selected(name), removeLocked(item, from: state) else { return nil }
                // Observers change neither whether a mode is empty nor how long it sleeps.
                if case .observer = item {} else { wake = wake || isSleeping(in: state) }
                if case let .source(source) = item { return (source, name) }
                return nil
            }
            return (cancelled, wake)
        }
        callCancelCallouts(cancelled)
        if wake { wakeUp() }
    }

    // MARK: - One mode (lock held)

    /// Puts the item in the mode; false if it was there already.
    func insertLocked(_ item: LoopItem, into state: LoopMode) throws(RunLoopError) -> Bool {
        guard !containsLocked(item, in: state) else { return false }
        try item.attachment.attach(to: self)
        switch item {
        case let .source(source):
            state.sources0.append(source)
        case let .portSource(source):
            do { try state.portSet.insert(source.port) } catch {
                item.attachment.detachOneMode()
                throw .portLayer(error)
            }
            state.sources1[source.portName] = source
        case let .descriptorSource(source):
            do { try state.portSet.insert(fileDescriptor: source.fileDescriptor) } catch {
                item.attachment.detachOneMode()
                throw .portLayer(error)
            }
            state.descriptorSources[source.fileDescriptor] = source
        case let .timer(timer):
            let (fireDate, tolerance) = timer.attachment.withLock { (timer.fireDate, timer.toleranceNanoseconds) }
            let slot = state.timers.insert(timer, fireDate: fireDate, latest: fireDate.addingClamped(tolerance))
            timer.addPlacement(TimerPlacement(mode: state, slot: slot))
        case let .observer(observer):
            state.insertObserver(observer)
        }
        return true
    }

    /// Takes the item out of the mode; false if it was not there.
    func removeLocked(_ item: LoopItem, from state: LoopMode) -> Bool {
        switch item {
        case let .source(source):
            guard let index = state.sources0.firstIndex(where: { $0 === source }) else { return false }
            state.sources0.remove(at: index)
        case let .portSource(source):
            guard state.sources1.removeValue(forKey: source.portName) != nil else { return false }
            try? state.portSet.remove(source.port)
            if state.activeRuns > 0 { state.departedSources1[source.portName] = source }
        case let .descriptorSource(source):
            guard state.descriptorSources[source.fileDescriptor] === source else { return false }
            state.descriptorSources[source.fileDescriptor] = nil
            try? state.portSet.remove(fileDescriptor: source.fileDescriptor)
        case let .timer(timer):
            guard timer.attachment.loop === self, let placement = timer.removePlacement(in: state) else { return false }
            state.timers.remove(slot: placement.slot)
        case let .observer(observer):
            guard let index = state.observers.firstIndex(where: { $0 === observer }) else { return false }
            state.observers.remove(at: index)
        }
        item.attachment.detachOneMode()
        return true
    }

    func containsLocked(_ item: LoopItem, in state: LoopMode) -> Bool {
        switch item {
        case let .source(source): state.sources0.contains { $0 === source }
        case let .portSource(source): state.sources1[source.portName] === source
        case let .descriptorSource(source): state.descriptorSources[source.fileDescriptor] === source
        // A timer attached to another loop is in none of this loop's modes; its placements are that loop's.
        case let .timer(timer): timer.attachment.loop === self && timer.placement(in: state) != nil
        case let .observer(observer): state.observers.contains { $0 === observer }
        }
    }

    // MARK: - Timers (lock held)

    /// Applies a change to an attached timer's state and re-sorts the heaps holding it; false if the timer
    /// is no longer attached to this loop (the caller retries).
    func changeTimer(_ timer: RunLoopTimer, _ change: (RunLoopTimer) -> Void) -> Bool {
        let (applied, wake) = lock.withLock { () -> (Bool, Bool) in
            let applied = timer.attachment.withLock { () -> Bool in
                guard timer.attachment.loopLocked === self else { return false }
                change(timer)
                return true
            }
            guard applied else { return (false, false) }
            repositionLocked(timer)
            var wake = false
            timer.forEachPlacement { placement in wake = wake || isSleeping(in: placement.mode) }
            return (true, wake)
        }
        if wake { wakeUp() }
        return applied
    }

    /// Brings every heap entry of the timer in line with its state.
    func repositionLocked(_ timer: RunLoopTimer) {
        let (fireDate, tolerance) = timer.attachment.withLock { (timer.fireDate, timer.toleranceNanoseconds) }
        let latest = fireDate.addingClamped(tolerance)
        timer.forEachPlacement { placement in
            placement.mode.timers.reschedule(slot: placement.slot, fireDate: fireDate, latest: latest)
        }
    }
}

extension Int64 {
    /// Addition that saturates instead of trapping (fire dates and deadlines reach the bounds for "never" and
    /// "long ago").
    func addingClamped(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// Subtraction that saturates instead of trapping.
    func subtractingClamped(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? (other < 0 ? .max : .min) : difference
    }
}
