import CPortLoop
import Synchronization

/// The state of one mode of one loop (CF's `__CFRunLoopMode`). Guarded by the loop's lock.
///
/// Its stored properties skip the run-time exclusivity checks (`@exclusivity(unchecked)`): the loop's lock, or
/// its thread, keeps every access apart already, and the checks were a tenth of a loop pass's instructions.
///
/// Its port set holds the loop's wake-up port, the port of every Source1 in the mode and the descriptor of every
/// descriptor source: sleeping in this mode is a receive on that set, with a timeout for the earliest timer.
final class LoopMode {
    let name: PortRunLoop.Mode
    let portSet: PortSet
    @exclusivity(unchecked) var sources0: [RunLoopSource] = [] {
        didSet {
            hasSources0.store(!sources0.isEmpty, ordering: .relaxed)
            noteItemsChanged()
        }
    }
    /// Whether `sources0` is not empty, readable without the loop's lock: a pass of a mode without version-0
    /// sources skips the lock for them.
    let hasSources0 = Atomic<Bool>(false)
    @exclusivity(unchecked) var sources1: [PortName: RunLoopPortSource] = [:] {
        didSet {
            sourcesGeneration.add(1, ordering: .releasing)
            noteItemsChanged()
        }
    }
    /// Changes whenever `sources1` does, readable without the loop's lock: a batch of messages from one port
    /// looks its source up once, and the lookup stands while this has not changed.
    let sourcesGeneration = Atomic<UInt64>(0)
    /// Descriptor sources by descriptor; the port set watches each descriptor once.
    @exclusivity(unchecked) var descriptorSources: [Int32: RunLoopDescriptorSource] = [:] {
        didSet { noteItemsChanged() }
    }
    @exclusivity(unchecked) var observers: [RunLoopObserver] = [] {
        didSet { observedActivities.store(observers.reduce(0) { $0 | $1.activities.rawValue }, ordering: .relaxed) }
    }
    /// The activities the mode's observers watch, together; kept with `observers` and readable without the
    /// loop's lock, so that a pass skips the lock for an activity nobody observes. (An observer added while a
    /// pass runs may miss that pass, as it may under the lock.)
    let observedActivities = Atomic<UInt>(0)
    @exclusivity(unchecked) var timers = TimerHeap() {
        didSet {
            firstFireDate.store(timers.firstFireDate ?? .max, ordering: .releasing)
            noteItemsChanged()
        }
    }
    /// The earliest timer's fire date (`.max` for none), kept with `timers` and readable without the loop's lock:
    /// most passes have no timer due, and find it out with no lock round.
    let firstFireDate = Atomic<Int64>(.max)
    /// Whether the mode holds a source or a timer, kept with them and readable without the loop's lock: the end of
    /// a pass takes the lock to ask whether the mode has become empty only when this says it may have.
    let hasSourcesOrTimers = Atomic<Bool>(false)
    /// The source the last message of a run in this mode was performed by, kept from pass to pass: while the
    /// mode's `sourcesGeneration` stands, a message from the same port needs no lookup under the lock. Used by the
    /// loop's thread only; let go when a generation passes it by or the last run in the mode ends, so that it
    /// never keeps a source (and its port) alive longer than `departedSources1` would.
    @exclusivity(unchecked) var lastLookup: PortRunLoop.SourceLookup?
    /// Whether libdispatch's main-queue eventfd is in the port set (main loop only, main thread only).
    @exclusivity(unchecked) var holdsMainQueue = false
    /// How many runs of the loop are in this mode now (nested runs included).
    @exclusivity(unchecked) var activeRuns = 0
    /// Port sources removed from the mode while a run was in it, kept until no message taken by such a run can
    /// still be in the loop thread's hands: a message received just before its source left goes back to the
    /// source's port (``PortRunLoop`` handles each message exactly once), and this keeps that port alive
    /// until then. Emptied when the outermost run in the mode sleeps again, or ends.
    @exclusivity(unchecked) var departedSources1: [PortName: RunLoopPortSource] = [:]

    init(name: PortRunLoop.Mode, wakeUpPort: borrowing PortReceiveRight) throws(PortError) {
        self.name = name
        portSet = try PortSet()
        try portSet.insert(wakeUpPort)
    }

    /// Empties ``departedSources1``, returning what it held (nil for nothing) for the caller to release outside the
    /// loop's lock.
    func takeDepartedSources() -> [PortName: RunLoopPortSource]? {
        guard !departedSources1.isEmpty else { return nil } // most sleeps: no empty dictionary made and dropped
        defer { departedSources1 = [:] }
        return departedSources1
    }

    /// True when nothing in the mode can make a run do anything: no Source0, Source1 (port or descriptor) or
    /// timer. (Pending blocks are counted by the loop, which owns the block queue.)
    var hasNoSourcesOrTimers: Bool {
        sources0.isEmpty && sources1.isEmpty && descriptorSources.isEmpty && timers.isEmpty
    }

    private func noteItemsChanged() {
        hasSourcesOrTimers.store(!hasNoSourcesOrTimers, ordering: .releasing)
    }

    /// Lets go of ``lastLookup`` if its source may have left the mode since; on the loop's thread, without the
    /// loop's lock (letting go of a source may destroy its port).
    func dropStaleLookup() {
        if let generation = lastLookup?.generation, generation != sourcesGeneration.load(ordering: .acquiring) {
            lastLookup = nil
        }
    }

    /// Inserts an observer after those of lower or equal order (CF: ascending order, insertion order among equals).
    func insertObserver(_ observer: RunLoopObserver) {
        let index = observers.firstIndex { $0.order > observer.order } ?? observers.endIndex
        observers.insert(observer, at: index)
    }
}
