#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import PortLoop

/// A plain pthread running a closure, joined explicitly: the benchmarks want real threads that block in
/// the port layer, not tasks on a cooperative pool.
final class JoinableThread {
    private let handle: pthread_t

    init(_ body: @escaping @Sendable () -> Void) {
        let context = Unmanaged.passRetained(ThreadStart(body)).toOpaque()
        var handle = pthread_t()
        let status = pthread_create(&handle, nil, { raw in
            Unmanaged<ThreadStart>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, context)
        precondition(status == 0, "pthread_create failed: \(status)")
        self.handle = handle
    }

    func join() {
        pthread_join(handle, nil)
    }
}

private final class ThreadStart {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// A receive right shared with another thread (the right itself is `~Copyable` and cannot be captured).
final class SharedReceiveRight: Sendable {
    let right: PortReceiveRight
    init(_ right: consuming PortReceiveRight) { self.right = right }
}

/// A value one thread writes and another reads after joining it (the join orders the accesses).
final class SharedValue<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

/// Runs a port call that must not fail in a benchmark; a failure ends the program with the error.
func must<T: ~Copyable>(_ what: @autoclosure () -> String, _ body: () throws(PortError) -> T) -> T {
    do {
        return try body()
    } catch {
        fatalError("\(what()): \(error)")
    }
}

/// Where a benchmark thread waits for its next message: directly on a port, or on a set containing it.
enum Inbox: Sendable {
    case port(SharedReceiveRight)
    /// The right stays here so that the port lives as long as the set is used.
    case set(PortSet, SharedReceiveRight)

    /// Makes an inbox on `right`: the port itself, or a new set holding only it.
    static func make(_ right: SharedReceiveRight, viaSet: Bool) -> Inbox {
        guard viaSet else { return .port(right) }
        let set = must("PortSet()") { () throws(PortError) in try PortSet() }
        must("PortSet.insert") { () throws(PortError) in try set.insert(right.right) }
        return .set(set, right)
    }

    /// The set, if this inbox is one.
    var set: PortSet? {
        if case let .set(set, _) = self { return set }
        return nil
    }

    /// Waits for the next message and copies its payload into `buffer`, which it must fit.
    /// On a port this allocates nothing; `PortSet.receive` returns the payload as a new array.
    @inline(__always)
    func receive(into buffer: UnsafeMutableRawBufferPointer) {
        switch self {
        case let .port(shared):
            _ = must("receive(into:)") { () throws(PortError) in
                try shared.right.receive(into: buffer, timeout: .forever)
            }
        case let .set(set, _):
            let event = must("PortSet.receive") { () throws(PortError) in
                try set.receive(timeout: .forever, maxSize: buffer.count)
            }
            guard case let .message(message) = event else { fatalError("unexpected descriptor event") }
            message.payload.withUnsafeBytes { buffer.copyMemory(from: $0) }
        }
    }
}
