// portloop-bench: PortLoop's benchmarks against raw C floors. See Benchmarks/README.md.
//
//   portloop-bench [--quick] [--json] [--list] [scenario ...]
//
// Scenarios are selected by name (all of them by default, in registry order; see Registry.swift).
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Writes a line to standard error (progress and errors; standard output stays clean for --json).
func printError(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { bytes in _ = write(STDERR_FILENO, bytes.baseAddress, bytes.count) }
}

let usage = """
    usage: portloop-bench [--quick] [--json] [--list] [scenario ...]
      --quick   fewer iterations per run (a smoke test; figures are noisier)
      --json    print a JSON array of {scenario, name, value, unit} instead of tables
      --list    list the scenarios and exit
    scenarios: \(allScenarios.map(\.name).joined(separator: ", ")) (all by default)
    """

var settings = Settings()
var json = false
var selectedNames: [String] = []
for argument in CommandLine.arguments.dropFirst() {
    switch argument {
    case "--quick": settings.quick = true
    case "--json": json = true
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

var results: [(scenario: String, rows: [Row])] = []
for scenario in selected {
    if json { printError("running \(scenario.name)…") }
    let rows = scenario.run(settings)
    results.append((scenario.name, rows))
    if !json { print(renderTable(scenario: scenario, rows: rows, settings: settings)) }
}
if json { print(renderJSON(results)) }
