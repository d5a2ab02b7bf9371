@testable import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What a daemon reaches for: signals as a loop source, runs until an instant, firing a timer by hand.
@Suite("Daemon API", .timeLimit(.minutes(1)))
struct DaemonAPITests {
    @Test("signals sent to the loop's thread reach the handler on that thread, in order, until invalidated")
    func signalSource() throws {
        let received = Trace<(Int32, Bool)>()
        let thread = Locked<pthread_t?>(nil)
        let holder = Locked<RunLoopSignalSource?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            // Blocked in this thread only, and sent to this thread only: the test process's other threads
            // keep their default actions, and nothing else can take these signals.
            try RunLoopSignalSource.block([SIGUSR1, SIGUSR2])
            let source = try RunLoopSignalSource(signals: [SIGUSR1, SIGUSR2]) { signal in
                received.append((signal, loop.isCurrent))
                if signal == SIGUSR2 { PortRunLoop.current.stop() }
            }
            try loop.add(source, mode: .default)
            #expect(loop.contains(source, mode: .default))
            holder.withLock { $0 = source }
            thread.withLock { $0 = pthread_self() }
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(20))] })
        let target = try #require(thread.current)
        #expect(pthread_kill(target, SIGUSR1) == 0)
        sleepMilliseconds(50)
        #expect(pthread_kill(target, SIGUSR2) == 0)
        #expect(worker.join() == [.stopped])
        #expect(received.all.map(\.0) == [SIGUSR1, SIGUSR2])
        #expect(received.all.allSatisfy { $0.1 }, "handled on the loop's thread")
        let source = try #require(holder.current)
        source.invalidate()
        #expect(!source.isValid)
        #expect(!worker.loop.contains(source, mode: .default))
    }

    @Test("bad signal lists are refused with invalidArgument")
    func badSignals() throws {
        #expect(throws: PortError.self) { _ = try RunLoopSignalSource(signals: []) { _ in } }
        #expect(throws: PortError.self) { _ = try RunLoopSignalSource(signals: [SIGUSR1, 999]) { _ in } }
        #expect(throws: PortError.self) { try RunLoopSignalSource.block([0, 999]) }
        do { _ = try RunLoopSignalSource(signals: [999]) { _ in } } catch {
            guard case .invalidArgument(argument: "signals", _) = error else { Issue.record("\(error)"); return }
        }
    }

    @Test("run(until:) runs until the instant; an instant already past makes one pass")
    func runUntil() throws {
        let elapsed = Locked<[Double]>([])
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(try RunLoopPortSource { _ in nil }, mode: .default)
        }, body: { loop in
            var results: [PortRunLoop.RunResult] = []
            for deadline in [ContinuousClock.now + .milliseconds(60), .now - .seconds(5)] {
                let start = nowNanoseconds()
                results.append(loop.run(until: deadline))
                elapsed.withLock { $0.append(Double(nowNanoseconds() - start) / 1e6) }
            }
            return results
        })
        #expect(worker.join() == [.timedOut, .timedOut])
        let times = elapsed.current
        #expect(times[0] >= 59, "not before the instant: \(times[0]) ms")
        #expect(times[1] < 1_000, "one pass: \(times[1]) ms")
    }

    @Test("fire() calls the handler now; a one-shot timer is then invalid, a repeating one keeps its schedule")
    func fireByHand() throws {
        let calls = Locked([String]())
        let oneShot = RunLoopTimer(after: .seconds(60)) { _ in calls.withLock { $0.append("once \(currentThreadID())") } }
        let repeating = RunLoopTimer(after: .milliseconds(30), interval: .milliseconds(30)) { timer in
            calls.withLock { $0.append("repeat") }
            if calls.current.filter({ $0 == "repeat" }).count == 3 { timer.invalidate() }
        }
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(oneShot, mode: .default)
            try loop.add(repeating, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        oneShot.fire()
        #expect(calls.current.filter { $0.hasPrefix("once") } == ["once \(currentThreadID())"], "on the calling thread, at once")
        #expect(!oneShot.isValid)
        let next = repeating.nextFireDate
        repeating.fire()
        #expect(repeating.isValid)
        #expect(repeating.nextFireDate == next, "the schedule is unchanged")
        #expect(worker.join() == [.finished], "the one-shot timer left the loop when fire() invalidated it")
        #expect(calls.current.filter { $0 == "repeat" }.count == 3)
        oneShot.fire()
        #expect(calls.current.count == 4, "an invalidated timer does nothing")
    }
}
