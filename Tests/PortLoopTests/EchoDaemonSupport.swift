import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process of the example daemon's tests — `portloop-echod` (serve or load), or a tool that starts it —
/// whose standard output and error are collected by reader threads, so a test can wait for a line.
final class EchodProcess: @unchecked Sendable {
    let process = Process()
    private let output = Locked<[UInt8]>([])
    private let errors = Locked<[UInt8]>([])
    private var readers: [TestThread] = []

    /// The `portloop-echod` built beside this test bundle (a dependency of the test target).
    static var daemonPath: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("portloop-echod").path
    }

    /// Starts `portloop-echod arguments…`.
    convenience init(_ arguments: [String]) throws {
        try self.init(executable: Self.daemonPath, arguments)
    }

    /// Starts `executable arguments…`.
    init(executable: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        for (pipe, buffer) in [(out, output), (err, errors)] {
            let fd = pipe.fileHandleForReading.fileDescriptor
            readers.append(TestThread {
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = read(fd, &chunk, chunk.count)
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { return }
                    buffer.withLock { $0.append(contentsOf: chunk[..<n]) }
                }
            })
        }
    }

    var pid: Int32 { process.processIdentifier }
    var stdout: String { String(decoding: output.current, as: UTF8.self) }
    var stderr: String { String(decoding: errors.current, as: UTF8.self) }
    /// Both, for a failed expectation's message.
    var transcript: String { "stdout:\n\(stdout)\nstderr:\n\(stderr)" }

    /// Waits until standard output contains `text`; false on timeout.
    func waitForOutput(_ text: String, seconds: Double) -> Bool {
        eventually(within: seconds) { self.stdout.contains(text) }
    }

    /// Waits for the process to exit; its status (128 + the signal if one killed it), or nil if it was still
    /// running after `seconds` (it is then killed). Returns only once the output is complete.
    func waitForExit(seconds: Double) -> Int32? {
        let deadline = nowNanoseconds() + Int64(seconds * 1e9)
        while process.isRunning && nowNanoseconds() < deadline { sleepMilliseconds(5) }
        let timedOut = process.isRunning
        if timedOut { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        for reader in readers { reader.join() }
        readers = []
        if timedOut { return nil }
        return process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus
    }

    /// The first line of standard output that starts with `prefix`.
    func line(startingWith prefix: String) -> String? {
        stdout.split(separator: "\n").first { $0.hasPrefix(prefix) }.map(String.init)
    }

    /// A test that fails early still leaves no process behind.
    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        if !readers.isEmpty {
            process.waitUntilExit()
            for reader in readers { reader.join() }
        }
    }
}

/// The processes whose command line mentions `text` (a test's namespace path, say): none may be left when a
/// test ends.
func processesMentioning(_ text: String) -> [pid_t] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { entry -> pid_t? in
        guard let pid = pid_t(entry), pid != getpid(),
              let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { return nil }
        // A zombie's command line is empty, so only live processes count.
        let line = String(decoding: data.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
        return line.contains(text) ? pid : nil
    }
}

/// The number just before `label` in a summary line: 12000 for `"requests answered"` in `"… 12,000 requests answered …"`.
func number(before label: String, in line: String) -> Int? {
    guard let range = line.range(of: " " + label) else { return nil }
    let head = line[..<range.lowerBound]
    let digits = head.reversed().prefix { $0.isNumber || $0 == "," }
    return Int(String(digits.reversed()).replacingOccurrences(of: ",", with: ""))
}
