// portloop-demo: two threads exchanging messages over PortLoop ports.
//
// A "pong" thread creates its own port (a receive right cannot leave the thread that owns it: it is
// ~Copyable and cannot be captured by an escaping closure) and hands a send right to it out through a
// bootstrap port, as the reply port of a hello message. A "ping" thread, owning a reply port of its own,
// sends N requests to pong, each carrying a send right to that reply port; pong answers every request on
// the reply port it came with. Ping measures each round trip and the demo prints a summary.
//
//   portloop-demo [--count N]
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PortLoop

// MARK: - Command line

let usage = """
    usage: portloop-demo [--count N] [--help]

    Two threads, "ping" and "pong", each owning a port, exchange N request/reply round trips: each request
    carries a reply port (a send right to ping's port), pong answers on it. Prints a few of the exchanges
    with timestamps (µs since start) and a summary: round trips, mean, p50 and p99 latency.

      --count N   round trips to make (default 10000, 1…10000000)
      --help      show this text
    """

func fail(_ message: String) -> Never {
    var text = "portloop-demo: \(message)\n"
    text.withUTF8 { bytes in _ = write(STDERR_FILENO, bytes.baseAddress, bytes.count) }
    exit(2)
}

func parseCount(_ text: String) -> Int {
    guard let value = Int(text), (1...10_000_000).contains(value) else {
        fail("--count wants a whole number from 1 to 10000000, not '\(text)'\n\(usage)")
    }
    return value
}

/// The round-trip count from the command line.
func parseArguments() -> Int {
    var count = 10_000
    var arguments = CommandLine.arguments.dropFirst()
    while let argument = arguments.popFirst() {
        switch argument {
        case "-h", "--help":
            print(usage)
            exit(0)
        case "--count", "-n":
            guard let value = arguments.popFirst() else { fail("--count needs a value\n\(usage)") }
            count = parseCount(value)
        case _ where argument.hasPrefix("--count="):
            count = parseCount(String(argument.dropFirst("--count=".count)))
        default:
            fail("unknown argument '\(argument)'\n\(usage)")
        }
    }
    return count
}
let count = parseArguments()

// MARK: - Helpers

/// CLOCK_MONOTONIC in nanoseconds.
func now() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

let start = now()

/// Prints a line stamped with the microseconds since the demo started.
func log(_ who: String, _ text: String) {
    let micros = Double(now() - start) / 1000
    let stamp = String(Int(micros.rounded()))
    print("[\(String(repeating: " ", count: max(0, 9 - stamp.count)))\(stamp) µs] \(who): \(text)")
}

/// One decimal place, without Foundation.
func format1(_ value: Double) -> String {
    let tenths = Int((value * 10).rounded())
    return "\(tenths / 10).\(abs(tenths % 10))"
}

/// A joinable POSIX thread running a closure (the threads block in the port layer: real threads, not tasks).
final class DemoThread: @unchecked Sendable {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
    private var handle = pthread_t()

    init(_ body: @escaping @Sendable () -> Void) {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        let rc = pthread_create(&handle, nil, { context in
            Unmanaged<Body>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        precondition(rc == 0, "pthread_create failed: \(rc)")
    }

    func join() { pthread_join(handle, nil) }
}

/// What the ping thread measured, read by the main thread after joining it (the join orders the accesses).
final class Measurements: @unchecked Sendable {
    var roundTrips: [Int64] = []
    var error: PortError?
}

/// Message ids: requests carry their sequence number; these two are control messages.
let helloID: Int32 = -1
let quitID: Int32 = -2
let shown = 3 // exchanges printed at the start
let timeout = PortTimeout.after(.seconds(5)) // nothing in this demo waits that long unless it is broken

// MARK: - The two threads

/// Runs ping and pong for `count` round trips; returns the round-trip times in nanoseconds.
func exchange(count: Int) -> [Int64] {
    // The bootstrap port: how pong's send right reaches the main thread.
    let bootstrap: PortReceiveRight
    do { bootstrap = try PortReceiveRight() } catch { fail("cannot create a port: \(error)") }
    let bootstrapRight = bootstrap.makeSendRight()

    let pong = DemoThread {
        do throws(PortError) {
            // The receive right is created here, on the thread that receives on it, and never leaves it.
            let port = try PortReceiveRight()
            try bootstrapRight.send(id: helloID, replyPort: port.makeSendRight(), timeout: timeout)
            var answered = 0
            while true {
                let request = try port.receive(timeout: .forever)
                if request.id == quitID { break }
                guard let reply = request.replyPort else { continue }
                try reply.send(id: request.id, bytes: request.payload, timeout: timeout)
                answered += 1
                if request.id < shown {
                    log("pong", "request #\(request.id) (\(request.payload.count) bytes) on \(port.name), replied on \(reply.name)")
                }
            }
            log("pong", "quit after answering \(answered) requests; its port is destroyed as the thread ends")
        } catch {
            log("pong", "error: \(error)")
        }
    }

    // Pong's hello carries the send right to its port as its reply port.
    let pongRight: PortSendRight
    do throws(PortError) {
        let hello = try bootstrap.receive(timeout: timeout)
        guard hello.id == helloID, let right = hello.replyPort else { fail("unexpected bootstrap message") }
        pongRight = right
    } catch {
        fail("pong did not say hello: \(error)")
    }
    log("main", "pong's port is \(pongRight.name); starting \(count) round trips")

    let measurements = Measurements()
    let ping = DemoThread {
        var roundTrips: [Int64] = []
        roundTrips.reserveCapacity(count)
        do throws(PortError) {
            let replies = try PortReceiveRight() // ping's own port, created on its thread
            let replyRight = replies.makeSendRight()
            for sequence in 0..<count {
                let sentAt = now()
                let payload = withUnsafeBytes(of: sentAt.littleEndian) { Array($0) }
                try pongRight.send(id: Int32(truncatingIfNeeded: sequence), bytes: payload, replyPort: replyRight,
                                   timeout: timeout)
                let reply = try replies.receive(timeout: timeout)
                let elapsed = now() - sentAt
                roundTrips.append(elapsed)
                if reply.payload != payload {
                    throw PortError.invalidArgument(argument: "reply", reason: "payload changed")
                }
                if sequence < shown {
                    log("ping", "reply #\(reply.id) on \(replies.name) after \(format1(Double(elapsed) / 1000)) µs")
                }
            }
            try pongRight.send(id: quitID, timeout: timeout)
        } catch {
            measurements.error = error
            try? pongRight.send(id: quitID, timeout: .poll)
        }
        measurements.roundTrips = roundTrips
    }

    ping.join()
    pong.join()
    if let error = measurements.error {
        fail("ping failed after \(measurements.roundTrips.count) round trips: \(error)")
    }
    return measurements.roundTrips
}

// MARK: - Summary

let sorted = exchange(count: count).sorted()
guard !sorted.isEmpty else { fail("no round trips") }
func percentile(_ p: Double) -> Double {
    let index = min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))
    return Double(sorted[index]) / 1000
}
let total = sorted.reduce(0, +)
let mean = Double(total) / Double(sorted.count) / 1000
print("""
    summary: \(sorted.count) round trips (request with reply port → reply), \
    \(format1(Double(total) / 1e6)) ms in total
      latency per round trip: mean \(format1(mean)) µs, p50 \(format1(percentile(50))) µs, \
    p99 \(format1(percentile(99))) µs (min \(format1(percentile(0))) µs, max \(format1(Double(sorted.last!) / 1000)) µs)
    """)
