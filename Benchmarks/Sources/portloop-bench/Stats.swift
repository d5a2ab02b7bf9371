/// The runs of one figure and their summary.
struct Sample: Sendable {
    var values: [Double]
    var median: Double { Stats.median(values) }
    var min: Double { values.min() ?? .nan }
    var max: Double { values.max() ?? .nan }
}

enum Stats {
    /// The median: the middle value, or the mean of the two middle values. NaN when empty.
    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let mid = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
    }
}

/// The variants `--variants` selects (0-based, in the order a scenario measures them), or nil for all. Set once
/// from the command line before any scenario runs.
nonisolated(unsafe) var selectedVariants: Set<Int>?

/// Runs every variant `runs` times, round-robin (A B C, A B C, …) so that background load and frequency
/// drift spread over all variants alike, after one discarded round that warms caches and the allocator.
/// Returns one sample per variant, in order; a variant left out by `--variants` gets NaN for each run (its
/// rows show "nan" and no ratios), so that one variant can be profiled without the others' threads and memory.
func measureInterleaved(runs: Int, _ variants: [() -> Double]) -> [Sample] {
    var samples = [Sample](repeating: Sample(values: []), count: variants.count)
    for round in 0...runs {
        for (index, variant) in variants.enumerated() {
            let value = selectedVariants.map { $0.contains(index) } ?? true ? variant() : .nan
            if round > 0 { samples[index].values.append(value) }
        }
    }
    return samples
}

/// Side figures of interleaved runs (wake-ups per message, a producer's own time…), by name: each run
/// records its values, and the first run's (the discarded warm-up round) are dropped.
final class SideFigures {
    private var values: [String: [Double]] = [:]

    func record(_ name: String, _ value: Double) { values[name, default: []].append(value) }

    /// The measured runs' values of `name` (warm-up dropped).
    func sample(_ name: String) -> Sample { Sample(values: Array((values[name] ?? []).dropFirst())) }
}
