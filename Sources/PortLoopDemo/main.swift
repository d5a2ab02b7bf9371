// portloop-demo: port-driven wake-ups of a PortLoop run loop, made visible in a terminal.
//
//   portloop-demo [--duration S] [--producers N] [--burst N] [--quiet] [--help]
//
// Options.swift parses the command line, Demo.swift runs the loop thread and the producers (Producers.swift),
// Trace.swift records and prints what the loop does, Summary.swift closes with the numbers.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

do throws(Options.UsageError) {
    switch try Options.parse(Array(CommandLine.arguments.dropFirst())) {
    case .help:
        print(Options.usage)
        exit(0)
    case let .run(options):
        exit(runDemo(options))
    }
} catch {
    printError("portloop-demo: \(error.message)\n\(Options.usage)")
    exit(2)
}
