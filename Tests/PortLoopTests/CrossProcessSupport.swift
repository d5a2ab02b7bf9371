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
        namespace = PortNamespace(path: String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) },
                                               as: UTF8.self))
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
        reader = lineReader(output.fileHandleForReading, into: lines)
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

/// A thread that reads `handle` to its end, appending each line to `lines` as it comes.
func lineReader(_ handle: FileHandle, into lines: Locked<[String]>) -> TestThread {
    TestThread {
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

/// A child started as systemd's socket activation starts a service: `listener` is its descriptor 3, and
/// LISTEN_FDS / LISTEN_FDNAMES name it (the helper's --activated flag sets LISTEN_PID, which only the child
/// can know). Its standard output is read as a Peer's is.
final class ActivatedPeer: @unchecked Sendable {
    let pid: pid_t
    private let lines = Locked<[String]>([])
    private let reader: TestThread

    init(_ arguments: [String], listener: Int32, name: String) throws {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let path = directory.appendingPathComponent("PortLoopIPCPeer").path
        var output: [Int32] = [0, 0]
        guard pipe(&output) == 0 else { throw PortError.systemCallFailed(call: "pipe", errno: errno) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, listener, 3)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_addclose(&actions, output[0])
        let argv = ([path] + arguments + ["--activated"]).map { strdup($0) } + [nil]
        var environment = ProcessInfo.processInfo.environment
        environment["LISTEN_FDS"] = "1"
        environment["LISTEN_FDNAMES"] = name
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &actions, nil, argv, envp)
        close(output[1])
        guard rc == 0 else {
            close(output[0])
            throw PortError.systemCallFailed(call: "posix_spawn", errno: rc)
        }
        pid = child
        let fd = output[0]
        let lines = self.lines
        reader = TestThread {
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(fd, &buffer, buffer.count)
                if n <= 0 { break }
                pending += buffer[0..<n]
                while let newline = pending.firstIndex(of: 10) {
                    lines.withLock { $0.append(String(decoding: pending[..<newline], as: UTF8.self)) }
                    pending.removeSubrange(...newline)
                }
            }
            close(fd)
        }
    }

    func ready(within seconds: Double = 20) -> Bool {
        eventually(within: seconds) { lines.current.contains { $0.hasPrefix("ready") } }
    }

    var allLines: [String] { lines.current }

    func kill() {
        Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        reader.join()
    }

    deinit { kill() }
}

/// A listening SOCK_SEQPACKET socket bound at `path`, whose file anyone may connect to (mode 0777).
func listeningSocket(at path: String) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw PortError.systemCallFailed(call: "socket", errno: errno) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        let bytes = Array(path.utf8)
        raw.copyBytes(from: bytes.prefix(raw.count - 1))
    }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard bound == 0, listen(fd, 16) == 0, chmod(path, 0o777) == 0 else {
        let error = errno
        close(fd)
        throw PortError.systemCallFailed(call: "bind/listen", errno: error)
    }
    return fd
}

/// Runs `body` with this process's shared-ring policy set to `policy`, and puts the one before back afterwards.
func withSharedRings<T>(_ policy: SharedRingPolicy, _ body: () throws -> T) rethrows -> T {
    let saved = PortNamespace.sharedRings
    defer { PortNamespace.sharedRings = saved }
    PortNamespace.sharedRings = policy
    return try body()
}
