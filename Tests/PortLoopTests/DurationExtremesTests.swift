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

    @Test("an async request with a huge timeout gets its reply, also after waiting for room; cancelled, it ends")
    func hugeAsyncRequestTimeout() async throws {
        let server = try RunLoopThread(name: "huge async")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in PortReply(id: message.id) }
        try server.loop.add(source, mode: .default)
        let destination = source.makeSendRight()
        // 126 years: a deadline that fits in Int64 nanoseconds, so the request keeps a timeout of its own.
        let timeouts = Self.huge.map { PortTimeout.after($0) }
            + [.after(.seconds(4_000_000_000)), .seconds(.greatestFiniteMagnitude), .seconds(.infinity)]
        for (index, timeout) in timeouts.enumerated() {
            #expect(try await destination.request(id: Int32(index), timeout: timeout).id == Int32(index), "\(timeout)")
        }

        // A full destination: the send is retried with a back-off bounded by the (huge) time left.
        let box = ReceiveRightBox(try PortReceiveRight(queueLimit: 1))
        let full = box.port.makeSendRight()
        try full.send(id: 0)
        let replier = TestThread {
            sleepMilliseconds(30)
            for _ in 0..<2 {
                let message = try! box.port.receive(timeout: .after(.seconds(20)))
                try? message.replyPort?.send(id: message.id)
            }
        }
        #expect(try await full.request(id: 1, timeout: .after(Self.huge[1])).id == 1)
        replier.join()

        // Cancelled while waiting for a reply that never comes: ends at once with timedOut, huge timeout or not.
        for timeout in [PortTimeout.after(.seconds(4_000_000_000)), .after(.seconds(Int64.max))] {
            let silent = try PortReceiveRight()
            let request = Task { try await silent.makeSendRight().request(timeout: timeout) }
            #expect(await eventually { silent.messageCount == 1 })
            request.cancel()
            await #expect(throws: PortError.timedOut) { try await request.value }
        }
    }

    @Test("a huge sleep cancelled early (an async request's timeout once its reply came) keeps no thread for it")
    func cancelledHugeSleepReleasesItsThread() async throws {
        let clock = RetryClock() // not the shared one: other tests' sleepers must not keep its thread alive
        for duration in [Duration.seconds(4_000_000_000), .seconds(Int64.max), Self.huge.last!] {
            let sleeper = Task { await clock.sleep(for: duration) }
            #expect(await eventually { clock.isServing })
            sleeper.cancel()
            #expect(await sleeper.value == false, "a cancelled sleep reports it")
            // The thread ends a second after its last sleeper left; it used to wait out the cancelled deadline.
            #expect(await eventually(within: 15) { !clock.isServing }, "\(duration)")
        }
    }

    /// Instants at the extremes, either way from now: Foundation's distant dates (about 2,000 years), past
    /// Int64 nanoseconds (292 years), and about as far as `Duration` goes.
    static let farAway: [Duration] = [
        .seconds(63_113_904_000), .seconds(Int64.max), huge.last!, Duration(attoseconds: Int128.max / 2),
    ]

    @Test("run(mode:until:) with an instant long past makes one pass; with one far ahead it runs until stopped")
    func runUntilExtremes() throws {
        let pastRuns = Locked([Duration]())
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(try RunLoopPortSource { _ in nil }, mode: .default) // the mode never runs empty
        }, body: { loop in
            var results: [PortRunLoop.RunResult] = []
            for distance in Self.farAway {
                let start = ContinuousClock.now
                results.append(loop.run(mode: .default, until: .now - distance))
                results.append(loop.run(mode: .default, until: .now - distance, returnAfterSourceHandled: true))
                pastRuns.withLock { $0.append(.now - start) }
                try! loop.perform(afterDelay: .milliseconds(20)) { PortRunLoop.current.stop() }
                results.append(loop.run(mode: .default, until: .now + distance))
                try! loop.perform(afterDelay: .milliseconds(20)) { PortRunLoop.current.stop() }
                results.append(loop.run(mode: .default, until: .now + distance, returnAfterSourceHandled: true))
            }
            return results
        })
        let expected: [PortRunLoop.RunResult] = [.timedOut, .timedOut, .stopped, .stopped]
        #expect(worker.join() == Array(Array(repeating: expected, count: Self.farAway.count).joined()))
        // A pass that polls; the bound only catches a run that slept, and holds on a loaded machine.
        #expect(pastRuns.current.allSatisfy { $0 < .seconds(5) }, "\(pastRuns.current)")
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
