@testable import PortLoop
import Testing

/// Idle work: bounded batches at beforeWaiting, in order, with timers and sources served between batches, no
/// sleep while work is pending and no spinning when there is none.
@Suite("Idle queue")
struct IdleQueueTests {
    @Test("10 tasks, 2 per pass: in order over at least 5 passes; a timer and a source run between batches; then the loop sleeps")
    func batchesBetweenOtherWork() throws {
        let passes = Locked(0) // afterWaiting callouts so far
        let ran = Locked<[(task: Int, pass: Int)]>([])
        let timerRan = Locked<(tasksDone: Int, lateMs: Double)?>(nil)
        let sourceRan = Locked<Int?>(nil) // tasks done when the source ran
        let signalledAt = Locked<Int?>(nil) // tasks done when the source was signalled
        let idleCheck = Locked<(atDone: Int, after200ms: Int)?>(nil)
        let taskFourStarted = Locked(false)
        let source = RunLoopSource { sourceRan.withLock { $0 = ran.current.count } }
        let queueBox = Locked<RunLoopIdleQueue?>(nil)

        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in passes.withLock { $0 += 1 } }, mode: .default)
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
            try loop.add(source, mode: .default)
            let queue = try RunLoopIdleQueue(loop: loop, maxTasksPerPass: 2)
            queueBox.withLock { $0 = queue }
            let due = nowNanoseconds() + 20_000_000
            try loop.add(RunLoopTimer(after: .milliseconds(20)) { _ in
                timerRan.withLock { $0 = (ran.current.count, Double(nowNanoseconds() - due) / 1e6) }
            }, mode: .default)
            for n in 0..<10 {
                try queue.enqueue {
                    if n == 4 { taskFourStarted.withLock { $0 = true } }
                    sleepMilliseconds(15)
                    ran.withLock { $0.append((n, passes.current)) }
                    if n == 9 {
                        // The queue is empty now: count the wake-ups over the next 200 ms.
                        let atDone = passes.current
                        try! PortRunLoop.current.add(RunLoopTimer(after: .milliseconds(200)) { _ in
                            idleCheck.withLock { $0 = (atDone, passes.current) }
                            PortRunLoop.current.stop()
                        }, mode: .default)
                    }
                }
            }
            #expect(queue.pendingCount == 10)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })

        // Polled with a deadline rather than waited on, so that a queue that stalls fails instead of hanging.
        let deadline = nowNanoseconds() + 5_000_000_000
        while !taskFourStarted.current && nowNanoseconds() < deadline { sleepMilliseconds(1) }
        #expect(taskFourStarted.current, "the queue kept passing without other wake-ups")
        signalledAt.withLock { $0 = ran.current.count }
        source.signalAndWakeUp()
        #expect(worker.join() == [.stopped])

        let order = ran.current
        #expect(order.map(\.task) == Array(0..<10), "tasks run in the order queued")
        let perPass = Dictionary(grouping: order, by: \.pass).mapValues(\.count)
        #expect(perPass.count >= 5, "at least 5 passes: \(perPass)")
        #expect(perPass.values.allSatisfy { $0 <= 2 }, "at most 2 tasks per pass: \(perPass)")

        let timer = try #require(timerRan.current)
        #expect(timer.tasksDone <= 4, "the 20 ms timer waited for at most one batch after it was due")
        #expect(timer.lateMs < 250) // one 30 ms batch, plus scheduling on a loaded machine
        let signalled = try #require(signalledAt.current)
        let served = try #require(sourceRan.current)
        #expect(served < 10 && served - signalled <= 2, "the source ran after at most the batch in progress")

        let idle = try #require(idleCheck.current)
        #expect(idle.after200ms - idle.atDone <= 2, "an empty queue lets the loop sleep: \(idle)")
        #expect(queueBox.current?.pendingCount == 0)
    }

    @Test("a task queued from another thread wakes a sleeping loop; an empty queue costs no wake-ups")
    func enqueueWakesSleepingLoop() throws {
        let passes = Locked(0)
        let ranAt = Locked<Int64?>(nil)
        let queueBox = Locked<RunLoopIdleQueue?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in passes.withLock { $0 += 1 } }, mode: .default)
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
            queueBox.withLock { $0 = try? RunLoopIdleQueue(loop: loop) }
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        let queue = try #require(queueBox.current)

        sleepMilliseconds(200)
        #expect(passes.current <= 1, "an idle loop with an empty queue sleeps")
        #expect(worker.loop.isWaiting)

        let queuedAt = nowNanoseconds()
        try queue.enqueue { ranAt.withLock { $0 = nowNanoseconds() } }
        // Without the wake-up the task would wait for the hour-long timer; allow a loaded machine its delays.
        while ranAt.current == nil && nowNanoseconds() - queuedAt < 2_000_000_000 { sleepMilliseconds(1) }
        let ran = try #require(ranAt.current, "the task ran without anything else waking the loop")
        #expect(ran - queuedAt < 500_000_000)

        let before = passes.current
        sleepMilliseconds(200)
        #expect(passes.current - before <= 1, "no spinning once the queue is empty")

        queue.invalidate()
        #expect(!queue.isValid)
        #expect(throws: RunLoopError.invalidated) { try queue.enqueue {} }
        worker.loop.stop()
        #expect(worker.join() == [.stopped])
        queueBox.withLock { $0 = nil }
    }

    @Test("tasks queued by a task run in later passes; other modes run none; removeAll drops pending tasks")
    func followUpsModesAndRemoval() throws {
        let trace = Trace<String>()
        let queueBox = Locked<RunLoopIdleQueue?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in trace.append("pass") }, mode: .default)
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .common)
            try loop.addCommonMode("other")
            let queue = try RunLoopIdleQueue(loop: loop, maxTasksPerPass: 1)
            queueBox.withLock { $0 = queue }
            @Sendable func chain(_ n: Int) {
                trace.append("task \(n)")
                if n < 3 { try! queueBox.current!.enqueue { chain(n + 1) } }
            }
            try queue.enqueue { chain(1) }
        }, body: { loop in
            // "other" is common, but the queue only runs in the default mode.
            let other = loop.run(mode: "other", timeout: .milliseconds(100))
            let first = loop.run(mode: .default, timeout: .milliseconds(150))
            let queue = queueBox.current!
            for n in 0..<5 { try! queue.enqueue { trace.append("dropped \(n)") } }
            let removed = queue.removeAll()
            trace.append("removed \(removed)")
            let second = loop.run(mode: .default, timeout: .milliseconds(50))
            return [other, first, second]
        })
        #expect(worker.join() == [.timedOut, .timedOut, .timedOut])
        let events = trace.all.filter { $0 != "pass" }
        #expect(events == ["task 1", "task 2", "task 3", "removed 5"])
        // Each follow-up ran in a pass of its own: a pass separates consecutive tasks.
        let all = trace.all
        let positions = (1...3).compactMap { all.firstIndex(of: "task \($0)") }
        #expect(positions.count == 3)
        #expect(zip(positions, positions.dropFirst()).allSatisfy { all[$0..<$1].contains("pass") })
        queueBox.withLock { $0 = nil }
    }
}
