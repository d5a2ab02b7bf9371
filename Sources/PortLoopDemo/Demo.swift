// The demo's threads: the loop thread and its script of mode switches, and the producers.
import PortLoop
import PortLoopDemoSupport

/// What the loop thread reports back before the producers start.
private final class Setup: @unchecked Sendable {
    /// Written by the loop thread before it opens the gate, read by the main thread after.
    var error: RunLoopError?
}

/// Runs the demo and returns the process's exit status.
func runDemo(_ options: Options) -> Int32 {
    let durationNs = Int64(options.duration * 1e9)
    // About twelve ticks over the run, four per mode phase (kept between 20 and 500 ms).
    let timerInterval = min(500_000_000, max(20_000_000, durationNs / 12))
    let counters = Counters()

    let start = now()
    let startInstant = ContinuousClock.now
    let trace = Trace(start: start, quiet: options.quiet, counters: counters, timerInterval: timerInterval)

    // One Source1 per producer; its port's queue holds a whole burst.
    let queueLimit = min(1024, max(64, options.burst))
    let sources: [RunLoopPortSource]
    do throws(PortError) {
        sources = try (0..<options.producers).map { _ throws(PortError) in
            try RunLoopPortSource(queueLimit: queueLimit) { message in
                trace.handle(message)
                return nil
            }
        }
    } catch {
        printError("portloop-demo: cannot create a port: \(error)")
        return 1
    }
    var producerOf: [PortName: Int] = [:]
    for (index, source) in sources.enumerated() { producerOf[source.portName] = index + 1 }
    trace.producerOf = producerOf

    // Three runs: default, tracking, default, each a third of the duration.
    let phases: [(mode: PortRunLoop.Mode, end: Int64, note: String)] = [
        (.default, start + durationNs / 3, ""),
        (trackingMode, start + 2 * durationNs / 3,
         "as while a scroll view is dragged; timer \"default\" waits, \"common\" fires"),
        (.default, start + durationNs, "\"default\" fires once, late, then back on its grid"),
    ]

    if !options.quiet {
        let ports = sources.enumerated().map { "\($0.element.portName) ← producer \($0.offset + 1)" }
        let third = options.duration / 3
        print("""
            portloop-demo: a loop thread; \(options.producers) producer thread\(options.producers == 1 ? "" : "s") \
            sending bursts of \(options.burst) messages about every \(burstPeriod / 1_000_000) ms; \
            for \(seconds(options.duration))
              Source1 ports (common modes): \(ports.joined(separator: ", "))
              timers: "default" every \(millis(timerInterval)) in the default mode only, \
            "common" every \(millis(timerInterval)) in the common modes
              modes: default 0–\(seconds(third)), "tracking" \(seconds(third).dropLast(2))–\(seconds(2 * third)) \
            (a common mode, like UITrackingRunLoopMode), default \(seconds(2 * third).dropLast(2))–\(seconds(options.duration))
              an observer of all activities in the common modes prints each one; times are µs since the start

            """)
    }

    let setup = Setup()
    let ready = Gate()
    let loopThread = DemoThread(name: "demo-loop") {
        let loop = PortRunLoop.current
        trace.attach(loop)
        let observer = RunLoopObserver(activities: .allActivities) { _, activity in trace.observe(activity) }
        // Two timers on offset grids, so that their fires show up as separate wake-ups.
        let defaultTimer = RunLoopTimer(fireAt: startInstant + .nanoseconds(timerInterval / 4),
                                        interval: .nanoseconds(timerInterval)) { trace.timerFired("default", $0) }
        let commonTimer = RunLoopTimer(fireAt: startInstant + .nanoseconds(3 * timerInterval / 4),
                                       interval: .nanoseconds(timerInterval)) { trace.timerFired("common", $0) }
        do throws(RunLoopError) {
            try loop.addCommonMode(trackingMode)
            try loop.add(observer, mode: .common)
            for source in sources { try loop.add(source, mode: .common) }
            try loop.add(defaultTimer, mode: .default)
            try loop.add(commonTimer, mode: .common)
        } catch {
            setup.error = error
            ready.open()
            return
        }
        ready.open()
        let blocksBefore = voluntaryContextSwitches()

        for (index, phase) in phases.enumerated() {
            let length = max(0, phase.end - now())
            var text = "\(index > 0 ? "mode switch: " : "")run mode \(label(phase.mode)) for \(millis(length))"
            if !phase.note.isEmpty { text += " (" + phase.note + ")" }
            trace.banner(text)
            loop.run(mode: phase.mode, timeout: .nanoseconds(length))
        }

        // Producers stop starting bursts before the end; whatever is still in flight is handled here.
        let giveUp = now() + 2_000_000_000
        var announced = false
        while now() < giveUp, counters.producersFinished.load(ordering: .acquiring) < options.producers
                || trace.handled < counters.sent.load(ordering: .acquiring) {
            if !announced { trace.banner("handling the messages still in flight") }
            announced = true
            loop.run(mode: .default, timeout: .milliseconds(20))
        }

        if let before = blocksBefore, let after = voluntaryContextSwitches() { trace.loopThreadBlocks = after - before }
        for source in sources { source.invalidate() }
        defaultTimer.invalidate()
        commonTimer.invalidate()
        observer.invalidate()
    }

    ready.wait()
    if let error = setup.error {
        loopThread.join()
        printError("portloop-demo: cannot set up the loop: \(error)")
        return 1
    }

    let plan = ProducerPlan(start: start, lastBurstBy: start + durationNs - 60_000_000,
                            producers: options.producers, burst: options.burst)
    let producers = sources.enumerated().map { index, source in
        let port = source.makeSendRight()
        return DemoThread(name: "producer-\(index + 1)") { produce(index + 1, to: port, plan: plan, counters: counters) }
    }
    for producer in producers { producer.join() }
    loopThread.join()

    let summary = Summary(trace: trace, counters: counters, options: options)
    if !options.quiet { print("") }
    summary.printForPeople()
    print(summary.machineLine)

    let failures = counters.sendFailures.load(ordering: .acquiring)
    if failures > 0 || summary.handled != summary.sent {
        printError("portloop-demo: \(summary.sent) messages sent, \(summary.handled) handled, \(failures) failed sends")
        return 1
    }
    return 0
}
