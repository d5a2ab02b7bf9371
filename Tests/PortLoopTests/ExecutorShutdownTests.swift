@testable import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What happens to a ``RunLoopSerialExecutor``'s jobs when its loop's thread ends: a stopping
/// ``RunLoopThread``, or any other thread as it exits, runs every job queued before it goes, then closes its
/// loop's executors; a job enqueued after that stops the program, as it could never run.
@Suite("Executor jobs at thread shutdown", .timeLimit(.minutes(1)))
struct ExecutorShutdownTests {
    @Test("stop() on a RunLoopThread runs the actor calls queued behind a running one before the thread ends")
    func stopRunsQueuedCalls() async throws {
        let thread = try RunLoopThread(name: "drain")
        let executor = try RunLoopSerialExecutor(loop: thread.loop)
        let actors = (0..<5).map { _ in GateActor(executor: executor) }
        let gate = Latch()
        let entered = Locked(false)
        let completed = Locked<[Int]>([])
        Task {
            await actors[0].hold(entered: entered, gate: gate)
            completed.withLock { $0.append(0) }
        }
        #expect(await eventually { entered.current }, "the first call runs on the loop's thread")
        for index in 1..<5 {
            Task {
                await actors[index].touch()
                completed.withLock { $0.append(index) }
            }
        }
        #expect(await eventually { executor.pendingJobCount == 4 }, "four calls wait behind the running one")

        let stopper = TestThread { thread.stop() }
        #expect(await eventually { thread.isStopped })
        gate.signal()
        #expect(await eventually(within: 10) { completed.current.count == 5 }, "every queued call completes")
        #expect(await eventually(within: 10) { thread.isFinished })
        stopper.join()
        #expect(Set(completed.current) == Set(0..<5))
        #expect(executor.pendingJobCount == 0)
        #expect(executor.isClosed, "the thread closed its loop's executors when it left")
    }

    @Test("jobs that jobs enqueue while a stopping RunLoopThread drains run too, on every executor of its loop")
    func drainRunsJobsEnqueuedWhileDraining() async throws {
        let thread = try RunLoopThread(name: "drain-chain")
        let first = try RunLoopSerialExecutor(loop: thread.loop)
        let second = try RunLoopSerialExecutor(loop: thread.loop)
        let trace = Trace<String>()
        let actorA = ChainActor(name: "A", executor: first, trace: trace)
        let actorB = ChainActor(name: "B", executor: second, trace: trace)
        let gate = Latch()
        try thread.execute { gate.wait() } // holds the loop, so that the first call is queued when the stop comes
        Task { await actorA.chain(depth: 5, partner: actorB) }
        #expect(await eventually { first.pendingJobCount == 1 })

        let stopper = TestThread { thread.stop() }
        #expect(await eventually { thread.isStopped })
        gate.signal()
        #expect(await eventually(within: 10) { thread.isFinished })
        stopper.join()
        // Each link is a task made by the previous one: enqueued while the thread was draining, after the stop.
        #expect(trace.all == ["A5", "B4", "A3", "B2", "A1", "B0"])
        #expect(first.isClosed && second.isClosed)
    }

    @Test("stop() on a RunLoopThread also runs the jobs of an executor in a mode the thread does not run")
    func stopRunsJobsOfOtherModes() async throws {
        let thread = try RunLoopThread(name: "other-mode")
        let executor = try RunLoopSerialExecutor(loop: thread.loop, modes: ["never-run"])
        let ranOn = Locked<Int32?>(nil)
        Task {
            let id = await LoopActor(executor: executor).threadID()
            ranOn.withLock { $0 = id }
        }
        #expect(await eventually { executor.pendingJobCount == 1 }, "the call waits: the thread runs the default mode")
        let stopper = TestThread { thread.stop() }
        #expect(await eventually(within: 10) { ranOn.current == thread.loop.threadID }, "the stop ran it, on the thread")
        stopper.join()
        #expect(executor.isClosed)
    }

    @Test("stopping an idle RunLoopThread with executors on its loop still ends it promptly")
    func idleStop() async throws {
        let thread = try RunLoopThread(name: "idle-drain")
        let executors = try (0..<3).map { _ in try RunLoopSerialExecutor(loop: thread.loop) }
        let actor = LoopActor(executor: executors[1])
        #expect(await actor.threadID() == thread.loop.threadID)
        let stopper = TestThread { thread.stop() }
        #expect(await eventually(within: 5) { thread.isFinished })
        stopper.join()
        #expect(executors.allSatisfy { $0.isClosed })
        #expect(throws: RunLoopError.threadExited) { try RunLoopSerialExecutor(loop: thread.loop) }
    }

    @Test("a job enqueued after a RunLoopThread has stopped stops the program, naming the executor and thread")
    func enqueueAfterStopTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let thread = try! RunLoopThread(name: "gone")
            let executor = try! RunLoopSerialExecutor(loop: thread.loop)
            thread.stop()
            let actor = LoopActor(executor: executor)
            Task { _ = await actor.threadID() }
            // Without the trap the call would just never return; end the child cleanly so that the test sees it.
            try? await Task.sleep(for: .seconds(3))
            exit(0)
        }
        let output = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(output.contains("RunLoopSerialExecutor"), "the message names the executor: \(output)")
        #expect(output.contains("exited"), "and says its loop's thread has exited: \(output)")
    }
}

/// Loops that are not ``RunLoopThread``s: the thread decides when it exits; its loop's teardown, on that
/// thread, runs the jobs still queued on the loop's executors before closing them.
extension ExecutorShutdownTests {
    @Test("a plain thread exiting with actor calls queued runs them on that thread, in every mode, then closes")
    func plainThreadExitRunsQueuedJobs() async throws {
        let release = Latch()
        let boxes = Locked<[RunLoopSerialExecutor]>([])
        let worker = TestLoopThread(setUp: { loop in
            // The second executor's mode is never run: its jobs could only run at the teardown.
            let executors = [try RunLoopSerialExecutor(loop: loop), try RunLoopSerialExecutor(loop: loop, modes: ["never-run"])]
            boxes.withLock { $0 = executors }
        }, body: { _ in release.wait(); return [] }) // exits without running its loop
        let executors = boxes.current
        let trace = Trace<String>()
        let actorA = ChainActor(name: "A", executor: executors[0], trace: trace)
        let actorB = ChainActor(name: "B", executor: executors[1], trace: trace)
        let ranOn = Locked<Int32?>(nil)
        Task {
            let thread = await LoopActor(executor: executors[0]).threadID()
            ranOn.withLock { $0 = thread }
        }
        Task { await actorA.chain(depth: 3, partner: actorB) }
        #expect(await eventually { executors[0].pendingJobCount == 2 }, "both calls wait for the loop")
        #expect(!executors[0].isClosed)
        release.signal()
        _ = worker.join()
        // Each link after the first was enqueued while the thread was exiting, on one executor or the other.
        #expect(trace.all == ["A3", "B2", "A1", "B0"])
        #expect(await eventually(within: 10) { ranOn.current == worker.loop.threadID }, "the queued call ran, on the exiting thread")
        #expect(executors.allSatisfy { $0.isClosed && $0.pendingJobCount == 0 })
        #expect(throws: RunLoopError.threadExited) { try RunLoopSerialExecutor(loop: worker.loop) }
    }

    @Test("a call that comes back to a plain thread's actor after the thread exited stops the program")
    func callComingBackAfterPlainThreadExitTraps() async {
        let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let release = Latch()
            let box = Locked<RunLoopSerialExecutor?>(nil)
            let worker = TestLoopThread(setUp: { loop in
                box.withLock { $0 = try? RunLoopSerialExecutor(loop: loop) }
            }, body: { _ in release.wait(); return [] })
            let executor = box.current!
            let actor = SleepingActor(executor: executor)
            // Its first half runs as the thread exits; the second comes back after the sleep, to a closed executor.
            Task { await actor.sleepThenReturn() }
            while executor.pendingJobCount == 0 { sleepMilliseconds(1) }
            release.signal()
            _ = worker.join()
            // Without the trap the call would just never return; end the child cleanly so that the test sees it.
            try? await Task.sleep(for: .seconds(3))
            exit(0)
        }
        let output = String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
        #expect(output.contains("RunLoopSerialExecutor"), "the message names the executor: \(output)")
        #expect(output.contains("exited"), "and says its loop's thread has exited: \(output)")
    }

    @Test("a job enqueued after a plain loop thread exited stops the program")
    func enqueueAfterPlainThreadExitTraps() async {
        await #expect(processExitsWith: .failure) {
            let box = Locked<RunLoopSerialExecutor?>(nil)
            let worker = TestLoopThread(setUp: { loop in
                box.withLock { $0 = try? RunLoopSerialExecutor(loop: loop) }
            }, body: { _ in [] })
            _ = worker.join()
            let actor = LoopActor(executor: box.current!)
            Task { _ = await actor.threadID() }
            try? await Task.sleep(for: .seconds(3))
            exit(0)
        }
    }
}

/// An actor whose call can be held on the loop's thread.
actor GateActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    /// Blocks the loop's thread until `gate` opens; `entered` says it started.
    func hold(entered: Locked<Bool>, gate: Latch) {
        entered.withLock { $0 = true }
        gate.wait()
    }

    func touch() {}
}

/// Calls its partner from a new task, `depth` times back and forth: each call enqueues a job.
actor ChainActor {
    let name: String
    let executor: RunLoopSerialExecutor
    let trace: Trace<String>
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(name: String, executor: RunLoopSerialExecutor, trace: Trace<String>) {
        self.name = name
        self.executor = executor
        self.trace = trace
    }

    func chain(depth: Int, partner: ChainActor) {
        trace.append("\(name)\(depth)")
        guard depth > 0 else { return }
        Task { await partner.chain(depth: depth - 1, partner: self) }
    }
}

/// Suspends for a sleep in the middle of a call: the call's second half is a new job on its executor.
actor SleepingActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    private var halves = 0

    /// Both halves touch the actor's state, so the second one is a job of this executor, after the sleep.
    func sleepThenReturn() async {
        halves += 1
        try? await Task.sleep(for: .milliseconds(200))
        halves += 1
    }
}
