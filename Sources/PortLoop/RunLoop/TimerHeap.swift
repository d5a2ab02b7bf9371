/// The timers of one mode, ordered by fire date: a binary min-heap whose entries know their own index.
///
/// Why not swift-collections' `Heap`: a timer that is invalidated or given a new fire date must leave or
/// move inside the heap in O(log n), and the loop's sleep computation walks the timers due before a
/// deadline (tolerance batching); both need the positions, which `Heap` keeps private.
struct TimerHeap {
    /// One timer's place in this heap. A timer in several modes has one entry per mode.
    final class Entry {
        let timer: RunLoopTimer
        /// Fire date in monotonic nanoseconds: a copy of the timer's, updated under the loop's lock.
        var fireDate: Int64
        /// Latest acceptable fire date (fire date plus tolerance).
        var latest: Int64
        /// Tie-breaker among equal fire dates: insertion order.
        let sequence: UInt64
        var index = -1
        init(timer: RunLoopTimer, fireDate: Int64, latest: Int64, sequence: UInt64) {
            self.timer = timer
            self.fireDate = fireDate
            self.latest = latest
            self.sequence = sequence
        }
    }

    private(set) var entries: [Entry] = []

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }
    var first: Entry? { entries.first }

    @inline(__always)
    private static func precedes(_ a: Entry, _ b: Entry) -> Bool {
        a.fireDate != b.fireDate ? a.fireDate < b.fireDate : a.sequence < b.sequence
    }

    mutating func insert(_ entry: Entry) {
        entry.index = entries.count
        entries.append(entry)
        siftUp(entry.index)
    }

    mutating func remove(_ entry: Entry) {
        let index = entry.index
        guard index >= 0, index < entries.count, entries[index] === entry else { return }
        let last = entries.removeLast()
        entry.index = -1
        guard index < entries.count else { return }
        entries[index] = last
        last.index = index
        update(last)
    }

    @discardableResult
    mutating func popFirst() -> Entry? {
        guard let first = entries.first else { return nil }
        remove(first)
        return first
    }

    /// Restores the order after `entry.fireDate` changed.
    mutating func update(_ entry: Entry) {
        siftUp(entry.index)
        siftDown(entry.index)
    }

    /// When the loop must wake so that every timer fires within its tolerance, batching the others: the
    /// smallest `latest` among the timers whose fire date is not after that very moment (CF's
    /// `__CFArmNextTimerInMode`). Subtrees whose root fires later than the answer so far are skipped.
    func wakeDeadline() -> Int64? {
        guard let first = entries.first else { return nil }
        var deadline = first.latest
        var stack = [0]
        while let index = stack.popLast() {
            let entry = entries[index]
            if entry.fireDate > deadline { continue }
            if entry.latest < deadline { deadline = entry.latest }
            let left = 2 * index + 1
            if left < entries.count { stack.append(left) }
            if left + 1 < entries.count { stack.append(left + 1) }
        }
        return deadline
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.precedes(entries[child], entries[parent]) else { return }
            swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < entries.count, Self.precedes(entries[left], entries[smallest]) { smallest = left }
            if right < entries.count, Self.precedes(entries[right], entries[smallest]) { smallest = right }
            if smallest == parent { return }
            swapAt(parent, smallest)
            parent = smallest
        }
    }

    private mutating func swapAt(_ i: Int, _ j: Int) {
        entries.swapAt(i, j)
        entries[i].index = i
        entries[j].index = j
    }
}
