@testable import PortLoop
import Testing

/// The run loop's timer heap: random inserts, removals and moves keep it in fire-date order.
@Suite("Timer heap")
struct TimerHeapTests {
    /// Fire-date spreads: within one bucket of the near heap, and over about 130 buckets.
    static let dateScales: [Int64] = [1, 1 << (TimerBuckets.shift - 3)]

    @Test("random inserts, removals, reschedules and pops keep (fire date, scheduling) order",
          arguments: dateScales)
    func randomOperations(scale: Int64) {
        var generator = SystemRandomNumberGenerator()
        var model = HeapModel()
        for _ in 0..<5_000 {
            let date = Int64.random(in: 0..<1_000, using: &generator) * scale
            switch Int.random(in: 0..<12, using: &generator) {
            case 0..<6: model.insert(date)
            case 6..<8 where !model.live.isEmpty: model.remove(Int.random(in: 0..<model.live.count, using: &generator))
            case 8..<10 where !model.live.isEmpty:
                model.reschedule(Int.random(in: 0..<model.live.count, using: &generator), to: date)
            case 10..<12: model.popAndReplace(dueBy: date, reschedule: Bool.random(using: &generator))
            default: break
            }
            #expect(Set(model.live.map(\.slot)).count == model.live.count, "a slot was handed out twice")
        }
        #expect(model.heap.count == model.live.count)
        #expect(model.heap.timers.count == model.live.count)
        #expect(model.heap.firstFireDate == model.expectedOrder.first?.fireDate)
        model.expectPopsInOrder()
    }

    @Test("timers of later milliseconds wait in buckets; one far-off timer does not pull the rest into the heap")
    func bucketsKeepTheHeapSmall() {
        var model = HeapModel()
        model.insert(3_600_000_000_000) // an hour away, alone in the near heap at first
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 { model.insert(Int64.random(in: 0..<50_000_000, using: &generator)) }
        // About one bucket's share of the 50 ms (20,000 / 48), not all of them.
        #expect(model.heap.nearCount < 2_000)
        #expect(model.heap.count == 20_001)
        model.expectPopsInOrder()
    }

    @Test("a timer scheduled earlier than the near heap's last bucket goes into the heap, in order")
    func earlierTimerAfterBucketsMovedIn() {
        var model = HeapModel()
        let bucket = Int64(1) << TimerBuckets.shift
        for index in 0..<100 { model.insert(Int64(index) * bucket / 10 + 5 * bucket) }
        // Pop the first bucket's timers: the heap moves on to the next bucket when it empties.
        for _ in 0..<15 { model.popAndReplace(dueBy: 6 * bucket + bucket / 2, reschedule: false) }
        model.insert(5 * bucket + 1) // earlier than everything left
        model.insert(6 * bucket + 2)
        model.insert(60 * bucket)
        model.expectPopsInOrder()
    }
    @Test("pops come in fire-date order, ties in scheduling order, and stop at the due date")
    func popOrder() {
        var heap = TimerHeap()
        var timers: [RunLoopTimer] = []
        var generator = SystemRandomNumberGenerator()
        var dates: [Int64] = []
        for _ in 0..<2_000 {
            let timer = RunLoopTimer(after: .seconds(1)) { _ in }
            let date = Int64.random(in: 0..<300, using: &generator)
            _ = heap.insert(timer, fireDate: date, latest: date)
            timers.append(timer)
            dates.append(date)
        }
        let order = timers.indices.sorted { dates[$0] != dates[$1] ? dates[$0] < dates[$1] : $0 < $1 }
        var popped: [Int] = []
        while let timer = heap.popFirst(dueBy: 149) { popped.append(timers.firstIndex { $0 === timer }!) }
        #expect(popped == order.filter { dates[$0] <= 149 })
        #expect(heap.firstFireDate.map { $0 >= 150 } ?? true)
        // Popped timers keep their slots: the heap still lists every timer.
        #expect(heap.timers.count == timers.count)
    }

    @Test("a popped timer rescheduled goes back in the heap; a removed one frees its slot for reuse")
    func rescheduleAfterPop() {
        var heap = TimerHeap()
        let first = RunLoopTimer(after: .seconds(1)) { _ in }
        let second = RunLoopTimer(after: .seconds(1)) { _ in }
        let slot = heap.insert(first, fireDate: 10, latest: 10)
        _ = heap.insert(second, fireDate: 20, latest: 20)
        #expect(heap.popFirst(dueBy: 15) === first)
        #expect(heap.popFirst(dueBy: 15) == nil)
        heap.reschedule(slot: slot, fireDate: 30, latest: 30)
        #expect(heap.count == 2)
        #expect(heap.popFirst(dueBy: 100) === second)
        #expect(heap.popFirst(dueBy: 100) === first)
        heap.remove(slot: slot)
        #expect(heap.timers.count == 1)
        let third = RunLoopTimer(after: .seconds(1)) { _ in }
        #expect(heap.insert(third, fireDate: 5, latest: 5) == slot)
        #expect(heap.firstFireDate == 5)
    }

    @Test("when the 32-bit sequences run out the heap renumbers them and keeps its order", arguments: dateScales)
    func sequenceRenumbering(scale: Int64) {
        var model = HeapModel()
        model.heap.sequenceLimit = 40 // renumber every few dozen schedulings
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let date = Int64.random(in: 0..<50, using: &generator) * scale // many ties
            if model.live.count < 30 || Bool.random(using: &generator) {
                model.insert(date)
            } else {
                model.reschedule(Int.random(in: 0..<model.live.count, using: &generator), to: date)
            }
            if model.live.count > 35 { model.remove(0) }
        }
        model.expectPopsInOrder()
    }

    @Test("the wake deadline batches timers within their tolerance")
    func wakeDeadline() {
        var heap = TimerHeap()
        let timer = RunLoopTimer(after: .seconds(1)) { _ in }
        _ = heap.insert(timer, fireDate: 100, latest: 150) // may wait until 150
        _ = heap.insert(timer, fireDate: 110, latest: 110) // must fire at 110
        _ = heap.insert(timer, fireDate: 200, latest: 200)
        #expect(heap.wakeDeadline() == 110)
        var empty = TimerHeap()
        #expect(empty.wakeDeadline() == nil)
        _ = empty.insert(timer, fireDate: 5, latest: 9)
        #expect(empty.wakeDeadline() == 9)
    }

    @Test("the wake deadline counts timers still in later buckets when a tolerance reaches them")
    func wakeDeadlineAcrossBuckets() {
        let millisecond: Int64 = 1 << TimerBuckets.shift
        var heap = TimerHeap()
        let timer = RunLoopTimer(after: .seconds(1)) { _ in }
        _ = heap.insert(timer, fireDate: 0, latest: 10 * millisecond) // may wait ten buckets
        _ = heap.insert(timer, fireDate: 5 * millisecond, latest: 5 * millisecond + 7) // must not
        _ = heap.insert(timer, fireDate: 20 * millisecond, latest: 20 * millisecond)
        #expect(heap.wakeDeadline() == 5 * millisecond + 7)
        #expect(heap.count == 3)
        var later = TimerHeap()
        _ = later.insert(timer, fireDate: 0, latest: 10 * millisecond)
        _ = later.insert(timer, fireDate: 11 * millisecond, latest: 11 * millisecond)
        #expect(later.wakeDeadline() == 10 * millisecond)
    }

    @Test("a tolerance in the near heap brings no bucket in when another timer there must fire first")
    func wakeDeadlineLeavesBucketsAlone() {
        let millisecond: Int64 = 1 << TimerBuckets.shift
        var heap = TimerHeap()
        let timer = RunLoopTimer(after: .seconds(1)) { _ in }
        _ = heap.insert(timer, fireDate: 0, latest: 36_000 * 1_000 * millisecond) // may wait ten hours
        _ = heap.insert(timer, fireDate: 1, latest: 1) // must not
        for index in 1...1_000 { _ = heap.insert(timer, fireDate: Int64(index) * millisecond / 10 + millisecond,
                                                 latest: Int64(index) * millisecond / 10 + millisecond) }
        #expect(heap.wakeDeadline() == 1)
        #expect(heap.nearCount == 2, "the buckets stayed where they were")
    }

    @Test("a bucket moves in sorted, equal dates in scheduling order, whatever order it was filled in")
    func bucketsArriveSorted() {
        let millisecond: Int64 = 1 << TimerBuckets.shift
        var generator = SystemRandomNumberGenerator()
        var model = HeapModel()
        model.insert(0) // the near timers' bucket is the first; the rest wait in buckets
        // Thousands of timers in three later buckets, a dozen distinct dates each: long runs of ties.
        for _ in 0..<5_000 {
            let bucket = Int64.random(in: 1...3, using: &generator)
            model.insert(bucket * millisecond + Int64.random(in: 0..<12, using: &generator) * 1_000)
        }
        // Moves: each leaves a stale node behind and a new one at its bucket's end.
        for _ in 0..<500 {
            model.reschedule(Int.random(in: 1..<model.live.count, using: &generator),
                             to: 2 * millisecond + Int64.random(in: 0..<12, using: &generator) * 1_000)
        }
        model.expectPopsInOrder()
    }

    @Test("scheduling into a bucket makes the room its sort needs, so that moving buckets in allocates none")
    func sortRoomComesWithScheduling() {
        let millisecond: Int64 = 1 << TimerBuckets.shift
        var model = HeapModel()
        model.insert(0) // the near timers' bucket is the first; the rest wait in buckets
        for index in 0..<3_000 { model.insert(millisecond + Int64(index) * 300) }
        for index in 0..<1_000 { model.insert(2 * millisecond + Int64(index) * 300) }
        let room = model.heap.sortRoom
        #expect(room >= 3_000, "the room was made as the timers were scheduled")
        model.expectPopsInOrder() // both buckets move in, sorted (two radix passes each)
        #expect(model.heap.sortRoom == room, "moving the buckets in took no other room")
    }

    @Test("near timers given back to a bucket out of scheduling order still pop in order")
    func evictedNodesKeepTheirOrder() {
        let millisecond: Int64 = 1 << TimerBuckets.shift
        var model = HeapModel()
        // Few enough near timers to be given back, scheduled latest first so the heap reorders them.
        for index in 0..<TimerHeap.evictionLimit { model.insert(10 * millisecond + Int64(15 - index) % 4) }
        model.insert(5 * millisecond) // earlier: the sixteen go back to the bucket of 10 ms
        #expect(model.heap.nearCount == 1)
        for index in 0..<200 { model.insert(10 * millisecond + Int64(index % 4)) } // the same bucket, same dates
        model.expectPopsInOrder()
    }

    @Test("the bucket sort orders by date, then sequence, over one to four radix passes and out of sequence")
    func bucketSort() {
        var generator = SystemRandomNumberGenerator()
        var scratch: [TimerHeap.Node] = []
        var counts: [Int] = []
        for span: Int64 in [1_000, 1 << 20, 1 << 30, 1 << 40] {
            for inSequence in [true, false] {
                let base = Int64.random(in: -(1 << 50)...(1 << 50), using: &generator)
                var nodes = (0..<3_000).map { index in
                    TimerHeap.Node(fireDate: base + Int64.random(in: 0..<span, using: &generator) / 7 * 7,
                                   sequence: UInt32(index + 1), slot: Int32(index))
                }
                if !inSequence { nodes.shuffle(using: &generator) }
                let expected = nodes.sorted { ($0.fireDate, $0.sequence) < ($1.fireDate, $1.sequence) }
                TimerHeap.sort(&nodes, scratch: &scratch, counts: &counts)
                let sorted = nodes.map(\.slot) == expected.map(\.slot)
                #expect(sorted, "span \(span), in sequence: \(inSequence)")
            }
        }
    }

    @Test("moved and removed timers leave stale nodes that never outnumber the live ones by more than a margin")
    func staleNodesStayBounded() {
        let millisecond: Int64 = 1 << TimerBuckets.shift
        var generator = SystemRandomNumberGenerator()
        var model = HeapModel()
        for _ in 0..<100 { model.insert(Int64.random(in: 0..<100 * millisecond, using: &generator)) }
        var worst = 0
        for step in 0..<50_000 {
            let index = Int.random(in: 0..<model.live.count, using: &generator)
            if step % 10 == 0 {
                model.remove(index)
                model.insert(Int64.random(in: 0..<100 * millisecond, using: &generator))
            } else {
                model.reschedule(index, to: Int64.random(in: 0..<100 * millisecond, using: &generator))
            }
            worst = max(worst, model.heap.nodeCount - 2 * model.heap.count)
        }
        #expect(worst <= TimerHeap.staleAllowance + 1)
        #expect(model.heap.count == 100)
        model.expectPopsInOrder()
    }

    @Test("keys of emptied buckets do not pile up while the near heap never empties")
    func staleBucketKeysAreDropped() {
        let millisecond: Int64 = 1 << TimerBuckets.shift
        var model = HeapModel()
        model.insert(0) // stays in the near heap: nothing is popped
        model.insert(millisecond)
        for step in 2..<10_002 { model.reschedule(1, to: Int64(step) * millisecond) } // a new bucket each time
        #expect(model.heap.bucketKeyCount < 200)
        model.expectPopsInOrder()
    }
}

/// A timer heap beside a plain list of what it should hold: each live timer's slot, fire date and the order
/// it was last scheduled in.
private struct HeapModel: ~Copyable {
    var heap = TimerHeap()
    var live: [(timer: RunLoopTimer, slot: Int32, fireDate: Int64, scheduled: Int)] = []
    private var scheduling = 0

    mutating func insert(_ date: Int64) {
        scheduling += 1
        let timer = RunLoopTimer(after: .seconds(1)) { _ in }
        live.append((timer, heap.insert(timer, fireDate: date, latest: date), date, scheduling))
    }

    mutating func remove(_ index: Int) {
        heap.remove(slot: live.remove(at: index).slot)
    }

    mutating func reschedule(_ index: Int, to date: Int64) {
        scheduling += 1
        heap.reschedule(slot: live[index].slot, fireDate: date, latest: date)
        live[index].fireDate = date
        live[index].scheduled = scheduling
    }

    var expectedOrder: [(timer: RunLoopTimer, slot: Int32, fireDate: Int64, scheduled: Int)] {
        live.sorted { $0.fireDate != $1.fireDate ? $0.fireDate < $1.fireDate : $0.scheduled < $1.scheduled }
    }

    /// Pops the earliest timer if due by `date` (expecting the model's earliest), then schedules it again at
    /// `date` or frees its slot.
    mutating func popAndReplace(dueBy date: Int64, reschedule: Bool) {
        let first = expectedOrder.first
        guard let timer = heap.popFirst(dueBy: date) else {
            #expect(first.map { $0.fireDate > date } ?? true, "a due timer was not popped")
            return
        }
        guard let index = live.firstIndex(where: { $0.timer === timer }) else {
            Issue.record("popped a timer the heap should not hold")
            return
        }
        #expect(timer === first?.timer)
        if reschedule { self.reschedule(index, to: date) } else { remove(index) }
    }

    /// Pops everything and expects the model's order.
    mutating func expectPopsInOrder() {
        let expected = expectedOrder.map { ObjectIdentifier($0.timer) }
        var popped: [ObjectIdentifier] = []
        while let timer = heap.popFirst(dueBy: .max) { popped.append(ObjectIdentifier(timer)) }
        #expect(popped == expected)
    }
}

extension TimerHeap {
    /// Pops the earliest timer if it is due by `now`, through the loop's own path (a chunk of one); its slot
    /// stays its own until ``remove(slot:)``.
    mutating func popFirst(dueBy now: Int64) -> RunLoopTimer? {
        var due: [RunLoopTimer] = []
        var slots: [Int32] = []
        popDue(by: now, scheduledUpTo: .max, limit: 1, into: &due, slots: &slots)
        return due.first
    }
}
