import PortLoop
import Synchronization

/// The daemon's own clients (`serve --clients`, `--self-test`): threads of this process that send requests to
/// the service port, one at a time each, and check every reply (see ``EchoClient``).
///
/// They use a send right made from the service's source, a local right; a `load` client process looks the name
/// up instead. Either way the dispatcher's loop wakes in the same version-1 source. Each client tallies which
/// worker answered, so a self-test can check the clients' view against the workers' own counts.
final class LoadGenerator: Sendable {
    let clients: Int
    /// Requests to send in all, split among the clients; nil to send until refused.
    let plannedRequests: Int?
    private let endpoint: PortSendRight
    private let errorsReported = Atomic<Int>(0)
    /// Clients not yet ended. Each client adds its tally before it decrements this, so once it reads 0 the
    /// tally is final.
    private let running = Atomic<Int>(0)
    private let sum = Guarded(ClientTally())

    init(endpoint: PortSendRight, clients: Int, requests: Int?) {
        self.endpoint = endpoint
        self.clients = clients
        self.plannedRequests = requests
    }

    /// Starts the clients. `finished` runs on the last client's thread when every client has ended.
    func start(finished: @escaping @Sendable () -> Void) throws(DaemonError) {
        running.store(clients, ordering: .relaxed)
        for index in 0..<clients {
            let share = plannedRequests.map { $0 / clients + (index < $0 % clients ? 1 : 0) }
            try PosixThread.detach(name: "echod-client-\(index + 1)") { [self] in
                let client = EchoClient(endpoint: endpoint, number: index + 1, requests: share, deadline: nil,
                                        awaitDeadName: false) { [self] in report($0) }
                let tally = client.run()
                sum.withLock { $0.add(tally) }
                if running.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { finished() }
            }
        }
    }

    /// Whether every client has ended; then ``tally`` is final.
    var allFinished: Bool { running.load(ordering: .acquiring) == 0 }

    /// What the clients that have ended saw.
    var tally: ClientTally { sum.withLock { $0 } }

    /// Prints the first few problems, not a flood of them.
    private func report(_ problem: String) {
        if errorsReported.add(1, ordering: .relaxed).newValue <= 5 { complain("portloop-echod: " + problem) }
    }
}
