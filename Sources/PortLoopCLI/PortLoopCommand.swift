// `portloop`: looks at and talks to the services of a PortLoop namespace from a shell.
import ArgumentParser
import PortLoop

@main
struct PortLoopCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "portloop",
        abstract: "Look at and talk to the services of a PortLoop namespace.",
        discussion: """
            Exit codes, the same for every subcommand:
              0   success
              1   any other failure: a system call, a limit, a service too old
                  to answer a status query
              64  bad usage: an unknown option, a value out of range
              65  the payload is larger than the service's port takes
              66  the --file cannot be read
              69  unknown service: no live process has checked the name in
              74  the service went away during the command
              75  timed out
              76  no reply: the service dropped the request without answering
              77  refused: the service's policy does not admit this process, or
                  the namespace is not yours alone
            """,
        subcommands: [ServicesCommand.self, PingCommand.self, SendCommand.self, WatchCommand.self]
    )
}

/// The namespace option every subcommand takes.
struct NamespaceOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The namespace directory (default: $PORTLOOP_NAMESPACE, else $XDG_RUNTIME_DIR/portloop, else /tmp/portloop-<uid>).",
        valueName: "dir"))
    var namespace: String?

    /// The namespace to use; a relative or over-long path is bad usage.
    func resolved() throws -> PortNamespace {
        if let namespace {
            guard namespace.hasPrefix("/"), namespace.utf8.count <= 80 else {
                throw ValidationError("--namespace must be an absolute path of at most 80 bytes")
            }
            return PortNamespace(path: namespace)
        }
        do { return try PortNamespace.standard } catch { throw ValidationError("\(error)") }
    }
}

/// Parses a duration in seconds ("0.5", "2") for options such as --interval and --timeout.
struct Seconds: ExpressibleByArgument, Sendable {
    let value: Double

    init(_ value: Double) { self.value = value }

    init?(argument: String) {
        guard let value = Double(argument), value.isFinite, value >= 0 else { return nil }
        self.value = value
    }

    /// "1", "0.5": how --help shows a default.
    var defaultValueDescription: String { value == value.rounded() ? String(Int(value)) : String(value) }

    var duration: Duration { .nanoseconds(Int64(value * 1e9)) }
    var timeout: PortTimeout { .seconds(value) }
}

/// A service name as an argument: checked by the library's rules before anything is looked up.
func validateServiceName(_ name: String) throws {
    do { try PortNamespace.validate(name: name) } catch { throw ValidationError("bad service name: \(error)") }
}
