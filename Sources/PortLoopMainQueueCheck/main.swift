// A child process for the main-queue tests: its main thread runs PortLoop's main run loop with a
// synchronous `main`, which Swift Testing's own process cannot (it has called dispatchMain()). Each scenario
// prints one line `ok <scenario> <details>` or `fail <scenario> <why>` and exits 0 or 1.
import Dispatch
@_spi(Experimental) import PortLoop
#if canImport(Glibc)
import Glibc
#endif

func finish(_ ok: Bool, _ scenario: String, _ details: String) -> Never {
    print("\(ok ? "ok" : "fail") \(scenario) \(details)")
    exit(ok ? 0 : 1)
}

func cpuSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

let mainThread = pthread_self()
/// Whether the calling thread is the main one.
func isOnMainThread() -> Bool { pthread_equal(pthread_self(), mainThread) != 0 }

let loop = PortRunLoop.main
let scenario = CommandLine.arguments.dropFirst().first ?? "fifo"

switch scenario {
case "fifo":
    // Blocks run FIFO, on the main thread, isolated to the main actor.
    nonisolated(unsafe) var order: [Int] = []
    for i in 0..<100 {
        DispatchQueue.main.async {
            MainActor.assertIsolated()
            order.append(i)
            if i == 99 { loop.stop() }
        }
    }
    let result = loop.run(mode: .default, timeout: .seconds(10))
    finish(result == .stopped && order == Array(0..<100), scenario, "result=\(result) count=\(order.count)")

case "mainactor":
    nonisolated(unsafe) var ran = false
    Task { @MainActor in
        ran = true
        loop.stop()
    }
    let result = loop.run(mode: .default, timeout: .seconds(10))
    finish(result == .stopped && ran, scenario, "result=\(result)")

case "noncommon":
    // A block queued while a non-common mode runs waits until a common mode runs.
    nonisolated(unsafe) var ran = false
    try! loop.add(RunLoopTimer(after: .seconds(3600)) { _ in }, mode: "private")
    DispatchQueue.main.async { ran = true }
    let first = loop.run(mode: "private", timeout: .milliseconds(200))
    let ranInPrivate = ran
    let second = loop.run(mode: .default, timeout: .milliseconds(200))
    finish(first == .timedOut && !ranInPrivate && ran, scenario,
           "private=\(first) ranInPrivate=\(ranInPrivate) default=\(second) ran=\(ran)")

case "many":
    // 10,000 blocks from 4 threads all run.
    nonisolated(unsafe) var count = 0
    let group = DispatchGroup()
    for _ in 0..<4 {
        DispatchQueue.global().async(group: group) {
            for _ in 0..<2500 {
                DispatchQueue.main.async {
                    count += 1
                    if count == 10_000 { loop.stop() }
                }
            }
        }
    }
    let result = loop.run(mode: .default, timeout: .seconds(30))
    finish(result == .stopped && count == 10_000, scenario, "result=\(result) count=\(count)")

case "idle":
    // An idle main loop does not spin on the eventfd: near-zero CPU over 1 s.
    DispatchQueue.main.async {} // make the eventfd readable once, as a real program would
    let before = cpuSeconds()
    let result = loop.run(mode: .default, timeout: .seconds(1))
    let used = cpuSeconds() - before
    finish(result == .timedOut && used < 0.1, scenario, "result=\(result) cpu=\(used)s")

case "executor":
    // The main loop as the main executor (experimental): the main task and every @MainActor job run on the
    // main thread inside a run of the main loop, between its timers and DispatchQueue.main blocks.
    nonisolated(unsafe) var timerFired = false
    nonisolated(unsafe) var blockRan = false
    let detail = try MainRunLoopExecutor.runMain { () async throws -> String in
        let inLoop = PortRunLoop.main.currentModeName == .default
        try PortRunLoop.main.add(RunLoopTimer(after: .milliseconds(20)) { _ in timerFired = true }, mode: .default)
        DispatchQueue.main.async { blockRan = true }
        // Off to the global executor and back: the continuation is a main-loop job.
        let offMain = await Task.detached { !isOnMainThread() }.value
        try await Task.sleep(for: .milliseconds(60))
        let sources = try RunLoopPortSource { message in PortReply(id: message.id + 1) }
        try PortRunLoop.main.add(sources, mode: .default)
        let reply = try await Task.detached { try sources.makeSendRight().request(id: 41, timeout: .seconds(5)) }.value
        return "inLoop=\(inLoop) main=\(isOnMainThread()) offMain=\(offMain) reply=\(reply.id)"
    }
    let ok = detail == "inLoop=true main=true offMain=true reply=42" && timerFired && blockRan
    finish(ok, scenario, "\(detail) timer=\(timerFired) block=\(blockRan)")

default:
    finish(false, scenario, "unknown scenario; try fifo, mainactor, noncommon, many, idle, executor")
}
