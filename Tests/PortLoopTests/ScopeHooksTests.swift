@testable import PortLoop
import Testing

/// Scope hooks: setUp first at entry, tearDown-and-setUp last at beforeWaiting, tearDown last at exit, nested
/// runs nested, invalidation closing what is open.
@Suite("Scope hooks")
struct ScopeHooksTests {
    /// Hooks whose scopes are numbered 1, 2, … and traced as "setUp n" / "tearDown n".
    static func numberedHooks(_ loop: PortRunLoop, _ trace: Trace<String>,
                              modes: [PortRunLoop.Mode] = [.common]) throws -> RunLoopScopeHooks<Int> {
        let counter = Locked(0)
        return try RunLoopScopeHooks(loop: loop, modes: modes, setUp: {
            let n = counter.withLock { $0 += 1; return $0 }
            trace.append("setUp \(n)")
            return n
        }, tearDown: { n in trace.append("tearDown \(n)") })
    }

    @Test("the exact sequence around other observers (orders -1000 and 1000) and a timer")
    func sequence() throws {
        let trace = Trace<String>()
        let hooksBox = Locked<RunLoopScopeHooks<Int>?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            // Added before the hooks, with orders on both sides of 0: the hooks' orders still win.
            try loop.add(RunLoopObserver(activities: .allActivities, order: 1000) { _, a in trace.append("hi \(a)") }, mode: .default)
            try loop.add(RunLoopObserver(activities: .allActivities, order: -1000) { _, a in trace.append("lo \(a)") }, mode: .default)
            hooksBox.withLock { $0 = try? Self.numberedHooks(loop, trace) }
            try loop.add(RunLoopTimer(after: .milliseconds(30)) { _ in trace.append("timer") }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        #expect(worker.join() == [.finished])
        #expect(hooksBox.current != nil)
        #expect(trace.all == [
            "setUp 1", "lo entry", "hi entry",
            "lo beforeTimers", "hi beforeTimers", "lo beforeSources", "hi beforeSources",
            "lo beforeWaiting", "hi beforeWaiting", "tearDown 1", "setUp 2",
            "lo afterWaiting", "hi afterWaiting", "timer",
            "lo exit", "hi exit", "tearDown 2",
        ])
    }

    @Test("a nested run opens and closes scopes inside the outer one, which stays open across it")
    func nestedRuns() throws {
        let trace = Trace<String>()
        let hooksBox = Locked<RunLoopScopeHooks<Int>?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            hooksBox.withLock { $0 = try? Self.numberedHooks(loop, trace) }
            try loop.add(RunLoopTimer(after: .milliseconds(10)) { _ in
                trace.append("outer timer")
                let loop = PortRunLoop.current
                try! loop.add(RunLoopTimer(after: .milliseconds(10)) { _ in trace.append("inner timer") }, mode: .default)
                trace.append("nested \(loop.run(mode: .default, timeout: .seconds(10)))")
            }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        #expect(worker.join() == [.finished])
        #expect(trace.all == [
            "setUp 1", "tearDown 1", "setUp 2", // outer entry; outer beforeWaiting
            "outer timer",
            "setUp 3", "tearDown 3", "setUp 4", // nested entry; nested beforeWaiting
            "inner timer", "tearDown 4",        // nested exit
            "nested finished",
            "tearDown 2",                       // outer exit
        ])
        #expect(hooksBox.current != nil)
    }

    @Test("invalidating on the loop's thread closes the open scopes at once, innermost first")
    func invalidateOnLoopThread() throws {
        let trace = Trace<String>()
        let hooksBox = Locked<RunLoopScopeHooks<Int>?>(nil)
        let openAfterInvalidate = Locked<Int?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            hooksBox.withLock { $0 = try? Self.numberedHooks(loop, trace) }
            try loop.add(RunLoopTimer(after: .milliseconds(10)) { _ in
                let loop = PortRunLoop.current
                try! loop.add(RunLoopTimer(after: .milliseconds(1)) { _ in
                    trace.append("invalidate")
                    hooksBox.current!.invalidate()
                    openAfterInvalidate.withLock { $0 = hooksBox.current!.openScopeCount }
                }, mode: .default)
                loop.run(mode: .default, timeout: .seconds(10))
                trace.append("nested returned")
            }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        #expect(worker.join() == [.finished])
        #expect(trace.all == [
            "setUp 1", "tearDown 1", "setUp 2", "setUp 3", "tearDown 3", "setUp 4",
            "invalidate", "tearDown 4", "tearDown 2", "nested returned",
        ])
        #expect(hooksBox.current?.isValid == false)
        #expect(openAfterInvalidate.current == 0)
    }

    @Test("invalidating from another thread closes the open scope on the loop's thread; Void scopes")
    func invalidateFromAnotherThread() throws {
        let trace = Trace<String>()
        let loopThread = Locked<Int32>(0)
        let tearDownThreads = Locked<[Int32]>([])
        let hooksBox = Locked<RunLoopScopeHooks<Void>?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            loopThread.withLock { $0 = currentThreadID() }
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .default)
            hooksBox.withLock {
                $0 = try? RunLoopScopeHooks(loop: loop, setUp: { trace.append("setUp") }, tearDown: {
                    trace.append("tearDown")
                    tearDownThreads.withLock { $0.append(currentThreadID()) }
                })
            }
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        sleepMilliseconds(50)
        #expect(worker.loop.isWaiting)
        hooksBox.current!.invalidate()
        hooksBox.current!.invalidate() // again: nothing more
        sleepMilliseconds(50)
        worker.loop.stop()
        #expect(worker.join() == [.stopped])
        #expect(trace.all == ["setUp", "tearDown", "setUp", "tearDown"])
        #expect(tearDownThreads.current == [loopThread.current, loopThread.current])
        hooksBox.withLock { $0 = nil }
    }
}
