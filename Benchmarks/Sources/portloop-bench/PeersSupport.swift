#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchFloors
import CBenchSupport
import NIOPosix

// Helpers of the peers scenarios (PortLoop beside SwiftNIO and gRPC across processes): allocation windows, a
// socket directory per run, waiting for async code from a plain thread, and reading another process's
// descriptors and resident memory.

/// Counts this process's heap allocations between ``begin()`` and ``end()`` (CBenchSupport's counting
/// allocator; process-wide, every thread). Each run of a variant gets one; its figure is allocations per
/// message.
final class AllocationWindow: @unchecked Sendable {
    private var first: UInt64 = 0
    private(set) var count: UInt64 = 0

    func begin() {
        first = bs_alloc_count()
        bs_alloc_counting(1)
    }

    func end() {
        bs_alloc_counting(0)
        count = bs_alloc_count() - first
    }
}

/// A directory for one run's Unix domain socket or PortLoop namespace (mkdtemp under /tmp, mode 0700), removed
/// with whatever is left in it by ``remove()``. NIO's and gRPC's servers leave their socket file when they close.
final class SocketDirectory {
    let path: String
    /// The socket's file name inside the directory.
    static let socketName = "peer.sock"
    var socketPath: String { path + "/" + Self.socketName }

    init() {
        var template = Array("/tmp/portloop-bench-peer-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed: errno \(errno)")
        path = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Removes the directory and whatever is in it (a PortLoop namespace leaves lock files, and the socket files of
    /// client services whose processes were ended).
    func remove() {
        for name in directoryEntries(path) { unlink(path + "/" + name) }
        if rmdir(path) != 0 { printError("warning: cannot remove \(path): errno \(errno)") }
    }
}

/// Runs async work from a plain thread (the scenarios' thread) and waits for its result on a latch: the
/// Swift concurrency pool's threads do the work meanwhile.
func waitForAsync<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws -> T) -> T {
    let latch = Latch<Result<T, any Error>>()
    Task {
        do { latch.set(.success(try await body())) } catch { latch.set(.failure(error)) }
    }
    switch latch.wait() {
    case .success(let value): return value
    case .failure(let error): fatalError("\(what): \(error)")
    }
}

/// Raises this process's soft limit of open descriptors to its hard limit: a server of 1,000 clients needs more
/// than the usual 1,024.
func raiseDescriptorLimit() {
    var limit = rlimit()
    let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
    limit.rlim_cur = limit.rlim_max
    if setrlimit(resource, &limit) != 0 { printError("warning: setrlimit RLIMIT_NOFILE failed: errno \(errno)") }
}

/// What another process holds, read from /proc: open descriptors (entries of /proc/PID/fd) and resident set
/// (VmRSS of /proc/PID/status, in bytes). Nil when the process is gone.
func processFootprint(_ pid: pid_t) -> (descriptors: Int, residentBytes: Int)? {
    guard let directory = opendir("/proc/\(pid)/fd") else { return nil }
    var entries = 0
    while readdir(directory) != nil { entries += 1 }
    closedir(directory)
    guard let file = fopen("/proc/\(pid)/status", "r") else { return nil }
    defer { fclose(file) }
    var line = [CChar](repeating: 0, count: 256)
    var resident: Int?
    while fgets(&line, Int32(line.count), file) != nil {
        let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if text.hasPrefix("VmRSS:") {
            let digits = text.dropFirst(6).filter { $0.isNumber }
            resident = Int(digits).map { $0 * 1024 } // in kB
        }
    }
    guard let resident else { return nil }
    return (entries - 2, resident) // "." and ".."
}

/// The payload sizes the peers scenarios measure (`--payloads`); nil: all of them.
nonisolated(unsafe) var selectedPayloads: Set<Int>?

/// The payload sizes of the peers scenarios, with their labels and how many messages a run moves.
struct PeerPayload: Sendable {
    var size: Int
    var label: String
    /// Round trips per run (peers-pingpong), and one-way messages per run (peers-throughput).
    var roundTrips: Int
    var messages: Int

    static func all(quick: Bool) -> [PeerPayload] {
        every(quick: quick).filter { selectedPayloads?.contains($0.size) ?? true }
    }

    /// Every payload size, whatever `--payloads` chose.
    static func every(quick: Bool) -> [PeerPayload] {
        [
            PeerPayload(size: 8, label: "8 B", roundTrips: quick ? 1_000 : 10_000, messages: quick ? 20_000 : 200_000),
            PeerPayload(size: 4096, label: "4 KiB", roundTrips: quick ? 1_000 : 10_000,
                        messages: quick ? 10_000 : 100_000),
            PeerPayload(size: 1 << 20, label: "1 MiB", roundTrips: quick ? 20 : 200, messages: quick ? 100 : 1_000),
        ]
    }

    /// Untimed round trips before the clock starts.
    var warmup: Int { max(roundTrips / 10, 10) }
}

/// Starts NIO's process-wide event loop group (gRPC's default), whose threads and descriptors then live as long as
/// the process: started before any scenario, they are not counted as a run's leak.
func primeNIOSingletonGroup() {
    _ = MultiThreadedEventLoopGroup.singleton.next()
}
