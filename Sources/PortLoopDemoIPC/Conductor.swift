// The command itself: makes a temporary namespace, starts the app and then the event server (this same
// executable, with a hidden --role), kills one of them if asked to, waits for both, and removes the namespace
// whatever happened.
import PortLoopDemoSupport
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A child process and how it ended.
private struct Child {
    let role: String
    let pid: pid_t
    /// The raw wait status once reaped.
    var status: Int32?
    var killedOnPurpose = false

    var exitCode: Int32? {
        guard let status, status & 0x7f == 0 else { return nil }
        return (status >> 8) & 0xff
    }

    /// "exited 0", "exited 3", "killed by signal 9".
    var ending: String {
        guard let status else { return "still running" }
        if let exitCode { return "exited \(exitCode)" }
        return "killed by signal \(status & 0x7f)" + (killedOnPurpose ? " (SIGKILL, as asked)" : "")
    }

    /// Reaps the child if it has ended; true once it has.
    mutating func reap(blocking: Bool = false) -> Bool {
        if status != nil { return true }
        var raw: Int32 = 0
        let result = waitpid(pid, &raw, blocking ? 0 : WNOHANG)
        if result == pid {
            status = raw
            return true
        }
        if result < 0 && errno == ECHILD { status = raw }
        return status != nil
    }

    mutating func kill() {
        guard status == nil else { return }
        _ = Glibc.kill(pid, SIGKILL)
        _ = reap(blocking: true)
    }
}

/// Runs the demo; returns the process's exit status.
func conduct(_ options: Options) -> Int32 {
    let start = now()
    let tracer = Tracer(start: start, process: "demo", quiet: options.quiet)

    // SIGINT and SIGTERM wait, blocked, until the wait loop below looks for them, so that an interrupted demo
    // still stops its children and removes its namespace. The children get an empty mask.
    var interrupts = sigset_t()
    sigemptyset(&interrupts)
    sigaddset(&interrupts, SIGINT)
    sigaddset(&interrupts, SIGTERM)
    pthread_sigmask(SIG_BLOCK, &interrupts, nil)

    var template = Array("/tmp/portloop-demo-ipc-XXXXXX".utf8CString)
    guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
        printError("portloop-demo-ipc: cannot make a temporary namespace directory in /tmp: \(String(cString: strerror(errno)))")
        return ExitStatus.failure
    }
    let namespace = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard let executable = ownExecutable() else {
        removeNamespace(namespace)
        printError("portloop-demo-ipc: cannot read /proc/self/exe")
        return ExitStatus.failure
    }
    if !options.quiet {
        say("""
            portloop-demo-ipc: an event server process sends touches and key presses to an app process, whose main \
            run loop takes them in a Source1 and handles them in a Source0, for \(seconds(options.duration))
              namespace \(namespace) (made for this run, removed at its end); times are µs since the start

            """)
    }

    func spawnChild(_ role: String) -> Child? {
        var arguments = [executable, "--role", role, "--namespace", namespace, "--start", "\(start)",
                         "--conductor", "\(getpid())", "--duration", "\(options.duration)"]
        if options.quiet { arguments.append("--quiet") }
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, nil, &attributes, argv, environ)
        guard rc == 0 else {
            printError("portloop-demo-ipc: cannot start the \(role): \(String(cString: strerror(rc)))")
            return nil
        }
        return Child(role: role, pid: pid)
    }

    var failure: String?
    var interrupted = false
    var children: [Child] = []
    if var app = spawnChild("app") {
        // The server starts once the app's name is in the namespace: it looks it up first thing.
        let socketPath = namespace + "/" + serviceName
        let readyBy = now() + 10_000_000_000
        var info = stat()
        while stat(socketPath, &info) != 0 && !app.reap() && now() < readyBy { usleep(2000) }
        if app.status != nil {
            failure = "the app \(app.ending) before it checked \"\(serviceName)\" in"
        } else if stat(socketPath, &info) != 0 {
            failure = "the app did not check \"\(serviceName)\" in within 10 s"
        }
        children.append(app)
        if failure == nil {
            if let server = spawnChild("server") { children.append(server) } else { failure = "no event server" }
        }
    } else {
        failure = "no app"
    }
    if children.count == 2 {
        tracer.line(now(), "started", "app pid \(children[0].pid), event server pid \(children[1].pid)")
    }

    // Wait for both, killing one when asked to, everything when interrupted or after a generous deadline.
    let killAt = (options.killServerAfter ?? options.killAppAfter).map { start + Int64($0 * 1e9) }
    let victim = options.killServerAfter != nil ? 1 : 0
    var killed = false
    let giveUpAt = start + Int64(options.duration * 1e9) + 25_000_000_000
    func reapAll() -> Bool { children.indices.map { children[$0].reap() }.allSatisfy { $0 } }
    while failure == nil && !reapAll() {
        var pending = sigset_t()
        sigpending(&pending)
        if sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1 {
            interrupted = true
            break
        }
        if let killAt, !killed, now() >= killAt, children.count > victim, children[victim].status == nil {
            killed = true
            children[victim].killedOnPurpose = true
            _ = kill(children[victim].pid, SIGKILL)
            tracer.always("killed the \(children[victim].role == "server" ? "event server" : "app") "
                          + "(pid \(children[victim].pid)) with SIGKILL")
        }
        if now() >= giveUpAt {
            failure = "the children had not ended \(seconds(options.duration + 25)) after the start"
            break
        }
        usleep(2000)
    }
    for index in children.indices { children[index].kill() }   // those still running: after a failure only

    // What the children left in the namespace: the app's lock file always (lock files stay, by design), its
    // socket only if it did not withdraw the name (it was killed).
    let left = namespaceEntries(namespace)
    let socketLeft = left.contains(serviceName)
    let removed = removeNamespace(namespace)

    let endings = children.map { "\($0.role == "server" ? "event server" : "app") \($0.ending)" }
    var text = "ended: " + (endings.isEmpty ? "no child started" : endings.joined(separator: ", "))
    text += "; namespace " + (removed ? "removed" : "NOT removed")
    text += left.isEmpty ? " (it was empty)" : " (it held \(left.sorted().joined(separator: ", ")))"
    let running = children.filter { $0.status == nil }.count   // 0 unless waitpid itself failed
    text += running == 0 ? "; no child process left" : "; \(running) child process(es) could not be reaped"
    tracer.always(text)
    let statuses = children.map {
        "\($0.role)_pid=\($0.pid) \($0.role)_status=\($0.exitCode.map { "\($0)" } ?? "signal")"
    }
    say("cleanup: " + statuses.joined(separator: " ") + " namespace=\(namespace) removed=\(removed ? 1 : 0) "
        + "socket_left=\(socketLeft ? 1 : 0) children_left=\(running)")

    if interrupted {
        printError("portloop-demo-ipc: interrupted; both processes stopped, namespace removed")
        return ExitStatus.interrupted
    }
    if let failure {
        printError("portloop-demo-ipc: \(failure)")
        return ExitStatus.failure
    }
    if !removed || running > 0 {
        printError("portloop-demo-ipc: " + (removed ? "\(running) child process(es) could not be reaped"
                                            : "could not remove \(namespace)"))
        return ExitStatus.failure
    }
    let codes = children.map(\.exitCode)
    if killed {
        // The survivor must have noticed the death and said so with its own status.
        let survivor = children[1 - victim]
        if survivor.exitCode == ExitStatus.peerDied { return ExitStatus.peerDied }
        printError("portloop-demo-ipc: the \(survivor.role) \(survivor.ending) after the other side was killed "
                   + "(expected exit \(ExitStatus.peerDied))")
        return ExitStatus.failure
    }
    if codes.allSatisfy({ $0 == ExitStatus.ok }) { return ExitStatus.ok }
    printError("portloop-demo-ipc: " + endings.joined(separator: ", "))
    return codes.contains(ExitStatus.peerDied) ? ExitStatus.peerDied : ExitStatus.failure
}

/// The path of this executable, to start the children from.
private func ownExecutable() -> String? {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard n > 0 else { return nil }
    return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// The names in a directory, "." and ".." aside.
private func namespaceEntries(_ path: String) -> [String] {
    guard let directory = opendir(path) else { return [] }
    defer { closedir(directory) }
    var names: [String] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(cString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}

/// Removes the namespace directory and what is in it (no subdirectories: a namespace holds sockets and lock
/// files). True when it is gone.
@discardableResult
private func removeNamespace(_ path: String) -> Bool {
    for name in namespaceEntries(path) { unlink(path + "/" + name) }
    return rmdir(path) == 0 || errno == ENOENT
}
