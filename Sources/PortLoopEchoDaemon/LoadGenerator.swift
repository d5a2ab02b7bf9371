import PortLoop
import Synchronization

/// The built-in clients: threads that send requests to the service port, one at a time each, and check every
/// reply.
///
/// A request is ``PortSendRight/request(id:bytes:timeout:maxReplySize:)``: a send with a fresh reply port, then
/// a wait on that port (MIG's client stub). The reply must carry the request's id and its payload uppercased
/// with a valid worker tag; the client tallies which worker answered, so a self-test can check the clients'
/// view against the workers' own counts. A client stops after its share of a self-test, or, under open-ended
/// load, at the first refusal (the daemon is stopping) or failure.
final class LoadGenerator: Sendable {
    let clients: Int
    /// Requests to send in all, split among the clients; nil to send until refused.
    let plannedRequests: Int?
    private let endpoint: PortSendRight
    private let workers: Int

    /// Replies that were right.
    let answered = Counter()
    /// Replies that were not the right answer to their request.
    let wrong = Counter()
    /// Requests that got no reply: a timeout or a port error.
    let failed = Counter()
    /// Requests refused because the daemon was stopping.
    let refused = Counter()
    /// Right replies by answering worker, added by each client as it ends.
    let answeredByWorker: [Counter]
    /// Clients not yet ended. Each client adds its tallies before it decrements this (release), and readers
    /// load it with acquire, so once it reads 0 every count above is final.
    private let running = Atomic<Int>(0)
    private let errorsReported = Atomic<Int>(0)

    /// How long a client waits for one reply before counting the request as failed.
    static let requestTimeout = PortTimeout.after(.seconds(10))

    init(endpoint: PortSendRight, clients: Int, requests: Int?, workers: Int) {
        self.endpoint = endpoint
        self.clients = clients
        self.plannedRequests = requests
        self.workers = workers
        answeredByWorker = (0..<workers).map { _ in Counter() }
    }

    /// Starts the clients. `finished` runs on the last client's thread when every client has ended.
    func start(finished: @escaping @Sendable () -> Void) throws(DaemonError) {
        running.store(clients, ordering: .relaxed)
        for index in 0..<clients {
            let share = plannedRequests.map { $0 / clients + (index < $0 % clients ? 1 : 0) }
            try PosixThread.detach(name: "echod-client-\(index + 1)") { [self] in
                runClient(index + 1, requests: share)
                if running.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { finished() }
            }
        }
    }

    /// Whether every client has ended; then the counts are final.
    var allFinished: Bool { running.load(ordering: .acquiring) == 0 }

    private func runClient(_ client: Int, requests: Int?) {
        var tally = Array(repeating: 0, count: workers)
        // Kept locally and added once at the end: the clients would otherwise all bump the same counters.
        defer { for (counter, count) in zip(answeredByWorker, tally) { counter.add(count) } }
        var sequence = 0
        while requests.map({ sequence < $0 }) ?? true {
            sequence += 1
            // Ids stay positive: the negative ones are the protocol's own.
            let id = Int32((sequence - 1) % Int(Int32.max) + 1)
            let payload = EchoProtocol.requestPayload(client: client, sequence: sequence)
            let reply: ReceivedMessage
            do throws(PortError) {
                reply = try endpoint.request(id: id, bytes: payload, timeout: Self.requestTimeout)
            } catch {
                failed.increment()
                report("client \(client): request \(sequence) failed: \(error)")
                return
            }
            if reply.id == EchoProtocol.refusedID {
                refused.increment()
                return
            }
            guard let worker = EchoProtocol.answeringWorker(of: reply, requestID: id, requestPayload: payload,
                                                           workers: workers) else {
                wrong.increment()
                report("client \(client): wrong reply to request \(sequence): id \(reply.id), "
                       + "'\(String(decoding: reply.payload, as: UTF8.self))'")
                continue
            }
            answered.increment()
            tally[worker - 1] += 1
        }
    }

    /// Prints the first few problems, not a flood of them.
    private func report(_ problem: String) {
        if errorsReported.add(1, ordering: .relaxed).newValue <= 5 { complain("portloop-echod: " + problem) }
    }
}
