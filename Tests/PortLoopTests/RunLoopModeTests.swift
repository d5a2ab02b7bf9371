import PortLoop
import Testing

/// Modes and common modes (a scroll view's tracking mode beside the default one).
@Suite("Run loop modes")
struct RunLoopModeTests {
    @Test("a default-mode timer does not fire while a tracking mode runs; a common-mode timer fires in both")
    func scrollingExample() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .milliseconds(10), interval: .milliseconds(10)) { _ in
                trace.append("default \(loop.currentModeName!.rawValue)")
            }, mode: .default)
            try loop.add(RunLoopTimer(after: .milliseconds(10), interval: .milliseconds(10)) { _ in
                trace.append("common \(loop.currentModeName!.rawValue)")
            }, mode: .common)
            try loop.addCommonMode("tracking")
        }, body: { loop in
            [loop.run(mode: "tracking", timeout: .milliseconds(100)), loop.run(mode: .default, timeout: .milliseconds(100))]
        })
        #expect(worker.join() == [.timedOut, .timedOut])
        let events = trace.all
        let tracking = events.filter { $0.hasSuffix(" tracking") }
        #expect(!tracking.isEmpty)
        #expect(tracking.allSatisfy { $0.hasPrefix("common") }, "\(events)")
        #expect(events.contains("default kCFRunLoopDefaultMode"))
        #expect(events.contains("common kCFRunLoopDefaultMode"))
    }

    @Test("a mode made common later receives the existing common items")
    func modeMadeCommonLater() throws {
        try withIdleLoop { loop in
        let timer = RunLoopTimer(after: .seconds(60)) { _ in }
        let source = RunLoopSource {}
        let observer = RunLoopObserver(activities: .entry) { _, _ in }
        try loop.add(timer, mode: .common)
        try loop.add(source, mode: .common)
        try loop.add(observer, mode: .common)
        #expect(loop.contains(timer, mode: .default) && loop.contains(timer, mode: .common))
        #expect(!loop.contains(timer, mode: "later"))
        try loop.addCommonMode("later")
        #expect(loop.commonModeNames == [.default, "later"])
        #expect(loop.contains(timer, mode: "later"))
        #expect(loop.contains(source, mode: "later"))
        #expect(loop.contains(observer, mode: "later"))
        #expect(loop.allModes.contains("later"))
        loop.remove(timer, mode: .common)
        #expect(!loop.contains(timer, mode: "later") && !loop.contains(timer, mode: .default))
        timer.invalidate(); source.invalidate(); observer.invalidate()
        #expect(!loop.contains(source, mode: .default) && !loop.contains(observer, mode: "later"))
        }
    }

    @Test("adding an item twice to a mode has no effect; an item belongs to one loop")
    func addTwiceAndOneLoop() throws {
        let exited = TestLoopThread(body: { _ in [] })
        _ = exited.join()
        try withIdleLoop { loop in try withIdleLoop { other in
        let schedules = Locked(0)
        let source = RunLoopSource(schedule: { _, _ in schedules.withLock { $0 += 1 } }) {}
        try loop.add(source, mode: "twice")
        try loop.add(source, mode: "twice")
        #expect(schedules.current == 1)
        let timer = RunLoopTimer(after: .seconds(60)) { _ in }
        try loop.add(timer, mode: "twice")
        #expect(throws: RunLoopError.attachedToAnotherLoop) { try other.add(timer, mode: .default) }
        #expect(throws: RunLoopError.threadExited) { try exited.loop.add(RunLoopSource {}, mode: .default) }
        #expect(throws: RunLoopError.threadExited) { try exited.loop.perform {} }
        source.invalidate(); timer.invalidate()
        #expect(throws: RunLoopError.invalidated) { try loop.add(timer, mode: "twice") }
        let moved = RunLoopTimer(after: .seconds(60)) { _ in }
        try loop.add(moved, mode: "twice")
        loop.remove(moved, mode: "twice")
        try other.add(moved, mode: .default) // removed from its last mode, it may join another loop
        #expect(other.contains(moved, mode: .default))
        moved.invalidate()
        } }
    }
}
