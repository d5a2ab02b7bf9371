import PortLoop
import Testing

/// Source0 order, Source1 replies and modes, removal during a run, observers that remove themselves.
@Suite("Run loop sources")
struct RunLoopSourceTests {
    @Test("signalled Source0s are performed by order, then by signal time")
    func source0Order() throws {
        let trace = Trace<String>()
        let a = RunLoopSource(order: 2) { trace.append("a2") }
        let b = RunLoopSource(order: 1) { trace.append("b1") }
        let c = RunLoopSource(order: 2) { trace.append("c2") }
        let d = RunLoopSource(order: 0) { trace.append("d0") }
        let worker = TestLoopThread(setUp: { loop in
            for source in [a, b, c, d] { try loop.add(source, mode: .default) }
            c.signal(); a.signal(); b.signal(); d.signal()
            #expect(a.isSignalled)
        }, body: { loop in [loop.run(mode: .default, timeout: .zero)] })
        #expect(worker.join() == [.timedOut])
        #expect(trace.all == ["d0", "b1", "c2", "a2"])
        #expect(!a.isSignalled)
    }

    @Test("a Source0 signalled but not woken waits; signalAndWakeUp performs it")
    func signalDoesNotWake() throws {
        let performed = Locked(0)
        let source = RunLoopSource { performed.withLock { $0 += 1 } }
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true)] })
        sleepMilliseconds(30)
        source.signal()
        sleepMilliseconds(50)
        #expect(performed.current == 0, "a signal alone does not wake the loop")
        worker.loop.wakeUp()
        #expect(worker.join() == [.handledSource])
        #expect(performed.current == 1)
    }

    @Test("a Source1 handler's reply reaches the reply port")
    func source1Reply() throws {
        let source = try RunLoopPortSource { message in
            PortReply(id: message.id + 100, bytes: message.payload.reversed())
        }
        let sender = source.makeSendRight()
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(10), returnAfterSourceHandled: true)] })
        let replies = try PortReceiveRight()
        try sender.send(id: 7, bytes: [1, 2, 3], replyPort: replies.makeSendRight())
        let reply = try replies.receive(timeout: .after(.seconds(10)))
        #expect(reply.id == 107)
        #expect(reply.payload == [3, 2, 1])
        #expect(worker.join() == [.handledSource])
    }

    @Test("a Source1 in two modes is served in both")
    func source1InTwoModes() throws {
        let modes = Trace<String>()
        let source = try RunLoopPortSource { _ in modes.append(PortRunLoop.current.currentModeName!.rawValue); return nil }
        let sender = source.makeSendRight()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(source, mode: .default)
            try loop.add(source, mode: "tracking")
            try sender.send(id: 1)
            try sender.send(id: 2)
        }, body: { loop in
            [loop.run(mode: "tracking", timeout: .seconds(5), returnAfterSourceHandled: true),
             loop.run(mode: .default, timeout: .seconds(5), returnAfterSourceHandled: true)]
        })
        #expect(worker.join() == [.handledSource, .handledSource])
        #expect(modes.all == ["tracking", "kCFRunLoopDefaultMode"])
    }

    @Test("a Source1 drains a burst of messages in order")
    func source1Burst() throws {
        let received = Locked([Int32]())
        let source = try RunLoopPortSource(queueLimit: 1024) { message in
            received.withLock { $0.append(message.id) }
            if message.id == 4999 { PortRunLoop.current.stop() }
            return nil
        }
        let sender = source.makeSendRight()
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        let producer = TestThread { for i in 0..<5000 { try! sender.send(id: Int32(i)) } }
        producer.join()
        #expect(worker.join() == [.stopped])
        #expect(received.current == (0..<5000).map { Int32($0) })
    }

    @Test("Source1 messages taken in batches keep their order and payloads, large ones and nested runs included")
    func source1Batches() throws {
        // Queued before the loop runs, so that the loop takes them in batches. Every seventh payload is larger
        // than a batch's buffer and must come through a single receive. The callout of message 150 (not in the
        // first pass, so that the loop's spare batch storage exists) runs a nested loop that takes a batch of
        // its own while the outer batch's payloads wait.
        @Sendable func payload(_ id: Int) -> [UInt8] {
            [UInt8](repeating: UInt8(truncatingIfNeeded: id), count: id % 7 == 0 ? 20_000 : id % 50)
        }
        let nestedMode = PortRunLoop.Mode("batch-nested")
        let seen = Locked([Int32]())
        let corrupt = Locked([Int32]())
        let nestedSeen = Locked(0)
        let nested = try RunLoopPortSource(queueLimit: 1024) { message in
            if message.payload != payload(Int(message.id)) { corrupt.withLock { $0.append(-message.id) } }
            nestedSeen.withLock { $0 += 1 }
            return nil
        }
        let source = try RunLoopPortSource(queueLimit: 1024, maxMessageSize: 40_000) { message in
            seen.withLock { $0.append(message.id) }
            if message.payload != payload(Int(message.id)) { corrupt.withLock { $0.append(message.id) } }
            if message.id == 150 { _ = PortRunLoop.current.run(mode: nestedMode, timeout: .milliseconds(200)) }
            if message.id == 299 { PortRunLoop.current.stop() }
            return nil
        }
        let sender = source.makeSendRight()
        let nestedSender = nested.makeSendRight()
        for id in 0..<300 { try sender.send(id: Int32(id), bytes: payload(id)) }
        for id in 1..<100 where id % 7 != 0 { try nestedSender.send(id: Int32(id), bytes: payload(id)) }
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(source, mode: .default)
            try loop.add(nested, mode: nestedMode)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        #expect(worker.join() == [.stopped])
        #expect(seen.current == (0..<300).map { Int32($0) })
        #expect(corrupt.current.isEmpty)
        #expect(nestedSeen.current == 85)
    }

    @Test("payloads a handler keeps, changes or lets go of keep their bytes while the loop reuses the arrays let go of")
    func source1KeptPayloads() throws {
        // The loop copies each payload into the array the previous handler let go of. Runs of equal sizes, sizes
        // that grow and shrink within an array's room and beyond it, one over the largest array the loop keeps,
        // and a nested run: every third payload is kept, every fifth changed in a copy, and each kept one is
        // checked again at the end.
        let sizes = [8, 8, 8, 8, 16, 12, 9, 30, 4096, 4096, 4000, 2100, 70_000, 8, 8, 1, 0, 8, 300, 200, 8]
        @Sendable func payload(_ id: Int) -> [UInt8] {
            (0..<sizes[id % sizes.count]).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ id) }
        }
        let count = sizes.count * 6
        let nestedMode = PortRunLoop.Mode("kept-nested")
        let kept = Locked([(Int32, [UInt8])]())
        let corrupt = Locked([Int32]())
        let nested = try RunLoopPortSource(queueLimit: 64, maxMessageSize: 80_000) { message in
            if message.payload != payload(Int(message.id)) { corrupt.withLock { $0.append(message.id) } }
            if message.id % 3 == 0 { kept.withLock { $0.append((message.id, message.payload)) } }
            return nil
        }
        let source = try RunLoopPortSource(queueLimit: 1024, maxMessageSize: 80_000) { message in
            let before = message.payload
            if before != payload(Int(message.id)) { corrupt.withLock { $0.append(message.id) } }
            if message.id % 3 == 0 { kept.withLock { $0.append((message.id, message.payload)) } }
            if message.id % 5 == 0, !before.isEmpty {
                var changed = message.payload
                changed[0] = ~changed[0]
                if message.payload != payload(Int(message.id)) { corrupt.withLock { $0.append(message.id) } }
            }
            if message.id == 42 { // kept, then a nested run handles messages while this one's payload is in hand
                _ = PortRunLoop.current.run(mode: nestedMode, timeout: .milliseconds(200))
                if message.payload != payload(Int(message.id)) { corrupt.withLock { $0.append(message.id) } }
            }
            if message.id == Int32(count - 1) { PortRunLoop.current.stop() }
            return nil
        }
        let sender = source.makeSendRight()
        let nestedSender = nested.makeSendRight()
        for id in 0..<count { try sender.send(id: Int32(id), bytes: payload(id)) }
        for id in count..<(count + 40) { try nestedSender.send(id: Int32(id), bytes: payload(id)) }
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(source, mode: .default)
            try loop.add(nested, mode: nestedMode)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        #expect(worker.join() == [.stopped])
        #expect(corrupt.current.isEmpty, "payloads that differed from what was sent")
        let keptNow = kept.current
        #expect(keptNow.count == (0..<(count + 40)).filter { $0 % 3 == 0 }.count)
        #expect(keptNow.filter { $0.1 != payload(Int($0.0)) }.map(\.0).isEmpty, "kept payloads changed later")
    }

    @Test("a source whose last outside reference goes in its own callout lives until the callout returns")
    func source1ReleasedInOwnCallout() throws {
        // The handler invalidates its source and lets go of the only reference outside the loop; the canary, which
        // only the handler holds, must not die before the handler returns, and must once the run is over.
        final class Canary: Sendable {
            let died: Locked<Bool>
            init(_ died: Locked<Bool>) { self.died = died }
            deinit { died.withLock { $0 = true } }
        }
        let died = Locked(false)
        let diedInCall = Locked<Bool?>(nil)
        let holder = Locked<RunLoopPortSource?>(nil)
        let sender: PortSendRight
        do {
            let canary = Canary(died)
            let source = try RunLoopPortSource { _ in
                withExtendedLifetime(canary) {}
                let own = holder.withLock { held -> RunLoopPortSource? in
                    defer { held = nil }
                    return held
                }
                own?.invalidate()
                diedInCall.withLock { $0 = canary.died.current }
                return nil
            }
            sender = source.makeSendRight()
            holder.withLock { $0 = source }
        }
        let worker = TestLoopThread(setUp: { loop in
            guard let source = holder.current else { return }
            try loop.add(source, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
        try sender.send(id: 1)
        #expect(worker.join() == [.finished], "the invalidated source left the mode empty")
        #expect(diedInCall.current == false)
        #expect(died.current, "the source and its handler are gone once the run is over")
    }

    @Test("removing a source during a run: it is not performed again and the mode may finish")
    func removeDuringRun() throws {
        let performed = Locked(0)
        let source = try RunLoopPortSource { _ in performed.withLock { $0 += 1 }; return nil }
        let sender = source.makeSendRight()
        let cancels = Locked(0)
        let source0 = RunLoopSource(cancel: { _, _ in cancels.withLock { $0 += 1 } }) {}
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(source, mode: .default)
            try loop.add(source0, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        try sender.send(id: 1)
        sleepMilliseconds(50)
        worker.loop.remove(source, mode: .default)
        try sender.send(id: 2)
        source0.invalidate()
        #expect(worker.join() == [.finished])
        #expect(performed.current == 1)
        #expect(cancels.current == 1)
    }

    @Test("a source removed while its loop sleeps lets its port go, though the loop performed it last")
    func removedSourceLetsItsPortGo() throws {
        let performed = Locked(0)
        let held = Locked<RunLoopPortSource?>(try RunLoopPortSource { _ in performed.withLock { $0 += 1 }; return nil })
        let sender = held.current!.makeSendRight()
        let keepAlive = try RunLoopPortSource(queueLimit: 1, maxMessageSize: 1) { _ in nil }
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(keepAlive, mode: .default)
            try loop.add(held.current!, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(20))] })
        try sender.send(id: 1)
        #expect(eventually(within: 5) { performed.current == 1 })
        sleepMilliseconds(20) // asleep again, the source its last lookup
        worker.loop.remove(held.current!, mode: .default)
        held.withLock { $0 = nil }
        // The loop, woken by the removal, keeps the source only until it sleeps again: then the port is destroyed.
        #expect(eventually(within: 5) { sender.isDeadName })
        worker.loop.stop()
        #expect(worker.join() == [.stopped])
        #expect(sender.isDeadName, "after the run")
        #expect(performed.current == 1)
    }

    @Test("a source invalidated inside its own callout")
    func invalidateInCallout() throws {
        let performed = Locked(0)
        let box = Locked<RunLoopSource?>(nil)
        let source = RunLoopSource {
            performed.withLock { $0 += 1 }
            box.current?.invalidate()
        }
        box.withLock { $0 = source }
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default); source.signal() },
                                body: { loop in [loop.run(mode: .default, timeout: .seconds(5))] })
        #expect(worker.join() == [.finished])
        #expect(performed.current == 1)
        #expect(!source.isValid)
        box.withLock { $0 = nil }
    }

    @Test("observers fire by order; a non-repeating one once; one that removes itself stops")
    func observerOrderAndRemoval() throws {
        let trace = Trace<String>()
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopObserver(activities: .beforeTimers, order: 5) { _, _ in trace.append("o5") }, mode: .default)
            try loop.add(RunLoopObserver(activities: .beforeTimers, order: -1) { _, _ in trace.append("o-1") }, mode: .default)
            try loop.add(RunLoopObserver(activities: .beforeTimers, repeats: false, order: 5) { _, _ in trace.append("once") },
                         mode: .default)
            try loop.add(RunLoopObserver(activities: .beforeTimers, order: 9) { observer, _ in
                trace.append("self-removing")
                PortRunLoop.current.remove(observer, mode: .default)
            }, mode: .default)
            try loop.add(RunLoopTimer(after: .milliseconds(5), interval: .milliseconds(5)) { _ in }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .milliseconds(40))] })
        #expect(worker.join() == [.timedOut])
        let events = trace.all
        #expect(Array(events.prefix(4)) == ["o-1", "o5", "once", "self-removing"])
        #expect(events.filter { $0 == "once" }.count == 1)
        #expect(events.filter { $0 == "self-removing" }.count == 1)
        #expect(events.filter { $0 == "o5" }.count >= 2)
    }

    @Test("an observer does not fire re-entrantly from a nested run")
    func observerNotReentrant() throws {
        let depth = Locked(0)
        let maxDepth = Locked(0)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: .common)
            try loop.add(RunLoopObserver(activities: .entry) { _, _ in
                let d = depth.withLock { $0 += 1; return $0 }
                maxDepth.withLock { $0 = max($0, d) }
                _ = loop.run(mode: .default, timeout: .zero)
                depth.withLock { $0 -= 1 }
            }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .zero)] })
        #expect(worker.join() == [.timedOut])
        #expect(maxDepth.current == 1)
    }
}
