// EXPERIMENTAL: PortLoop's main run loop as the process's main executor, through the custom main and global
// executor interface that Swift 6.3's concurrency library carries as SPI (`@_spi(ExperimentalCustomExecutors)`).
// That interface is not public yet and may change, so what is here is PortLoop SPI too: a program opts in with
// `@_spi(Experimental) import PortLoop`. Compiled only by compilers that have the interface.
#if compiler(>=6.3)
@_spi(ExperimentalCustomExecutors) import _Concurrency
import Synchronization

/// **Experimental.** The main run loop as the process's main executor (`MainActor.executor`): `@MainActor` jobs
/// are main-loop work in the common modes, run between the loop's timers, sources, observers and
/// `DispatchQueue.main` blocks, and an `async` main runs the main run loop instead of `dispatchMain()`.
///
/// Without it, an `async` main leaves the main thread to libdispatch, and `PortRunLoop.main` can never run.
/// It is SPI while Swift's interface is: `@_spi(Experimental) import PortLoop`. Two ways to install it, both on
/// the main thread before any task exists:
///
/// - From a synchronous `main`, with no compiler flag: ``runMain(_:)`` installs the executors, runs `operation`
///   as the main task and runs the main loop until it returns.
/// - From an `async` main: name ``PortLoopExecutorFactory`` as the program's `DefaultExecutorFactory`, inside the
///   `@main` type, and make `main` `@MainActor`. Swift 6.3 on Linux honours that only with availability checking
///   off (`swiftSettings: [.unsafeFlags(["-Xfrontend", "-disable-availability-checking"])]` on the executable
///   target). The main task may begin before the loop runs; from its first suspension on, it is main-loop work.
///
/// ```swift
/// @main struct Daemon {
///     static func main() throws {
///         try MainRunLoopExecutor.runMain {
///             let source = try RunLoopPortSource { message in PortReply(id: message.id) }
///             try PortRunLoop.main.add(source, mode: .default)
///             try await serve(source.makeSendRight()) // @MainActor code, on the main loop
///         }
///     }
/// }
/// ```
///
/// Jobs run as a ``RunLoopSerialExecutor`` of the main loop runs them: FIFO, one at a time, never re-entrantly
/// from a nested run. ``run()`` runs the main loop's default mode until ``stop()``.
@_spi(Experimental)
public final class MainRunLoopExecutor: MainExecutor, @unchecked Sendable, CustomStringConvertible {
    /// The one main executor of the process.
    public static let shared = MainRunLoopExecutor()

    private let stopRequested = Atomic<Bool>(false)
    /// The main loop's serial executor, made when first needed; guarded by `lock`.
    private let lock = PThreadLock()
    private var serial: RunLoopSerialExecutor?

    private init() {}

    /// The main loop's serial executor. Only the port layer can refuse to make it (no descriptor for the main
    /// loop's first mode); the jobs then travel as blocks of the main loop until it can be made.
    private func serialExecutor() -> RunLoopSerialExecutor? {
        lock.withLock {
            if let serial { return serial }
            do throws(RunLoopError) {
                serial = try RunLoopSerialExecutor(loop: .main, modes: [.common])
            } catch {
                PortRunLoop.logError("MainRunLoopExecutor: main loop jobs go as blocks for now: \(error)")
            }
            return serial
        }
    }

    /// Queues a job for the main loop (`Executor.enqueue`). Safe from any thread.
    public func enqueue(_ job: consuming ExecutorJob) {
        if let serial = serialExecutor() {
            serial.enqueue(job)
            return
        }
        let unowned = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        try? PortRunLoop.main.performAndWakeUp { unowned.runSynchronously(on: executor) }
    }

    /// Runs the main loop's default mode until ``stop()`` (`RunLoopExecutor.run`). Call it on the main thread:
    /// elsewhere it stops the program, as only the main thread may run the main loop.
    public func run() throws {
        precondition(isMainThread(), "MainRunLoopExecutor.run() must be called on the main thread")
        stopRequested.store(false, ordering: .releasing)
        _ = serialExecutor()
        while !stopRequested.load(ordering: .acquiring) {
            PortRunLoop.main.run(mode: .default)
        }
    }

    /// Runs the main loop until `condition` is true, checked after every source and before every sleep
    /// (`RunLoopExecutor.runUntil`).
    public func runUntil(_ condition: () -> Bool) throws {
        precondition(isMainThread(), "MainRunLoopExecutor.runUntil(_:) must be called on the main thread")
        _ = serialExecutor()
        while !condition() {
            // Returns after each source (jobs are one); timers do not count, so wake up to look at least often.
            PortRunLoop.main.run(mode: .default, timeout: .milliseconds(10), returnAfterSourceHandled: true)
        }
    }

    /// Ends ``run()`` after the main loop's current pass (`RunLoopExecutor.stop`). Safe from any thread.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        PortRunLoop.main.stop()
        PortRunLoop.main.wakeUp()
    }

    /// Stops the program unless called on the main thread (`SerialExecutor.checkIsolated`).
    public func checkIsolated() {
        precondition(isMainThread(), "expected to run on the main thread, the main loop's")
    }

    /// Whether the calling thread is the main thread (`SerialExecutor.isIsolatingCurrentContext`).
    public func isIsolatingCurrentContext() -> Bool? { isMainThread() }

    public var description: String { "MainRunLoopExecutor(main loop, stopped: \(stopRequested.load(ordering: .relaxed)))" }

    /// **Experimental.** Installs PortLoop's executors (``PortLoopExecutorFactory``), runs `operation` as the main
    /// task, isolated to the main actor, and runs the main loop until it has returned; then returns its value
    /// or rethrows its error. Call it once, first thing in a synchronous `main`, on the main thread, before any
    /// task exists.
    public static func runMain<Value: Sendable>(
        _ operation: @escaping @MainActor @Sendable () async throws -> Value
    ) throws -> Value {
        precondition(isMainThread(), "MainRunLoopExecutor.runMain(_:) must be called on the main thread")
        if !(MainActor.executor is MainRunLoopExecutor) {
            _createExecutors(factory: PortLoopExecutorFactory.self)
        }
        let outcome = MainTaskOutcome<Value>()
        Task { @MainActor in
            do { outcome.result = .success(try await operation()) } catch { outcome.result = .failure(error) }
            shared.stop()
        }
        try shared.run()
        // The task ran on this thread, and run() returned only after it stopped the loop.
        return try outcome.result!.get()
    }
}

/// The main task's result, written by the task on the main thread and read there once the loop has stopped.
private final class MainTaskOutcome<Value>: @unchecked Sendable {
    var result: Result<Value, any Error>?
}

/// **Experimental.** PortLoop's executors for the custom-executor interface (`ExecutorFactory`): the main run
/// loop as the main executor (``MainRunLoopExecutor``), and the platform's default executor for everything else.
/// Name it as the program's `DefaultExecutorFactory` in the `@main` type of an `async` main (see
/// ``MainRunLoopExecutor`` for the flag Swift 6.3 needs), or let ``MainRunLoopExecutor/runMain(_:)`` install it.
@_spi(Experimental)
public struct PortLoopExecutorFactory: ExecutorFactory {
    /// ``MainRunLoopExecutor/shared``.
    public static var mainExecutor: any MainExecutor { MainRunLoopExecutor.shared }
    /// The platform's default executor (libdispatch's global queues on Linux).
    public static var defaultExecutor: any TaskExecutor { PlatformExecutorFactory.defaultExecutor }
}
#endif
