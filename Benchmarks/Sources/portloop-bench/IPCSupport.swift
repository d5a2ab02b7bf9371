#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import CBenchSupport
import PortLoop

// The other process of the cross-process scenarios (IPC.swift): this same executable started again with a hidden
// first argument, `portloop-bench --ipc-child ROLE PARENT-PID NAMESPACE NAME [COUNT] [SIZE]` (main.swift hands it to
// `runIPCChild` before anything else runs), by posix_spawn from the scenario's thread (the main thread) and
// reaped with waitpid. Foundation's Process is not used: its waitUntilExit looks for the exit every 50 ms. Every
// run makes its own namespace directory (mkdtemp under /tmp) and child, and removes both; the child dies with
// its parent (PR_SET_PDEATHSIG) should the benchmark end early.

/// Message ids between the two processes (a reply's id is the request's plus 100, MIG's convention).
enum IPCMessage {
    /// ipc-pingpong: echo the 8-byte payload. ipc-throughput: one counted message.
    static let data: Int32 = 1
    /// ipc-throughput: the sender's warm-up request, answered before it takes the clock.
    static let warmUp: Int32 = 2
    /// ipc-throughput: the sender's last request, answered after every counted message (one connection keeps
    /// the order), so that the sender exits only when nothing it sent is still on its way.
    static let done: Int32 = 3
    /// ipc-pingpong: the echo service stops its loop and exits.
    static let stop: Int32 = 4
}

/// The service name every run checks in (each run has a namespace of its own).
let ipcServiceName = "portloop-bench"

/// This executable's path, to start it again as the child.
let benchExecutablePath: String = {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    precondition(length > 0, "readlink /proc/self/exe failed: errno \(errno)")
    return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}()

/// A namespace directory for one run: mkdtemp under /tmp (mode 0700, as a namespace must be), removed by
/// ``remove()`` with whatever is left in it.
final class TemporaryNamespace {
    let namespace: PortNamespace
    var path: String { namespace.path }

    init() {
        var template = Array("/tmp/portloop-bench-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed: errno \(errno)")
        let path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        namespace = PortNamespace(path: path)
    }

    /// Removes the directory; returns the names of the entries that were still in it, which it removes too,
    /// and warns on standard error about any but the service's lock file (`.NAME.lock`: a service holds an
    /// flock on it while it lives and, by design, leaves the file when it goes): a socket file left behind.
    /// `killed`: the service's process was killed, so its socket file is expected too.
    @discardableResult
    func remove(_ scenario: String, killed: Bool = false) -> [String] {
        let left = directoryEntries(path)
        for name in left { unlink(path + "/" + name) }
        if rmdir(path) != 0 { printError("warning: \(scenario): cannot remove \(path): errno \(errno)") }
        let unexpected = left.filter { $0 != ".\(ipcServiceName).lock" && !(killed && $0 == ipcServiceName) }
        if !unexpected.isEmpty { printError("warning: \(scenario): \(path) still held \(unexpected) after the run") }
        return left
    }
}

/// The names in a directory but `.` and `..`; none if it cannot be read.
func directoryEntries(_ path: String) -> [String] {
    guard let directory = opendir(path) else { return [] }
    defer { closedir(directory) }
    var names: [String] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}

/// A child process of this executable in an `--ipc-child` role. Its standard output is a pipe read line by
/// line, its standard input /dev/null or (`input`) a pipe written by ``tell(_:)``, its standard error this
/// process's.
final class BenchChild {
    let pid: pid_t
    private let output: Int32
    private var input: Int32 = -1
    private var pending: [UInt8] = []
    private var reaped = false

    init(role: String, _ arguments: [String], input wantsInput: Bool = false) {
        var fds: [Int32] = [-1, -1]
        precondition(pipe(&fds) == 0, "pipe failed: errno \(errno)")
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) } // only the dup2'd copy reaches the child
        var inputFDs: [Int32] = [-1, -1]
        if wantsInput {
            precondition(pipe(&inputFDs) == 0, "pipe failed: errno \(errno)")
            for fd in inputFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if wantsInput {
            posix_spawn_file_actions_adddup2(&actions, inputFDs[0], 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        let argv = ([benchExecutablePath, "--ipc-child", role, "\(getpid())"] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let status = posix_spawn(&child, benchExecutablePath, &actions, nil, argv, environ)
        close(fds[1])
        if wantsInput { close(inputFDs[0]) }
        guard status == 0 else {
            close(fds[0])
            if wantsInput { close(inputFDs[1]) }
            fatalError("posix_spawn \(benchExecutablePath) failed: errno \(status)")
        }
        pid = child
        output = fds[0]
        input = inputFDs[1]
    }

    /// Writes a line to the child's standard input (a child started with `input: true`).
    func tell(_ text: String) {
        precondition(input >= 0, "the child has no input pipe")
        var line = text + "\n"
        let written = line.withUTF8 { bytes in write(input, bytes.baseAddress, bytes.count) }
        if written != line.utf8.count { printError("warning: writing to child \(pid) failed: errno \(errno)") }
    }

    /// Closes the child's standard input: it reads end of file, which tells a child serving until then to go.
    func closeInput() {
        if input >= 0 { close(input) }
        input = -1
    }

    /// The next line the child writes, or nil when it closes its output or `seconds` pass first.
    func readLine(within seconds: Double) -> String? {
        let deadline = bf_now_ns() + Int64(seconds * 1e9)
        while true {
            if let newline = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                return line
            }
            let remaining = deadline - bf_now_ns()
            guard remaining > 0 else { return nil }
            var descriptor = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(remaining / 1_000_000 + 1, 60_000)))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 256)
            let count = read(output, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            pending += chunk[0..<count]
        }
    }

    /// Waits up to `seconds` for the child to exit by itself, then kills it (SIGKILL) and reaps it. Returns its
    /// exit status, or nil when it had to be killed or died of a signal. It looks after 1 ms, then less and less
    /// often, down to every 20 ms (this may be waiting through a measured run: few wake-ups).
    @discardableResult
    func finish(within seconds: Double, warn: Bool = true) -> Int32? {
        guard !reaped else { return nil }
        reaped = true
        let deadline = bf_now_ns() + Int64(seconds * 1e9)
        var status: Int32 = 0
        var pause: UInt32 = 1000
        while true {
            let got = waitpid(pid, &status, WNOHANG)
            if got == pid { break }
            if got < 0 && errno != EINTR { return nil }
            if bf_now_ns() >= deadline {
                kill(pid, SIGKILL)
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                if warn { printError("warning: child \(pid) did not exit within \(seconds) s: killed") }
                return nil
            }
            usleep(pause)
            pause = min(pause * 2, 20_000)
        }
        // WIFEXITED / WEXITSTATUS are macros: the low 7 bits are the signal (0 for an exit), the next 8 the status.
        return status & 0x7f == 0 ? (status >> 8) & 0xff : nil
    }

    deinit {
        closeInput()
        if !reaped { finish(within: 0, warn: false) }
        close(output)
    }
}

/// An echo service in a child process, for one ipc-pingpong run: a fresh namespace, the child serving
/// ``ipcServiceName`` with a `RunLoopPortSource` on its main run loop, and a send right to it.
final class ChildEchoService {
    let space = TemporaryNamespace()
    let child: BenchChild
    private(set) var service: PortSendRight?

    /// `maxMessageSize`: the service port's (the payload the run bounces; 8 for ipc-pingpong). `spin`: the
    /// child's loop's ``PortRunLoop/spinBeforeSleeping``.
    init(maxMessageSize: Int = 8, spin: Duration = .zero) {
        let (seconds, attoseconds) = spin.components
        let spinArguments = spin == .zero ? [] : ["--spin", "\(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)"]
        child = BenchChild(role: "echo", [space.path, ipcServiceName, "\(maxMessageSize)"] + spinArguments)
        guard let line = child.readLine(within: 30), line.hasPrefix("ready") else {
            child.finish(within: 0)
            space.remove("ipc child")
            fatalError("the echo child did not become ready")
        }
        service = must("lookUp") { () throws(PortError) in
            try space.namespace.lookUp(ipcServiceName, timeout: .seconds(10))
        }
    }

    /// The right to the service (until ``finish(_:)``).
    var right: PortSendRight { service! }

    /// Tells the child to stop, waits for its exit (SIGKILL after 10 s), drops the right, removes the namespace
    /// and waits for this process's connection to the child to go. When the connection broke during the run
    /// (``isBroken``) the child, still serving, is killed instead.
    func finish(_ scenario: String) {
        let broken = isBroken
        if !broken {
            must("send stop") { () throws(PortError) in try right.send(id: IPCMessage.stop, timeout: .seconds(10)) }
        }
        let status = child.finish(within: broken ? 0 : 10, warn: !broken)
        service = nil
        space.remove(scenario, killed: broken)
        waitForNoConnections(scenario)
        guard broken || status == 0 else {
            fatalError("\(scenario): the echo child failed (status \(status.map(String.init) ?? "killed"))")
        }
    }

    /// Whether this process's connection to the child has ended while the child lives: the right is a dead
    /// name. (PortLoop's transport ends a connection on a protocol error; see `BrokenRuns`.)
    var isBroken: Bool { right.isDeadName }
}

/// Runs of the cross-process ping-pong that were repeated because the connection to the child broke in the
/// middle, so that a figure is never made of a round trip that could not come back. A guard: it first caught a
/// library race (a reply port's released handle named again by the next request, which ended the connection;
/// fixed since, see RESULTS.md). A broken run is discarded and run again, at most `limit` times in a row; the
/// counts, per variant, are side figures so that they cannot go unnoticed.
final class BrokenRuns: @unchecked Sendable {
    private(set) var counts: [String: Int] = [:]
    let limit = 20

    /// Runs `body` until it returns a figure (nil: the connection broke), counting the broken runs as `what`'s.
    func retrying(_ what: String, _ body: () -> Double?) -> Double {
        for _ in 0..<limit {
            if let value = body() { return value }
            counts[what, default: 0] += 1
            printError("warning: ipc-pingpong \(what): the connection to the child broke during the run; run again")
        }
        fatalError("ipc-pingpong \(what): the connection broke in \(limit) runs in a row")
    }
}

/// Waits (up to 5 s) until this process has no cross-process connection left: the transport thread closes a
/// connection whose peer went shortly after, not at once. Warns if one remains.
func waitForNoConnections(_ scenario: String) {
    let deadline = bf_now_ns() + 5_000_000_000
    while CrossProcessStatistics.current.connections > 0 && bf_now_ns() < deadline { usleep(1000) }
    let left = CrossProcessStatistics.current
    if left.connections > 0 {
        printError("warning: \(scenario): \(left.connections) connections left after the run (\(left))")
    }
}

// MARK: - The child

/// The child's side (`--ipc-child ROLE PARENT-PID NAMESPACE NAME [COUNT] [SIZE] [THRESHOLD]`); never returns. Roles:
///
/// - `echo` (`COUNT` is the maximum message size here, 8 when absent): checks NAME in and serves it with a
///   `RunLoopPortSource` on the main run loop: ``IPCMessage/data`` is answered with its payload (the handler's
///   `PortReply` goes to the message's reply port), ``IPCMessage/stop`` stops the loop; the process then exits 0.
///   It writes `ready PID` to standard output once the name is checked in. `--spin NANOSECONDS` sets the loop's
///   ``PortRunLoop/spinBeforeSleeping``.
/// - `send`: looks NAME up, makes a ``IPCMessage/warmUp`` request, takes the clock, sends COUNT ``IPCMessage/data``
///   messages of SIZE bytes (8 when absent; timeout `.forever`; the first 8 bytes of the first carry the clock,
///   of the others their index), then makes a ``IPCMessage/done`` request and exits 0. THRESHOLD, when given,
///   is set as `PortNamespace.outOfLineThreshold` first (large-payloads: `Int.max` sends in frames). `--pack`
///   sets `PortNamespace.packsStreams` first.
/// - Any role, with `--no-rings`: `PortNamespace.sharedRings` is `.never` (every frame through the socket).
/// - The roles of the peers scenarios (NIO and gRPC servers and senders, the `peers-clients` servers and
///   clients): ``runPeerChild(_:_:)``, which takes NAMESPACE as a directory and NAME as a socket file in it.
///
/// Failures end the child with a message on standard error and a status other than 0, which fails the run. The
/// `send` role's standard output is standard error from the start; the `echo` role's once it has said `ready`.
func runIPCChild(_ arguments: [String]) -> Never {
    guard arguments.count >= 4, let parent = Int32(arguments[1]) else {
        printError("usage: portloop-bench --ipc-child ROLE PARENT-PID NAMESPACE NAME [COUNT] [SIZE]")
        exit(2)
    }
    guard bs_die_with_parent(parent) == 0 else { exit(3) } // the parent is gone already
    let namespace = PortNamespace(path: arguments[2])
    let name = arguments[3]
    // The socket-only variants: this process neither offers a shared-memory ring nor takes one.
    if arguments.contains("--no-rings") { PortNamespace.sharedRings = .never }
    switch arguments[0] {
    case "echo":
        let size = arguments.count >= 5 ? Int(arguments[4]) ?? 0 : 8
        guard size >= 8 else {
            printError("echo: the maximum message size must be a number of at least 8")
            exit(2)
        }
        var spin = Duration.zero
        if let at = arguments.firstIndex(of: "--spin") {
            guard at + 1 < arguments.count, let nanoseconds = Int64(arguments[at + 1]), nanoseconds >= 0 else {
                printError("echo: --spin takes a number of nanoseconds")
                exit(2)
            }
            spin = .nanoseconds(nanoseconds)
        }
        serveEcho(namespace, name, maxMessageSize: size, spin: spin)
    case "send":
        dup2(STDERR_FILENO, STDOUT_FILENO)
        guard arguments.count >= 5, let count = Int(arguments[4]), count > 0 else {
            printError("send: COUNT missing")
            exit(2)
        }
        let size = arguments.count >= 6 ? Int(arguments[5]) ?? 0 : 8
        guard size >= 8 else {
            printError("send: SIZE must be a number of at least 8")
            exit(2)
        }
        if arguments.count >= 7, let threshold = Int(arguments[6]) { PortNamespace.outOfLineThreshold = threshold }
        if arguments.contains("--pack") { PortNamespace.packsStreams = true }
        sendMessages(namespace, name, count: count, size: size)
    default:
        runPeerChild(arguments[0], Array(arguments.dropFirst(2)))
    }
    exit(0)
}

/// Writes a line to standard output at once (the parent reads it through a pipe).
func childSay(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { bytes in _ = write(STDOUT_FILENO, bytes.baseAddress, bytes.count) }
}

/// The `echo` role. Returns when stopped, after dropping the source and with it the port (which withdraws the
/// name and removes its socket file).
private func serveEcho(_ namespace: PortNamespace, _ name: String, maxMessageSize: Int, spin: Duration) {
    let port = must("checkIn") { () throws(PortError) in
        try namespace.checkIn(name, queueLimit: 64, maxMessageSize: maxMessageSize)
    }
    let source = echoPortSource(port)
    let loop = PortRunLoop.current
    loop.spinBeforeSleeping = spin
    mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) }
    childSay("ready \(getpid())")
    // From here on standard output is standard error: PortLoop logs (swift-log's default handler writes to
    // standard output) reach the terminal instead of filling a pipe the parent no longer reads.
    dup2(STDERR_FILENO, STDOUT_FILENO)
    loop.run()
    source.invalidate()
}

/// The echo service's source: ``IPCMessage/data`` is answered with its payload (the handler's `PortReply` goes to
/// the message's reply port), ``IPCMessage/stop`` stops the loop.
func echoPortSource(_ port: consuming PortReceiveRight) -> RunLoopPortSource {
    RunLoopPortSource(port: port) { message in
        switch message.id {
        case IPCMessage.data:
            return PortReply(id: IPCMessage.data + 100, bytes: message.payload)
        case IPCMessage.stop:
            PortRunLoop.current.stop()
            return nil
        default:
            fatalError("echo: unexpected message id \(message.id)")
        }
    }
}

/// The `send` role.
private func sendMessages(_ namespace: PortNamespace, _ name: String, count: Int, size: Int) {
    let service = must("lookUp") { () throws(PortError) in try namespace.lookUp(name, timeout: .seconds(10)) }
    _ = must("warm-up request") { () throws(PortError) in
        try service.request(id: IPCMessage.warmUp, timeout: .seconds(30))
    }
    withUnsafeTemporaryAllocation(byteCount: size, alignment: 8) { buffer in
        buffer.initializeMemory(as: UInt8.self, repeating: 0)
        buffer.storeBytes(of: UInt64(bf_now_ns()), as: UInt64.self) // the first message: the start
        for index in 0..<count {
            if index > 0 { buffer.storeBytes(of: UInt64(index), as: UInt64.self) }
            must("send") { () throws(PortError) in
                try service.send(id: IPCMessage.data, payload: UnsafeRawBufferPointer(buffer), timeout: .forever)
            }
        }
    }
    _ = must("done request") { () throws(PortError) in
        try service.request(id: IPCMessage.done, timeout: .seconds(120))
    }
}
