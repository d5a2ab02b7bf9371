import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A peer killed at any moment: its rights to our ports go, our rights to its ports become dead names, waiting
/// senders and requests fail at once, nothing leaks; what it fully sent is delivered, once, in order.
@Suite("Across processes: peer death", .serialized)
struct CrossProcessFaultTests {
    @Test("killing a service wakes a sender blocked on its full port and a request waiting for its reply, typed, at once")
    func waitersFailAtOnce() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "victim", "1", "65536", "--paused"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("victim")
        try right.send(id: 8, bytes: Array("\(getpid()) 0 0".utf8), timeout: .seconds(5)) // fills the queue
        let blockedError = Locked<String?>(nil)
        let requestError = Locked<String?>(nil)
        let sender = TestThread {
            do { try right.send(id: 8, bytes: [], timeout: .forever) } catch { blockedError.withLock { $0 = "\(error)" } }
        }
        let requester = TestThread {
            do { _ = try right.request(id: 1, bytes: [], timeout: .forever) } catch {
                requestError.withLock { $0 = "\(error)" }
            }
        }
        sleepMilliseconds(100)
        #expect(blockedError.current == nil && requestError.current == nil)
        let killedAt = nowNanoseconds()
        service.kill()
        sender.join()
        requester.join()
        let took = Double(nowNanoseconds() - killedAt) / 1e6
        #expect(took < 2_000, "waiters took \(took) ms to fail")
        #expect(blockedError.current == "\(PortError.invalidDestination)")
        #expect(requestError.current == "\(PortError.invalidDestination)")
        #expect(right.isDeadName)
    }

    @Test("killing a client releases its rights to our ports and makes our rights to its ports dead names")
    func clientDeath() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("watched", queueLimit: 8)
        let baseline = port.sendRightCount
        let holder = try Peer(["hold", space.path, "watched"])
        let request = try port.receive(timeout: .seconds(10))
        try request.replyPort?.send(id: 102, timeout: .poll)
        let held = try port.receive(timeout: .seconds(10))
        #expect(holder.ready())
        guard case let .sendRight(theirs)? = held.attachments.first else {
            Issue.record("no right in \(held)")
            return
        }
        #expect(theirs.isRemote)
        #expect(!theirs.isDeadName)
        #expect(port.sendRightCount > baseline)
        holder.kill()
        #expect(eventually { theirs.isDeadName })
        #expect(throws: PortError.invalidDestination) { try theirs.send(id: 1, timeout: .poll) }
        #expect(eventually { port.sendRightCount == baseline })
    }

    @Test("several sender processes with several threads each, some killed mid-stream: exactly once, in order per sender")
    func exactlyOnceAndOrdered() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("sink", queueLimit: 32)
        let finishers = try (0..<3).map { _ in try Peer(["client", space.path, "sink", "3", "400"]) }
        let victims = try (0..<2).map { _ in try Peer(["client", space.path, "sink", "2", "100000"]) }
        var last: [String: Int] = [:]
        var counts: [Int32: Int] = [:]
        var killed = false
        let deadline = nowNanoseconds() + 60_000_000_000
        while nowNanoseconds() < deadline {
            guard let message = try? port.receive(timeout: .after(.milliseconds(500))) else {
                if killed && finishers.allSatisfy({ !$0.process.isRunning }) { break }
                continue
            }
            let parts = String(decoding: message.payload, as: UTF8.self).split(separator: " ")
            guard parts.count == 3, let seq = Int(parts[2]) else { Issue.record("bad payload"); break }
            let key = "\(parts[0]) \(parts[1])"
            #expect(seq == (last[key] ?? -1) + 1, "\(key): \(seq) after \(last[key] ?? -1)")
            last[key] = seq
            #expect(message.sender.processID == Int32(parts[0]))
            counts[message.sender.processID, default: 0] += 1
            if !killed, counts.values.reduce(0, +) > 1500 {
                for victim in victims { victim.kill() } // at whatever point each one is
                killed = true
            }
        }
        #expect(killed)
        for finisher in finishers {
            #expect(finisher.finish() == 0)
            #expect(finisher.allLines.contains("sent 1200"))
            #expect(counts[finisher.pid] == 1200)
        }
        for victim in victims { #expect((counts[victim.pid] ?? 0) < 200_000) }
    }

    @Test("1,000 connect/kill cycles leave no descriptor, thread, connection, right or memory behind")
    func noLeaksOverCycles() throws {
        // In a child of its own, so that the suites running beside this one do not move its counts.
        let space = TemporaryNamespace()
        let lines = try runPeer(["cycles", space.path, "cycles", "1000"], within: 300)
        guard let before = lines.first(where: { $0.hasPrefix("before ") })?.split(separator: " ").dropFirst().compactMap({ Int($0) }),
              let afterLine = lines.first(where: { $0.hasPrefix("after ") }) else {
            Issue.record("\(lines)")
            return
        }
        let fields = afterLine.split(separator: " ").dropFirst().map(String.init)
        let after = fields.prefix(6).compactMap { Int($0) }
        #expect(before.count == 3 && after.count == 6, "\(lines)")
        guard before.count == 3, after.count == 6 else { return }
        #expect(after[0] <= before[0], "descriptors \(before[0]) → \(after[0])")
        #expect(after[1] <= before[1], "threads \(before[1]) → \(after[1])")
        #expect(after[2] - before[2] < 16 * 1024, "resident memory \(before[2]) → \(after[2]) KiB")
        #expect(after[3] == 0, "connections left: \(after[3])")
        #expect(after[4] == 0, "imported rights left: \(after[4])")
        #expect(after[5] == 0, "exported rights left: \(after[5])")
        let rights = fields.last?.dropFirst(2).split(separator: "/") ?? []
        #expect(rights.count == 2 && rights[0] == rights[1], "the service port's send rights: \(fields.last ?? "")")
    }
}

/// A request whose reply can never come fails at once: the replier let go of the reply right, or died.
@Suite("Requests without a reply")
struct NoReplyTests {
    @Test("in-process: a port source whose handler returns nil fails the request at once with noReply, sync and async")
    func handlerWithoutReply() async throws {
        let source = try RunLoopPortSource { _ in nil }
        let thread = try RunLoopThread(name: "no-reply")
        defer { thread.stop() }
        try thread.loop.add(source, mode: .default)
        let right = source.makeSendRight()
        let took = elapsedMilliseconds {
            #expect(throws: PortError.noReply) { try right.request(id: 1, timeout: .seconds(30)) }
        }
        #expect(took < 10_000)
        // The timeout is long on purpose: noReply (not timedOut) shows the call did not wait for it. (No bound on
        // the time itself: in a full run the suite's synchronous tests can hold the cooperative pool for tens of
        // seconds before this task runs again.)
        await #expect(throws: PortError.noReply) { try await right.request(id: 1, timeout: .seconds(600)) }
        // A handler that answers still gets its answer through.
        let echo = try RunLoopPortSource { PortReply(id: 2, bytes: $0.payload) }
        try thread.loop.add(echo, mode: .default)
        #expect(try await echo.makeSendRight().request(id: 1, bytes: [5], timeout: .seconds(10)).payload == [5])
    }

    @Test("across processes: async requests fail at once with noReply when unanswered, invalidDestination when the service dies")
    func asyncAcrossProcesses() async throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "async", "4", "65536"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("async")
        #expect(try await right.request(id: 1, bytes: [3], timeout: .seconds(10)).payload == [3])
        await #expect(throws: PortError.noReply) { try await right.request(id: 6, timeout: .seconds(600)) }

        let paused = try Peer(["serve", space.path, "dying", "4", "65536", "--paused"])
        #expect(paused.ready())
        let dying = try space.namespace.lookUp("dying")
        async let outcome: PortError? = {
            do { _ = try await dying.request(id: 1, timeout: .seconds(600)); return nil } catch { return error as? PortError }
        }()
        try await Task.sleep(for: .milliseconds(100))
        paused.kill()
        #expect(await outcome == .invalidDestination) // not timedOut: it did not wait for the timeout
    }
}
