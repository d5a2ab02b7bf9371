import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc

/// glibc's eventfd(2), which the Glibc module does not bring in.
@_silgen_name("eventfd") private func makeEventfd(_ count: UInt32, _ flags: Int32) -> Int32
#endif

/// Busy connections move their messages into shared-memory rings: what crosses, in what order, and what a peer
/// that breaks the ring gets.
@Suite("Across processes: shared-memory rings", .serialized)
struct CrossProcessRingTests {
    /// Receives `count` messages id 8 whose payload begins "pid thread seq" and checks that each sender's come once
    /// and in order; `descriptors(seq)` says whether a message must carry one descriptor (it is closed), and
    /// `check(sender, seq, payload, textEnd)` looks at the rest of a payload (its text ends at its first byte of
    /// 0x80 or more).
    static func receiveInOrder(_ port: borrowing PortReceiveRight, count: Int,
                               descriptors: (Int) -> Bool = { _ in false },
                               check: (String, Int, [UInt8], Int) -> Void = { _, _, _, _ in }) throws -> [String: Int] {
        var next: [String: Int] = [:]
        for received in 0..<count {
            let message: ReceivedMessage
            do {
                message = try port.receive(timeout: .seconds(30))
            } catch {
                // A stall: where each sender stood says which connection stopped.
                let stats = CrossProcessStatistics.current
                Issue.record("\(error) after \(received) of \(count) messages; next due per sender: \(next); \(stats)")
                throw error
            }
            let payload = message.payload
            let textEnd = payload.firstIndex { $0 & 0x80 != 0 } ?? payload.endIndex
            let parts = String(decoding: payload[..<textEnd], as: UTF8.self).split(separator: " ")
            try #require(message.id == 8 && parts.count == 3)
            let sender = "\(parts[0]) \(parts[1])", seq = Int(parts[2]) ?? -1
            #expect(seq == next[sender, default: 0], "\(sender): \(seq) came when \(next[sender, default: 0]) was due")
            next[sender] = seq + 1
            check(sender, seq, payload, textEnd)
            let carried = message.attachments.compactMap { attachment -> Int32? in
                if case let .fileDescriptor(descriptor) = attachment { return descriptor.take() }
                return nil
            }
            #expect(carried.count == (descriptors(seq) ? 1 : 0), "message \(seq) carried \(carried.count) descriptors")
            carried.forEach { close($0) }
        }
        return next
    }

    /// Waits until this process has `count` connections reading by ring, or 10 s.
    static func waitForRings(_ count: Int) -> Int {
        var now = CrossProcessStatistics.current.sharedRingConnections
        for _ in 0..<2000 where now != count {
            usleep(5000)
            now = CrossProcessStatistics.current.sharedRingConnections
        }
        return now
    }

    @Test("a busy connection moves to a ring on the way: every message arrives once, in each sender's order")
    func switchOnTheWay() throws {
        try withSharedRings(.whenBusy) { // this process takes the offer
            let space = TemporaryNamespace()
            let port = try space.namespace.checkIn("busy", queueLimit: 64)
            let before = Self.waitForRings(0) // an earlier test's connections may still be ending
            let client = try Peer(["client", space.path, "busy", "3", "3000", "--stay"],
                                  environment: ["PORTLOOP_SHARED_RINGS": "busy"])
            defer { client.kill() }
            let next = try Self.receiveInOrder(port, count: 9000)
            #expect(next.count == 3 && next.values.allSatisfy { $0 == 3000 })
            // Both sides read by ring now: the client its replies' direction, this process the messages'.
            #expect(client.line(startingWith: "rings") == "rings 1")
            #expect(CrossProcessStatistics.current.sharedRingConnections == before + 1)
            client.tell("exit")
            #expect(client.finish() == 0)
            #expect(Self.waitForRings(before) == before)
        }
    }

    @Test("large messages, whose fragments give the writer the whole ring, keep their order across the switch")
    func largePacketsAcrossTheSwitch() throws {
        try withSharedRings(.whenBusy) {
            let space = TemporaryNamespace()
            let port = try space.namespace.checkIn("large", queueLimit: 256)
            // Three messages of four are 20,000 bytes: before the switch they go on the socket, several to a reader's
            // batch, some of them behind the switch frame; after it, the first of them lets the writer use the whole
            // ring instead of its near part, while the small ones go on in the same ring. Four connections switch at
            // once, which makes a batch across the switch likely.
            let clients = try (0..<4).map { _ in
                try Peer(["client", space.path, "large", "2", "1000", "--large", "--stay"],
                         environment: ["PORTLOOP_SHARED_RINGS": "busy"])
            }
            defer { clients.forEach { $0.kill() } }
            let next = try Self.receiveInOrder(port, count: 8000)
            #expect(next.count == 8 && next.values.allSatisfy { $0 == 1000 })
            for client in clients { #expect(client.line(startingWith: "rings") == "rings 1") }
            for client in clients {
                client.tell("exit")
                #expect(client.finish() == 0)
            }
        }
    }

    @Test("a message's bytes, copied from the ring straight to where it is put together, arrive intact")
    func bytesCopiedOnceFromTheRing() throws {
        try withSharedRings(.always) {
            let space = TemporaryNamespace()
            let port = try space.namespace.checkIn("patterned", queueLimit: 64, maxMessageSize: 300_000)
            // Messages of one, two and five fragments, all through the ring, every byte checked: the reader decodes a
            // copy of each frame's head, and copies the bytes from the ring straight to the message's memory (that
            // their room stays the reader's meanwhile, the stress scenario `ring_shared_take` checks).
            let client = try Peer(["client", space.path, "patterned", "2", "60", "--patterned", "--stay"],
                                  environment: ["PORTLOOP_SHARED_RINGS": "always"])
            defer { client.kill() }
            let next = try Self.receiveInOrder(port, count: 120, check: { sender, seq, payload, textEnd in
                #expect(payload.count == [4_000, 70_000, 300_000][seq % 3])
                let wrong = payload.indices[textEnd...].first {
                    payload[$0] != UInt8(truncatingIfNeeded: $0 &* 7 &+ seq) | 0x80
                }
                #expect(wrong == nil, "\(sender) message \(seq): byte \(wrong ?? 0) of \(payload.count) differs")
            })
            #expect(next.count == 2 && next.values.allSatisfy { $0 == 60 })
            #expect(client.line(startingWith: "rings") == "rings 1")
            client.tell("exit")
            #expect(client.finish() == 0)
        }
    }

    @Test("a backlog that found the ring full crosses it packed: every message once, in each sender's order")
    func backlogPackedIntoTheRing() throws {
        try withSharedRings(.always) {
            let packedBefore = CrossProcessStatistics.current.packedFramesReceived
            // 4,000-byte messages from three threads into a service that does not read for a while: the client sends
            // its window of queue room (half the limit) at once, the ring (its near 256 KiB: these messages are small)
            // fills, and the rest waits in the client's outgoing queue, to leave it packed up to 64 KiB a record.
            // Whether the client outruns this process's transport, which empties the ring meanwhile, is a race: a round
            // in which it did not is run again.
            for round in 1...5 {
                let space = TemporaryNamespace()
                let port = try space.namespace.checkIn("backlog", queueLimit: 1024)
                let client = try Peer(["client", space.path, "backlog", "3", "2000", "--medium", "--stay"],
                                      environment: ["PORTLOOP_SHARED_RINGS": "always"])
                defer { client.kill() }
                usleep(300_000)
                let next = try Self.receiveInOrder(port, count: 6000)
                #expect(next.count == 3 && next.values.allSatisfy { $0 == 2000 })
                #expect(client.line(startingWith: "rings") == "rings 1")
                client.tell("exit")
                #expect(client.finish() == 0)
                if CrossProcessStatistics.current.packedFramesReceived > packedBefore { break }
                #expect(round < 5, "in five rounds, no backlog came packed")
            }
        }
    }

    /// The resident bytes of each ring memfd this process maps (`/proc/self/smaps`): the pages it has read or
    /// written, of its own ring and the peer's.
    static func ringResidentBytes() throws -> [Int] {
        // Read to the end: a /proc file says it is empty, which some readers take at its word.
        let handle = try #require(FileHandle(forReadingAtPath: "/proc/self/smaps"))
        defer { try? handle.close() }
        let smaps = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
        var sizes: [Int] = []
        var inRing = false
        for line in smaps.split(separator: "\n") {
            if line.first?.isHexDigit == true && line.contains("-") && !line.hasPrefix("Rss") {
                inRing = line.contains("memfd:portloop-ring")
            } else if inRing && line.hasPrefix("Rss:") {
                let kilobytes = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
                sizes.append(kilobytes * 1024)
            }
        }
        return sizes
    }

    @Test("a connection of small messages touches a quarter of each ring; large ones get the whole ring")
    func ringMemory() throws {
        try withSharedRings(.whenBusy) {
            let nearQuarters = 4096 + 2 * 262_144 // the header page and each direction's first 256 KiB
            #expect(Self.waitForRings(0) == 0) // an earlier test's connections, and their mappings, are gone
            let space = TemporaryNamespace()
            let port = try space.namespace.checkIn("memory", queueLimit: 256)
            var clients: [Peer] = []
            defer { clients.forEach { $0.kill() } }
            /// A client of two threads sending 3,000 messages each (`size`: its client flag), all received, on a ring.
            func stream(_ size: String) throws {
                clients.append(try Peer(["client", space.path, "memory", "2", "3000", size, "--stay"],
                                        environment: ["PORTLOOP_SHARED_RINGS": "busy"]))
                _ = try Self.receiveInOrder(port, count: 6000)
                #expect(clients.last?.line(startingWith: "rings") == "rings 1")
            }
            // 4,000-byte messages, about 24 MB through the client's ring: many laps of its first 256 KiB.
            try stream("--medium")
            let afterSmall = try Self.ringResidentBytes()
            #expect(afterSmall.count == 1 && afterSmall.allSatisfy { $0 > 0 && $0 <= nearQuarters }, "\(afterSmall)")
            // Three of four 20,000 bytes: the client's writer takes the whole ring, and this side reads all of it.
            try stream("--large")
            let afterLarge = try Self.ringResidentBytes()
            #expect(afterLarge.count == 2 && afterLarge.contains { $0 > 1_048_576 }, "\(afterLarge)")
            #expect(afterLarge.filter { $0 <= nearQuarters }.count == 1, "the small client's ring grew: \(afterLarge)")
            for client in clients {
                client.tell("exit")
                #expect(client.finish() == 0)
            }
            #expect(Self.waitForRings(0) == 0)
        }
    }

    @Test("descriptors cross in order with the messages around them, through the socket beside the ring")
    func descriptorsInOrder() throws {
        try withSharedRings(.whenBusy) {
            let space = TemporaryNamespace()
            let port = try space.namespace.checkIn("marks", queueLimit: 64)
            let client = try Peer(["client", space.path, "marks", "2", "900", "--fds", "--stay"],
                                  environment: ["PORTLOOP_SHARED_RINGS": "always"])
            defer { client.kill() }
            let next = try Self.receiveInOrder(port, count: 1800, descriptors: { $0 % 3 == 0 })
            #expect(next.values.allSatisfy { $0 == 900 })
            #expect(client.line(startingWith: "rings") == "rings 1")
            client.tell("exit")
            #expect(client.finish() == 0)
        }
    }

    @Test("a process that says never keeps to the socket, as a client and as a service",
          arguments: ["client says never", "service says never"])
    func never(_ who: String) throws {
        let space = TemporaryNamespace()
        let clientSaysNever = who == "client says never"
        try withSharedRings(clientSaysNever ? .whenBusy : .never) {
            let port = try space.namespace.checkIn("plain", queueLimit: 64)
            let before = Self.waitForRings(0) // an earlier test's connections may still be ending
            let client = try Peer(["client", space.path, "plain", "2", "500", "--stay"],
                                  environment: ["PORTLOOP_SHARED_RINGS": clientSaysNever ? "never" : "always"])
            defer { client.kill() }
            let next = try Self.receiveInOrder(port, count: 1000)
            #expect(next.values.allSatisfy { $0 == 500 })
            #expect(client.line(startingWith: "rings") == "rings 0")
            #expect(CrossProcessStatistics.current.sharedRingConnections == before)
            client.tell("exit")
            #expect(client.finish() == 0)
        }
    }

    @Test("the policy reads back as set", arguments: [SharedRingPolicy.never, .whenBusy, .always])
    func policy(_ policy: SharedRingPolicy) {
        withSharedRings(policy) {
            #expect(PortNamespace.sharedRings == policy)
        }
    }

    /// The layout of a ring's memfd, as the library makes it (see pl_ring.c): a header page (magic, layout, ring
    /// size; then each direction's write index, read index and flags on cache lines of their own), then the
    /// client-to-service ring, then the other.
    enum Layout {
        static let ringBytes = 1_048_576
        static let mapBytes = 4096 + 2 * ringBytes
        static let clientTail = 64       // the client-to-service direction's write index
        static let clientRecords = 4096  // where its records start
    }

    /// RING_OFFER of a ring of the library's size, as a client sends it (the memfd and its bell go beside it).
    static let ringOffer = CrossProcessMisbehaviourTests.RawPeer.frame(
        12, CrossProcessMisbehaviourTests.RawPeer.le32(UInt32(Layout.ringBytes)) + [0, 0, 0, 0])

    /// memfd_create, which the Glibc module does not declare.
    static func makeMemfd(bytes: Int, seals: Int32) -> Int32 {
        typealias MemfdCreate = @convention(c) (UnsafePointer<CChar>, UInt32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "memfd_create") else { return -1 }
        let fd = unsafeBitCast(symbol, to: MemfdCreate.self)("raw-ring", 0x0001 | 0x0002) // CLOEXEC, ALLOW_SEALING
        guard fd >= 0, ftruncate(fd, off_t(bytes)) == 0, seals == 0 || fcntl(fd, 1033, seals) == 0 else { return -1 }
        return fd // F_ADD_SEALS is 1033
    }

    /// A message header over one payload buffer and a control buffer, for sendmsg and recvmsg.
    static func withMessage(_ payload: UnsafeMutableRawBufferPointer, _ control: UnsafeMutableRawBufferPointer,
                            _ body: (UnsafeMutablePointer<msghdr>) -> Int) -> Int {
        var vector = iovec(iov_base: payload.baseAddress, iov_len: payload.count)
        return withUnsafeMutablePointer(to: &vector) { vectorPointer in
            var message = msghdr()
            message.msg_iov = vectorPointer
            message.msg_iovlen = 1
            message.msg_control = control.baseAddress
            message.msg_controllen = control.count
            return body(&message)
        }
    }

    /// Sends a packet with descriptors beside it (SCM_RIGHTS).
    static func send(_ fd: Int32, _ bytes: [UInt8], descriptors: [Int32]) -> Bool {
        let header = MemoryLayout<cmsghdr>.size
        var control = [UInt8](repeating: 0, count: header + ((descriptors.count * 4 + 7) & ~7))
        var bytes = bytes
        let sent = control.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: header + descriptors.count * 4, toByteOffset: 0, as: Int.self) // cmsg_len
            raw.storeBytes(of: SOL_SOCKET, toByteOffset: 8, as: Int32.self)
            raw.storeBytes(of: Int32(SCM_RIGHTS), toByteOffset: 12, as: Int32.self)
            for (i, descriptor) in descriptors.enumerated() {
                raw.storeBytes(of: descriptor, toByteOffset: header + 4 * i, as: Int32.self)
            }
            return bytes.withUnsafeMutableBytes { payload in withMessage(payload, raw) { sendmsg(fd, $0, 0) } }
        }
        return sent == bytes.count
    }

    /// Receives a packet and the first descriptor beside it (-1 if none).
    static func receive(_ fd: Int32) -> (bytes: [UInt8], descriptor: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var control = [UInt8](repeating: 0, count: 256)
        let n = buffer.withUnsafeMutableBytes { payload in
            control.withUnsafeMutableBytes { raw in withMessage(payload, raw) { recvmsg(fd, $0, 0) } }
        }
        let level = control.withUnsafeBytes { $0.load(fromByteOffset: 8, as: Int32.self) }
        let type = control.withUnsafeBytes { $0.load(fromByteOffset: 12, as: Int32.self) }
        let descriptor = level == SOL_SOCKET && type == Int32(SCM_RIGHTS)
            ? control.withUnsafeBytes { $0.load(fromByteOffset: MemoryLayout<cmsghdr>.size, as: Int32.self) } : -1
        return (n > 0 ? Array(buffer[0..<n]) : [], descriptor)
    }

    @Test("a version 4 client's offer, whose bell is a pipe, is refused, and the connection goes on by socket")
    func versionFourOfferRefused() throws {
        typealias Raw = CrossProcessMisbehaviourTests.RawPeer
        try withSharedRings(.whenBusy) {
            let space = TemporaryNamespace()
            let port = try space.namespace.checkIn("old", queueLimit: 64)
            let raw = try Raw(path: space.path + "/old")
            #expect(raw.send(Raw.hello(version: 4)))
            #expect(Self.receive(raw.fd).bytes.first == 1)
            let memfd = Self.makeMemfd(bytes: Layout.mapBytes, seals: 0x7)
            var pipeEnds: [Int32] = [-1, -1]
            try #require(memfd >= 0 && pipe(&pipeEnds) == 0)
            defer { close(memfd); close(pipeEnds[0]); close(pipeEnds[1]) }
            #expect(Self.send(raw.fd, Self.ringOffer, descriptors: [memfd, pipeEnds[0]]))
            let answer = Self.receive(raw.fd)
            #expect(answer.bytes.first == 14 && answer.descriptor == -1) // RING_REFUSE
            // The connection serves on: a message by socket arrives.
            #expect(raw.send(Raw.message(to: 1)))
            let delivered = try port.receive(timeout: .seconds(10))
            #expect(delivered.id == 7 && delivered.payload == [42])
        }
    }

    @Test("a peer that breaks the ring is cut off, and the service serves everyone else",
          arguments: ["a write index past the ring", "a record of no known kind", "an unsealed memfd"])
    func brokenRing(_ fault: String) throws {
        typealias Raw = CrossProcessMisbehaviourTests.RawPeer
        try withSharedRings(.whenBusy) { // this process takes the offer
            let space = TemporaryNamespace()
            let port = try space.namespace.checkIn("ringed", queueLimit: 64)
            let raw = try Raw(path: space.path + "/ringed")
            // Version 5's hello, then the service's.
            #expect(raw.send(Raw.hello(version: 5)))
            #expect(Self.receive(raw.fd).bytes.first == 1)

            let memfd = Self.makeMemfd(bytes: Layout.mapBytes, seals: fault == "an unsealed memfd" ? 0 : 0x7)
            // This side's bell, an eventfd the service is to ring; the service's comes back with its acceptance.
            let bell = makeEventfd(1, O_CLOEXEC) // EFD_CLOEXEC is O_CLOEXEC
            try #require(memfd >= 0 && bell >= 0)
            defer { close(memfd); close(bell) }
            let map = try #require(mmap(nil, Layout.mapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0))
            defer { munmap(map, Layout.mapBytes) }
            map.storeBytes(of: UInt32(0x474E_5252), toByteOffset: 0, as: UInt32.self) // "RRNG", layout 1, the ring size
            map.storeBytes(of: UInt32(1), toByteOffset: 4, as: UInt32.self)
            map.storeBytes(of: UInt32(Layout.ringBytes), toByteOffset: 8, as: UInt32.self)
            #expect(Self.send(raw.fd, Self.ringOffer, descriptors: [memfd, bell]))

            if fault != "an unsealed memfd" {
                let accepted = Self.receive(raw.fd)
                #expect(accepted.bytes.first == 13)
                try #require(accepted.descriptor >= 0)
                defer { close(accepted.descriptor) }
                #expect(raw.send(Raw.frame(15, [])))
                // A well-formed record first: a message to the service port, through the ring.
                let message = Raw.message(to: 1)
                map.storeBytes(of: UInt32(message.count), toByteOffset: Layout.clientRecords, as: UInt32.self)
                map.storeBytes(of: UInt32(1), toByteOffset: Layout.clientRecords + 4, as: UInt32.self) // kind: a packet
                message.withUnsafeBytes {
                    map.advanced(by: Layout.clientRecords + 8).copyMemory(from: $0.baseAddress!, byteCount: $0.count)
                }
                let first = 8 + (message.count + 7) & ~7
                map.storeBytes(of: UInt32(first), toByteOffset: Layout.clientTail, as: UInt32.self)
                var zero: UInt64 = 0 // a ring
                _ = write(accepted.descriptor, &zero, 8)
                let delivered = try port.receive(timeout: .seconds(10))
                #expect(delivered.id == 7 && delivered.payload == [42])
                // Then the fault.
                if fault == "a write index past the ring" {
                    let past = UInt32(first + Layout.ringBytes + 8)
                    map.storeBytes(of: past, toByteOffset: Layout.clientTail, as: UInt32.self)
                } else {
                    map.storeBytes(of: UInt32(8), toByteOffset: Layout.clientRecords + first, as: UInt32.self)
                    // kind 9
                    map.storeBytes(of: UInt32(9), toByteOffset: Layout.clientRecords + first + 4, as: UInt32.self)
                    map.storeBytes(of: UInt32(first + 16), toByteOffset: Layout.clientTail, as: UInt32.self)
                }
                _ = write(accepted.descriptor, &zero, 8)
            }
            // The service hung up: the socket ends (after nothing, or after what it still had to say).
            var last = Self.receive(raw.fd)
            while !last.bytes.isEmpty {
                if last.descriptor >= 0 { close(last.descriptor) }
                last = Self.receive(raw.fd)
            }
            #expect(port.messageCount == 0)
            // Everyone else is served as before.
            let honest = try Peer(["request", space.path, "ringed", "1", "hello"])
            defer { honest.kill() }
            let request = try port.receive(timeout: .seconds(10))
            try request.replyPort?.send(id: 101, bytes: request.payload)
            #expect(honest.line(startingWith: "reply") == "reply 101 hello")
        }
    }
}
