import ArgumentParser
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// A failure that ends the command: one line on standard error and an exit code scripts can tell apart
/// (the table is in `portloop --help`).
struct CommandFailure: Error {
    let message: String
    let code: Int32

    static let otherFailure: Int32 = 1
    static let payloadTooLarge: Int32 = 65
    static let cannotReadInput: Int32 = 66
    static let unknownService: Int32 = 69
    static let serviceWentAway: Int32 = 74
    static let timedOut: Int32 = 75
    static let noReply: Int32 = 76
    static let refused: Int32 = 77

    /// The failure for a port error met while talking to `name`.
    init(_ error: PortError, service name: String, doing what: String) {
        switch error {
        case .unknownService:
            self.init(message: "unknown service: \(name) is not checked in by a live process", code: Self.unknownService)
        case let .refused(why):
            self.init(message: "refused: \(why)", code: Self.refused)
        case .timedOut:
            self.init(message: "timed out \(what) \(name)", code: Self.timedOut)
        case .noReply:
            self.init(message: "no reply: \(name) dropped the request without answering", code: Self.noReply)
        case .invalidDestination, .portDied:
            self.init(message: "\(name) went away", code: Self.serviceWentAway)
        case let .tooLarge(size, limit):
            self.init(message: "too large: \(size) bytes, and \(name) takes at most \(limit)", code: Self.payloadTooLarge)
        default:
            self.init(message: "\(what) \(name) failed: \(error)", code: Self.otherFailure)
        }
    }

    init(message: String, code: Int32) {
        self.message = message
        self.code = code
    }

    /// Prints the line and exits with the code.
    func exit() -> Never {
        printError(message)
        Glibc.exit(code)
    }
}

/// One line on standard error, prefixed with the command's name.
func printError(_ line: String) {
    let bytes = Array("portloop: \(line)\n".utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

/// One line on standard output, written at once (a reader of a pipe sees each line as it comes).
func printLine(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

/// Runs `body`, turning a CommandFailure into its line and exit code.
func failing(_ body: () throws(CommandFailure) -> Void) {
    do { try body() } catch { error.exit() }
}
