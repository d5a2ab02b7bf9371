#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CoreFoundation
import Dispatch
import NIOCore
import NIOPosix

// Helpers for the peers measured beside PortLoop: CoreFoundation's CFRunLoop (the toolchain's
// swift-corelibs CoreFoundation, in libFoundation) and SwiftNIO's EventLoop (NIOPosix). libdispatch needs none.

/// A CFRunLoop handed between threads. CF documents `CFRunLoopPerformBlock`, `CFRunLoopWakeUp`,
/// `CFRunLoopStop` and `CFRunLoopSourceSignal` as safe from any thread; the reference itself is not `Sendable`.
final class CFLoop: @unchecked Sendable {
    let loop: CFRunLoop
    init(_ loop: CFRunLoop) { self.loop = loop }

    /// `CFRunLoopPerformBlock` in the default mode, then `CFRunLoopWakeUp`.
    @inline(__always)
    func performAndWakeUp(_ block: @escaping () -> Void) {
        CFRunLoopPerformBlock(loop, kCFRunLoopDefaultMode, block)
        CFRunLoopWakeUp(loop)
    }

    func stop() { CFRunLoopStop(loop) }
}

/// A CF run loop source handed between threads.
final class CFSource: @unchecked Sendable {
    let source: CFRunLoopSource
    init(_ source: CFRunLoopSource) { self.source = source }
}

/// A pthread running its own CFRunLoop, the CF counterpart of ``LoopThread``: it takes
/// `CFRunLoopGetCurrent()`, adds a version-0 source nobody signals (so the default mode is never empty and
/// the loop sleeps instead of returning `finished`), calls `setUp` on itself, hands the loop over, and runs
/// `CFRunLoopRun()` until the loop is stopped. `init` returns once the loop exists and `setUp` has run.
final class CFLoopThread {
    let loop: CFLoop
    private let thread: JoinableThread

    init(keepAlive: Bool = true, setUp: @escaping @Sendable (CFLoop) -> Void = { _ in }) {
        let latch = Latch<CFLoop>()
        thread = JoinableThread {
            let loop = CFLoop(CFRunLoopGetCurrent())
            var context = CFRunLoopSourceContext()
            let keeper = keepAlive ? CFRunLoopSourceCreate(nil, 0, &context) : nil
            if let keeper { CFRunLoopAddSource(loop.loop, keeper, kCFRunLoopDefaultMode) }
            setUp(loop)
            latch.set(loop)
            CFRunLoopRun()
            if let keeper { CFRunLoopSourceInvalidate(keeper) }
        }
        loop = latch.wait()
    }

    /// Waits for the loop's run to return and the thread to exit.
    func join() { thread.join() }

    /// Stops the loop once it is asleep (a `CFRunLoopStop` before `CFRunLoopRun` starts is lost) and joins
    /// the thread.
    func stop() {
        while !CFRunLoopIsWaiting(loop.loop) { usleep(100) }
        loop.stop()
        join()
    }
}

/// Counts `afterWaiting` activities of a CF loop (one per pass that slept), like ``LoopCounter``'s observer.
final class CFPassCounter: @unchecked Sendable {
    var passes = 0
    /// Creates the observer and adds it to the loop's default mode; call on the loop's thread.
    func observe(_ loop: CFLoop) {
        let observer = CFRunLoopObserverCreateWithHandler(nil, CFRunLoopActivity.afterWaiting.rawValue, true, 0) { _, _ in
            self.passes += 1
        }
        CFRunLoopAddObserver(loop.loop, observer, kCFRunLoopDefaultMode)
    }
}

/// A version-0 CF source whose perform callback calls a Swift closure (CF's callbacks are C function
/// pointers: the closure travels in the context's `info`, retained by the source).
func makeCFSource0(_ perform: @escaping () -> Void) -> CFRunLoopSource {
    final class Box { let perform: () -> Void; init(_ perform: @escaping () -> Void) { self.perform = perform } }
    var context = CFRunLoopSourceContext()
    context.version = 0
    context.info = Unmanaged.passRetained(Box(perform)).toOpaque()
    context.release = { info in Unmanaged<AnyObject>.fromOpaque(info!).release() }
    context.perform = { info in Unmanaged<Box>.fromOpaque(info!).takeUnretainedValue().perform() }
    return CFRunLoopSourceCreate(nil, 0, &context)
}

/// A NIO event loop group of `threads` threads and its loops, in order (`next()` would round-robin).
struct NIOLoops {
    let group: MultiThreadedEventLoopGroup
    let loops: [EventLoop]

    init(threads: Int) {
        group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        loops = Array(group.makeIterator())
        precondition(loops.count == threads, "NIO group has \(loops.count) loops, not \(threads)")
    }

    /// Shuts the group down and joins its threads.
    func shutDown() {
        do { try group.syncShutdownGracefully() } catch { fatalError("NIO shutdown: \(error)") }
    }
}

/// Runs `body` on a NIO loop and waits for its result.
func onLoop<T: Sendable>(_ loop: EventLoop, _ body: @escaping @Sendable () -> T) -> T {
    do { return try loop.submit(body).wait() } catch { fatalError("NIO submit: \(error)") }
}
