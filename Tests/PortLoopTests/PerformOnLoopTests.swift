@testable import PortLoop
import Testing

/// `performSelector:onThread:withObject:waitUntilDone:modes:` on any loop.
@Suite("Perform on a loop's thread")
struct PerformOnLoopTests {
    @Test("waitUntilDone returns after the block ran on the loop's thread, in a matching mode")
    func waitUntilDone() throws {
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        let ranOn = Locked<(Int32, String?)>((0, nil))
        try worker.loop.perform(inModes: [.default], waitUntilDone: true) {
            ranOn.withLock { $0 = (currentThreadID(), PortRunLoop.current.currentModeName?.rawValue) }
        }
        // No synchronisation besides the wait itself: the block's effects are visible at once.
        #expect(ranOn.current.0 == worker.loop.threadID)
        #expect(ranOn.current.1 == PortRunLoop.Mode.default.rawValue)
        try worker.loop.perform(inModes: [.default], waitUntilDone: false) { PortRunLoop.current.stop() }
        #expect(worker.join() == [.stopped])
    }

    @Test("a block for a mode the loop is not running waits, and runs when that mode runs")
    func waitsForMode() throws {
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: "tracking")
        }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(30)), loop.run(mode: "tracking", timeout: .seconds(30))]
        })
        let trace = Trace<String>()
        let waiter = TestThread {
            try! worker.loop.perform(inModes: ["tracking"], waitUntilDone: true) {
                trace.append("ran in \(PortRunLoop.current.currentModeName?.rawValue ?? "-")")
                PortRunLoop.current.stop()
            }
            trace.append("waiter returned")
        }
        sleepMilliseconds(200)
        #expect(trace.all.isEmpty, "the loop runs the default mode: the tracking block waits, and so does its caller")
        try worker.loop.perform(inModes: [.default], waitUntilDone: true) { PortRunLoop.current.stop() }
        waiter.join()
        #expect(trace.all == ["ran in tracking", "waiter returned"])
        #expect(worker.join() == [.stopped, .stopped])
    }

    @Test("waitUntilDone on the loop's own thread runs the block at once, whatever the modes")
    func ownThreadRunsInPlace() throws {
        let order = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.perform(inModes: ["never-run"], waitUntilDone: true) { order.append("block") }
            order.append("after")
            // Without waiting, it is queued like any block.
            try loop.perform(inModes: ["never-run"], waitUntilDone: false) { order.append("queued") }
        }, body: { _ in [] })
        _ = worker.join()
        #expect(order.all == ["block", "after"])
    }

    @Test("waitUntilDone: false wakes a sleeping loop and returns at once")
    func asynchronousWakesLoop() throws {
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        while !worker.loop.isWaiting { sleepMilliseconds(1) }
        let ran = Latch()
        try worker.loop.perform(waitUntilDone: false) { ran.signal(); PortRunLoop.current.stop() }
        ran.wait()
        #expect(worker.join() == [.stopped])
    }

    @Test("a waiting caller is released with threadExited when the loop's thread exits without running the block")
    func waiterReleasedWhenThreadExits() throws {
        let release = Latch()
        let worker = TestLoopThread(body: { _ in release.wait(); return [] }) // never runs its loop
        let outcome = Locked<RunLoopError?>(nil)
        let ran = Locked(false)
        let waiter = TestThread {
            do throws(RunLoopError) {
                try worker.loop.perform(inModes: [.default], waitUntilDone: true) { ran.withLock { $0 = true } }
            } catch {
                outcome.withLock { $0 = error }
            }
        }
        sleepMilliseconds(100)
        release.signal()
        _ = worker.join()
        waiter.join()
        #expect(outcome.current == .threadExited)
        #expect(!ran.current)
    }

    @Test("a block dropped when its thread exits is released outside the loop's lock: its captures may call the loop")
    func droppedBlockReleasedOutsideLock() throws {
        let outcome = Locked<RunLoopError?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            let probe = CallsLoopWhenReleased(loop: loop, outcome: outcome)
            try loop.perform(inModes: ["never-run"]) { _ = probe }
        }, body: { _ in [] })
        _ = worker.join() // deadlocked here when the teardown released blocks with the loop's lock held
        #expect(outcome.current == .threadExited)
    }
}

/// `performAndAwait`, the async form of `perform(inModes:waitUntilDone: true)`.
@Suite("Perform on a loop's thread, awaited", .timeLimit(.minutes(1)))
struct PerformAndAwaitTests {
    @Test("returns the block's value once it ran on the loop's thread, in a matching mode")
    func returnsAfterRunning() async throws {
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        let (thread, mode) = try await worker.loop.performAndAwait(inModes: [.default]) {
            (currentThreadID(), PortRunLoop.current.currentModeName)
        }
        #expect(thread == worker.loop.threadID)
        #expect(mode == .default)
        try worker.loop.perform(inModes: [.default], waitUntilDone: false) { PortRunLoop.current.stop() }
        #expect(worker.join() == [.stopped])
    }

    @Test("callers waiting for a loop that is not running yet hold no thread of the cooperative pool")
    func doesNotBlockThePool() async throws {
        let start = Latch()
        let worker = TestLoopThread(body: { loop in
            start.wait()
            return [loop.run(mode: .default, timeout: .seconds(30))] // runs the blocks, then finishes empty
        })
        let callers = (0..<8).map { index in Task { try await worker.loop.performAndAwait { index * 2 } } }
        #expect(await eventually { worker.loop.pendingBlockCount == 8 })
        #expect(await Task.detached { 42 }.value == 42, "the pool still runs other tasks")
        start.signal()
        for (index, caller) in callers.enumerated() { #expect(try await caller.value == index * 2) }
        #expect(worker.join() == [.finished])
    }

    @Test("a waiting task is resumed with threadExited when the loop's thread exits without running the block")
    func resumedWhenThreadExits() async throws {
        let release = Latch()
        let worker = TestLoopThread(body: { _ in release.wait(); return [] }) // never runs its loop
        let ran = Locked(false)
        let caller = Task {
            try await worker.loop.performAndAwait(inModes: [.default]) { ran.withLock { $0 = true } }
        }
        #expect(await eventually { worker.loop.pendingBlockCount == 1 })
        release.signal()
        _ = worker.join()
        await #expect(throws: RunLoopError.threadExited) { try await caller.value }
        #expect(!ran.current)
        // And at once for a loop whose thread has gone.
        await #expect(throws: RunLoopError.threadExited) { try await worker.loop.performAndAwait {} }
    }

    @Test("on the loop's own thread, inside an executor's job, the block runs in place whatever the modes")
    func ownThreadRunsInPlace() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let actor = LoopPerformingActor(executor: worker.executor)
        #expect(try await actor.performInPlace() == ["in place", "after"])
    }
}

/// Awaits a block on its own loop from a job on that loop's thread.
actor LoopPerformingActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    func performInPlace() async throws(RunLoopError) -> [String] {
        let trace = Trace<String>()
        // A mode the loop never runs: queued, the block would never run and this call would never return.
        try await PortRunLoop.current.performAndAwait(inModes: ["never-run"]) { trace.append("in place") }
        trace.append("after")
        return trace.all
    }
}

/// Calls into its loop from its deinit, as a dropped block's captures may (a waiter's sentinel, a loop
/// thread stopping itself on its last release).
final class CallsLoopWhenReleased: Sendable {
    let loop: PortRunLoop
    let outcome: Locked<RunLoopError?>
    init(loop: PortRunLoop, outcome: Locked<RunLoopError?>) { self.loop = loop; self.outcome = outcome }
    deinit {
        do throws(RunLoopError) { try loop.perform {} } catch { outcome.withLock { $0 = error } }
    }
}
