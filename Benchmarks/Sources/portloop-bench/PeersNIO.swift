#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import NIOCore
import NIOPosix

// SwiftNIO as a cross-process peer: a length-prefixed echo server and sink, and the clients that drive them, on a
// Unix domain socket. What a daemon author writes with NIO for "messages between two local processes": a frame
// decoder, a handler per connection, one event loop, writes flushed once per read batch (echo) or per message
// (sender), zero-copy slices for the payload.

/// A frame: a 4-byte length (little-endian, as the C floor's) and the payload. The payload's first 8 bytes carry
/// a word (a round trip's number, or the sender's clock in a one-way run's first message).
struct LengthPrefixedFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = buffer.getInteger(at: buffer.readerIndex, endianness: .little, as: UInt32.self),
              buffer.readableBytes >= 4 + Int(length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 4)
        context.fireChannelRead(Self.wrapInboundOut(buffer.readSlice(length: Int(length))!))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer,
                             seenEOF: Bool) throws -> DecodingState {
        try decode(context: context, buffer: &buffer)
    }
}

/// Writes one frame: the length and the word in a small buffer, the rest of the payload as a slice of a zeroed
/// buffer shared by every frame (NIO writes both with one writev).
struct FrameWriter {
    let size: Int
    private let tail: ByteBuffer?

    init(size: Int, allocator: ByteBufferAllocator) {
        self.size = size
        tail = size > 8 ? allocator.buffer(repeating: 0, count: size - 8) : nil
    }

    func write(_ word: UInt64, context: ChannelHandlerContext, promise: EventLoopPromise<Void>? = nil) {
        var header = context.channel.allocator.buffer(capacity: 12)
        header.writeInteger(UInt32(size), endianness: .little)
        header.writeInteger(word, endianness: .little)
        if let tail {
            context.write(NIOAny(header), promise: nil)
            context.write(NIOAny(tail), promise: promise)
        } else {
            context.write(NIOAny(header), promise: promise)
        }
    }
}

/// The word at the start of a frame's payload.
func frameWord(_ frame: ByteBuffer) -> UInt64 {
    frame.getInteger(at: frame.readerIndex, endianness: .little, as: UInt64.self) ?? 0
}

/// The child's NIO echo server: every frame goes back as it came; the flush comes once per read batch.
final class FrameEchoHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        var header = context.channel.allocator.buffer(capacity: 4)
        header.writeInteger(UInt32(frame.readableBytes), endianness: .little)
        context.write(Self.wrapOutboundOut(header), promise: nil)
        context.write(Self.wrapOutboundOut(frame), promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) { context.flush() }
}

/// Adds the frame decoder and `handler` to a new channel's pipeline (on its event loop).
func addFrameHandlers(_ channel: any Channel, _ handler: any ChannelHandler) -> EventLoopFuture<Void> {
    channel.eventLoop.makeCompletedFuture {
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LengthPrefixedFrameDecoder()))
        try channel.pipeline.syncOperations.addHandler(handler)
    }
}

/// A NIO server on a Unix domain socket whose connections get the frame decoder and a handler each.
func bindFrameServer(_ group: MultiThreadedEventLoopGroup, path: String,
                     handler: @escaping @Sendable () -> any ChannelHandler) -> any Channel {
    do {
        return try ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .childChannelInitializer { channel in addFrameHandlers(channel, handler()) }
            .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true)
            .wait()
    } catch {
        fatalError("NIO bind \(path): \(error)")
    }
}

/// The bench's side of a NIO round trip: sends round trip 0 when the connection is up, and each echo's
/// successor; the clock starts after `warmup` answers and the latch is set at the last.
final class FramePingPongHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let warmup: Int
    let total: Int
    let clock: RoundTripClock
    let allocations: AllocationWindow
    let done: Latch<Bool>
    private var writer: FrameWriter?

    init(size: Int, warmup: Int, total: Int, clock: RoundTripClock, allocations: AllocationWindow,
         done: Latch<Bool>) {
        self.warmup = warmup
        self.total = total
        self.clock = clock
        self.allocations = allocations
        self.done = done
        writer = FrameWriter(size: size, allocator: ByteBufferAllocator())
    }

    func channelActive(context: ChannelHandlerContext) {
        clock.start = bf_now_ns() // replaced after the warm-up
        clock.lap(0, warmup: warmup)
        writer?.write(0, context: context)
        context.flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let answered = Int(frameWord(Self.unwrapInboundIn(data))) + 1
        clock.lap(answered, warmup: warmup)
        if answered == warmup {
            allocations.begin()
            clock.start = bf_now_ns()
        }
        if answered == total {
            clock.end = bf_now_ns()
            allocations.end()
            done.set(true)
            return
        }
        writer?.write(UInt64(answered), context: context)
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fatalError("NIO ping-pong: \(error)")
    }
}

/// One NIO round-trip run against the child's echo server at `path`: a client on a one-thread group in this
/// process. Returns nanoseconds per round trip.
func nioPingPong(path: String, size: Int, warmup: Int, roundTrips: Int, allocations: AllocationWindow) -> Double {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let clock = RoundTripClock()
    let done = Latch<Bool>()
    let channel: any Channel
    do {
        channel = try ClientBootstrap(group: group)
            .channelInitializer { channel in
                addFrameHandlers(channel, FramePingPongHandler(
                    size: size, warmup: warmup, total: warmup + roundTrips, clock: clock,
                    allocations: allocations, done: done))
            }
            .connect(unixDomainSocketPath: path)
            .wait()
    } catch {
        fatalError("NIO connect \(path): \(error)")
    }
    _ = done.wait()
    try? channel.close().wait()
    try? group.syncShutdownGracefully()
    return Double(clock.end - clock.start) / Double(roundTrips)
}

/// The bench's side of a NIO one-way run: counts frames; the first carries the sender's clock; the latch is set
/// at the last.
final class FrameSinkHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let messages: Int
    let clock: RoundTripClock
    let allocations: AllocationWindow
    let done: Latch<Bool>
    private var count = 0

    init(messages: Int, clock: RoundTripClock, allocations: AllocationWindow, done: Latch<Bool>) {
        self.messages = messages
        self.clock = clock
        self.allocations = allocations
        self.done = done
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        count += 1
        if count == 1 {
            clock.start = Int64(frameWord(Self.unwrapInboundIn(data)))
            allocations.begin()
        }
        if count == messages {
            clock.end = bf_now_ns()
            allocations.end()
            done.set(true)
        }
    }
}

/// One NIO one-way run: this process serves a sink on a one-thread group, a child (`nio-send`) connects and
/// sends `messages` frames of `size` bytes. Returns seconds from the child's first send to the last frame's
/// arrival at the handler.
func nioSinkThroughput(messages: Int, size: Int, allocations: AllocationWindow) -> Double {
    let directory = SocketDirectory()
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let clock = RoundTripClock()
    let done = Latch<Bool>()
    let server = bindFrameServer(group, path: directory.socketPath) {
        FrameSinkHandler(messages: messages, clock: clock, allocations: allocations, done: done)
    }
    let child = BenchChild(role: "nio-send", [directory.path, SocketDirectory.socketName, "\(messages)", "\(size)"])
    _ = done.wait()
    guard child.finish(within: 60) == 0 else { fatalError("peers-throughput: the NIO sender failed") }
    try? server.close().wait()
    try? group.syncShutdownGracefully()
    directory.remove()
    return Double(clock.end - clock.start) / 1e9
}

/// The child's NIO sender: when the connection is up, writes frames while the channel is writable, flushing
/// each (one write per message, as the others send), and resumes when it becomes writable again; the first
/// frame carries the clock. Sets the latch once the last frame is written.
final class FrameSenderHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let count: Int
    let done: Latch<Bool>
    private let writer: FrameWriter
    private var sent = 0

    init(count: Int, size: Int, done: Latch<Bool>) {
        self.count = count
        self.done = done
        writer = FrameWriter(size: size, allocator: ByteBufferAllocator())
    }

    func channelActive(context: ChannelHandlerContext) { pump(context) }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        pump(context)
        context.fireChannelWritabilityChanged()
    }

    private func pump(_ context: ChannelHandlerContext) {
        while sent < count && context.channel.isWritable {
            let word = sent == 0 ? UInt64(bf_now_ns()) : UInt64(sent)
            sent += 1
            if sent == count {
                let written = context.eventLoop.makePromise(of: Void.self)
                let done = self.done
                written.futureResult.whenComplete { result in
                    if case .failure(let error) = result { fatalError("NIO sender: \(error)") }
                    done.set(true)
                }
                writer.write(word, context: context, promise: written)
            } else {
                writer.write(word, context: context)
            }
            context.flush()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fatalError("NIO sender: \(error)")
    }
}

/// The `nio-send` child role: connects to `path`, sends `count` frames of `size` bytes, closes.
func runNIOSender(path: String, count: Int, size: Int) {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let done = Latch<Bool>()
    do {
        let channel = try ClientBootstrap(group: group)
            .channelInitializer { channel in
                addFrameHandlers(channel, FrameSenderHandler(count: count, size: size, done: done))
            }
            .connect(unixDomainSocketPath: path)
            .wait()
        _ = done.wait()
        try channel.close().wait()
        try group.syncShutdownGracefully()
    } catch {
        printError("nio-send: \(error)")
        exit(1)
    }
}
