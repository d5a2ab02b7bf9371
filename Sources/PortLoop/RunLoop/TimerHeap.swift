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

    /// A heap slot: the ordering keys inline, so that sifting compares without following references (at
    /// 100,000 timers every level would otherwise be a cache miss), and the entry whose index it keeps.
    private struct Node {
        var fireDate: Int64
        var sequence: UInt64
        let entry: Entry
    }

    private var nodes: [Node] = []

    var count: Int { nodes.count }
    var isEmpty: Bool { nodes.isEmpty }
    var first: Entry? { nodes.first?.entry }
    /// Every entry, in heap order (not sorted).
    var entries: [Entry] { nodes.map(\.entry) }

    /// Compares two slots by their inline keys, by index so that no node (and its reference) is copied.
    @inline(__always)
    private func precedes(_ i: Int, _ j: Int) -> Bool {
        nodes.withUnsafeBufferPointer { buffer in
            let a = buffer[i].fireDate, b = buffer[j].fireDate
            return a != b ? a < b : buffer[i].sequence < buffer[j].sequence
        }
    }

    mutating func insert(_ entry: Entry) {
        entry.index = nodes.count
        nodes.append(Node(fireDate: entry.fireDate, sequence: entry.sequence, entry: entry))
        siftUp(entry.index)
    }

    mutating func remove(_ entry: Entry) {
        let index = entry.index
        guard index >= 0, index < nodes.count, nodes[index].entry === entry else { return }
        let last = nodes.removeLast()
        entry.index = -1
        guard index < nodes.count else { return }
        nodes[index] = last
        last.entry.index = index
        siftUp(index)
        siftDown(last.entry.index)
    }

    @discardableResult
    mutating func popFirst() -> Entry? {
        guard let first = nodes.first?.entry else { return nil }
        remove(first)
        return first
    }

    /// Restores the order after `entry.fireDate` changed.
    mutating func update(_ entry: Entry) {
        nodes[entry.index].fireDate = entry.fireDate
        siftUp(entry.index)
        siftDown(entry.index)
    }

    /// When the loop must wake so that every timer fires within its tolerance, batching the others: the
    /// smallest `latest` among the timers whose fire date is not after that very moment (CF's
    /// `__CFArmNextTimerInMode`). Subtrees whose root fires later than the answer so far are skipped.
    func wakeDeadline() -> Int64? {
        guard let first = nodes.first else { return nil }
        var deadline = first.entry.latest
        var stack = [0]
        while let index = stack.popLast() {
            let node = nodes[index]
            if node.fireDate > deadline { continue }
            if node.entry.latest < deadline { deadline = node.entry.latest }
            let left = 2 * index + 1
            if left < nodes.count { stack.append(left) }
            if left + 1 < nodes.count { stack.append(left + 1) }
        }
        return deadline
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard precedes(child, parent) else { return }
            swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let count = nodes.count
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < count, precedes(left, smallest) { smallest = left }
            if right < count, precedes(right, smallest) { smallest = right }
            if smallest == parent { return }
            swapAt(parent, smallest)
            parent = smallest
        }
    }

    private mutating func swapAt(_ i: Int, _ j: Int) {
        nodes.swapAt(i, j)
        nodes[i].entry.index = i
        nodes[j].entry.index = j
    }
}
