import PortLoop
import Testing

/// The run loop examples of README.md, run on their own loop threads so that they stay true.
@Suite("README: run loop examples")
struct RunLoopReadmeTests {
    @Test("the observer trace example finishes after its one-shot timer")
    func traceExample() throws {
        let printed = Trace<String>()
        let worker = TestLoopThread(body: { loop in
            try! loop.add(RunLoopObserver(activities: .allActivities) { _, activity in printed.append("\(activity)") },
                          mode: .default)
            try! loop.add(RunLoopTimer(after: .milliseconds(50)) { _ in printed.append("timer") }, mode: .default)
            return [loop.run(mode: .default, timeout: .seconds(10))]
        })
        #expect(worker.join() == [.finished])
        #expect(printed.all == ["entry", "beforeTimers", "beforeSources", "beforeWaiting", "afterWaiting", "timer", "exit"])
    }

    @Test("the sources example handles a Source1 message and answers its reply port")
    func sourcesExample() throws {
        let performed = Locked(0)
        let worker = TestLoopThread(body: { loop in
            let source0 = RunLoopSource(order: 0) { performed.withLock { $0 += 1 } }
            try! loop.add(source0, mode: .default)
            source0.signal(); loop.wakeUp()
            source0.signalAndWakeUp()
            let source1 = try! RunLoopPortSource { message in PortReply(id: message.id, bytes: message.payload) }
            try! loop.add(source1, mode: .default)
            let sender = source1.makeSendRight()
            try! sender.send(id: 1, bytes: [1, 2, 3])
            let first = loop.run(mode: .default, timeout: .seconds(1), returnAfterSourceHandled: true)
            let second = loop.run(mode: .default, timeout: .seconds(1), returnAfterSourceHandled: true)
            return [first, second]
        })
        #expect(worker.join() == [.handledSource, .handledSource])
        #expect(performed.current == 1, "two signals before one perform coalesce")
    }

    @Test("the timer and block examples run as written")
    func timerAndBlockExamples() throws {
        let worker = TestLoopThread(body: { loop in
            let timer = RunLoopTimer(after: .milliseconds(20), interval: .milliseconds(100),
                                     tolerance: .milliseconds(5)) { _ in }
            try! loop.add(timer, mode: .common)
            timer.setNextFireDate(after: .milliseconds(50))
            let hasNext = loop.nextTimerFireDate(in: .default) != nil
            timer.invalidate()
            try! loop.perform(inModes: [.default]) {}
            try! loop.performAndWakeUp(inModes: [.common]) {}
            loop.wakeUp()
            loop.stop()
            _ = loop.description
            return [hasNext ? loop.run(mode: .default, timeout: .seconds(1)) : .timedOut]
        })
        #expect(worker.join() == [.finished])
    }
}
