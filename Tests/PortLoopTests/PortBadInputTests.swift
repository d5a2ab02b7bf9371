import Glibc
import PortLoop
import Testing

/// Bad input: a typed error, no crash, nothing queued lost.
@Suite("Port bad input")
struct PortBadInputTests {
    /// A port holding two messages, to show that nothing is lost after each bad call.
    func portWithTwoMessages() throws -> PortReceiveRight {
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        try right.send(id: 1, bytes: [1]); try right.send(id: 2, bytes: [2])
        return port
    }

    func expectIntact(_ port: borrowing PortReceiveRight) throws {
        #expect(port.messageCount == 2)
        #expect(try port.receive(timeout: .poll).id == 1)
        #expect(try port.receive(timeout: .poll).id == 2)
    }

    @Test("negative and NaN timeouts are rejected on send and receive")
    func invalidTimeouts() throws {
        let port = try portWithTwoMessages()
        let right = port.makeSendRight()
        let bad: [PortTimeout] = [.after(.milliseconds(-1)), .seconds(-0.5), .seconds(.nan)]
        for timeout in bad {
            #expect(throws: PortError.self) { try port.receive(timeout: timeout) }
            #expect(throws: PortError.self) { try right.send(id: 3, timeout: timeout) }
            do { _ = try port.receive(timeout: timeout) } catch {
                guard case let .invalidArgument(argument, _) = error else { Issue.record("\(error)"); continue }
                #expect(argument == "timeout")
            }
        }
        try expectIntact(port)
        #expect(throws: PortError.invalidArgument(argument: "timeout", reason: "not a number")) {
            try PortSet().receive(timeout: .seconds(.nan))
        }
        #expect(throws: PortError.timedOut) { try port.receive(timeout: .seconds(0)) }
    }

    @Test("queue limits of 0 and over 1024 are rejected, at creation and later")
    func invalidQueueLimits() throws {
        for limit in [0, -1, 1025] {
            #expect(throws: PortError.invalidArgument(argument: "queueLimit", reason: "\(limit) is outside 1…1024")) {
                _ = try PortReceiveRight(queueLimit: limit)
            }
        }
        let port = try portWithTwoMessages()
        #expect(throws: PortError.self) { try port.setQueueLimit(0) }
        #expect(throws: PortError.self) { try port.setQueueLimit(1025) }
        #expect(port.queueLimit == 5)
        try port.setQueueLimit(1) // below the number queued: nothing is dropped
        try expectIntact(port)
        _ = try PortReceiveRight(queueLimit: 1024)
    }

    @Test("invalid maximum message sizes are rejected")
    func invalidMaxMessageSize() throws {
        #expect(throws: PortError.self) { _ = try PortReceiveRight(maxMessageSize: 0) }
        #expect(throws: PortError.self) { _ = try PortReceiveRight(maxMessageSize: PortReceiveRight.maxMessageSizeLimit + 1) }
    }

    @Test("a payload over the port's maximum is refused and nothing is queued")
    func oversizedPayload() throws {
        let port = try PortReceiveRight(maxMessageSize: 16)
        let right = port.makeSendRight()
        try right.send(id: 1, bytes: [UInt8](repeating: 0, count: 16))
        #expect(throws: PortError.tooLarge(size: 17, limit: 16)) { try right.send(id: 2, bytes: [UInt8](repeating: 0, count: 17)) }
        #expect(port.messageCount == 1)
        #expect(throws: PortError.self) { _ = try port.receive(timeout: .poll, maxSize: -1) }
        #expect(port.messageCount == 1)
    }

    @Test("sends to a destroyed port fail with invalid-destination")
    func sendToDestroyed() throws {
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        port.destroy()
        #expect(throws: PortError.invalidDestination) { try right.send() }
        #expect(throws: PortError.invalidDestination) { try right.send(timeout: .poll) }
    }

    @Test("descriptors that cannot be watched are rejected")
    func invalidDescriptors() throws {
        let set = try PortSet()
        #expect(throws: PortError.self) { try set.insert(fileDescriptor: -1) }
        let (fd, writeEnd) = try makePipe()
        close(fd); close(writeEnd)
        #expect(throws: PortError.self) { try set.insert(fileDescriptor: fd) }
        let file = open("/proc/self/status", O_RDONLY)
        defer { close(file) }
        #expect(throws: PortError.self) { try set.insert(fileDescriptor: file) }
        #expect(set.memberCount == 0)
        #expect(throws: PortError.notInSet) { try set.remove(fileDescriptor: 12345) }
    }

    @Test("a destroyed set refuses every operation with invalid-name and the ports keep their messages")
    func destroyedSet() throws {
        let set = try PortSet()
        let port = try portWithTwoMessages()
        try set.insert(port)
        try set.destroy()
        #expect(throws: PortError.invalidName) { try set.receive(timeout: .poll) }
        #expect(throws: PortError.invalidName) { try set.insert(port) }
        #expect(throws: PortError.invalidName) { try set.remove(port) }
        #expect(throws: PortError.invalidName) { try set.insert(fileDescriptor: 0) }
        try expectIntact(port)
    }
}
