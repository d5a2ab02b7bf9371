#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CBenchSupport
import CoreFoundation
import NIOCore
import NIOPosix
import PortLoop
import Synchronization

/// `idle`: what an idle loop costs. Three loops idle side by side for 2 s windows: a `PortRunLoop` kept
/// alive by a port source nobody sends to, a CFRunLoop kept alive by a version-0 source nobody signals, and a
/// one-thread SwiftNIO event loop with nothing scheduled. Per window, read from outside without waking
/// them: each loop thread's CPU time (its pthread CPU clock), its context switches (/proc), the passes it
/// slept and woke from (an `afterWaiting` observer, for ours and CF; NIO has no observer, its context
/// switches show its wake-ups), and the whole process's CPU time. The loops are created once; the first
/// window is discarded.
let idleScenario = Scenario(
    name: "idle",
    summary: "CPU time, wake-ups and passes of idle loops over 2 s (ours, CF, NIO)"
) { settings in
    let window = 2.0
    let oursPasses = PassCount()
    let ours = LoopThread { loop in
        mustLoop("add keep-alive") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
        mustLoop("add observer") { () throws(RunLoopError) in
            try loop.add(RunLoopObserver(activities: .afterWaiting) { _, _ in oursPasses.add() }, mode: .default)
        }
        oursPasses.thread = ThreadHandle.current()
    }
    let cfPasses = PassCount()
    let cf = CFLoopThread { loop in
        let observer = CFRunLoopObserverCreateWithHandler(nil, CFRunLoopActivity.afterWaiting.rawValue, true, 0) { _, _ in
            cfPasses.add()
        }
        CFRunLoopAddObserver(loop.loop, observer, kCFRunLoopDefaultMode)
        cfPasses.thread = ThreadHandle.current()
    }
    let nio = NIOLoops(threads: 1)
    let nioThread = onLoop(nio.loops[0]) { ThreadHandle.current() }
    guard let oursThread = oursPasses.thread, let cfThread = cfPasses.thread else { fatalError("idle: no thread handles") }

    let side = SideFigures()
    for _ in 0...settings.runs {
        let before = (ours: oursThread.reading(), cf: cfThread.reading(), nio: nioThread.reading(),
                      oursPasses: oursPasses.value, cfPasses: cfPasses.value, process: bs_process_cpu_ns())
        usleep(UInt32(window * 1e6))
        let after = (ours: oursThread.reading(), cf: cfThread.reading(), nio: nioThread.reading(),
                     oursPasses: oursPasses.value, cfPasses: cfPasses.value, process: bs_process_cpu_ns())
        side.record("ours cpu", Double(after.ours.cpu - before.ours.cpu) / 1e3)
        side.record("ours switches", Double(after.ours.switches - before.ours.switches))
        side.record("ours passes", Double(after.oursPasses - before.oursPasses))
        side.record("cf cpu", Double(after.cf.cpu - before.cf.cpu) / 1e3)
        side.record("cf switches", Double(after.cf.switches - before.cf.switches))
        side.record("cf passes", Double(after.cfPasses - before.cfPasses))
        side.record("nio cpu", Double(after.nio.cpu - before.nio.cpu) / 1e3)
        side.record("nio switches", Double(after.nio.switches - before.nio.switches))
        side.record("process cpu", Double(after.process - before.process) / 1e3)
    }
    ours.loop.stop()
    ours.join()
    cf.loop.stop()
    cf.join()
    nio.shutDown()

    let seconds = "\(Int(window)) s"
    let cpu = "µs CPU", switches = "switches", passes = "passes"
    return [
        Row(.ours, "loop: CPU time in \(seconds)", sample: side.sample("ours cpu"), unit: cpu, key: cpu),
        Row(.peer, "CF: CPU time in \(seconds)", sample: side.sample("cf cpu"), unit: cpu, short: "CF", key: cpu),
        Row(.peer, "NIO: CPU time in \(seconds)", sample: side.sample("nio cpu"), unit: cpu, short: "NIO", key: cpu),
        Row(.ours, "loop: context switches in \(seconds)", sample: side.sample("ours switches"), unit: switches,
            decimals: 0),
        Row(.peer, "CF: context switches in \(seconds)", sample: side.sample("cf switches"), unit: switches,
            decimals: 0, short: "CF"),
        Row(.peer, "NIO: context switches in \(seconds)", sample: side.sample("nio switches"), unit: switches,
            decimals: 0, short: "NIO"),
        Row(.ours, "loop: passes (afterWaiting) in \(seconds)", sample: side.sample("ours passes"), unit: passes,
            decimals: 0),
        Row(.peer, "CF: passes (afterWaiting) in \(seconds)", sample: side.sample("cf passes"), unit: passes,
            decimals: 0, short: "CF"),
        Row(.counter, "process: CPU time in \(seconds) (all threads, the three loops idle)",
            sample: side.sample("process cpu"), unit: cpu),
    ].withPeerRatios()
}

/// A pass counter written by a loop's observer and read from another thread.
final class PassCount: @unchecked Sendable {
    private let count = Atomic<Int>(0)
    /// The loop thread, set on it during set-up (before the creating thread reads it).
    var thread: ThreadHandle?
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// A thread's pthread and kernel ids, to read its CPU clock and context switches from another thread.
struct ThreadHandle: Sendable {
    let pthread: UInt
    let tid: Int32

    static func current() -> ThreadHandle { ThreadHandle(pthread: UInt(pthread_self()), tid: bs_thread_id()) }

    func reading() -> (cpu: Int64, switches: Int64) {
        let reading = (cpu: bs_thread_cpu_ns(pthread), switches: bs_thread_context_switches(tid))
        guard reading.cpu >= 0, reading.switches >= 0 else { fatalError("idle: cannot read thread \(tid)'s CPU clock or /proc status") }
        return reading
    }
}
