@testable import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What happens to a ``RunLoopSerialExecutor``'s jobs when its loop's thread ends: a stopping
/// ``RunLoopThread`` runs every job queued before it exits, then closes its loop's executors; a job enqueued
/// after that stops the program, as it could never run.
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

/// Loops that are not ``RunLoopThread``s: the thread decides when it exits, and nothing can drain for it.
extension ExecutorShutdownTests {
    @Test("a plain thread exiting with jobs queued reports them and closes the executor")
    func plainThreadExitReportsStrandedJobs() async throws {
        let release = Latch()
        let box = Locked<RunLoopSerialExecutor?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            box.withLock { $0 = try? RunLoopSerialExecutor(loop: loop) }
        }, body: { _ in release.wait(); return [] }) // exits without running its loop
        let executor = try #require(box.current)
        let actor = LoopActor(executor: executor)
        // This call can never run: the task stays suspended for the rest of the process; that is the point.
        Task { _ = await actor.threadID() }
        #expect(await eventually { executor.pendingJobCount == 1 })
        #expect(!executor.isClosed)
        let before = worker.loop.errorsLogged.load(ordering: .relaxed)
        release.signal()
        _ = worker.join()
        #expect(executor.isClosed)
        #expect(worker.loop.errorsLogged.load(ordering: .relaxed) == before + 1, "the stranded job is reported once")
        #expect(throws: RunLoopError.threadExited) { try RunLoopSerialExecutor(loop: worker.loop) }
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
