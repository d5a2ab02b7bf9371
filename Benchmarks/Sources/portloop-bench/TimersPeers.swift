import CBenchFloors
import CoreFoundation
import NIOCore
import NIOPosix

// The peers of the `timers` scenario: the same fire dates (same seed) on a CFRunLoop and on a SwiftNIO event
// loop. Each converts the window's start to its own clock by reading that clock and CLOCK_MONOTONIC
// (bf_now_ns, the clock lateness is measured on) back to back.

/// One CFRunLoop timers run on a fresh thread: `CFRunLoopTimerCreateWithHandler` (one-shot, tolerance 0)
/// per timer, `CFRunLoopAddTimer` for each into the default mode before the loop runs, then
/// `CFRunLoopRunInMode` until the last has fired (one-shot timers leave the mode; it then finishes).
func cfTimerRun(count: Int, window: Int64, lead: Int64, seed: UInt64) -> TimerRun {
    let result = SharedValue<TimerRun?>(nil)
    let thread = JoinableThread {
        let loop = CFRunLoopGetCurrent()
        let recorder = TimerRecorder(count: count)
        let offsets = timerOffsets(count: count, window: window, seed: seed)

        // CF fire dates are CFAbsoluteTime (seconds, wall clock); CF turns them into monotonic deadlines by
        // their distance from now, so the window's start is read on both clocks back to back.
        let windowStart = bf_now_ns() + lead
        let windowStartAbsolute = CFAbsoluteTimeGetCurrent() + Double(lead) / 1e9

        let createStart = bf_now_ns()
        var timers: [CFRunLoopTimer] = []
        timers.reserveCapacity(count)
        for index in 0..<count {
            recorder.fireDates[index] = windowStart + offsets[index]
            let fireDate = windowStartAbsolute + Double(offsets[index]) / 1e9
            timers.append(CFRunLoopTimerCreateWithHandler(nil, fireDate, 0, 0, 0) { _ in recorder.fire(index) })
        }
        let addStart = bf_now_ns()
        for timer in timers { CFRunLoopAddTimer(loop, timer, kCFRunLoopDefaultMode) }
        let addEnd = bf_now_ns()
        timers = [] // the loop holds them now

        while recorder.fired < count {
            let result = CFRunLoopRunInMode(kCFRunLoopDefaultMode, 10, false)
            if result == .finished && recorder.fired < count {
                fatalError("CF timers: mode finished with \(recorder.fired) of \(count) fired")
            }
        }

        result.value = TimerRun(count: count, createStart: createStart, addStart: addStart, addEnd: addEnd,
                                windowStart: windowStart, recorder: recorder)
    }
    thread.join()
    guard let run = result.value else { fatalError("CF timers run produced no result") }
    return run
}

/// One SwiftNIO timers run on a fresh one-thread group: on the event loop, `scheduleTask(deadline:)` per
/// timer (creating and scheduling are one call: the whole cost is reported as `addMicroseconds`, creation
/// as 0), then the loop runs them; the last one to fire signals the caller.
func nioTimerRun(count: Int, window: Int64, lead: Int64, seed: UInt64) -> TimerRun {
    let nio = NIOLoops(threads: 1)
    let loop = nio.loops[0]
    let recorder = TimerRecorder(count: count)
    let offsets = timerOffsets(count: count, window: window, seed: seed)
    let done = Latch<Bool>()

    let (windowStart, setUp) = onLoop(loop) { () -> (Int64, (add: Int64, end: Int64)) in
        // NIODeadline is its own monotonic clock (uptime nanoseconds): read it beside CLOCK_MONOTONIC.
        let windowStart = bf_now_ns() + lead
        let windowStartDeadline = NIODeadline.now().uptimeNanoseconds + UInt64(lead)
        let addStart = bf_now_ns()
        for index in 0..<count {
            recorder.fireDates[index] = windowStart + offsets[index]
            loop.scheduleTask(deadline: .uptimeNanoseconds(windowStartDeadline + UInt64(offsets[index]))) {
                recorder.fire(index)
                if recorder.fired == count { done.set(true) }
            }
        }
        return (windowStart, (addStart, bf_now_ns()))
    }
    _ = done.wait()
    nio.shutDown()
    return TimerRun(count: count, createStart: setUp.add, addStart: setUp.add, addEnd: setUp.end,
                    windowStart: windowStart, recorder: recorder)
}
