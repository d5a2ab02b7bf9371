import Foundation
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// A temporary namespace directory for one test, removed (with anything left in it) when the test is done.
final class TemporaryNamespace: @unchecked Sendable {
    let namespace: PortNamespace
    var path: String { namespace.path }

    init() {
        var template = Array("/tmp/portloop-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        namespace = PortNamespace(path: String(cString: template))
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A child process of the PortLoopIPCPeer helper: started with a role, read line by line, killed at the end.
final class Peer: @unchecked Sendable {
    let process = Process()
    private let lines = Locked<[String]>([])
    private let output = Pipe()
    private let input = Pipe()
    private let reader: TestThread

    /// Starts the helper; `environment` entries are added to the test's own.
    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        process.executableURL = directory.appendingPathComponent("PortLoopIPCPeer")
        process.arguments = arguments
        process.standardOutput = output
        process.standardInput = input
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        try process.run()
        let handle = output.fileHandleForReading
        let lines = self.lines
        reader = TestThread {
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: 10) {
                    let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                    lines.withLock { $0.append(line) }
                    pending.removeSubrange(pending.startIndex...newline)
                }
            }
        }
    }

    var pid: Int32 { process.processIdentifier }

    /// Waits for a line starting with `prefix` and returns it, or nil after `seconds`.
    func line(startingWith prefix: String, within seconds: Double = 20) -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let found = lines.withLock({ $0.first { $0.hasPrefix(prefix) } }) { return found }
            usleep(2000)
        }
        return nil
    }

    var allLines: [String] { lines.current }

    /// Waits for the `ready` line; false if the child said something else or nothing.
    func ready(within seconds: Double = 20) -> Bool { line(startingWith: "ready", within: seconds) != nil }

    /// Writes a line to the child's standard input.
    func tell(_ text: String) { input.fileHandleForWriting.write(Data((text + "\n").utf8)) }

    /// SIGKILL, and waits for the exit.
    func kill() {
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        reader.join()
    }

    /// Waits for the child to exit by itself (SIGKILL after `seconds`); its status.
    @discardableResult
    func finish(within seconds: Double = 30) -> Int32 {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(5000) }
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        reader.join()
        return process.terminationStatus
    }

    deinit { kill() }
}

/// Runs a helper to completion and returns its output lines.
func runPeer(_ arguments: [String], within seconds: Double = 30) throws -> [String] {
    let peer = try Peer(arguments)
    peer.finish(within: seconds)
    return peer.allLines
}

/// Waits until `condition` holds, up to `seconds`.
func eventually(within seconds: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = nowNanoseconds() + Int64(seconds * 1e9)
    while nowNanoseconds() < deadline {
        if condition() { return true }
        usleep(1000)
    }
    return condition()
}

/// Counts of this process's resources that must not grow: open descriptors and threads (from /proc).
func processResources() -> (descriptors: Int, threads: Int) {
    let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
    return (descriptors, threads)
}

/// This process's resident memory (VmRSS in /proc/self/status), in KiB.
func residentKilobytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return -1 }
    return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
}
