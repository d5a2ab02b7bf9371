#if canImport(Glibc)
import Glibc
#endif
import PortLoop
import Testing

/// The Swift examples of README.md, compiled and run. Each test's body between `// README:` and
/// `// END README` is, line for line, one ```swift block of the README; `readmeBlocksAreTested` checks that
/// they have not drifted apart.
@Suite("README examples")
struct ReadmeExampleTests {
    @Test("receive right")
    func receiveRight() throws {
        // README: receive right
        let port = try PortReceiveRight(queueLimit: 16)       // mach_port_allocate(MACH_PORT_RIGHT_RECEIVE)
        precondition(port.queueLimit == 16)
        precondition(port.maxMessageSize == 65_536)           // the default, 64 KiB
        precondition(port.messageCount == 0)
        print("created \(port.name)")                         // e.g. "created port#7"
        // END README
    }

    @Test("send right")
    func sendRight() throws {
        // README: send right
        let port = try PortReceiveRight()
        let right = port.makeSendRight()                      // MACH_MSG_TYPE_MAKE_SEND
        let copy = right                                      // copies share one right
        precondition(copy == right && copy.name == port.name)
        try copy.send(id: 7, bytes: [1, 2, 3])                // from any thread
        precondition(port.sendRightCount == 1)
        precondition(!right.isDeadName)
        // END README
    }

    @Test("message")
    func message() throws {
        // README: message
        let service = try PortReceiveRight()
        let replies = try PortReceiveRight()
        try service.makeSendRight().send(id: 42, bytes: Array("hello".utf8),
                                         replyPort: replies.makeSendRight())

        let request = try service.receive(timeout: .poll)
        precondition(request.id == 42 && request.payload == Array("hello".utf8))
        precondition(request.arrivalPort == service.name)
        try request.replyPort?.send(id: 43, bytes: Array("world".utf8))   // answer on the reply port

        // Receiving into your own buffer allocates nothing.
        var buffer = [UInt8](repeating: 0, count: 64)
        let header = try buffer.withUnsafeMutableBytes { try replies.receive(into: $0, timeout: .poll) }
        precondition(header.id == 43 && buffer[0..<header.size] == ArraySlice("world".utf8))
        // END README
    }

    @Test("port set")
    func portSet() throws {
        // README: port set
        let set = try PortSet()                               // mach_port_allocate(MACH_PORT_RIGHT_PORT_SET)
        let a = try PortReceiveRight(), b = try PortReceiveRight()
        try set.insert(a)                                     // mach_port_insert_member
        try set.insert(b)
        do throws(PortError) { try set.insert(a) } catch { precondition(error == .alreadyInSet) }

        try b.makeSendRight().send(id: 2)
        guard case let .message(message) = try set.receive(timeout: .after(.milliseconds(100))) else {
            fatalError("expected a message")
        }
        precondition(message.arrivalPort == b.name)           // which port it came from

        // A plain file descriptor can be a member too: a receive reports it while it is readable.
        var fds: [Int32] = [0, 0]
        precondition(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        try set.insert(fileDescriptor: fds[0])
        precondition(write(fds[1], "x", 1) == 1)
        guard case .readable(fileDescriptor: fds[0]) = try set.receive(timeout: .poll) else {
            fatalError("expected the descriptor")
        }
        try set.remove(fileDescriptor: fds[0])
        try set.remove(a)                                     // mach_port_extract_member
        precondition(set.memberCount == 1)
        // END README
    }

    @Test("timeouts")
    func timeouts() throws {
        // README: timeouts
        let port = try PortReceiveRight()
        do { _ = try port.receive(timeout: .poll) } catch PortError.timedOut {}                  // don't wait
        do { _ = try port.receive(timeout: .after(.milliseconds(20))) } catch PortError.timedOut {}
        do { _ = try port.receive(timeout: .seconds(0.005)) } catch PortError.timedOut {}       // CFTimeInterval style
        do { _ = try port.receive(timeout: .seconds(-1)) } catch PortError.invalidArgument(let argument, _) {
            precondition(argument == "timeout")               // bad input is an error, never a crash
        }
        try port.makeSendRight().send()
        _ = try port.receive(timeout: .forever)               // a message is there: returns at once
        // END README
    }

    @Test("queue limit")
    func queueLimit() throws {
        // README: queue limit
        let wakeUp = try PortReceiveRight(queueLimit: 1)
        let right = wakeUp.makeSendRight()
        try right.send(timeout: .poll)                        // the wake-up is pending
        do { try right.send(timeout: .poll) } catch PortError.timedOut {}   // full: coalesced, nothing queued
        precondition(wakeUp.messageCount == 1)

        try wakeUp.setQueueLimit(8)                           // mach_port_set_attributes(MACH_PORT_LIMITS_INFO)
        try right.send(timeout: .poll)                        // room again
        precondition(wakeUp.messageCount == 2)
        do { try wakeUp.setQueueLimit(0) } catch PortError.invalidArgument {}   // 1…1024
        // END README
    }

    @Test("too large")
    func tooLarge() throws {
        // README: too large
        let port = try PortReceiveRight(maxMessageSize: 16)
        let right = port.makeSendRight()
        do { try right.send(bytes: [UInt8](repeating: 0, count: 17)) } catch PortError.tooLarge(let size, let limit) {
            precondition(size == 17 && limit == 16)           // MACH_SEND_TOO_LARGE: nothing queued
        }
        try right.send(bytes: [UInt8](repeating: 1, count: 12))
        do { _ = try port.receive(timeout: .poll, maxSize: 4) } catch PortError.tooLarge(let size, _) {
            precondition(size == 12)                          // MACH_RCV_TOO_LARGE: the size needed...
        }
        precondition(port.messageCount == 1)                  // ...and the message stays queued
        let message = try port.receive(timeout: .poll)        // a receive with room gets it
        precondition(message.payload.count == 12)
        // END README
    }

    @Test("destruction")
    func destruction() throws {
        // README: destruction
        let replies = try PortReceiveRight()
        let right: PortSendRight
        do {
            let port = try PortReceiveRight()
            right = port.makeSendRight()
            try right.send(id: 1, replyPort: replies.makeSendRight())   // queued, holding a reply right
            precondition(replies.sendRightCount == 1)
            port.destroy()                                    // mach_port_destroy; dropping it does the same
        }
        precondition(replies.sendRightCount == 0)             // the queued message was destroyed
        precondition(right.isDeadName)
        do { try right.send() } catch PortError.invalidDestination {}   // MACH_SEND_INVALID_DEST

        let set = try PortSet()
        try set.destroy()                                     // receivers blocked on it get .portDied
        do { _ = try set.receive(timeout: .poll) } catch PortError.invalidName {}
        // END README
    }

    // MARK: - The README and this file agree

    @Test("every ```swift block of README.md's port-layer section is one of the examples above")
    func readmeBlocksAreTested() throws {
        let here = try readTextFile(#filePath)
        let readmePath = #filePath.split(separator: "/", omittingEmptySubsequences: false)
            .dropLast(3).joined(separator: "/") + "/README.md"
        let readme = try readTextFile(readmePath)
        let tested = Self.regions(in: here)
        // This file holds the port layer's examples; other sections' examples are tested beside their features.
        let section = readme.components(separatedBy: "\n## The port layer\n").dropFirst().first?
            .components(separatedBy: "\n## ").first ?? ""
        let blocks = Self.swiftBlocks(in: section)
        #expect(blocks.count == tested.count, "README has \(blocks.count) swift blocks, this file \(tested.count) examples")
        for block in blocks where !tested.contains(block) {
            Issue.record("README.md has a swift block that is not an example here:\n\(block.joined(separator: "\n"))")
        }
    }

    /// Lines without their common indentation, trailing blank lines dropped.
    static func dedent(_ lines: [Substring]) -> [String] {
        let indents = lines.filter { !$0.allSatisfy(\.isWhitespace) }.map { $0.prefix(while: { $0 == " " }).count }
        let cut = indents.min() ?? 0
        var result = lines.map { $0.allSatisfy(\.isWhitespace) ? "" : String($0.dropFirst(cut)) }
        while result.last == "" { result.removeLast() }
        return result
    }

    /// The example regions of this file.
    static func regions(in text: String) -> [[String]] {
        var regions: [[String]] = [], current: [Substring]? = nil
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop(while: { $0 == " " })
            if trimmed.hasPrefix("// README:") { current = [] }
            else if trimmed.hasPrefix("// END README") { regions.append(dedent(current ?? [])); current = nil }
            else if current != nil { current!.append(line) }
        }
        return regions
    }

    /// The ```swift blocks of a Markdown text.
    static func swiftBlocks(in text: String) -> [[String]] {
        var blocks: [[String]] = [], current: [Substring]? = nil
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line.hasPrefix("```swift") { current = [] }
            else if current != nil, line.hasPrefix("```") { blocks.append(dedent(current!)); current = nil }
            else if current != nil { current!.append(line) }
        }
        return blocks
    }
}

struct ReadFileError: Error { let path: String }

/// A whole text file, without Foundation.
func readTextFile(_ path: String) throws -> String {
    guard let file = fopen(path, "rb") else { throw ReadFileError(path: path) }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = fread(&chunk, 1, chunk.count, file)
        if n > 0 { bytes.append(contentsOf: chunk[0..<n]) }
        if n < chunk.count { break }
    }
    return String(decoding: bytes, as: UTF8.self)
}
