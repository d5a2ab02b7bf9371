import CBenchFloors
import CoreFoundation
import Dispatch
import NIOCore
import NIOPosix
import PortLoop

// The event-loop variants of the `throughput` scenario: one producer thread feeding one loop thread,
// PortLoop's (Source1 messages, performAndWakeUp blocks) and the peers' (CFRunLoop blocks, NIO execute, a
// serial DispatchQueue). Each times from the producer's first timed call to the consumer's last item, after
// a warm-up item that makes sure the consumer is running and asleep. Where the consumer is a run loop, an
// `afterWaiting` observer counts the passes that went to sleep (a receive returns at once when something is
// queued): per message, how many messages a pass handles (PortLoop: up to 64 port messages and all queued
// blocks per pass).

/// Counters of a throughput run, touched only by the loop thread until it is joined.
final class LoopCounter: @unchecked Sendable {
    let target: Int
    var count = 0
    var sleeps = 0
    var sleepsAtStart = 0
    var end: Int64 = 0
    init(target: Int) { self.target = target }

    /// Counts one task on the consuming thread; at the target, records the end time and returns true.
    func countOne() -> Bool {
        count += 1
        guard count == target else { return false }
        end = bf_now_ns()
        return true
    }

    /// An observer counting `afterWaiting`: the passes that went to receive with a sleep allowed.
    func sleepObserver() -> RunLoopObserver {
        RunLoopObserver(activities: .afterWaiting) { _, _ in self.sleeps += 1 }
    }
}

/// One Source1 throughput run: the time from the producer's first timed send to the handler's last
/// message, and how often the loop slept meanwhile. A warm-up message first makes sure the loop runs.
func loopSource1Throughput(messages: Int) -> (seconds: Double, sleeps: Int) {
    let port = must("data port") { () throws(PortError) in
        try PortReceiveRight(queueLimit: PortReceiveRight.maxQueueLimit, maxMessageSize: 8)
    }
    let ready = must("ready port") { () throws(PortError) in try PortReceiveRight() }
    let toPort = port.makeSendRight()
    let toReady = ready.makeSendRight()
    let counter = LoopCounter(target: messages + 1) // the warm-up message, then the timed ones

    let source = RunLoopPortSource(port: port) { _ in
        counter.count += 1
        if counter.count == 1 {
            counter.sleepsAtStart = counter.sleeps
            must("send ready") { () throws(PortError) in try toReady.send() }
        } else if counter.count == counter.target {
            counter.end = bf_now_ns()
            PortRunLoop.current.stop()
        }
        return nil
    }
    let consumer = LoopThread { loop in
        mustLoop("add source") { () throws(RunLoopError) in try loop.add(source, mode: .default) }
        mustLoop("add observer") { () throws(RunLoopError) in try loop.add(counter.sleepObserver(), mode: .default) }
    }

    sendWord(toPort, .max) // warm-up
    _ = must("receive ready") { () throws(PortError) in try ready.receive() }
    let start = bf_now_ns()
    for index in 0..<messages { sendWord(toPort, UInt64(index)) }
    consumer.join()
    return (Double(counter.end - start) / 1e9, counter.sleeps - counter.sleepsAtStart)
}

/// One block throughput run: the time from the producer's first timed `performAndWakeUp` to the loop's
/// last block, the producer's own time for its calls, and how often the loop slept meanwhile.
func loopBlockThroughput(blocks: Int) -> (seconds: Double, producerSeconds: Double, sleeps: Int) {
    let counter = LoopCounter(target: blocks)
    let consumer = LoopThread { loop in
        mustLoop("add keep-alive") { () throws(RunLoopError) in try loop.add(keepAliveSource(), mode: .default) }
        mustLoop("add observer") { () throws(RunLoopError) in try loop.add(counter.sleepObserver(), mode: .default) }
    }
    let loop = consumer.loop

    // Warm-up: one block that answers, so the loop is running and asleep before the clock starts.
    let ready = must("ready port") { () throws(PortError) in try PortReceiveRight() }
    let toReady = ready.makeSendRight()
    mustLoop("warm-up block") { () throws(RunLoopError) in
        try loop.performAndWakeUp {
            counter.sleepsAtStart = counter.sleeps
            must("send ready") { () throws(PortError) in try toReady.send() }
        }
    }
    _ = must("receive ready") { () throws(PortError) in try ready.receive() }

    let start = bf_now_ns()
    for _ in 0..<blocks {
        mustLoop("performAndWakeUp") { () throws(RunLoopError) in
            try loop.performAndWakeUp {
                if counter.countOne() { PortRunLoop.current.stop() }
            }
        }
    }
    let producerEnd = bf_now_ns()
    consumer.join()
    return (Double(counter.end - start) / 1e9, Double(producerEnd - start) / 1e9,
            counter.sleeps - counter.sleepsAtStart)
}

/// One CFRunLoop block throughput run: the producer calls `CFRunLoopPerformBlock` + `CFRunLoopWakeUp` per
/// block on a CF loop thread (kept alive by a version-0 source); the last block stops the loop.
func cfBlockThroughput(blocks: Int) -> (seconds: Double, producerSeconds: Double, sleeps: Int) {
    let counter = LoopCounter(target: blocks)
    let passes = CFPassCounter()
    let consumer = CFLoopThread { loop in passes.observe(loop) }
    let loop = consumer.loop

    // Warm-up: one block that answers, so the loop is running and asleep before the clock starts.
    let ready = Latch<Bool>()
    loop.performAndWakeUp {
        counter.sleepsAtStart = passes.passes
        ready.set(true)
    }
    _ = ready.wait()

    let start = bf_now_ns()
    for _ in 0..<blocks {
        loop.performAndWakeUp {
            if counter.countOne() {
                counter.sleeps = passes.passes
                CFRunLoopStop(CFRunLoopGetCurrent())
            }
        }
    }
    let producerEnd = bf_now_ns()
    consumer.join()
    return (Double(counter.end - start) / 1e9, Double(producerEnd - start) / 1e9,
            counter.sleeps - counter.sleepsAtStart)
}

/// One SwiftNIO throughput run: the producer calls `EventLoop.execute` per task on a one-thread group.
func nioExecuteThroughput(tasks: Int) -> (seconds: Double, producerSeconds: Double) {
    let nio = NIOLoops(threads: 1)
    let loop = nio.loops[0]
    let counter = LoopCounter(target: tasks)
    let done = Latch<Bool>()
    _ = onLoop(loop) { true } // warm-up: the loop is running

    let start = bf_now_ns()
    for _ in 0..<tasks {
        loop.execute {
            if counter.countOne() { done.set(true) }
        }
    }
    let producerEnd = bf_now_ns()
    _ = done.wait()
    nio.shutDown()
    return (Double(counter.end - start) / 1e9, Double(producerEnd - start) / 1e9)
}

/// One libdispatch throughput run: the producer calls `async` per block on a serial queue.
func dispatchThroughput(blocks: Int) -> (seconds: Double, producerSeconds: Double) {
    let queue = DispatchQueue(label: "portloop-bench.serial")
    let counter = LoopCounter(target: blocks)
    let done = Latch<Bool>()
    queue.sync {} // warm-up: the queue exists and has run once

    let start = bf_now_ns()
    for _ in 0..<blocks {
        queue.async {
            if counter.countOne() { done.set(true) }
        }
    }
    let producerEnd = bf_now_ns()
    _ = done.wait()
    return (Double(counter.end - start) / 1e9, Double(producerEnd - start) / 1e9)
}
