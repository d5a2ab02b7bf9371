import Foundation
import Testing

/// The main-queue dispatch port. Swift Testing's runner has called dispatchMain(), after which
/// draining the main queue crashes, so each scenario runs in a child process with a synchronous main
/// (the PortLoopMainQueueCheck executable, built beside this test bundle).
@Suite("Main-queue dispatch port")
struct MainQueueTests {
    /// Runs one scenario of the child and returns its exit status and output line.
    func runChild(_ scenario: String) throws -> (Int32, String) {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let process = Process()
        process.executableURL = directory.appendingPathComponent("PortLoopMainQueueCheck")
        process.arguments = [scenario]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }

    @Test("DispatchQueue.main blocks run FIFO on the main thread, isolated to the main actor",
          arguments: ["fifo", "mainactor", "noncommon", "many", "idle", "executor"])
    func scenario(_ name: String) throws {
        let (status, output) = try runChild(name)
        #expect(status == 0, "\(output)")
        #expect(output.hasPrefix("ok \(name)"), "\(output)")
    }

    @Test("experimental: an async main whose DefaultExecutorFactory is PortLoop's runs on the main run loop")
    func asyncMainOnTheMainLoop() throws {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let process = Process()
        process.executableURL = directory.appendingPathComponent("PortLoopAsyncMainCheck")
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(output)")
        #expect(output.hasPrefix("ok async-main"), "\(output)")
    }
}
