// A child process for the cross-process tests: a service or a client of one, in a namespace the test names.
// DIR "-" stands for PortNamespace.standard. It prints `ready <pid>` once it can be reached (or has its right), then one line per result, and exits 0 on
// success or 1 with `fail <why>`. Roles:
//
//   serve DIR NAME [QLIMIT [MAXSIZE]] [--paused] [--activated] [--refuse] [--spin]
//       checks NAME in and serves it on the main run loop. Message ids: 1 echo (reply: the payload);
//       2 call back (the first attachment is a send right: a message id 3 with the payload goes to it, then the
//       echo); 4 read a descriptor (the first attachment: reply with the bytes read from it); 5 who am I (reply:
//       "pid uid gid unique" of the sender); 6 no reply (the reply right is dropped); 8 record (reply: nothing,
//       and the payload "pid thread seq" is checked for per-sender order; mismatches make id 9 fail);
//       9 report (reply: "received N" or "order broken ..."); 10 stop (the loop stops and the process exits 0);
//       11 reply twice (answers id 111 through the send-once reply right, then tries again and keeps the error);
//       12 report that error (reply id 112: the error, or "sent"); 13 hold (the reply right is kept, unused,
//       and `holding` is printed: the test kills the process); 14 hand back (the message's reply right goes, as
//       the reply right, in a message id 114 to the first attachment, a send right; no answer of its own).
//       --paused: the loop starts only when a line arrives on stdin. --activated: LISTEN_PID is this process
//       (a test's stand-in for systemd, which sets it after fork). --refuse: a policy that admits nobody (not even
//       this user or root), so every look-up is refused. --spin: the loop polls for the longest spin allowed
//       before it sleeps (PortRunLoop.maxSpinBeforeSleeping), the low-latency mode.
//   client DIR NAME THREADS COUNT [--fds] [--large] [--medium] [--patterned] [--paced] [--stay]
//       looks NAME up; THREADS threads each send COUNT messages id 8 with payload "pid thread seq", waiting
//       forever for room; prints `sent N` when all are sent. --fds: every third message (seq divisible by 3)
//       carries a descriptor, /dev/null. --large: three of four (seq not divisible by 4) are padded with spaces to
//       20,000 bytes. --medium: every one is padded to 4,000 bytes. --patterned: a space, then bytes up to 4,000,
//       70,000 or 300,000 (by seq % 3), byte i being (i * 7 + seq) | 0x80. --paced (one thread): after every 100
//       messages but the last, prints `paced N` (N sent so far) and waits for a line on stdin. --stay: then prints
//       `rings N` (CrossProcessStatistics' sharedRingConnections) and `asked N` (its creditRequests), and exits
//       only when a line arrives on stdin.
//   stream DIR NAME COUNT [SIZE] [--pack] [--exit-now]
//       looks NAME up, prints `ready` and waits for a line on stdin; then one thread sends COUNT messages id 8
//       back to back, payload "pid 0 seq" padded with spaces to SIZE bytes (default 16), waiting forever for room;
//       prints `sent N` and exits at once through exit(), which sends what the library still holds (waiting for
//       room in the socket, or packed); with --exit-now it calls _exit() right after its last send instead. --pack:
//       PortNamespace.packsStreams is set first, and before `sent N` it prints `streaks K`: how many times 8 sends
//       in a row each returned within 2 µs of the previous one's start, a pace at which the library surely counts
//       the sender as streaming (a ThreadSanitizer build, or a busy machine, may never reach it).
//   flood DIR NAME COUNT
//       looks NAME up and sends COUNT messages id 1 whose replies go to a port of its own that it never reads.
//   hold DIR NAME
//       looks NAME up and sends it a message id 2 carrying a send right to a port of its own, which it never
//       reads; then waits for ever (the test kills it).
//   lend DIR NAME
//       as hold, but a line on stdin destroys its own port (the right it sent becomes a dead name while this
//       process lives) and it prints `destroyed`.
//   drop DIR NAME
//       looks NAME up, makes one request (id 1), lets its right go and prints `dropped`; then waits for ever.
//   cycles DIR NAME COUNT
//       the leak check: COUNT connect/kill cycles of `hold` children against a service of its own (see below).
//   lookup DIR NAME [--as-nobody]
//       looks NAME up and prints `ok` or `error <PortError>`; --as-nobody first drops to uid/gid 65534.
//   request DIR NAME ID TEXT
//       looks NAME up, makes one request and prints `reply <id> <text>` or `error <PortError>`.
//   paced DIR NAME COUNT
//       looks NAME up and makes one request (id 1) to start the connection; then, 2 ms apart, sends COUNT messages
//       id 1 of payload [i, 7] with a reply port of its own, made once, and checks each reply (id 101, the same
//       payload). Prints `rung N`, the shared-ring bells this process rang meanwhile (sharedRingWakeUps), and
//       `rings N` (sharedRingConnections).
//   bulk DIR NAME SIZE COUNT [THRESHOLD] [--buffer] [--exhaust-descriptors] [--limit-file-size]
//       looks NAME up and sends COUNT messages id 11 of SIZE bytes, message k's byte i being
//       UInt8(truncatingIfNeeded: i &* 31 &+ i >> 16) &+ k, waiting forever for room; prints `sent N`. THRESHOLD
//       sets PortNamespace.outOfLineThreshold first. --buffer sends MessageBuffers. --exhaust-descriptors opens
//       /dev/null until no descriptor is left before sending (no memfd can be made), and says `exhausted N`.
//       --limit-file-size: RLIMIT_FSIZE of 64 KiB, SIGXFSZ ignored, so that no larger memfd can be written.
import Foundation
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// Writes a line to standard output at once (the test reads lines as they come).
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

func fail(_ why: String) -> Never {
    say("fail \(why)")
    exit(1)
}

/// The value `body` makes, or the process fails saying what could not be made.
func must<T: ~Copyable>(_ what: String, _ body: () throws -> T) -> T {
    do { return try body() } catch { fail("\(what): \(error)") }
}

func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

/// The leak check, in a process of its own so that nothing else moves its counts: checks `name` in, then
/// `count` times starts a `hold` child, serves its request, takes its right and kills it with SIGKILL. Prints
/// `before D T R` and `after D T R C I E S=then/now` (descriptors, threads, resident KiB, connections, imported
/// and exported rights, and the service port's send rights before and after).
func runCycles(_ namespace: PortNamespace, _ name: String, _ count: Int) -> Never {
    let port = must("checkIn") { try namespace.checkIn(name, queueLimit: 1024) }
    for _ in 0..<5 { cycle(namespace, name, port) } // warm up: the transport thread, Process, the allocator
    usleep(200_000)
    let rightsBefore = port.sendRightCount
    say("before \(resourceCounts())")
    for _ in 0..<count { cycle(namespace, name, port) }
    // Wait for the rights as well as the connections to go: a leak of either shows in the counts printed.
    var statistics = CrossProcessStatistics.current
    for _ in 0..<2000 where statistics.connections > 0 || statistics.importedRights > 0 ||
        statistics.exportedRights > 0 || port.sendRightCount != rightsBefore {
        usleep(5000)
        statistics = CrossProcessStatistics.current
    }
    say("after \(resourceCounts()) \(statistics.connections) \(statistics.importedRights) \(statistics.exportedRights) S=\(rightsBefore)/\(port.sendRightCount)")
    exit(0)
}

/// One connect/kill cycle of the leak check. posix_spawn and waitpid, not Foundation's Process, whose
/// waitUntilExit looks for the exit only every 50 ms.
func cycle(_ namespace: PortNamespace, _ name: String, _ port: borrowing PortReceiveRight) {
    let arguments = [CommandLine.arguments[0], "hold", namespace.path, name]
    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    var child: pid_t = 0
    guard posix_spawn(&child, CommandLine.arguments[0], &actions, nil, argv, environ) == 0 else { fail("posix_spawn") }
    do {
        let request = try port.receive(timeout: .seconds(10))
        try request.replyPort?.send(id: 102, timeout: .poll)
        _ = try port.receive(timeout: .seconds(10)) // with its right, dropped here
    } catch { fail("cycle: \(error)") }
    kill(child, SIGKILL)
    var status: Int32 = 0
    waitpid(child, &status, 0)
}

/// Descriptors, threads and resident KiB of this process, from /proc.
func resourceCounts() -> String {
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
    let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?.split(separator: " ").dropFirst().first ?? "-1"
    return "\(fds) \(threads) \(rss)"
}

/// The `hold` and `lend` roles: look the service up and send it a right to a port of our own that is never read.
/// `hold` then waits holding both rights until it is killed; `lend` destroys its port when a line arrives on
/// stdin (the right it sent becomes a dead name while this process lives).
func hold(_ namespace: PortNamespace, _ name: String, destroyWhenTold: Bool) -> Never {
    let mine = must("port") { try PortReceiveRight(queueLimit: 1) }
    let service = must("lookUp") { try namespace.lookUp(name) }
    do {
        _ = try service.request(id: 2, bytes: Array("hold".utf8), timeout: .seconds(10))
        try service.send(id: 2, bytes: Array("held".utf8), attachments: [.sendRight(mine.makeSendRight())],
                         timeout: .seconds(10))
    } catch { fail("send: \(error)") }
    say("ready \(getpid())")
    guard destroyWhenTold else { park(holding: mine, and: service) }
    _ = readLine()
    mine.destroy()
    say("destroyed")
    while true { sleep(3600) }
}

/// The `drop` role: one request, then no right to the service is left in this process.
func drop(_ namespace: PortNamespace, _ name: String) -> Never {
    do {
        let service = try namespace.lookUp(name)
        _ = try service.request(id: 1, bytes: Array("drop".utf8), timeout: .seconds(10))
    } catch { fail("request: \(error)") }
    say("dropped")
    while true { sleep(3600) }
}

/// Sleeps for ever while `port` lives (a local's lifetime may end at its last use).
func park(holding port: consuming PortReceiveRight, and right: PortSendRight) -> Never {
    while true { sleep(3600) }
}

var arguments = Array(CommandLine.arguments.dropFirst())
let flags = Set(arguments.filter { $0.hasPrefix("--") })
arguments.removeAll { $0.hasPrefix("--") }
guard arguments.count >= 3 else { fail("usage: ROLE DIR NAME ...") }
let role = arguments[0]
// "-": the standard namespace (PORTLOOP_NAMESPACE, XDG_RUNTIME_DIR or /tmp).
let namespace: PortNamespace
if arguments[1] == "-" {
    do { namespace = try PortNamespace.standard } catch { fail("standard namespace: \(error)") }
} else {
    namespace = PortNamespace(path: arguments[1])
}
let name = arguments[2]

switch role {
case "serve":
    if flags.contains("--activated") { setenv("LISTEN_PID", "\(getpid())", 1) }
    let queueLimit = arguments.count > 3 ? Int(arguments[3]) ?? 64 : 64
    let maxSize = arguments.count > 4 ? Int(arguments[4]) ?? 65536 : 65536
    let port: PortReceiveRight
    let policy = flags.contains("--refuse") ? PeerPolicy(allowsSameUser: false, allowsRoot: false) : .sameUser
    do { port = try namespace.checkIn(name, queueLimit: queueLimit, maxMessageSize: maxSize, policy: policy) } catch {
        fail("checkIn: \(error)")
    }
    nonisolated(unsafe) var lastSeq: [String: Int] = [:]
    nonisolated(unsafe) var received = 0
    nonisolated(unsafe) var broken: String?
    nonisolated(unsafe) var secondSend = "none"
    nonisolated(unsafe) var held: [PortSendRight] = []
    let loop = PortRunLoop.current
    let source = RunLoopPortSource(port: port) { message in
        switch message.id {
        case 1:
            return PortReply(id: 101, bytes: message.payload)
        case 2:
            if case let .sendRight(back)? = message.attachments.first {
                try? back.send(id: 3, bytes: message.payload, timeout: .poll)
            }
            return PortReply(id: 102, bytes: message.payload)
        case 4:
            guard case let .fileDescriptor(descriptor)? = message.attachments.first, let fd = descriptor.take() else {
                return PortReply(id: 104, bytes: Array("no descriptor".utf8))
            }
            var buffer = [UInt8](repeating: 0, count: 256)
            let n = read(fd, &buffer, buffer.count)
            close(fd)
            return PortReply(id: 104, bytes: Array(buffer.prefix(max(0, n))))
        case 5:
            let s = message.sender
            return PortReply(id: 105, bytes: Array("\(s.processID) \(s.userID) \(s.groupID) \(s.uniqueProcessID)".utf8))
        case 6:
            return nil
        case 8:
            received += 1
            let parts = text(message.payload).split(separator: " ")
            if parts.count == 3, let seq = Int(parts[2]) {
                let key = "\(parts[0]) \(parts[1])"
                if seq != (lastSeq[key] ?? -1) + 1, broken == nil { broken = "\(key): \(seq) after \(lastSeq[key] ?? -1)" }
                lastSeq[key] = seq
            } else if broken == nil {
                broken = "bad payload"
            }
            return nil
        case 9:
            let keys = lastSeq.keys.sorted().map { "\($0)=\(lastSeq[$0]!)" }.joined(separator: ",")
            return PortReply(id: 109, bytes: Array((broken.map { "order broken \($0)" } ?? "received \(received) \(keys)").utf8))
        case 10:
            loop.stop()
            return PortReply(id: 110)
        case 11:
            guard let reply = message.replyPort else { return nil }
            do { try reply.send(id: 111, bytes: message.payload, timeout: .poll) } catch { fail("reply 11: \(error)") }
            do throws(PortError) {
                try reply.send(id: 111, bytes: message.payload, timeout: .poll)
                secondSend = "sent"
            } catch {
                secondSend = "\(error)"
            }
            return nil
        case 12:
            return PortReply(id: 112, bytes: Array(secondSend.utf8))
        case 13:
            if let reply = message.replyPort { held.append(reply) }
            say("holding \(held.count)")
            return nil
        case 14:
            if case let .sendRight(back)? = message.attachments.first, let reply = message.replyPort {
                do { try back.send(id: 114, bytes: message.payload, replyPort: reply, timeout: .poll) } catch {
                    fail("hand back: \(error)")
                }
            }
            return nil
        default:
            return PortReply(id: 199)
        }
    }
    do { try loop.add(source, mode: .default) } catch { fail("add: \(error)") }
    if flags.contains("--spin") { loop.spinBeforeSleeping = PortRunLoop.maxSpinBeforeSleeping }
    say("ready \(getpid())")
    if flags.contains("--paused") { _ = readLine() }
    while true {
        let result = loop.run(mode: .default, timeout: .seconds(3600))
        if result == .stopped { break }
    }
    exit(0)

case "client":
    guard arguments.count == 5, let threads = Int(arguments[3]), let count = Int(arguments[4]),
          threads == 1 || !flags.contains("--paced") else { fail("usage") }
    let service: PortSendRight
    do { service = try namespace.lookUp(name) } catch { fail("lookUp: \(error)") }
    say("ready \(getpid())")
    let group = DispatchGroup()
    let pid = getpid()
    nonisolated(unsafe) var failures: [String] = []
    let lock = NSLock()
    for thread in 0..<threads {
        group.enter()
        Thread.detachNewThread {
            for seq in 0..<count {
                do {
                    var attachments: [MessageAttachment] = []
                    if flags.contains("--fds"), seq % 3 == 0 {
                        let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
                        guard fd >= 0 else { throw PortError.systemCallFailed(call: "open", errno: errno) }
                        attachments.append(.fileDescriptor(MessageDescriptor(adopting: fd)))
                    }
                    var bytes = Array("\(pid) \(thread) \(seq)".utf8)
                    if flags.contains("--large"), seq % 4 != 0 {
                        bytes += [UInt8](repeating: 0x20, count: 20_000 - bytes.count)
                    }
                    if flags.contains("--medium") { bytes += [UInt8](repeating: 0x20, count: 4_000 - bytes.count) }
                    if flags.contains("--patterned") {
                        // One, two or five fragments; after a space, bytes that say where they belong.
                        bytes += Array(" ".utf8)
                        let size = [4_000, 70_000, 300_000][seq % 3]
                        let start = bytes.count
                        bytes += (start..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ seq) | 0x80 }
                    }
                    try service.send(id: 8, bytes: bytes, attachments: attachments)
                    if flags.contains("--paced"), (seq + 1) % 100 == 0, seq + 1 < count {
                        say("paced \(seq + 1)")
                        _ = readLine()
                    }
                } catch {
                    lock.lock(); failures.append("\(thread)/\(seq): \(error)"); lock.unlock()
                    break
                }
            }
            group.leave()
        }
    }
    group.wait()
    if let first = failures.first { fail("send \(first)") }
    say("sent \(threads * count)")
    if flags.contains("--stay") {
        say("rings \(CrossProcessStatistics.current.sharedRingConnections)")
        say("asked \(CrossProcessStatistics.current.creditRequests)")
        _ = readLine()
    }
    exit(0)

case "stream":
    // The options are in `flags` (taken out of `arguments` above).
    let options = flags
    let numbers = arguments.dropFirst(3).compactMap { Int($0) }
    guard numbers.count == 1 || numbers.count == 2, options.isSubset(of: ["--pack", "--exit-now"]),
          numbers.count == arguments.count - 3 else { fail("usage") }
    let count = numbers[0], size = numbers.count == 2 ? numbers[1] : 16
    guard size >= 16 else { fail("usage") }
    if options.contains("--pack") { PortNamespace.packsStreams = true }
    let service: PortSendRight
    do { service = try namespace.lookUp(name) } catch { fail("lookUp: \(error)") }
    // Every payload made before the first send, so that the sends come back to back even in a debug build.
    let pid = getpid()
    var payloads = [UInt8](repeating: UInt8(ascii: " "), count: count * size)
    for seq in 0..<count {
        let head = Array("\(pid) 0 \(seq)".utf8)
        payloads.replaceSubrange(seq * size..<seq * size + head.count, with: head)
    }
    say("ready \(pid)")
    _ = readLine()
    // The library counts a send as quick when it begins within 2 µs of the end of the previous one, both inside
    // the calls; both lie between the previous call's start and this call's return, so when that span is under
    // 2 µs, the library saw a quick send too. 8 of them in a row are a streak.
    var streaks = 0, quick = 0
    var previousStart: Int64?
    func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
    payloads.withUnsafeBytes { all in
        for seq in 0..<count {
            let start = now()
            do {
                try service.send(id: 8, payload: UnsafeRawBufferPointer(rebasing: all[seq * size..<(seq + 1) * size]),
                                 timeout: .forever)
            } catch {
                fail("send \(seq): \(error)")
            }
            quick = previousStart.map { now() - $0 < 2_000 } ?? false ? quick + 1 : 0
            if quick == 8 { streaks += 1; quick = 0 }
            previousStart = start
        }
    }
    if options.contains("--exit-now") { _exit(0) } // at once: not even the lines below
    if options.contains("--pack") { say("streaks \(streaks)") }
    say("sent \(count)")
    exit(0)

case "flood":
    // Sends COUNT messages id 1, each naming a port of its own (queue limit 1024) for the reply, and never
    // reads that port: the replies pile up here (the test stops this process to make them pile up there).
    guard arguments.count == 4, let count = Int(arguments[3]) else { fail("usage") }
    let service: PortSendRight
    do { service = try namespace.lookUp(name) } catch { fail("lookUp: \(error)") }
    let replies: PortReceiveRight
    do { replies = try PortReceiveRight(queueLimit: 1024) } catch { fail("port: \(error)") }
    say("ready \(getpid())")
    for i in 0..<count {
        do { try service.send(id: 1, bytes: [UInt8(truncatingIfNeeded: i)], replyPort: replies.makeSendRight()) } catch {
            fail("send: \(error)")
        }
    }
    say("sent \(count)")
    while true { sleep(3600) }

case "hold":
    hold(namespace, name, destroyWhenTold: false)

case "lend":
    hold(namespace, name, destroyWhenTold: true)

case "drop":
    drop(namespace, name)

case "cycles":
    guard arguments.count == 4, let count = Int(arguments[3]) else { fail("usage") }
    runCycles(namespace, name, count)

case "lookup":
    if flags.contains("--as-nobody") {
        guard setgroups(0, nil) == 0, setgid(65534) == 0, setuid(65534) == 0 else { fail("cannot drop to nobody") }
    }
    do {
        _ = try namespace.lookUp(name, timeout: .seconds(5))
        say("ok")
    } catch {
        say("error \(error)")
    }
    exit(0)

case "request":
    guard arguments.count == 5, let id = Int32(arguments[3]) else { fail("usage") }
    do {
        let service = try namespace.lookUp(name)
        let reply = try service.request(id: id, bytes: Array(arguments[4].utf8), timeout: .seconds(10))
        say("reply \(reply.id) \(text(reply.payload))")
    } catch {
        say("error \(error)")
    }
    exit(0)

case "paced":
    guard arguments.count == 4, let count = Int(arguments[3]), count > 0, count < 256 else { fail("usage") }
    do {
        let service = try namespace.lookUp(name, timeout: .seconds(10))
        _ = try service.request(id: 1, bytes: [0], timeout: .seconds(10))
        let replies = try PortReceiveRight(queueLimit: 4)
        let replyPort = replies.makeSendRight()
        let rungBefore = CrossProcessStatistics.current.sharedRingWakeUps
        for i in 1...count {
            usleep(2000)
            try service.send(id: 1, bytes: [UInt8(i), 7], replyPort: replyPort, timeout: .seconds(10))
            let reply = try replies.receive(timeout: .seconds(10))
            guard reply.id == 101 && reply.payload == [UInt8(i), 7] else { fail("reply \(i): \(reply.id)") }
        }
        say("rung \(CrossProcessStatistics.current.sharedRingWakeUps - rungBefore)")
        say("rings \(CrossProcessStatistics.current.sharedRingConnections)")
    } catch {
        fail("paced: \(error)")
    }
    exit(0)

case "bulk":
    guard arguments.count >= 5, let size = Int(arguments[3]), let count = Int(arguments[4]) else { fail("usage") }
    if arguments.count > 5, let threshold = Int(arguments[5]) { PortNamespace.outOfLineThreshold = threshold }
    let service = must("lookUp") { try namespace.lookUp(name) }
    if flags.contains("--exhaust-descriptors") {
        var opened = 0
        while open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0 { opened += 1 }
        say("exhausted \(opened)")
    }
    if flags.contains("--limit-file-size") {
        var limit = rlimit(rlim_cur: 65536, rlim_max: 65536)
        signal(SIGXFSZ, SIG_IGN)
        guard setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) == 0 else { fail("setrlimit") }
    }
    // Made before the first send, so that the sends follow one another as fast as the connection takes them.
    let base = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 16) }
    let payloads = (0..<count).map { k in base.withUnsafeBufferPointer { b in b.map { $0 &+ UInt8(truncatingIfNeeded: k) } } }
    for bytes in payloads {
        if flags.contains("--buffer") {
            do { try service.send(id: 11, buffer: try MessageBuffer(copying: bytes)) } catch { fail("send: \(error)") }
        } else {
            must("send") { try service.send(id: 11, bytes: bytes) }
        }
    }
    say("sent \(count)")
    while true { sleep(3600) }

default:
    fail("unknown role \(role)")
}
