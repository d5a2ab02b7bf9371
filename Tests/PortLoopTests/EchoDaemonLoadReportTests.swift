@testable import PortLoopEchoDaemon
import Testing

/// The pieces of `portloop-echod load` that carry numbers between processes: the round-trip histogram and the
/// report line a client process prints for its parent.
@Suite("Example daemon: the load generator's histogram and report line")
struct EchoDaemonLoadReportTests {
    @Test("every value lands in a bucket whose bounds hold it, at most 12.5 % wide")
    func buckets() {
        var value: UInt64 = 0
        while value < 1 << 47 {
            let bucket = LatencyHistogram.bucket(of: value)
            let upper = LatencyHistogram.upperBound(of: bucket)
            let lower = bucket == 0 ? 0 : LatencyHistogram.upperBound(of: bucket - 1) + 1
            #expect(lower <= value && value <= upper, "\(value) in bucket \(bucket) [\(lower), \(upper)]")
            #expect(Double(upper - lower) <= Double(lower) * 0.125 || upper < 16, "bucket \(bucket) is too wide")
            value = value < 64 ? value + 1 : value + value / 7
        }
        #expect(LatencyHistogram.bucket(of: .max) == LatencyHistogram.bucketCount - 1)
    }

    @Test("percentiles are within 12.5 % above the true value, and never above the maximum")
    func percentiles() {
        var histogram = LatencyHistogram()
        #expect(histogram.percentile(0.5) == nil)
        for microseconds in 1...1000 { histogram.record(UInt64(microseconds) * 1000) }
        for (fraction, truth) in [(0.5, 500_000.0), (0.9, 900_000.0), (0.99, 990_000.0)] {
            let value = Double(histogram.percentile(fraction) ?? 0)
            #expect(value >= truth && value <= truth * 1.125, "p\(fraction): \(value) for \(truth)")
        }
        #expect(histogram.percentile(1.0) == 1_000_000)
        #expect(histogram.maximum == 1_000_000 && histogram.total == 1000)
    }

    @Test("a report line reads back as written, histogram included, and the tallies add up")
    func reportRoundTrip() throws {
        var tally = ClientTally()
        tally.answered = 1234
        tally.wrong = 1
        tally.refused = 2
        tally.gone = 3
        tally.failed = 4
        tally.deadNames = 2
        for nanoseconds: UInt64 in [900, 45_000, 45_100, 3_000_000] { tally.latency.record(nanoseconds) }
        let report = LoadReport(process: 3, threads: 4, started: 10, ended: 2_000_000_010, tally: tally)
        let read = try #require(LoadReport(line: report.encoded))
        #expect(read.process == 3 && read.threads == 4 && read.started == 10 && read.ended == 2_000_000_010)
        #expect(read.tally.answered == 1234 && read.tally.wrong == 1 && read.tally.refused == 2)
        #expect(read.tally.gone == 3 && read.tally.failed == 4 && read.tally.deadNames == 2)
        #expect(read.tally.latency == tally.latency)
        var sum = ClientTally()
        sum.add(read.tally)
        sum.add(read.tally)
        #expect(sum.answered == 2468 && sum.latency.total == 8 && sum.latency.maximum == 3_000_000)
    }

    @Test("anything but a whole report line is refused", arguments: [
        "", "report", "hello process=1", "report process=x threads=1",
        "report process=1 threads=1 started=0 ended=1 answered=1 wrong=0 refused=0 gone=0 failed=0 dead-names=0",
        "report process=1 threads=1 started=0 ended=1 answered=1 wrong=0 refused=0 gone=0 failed=0 dead-names=0 latency=5:1",
        "report process=1 threads=1 started=0 ended=1 answered=1 wrong=0 refused=0 gone=0 failed=0 dead-names=0 latency=999:1;5",
        "report process=1 threads=1 started=0 ended=1 answered=1 wrong=0 refused=0 gone=0 failed=0 dead-names=0 latency=5:-1;5",
    ])
    func badLines(_ line: String) {
        #expect(LoadReport(line: line) == nil)
    }
}
