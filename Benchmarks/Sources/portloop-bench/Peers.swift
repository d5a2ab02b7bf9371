#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import PortLoop

// peers-pingpong and peers-throughput: PortLoop across processes beside SwiftNIO and gRPC on a Unix domain
// socket, and beside C floors on a socketpair, at 8 B, 4 KiB and 1 MiB. Every variant's other process is a child
// of this executable (or, for the floors, forked from it), started per run; this process is always the client
// of a round trip and the receiver of a one-way stream. Allocations are counted in this process only.

/// The largest payload the SOCK_SEQPACKET floor sends (a packet must fit the socket's send buffer).
let seqpacketLargestPayload = 64 * 1024

/// Starts a server child in `role` (`serve-nio`, `serve-grpc`) on a socket of a fresh directory, runs `body`
/// with the socket's path, then closes the child's input (it stops serving and exits) and reaps it.
func withPeerServer<T>(_ role: String, _ body: (String) -> T) -> T {
    let directory = SocketDirectory()
    let child = BenchChild(role: role, [directory.path, SocketDirectory.socketName], input: true)
    guard let line = child.readLine(within: 60), line.hasPrefix("ready") else {
        child.finish(within: 0)
        directory.remove()
        fatalError("\(role): the server child did not become ready")
    }
    let result = body(directory.socketPath)
    child.closeInput()
    guard child.finish(within: 10) == 0 else { fatalError("\(role): the server child failed") }
    directory.remove()
    return result
}

/// Allocations per message of each variant's runs, as side figures: `record` after a run, rows at the end.
final class AllocationFigures {
    let side = SideFigures()

    /// Runs `body` with a fresh window and records its count divided by `messages` under `name`.
    func measure(_ name: String, messages: Int, _ body: (AllocationWindow) -> Double) -> Double {
        let window = AllocationWindow()
        let value = body(window)
        side.record(name, Double(window.count) / Double(messages))
        return value
    }

    func row(_ name: String, label: String, unit: String) -> Row {
        Row(.counter, "allocations in this process per \(unit): \(name), \(label)", sample: side.sample(name),
            unit: "per \(unit)", decimals: 1)
    }
}

/// `peers-pingpong`: round trips between two processes, in nanoseconds per round trip.
let peersPingPongScenario = Scenario(
    name: "peers-pingpong",
    summary: "round trip to another process at 8 B, 4 KiB, 1 MiB: PortLoop, NIO, gRPC (unary, stream), C floors"
) { settings in
    primeCrossProcess()
    let broken = BrokenRuns()
    var rows: [Row] = []
    for payload in PeerPayload.all(quick: settings.quick) {
        let (size, warmup, roundTrips, label) = (payload.size, payload.warmup, payload.roundTrips, payload.label)
        let allocs = AllocationFigures()
        var variants: [() -> Double] = [
            {
                broken.retrying("Source1 \(label)") {
                    withEchoChild(maxMessageSize: size) { service in
                        allocs.measure("PortLoop", messages: roundTrips) {
                            ipcLoopPingPong(service, warmup: warmup, roundTrips: roundTrips, size: size,
                                            allocations: $0) ?? .nan
                        }
                    }
                }
            },
            {
                withPeerServer("serve-nio") { path in
                    allocs.measure("NIO", messages: roundTrips) {
                        nioPingPong(path: path, size: size, warmup: warmup, roundTrips: roundTrips, allocations: $0)
                    }
                }
            },
            {
                withPeerServer("serve-grpc") { path in
                    allocs.measure("gRPC unary", messages: roundTrips) {
                        grpcPingPong(path: path, stream: false, size: size, warmup: warmup, roundTrips: roundTrips,
                                     allocations: $0)
                    }
                }
            },
            {
                withPeerServer("serve-grpc") { path in
                    allocs.measure("gRPC stream", messages: roundTrips) {
                        grpcPingPong(path: path, stream: true, size: size, warmup: warmup, roundTrips: roundTrips,
                                     allocations: $0)
                    }
                }
            },
            {
                floorNanoseconds("stream ping-pong", bf_socket_pingpong(0, UInt64(size), UInt64(warmup),
                                                                         UInt64(roundTrips)), per: roundTrips)
            },
        ]
        let seqpacket = size <= seqpacketLargestPayload
        if seqpacket {
            variants.append {
                floorNanoseconds("seqpacket ping-pong", bf_socket_pingpong(1, UInt64(size), UInt64(warmup),
                                                                            UInt64(roundTrips)), per: roundTrips)
            }
        }
        let series = ["loop: Source1", "NIO", "gRPC unary", "gRPC stream", "stream floor", "seqpacket floor"]
            .prefix(variants.count).map { "\($0), \(label)" }
        let samples = checkingDescriptors("peers-pingpong") {
            measureInterleaved(runs: settings.runs, series: Array(series), variants)
        }
        let unit = "ns/round trip"
        var measured = [
            Row(.ours, "loop: Source1 → PortLoop echo service in another process, \(label)", sample: samples[0],
                unit: unit, key: label),
            Row(.peer, "NIO: length-prefixed frames → NIO echo server in another process, \(label)",
                sample: samples[1], unit: unit, short: "NIO", key: label),
            Row(.peer, "gRPC: unary calls → gRPC echo server in another process, \(label)", sample: samples[2],
                unit: unit, short: "gRPC unary", key: label),
            Row(.peer, "gRPC: one bidirectional stream, each message waits for its echo, \(label)",
                sample: samples[3], unit: unit, short: "gRPC stream", key: label),
            Row(.floor, "C floor: SOCK_STREAM socketpair, length + payload, blocking, \(label)", sample: samples[4],
                unit: unit, short: "stream", key: label),
        ]
        if seqpacket {
            measured.append(Row(.floor, "C floor: SOCK_SEQPACKET socketpair, a packet per message, blocking, \(label)",
                                sample: samples[5], unit: unit, short: "seqpacket", key: label))
        }
        rows += measured.withPeerRatios()
        rows += ["PortLoop", "NIO", "gRPC unary", "gRPC stream"].map {
            allocs.row($0, label: label, unit: "round trip")
        }
    }
    return rows + [Row(.counter, "runs repeated, the connection to the PortLoop child broke",
                       value: Double(broken.counts.values.reduce(0, +)), unit: "runs", decimals: 0)]
}

/// `peers-throughput`: one-way messages from another process, in messages per second.
let peersThroughputScenario = Scenario(
    name: "peers-throughput",
    summary: "one-way messages from another process at 8 B, 4 KiB, 1 MiB: PortLoop, NIO, gRPC (stream), C floors"
) { settings in
    primeCrossProcess()
    var rows: [Row] = []
    for payload in PeerPayload.all(quick: settings.quick) {
        let (size, messages, label) = (payload.size, payload.messages, payload.label)
        let perSecond = { (seconds: Double) in Double(messages) / seconds }
        let allocs = AllocationFigures()
        var variants: [() -> Double] = [
            {
                allocs.measure("PortLoop", messages: messages) {
                    perSecond(ipcSinkThroughput(messages: messages, loop: true, size: size, allocations: $0).seconds)
                }
            },
            {
                allocs.measure("NIO", messages: messages) {
                    perSecond(nioSinkThroughput(messages: messages, size: size, allocations: $0))
                }
            },
            {
                allocs.measure("gRPC stream", messages: messages) {
                    perSecond(grpcSinkThroughput(messages: messages, size: size, allocations: $0))
                }
            },
            {
                perSecond(floorNanoseconds("stream throughput", bf_socket_throughput(0, UInt64(size),
                                                                                      UInt64(messages)), per: 1) / 1e9)
            },
        ]
        let seqpacket = size <= seqpacketLargestPayload
        if seqpacket {
            variants.append {
                let elapsed = bf_socket_throughput(1, UInt64(size), UInt64(messages))
                return perSecond(floorNanoseconds("seqpacket throughput", elapsed, per: 1) / 1e9)
            }
        }
        // Not last: the descriptor count after the runs would catch its loop thread still letting go.
        let packedIndex = 1
        variants.insert({
            allocs.measure("PortLoop packing", messages: messages) {
                perSecond(ipcSinkThroughput(messages: messages, loop: true, size: size, packs: true,
                                            allocations: $0).seconds)
            }
        }, at: packedIndex)
        let samples = checkingDescriptors("peers-throughput") { measureInterleaved(runs: settings.runs, variants) }
        let unit = "msg/s"
        var measured = [
            Row(.ours, "loop: Source1 service, sender in another process, \(label)", sample: samples[0], unit: unit,
                decimals: 0, key: label),
            Row(.ours, "loop: Source1 service, sender packing its stream (packsStreams), \(label)",
                sample: samples[packedIndex], unit: unit, decimals: 0, key: label),
            Row(.peer, "NIO: frame sink, NIO sender in another process, \(label)", sample: samples[2], unit: unit,
                decimals: 0, short: "NIO", key: label),
            Row(.peer, "gRPC: client stream to a sink, sender in another process, \(label)", sample: samples[3],
                unit: unit, decimals: 0, short: "gRPC stream", key: label),
            Row(.floor, "C floor: SOCK_STREAM socketpair, length + payload, \(label)", sample: samples[4], unit: unit,
                decimals: 0, short: "stream", key: label),
        ]
        if seqpacket {
            measured.append(Row(.floor, "C floor: SOCK_SEQPACKET socketpair, a packet per message, \(label)",
                                sample: samples[5], unit: unit, decimals: 0, short: "seqpacket", key: label))
        }
        rows += measured.withPeerRatios()
        rows += ["PortLoop", "PortLoop packing", "NIO", "gRPC stream"].map { allocs.row($0, label: label, unit: "message") }
    }
    return rows
}
