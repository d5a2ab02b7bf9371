/// Round-trip times in log-linear buckets: eight per power of two, so a percentile read from it is at most
/// 12.5 % above the true value, whatever the range. Fixed size, so that a client process can print its buckets
/// on one line and the parent can add them up exactly.
struct LatencyHistogram: Sendable, Equatable {
    /// Sub-buckets per power of two.
    static let subBuckets = 8
    /// Nanoseconds up to 2^48 (about 3 days) have a bucket; longer ones land in the last.
    static let bucketCount = 48 * subBuckets

    private(set) var counts = [Int](repeating: 0, count: bucketCount)
    private(set) var total = 0
    private(set) var maximum: UInt64 = 0

    init() {}

    /// The bucket of `nanoseconds`: values below 8 have one each; above, the power of two and the next three
    /// bits choose.
    static func bucket(of nanoseconds: UInt64) -> Int {
        guard nanoseconds >= UInt64(subBuckets) else { return Int(nanoseconds) }
        let power = 63 - nanoseconds.leadingZeroBitCount // >= 3
        let sub = Int((nanoseconds >> UInt64(power - 3)) & 7)
        return min(bucketCount - 1, (power - 2) * subBuckets + sub)
    }

    /// The largest value that falls in `bucket`.
    static func upperBound(of bucket: Int) -> UInt64 {
        guard bucket >= subBuckets else { return UInt64(bucket) }
        let power = bucket / subBuckets + 2
        let sub = UInt64(bucket % subBuckets)
        return ((8 + sub + 1) << UInt64(power - 3)) - 1
    }

    mutating func record(_ nanoseconds: UInt64) {
        counts[Self.bucket(of: nanoseconds)] += 1
        total += 1
        maximum = max(maximum, nanoseconds)
    }

    mutating func add(_ other: LatencyHistogram) {
        for index in counts.indices { counts[index] += other.counts[index] }
        total += other.total
        maximum = max(maximum, other.maximum)
    }

    /// The value at or below which `fraction` of the samples lie (the bucket's upper bound, at most the
    /// maximum seen); nil without samples.
    func percentile(_ fraction: Double) -> UInt64? {
        guard total > 0 else { return nil }
        let rank = max(1, Int((fraction * Double(total)).rounded(.up)))
        var seen = 0
        for (bucket, count) in counts.enumerated() where count > 0 {
            seen += count
            if seen >= rank { return min(maximum, Self.upperBound(of: bucket)) }
        }
        return maximum
    }

    /// `3:17,40:2` — the non-empty buckets, then `;max` — as a client process prints it.
    var encoded: String {
        let buckets = counts.enumerated().filter { $0.element > 0 }.map { "\($0.offset):\($0.element)" }
        return buckets.joined(separator: ",") + ";\(maximum)"
    }

    /// Reads what ``encoded`` wrote; nil if it is not that.
    init?(encoded text: Substring) {
        let parts = text.split(separator: ";", omittingEmptySubsequences: false)
        guard parts.count == 2, let maximum = UInt64(parts[1]) else { return nil }
        for pair in parts[0].split(separator: ",") {
            let fields = pair.split(separator: ":")
            guard fields.count == 2, let bucket = Int(fields[0]), let count = Int(fields[1]),
                  counts.indices.contains(bucket), count >= 0 else { return nil }
            counts[bucket] += count
            total += count
        }
        self.maximum = maximum
    }
}
