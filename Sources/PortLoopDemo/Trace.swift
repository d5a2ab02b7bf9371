// The loop thread's record of the run: observer activities, what each wake-up handled, the statistics,
// and the trace printed from them.
import PortLoop
import PortLoopDemoSupport

/// The mode the loop switches into while "a scroll view is dragged" (UIKit's UITrackingRunLoopMode);
/// it is made a common mode, so common-mode items run in it and default-mode ones do not.
let trackingMode: PortRunLoop.Mode = "tracking"

/// A short name for a mode in the trace.
func label(_ mode: PortRunLoop.Mode) -> String { mode == .default ? "default" : mode.rawValue }

/// What woke the loop: the first callout after afterWaiting says.
enum WakeCause: Equatable {
    case port(PortName, producer: Int)
    case timer(String)
    /// Nothing was handled: the run's deadline passed (or someone called `wakeUp()`).
    case nothing
}

/// The loop thread's view of the demo. Touched only on the loop thread (observer, Source1 handler and timer
/// callouts) while the demo runs, and read by the main thread after joining it.
final class Trace: @unchecked Sendable {
    struct TimerStats {
        var fires = 0
        var firesWhileTracking = 0
    }

    struct BurstKey: Hashable {
        let producer: Int
        let burst: UInt32
    }

    struct BurstState {
        var handled = 0
        /// Wake-ups from a sleep during which its messages were handled.
        var wakeUps = 0
        var lastWakeUp = -1
    }

    /// Consecutive messages of one burst handled in one pass.
    private struct Group {
        let producer: Int
        let port: PortName
        let burst: UInt32
        let burstSize: Int
        let at: Int64
        var first: Int
        var last: Int
        var minLatency: Int64
        var maxLatency: Int64
    }

    private enum Event {
        case messages(Group)
        case timer(name: String, fire: Int, at: Int64, late: Int64)
    }

    /// The part of a pass from afterWaiting to the next pass (or exit): what the wake-up handled.
    private struct Pass {
        let wakeUp: Int
        let wokeAt: Int64
        let slept: Int64
        let queuedBeforeSleep: Bool
        let full: Bool
        var cause = WakeCause.nothing
        var events: [Event] = []
    }

    let start: Int64
    let quiet: Bool
    let counters: Counters
    let timerInterval: Int64
    /// Which producer owns each Source1 port; set before the loop thread starts.
    var producerOf: [PortName: Int] = [:]
    private var loop: PortRunLoop?

    // The run in progress.
    private var mode = PortRunLoop.Mode.default
    private var previousMode: PortRunLoop.Mode?
    private var runs = 0
    private var passInRun = 0
    private var fullPassesLeft = 0
    private var fullPass = false
    private var pass: Pass?
    private var wentToSleepAt: Int64 = 0
    private var queuedAtSleep = false
    private var explainedCompression = false

    // Statistics.
    private(set) var passes = 0
    /// afterWaiting callouts; split below into those that slept, by what woke the loop, and those that did not.
    private(set) var wakeUps = 0
    private(set) var portWakeUps = 0
    private(set) var timerWakeUps = 0
    private(set) var otherWakeUps = 0
    /// Wake-ups whose beforeWaiting already saw more messages sent than handled: that receive returned at once,
    /// without sleeping (the previous pass had handled a full batch, or a message came while the loop was busy).
    private(set) var wakeUpsWithoutSleep = 0
    private(set) var handled = 0
    private(set) var latencies: [Int64] = []
    private(set) var bursts: [BurstKey: BurstState] = [:]
    private(set) var timers: [String: TimerStats] = [:]
    /// How often the loop thread blocked in the kernel while it ran the loop; set at the end.
    var loopThreadBlocks: Int?

    init(start: Int64, quiet: Bool, counters: Counters, timerInterval: Int64) {
        self.start = start
        self.quiet = quiet
        self.counters = counters
        self.timerInterval = timerInterval
    }

    /// Called on the loop thread before the loop runs.
    func attach(_ loop: PortRunLoop) { self.loop = loop }

    // MARK: - Callouts

    /// The all-activities observer.
    func observe(_ activity: PortRunLoop.Activity) {
        let at = now()
        switch activity {
        case .entry:
            endPass(exiting: false)
            runs += 1
            passInRun = 0
            previousMode = runs > 1 ? mode : nil
            mode = loop?.currentModeName ?? .default
            fullPassesLeft = runs == 1 ? 3 : 2
            line(at, "entry", "mode \(label(mode))")
        case .beforeTimers:
            endPass(exiting: false)
            passes += 1
            passInRun += 1
            fullPass = fullPassesLeft > 0
            if fullPass { fullPassesLeft -= 1 }
            if fullPass { line(at, "beforeTimers", "pass \(passInRun) of this run") }
        case .beforeSources:
            if fullPass { line(at, "beforeSources") }
        case .beforeWaiting:
            wentToSleepAt = at
            // Sends are counted after they return: more sent than handled means a message is queued already.
            queuedAtSleep = counters.sent.load(ordering: .acquiring) > handled
            if fullPass { line(at, "beforeWaiting", sleepNote()) }
        case .afterWaiting:
            wakeUps += 1
            pass = Pass(wakeUp: wakeUps, wokeAt: at, slept: at - wentToSleepAt, queuedBeforeSleep: queuedAtSleep,
                        full: fullPass)
        case .exit:
            endPass(exiting: true)
            line(at, "exit", "mode \(label(mode))")
        default:
            line(at, "\(activity)")
        }
    }

    /// A Source1 handler: one producer's message.
    func handle(_ message: ReceivedMessage) {
        let at = now()
        guard let payload = Payload(message.payload) else { return }
        let latency = at - payload.sentAt
        handled += 1
        latencies.append(latency)
        let producer = producerOf[message.arrivalPort] ?? 0
        let index = Int(payload.index)

        var current = pass ?? Pass(wakeUp: 0, wokeAt: at, slept: 0, queuedBeforeSleep: false, full: fullPass)
        if current.events.isEmpty { current.cause = .port(message.arrivalPort, producer: producer) }
        if case var .messages(group)? = current.events.last, group.producer == producer,
           group.burst == payload.burst, group.last + 1 == index {
            group.last = index
            group.minLatency = min(group.minLatency, latency)
            group.maxLatency = max(group.maxLatency, latency)
            current.events[current.events.count - 1] = .messages(group)
        } else {
            current.events.append(.messages(Group(producer: producer, port: message.arrivalPort, burst: payload.burst,
                                                  burstSize: Int(payload.burstSize), at: at, first: index, last: index,
                                                  minLatency: latency, maxLatency: latency)))
        }
        let key = BurstKey(producer: producer, burst: payload.burst)
        var burst = bursts[key] ?? BurstState()
        burst.handled += 1
        if current.wakeUp > 0 && burst.lastWakeUp != current.wakeUp && !current.queuedBeforeSleep {
            burst.wakeUps += 1
            burst.lastWakeUp = current.wakeUp
        }
        bursts[key] = burst
        pass = current
    }

    /// A timer callout.
    func timerFired(_ name: String, _ timer: RunLoopTimer) {
        let at = now()
        // During the callout the timer's next fire date is still the one it fired for.
        let late = max(0, nanoseconds(ContinuousClock.now - timer.nextFireDate))
        var stats = timers[name] ?? TimerStats()
        stats.fires += 1
        if mode == trackingMode { stats.firesWhileTracking += 1 }
        timers[name] = stats
        var current = pass ?? Pass(wakeUp: 0, wokeAt: at, slept: 0, queuedBeforeSleep: false, full: fullPass)
        if current.events.isEmpty { current.cause = .timer(name) }
        current.events.append(.timer(name: name, fire: stats.fires, at: at, late: late))
        pass = current
    }

    /// A line from the loop thread's script between runs.
    func banner(_ text: String) {
        guard !quiet else { return }
        print("── \(text) " + String(repeating: "─", count: max(2, 100 - text.count)))
    }

    // MARK: - Printing

    /// Closes the pass in progress: counts what woke it and prints it, in full or as one line.
    private func endPass(exiting: Bool) {
        guard let pass else { return }
        self.pass = nil
        if pass.wakeUp > 0 && pass.queuedBeforeSleep {
            wakeUpsWithoutSleep += 1
        } else if pass.wakeUp > 0 {
            switch pass.cause {
            case .port: portWakeUps += 1
            case .timer: timerWakeUps += 1
            case .nothing: otherWakeUps += 1
            }
        }
        guard !quiet else { return }

        let cause: String
        switch pass.cause {
        case let .port(port, producer): cause = "\(port) (producer \(producer))"
        case let .timer(name): cause = "timer \"\(name)\""
        case .nothing: cause = exiting ? "the run's timeout: nothing to handle" : "the wake-up port: nothing to handle"
        }
        let sleep = pass.queuedBeforeSleep ? "did not sleep (a message was queued already)" : "slept \(millis(pass.slept))"

        if pass.full {
            let wake = pass.wakeUp > 0 ? "wake \(pass.wakeUp): " : ""
            line(pass.wokeAt, "afterWaiting", "\(wake)\(sleep); woken by \(cause)")
            for event in pass.events {
                let (at, text) = describe(event)
                line(at, "", "  ↳ " + text)
            }
            if fullPassesLeft == 0 && !exiting {
                let note = explainedCompression
                    ? "…"
                    : "… from here one line per wake-up (the full trace again at each mode switch)"
                explainedCompression = true
                print(padLeft("", 14) + note)
            }
        } else {
            var parts = pass.events.prefix(4).map { describe($0).text }
            if pass.events.count > 4 { parts.append("and \(pass.events.count - 4) more") }
            if parts.isEmpty { parts = [cause] }
            let noSleep = pass.queuedBeforeSleep ? " (no sleep: queued already)" : ""
            let wake = pass.wakeUp > 0 ? "wake \(pass.wakeUp)" : "pass"
            line(pass.wokeAt, wake, padRight(label(mode), 9) + parts.joined(separator: "; ") + noSleep)
        }
    }

    private func describe(_ event: Event) -> (at: Int64, text: String) {
        switch event {
        case let .messages(group):
            let count = group.last - group.first + 1
            let which = count == group.burstSize
                ? (count == 1 ? "its one message" : "all \(count) messages")
                : (count == 1 ? "message \(group.first + 1)" : "messages \(group.first + 1)–\(group.last + 1)")
                  + " of \(group.burstSize)"
            let latency = count == 1 ? micros(group.minLatency)
                : "\(micros(group.minLatency).dropLast(3))–\(micros(group.maxLatency))"
            return (group.at, "\(group.port) (producer \(group.producer)) burst \(group.burst): \(which), latency \(latency)")
        case let .timer(name, fire, at, late):
            var text = "timer \"\(name)\" fire \(fire), \(millis(late)) late"
            if late >= timerInterval {
                text += previousMode == trackingMode && mode != trackingMode
                    ? " (it waited while the loop ran \"tracking\"; missed ticks skipped)" : " (missed ticks skipped)"
            }
            return (at, text)
        }
    }

    private func sleepNote() -> String {
        if queuedAtSleep { return "a message is queued already: the receive will return at once" }
        guard let loop, let next = loop.nextTimerFireDate(in: mode) else { return "going to sleep" }
        return "going to sleep; next timer due in \(millis(max(0, nanoseconds(next - ContinuousClock.now))))"
    }

    private func line(_ at: Int64, _ activity: String, _ detail: String = "") {
        guard !quiet else { return }
        let stamp = "[" + padLeft(String((at - start) / 1000), 9) + " µs]"
        print(detail.isEmpty ? stamp + " " + activity : stamp + " " + padRight(activity, 14) + " " + detail)
    }
}
