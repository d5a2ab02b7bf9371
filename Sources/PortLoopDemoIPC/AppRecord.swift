// The app's record of its main run loop: what each wake-up handled (the observer, the Source1 and Source0
// callouts, main-queue blocks, timer fires), the figures for the summary, and the trace printed from them.
import PortLoop
import PortLoopDemoSupport
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What woke the main loop: the first callout after afterWaiting says.
enum WakeCause {
    /// The Source1's port: a message from the event server, in another process.
    case source1
    case timer
    case mainQueue
    /// Nothing was handled (the run's timeout, or a `wakeUp()`).
    case nothing
}

/// The main thread's view of the app. Touched only on the main thread (observer, callouts, blocks), except
/// `mainQueuePosted`, which the posting thread counts.
final class AppRecord: @unchecked Sendable {
    /// From afterWaiting (or the run's entry) to the next beforeWaiting (or exit): one wake-up and what it did,
    /// including the Source0 that its Source1 callouts signalled.
    private struct Record {
        /// 0 for the part of the run before its first sleep.
        let wakeUp: Int
        let began: Int64
        let slept: Int64
        var full: Bool
        var cause = WakeCause.nothing
        var lines: [(at: Int64, activity: String, detail: String)] = []
        var received: [InputEvent] = []
        var handled = 0
        var minLatency = Int64.max
        var maxLatency: Int64 = 0
        var others: [String] = []
    }

    let tracer: Tracer
    private let mainThread = pthread_self()
    /// Set once the Source1 exists.
    var portName = PortName(rawValue: 0)

    // The pipeline: the Source1 queues events, the Source0 handles them.
    private var queued: [InputEvent] = []
    private(set) var serverRight: PortSendRight?
    private(set) var serverPID: Int32 = 0
    /// How many events the server says it sent; set by its end message.
    private(set) var endCount: Int?
    /// The dead-name notification for the server's right came: after every message the server sent.
    private(set) var serverGone = false
    private(set) var received = 0
    private(set) var handled = 0
    private var lastSequence: UInt32 = 0
    /// The first event handled out of order, if any.
    private(set) var orderBroken: String?
    private(set) var latencies: [Int64] = []
    private(set) var strayMessages = 0

    // Wake-ups.
    private var record: Record?
    private var wentToSleepAt: Int64 = 0
    private var fullRecordsLeft = 3
    private var fullSource1RecordsLeft = 2
    private var explainedCompression = false
    private(set) var wakeUps = 0
    private(set) var source1WakeUps = 0
    private(set) var timerWakeUps = 0
    private(set) var mainQueueWakeUps = 0
    private(set) var otherWakeUps = 0
    /// Events the Source1 received in each wake-up that it caused.
    private(set) var eventsPerSource1WakeUp: [Int] = []
    /// Per touch: the wake-ups in which its burst of moves arrived.
    private var burstWakeUps: [UInt32: Set<Int>] = [:]

    // Meanwhile on the main thread.
    let mainQueuePosted = Atomic<Int>(0)
    private(set) var mainQueueRan = 0
    private(set) var mainQueueDelays: [Int64] = []
    private(set) var frameFires = 0
    /// Callouts that ran on a thread other than the main one: none, if the main loop is what it says.
    private(set) var offMainThread = 0

    init(tracer: Tracer) { self.tracer = tracer }

    /// Touch bursts whose moves all arrived within one wake-up, and all touch bursts.
    var burstsInOneWakeUp: (one: Int, all: Int) {
        (burstWakeUps.values.filter { $0.count == 1 }.count, burstWakeUps.count)
    }

    /// No events wait for the Source0.
    var nothingQueued: Bool { queued.isEmpty }

    // MARK: - Callouts

    /// The Source1 handler: a message from the event server. Events are queued for the Source0, as the
    /// HID client's Source1 queues them for UIKit's event-dispatch Source0.
    func received(_ message: ReceivedMessage) {
        let at = now()
        checkThread()
        var current = currentRecord(at, cause: .source1)
        if case let .deadName(port, _)? = PortNotification(message) {
            serverGone = true
            current.others.append("dead-name notification: the event server is gone")
            current.lines.append((at, "", "  ↳ Source1 \(portName): dead-name notification for \(port): the event server "
                                  + "is gone, and every message it sent was taken before this one"))
            record = current
            return
        }
        switch message.id {
        case MessageID.event:
            guard let event = InputEvent(message.payload) else {
                strayMessages += 1
                current.others.append("an event message of \(message.payload.count) bytes, ignored")
                break
            }
            received += 1
            queued.append(event)
            current.received.append(event)
            if event.kind == .touchMoved { burstWakeUps[event.gesture, default: []].insert(current.wakeUp) }
            if current.full {
                current.lines.append((at, "", "  ↳ Source1 \(portName): event #\(event.sequence) \(event.description) "
                                      + "from pid \(message.sender.processID), queued; Source0 signalled"))
            }
        case MessageID.hello:
            serverPID = message.sender.processID
            if case let .sendRight(right)? = message.attachments.first { serverRight = right }
            let watch = serverRight.map { "; asked to be told on this port when its \($0.name) dies" } ?? ""
            current.others.append("hello from the event server, pid \(serverPID)")
            current.lines.append((at, "", "  ↳ Source1 \(portName): hello from the event server, pid \(serverPID)\(watch)"))
        case MessageID.end:
            endCount = count(from: message.payload)
            current.others.append("end: the server sent \(endCount ?? 0) events")
            current.lines.append((at, "", "  ↳ Source1 \(portName): end message, the server sent \(endCount ?? 0) events"))
        default:
            strayMessages += 1
            current.others.append("a message id \(message.id) of \(message.payload.count) bytes, ignored")
        }
        record = current
    }

    /// The Source0's work: handles every queued event, in order. Returns how many it handled.
    @discardableResult
    func dispatchQueued() -> Int {
        checkThread()
        guard !queued.isEmpty else { return 0 }
        let at = now()
        var current = currentRecord(at, cause: nil)
        let events = queued
        queued.removeAll(keepingCapacity: true)
        for event in events {
            let latency = now() - event.timestamp
            latencies.append(latency)
            handled += 1
            if event.sequence != lastSequence + 1 && orderBroken == nil {
                orderBroken = "#\(event.sequence) after #\(lastSequence)"
            }
            lastSequence = event.sequence
            current.handled += 1
            current.minLatency = min(current.minLatency, latency)
            current.maxLatency = max(current.maxLatency, latency)
            if current.full {
                current.lines.append((at, "", "  ↳ Source0 \"dispatch\": \(event.description) handled, "
                                      + "\(micros(latency)) after the server sent it"))
            }
        }
        record = current
        return events.count
    }

    /// A block from the main queue, posted at `postedAt` by the app's "network" thread.
    func mainQueueBlock(_ number: Int, postedAt: Int64) {
        let at = now()
        checkThread()
        mainQueueRan += 1
        mainQueueDelays.append(at - postedAt)
        var current = currentRecord(at, cause: .mainQueue)
        current.others.append("main queue block \(number)")
        current.lines.append((at, "", "  ↳ DispatchQueue.main block \(number), \(micros(at - postedAt)) after it was posted"))
        record = current
    }

    /// The "frame" timer.
    func frameFired() {
        let at = now()
        checkThread()
        frameFires += 1
        var current = currentRecord(at, cause: .timer)
        current.others.append("timer \"frame\" fire \(frameFires)")
        current.lines.append((at, "", "  ↳ timer \"frame\" fire \(frameFires)"))
        record = current
    }

    /// The all-activities observer.
    func observe(_ activity: PortRunLoop.Activity, loop: PortRunLoop) {
        let at = now()
        switch activity {
        case .entry:
            close()
            record = Record(wakeUp: 0, began: at, slept: 0, full: takeFull())
            record?.lines.append((at, "entry", "mode default: the main run loop of pid \(getpid())"))
        case .beforeTimers, .beforeSources:
            var current = currentRecord(at, cause: nil)
            current.lines.append((at, "\(activity)", ""))
            record = current
        case .beforeWaiting:
            var current = currentRecord(at, cause: nil)
            let next = loop.nextTimerFireDate(in: .default).map {
                "; next timer due in \(millis(max(0, nanoseconds($0 - ContinuousClock.now))))"
            } ?? ""
            current.lines.append((at, "beforeWaiting", "going to sleep\(next)"))
            record = current
            close()
            wentToSleepAt = at
        case .afterWaiting:
            close()
            wakeUps += 1
            record = Record(wakeUp: wakeUps, began: at, slept: at - wentToSleepAt, full: takeFull())
        case .exit:
            close()
            tracer.line(at, "exit", "mode default")
        default:
            break
        }
    }

    // MARK: - Records

    private func checkThread() {
        if pthread_equal(pthread_self(), mainThread) == 0 { offMainThread += 1 }
    }

    private func takeFull() -> Bool {
        guard fullRecordsLeft > 0 else { return false }
        fullRecordsLeft -= 1
        return true
    }

    /// The record in progress (one is started if a callout comes outside any), its cause set by the first
    /// callout that can wake the loop.
    private func currentRecord(_ at: Int64, cause: WakeCause?) -> Record {
        var current = record ?? Record(wakeUp: 0, began: at, slept: 0, full: false)
        if let cause, current.cause == .nothing {
            current.cause = cause
            if cause == .source1 && current.wakeUp > 0 && fullSource1RecordsLeft > 0 {
                fullSource1RecordsLeft -= 1
                current.full = true
            }
        }
        return current
    }

    /// Counts the record in progress and prints it: in full, activity by activity, or as one line.
    private func close() {
        guard let current = record else { return }
        record = nil
        if current.wakeUp > 0 {
            switch current.cause {
            case .source1:
                source1WakeUps += 1
                eventsPerSource1WakeUp.append(current.received.count)
            case .timer: timerWakeUps += 1
            case .mainQueue: mainQueueWakeUps += 1
            case .nothing: otherWakeUps += 1
            }
        }
        guard !tracer.quiet else { return }

        if current.full {
            if current.wakeUp > 0 {
                tracer.line(current.began, "afterWaiting",
                            "wake \(current.wakeUp): slept \(millis(current.slept)); woken by \(describe(current.cause))")
            }
            for line in current.lines { tracer.line(line.at, line.activity, line.detail) }
            return
        }
        if !explainedCompression {
            explainedCompression = true
            tracer.line(current.began, "…", "from here one line per wake-up: what woke the loop, what it handled")
        }
        var parts: [String] = []
        if !current.received.isEmpty {
            let first = current.received.first!.sequence, last = current.received.last!.sequence
            let range = first == last ? "#\(first)" : "#\(first)–#\(last)"
            var text = "Source1: \(current.received.count) event\(current.received.count == 1 ? "" : "s") \(range) "
                + "(\(groups(current.received)))"
            if current.handled > 0 {
                let latency = current.handled == 1 || current.minLatency == current.maxLatency
                    ? micros(current.maxLatency)
                    : "\(micros(current.minLatency).dropLast(3))–\(micros(current.maxLatency))"
                text += " → Source0: \(current.handled) handled, \(latency)"
            }
            parts.append(text)
        } else if current.handled > 0 {
            parts.append("Source0: \(current.handled) handled")
        }
        parts += current.others
        if parts.isEmpty { parts = ["nothing to handle"] }
        let label = current.wakeUp > 0 ? "wake \(current.wakeUp)" : "pass"
        tracer.line(current.began, label, parts.joined(separator: "; "))
    }

    private func describe(_ cause: WakeCause) -> String {
        switch cause {
        case .source1: "Source1 \(portName) (\"\(serviceName)\", a message from pid \(serverPID))"
        case .timer: "timer \"frame\""
        case .mainQueue: "the main dispatch queue"
        case .nothing: "nothing: the run's timeout or a wake-up"
        }
    }

    /// "touch 4 began, touch 4 moved ×9": consecutive events of one gesture and kind together.
    private func groups(_ events: [InputEvent]) -> String {
        var groups: [(event: InputEvent, count: Int)] = []
        for event in events {
            if let last = groups.last, last.event.gesture == event.gesture, last.event.kind == event.kind {
                groups[groups.count - 1].count += 1
            } else {
                groups.append((event, 1))
            }
        }
        var texts = groups.prefix(4).map { group in
            let noun = group.event.kind.isTouch ? "touch" : "key"
            return "\(noun) \(group.event.gesture) \(group.event.kind.label)" + (group.count > 1 ? " ×\(group.count)" : "")
        }
        if groups.count > 4 { texts.append("…") }
        return texts.joined(separator: ", ")
    }
}
