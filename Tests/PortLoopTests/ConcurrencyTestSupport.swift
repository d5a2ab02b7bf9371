@testable import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// A thread running its loop's default mode with a ``RunLoopSerialExecutor`` scheduled in the common modes, until
/// `stop()`. `setUp` runs on the thread first, with the loop.
final class ExecutorLoopThread: @unchecked Sendable {
    let worker: TestLoopThread
    let executor: RunLoopSerialExecutor
    var loop: PortRunLoop { worker.loop }

    init(setUp: @escaping @Sendable (PortRunLoop) throws -> Void = { _ in },
         body: @escaping @Sendable (PortRunLoop) -> Void = { $0.run() }) {
        let box = Locked<RunLoopSerialExecutor?>(nil)
        worker = TestLoopThread(setUp: { loop in
            let executor = try RunLoopSerialExecutor(loop: loop)
            box.withLock { $0 = executor }
            try setUp(loop)
        }, body: { loop in body(loop); return [] })
        executor = box.current!
    }

    /// Stops the loop and joins the thread. The stop travels as a block, so it cannot be lost to a loop
    /// that has not started running yet.
    func stop() {
        try? loop.performAndWakeUp { PortRunLoop.current.stop() }
        _ = worker.join()
    }
}

/// An actor whose jobs run on a loop's thread.
actor LoopActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    private(set) var log: [String] = []

    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    /// The kernel id of the thread running this job.
    func threadID() -> Int32 { currentThreadID() }

    func record(_ event: String) { log.append(event) }

    /// The mode the loop is running while this job runs.
    func currentMode() -> PortRunLoop.Mode? { PortRunLoop.current.currentModeName }
}

/// The names of the process's threads, from /proc/self/task/*/comm.
func threadNames() -> [String] {
    guard let directory = opendir("/proc/self/task") else { return [] }
    defer { closedir(directory) }
    var names: [String] = []
    while let entry = readdir(directory) {
        let task = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard task.first?.isNumber == true, let file = fopen("/proc/self/task/\(task)/comm", "r") else { continue }
        var buffer = [CChar](repeating: 0, count: 64)
        if fgets(&buffer, Int32(buffer.count), file) != nil {
            let bytes = buffer.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }
            names.append(String(decoding: bytes, as: UTF8.self))
        }
        fclose(file)
    }
    return names
}

/// How many threads of the process have this name.
func threadCount(named name: String) -> Int { threadNames().filter { $0 == name }.count }

/// Polls `condition` every 10 ms for up to `seconds`; whether it became true. It sleeps with `Task.sleep`, not
/// by blocking: the cooperative pool has as many threads as cores, and the condition often waits for a task.
func eventually(within seconds: Double = 20, _ condition: () -> Bool) async -> Bool {
    let deadline = nowNanoseconds() + Int64(seconds * 1e9)
    while nowNanoseconds() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}
