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

/// `memory`: what idle things cost in memory. Each figure creates many of one thing, reads the process's
/// heap in use (glibc `mallinfo2`: arena bytes allocated plus mmapped chunks, every arena) and resident set
/// (/proc/self/statm, after `malloc_trim` so that freed pages from earlier runs do not hide new ones) before
/// and after, divides by the count, then frees them all. The heap figure is exact for memory from malloc;
/// the RSS figure also counts pages malloc does not hand out (thread stacks) and is rounded to pages, so it
/// is noisier. What the kernel keeps for descriptors (epoll, eventfd, timerfd) is in neither.
/// - ports: 10,000 idle `PortReceiveRight`s (queue limit 5, held in a pre-allocated buffer).
/// - port sources: 10,000 `RunLoopPortSource`s added to one mode of a sleeping loop (port, source object,
///   the mode's tables and its port set's membership).
/// - timers: 10,000 one-shot timers an hour away, added from the thread of a loop that then sleeps: ours
///   (`RunLoopTimer`), CF (`CFRunLoopTimer`), NIO (`scheduleTask`, on the event loop).
/// - loop threads: 32 idle loop threads: ours (`LoopThread`, a port source keeping it alive), CF (a CF
///   loop thread with a version-0 source), NIO (a 32-thread `MultiThreadedEventLoopGroup`), and a floor:
///   32 bare pthreads blocked on a condition variable. Also the descriptors each holds.
let memoryScenario = Scenario(
    name: "memory",
    summary: "bytes per idle port, port source, timer, loop thread (ours, CF, NIO)"
) { settings in
    let items = settings.quick ? 5_000 : 10_000
    let threads = settings.quick ? 16 : 32

    let samples = measureInterleavedFootprints(runs: settings.runs, [
        { footprint(count: items) { idlePorts(items) } },
        { footprint(count: items) { idlePortSources(items) } },
        { footprint(count: items) { oursIdleTimers(items) } },
        { footprint(count: items) { cfIdleTimers(items) } },
        { footprint(count: items) { nioIdleTimers(items) } },
        { footprint(count: threads) { oursLoopThreads(threads) } },
        { footprint(count: threads) { cfLoopThreads(threads) } },
        { footprint(count: threads) { nioLoopThreads(threads) } },
        { footprint(count: threads) { barePthreads(threads) } },
    ])
    let itemsLabel = formatNumber(Double(items), decimals: 0)
    let what: [(Row.Kind, String, String?, String)] = [
        (.ours, "ports: idle PortReceiveRight (\(itemsLabel))", nil, "port"),
        (.ours, "loop: RunLoopPortSource in a mode (\(itemsLabel))", nil, "source"),
        (.ours, "loop: RunLoopTimer added (\(itemsLabel))", nil, "timer"),
        (.peer, "CF: CFRunLoopTimer added (\(itemsLabel))", "CF", "timer"),
        (.peer, "NIO: scheduleTask (\(itemsLabel))", "NIO", "timer"),
        (.ours, "loop: loop thread (\(threads))", nil, "thread"),
        (.peer, "CF: CF loop thread (\(threads))", "CF", "thread"),
        (.peer, "NIO: event loop thread (\(threads))", "NIO", "thread"),
        (.floor, "C floor: bare pthread, blocked (\(threads))", "pthread", "thread"),
    ]
    var rows: [Row] = []
    for (index, (kind, name, short, key)) in what.enumerated() {
        rows.append(Row(kind, "\(name): heap", sample: samples[index].heap, unit: "B/\(key)", decimals: 0,
                        short: short, key: "heap \(key)"))
    }
    for (index, (kind, name, short, key)) in what.enumerated() {
        rows.append(Row(kind, "\(name): RSS", sample: samples[index].resident, unit: "B/\(key)", decimals: 0,
                        short: short, key: "rss \(key)"))
    }
    for (index, (kind, name, short, key)) in what.enumerated() where key == "thread" {
        rows.append(Row(kind, "\(name): descriptors", sample: samples[index].descriptors, unit: "fd/thread",
                        decimals: 1, short: short, key: "fd thread"))
    }
    return rows.withPeerRatios()
}

/// Per-item heap, RSS and descriptor deltas of one run.
struct Footprint {
    var heap: Double
    var resident: Double
    var descriptors: Double
}

/// Runs `make` (which creates `count` things and returns something that holds them), measures the deltas
/// while they exist, then drops them.
func footprint<Holder>(count: Int, _ make: () -> Holder) -> Footprint {
    let threadsBefore = threadCount()
    bs_heap_trim()
    let heapBefore = bs_heap_in_use(), residentBefore = bs_resident_bytes()
    let descriptorsBefore = openDescriptorCount() ?? 0
    var holder: Holder? = make()
    let heapAfter = bs_heap_in_use(), residentAfter = bs_resident_bytes()
    let descriptorsAfter = openDescriptorCount() ?? 0
    withExtendedLifetime(holder) {}
    holder = nil
    // Threads that were told to stop may still be exiting (NIO's shutdown returns before its threads have
    // run their exit handlers): wait for them, or the next figure sees their memory go.
    var waited = 0
    while threadCount() > threadsBefore && waited < 5_000 {
        usleep(1_000)
        waited += 1
    }
    // And for the heap to settle: unchanged over 20 ms (at most 2 s), so that memory another thread frees
    // late is not charged to the next figure.
    var heap = bs_heap_in_use(), steady = 0
    for _ in 0..<2_000 where steady < 20 {
        usleep(1_000)
        let now = bs_heap_in_use()
        steady = now == heap ? steady + 1 : 0
        heap = now
    }
    let perItem = { (before: UInt64, after: UInt64) in (Double(after) - Double(before)) / Double(count) }
    return Footprint(heap: perItem(heapBefore, heapAfter), resident: perItem(residentBefore, residentAfter),
                     descriptors: Double(descriptorsAfter - descriptorsBefore) / Double(count))
}

/// `measureInterleaved` for footprints: one sample per figure.
func measureInterleavedFootprints(runs: Int, _ variants: [() -> Footprint])
    -> [(heap: Sample, resident: Sample, descriptors: Sample)] {
    var footprints: [Footprint] = []
    let heap = measureInterleaved(runs: runs, variants.indices.map { index in
        { () -> Double in
            let value = variants[index]()
            footprints.append(value)
            return value.heap
        }
    })
    // footprints holds every round, warm-up first, variants in order within a round.
    let count = variants.count
    return variants.indices.map { index in
        let measured = stride(from: count + index, to: footprints.count, by: count).map { footprints[$0] }
        return (heap[index], Sample(values: measured.map(\.resident)), Sample(values: measured.map(\.descriptors)))
    }
}

/// Holds whatever a footprint run created until it is dropped, then runs its clean-up.
final class Holding {
    private let cleanUp: () -> Void
    init(_ cleanUp: @escaping () -> Void) { self.cleanUp = cleanUp }
    deinit { cleanUp() }
}

func idlePorts(_ count: Int) -> ReceiveRights { ReceiveRights(count: count) }

func idlePortSources(_ count: Int) -> Holding {
    let sources = (0..<count).map { _ in keepAliveSource() }
    let thread = LoopThread { loop in
        for source in sources { mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) } }
    }
    waitUntilAsleep(thread.loop)
    return Holding {
        for source in sources { source.invalidate() } // the mode is empty now: the run finishes
        thread.loop.stop()
        thread.join()
    }
}

/// Timers an hour away on a loop thread that runs (so that adding from its own thread is the usual path);
/// one port source keeps it alive after they are invalidated.
func oursIdleTimers(_ count: Int) -> Holding {
    let keepAlive = keepAliveSource()
    let timers = SharedValue<[RunLoopTimer]>([])
    let thread = LoopThread { loop in
        mustLoop("add keep-alive") { () throws(RunLoopError) in try loop.add(keepAlive, mode: .default) }
        var made: [RunLoopTimer] = []
        made.reserveCapacity(count)
        for _ in 0..<count {
            let timer = RunLoopTimer(after: .seconds(3600)) { _ in }
            mustLoop("add timer") { () throws(RunLoopError) in try loop.add(timer, mode: .default) }
            made.append(timer)
        }
        timers.value = made
    }
    waitUntilAsleep(thread.loop)
    return Holding {
        for timer in timers.value { timer.invalidate() }
        keepAlive.invalidate()
        thread.loop.stop()
        thread.join()
    }
}

func cfIdleTimers(_ count: Int) -> Holding {
    let timers = SharedValue<[CFRunLoopTimer]>([])
    let thread = CFLoopThread { loop in
        let fireDate = CFAbsoluteTimeGetCurrent() + 3600
        var made: [CFRunLoopTimer] = []
        made.reserveCapacity(count)
        for _ in 0..<count {
            let timer = CFRunLoopTimerCreateWithHandler(nil, fireDate, 0, 0, 0) { _ in }!
            CFRunLoopAddTimer(loop.loop, timer, kCFRunLoopDefaultMode)
            made.append(timer)
        }
        timers.value = made
    }
    waitUntilAsleep(thread.loop)
    return Holding {
        for timer in timers.value { CFRunLoopTimerInvalidate(timer) }
        thread.loop.stop()
        thread.join()
    }
}

func nioIdleTimers(_ count: Int) -> Holding {
    let nio = NIOLoops(threads: 1)
    let loop = nio.loops[0]
    let tasks = onLoop(loop) { () -> SharedValue<[Scheduled<Void>]> in
        let deadline = NIODeadline.now() + .hours(1)
        return SharedValue((0..<count).map { _ in loop.scheduleTask(deadline: deadline) {} })
    }
    return Holding {
        onLoop(loop) { for task in tasks.value { task.cancel() } }
        nio.shutDown()
    }
}

func oursLoopThreads(_ count: Int) -> Holding {
    let threads = (0..<count).map { _ in
        LoopThread { loop in
            mustLoop("add keep-alive") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
        }
    }
    for thread in threads { waitUntilAsleep(thread.loop) }
    return Holding {
        for thread in threads { thread.loop.stop() }
        for thread in threads { thread.join() }
    }
}

func cfLoopThreads(_ count: Int) -> Holding {
    let threads = (0..<count).map { _ in CFLoopThread() }
    for thread in threads { waitUntilAsleep(thread.loop) }
    return Holding {
        for thread in threads { thread.loop.stop() }
        for thread in threads { thread.join() }
    }
}

func nioLoopThreads(_ count: Int) -> Holding {
    let nio = NIOLoops(threads: count)
    for loop in nio.loops { _ = onLoop(loop) { true } } // every thread has started and run its loop
    return Holding { nio.shutDown() }
}

func barePthreads(_ count: Int) -> Holding {
    let release = Latch<Bool>()
    let started = (0..<count).map { _ in Latch<Bool>() }
    let threads = started.map { latch in
        JoinableThread {
            latch.set(true)
            _ = release.wait()
        }
    }
    for latch in started { _ = latch.wait() }
    return Holding {
        release.set(true)
        for thread in threads { thread.join() }
    }
}

/// Waits until a loop sleeps in its receive (it has run its first pass and allocated what running needs).
func waitUntilAsleep(_ loop: PortRunLoop) {
    while !loop.isWaiting { usleep(100) }
}

/// Waits until a CF loop sleeps (`CFRunLoopIsWaiting`).
func waitUntilAsleep(_ loop: CFLoop) {
    while !CFRunLoopIsWaiting(loop.loop) { usleep(100) }
}

/// How many threads the process has (entries of /proc/self/task), or 0 if that cannot be read.
func threadCount() -> Int {
    guard let directory = opendir("/proc/self/task") else { return 0 }
    defer { closedir(directory) }
    var count = 0
    while readdir(directory) != nil { count += 1 }
    return count - 2 // "." and ".."
}
