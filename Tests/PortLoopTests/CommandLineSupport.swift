import Foundation
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// The built `portloop` command run as a child process: its output read line by line as it comes, its exit
/// status kept. It is killed (SIGKILL) if still running when the test lets go of it.
final class CommandRun: @unchecked Sendable {
    let process = Process()
    private let stdoutLines = Locked<[String]>([])
    private let stderrLines = Locked<[String]>([])
    private let readers: [TestThread]

    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        process.executableURL = directory.appendingPathComponent("portloop")
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        try process.run()
        readers = [lineReader(output.fileHandleForReading, into: stdoutLines),
                   lineReader(errors.fileHandleForReading, into: stderrLines)]
    }

    var stdout: [String] { stdoutLines.current }
    var stderr: [String] { stderrLines.current }

    /// Waits for a line of standard output containing `text`, up to `seconds`.
    func waitForLine(containing text: String, within seconds: Double = 20) -> String? {
        var found: String?
        _ = eventually(within: seconds) {
            found = stdoutLines.withLock { $0.first { $0.contains(text) } }
            return found != nil
        }
        return found
    }

    /// Sends SIGINT, as Ctrl-C does.
    func interrupt() { kill(process.processIdentifier, SIGINT) }

    /// Waits for the exit (SIGKILL after `seconds`, which then reads as status -9) and returns its status.
    @discardableResult
    func finish(within seconds: Double = 30) -> Int32 {
        let deadline = Date().addingTimeInterval(seconds)
        var killed = false
        while process.isRunning && Date() < deadline { usleep(5000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            killed = true
        }
        process.waitUntilExit()
        readers.forEach { $0.join() }
        return killed ? -9 : process.terminationStatus
    }

    deinit { finish(within: 0) }
}

/// Runs `portloop` with `arguments` to its end: exit status, standard output and error lines.
func portloop(_ arguments: [String], within seconds: Double = 30) throws -> (status: Int32, stdout: [String], stderr: [String]) {
    let run = try CommandRun(arguments)
    let status = run.finish(within: seconds)
    return (status, run.stdout, run.stderr)
}

/// The exit codes `portloop --help` documents.
enum PortloopExit {
    static let success: Int32 = 0
    static let otherFailure: Int32 = 1
    static let usage: Int32 = 64
    static let tooLarge: Int32 = 65
    static let cannotRead: Int32 = 66
    static let unknownService: Int32 = 69
    static let wentAway: Int32 = 74
    static let timedOut: Int32 = 75
    static let noReply: Int32 = 76
    static let refused: Int32 = 77
}
