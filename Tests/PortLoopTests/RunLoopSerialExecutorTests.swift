@testable import PortLoop
import Testing

/// A run loop as a `SerialExecutor`: thread identity, FIFO order, interleaving with the loop's
/// other work, isolation checks, lifetime.
@Suite("Run loop executor", .timeLimit(.minutes(1)))
struct RunLoopExecutorTests {
    @Test("every job of an actor on the loop's executor runs on the loop's thread")
    func jobsRunOnTheLoopThread() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let actor = LoopActor(executor: worker.executor)
        let testThread = currentThreadID()
        for _ in 0..<100 {
            #expect(await actor.threadID() == worker.loop.threadID)
        }
        #expect(worker.loop.threadID != testThread)

        // Calls from many tasks at once, from whichever pool threads run them, still land on the loop.
        let threads = await withTaskGroup(of: [Int32].self) { group in
            for _ in 0..<8 {
                group.addTask { var ids: [Int32] = []; for _ in 0..<50 { ids.append(await actor.threadID()) }; return ids }
            }
            return await group.reduce(into: Set<Int32>()) { $0.formUnion($1) }
        }
        #expect(threads == [worker.loop.threadID])
    }

    @Test("jobs run in the order they were enqueued")
    func fifo() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let actor = SpawningActor(executor: worker.executor)
        // Tasks made inside the actor start on its executor: each creation enqueues one job, in order.
        let tasks = await actor.spawn(500)
        for task in tasks { await task.value }
        #expect(await actor.order == Array(0..<500))
    }

    @Test("each producer's calls keep their order; all producers' calls run")
    func perProducerOrder() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let actor = LoopActor(executor: worker.executor)
        await withTaskGroup(of: Void.self) { group in
            for producer in 0..<4 {
                group.addTask { for i in 0..<250 { await actor.record("\(producer):\(i)") } }
            }
        }
        let log = await actor.log
        #expect(log.count == 1000)
        for producer in 0..<4 {
            #expect(log.filter { $0.hasPrefix("\(producer):") } == (0..<250).map { "\(producer):\($0)" })
        }
    }

    @Test("a timer and a block run between a job and the job it enqueued")
    func interleavesWithTimersAndBlocks() async throws {
        let trace = Trace<String>()
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let actor = InterleavingActor(executor: worker.executor, trace: trace)
        try await actor.first().value
        // The block runs after the pass's sources, the due timer when the pass handles what woke it, and the
        // second job in the next pass: a chain of jobs cannot starve the loop's other work.
        #expect(trace.all == ["job 1", "block", "timer", "job 2"])
    }

    @Test("isolation checks hold inside the actor and anywhere on the loop's thread")
    func isolationChecks() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let actor = LoopActor(executor: worker.executor)
        let other = LoopActor(executor: try RunLoopSerialExecutor(loop: worker.loop))
        #expect(await actor.checkIsolation(sameLoopActor: other))

        // Off the loop's thread the executor does not claim the context.
        #expect(worker.executor.isIsolatingCurrentContext() == false)
        let elsewhere = ExecutorLoopThread()
        defer { elsewhere.stop() }
        #expect(!worker.executor.isSameExclusiveExecutionContext(other: elsewhere.executor))

        // A plain block on the loop's thread is not one of the executor's jobs, yet it is the executor's
        // context: assumeIsolated goes through checkIsolated and passes.
        let value = Locked<Int?>(nil)
        let done = Latch()
        try worker.loop.performAndWakeUp {
            worker.executor.checkIsolated()
            let count = actor.assumeIsolated { $0.log.count }
            value.withLock { $0 = count }
            done.signal()
        }
        done.wait()
        #expect(value.current == 1)
    }

    @Test("checkIsolated stops the program off the loop's thread")
    func checkIsolatedTraps() async {
        await #expect(processExitsWith: .failure) {
            withIdleLoop { loop in
                let executor = try! RunLoopSerialExecutor(loop: loop)
                executor.checkIsolated()
            }
        }
    }

    @Test("jobs wait while the loop is not running, or runs a mode that is not common")
    func jobsNeedARunningCommonMode() async throws {
        let started = Latch()
        let worker = ExecutorLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: "private")
        }, body: { loop in
            started.wait()
            loop.run(mode: "private", timeout: .milliseconds(150))
            loop.run()
        })
        let actor = LoopActor(executor: worker.executor)
        let ran = Locked(false)
        let task = Task {
            let mode = await actor.currentMode()
            ran.withLock { $0 = true }
            return mode
        }
        #expect(await eventually { worker.executor.pendingJobCount == 1 }, "the call reaches the executor")
        try await Task.sleep(for: .milliseconds(50))
        #expect(!ran.current, "the loop is not running yet")
        #expect(worker.executor.pendingJobCount == 1)
        started.signal()
        #expect(await task.value == .default, "ran once the loop ran a common mode, not in the private mode")
        worker.stop()
    }

    @Test("a job that runs the loop again does not run other jobs inside it")
    func noReentrantJobs() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let actor = NestingActor(executor: worker.executor)
        let second = await actor.runNested()
        await second.value
        #expect(await actor.log == ["outer start", "nested run done", "outer end", "second"])
    }

    @Test("releasing the executor takes its source off the loop, which may then finish")
    func releaseEndsTheLoop() async throws {
        let result = Locked<PortRunLoop.RunResult?>(nil)
        let box = Locked<RunLoopSerialExecutor?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            let executor = try RunLoopSerialExecutor(loop: loop)
            box.withLock { $0 = executor }
        }, body: { loop in
            let outcome = loop.run(mode: .default, timeout: .seconds(20))
            result.withLock { $0 = outcome }
            return [outcome]
        })
        weak let executor = box.current
        let actor = LoopActor(executor: box.current!)
        #expect(await actor.threadID() == worker.loop.threadID)
        box.withLock { $0 = nil }
        _ = consume actor
        #expect(worker.join() == [.finished])
        #expect(executor == nil)
    }
}

extension RunLoopExecutorTests {
    @Test("after the loop's thread exits, new executors are refused and the existing one is closed")
    func threadExited() async throws {
        let box = Locked<RunLoopSerialExecutor?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            let executor = try RunLoopSerialExecutor(loop: loop)
            box.withLock { $0 = executor }
        }, body: { _ in [] }) // the thread exits without running its loop
        _ = worker.join()
        let executor = try #require(box.current)
        #expect(throws: RunLoopError.threadExited) { try RunLoopSerialExecutor(loop: worker.loop) }
        // A job for a loop that will never run again cannot run anywhere: enqueuing one stops the program
        // (ExecutorShutdownTests checks that in a child process).
        #expect(executor.isClosed)
    }
}

/// Spawns tasks from inside its isolation, so that their first jobs are enqueued in creation order.
actor SpawningActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    private(set) var order: [Int] = []
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    func spawn(_ count: Int) -> [Task<Void, Never>] {
        (0..<count).map { i in Task { self.order.append(i) } }
    }
}

/// Queues a block, a due timer and a second job from its first job.
actor InterleavingActor {
    let executor: RunLoopSerialExecutor
    let trace: Trace<String>
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(executor: RunLoopSerialExecutor, trace: Trace<String>) { self.executor = executor; self.trace = trace }

    func first() throws -> Task<Void, Never> {
        trace.append("job 1")
        let loop = PortRunLoop.current
        let trace = self.trace
        try loop.add(RunLoopTimer(fireAt: .now - .seconds(1)) { _ in trace.append("timer") }, mode: .default)
        try loop.perform { trace.append("block") }
        return Task { self.second() }
    }

    func second() { trace.append("job 2") }
}

/// Runs the loop from inside a job.
actor NestingActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    private(set) var log: [String] = []
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    func runNested() -> Task<Void, Never> {
        log.append("outer start")
        let second = Task { self.log.append("second") }
        PortRunLoop.current.run(mode: .default, timeout: .milliseconds(50))
        log.append("nested run done")
        log.append("outer end")
        return second
    }
}

extension LoopActor {
    /// Checks this actor's isolation, and another's whose executor serves the same loop.
    func checkIsolation(sameLoopActor other: LoopActor) -> Bool {
        assertIsolated()
        preconditionIsolated()
        executor.checkIsolated()
        record("checked")
        // Another executor of the same loop is the same exclusive execution context.
        let otherCount = other.assumeIsolated { $0.log.count }
        return otherCount == 0 && executor.isIsolatingCurrentContext() == true
            && executor.isSameExclusiveExecutionContext(other: other.executor)
    }
}
