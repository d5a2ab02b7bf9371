#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A client process of `portloop-echod load`: this same executable again, in the `load-client` role, with its
/// standard output on a pipe to the parent and its standard error shared.
struct ClientProcess {
    let pid: pid_t
    /// The read end of the child's standard output.
    let output: Int32

    /// How a child ended, and what it printed.
    struct Outcome {
        let pid: pid_t
        /// The exit status, or 128 + the signal that killed it.
        let status: Int32
        let lines: [String]

        var statusDescription: String {
            status > 128 ? "was killed by signal \(status - 128)" : "exited with status \(status)"
        }
    }

    /// Starts `/proc/self/exe arguments…`: the very binary that runs now, wherever it was started from.
    init(arguments: [String]) throws(DaemonError) {
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw .system(call: "pipe", errno: errno) }
        // Close-on-exec, so that no later child inherits this one's pipe (a load's threads spawn nothing).
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], STDOUT_FILENO) // dup2 clears close-on-exec
        let path = "/proc/self/exe"
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &actions, nil, argv, environ)
        close(pipeEnds[1])
        guard rc == 0 else {
            close(pipeEnds[0])
            throw .system(call: "posix_spawn", errno: rc)
        }
        pid = child
        output = pipeEnds[0]
    }

    /// Reads every child's output until each closes it, then reaps them all; outcomes in the same order.
    static func collect(_ children: [ClientProcess]) -> [Outcome] {
        var buffers = Array(repeating: [UInt8](), count: children.count)
        var open = Set(children.indices)
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !open.isEmpty {
            var polled = open.sorted().map { pollfd(fd: children[$0].output, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polled, nfds_t(polled.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                break // cannot happen with valid descriptors; the children are still reaped below
            }
            for (slot, index) in open.sorted().enumerated() where polled[slot].revents != 0 {
                let count = read(children[index].output, &chunk, chunk.count)
                if count > 0 {
                    buffers[index] += chunk[..<count]
                } else if count == 0 || errno != EINTR {
                    open.remove(index)
                }
            }
        }
        return children.enumerated().map { index, child in
            close(child.output)
            var status: Int32 = 0
            while waitpid(child.pid, &status, 0) < 0 && errno == EINTR {}
            // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import as macros.
            let signal = status & 0x7f
            let code = signal == 0 ? (status >> 8) & 0xff : 128 + signal
            let text = String(decoding: buffers[index], as: UTF8.self)
            return Outcome(pid: child.pid, status: code, lines: text.split(separator: "\n").map(String.init))
        }
    }
}
