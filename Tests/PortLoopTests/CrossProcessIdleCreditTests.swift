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
}
