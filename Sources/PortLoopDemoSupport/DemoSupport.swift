// What both demos share: the clock, number formatting, joinable named threads, stderr lines.
// `package` access: the demos' executables use it, nothing outside this package sees it.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - Clock

/// CLOCK_MONOTONIC in nanoseconds: the clock of the port layer's timeouts and the run loop's timers.
package func now() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// Sleeps until a CLOCK_MONOTONIC time in nanoseconds.
package func sleep(until deadline: Int64) {
    var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
}

/// Whole nanoseconds of a duration (the demo's durations are far from overflowing).
package func nanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
}

// MARK: - Formatting (no Foundation)

/// `value` with exactly `decimals` decimal places.
package func fixed(_ value: Double, _ decimals: Int) -> String {
    var scale = 1
    for _ in 0..<decimals { scale *= 10 }
    let scaled = Int((value * Double(scale)).rounded())
    let sign = scaled < 0 ? "-" : ""
    let magnitude = abs(scaled)
    guard decimals > 0 else { return sign + String(magnitude) }
    let fraction = String(magnitude % scale)
    return sign + String(magnitude / scale) + "." + String(repeating: "0", count: decimals - fraction.count) + fraction
}

package func padLeft(_ text: String, _ width: Int) -> String {
    String(repeating: " ", count: max(0, width - text.count)) + text
}

package func padRight(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

/// Nanoseconds as microseconds, e.g. "41 µs" (one decimal below 10 µs).
package func micros(_ nanoseconds: Int64) -> String {
    let value = Double(nanoseconds) / 1000
    return (value < 10 ? fixed(value, 1) : String(Int(value.rounded()))) + " µs"
}

/// Nanoseconds as milliseconds with one decimal, e.g. "149.9 ms".
package func millis(_ nanoseconds: Int64) -> String { fixed(Double(nanoseconds) / 1e6, 1) + " ms" }

/// Seconds with up to two decimals, e.g. "1.5 s".
package func seconds(_ value: Double) -> String {
    var text = fixed(value, 2)
    while text.hasSuffix("0") { text.removeLast() }
    if text.hasSuffix(".") { text.removeLast() }
    return text + " s"
}

/// The nearest-rank percentile of sorted values.
package func percentile(_ sorted: [Int64], _ p: Double) -> Int64 {
    guard !sorted.isEmpty else { return 0 }
    let rank = Int((p / 100 * Double(sorted.count)).rounded(.up))
    return sorted[min(sorted.count - 1, max(0, rank - 1))]
}

/// Writes a line to standard error.
package func printError(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { bytes in _ = write(STDERR_FILENO, bytes.baseAddress, bytes.count) }
}

// MARK: - Threads

/// A joinable, named POSIX thread running a closure. The demo's threads block in the port layer and in
/// the run loop, so they are real threads, not tasks.
package final class DemoThread: @unchecked Sendable {
    private final class Body {
        let name: String
        let run: @Sendable () -> Void
        init(name: String, run: @escaping @Sendable () -> Void) {
            self.name = name
            self.run = run
        }
    }
    private var handle = pthread_t()

    package init(name: String, _ body: @escaping @Sendable () -> Void) {
        let context = Unmanaged.passRetained(Body(name: name, run: body)).toOpaque()
        let rc = pthread_create(&handle, nil, { context in
            let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
            nameCurrentThread(body.name)
            body.run()
            return nil
        }, context)
        precondition(rc == 0, "pthread_create failed: \(rc)")
    }

    package func join() { pthread_join(handle, nil) }
}

/// Names the calling thread, as `top -H` and debuggers show it (pthread_setname_np is not visible from Swift
/// without _GNU_SOURCE; writing the thread's comm file does the same). The kernel keeps 15 bytes: ASCII names.
package func nameCurrentThread(_ name: String) {
    let descriptor = open("/proc/thread-self/comm", O_WRONLY)
    guard descriptor >= 0 else { return }
    defer { close(descriptor) }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
}
