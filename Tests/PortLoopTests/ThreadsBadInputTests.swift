@testable import PortLoop
import Testing

/// Bad input to cross-thread performs and loop threads: typed errors, nothing run, nothing lost.
@Suite("Cross-thread bad input")
struct ThreadsBadInputTests {
    @Test("an empty list of modes is refused with invalidArgument everywhere, and nothing is scheduled")
    func emptyModes() throws {
        let noModes = RunLoopError.invalidArgument(argument: "modes", reason: "empty: work in no mode never runs")
        withIdleLoop { loop in
            #expect(throws: noModes) { try loop.perform(afterDelay: .milliseconds(1), inModes: []) {} }
            #expect(throws: noModes) { try loop.perform(inModes: []) {} }
            #expect(throws: noModes) { try loop.performAndWakeUp(inModes: []) {} }
            #expect(throws: noModes) { try loop.perform(inModes: [], waitUntilDone: false) {} }
            #expect(throws: noModes) { try loop.perform(inModes: [], waitUntilDone: true) {} }
            #expect(throws: noModes) { _ = try RunLoopIdleQueue(loop: loop, modes: []) }
            #expect(throws: noModes) { _ = try RunLoopSerialExecutor(loop: loop, modes: []) }
            #expect(throws: noModes) { _ = try RunLoopScopeHooks(loop: loop, modes: [], setUp: {}, tearDown: { _ in }) }
            #expect(throws: StallMonitorError.runLoop(noModes)) {
                try RunLoopStallMonitor(loop: loop, threshold: .milliseconds(10), modes: []).start()
            }
            #expect(loop.pendingPerformRequestCount == 0)
            #expect(loop.nextTimerFireDate(in: .default) == nil)
            #expect(loop.blocks.isEmpty, "no block was queued")
        }
        // On the loop's own thread, where waitUntilDone would run the block at once, too.
        let ranInline = Locked(false)
        let worker = TestLoopThread(setUp: { loop in
            #expect(throws: noModes) { try loop.perform(inModes: [], waitUntilDone: true) { ranInline.withLock { $0 = true } } }
        }, body: { _ in [] })
        _ = worker.join()
        #expect(!ranInline.current)
    }

    @Test("performAndAwait with an empty list of modes throws invalidArgument, off and on the loop's thread")
    func emptyModesAwaited() async throws {
        let noModes = RunLoopError.invalidArgument(argument: "modes", reason: "empty: work in no mode never runs")
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let ran = Locked(false)
        await #expect(throws: noModes) { try await worker.loop.performAndAwait(inModes: []) { ran.withLock { $0 = true } } }
        #expect(worker.loop.pendingBlockCount == 0, "nothing was queued")
        // On the loop's own thread, where a block with modes runs in place, too.
        let onLoop = EmptyModesActor(executor: worker.executor)
        #expect(await onLoop.performWithNoModes(ran: ran) == noModes)
        #expect(!ran.current)
    }

    @Test("performs on the loop of a thread that has exited throw threadExited")
    func exitedThreadLoop() throws {
        let exited = TestLoopThread(body: { _ in [] })
        _ = exited.join()
        let loop = exited.loop
        #expect(throws: RunLoopError.threadExited) { try loop.perform(waitUntilDone: false) {} }
        #expect(throws: RunLoopError.threadExited) { try loop.perform(inModes: [.default], waitUntilDone: true) {} }
        #expect(throws: RunLoopError.threadExited) { try loop.perform(afterDelay: .milliseconds(10)) {} }
        #expect(loop.pendingPerformRequestCount == 0)
        #expect(loop.cancelPerformRequests() == 0)
    }

    @Test("a thread that exits with delayed performs pending drops them; their tokens cancel nothing")
    func exitWithPendingDelayedPerforms() throws {
        let ran = Locked(false)
        let request = Locked<PerformRequest?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            let pending = try loop.perform(afterDelay: .seconds(60)) { ran.withLock { $0 = true } }
            request.withLock { $0 = pending }
        }, body: { _ in [] })
        _ = worker.join()
        #expect(worker.loop.pendingPerformRequestCount == 0)
        let token = try #require(request.current)
        #expect(!token.isPending)
        #expect(!token.cancel())
        #expect(!ran.current)
    }

    @Test("a loop thread for the common-modes marker is refused with invalidArgument, and no thread starts")
    func commonModeThread() throws {
        #expect(throws: PortError.invalidArgument(argument: "mode",
                                                  reason: "kCFRunLoopCommonModes is the common-modes marker, not a mode a loop can run")) {
            _ = try RunLoopThread(name: "common", mode: .common)
        }
        // Any real mode is fine, a common one included.
        let thread = try RunLoopThread(name: "default", mode: .default)
        #expect(try thread.executeAndWait { PortRunLoop.current.currentModeName } == .default)
        thread.stop()
    }

    @Test("a stopped loop thread refuses tasks with a typed error")
    func stoppedLoopThread() throws {
        let thread = try RunLoopThread()
        thread.stop()
        #expect(throws: RunLoopThreadError<Never>.stopped) { try thread.execute {} }
        #expect(throws: RunLoopThreadError<TaskFailure>.stopped) {
            try thread.executeAndWait { () throws(TaskFailure) -> Int in 1 }
        }
        #expect(throws: RunLoopError.threadExited) { try thread.loop.perform(waitUntilDone: true) {} }
        #expect(throws: RunLoopError.threadExited) { try thread.loop.perform(afterDelay: .zero) {} }
    }
}

/// Awaits a block with no modes from a job on the loop's own thread.
actor EmptyModesActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    /// The error `performAndAwait(inModes: [])` throws here, or nil if it ran the block.
    func performWithNoModes(ran: Locked<Bool>) async -> RunLoopError? {
        precondition(executor.loop.isCurrent)
        do throws(RunLoopError) {
            try await executor.loop.performAndAwait(inModes: []) { ran.withLock { $0 = true } }
            return nil
        } catch {
            return error
        }
    }
}
