import PortLoopToolSupport

/// The daemon's command line.
///
/// Flags take their value as the next argument or after `=` (`--workers 4`, `--workers=4`). Limits keep the
/// numbers inside what the ports allow: a worker's fence reply needs room in the dispatcher's control port,
/// whose queue limit is the worker count, and every client has at most one request outstanding, so the
/// service port's 1024-message queue never blocks them.
struct Options: Sendable, Equatable {
    /// Worker loop threads (`--workers`).
    var workers = 2
    /// Seconds between throughput lines (`--interval`).
    var interval = 1.0
    /// Requests the built-in load generator sends before the daemon stops by itself (`--self-test`).
    var selfTestRequests: Int?
    /// Load-generating client threads (`--clients`); nil means 4 with `--self-test`, none otherwise.
    var clients: Int?
    /// Seconds to run before stopping as if signalled (`--duration`).
    var duration: Double?
    /// `--help`: print the usage and exit 0.
    var help = false

    static let workerRange = 1...64
    static let clientRange = 0...256
    static let intervalRange = 0.05...3600.0
    static let selfTestRange = 1...1_000_000_000
    static let durationRange = 0.001...31_536_000.0

    /// How many client threads to start.
    var clientCount: Int { clients ?? (selfTestRequests != nil ? 4 : 0) }

    /// The usage text for `--help` and for errors.
    static let usage = """
        usage: portloop-echod [--workers N] [--interval S] [--clients K] [--self-test N] [--duration S] [--help]

        An echo service on PortLoop: a dispatcher run loop on the main thread receives requests on a service
        port and hands them to N worker loop threads, which answer on each request's reply port with the
        payload uppercased and tagged with the worker's number. SIGINT or SIGTERM stops it gracefully: requests
        already queued are answered, later ones refused, then a summary is printed and it exits 0. A second
        signal while stopping exits at once (status 128 + the signal's number).

        PortLoop's ports live inside one process, so the service's clients are threads of this process: the
        built-in load generator.

          --workers N     worker loop threads, \(workerRange.lowerBound)…\(workerRange.upperBound) (default 2)
          --interval S    seconds between throughput lines, \(intervalRange.lowerBound)…\(Int(intervalRange.upperBound)) (default 1)
          --clients K     load-generating client threads, \(clientRange.lowerBound)…\(clientRange.upperBound); each sends one request at a
                          time and checks every reply (default 4 with --self-test, otherwise 0: no load)
          --self-test N   send N requests from the clients, check every reply, print a summary and exit:
                          0 if every reply was right, 1 otherwise
          --duration S    stop after S seconds as if signalled
          --help          print this and exit

        exit status: 0 success, 1 a failed self-test or a runtime error, 2 bad usage
        """

    /// Parses the arguments after the program name.
    static func parse(_ arguments: [String]) throws(OptionsError) -> Options {
        var options = Options()
        var flags = CommandLineFlags(arguments)
        while flags.next() {
            let flag = flags.flag
            func value() throws(OptionsError) -> String {
                do { return try flags.value() } catch { throw OptionsError(error) }
            }
            switch flag {
            case "--help", "-h":
                do { try flags.expectNoValue() } catch { throw OptionsError(error) }
                options.help = true
            case "--workers":
                options.workers = try integer(try value(), flag: flag, in: workerRange)
            case "--clients":
                options.clients = try integer(try value(), flag: flag, in: clientRange)
            case "--self-test":
                options.selfTestRequests = try integer(try value(), flag: flag, in: selfTestRange)
            case "--interval":
                options.interval = try seconds(try value(), flag: flag, in: intervalRange)
            case "--duration":
                options.duration = try seconds(try value(), flag: flag, in: durationRange)
            default:
                throw flags.argument.hasPrefix("-") ? .unknownFlag(flags.argument) : .unexpectedArgument(flags.argument)
            }
        }
        if options.selfTestRequests != nil && options.clients == 0 {
            throw .invalidValue(flag: "--clients", value: "0", expected: "at least 1 with --self-test")
        }
        return options
    }

    private static func integer(_ text: String, flag: String, in range: ClosedRange<Int>) throws(OptionsError) -> Int {
        guard let number = Int(text), range.contains(number) else {
            throw .invalidValue(flag: flag, value: text, expected: "an integer in \(range.lowerBound)…\(range.upperBound)")
        }
        return number
    }

    private static func seconds(_ text: String, flag: String, in range: ClosedRange<Double>) throws(OptionsError) -> Double {
        guard let number = Double(text), number.isFinite, range.contains(number) else {
            throw .invalidValue(flag: flag, value: text,
                                expected: "seconds in \(range.lowerBound)…\(Int(range.upperBound))")
        }
        return number
    }
}

/// Why the command line was refused; the daemon prints it with the usage and exits 2.
enum OptionsError: Error, Equatable, CustomStringConvertible {
    case unknownFlag(String)
    case unexpectedArgument(String)
    case missingValue(flag: String)
    case unexpectedValue(flag: String)
    case invalidValue(flag: String, value: String, expected: String)

    init(_ problem: CommandLineFlags.Problem) {
        switch problem {
        case let .missingValue(flag): self = .missingValue(flag: flag)
        case let .unexpectedValue(flag): self = .unexpectedValue(flag: flag)
        }
    }

    var description: String {
        switch self {
        case let .unknownFlag(flag): "unknown flag '\(flag)'"
        case let .unexpectedArgument(argument): "unexpected argument '\(argument)'"
        case let .missingValue(flag): "\(flag) needs a value"
        case let .unexpectedValue(flag): "\(flag) takes no value"
        case let .invalidValue(flag, value, expected): "\(flag) '\(value)': expected \(expected)"
        }
    }
}
