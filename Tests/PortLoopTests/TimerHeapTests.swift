@testable import PortLoop
import Testing

/// The run loop's timer heap: random inserts, removals and moves keep it in fire-date order.
@Suite("Timer heap")
struct TimerHeapTests {
    @Test("random inserts, removals and reschedules pop in (fire date, scheduling) order")
    func randomOperations() {
        var generator = SystemRandomNumberGenerator()
        var heap = TimerHeap()
        // The live slots with their fire date and the order they were last scheduled in.
        var live: [(timer: RunLoopTimer, slot: Int32, fireDate: Int64, scheduled: Int)] = []
        var scheduling = 0
        for _ in 0..<5_000 {
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<6:
                let date = Int64.random(in: 0..<1_000, using: &generator)
                scheduling += 1
                let timer = RunLoopTimer(after: .seconds(1)) { _ in }
                live.append((timer, heap.insert(timer, fireDate: date, latest: date), date, scheduling))
            case 6..<8 where !live.isEmpty:
                let entry = live.remove(at: Int.random(in: 0..<live.count, using: &generator))
                heap.remove(slot: entry.slot)
            case 8..<10 where !live.isEmpty:
                let index = Int.random(in: 0..<live.count, using: &generator)
                let date = Int64.random(in: 0..<1_000, using: &generator)
                scheduling += 1
                heap.reschedule(slot: live[index].slot, fireDate: date, latest: date)
                live[index].fireDate = date
                live[index].scheduled = scheduling
            default:
                break
            }
            #expect(Set(live.map(\.slot)).count == live.count, "a slot was handed out twice")
        }
        #expect(heap.count == live.count)
        #expect(heap.timers.count == live.count)
        let expected = live.sorted { $0.fireDate != $1.fireDate ? $0.fireDate < $1.fireDate : $0.scheduled < $1.scheduled }
        #expect(heap.firstFireDate == expected.first?.fireDate)
        var popped: [ObjectIdentifier] = []
        while let timer = heap.popFirst(dueBy: .max) { popped.append(ObjectIdentifier(timer)) }
        #expect(popped == expected.map { ObjectIdentifier($0.timer) })
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

    @Test("when the 32-bit sequences run out the heap renumbers them and keeps its order")
    func sequenceRenumbering() {
        var heap = TimerHeap()
        heap.sequenceLimit = 40 // renumber every few dozen schedulings
        var generator = SystemRandomNumberGenerator()
        var live: [(timer: RunLoopTimer, slot: Int32, fireDate: Int64, scheduled: Int)] = []
        var scheduling = 0
        for _ in 0..<2_000 {
            if live.count < 30 || Bool.random(using: &generator) {
                let date = Int64.random(in: 0..<50, using: &generator) // many ties
                let timer = RunLoopTimer(after: .seconds(1)) { _ in }
                scheduling += 1
                live.append((timer, heap.insert(timer, fireDate: date, latest: date), date, scheduling))
            } else {
                let index = Int.random(in: 0..<live.count, using: &generator)
                let date = Int64.random(in: 0..<50, using: &generator)
                scheduling += 1
                heap.reschedule(slot: live[index].slot, fireDate: date, latest: date)
                live[index].fireDate = date
                live[index].scheduled = scheduling
            }
            if live.count > 35 { heap.remove(slot: live.removeFirst().slot) }
        }
        let expected = live.sorted { $0.fireDate != $1.fireDate ? $0.fireDate < $1.fireDate : $0.scheduled < $1.scheduled }
        var popped: [ObjectIdentifier] = []
        while let timer = heap.popFirst(dueBy: .max) { popped.append(ObjectIdentifier(timer)) }
        #expect(popped == expected.map { ObjectIdentifier($0.timer) })
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
}
