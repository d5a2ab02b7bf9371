#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization

/// A thread that keeps running its own run loop until stopped: the "permanent thread" of Objective-C code,
/// an `NSThread` whose loop holds an `NSMachPort` so that it never runs empty, with the work sent to it by
/// `performSelector:onThread:withObject:waitUntilDone:`.
///
/// The thread runs the default mode; tasks run in the common modes, FIFO, between the loop's other work.
/// Add your own sources, timers and observers to ``loop`` from any thread, and actors through a
/// ``RunLoopSerialExecutor`` on ``loop``: ``stop()`` runs their queued jobs before the thread ends.
///
/// The thread does not keep this object alive: when the last reference goes, the loop is stopped and the
/// thread joined (or, if that last reference went on the thread itself, left to finish on its own). The usual
/// Objective-C version has to pass `weakSelf` into the thread's block for the same reason.
///
/// ```swift
/// let worker = try RunLoopThread(name: "worker")
/// try worker.execute { print("on", worker.name) }
/// let sum = try worker.executeAndWait { 1 + 2 }   // 3, computed on the worker
/// let product = try await worker.run { 2 * 3 }   // 6, without blocking the awaiting task's thread
/// worker.stop()                                   // ends the loop and joins the thread
/// ```
public final class RunLoopThread: Sendable, CustomStringConvertible {
    /// The thread's name, as given (the kernel keeps its first 15 bytes: `pthread_setname_np`).
    public let name: String
    /// The thread's run loop. Everything but running it is allowed from any thread.
    public let loop: PortRunLoop
    /// The state the thread shares with this object; the thread holds this, never the object.
    let core: Core

    /// Starts a thread (`[[NSThread alloc] initWithBlock:]`, `-start`, `pthread_setname_np`) whose loop holds a
    /// port source so that it never runs empty, runs `mode` until stopped, and returns once the loop is ready
    /// for tasks.
    /// - Parameters:
    ///   - name: the thread's name, shown by debuggers and `top -H`.
    ///   - mode: the mode the thread runs; the default mode by default. Tasks run in the common modes and in
    ///     this one. Not `.common`: that is a marker for the set of common modes, not a mode a loop can run
    ///     (`CFRunLoopRunInMode(kCFRunLoopCommonModes, …)` returns at once).
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for `.common` (no thread is started),
    ///   ``PortError/systemCallFailed(call:errno:)`` if the thread cannot be created, or the port layer's
    ///   error if the keep-alive port or the loop's port set cannot be.
    public convenience init(name: String = "RunLoopThread", mode: PortRunLoop.Mode = .default) throws(PortError) {
        guard mode != .common else {
            throw .invalidArgument(argument: "mode", reason: "\(mode) is the common-modes marker, not a mode a loop can run")
        }
        try self.init(name: name, mode: mode) { loop, isStopped in
            while !isStopped() {
                // `finished` would mean the keep-alive source is gone and the mode is empty; running again
                // would spin, so end the thread instead. `stopped` from a task's own stop() just runs again:
                // only RunLoopThread.stop() ends a permanent thread.
                if loop.run(mode: mode) == .finished { break }
            }
        }
    }

    /// Starts a thread whose loop you run yourself: `body` is called on the new thread with its loop, and the
    /// thread ends when `body` returns. Run the modes you want, with the timeouts you want, between work of
    /// your own; `isStopped()` turns true once ``stop()`` has been called and the tasks queued before it have
    /// run, and the stop also ends the loop's innermost run (`CFRunLoopStop`), so a body that runs until
    /// stopped looks like this:
    ///
    /// ```swift
    /// let worker = try RunLoopThread(name: "tracking") { loop, isStopped in
    ///     while !isStopped() {
    ///         loop.run(mode: "tracking", timeout: .milliseconds(100))
    ///         flushStatistics()
    ///     }
    /// }
    /// ```
    ///
    /// The loop holds a keep-alive port in its common modes, as for the other initializer, and tasks run in
    /// the common modes. When `body` returns, the queued tasks that the default mode can run, and the jobs
    /// queued on the loop's executors, run first, as after a stop.
    /// - Throws: as ``init(name:mode:)``.
    public convenience init(name: String = "RunLoopThread",
                            body: @escaping @Sendable (_ loop: PortRunLoop, _ isStopped: @escaping @Sendable () -> Bool) -> Void)
        throws(PortError) {
        try self.init(name: name, mode: .default, body: body)
    }

    private init(name: String, mode: PortRunLoop.Mode,
                 body runBody: @escaping @Sendable (PortRunLoop, @escaping @Sendable () -> Bool) -> Void) throws(PortError) {
        self.name = name
        core = Core(taskModes: mode == .default ? [.common] : [.common, mode])
        // Like the `[NSMachPort port]` of the classic keep-alive thread: a port nobody sends to, only there to keep
        // the mode non-empty.
        let keepAlive = try RunLoopPortSource(queueLimit: 1, maxMessageSize: 1) { _ in nil }
        let startup = Completion<Result<PortRunLoop, PortError>>()
        let body = ThreadBody(name: name, core: core, keepAlive: keepAlive, startup: startup, body: runBody)
        var handle = pthread_t()
        let rc = pthread_create(&handle, nil, { context in
            Unmanaged<ThreadBody>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, Unmanaged.passRetained(body).toOpaque())
        guard rc == 0 else {
            Unmanaged.passUnretained(body).release() // the thread never took it
            throw .systemCallFailed(call: "pthread_create", errno: rc)
        }
        core.setHandle(handle)
        // The body reports on every path and nothing abandons this completion, so wait() never gives nil.
        guard let started = startup.wait() else { preconditionFailure("the loop thread ended without reporting") }
        switch started {
        case let .success(loop):
            self.loop = loop
        case let .failure(error):
            core.join()
            throw error
        }
    }

    deinit {
        core.requestStop(loop)
        // The last reference may go inside a task on the thread itself, which cannot join itself.
        if loop.isCurrent { core.detach() } else { core.join() }
    }

    /// Runs a task on the thread, asynchronously
    /// (`performSelector:onThread:withObject:waitUntilDone:NO` on such a thread). Tasks run
    /// FIFO in the loop's common modes; called on the thread itself, the task runs after the current one.
    /// - Throws: ``RunLoopThreadError/stopped`` once ``stop()`` was called. A task queued while a stop from
    ///   another thread takes effect may be dropped unrun.
    public func execute(_ task: @escaping @Sendable () -> Void) throws(RunLoopThreadError<Never>) {
        guard !core.isStopRequested else { throw .stopped }
        do { try loop.performAndWakeUp(inModes: core.taskModes, task) } catch { throw .stopped }
    }

    /// Runs a task on the thread and waits for it (`performSelector:onThread:withObject:waitUntilDone:YES`),
    /// returning its value or rethrowing its error as ``RunLoopThreadError/failed(_:)``.
    /// - Throws: ``RunLoopThreadError/calledOnLoopThread`` on the thread itself, where waiting would deadlock
    ///   (nothing is queued); ``RunLoopThreadError/stopped`` if the thread was stopped before the task ran;
    ///   ``RunLoopThreadError/failed(_:)`` with the task's error.
    public func executeAndWait<Value: Sendable, Failure: Error>(
        _ task: @escaping @Sendable () throws(Failure) -> Value
    ) throws(RunLoopThreadError<Failure>) -> Value {
        guard !loop.isCurrent else { throw .calledOnLoopThread }
        guard !core.isStopRequested else { throw .stopped }
        let outcome: Result<Value, Failure>?
        do { outcome = try loop.performAndWait(inModes: core.taskModes, task) } catch { throw .stopped }
        switch outcome {
        case let .success(value)?: return value
        case let .failure(error)?: throw .failed(error)
        case nil: throw .stopped // the thread exited with the task still queued
        }
    }

    /// Runs a task on the thread and returns its value once it has run, suspending the calling task instead
    /// of blocking its thread: the `async` form of ``executeAndWait(_:)``, safe to await from the
    /// cooperative pool. Tasks run FIFO with those of ``execute(_:)``, in the loop's common modes.
    ///
    /// Named like `MainActor.run(resultType:body:)`, which it resembles (run this closure over there and
    /// give me its value), rather than an `async` overload of ``execute(_:)``: in an `async` context Swift
    /// prefers the `async` overload, which would turn every fire-and-forget `execute` call there into one
    /// that waits.
    ///
    /// Called on the thread itself (from an actor whose ``RunLoopSerialExecutor`` is on ``loop``), the task
    /// runs at once, as `MainActor.run` does on the main actor; waiting for a queued task would not deadlock
    /// here, but would only add a round trip. Cancelling the calling task does not withdraw a queued task.
    ///
    /// ```swift
    /// let sum = try await worker.run { 1 + 2 } // 3, computed on the worker; the caller's thread is free
    /// ```
    ///
    /// - Parameters:
    ///   - isolation: the caller's actor, filled in by the compiler. The call runs there instead of hopping
    ///     to the global executor (as a plain nonisolated `async` function would), which is how a caller on
    ///     this thread is recognised.
    ///   - task: the work; its value is returned.
    /// - Throws: ``RunLoopThreadError/stopped`` once ``stop()`` was called, or if the thread exits before the
    ///   task ran; ``RunLoopThreadError/failed(_:)`` with the task's error.
    public func run<Value: Sendable, Failure: Error>(
        isolation: isolated (any Actor)? = #isolation, _ task: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(RunLoopThreadError<Failure>) -> Value {
        guard !core.isStopRequested else { throw .stopped }
        let outcome: Result<Value, Failure>?
        if loop.isCurrent {
            outcome = Result { () throws(Failure) -> Value in try task() }
        } else {
            do { outcome = try await loop.performAndResume(inModes: core.taskModes, isolation: isolation, task) }
            catch { throw .stopped } // refused: the thread has exited, as execute(_:) reports it
        }
        switch outcome {
        case let .success(value)?: return value
        case let .failure(error)?: throw .failed(error)
        case nil: throw .stopped // dropped unrun: the thread exited
        }
    }

    /// Ends the loop and joins the thread (`CFRunLoopStop` performed on the thread, then the thread
    /// ends). Idempotent and safe from any thread.
    ///
    /// Tasks and executor jobs already queued run first: the stop is queued behind the tasks, and once it is
    /// reached the thread keeps passing its loop, without sleeping, until no task, signalled source or job
    /// of any ``RunLoopSerialExecutor`` of the loop is left, including jobs those jobs enqueue meanwhile.
    /// Only then are the loop's executors closed and the thread ends, so every actor call queued before the
    /// stop returns. Later tasks are refused with ``RunLoopThreadError/stopped``; a job enqueued on a closed
    /// executor stops the program (see ``RunLoopSerialExecutor``). Work that keeps queueing more keeps the
    /// thread, and this call, waiting.
    ///
    /// On the thread itself it cannot join: the loop ends once the current task and the work queued before
    /// the stop have run, and a later `stop()` from another thread, or the last release, joins the thread.
    /// From a task of the cooperative pool it blocks that thread until the work above is done.
    public func stop() {
        core.requestStop(loop)
        if !loop.isCurrent { core.join() }
    }

    /// Whether the calling thread is this thread (`[NSThread currentThread] == thread`).
    public var isCurrent: Bool { loop.isCurrent }

    /// Whether ``stop()`` was called (`-[NSThread isCancelled]`, here meaning "stopping or stopped").
    public var isStopped: Bool { core.isStopRequested }

    /// Whether the thread's loop has ended and its body returned (`-[NSThread isFinished]`).
    public var isFinished: Bool { core.hasFinished }

    public var description: String {
        "RunLoopThread(\(name), thread \(loop.threadID), stopped: \(isStopped), finished: \(isFinished))"
    }
}

extension RunLoopThread {
    /// What the thread and the object share. The thread holds this (through ``ThreadBody``), so the object can
    /// go away while the thread runs.
    final class Core: @unchecked Sendable {
        /// The modes tasks (and the stop) are queued for: the common modes, and the thread's own mode.
        let taskModes: [PortRunLoop.Mode]
        private let stopRequested = Atomic<Bool>(false)
        /// Set on the thread by the stop block; the thread's outer loop ends on it. Tasks queued before the
        /// stop precede that block (blocks run FIFO), so they have all run by then; executor jobs, which are
        /// not blocks, are run by the drain that follows (``ThreadBody``).
        private let stopReached = Atomic<Bool>(false)
        private let finished = Atomic<Bool>(false)
        /// Guards `handle` and `joinState`; held across `pthread_join`, so that a second `stop()` returns only
        /// once the thread is gone. The thread itself never takes it.
        private let joinLock = PThreadLock()
        private var handle = pthread_t()
        private var joinState = JoinState.joinable

        enum JoinState { case joinable, joined, detached }

        init(taskModes: [PortRunLoop.Mode]) { self.taskModes = taskModes }

        var isStopRequested: Bool { stopRequested.load(ordering: .acquiring) }
        var hasFinished: Bool { finished.load(ordering: .acquiring) }
        var hasReachedStop: Bool { stopReached.load(ordering: .acquiring) }
        func markFinished() { finished.store(true, ordering: .releasing) }

        func setHandle(_ handle: pthread_t) { joinLock.withLock { self.handle = handle } }

        /// Refuses further tasks, then queues the stop behind the tasks already queued. The stop travels as a
        /// block rather than a direct `CFRunLoopStop`: a direct stop is lost when the loop is between two runs,
        /// and it would overtake queued tasks, which the thread would then drop when it exits.
        func requestStop(_ loop: PortRunLoop) {
            guard !stopRequested.exchange(true, ordering: .acquiringAndReleasing) else { return }
            // Throws only if the thread has exited already: then there is nothing to stop.
            try? loop.performAndWakeUp(inModes: taskModes) { [self] in
                stopReached.store(true, ordering: .releasing)
                Core.stopRuns(of: loop, modes: taskModes)
            }
        }

        /// Stops the innermost run. If a task is running the loop itself (a nested run), that nested run is the
        /// one stopped, so the stop is queued again for the keep-alive run outside it, which picks it up at its
        /// next block point once the task returns.
        private static func stopRuns(of loop: PortRunLoop, modes: [PortRunLoop.Mode]) {
            loop.stop()
            if loop.lock.withLock({ loop.runDepth }) > 1 {
                try? loop.performAndWakeUp(inModes: modes) { stopRuns(of: loop, modes: modes) }
            }
        }

        /// Waits for the thread to end (`pthread_join`), once; never on the thread itself.
        func join() {
            joinLock.withLock {
                guard joinState == .joinable else { return }
                pthread_join(handle, nil)
                joinState = .joined
            }
        }

        /// Lets the thread end on its own (`pthread_detach`); for the last release on the thread itself.
        func detach() {
            joinLock.withLock {
                guard joinState == .joinable else { return }
                pthread_detach(handle)
                joinState = .detached
            }
        }
    }

    /// What runs on the new thread: name it, give its loop the keep-alive port, report the loop, run the body
    /// (by default: the thread's mode until asked to stop), then drain.
    final class ThreadBody {
        let name: String
        let core: Core
        let keepAlive: RunLoopPortSource
        let startup: Completion<Result<PortRunLoop, PortError>>
        let body: @Sendable (PortRunLoop, @escaping @Sendable () -> Bool) -> Void

        init(name: String, core: Core, keepAlive: RunLoopPortSource, startup: Completion<Result<PortRunLoop, PortError>>,
             body: @escaping @Sendable (PortRunLoop, @escaping @Sendable () -> Bool) -> Void) {
            self.name = name
            self.core = core
            self.keepAlive = keepAlive
            self.startup = startup
            self.body = body
        }

        func run() {
            defer { core.markFinished() }
            setCurrentThreadName(name)
            let loop = PortRunLoop.current
            do throws(RunLoopError) {
                for mode in core.taskModes { try loop.add(keepAlive, mode: mode) }
            } catch {
                // A fresh loop and a fresh source: only the port layer can refuse (no descriptors, no memory).
                if case let .portLayer(portError) = error {
                    startup.finish(.failure(portError))
                } else {
                    startup.finish(.failure(.invalidArgument(argument: "keepAlive", reason: error.description)))
                }
                return
            }
            startup.finish(.success(loop))
            let core = self.core
            body(loop) { core.hasReachedStop }
            drain(loop)
        }

        /// After the stop: passes the loop without sleeping until no block, signalled source or executor job
        /// that the default mode can run is left, runs the jobs left on executors of other modes, then closes
        /// the loop's executors and returns.
        ///
        /// Executor jobs are why: they are not blocks queued ahead of the stop block but sit in each
        /// executor's own queue, behind a signalled source, and a job may enqueue more (an actor calling
        /// another). Checking and closing are one step under the executors' locks
        /// (``LoopExecutorRegistry/finishExecutors(of:)``), so a job enqueued after this check is either seen by
        /// it or refused by the closed executor; it is never left queued on an executor whose thread has gone.
        /// Work that keeps coming (a job that always enqueues another) keeps the thread draining.
        private func drain(_ loop: PortRunLoop) {
            while true {
                if loop.hasWorkToDrain(in: .default) {
                    if loop.run(mode: .default, timeout: .zero) != .finished { continue }
                    // Nothing left in the mode to run anything with (the keep-alive port is gone): the executors'
                    // jobs run outside the loop below; blocks go with the loop, as a thread's pending blocks do.
                    while !LoopExecutorRegistry.finishExecutors(of: loop) {}
                    return
                }
                if LoopExecutorRegistry.finishExecutors(of: loop) { return }
            }
        }
    }
}

extension PortRunLoop {
    /// Whether a pass in `mode` would find something to run: a block for the mode or a signalled valid
    /// version-0 source in it (an executor with jobs queued is one).
    fileprivate func hasWorkToDrain(in mode: Mode) -> Bool {
        lock.withLock {
            guard let state = modes[mode] else { return false }
            let modeIsCommon = commonModes.contains(mode)
            if blocks.contains(where: { blockMatches($0, mode, modeIsCommon: modeIsCommon) }) { return true }
            return state.sources0.contains { $0.isSignalled && $0.isValid }
        }
    }
}
