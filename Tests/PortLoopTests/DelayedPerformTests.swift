@testable import PortLoop
import Testing

/// `performSelector:withObject:afterDelay:inModes:` and `cancelPreviousPerformRequestsWithTarget:`.
@Suite("Delayed performs")
struct DelayedPerformTests {
    /// A loop thread whose default and "tracking" modes each hold a far-off timer, so that they never run
    /// empty; `body` runs on it.
    private func worker(_ body: @escaping @Sendable (PortRunLoop) -> [PortRunLoop.RunResult]) -> TestLoopThread {
        TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: "tracking")
        }, body: body)
    }

    @Test("a delayed perform runs once, on the loop's thread, in its mode, not before the delay")
    func firesAfterDelay() throws {
        let worker = worker { loop in [loop.run(mode: .default, timeout: .seconds(30))] }
        let fired = Locked<[(Int64, Int32, String?)]>([])
        let start = nowNanoseconds()
        let request = try worker.loop.perform(afterDelay: .milliseconds(200), inModes: [.default]) {
            fired.withLock { $0.append((nowNanoseconds(), currentThreadID(), PortRunLoop.current.currentModeName?.rawValue)) }
            PortRunLoop.current.stop()
        }
        #expect(request.isPending)
        #expect(request.modes == [.default])
        #expect(worker.join() == [.stopped])
        let all = fired.current
        try #require(all.count == 1)
        let elapsedMs = Double(all[0].0 - start) / 1e6
        #expect(elapsedMs >= 199.9, "not before the delay (\(elapsedMs) ms)")
        #expect(elapsedMs < 5_000, "and not very long after it (\(elapsedMs) ms)")
        #expect(all[0].1 == worker.loop.threadID)
        #expect(all[0].2 == PortRunLoop.Mode.default.rawValue)
        #expect(!request.isPending)
        #expect(!request.cancel(), "a perform that ran cannot be cancelled")
    }

    @Test("a delayed perform for one mode waits while the loop runs another, then runs in its own")
    func firesOnlyInItsMode() throws {
        let fired = Locked<[(String?, Int64)]>([])
        let trackingStart = Locked<Int64>(0)
        let worker = worker { loop in
            // The perform becomes due during the tracking run but must wait for the default run.
            trackingStart.withLock { $0 = nowNanoseconds() }
            return [loop.run(mode: "tracking", timeout: .milliseconds(400)), loop.run(mode: .default, timeout: .seconds(30))]
        }
        try worker.loop.perform(afterDelay: .milliseconds(50), inModes: [.default]) {
            fired.withLock { $0.append((PortRunLoop.current.currentModeName?.rawValue, nowNanoseconds())) }
            PortRunLoop.current.stop()
        }
        #expect(worker.join() == [.timedOut, .stopped])
        let all = fired.current
        try #require(all.count == 1)
        #expect(all[0].0 == PortRunLoop.Mode.default.rawValue)
        // Measured from the tracking run's start on the loop's thread (the test thread's own clock reading may
        // come later on a loaded machine).
        let afterTrackingStart = Double(all[0].1 - trackingStart.current) / 1e6
        #expect(afterTrackingStart >= 399, "it waited for the tracking run to end (\(afterTrackingStart) ms)")
    }

    @Test("a delayed perform in several modes runs once, in whichever runs first after the delay")
    func severalModesRunOnce() throws {
        let count = Locked(0)
        let worker = worker { loop in
            [loop.run(mode: "tracking", timeout: .milliseconds(300)), loop.run(mode: .default, timeout: .milliseconds(300))]
        }
        let request = try worker.loop.perform(afterDelay: .milliseconds(20), inModes: ["tracking", .default]) {
            count.withLock { $0 += 1 }
        }
        #expect(worker.join() == [.timedOut, .timedOut])
        #expect(count.current == 1)
        #expect(!request.isPending)
    }

    @Test("cancelling by token before the delay keeps the block from running")
    func cancelByToken() throws {
        let ran = Locked(0)
        let worker = worker { loop in [loop.run(mode: .default, timeout: .milliseconds(400))] }
        let cancelled = try worker.loop.perform(afterDelay: .milliseconds(100)) { ran.withLock { $0 += 100 } }
        let kept = try worker.loop.perform(afterDelay: .milliseconds(100)) { ran.withLock { $0 += 1 } }
        #expect(worker.loop.pendingPerformRequestCount == 2)
        #expect(cancelled.cancel())
        #expect(!cancelled.cancel(), "cancel is idempotent and reports only the first")
        #expect(!cancelled.isPending)
        #expect(worker.loop.pendingPerformRequestCount == 1)
        #expect(worker.join() == [.timedOut])
        #expect(ran.current == 1)
        #expect(!kept.isPending)
        #expect(worker.loop.pendingPerformRequestCount == 0)
    }

    @Test("cancelPerformRequests cancels every pending delayed perform of the loop, and only those")
    func cancelAll() throws {
        let trace = Trace<String>()
        let worker = worker { loop in [loop.run(mode: .default, timeout: .milliseconds(400))] }
        var requests: [PerformRequest] = []
        for index in 0..<3 {
            requests.append(try worker.loop.perform(afterDelay: .milliseconds(100), inModes: [.default, "tracking"]) {
                trace.append("delayed \(index)")
            })
        }
        // An ordinary queued perform is not a delayed one and is not cancelled.
        try worker.loop.perform(inModes: [.default], waitUntilDone: false) { trace.append("queued") }
        try withIdleLoop { other in
            let untouched = try other.perform(afterDelay: .seconds(60)) {}
            #expect(worker.loop.cancelPerformRequests() == 3)
            #expect(untouched.isPending, "another loop's performs are its own")
            #expect(other.cancelPerformRequests() == 1)
        }
        #expect(worker.loop.cancelPerformRequests() == 0)
        #expect(requests.allSatisfy { !$0.isPending && !$0.cancel() })
        #expect(worker.join() == [.timedOut])
        #expect(trace.all == ["queued"])
    }

    @Test("a zero delay runs at the loop's next pass, never inside the call")
    func zeroDelay() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.perform(afterDelay: .zero) { trace.append("perform") }
            trace.append("returned")
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        // The perform's one-shot timer was all the mode held: once it ran, the mode is empty and the run ends.
        #expect(worker.join() == [.finished])
        #expect(trace.all == ["returned", "perform"])
    }

    @Test("cancelling from another thread while the loop fires: the block runs or the cancel succeeds, never both")
    func cancelRacesFire() throws {
        let ran = Locked(0)
        let worker = worker { loop in [loop.run(mode: .default, timeout: .seconds(60))] }
        var cancels = 0
        for index in 0..<200 {
            let request = try worker.loop.perform(afterDelay: .microseconds(index * 50)) { ran.withLock { $0 += 1 } }
            if index % 3 == 0 { sleepMilliseconds(1) }
            if request.cancel() { cancels += 1 }
        }
        // Due after every perform above: timers fire in fire-date order, so all of them are settled first.
        try worker.loop.perform(afterDelay: .milliseconds(50)) { PortRunLoop.current.stop() }
        #expect(worker.join() == [.stopped])
        #expect(ran.current + cancels == 200)
        #expect(cancels > 0)
        #expect(worker.loop.pendingPerformRequestCount == 0)
    }
}
