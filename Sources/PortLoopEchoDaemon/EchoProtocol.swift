import PortLoop

/// What travels on the daemon's ports.
///
/// A request is a message with a positive id, an ASCII payload and a reply port. Its reply carries the same id
/// and the payload uppercased, followed by ` [w<k>]` where k is the number of the worker that answered, so a
/// client can check both that its own request was echoed and who did it. Two ids are reserved, both negative
/// so that no client id can collide with them.
enum EchoProtocol {
    /// A worker's drain fence: the dispatcher sends one to each worker after the last request it forwards.
    /// A worker's port is a FIFO with one sender, the dispatcher, so when the fence is answered every request
    /// forwarded before it has been answered too.
    static let fenceID: Int32 = -1
    /// The id of the reply to a request that arrived after the daemon began to stop.
    static let refusedID: Int32 = -2
    /// The payload of that reply.
    static let refusedPayload = Array("refused: the daemon is stopping".utf8)

    /// The payload a client sends: readable in a debugger, different for every request.
    static func requestPayload(client: Int, sequence: Int) -> [UInt8] {
        Array("hello from client \(client), request \(sequence)".utf8)
    }

    /// The reply payload for a request payload: ASCII letters uppercased, then the worker's tag.
    static func echo(_ payload: [UInt8], worker: Int) -> [UInt8] {
        var reply = payload.map { byte in (0x61...0x7A).contains(byte) ? byte - 0x20 : byte }
        reply.append(contentsOf: " [w\(worker)]".utf8)
        return reply
    }

    /// The number of the worker that answered, if `reply` is the right answer to the request; nil otherwise.
    static func answeringWorker(of reply: ReceivedMessage, requestID: Int32, requestPayload: [UInt8],
                                workers: Int) -> Int? {
        guard reply.id == requestID else { return nil }
        let expected = echo(requestPayload, worker: 0).dropLast(" [w0]".utf8.count)
        guard reply.payload.starts(with: expected) else { return nil }
        let tag = reply.payload.dropFirst(expected.count)
        guard tag.starts(with: " [w".utf8), tag.last == UInt8(ascii: "]") else { return nil }
        guard let worker = Int(String(decoding: tag.dropFirst(3).dropLast(), as: UTF8.self)),
              (1...workers).contains(worker) else { return nil }
        return worker
    }
}
