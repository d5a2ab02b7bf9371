/// What a scenario is given: how hard to try.
struct Settings: Sendable {
    /// `--quick`: fewer iterations, for a smoke test. Figures are noisier.
    var quick = false
    /// How many measured runs each figure is the median of.
    var runs = 5
}

/// One measured figure: a line of the table and an object of the JSON output.
struct Row: Sendable {
    var name: String
    /// The median of the runs.
    var value: Double
    var unit: String
    /// Digits after the decimal point in the table.
    var decimals: Int = 1
    /// The smallest and largest run, when the figure is a median.
    var spread: (min: Double, max: Double)? = nil
    /// This row's value divided by each floor's value, labelled with the floor's short name.
    var ratios: [(floor: String, ratio: Double)] = []

    init(name: String, sample: Sample, unit: String, decimals: Int = 1) {
        self.name = name
        self.value = sample.median
        self.unit = unit
        self.decimals = decimals
        self.spread = (sample.min, sample.max)
    }

    init(name: String, value: Double, unit: String, decimals: Int = 1) {
        self.name = name
        self.value = value
        self.unit = unit
        self.decimals = decimals
    }

    /// Adds the ratio of this row's value to `floor`'s value.
    mutating func addRatio(to floor: Row, label: String) {
        ratios.append((label, value / floor.value))
    }
}

/// A named benchmark: runs its workloads and returns the rows to print.
struct Scenario: Sendable {
    var name: String
    /// One line for the table heading and `--list`.
    var summary: String
    var run: @Sendable (Settings) -> [Row]
}

/// Every scenario, in the order they run by default. Add new ones here.
let allScenarios: [Scenario] = [
    pingPongScenario,
    throughputScenario,
    loopPingPongScenario,
    loopThroughputScenario,
    timersScenario,
]
