import CPortLoop

/// The timers of one mode, ordered by fire date: the *near* timers (a sorted run and a small 8-ary min-heap)
/// over ``TimerBuckets`` of the later ones, and a slot table.
///
/// Every timer in the mode owns a *slot* (its handle here, kept by the timer as a ``TimerPlacement``). A
/// scheduled timer has a node, near or in a bucket, carrying the sequence its slot holds; a timer being fired
/// has a slot but no node. Every near node fires before every node in the buckets: the near timers hold the
/// bucket keys up to `nearKey`, the buckets the later ones. When the near timers run out, the earliest bucket
/// moves in whole, sorted, as the *run*, which is then popped from the front; timers scheduled into the near
/// range after that go into the heap. A pop takes the earlier of the run's first node and the heap's root.
///
/// Removal is lazy: taking a timer out (or moving it) only clears its slot's sequence, which leaves its node
/// *stale*, and a stale node is dropped when it comes to the front, or when stale nodes outnumber the live ones
/// (then every container is swept). The run's first node and the heap's root are always live, so the earliest
/// fire date is exact.
///
/// Why: at 100,000 timers, popping from a heap of one bucket's timers sifted through several levels of nodes
/// per pop, each level a comparison of eight children; and a heap that removes from the middle must know where
/// every node is, so each move wrote a slot entry, at a random place. Those were most of a firing's cost. A
/// bucket sorts in two passes of a radix sort over its array (its dates differ only in their low 20 bits, and
/// its nodes were appended in scheduling order, which a stable sort keeps for equal dates), and a pop from the
/// run reads the next node in order and can fetch the slot entries of the pops ahead.
///
/// Why not swift-collections' `Heap`: the loop's sleep computation walks the timers due before a deadline
/// (tolerance batching), which needs the heap's layout, and `Heap` keeps it private.
///
/// Why this layout: the nodes are 16 bytes with their ordering keys inline and no references (moving them
/// retains nothing), the slot table keeps each slot's timer, latest date and sequence in one 32-byte entry, and
/// eight children per node make the heap a third as deep as a binary one. The heap's node buffer is aligned so
/// that the eight children of a node fill one aligned 128-byte pair of cache lines (fetched together by the
/// adjacent-line prefetcher).
struct TimerHeap: ~Copyable { // its node buffer is a reference: a copy would share it
    /// A node: the ordering keys and the slot they belong to.
    struct Node {
        var fireDate: Int64
        /// Tie-breaker among equal fire dates: the order the timers were (re)scheduled in, as CF's sorted
        /// insertion puts a timer after those with the same date; also what makes the node its slot's current
        /// one. 32 bits keep the node at 16 bytes; when they run out the nodes are renumbered in order (once
        /// per four billion schedulings).
        var sequence: UInt32
        var slot: Int32
    }

    /// The near timers scheduled after the run formed.
    private var nodes = TimerNodeBuffer()
    /// The near timers of the last bucket(s) to move in, sorted; `run[runStart...]` are still to fire.
    private var run: [Node] = []
    private var runStart = 0
    private var buckets = TimerBuckets()
    /// The latest bucket key the near timers take; later keys go to the buckets.
    private var nearKey = Int64.min
    /// A bucket's nodes on their way in (kept for its storage).
    private var arriving: [Node] = []
    /// The radix sort's second array and its counts (kept for their storage).
    private var sortScratch: [Node] = []
    private var sortCounts: [Int] = []
    /// What the heap keeps per slot, together so that a timer's turn touches one cache line of the slot table,
    /// not one in each of three arrays (at 100,000 timers they are all misses, most of all when the loop comes
    /// back from a long sleep).
    struct Slot {
        /// The timer; nil when the slot is free.
        var timer: RunLoopTimer?
        /// Its latest acceptable fire date (fire date plus tolerance).
        var latest: Int64
        /// The sequence of its live node; 0 when it has none (being fired, or free).
        var sequence: UInt32 = 0
        /// The next free slot, or -1, while the slot is free.
        var nextFree: Int32 = -1
        /// Makes the stride 32 bytes, so that no slot straddles two cache lines.
        private var padding: Int64 = 0

        init(timer: RunLoopTimer?, latest: Int64) {
            self.timer = timer
            self.latest = latest
        }
    }

    private var slots: [Slot] = []
    /// The first free slot, or -1; a free slot's `nextFree` holds the next one (no live node refers to a free
    /// slot). The list lives in the slot table itself so that freeing a slot allocates nothing (a growing array's
    /// reallocation makes glibc consolidate its free lists, which showed up as a tenth of the firing time at
    /// 100,000 timers).
    private var firstFreeSlot: Int32 = -1
    private var nextSequence: UInt32 = 0
    /// How many slots have a live node.
    private var liveCount = 0
    /// The last sequence handed out before the nodes are renumbered; lowered by tests.
    var sequenceLimit = UInt32.max
    /// Near timers this few give back their later nodes when an earlier timer is scheduled (so that one
    /// far-off timer, alone near, does not make the near timers take every timer before it).
    static let evictionLimit = 16
    /// Stale nodes are swept once they outnumber the live ones by this many.
    static let staleAllowance = 64
    /// How many pops ahead a run's slot entries are fetched.
    static let slotLookahead = 8

    /// How many timers wait to fire (not counting one being fired).
    var count: Int { liveCount }
    /// Whether no timer waits (the near timers are refilled whenever they run out, and their fronts are live).
    var isEmpty: Bool { nodes.isEmpty && runStart == run.count }
    /// How many near nodes there are, stale ones included (the rest wait in buckets); for tests.
    var nearCount: Int { nodes.count + run.count - runStart }
    /// How many nodes there are, stale ones included; for tests.
    var nodeCount: Int { nearCount + buckets.count }
    /// How many nodes the sort's scratch array has room for; for tests.
    var sortRoom: Int { sortScratch.capacity }
    /// How many keys the buckets' key heap holds; for tests.
    var bucketKeyCount: Int { buckets.keyCount }
    /// The earliest fire date.
    var firstFireDate: Int64? { nearFirst?.fireDate }
    /// Every timer holding a slot, in no particular order.
    var timers: [RunLoopTimer] { slots.compactMap(\.timer) }

    /// Gives the timer a slot and schedules it; returns the slot.
    mutating func insert(_ timer: RunLoopTimer, fireDate: Int64, latest: Int64) -> Int32 {
        let slot: Int32
        if firstFreeSlot >= 0 {
            slot = firstFreeSlot
            firstFreeSlot = slots[Int(slot)].nextFree
            slots[Int(slot)] = Slot(timer: timer, latest: latest)
        } else {
            slot = Int32(slots.count)
            slots.append(Slot(timer: timer, latest: latest))
        }
        schedule(slot: slot, fireDate: fireDate)
        return slot
    }

    /// Unschedules the slot's timer (if scheduled) and frees the slot.
    mutating func remove(slot: Int32) {
        unschedule(slot: slot)
        slots[Int(slot)].timer = nil
        slots[Int(slot)].nextFree = firstFreeSlot
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

    /// Pops, in order, up to `limit` timers that are due by `now` and were scheduled up to `mark` into `due`,
    /// dropping the stale nodes on the way. The slot entries of the run's next nodes are fetched a few pops
    /// ahead, and each popped timer's object as it is popped, so that their cache misses (one each per timer, at
    /// random addresses) overlap the next pops instead of stalling.
    mutating func popDue(by now: Int64, scheduledUpTo mark: UInt32, limit: Int, into due: inout [RunLoopTimer],
                         slots popped: inout [Int32]) {
        popped.removeAll(keepingCapacity: true)
        while popped.count < limit, let first = nearFirst, first.fireDate <= now {
            // A node scheduled after the mark waits for the next pass, unless it is stale and hides due ones.
            if first.sequence > mark, isLive(first) { break }
            popNear()
            if runStart + Self.slotLookahead < run.count { prefetchSlot(run[runStart + Self.slotLookahead].slot) }
            if let next = nodes.first { prefetchSlot(next.slot) }
            guard isLive(first) else { continue }
            slots[Int(first.slot)].sequence = 0
            liveCount -= 1
            prefetchTimer(in: first.slot)
            popped.append(first.slot)
        }
        dropStaleFronts()
        for slot in popped { due.append(slots[Int(slot)].timer!) }
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
    /// `__CFArmNextTimerInMode`). The near timers are walked first (the run in order, the heap skipping subtrees
    /// whose root fires later than the answer so far); then the buckets that start before the answer (none,
    /// unless the near timers all have tolerances reaching past it) move in, their timers narrowing it as they
    /// come. Visiting timers out of fire order gives the same answer: one that fires after the final answer has
    /// a `latest` after it too.
    mutating func wakeDeadline() -> Int64? {
        guard let first = nearFirst else { return nil }
        var deadline = slots[Int(first.slot)].latest
        narrowOverRun(&deadline, from: runStart)
        if !nodes.isEmpty { narrow(&deadline, from: 0) }
        while let arrivalStart = moveInFirstBucket(upTo: TimerBuckets.key(of: deadline)) {
            narrowOverRun(&deadline, from: arrivalStart)
        }
        return deadline
    }

    private func narrowOverRun(_ deadline: inout Int64, from start: Int) {
        var index = start
        while index < run.count, run[index].fireDate <= deadline {
            if isLive(run[index]) { deadline = min(deadline, slots[Int(run[index].slot)].latest) }
            index += 1
        }
    }

    private func narrow(_ deadline: inout Int64, from index: Int) {
        let node = nodes[index]
        guard node.fireDate <= deadline else { return }
        if isLive(node) { deadline = min(deadline, slots[Int(node.slot)].latest) }
        let firstChild = Self.arity * index + 1
        guard firstChild < nodes.count else { return }
        for child in firstChild..<min(firstChild + Self.arity, nodes.count) { narrow(&deadline, from: child) }
    }

    // MARK: - Near timers and buckets

    /// Whether the node is its slot's current one.
    @inline(__always)
    private func isLive(_ node: Node) -> Bool { slots[Int(node.slot)].sequence == node.sequence }

    /// The first near node: the run's or the heap's, whichever fires first.
    @inline(__always)
    private var nearFirst: Node? {
        guard runStart < run.count else { return nodes.first }
        let fromRun = run[runStart]
        guard let fromHeap = nodes.first, Self.precedes(fromHeap, fromRun) else { return fromRun }
        return fromHeap
    }

    /// Gives the slot a new sequence and a node near or in a bucket.
    private mutating func schedule(slot: Int32, fireDate: Int64) {
        if nextSequence >= sequenceLimit { renumber() }
        nextSequence += 1
        let node = Node(fireDate: fireDate, sequence: nextSequence, slot: slot)
        slots[Int(slot)].sequence = nextSequence
        liveCount += 1
        let key = TimerBuckets.key(of: fireDate)
        if isEmpty {
            assert(buckets.isEmpty, "the near timers are refilled whenever they run out")
            nearKey = key
        } else if key > nearKey {
            putInBucket(node, key: key)
            return
        } else if key < nearKey && nearCount <= Self.evictionLimit {
            evict(after: key)
        }
        nodes.append(node)
        siftUp(node, from: nodes.count - 1)
    }

    /// Leaves the slot's node, if it has one, stale: dropped at once if it is at a front, later otherwise.
    private mutating func unschedule(slot: Int32) {
        guard slots[Int(slot)].sequence != 0 else { return }
        slots[Int(slot)].sequence = 0
        liveCount -= 1
        if nodeCount > 2 * liveCount + Self.staleAllowance {
            sweep()
        } else {
            dropStaleFronts()
        }
    }

    /// Drops stale nodes from the fronts of the run and the heap (refilling from the buckets) until both
    /// fronts are live or empty, and something is near unless every container is empty.
    private mutating func dropStaleFronts() {
        while true {
            if runStart < run.count, !isLive(run[runStart]) {
                advanceRun()
            } else if let root = nodes.first, !isLive(root) {
                popRoot()
            } else if isEmpty, moveInFirstBucket() != nil {
                continue
            } else {
                return
            }
        }
    }

    /// Drops every stale node: the run keeps its live nodes in order, the heap its live nodes (re-heaped),
    /// each bucket its own.
    private mutating func sweep() {
        var kept = 0
        for index in 0..<nodes.count where isLive(nodes[index]) {
            nodes[kept] = nodes[index]
            kept += 1
        }
        nodes.truncate(to: kept)
        heapify()
        let slots = self.slots
        run.removeSubrange(0..<runStart)
        runStart = 0
        run.removeAll { slots[Int($0.slot)].sequence != $0.sequence }
        buckets.removeAll { slots[Int($0.slot)].sequence != $0.sequence }
        if isEmpty { moveInFirstBucket() }
    }

    /// Puts a node in the bucket of `key`, with room made beforehand for sorting that bucket when it moves in.
    @inline(__always)
    private mutating func putInBucket(_ node: Node, key: Int64) {
        let count = buckets.append(node, key: key)
        if count > sortScratch.capacity { prepareSorting(count) }
    }

    /// Gives the radix sort its counts, and a scratch array with room for `count` nodes (twice the room it had, if
    /// that is more), while timers are being scheduled. A bucket moves in while the loop fires timers and frees
    /// them; an allocation of a kilobyte or more then makes glibc consolidate the free lists they have filled
    /// (a fifth of the firing time at 1,000,000 due timers, by `perf`).
    private mutating func prepareSorting(_ count: Int) {
        if sortCounts.isEmpty { sortCounts = [Int](repeating: 0, count: Self.sortRadix) }
        sortScratch.reserveCapacity(max(count, 2 * sortScratch.capacity))
    }

    /// Moves the near nodes with keys after `key` to the buckets (dropping stale ones) and makes `key` the
    /// near timers' last.
    private mutating func evict(after key: Int64) {
        var kept = 0
        for index in 0..<nodes.count {
            let node = nodes[index]
            let nodeKey = TimerBuckets.key(of: node.fireDate)
            if nodeKey <= key {
                nodes[kept] = node
                kept += 1
            } else if isLive(node) {
                putInBucket(node, key: nodeKey)
            }
        }
        nodes.truncate(to: kept)
        heapify()
        var runEnd = run.count // the run is sorted: what goes is a suffix
        while runEnd > runStart, TimerBuckets.key(of: run[runEnd - 1].fireDate) > key { runEnd -= 1 }
        for node in run[runEnd...] where isLive(node) {
            putInBucket(node, key: TimerBuckets.key(of: node.fireDate))
        }
        run.removeSubrange(runEnd...)
        nearKey = key
    }

    /// Moves the earliest bucket in, sorted, at the end of the run, if its key is at most `limit`; returns the
    /// index in the run where its nodes start, or nil if there is none that early.
    @discardableResult
    private mutating func moveInFirstBucket(upTo limit: Int64 = .max) -> Int? {
        guard let key = buckets.takeFirst(upTo: limit, into: &arriving) else { return nil }
        nearKey = key
        Self.sort(&arriving, scratch: &sortScratch, counts: &sortCounts)
        if runStart == run.count {
            run.removeAll(keepingCapacity: true)
            swap(&run, &arriving) // the two arrays trade storage
            runStart = 0
            return 0
        } else {
            // Every arriving node fires after every near one, so the run stays sorted. The fired part goes first
            // if it is most of the run.
            if runStart > run.count / 2 {
                run.removeSubrange(0..<runStart)
                runStart = 0
            }
            run.append(contentsOf: arriving)
        }
        return run.count - arriving.count
    }

    /// Takes the run's first node off.
    @inline(__always)
    private mutating func advanceRun() {
        runStart += 1
        if runStart == run.count {
            run.removeAll(keepingCapacity: true)
            runStart = 0
        }
    }

    /// Pops the first near node, refilling from the buckets if the near timers run out.
    private mutating func popNear() {
        if runStart < run.count, nodes.first.map({ !Self.precedes($0, run[runStart]) }) ?? true {
            advanceRun()
        } else {
            popRoot()
        }
        if isEmpty { moveInFirstBucket() }
    }

    // MARK: - Sorting a bucket

    /// Sorts nodes by fire date, then sequence: a stable least-significant-digit radix sort on the dates'
    /// offsets from the earliest when the nodes come in sequence order (as a bucket's nodes do, appended as
    /// they were scheduled), the standard library's sort otherwise.
    static func sort(_ nodes: inout [Node], scratch: inout [Node], counts: inout [Int]) {
        guard nodes.count > 1 else { return }
        var inSequence = true
        var earliest = nodes[0].fireDate
        var latest = earliest
        for index in 1..<nodes.count {
            let node = nodes[index]
            if node.sequence <= nodes[index - 1].sequence { inSequence = false }
            earliest = min(earliest, node.fireDate)
            latest = max(latest, node.fireDate)
        }
        let span = UInt64(bitPattern: latest &- earliest)
        guard inSequence, nodes.count >= 64, span < 1 << 44 else {
            nodes.sort(by: precedes)
            return
        }
        if counts.count < sortRadix { counts = [Int](repeating: 0, count: sortRadix) }
        if scratch.count < nodes.count {
            scratch.append(contentsOf: repeatElement(Node(fireDate: 0, sequence: 0, slot: 0),
                                                     count: nodes.count - scratch.count))
        }
        var shift: UInt64 = 0
        repeat { // the sorted nodes end up in `nodes`, whichever storage that is by then
            countingPass(from: &nodes, to: &scratch, earliest: earliest, shift: shift, counts: &counts)
            swap(&nodes, &scratch)
            shift += sortDigitBits
        } while span >> shift != 0
    }

    /// The radix sort's digit: 11 bits, so that a bucket's dates (20 bits apart at most) take two passes.
    static let sortDigitBits: UInt64 = 11
    static let sortRadix = 1 << sortDigitBits

    /// One stable pass of the radix sort: moves `source`'s nodes into `destination` (of at least the same
    /// count) ordered by the 11-bit digit at `shift` of their date's offset from `earliest`.
    private static func countingPass(from source: inout [Node], to destination: inout [Node], earliest: Int64,
                                     shift: UInt64, counts: inout [Int]) {
        let mask = UInt64(sortRadix - 1)
        let count = source.count
        source.withUnsafeBufferPointer { source in
            destination.withUnsafeMutableBufferPointer { destination in
                counts.withUnsafeMutableBufferPointer { counts in
                    for index in 0..<counts.count { counts[index] = 0 }
                    for node in source {
                        counts[Int((UInt64(bitPattern: node.fireDate &- earliest) >> shift) & mask)] += 1
                    }
                    var position = 0
                    for index in 0..<counts.count {
                        let digitCount = counts[index]
                        counts[index] = position
                        position += digitCount
                    }
                    for node in source {
                        let digit = Int((UInt64(bitPattern: node.fireDate &- earliest) >> shift) & mask)
                        destination[counts[digit]] = node
                        counts[digit] += 1
                    }
                }
            }
        }
        if destination.count > count { destination.removeSubrange(count...) }
    }

    // MARK: - Heap mechanics

    /// Children per node.
    static let arity = 8

    @inline(__always)
    private static func precedes(_ a: Node, _ b: Node) -> Bool {
        a.fireDate != b.fireDate ? a.fireDate < b.fireDate : a.sequence < b.sequence
    }

    /// Orders the heap's nodes as a heap, wherever they are (Floyd's bottom-up construction).
    private mutating func heapify() {
        guard nodes.count > 1 else { return }
        for index in stride(from: (nodes.count - 2) / Self.arity, through: 0, by: -1) {
            siftDown(nodes[index], from: index)
        }
    }

    /// Gives the live nodes the sequences 1...count in their pop order, as the run, and drops the stale ones.
    /// (A scheduling mark taken before counts every node as scheduled before it: at worst a timer scheduled
    /// during that pass fires in it rather than in the next one.) Every bucket moves in first: sequences are
    /// compared across all of them; the buckets fill again as timers are scheduled.
    private mutating func renumber() {
        while moveInFirstBucket() != nil {}
        var sorted = run[runStart...].filter { isLive($0) }
        for index in 0..<nodes.count where isLive(nodes[index]) { sorted.append(nodes[index]) }
        sorted.sort(by: Self.precedes)
        nodes.truncate(to: 0)
        for index in sorted.indices {
            let sequence = UInt32(index + 1)
            sorted[index].sequence = sequence
            slots[Int(sorted[index].slot)].sequence = sequence
        }
        run = sorted
        runStart = 0
        nextSequence = UInt32(sorted.count)
    }

    /// Removes the root of the heap.
    private mutating func popRoot() {
        let last = nodes.removeLast()
        if !nodes.isEmpty { siftDown(last, from: 0) }
    }

    /// Moves `node` up from the hole at `start`, shifting parents down, and writes it where it belongs.
    private mutating func siftUp(_ node: Node, from start: Int) {
        var hole = start
        while hole > 0 {
            let parent = (hole - 1) / Self.arity
            guard Self.precedes(node, nodes[parent]) else { break }
            nodes[hole] = nodes[parent]
            hole = parent
        }
        nodes[hole] = node
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
            nodes[hole] = nodes[best]
            hole = best
        }
        nodes[hole] = node
    }
}

/// Where a timer sits in one mode: the mode and its slot in that mode's heap. Kept by the timer, guarded by
/// the lock of the loop it is attached to; the mode outlives it (a loop drops its modes only at teardown,
/// which clears every placement first).
struct TimerPlacement {
    /// Not retained, for that reason; `withMode` lends it without the retain and release that reading an
    /// `unowned(unsafe)` reference costs (a timer's retirement reaches its mode once per firing).
    private let modeReference: Unmanaged<LoopMode>
    let slot: Int32

    init(mode: LoopMode, slot: Int32) {
        modeReference = .passUnretained(mode)
        self.slot = slot
    }

    var mode: LoopMode { modeReference.takeUnretainedValue() }

    @inline(__always)
    func withMode<Result>(_ body: (LoopMode) throws -> Result) rethrows -> Result {
        try modeReference._withUnsafeGuaranteedRef(body)
    }
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
