import CPortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Signals as a run loop source: the loop wakes for a signal as it does for a port message, and the handler
/// runs on the loop's thread as ordinary loop work (libdispatch's `DISPATCH_SOURCE_TYPE_SIGNAL`; CF programs
/// use a dispatch source or a `CFFileDescriptor` on a self-pipe for the same).
///
/// The signals are read from a `signalfd` that sits in the port set of each mode the source is in. That works
/// only while the signals are blocked in every thread, so that the kernel keeps them pending instead of
/// running a handler or the default action: call ``block(_:)`` first thing on the main thread, before any
/// other thread exists (threads inherit the mask). Why not a signal handler: it interrupts whatever the thread
/// was doing and may call only async-signal-safe functions, so it could at most set a flag, and something would
/// still have to wake the loop.
///
/// ```swift
/// try RunLoopSignalSource.block([SIGTERM, SIGHUP])  // first thing in main
/// let signals = try RunLoopSignalSource(signals: [SIGTERM, SIGHUP]) { signal in
///     if signal == SIGTERM { PortRunLoop.current.stop() } else { reloadConfiguration() }
/// }
/// try PortRunLoop.current.add(signals, mode: .default)
/// ```
///
/// The source owns its descriptor and closes it when it is invalidated or released.
public final class RunLoopSignalSource: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// The signals the source reports.
    public let signals: [Int32]
    /// The descriptor source that puts the signalfd in the loop's port sets.
    let descriptorSource: RunLoopDescriptorSource
    private let descriptor: Descriptor

    /// The signalfd, closed once: the loop may be about to read it on its thread while another thread
    /// invalidates the source, and a closed number can be reused by the next `open` anywhere in the process.
    private final class Descriptor: @unchecked Sendable {
        private let lock = PThreadLock()
        private var fd: Int32

        init(_ fd: Int32) { self.fd = fd }

        /// Reads one pending signal: its number, 0 when none is pending or the descriptor is closed.
        func read() -> Int32 {
            lock.withLock {
                guard fd >= 0 else { return 0 }
                let signal = pl_signalfd_read(fd)
                if signal < 0 { PortRunLoop.logError("RunLoopSignalSource: read failed: \(errnoDescription(errno))") }
                return max(0, signal)
            }
        }

        func close() {
            lock.withLock {
                guard fd >= 0 else { return }
                _ = Glibc.close(fd)
                fd = -1
            }
        }
    }

    /// Blocks the signals in the calling thread (`pthread_sigmask` with `SIG_BLOCK`), so that they stay pending
    /// for a ``RunLoopSignalSource``. Threads created afterwards inherit the mask: call it on the main thread
    /// before any other thread starts.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for a number that is not a signal.
    public static func block(_ signals: [Int32]) throws(PortError) {
        let rc = signals.withUnsafeBufferPointer { pl_signals_block($0.baseAddress, $0.count) }
        guard rc == 0 else {
            throw .invalidArgument(argument: "signals", reason: "\(signals) cannot be blocked: \(errnoDescription(rc))")
        }
    }

    /// Creates a source for the signals (`signalfd`). Add it to a loop with ``PortRunLoop/add(_:mode:)-(RunLoopSignalSource,_)``.
    /// - Parameters:
    ///   - signals: the signals to report; block them first with ``block(_:)``.
    ///   - order: performance order among the loop's sources (`CFRunLoopSourceGetOrder`).
    ///   - handler: called on the loop's thread with each signal received, in the order they are read.
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for an empty list or a number that is not a
    ///   signal, ``PortError/systemCallFailed(call:errno:)`` when no descriptor is left.
    public init(signals: [Int32], order: Int = 0, handler: @escaping @Sendable (Int32) -> Void) throws(PortError) {
        guard !signals.isEmpty else { throw .invalidArgument(argument: "signals", reason: "empty") }
        let fd = signals.withUnsafeBufferPointer { pl_signalfd_open($0.baseAddress, $0.count) }
        guard fd >= 0 else {
            let code = errno
            if code == EINVAL { throw .invalidArgument(argument: "signals", reason: "\(signals) holds a number that is not a signal") }
            throw .systemCallFailed(call: "signalfd", errno: code)
        }
        let descriptor = Descriptor(fd)
        self.signals = signals
        self.descriptor = descriptor
        // The port set reports the descriptor while a signal is pending: read until none is.
        descriptorSource = RunLoopDescriptorSource(fileDescriptor: fd, order: order) { _ in
            while case let signal = descriptor.read(), signal > 0 { handler(signal) }
        }
    }

    deinit {
        descriptorSource.invalidate()
        descriptor.close()
    }

    /// Removes the source from every mode of its loop and closes its descriptor; the signals stay blocked and
    /// pending signals stay pending (`dispatch_source_cancel`).
    public func invalidate() {
        descriptorSource.invalidate()
        descriptor.close()
    }

    /// Whether the source has not been invalidated.
    public var isValid: Bool { descriptorSource.isValid }

    public static func == (lhs: RunLoopSignalSource, rhs: RunLoopSignalSource) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String { "RunLoopSignalSource(signals: \(signals), valid: \(isValid))" }
}

extension PortRunLoop {
    /// Adds a signal source to a mode or to `.common`: its signalfd joins the mode's port set, so a signal wakes
    /// the loop (`CFRunLoopAddSource`).
    /// - Throws: as for a ``RunLoopDescriptorSource``.
    public func add(_ source: RunLoopSignalSource, mode: Mode) throws(RunLoopError) {
        try add(source.descriptorSource, mode: mode)
    }

    /// Removes a signal source from a mode or from `.common` (`CFRunLoopRemoveSource`).
    public func remove(_ source: RunLoopSignalSource, mode: Mode) { remove(source.descriptorSource, mode: mode) }

    /// Whether the mode holds the signal source (`CFRunLoopContainsSource`).
    public func contains(_ source: RunLoopSignalSource, mode: Mode) -> Bool {
        contains(source.descriptorSource, mode: mode)
    }
}
