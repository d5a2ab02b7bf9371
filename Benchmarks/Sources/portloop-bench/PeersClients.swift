#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import PortLoop

// peers-clients: what a connected client costs the serving process, for PortLoop, NIO and gRPC. Each server is a
// child of this executable (one event loop thread for NIO; PortLoop's loop thread and its transport thread; gRPC
// over a one-thread event loop group plus the Swift concurrency pool); the clients are a second child that
// connects them all, each with one 8-byte echo, and holds them open while the server is measured.

/// One server's footprint: heap in use (its own glibc figure, after malloc_trim), resident set and open
/// descriptors (from /proc).
struct ServerFootprint {
    var heap: Double
    var resident: Double
    var descriptors: Double
}

/// A server child of `kind` (`portloop`, `nio`, `grpc`) that answers `stats`.
final class MeasuredServer {
    let child: BenchChild
    let directory = SocketDirectory()
    let kind: String

    init(kind: String) {
        self.kind = kind
        let name = kind == "portloop" ? ipcServiceName : SocketDirectory.socketName
        child = BenchChild(role: "serve-\(kind)", [directory.path, name, "8"], input: true)
        guard let line = child.readLine(within: 60), line.hasPrefix("ready") else {
            fatalError("peers-clients: the \(kind) server did not become ready")
        }
    }

    var serviceName: String { kind == "portloop" ? ipcServiceName : SocketDirectory.socketName }

    func footprint() -> ServerFootprint {
        child.tell("stats")
        guard let line = child.readLine(within: 30), line.hasPrefix("stats "),
              let heap = Double(line.dropFirst(6)), let proc = processFootprint(child.pid) else {
            fatalError("peers-clients: no stats from the \(kind) server")
        }
        return ServerFootprint(heap: heap, resident: Double(proc.residentBytes), descriptors: Double(proc.descriptors))
    }

    /// Waits (up to 10 s) until the server holds no more descriptors than `baseline`: a server notices a
    /// client's end shortly after it happens, not at once.
    func settle(to baseline: ServerFootprint) {
        let deadline = bf_now_ns() + 10_000_000_000
        while let proc = processFootprint(child.pid), Double(proc.descriptors) > baseline.descriptors,
              bf_now_ns() < deadline {
            usleep(10_000)
        }
    }

    func finish() {
        child.closeInput()
        guard child.finish(within: 30) == 0 else { fatalError("peers-clients: the \(kind) server failed") }
        directory.remove()
    }
}

/// One run for one kind: the server's footprint before, with `clients` clients connected, and after they left.
func measureClients(kind: String, clients: Int) -> (before: ServerFootprint, loaded: ServerFootprint,
                                                    after: ServerFootprint) {
    let server = MeasuredServer(kind: kind)
    let before = server.footprint()
    let helper = BenchChild(role: "clients-\(kind)", [server.directory.path, server.serviceName, "\(clients)"],
                            input: true)
    guard let line = helper.readLine(within: 600), line.hasPrefix("ready") else {
        fatalError("peers-clients: the \(kind) clients did not all connect")
    }
    if kind == "portloop" { // the server connects to its clients (runPortLoopClients says why)
        server.child.tell("connect \(clients)")
        guard let answer = server.child.readLine(within: 600), answer == "connected \(clients)" else {
            fatalError("peers-clients: the PortLoop server did not connect its clients")
        }
    }
    let loaded = server.footprint()
    helper.closeInput()
    guard helper.finish(within: 120) == 0 else { fatalError("peers-clients: the \(kind) clients failed") }
    server.settle(to: before)
    let after = server.footprint()
    server.finish()
    return (before, loaded, after)
}

/// `peers-clients`: per connected client, the serving process's growth in descriptors, resident set and heap.
let peersClientsScenario = Scenario(
    name: "peers-clients",
    summary: "what a connected client costs the server at 1,000 clients (200 with --quick): PortLoop, NIO, gRPC"
) { settings in
    let clients = settings.quick ? 200 : 1_000
    let kinds = [("portloop", "PortLoop: a service on a loop thread, each client a process of its own"),
                 ("nio", "NIO: an echo server on one event loop, each client a stream socket"),
                 ("grpc", "gRPC: an echo server, each client a GRPCClient (its own HTTP/2 connection)")]
    var figures: [String: [String: [Double]]] = [:]
    // No warm-up round: nothing here is timed, and each run starts a new server.
    for _ in 0..<settings.runs {
        for (kind, _) in kinds {
            let run = measureClients(kind: kind, clients: clients)
            let perClient = Double(clients)
            figures[kind, default: [:]]["descriptors", default: []]
                .append((run.loaded.descriptors - run.before.descriptors) / perClient)
            figures[kind, default: [:]]["resident", default: []]
                .append((run.loaded.resident - run.before.resident) / perClient)
            figures[kind, default: [:]]["heap", default: []].append((run.loaded.heap - run.before.heap) / perClient)
            figures[kind, default: [:]]["left", default: []].append(run.after.descriptors - run.before.descriptors)
            figures[kind, default: [:]]["baseline", default: []].append(run.before.resident)
        }
    }
    var rows: [Row] = []
    for (measure, unit, decimals) in [("descriptors", "fds/client", 2), ("resident", "bytes/client", 0),
                                      ("heap", "heap bytes/client", 0)] {
        rows += kinds.map { kind, what in
            Row(kind == "portloop" ? .ours : .peer, "\(what): \(measure) per client at \(clients) clients",
                sample: Sample(values: figures[kind]![measure]!), unit: unit, decimals: decimals,
                short: kind == "nio" ? "NIO" : "gRPC")
        }.withPeerRatios()
    }
    rows += kinds.map { kind, _ in
        Row(.counter, "\(kind): server's resident set before any client",
            sample: Sample(values: figures[kind]!["baseline"]!), unit: "bytes", decimals: 0)
    }
    rows += kinds.map { kind, _ in
        Row(.counter, "\(kind): server's descriptors left after the clients went, beyond its start",
            sample: Sample(values: figures[kind]!["left"]!), unit: "fds", decimals: 0)
    }
    return rows
}
