import ArgumentParser
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// `portloop send`: one message to a service, and with --reply its answer.
struct SendCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Send one message to a service; with --reply, wait for its reply and print it.",
        discussion: """
            The message goes to the service's port as any client's does: the service's application code receives \
            it and, with --reply, answers it on the reply port the message carries. The reply prints as \
            `reply id=ID bytes=N: PAYLOAD`, the payload as text when it is printable UTF-8, else in hex.
            Exit codes: 0 sent (and answered); 65 the payload is larger than the service's port takes; 66 the \
            file cannot be read; 69 unknown service; 74 the service went away; 75 timed out (no room in the \
            queue, or no reply in time); 76 the service dropped the request without answering; 77 refused.
            """
    )

    @OptionGroup var options: NamespaceOptions

    @Argument(help: "The service's name.")
    var name: String

    @Option(help: ArgumentHelp("The message id.", valueName: "n"))
    var id: Int32

    @Option(help: ArgumentHelp("The payload, as UTF-8 text.", valueName: "text"))
    var payload: String?

    @Option(help: ArgumentHelp("Take the payload from this file.", valueName: "path"))
    var file: String?

    @Option(help: ArgumentHelp("Seconds to wait: for the look-up, for room in the queue, for the reply.", valueName: "seconds"))
    var timeout: Seconds = Seconds(10)

    @Flag(help: "Wait for the service's reply and print it.")
    var reply = false

    func validate() throws {
        try validateServiceName(name)
        if payload != nil && file != nil { throw ValidationError("--payload and --file exclude each other") }
    }

    func run() throws {
        let namespace = try options.resolved()
        failing { () throws(CommandFailure) in
            let bytes = try file.map { path throws(CommandFailure) in try readPayload(path) } ?? Array((payload ?? "").utf8)
            let right: PortSendRight
            do throws(PortError) { right = try namespace.lookUp(name, timeout: timeout.timeout) } catch {
                throw CommandFailure(error, service: name, doing: "looking up")
            }
            do throws(PortError) {
                if reply {
                    let answer = try right.request(id: id, bytes: bytes, timeout: timeout.timeout,
                                                   maxReplySize: PortReceiveRight.maxMessageSizeLimit)
                    printLine("reply id=\(answer.id) bytes=\(answer.payload.count): \(printable(answer.payload))")
                } else {
                    try right.send(id: id, bytes: bytes, timeout: timeout.timeout)
                    printLine("sent id=\(id) bytes=\(bytes.count) to \(name)")
                }
            } catch {
                throw CommandFailure(error, service: name, doing: reply ? "waiting for" : "sending to")
            }
        }
    }

    /// The file's bytes; a file larger than any port takes is refused before it is read.
    func readPayload(_ path: String) throws(CommandFailure) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw CommandFailure(message: "cannot read \(path): \(String(cString: strerror(errno)))",
                                 code: CommandFailure.cannotReadInput)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            throw CommandFailure(message: "cannot read \(path): not a regular file", code: CommandFailure.cannotReadInput)
        }
        let limit = PortReceiveRight.maxMessageSizeLimit
        guard Int(info.st_size) <= limit else {
            throw CommandFailure(message: "too large: \(path) has \(info.st_size) bytes, and no port takes more than \(limit)",
                                 code: CommandFailure.payloadTooLarge)
        }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw CommandFailure(message: "cannot read \(path): \(n == 0 ? "it shrank while read" : String(cString: strerror(errno)))",
                                     code: CommandFailure.cannotReadInput)
            }
            done += n
        }
        return bytes
    }
}

/// A payload as text when it is printable UTF-8, else as hex.
func printable(_ bytes: [UInt8]) -> String {
    if let text = String(validating: bytes, as: UTF8.self),
       !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
        return text
    }
    return bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
}
