@testable import PortLoop
import Testing

/// The run loop's indexed timer heap: random inserts, removals and moves keep it in fire-date order.
@Suite("Timer heap")
struct TimerHeapTests {
    @Test("random inserts, removals and updates pop in (fire date, insertion) order")
    func randomOperations() {
        var generator = SystemRandomNumberGenerator()
        var heap = TimerHeap()
        var live: [TimerHeap.Entry] = []
        let timer = RunLoopTimer(after: .seconds(1)) { _ in }
        for sequence in 0..<5_000 as Range<UInt64> {
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<6:
                let date = Int64.random(in: 0..<1_000, using: &generator)
                let entry = TimerHeap.Entry(timer: timer, fireDate: date, latest: date, sequence: sequence)
                heap.insert(entry)
                live.append(entry)
            case 6..<8 where !live.isEmpty:
                let entry = live.remove(at: Int.random(in: 0..<live.count, using: &generator))
                heap.remove(entry)
                #expect(entry.index == -1)
            case 8..<10 where !live.isEmpty:
                let entry = live[Int.random(in: 0..<live.count, using: &generator)]
                entry.fireDate = Int64.random(in: 0..<1_000, using: &generator)
                heap.update(entry)
            default:
                break
            }
        }
        #expect(heap.count == live.count)
        var popped: [(Int64, UInt64)] = []
        while let entry = heap.popFirst() { popped.append((entry.fireDate, entry.sequence)) }
        let expected = live.map { ($0.fireDate, $0.sequence) }.sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
        #expect(popped.map(\.0) == expected.map(\.0))
        #expect(popped.map(\.1) == expected.map(\.1))
    }

    @Test("the wake deadline batches timers within their tolerance")
    func wakeDeadline() {
        var heap = TimerHeap()
        let timer = RunLoopTimer(after: .seconds(1)) { _ in }
        heap.insert(TimerHeap.Entry(timer: timer, fireDate: 100, latest: 150, sequence: 1)) // may wait until 150
        heap.insert(TimerHeap.Entry(timer: timer, fireDate: 110, latest: 110, sequence: 2)) // must fire at 110
        heap.insert(TimerHeap.Entry(timer: timer, fireDate: 200, latest: 200, sequence: 3))
        #expect(heap.wakeDeadline() == 110)
        var empty = TimerHeap()
        #expect(empty.wakeDeadline() == nil)
        empty.insert(TimerHeap.Entry(timer: timer, fireDate: 5, latest: 9, sequence: 1))
        #expect(empty.wakeDeadline() == 9)
    }
}
