import PortLoop
import Testing

/// The opt-in low-latency mode: a loop polls briefly before it sleeps.
@Suite("Run loop low-latency spin")
struct RunLoopSpinTests {
    @Test("off by default, clamped to 0…10 ms")
    func clamping() {
        withIdleLoop { loop in
            #expect(loop.spinBeforeSleeping == .zero)
            loop.spinBeforeSleeping = .milliseconds(-5)
            #expect(loop.spinBeforeSleeping == .zero)
            loop.spinBeforeSleeping = .seconds(3)
            #expect(loop.spinBeforeSleeping == PortRunLoop.maxSpinBeforeSleeping)
            loop.spinBeforeSleeping = .microseconds(50)
            #expect(loop.spinBeforeSleeping == .microseconds(50))
        }
    }

    @Test("a spinning loop handles messages and still goes to sleep when idle")
    func spinsThenSleeps() throws {
        let handled = Locked(0)
        let source = try RunLoopPortSource { _ in handled.withLock { $0 += 1 }; return nil }
        let sender = source.makeSendRight()
        let worker = TestLoopThread(setUp: { loop in
            loop.spinBeforeSleeping = .milliseconds(10)
            try loop.add(source, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        for i in 0..<50 {
            try sender.send(id: Int32(i))
            sleepMilliseconds(1)
        }
        // Bounded: once idle, the loop sleeps after at most 10 ms of polling.
        var slept = false
        for _ in 0..<100 where !slept {
            sleepMilliseconds(10)
            slept = worker.loop.isWaiting
        }
        #expect(slept)
        worker.loop.stop()
        #expect(worker.join() == [.stopped])
        #expect(handled.current == 50)
    }

    @Test("a spin never outlasts the next timer")
    func spinRespectsTimers() throws {
        let fired = Locked<Int64>(0)
        let worker = TestLoopThread(setUp: { loop in
            loop.spinBeforeSleeping = .milliseconds(10)
            try loop.add(RunLoopTimer(after: .milliseconds(2)) { _ in fired.withLock { $0 = nowNanoseconds() } },
                         mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        let start = nowNanoseconds()
        #expect(worker.join() == [.finished])
        #expect(fired.current > 0 && fired.current - start < 1_000_000_000)
    }
}
