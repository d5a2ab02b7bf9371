@testable import PortLoop
import Testing

/// Loop threads whose run the caller chooses: another mode, or a body of its own.
@Suite("Loop threads: the run under your control", .timeLimit(.minutes(1)))
struct RunLoopThreadControlTests {
    @Test("a thread running a private mode serves that mode's sources and runs tasks there")
    func privateMode() throws {
        let thread = try RunLoopThread(name: "tracking", mode: "tracking")
        let modes = Trace<String>()
        let source = try RunLoopPortSource { message in
            modes.append("source \(PortRunLoop.current.currentModeName?.rawValue ?? "none")")
            return PortReply(id: message.id)
        }
        try thread.loop.add(source, mode: "tracking")
        #expect(try source.makeSendRight().request(id: 1, timeout: .seconds(10)).id == 1)
        let taskMode = try thread.executeAndWait { PortRunLoop.current.currentModeName?.rawValue }
        #expect(taskMode == "tracking")
        #expect(modes.all == ["source tracking"])
        thread.stop()
        #expect(thread.isFinished)
    }

    @Test("a body of one's own runs on the thread; stop ends it after the queued tasks; then the thread ends")
    func ownBody() throws {
        let passes = Locked(0)
        let bodyEnded = Locked(false)
        let thread = try RunLoopThread(name: "own body") { loop, isStopped in
            while !isStopped() {
                loop.run(mode: .default, timeout: .milliseconds(20))
                passes.withLock { $0 += 1 }
            }
            bodyEnded.withLock { $0 = true }
        }
        #expect(try thread.executeAndWait { PortRunLoop.current === thread.loop })
        sleepMilliseconds(100)
        #expect(passes.current >= 2, "the body's own loop of timed runs")
        let ran = Locked(0)
        for _ in 0..<5 { try thread.execute { ran.withLock { $0 += 1 } } }
        thread.stop()
        #expect(ran.current == 5, "tasks queued before the stop ran")
        #expect(bodyEnded.current)
        #expect(thread.isFinished)
    }

    @Test("a body that returns by itself ends the thread; later tasks are refused")
    func bodyReturns() throws {
        let thread = try RunLoopThread(name: "short") { loop, _ in
            loop.run(mode: .default, timeout: .milliseconds(10))
        }
        while !thread.isFinished { sleepMilliseconds(5) }
        #expect(throws: RunLoopThreadError<Never>.stopped) { try thread.execute {} }
        thread.stop()
    }
}
