import CPortLoop
import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// SIGINT and SIGTERM as a run loop source: blocked in every thread, read from a signalfd that sits in the
/// dispatcher loop's port set through a ``RunLoopDescriptorSource``.
///
/// Why not a signal handler: a handler interrupts whatever the thread was doing and may call only
/// async-signal-safe functions, so it could at most set a flag or write to a pipe, and something would still
/// have to wake the loop. With the signals blocked, the kernel keeps them pending and the signalfd becomes
/// readable: the loop wakes exactly as it does for a port message, and the stop runs as ordinary loop work, on
/// the loop's thread, between two requests.
enum ShutdownSignals {
    static let numbers: [Int32] = [SIGINT, SIGTERM]

    /// Blocks the signals in the calling thread. Call it first thing on the main thread: threads inherit the
    /// mask, so every thread created afterwards (workers, clients, anything a library starts) blocks them too,
    /// and a signal sent to the process can only be taken from the signalfd.
    static func blockInAllThreads() throws(DaemonError) {
        let rc = numbers.withUnsafeBufferPointer { pl_signals_block($0.baseAddress, $0.count) }
        guard rc == 0 else { throw .system(call: "pthread_sigmask", errno: rc) }
    }

    /// Opens the signalfd; the caller owns it.
    static func openDescriptor() throws(DaemonError) -> Int32 {
        let fd = numbers.withUnsafeBufferPointer { pl_signalfd_open($0.baseAddress, $0.count) }
        guard fd >= 0 else { throw .system(call: "signalfd", errno: errno) }
        return fd
    }

    /// A source that calls `received` on the loop's thread with each signal read from `fd`. It reads until
    /// none is pending: the port set reports a descriptor while it is readable.
    static func source(fileDescriptor fd: Int32,
                       received: @escaping @Sendable (Int32) -> Void) -> RunLoopDescriptorSource {
        RunLoopDescriptorSource(fileDescriptor: fd) { source in
            while true {
                let signal = pl_signalfd_read(source.fileDescriptor)
                if signal > 0 { received(signal); continue }
                if signal < 0 { complain("portloop-echod: reading the signalfd failed: errno \(errno)") }
                return
            }
        }
    }

    /// `SIGINT`, `SIGTERM`, or the number.
    static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGINT: "SIGINT"
        case SIGTERM: "SIGTERM"
        default: "signal \(signal)"
        }
    }
}
