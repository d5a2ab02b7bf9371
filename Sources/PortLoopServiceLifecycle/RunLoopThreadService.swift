import PortLoop
import ServiceLifecycle
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A ``RunLoopThread`` as a swift-service-lifecycle `Service`, so that PortLoop's loop threads start and stop
/// with the rest of a `ServiceGroup` (a Hummingbird or gRPC server, a metrics exporter).
///
/// The thread runs from the moment it is created; the service's ``run()`` waits for the group's graceful
/// shutdown (or its cancellation) and then stops the thread: tasks and executor jobs already queued run
/// first, as with ``RunLoopThread/stop()``, and `run()` returns once the thread has ended. Stopping never
/// blocks a thread of the cooperative pool: the join happens on a thread of its own. Stop the thread through
/// the group, not by calling `stop()` yourself: the service only notices the group.
///
/// ```swift
/// let worker = try RunLoopThread(name: "ports")
/// let group = ServiceGroup(services: [RunLoopThreadService(worker), httpServer],
///                          gracefulShutdownSignals: [.sigterm], logger: logger)
/// try await group.run()
/// ```
public struct RunLoopThreadService: Service, CustomStringConvertible {
    /// The loop thread the service stops.
    public let thread: RunLoopThread

    /// Wraps a running loop thread.
    public init(_ thread: RunLoopThread) {
        self.thread = thread
    }

    /// Starts a loop thread that runs the default mode and wraps it (``RunLoopThread/init(name:mode:)``).
    /// - Throws: what ``RunLoopThread/init(name:mode:)`` throws.
    public init(name: String) throws(PortError) {
        thread = try RunLoopThread(name: name)
    }

    /// Waits for the group's graceful shutdown or cancellation, then stops the thread and returns once it has
    /// ended (`Service.run`).
    public func run() async throws {
        // Throws CancellationError when the group cancels instead: the thread stops all the same.
        try? await gracefulShutdown()
        await stopOffThePool(thread)
    }

    public var description: String { "RunLoopThreadService(\(thread))" }
}

/// Calls ``RunLoopThread/stop()``, which joins the thread, on a thread of its own, and resumes when it returns.
private func stopOffThePool(_ thread: RunLoopThread) async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        final class Job {
            let run: () -> Void
            init(_ run: @escaping () -> Void) { self.run = run }
        }
        let job = Unmanaged.passRetained(Job {
            thread.stop()
            continuation.resume()
        }).toOpaque()
        var handle = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let rc = pthread_create(&handle, &attributes, { raw in
            Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, job)
        pthread_attr_destroy(&attributes)
        if rc != 0 {
            // No thread to spare: join here rather than leave the loop thread running.
            Unmanaged<Job>.fromOpaque(job).takeRetainedValue().run()
        }
    }
}
