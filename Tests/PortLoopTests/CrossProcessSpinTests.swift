import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A loop in the low-latency mode (``PortRunLoop/spinBeforeSleeping``) fed from other processes: while it polls, it
/// reads its connections' shared-memory rings itself, so that their writers wake nobody.
@Suite("Across processes: loops in the low-latency mode", .serialized)
struct CrossProcessSpinTests {
    @Test("a polling loop reads its ring itself: requests reach it without a wake-up, and are answered")
    func requestsRingNoBell() throws {
        let space = TemporaryNamespace()
        let rings = ["PORTLOOP_SHARED_RINGS": "always"] // the client offers the ring at once, and the service takes it
        let server = try Peer(["serve", space.path, "polling", "--spin"], environment: rings)
        defer { server.kill() }
        try #require(server.ready())
        // Each request finds the service's loop polling (it polls for 10 ms after each pass, and the requests come
        // 2 ms apart): it takes the request from the ring as it comes. A loop that only looked at the ring before
        // sleeping would leave it armed, and every request would ring its bell. The client is a process of its
        // own, whose count of the bells it rang no other test's connections add to; its replies come to a port of
        // its own, made once: request() makes one a time, and the notice of its end, sent as the reply arrives,
        // finds the service still at work on its pass and rightly rings.
        let count = 100
        let client = try Peer(["paced", space.path, "polling", "\(count)"], environment: rings)
        defer { client.kill() }
        let line = client.line(startingWith: "rung")
        let rung = try #require(line.flatMap { Int($0.dropFirst(5)) }, "the client said \(line ?? "nothing")")
        // A loop preempted just as it begins to poll leaves the ring armed a moment longer: a few may ring.
        #expect(rung < count / 4, "\(rung) of \(count) requests rang the polling loop's bell")
        #expect(client.line(startingWith: "rings") == "rings 1", "the client's connection read by ring")
        #expect(client.finish() == 0)

        let service = try space.namespace.lookUp("polling", timeout: .seconds(10))
        _ = try service.request(id: 10, timeout: .seconds(10))
        #expect(server.finish() == 0)
    }

    @Test("into a polling loop, several processes' messages and descriptors arrive once each, in each sender's order")
    func orderIntoAPollingLoop() throws {
        try withSharedRings(.whenBusy) {
            let space = TemporaryNamespace()
            let next = Locked<[String: Int]>([:])
            let problems = Locked<[String]>([])
            let received = Locked(0)
            // Every third message carries a descriptor: its packet goes on the socket behind a mark in the ring, which
            // the polling loop's look at its poller finds.
            let source = RunLoopPortSource(port: try space.namespace.checkIn("polled", queueLimit: 256)) { message in
                let parts = String(decoding: message.payload, as: UTF8.self).split(separator: " ")
                let sender = parts.count == 3 ? "\(parts[0]) \(parts[1])" : "?"
                let seq = parts.count == 3 ? Int(parts[2]) ?? -1 : -1
                let descriptors = message.attachments.compactMap { attachment -> Int32? in
                    if case let .fileDescriptor(descriptor) = attachment { return descriptor.take() }
                    return nil
                }
                descriptors.forEach { close($0) }
                next.withLock { next in
                    let due = next[sender, default: 0]
                    if seq != due { problems.withLock { $0.append("\(sender): \(seq) came when \(due) was due") } }
                    if descriptors.count != (seq % 3 == 0 ? 1 : 0) {
                        problems.withLock { $0.append("\(sender): message \(seq) carried \(descriptors.count) fds") }
                    }
                    next[sender] = seq + 1
                }
                received.withLock { $0 += 1 }
                return nil
            }
            let thread = try RunLoopThread(name: "ipc-polling")
            defer { thread.stop() }
            thread.loop.spinBeforeSleeping = .milliseconds(1)
            try thread.loop.add(source, mode: .default)
            let clients = try (0..<2).map { _ in
                try Peer(["client", space.path, "polled", "3", "2000", "--fds", "--stay"],
                         environment: ["PORTLOOP_SHARED_RINGS": "always"])
            }
            defer { clients.forEach { $0.kill() } }
            #expect(eventually(within: 60) { received.current == 12_000 }, "\(received.current) of 12000 arrived")
            #expect(problems.current.isEmpty, "\(problems.current.prefix(5))")
            #expect(next.current.count == 6 && next.current.values.allSatisfy { $0 == 2000 })
            for client in clients {
                #expect(client.line(startingWith: "rings") == "rings 1")
                client.tell("exit")
                #expect(client.finish() == 0)
            }
        }
    }
}
