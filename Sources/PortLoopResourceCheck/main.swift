// A child process for the resource-exhaustion tests: it lowers its own descriptor limit, uses up every
// descriptor, then frees them a few at a time and tries each PortLoop call that needs descriptors at every
// step (a port set needs three, so each of its system calls gets its turn to fail). Every call must either
// work or throw a typed error naming the system call and EMFILE; afterwards no descriptor may be left behind,
// and once descriptors are back every call must work. Prints `ok <scenario> <details>` or
// `fail <scenario> <why>` and exits 0 or 1; a crash or an exit from inside the library fails the test too.
import Dispatch
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

func finish(_ ok: Bool, _ scenario: String, _ details: String) -> Never {
    print("\(ok ? "ok" : "fail") \(scenario) \(details)")
    exit(ok ? 0 : 1)
}

/// How many descriptors the process has open (`/proc/self/fd`, less the one reading it).
func openDescriptors() -> Int {
    guard let directory = opendir("/proc/self/fd") else { return -1 }
    var count = 0
    while let entry = readdir(directory) {
        if entry.pointee.d_name.0 != UInt8(ascii: ".") { count += 1 }
    }
    closedir(directory)
    return count - 1
}

/// Descriptors held to use up the limit: opened until `open` fails, given back a few at a time.
final class Filler {
    private var held: [Int32] = []

    func fill() {
        while true {
            let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
            if fd < 0 { break }
            held.append(fd)
        }
    }

    func release(_ count: Int) {
        for _ in 0..<min(count, held.count) { close(held.removeLast()) }
    }

    func releaseAll() { release(held.count) }
}

/// Whether an error is the one descriptor exhaustion must give: a failed system call with EMFILE.
func isDescriptorShortage(_ error: any Error) -> Bool {
    switch error {
    case let PortError.systemCallFailed(_, code): return code == EMFILE
    case let RunLoopError.portLayer(inner): return isDescriptorShortage(inner)
    case let StallMonitorError.runLoop(inner): return isDescriptorShortage(inner)
    default: return false
    }
}

/// One attempt: `body` creates and releases what it needs; it returns a description of what happened, or
/// throws the library's error.
typealias Attempt = () throws -> String

/// Attempts that must work whatever the descriptors: they wait and retry instead of failing.
let neverFailing: Set<String> = ["PortMessages consumer"]

let attempts: [(String, Attempt)] = [
    ("PortSet", {
        let set = try PortSet()
        let port = try PortReceiveRight()
        try set.insert(port)
        try port.makeSendRight().send(id: 1, timeout: .poll)
        guard case .message = try set.receive(timeout: .poll) else { return "no message" }
        return "created"
    }),
    ("RunLoopThread", {
        let thread = try RunLoopThread(name: "pressure")
        let value = try thread.executeAndWait { 42 }
        thread.stop()
        return value == 42 ? "created" : "wrong value"
    }),
    ("first loop of a thread", {
        // The loop itself needs no descriptor; its first mode's port set does, and `add` reports it.
        let outcome = Completion<Result<String, RunLoopError>>()
        let thread = Thread {
            let loop = PortRunLoop.current
            do throws(RunLoopError) {
                try loop.add(RunLoopTimer(after: .milliseconds(1)) { _ in }, mode: .default)
                try loop.add(RunLoopTimer(after: .milliseconds(1)) { _ in }, mode: "other")
                let ran = loop.run(mode: .default, timeout: .seconds(5)) == .finished
                    && loop.run(mode: "other", timeout: .seconds(5)) == .finished
                outcome.set(.success(ran ? "created" : "run failed"))
            } catch {
                outcome.set(.failure(error))
            }
        }
        let result = outcome.wait()
        thread.join()
        return try result.get()
    }),
    ("performAndAwait in a new mode", {
        // The new mode's port set is made as the block is queued: its failure is the caller's error.
        let thread = try RunLoopThread(name: "awaited")
        defer { thread.stop() }
        let outcome = Completion<Result<Int, RunLoopError>>()
        Task.detached {
            do throws(RunLoopError) {
                outcome.set(.success(try await thread.loop.performAndAwait(inModes: [.common, "awaited"]) { 42 }))
            } catch {
                outcome.set(.failure(error))
            }
        }
        return try outcome.wait().get() == 42 ? "created" : "wrong value"
    }),
    ("PortMessages consumer", {
        // A consumer whose waiting thread cannot get its port set polls its port instead: nothing is lost and
        // the stream does not end.
        let (messages, sender) = try PortMessages.makeStream(queueLimit: 8)
        let received = Completion<[Int32]>()
        let consumer = Task.detached { // not on the main actor: the main thread waits below
            var ids: [Int32] = []
            for await message in messages {
                ids.append(message.id)
                if ids.count == 3 { break }
            }
            received.set(ids)
        }
        for id: Int32 in 1...3 {
            usleep(20_000) // the consumer is waiting (parked, or polling) when each arrives
            try sender.send(id: id, timeout: .seconds(5))
        }
        let ids = received.wait()
        consumer.cancel()
        usleep(800_000) // the reactor's thread and port set linger half a second after the last consumer
        return ids == [1, 2, 3] ? "received" : "received \(ids)"
    }),
    ("stall monitor", {
        let thread = try RunLoopThread(name: "watched")
        let monitor = RunLoopStallMonitor(loop: thread.loop, threshold: .milliseconds(50), modes: ["watched"])
        defer { monitor.stop(); thread.stop() }
        try monitor.start()
        return "created"
    }),
]

/// A plain pthread, so that "the first loop of a thread" is a fresh thread each time.
final class Thread: @unchecked Sendable {
    private var handle = pthread_t()
    init(_ body: @escaping @Sendable () -> Void) {
        final class Box { let body: @Sendable () -> Void; init(_ body: @escaping @Sendable () -> Void) { self.body = body } }
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        let rc = pthread_create(&handle, nil, { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, box)
        if rc != 0 { finish(false, "thread", "pthread_create failed: \(rc)") }
    }
    func join() { pthread_join(handle, nil) }
}

/// A value handed from one thread to another.
final class Completion<Value>: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private var value: Value?
    func set(_ value: Value) { self.value = value; semaphore.signal() }
    func wait() -> Value { semaphore.wait(); return value! }
}

let scenario = CommandLine.arguments.dropFirst().first ?? "exhaustion"
switch scenario {
case "exhaustion":
    var limit = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = 64
    guard setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { finish(false, scenario, "setrlimit failed: \(errno)") }
    // Warm up once with descriptors to spare: lazily created state (the process's loop table, the C
    // layer's one-time set-up) is not a leak.
    for (name, attempt) in attempts {
        do { _ = try attempt() } catch { finish(false, scenario, "\(name) failed with descriptors to spare: \(error)") }
    }
    var log: [String] = []
    let filler = Filler()
    for (name, attempt) in attempts {
        var outcomes: [String] = []
        for free in 0...6 {
            filler.fill()
            filler.release(free)
            let before = openDescriptors()
            do {
                outcomes.append("\(free):\(try attempt())")
            } catch where isDescriptorShortage(error) {
                outcomes.append("\(free):EMFILE")
            } catch {
                finish(false, scenario, "\(name) with \(free) descriptors free threw \(error), not a descriptor shortage")
            }
            let after = openDescriptors()
            filler.releaseAll()
            guard after == before else {
                finish(false, scenario, "\(name) with \(free) descriptors free: \(before) descriptors open before, \(after) after")
            }
        }
        if neverFailing.contains(name) {
            guard outcomes.allSatisfy({ !$0.hasSuffix("EMFILE") && $0.hasSuffix("received") }) else {
                finish(false, scenario, "\(name) failed: \(outcomes)")
            }
        } else {
            guard outcomes.contains(where: { $0.hasSuffix("EMFILE") }) else {
                finish(false, scenario, "\(name) never ran short of descriptors: \(outcomes)")
            }
        }
        log.append("\(name)[\(outcomes.joined(separator: " "))]")
    }
    // Descriptors back: everything works again.
    for (name, attempt) in attempts {
        do { _ = try attempt() } catch { finish(false, scenario, "\(name) failed after descriptors were freed: \(error)") }
    }
    finish(true, scenario, log.joined(separator: " "))

default:
    finish(false, scenario, "unknown scenario")
}
