import Foundation
import Testing

/// Descriptor exhaustion never ends the process: each call that needs descriptors throws a typed error naming
/// the failed system call, leaks nothing, and works again once descriptors are back. Run in a child process
/// (PortLoopResourceCheck), which lowers its own descriptor limit and uses every descriptor up.
@Suite("Resource exhaustion", .timeLimit(.minutes(2)))
struct ResourceExhaustionTests {
    @Test("under RLIMIT_NOFILE, at every number of free descriptors: a typed error or success, nothing leaked")
    func descriptorExhaustion() throws {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let process = Process()
        process.executableURL = directory.appendingPathComponent("PortLoopResourceCheck")
        process.arguments = ["exhaustion"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "\(text)")
        #expect(text.hasPrefix("ok exhaustion"), "\(text)")
    }
}
