import CPortLoop
import PortLoop
import Testing

/// Destroying receive rights and sets, as Mach does.
@Suite("Port destruction")
struct PortDestroyTests {
    @Test("queued messages are destroyed and their reply rights released")
    func queuedMessagesReleaseReplyRights() throws {
        let replyPort = try PortReceiveRight()
        let reply = replyPort.makeSendRight()
        #expect(replyPort.sendRightCount == 1)
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        for i in 0..<3 { try right.send(id: Int32(i), bytes: [UInt8](repeating: 1, count: 100), replyPort: reply) }
        #expect(replyPort.sendRightCount == 4)
        port.destroy()
        #expect(replyPort.sendRightCount == 1)
        #expect(right.isDeadName)
    }

    @Test("a port dropped without destroy() is destroyed too")
    func dropDestroys() throws {
        var right: PortSendRight?
        do {
            let port = try PortReceiveRight()
            right = port.makeSendRight()
            #expect(right?.isDeadName == false)
        }
        #expect(right?.isDeadName == true)
        #expect(throws: PortError.invalidDestination) { try right?.send() }
    }

    @Test("blocked and later senders get invalid-destination")
    func sendersGetInvalidDestination() throws {
        let port = try PortReceiveRight(queueLimit: 1)
        let right = port.makeSendRight()
        try right.send()
        let result = Locked<PortError?>(nil)
        let blocked = TestThread {
            do throws(PortError) { try right.send(id: 2) } catch { result.withLock { $0 = error } }
        }
        sleepMilliseconds(50)
        port.destroy()
        blocked.join()
        #expect(result.current == .invalidDestination)
        #expect(throws: PortError.invalidDestination) { try right.send(id: 3, timeout: .poll) }
    }

    @Test("a destroyed port leaves its sets")
    func leavesSets() throws {
        let s1 = try PortSet(), s2 = try PortSet()
        let port = try PortReceiveRight()
        let other = try PortReceiveRight()
        try s1.insert(port); try s2.insert(port); try s1.insert(other)
        try port.makeSendRight().send()
        port.destroy()
        #expect(s1.memberCount == 1)
        #expect(s2.memberCount == 0)
        #expect(throws: PortError.timedOut) { try s1.receive(timeout: .poll) }
        #expect(throws: PortError.timedOut) { try s2.receive(timeout: .poll) }
    }

    @Test("a receiver blocked on a set wakes with port-died when the set is destroyed")
    func setReceiverGetsPortDied() throws {
        let set = try PortSet()
        let port = try PortReceiveRight()
        try set.insert(port)
        let results = Locked([PortError]())
        let receivers = (0..<2).map { _ in
            TestThread {
                do throws(PortError) { _ = try set.receive(timeout: .forever) } catch { results.withLock { $0.append(error) } }
            }
        }
        sleepMilliseconds(50)
        try set.destroy()
        receivers.forEach { $0.join() }
        #expect(results.current == [.portDied, .portDied])
        #expect(throws: PortError.invalidName) { try set.receive(timeout: .poll) }
        #expect(throws: PortError.invalidName) { try set.destroy() }
        #expect(throws: PortError.invalidName) { try set.insert(port) }
        #expect(set.memberCount == 0)
        try port.makeSendRight().send() // the port itself lives on
        #expect(port.messageCount == 1)
    }

    // A receiver blocked directly on a port cannot be written in Swift: the receive right is ~Copyable, so
    // no other thread can destroy it while it is borrowed. The C layer still guarantees the behaviour.
    @Test("C layer: a receiver blocked on a port wakes with port-died")
    func cReceiverGetsPortDied() throws {
        var raw: OpaquePointer?
        #expect(pl_port_create(5, 1024, &raw) == PL_OK)
        let port = try #require(raw)
        let box = UncheckedPort(port)
        let status = Locked(PL_OK)
        let receiver = TestThread {
            var header = pl_received_t()
            let s = pl_port_receive(box.port, &header, nil, 0, PL_TIMEOUT_FOREVER)
            status.withLock { $0 = s }
        }
        sleepMilliseconds(50)
        pl_port_make_send(port) // keep the memory for the receiver's return
        #expect(pl_port_destroy(port) == PL_OK)
        receiver.join()
        #expect(status.current == PL_ERR_PORT_DIED)
        var header = pl_received_t()
        #expect(pl_port_receive(port, &header, nil, 0, 0) == PL_ERR_INVALID_NAME)
        #expect(pl_port_destroy(port) == PL_ERR_INVALID_NAME)
        var set: OpaquePointer?
        #expect(pl_port_set_create(&set) == PL_OK)
        #expect(pl_port_set_insert(set, port) == PL_ERR_INVALID_NAME)
        pl_port_set_release(set)
        pl_port_release_send(port)
    }

    @Test("C layer: a receiver whose buffer is too small passes the message on to another waiting receiver")
    func cTooLargePassesTheBaton() throws {
        var raw: OpaquePointer?
        #expect(pl_port_create(5, 1024, &raw) == PL_OK)
        let box = UncheckedPort(try #require(raw))
        pl_port_make_send(box.port) // the receivers' reference outlives the destroy below
        let small = Locked(PL_OK), large = Locked(PL_OK)
        let smallReceiver = TestThread {
            var header = pl_received_t()
            var buffer = [UInt8](repeating: 0, count: 10)
            let status = pl_port_receive(box.port, &header, &buffer, buffer.count, PL_TIMEOUT_FOREVER)
            small.withLock { $0 = status }
        }
        let largeReceiver = TestThread {
            var header = pl_received_t()
            var buffer = [UInt8](repeating: 0, count: 200)
            let status = pl_port_receive(box.port, &header, &buffer, buffer.count, 5_000_000_000)
            large.withLock { $0 = status }
        }
        sleepMilliseconds(50)
        let payload = [UInt8](repeating: 7, count: 100)
        #expect(pl_port_send(box.port, 1, payload, payload.count, nil, 0) == PL_OK)
        largeReceiver.join()
        #expect(large.current == PL_OK, "the large receiver got the message")
        pl_port_destroy(box.port)
        smallReceiver.join()
        #expect([PL_ERR_TOO_LARGE, PL_ERR_PORT_DIED].contains(small.current))
        pl_port_release_send(box.port)
    }

    @Test("C layer: three receivers on one port get every message exactly once")
    func cThreeReceiversOnAPort() throws {
        var raw: OpaquePointer?
        #expect(pl_port_create(64, 64, &raw) == PL_OK)
        let box = UncheckedPort(try #require(raw))
        let received = Locked([Int32]())
        let receivers = (0..<3).map { _ in
            TestThread {
                var mine: [Int32] = []
                var header = pl_received_t()
                while pl_port_receive(box.port, &header, nil, 0, 30_000_000_000) == PL_OK, header.id >= 0 {
                    mine.append(header.id)
                }
                received.withLock { $0.append(contentsOf: mine) }
            }
        }
        for i in 0..<20_000 { #expect(pl_port_send(box.port, Int32(i), nil, 0, nil, PL_TIMEOUT_FOREVER) == PL_OK) }
        for _ in 0..<3 { pl_port_send(box.port, -1, nil, 0, nil, PL_TIMEOUT_FOREVER) }
        receivers.forEach { $0.join() }
        #expect(received.current.sorted() == (0..<20_000).map { Int32($0) })
        pl_port_destroy(box.port)
    }
}

/// A C port pointer handed to another thread in a test.
struct UncheckedPort: @unchecked Sendable {
    let port: OpaquePointer
    init(_ port: OpaquePointer) { self.port = port }
}
