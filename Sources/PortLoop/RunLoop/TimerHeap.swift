import CPortLoop

/// The timers of one mode, ordered by fire date: a 4-ary min-heap over a slot table.
///
/// Every timer in the mode owns a *slot* (its handle here, kept by the timer as a ``TimerPlacement``); the
/// heap holds the slots of the timers waiting to fire, a timer being fired has a slot but no heap node.
///
/// Why not swift-collections' `Heap`: a timer that is invalidated or given a new fire date must leave or
/// move inside the heap in O(log n), and the loop's sleep computation walks the timers due before a
/// deadline (tolerance batching); both need the positions, which `Heap` keeps private.
///
/// Why this layout: at 100,000 timers, sifting is the hot path and every pointer it follows is a cache
/// miss. The nodes carry their ordering keys inline and no references (moving them retains nothing), the
/// node positions live in a dense array of 32-bit integers, and four children per node halve the depth;
/// a sift touches contiguous memory only, never a timer object.
struct TimerHeap {
    /// A heap node: the ordering keys and the slot they belong to.
    private struct Node {
        var fireDate: Int64
        /// Tie-breaker among equal fire dates: the order the timers were (re)scheduled in, as CF's sorted
        /// insertion puts a timer after those with the same date.
        var sequence: UInt64
        var slot: Int32
    }

    private var nodes: [Node] = []
    /// Per slot: the timer (nil when the slot is free), its latest acceptable fire date (fire date plus
    /// tolerance) and its node's index in `nodes` (-1 when it is not in the heap).
    private var slotTimers: [RunLoopTimer?] = []
    private var slotLatest: [Int64] = []
    private var positions: [Int32] = []
    /// The first free slot, or -1; a free slot's `slotLatest` holds the next one. The list lives in the slot
    /// table itself so that freeing a slot allocates nothing (a growing array's reallocation makes glibc
    /// consolidate its free lists, which showed up as a tenth of the firing time at 100,000 timers).
    private var firstFreeSlot: Int32 = -1
    private var nextSequence: UInt64 = 0

    /// How many timers wait in the heap (not counting one being fired).
    var count: Int { nodes.count }
    var isEmpty: Bool { nodes.isEmpty }
    /// The earliest fire date in the heap.
    var firstFireDate: Int64? { nodes.first?.fireDate }
    /// Every timer holding a slot, in no particular order.
    var timers: [RunLoopTimer] { slotTimers.compactMap { $0 } }

    /// Gives the timer a slot and puts it in the heap; returns the slot.
    mutating func insert(_ timer: RunLoopTimer, fireDate: Int64, latest: Int64) -> Int32 {
        let slot: Int32
        if firstFreeSlot >= 0 {
            slot = firstFreeSlot
            firstFreeSlot = Int32(slotLatest[Int(slot)])
            slotTimers[Int(slot)] = timer
            slotLatest[Int(slot)] = latest
        } else {
            slot = Int32(slotTimers.count)
            slotTimers.append(timer)
            slotLatest.append(latest)
            positions.append(-1)
        }
        push(slot: slot, fireDate: fireDate)
        return slot
    }

    /// Takes the slot's timer out of the heap (if there) and frees the slot.
    mutating func remove(slot: Int32) {
        let position = Int(positions[Int(slot)])
        if position >= 0 { removeNode(at: position) }
        slotTimers[Int(slot)] = nil
        slotLatest[Int(slot)] = Int64(firstFreeSlot)
        firstFreeSlot = slot
    }

    /// Gives the slot's timer a new fire date and latest date: moves it in the heap, or puts it back in after
    /// it was popped.
    mutating func reschedule(slot: Int32, fireDate: Int64, latest: Int64) {
        slotLatest[Int(slot)] = latest
        let position = Int(positions[Int(slot)])
        if position >= 0 { removeNode(at: position) }
        push(slot: slot, fireDate: fireDate)
    }

    /// A mark of the scheduling order so far: the timers (re)scheduled after it carry later sequences.
    var schedulingMark: UInt64 { nextSequence }

    /// Pops, in order, up to `limit` timers that are due by `now` and were scheduled up to `mark` into `due`.
    /// The timer objects are fetched from memory all at once before they are retained, so that their cache
    /// misses (one per timer, at random addresses) overlap instead of coming one after another.
    mutating func popDue(by now: Int64, scheduledUpTo mark: UInt64, limit: Int, into due: inout [RunLoopTimer],
                         slots: inout [Int32]) {
        slots.removeAll(keepingCapacity: true)
        while slots.count < limit, let first = nodes.first, first.fireDate <= now, first.sequence <= mark {
            removeNode(at: 0)
            slots.append(first.slot)
        }
        guard !slots.isEmpty else { return }
        slotTimers.withUnsafeBufferPointer { timers in
            let raw = UnsafeRawPointer(timers.baseAddress!)
            for slot in slots {
                if let object = raw.load(fromByteOffset: Int(slot) &* MemoryLayout<RunLoopTimer?>.stride,
                                         as: UnsafeRawPointer?.self) {
                    pl_prefetch(object)
                }
            }
        }
        for slot in slots { due.append(slotTimers[Int(slot)]!) }
    }

    /// Pops the earliest timer if it is due by `now`; its slot stays its own until ``remove(slot:)``.
    mutating func popFirst(dueBy now: Int64) -> RunLoopTimer? {
        guard let first = nodes.first, first.fireDate <= now else { return nil }
        removeNode(at: 0)
        return slotTimers[Int(first.slot)]
    }

    /// When the loop must wake so that every timer fires within its tolerance, batching the others: the
    /// smallest `latest` among the timers whose fire date is not after that very moment (CF's
    /// `__CFArmNextTimerInMode`). Subtrees whose root fires later than the answer so far are skipped.
    func wakeDeadline() -> Int64? {
        guard let first = nodes.first else { return nil }
        var deadline = slotLatest[Int(first.slot)]
        narrow(&deadline, from: 0)
        return deadline
    }

    private func narrow(_ deadline: inout Int64, from index: Int) {
        let node = nodes[index]
        guard node.fireDate <= deadline else { return }
        deadline = min(deadline, slotLatest[Int(node.slot)])
        let firstChild = 4 * index + 1
        guard firstChild < nodes.count else { return }
        for child in firstChild..<min(firstChild + 4, nodes.count) { narrow(&deadline, from: child) }
    }

    // MARK: - Heap mechanics

    @inline(__always)
    private static func precedes(_ a: Node, _ b: Node) -> Bool {
        a.fireDate != b.fireDate ? a.fireDate < b.fireDate : a.sequence < b.sequence
    }

    private mutating func push(slot: Int32, fireDate: Int64) {
        nextSequence &+= 1
        nodes.append(Node(fireDate: fireDate, sequence: nextSequence, slot: slot))
        siftUp(nodes[nodes.count - 1], from: nodes.count - 1)
    }

    private mutating func removeNode(at index: Int) {
        positions[Int(nodes[index].slot)] = -1
        let last = nodes.removeLast()
        guard index < nodes.count else { return }
        // Put the last node in the hole, then move it whichever way restores the order.
        if index > 0, Self.precedes(last, nodes[(index - 1) / 4]) {
            siftUp(last, from: index)
        } else {
            siftDown(last, from: index)
        }
    }

    /// Moves `node` up from the hole at `start`, shifting parents down, and writes it where it belongs.
    private mutating func siftUp(_ node: Node, from start: Int) {
        var hole = start
        while hole > 0 {
            let parent = (hole - 1) / 4
            guard Self.precedes(node, nodes[parent]) else { break }
            place(nodes[parent], at: hole)
            hole = parent
        }
        place(node, at: hole)
    }

    /// Moves `node` down from the hole at `start`, shifting the earliest child up at each level.
    private mutating func siftDown(_ node: Node, from start: Int) {
        var hole = start
        let count = nodes.count
        while true {
            let firstChild = 4 * hole + 1
            guard firstChild < count else { break }
            var best = firstChild
            for child in firstChild + 1..<min(firstChild + 4, count) where Self.precedes(nodes[child], nodes[best]) {
                best = child
            }
            guard Self.precedes(nodes[best], node) else { break }
            place(nodes[best], at: hole)
            hole = best
        }
        place(node, at: hole)
    }

    @inline(__always)
    private mutating func place(_ node: Node, at index: Int) {
        nodes[index] = node
        positions[Int(node.slot)] = Int32(index)
    }
}

/// Where a timer sits in one mode: the mode and its slot in that mode's heap. Kept by the timer, guarded by
/// the lock of the loop it is attached to; the mode outlives it (a loop drops its modes only at teardown,
/// which clears every placement first).
struct TimerPlacement {
    unowned(unsafe) let mode: LoopMode
    let slot: Int32
}
