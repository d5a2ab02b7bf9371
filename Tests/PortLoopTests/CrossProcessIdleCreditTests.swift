import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Queue room lent to clients that hold a right and send nothing: a client that comes later must still get room.
@Suite("Across processes: room held by idle clients")
struct CrossProcessIdleCreditTests {
    @Test("clients that hold a right and sit idle do not keep a new client waiting for room")
    func idleHoldersDoNotStarveNewClients() throws {
        let space = TemporaryNamespace()
        let source = RunLoopPortSource(port: try space.namespace.checkIn("idle", queueLimit: 8)) { message in
            PortReply(id: message.id + 100, bytes: message.payload)
        }
        let thread = try RunLoopThread(name: "ipc-idle")
        defer { thread.stop() }
        try thread.loop.add(source, mode: .default)
        // Each holder is lent room with its right, uses a little of it and then sits idle: together they hold
        // all eight places of the queue while it is empty.
        let holders = try (0..<4).map { _ in try Peer(["hold", space.path, "idle"]) }
        defer { for holder in holders { holder.kill() } }
        for holder in holders { #expect(holder.ready()) }
        let started = nowNanoseconds()
        let lines = try runPeer(["request", space.path, "idle", "7", "hello"], within: 30)
        #expect(lines.contains("reply 107 hello"), "\(lines)")
        // The request's own timeout is 10 s; the room comes back in a round trip or two.
        #expect(nowNanoseconds() - started < 8_000_000_000)
    }

    @Test("a local sender waiting for room gets back what idle clients hold, every time it waits")
    func localSenderReclaimsEachTime() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("local", queueLimit: 8)
        let sender = port.makeSendRight()
        for round in 0..<3 {
            // A client that is lent room with its right, uses some and then sits idle.
            let holder = try Peer(["hold", space.path, "local"])
            defer { holder.kill() }
            let request = try port.receive(timeout: .seconds(10))
            try request.replyPort?.send(id: 102, timeout: .poll)
            _ = try port.receive(timeout: .seconds(10))
            #expect(holder.ready())
            var sent = 0
            while (try? sender.send(id: 1, timeout: .poll)) != nil { sent += 1 }
            #expect(sent < 8, "round \(round): the client should hold some of the room")
            // One more waits for room: the idle client is asked for what it holds.
            #expect(throws: Never.self, "round \(round)") { try sender.send(id: 1, timeout: .seconds(5)) }
            while (try? port.receive(timeout: .poll)) != nil {}
        }
    }
}
