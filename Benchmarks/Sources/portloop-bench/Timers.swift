import CBenchFloors
import Histogram
import PortLoop

/// `timers`: many one-shot timers, fire dates spread uniformly at random over a 50 ms window.
///
/// On a fresh loop thread, before the loop runs: create the timers (closure per timer), add them all to the
/// default mode (µs per add), then run the loop until the last has fired. Each callback records its lateness:
/// the time it was called minus its fire date. Reported per size (1,000, 10,000, 100,000 timers): creation and
/// add cost, lateness p50/p99/max, and the time from the window's start to the last callback against the
/// ideal 50 ms. Ours: `RunLoopTimer`s on a `PortRunLoop`. Peers, in the same rounds, with the same fire dates:
/// CFRunLoop (`CFRunLoopTimerCreateWithHandler` + `CFRunLoopAddTimer` on a CF loop thread, tolerance 0) and
/// SwiftNIO (`EventLoop.scheduleTask(deadline:)` on a one-thread group, called on the loop: creation and
/// scheduling are one call there, so NIO has a "create + add" row only). Floor: the same fire dates slept
/// for by one libevent base with a re-armed timer event, as a loop sleeps (`bf_libevent_timers.c`): what
/// the kernel, the hypervisor and libevent cost by themselves.
///
/// Each implementation's window starts after a lead time long enough for its adds (twice its previous run's
/// creation and add time, plus 5 ms), so that no timer is already due when the loop starts; a run whose adds
/// overran the lead says so on standard error (its lateness then includes the overrun).
let timersScenario = Scenario(
    name: "timers",
    summary: "one-shot timers spread over 50 ms: add cost, firing lateness (ours, CF, NIO, libevent floor)"
) { settings in
    let sizes = [1_000, 10_000, 100_000]
    let window: Int64 = 50_000_000
    let implementations: [(name: String, run: (Int, Int64, Int64, UInt64) -> TimerRun)] = [
        ("loop", { timerRun(count: $0, window: $1, lead: $2, seed: $3) }),
        ("CF", { cfTimerRun(count: $0, window: $1, lead: $2, seed: $3) }),
        ("NIO", { nioTimerRun(count: $0, window: $1, lead: $2, seed: $3) }),
    ]
    // First (discarded) round: a generous guess of 4 µs per timer.
    var leads = implementations.map { _ in sizes.map { Int64($0) * 4_000 + 5_000_000 } }
    var results = implementations.map { _ in [[TimerRun]](repeating: [], count: sizes.count) }
    var floors = [[LatenessSummary]](repeating: [], count: sizes.count)

    checkingDescriptors("timers") {
        for round in 0...settings.runs {
            for (index, size) in sizes.enumerated() {
                let seed = UInt64(round) &* 0x9E37_79B9 &+ UInt64(size)
                for (which, implementation) in implementations.enumerated() {
                    let run = implementation.run(size, window, leads[which][index], seed)
                    if round > 0 {
                        LatencyHistograms.shared.add(run.latenessHistogram, scenario: "timers",
                                                     name: "\(implementation.name), \(size / 1_000)k timers")
                    }
                    if run.addsOverranNanoseconds > 0 && round > 0 {
                        printError("warning: timers: \(implementation.name), \(size) adds overran the lead by \(Double(run.addsOverranNanoseconds) / 1e6) ms; lateness includes it")
                    }
                    leads[which][index] = 2 * run.setUpNanoseconds + 5_000_000
                    if round > 0 { results[which][index].append(run) }
                }
                let floor = timerFloorRun(count: size, window: window, seed: seed,
                                          series: round > 0 ? "libevent floor, \(size / 1_000)k timers" : nil)
                if round > 0 { floors[index].append(floor) }
            }
        }
    }

    var rows: [Row] = []
    let ideal = Double(window) / 1e6
    for (index, size) in sizes.enumerated() {
        let label = size >= 1_000 ? "\(size / 1_000)k timers" : "\(size) timers"
        var sizeRows: [Row] = []
        func add(_ metric: String, unit: String, decimals: Int, create: Bool = false, nio: Bool = true,
                 floor: ((LatenessSummary) -> Double)? = nil, _ value: (TimerRun) -> Double) {
            for (which, implementation) in implementations.enumerated() where nio || implementation.name != "NIO" {
                let sample = Sample(values: results[which][index].map(value))
                let kind: Row.Kind = which == 0 ? .ours : .peer
                sizeRows.append(Row(kind, "\(label): \(implementation.name): \(metric)", sample: sample, unit: unit,
                                    decimals: decimals, short: implementation.name, key: "\(label) \(metric)"))
            }
            if let floor {
                sizeRows.append(Row(.floor, "\(label): C floor: libevent timer, \(metric)",
                                    sample: Sample(values: floors[index].map(floor)), unit: unit, decimals: decimals,
                                    short: "libevent", key: "\(label) \(metric)"))
            }
        }
        add("create + add", unit: "µs/timer", decimals: 3) { $0.createAndAddMicroseconds }
        add("add to the loop", unit: "µs/add", decimals: 3, nio: false) { $0.addMicroseconds }
        add("lateness p50", unit: "µs", decimals: 1, floor: \.p50Microseconds) { $0.lateness.p50Microseconds }
        add("lateness p99", unit: "µs", decimals: 1, floor: \.p99Microseconds) { $0.lateness.p99Microseconds }
        add("lateness max", unit: "µs", decimals: 1, floor: \.maxMicroseconds) { $0.lateness.maxMicroseconds }
        add("window start → last fire", unit: "ms", decimals: 2, floor: \.totalMilliseconds) {
            $0.lateness.totalMilliseconds
        }
        sizeRows = sizeRows.withPeerRatios()
        for row in sizeRows.indices where sizeRows[row].unit == "ms" {
            sizeRows[row].addRatio(toIdeal: ideal, label: "ideal \(window / 1_000_000) ms")
        }
        rows += sizeRows
    }
    return rows
}

/// Lateness percentiles of one run, and the time from the window's start to the last fire.
struct LatenessSummary {
    var p50Microseconds: Double
    var p99Microseconds: Double
    var maxMicroseconds: Double
    var totalMilliseconds: Double

    /// Summarises lateness values (nanoseconds, in any order).
    init(lateness: UnsafeBufferPointer<Int64>, windowStart: Int64, lastFire: Int64) {
        let sorted = lateness.sorted()
        let count = sorted.count
        func percentile(_ p: Double) -> Double {
            let rank = max(1, Int((p * Double(count)).rounded(.up)))
            return Double(sorted[min(rank, count) - 1]) / 1e3
        }
        p50Microseconds = percentile(0.50)
        p99Microseconds = percentile(0.99)
        maxMicroseconds = Double(sorted[count - 1]) / 1e3
        totalMilliseconds = Double(lastFire - windowStart) / 1e6
    }
}

/// The fire-date offsets of a run: uniform over `[0, window)`, the same for the same seed.
func timerOffsets(count: Int, window: Int64, seed: UInt64) -> [Int64] {
    var random = SplitMix64(state: seed)
    return (0..<count).map { _ in Int64(random.next() % UInt64(window)) }
}

/// One floor run: the same fire dates as the loop's run of this seed, slept for by a bare libevent base on
/// this thread. The window starts 5 ms after the dates are ready.
/// With a `series`, the lateness of every timer goes into that latency histogram too.
func timerFloorRun(count: Int, window: Int64, seed: UInt64, series: String? = nil) -> LatenessSummary {
    let offsets = timerOffsets(count: count, window: window, seed: seed).sorted()
    let windowStart = bf_now_ns() + 5_000_000
    let fireDates = offsets.map { windowStart + $0 }
    var lateness = [Int64](repeating: 0, count: count)
    let lastFire = lateness.withUnsafeMutableBufferPointer { buffer in
        bf_libevent_timers(fireDates, UInt64(count), buffer.baseAddress)
    }
    guard lastFire >= 0 else { fatalError("libevent timers floor failed") }
    if let series {
        lateness.withUnsafeBufferPointer {
            LatencyHistograms.shared.add(nanoseconds: $0, scenario: "timers", name: series)
        }
    }
    return lateness.withUnsafeBufferPointer { LatenessSummary(lateness: $0, windowStart: windowStart, lastFire: lastFire) }
}

/// What one timers run measured.
struct TimerRun {
    var createMicroseconds: Double
    var addMicroseconds: Double
    var lateness: LatenessSummary
    /// Every timer's lateness.
    var latenessHistogram: Histogram<UInt64>
    /// Creation and adds together, per timer.
    var createAndAddMicroseconds: Double { createMicroseconds + addMicroseconds }
    /// Creation plus adds, to size the next run's lead.
    var setUpNanoseconds: Int64
    /// How far past the window's start the adds finished (0 if in time).
    var addsOverranNanoseconds: Int64

    /// What a run measured, from its clock readings: creation from `createStart` to `addStart` (equal where
    /// creating and adding are one call), adds from `addStart` to `addEnd`, and the recorded lateness.
    init(count: Int, createStart: Int64, addStart: Int64, addEnd: Int64, windowStart: Int64,
         recorder: TimerRecorder) {
        createMicroseconds = Double(addStart - createStart) / 1e3 / Double(count)
        addMicroseconds = Double(addEnd - addStart) / 1e3 / Double(count)
        lateness = LatenessSummary(lateness: UnsafeBufferPointer(recorder.lateness), windowStart: windowStart,
                                   lastFire: recorder.lastFire)
        latenessHistogram = LatencyHistograms.makeHistogram()
        for value in recorder.lateness { _ = latenessHistogram.record(UInt64(max(0, value))) }
        setUpNanoseconds = addEnd - createStart
        addsOverranNanoseconds = max(0, addEnd - windowStart)
    }
}

/// Fire dates and lateness of every timer, written by the callbacks on the loop's thread.
final class TimerRecorder: @unchecked Sendable {
    let fireDates: UnsafeMutableBufferPointer<Int64>
    let lateness: UnsafeMutableBufferPointer<Int64>
    var fired = 0
    var lastFire: Int64 = 0

    init(count: Int) {
        fireDates = .allocate(capacity: count)
        lateness = .allocate(capacity: count)
        lateness.initialize(repeating: .min)
    }

    deinit {
        fireDates.deallocate()
        lateness.deallocate()
    }

    @inline(__always)
    func fire(_ index: Int) {
        let now = bf_now_ns()
        lateness[index] = now - fireDates[index]
        fired += 1
        lastFire = now
    }
}

/// A small deterministic generator (SplitMix64), so every run spreads its timers the same way per seed.
struct SplitMix64 {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// One timers run on a fresh loop thread.
func timerRun(count: Int, window: Int64, lead: Int64, seed: UInt64) -> TimerRun {
    let result = SharedValue<TimerRun?>(nil)
    let thread = JoinableThread {
        let loop = PortRunLoop.current
        let recorder = TimerRecorder(count: count)
        let offsets = timerOffsets(count: count, window: window, seed: seed)

        // The window's start on both clocks: the loop converts `ContinuousClock` instants to CLOCK_MONOTONIC
        // (bf_now_ns's clock) by their offset from now, so the two are read back to back.
        let windowStart = bf_now_ns() + lead
        let windowStartInstant = ContinuousClock.now + .nanoseconds(lead)

        let createStart = bf_now_ns()
        var timers: [RunLoopTimer] = []
        timers.reserveCapacity(count)
        for index in 0..<count {
            recorder.fireDates[index] = windowStart + offsets[index]
            timers.append(RunLoopTimer(fireAt: windowStartInstant + .nanoseconds(offsets[index])) { _ in
                recorder.fire(index)
            })
        }
        let addStart = bf_now_ns()
        for timer in timers {
            mustLoop("add timer") { () throws(RunLoopError) in try loop.add(timer, mode: .default) }
        }
        let addEnd = bf_now_ns()
        timers = [] // the loop holds them now; one-shot timers go when they have fired

        loop.run() // returns `finished` when the last timer has fired and left the mode
        precondition(recorder.fired == count, "timers: \(recorder.fired) of \(count) fired")

        result.value = TimerRun(count: count, createStart: createStart, addStart: addStart, addEnd: addEnd,
                                windowStart: windowStart, recorder: recorder)
    }
    thread.join()
    guard let run = result.value else { fatalError("timers run produced no result") }
    return run
}
