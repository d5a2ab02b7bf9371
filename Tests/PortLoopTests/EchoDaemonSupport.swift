import Foundation
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// A child process of the example daemon's tests — `portloop-echod` (serve or load), or a tool that starts it —
/// whose standard output and error are collected by reader threads, so a test can wait for a line.
///
/// Started with posix_spawn and reaped with waitpid rather than with Foundation's `Process`, which takes the
/// second exec of a child (`systemd-socket-activate` execs the daemon when a client connects) for its end and
/// then waits for it for ever.
final class EchodProcess: @unchecked Sendable {
    let pid: pid_t
    private let output = Locked<[UInt8]>([])
    private let errors = Locked<[UInt8]>([])
    private var readers: [TestThread] = []
    /// The exit status (128 + the signal if one killed it), once reaped.
    private var status: Int32?

    /// The `portloop-echod` built beside this test bundle (a dependency of the test target).
    static var daemonPath: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("portloop-echod").path
    }

    /// Starts `portloop-echod arguments…`.
    convenience init(_ arguments: [String]) throws {
        try self.init(executable: Self.daemonPath, arguments)
    }

    /// Starts `executable arguments…` with standard input from /dev/null.
    init(executable: String, _ arguments: [String]) throws {
        var out: [Int32] = [0, 0], err: [Int32] = [0, 0]
        guard pipe(&out) == 0, pipe(&err) == 0 else { throw PortError.systemCallFailed(call: "pipe", errno: errno) }
        for fd in out + err { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, out[1], 1)
        posix_spawn_file_actions_adddup2(&actions, err[1], 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, executable, &actions, nil, argv, environ)
        close(out[1])
        close(err[1])
        guard rc == 0 else {
            close(out[0])
            close(err[0])
            throw PortError.systemCallFailed(call: "posix_spawn", errno: rc)
        }
        pid = child
        for (fd, buffer) in [(out[0], output), (err[0], errors)] {
            readers.append(TestThread {
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = read(fd, &chunk, chunk.count)
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { break }
                    buffer.withLock { $0.append(contentsOf: chunk[..<n]) }
                }
                close(fd)
            })
        }
    }

    var stdout: String { String(decoding: output.current, as: UTF8.self) }
    var stderr: String { String(decoding: errors.current, as: UTF8.self) }
    /// Both, for a failed expectation's message.
    var transcript: String { "stdout:\n\(stdout)\nstderr:\n\(stderr)" }

    /// Waits until standard output contains `text`; false on timeout.
    func waitForOutput(_ text: String, seconds: Double) -> Bool {
        eventually(within: seconds) { self.stdout.contains(text) }
    }

    /// Reaps the child if it has ended (`block`: waits for it); its status.
    private func reap(block: Bool) -> Int32? {
        if let status { return status }
        var raw: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &raw, block ? 0 : WNOHANG) } while result < 0 && errno == EINTR
        guard result == pid else { return nil }
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import.
        let signal = raw & 0x7f
        status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
        return status
    }

    /// Waits for the process to exit; its status (128 + the signal if one killed it), or nil if it was still
    /// running after `seconds` (it is then killed). Returns only once the output is complete.
    func waitForExit(seconds: Double) -> Int32? {
        let deadline = nowNanoseconds() + Int64(seconds * 1e9)
        while reap(block: false) == nil && nowNanoseconds() < deadline { sleepMilliseconds(5) }
        let timedOut = status == nil
        if timedOut {
            kill(pid, SIGKILL)
            _ = reap(block: true)
        }
        for reader in readers { reader.join() }
        readers = []
        return timedOut ? nil : status
    }

    /// The first line of standard output that starts with `prefix`.
    func line(startingWith prefix: String) -> String? {
        stdout.split(separator: "\n").first { $0.hasPrefix(prefix) }.map(String.init)
    }

    /// A test that fails early still leaves no process behind.
    deinit {
        if reap(block: false) == nil {
            kill(pid, SIGKILL)
            _ = reap(block: true)
        }
        for reader in readers { reader.join() }
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
