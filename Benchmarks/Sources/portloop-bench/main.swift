// portloop-bench: PortLoop's benchmarks beside CFRunLoop, SwiftNIO, libdispatch and raw C floors.
// See Benchmarks/README.md.
//
//   portloop-bench [--quick] [--json] [--runs N] [--variants LIST] [--list] [scenario ...]
//
// Scenarios are selected by name (all of them by default, in registry order; see Registry.swift).
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch

// The child process of the cross-process scenarios (IPCSupport.swift): a hidden first argument, handled before
// anything else (no priming of CF, NIO or dispatch, no scenario).
if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "--ipc-child" {
    runIPCChild(Array(CommandLine.arguments.dropFirst(2)))
}

/// Writes a line to standard error (progress and errors; standard output stays clean for --json).
func printError(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { bytes in _ = write(STDERR_FILENO, bytes.baseAddress, bytes.count) }
}

let usage = """
    usage: portloop-bench [--quick] [--json] [--runs N] [--variants LIST] [--payloads LIST]
                          [--histograms PATH] [--list] [scenario ...]
      --quick   fewer iterations per run, for a smoke test (figures are noisier)
      --json    print a JSON array of {scenario, name, kind, value, unit, min, max, runs, ratios}
                instead of tables (keys: Benchmarks/README.md)
      --runs N  measured runs per figure, each figure being their median (default 5)
      --variants LIST
                run only these variants of each interleaved measurement, numbered from 0 in the order the
                scenario runs them (its source lists them; e.g. 0 or 0,3); the others' rows show nan. For
                profiling one variant alone: ratios need the peers' variants
      --payloads LIST
                the peers scenarios measure only these payload sizes in bytes, of 8, 4096 and 1048576
                (e.g. 1048576): for profiling one size alone
      --histograms PATH
                write the latency distributions (round trips, timer lateness; HdrHistogram percentiles) to
                PATH as JSON (keys: Benchmarks/README.md)
      --list    list the scenarios and exit
    scenarios: \(allScenarios.map(\.name).joined(separator: ", ")) (all by default)
    """

var settings = Settings()
var json = false
var histogramsPath: String?
var selectedNames: [String] = []
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--quick": settings.quick = true
    case "--runs":
        guard let text = arguments.popFirst(), let runs = Int(text), runs >= 1 else {
            printError("--runs needs a whole number of at least 1\n\(usage)")
            exit(2)
        }
        settings.runs = runs
    case "--variants":
        let list = arguments.popFirst()?.split(separator: ",").map { Int($0) } ?? []
        guard !list.isEmpty, list.allSatisfy({ ($0 ?? -1) >= 0 }) else {
            printError("--variants needs a comma-separated list of variant numbers (0, 1, …)\n\(usage)")
            exit(2)
        }
        selectedVariants = Set(list.compactMap { $0 })
    case "--payloads":
        let list = arguments.popFirst()?.split(separator: ",").map { Int($0) } ?? []
        let sizes = Set(PeerPayload.every(quick: false).map(\.size))
        guard !list.isEmpty, list.allSatisfy({ sizes.contains($0 ?? -1) }) else {
            printError("--payloads needs a comma-separated list of 8, 4096 and 1048576\n\(usage)")
            exit(2)
        }
        selectedPayloads = Set(list.compactMap { $0 })
    case "--json": json = true
    case "--histograms":
        guard let path = arguments.popFirst() else {
            printError("--histograms needs a file path\n\(usage)")
            exit(2)
        }
        histogramsPath = path
    case "--list":
        for scenario in allScenarios { print("\(scenario.name)\t\(scenario.summary)") }
        exit(0)
    case "-h", "--help":
        print(usage)
        exit(0)
    case _ where argument.hasPrefix("-"):
        printError("unknown option \(argument)\n\(usage)")
        exit(2)
    default:
        selectedNames.append(argument)
    }
}

var selected: [Scenario] = []
for name in selectedNames {
    guard let scenario = allScenarios.first(where: { $0.name == name }) else {
        printError("unknown scenario \(name)\n\(usage)")
        exit(2)
    }
    selected.append(scenario)
}
if selected.isEmpty { selected = allScenarios }

// CoreFoundation, SwiftNIO and libdispatch each open a few descriptors once per process (process-wide state) the
// first time a loop is used; do that now, so that the scenarios' descriptor checks see only what a run leaks.
CFLoopThread().stop()
NIOLoops(threads: 1).shutDown()
primeNIOSingletonGroup() // the gRPC peers run on it; it lives as long as the process
let primed = Latch<Bool>()
DispatchQueue(label: "portloop-bench.prime").async { primed.set(true) } // async: starts libdispatch's workers
_ = primed.wait()

var results: [(scenario: String, rows: [Row])] = []
for scenario in selected {
    if json { printError("running \(scenario.name)…") }
    LatencyHistograms.shared.scenario = scenario.name
    let rows = scenario.run(settings)
    results.append((scenario.name, rows))
    if !json {
        print(renderTable(scenario: scenario, rows: rows, settings: settings))
        fflush(nil) // a later scenario that fails must not take this one's table with it
    }
}
if json { print(renderJSON(results)) }
if let histogramsPath {
    let text = LatencyHistograms.shared.json()
    guard let file = fopen(histogramsPath, "w") else {
        printError("cannot write \(histogramsPath): errno \(errno)")
        exit(1)
    }
    let written = text.withCString { fputs($0, file) }
    if written < 0 || fclose(file) != 0 {
        printError("writing \(histogramsPath) failed: errno \(errno)")
        exit(1)
    }
}
