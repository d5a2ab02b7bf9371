import PortLoop
import Testing

/// Payload memory handed over whole in one process: the receiver gets the sender's memory, the copying receive
/// calls still work on such messages, and every failure frees or keeps the memory as documented.
@Suite("Message buffers in one process", .timeLimit(.minutes(1)))
struct MessageBufferTests {
    /// Bytes that differ at every offset of a 64 KiB stretch, and between seeds.
    static func pattern(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 16) &+ seed }
    }

    @Test("a large buffer reaches the receiver without a copy: the same memory, the same bytes")
    func sameMemory() throws {
        let port = try PortReceiveRight(queueLimit: 2, maxMessageSize: 1 << 20)
        let bytes = Self.pattern(1 << 20, seed: 3)
        let buffer = try MessageBuffer(copying: bytes)
        let address = buffer.withUnsafeBytes { Int(bitPattern: $0.baseAddress) }
        try port.makeSendRight().send(id: 7, buffer: buffer, timeout: .poll)
        let received = try port.receiveBuffer(timeout: .poll)
        #expect(received.header.id == 7)
        #expect(received.header.size == 1 << 20)
        let receivedAddress = received.buffer.withUnsafeBytes { Int(bitPattern: $0.baseAddress) }
        let mapped = received.buffer.isMapped, receivedBytes = received.buffer.bytes
        #expect(receivedAddress == address)
        #expect(!mapped)
        #expect(receivedBytes == bytes)
    }

    @Test("messages sent as buffers are received by the copying calls, and copied messages as buffers, in order")
    func mixed() throws {
        let port = try PortReceiveRight(queueLimit: 8, maxMessageSize: 300_000)
        let sender = port.makeSendRight()
        let sizes = [0, 1, 48, 49, 4096, 300_000]
        for (index, size) in sizes.enumerated() {
            try sender.send(id: Int32(index), buffer: try MessageBuffer(copying: Self.pattern(size, seed: UInt8(index))),
                            timeout: .poll)
        }
        for (index, size) in sizes.enumerated() {
            let message = try port.receive(timeout: .poll)
            #expect(message.id == Int32(index))
            #expect(message.payload == Self.pattern(size, seed: UInt8(index)))
        }
        for (index, size) in sizes.enumerated() {
            try sender.send(id: Int32(index), bytes: Self.pattern(size, seed: UInt8(index)), timeout: .poll)
        }
        for (index, size) in sizes.enumerated() {
            let received = try port.receiveBuffer(timeout: .poll)
            #expect(received.header.id == Int32(index))
            let count = received.buffer.count, bytes = received.buffer.bytes
            #expect(count == size)
            #expect(bytes == Self.pattern(size, seed: UInt8(index)))
        }
    }

    @Test("a buffer's reply right and a filled initializer arrive")
    func replyAndInitializer() throws {
        let port = try PortReceiveRight(queueLimit: 1, maxMessageSize: 1000)
        let replies = try PortReceiveRight(queueLimit: 1)
        let buffer = try MessageBuffer(count: 1000) { $0.initializeMemory(as: UInt8.self, repeating: 9) }
        try port.makeSendRight().send(id: 1, buffer: buffer, replyPort: replies.makeSendRight(), timeout: .poll)
        let received = try port.receiveBuffer(timeout: .poll)
        let bytes = received.buffer.bytes
        #expect(bytes == [UInt8](repeating: 9, count: 1000))
        try #require(received.header.replyPort).send(id: 2, bytes: [1], timeout: .poll)
        #expect(try replies.receive(timeout: .poll).id == 2)
    }

    @Test("a received buffer is sent on to another port without a copy")
    func forwarded() throws {
        let first = try PortReceiveRight(queueLimit: 1, maxMessageSize: 4096)
        let second = try PortReceiveRight(queueLimit: 1, maxMessageSize: 4096)
        try first.makeSendRight().send(id: 1, buffer: try MessageBuffer(copying: Self.pattern(4096, seed: 4)), timeout: .poll)
        let received = try first.receiveBuffer(timeout: .poll)
        let address = received.buffer.withUnsafeBytes { Int(bitPattern: $0.baseAddress) }
        try second.makeSendRight().send(id: 2, buffer: received.takeBuffer(), timeout: .poll)
        let again = try second.receiveBuffer(timeout: .poll)
        let againAddress = again.buffer.withUnsafeBytes { Int(bitPattern: $0.baseAddress) }, bytes = again.buffer.bytes
        #expect(againAddress == address)
        #expect(bytes == Self.pattern(4096, seed: 4))
    }

    @Test("a full queue, a too-large buffer and a destroyed port throw, and nothing is queued")
    func failures() throws {
        let port = try PortReceiveRight(queueLimit: 1, maxMessageSize: 100)
        let sender = port.makeSendRight()
        try sender.send(id: 1, buffer: try MessageBuffer(copying: Self.pattern(100, seed: 0)), timeout: .poll)
        #expect(throws: PortError.timedOut) {
            try sender.send(id: 2, buffer: try MessageBuffer(copying: Self.pattern(100, seed: 1)), timeout: .poll)
        }
        #expect(throws: PortError.tooLarge(size: 101, limit: 100)) {
            try sender.send(id: 3, buffer: try MessageBuffer(copying: Self.pattern(101, seed: 2)), timeout: .poll)
        }
        #expect(port.messageCount == 1)
        #expect(try port.receive(timeout: .poll).id == 1)
        #expect(throws: PortError.timedOut) { _ = try port.receiveBuffer(timeout: .poll) }
        port.destroy()
        #expect(throws: PortError.invalidDestination) {
            try sender.send(id: 4, buffer: try MessageBuffer(copying: [1, 2, 3]), timeout: .poll)
        }
    }

    @Test("a buffer of a negative or oversized count is refused with the reason")
    func badCounts() {
        #expect(throws: PortError.self) { _ = try MessageBuffer(count: -1) { _ in } }
        #expect(throws: PortError.self) { _ = try MessageBuffer(count: PortReceiveRight.maxMessageSizeLimit + 1) { _ in } }
        do {
            _ = try MessageBuffer(count: -1) { _ in }
        } catch {
            guard case let .invalidArgument(argument, _) = error else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(argument == "count")
        }
    }

    @Test("queued buffers are freed with their port")
    func freedWithPort() throws {
        // A leak shows under the sanitizers' leak check; here the port must simply go with buffers still queued.
        let port = try PortReceiveRight(queueLimit: 4, maxMessageSize: 1 << 16)
        for id: Int32 in 0..<4 {
            try port.makeSendRight().send(id: id, buffer: try MessageBuffer(copying: Self.pattern(1 << 16, seed: 1)),
                                          timeout: .poll)
        }
        #expect(port.messageCount == 4)
        port.destroy()
    }
}
