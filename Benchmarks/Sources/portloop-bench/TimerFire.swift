import CBenchFloors
import NIOCore
import NIOPosix
import PortLoop

/// `timer-fire`: what firing one one-shot timer costs the loop, with nothing else in the way.
///
/// On a fresh loop thread: 1,000,000 one-shot timers (100,000 with `--quick`) with fire dates spread over the
/// 10 ms before now (so every one is due, in a real order, across several of the heap's millisecond buckets),
/// all added before the loop runs; then `run()` until the last has fired and the mode is empty. The figure is
/// the run's wall time divided by the timer count: per fire, the pop from the heap, the claim, the callout (a
/// counter increment), the timer leaving the mode and its release. The `timers` scenario measures the same
/// path paced by the clock; this one measures its capacity. Peer: SwiftNIO's `scheduleTask(deadline:)` with
/// the same dates on a one-thread group, timed on the loop from the first task to the last. (CFRunLoop is not
/// measured here: its timers live in a sorted array, and a million adds into it take minutes.)
let timerFireScenario = Scenario(
    name: "timer-fire",
    summary: "1M one-shot timers all due at once: ns per fire (ours, NIO)"
) { settings in
    let count = settings.quick ? 100_000 : 1_000_000
    let samples = checkingDescriptors("timer-fire") {
        measureInterleaved(runs: settings.runs, [
            { timerFireRun(count: count) },
            { nioTimerFireRun(count: count) },
        ])
    }
    let label = "\(count / 1_000)k due timers"
    let rows = [
        Row(.ours, "\(label): loop: ns per fire", sample: samples[0], unit: "ns/fire", decimals: 1),
        Row(.peer, "\(label): NIO: ns per fire", sample: samples[1], unit: "ns/fire", decimals: 1, short: "NIO"),
        Row(.counter, "\(label): loop: fires per second", sample: Sample(values: samples[0].values.map { 1e3 / $0 }),
            unit: "M fires/s", decimals: 2),
    ]
    return rows.withPeerRatios()
}

/// Counts the callbacks (on the loop's thread only).
private final class FireCounter: @unchecked Sendable {
    var fired = 0
}

/// Fire-date offsets (nanoseconds before the moment the loop starts) for `count` timers, all in the past.
private func pastOffsets(count: Int) -> [Int64] {
    var random = SplitMix64(state: 0x5EED_F1E5)
    return (0..<count).map { _ in -1 - Int64(random.next() % 10_000_000) }
}

/// One run of ours: nanoseconds per fire.
func timerFireRun(count: Int) -> Double {
    let result = SharedValue<Double>(.nan)
    let offsets = pastOffsets(count: count)
    let thread = JoinableThread {
        let loop = PortRunLoop.current
        let counter = FireCounter()
        let now = ContinuousClock.now
        for offset in offsets {
            let timer = RunLoopTimer(fireAt: now + .nanoseconds(offset)) { _ in counter.fired += 1 }
            mustLoop("add timer") { () throws(RunLoopError) in try loop.add(timer, mode: .default) }
        }
        let start = bf_now_ns()
        loop.run() // returns `finished` when the last timer has fired and left the mode
        let end = bf_now_ns()
        precondition(counter.fired == count, "timer-fire: \(counter.fired) of \(count) fired")
        result.value = Double(end - start) / Double(count)
    }
    thread.join()
    return result.value
}

/// One run of SwiftNIO: the same dates as scheduled tasks; nanoseconds per task from the first to the last.
func nioTimerFireRun(count: Int) -> Double {
    let nio = NIOLoops(threads: 1)
    let loop = nio.loops[0]
    let offsets = pastOffsets(count: count)
    let counter = FireCounter()
    let done = Latch<Int64>()
    let first = SharedValue<Int64>(0)
    onLoop(loop) { () -> Void in
        let now = NIODeadline.now().uptimeNanoseconds
        for offset in offsets {
            loop.scheduleTask(deadline: .uptimeNanoseconds(UInt64(Int64(now) + offset))) {
                if counter.fired == 0 { first.value = bf_now_ns() }
                counter.fired += 1
                if counter.fired == count { done.set(bf_now_ns()) }
            }
        }
    }
    let end = done.wait()
    nio.shutDown()
    return Double(end - first.value) / Double(count - 1)
}
