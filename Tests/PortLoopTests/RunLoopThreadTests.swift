@testable import PortLoop
import Testing

/// A task's own error, to check that executeAndWait rethrows it typed.
struct TaskFailure: Error, Hashable { let code: Int }

/// The keep-alive loop thread: identity, results, refusal on itself, stop, drop.
@Suite("Run loop threads")
struct RunLoopThreadTests {
    @Test("execute and executeAndWait run on the thread, whose loop is the thread's current loop")
    func threadIdentity() throws {
        let thread = try RunLoopThread(name: "identity")
        defer { thread.stop() }
        let here = currentThreadID()
        let executedOn = Locked<Int32>(0)
        try thread.execute { executedOn.withLock { $0 = currentThreadID() } }
        let (waitedOn, loopIsCurrent, isCurrent) = try thread.executeAndWait {
            (currentThreadID(), PortRunLoop.current === thread.loop, thread.isCurrent)
        }
        // Tasks run FIFO, so the execute above has run once executeAndWait returns.
        #expect(executedOn.current == thread.loop.threadID)
        #expect(waitedOn == thread.loop.threadID)
        #expect(waitedOn != here)
        #expect(loopIsCurrent && isCurrent)
        #expect(!thread.isCurrent)
        #expect(try thread.executeAndWait { currentThreadName() } == "identity")
    }

    @Test("a long name is cut to the kernel's 15 bytes at a character boundary")
    func longName() throws {
        let thread = try RunLoopThread(name: "a-rather-long-thread-name")
        defer { thread.stop() }
        #expect(thread.name == "a-rather-long-thread-name")
        #expect(try thread.executeAndWait { currentThreadName() } == "a-rather-long-t")
        let accented = try RunLoopThread(name: "ééééééééé") // 2 bytes each: 7 fit
        defer { accented.stop() }
        #expect(try accented.executeAndWait { currentThreadName() } == "ééééééé")
    }

    @Test("executeAndWait returns the task's value and rethrows its error, typed")
    func valueAndError() throws {
        let thread = try RunLoopThread()
        defer { thread.stop() }
        #expect(try thread.executeAndWait { 6 * 7 } == 42)
        #expect(try thread.executeAndWait { "text" + "!" } == "text!")
        #expect(throws: RunLoopThreadError<TaskFailure>.failed(TaskFailure(code: 7))) {
            try thread.executeAndWait { () throws(TaskFailure) -> Int in throw TaskFailure(code: 7) }
        }
        // The thread goes on after a failed task.
        #expect(try thread.executeAndWait { 1 } == 1)
    }

    @Test("tasks run FIFO, from several threads")
    func fifo() throws {
        let thread = try RunLoopThread()
        defer { thread.stop() }
        let order = Locked<[Int]>([])
        for index in 0..<200 { try thread.execute { order.withLock { $0.append(index) } } }
        let senders = (0..<4).map { sender in
            TestThread { for index in 0..<100 { try! thread.execute { order.withLock { $0.append(1000 * (sender + 1) + index) } } } }
        }
        senders.forEach { $0.join() }
        try thread.executeAndWait {}
        let all = order.current
        #expect(all.count == 600)
        #expect(Array(all.filter { $0 < 1000 }) == Array(0..<200))
        for sender in 1...4 {
            #expect(all.filter { $0 / 1000 == sender } == Array((1000 * sender)..<(1000 * sender + 100)))
        }
    }

    @Test("executeAndWait on the thread itself is refused with a typed error instead of deadlocking")
    func refusedOnOwnThread() throws {
        let thread = try RunLoopThread()
        defer { thread.stop() }
        let inner = try thread.executeAndWait { () -> RunLoopThreadError<Never>? in
            do throws(RunLoopThreadError<Never>) {
                _ = try thread.executeAndWait { 1 }
                return nil
            } catch {
                return error
            }
        }
        #expect(inner == .calledOnLoopThread)
        // execute on the thread itself queues the task after the current one.
        let trace = Trace<String>()
        try thread.executeAndWait {
            try! thread.execute { trace.append("queued") }
            trace.append("current")
        }
        try thread.executeAndWait {}
        #expect(trace.all == ["current", "queued"])
    }

    @Test("stop ends the loop and joins the thread; it is idempotent; later tasks are refused")
    func stopJoins() throws {
        let thread = try RunLoopThread()
        let loop = thread.loop
        try thread.executeAndWait {}
        #expect(!thread.isStopped && !thread.isFinished)
        thread.stop()
        #expect(thread.isStopped)
        #expect(thread.isFinished, "stop returns after the thread's body returned")
        #expect(loop.hasExitedThread, "and after the thread exited: its loop was torn down")
        thread.stop()
        #expect(throws: RunLoopThreadError<Never>.stopped) { try thread.execute {} }
        #expect(throws: RunLoopThreadError<Never>.stopped) { try thread.executeAndWait { 1 } }
    }

    @Test("tasks queued before stop still run; stop from two threads at once joins once")
    func stopRunsQueuedTasksAndIsThreadSafe() throws {
        let thread = try RunLoopThread()
        let gate = Latch()
        let ran = Locked(0)
        try thread.execute { gate.wait() }
        for _ in 0..<10 { try thread.execute { ran.withLock { $0 += 1 } } }
        let stoppers = (0..<2).map { _ in TestThread { thread.stop() } }
        while !thread.isStopped { sleepMilliseconds(1) }
        gate.signal()
        stoppers.forEach { $0.join() }
        #expect(thread.isFinished)
        #expect(ran.current == 10)
    }

    @Test("executeAndWait while a stop is under way is refused without queuing")
    func executeAndWaitWhileStopping() throws {
        let thread = try RunLoopThread()
        let gate = Latch()
        try thread.execute { gate.wait() }
        let stopper = TestThread { thread.stop() }
        while !thread.isStopped { sleepMilliseconds(1) }
        #expect(throws: RunLoopThreadError<Never>.stopped) { try thread.executeAndWait { 1 } }
        gate.signal()
        stopper.join()
        #expect(thread.isFinished)
    }

    @Test("stop from a task on the thread ends the loop after the task; a later stop joins")
    func stopFromOwnThread() throws {
        let thread = try RunLoopThread()
        let stoppedInside = try thread.executeAndWait { () -> Bool in
            thread.stop() // cannot join itself: only asks
            return thread.isStopped && !thread.isFinished
        }
        #expect(stoppedInside)
        thread.stop()
        #expect(thread.isFinished)
    }

    @Test("stop also ends the keep-alive run when a task is running the loop itself")
    func stopDuringNestedRun() throws {
        let thread = try RunLoopThread()
        let started = Latch()
        let nested = Locked<PortRunLoop.RunResult?>(nil)
        try thread.execute {
            started.signal()
            let result = PortRunLoop.current.run(mode: .default, timeout: .seconds(60))
            nested.withLock { $0 = result }
        }
        started.wait()
        sleepMilliseconds(50)
        let ms = elapsedMilliseconds { thread.stop() }
        #expect(ms < 10_000, "the outer run ended too, long before the nested run's 60 s")
        #expect(nested.current == .stopped)
        #expect(thread.isFinished)
    }

    @Test("a task that stops the loop itself does not end a permanent thread")
    func taskStopDoesNotEndThread() throws {
        let thread = try RunLoopThread()
        defer { thread.stop() }
        try thread.executeAndWait { PortRunLoop.current.stop() }
        sleepMilliseconds(20)
        #expect(try thread.executeAndWait { 5 } == 5)
        #expect(!thread.isFinished)
    }

    @Test("dropping the last reference stops the loop and the thread exits: no reference cycle")
    func dropStopsThread() throws {
        weak var weakThread: RunLoopThread?
        let core: RunLoopThread.Core
        let loop: PortRunLoop
        do {
            let thread = try RunLoopThread(name: "dropped")
            weakThread = thread
            core = thread.core
            loop = thread.loop
            let value = Locked(0)
            try thread.execute { value.withLock { $0 = 1 } }
            #expect(try thread.executeAndWait { value.current } == 1)
        }
        #expect(weakThread == nil, "nothing but the caller held the object")
        #expect(core.hasFinished, "the thread's body returned before the release finished (joined)")
        #expect(loop.hasExitedThread)
        #expect(throws: RunLoopError.threadExited) { try loop.perform {} }
    }

    @Test("the last reference dropped inside a task on the thread itself: the thread ends on its own")
    func dropOnOwnThread() throws {
        weak var weakThread: RunLoopThread?
        let core: RunLoopThread.Core
        let gate = Latch()
        do {
            let thread = try RunLoopThread()
            weakThread = thread
            core = thread.core
            // The task holds the only other reference; it is released on the thread once the task has run.
            try thread.execute { [thread] in gate.wait(); _ = thread.name }
        }
        gate.signal()
        let deadline = nowNanoseconds() + 10_000_000_000
        while !core.hasFinished && nowNanoseconds() < deadline { sleepMilliseconds(5) }
        #expect(core.hasFinished)
        #expect(weakThread == nil)
    }
}

/// `run(_:)`, the async form of executeAndWait: it suspends its caller instead of blocking a thread.
@Suite("Run loop threads, awaited", .timeLimit(.minutes(1)))
struct RunLoopThreadAsyncTests {
    @Test("run returns the task's value, computed on the thread, and rethrows its error typed")
    func valueAndError() async throws {
        let thread = try RunLoopThread(name: "awaited")
        defer { thread.stop() }
        let (id, name) = try await thread.run { (currentThreadID(), currentThreadName()) }
        #expect(id == thread.loop.threadID)
        #expect(name == "awaited")
        #expect(try await thread.run { 6 * 7 } == 42)
        await #expect(throws: RunLoopThreadError<TaskFailure>.failed(TaskFailure(code: 3))) {
            try await thread.run { () throws(TaskFailure) -> Int in throw TaskFailure(code: 3) }
        }
        // FIFO with execute.
        let order = Trace<Int>()
        try thread.execute { order.append(1) }
        try await thread.run { order.append(2) }
        #expect(order.all == [1, 2])
    }

    @Test("callers awaiting run hold no thread of the cooperative pool while the thread is busy")
    func doesNotBlockThePool() async throws {
        let thread = try RunLoopThread()
        defer { thread.stop() }
        let gate = Latch()
        let entered = Locked(false)
        try thread.execute { entered.withLock { $0 = true }; gate.wait() }
        // Once the thread runs the blocking task, later tasks stay in the loop's queue, where they are counted.
        #expect(await eventually { entered.current })
        // More callers than the pool has threads: blocked callers would leave none for anything else.
        let callers = (0..<8).map { index in Task { try await thread.run { index } } }
        #expect(await eventually { thread.loop.pendingBlockCount == 8 }, "every caller has queued its task")
        #expect(await Task.detached { 42 }.value == 42, "the pool still runs other tasks")
        gate.signal()
        for (index, caller) in callers.enumerated() { #expect(try await caller.value == index) }
    }

    @Test("run from an actor on the thread's own loop runs the task in place; after stop it is refused")
    func ownThreadAndStopped() async throws {
        let thread = try RunLoopThread()
        let actor = ThreadRunningActor(executor: try RunLoopSerialExecutor(loop: thread.loop))
        let trace = Trace<String>()
        try await actor.runInPlace(on: thread, trace: trace)
        try await thread.run {}
        #expect(trace.all == ["in place", "after", "queued"], "run did not queue behind the task execute queued")
        thread.stop()
        await #expect(throws: RunLoopThreadError<Never>.stopped) { try await thread.run { 1 } }
    }
}

/// Calls its own loop thread's `run` from a job on that thread.
actor ThreadRunningActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    func runInPlace(on thread: RunLoopThread, trace: Trace<String>) async throws {
        try thread.execute { trace.append("queued") }
        try await thread.run { trace.append("in place") }
        trace.append("after")
    }
}

extension PortRunLoop {
    /// Whether the loop's thread has exited, for tests.
    var hasExitedThread: Bool { lock.withLock { threadExited } }

    /// How many blocks are queued, for tests.
    var pendingBlockCount: Int { lock.withLock { blocks.count } }
}
