@testable import PortLoop
import Testing

/// Every API that takes a `Duration` or an instant, at the extremes: nothing traps, a timeout past the end of
/// time waits forever, a date long past fires at once, a delay past the end of time never comes.
@Suite("Durations and instants at the extremes", .timeLimit(.minutes(1)))
struct DurationExtremesTests {
    /// Durations that used to overflow somewhere: just under the old clamping point, Int64.max seconds, twice
    /// that (the seconds no longer fit in Int64), and what `Duration` can hold at most.
    static let huge: [Duration] = [
        .seconds(9_223_372_000), .seconds(Int64.max), .seconds(Int64.max) + .seconds(Int64.max),
        Duration(secondsComponent: Int64.max, attosecondsComponent: 999_999_999_999_999_999) * 8,
    ]

    @Test("huge port timeouts wait as if forever: receive, set receive, send to a full port, request")
    func hugePortTimeouts() throws {
        for duration in Self.huge {
            for timeout in [PortTimeout.after(duration), .seconds(Double(duration.attoseconds) / 1e18),
                            .seconds(.greatestFiniteMagnitude), .seconds(.infinity)] {
                let port = try PortReceiveRight(queueLimit: 1)
                let sender = port.makeSendRight()
                let late = TestThread { sleepMilliseconds(20); try! sender.send(id: 1, timeout: timeout) }
                #expect(try port.receive(timeout: timeout).id == 1)
                late.join()

                try sender.send(id: 2, timeout: timeout)
                let box = ReceiveRightBox(port)
                let drain = TestThread { sleepMilliseconds(20); _ = try! box.port.receive(timeout: .poll) }
                try sender.send(id: 3, timeout: timeout) // waits for room
                drain.join()

                let set = try PortSet()
                try set.insert(box.port)
                guard case let .message(message) = try set.receive(timeout: timeout) else {
                    Issue.record("expected a message")
                    continue
                }
                #expect(message.id == 3)
            }
        }
    }

    @Test("a request with a huge timeout gets its reply")
    func hugeRequestTimeout() throws {
        let server = try RunLoopThread(name: "huge timeout")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in PortReply(id: message.id) }
        try server.loop.add(source, mode: .default)
        for duration in Self.huge {
            #expect(try source.makeSendRight().request(id: 9, timeout: .after(duration)).id == 9)
        }
    }

    @Test("timers at the extremes: far-future dates never fire, far-past dates fire at once, nothing traps")
    func timerExtremes() throws {
        let fired = Locked([String]())
        let worker = TestLoopThread(setUp: { loop in
            // An older timer first: the conversions used to trap once the clock reference was a second old.
            sleepMilliseconds(1_100)
            for (index, duration) in Self.huge.enumerated() {
                let never = RunLoopTimer(after: duration, interval: duration, tolerance: duration) { _ in
                    fired.withLock { $0.append("never \(index)") }
                }
                try loop.add(never, mode: .default)
                #expect(never.nextFireDate > .now + .seconds(1_000_000))
                never.setNextFireDate(after: duration)
                never.setNextFireDate(.now + duration)
                never.setTolerance(duration)
                _ = never.description
                #expect(never.interval > .seconds(1_000_000))
                #expect(loop.nextTimerFireDate(in: .default)! > .now + .seconds(1_000_000))
            }
            let past = RunLoopTimer(after: .zero) { _ in fired.withLock { $0.append("past") } }
            past.setNextFireDate(.now - .seconds(Int64.max))
            try loop.add(past, mode: .default)
            #expect(past.nextFireDate < .now)
            _ = past.description
            let negative = RunLoopTimer(after: .seconds(-Int64.max), interval: .seconds(-5), tolerance: .seconds(-1)) { _ in
                fired.withLock { $0.append("negative") }
            }
            #expect(!negative.isRepeating)
            #expect(negative.tolerance == .zero)
            try loop.add(negative, mode: .default)
            _ = loop.description
        }, body: { loop in
            [loop.run(mode: .default, timeout: .milliseconds(200))]
        })
        #expect(worker.join() == [.timedOut])
        #expect(Set(fired.current) == ["past", "negative"])
    }

    @Test("runs, delayed performs and spin settings at the extremes")
    func runAndPerformExtremes() throws {
        let ran = Locked([String]())
        let worker = TestLoopThread(setUp: { loop in
            let source = try RunLoopPortSource { _ in nil }
            try loop.add(source, mode: .default)
            for duration in Self.huge {
                let request = try loop.perform(afterDelay: duration) { ran.withLock { $0.append("late") } }
                #expect(request.isPending)
                #expect(request.fireDate > .now + .seconds(1_000_000))
                #expect(request.cancel())
            }
            // A negative delay is a delay of zero, as in Foundation.
            try loop.perform(afterDelay: .seconds(-Int64.max)) { ran.withLock { $0.append("now") } }
            try loop.perform(afterDelay: .zero - Self.huge.last!) {
                ran.withLock { $0.append("now too") }
                PortRunLoop.current.stop()
            }
            loop.spinBeforeSleeping = .seconds(Int64.max) + .seconds(Int64.max)
            #expect(loop.spinBeforeSleeping == PortRunLoop.maxSpinBeforeSleeping)
            loop.spinBeforeSleeping = .zero - Self.huge.last!
            #expect(loop.spinBeforeSleeping == .zero)
        }, body: { loop in
            [loop.run(mode: .default, timeout: Self.huge.last!),
             loop.run(mode: .default, timeout: .zero - Self.huge.last!),
             loop.run(mode: .default, timeout: .seconds(Int64.min))]
        })
        #expect(worker.join() == [.stopped, .timedOut, .timedOut])
        #expect(ran.current == ["now", "now too"])
    }

    @Test("a stall monitor with a huge threshold starts, never reports, and stops")
    func stallMonitorExtremes() throws {
        let reports = Locked(0)
        let monitor = Locked<RunLoopStallMonitor?>(nil)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(try RunLoopPortSource { _ in nil }, mode: .default)
            let started = RunLoopStallMonitor(loop: loop, threshold: Self.huge.last!) { _ in reports.withLock { $0 += 1 } }
            try started.start()
            monitor.withLock { $0 = started }
        }, body: { loop in
            [loop.run(mode: .default, timeout: .milliseconds(100))]
        })
        #expect(worker.join() == [.timedOut])
        let started = try #require(monitor.current)
        started.stop()
        #expect(reports.current == 0)
        #expect(started.threshold == Self.huge.last!)
    }
}
