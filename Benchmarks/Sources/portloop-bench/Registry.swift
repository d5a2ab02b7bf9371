/// What a scenario is given: how hard to try.
struct Settings: Sendable {
    /// `--quick`: fewer iterations, for a smoke test. Figures are noisier.
    var quick = false
    /// How many measured runs each figure is the median of (`--runs`, at least 5 by default).
    var runs = 5
}

/// One measured figure: a line of the table and an object of the JSON output.
struct Row: Sendable {
    /// Whose figure it is. Every `ours` row gets its ratio to every `peer` and `floor` row with the same
    /// `compareKey` in the same scenario.
    enum Kind: String, Sendable {
        /// PortLoop: its run loop (`loop:` rows) or its ports without a loop (`ports:` rows).
        case ours
        /// Another event loop measured in the same run: CFRunLoop (`CF:`), SwiftNIO (`NIO:`), libdispatch
        /// (`dispatch:`).
        case peer
        /// The same workload written directly in C on eventfds or libevent (`C floor:`).
        case floor
        /// A counter or a side figure (wake-ups per message, a producer's own time…): no ratio.
        case counter
    }

    var name: String
    var kind: Kind
    /// The median of the runs.
    var value: Double
    var unit: String
    /// Digits after the decimal point in the table.
    var decimals: Int = 1
    /// The smallest and largest run, and how many runs, when the figure is a median.
    var spread: (min: Double, max: Double)? = nil
    var runs: Int? = nil
    /// For peers and floors: the short name that labels ratios to this row ("NIO", "CF blocks", …).
    var shortName: String? = nil
    /// Rows compare (get ratios) only when their keys are equal; by default the unit.
    var compareKey: String
    /// This row's value divided by each peer's or floor's value, labelled with the peer's short name.
    var ratios: [(peer: String, ratio: Double)] = []

    init(_ kind: Kind, _ name: String, sample: Sample, unit: String, decimals: Int = 1,
         short: String? = nil, key: String? = nil) {
        self.kind = kind
        self.name = name
        self.value = sample.median
        self.unit = unit
        self.decimals = decimals
        self.spread = (sample.min, sample.max)
        self.runs = sample.values.count
        self.shortName = short
        self.compareKey = key ?? unit
    }

    init(_ kind: Kind, _ name: String, value: Double, unit: String, decimals: Int = 1,
         short: String? = nil, key: String? = nil) {
        self.kind = kind
        self.name = name
        self.value = value
        self.unit = unit
        self.decimals = decimals
        self.shortName = short
        self.compareKey = key ?? unit
    }

    /// Adds the ratio of this row's value to another row's value.
    mutating func addRatio(to other: Row, label: String) {
        ratios.append((label, value / other.value))
    }

    /// Adds the ratio of this row's value to a fixed ideal value rather than to a measured row.
    mutating func addRatio(toIdeal ideal: Double, label: String) {
        ratios.append((label, value / ideal))
    }
}

extension Array where Element == Row {
    /// Gives every `ours` row its ratio to every `peer` and `floor` row with the same compare key, in row
    /// order (ours ÷ peer). Rows that already have ratios keep them, first.
    func withPeerRatios() -> [Row] {
        var rows = self
        for index in rows.indices where rows[index].kind == .ours {
            // A peer at zero (an idle loop's CPU) or not measured gives no meaningful ratio.
            for other in self where (other.kind == .peer || other.kind == .floor)
                && other.compareKey == rows[index].compareKey && other.value.isFinite && other.value != 0 {
                rows[index].addRatio(to: other, label: other.shortName ?? other.name)
            }
        }
        return rows
    }
}

/// A named benchmark: runs its workloads and returns the rows to print.
struct Scenario: Sendable {
    var name: String
    /// One line for the table heading and `--list`.
    var summary: String
    var run: @Sendable (Settings) -> [Row]
}

/// Every scenario, in the order they run by default. Add new ones here (one file per scenario).
let allScenarios: [Scenario] = [
    pingPongScenario,
    throughputScenario,
    timersScenario,
    timerFireScenario,
    portSetScenario,
    idleScenario,
    memoryScenario,
    allocsScenario,
    ipcPingPongScenario,
    ipcThroughputScenario,
    peersPingPongScenario,
    peersThroughputScenario,
    peersClientsScenario,
    largePayloadsScenario,
]
