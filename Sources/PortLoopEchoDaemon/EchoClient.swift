import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One client thread's work, the same in this process's load generator and in a `load` client process: send
/// a request, wait for its reply, check it, again.
///
/// A request is ``PortSendRight/request(id:bytes:timeout:maxReplySize:)``: a send with a fresh reply port,
/// then a wait on that port (MIG's client stub). The reply must carry the request's id and its payload
/// uppercased with a valid worker tag. A client ends after its planned requests, at its deadline, or when the
/// service stops: at a refusal (the daemon is stopping), or when its right turns out to be a dead name
/// (``PortError/invalidDestination``, or ``PortError/noReply`` for a request that reached the port just as it
/// was destroyed).
struct EchoClient {
    let endpoint: PortSendRight
    /// Printed in payloads: different for every client of a run.
    let number: Int
    /// Requests to send; nil for as many as the deadline or the service allow.
    let requests: Int?
    /// `MonotonicClock` nanoseconds after which no request is sent; nil for none.
    let deadline: UInt64?
    /// After a refusal, wait for the right to become a dead name and check that a send then fails with
    /// ``PortError/invalidDestination``: what every client of a stopping service sees.
    let awaitDeadName: Bool
    /// Where problems are reported (the first few of a run).
    let report: (String) -> Void

    /// How long a client waits for one reply before counting the request as failed.
    static let requestTimeout = PortTimeout.after(.seconds(10))
    /// How long a refused client waits for its right to become a dead name.
    static let deadNameTimeout: UInt64 = 30_000_000_000

    func run() -> ClientTally {
        var tally = ClientTally()
        var sequence = 0
        while requests.map({ sequence < $0 }) ?? true {
            if let deadline, MonotonicClock.now >= deadline { break }
            sequence += 1
            // Ids stay positive: the negative ones are the protocol's own.
            let id = Int32((sequence - 1) % Int(Int32.max) + 1)
            let payload = EchoProtocol.requestPayload(client: number, sequence: sequence)
            let sentAt = MonotonicClock.now
            let reply: ReceivedMessage
            do throws(PortError) {
                reply = try endpoint.request(id: id, bytes: payload, timeout: Self.requestTimeout)
            } catch .invalidDestination, .noReply {
                tally.gone += 1
                return tally
            } catch {
                tally.failed += 1
                report("client \(number): request \(sequence) failed: \(error)")
                return tally
            }
            if reply.id == EchoProtocol.refusedID {
                tally.refused += 1
                if awaitDeadName { checkDeadName(&tally) }
                return tally
            }
            guard let worker = EchoProtocol.answeringWorker(of: reply, requestID: id, requestPayload: payload,
                                                           workers: Options.workerRange.upperBound) else {
                tally.wrong += 1
                report("client \(number): wrong reply to request \(sequence): id \(reply.id), "
                       + "'\(String(decoding: reply.payload, as: UTF8.self))'")
                continue
            }
            tally.latency.record(MonotonicClock.now - sentAt)
            tally.answered += 1
            tally.byWorker[worker - 1] += 1
        }
        return tally
    }

    /// Waits for the refusing service's port to go, then sends once more: the send must fail with
    /// ``PortError/invalidDestination`` at once, not wait.
    private func checkDeadName(_ tally: inout ClientTally) {
        let giveUp = MonotonicClock.now + Self.deadNameTimeout
        while !endpoint.isDeadName && MonotonicClock.now < giveUp { usleep(2_000) }
        do throws(PortError) {
            try endpoint.send(id: 1, bytes: Array("anyone there?".utf8), timeout: .poll)
            tally.failed += 1
            report("client \(number): the service refused, but a send 30 s later still went through")
        } catch .invalidDestination {
            tally.deadNames += 1
        } catch {
            tally.failed += 1
            report("client \(number): a send after the service stopped failed with \(error), not invalidDestination")
        }
    }
}

/// What one or more client threads saw; tallies add up across threads and processes.
struct ClientTally: Sendable {
    /// Replies that were right.
    var answered = 0
    /// Replies that were not the right answer to their request.
    var wrong = 0
    /// Requests the daemon refused because it was stopping.
    var refused = 0
    /// Requests that found the service gone (its port destroyed): ``PortError/invalidDestination`` or
    /// ``PortError/noReply``.
    var gone = 0
    /// Requests that failed otherwise: a timeout, another port error.
    var failed = 0
    /// Refused clients whose next send failed with ``PortError/invalidDestination``, as it must.
    var deadNames = 0
    /// Right replies by answering worker (w1 first).
    var byWorker = Array(repeating: 0, count: Options.workerRange.upperBound)
    /// Round-trip times of the right replies.
    var latency = LatencyHistogram()

    mutating func add(_ other: ClientTally) {
        answered += other.answered
        wrong += other.wrong
        refused += other.refused
        gone += other.gone
        failed += other.failed
        deadNames += other.deadNames
        for index in byWorker.indices { byWorker[index] += other.byWorker[index] }
        latency.add(other.latency)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the host, so that the client processes'
/// start and end times and the load's deadline compare.
enum MonotonicClock {
    static var now: UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
