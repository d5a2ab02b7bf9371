// What travels from the event server to the app, and how the three processes print their trace lines.
import PortLoop
import PortLoopDemoSupport
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The name the app checks in, in the temporary namespace the demo makes (SpringBoard finds an app's event port
/// by name too).
let serviceName = "hid-events"

/// Message ids on the app's port. The server sends all of them.
enum MessageID {
    /// The server's first message. Its one attachment is a send right to a port of the server's own that nobody
    /// reads: it becomes a dead name in the app when the server's process ends, however it ends.
    static let hello: Int32 = 1
    /// One input event; the payload is an ``InputEvent``.
    static let event: Int32 = 2
    /// The server's last message; the payload is how many events it sent (4 bytes, little-endian).
    static let end: Int32 = 3
}

/// Exit statuses of the three processes.
enum ExitStatus {
    static let ok: Int32 = 0
    static let failure: Int32 = 1
    /// The other side died: the app saw the server's port become a dead name, or the server the app's.
    static let peerDied: Int32 = 3
    /// The conductor was interrupted (SIGINT or SIGTERM) and stopped both children.
    static let interrupted: Int32 = 130
}

/// The kinds of input the server makes: a touch is began, a burst of moves, ended; a key press is down, up.
enum EventKind: UInt8 {
    case touchBegan = 1, touchMoved, touchEnded, keyDown, keyUp

    var label: String {
        switch self {
        case .touchBegan: "began"
        case .touchMoved: "moved"
        case .touchEnded: "ended"
        case .keyDown: "down"
        case .keyUp: "up"
        }
    }

    var isTouch: Bool { self == .touchBegan || self == .touchMoved || self == .touchEnded }
}

/// One input event as the server forwards it, 21 bytes on the wire.
struct InputEvent: Equatable {
    /// CLOCK_MONOTONIC nanoseconds when the server sent it: one clock for every process of the host, so the
    /// app subtracts it from its own reading to get the latency.
    var timestamp: Int64
    /// 1, 2, 3 … in the order the server sent the events.
    var sequence: UInt32
    /// The touch or key press it belongs to, counted from 1.
    var gesture: UInt32
    var kind: EventKind
    /// Touch position in points; for keys `x` is the key code.
    var x: Int16
    var y: Int16

    static let size = 21

    var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.size)
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { out += $0 } }
        append(timestamp)
        append(sequence)
        append(gesture)
        append(kind.rawValue)
        append(x)
        append(y)
        return out
    }

    /// "touch 3 moved (120, 480)" or "key 2 down (code 36)".
    var description: String {
        kind.isTouch ? "touch \(gesture) \(kind.label) (\(x), \(y))" : "key \(gesture) \(kind.label) (code \(x))"
    }
}

// In an extension, so that the struct keeps its memberwise initializer.
extension InputEvent {
    /// Decodes a payload; nil when it is not an event of this demo.
    init?(_ bytes: [UInt8]) {
        guard bytes.count == Self.size, let kind = EventKind(rawValue: bytes[16]) else { return nil }
        func load<T: FixedWidthInteger>(_ offset: Int, as: T.Type) -> T {
            bytes.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
        }
        self.init(timestamp: load(0, as: Int64.self), sequence: load(8, as: UInt32.self),
                  gesture: load(12, as: UInt32.self), kind: kind, x: load(17, as: Int16.self),
                  y: load(19, as: Int16.self))
    }
}

/// A 32-bit count as the end message carries it.
func countBytes(_ count: Int) -> [UInt8] { withUnsafeBytes(of: UInt32(count).littleEndian) { Array($0) } }

/// The count an end message carries; nil for a payload of another size.
func count(from bytes: [UInt8]) -> Int? {
    guard bytes.count == 4 else { return nil }
    return Int(bytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) })
}

/// Writes a line to standard output with one `write`, so that the lines of the three processes, which share
/// the conductor's standard output, never interleave within a line (and none waits in a buffer when one dies).
func say(_ line: String) {
    var text = line + "\n"
    text.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let n = write(STDOUT_FILENO, bytes.baseAddress! + offset, bytes.count - offset)
            if n > 0 {
                offset += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}

/// One process's trace lines: µs since the demo's start (the conductor's clock reading, shared by all three),
/// the process, what happened.
struct Tracer: Sendable {
    let start: Int64
    let process: String
    let quiet: Bool

    /// `[    1234 µs] app     afterWaiting   wake 5: …`; nothing when quiet.
    func line(_ at: Int64, _ activity: String, _ detail: String = "") {
        guard !quiet else { return }
        say(stamp(at) + " " + padRight(process, 6) + " " + (detail.isEmpty ? activity : padRight(activity, 14) + " " + detail))
    }

    /// A line that is printed even when quiet: how the process ended, or why it could not go on.
    func always(_ text: String) { say(stamp(now()) + " " + padRight(process, 6) + " " + text) }

    private func stamp(_ at: Int64) -> String { "[" + padLeft(String((at - start) / 1000), 9) + " µs]" }
}
