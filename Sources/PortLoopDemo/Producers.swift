// Producer threads: each sends bursts of messages to its own Source1 port on the loop.
import PortLoop
import PortLoopDemoSupport

/// About how often each producer sends a burst.
let burstPeriod: Int64 = 150_000_000

/// The producers' schedule, shared by all of them.
struct ProducerPlan: Sendable {
    let start: Int64
    /// No burst starts after this.
    let lastBurstBy: Int64
    let producers: Int
    let burst: Int
}

/// Sends bursts of `plan.burst` messages, back to back, about every `burstPeriod` (staggered between the
/// producers, with some jitter), each carrying its send time. Runs on its own thread.
func produce(_ index: Int, to port: PortSendRight, plan: ProducerPlan, counters: Counters) {
    defer { counters.producersFinished.add(1, ordering: .releasing) }
    var random = UInt64(index) &* 0x9E37_79B9_7F4A_7C15 | 1
    func jitter() -> Int64 { // ±25 ms, from a small xorshift generator
        random ^= random << 13
        random ^= random >> 7
        random ^= random << 17
        return Int64(random % 50_000_001) - 25_000_000
    }

    var next = plan.start + 20_000_000 + Int64(index - 1) * burstPeriod / Int64(plan.producers)
    var burst: UInt32 = 0
    while next <= plan.lastBurstBy {
        sleep(until: next)
        burst += 1
        for i in 0..<plan.burst {
            let payload = Payload(sentAt: now(), burst: burst, index: UInt16(i), burstSize: UInt16(plan.burst))
            do {
                // Waits for room if the port is full (its queue limit is at least the burst size, so it is not).
                try payload.withBytes { try port.send(id: Int32(index), payload: $0, timeout: .after(.seconds(2))) }
            } catch {
                printError("portloop-demo: producer \(index): send failed: \(error)")
                counters.sendFailures.add(1, ordering: .relaxed)
                return
            }
            counters.sent.add(1, ordering: .releasing)
        }
        counters.burstsSent.add(1, ordering: .relaxed)
        next += burstPeriod + jitter()
    }
}
