#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import Histogram

// Latency distributions: every round trip of the ping-pong scenarios and every timer's lateness, recorded as an
// HdrHistogram (3 significant digits, nanoseconds) per series and merged over the measured runs (the discarded
// warm-up round is not recorded). `--histograms PATH` writes them as JSON (Benchmarks/README.md: keys), read by
// Benchmarks/plot.py.

/// The histograms of this process's run, by scenario and series, in the order first recorded.
final class LatencyHistograms: @unchecked Sendable {
    static let shared = LatencyHistograms()

    struct Series {
        var scenario: String
        var name: String
        var histogram: Histogram<UInt64>
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var series: [Series] = []
    /// The scenario being run (set by main).
    var scenario = ""
    /// The round-trip clock made by the variant being run, if any.
    private var lastClock: RoundTripClock?

    private init() { pthread_mutex_init(mutex, nil) }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body()
    }

    /// A new histogram for nanosecond values from 1 ns to 100 s.
    static func makeHistogram() -> Histogram<UInt64> {
        Histogram<UInt64>(lowestDiscernibleValue: 1, highestTrackableValue: 100_000_000_000,
                          numberOfSignificantValueDigits: .three)
    }

    /// Called by each `RoundTripClock` as it is made.
    func clockMade(_ clock: RoundTripClock) { locked { lastClock = clock } }

    /// Runs one variant; if it made a round-trip clock that recorded laps, and `record` is set, adds them to the
    /// series `name` of the current scenario.
    func measuring<T>(_ name: String, record: Bool, _ body: () -> T) -> T {
        locked { lastClock = nil }
        let result = body()
        let clock = locked { () -> RoundTripClock? in
            defer { lastClock = nil }
            return lastClock
        }
        if record, let clock {
            let laps = clock.laps
            if laps.totalCount > 0 { add(laps, scenario: scenario, name: name) }
        }
        return result
    }

    /// Merges `histogram` into a series.
    func add(_ histogram: Histogram<UInt64>, scenario: String, name: String) {
        locked {
            if let index = series.firstIndex(where: { $0.scenario == scenario && $0.name == name }) {
                series[index].histogram.add(histogram)
            } else {
                series.append(Series(scenario: scenario, name: name, histogram: histogram))
            }
        }
    }

    /// Adds values (nanoseconds; negative ones count as 0) to a series.
    func add(nanoseconds values: UnsafeBufferPointer<Int64>, scenario: String, name: String) {
        var histogram = Self.makeHistogram()
        for value in values { _ = histogram.record(UInt64(max(0, value))) }
        add(histogram, scenario: scenario, name: name)
    }

    /// The percentile distribution of each series, as a JSON array of
    /// `{"scenario", "series", "unit": "ns", "count", "min", "mean", "max", "percentiles": [[percentile, value], …]}`,
    /// percentiles at HdrHistogram's usual steps (5 ticks per half distance, up to the maximum).
    func json() -> String {
        let all = locked { series }
        let objects = all.map { entry -> String in
            let histogram = entry.histogram
            var points: [String] = []
            for step in histogram.percentiles(ticksPerHalfDistance: 5) {
                points.append("[\(jsonNumber(step.percentileLevelIteratedTo)), \(step.value)]")
            }
            return "  {\"scenario\": \(jsonString(entry.scenario)), \"series\": \(jsonString(entry.name)), "
                + "\"unit\": \"ns\", \"count\": \(histogram.totalCount), \"min\": \(histogram.min), "
                + "\"mean\": \(jsonNumber(histogram.mean)), \"max\": \(histogram.max), "
                + "\"percentiles\": [\(points.joined(separator: ", "))]}"
        }
        return objects.isEmpty ? "[]\n" : "[\n" + objects.joined(separator: ",\n") + "\n]\n"
    }
}

/// `measureInterleaved`, recording each variant's round trips into the series of the same index (but for its
/// first run, the discarded warm-up). Counted per variant: `--variants` runs only some.
func measureInterleaved(runs: Int, series: [String], _ variants: [() -> Double]) -> [Sample] {
    precondition(series.count == variants.count, "one series name per variant")
    var runsMade = [Int](repeating: 0, count: variants.count)
    let wrapped = variants.indices.map { index in
        { () -> Double in
            defer { runsMade[index] += 1 }
            return LatencyHistograms.shared.measuring(series[index], record: runsMade[index] > 0, variants[index])
        }
    }
    return measureInterleaved(runs: runs, wrapped)
}
