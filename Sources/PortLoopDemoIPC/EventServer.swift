// The event server process (SpringBoard's part, or the HID system's): it makes input events and forwards each
// to the app's port, as it comes, with its send time. It runs no run loop: one thread that sleeps, then sends.
import PortLoop
import PortLoopDemoSupport
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// About how often a touch or a key press starts.
private let gesturePeriod: Int64 = 150_000_000

/// Why the server stopped before its end.
private enum ServerStop: Error {
    /// The app's port is a dead name: the app is gone.
    case appGone
    case failed(String)
}

/// The server's state while it sends.
private struct EventSender {
    let app: PortSendRight
    var sent = 0

    /// Sends one event now; waits up to 2 s for room in the app's port (its queue holds far more than a burst).
    mutating func send(gesture: UInt32, _ kind: EventKind, x: Int16, y: Int16) throws(ServerStop) {
        let event = InputEvent(timestamp: now(), sequence: UInt32(sent + 1), gesture: gesture, kind: kind, x: x, y: y)
        do {
            try app.send(id: MessageID.event, bytes: event.bytes, timeout: .after(.seconds(2)))
        } catch .invalidDestination {
            throw .appGone
        } catch {
            throw .failed("sending event #\(sent + 1): \(error)")
        }
        sent += 1
    }
}

/// A small xorshift generator: the same run of touches and keys every time.
private struct Dice {
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15

    mutating func next(_ range: ClosedRange<Int>) -> Int {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        return range.lowerBound + Int(state % UInt64(range.count))
    }
}

/// Runs the event server; returns the process's exit status.
func runEventServer(_ options: Options, _ context: ChildContext) -> Int32 {
    let tracer = Tracer(start: context.start, process: "server", quiet: options.quiet)
    let namespace = PortNamespace(path: context.namespace)
    // The conductor starts the server once the app's name is there; a look-up that still finds nobody is
    // retried for a while rather than failing the demo on a slow machine.
    var found: PortSendRight?
    let lookUpDeadline = now() + 5_000_000_000
    while found == nil {
        do {
            found = try namespace.lookUp(serviceName, timeout: .seconds(5))
        } catch .unknownService where now() < lookUpDeadline {
            usleep(10_000)
        } catch {
            tracer.always("cannot look \"\(serviceName)\" up: \(error)")
            return ExitStatus.failure
        }
    }
    guard let app = found else { return ExitStatus.failure }

    // Nobody reads this port; the app holds a send right to it, which becomes a dead name when this process ends.
    let lifeline: PortReceiveRight
    do {
        lifeline = try PortReceiveRight(queueLimit: 1)
    } catch {
        tracer.always("cannot make a port: \(error)")
        return ExitStatus.failure
    }
    do {
        try app.send(id: MessageID.hello, attachments: [.sendRight(lifeline.makeSendRight())], timeout: .after(.seconds(2)))
    } catch {
        tracer.always("cannot say hello to the app: \(error)")
        return ExitStatus.failure
    }
    tracer.line(now(), "looked up", "\"\(serviceName)\": \(app) in pid \(getpid()); hello sent, carrying a send right "
                + "to its own \(lifeline.name), which nobody reads: the app watches it for this process's death")

    var sender = EventSender(app: app)
    var dice = Dice()
    var gestures = 0
    var touches = 0
    var keys = 0
    let end = context.start + Int64(options.duration * 1e9)
    var next = now() + 30_000_000
    do throws(ServerStop) {
        while next < end {
            sleep(until: next)
            guard getppid() == context.conductor else { throw .failed("the demo's conductor is gone") }
            gestures += 1
            let gesture = UInt32(gestures)
            let first = sender.sent + 1
            let startedAt = now()
            if gestures % 3 == 0 {
                // A key press: down, and up 20–40 ms later.
                keys += 1
                let code = Int16(dice.next(4...60))
                try sender.send(gesture: gesture, .keyDown, x: code, y: 0)
                tracer.line(startedAt, "key \(gesture)", "down (code \(code)): event #\(sender.sent) sent")
                sleep(until: now() + Int64(dice.next(20...40)) * 1_000_000)
                let upAt = now()
                try sender.send(gesture: gesture, .keyUp, x: code, y: 0)
                tracer.line(upAt, "key \(gesture)", "up: event #\(sender.sent) sent")
            } else {
                // A touch: began; 8 ms later a burst of moves back to back (a digitizer's samples delivered
                // together); 8 ms later ended.
                touches += 1
                var x = Int16(dice.next(20...300)), y = Int16(dice.next(100...600))
                let moves = dice.next(3...12)
                try sender.send(gesture: gesture, .touchBegan, x: x, y: y)
                tracer.line(startedAt, "touch \(gesture)", "began at (\(x), \(y)): event #\(first) sent")
                sleep(until: now() + 8_000_000)
                let burstAt = now()
                for _ in 0..<moves {
                    x += Int16(dice.next(-6...6))
                    y += Int16(dice.next(2...14))
                    try sender.send(gesture: gesture, .touchMoved, x: x, y: y)
                }
                tracer.line(burstAt, "touch \(gesture)", "\(moves) moves, back to back: events "
                            + "#\(first + 1)–#\(sender.sent) sent in \(micros(now() - burstAt))")
                sleep(until: now() + 8_000_000)
                let endedAt = now()
                try sender.send(gesture: gesture, .touchEnded, x: x, y: y)
                tracer.line(endedAt, "touch \(gesture)", "ended: event #\(sender.sent) sent")
            }
            next += gesturePeriod + Int64(dice.next(-40...40)) * 1_000_000
        }
        do {
            try app.send(id: MessageID.end, bytes: countBytes(sender.sent), timeout: .after(.seconds(2)))
        } catch .invalidDestination {
            throw .appGone
        } catch {
            throw .failed("sending the end message: \(error)")
        }
    } catch {
        switch error {
        case .appGone:
            tracer.always("the app's port \(app.name) is a dead name: the app is gone. \(sender.sent) events were "
                          + "sent; the server stops (exit \(ExitStatus.peerDied))")
            return ExitStatus.peerDied
        case let .failed(why):
            tracer.always("stopped: \(why)")
            return ExitStatus.failure
        }
    }
    tracer.line(now(), "end", "\(sender.sent) events in \(gestures) gestures (\(touches) touches, \(keys) key presses); "
                + "end message sent")
    // The lifeline must outlive the end message: the app takes the end for a clean finish, a dead name before
    // it for the server's death.
    _ = lifeline.name
    return ExitStatus.ok
}
