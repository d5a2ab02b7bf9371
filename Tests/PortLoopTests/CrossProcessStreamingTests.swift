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
        let sender = try Peer(["stream", space.path, "stream", "\(count)", "--pack"])
        #expect(sender.ready())
        sender.tell("go")
        let inOrder = receiveInOrder(port, from: sender.pid, count: count)
        #expect(inOrder == count, "in order up to \(inOrder) of \(count)")
        #expect(sender.finish() == 0)
        // The child sends from a tight loop: after its first few messages, it is streaming.
        let packed = CrossProcessStatistics.current.packedFramesReceived - packedBefore
        #expect(packed > 0, "no frame came packed")
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
}
