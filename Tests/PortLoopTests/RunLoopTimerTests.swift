import PortLoop
import Testing

/// Timers: one-shot, the repeating grid, invalidation, past fire dates, moving the fire date, order.
@Suite("Run loop timers")
struct RunLoopTimerTests {
    @Test("a one-shot timer fires once and is invalidated")
    func oneShot() throws {
        let fires = Locked(0)
        let timer = RunLoopTimer(after: .milliseconds(10)) { _ in fires.withLock { $0 += 1 } }
        #expect(!timer.isRepeating)
        let worker = TestLoopThread(setUp: { loop in try loop.add(timer, mode: .default) },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        #expect(worker.join() == [.finished])
        #expect(fires.current == 1)
        #expect(!timer.isValid)
    }

    @Test("a repeating timer whose callback blocks 3.5 intervals skips exactly the missed fires and stays on its grid")
    func gridAndSkippedFires() throws {
        let interval: Int64 = 40_000_000
        let start = nowNanoseconds() + 20_000_000
        let fireTimes = Locked([Int64]())
        let scheduled = Locked([Int64]())
        let timer = RunLoopTimer(fireAt: .now + .milliseconds(20), interval: .nanoseconds(interval)) { timer in
            let count = fireTimes.withLock { $0.append(nowNanoseconds()); return $0.count }
            if count == 1 { sleepMilliseconds(140) } // 3.5 intervals
            scheduled.withLock { $0.append(monotonic(timer.nextFireDate)) }
            if count == 3 { timer.invalidate() }
        }
        let worker = TestLoopThread(setUp: { loop in try loop.add(timer, mode: .default) },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        #expect(worker.join() == [.finished])
        let fires = fireTimes.current
        #expect(fires.count == 3)
        // Fire 1 at grid 0 blocks until ~3.5; grid points 1, 2, 3 are skipped; fire 2 is at grid 4, fire 3 at 5.
        let grid = fires.map { Double($0 - start) / Double(interval) }
        #expect(grid[0] >= 0 && grid[0] < 0.9, "\(grid)")
        #expect(grid[1] >= 4 && grid[1] < 4.9, "\(grid)")
        #expect(grid[2] >= 5 && grid[2] < 5.9, "\(grid)")
        // The next fire dates it reported lie exactly on the grid.
        for date in scheduled.current.prefix(2) {
            let steps = Double(date - start) / Double(interval)
            #expect(abs(steps - steps.rounded()) < 0.01, "off grid: \(steps)")
        }
    }

    @Test("a timer invalidated inside its own callout does not fire again")
    func invalidateInCallout() throws {
        let fires = Locked(0)
        let timer = RunLoopTimer(after: .milliseconds(1), interval: .milliseconds(5)) { timer in
            if fires.withLock({ $0 += 1; return $0 }) == 2 { timer.invalidate() }
        }
        let worker = TestLoopThread(setUp: { loop in try loop.add(timer, mode: .default) },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        #expect(worker.join() == [.finished])
        #expect(fires.current == 2)
        #expect(!timer.isValid)
    }

    @Test("a fire date in the past fires at the next opportunity")
    func pastFireDate() throws {
        let fired = Locked<Int64>(0)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(fireAt: .now - .seconds(10)) { _ in fired.withLock { $0 = nowNanoseconds() } },
                         mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        let start = nowNanoseconds()
        #expect(worker.join() == [.finished])
        #expect(fired.current > 0)
        #expect(fired.current - start < 1_000_000_000)
    }

    @Test("setting the next fire date from another thread wakes a sleeping loop")
    func setNextFireDateWakes() throws {
        let fired = Locked<Int64>(0)
        let timer = RunLoopTimer(after: .seconds(3600)) { _ in fired.withLock { $0 = nowNanoseconds() } }
        let worker = TestLoopThread(setUp: { loop in try loop.add(timer, mode: .default) },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        sleepMilliseconds(50)
        #expect(worker.loop.isWaiting)
        let moved = nowNanoseconds()
        timer.setNextFireDate(after: .milliseconds(20))
        #expect(worker.join() == [.finished])
        let delay = fired.current - moved
        #expect(delay >= 19_000_000 && delay < 2_000_000_000, "fired \(delay) ns after the move")
    }

    @Test("the loop reports its next timer fire date per mode")
    func nextTimerFireDate() throws {
        try withIdleLoop { loop in
        let early = RunLoopTimer(fireAt: .now + .seconds(100)) { _ in }
        let late = RunLoopTimer(fireAt: .now + .seconds(200)) { _ in }
        try loop.add(late, mode: "dates")
        try loop.add(early, mode: "dates")
        let next = try #require(loop.nextTimerFireDate(in: "dates"))
        #expect(abs((next - early.nextFireDate) / .milliseconds(1)) < 2)
        early.invalidate(); late.invalidate()
        #expect(loop.nextTimerFireDate(in: "dates") == nil)
        }
    }

    @Test("tolerance is capped at half the interval")
    func toleranceCap() {
        let timer = RunLoopTimer(after: .seconds(1), interval: .milliseconds(100), tolerance: .seconds(1)) { _ in }
        #expect(timer.tolerance == .milliseconds(50))
        timer.setTolerance(.milliseconds(10))
        #expect(timer.tolerance == .milliseconds(10))
        #expect(timer.interval == .milliseconds(100))
    }

    @Test("timers a few microseconds apart, which the loop polls for instead of sleeping, never fire early")
    func imminentTimersNotEarly() throws {
        // 3 µs apart: each next timer is within the loop's imminent-timer spin when the previous one has fired.
        let fired = Locked([(index: Int, at: ContinuousClock.Instant)]())
        let dates = Locked([ContinuousClock.Instant]())
        let worker = TestLoopThread(setUp: { loop in
            let base = ContinuousClock.now + .milliseconds(20)
            for index in 0..<300 {
                let date = base + .microseconds(3 * index)
                dates.withLock { $0.append(date) }
                try loop.add(RunLoopTimer(fireAt: date) { _ in fired.withLock { $0.append((index, .now)) } }, mode: .default)
            }
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        #expect(worker.join() == [.finished])
        let all = fired.current, due = dates.current
        #expect(all.map(\.index) == Array(0..<300))
        let early = all.filter { $0.at < due[$0.index] }
        #expect(early.isEmpty, "fired early: \(early.prefix(3).map(\.index))")
    }

    @Test("100,000 timers fire in fire-date order")
    func manyTimersInOrder() throws {
        let count = 100_000
        let order = Locked([Int]())
        order.withLock { $0.reserveCapacity(count) }
        let worker = TestLoopThread(setUp: { loop in
            let base = ContinuousClock.now + .milliseconds(20)
            // Insert in a scrambled order; fire dates spread over 50 ms.
            for i in 0..<count {
                let k = (i &* 7919) % count
                try loop.add(RunLoopTimer(fireAt: base + .nanoseconds(k * 500)) { _ in order.withLock { $0.append(k) } },
                             mode: .default)
            }
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(60))] })
        #expect(worker.join() == [.finished])
        let fired = order.current
        #expect(fired.count == count)
        let firstOutOfOrder = fired.indices.dropLast().first { fired[$0] >= fired[$0 + 1] }
        #expect(firstOutOfOrder == nil, "out of order at \(firstOutOfOrder ?? -1): \(fired[max(0, (firstOutOfOrder ?? 0) - 3)..<min(count, (firstOutOfOrder ?? 0) + 4)])")
        #expect(Set(fired).count == count, "each timer fired once")
    }

    @Test("order does not change firing order: timers due together fire in the order they were added, as in CF")
    func orderIsIgnored() throws {
        let fired = Trace<Int>()
        let worker = TestLoopThread(setUp: { loop in
            let date = ContinuousClock.now + .milliseconds(20)
            for order in [3, 1, 2, -5] {
                let timer = RunLoopTimer(fireAt: date, order: order) { fired.append($0.order) }
                #expect(timer.order == order)
                try loop.add(timer, mode: .default)
            }
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        #expect(worker.join() == [.finished])
        #expect(fired.all == [3, 1, 2, -5])
    }
}

/// Monotonic nanoseconds of an instant, for comparing against `nowNanoseconds()`.
func monotonic(_ instant: ContinuousClock.Instant) -> Int64 {
    let offset = instant - .now
    let (seconds, attoseconds) = offset.components
    return nowNanoseconds() + seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}
