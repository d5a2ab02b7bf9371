import HeapModule

/// The timers of one mode that fire after its near ones (``TimerHeap``), grouped by the
/// 2^20 ns (about a millisecond) of time they fall in and unsorted within a group.
///
/// Why: a heap of every timer is as large as the timer count, and at 100,000 timers each pop sifts through
/// cache lines that are all misses. Here a timer costs an append when scheduled and, when its millisecond
/// comes, one move into the near tier as part of its whole group, sorted; the near tier stays about a millisecond of
/// timers deep, small enough to stay in cache. (The `timers` benchmark, 100,000 timers over 50 ms: see the
/// README's "Timers".)
struct TimerBuckets {
    /// Bucket width: fire dates that agree above this bit share a bucket.
    static let shift: Int64 = 20

    /// The bucket key of a fire date (negative dates included: the shift rounds toward minus infinity).
    @inline(__always)
    static func key(of fireDate: Int64) -> Int64 { fireDate >> shift }

    private struct Bucket {
        var key: Int64
        var nodes: [TimerHeap.Node]
    }

    /// Buckets by id; an emptied bucket's id (and the storage of its array) is reused.
    private var buckets: [Bucket] = []
    private var freeIDs: [Int32] = []
    private var idsByKey: [Int64: Int32] = [:]
    /// The keys of the buckets, earliest first.
    private var keys = Heap<Int64>()
    /// How many nodes the buckets hold (the heap's stale nodes among them).
    private(set) var count = 0
    /// How many keys the key heap holds; for tests.
    var keyCount: Int { keys.count }

    var isEmpty: Bool { count == 0 }

    /// Adds a node to the bucket of `key`; returns how many nodes that bucket holds now.
    @discardableResult
    mutating func append(_ node: TimerHeap.Node, key: Int64) -> Int {
        let id: Int32
        if let existing = idsByKey[key] {
            id = existing
        } else {
            if let reused = freeIDs.popLast() {
                id = reused
                buckets[Int(id)].key = key
            } else {
                id = Int32(buckets.count)
                buckets.append(Bucket(key: key, nodes: []))
            }
            idsByKey[key] = id
            keys.insert(key)
        }
        buckets[Int(id)].nodes.append(node)
        count += 1
        return buckets[Int(id)].nodes.count
    }

    /// Removes the nodes that `shouldBeRemoved` picks from every bucket, and the buckets it empties.
    mutating func removeAll(where shouldBeRemoved: (TimerHeap.Node) -> Bool) {
        for id in idsByKey.values {
            let before = buckets[Int(id)].nodes.count
            buckets[Int(id)].nodes.removeAll(where: shouldBeRemoved)
            count -= before - buckets[Int(id)].nodes.count
            if buckets[Int(id)].nodes.isEmpty { release(id) }
        }
        if keys.count != idsByKey.count { keys = Heap(idsByKey.keys) }
    }

    private mutating func release(_ id: Int32) {
        idsByKey[buckets[Int(id)].key] = nil
        freeIDs.append(id)
    }

    /// Takes out the earliest bucket if its key is at most `limit`: its nodes replace the contents of `nodes`
    /// (the two arrays trade storage, so nothing is allocated). Returns the bucket's key, or nil if there is
    /// none that early.
    mutating func takeFirst(upTo limit: Int64 = .max, into nodes: inout [TimerHeap.Node]) -> Int64? {
        guard let key = keys.min, key <= limit, let id = idsByKey[key] else { return nil }
        keys.removeMin()
        nodes.removeAll(keepingCapacity: true)
        swap(&nodes, &buckets[Int(id)].nodes)
        count -= nodes.count
        release(id)
        return key
    }
}
