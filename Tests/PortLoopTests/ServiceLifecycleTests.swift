import Logging
import PortLoop
import PortLoopServiceLifecycle
import ServiceLifecycle
import Testing

/// A loop thread in a swift-service-lifecycle `ServiceGroup`: it runs until the group shuts down, then stops
/// after the work already queued.
@Suite("Service lifecycle", .timeLimit(.minutes(1)))
struct ServiceLifecycleTests {
    @Test("graceful shutdown stops the thread after its queued tasks; run() returns once it has ended")
    func gracefulShutdown() async throws {
        let service = try RunLoopThreadService(name: "service")
        let ran = Locked(0)
        let group = ServiceGroup(services: [service], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        // The thread serves while the group runs.
        #expect(try service.thread.executeAndWait { 7 } == 7)
        let gate = Latch()
        try service.thread.execute { gate.wait() } // holds the loop while the shutdown is requested
        for _ in 0..<10 { try service.thread.execute { ran.withLock { $0 += 1 } } }
        await group.triggerGracefulShutdown()
        #expect(!service.thread.isFinished)
        gate.signal()
        try await running.value
        #expect(service.thread.isFinished)
        #expect(ran.current == 10, "tasks queued before the shutdown ran")
    }

    @Test("cancelling the group stops the thread too")
    func cancellation() async throws {
        let service = try RunLoopThreadService(name: "cancelled")
        let group = ServiceGroup(services: [service], logger: Logger(label: "test"))
        let running = Task { try await group.run() }
        #expect(try service.thread.executeAndWait { 1 } == 1)
        running.cancel()
        _ = try? await running.value
        #expect(service.thread.isFinished)
    }
}
