import CPortLoop
import Glibc
import PortLoop
import Testing

/// Port sets: arrival ports, round-robin service, several sets, descriptor members, several receivers.
@Suite("Port sets")
struct PortSetTests {
    func message(_ event: PortSetEvent) throws -> ReceivedMessage {
        guard case let .message(message) = event else { throw PortError.invalidName }
        return message
    }

    @Test("a message names the port it arrived on")
    func arrivalPort() throws {
        let set = try PortSet()
        let a = try PortReceiveRight(), b = try PortReceiveRight()
        try set.insert(a); try set.insert(b)
        #expect(set.memberCount == 2)
        try b.makeSendRight().send(id: 2)
        #expect(try message(set.receive(timeout: .poll)).arrivalPort == b.name)
        try a.makeSendRight().send(id: 1)
        #expect(try message(set.receive(timeout: .poll)).arrivalPort == a.name)
    }

    @Test("a flooded port does not starve another port in the same set")
    func roundRobin() throws {
        let set = try PortSet()
        let busy = try PortReceiveRight(queueLimit: 1024), quiet = try PortReceiveRight()
        try set.insert(busy); try set.insert(quiet)
        let busyRight = busy.makeSendRight()
        for i in 0..<1000 { try busyRight.send(id: Int32(i)) }
        let quietRight = quiet.makeSendRight()
        for i in 0..<3 { try quietRight.send(id: Int32(10_000 + i)) }
        let firstSix = try (0..<6).map { _ in try message(set.receive(timeout: .poll)).arrivalPort }
        #expect(firstSix.filter { $0 == quiet.name }.count == 3, "\(firstSix)")
        #expect(zip(firstSix, firstSix.dropFirst()).allSatisfy { $0 != $1 }, "ports alternate: \(firstSix)")
        var ids: [Int32] = []
        while let event = try? set.receive(timeout: .poll) { ids.append(try message(event).id) }
        #expect(ids.count == 997)
        #expect(ids == ids.sorted(), "the busy port's own order is kept")
    }

    @Test("a port in two sets is received once, from either")
    func portInTwoSets() throws {
        let s1 = try PortSet(), s2 = try PortSet()
        let port = try PortReceiveRight()
        try s1.insert(port); try s2.insert(port)
        #expect(s1.contains(port) && s2.contains(port))
        try port.makeSendRight().send(id: 5)
        #expect(try message(s2.receive(timeout: .poll)).id == 5)
        #expect(throws: PortError.timedOut) { try s1.receive(timeout: .poll) }
        try port.makeSendRight().send(id: 6)
        #expect(try message(s1.receive(timeout: .after(.seconds(1)))).id == 6)
        try s1.remove(port)
        #expect(!s1.contains(port) && s2.contains(port))
    }

    @Test("inserting a port twice is an error; removing a non-member too")
    func doubleInsert() throws {
        let set = try PortSet()
        let port = try PortReceiveRight()
        try set.insert(port)
        #expect(throws: PortError.alreadyInSet) { try set.insert(port) }
        #expect(set.memberCount == 1)
        try set.remove(port)
        #expect(throws: PortError.notInSet) { try set.remove(port) }
    }

    @Test("a descriptor member is reported when readable")
    func descriptorMember() throws {
        let set = try PortSet()
        let (fd, writeEnd) = try makePipe()
        defer { close(fd); close(writeEnd) }
        try set.insert(fileDescriptor: fd)
        #expect(throws: PortError.alreadyInSet) { try set.insert(fileDescriptor: fd) }
        #expect(throws: PortError.timedOut) { try set.receive(timeout: .poll) }
        var one: UInt64 = 1
        write(writeEnd, &one, 8)
        guard case let .readable(reported) = try set.receive(timeout: .poll) else {
            Issue.record("expected the descriptor"); return
        }
        #expect(reported == fd)
        var value: UInt64 = 0
        read(fd, &value, 8)
        #expect(throws: PortError.timedOut) { try set.receive(timeout: .after(.milliseconds(5))) }

        // A receiver asleep forever is woken by the descriptor too.
        let writer = TestThread { sleepMilliseconds(30); var one: UInt64 = 1; write(writeEnd, &one, 8) }
        guard case .readable(fd) = try set.receive(timeout: .forever) else {
            Issue.record("expected the descriptor"); return
        }
        writer.join()
        read(fd, &value, 8)
        try set.remove(fileDescriptor: fd)
        #expect(throws: PortError.notInSet) { try set.remove(fileDescriptor: fd) }
        #expect(set.memberCount == 0)
    }

    @Test("a receiver asleep with no descriptor to watch starts watching one inserted meanwhile")
    func descriptorInsertedWhileWaiting() throws {
        let set = try PortSet()
        let port = try PortReceiveRight()
        try set.insert(port)
        let right = port.makeSendRight()
        // Asleep forever on a set of ports only (it waits on its condition variable, not in its base) when the
        // descriptor comes.
        let (fd, writeEnd) = try makePipe()
        defer { close(fd); close(writeEnd) }
        let reported = Locked<Int32?>(nil)
        let receiver = TestThread {
            if case let .readable(descriptor) = try? set.receive(timeout: .forever) { reported.withLock { $0 = descriptor } }
            else { reported.withLock { $0 = -1 } }
        }
        sleepMilliseconds(30)
        try set.insert(fileDescriptor: fd)
        var one: UInt64 = 1
        write(writeEnd, &one, 8)
        let deadline = ContinuousClock.now + .seconds(5)
        while reported.current == nil && ContinuousClock.now < deadline { sleepMilliseconds(2) }
        if reported.current == nil {
            Issue.record("the sleeping receiver never looked at the inserted descriptor")
            try right.send(id: 8) // let it go
        }
        receiver.join()
        #expect(reported.current == fd)
    }

    @Test("a flooded port does not starve a descriptor member")
    func descriptorNotStarved() throws {
        let set = try PortSet()
        let busy = try PortReceiveRight(queueLimit: 1024)
        try set.insert(busy)
        let (fd, writeEnd) = try makePipe()
        defer { close(fd); close(writeEnd) }
        var one: UInt8 = 1
        write(writeEnd, &one, 1)
        try set.insert(fileDescriptor: fd)
        let right = busy.makeSendRight()
        for _ in 0..<1000 { try right.send() }
        var sawDescriptor = false
        for _ in 0..<200 {
            if case .readable = try set.receive(timeout: .poll) { sawDescriptor = true; break }
        }
        #expect(sawDescriptor)
    }

    @Test("a receiver asleep on a set wakes for a send from another thread")
    func setForeverWokenBySend() throws {
        let set = try PortSet()
        let port = try PortReceiveRight()
        try set.insert(port)
        let right = port.makeSendRight()
        // With no descriptor and no deadline, the receiver waits on the set's condition variable, not in its base.
        let sender = TestThread { sleepMilliseconds(30); try! right.send(id: 3) }
        #expect(try message(set.receive(timeout: .forever)).id == 3)
        sender.join()
        #expect(set.wakeStatistics.sleeps >= 1 && set.wakeStatistics.wakeUps >= 1)
        let ms = elapsedMilliseconds { #expect(throws: PortError.timedOut) { try set.receive(timeout: .after(.milliseconds(20))) } }
        #expect(ms >= 20)
    }

    @Test("sends to a receiver that is awake cost no wake-up")
    func wakeUpsAreCoalesced() throws {
        let set = try PortSet()
        let port = try PortReceiveRight(queueLimit: 1024)
        try set.insert(port)
        let right = port.makeSendRight()
        for _ in 0..<500 { try right.send() }
        for _ in 0..<500 { _ = try set.receive(timeout: .poll) }
        #expect(set.wakeStatistics.wakeUps == 0)

        let sender = TestThread { sleepMilliseconds(30); for _ in 0..<100 { try! right.send() } }
        _ = try set.receive(timeout: .forever)
        sender.join()
        for _ in 0..<99 { _ = try set.receive(timeout: .poll) }
        let stats = set.wakeStatistics
        #expect(stats.sleeps >= 1)
        #expect(stats.wakeUps <= stats.sleeps, "at most one wake-up per sleep: \(stats)")
    }

    @Test("three receiver threads on one set: every message delivered exactly once")
    func threeReceivers() throws {
        let set = try PortSet()
        let p0 = try PortReceiveRight(queueLimit: 64), p1 = try PortReceiveRight(queueLimit: 64),
            p2 = try PortReceiveRight(queueLimit: 64)
        try set.insert(p0); try set.insert(p1); try set.insert(p2)
        let rights = [p0.makeSendRight(), p1.makeSendRight(), p2.makeSendRight()]
        let received = Locked([Int32]())
        let receivers = (0..<3).map { _ in
            TestThread {
                var mine: [Int32] = []
                while case let .message(message) = try! set.receive(timeout: .after(.seconds(30))), message.id >= 0 {
                    mine.append(message.id)
                }
                received.withLock { $0.append(contentsOf: mine) }
            }
        }
        let total = 30_000
        let senders = (0..<3).map { s in
            TestThread { for i in stride(from: s, to: total, by: 3) { try! rights[i % 3].send(id: Int32(i)) } }
        }
        senders.forEach { $0.join() }
        for right in rights { try right.send(id: -1) }
        receivers.forEach { $0.join() }
        let ids = received.current.sorted()
        #expect(ids.count == total)
        #expect(ids == (0..<Int32(total)).map { $0 })
    }
}

@Suite("Port sets, receiving into a buffer")
struct PortSetBufferTests {
    @Test("C layer: pl_port_set_receive_payload hands a payload's memory over, copies an inline one, and reports a descriptor with none")
    func receivePayloadFromSet() throws {
        var rawPort: OpaquePointer?
        #expect(pl_port_create(8, 1 << 20, &rawPort) == PL_OK)
        let port = try #require(rawPort)
        var rawSet: OpaquePointer?
        #expect(pl_port_set_create(&rawSet) == PL_OK)
        let set = try #require(rawSet)
        #expect(pl_port_set_insert(set, port) == PL_OK)

        // A payload handed over at the send comes back as the same memory.
        var sent = pl_payload_t()
        #expect(pl_payload_allocate(300_000, &sent) == PL_OK)
        let sentBase = sent.base
        memset(sent.base, 0x5a, 300_000)
        #expect(pl_port_send_payload(port, 1, &sent, nil, 0) == PL_OK)
        #expect(pl_port_send(port, 2, [UInt8](repeating: 7, count: 10), 10, nil, 0) == PL_OK)
        var header = pl_received_t()
        var payload = pl_payload_t()
        #expect(pl_port_set_receive_payload(set, &header, &payload, 0) == PL_OK)
        #expect(header.id == 1 && header.size == 300_000 && payload.size == 300_000)
        #expect(payload.base == sentBase, "no copy")
        #expect(Array(UnsafeRawBufferPointer(start: payload.base, count: payload.size)) == [UInt8](repeating: 0x5a, count: 300_000))
        pl_payload_free(&payload)
        #expect(payload.base == nil)

        // An inline payload is copied into memory of its own, which the caller frees the same way.
        #expect(pl_port_set_receive_queued_payload(set, &header, &payload) == PL_OK)
        #expect(header.id == 2 && payload.size == 10 && payload.base != nil)
        #expect(Array(UnsafeRawBufferPointer(start: payload.base, count: payload.size)) == [UInt8](repeating: 7, count: 10))
        pl_payload_free(&payload)

        // Nothing queued: a poll times out; a readable descriptor member comes with an empty payload.
        #expect(pl_port_set_receive_queued_payload(set, &header, &payload) == PL_ERR_TIMED_OUT)
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        #expect(pl_port_set_insert_fd(set, fds[0]) == PL_OK)
        #expect(write(fds[1], "x", 1) == 1)
        #expect(pl_port_set_receive_payload(set, &header, &payload, 5_000_000_000) == PL_OK)
        #expect(header.kind == PL_RECEIVED_FD && header.fd == fds[0] && payload.base == nil && payload.size == 0)
        #expect(pl_port_set_receive_payload(set, &header, nil, 0) == PL_ERR_INVALID_ARG)
        #expect(pl_port_set_extract_fd(set, fds[0]) == PL_OK)

        #expect(pl_port_set_destroy(set) == PL_OK)
        pl_port_set_release(set)
        #expect(pl_port_destroy(port) == PL_OK)
    }

    @Test("receive(into:) copies the payload, names the port, and keeps a too-large message queued")
    func receiveIntoBuffer() throws {
        let set = try PortSet()
        let port = try PortReceiveRight()
        try set.insert(port)
        let right = port.makeSendRight()
        try right.send(id: 1, bytes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        try right.send(id: 2, bytes: [7, 7])
        var small = [UInt8](repeating: 0, count: 4)
        #expect(throws: PortError.tooLarge(size: 10, limit: 4)) {
            try small.withUnsafeMutableBytes { try set.receive(into: $0, timeout: .poll) }
        }
        var buffer = [UInt8](repeating: 0, count: 16)
        for (id, bytes) in [(Int32(1), [UInt8]([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])), (2, [7, 7])] {
            let event = try buffer.withUnsafeMutableBytes { try set.receive(into: $0, timeout: .poll) }
            guard case let .message(header) = event else { Issue.record("expected a message"); return }
            #expect(header.id == id && header.arrivalPort == port.name)
            #expect(Array(buffer[0..<header.size]) == bytes)
        }
    }
}
