#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchSupport
import NIOCore
import NIOPosix
import PortLoop

// The child roles of the peers scenarios: `portloop-bench --ipc-child ROLE PARENT-PID DIRECTORY NAME [COUNT]
// [SIZE]`, where NAME is a socket file in DIRECTORY (for PortLoop: a service name in the namespace DIRECTORY).
//
// - Servers (`serve-portloop`, `serve-nio`, `serve-grpc`; COUNT is PortLoop's maximum message size): an echo
//   service, then `ready PID` on standard output; they serve until standard input reaches end of file, and
//   answer each `stats` line with `stats HEAP-BYTES` (glibc's heap in use, after malloc_trim).
// - Senders (`nio-send`, `grpc-send`): COUNT messages of SIZE bytes to the parent's sink, then exit.
// - Clients (`clients-portloop`, `clients-nio`, `clients-grpc`): COUNT clients of the server NAME, each having
//   had one 8-byte echo; then `ready`, and they hold their connections until standard input reaches end of file.
//
// PortLoop logs through swift-log to standard output, so every role answers on a duplicate of the output pipe
// taken at start, and standard output becomes standard error.

/// The line-based channel to the parent: the output pipe, duplicated before standard output is redirected.
enum ParentPipe {
    nonisolated(unsafe) static var descriptor: Int32 = STDOUT_FILENO

    static func take() {
        descriptor = dup(STDOUT_FILENO)
        dup2(STDERR_FILENO, STDOUT_FILENO)
    }

    static func say(_ text: String) {
        var line = text + "\n"
        line.withUTF8 { bytes in _ = write(descriptor, bytes.baseAddress, bytes.count) }
    }
}

/// A peers role (see the file's comment); never returns.
func runPeerChild(_ role: String, _ arguments: [String]) -> Never {
    ParentPipe.take()
    guard arguments.count >= 2 else {
        printError("\(role): DIRECTORY and NAME missing")
        exit(2)
    }
    let directory = arguments[0], name = arguments[1], path = directory + "/" + name
    let count = arguments.count >= 3 ? Int(arguments[2]) : nil
    let size = arguments.count >= 4 ? Int(arguments[3]) : nil
    raiseDescriptorLimit()
    switch (role, count, size) {
    case ("serve-portloop", let maxSize?, _):
        let port = must("checkIn") { () throws(PortError) in
            try PortNamespace(path: directory).checkIn(name, queueLimit: 64, maxMessageSize: maxSize)
        }
        let source = echoPortSource(port)
        let server = LoopThread { loop in
            mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) }
        }
        var clients: [PortSendRight] = []
        serveUntilEndOfInput { command in
            // `connect COUNT`: look up the services client-0 … client-(COUNT-1) of the namespace and make one
            // 8-byte request to each; keep the rights (see runPortLoopClients).
            guard command.hasPrefix("connect "), let count = Int(command.dropFirst(8)) else { return }
            let namespace = PortNamespace(path: directory)
            for index in 0..<count {
                clients.append(must("connect client-\(index)") { () throws(PortError) in
                    let client = try namespace.lookUp("client-\(index)", timeout: .seconds(30))
                    _ = try client.request(id: IPCMessage.data, bytes: [0, 0, 0, 0, 0, 0, 0, 0], timeout: .seconds(30))
                    return client
                })
            }
            ParentPipe.say("connected \(clients.count)")
        }
        clients.removeAll()
        server.loop.stop()
        server.join()
        source.invalidate()
    case ("serve-nio", _, _):
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let channel = bindFrameServer(group, path: path) { FrameEchoHandler() }
        serveUntilEndOfInput()
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    case ("serve-grpc", _, _):
        let server = GRPCServerRun(path: path, service: PeerGRPCService(sinkState: nil))
        serveUntilEndOfInput()
        server.stop()
    case ("nio-send", let count?, let size?) where count > 0 && size >= 8:
        runNIOSender(path: path, count: count, size: size)
    case ("grpc-send", let count?, let size?) where count > 0 && size >= 8:
        runGRPCSender(path: path, count: count, size: size)
    case ("clients-portloop", let count?, _) where count > 0:
        runPortLoopClients(directory: directory, name: name, count: count)
    case ("clients-nio", let count?, _) where count > 0:
        runNIOClients(path: path, count: count)
    case ("clients-grpc", let count?, _) where count > 0:
        runGRPCClients(path: path, count: count)
    default:
        printError("unknown --ipc-child role or missing arguments: \(role) \(arguments)")
        exit(2)
    }
    exit(0)
}

/// A server's main thread: says `ready`, answers `stats` lines, hands other lines to `command`, returns at end
/// of input.
private func serveUntilEndOfInput(_ command: (String) -> Void = { _ in }) {
    ParentPipe.say("ready \(getpid())")
    while let line = readLine() {
        if line == "stats" {
            bs_heap_trim()
            ParentPipe.say("stats \(bs_heap_in_use())")
        } else {
            command(line)
        }
    }
}

/// Blocks until standard input reaches end of file.
private func waitForEndOfInput() {
    while readLine() != nil {}
}

/// `clients-portloop`: PortLoop keeps one connection per process pair, so each client is a process of its own,
/// forked from this one before it has started any thread (each child then starts its own transport; its memory
/// stays shared with this process, copy-on-write). One at a time: a child checks in the service `client-INDEX`,
/// reports on a pipe, answers one request, and waits for end of file on another pipe; then the next. Once all
/// are up this process says `ready`, and the server connects to each (its `connect COUNT` command).
///
/// Why the server looks its clients up rather than the other way round: a process holding a right to a service
/// keeps the queue room lent with it (up to half the queue limit) while it sends nothing, and, with the library
/// as it is, the owner asks idle holders for it back only when a sender in its own process waits for room, not
/// when another client does. Two idle clients of a 64-message port hold all of its room, and a third client's
/// first request waits for good. Here each client's port has one holder, the server.
private func runPortLoopClients(directory: String, name: String, count: Int) {
    var ready: [Int32] = [-1, -1], hold: [Int32] = [-1, -1]
    guard pipe(&ready) == 0, pipe(&hold) == 0 else { fatalError("pipe: errno \(errno)") }
    let parent = getpid()
    var children: [pid_t] = []
    for index in 0..<count {
        let child = bs_fork()
        if child < 0 { fatalError("fork: errno \(errno)") }
        if child == 0 {
            close(ready[0])
            close(hold[1])
            guard bs_die_with_parent(parent) == 0 else { _exit(3) }
            do throws(PortError) {
                let port = try PortNamespace(path: directory).checkIn("client-\(index)", queueLimit: 1,
                                                                      maxMessageSize: 8)
                var byte: UInt8 = 1
                guard write(ready[1], &byte, 1) == 1 else { _exit(4) }
                let request = try port.receive(timeout: .seconds(600))
                try request.replyPort?.send(id: IPCMessage.data + 100, bytes: request.payload, timeout: .seconds(30))
                while true { // until end of file
                    let got = read(hold[0], &byte, 1)
                    if got == 0 || (got < 0 && errno != EINTR) { break }
                }
                _exit(0)
            } catch {
                printError("clients-portloop: \(error)")
                _exit(5)
            }
        }
        children.append(child)
        var descriptor = pollfd(fd: ready[0], events: Int16(POLLIN), revents: 0)
        var byte: UInt8 = 0
        guard poll(&descriptor, 1, 60_000) == 1, read(ready[0], &byte, 1) == 1 else {
            for pid in children { kill(pid, SIGKILL) }
            fatalError("clients-portloop: client \(index) did not check in")
        }
    }
    ParentPipe.say("ready")
    waitForEndOfInput()
    close(hold[1]) // every child reads end of file and exits
    var failed = 0
    for pid in children {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        if status != 0 { failed += 1 }
    }
    if failed > 0 {
        printError("clients-portloop: \(failed) clients failed")
        exit(1)
    }
}

/// `clients-nio`: plain blocking stream sockets from this process (a NIO server sees a connection per socket,
/// whoever holds it), each sending one 8-byte frame and reading its echo.
private func runNIOClients(path: String, count: Int) {
    var sockets: [Int32] = []
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        let bytes = Array(path.utf8)
        precondition(bytes.count < raw.count, "socket path too long")
        raw.copyBytes(from: bytes + [0])
    }
    for index in 0..<count {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard fd >= 0, connected == 0 else { fatalError("clients-nio: connect \(index): errno \(errno)") }
        var frame: [UInt8] = [8, 0, 0, 0] + withUnsafeBytes(of: UInt64(index)) { Array($0) }
        guard send(fd, &frame, frame.count, Int32(MSG_NOSIGNAL)) == frame.count else {
            fatalError("clients-nio: send \(index): errno \(errno)")
        }
        var echo = [UInt8](repeating: 0, count: frame.count)
        guard recv(fd, &echo, echo.count, Int32(MSG_WAITALL)) == echo.count, echo == frame else {
            fatalError("clients-nio: echo \(index) wrong")
        }
        sockets.append(fd)
    }
    ParentPipe.say("ready")
    waitForEndOfInput()
    for fd in sockets { close(fd) }
}

/// `clients-grpc`: one `GRPCClient` (an HTTP/2 connection) per client in this process, all on NIO's process-wide
/// event loop group, each having made one unary `Echo` call. One at a time, as the other kinds' clients come:
/// a thousand connecting at once overflow the server's listen backlog (connect fails with EAGAIN).
private func runGRPCClients(path: String, count: Int) {
    let clients = ClientList()
    waitForAsync("clients-grpc") {
        for index in 0..<count {
            let client = GRPCClientRun(path: path)
            clients.append(client)
            let echoed = try await client.echo(wordPayload(UInt64(index), size: 8))
            precondition(loadWord(echoed) == UInt64(index), "clients-grpc: wrong echo")
        }
    }
    ParentPipe.say("ready")
    waitForEndOfInput()
    for client in clients.all { client.stop() }
}

/// The gRPC clients made so far, appended from a task and read by the main thread after it finished.
private final class ClientList: @unchecked Sendable {
    private(set) var all: [GRPCClientRun] = []
    func append(_ client: GRPCClientRun) { all.append(client) }
}
