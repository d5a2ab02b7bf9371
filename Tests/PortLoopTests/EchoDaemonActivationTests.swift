import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `portloop-echod` under systemd socket activation, with the shipped units (Examples/systemd): started by
/// `systemd-socket-activate` (from Debian's `systemd` package) on its first client's connection, as systemd
/// would start portloop-echod.service from portloop-echod.socket.
///
/// Without the tool these tests are skipped with a note, except under `make test`, which sets
/// PORTLOOP_REQUIRE_SOCKET_ACTIVATION=1 (and whose `deps` installs the package): then they fail and say why.
@Suite("Example daemon under socket activation (Examples/systemd)", .serialized)
struct EchoDaemonActivationTests {
    /// The shipped units, read from the repository.
    struct Units {
        static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Examples/systemd")
        let socket: [String: [String]]
        let service: [String: [String]]

        init() throws {
            socket = try Self.read("portloop-echod.socket")
            service = try Self.read("portloop-echod.service")
        }

        /// `Key=value` lines, comments and section headers left out; a key may repeat.
        static func read(_ name: String) throws -> [String: [String]] {
            let text = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
            var entries: [String: [String]] = [:]
            for line in text.split(separator: "\n") where !line.hasPrefix("#") && !line.hasPrefix("[") {
                guard let equals = line.firstIndex(of: "=") else { continue }
                entries[String(line[..<equals]), default: []].append(String(line[line.index(after: equals)...]))
            }
            return entries
        }

        /// The socket's file name, the last part of ListenSequentialPacket.
        var socketName: String? { socket["ListenSequentialPacket"]?.first?.split(separator: "/").last.map(String.init) }
        var descriptorName: String? { socket["FileDescriptorName"]?.first }
        /// ExecStart's arguments after the executable.
        var daemonArguments: [String] {
            (service["ExecStart"]?.first ?? "").split(separator: " ").dropFirst().map(String.init)
        }
    }

    static let required = ProcessInfo.processInfo.environment["PORTLOOP_REQUIRE_SOCKET_ACTIVATION"] == "1"

    /// `name` on the PATH or in /usr/bin or /bin; nil when it is not installed.
    static func tool(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin"]
        return directories.map { $0 + "/" + name }.first { access($0, X_OK) == 0 }
    }

    static let activate = tool("systemd-socket-activate")
    static let missing = "systemd-socket-activate is not installed: `make deps` installs Debian's systemd package, or "
        + "apt-get install systemd"

    /// The tool, or a recorded failure saying it is missing (the test is only enabled then under `make test`).
    static func activateTool() -> String? {
        if activate == nil { Issue.record(Comment(rawValue: missing)) }
        return activate
    }

    @Test("the units agree with each other and with what the check-in adopts")
    func unitsAgree() throws {
        let units = try Units()
        #expect(units.socket["ListenSequentialPacket"]?.first?.hasPrefix("%t/portloop/") == true,
                "the socket listens in the standard namespace, $XDG_RUNTIME_DIR/portloop")
        #expect(units.socketName != nil && units.socketName == units.descriptorName,
                "the socket file and the passed descriptor are both named after the service")
        let arguments = units.daemonArguments
        #expect(arguments.first == "serve")
        let name = arguments.firstIndex(of: "--name").map { arguments[$0 + 1] }
        #expect(name == units.descriptorName, "the daemon checks in the name systemd passes the socket under")
        #expect(units.socket["SocketMode"] == ["0600"] && units.socket["DirectoryMode"] == ["0700"])
        #expect(units.service["Requires"] == ["portloop-echod.socket"])
        try PortNamespace.validate(name: name ?? "")
    }

    @Test("a client's look-up starts the daemon, which adopts the socket and answers; SIGTERM ends it cleanly",
          .enabled(if: activate != nil || required, Comment(rawValue: missing)))
    func activated() throws {
        guard let activate = Self.activateTool() else { return }
        let units = try Units()
        let name = try #require(units.descriptorName)
        let space = TemporaryNamespace()
        let socketPath = space.path + "/" + (units.socketName ?? name)
        // What systemd does with the .socket, and then with the .service's ExecStart.
        let daemon = try EchodProcess(executable: activate, [
            "--seqpacket", "--listen=" + socketPath, "--fdname=" + (units.descriptorName ?? name),
            EchodProcess.daemonPath] + units.daemonArguments + ["--namespace", space.path])
        #expect(eventually(within: 30) { FileManager.default.fileExists(atPath: socketPath) }, "\(daemon.transcript)")
        #expect(!daemon.stdout.contains("portloop-echod:"), "nothing runs the daemon before a client connects")

        let load = try EchodProcess(["load", "--namespace", space.path, "--name", name,
                                     "--processes", "2", "--threads", "2", "--requests", "200"])
        #expect(load.waitForExit(seconds: 60) == 0, "\(load.transcript)\n\(daemon.transcript)")
        #expect(load.stdout.contains("load: 800 requests answered right"), "\(load.stdout)")
        #expect(daemon.waitForOutput("adopted systemd's socket for \(name) in \(space.path)", seconds: 30),
                "\(daemon.transcript)")

        kill(daemon.pid, SIGTERM) // systemd-socket-activate exec'd the daemon: the same process
        #expect(daemon.waitForExit(seconds: 30) == 0, "\(daemon.transcript)")
        #expect(daemon.stdout.contains("withdrew \(name)"), "\(daemon.stdout)")
        #expect(daemon.line(startingWith: "summary: stopped (SIGTERM)")?.contains("800 requests answered") == true,
                "\(daemon.stdout)")
        // Nobody listens any more; systemd-socket-activate, unlike systemd with RemoveOnStop=yes, leaves the file,
        // and it goes with the namespace directory.
        #expect(throws: PortError.unknownService(name)) { try space.namespace.lookUp(name) }
        #expect(processesMentioning(space.path).isEmpty)
    }

    @Test("a socket of the wrong type (a stream socket) is refused at check-in: exit 1, and says why",
          .enabled(if: activate != nil || required, Comment(rawValue: missing)))
    func wrongSocketType() throws {
        guard let activate = Self.activateTool() else { return }
        let space = TemporaryNamespace()
        let socketPath = space.path + "/streamy"
        let daemon = try EchodProcess(executable: activate, [
            "--listen=" + socketPath, "--fdname=streamy", EchodProcess.daemonPath, "serve", "--name", "streamy"])
        #expect(eventually(within: 30) { FileManager.default.fileExists(atPath: socketPath) }, "\(daemon.transcript)")
        // A stream client's connection starts the daemon.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8)) }
        // The file appears at bind(), a moment before listen(): a connect in between is refused, so try again.
        let connected = eventually(within: 30) {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            } == 0
        }
        #expect(connected, "\(daemon.transcript)")
        #expect(daemon.waitForExit(seconds: 30) == 1, "\(daemon.transcript)")
        #expect(daemon.stderr.contains("could not check in streamy"), "\(daemon.stderr)")
        #expect(daemon.stderr.contains("not a listening SOCK_SEQPACKET socket"), "\(daemon.stderr)")
        #expect(processesMentioning(space.path).isEmpty)
    }

    @Test("systemd-analyze accepts the units (with the built daemon in ExecStart)",
          .enabled(if: tool("systemd-analyze") != nil || required, Comment(rawValue: "systemd-analyze is not installed")))
    func unitsVerify() throws {
        guard let analyze = Self.tool("systemd-analyze") else {
            Issue.record("systemd-analyze is not installed: `make deps` installs Debian's systemd package")
            return
        }
        // A copy whose ExecStart names the built binary, and a runtime directory of its own for %t.
        let space = TemporaryNamespace()
        let units = space.path + "/units"
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: false)
        for file in ["portloop-echod.socket", "portloop-echod.service"] {
            let text = try String(contentsOf: Units.directory.appendingPathComponent(file), encoding: .utf8)
                .replacingOccurrences(of: "%h/.local/bin/portloop-echod", with: EchodProcess.daemonPath)
            try text.write(toFile: units + "/" + file, atomically: true, encoding: .utf8)
        }
        let verify = Process()
        verify.executableURL = URL(fileURLWithPath: analyze)
        verify.arguments = ["--user", "verify", units + "/portloop-echod.socket", units + "/portloop-echod.service"]
        verify.environment = ProcessInfo.processInfo.environment.merging(["XDG_RUNTIME_DIR": space.path]) { $1 }
        let errors = Pipe()
        verify.standardError = errors
        verify.standardOutput = errors
        try verify.run()
        let output = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        verify.waitUntilExit()
        #expect(verify.terminationStatus == 0, "\(output)")
        #expect(output.isEmpty, "\(output)")
    }
}
