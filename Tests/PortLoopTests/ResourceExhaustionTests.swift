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
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0, "\(text)\n\(log)")
        #expect(text.hasPrefix("ok exhaustion"), "\(text)\n\(log)")
        // The PortMessages consumer logged why it polled: each of a port set's three system calls in turn.
        for call in ["epoll_create1", "eventfd", "timerfd_create"] {
            #expect(log.contains("\(call) failed: Too many open files"), "\(log)")
        }
    }
}
