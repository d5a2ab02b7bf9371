import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Large payloads between processes: out of line as a sealed memfd above the threshold (mapped by the receiver),
/// in frames below it or when no memfd can be made, and a peer whose memfd is not sealed, or lies about its
/// size, is cut off before its bytes are seen.
@Suite("Across processes: out-of-line payloads", .timeLimit(.minutes(5)))
struct CrossProcessOutOfLineTests {
    /// Message k's bytes, as the helper's `bulk` role makes them.
    static func pattern(_ count: Int, _ k: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 16) &+ UInt8(truncatingIfNeeded: k) }
    }

    /// Checks a service in here, runs a `bulk` helper against it, and returns each message's buffer flag after
    /// checking its bytes (received as buffers, or through the copying receive when `copying`).
    func receiveBulk(size: Int, count: Int, threshold: Int? = nil, extra: [String] = [], copying: Bool = false,
                     expectLines: [String] = []) throws -> [Bool] {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("bulk", queueLimit: 4, maxMessageSize: max(size, 1))
        var arguments = ["bulk", space.path, "bulk", String(size), String(count)]
        if let threshold { arguments.append(String(threshold)) }
        let peer = try Peer(arguments + extra)
        defer { peer.kill() }
        var mapped: [Bool] = []
        for k in 0..<count {
            if copying {
                let message = try port.receive(timeout: .after(.seconds(120)))
                #expect(message.id == 11)
                #expect(message.payload == Self.pattern(size, k), "message \(k)")
                mapped.append(false)
            } else {
                let received = try port.receiveBuffer(timeout: .after(.seconds(120)))
                #expect(received.header.id == 11)
                #expect(!received.header.sender.isCurrentProcess)
                let count = received.buffer.count, bytes = received.buffer.bytes, isMapped = received.buffer.isMapped
                #expect(count == size)
                #expect(bytes == Self.pattern(size, k), "message \(k)")
                mapped.append(isMapped)
            }
        }
        for line in expectLines { #expect(peer.line(startingWith: line) != nil, "\(line)") }
        #expect(peer.line(startingWith: "sent") != nil)
        return mapped
    }

    @Test("1 MiB payloads cross as sealed memfds, mapped by the receiver")
    func megabyteOutOfLine() throws {
        #expect(try receiveBulk(size: 1 << 20, count: 6, threshold: 1 << 20) == [Bool](repeating: true, count: 6))
    }

    @Test("a sender's MessageBuffer crosses out of line too, and the copying receive reads a mapped payload")
    func bufferAndCopyingReceive() throws {
        _ = try receiveBulk(size: 3 << 20, count: 3, threshold: 1 << 20, extra: ["--buffer"], copying: true)
    }

    @Test("16 MiB crosses whole, at the port's largest size")
    func sixteenMegabytes() throws {
        #expect(try receiveBulk(size: 16 << 20, count: 1, threshold: 1 << 20) == [true])
    }

    @Test("below the threshold, or with the threshold off, payloads go in frames")
    func belowThreshold() throws {
        #expect(try receiveBulk(size: 100_000, count: 3, threshold: 1 << 20) == [false, false, false])
        #expect(try receiveBulk(size: 1 << 20, count: 2) == [false, false]) // by default, never out of line
        #expect(try receiveBulk(size: 1 << 20, count: 2, threshold: Int.max) == [false, false])
        #expect(try receiveBulk(size: 8192, count: 2, threshold: 4096) == [true, true])
        #expect(try receiveBulk(size: 65536, count: 6, threshold: 65536) == [Bool](repeating: true, count: 6))
    }

    @Test("messages larger than the control-frame limit cross in frames while the sender waits for credit")
    func largeInFrames() throws {
        // 6 MiB in frames fills the sender's outgoing queue past 4 MiB while it asks for credit (WANT): control
        // frames are limited apart from messages, so the sender does not take itself for a peer that does not read.
        #expect(try receiveBulk(size: 6 << 20, count: 8, threshold: Int.max) == [Bool](repeating: false, count: 8))
    }

    @Test("a sender with no descriptor left for a memfd (EMFILE) sends in frames, and everything arrives")
    func noDescriptorLeft() throws {
        // One frame's worth: frames that wait in the outgoing queue need a descriptor of their own to be watched.
        let mapped = try receiveBulk(size: 16384, count: 3, threshold: 4096, extra: ["--exhaust-descriptors"],
                                     expectLines: ["exhausted"])
        #expect(mapped == [false, false, false])
    }

    @Test("a sender that cannot write a memfd (EFBIG) sends 1 MiB in frames, and everything arrives")
    func memfdCannotBeWritten() throws {
        let mapped = try receiveBulk(size: 1 << 20, count: 3, threshold: 1 << 20, extra: ["--limit-file-size"])
        #expect(mapped == [false, false, false])
    }

    // MARK: - a raw peer

    /// A client that speaks the wire itself, so that it can send what PortLoop never would.
    final class RawPeer {
        let fd: Int32
        let handle: UInt32

        init(path: String) throws {
            let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw PortError.systemCallFailed(call: "socket", errno: errno) }
            self.fd = fd
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                let bytes = Array(path.utf8)
                raw.copyBytes(from: bytes)
                raw[bytes.count] = 0
            }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            guard connected == 0 else {
                close(fd)
                throw PortError.systemCallFailed(call: "connect", errno: errno)
            }
            do {
                handle = try Self.handshake(fd)
            } catch {
                close(fd)
                throw error
            }
        }

        /// HELLO, version 3, no status, no right; then the service's HELLO: its port's handle, with credit lent.
        static func handshake(_ fd: Int32) throws -> UInt32 {
            var hello = header(type: 1, flags: 0, length: 36)
            hello += le32(0x5049_4c50) + le16(3) + le16(0) + le32(65536) + [UInt8](repeating: 0, count: 16)
            try send(fd, hello, memfd: nil)
            var answer = [UInt8](repeating: 0, count: 65536)
            let n = recv(fd, &answer, answer.count, 0)
            guard n == 36, answer[0] == 1, answer[20] == 1 else { throw PortError.refused("no welcome") }
            guard read32(answer, 28) > 0 else { throw PortError.refused("no credit") }
            return read32(answer, 24)
        }

        deinit { close(fd) }

        static func header(type: UInt8, flags: UInt8, length: Int) -> [UInt8] {
            [type, flags, 0, 0] + le32(UInt32(length))
        }
        static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xff), UInt8(v >> 8)] }
        static func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
        static func read32(_ b: [UInt8], _ at: Int) -> UInt32 {
            (0..<4).reduce(0) { $0 | UInt32(b[at + $1]) << (8 * $1) }
        }

        /// One packet, with a descriptor beside it (SCM_RIGHTS) when given.
        static func send(_ fd: Int32, _ bytes: [UInt8], memfd: Int32?) throws {
            var bytes = bytes
            let control = UnsafeMutableRawPointer.allocate(byteCount: 24, alignment: 8)
            defer { control.deallocate() }
            let sent = bytes.withUnsafeMutableBytes { raw -> Int in
                var iov = iovec(iov_base: raw.baseAddress, iov_len: raw.count)
                return withUnsafeMutablePointer(to: &iov) { iovPointer in
                    var message = msghdr()
                    message.msg_iov = iovPointer
                    message.msg_iovlen = 1
                    if let memfd {
                        // struct cmsghdr { size_t len; int level; int type; } then the descriptor: CMSG_LEN(4) = 20.
                        control.initializeMemory(as: UInt8.self, repeating: 0, count: 24)
                        control.storeBytes(of: 20, as: Int.self)
                        control.storeBytes(of: SOL_SOCKET, toByteOffset: 8, as: Int32.self)
                        control.storeBytes(of: Int32(SCM_RIGHTS), toByteOffset: 12, as: Int32.self)
                        control.storeBytes(of: memfd, toByteOffset: 16, as: Int32.self)
                        message.msg_control = control
                        message.msg_controllen = 24
                    }
                    return Glibc.sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
                }
            }
            guard sent == bytes.count else { throw PortError.systemCallFailed(call: "sendmsg", errno: errno) }
        }

        /// A MESSAGE frame to the service's port whose payload is `memfd`, declared `size` bytes long.
        func sendOutOfLine(id: Int32, size: Int, memfd: Int32) throws {
            var frame = Self.header(type: 2, flags: 0x04, length: 52) // flag bit 2: out of line
            frame += Self.le32(handle) + Self.le32(UInt32(bitPattern: id)) + Self.le32(UInt32(size)) + Self.le32(0)
            frame += Self.le16(0) + Self.le16(1) + Self.le32(0) + Self.le32(0) + [UInt8](repeating: 0, count: 16)
            try Self.send(fd, frame, memfd: memfd)
        }

        /// Whether the service closed the connection within `seconds`.
        func closedByService(within seconds: Double) -> Bool {
            var pollfd = Glibc.pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let deadline = Date().addingTimeInterval(seconds)
            var scratch = [UInt8](repeating: 0, count: 65536)
            while Date() < deadline {
                guard poll(&pollfd, 1, 100) > 0 else { continue }
                let n = recv(fd, &scratch, scratch.count, Int32(MSG_DONTWAIT))
                if n == 0 || (n < 0 && errno == ECONNRESET) { return true }
            }
            return false
        }
    }

    // Glibc's module leaves out what needs _GNU_SOURCE: memfd_create and the seals (linux/memfd.h, fcntl.h).
    static let mfdCloexec: UInt32 = 0x1, mfdAllowSealing: UInt32 = 0x2
    static let addSeals: Int32 = 1033
    static let sealSeal: Int32 = 0x1, sealShrink: Int32 = 0x2, sealGrow: Int32 = 0x4, sealWrite: Int32 = 0x8
    static let allSeals = sealShrink | sealGrow | sealWrite | sealSeal
    typealias MemfdCreate = @convention(c) (UnsafePointer<CChar>, UInt32) -> Int32
    static let memfdCreate: MemfdCreate = unsafeBitCast(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "memfd_create"),
                                                        to: MemfdCreate.self)

    /// A memfd holding `bytes`, with `seals` added (F_ADD_SEALS).
    static func memfd(_ bytes: [UInt8], seals: Int32) throws -> Int32 {
        let fd = memfdCreate("test-payload", mfdCloexec | mfdAllowSealing)
        guard fd >= 0 else { throw PortError.systemCallFailed(call: "memfd_create", errno: errno) }
        guard pwrite(fd, bytes, bytes.count, 0) == bytes.count else {
            throw PortError.systemCallFailed(call: "pwrite", errno: errno)
        }
        if seals != 0 && fcntl(fd, addSeals, seals) != 0 {
            throw PortError.systemCallFailed(call: "fcntl", errno: errno)
        }
        return fd
    }

    @Test("a memfd with every seal and the declared size is delivered (the raw peer speaks the wire rightly)")
    func rawPeerSealed() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("raw", queueLimit: 4, maxMessageSize: 1 << 20)
        let peer = try RawPeer(path: space.path + "/raw")
        let bytes = Self.pattern(1 << 20, 5)
        let fd = try Self.memfd(bytes, seals: Self.allSeals)
        defer { close(fd) }
        try peer.sendOutOfLine(id: 40, size: bytes.count, memfd: fd)
        let received = try port.receiveBuffer(timeout: .after(.seconds(10)))
        let isMapped = received.buffer.isMapped, receivedBytes = received.buffer.bytes
        #expect(received.header.id == 40)
        #expect(isMapped)
        #expect(receivedBytes == bytes)
        #expect(!peer.closedByService(within: 0.2))
    }

    @Test("a peer that could change the bytes after sending (no write seal) is cut off, and nothing is delivered")
    func unsealedRefused() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("raw", queueLimit: 4, maxMessageSize: 1 << 20)
        let peer = try RawPeer(path: space.path + "/raw")
        let fd = try Self.memfd(Self.pattern(1 << 20, 1), seals: Self.sealShrink | Self.sealGrow)
        defer { close(fd) }
        try peer.sendOutOfLine(id: 41, size: 1 << 20, memfd: fd)
        // What such a sender could do next: change the bytes under the receiver's mapping.
        let changed = Self.pattern(1 << 20, 2)
        #expect(pwrite(fd, changed, changed.count, 0) == changed.count)
        #expect(peer.closedByService(within: 10))
        #expect(throws: PortError.timedOut) { try port.receive(timeout: .after(.milliseconds(100))) }
    }

    @Test("a memfd longer than declared, one over the port's size, and a descriptor that is no memfd are refused")
    func liesRefused() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("raw", queueLimit: 4, maxMessageSize: 1 << 16)
        let longer = try Self.memfd(Self.pattern(4097, 0), seals: Self.allSeals)
        let oversized = try Self.memfd(Self.pattern((1 << 16) + 1, 0), seals: Self.allSeals)
        let pipeEnds: [Int32] = try {
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw PortError.systemCallFailed(call: "pipe", errno: errno) }
            return ends
        }()
        defer { for fd in [longer, oversized] + pipeEnds { close(fd) } }
        for (fd, size) in [(longer, 4096), (oversized, (1 << 16) + 1), (pipeEnds[0], 4096)] {
            let peer = try RawPeer(path: space.path + "/raw")
            try peer.sendOutOfLine(id: 42, size: size, memfd: fd)
            #expect(peer.closedByService(within: 10), "size \(size)")
        }
        #expect(throws: PortError.timedOut) { try port.receive(timeout: .after(.milliseconds(100))) }
    }
}
