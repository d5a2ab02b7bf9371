@testable import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One run: results, the observer sequence, stop, nested runs.
@Suite("Run loop runs")
struct RunLoopRunTests {
    @Test("observer trace around a 50 ms one-shot timer on a secondary thread, then finished")
    func observerTrace() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopObserver(activities: .allActivities) { _, activity in trace.append("\(activity)") },
                         mode: .default)
            try loop.add(RunLoopTimer(after: .milliseconds(50)) { _ in trace.append("timer") }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        #expect(worker.join() == [.finished])
        #expect(trace.all == ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "timer", "exit"])
    }

    @Test("an empty, unknown or common mode finishes at once with no entry or exit callout")
    func finishedForEmptyMode() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopObserver(activities: .allActivities) { _, activity in trace.append("\(activity)") },
                         mode: .default)
        }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(5)), loop.run(mode: "nonexistent", timeout: .seconds(5)),
             loop.run(mode: .common, timeout: .seconds(5))]
        })
        #expect(worker.join() == [.finished, .finished, .finished])
        #expect(trace.all.isEmpty)
        #expect(worker.loop.errorsLogged.load(ordering: .relaxed) == 1, "running in common logs an error")
    }

    @Test("running in common logs exactly one error")
    func commonLogsOnce() throws {
        let counted = Locked(0)
        let worker = TestLoopThread(body: { loop in
            let before = loop.errorsLogged.load(ordering: .relaxed)
            let result = loop.run(mode: .common)
            counted.withLock { $0 = loop.errorsLogged.load(ordering: .relaxed) - before }
            return [result]
        })
        #expect(worker.join() == [.finished])
        #expect(counted.current == 1)
    }

    @Test("stop() from another thread ends the run with stopped")
    func stoppedFromAnotherThread() throws {
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        sleepMilliseconds(50)
        #expect(worker.loop.isWaiting)
        worker.loop.stop()
        #expect(worker.join() == [.stopped])
    }

    @Test("a run with a timeout returns timedOut; a zero timeout polls once")
    func timedOut() throws {
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in
            let start = nowNanoseconds()
            let first = loop.run(mode: .default, timeout: .milliseconds(30))
            let elapsed = nowNanoseconds() - start
            return [first, elapsed >= 30_000_000 ? .timedOut : .finished, loop.run(mode: .default, timeout: .zero)]
        })
        #expect(worker.join() == [.timedOut, .timedOut, .timedOut])
    }

    @Test("returnAfterSourceHandled returns handledSource for a Source0 and for a Source1")
    func handledSource() throws {
        let performed = Trace<String>()
        let source0 = RunLoopSource { performed.append("source0") }
        let source1 = try RunLoopPortSource { _ in performed.append("source1"); return nil }
        let sender = source1.makeSendRight()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(source0, mode: .default)
            try loop.add(source1, mode: .default)
        }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true),
             loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true)]
        })
        sleepMilliseconds(30)
        source0.signalAndWakeUp()
        sleepMilliseconds(30)
        try sender.send(id: 1)
        #expect(worker.join() == [.handledSource, .handledSource])
        #expect(performed.all == ["source0", "source1"])
    }

    @Test("a nested run of the same loop in another mode from inside a callout")
    func nestedRun() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .milliseconds(40)) { _ in trace.append("inner timer") }, mode: "inner")
            try loop.add(RunLoopTimer(after: .milliseconds(5)) { _ in
                trace.append("outer timer begins in \(loop.currentModeName!)")
                let result = loop.run(mode: "inner", timeout: .seconds(5))
                trace.append("inner run \(result) back in \(loop.currentModeName!)")
            }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        #expect(worker.join() == [.finished])
        #expect(trace.all == ["outer timer begins in kCFRunLoopDefaultMode", "inner timer",
                              "inner run finished back in kCFRunLoopDefaultMode"])
    }

    @Test("a nested run from the afterWaiting callout leaves the message that woke the outer run as it was",
          arguments: [16, 100_000])
    func nestedRunKeepsTheWakingMessage(size: Int) throws {
        // The outer run wakes with a message of port A in hand; before it is performed, an afterWaiting observer
        // runs the loop in another mode, which takes a message of port B: each handler must see its own bytes.
        let trace = Trace<String>()
        let portA = try PortReceiveRight(maxMessageSize: 200_000), portB = try PortReceiveRight(maxMessageSize: 200_000)
        let toA = portA.makeSendRight(), toB = portB.makeSendRight()
        try toA.send(id: 1, bytes: [UInt8](repeating: 0xA1, count: size))
        try toB.send(id: 2, bytes: [UInt8](repeating: 0xB2, count: size * 2))
        let sourceA = RunLoopPortSource(port: portA) { message in
            trace.append("A \(message.payload.count) \(Set(message.payload))")
            return nil
        }
        let sourceB = RunLoopPortSource(port: portB) { message in
            trace.append("B \(message.payload.count) \(Set(message.payload))")
            return nil
        }
        let nested = Locked(false)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(sourceA, mode: .default)
            try loop.add(sourceB, mode: "inner")
            try loop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in
                guard !nested.withLock({ let was = $0; $0 = true; return was }) else { return }
                trace.append("inner \(loop.run(mode: "inner", timeout: .seconds(5), returnAfterSourceHandled: true))")
            }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(5), returnAfterSourceHandled: true)] })
        #expect(worker.join() == [.handledSource])
        #expect(trace.all == ["B \(size * 2) [178]", "inner handledSource", "A \(size) [161]"])
    }

    @Test("stop() ends only the innermost run")
    func stopInnermost() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: "inner")
            try loop.add(RunLoopTimer(after: .milliseconds(5)) { _ in
                trace.append("inner \(loop.run(mode: "inner", timeout: .seconds(10)))")
            }, mode: .default)
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .milliseconds(300))] })
        sleepMilliseconds(60)
        worker.loop.stop()
        #expect(worker.join() == [.timedOut])
        #expect(trace.all == ["inner stopped"])
    }

    @Test("an idle loop with a far-future timer passes at most once in 200 ms")
    func idleLoopDoesNotSpin() throws {
        let passes = Locked(0)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
            try loop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in passes.withLock { $0 += 1 } }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .milliseconds(200))] })
        #expect(worker.join() == [.timedOut])
        #expect(passes.current <= 1)
    }

    @Test("a loop woken from its sleep sleeps again: three wake-ups, a handful of passes and little CPU in 300 ms")
    func wokenLoopSleepsAgain() throws {
        let passes = Locked(0)
        let cpuNanoseconds = Locked<Int64>(0)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
            try loop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in passes.withLock { $0 += 1 } }, mode: .default)
        }, body: { loop in
            let before = threadCPUNanoseconds()
            let result = loop.run(mode: .default, timeout: .milliseconds(300))
            cpuNanoseconds.withLock { $0 = threadCPUNanoseconds() - before }
            return [result]
        })
        for _ in 0..<3 {
            sleepMilliseconds(40)
            worker.loop.wakeUp()
        }
        #expect(worker.join() == [.timedOut])
        // Each wake-up ends one sleep (two may fold into one). A wake-up signal left pending would end every
        // sleep after it at once: thousands of passes, or a receive spinning inside the port set, busy for the
        // rest of the 300 ms.
        #expect(passes.current >= 1 && passes.current <= 5)
        #expect(cpuNanoseconds.current < 100_000_000, "the loop thread was busy while it should have slept")
    }

    @Test("run() on a thread that does not own the loop returns finished and logs")
    func runFromAnotherThread() throws {
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .milliseconds(100))] })
        let before = worker.loop.errorsLogged.load(ordering: .relaxed)
        #expect(worker.loop.run(mode: .default, timeout: .seconds(1)) == .finished)
        #expect(worker.loop.errorsLogged.load(ordering: .relaxed) == before + 1)
        #expect(worker.join() == [.timedOut])
    }

    @Test("the description lists ports, modes and items like CF's")
    func description() throws {
        let captured = Locked("")
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(60), interval: .seconds(60)) { _ in }, mode: .common)
            try loop.add(RunLoopSource(order: 3) {}, mode: "tracking")
            try loop.add(RunLoopObserver(activities: [.entry, .exit], order: 7) { _, _ in }, mode: .default)
        }, body: { loop in
            captured.withLock { $0 = loop.description }
            return []
        })
        _ = worker.join()
        let text = captured.current
        for needle in ["wakeup port = port#", "stopped = false", "common modes = {kCFRunLoopDefaultMode}",
                       "kCFRunLoopDefaultMode: {", "tracking: {", "RunLoopSource(order: 3", "activities: entry|exit",
                       "order: 7", "interval: 60.0 seconds", "RunLoopTimer(next fire in"] {
            #expect(text.contains(needle), "missing \(needle) in\n\(text)")
        }
    }
}

/// CPU time the calling thread has used.
private func threadCPUNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}
