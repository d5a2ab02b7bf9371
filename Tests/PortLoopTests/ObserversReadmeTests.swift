import PortLoop
import Testing

/// The examples of README.md's "Run-loop observers put to work" section, as written there but with `print` traced, each run on a fresh
/// loop thread: they compile against the public API and do what the README says.
@Suite("Observers README examples")
struct ObserversReadmeTests {
    @Test("stall monitor example: one report for the 300 ms timer callout")
    func stallMonitorExample() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(body: { _ in
            let loop = PortRunLoop.current
            let monitor = RunLoopStallMonitor(loop: loop, threshold: .milliseconds(100)) { report in
                trace.append("stall: \(report)")
            }
            try! monitor.start()

            try! loop.add(RunLoopTimer(after: .milliseconds(10)) { _ in
                sleepMilliseconds(300) // a callout that blocks the loop for 300 ms
            }, mode: .default)
            loop.run() // returns once the one-shot timer has fired: the mode is empty
            monitor.stop() // removes the observers and joins the watchdog
            return []
        })
        _ = worker.join()
        #expect(trace.all.count == 1)
        #expect(trace.all.first?.hasPrefix("stall: pass in mode kCFRunLoopDefaultMode running for ") == true)
        #expect(trace.all.first?.hasSuffix("last stage afterWaiting") == true)
    }

    @Test("idle work example: six tasks in order, then the timers")
    func idleExample() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(body: { _ in
            let loop = PortRunLoop.current
            let idle = try! RunLoopIdleQueue(loop: loop, maxTasksPerPass: 2)
            for n in 1...6 {
                try! idle.enqueue { trace.append("idle task \(n)") } // three passes of two tasks
            }
            try! loop.add(RunLoopTimer(after: .milliseconds(5)) { _ in trace.append("timer") }, mode: .default)
            try! loop.add(RunLoopTimer(after: .milliseconds(100)) { _ in trace.append("done") }, mode: .default)
            loop.run()
            return []
        })
        _ = worker.join()
        #expect(trace.all == (1...6).map { "idle task \($0)" } + ["timer", "done"])
    }

    @Test("scope hooks example: a stopwatch per pass")
    func scopeHooksExample() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(body: { _ in
            let loop = PortRunLoop.current
            // A per-pass stopwatch: the scope's value is the time it opened.
            let hooks = try! RunLoopScopeHooks(loop: loop,
                                               setUp: { ContinuousClock.now },
                                               tearDown: { opened in trace.append("scope closed after \(ContinuousClock.now - opened)") })
            try! loop.add(RunLoopTimer(after: .milliseconds(20)) { _ in trace.append("timer") }, mode: .default)
            loop.run()
            hooks.invalidate()
            return []
        })
        _ = worker.join()
        let all = trace.all
        #expect(all.count == 3)
        #expect(all.first?.hasPrefix("scope closed after") == true)
        #expect(all.dropFirst().first == "timer")
        #expect(all.last?.hasPrefix("scope closed after") == true)
    }
}
