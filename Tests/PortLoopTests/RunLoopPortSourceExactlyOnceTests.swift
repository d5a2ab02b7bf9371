import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Every message a loop takes from a port source's port is handled exactly once, in order: a source that leaves
/// its mode (removed, invalidated, moved to another mode) or a run that stops while a batch is in hand puts the
/// messages it has not handled back at the head of the port.
@Suite("Run loop port sources: exactly once", .timeLimit(.minutes(2)))
struct RunLoopPortSourceExactlyOnceTests {
    /// Sends consecutive ids until told to stop or until a send times out; returns how many were sent.
    final class Sender: @unchecked Sendable {
        let sent = Locked(Int32(0))
        let stop = Locked(false)
        let thread: TestThread

        init(_ right: PortSendRight, timeout: PortTimeout = .after(.milliseconds(50)), limit: Int32 = .max) {
            let sent = self.sent, stop = self.stop
            thread = TestThread {
                var next: Int32 = 0
                while !stop.current && next < limit {
                    do { try right.send(id: next, timeout: timeout) } catch { break }
                    next += 1
                    sent.withLock { $0 = next }
                }
            }
        }

        func finish() -> Int32 {
            stop.withLock { $0 = true }
            thread.join()
            return sent.current
        }
    }

    @Test("a handler that invalidates its own source in the middle of a batch leaves the rest queued")
    func invalidateInsideBatch() throws {
        for _ in 0..<5 {
            let handled = Locked([Int32]())
            let holder = Locked<RunLoopPortSource?>(nil)
            let source = try RunLoopPortSource(queueLimit: 1024) { message in
                handled.withLock { $0.append(message.id) }
                if message.id == 999 { holder.current?.invalidate() }
                return nil
            }
            holder.withLock { $0 = source }
            let sender = Sender(source.makeSendRight())
            let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) },
                                        body: { loop in [loop.run(mode: .default, timeout: .seconds(30))] })
            // The invalidated source leaves the mode empty: the run finishes. The sender then fills the queue and
            // times out.
            #expect(worker.join() == [.finished])
            let sent = sender.finish()
            let ids = handled.current
            #expect(ids == Array(0..<Int32(ids.count)), "handled in order, none twice")
            #expect(ids.count == 1000, "nothing handled after the invalidation")
            #expect(Int(sent) - ids.count == source.queuedMessageCount,
                    "every message sent is either handled or still queued")
            holder.withLock { $0 = nil }
        }
    }

    @Test("two threads invalidating a source while its batch is in hand: nothing is handled after the handler's own invalidate returns")
    func racingInvalidations() throws {
        let queued: Int32 = 64
        for round in 0..<300 {
            let handled = Locked(Int32(0))
            let afterReturn = Locked(0)
            let returned = Locked(false)
            let armed = Locked(false)
            let holder = Locked<RunLoopPortSource?>(nil)
            let source = try RunLoopPortSource(queueLimit: Int(queued)) { message in
                if returned.current { afterReturn.withLock { $0 += 1 } }
                handled.withLock { $0 += 1 }
                if message.id == 8 {
                    armed.withLock { $0 = true }
                    // A head start for the other thread that varies from round to round, so that in some rounds
                    // it has marked the source invalid, and not yet taken it out of the mode, when this call comes.
                    for _ in 0..<(round % 30) * 4 { _ = armed.current }
                    holder.current?.invalidate()
                    returned.withLock { $0 = true }
                }
                return nil
            }
            holder.withLock { $0 = source }
            let right = source.makeSendRight()
            for id in 0..<queued { try right.send(id: id, timeout: .poll) } // one batch, queued before the run
            let other = TestThread {
                while !armed.current {}
                holder.current?.invalidate()
            }
            let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) },
                                        body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
            #expect(worker.join() == [.finished], "the source left the mode, which is empty")
            other.join()
            #expect(afterReturn.current == 0, "round \(round): handled after invalidate() returned on the loop's thread")
            #expect(handled.current + Int32(source.queuedMessageCount) == queued, "each message handled or still queued")
            holder.withLock { $0 = nil }
        }
    }

    @Test("removing and re-adding a source from another thread under traffic loses and repeats nothing")
    func removeAndReAddUnderTraffic() throws {
        let total: Int32 = 20_000
        let handled = Locked([Int32]())
        let source = try RunLoopPortSource(queueLimit: 256) { message in
            handled.withLock { $0.append(message.id) }
            if message.id == total - 1 { PortRunLoop.current.stop() }
            return nil
        }
        let keepAlive = try RunLoopPortSource(queueLimit: 1, maxMessageSize: 1) { _ in nil }
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(keepAlive, mode: .default)
            try loop.add(source, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(60))] })
        let sender = Sender(source.makeSendRight(), timeout: .forever, limit: total)
        var toggles = 0
        let giveUp = nowNanoseconds() + 30_000_000_000
        while handled.withLock({ $0.count }) < Int(total) && nowNanoseconds() < giveUp {
            worker.loop.remove(source, mode: .default)
            do {
                try worker.loop.add(source, mode: .default)
            } catch {
                // The last message may have stopped the loop, and its thread ended, since the count was read.
                if handled.withLock({ $0.count }) == Int(total) { break }
                throw error
            }
            toggles += 1
            if toggles % 4 == 0 { sched_yield() } // let the loop take batches between removals
        }
        #expect(worker.join() == [.stopped])
        #expect(sender.finish() == total)
        #expect(handled.current == Array(0..<total), "every message once, in order (\(toggles) removals)")
    }

    @Test("a handler that moves its source to another mode: the rest of the batch is handled there, in order")
    func moveToAnotherMode() throws {
        let handled = Trace<(Int32, String)>()
        let holder = Locked<RunLoopPortSource?>(nil)
        let source = try RunLoopPortSource(queueLimit: 512) { message in
            let loop = PortRunLoop.current
            handled.append((message.id, loop.currentModeName!.rawValue))
            if message.id == 100, let me = holder.current {
                loop.remove(me, mode: .default)
                try? loop.add(me, mode: "other")
                loop.stop()
            }
            if message.id == 299 { loop.stop() }
            return nil
        }
        holder.withLock { $0 = source }
        defer { holder.withLock { $0 = nil } }
        let sender = source.makeSendRight()
        for id in Int32(0)..<300 { try sender.send(id: id, timeout: .poll) }
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(10)), loop.run(mode: "other", timeout: .seconds(10))]
        })
        #expect(worker.join() == [.stopped, .stopped])
        let all = handled.all
        #expect(all.map(\.0) == Array(0..<300))
        #expect(all.prefix(101).allSatisfy { $0.1 == PortRunLoop.Mode.default.rawValue })
        #expect(all.dropFirst(101).allSatisfy { $0.1 == "other" })
    }

    @Test("a stop in the middle of a batch leaves the rest queued for the next run")
    func stopInsideBatch() throws {
        let handled = Locked([Int32]())
        let source = try RunLoopPortSource(queueLimit: 512) { message in
            handled.withLock { $0.append(message.id) }
            if message.id == 10 { PortRunLoop.current.stop() }
            return nil
        }
        let sender = source.makeSendRight()
        for id in Int32(0)..<200 { try sender.send(id: id, timeout: .poll) }
        let queuedAfterStop = Locked(0)
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { loop in
            let first = loop.run(mode: .default, timeout: .seconds(10))
            queuedAfterStop.withLock { $0 = source.queuedMessageCount }
            return [first, loop.run(mode: .default, timeout: .milliseconds(200))]
        })
        #expect(worker.join() == [.stopped, .timedOut])
        #expect(queuedAfterStop.current == 189, "messages 11…199 wait in the port")
        #expect(handled.current == Array(0..<200))
    }

    @Test("large payloads keep their bytes when a stop puts them back")
    func largePayloadsPutBack() throws {
        // Even ids are 100,000 bytes (larger than the loop's buffer: their memory is taken over whole, and a
        // stop puts them back from it), odd ones 10; each byte is its id.
        @Sendable func bytes(_ id: Int32) -> [UInt8] { [UInt8](repeating: UInt8(id), count: id % 2 == 0 ? 100_000 : 10) }
        let handled = Locked([Int32]())
        let source = try RunLoopPortSource(queueLimit: 64, maxMessageSize: 100_000) { message in
            let intact = message.payload == bytes(message.id)
            handled.withLock { $0.append(intact ? message.id : -1 - message.id) }
            if message.id == 9 { PortRunLoop.current.stop() } // 10, taken next, goes back
            return nil
        }
        let sender = source.makeSendRight()
        for id in Int32(0)..<40 { try sender.send(id: id, bytes: bytes(id), timeout: .poll) }
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(10)), loop.run(mode: .default, timeout: .milliseconds(200))]
        })
        #expect(worker.join() == [.stopped, .timedOut])
        #expect(handled.current == Array(0..<40), "each once, in order, with its own bytes (negative: not)")
    }

    @Test("a batch mixing payloads copied and taken over keeps every message's bytes through a nested run and a stop")
    func batchMixedPayloads() throws {
        // Payloads of up to 48 bytes are held in the port's queue and copied into the batch; larger ones are
        // taken over whole. Each byte is its message's id and position.
        let sizes = [0, 10, 48, 49, 4_096, 70_000]
        @Sendable func bytes(_ id: Int32) -> [UInt8] {
            (0..<sizes[Int(id) % sizes.count]).map { UInt8(truncatingIfNeeded: Int(id) &* 31 &+ $0) }
        }
        let handled = Locked([Int32]())
        let nestedHandled = Locked([Int32]())
        let inner = try RunLoopPortSource(queueLimit: 64, maxMessageSize: 70_000) { message in
            let intact = message.payload == bytes(message.id)
            nestedHandled.withLock { $0.append(intact ? message.id : -1 - message.id) }
            if message.id == 1_011 { PortRunLoop.current.stop() }
            return nil
        }
        let outer = try RunLoopPortSource(queueLimit: 256, maxMessageSize: 70_000) { message in
            let intact = message.payload == bytes(message.id)
            handled.withLock { $0.append(intact ? message.id : -1 - message.id) }
            // In the middle of a batch: a nested run takes batches of its own.
            if message.id == 20 { _ = PortRunLoop.current.run(mode: "nested", timeout: .seconds(10)) }
            if message.id == 75 { PortRunLoop.current.stop() } // the rest of the batch goes back
            return nil
        }
        let outerSender = outer.makeSendRight(), innerSender = inner.makeSendRight()
        for id in Int32(0)..<120 { try outerSender.send(id: id, bytes: bytes(id), timeout: .poll) }
        for id in Int32(1_000)..<1_012 { try innerSender.send(id: id, bytes: bytes(id), timeout: .poll) }
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(outer, mode: .default)
            try loop.add(inner, mode: "nested")
        }, body: { loop in
            [loop.run(mode: .default, timeout: .seconds(10)), loop.run(mode: .default, timeout: .milliseconds(200))]
        })
        #expect(worker.join() == [.stopped, .timedOut])
        #expect(handled.current == Array(0..<120), "each once, in order, with its own bytes (negative: not)")
        #expect(nestedHandled.current == Array(1_000..<1_012))
    }

    @Test("a large message taken by a sleep keeps its bytes through a nested run that takes another before it is handled")
    func nestedRunKeepsTakenPayload() throws {
        @Sendable func bytes(_ value: UInt8, _ count: Int) -> [UInt8] { [UInt8](repeating: value, count: count) }
        let trace = Locked([String]())
        let inner = try RunLoopPortSource(queueLimit: 4, maxMessageSize: 300_000) { message in
            trace.withLock { $0.append("inner \(message.payload == bytes(2, 300_000))") }
            return nil
        }
        let outer = try RunLoopPortSource(queueLimit: 4, maxMessageSize: 200_000) { message in
            trace.withLock { $0.append("outer \(message.payload == bytes(1, 200_000))") }
            PortRunLoop.current.stop()
            return nil
        }
        try inner.makeSendRight().send(id: 2, bytes: bytes(2, 300_000), timeout: .poll)
        try outer.makeSendRight().send(id: 1, bytes: bytes(1, 200_000), timeout: .poll)
        let worker = TestLoopThread(setUp: { loop in
            try loop.add(outer, mode: .default)
            try loop.add(inner, mode: "nested")
            // Runs after the sleep that took the outer message and before that message is handled.
            try loop.add(RunLoopObserver(activities: .afterWaiting, repeats: false) { _, _ in
                let result = PortRunLoop.current.run(mode: "nested", timeout: .seconds(10),
                                                     returnAfterSourceHandled: true)
                trace.withLock { $0.append("nested \(result)") }
            }, mode: .default)
        }, body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        #expect(worker.join() == [.stopped])
        #expect(trace.current == ["inner true", "nested handledSource", "outer true"])
    }

    @Test("a message taken with its reply port and put back keeps the reply port")
    func putBackKeepsReplyPort() throws {
        let holder = Locked<RunLoopPortSource?>(nil)
        let first = try RunLoopPortSource(queueLimit: 64) { message in
            // Message 0 wakes the loop; 1…4 come in the same pass's batch, and 3 and 4 are still in hand.
            if message.id == 2 { holder.current?.invalidate() }
            return PortReply(id: message.id + 1000)
        }
        holder.withLock { $0 = first }
        let sender = first.makeSendRight()
        let replies = try PortReceiveRight(queueLimit: 16)
        for id in Int32(0)..<5 { try sender.send(id: id, replyPort: replies.makeSendRight(), timeout: .poll) }
        let worker = TestLoopThread(setUp: { loop in try loop.add(first, mode: .default) },
                                    body: { loop in [loop.run(mode: .default, timeout: .seconds(10))] })
        #expect(worker.join() == [.finished])
        for id in Int32(1000)...1002 { #expect(try replies.receive(timeout: .poll).id == id) }
        #expect(first.queuedMessageCount == 2)
        // The two put back still carry their reply rights, and no other right is left.
        #expect(replies.sendRightCount == 2)
        holder.withLock { $0 = nil }
    }
}
