import CPortLoop

/// The timers of one mode, ordered by fire date: a small 8-ary min-heap of the earliest ones over
/// ``TimerBuckets`` of the later ones, and a slot table.
///
/// Every timer in the mode owns a *slot* (its handle here, kept by the timer as a ``TimerPlacement``). A
/// timer waiting to fire has a node, either in the *near heap* or in a bucket; a timer being fired has a slot
/// but no node. Every node in the near heap fires before every node in the buckets: the heap holds the bucket
/// keys up to `nearKey`, the buckets the later ones. When the heap empties, the earliest bucket moves in whole.
///
/// Why not swift-collections' `Heap`: a timer that is invalidated or given a new fire date must leave or
/// move inside the heap in O(log n), and the loop's sleep computation walks the timers due before a
/// deadline (tolerance batching); both need the positions, which `Heap` keeps private.
///
/// Why this layout: at 100,000 timers every cache line a pop touches in a heap of them all is a miss; the near
/// heap holds about a millisecond of timers, and a bucket's timers move in with one pass over its array. The
/// nodes are 16 bytes with their ordering keys inline and no references (moving them retains nothing), the
/// slot table keeps each slot's timer, latest date and location in one 32-byte entry, and eight children per
/// node make the heap a third as deep as a binary one. The node buffer is aligned so that the eight children
/// of a node fill one aligned 128-byte pair of cache lines (fetched together by the adjacent-line prefetcher).
struct TimerHeap: ~Copyable { // its node buffer is a reference: a copy would share it
    /// A heap node: the ordering keys and the slot they belong to.
    struct Node {
        var fireDate: Int64
        /// Tie-breaker among equal fire dates: the order the timers were (re)scheduled in, as CF's sorted
        /// insertion puts a timer after those with the same date. 32 bits keep the node at 16 bytes; when
        /// they run out the heap renumbers its nodes in order (once per four billion schedulings).
        var sequence: UInt32
        var slot: Int32
    }

    /// Where a slot's node is: `container` is ``nearHeap`` (`index` in the near heap), a bucket id (`index`
    /// in that bucket), or ``outside`` (being fired; or the slot is free, and `index` is the next free slot).
    struct Location {
        var container: Int32
        var index: Int32

        static let nearHeap: Int32 = -1
        static let outside: Int32 = -2
        static let notScheduled = Location(container: outside, index: -1)
    }

    private var nodes = TimerNodeBuffer()
    private var buckets = TimerBuckets()
    /// The latest bucket key the near heap takes; later keys go to the buckets.
    private var nearKey = Int64.min
    /// A bucket's nodes on their way into the near heap (kept for its storage).
    private var arriving: [Node] = []
    /// What the heap keeps per slot, together so that a timer's turn touches one cache line of the slot table,
    /// not one in each of three arrays (at 100,000 timers they are all misses, most of all when the loop comes
    /// back from a long sleep).
    struct Slot {
        /// The timer; nil when the slot is free.
        var timer: RunLoopTimer?
        /// Its latest acceptable fire date (fire date plus tolerance).
        var latest: Int64
        /// Where its node is.
        var location: Location
        /// Makes the stride 32 bytes, so that no slot straddles two cache lines.
        private var padding: Int64 = 0

        init(timer: RunLoopTimer?, latest: Int64, location: Location) {
            self.timer = timer
            self.latest = latest
            self.location = location
        }
    }

    private var slots: [Slot] = []
    /// The first free slot, or -1; a free slot's location holds the next one (no node refers to a free slot).
    /// The list lives in the slot table itself so that freeing a slot allocates nothing (a growing array's
    /// reallocation makes glibc consolidate its free lists, which showed up as a tenth of the firing time at
    /// 100,000 timers), and in the slot's location because popping the timer touched that entry just before.
    private var firstFreeSlot: Int32 = -1
    private var nextSequence: UInt32 = 0
    /// The last sequence handed out before the nodes are renumbered; lowered by tests.
    var sequenceLimit = UInt32.max
    /// A near heap this small gives back its later nodes when an earlier timer is scheduled (so that one
    /// far-off timer, alone in the heap, does not make the heap take every timer before it).
    static let evictionLimit = 16

    /// How many timers wait to fire (not counting one being fired).
    var count: Int { nodes.count + buckets.count }
    var isEmpty: Bool { nodes.isEmpty } // the near heap is refilled whenever it empties
    /// How many nodes the near heap holds (the rest wait in buckets); for tests.
    var nearHeapCount: Int { nodes.count }
    /// How many keys the buckets' key heap holds, stale ones included; for tests.
    var bucketKeyCount: Int { buckets.keyCount }
    /// The earliest fire date.
    var firstFireDate: Int64? { nodes.isEmpty ? nil : nodes[0].fireDate }
    /// Every timer holding a slot, in no particular order.
    var timers: [RunLoopTimer] { slots.compactMap(\.timer) }

    /// Gives the timer a slot and schedules it; returns the slot.
    mutating func insert(_ timer: RunLoopTimer, fireDate: Int64, latest: Int64) -> Int32 {
        let slot: Int32
        if firstFreeSlot >= 0 {
            slot = firstFreeSlot
            firstFreeSlot = slots[Int(slot)].location.index
            slots[Int(slot)] = Slot(timer: timer, latest: latest, location: .notScheduled)
        } else {
            slot = Int32(slots.count)
            slots.append(Slot(timer: timer, latest: latest, location: .notScheduled))
        }
        schedule(slot: slot, fireDate: fireDate)
        return slot
    }

    /// Unschedules the slot's timer (if scheduled) and frees the slot.
    mutating func remove(slot: Int32) {
        unschedule(slot: slot)
        slots[Int(slot)].timer = nil
        slots[Int(slot)].location = Location(container: Location.outside, index: firstFreeSlot)
        firstFreeSlot = slot
    }

    /// Gives the slot's timer a new fire date and latest date: moves it, or schedules it again after it was
    /// popped.
    mutating func reschedule(slot: Int32, fireDate: Int64, latest: Int64) {
        slots[Int(slot)].latest = latest
        unschedule(slot: slot)
        schedule(slot: slot, fireDate: fireDate)
    }

    /// A mark of the scheduling order so far: the timers (re)scheduled after it carry later sequences.
    var schedulingMark: UInt32 { nextSequence }

    /// Pops, in order, up to `limit` timers that are due by `now` and were scheduled up to `mark` into `due`.
    /// Each popped timer's object is prefetched as it is popped, so that its cache miss (one per timer, at a
    /// random address) overlaps the next pops instead of stalling the retain that follows; and so is the slot
    /// entry of the new root, which the next pop writes and reads that timer's address from.
    mutating func popDue(by now: Int64, scheduledUpTo mark: UInt32, limit: Int, into due: inout [RunLoopTimer],
                         slots: inout [Int32]) {
        slots.removeAll(keepingCapacity: true)
        while slots.count < limit, let first = nodes.first, first.fireDate <= now, first.sequence <= mark {
            removeNode(at: 0)
            prefetchTimer(in: first.slot)
            slots.append(first.slot)
            // The next root's slot entry: the next pop writes it and reads its timer from it.
            if let next = nodes.first { prefetchSlot(next.slot) }
        }
        for slot in slots { due.append(self.slots[Int(slot)].timer!) }
    }

    /// Starts loading the slot's entry of the slot table.
    @inline(__always)
    private func prefetchSlot(_ slot: Int32) {
        slots.withUnsafeBufferPointer { slots in pl_prefetch(UnsafeRawPointer(slots.baseAddress! + Int(slot))) }
    }

    /// Starts loading the first two cache lines of the slot's timer, without retaining it.
    @inline(__always)
    private func prefetchTimer(in slot: Int32) {
        slots.withUnsafeBufferPointer { slots in
            let raw = UnsafeRawPointer(slots.baseAddress!) + Int(slot) &* MemoryLayout<Slot>.stride
                + MemoryLayout<Slot>.offset(of: \Slot.timer)!
            if let object = raw.load(as: UnsafeRawPointer?.self) {
                pl_prefetch(object)
                pl_prefetch(object + 64)
            }
        }
    }

    /// When the loop must wake so that every timer fires within its tolerance, batching the others: the
    /// smallest `latest` among the timers whose fire date is not after that very moment (CF's
    /// `__CFArmNextTimerInMode`). The near heap is walked first, skipping subtrees whose root fires later than
    /// the answer so far; then the buckets that start before the answer (none, unless the near heap's timers
    /// all have tolerances reaching past it) move into the near heap, their timers narrowing it as they come.
    /// Visiting timers out of fire order gives the same answer: one that fires after the final answer has a
    /// `latest` after it too.
    mutating func wakeDeadline() -> Int64? {
        guard let first = nodes.first else { return nil }
        var deadline = slots[Int(first.slot)].latest
        narrow(&deadline, from: 0)
        while moveInFirstBucket(upTo: TimerBuckets.key(of: deadline)) {
            for node in arriving where node.fireDate <= deadline {
                deadline = min(deadline, slots[Int(node.slot)].latest)
            }
        }
        return deadline
    }

    private func narrow(_ deadline: inout Int64, from index: Int) {
        let node = nodes[index]
        guard node.fireDate <= deadline else { return }
        deadline = min(deadline, slots[Int(node.slot)].latest)
        let firstChild = Self.arity * index + 1
        guard firstChild < nodes.count else { return }
        for child in firstChild..<min(firstChild + Self.arity, nodes.count) { narrow(&deadline, from: child) }
    }

    // MARK: - Near heap and buckets

    /// Gives the slot a new sequence and a node in the near heap or a bucket.
    private mutating func schedule(slot: Int32, fireDate: Int64) {
        if nextSequence >= sequenceLimit { renumber() }
        nextSequence += 1
        let node = Node(fireDate: fireDate, sequence: nextSequence, slot: slot)
        let key = TimerBuckets.key(of: fireDate)
        if nodes.isEmpty {
            assert(buckets.isEmpty, "the near heap is refilled whenever it empties")
            nearKey = key
        } else if key > nearKey {
            let (bucket, index) = buckets.append(node, key: key)
            slots[Int(slot)].location = Location(container: bucket, index: index)
            return
        } else if key < nearKey && nodes.count <= Self.evictionLimit {
            evict(after: key)
        }
        nodes.append(node)
        siftUp(node, from: nodes.count - 1)
    }

    /// Takes the slot's node out of the near heap or its bucket, if it has one.
    private mutating func unschedule(slot: Int32) {
        let location = slots[Int(slot)].location
        switch location.container {
        case Location.outside:
            return
        case Location.nearHeap:
            removeNode(at: Int(location.index))
        default:
            if let moved = buckets.remove(bucket: location.container, index: location.index) {
                slots[Int(moved.slot)].location = location
            }
            slots[Int(slot)].location = .notScheduled
        }
    }

    /// Moves the near heap's nodes with keys after `key` to the buckets and makes `key` the near heap's last.
    private mutating func evict(after key: Int64) {
        var kept = 0
        for index in 0..<nodes.count {
            let node = nodes[index]
            let nodeKey = TimerBuckets.key(of: node.fireDate)
            if nodeKey > key {
                let (bucket, bucketIndex) = buckets.append(node, key: nodeKey)
                slots[Int(node.slot)].location = Location(container: bucket, index: bucketIndex)
            } else {
                nodes[kept] = node
                kept += 1
            }
        }
        nodes.truncate(to: kept)
        nearKey = key
        heapify()
    }

    /// Moves the earliest bucket into the near heap if its key is at most `limit`; false if there is none. Its
    /// nodes stay readable in `arriving` until the next move.
    @discardableResult
    private mutating func moveInFirstBucket(upTo limit: Int64 = .max) -> Bool {
        guard let key = buckets.takeFirst(upTo: limit, into: &arriving) else { return false }
        nearKey = key
        takeArriving()
        return true
    }

    /// Adds a bucket's nodes, all later than the near heap's, to the heap.
    private mutating func takeArriving() {
        if nodes.isEmpty {
            for node in arriving { nodes.append(node) }
            heapify()
        } else {
            for node in arriving {
                nodes.append(node)
                siftUp(node, from: nodes.count - 1)
            }
        }
    }

    // MARK: - Heap mechanics

    /// Children per node.
    static let arity = 8

    @inline(__always)
    private static func precedes(_ a: Node, _ b: Node) -> Bool {
        a.fireDate != b.fireDate ? a.fireDate < b.fireDate : a.sequence < b.sequence
    }

    /// Orders the near heap's nodes as a heap, wherever they are (Floyd's bottom-up construction).
    private mutating func heapify() {
        for index in 0..<nodes.count {
            slots[Int(nodes[index].slot)].location = Location(container: Location.nearHeap, index: Int32(index))
        }
        guard nodes.count > 1 else { return }
        for index in stride(from: (nodes.count - 2) / Self.arity, through: 0, by: -1) {
            siftDown(nodes[index], from: index)
        }
    }

    /// Gives the nodes the sequences 1...count in their pop order. Sorted, they form a valid heap as they are.
    /// (A scheduling mark taken before counts every node as scheduled before it: at worst a timer scheduled
    /// during that pass fires in it rather than in the next one.) Every bucket moves into the near heap first:
    /// sequences are compared across all of them; the buckets fill again as timers are scheduled.
    private mutating func renumber() {
        while moveInFirstBucket() {}
        var sorted = (0..<nodes.count).map { nodes[$0] }
        sorted.sort(by: Self.precedes)
        for (index, node) in sorted.enumerated() {
            place(Node(fireDate: node.fireDate, sequence: UInt32(index + 1), slot: node.slot), at: index)
        }
        nextSequence = UInt32(sorted.count)
    }

    /// Removes the node at `index` of the near heap, refilling the heap from the buckets if it empties.
    private mutating func removeNode(at index: Int) {
        slots[Int(nodes[index].slot)].location = .notScheduled
        let last = nodes.removeLast()
        guard index < nodes.count else {
            if nodes.isEmpty { moveInFirstBucket() } // refill from the buckets
            return
        }
        // Put the last node in the hole, then move it whichever way restores the order.
        if index > 0, Self.precedes(last, nodes[(index - 1) / Self.arity]) {
            siftUp(last, from: index)
        } else {
            siftDown(last, from: index)
        }
    }

    /// Moves `node` up from the hole at `start`, shifting parents down, and writes it where it belongs.
    private mutating func siftUp(_ node: Node, from start: Int) {
        var hole = start
        while hole > 0 {
            let parent = (hole - 1) / Self.arity
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
            let firstChild = Self.arity * hole + 1
            guard firstChild < count else { break }
            var best = firstChild
            for child in firstChild + 1..<min(firstChild + Self.arity, count) where Self.precedes(nodes[child], nodes[best]) {
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
        slots[Int(node.slot)].location = Location(container: Location.nearHeap, index: Int32(index))
    }
}

/// Where a timer sits in one mode: the mode and its slot in that mode's heap. Kept by the timer, guarded by
/// the lock of the loop it is attached to; the mode outlives it (a loop drops its modes only at teardown,
/// which clears every placement first).
struct TimerPlacement {
    unowned(unsafe) let mode: LoopMode
    let slot: Int32
}

/// The heap's node storage: a buffer aligned so that node `i` sits at element `i + 7` and the children of
/// every node (`8i + 1 ... 8i + 8`) fill exactly one aligned 128-byte block. Grows by doubling, never shrinks
/// (a loop that once held many timers may again).
final class TimerNodeBuffer {
    private static let padding = TimerHeap.arity - 1
    private static let lineSize = TimerHeap.arity * MemoryLayout<TimerHeap.Node>.stride
    private var base: UnsafeMutablePointer<TimerHeap.Node>
    private var capacity: Int
    private(set) var count = 0

    init() {
        capacity = 9 // the root and its children
        base = Self.allocate(capacity)
    }

    deinit { UnsafeMutableRawPointer(base).deallocate() }

    private static func allocate(_ capacity: Int) -> UnsafeMutablePointer<TimerHeap.Node> {
        UnsafeMutableRawPointer.allocate(byteCount: (capacity + padding) * MemoryLayout<TimerHeap.Node>.stride,
                                         alignment: lineSize)
            .bindMemory(to: TimerHeap.Node.self, capacity: capacity + padding)
    }

    var isEmpty: Bool { count == 0 }
    var first: TimerHeap.Node? { count == 0 ? nil : base[Self.padding] }

    subscript(index: Int) -> TimerHeap.Node {
        @inline(__always) get {
            assert(index >= 0 && index < count)
            return base[index + Self.padding]
        }
        @inline(__always) set {
            assert(index >= 0 && index < count)
            base[index + Self.padding] = newValue
        }
    }

    func append(_ node: TimerHeap.Node) {
        if count == capacity {
            let grown = Self.allocate(capacity * 2)
            (grown + Self.padding).initialize(from: base + Self.padding, count: count)
            UnsafeMutableRawPointer(base).deallocate()
            base = grown
            capacity *= 2
        }
        (base + Self.padding + count).initialize(to: node)
        count += 1
    }

    func removeLast() -> TimerHeap.Node {
        count -= 1
        return base[count + Self.padding]
    }

    /// Drops the nodes from `newCount` on.
    func truncate(to newCount: Int) {
        precondition(newCount >= 0 && newCount <= count)
        count = newCount
    }
}

/// One chunk of due timers being fired (`PortRunLoop.fireDueTimers`): the timers, their heap slots when
/// popped, and what each firing left for the heaps to do.
struct TimerBatch {
    var timers: [RunLoopTimer] = []
    var slots: [Int32] = []
    var outcomes: [PortRunLoop.TimerOutcome] = []

    mutating func reserve(_ capacity: Int) {
        timers.reserveCapacity(capacity)
        slots.reserveCapacity(capacity)
        outcomes.reserveCapacity(capacity)
    }

    mutating func removeAll() {
        timers.removeAll(keepingCapacity: true)
        slots.removeAll(keepingCapacity: true)
        outcomes.removeAll(keepingCapacity: true)
    }
}
