#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Prints a line on standard output and flushes it, so that a pipe (a test, `| tee`) sees each throughput
/// line when it happens rather than when the buffer fills or the process exits.
func say(_ line: String) {
    print(line)
    // `print` writes to C's stdout; fflush(NULL) flushes it without naming the global `stdout`, which Swift 6
    // refuses as shared mutable state.
    fflush(nil)
}

/// Prints a line on standard error, unbuffered: one write(2), so lines from several threads do not interleave.
func complain(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress! + offset, $0.count - offset) }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return }
        offset += written
    }
}

/// Number formatting without Foundation.
enum Format {
    /// `1234567` as `1,234,567`.
    static func grouped(_ number: Int) -> String {
        let digits = String(number.magnitude)
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return number < 0 ? "-" + out : out
    }

    /// `value` with `decimals` digits after the point, rounded half away from zero.
    static func fixed(_ value: Double, _ decimals: Int) -> String {
        guard value.isFinite else { return "\(value)" }
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let scaled = Int((value.magnitude * scale).rounded())
        let whole = scaled / Int(scale)
        let fraction = String(scaled % Int(scale))
        let padded = String(repeating: "0", count: max(0, decimals - fraction.count)) + fraction
        return (value < 0 && scaled != 0 ? "-" : "") + "\(whole)" + (decimals > 0 ? "." + padded : "")
    }

    /// A rate per second, rounded to a whole number and grouped.
    static func rate(_ count: Int, seconds: Double) -> String {
        seconds > 0 ? grouped(Int((Double(count) / seconds).rounded())) : "0"
    }

    /// `text` right-aligned in `width` columns.
    static func padded(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }
}
