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

    /// Waits for the next message and copies its payload into `buffer`, which it must fit. Allocates
    /// nothing: on a port `PortReceiveRight.receive(into:)`, on a set `PortSet.receive(into:)`.
    @inline(__always)
    func receive(into buffer: UnsafeMutableRawBufferPointer) {
        switch self {
        case let .port(shared):
            _ = must("receive(into:)") { () throws(PortError) in
                try shared.right.receive(into: buffer, timeout: .forever)
            }
        case let .set(set, _):
            let event = must("PortSet.receive(into:)") { () throws(PortError) in
                try set.receive(into: buffer, timeout: .forever)
            }
            guard case .message = event else { fatalError("unexpected descriptor event") }
        }
    }
}

/// Many receive rights held together: a receive right is `~Copyable`, so there is no `Array` of them; this
/// final class owns a buffer of them instead, allocated up front (so that filling it allocates nothing but
/// the ports) and destroys them when it goes.
final class ReceiveRights: @unchecked Sendable {
    private let base: UnsafeMutablePointer<PortReceiveRight>
    let capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        base = .allocate(capacity: capacity)
    }

    /// Creates `count` ports with the given limits.
    convenience init(count: Int, queueLimit: Int = PortReceiveRight.defaultQueueLimit) {
        self.init(capacity: count)
        for _ in 0..<count {
            append(must("PortReceiveRight") { () throws(PortError) in try PortReceiveRight(queueLimit: queueLimit) })
        }
    }

    func append(_ right: consuming PortReceiveRight) {
        precondition(count < capacity, "ReceiveRights is full")
        (base + count).initialize(to: right)
        count += 1
    }

    /// Lends the right at `index` to `body`.
    func with<T>(_ index: Int, _ body: (borrowing PortReceiveRight) throws(PortError) -> T) -> T {
        precondition(index < count)
        return must("port \(index)") { () throws(PortError) in try body(base[index]) }
    }

    /// Destroys every port now (dropping the object does the same).
    func removeAll() {
        base.deinitialize(count: count)
        count = 0
    }

    deinit {
        base.deinitialize(count: count)
        base.deallocate()
    }
}
