#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import GRPCCore
import GRPCNIOTransportHTTP2Posix

// gRPC (grpc-swift 2 over its HTTP/2 NIO transport) as a cross-process peer, on a Unix domain socket, plaintext.
// No protobuf: messages are raw bytes with a codec of their own. One service with two methods: `Echo` answers
// every message of a call with the same bytes (a unary call is a call of one message; a bidirectional stream
// ping-pongs on it), `Sink` counts the messages of a client stream and answers once at its end.

/// Messages as they are: `[UInt8]` in, the same bytes on the wire.
struct RawBytesCodec: MessageSerializer, MessageDeserializer {
    typealias Message = [UInt8]

    func serialize<Bytes: GRPCContiguousBytes>(_ message: [UInt8]) throws -> Bytes { Bytes(message) }

    func deserialize<Bytes: GRPCContiguousBytes>(_ serializedMessageBytes: Bytes) throws -> [UInt8] {
        serializedMessageBytes.withUnsafeBytes { Array($0) }
    }
}

/// The sink's side of a one-way run in this process: counts messages; the first's word is the sender's clock.
final class GRPCSinkState: @unchecked Sendable {
    let messages: Int
    let clock = RoundTripClock()
    let allocations: AllocationWindow
    let done = Latch<Bool>()
    private var count = 0 // one call at a time: its handler runs the messages in order

    init(messages: Int, allocations: AllocationWindow) {
        self.messages = messages
        self.allocations = allocations
    }

    func received(_ message: [UInt8]) {
        count += 1
        if count == 1 {
            clock.start = Int64(loadWord(message))
            allocations.begin()
        }
        if count == messages {
            clock.end = bf_now_ns()
            allocations.end()
            done.set(true)
        }
    }
}

/// The benchmark's service: `Echo` always, `Sink` when a sink state is given.
struct PeerGRPCService: RegistrableRPCService {
    static let echo = MethodDescriptor(fullyQualifiedService: "portloop.bench.Peer", method: "Echo")
    static let sink = MethodDescriptor(fullyQualifiedService: "portloop.bench.Peer", method: "Sink")
    let sinkState: GRPCSinkState?

    func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
        router.registerHandler(forMethod: Self.echo, deserializer: RawBytesCodec(), serializer: RawBytesCodec()) {
            request, _ in
            StreamingServerResponse(of: [UInt8].self) { writer in
                for try await message in request.messages { try await writer.write(message) }
                return [:]
            }
        }
        if let sinkState {
            router.registerHandler(forMethod: Self.sink, deserializer: RawBytesCodec(),
                                   serializer: RawBytesCodec()) { request, _ in
                for try await message in request.messages { sinkState.received(message) }
                return StreamingServerResponse(single: ServerResponse(message: [UInt8]()))
            }
        }
    }
}

/// A gRPC server on a Unix domain socket, as gRPC sets one up by default: its transport on NIO's process-wide
/// event loop group (one thread per core), its handlers on the Swift concurrency pool. ``stop()`` shuts it down
/// gracefully and waits until it has. (The group is never shut down: gRPC's connections still schedule work on
/// it for a moment after a graceful shutdown, which a group of its own would refuse noisily.)
final class GRPCServerRun: @unchecked Sendable {
    let server: GRPCServer<HTTP2ServerTransport.Posix>
    private let served = Latch<Bool>()

    /// Starts serving at `path` and returns once the server listens.
    init(path: String, service: PeerGRPCService) {
        let transport = HTTP2ServerTransport.Posix(
            address: .unixDomainSocket(path: path), transportSecurity: .plaintext,
            config: .defaults { $0.rpc.maxRequestPayloadSize = 4 << 20 })
        let server = GRPCServer(transport: transport, services: [service])
        self.server = server
        let served = self.served
        Task {
            do { try await server.serve() } catch { fatalError("gRPC server: \(error)") }
            served.set(true)
        }
        _ = waitForAsync("gRPC server listening") { try await transport.listeningAddress }
    }

    func stop() {
        server.beginGracefulShutdown()
        _ = served.wait()
    }
}

/// A gRPC client of the server at `path`, set up as gRPC does by default (NIO's process-wide event loop group),
/// its connections running in a task; ``stop()`` shuts it down and waits.
final class GRPCClientRun: @unchecked Sendable {
    let client: GRPCClient<HTTP2ClientTransport.Posix>
    private let finished = Latch<Bool>()

    init(path: String) {
        do {
            client = GRPCClient(transport: try HTTP2ClientTransport.Posix(
                target: .unixDomainSocket(path: path), transportSecurity: .plaintext))
        } catch {
            fatalError("gRPC client transport: \(error)")
        }
        let client = self.client, finished = self.finished
        Task {
            do { try await client.runConnections() } catch { fatalError("gRPC client: \(error)") }
            finished.set(true)
        }
    }

    /// One unary `Echo` call.
    func echo(_ payload: [UInt8]) async throws -> [UInt8] {
        try await client.unary(request: ClientRequest(message: payload), descriptor: PeerGRPCService.echo,
                               serializer: RawBytesCodec(), deserializer: RawBytesCodec(),
                               options: .defaults) { try $0.message }
    }

    func stop() {
        client.beginGracefulShutdown()
        _ = finished.wait()
    }
}

/// A payload of `size` bytes whose first 8 carry `word`.
func wordPayload(_ word: UInt64, size: Int) -> [UInt8] {
    var payload = [UInt8](repeating: 0, count: size)
    payload.withUnsafeMutableBytes { $0.storeBytes(of: word, as: UInt64.self) }
    return payload
}

/// One gRPC round-trip run against the child's server at `path`: unary `Echo` calls one after the other
/// (`stream` false), or one bidirectional `Echo` stream on which each message waits for its echo. Returns
/// nanoseconds per round trip.
func grpcPingPong(path: String, stream: Bool, size: Int, warmup: Int, roundTrips: Int,
                  allocations: AllocationWindow) -> Double {
    let run = GRPCClientRun(path: path)
    let clock = RoundTripClock()
    let total = warmup + roundTrips
    if stream {
        waitForAsync("gRPC stream ping-pong") {
            let (echoes, arrived) = AsyncStream.makeStream(of: UInt64.self)
            let request = StreamingClientRequest(of: [UInt8].self) { writer in
                var next = echoes.makeAsyncIterator()
                clock.lap(0, warmup: warmup)
                for index in 0..<total {
                    if index == warmup {
                        allocations.begin()
                        clock.start = bf_now_ns()
                    }
                    try await writer.write(wordPayload(UInt64(index), size: size))
                    guard await next.next() == UInt64(index) else { fatalError("gRPC stream: echo out of order") }
                    clock.lap(index + 1, warmup: warmup)
                }
                clock.end = bf_now_ns()
                allocations.end()
            }
            try await run.client.bidirectionalStreaming(
                request: request, descriptor: PeerGRPCService.echo, serializer: RawBytesCodec(),
                deserializer: RawBytesCodec(), options: .defaults
            ) { response in
                for try await message in response.messages { arrived.yield(loadWord(message)) }
            }
        }
    } else {
        waitForAsync("gRPC unary ping-pong") {
            clock.lap(0, warmup: warmup)
            for index in 0..<total {
                if index == warmup {
                    allocations.begin()
                    clock.start = bf_now_ns()
                }
                let echoed = try await run.echo(wordPayload(UInt64(index), size: size))
                precondition(loadWord(echoed) == UInt64(index), "gRPC unary: echo out of order")
                clock.lap(index + 1, warmup: warmup)
            }
            clock.end = bf_now_ns()
            allocations.end()
        }
    }
    run.stop()
    return Double(clock.end - clock.start) / Double(roundTrips)
}

/// One gRPC one-way run: this process serves `Sink`, a child (`grpc-send`) makes one unary `Echo` call (the
/// connection's warm-up), then streams `messages` of `size` bytes to `Sink`. Returns seconds from the child's
/// first write to the last message's arrival at the handler.
func grpcSinkThroughput(messages: Int, size: Int, allocations: AllocationWindow) -> Double {
    let directory = SocketDirectory()
    let state = GRPCSinkState(messages: messages, allocations: allocations)
    let server = GRPCServerRun(path: directory.socketPath, service: PeerGRPCService(sinkState: state))
    let child = BenchChild(role: "grpc-send", [directory.path, SocketDirectory.socketName, "\(messages)", "\(size)"])
    _ = state.done.wait()
    guard child.finish(within: 60) == 0 else { fatalError("peers-throughput: the gRPC sender failed") }
    server.stop()
    directory.remove()
    return Double(state.clock.end - state.clock.start) / 1e9
}

/// The `grpc-send` child role: one `Echo` call, then a `Sink` client stream of `count` messages of `size` bytes
/// (the first's word is the clock, taken before its write), then the stream's answer.
func runGRPCSender(path: String, count: Int, size: Int) {
    let run = GRPCClientRun(path: path)
    waitForAsync("grpc-send") {
        _ = try await run.echo(wordPayload(0, size: 8))
        let request = StreamingClientRequest(of: [UInt8].self) { writer in
            for index in 0..<count {
                try await writer.write(wordPayload(index == 0 ? UInt64(bf_now_ns()) : UInt64(index), size: size))
            }
        }
        _ = try await run.client.clientStreaming(
            request: request, descriptor: PeerGRPCService.sink, serializer: RawBytesCodec(),
            deserializer: RawBytesCodec(), options: .defaults) { try $0.message }
    }
    run.stop()
}
