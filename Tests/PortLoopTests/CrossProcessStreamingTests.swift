import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A sender that sends back to back: by default each message is the kernel's when `send` returns, so a process
/// that ends abruptly right after loses none; with ``PortNamespace/packsStreams`` its messages are packed,
/// several to a packet, none lost or reordered; and a process that ends normally sends what it still held.
@Suite("Across processes: streaming senders")
struct CrossProcessStreamingTests {
    /// Receives `count` messages "pid 0 seq" from `pid` in order; how many came in order.
    func receiveInOrder(_ port: borrowing PortReceiveRight, from pid: Int32, count: Int) -> Int {
        var expected = 0
        while expected < count {
            guard let message = try? port.receive(timeout: .seconds(30)) else { break }
            let parts = String(decoding: message.payload, as: UTF8.self).split(separator: " ")
            guard message.id == 8, parts.count == 3, Int32(parts[0]) == pid, Int(parts[2]) == expected else { break }
            expected += 1
        }
        return expected
    }

    @Test("with packing asked for, a stream arrives whole and in order, most of it packed several to a packet")
    func streamArrivesPacked() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("stream", queueLimit: 1024, maxMessageSize: 16)
        let packedBefore = CrossProcessStatistics.current.packedFramesReceived
        let count = 30_000
        // Packing is the socket's: a connection that moved to a shared-memory ring packs nothing (and needs not).
        let sender = try Peer(["stream", space.path, "stream", "\(count)", "--pack"],
                              environment: ["PORTLOOP_SHARED_RINGS": "never"])
        #expect(sender.ready())
        sender.tell("go")
        let inOrder = receiveInOrder(port, from: sender.pid, count: count)
        #expect(inOrder == count, "in order up to \(inOrder) of \(count)")
        let streaks = sender.line(startingWith: "streaks ").flatMap { Int($0.dropFirst("streaks ".count)) }
        #expect(sender.finish() == 0)
        // The child sends from a tight loop, so it streams: it had runs of 8 sends each within 2 µs of the one
        // before, after which frames wait to be packed. Unless its sends were slower than that (under
        // ThreadSanitizer, or on a busy machine): then nothing need have been held back to be packed.
        let packed = CrossProcessStatistics.current.packedFramesReceived - packedBefore
        #expect(streaks != nil, "\(sender.allLines)")
        if let streaks, streaks > 0 {
            #expect(packed > 0, "no frame came packed, after \(streaks) streaks of quick sends")
        }
        #expect(throws: PortError.timedOut) { try port.receive(timeout: .poll) }
    }

    @Test("by default a stream is the kernel's as it is sent: a sender that ends with _exit right after loses nothing")
    func defaultStreamSurvivesAbruptEnd() throws {
        let space = TemporaryNamespace()
        // Room for all of them is lent at once, so they go back to back; 150 small packets fit the socket, so
        // none waits in the sender's process for room either.
        let port = try space.namespace.checkIn("stream", queueLimit: 1024, maxMessageSize: 16)
        let count = 150
        let sender = try Peer(["stream", space.path, "stream", "\(count)", "--exit-now"])
        #expect(sender.ready())
        sender.tell("go")
        let inOrder = receiveInOrder(port, from: sender.pid, count: count)
        #expect(inOrder == count, "in order up to \(inOrder) of \(count)")
        #expect(sender.finish() == 0)
    }

    @Test("messages still waiting in the sender's process when it calls exit() are sent before it ends")
    func exitSendsWhatWaits() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "sink", "1024", "65536"])
        #expect(service.ready())
        let sender = try Peer(["stream", space.path, "sink", "24", "32768"])
        #expect(sender.ready())
        // A stopped service reads nothing: the sender's socket fills, and the rest of its 24 messages of 32 KiB
        // (within the outgoing queue's 1 MiB) wait in the sender's process when it says `sent` and exits.
        #expect(kill(service.pid, SIGSTOP) == 0)
        sender.tell("go")
        let sent = sender.line(startingWith: "sent", within: 20)
        #expect(kill(service.pid, SIGCONT) == 0)
        #expect(sent == "sent 24")
        #expect(sender.finish() == 0)
        let report = try space.namespace.lookUp("sink").request(id: 9, timeout: .seconds(10))
        #expect(String(decoding: report.payload, as: UTF8.self) == "received 24 \(sender.pid) 0=23")
    }

    @Test("a handler that makes a request over the connection streaming into its loop gets its answers: what the busy loop cannot read, the transport does")
    func requestFromHandlerWhileStreaming() throws {
        let space = TemporaryNamespace()
        let server = try Peer(["serve", space.path, "echo", "1024"])
        #expect(server.ready())
        let service = try space.namespace.lookUp("echo", timeout: .seconds(10))
        let received = Locked(0), asked = Locked(0), answered = Locked(0)
        let slowest = Locked(Int64(0))
        // The echoes of a stream come back to this source over the connection, which makes it a stream into the
        // loop's port set, and the transport rests on it whenever the loop keeps up (not in every run: when the
        // transport is the faster reader, it reads on and never rests); every 200th, the handler asks the service
        // something and waits, the loop busy meanwhile. A rest that never ended would leave the answers unread.
        let source = try RunLoopPortSource(queueLimit: 1024) { _ in
            let count = received.withLock { $0 += 1; return $0 }
            if count % 200 == 0 {
                asked.withLock { $0 += 1 }
                let start = nowNanoseconds()
                if let reply = try? service.request(id: 1, bytes: [7], timeout: .seconds(10)), reply.payload == [7] {
                    answered.withLock { $0 += 1 }
                }
                let took = nowNanoseconds() - start
                slowest.withLock { $0 = max($0, took) }
            }
            return nil
        }
        let echoes = source.makeSendRight()
        let worker = TestLoopThread(setUp: { loop in try loop.add(source, mode: .default) },
                                    body: { loop in [loop.run(mode: .default, timeout: .seconds(120))] })
        for i in 0..<20_000 {
            try service.send(id: 1, bytes: [UInt8(truncatingIfNeeded: i)], replyPort: echoes, timeout: .seconds(30))
        }
        // Echoes the loop had no room for were dropped by the service (it replies without waiting): count asks.
        #expect(eventually(within: 60) { asked.current >= 10 })
        worker.loop.stop()
        #expect(worker.join() == [.stopped])
        #expect(answered.current == asked.current, "every request from the handler answered")
        #expect(slowest.current < 2_000_000_000, "the slowest took \(slowest.current / 1_000_000) ms")
        server.kill()
    }
}
