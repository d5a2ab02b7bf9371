import Logging
@testable import PortLoop
import Testing

/// PortLoop's own log lines go to the logger the host sets with `PortLoopLogging.logger`.
///
/// The logger is global: the test sets it for as long as it needs it and restores the previous one, and the
/// suite is serialized so that no test of it sees another's logger. Lines other suites log meanwhile may land
/// in the capture too; the test looks only for its own.
@Suite("Logging through the host's logger", .serialized, .timeLimit(.minutes(1)))
struct LoggingTests {
    @Test("a reply that cannot be delivered is logged as an error through the logger the host set")
    func hostLoggerReceivesLibraryLines() throws {
        let captured = Locked<[CapturedLine]>([])
        let previous = PortLoopLogging.logger
        var host = Logger(label: "host.ports") { label in CapturingLogHandler(label: label, lines: captured) }
        host.logLevel = .warning
        PortLoopLogging.logger = host
        defer { PortLoopLogging.logger = previous }

        let server = try RunLoopThread(name: "log-reply")
        defer { server.stop() }
        let source = try RunLoopPortSource { message in PortReply(id: message.id) }
        try server.loop.add(source, mode: .default)
        // A request whose reply port is gone before the handler answers: the loop drops the reply and says so.
        let replies = try PortReceiveRight()
        let replyRight = replies.makeSendRight()
        replies.destroy()
        try source.makeSendRight().send(id: 7, replyPort: replyRight, timeout: .seconds(5))

        let expected = "reply to \(replyRight.name) dropped"
        var line: CapturedLine?
        let deadline = nowNanoseconds() + 10_000_000_000
        while line == nil && nowNanoseconds() < deadline {
            line = captured.current.first { $0.message.contains(expected) }
            if line == nil { sleepMilliseconds(5) }
        }
        let found = try #require(line, "no line containing \"\(expected)\" in \(captured.current)")
        #expect(found.level == .error)
        #expect(found.label == "host.ports")
        #expect(found.message.contains("invalid destination"), "it says why: \(found.message)")
    }
}

/// One line a ``CapturingLogHandler`` received.
struct CapturedLine: Sendable, CustomStringConvertible {
    let label: String
    let level: Logger.Level
    let message: String
    var description: String { "\(label) \(level): \(message)" }
}

/// A swift-log handler that keeps every line it is given, as a host's own handler would receive them.
struct CapturingLogHandler: LogHandler {
    let label: String
    let lines: Locked<[CapturedLine]>
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        lines.withLock { $0.append(CapturedLine(label: label, level: event.level, message: event.message.description)) }
    }
}
