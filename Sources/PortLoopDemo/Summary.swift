// The closing summary: a block for people and one `summary:` line of key=value fields for scripts.
import PortLoopDemoSupport

struct Summary {
    let producers: Int
    let burstSize: Int
    let sent: Int
    let burstsSent: Int
    let handled: Int
    let passes: Int
    let wakeUps: Int
    let portWakeUps: Int
    let timerWakeUps: Int
    let otherWakeUps: Int
    let wakeUpsWithoutSleep: Int
    /// Bursts whose messages were all handled without the loop sleeping in between: at most one wake-up.
    let burstsInOneWakeUp: Int
    let p50: Int64
    let p99: Int64
    let maxLatency: Int64
    let defaultTimer: Trace.TimerStats
    let commonTimer: Trace.TimerStats
    let loopThreadBlocks: Int?

    init(trace: Trace, counters: Counters, options: Options) {
        producers = options.producers
        burstSize = options.burst
        sent = counters.sent.load(ordering: .acquiring)
        burstsSent = counters.burstsSent.load(ordering: .acquiring)
        handled = trace.handled
        passes = trace.passes
        wakeUps = trace.wakeUps
        portWakeUps = trace.portWakeUps
        timerWakeUps = trace.timerWakeUps
        otherWakeUps = trace.otherWakeUps
        wakeUpsWithoutSleep = trace.wakeUpsWithoutSleep
        burstsInOneWakeUp = trace.bursts.values.filter { $0.wakeUps <= 1 && $0.handled == options.burst }.count
        let sorted = trace.latencies.sorted()
        p50 = percentile(sorted, 50)
        p99 = percentile(sorted, 99)
        maxLatency = sorted.last ?? 0
        defaultTimer = trace.timers["default"] ?? Trace.TimerStats()
        commonTimer = trace.timers["common"] ?? Trace.TimerStats()
        loopThreadBlocks = trace.loopThreadBlocks
    }

    /// Messages handled per wake-up from a sleep that a port caused.
    var messagesPerPortWakeUp: Double { portWakeUps == 0 ? 0 : Double(handled) / Double(portWakeUps) }

    /// Messages that cost no wake-up: queued behind the one that woke the loop, or sent while it was awake.
    var freeSends: Int { handled - portWakeUps }

    func printForPeople() {
        let freeShare = handled == 0 ? 0 : 100 * Double(freeSends) / Double(handled)
        var wakes = "\(wakeUps) (afterWaiting): \(portWakeUps) woken by a producer's port, \(timerWakeUps) by a timer, "
            + "\(otherWakeUps) at a run's timeout"
        if wakeUpsWithoutSleep > 0 {
            wakes += ", \(wakeUpsWithoutSleep) without sleeping (a message was queued already at beforeWaiting)"
        }
        var lines = [
            "summary",
            "  messages    \(sent) sent by \(producers) producer\(producers == 1 ? "" : "s") in \(burstsSent) "
                + "burst\(burstsSent == 1 ? "" : "s") of \(burstSize); \(handled) handled on the loop thread "
                + "in \(passes) passes",
            "  wake-ups    " + wakes,
            "  coalescing  \(fixed(messagesPerPortWakeUp, 1)) messages per port wake-up; \(freeSends) of \(handled) "
                + "sends (\(fixed(freeShare, 1)) %) cost no wake-up; \(burstsInOneWakeUp) of \(burstsSent) bursts "
                + "handled within one wake-up",
            "  latency     send → Source1 handler: p50 \(micros(p50)), p99 \(micros(p99)), max \(micros(maxLatency))",
            "  timers      \"default\" (default mode): \(defaultTimer.fires) fires, \(defaultTimer.firesWhileTracking) "
                + "while tracking; \"common\" (common modes): \(commonTimer.fires) fires, "
                + "\(commonTimer.firesWhileTracking) while tracking",
        ]
        if let loopThreadBlocks {
            lines.append("  kernel      the loop thread blocked \(loopThreadBlocks) times "
                         + "(voluntary context switches, /proc)")
        }
        print(lines.joined(separator: "\n"))
    }

    /// One line of key=value fields; the demo's test reads it.
    var machineLine: String {
        let fields: [(String, String)] = [
            ("messages", "\(sent)"), ("handled", "\(handled)"), ("bursts", "\(burstsSent)"),
            ("bursts_one_wakeup", "\(burstsInOneWakeUp)"), ("passes", "\(passes)"),
            ("wakeups", "\(wakeUps)"), ("port_wakeups", "\(portWakeUps)"), ("timer_wakeups", "\(timerWakeUps)"),
            ("other_wakeups", "\(otherWakeUps)"), ("no_sleep_wakeups", "\(wakeUpsWithoutSleep)"),
            ("msgs_per_port_wakeup", fixed(messagesPerPortWakeUp, 2)), ("free_sends", "\(freeSends)"),
            ("p50_us", fixed(Double(p50) / 1000, 1)), ("p99_us", fixed(Double(p99) / 1000, 1)),
            ("max_us", fixed(Double(maxLatency) / 1000, 1)),
            ("default_fires", "\(defaultTimer.fires)"), ("default_fires_tracking", "\(defaultTimer.firesWhileTracking)"),
            ("common_fires", "\(commonTimer.fires)"), ("common_fires_tracking", "\(commonTimer.firesWhileTracking)"),
            ("loop_blocks", loopThreadBlocks.map { "\($0)" } ?? "n/a"),
        ]
        return "summary: " + fields.map { "\($0.0)=\($0.1)" }.joined(separator: " ")
    }
}
