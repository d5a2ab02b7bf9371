import Dispatch
import Foundation
import Testing

/// How a demo executable run as a child process ended.
struct DemoOutcome {
    let status: Int32
    let output: String
    let errors: String
    let elapsed: Duration
}

/// Runs one of the package's demo executables (built beside this test bundle, because the test target depends
/// on it) with `arguments`; SIGINT after `interruptAfter` if given, SIGTERM if it has not ended after `limit`.
func runDemoExecutable(_ name: String, _ arguments: [String], limit: Duration = .seconds(25),
                       interruptAfter: Duration? = nil) throws -> DemoOutcome {
    let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let process = Process()
    process.executableURL = directory.appendingPathComponent(name)
    process.arguments = arguments
    let output = Pipe(), errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    let started = ContinuousClock.now
    try process.run()
    let watchdog = DispatchWorkItem { if process.isRunning { process.terminate() } }
    DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(Int(limit.components.seconds)), execute: watchdog)
    let interrupt = DispatchWorkItem { if process.isRunning { process.interrupt() } }
    if let interruptAfter {
        let milliseconds = Int(interruptAfter.components.seconds * 1000 + interruptAfter.components.attoseconds / 1_000_000_000_000_000)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(milliseconds), execute: interrupt)
    }
    // Both pipes are read at once: a child that fills one while the test waits on the other would hang.
    let errorData = Locked(Data())
    let errorReader = TestThread { errorData.withLock { $0 = errors.fileHandleForReading.readDataToEndOfFile() } }
    let outputData = output.fileHandleForReading.readDataToEndOfFile()
    errorReader.join()
    process.waitUntilExit()
    watchdog.cancel()
    interrupt.cancel()
    return DemoOutcome(status: process.terminationStatus, output: String(decoding: outputData, as: UTF8.self),
                       errors: String(decoding: errorData.current, as: UTF8.self), elapsed: ContinuousClock.now - started)
}

/// The key=value fields of the last line of `output` that starts with `prefix` (e.g. "summary: ").
func keyValueFields(_ output: String, line prefix: String) -> [String: String] {
    guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix(prefix) }) else { return [:] }
    var fields: [String: String] = [:]
    for field in line.dropFirst(prefix.count).split(separator: " ") {
        let parts = field.split(separator: "=", maxSplits: 1)
        if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
    }
    return fields
}

/// A bad command line: nothing on stdout, the error and the usage on stderr, exit 64 (EX_USAGE).
func expectUsageError(_ outcome: DemoOutcome, command: String, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(outcome.status == 64, sourceLocation: sourceLocation)
    #expect(outcome.output.isEmpty, "\(outcome.output)", sourceLocation: sourceLocation)
    #expect(outcome.errors.hasPrefix("Error: "), "\(outcome.errors)", sourceLocation: sourceLocation)
    #expect(outcome.errors.contains("Usage: \(command)"), "\(outcome.errors)", sourceLocation: sourceLocation)
}
