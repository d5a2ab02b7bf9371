import ArgumentParser
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// `portloop services`: every name in the namespace, with what its service says about itself.
struct ServicesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "services",
        abstract: "List the namespace's services: owner pid and uid, queue depth, messages received, clients.",
        discussion: """
            Each live service is asked for its status; its transport answers, so a service whose loop is busy \
            still shows (its queue depth grows). STATE is empty for a live service, "stale" for a name whose \
            process is gone (the next check-in of the name takes it over), "refused" for a service whose policy \
            does not admit this process (it tells nothing about itself), "no answer" when it did not answer \
            within --timeout, "old" for a service whose release has no status query.
            Exit code 0 whatever the services' states; 77 when the namespace directory is not this user's.
            """
    )

    @OptionGroup var options: NamespaceOptions

    @Option(help: ArgumentHelp("How long to wait for each service, in seconds.", valueName: "seconds"))
    var timeout: Seconds = Seconds(2)

    func validate() throws {
        guard timeout.value > 0 else { throw ValidationError("--timeout must be more than 0") }
    }

    func run() throws {
        let namespace = try options.resolved()
        failing { () throws(CommandFailure) in
            let names = try serviceNames(in: namespace.path)
            let rows = names.map { row(for: $0, in: namespace) }
            printTable([["NAME", "PID", "UID", "QUEUE", "RECEIVED", "CLIENTS", "STATE"]] + rows)
        }
    }

    /// One line of the table for `name`.
    func row(for name: String, in namespace: PortNamespace) -> [String] {
        let unknown = [name, "-", "-", "-", "-", "-"]
        let status: ServiceStatus
        do throws(PortError) {
            let right = try namespace.lookUp(name, timeout: timeout.timeout)
            status = try right.serviceStatus(timeout: timeout.timeout)
        } catch .unknownService, .invalidDestination {
            return unknown + ["stale"]
        } catch .refused {
            return unknown + ["refused"]
        } catch .timedOut {
            return unknown + ["no answer"]
        } catch .invalidArgument {
            return unknown + ["old"]
        } catch {
            return unknown + ["error: \(error)"]
        }
        return [name, "\(status.processID)", "\(status.userID)", "\(status.queueDepth)/\(status.queueLimit)",
                "\(status.messagesReceived)", "\(status.connections)", ""]
    }
}

/// The names of the sockets in a namespace directory, sorted; none when the directory does not exist (no
/// service has checked in yet). Lock files (".NAME.lock") and anything that is not a socket are skipped.
func serviceNames(in directory: String) throws(CommandFailure) -> [String] {
    guard let handle = opendir(directory) else {
        let error = errno
        if error == ENOENT || error == ENOTDIR { return [] }
        let reason = String(cString: strerror(error))
        throw CommandFailure(message: "cannot read the namespace \(directory): \(reason)",
                             code: error == EACCES ? CommandFailure.refused : CommandFailure.otherFailure)
    }
    defer { closedir(handle) }
    // The rule look-ups apply (a squatter must not stand in for a service): ours or root's, writable by nobody else.
    var directoryInfo = stat()
    guard fstat(dirfd(handle), &directoryInfo) == 0 else {
        throw CommandFailure(message: "cannot read the namespace \(directory)", code: CommandFailure.otherFailure)
    }
    guard directoryInfo.st_uid == geteuid() || directoryInfo.st_uid == 0, directoryInfo.st_mode & 0o022 == 0 else {
        throw CommandFailure(message: "refused: the namespace \(directory) is another user's, or writable by others",
                             code: CommandFailure.refused)
    }
    var names: [String] = []
    while let entry = readdir(handle) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        guard !name.hasPrefix("."), (try? PortNamespace.validate(name: name)) != nil else { continue }
        var info = stat()
        guard lstat(directory + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK else { continue }
        names.append(name)
    }
    return names.sorted()
}

/// Prints rows as left-aligned columns two spaces apart (the last column unpadded).
func printTable(_ rows: [[String]]) {
    guard let columns = rows.first?.count else { return }
    let widths = (0..<columns).map { column in rows.map { $0[column].count }.max() ?? 0 }
    for row in rows {
        var line = ""
        for (column, cell) in row.enumerated() {
            line += column == columns - 1 ? cell : cell.padding(to: widths[column] + 2)
        }
        while line.hasSuffix(" ") { line.removeLast() }
        printLine(line)
    }
}

extension String {
    func padding(to width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}
