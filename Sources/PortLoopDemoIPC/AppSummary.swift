// The app's closing summary: a block for people and one `summary:` line of key=value fields for scripts.
import PortLoopDemoSupport
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct AppSummary {
    let serverPID: Int32
    let sent: Int?
    let received: Int
    let handled: Int
    let inOrder: Bool
    let wakeUps: Int
    let source1WakeUps: Int
    let timerWakeUps: Int
    let mainQueueWakeUps: Int
    let otherWakeUps: Int
    let eventsPerWakeUp: Double
    let maxEventsPerWakeUp: Int
    let burstsInOneWakeUp: Int
    let bursts: Int
    let p50: Int64
    let p99: Int64
    let maxLatency: Int64
    let mainQueuePosted: Int
    let mainQueueRan: Int
    let mainQueueP50: Int64
    let mainQueueMax: Int64
    let frameFires: Int
    let offMainThread: Int
    let strayMessages: Int

    init(record: AppRecord) {
        serverPID = record.serverPID
        sent = record.endCount
        received = record.received
        handled = record.handled
        inOrder = record.orderBroken == nil
        wakeUps = record.wakeUps
        source1WakeUps = record.source1WakeUps
        timerWakeUps = record.timerWakeUps
        mainQueueWakeUps = record.mainQueueWakeUps
        otherWakeUps = record.otherWakeUps
        let perWakeUp = record.eventsPerSource1WakeUp
        eventsPerWakeUp = perWakeUp.isEmpty ? 0 : Double(perWakeUp.reduce(0, +)) / Double(perWakeUp.count)
        maxEventsPerWakeUp = perWakeUp.max() ?? 0
        (burstsInOneWakeUp, bursts) = record.burstsInOneWakeUp
        let sorted = record.latencies.sorted()
        p50 = percentile(sorted, 50)
        p99 = percentile(sorted, 99)
        maxLatency = sorted.last ?? 0
        mainQueuePosted = record.mainQueuePosted.load(ordering: .acquiring)
        mainQueueRan = record.mainQueueRan
        let delays = record.mainQueueDelays.sorted()
        mainQueueP50 = percentile(delays, 50)
        mainQueueMax = delays.last ?? 0
        frameFires = record.frameFires
        offMainThread = record.offMainThread
        strayMessages = record.strayMessages
    }

    func printForPeople() {
        let sentText = serverPID == 0 ? "no event server said hello"
            : sent.map { "\($0) sent by the event server (pid \(serverPID))" }
                ?? "the event server (pid \(serverPID)) sent no end message"
        let latency = handled == 0 ? "no events"
            : "p50 \(micros(p50)), p99 \(micros(p99)), max \(micros(maxLatency))"
        var lines = [
            "summary (app, pid \(getpid()))",
            "  events      \(sentText); \(received) received by the Source1, \(handled) handled by the Source0, "
                + (inOrder ? "in order" : "OUT OF ORDER"),
            "  wake-ups    \(wakeUps) of the main run loop: \(source1WakeUps) cross-process (the Source1's port), "
                + "\(timerWakeUps) by the \"frame\" timer, \(mainQueueWakeUps) by the main queue, \(otherWakeUps) "
                + "with nothing to do",
            "  coalescing  \(fixed(eventsPerWakeUp, 2)) events per cross-process wake-up (at most "
                + "\(maxEventsPerWakeUp)); \(burstsInOneWakeUp) of \(bursts) touch bursts arrived within one wake-up",
            "  latency     server's timestamp → Source0 handler: " + latency,
            "  meanwhile   \(mainQueueRan) of \(mainQueuePosted) DispatchQueue.main blocks ran (posted → run: p50 "
                + "\(micros(mainQueueP50)), max \(micros(mainQueueMax))); timer \"frame\" fired \(frameFires) times; "
                + (offMainThread == 0 ? "all of it on the main thread" : "\(offMainThread) callouts OFF the main thread"),
        ]
        if strayMessages > 0 { lines.append("  stray       \(strayMessages) messages that were not the demo's, ignored") }
        say(lines.joined(separator: "\n"))
    }

    /// One line of key=value fields; the demo's test reads it. `ending` is complete, server-gone or failed.
    func machineLine(ending: String) -> String {
        let fields: [(String, String)] = [
            ("ending", ending), ("server_pid", "\(serverPID)"), ("app_pid", "\(getpid())"),
            ("events_sent", sent.map { "\($0)" } ?? "none"), ("events_received", "\(received)"),
            ("events_handled", "\(handled)"), ("in_order", inOrder ? "1" : "0"),
            ("wakeups", "\(wakeUps)"), ("source1_wakeups", "\(source1WakeUps)"), ("timer_wakeups", "\(timerWakeUps)"),
            ("main_queue_wakeups", "\(mainQueueWakeUps)"), ("other_wakeups", "\(otherWakeUps)"),
            ("events_per_wakeup", fixed(eventsPerWakeUp, 2)), ("max_events_per_wakeup", "\(maxEventsPerWakeUp)"),
            ("bursts", "\(bursts)"), ("bursts_one_wakeup", "\(burstsInOneWakeUp)"),
            ("p50_us", fixed(Double(p50) / 1000, 1)), ("p99_us", fixed(Double(p99) / 1000, 1)),
            ("max_us", fixed(Double(maxLatency) / 1000, 1)),
            ("main_queue_posted", "\(mainQueuePosted)"), ("main_queue_ran", "\(mainQueueRan)"),
            ("frame_fires", "\(frameFires)"), ("off_main_thread", "\(offMainThread)"), ("stray", "\(strayMessages)"),
        ]
        return "summary: " + fields.map { "\($0.0)=\($0.1)" }.joined(separator: " ")
    }
}
