import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The queue limit holds across processes: remote senders block, time out, or fail at once with `.poll`, and
/// nothing buffers without bound on either side.
@Suite("Across processes: back-pressure")
struct CrossProcessFlowControlTests {
    @Test("a service that does not receive takes exactly its queue limit from a remote sender, then poll fails at once")
    func queueLimitHolds() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "slow", "5", "65536", "--paused"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("slow")
        let me = getpid()
        var accepted = 0
        while accepted < 50,
              (try? right.send(id: 8, bytes: Array("\(me) 0 \(accepted)".utf8), timeout: .poll)) != nil {
            accepted += 1
        }
        #expect(accepted == 5)
        // A timed send waits its timeout, no less.
        let waited = elapsedMilliseconds {
            #expect(throws: PortError.timedOut) {
                try right.send(id: 8, bytes: Array("\(me) 0 \(accepted)".utf8), timeout: .after(.milliseconds(200)))
            }
        }
        #expect(waited >= 199)

        // A sender blocked for room goes on once the service receives.
        let blocked = Locked<String?>(nil)
        let done = Locked(false)
        let sender = TestThread {
            do {
                try right.send(id: 8, bytes: Array("\(me) 0 5".utf8), timeout: .forever)
            } catch {
                blocked.withLock { $0 = "\(error)" }
            }
            done.withLock { $0 = true }
        }
        sleepMilliseconds(100)
        #expect(!done.current)
        service.tell("go")
        sender.join()
        #expect(blocked.current == nil)
        let report = try right.request(id: 9, timeout: .seconds(10))
        #expect(String(decoding: report.payload, as: UTF8.self) == "received 6 \(me) 0=5")
    }

    @Test("local and remote senders share one queue limit")
    func sharedLimit() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("shared", queueLimit: 4)
        let local = port.makeSendRight()
        let client = try Peer(["client", space.path, "shared", "1", "6"])
        // The child can put at most the queue limit in; it blocks on the rest.
        #expect(eventually { port.messageCount == 4 })
        sleepMilliseconds(50)
        #expect(port.messageCount == 4)
        #expect(throws: PortError.timedOut) { try local.send(id: 1, timeout: .poll) }
        // Receiving makes room, and the remote sender takes it.
        var received = 0
        while received < 6 {
            _ = try port.receive(timeout: .seconds(10))
            received += 1
        }
        #expect(client.finish() == 0)
        #expect(port.messageCount == 0)
        // Room lent to the departed client came back: local senders fill the queue again.
        for i in 0..<4 { try local.send(id: Int32(i), timeout: .seconds(5)) }
        #expect(throws: PortError.timedOut) { try local.send(id: 9, timeout: .poll) }
    }

    @Test("a sender streaming one way gets its room back before it runs out: it asks for credit once at most")
    func roomComesBackEarly() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("stream", queueLimit: 1024) // a client's share: 512
        // Paced by this side (100 messages, then a line), so that the stream never gets ahead of the receiver:
        // 2,000 messages, four times the share. Without room sent back early, it would ask at 512 and again after.
        let client = try Peer(["client", space.path, "stream", "1", "2000", "--paced", "--stay"])
        defer { client.kill() }
        let me = client.pid
        for round in 1...20 {
            for seq in (round - 1) * 100..<round * 100 {
                let message = try port.receive(timeout: .seconds(10))
                #expect(String(decoding: message.payload, as: UTF8.self) == "\(me) 0 \(seq)")
            }
            if round < 20 {
                #expect(client.line(startingWith: "paced \(round * 100)") != nil)
                client.tell("go")
            }
        }
        #expect(client.line(startingWith: "sent") == "sent 2000")
        // 0 as a rule: the room goes back while the client has a quarter of its share and more to spend, and a client
        // out of credit reads its connection before it asks. 1 when its process was held up for milliseconds (a
        // loaded machine). Without the room going back early: 3.
        let asked = client.line(startingWith: "asked ").flatMap { Int($0.dropFirst("asked ".count)) }
        #expect(asked != nil && asked! <= 1, "\(String(describing: asked))")
        client.tell("exit")
        #expect(client.finish() == 0)
    }

    @Test("a long one-way stream that outruns its receiver arrives whole while its room goes back early")
    func longStreamWithEarlyRoom() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("long", queueLimit: 1024, maxMessageSize: 16)
        // Back to back and as fast as the sender can: it outruns this receiver, spends its share and asks, while room
        // goes back to it at every 128 messages taken, and it reads its connection itself before it asks: the
        // crossings of early room, WANTs and the sender's own reads, 200,000 messages long.
        let count = 200_000
        let sender = try Peer(["stream", space.path, "long", "\(count)"])
        defer { sender.kill() }
        #expect(sender.ready())
        sender.tell("go")
        var expected = 0
        var stopped = ""
        while expected < count {
            do {
                let message = try port.receive(timeout: .seconds(20))
                let text = String(decoding: message.payload, as: UTF8.self)
                let parts = text.split(separator: " ")
                guard parts.count == 3, Int(parts[2]) == expected else {
                    stopped = "got \(text)"
                    break
                }
                expected += 1
            } catch {
                stopped = "\(error)"
                break
            }
        }
        #expect(expected == count, "in order up to \(expected) of \(count): \(stopped)")
        #expect(sender.finish() == 0)
    }

    @Test("room lent to a remote client that stopped sending is reclaimed for a local sender")
    func reclaim() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("lent", queueLimit: 8)
        // A child holds a right (and so credit) and sends nothing more while it holds it.
        let holder = try Peer(["hold", space.path, "lent"])
        let first = try port.receive(timeout: .seconds(10)) // its request (id 2)
        first.replyPort.map { try? $0.send(id: 102, timeout: .poll) }
        _ = try port.receive(timeout: .seconds(10)) // its message with a right
        #expect(holder.ready())
        let local = port.makeSendRight()
        for i in 0..<8 { try local.send(id: Int32(i), timeout: .seconds(5)) }
        #expect(port.messageCount == 8)
    }

    @Test("a client that stops reading cannot stall the service's other clients")
    func stoppedClient() throws {
        let space = TemporaryNamespace()
        let source = RunLoopPortSource(port: try space.namespace.checkIn("busy", queueLimit: 256, maxMessageSize: 65536)) { _ in
            PortReply(id: 101, bytes: [UInt8](repeating: 7, count: 60_000))
        }
        let thread = try RunLoopThread(name: "ipc-busy")
        defer { thread.stop() }
        try thread.loop.add(source, mode: .default)
        // A greedy client floods requests, then is stopped: its replies pile up unread.
        let greedy = try Peer(["flood", space.path, "busy", "400"])
        #expect(greedy.ready())
        sleepMilliseconds(50)
        kill(greedy.pid, SIGSTOP)
        defer { kill(greedy.pid, SIGCONT) }
        // Another client is served promptly all the same.
        for i in 0..<20 {
            let elapsed = try elapsedMilliseconds {
                let reply = try space.namespace.lookUp("busy").request(id: 1, bytes: [UInt8(i)], timeout: .seconds(10))
                #expect(reply.payload.count == 60_000)
            }
            #expect(elapsed < 5_000)
        }
    }
}
