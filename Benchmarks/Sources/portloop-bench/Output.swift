/// The plain-text table of one scenario.
func renderTable(scenario: Scenario, rows: [Row], settings: Settings) -> String {
    let header = ["name", "value", "unit", "min … max", "ratio (ours ÷ peer)"]
    let cells: [[String]] = rows.map { row in
        [
            row.name,
            formatNumber(row.value, decimals: row.decimals),
            row.unit,
            row.spread.map { "\(formatNumber($0.min, decimals: row.decimals)) … \(formatNumber($0.max, decimals: row.decimals))" } ?? "",
            row.ratios.map { "\(formatRatio($0.ratio))× \($0.peer)" }.joined(separator: "  "),
        ]
    }
    var widths = header.map(\.count)
    for line in cells {
        for (column, cell) in line.enumerated() { widths[column] = max(widths[column], cell.count) }
    }
    // Numbers right-aligned, text left-aligned; the last column is not padded.
    func format(_ line: [String]) -> String {
        var parts: [String] = []
        for (column, cell) in line.enumerated() {
            let padding = String(repeating: " ", count: widths[column] - cell.count)
            if column == line.count - 1 { parts.append(cell) }
            else if column == 1 || column == 3 { parts.append(padding + cell) }
            else { parts.append(cell + padding) }
        }
        var text = parts.joined(separator: "  ")
        while text.last == " " { text.removeLast() }
        return text
    }
    var text = "== \(scenario.name): \(scenario.summary) (median of \(settings.runs) runs\(settings.quick ? ", --quick" : ""))\n"
    text += format(header) + "\n"
    text += String(repeating: "-", count: widths.reduce(0, +) + 2 * (widths.count - 1)) + "\n"
    for line in cells { text += format(line) + "\n" }
    return text
}

/// One JSON object per row, in an array:
/// `{"scenario", "name", "kind", "value", "unit", "min", "max", "runs", "ratios": {peer: ours ÷ peer}}`
/// (`min`, `max` and `runs` are null for a row that is not a median of runs; see Benchmarks/README.md).
func renderJSON(_ results: [(scenario: String, rows: [Row])]) -> String {
    var objects: [String] = []
    for (scenario, rows) in results {
        for row in rows {
            let ratios = row.ratios.map { "\(jsonString($0.peer)): \(jsonNumber($0.ratio))" }.joined(separator: ", ")
            objects.append("  {\"scenario\": \(jsonString(scenario)), \"name\": \(jsonString(row.name)), "
                + "\"kind\": \(jsonString(row.kind.rawValue)), \"value\": \(jsonNumber(row.value)), "
                + "\"unit\": \(jsonString(row.unit)), \"min\": \(row.spread.map { jsonNumber($0.min) } ?? "null"), "
                + "\"max\": \(row.spread.map { jsonNumber($0.max) } ?? "null"), "
                + "\"runs\": \(row.runs.map { "\($0)" } ?? "null"), \"ratios\": {\(ratios)}}")
        }
    }
    return objects.isEmpty ? "[]" : "[\n" + objects.joined(separator: ",\n") + "\n]"
}

/// A JSON number, or null if it is not finite.
func jsonNumber(_ value: Double) -> String { value.isFinite ? "\(value)" : "null" }

/// A ratio with two decimals, or three significant digits when it is small.
func formatRatio(_ ratio: Double) -> String {
    guard ratio.isFinite, ratio != 0, abs(ratio) < 0.1 else { return formatNumber(ratio, decimals: 2) }
    var decimals = 2
    var scaled = abs(ratio)
    while scaled < 0.1 && decimals < 8 { scaled *= 10; decimals += 1 }
    return formatNumber(ratio, decimals: decimals)
}

/// A JSON string literal.
func jsonString(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\t": out += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out + "\""
}

/// A fixed-point number with thousands separators, e.g. `1,234,567.8`. No Foundation needed.
func formatNumber(_ value: Double, decimals: Int) -> String {
    guard value.isFinite else { return "\(value)" }
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = (abs(value) * scale).rounded()
    guard scaled < 9e18 else { return "\(value)" }
    let units = UInt64(scaled), divisor = UInt64(scale)
    let whole = String(units / divisor)
    var grouped = ""
    for (index, digit) in whole.enumerated() {
        if index > 0 && (whole.count - index) % 3 == 0 { grouped.append(",") }
        grouped.append(digit)
    }
    var text = (value < 0 && units > 0 ? "-" : "") + grouped
    if decimals > 0 {
        let fraction = String(units % divisor)
        text += "." + String(repeating: "0", count: decimals - fraction.count) + fraction
    }
    return text
}
