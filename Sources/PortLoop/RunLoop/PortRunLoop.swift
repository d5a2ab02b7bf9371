import CPortLoop
import DequeModule
import Logging
import Synchronization

/// A run loop on PortLoop's ports (`CFRunLoop`): one per thread, with modes, version-0 and version-1
/// sources, timers, observers and blocks.
///
/// A loop is *run* only by its own thread (``run(mode:timeout:returnAfterSourceHandled:)``); everything else
/// (adding and removing items, ``stop()``, ``wakeUp()``, ``perform(inModes:_:)``, signalling sources) is safe
/// from any thread. While it sleeps, a loop is blocked in a receive on the current mode's port set, which
/// holds its wake-up port and its Source1 ports, with a timeout for the mode's earliest timer.
///
/// ```swift
/// let loop = PortRunLoop.current
/// let timer = RunLoopTimer(after: .milliseconds(50)) { _ in print("fired") }
/// try loop.add(timer, mode: .default)
/// loop.run() // returns when the mode has nothing left: the one-shot timer fired
/// ```
public final class PortRunLoop: @unchecked Sendable {
    /// The kernel id of the loop's thread.
    let threadID: Int32
    /// Whether this is the process's main loop (`CFRunLoopGetMain`); fixed at creation, so that passes
    /// make no getpid call.
    let isMainLoop: Bool
    /// Guards everything below that is not otherwise marked. The stored properties it guards, and those only the
    /// loop's thread touches, skip the run-time exclusivity checks (`@exclusivity(unchecked)`): the lock or the
    /// thread keeps every access apart already, and the checks were a tenth of a loop pass's instructions.
    let lock = PThreadLock()

    /// A queue-limit-1 port in every mode's set: a send wakes the loop, and a second send while one is
    /// pending is dropped (CF's `_wakeUpPort`). Destroyed with the loop object.
    let wakeUpPort: PortReceiveRight
    let wakeUpPortName: PortName
    let wakeUpSender: PortSendRight

    @exclusivity(unchecked) var modes: [Mode: LoopMode] = [:]
    @exclusivity(unchecked) var commonModes: Set<Mode> = [.default]
    @exclusivity(unchecked) var commonItems: [LoopItem] = []
    @exclusivity(unchecked) var blocks = Deque<PendingBlock>()
    /// Whether `blocks` may hold something: set with the lock when a block is queued, cleared with it when
    /// the queue is taken; read without the lock by each pass's block points.
    let blocksPending = Atomic<Bool>(false)
    /// Whether a wake-up sent by ``performAndWakeUp(inModes:_:)`` is on its way: set with the block that sent
    /// it, cleared when the loop takes the queued blocks.
    @exclusivity(unchecked) var wakeUpQueued = false
    /// The emptied block queue of the last pass, kept for its storage; used by the loop's thread only.
    @exclusivity(unchecked) var spareBlocks = Deque<PendingBlock>()
    @exclusivity(unchecked) var currentMode: LoopMode?
    @exclusivity(unchecked) var runDepth = 0
    @exclusivity(unchecked) var stopRequested = false {
        didSet { stopPending.store(stopRequested, ordering: .releasing) }
    }
    /// `stopRequested`, readable without the lock: a batch of messages checks it before each message.
    let stopPending = Atomic<Bool>(false)
    @exclusivity(unchecked) var threadExited = false
    /// The mode whose sleep is being prepared or taken (its `ObjectIdentifier`; 0 for none), so that adding a timer
    /// to it wakes the loop. Set with the lock, cleared without it; read with it (``isSleeping(in:)``).
    let sleepingModeID = Atomic<UInt>(0)

    /// Whether the loop's sleep in `state` is being prepared or taken. With the lock held.
    func isSleeping(in state: LoopMode) -> Bool {
        sleepingModeID.load(ordering: .acquiring) == UInt(bitPattern: ObjectIdentifier(state))
    }
    /// The batch of due timers ``fireDueTimers(_:)`` reuses between passes; used by the loop's thread only.
    @exclusivity(unchecked) var timerBatchScratch = TimerBatch()
    /// Delayed performs not yet run or cancelled (``perform(afterDelay:inModes:_:)``); has its own lock.
    let delayedPerforms = DelayedPerformTable()

    /// Whether the loop is asleep (`CFRunLoopIsWaiting`); readable without the lock.
    let waiting = Atomic<Bool>(false)
    /// How long the loop polls before it sleeps, in nanoseconds; see ``spinBeforeSleeping``.
    let spinNanoseconds = Atomic<Int64>(0)

    /// The longest ``spinBeforeSleeping`` allowed.
    public static let maxSpinBeforeSleeping = Duration.milliseconds(10)

    /// The opt-in low-latency mode: how long the loop keeps polling its port set before it goes to sleep
    /// (no CF equivalent). While it spins, a message reaches it without a wake-up system call on either side,
    /// from a thread of this process or, through a connection's shared-memory ring, from another process, at the
    /// price of a busy core for that long after each pass. Zero, the default, sleeps at once. Values are
    /// clamped to 0…``maxSpinBeforeSleeping``. Settable from any thread; takes effect at the next sleep.
    public var spinBeforeSleeping: Duration {
        get { .nanoseconds(spinNanoseconds.load(ordering: .relaxed)) }
        set {
            let limit = Self.maxSpinBeforeSleeping.nanosecondsClamped
            spinNanoseconds.store(min(max(0, newValue.nanosecondsClamped), limit), ordering: .relaxed)
        }
    }
    /// The receive buffer of the loop's innermost run (a nested run has its own while it lasts); touched only by
    /// the loop's thread.
    @exclusivity(unchecked) var receiveBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: receiveBufferSize, alignment: 16)
    /// A receive buffer's size. A larger message is not copied into one: its payload memory is handed over whole
    /// (``takenPayload``), so the buffer never grows.
    static let receiveBufferSize = 4096
    /// The payload memory of the message the innermost run received last, when it was larger than the receive
    /// buffer (empty otherwise): the memory the message came in, handed over (`pl_port_set_receive_queued_payload`),
    /// from which the handler's array is the one copy. Freed once the message is handled or put back; loop's thread
    /// only.
    @exclusivity(unchecked) var takenPayload = pl_payload_t()
    /// The payload array of the last message handled, taken back after its handler returned, for the next
    /// message's payload: a handler that does not keep its message's payload costs no allocation. A handler that
    /// keeps it shares the array, which the next message's write then leaves to it (arrays copy on write); a
    /// payload of another size gets an array of its own unless this one's room fits it (at most a quarter more than
    /// the payload and 32 bytes, so a kept payload never holds much more memory than it uses). Loop's thread only.
    @exclusivity(unchecked) var spareBytes: [UInt8] = []
    /// The largest payload whose array is kept as ``spareBytes`` (the size of a batch's buffer): beyond it, copying
    /// the bytes costs far more than the allocation, and a loop should not hold much memory while it sleeps.
    static let spareBytesLimit = 16_384
    /// The batch storage ``handleMessages`` lends itself while it runs, made at the first batch; loop's thread only.
    @exclusivity(unchecked) var batchStorage: MessageBatch?
    /// Whether a run's ``handleMessages`` holds `batchStorage`; loop's thread only.
    @exclusivity(unchecked) var messageBatchLent = false
    /// libdispatch's main-queue eventfd once looked up, and the main-queue servicing state; main thread only.
    @exclusivity(unchecked) var mainQueueHandle: Int32 = -1
    @exclusivity(unchecked) var servicingMainQueue = false
    @exclusivity(unchecked) var mainQueueServicedLastPass = false
    @exclusivity(unchecked) var mainQueueSkipThisPass = false

    /// Errors logged so far; lets tests check that misuse is reported exactly once.
    static let loggedErrors = Atomic<Int>(0)

    init(threadID: Int32) {
        self.threadID = threadID
        isMainLoop = threadID == mainThreadID()
        // Only out-of-range arguments or an allocation failure can make this throw; neither applies.
        let port = try! PortReceiveRight(queueLimit: 1, maxMessageSize: 1)
        wakeUpPortName = port.name
        wakeUpSender = port.makeSendRight()
        wakeUpPort = consume port
        // CF creates the default mode with the loop; the others come on demand.
        _ = try? lock.withLock { () throws(RunLoopError) in try modeLocked(.default) }
    }

    deinit {
        receiveBuffer.deallocate()
        pl_payload_free(&takenPayload)
        batchStorage?.deallocate()
    }

    /// The calling thread's run loop, created on first use (`CFRunLoopGetCurrent`).
    public static var current: PortRunLoop { LoopRegistry.current() }

    /// The run loop of the process's main thread, from any thread (`CFRunLoopGetMain`).
    public static var main: PortRunLoop { LoopRegistry.main() }

    /// Whether the calling thread is this loop's thread.
    public var isCurrent: Bool { currentThreadID() == threadID }

    /// Logs an error through ``PortLoopLogging/logger``.
    static func logError(_ message: Logger.Message) {
        loggedErrors.add(1, ordering: .relaxed)
        PortLoopLogging.logger.error(message)
    }

    /// Errors this loop logged about its own use; lets tests count without other tests' logs interfering.
    let errorsLogged = Atomic<Int>(0)

    /// Logs an error about this loop.
    func logError(_ message: Logger.Message) {
        errorsLogged.add(1, ordering: .relaxed)
        Self.logError(message)
    }

    // MARK: - Stop, wake up, state

    /// Ends the innermost run of the loop, from any thread (`CFRunLoopStop`). On a loop that is not running
    /// it does nothing.
    public func stop() {
        let running = lock.withLock { () -> Bool in
            guard runDepth > 0 else { return false }
            stopRequested = true
            return true
        }
        if running { wakeUp() }
    }

    /// Makes a sleeping loop pass once more (`CFRunLoopWakeUp`). Wake-ups are coalesced: while one is
    /// pending, more cost nothing. On a loop that is not running, its next run passes once more at once.
    public func wakeUp() {
        // A full wake-up port means a wake-up is pending already: that is success, as for CF's wake-up port.
        try? wakeUpSender.send(timeout: .poll)
    }

    /// Whether the loop is asleep waiting for something to happen (`CFRunLoopIsWaiting`).
    public var isWaiting: Bool { waiting.load(ordering: .acquiring) }

    /// The mode of the innermost run, or nil when the loop is not running (`CFRunLoopCopyCurrentMode`).
    public var currentModeName: Mode? { lock.withLock { currentMode?.name } }

    /// Every mode the loop has, in no particular order (`CFRunLoopCopyAllModes`).
    public var allModes: [Mode] { lock.withLock { Array(modes.keys) } }

    /// The modes marked common (`kCFRunLoopCommonModes`' members).
    public var commonModeNames: Set<Mode> { lock.withLock { commonModes } }

    /// Marks a mode common (`CFRunLoopAddCommonMode`): it receives every common mode item now and every one
    /// added later. Marking `.common` itself, or a mode already common, does nothing.
    public func addCommonMode(_ mode: Mode) throws(RunLoopError) {
        guard mode != .common else { return }
        let scheduled = try withLockThrowing { () throws(RunLoopError) -> [(RunLoopSource, Mode)] in
            guard !threadExited else { throw .threadExited }
            guard commonModes.insert(mode).inserted else { return [] }
            let state = try modeLocked(mode)
            var scheduled: [(RunLoopSource, Mode)] = []
            for item in commonItems where try insertLocked(item, into: state) {
                if case let .source(source) = item { scheduled.append((source, mode)) }
            }
            return scheduled
        }
        callScheduleCallouts(scheduled)
    }

    /// Runs `body` with the lock held; for bodies that throw a typed error.
    func withLockThrowing<Result>(_ body: () throws(RunLoopError) -> Result) throws(RunLoopError) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    /// The loop's state of a mode, created on demand. With the lock held.
    func modeLocked(_ name: Mode) throws(RunLoopError) -> LoopMode {
        if let state = modes[name] { return state }
        guard !threadExited else { throw .threadExited }
        let state: LoopMode
        do { state = try LoopMode(name: name, wakeUpPort: wakeUpPort) } catch { throw .portLayer(error) }
        modes[name] = state
        return state
    }

    /// Tears the loop down when its thread exits: every item leaves it (sources' cancel callbacks run),
    /// pending blocks are dropped, the port sets are destroyed. The wake-up port goes with the loop object.
    func threadDidExit() {
        var cancelled: [(RunLoopSource, Mode)] = []
        var items: [LoopItem] = []
        // Released after the lock: a dropped block's captures may run code that calls into this loop (a
        // waiter's sentinel, a deinit that stops a loop thread), which would deadlock under the lock.
        var droppedBlocks = Deque<PendingBlock>()
        lock.withLock {
            threadExited = true
            for (name, state) in modes {
                for source in state.sources0 { cancelled.append((source, name)); items.append(.source(source)) }
                items.append(contentsOf: state.sources1.values.map { .portSource($0) })
                items.append(contentsOf: state.descriptorSources.values.map { .descriptorSource($0) })
                for timer in state.timers.timers {
                    timer.clearPlacements()
                    items.append(.timer(timer))
                }
                items.append(contentsOf: state.observers.map { .observer($0) })
                try? state.portSet.destroy()
            }
            modes.removeAll()
            commonItems.removeAll()
            swap(&droppedBlocks, &blocks)
            blocksPending.store(false, ordering: .relaxed)
        }
        droppedBlocks.removeAll()
        for item in items { item.attachment.forgetLoop() }
        callCancelCallouts(cancelled)
        // Their timers left with the other items; drop their blocks now too, as pending blocks are dropped.
        _ = delayedPerforms.takeAll()
    }

    func callScheduleCallouts(_ list: [(RunLoopSource, Mode)]) {
        for (source, mode) in list {
            if let schedule = source.schedule { __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE0_SCHEDULE_FUNCTION__(schedule, self, mode) }
        }
    }

    func callCancelCallouts(_ list: [(RunLoopSource, Mode)]) {
        for (source, mode) in list {
            if let cancel = source.cancel { __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE0_CANCEL_FUNCTION__(cancel, self, mode) }
        }
    }
}

/// A block queued with ``PortRunLoop/perform(inModes:_:)``.
struct PendingBlock {
    /// The modes it may run in; nil for the common modes only, the default, which so costs no array (the
    /// shared default array's reference count would otherwise be touched by the producer and the loop
    /// thread for every block). Usually one or two names, compared faster than hashed.
    let modes: [PortRunLoop.Mode]?
    /// Whether `modes` holds `.common`, worked out once.
    let includesCommon: Bool
    let block: @Sendable () -> Void

    init(modes: [PortRunLoop.Mode], block: @escaping @Sendable () -> Void) {
        if modes.count == 1 && modes[0] == .common {
            self.modes = nil
            self.includesCommon = true
        } else {
            self.modes = modes
            self.includesCommon = modes.contains(.common)
        }
        self.block = block
    }
}

/// Storage for one batch of received messages: their headers, the small payloads packed together, and the
/// memory of the larger ones, taken over (`pl_port_set_receive_batch_taking`) and freed one by one as each
/// message is dealt with. A value of three pointers, so that lending it costs no reference counting; only its
/// owner calls ``deallocate()``: the loop's deinit for the loop's own, a nested run for the one it made.
struct MessageBatch {
    let headers = UnsafeMutableBufferPointer<pl_received_t>.allocate(capacity: PortRunLoop.messageBatch)
    let payloads = UnsafeMutableRawBufferPointer.allocate(byteCount: 16_384, alignment: 16)
    let taken = UnsafeMutableBufferPointer<pl_payload_t>.allocate(capacity: PortRunLoop.messageBatch)

    /// Where message `index`'s payload is: in memory of its own, or in `payloads`.
    func payload(at index: Int) -> UnsafeRawPointer {
        if let base = taken[index].base { return UnsafeRawPointer(base) }
        return UnsafeRawPointer(payloads.baseAddress! + Int(headers[index].offset))
    }

    /// Frees message `index`'s payload memory, if it was taken over.
    func release(at index: Int) {
        if taken[index].base != nil { pl_payload_free(&taken[index]) }
    }

    func deallocate() {
        headers.deallocate()
        payloads.deallocate()
        taken.deallocate()
    }
}
