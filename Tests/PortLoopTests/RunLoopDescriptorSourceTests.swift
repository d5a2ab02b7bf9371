import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Descriptor sources (`CFFileDescriptor`'s run loop source): a descriptor in the mode's port set wakes the loop
/// and its handler runs on the loop's thread.
@Suite("Run loop descriptor sources")
struct RunLoopDescriptorSourceTests {
    /// Writes one byte to a pipe.
    func poke(_ fd: Int32) {
        var byte: UInt8 = 1
        _ = write(fd, &byte, 1)
    }

    /// Reads one byte from a pipe; false if none was there.
    @discardableResult
    func take(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        return read(fd, &byte, 1) == 1
    }

    @Test("a write from another thread wakes a sleeping loop; the handler runs on the loop's thread")
    func wakesAndPerforms() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        let calls = Trace<(UInt8, PortRunLoop)>()
        let source = RunLoopDescriptorSource(fileDescriptor: readEnd) { source in
            var byte: UInt8 = 0
            _ = read(source.fileDescriptor, &byte, 1)
            calls.append((byte, PortRunLoop.current))
        }
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true)]
        })
        // Wait until the loop is asleep, so the write must wake it.
        let deadline = nowNanoseconds() + 5_000_000_000
        while !worker.loop.isWaiting && nowNanoseconds() < deadline { sleepMilliseconds(1) }
        #expect(worker.loop.isWaiting)
        var byte: UInt8 = 42
        _ = write(writeEnd, &byte, 1)
        #expect(worker.join() == [.handledSource])
        #expect(calls.all.map(\.0) == [42])
        #expect(calls.all.allSatisfy { $0.1 === worker.loop })
        #expect(worker.loop.contains(source, mode: .default) == false, "the thread exited; its loop let go")
    }

    @Test("a descriptor source added from another thread to a loop asleep without timers is watched at once")
    func addedWhileAsleepWithoutTimers() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        let keepAlive = try PortReceiveRight()
        let portSource = RunLoopPortSource(port: keepAlive) { _ in nil }
        // A mode with a port source only and no timeout: the loop's sleep has no deadline and, until the
        // descriptor arrives, nothing for the port set's base to watch.
        let worker = TestLoopThread(setUp: { loop in try loop.add(portSource, mode: .default) },
                                    body: { loop in [loop.run(mode: .default, returnAfterSourceHandled: true)] })
        let deadline = nowNanoseconds() + 5_000_000_000
        while !worker.loop.isWaiting && nowNanoseconds() < deadline { sleepMilliseconds(1) }
        let handled = Locked(false)
        try worker.loop.add(RunLoopDescriptorSource(fileDescriptor: readEnd) { source in
            var byte: UInt8 = 0
            _ = read(source.fileDescriptor, &byte, 1)
            handled.withLock { $0 = true }
        }, mode: .default)
        poke(writeEnd)
        while !handled.current && nowNanoseconds() < deadline + 5_000_000_000 { sleepMilliseconds(2) }
        if !handled.current {
            Issue.record("the sleeping loop never looked at the added descriptor")
            worker.loop.stop()
        }
        #expect(worker.join() == [handled.current ? .handledSource : .stopped])
    }

    @Test("readiness is level-triggered: unread data calls the handler again, one call per handled source")
    func levelTriggered() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        let calls = Locked(0)
        // Reads one byte per call although three are waiting.
        let source = RunLoopDescriptorSource(fileDescriptor: readEnd) { source in
            var byte: UInt8 = 0
            _ = read(source.fileDescriptor, &byte, 1)
            calls.withLock { $0 += 1 }
        }
        for _ in 0..<3 { poke(writeEnd) }
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { loop in
            (0..<3).map { _ in loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true) }
                + [loop.run(mode: .default, timeout: .milliseconds(50))]
        })
        #expect(worker.join() == [.handledSource, .handledSource, .handledSource, .timedOut])
        #expect(calls.current == 3)
    }

    @Test("a mode holding only a descriptor source is not empty; invalidating it finishes the run")
    func keepsModeAlive() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        let source = RunLoopDescriptorSource(fileDescriptor: readEnd) { _ in }
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { loop in
            [loop.run(mode: .default, timeout: .milliseconds(30)), loop.run(mode: .default, timeout: .seconds(10))]
        })
        sleepMilliseconds(100) // the first run has timed out; the second sleeps
        #expect(source.isValid)
        source.invalidate()
        #expect(!source.isValid)
        #expect(worker.join() == [.timedOut, .finished])
    }

    @Test("served only in its modes; .common reaches every common mode; removal stops the watching")
    func modes() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        let seen = Trace<String>()
        let source = RunLoopDescriptorSource(fileDescriptor: readEnd) { [self] source in
            take(source.fileDescriptor)
            seen.append(PortRunLoop.current.currentModeName?.rawValue ?? "?")
        }
        let keepAlive = RunLoopTimer(after: .seconds(3600)) { _ in }
        poke(writeEnd)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(keepAlive, mode: "private")
            try loop.add(source, mode: .common)
            try loop.addCommonMode("tracking")
        }, body: { loop in
            var results = [loop.run(mode: "private", timeout: .milliseconds(30), returnAfterSourceHandled: true)]
            results.append(loop.run(mode: "tracking", timeout: .seconds(10), returnAfterSourceHandled: true))
            loop.remove(source, mode: .common)
            results.append(loop.run(mode: .default, timeout: .milliseconds(30)))
            return results
        })
        // The private mode does not hold the source; tracking became common and does.
        let results = worker.join()
        #expect(results == [.timedOut, .handledSource, .finished])
        #expect(seen.all == ["tracking"])
    }

    @Test("contains, add twice, description, and a handler that invalidates its own source")
    func itemRules() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        let calls = Locked(0)
        let source = RunLoopDescriptorSource(fileDescriptor: readEnd, order: 7) { [self] source in
            take(source.fileDescriptor)
            calls.withLock { $0 += 1 }
            source.invalidate()
        }
        poke(writeEnd)
        poke(writeEnd)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(source, mode: .default)
            try loop.add(source, mode: .default) // no effect
            #expect(loop.contains(source, mode: .default))
            #expect(!loop.contains(source, mode: "other"))
            #expect(loop.description.contains("RunLoopDescriptorSource(fd \(readEnd), order: 7"))
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        // Invalidated in its first callout: the second byte is never read, and the mode ran empty.
        #expect(worker.join() == [.finished])
        #expect(calls.current == 1)
        #expect(take(readEnd), "the second byte is still there")
        #expect(throws: RunLoopError.invalidated) { try withIdleLoop { try $0.add(source, mode: .default) } }
    }

    @Test("bad descriptors and a second source on the same descriptor are refused with typed errors")
    func badInput() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        try withIdleLoop { loop in
            for bad: Int32 in [-1, 9_999] {
                let source = RunLoopDescriptorSource(fileDescriptor: bad) { _ in }
                let error = #expect(throws: RunLoopError.self) { try loop.add(source, mode: .default) }
                guard case let .portLayer(.invalidArgument(argument, _))? = error else {
                    Issue.record("expected an invalid argument from the port layer, got \(String(describing: error))")
                    return
                }
                #expect(argument == "fileDescriptor")
                #expect(!loop.contains(source, mode: .default))
                // The failed add left the source free for another attempt, on this loop or another.
                #expect(source.isValid)
            }
            let first = RunLoopDescriptorSource(fileDescriptor: readEnd) { _ in }
            let second = RunLoopDescriptorSource(fileDescriptor: readEnd) { _ in }
            try loop.add(first, mode: .default)
            #expect(throws: RunLoopError.portLayer(.alreadyInSet)) { try loop.add(second, mode: .default) }
            #expect(loop.contains(first, mode: .default))
            #expect(!loop.contains(second, mode: .default))
            // In another mode the same descriptor may be watched by another source.
            try loop.add(second, mode: "other")
            loop.remove(first, mode: .default)
            try loop.add(second, mode: .default)
            #expect(loop.contains(second, mode: .default))
        }
    }

    @Test("the README example: a pipe's read end as a source")
    func readmeExample() throws {
        let result = Locked<(PortRunLoop.RunResult, UInt8)?>(nil)
        let thread = TestThread {
            // As in README.md's daemon section, on a thread of our own (the test's thread is not ours to run).
            var fds: [Int32] = [0, 0]
            pipe(&fds)
            defer { close(fds[0]); close(fds[1]) }
            let seen = Locked<UInt8>(0)
            let source = RunLoopDescriptorSource(fileDescriptor: fds[0]) { source in
                var byte: UInt8 = 0
                _ = read(source.fileDescriptor, &byte, 1)
                seen.withLock { $0 = byte }
            }
            try! PortRunLoop.current.add(source, mode: .default)
            var one: UInt8 = 1
            _ = write(fds[1], &one, 1)
            let run = PortRunLoop.current.run(mode: .default, timeout: .seconds(1), returnAfterSourceHandled: true)
            source.invalidate()
            result.withLock { $0 = (run, seen.current) }
        }
        thread.join()
        #expect(result.current?.0 == .handledSource)
        #expect(result.current?.1 == 1)
    }

    @Test("a source whose loop's thread exited can join another loop")
    func outlivesItsThread() throws {
        let (readEnd, writeEnd) = try makePipe()
        defer { close(readEnd); close(writeEnd) }
        let calls = Locked(0)
        let source = RunLoopDescriptorSource(fileDescriptor: readEnd) { [self] source in
            take(source.fileDescriptor)
            calls.withLock { $0 += 1 }
        }
        let first = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { _ in [] })
        _ = first.join()
        poke(writeEnd)
        let second = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true)]
        })
        #expect(second.join() == [.handledSource])
        #expect(calls.current == 1)
    }
}
