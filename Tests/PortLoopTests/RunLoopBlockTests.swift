@testable import PortLoop
import Testing

/// Blocks, loop teardown, bad input.
@Suite("Run loop blocks and lifecycle")
struct RunLoopBlockTests {
    @Test("blocks run FIFO, only in matching modes; others stay queued in order")
    func fifoAndModeFiltering() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .common)
            try loop.addCommonMode("tracking")
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: "private")
            try loop.perform(inModes: ["private"]) { trace.append("p1") }
            try loop.perform(inModes: [.default]) { trace.append("d1") }
            try loop.perform(inModes: [.common]) { trace.append("c1") }
            try loop.perform(inModes: ["private"]) { trace.append("p2") }
            try loop.perform(inModes: [.default, "tracking"]) { trace.append("d2") }
        }, body: { loop in
            [loop.run(mode: "tracking", timeout: .zero), loop.run(mode: "private", timeout: .zero),
             loop.run(mode: .default, timeout: .zero)]
        })
        #expect(worker.join() == [.timedOut, .timedOut, .timedOut])
        #expect(trace.all == ["c1", "d2", "p1", "p2", "d1"])
    }

    @Test("performAndWakeUp from another thread runs the block on the loop's thread soon")
    func performFromAnotherThread() throws {
        let ranOn = Locked<Int32>(0)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: false)] })
        sleepMilliseconds(30)
        let loop = worker.loop
        try loop.performAndWakeUp(inModes: [.default]) {
            ranOn.withLock { $0 = currentThreadID() }
            PortRunLoop.current.stop()
        }
        #expect(worker.join() == [.stopped])
        #expect(ranOn.current == loop.threadID)
    }

    @Test("a pending block keeps a mode alive")
    func pendingBlockKeepsModeAlive() throws {
        let ran = Locked(false)
        let worker = TestLoopThread(setUp: { loop in try loop.perform(inModes: [.default]) { ran.withLock { $0 = true } } },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(5)), loop.run(mode: .default)] })
        #expect(worker.join() == [.finished, .finished])
        #expect(ran.current)
    }

    @Test("stop and wakeUp on a loop that is not running do no harm")
    func stopAndWakeUpWhenNotRunning() throws {
        withIdleLoop { loop in
            loop.stop()
            loop.wakeUp(); loop.wakeUp(); loop.wakeUp()
            #expect(!loop.isWaiting)
            #expect(loop.currentModeName == nil)
        }
    }

    @Test("1,000 threads each create a loop with a port source and exit: loops and ports are torn down")
    func manyThreadsTearDown() throws {
        // The registry is shared with tests running in parallel, so its count proves nothing; this test's own
        // loops being freed proves the registry let them go.
        let loops = Locked([WeakLoop]())
        let senders = Locked([PortSendRight]())
        for _ in 0..<250 {
            let threads = (0..<4).map { _ in
                TestThread {
                    let loop = PortRunLoop.current
                    loops.withLock { $0.append(WeakLoop(loop)) }
                    let source = try! RunLoopPortSource { _ in nil }
                    let sender = source.makeSendRight()
                    try! loop.add(source, mode: .default)
                    try! sender.send(id: 1, bytes: [UInt8](repeating: 1, count: 100)) // left queued at exit
                    _ = loop.run(mode: .default, timeout: .zero)
                    try! sender.send(id: 2)
                    senders.withLock { $0.append(sender) }
                }
            }
            threads.forEach { $0.join() }
        }
        #expect(loops.current.count == 1000)
        #expect(loops.current.allSatisfy { $0.loop == nil }, "every loop left the registry and was freed")
        let all = senders.current
        #expect(all.count == 1000)
        #expect(all.filter { !$0.isDeadName }.isEmpty, "every source's port was destroyed with its loop")
    }
}

/// A loop that a test watches without keeping it alive.
final class WeakLoop: @unchecked Sendable {
    weak var loop: PortRunLoop?
    init(_ loop: PortRunLoop) { self.loop = loop }
}
