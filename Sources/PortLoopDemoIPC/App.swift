// The app process: its MAIN run loop receives the event server's messages in a Source1 and hands the events
// to a Source0 that handles them, while DispatchQueue.main blocks and a timer run on the same thread.
import Dispatch
import PortLoop
import PortLoopDemoSupport
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// How the app's run ended.
private enum Ending {
    /// The server's end message came and every event it counted was handled.
    case complete
    /// The server's port died before its end message (a dead-name notification said so): the server is gone.
    case serverGone
    case failed(String)
}

/// The app's end, decided on the main thread by a callout; read after the run.
private final class Outcome: @unchecked Sendable {
    var ending: Ending?
    /// A send right to the app's own port, where the dead-name notification for the server's port goes, so that
    /// it comes in order after every message the server sent.
    var ownPort: PortSendRight?
    var deadNameRequest: PortNotificationRequest?
}

/// Runs the app; returns the process's exit status. Must be called on the main thread.
func runApp(_ options: Options, _ context: ChildContext) -> Int32 {
    let tracer = Tracer(start: context.start, process: "app", quiet: options.quiet)
    let loop = PortRunLoop.main
    let record = AppRecord(tracer: tracer)
    let outcome = Outcome()

    let port: PortReceiveRight
    do {
        // Room for several bursts: a burst never waits for the app.
        port = try PortNamespace(path: context.namespace).checkIn(serviceName, queueLimit: 256)
    } catch {
        tracer.always("cannot check \"\(serviceName)\" in: \(error)")
        return ExitStatus.failure
    }

    /// Ends the run once the server's end message came and every event it counted was handled.
    @Sendable func finishIfComplete() {
        guard outcome.ending == nil, record.nothingQueued else { return }
        if record.serverGone && record.endCount == nil {
            outcome.ending = .serverGone
            loop.stop()
            return
        }
        guard let expected = record.endCount, record.handled >= expected else { return }
        outcome.ending = record.handled == expected && record.orderBroken == nil
            ? .complete
            : .failed("\(record.handled) events handled of \(expected) sent"
                      + (record.orderBroken.map { ", out of order: \($0)" } ?? ""))
        loop.stop()
    }

    // Source0 (UIKit's event-dispatch source): handles what the Source1 queued.
    let dispatcher = RunLoopSource {
        record.dispatchQueued()
        finishIfComplete()
    }
    // Source1 (the HID client's port source): takes each message off the port, queues events, signals the
    // Source0. No wake-up call is needed: the loop performs signalled sources before it sleeps again.
    let hid = RunLoopPortSource(port: port) { message in
        record.received(message)
        // Once the hello brought the server's right: be told when it dies, on this same port, after whatever
        // the server sent before dying (Mach's MACH_NOTIFY_DEAD_NAME).
        if outcome.deadNameRequest == nil, let server = record.serverRight, let ownPort = outcome.ownPort {
            do { outcome.deadNameRequest = try server.requestDeadNameNotification(to: ownPort) } catch {
                outcome.ending = .failed("cannot watch the event server's port: \(error)")
                loop.stop()
            }
        }
        dispatcher.signal()
        return nil
    }
    record.portName = hid.portName
    outcome.ownPort = hid.makeSendRight()

    // A "frame" timer, as a display link would tick. A server that dies before its hello leaves nothing to
    // watch: the app waits for the hello only so long.
    let helloBy = ContinuousClock.now + .seconds(5)
    let frame = RunLoopTimer(after: .milliseconds(50), interval: .milliseconds(100)) { _ in
        record.frameFired()
        guard outcome.ending == nil else { return }
        if getppid() != context.conductor {
            outcome.ending = .failed("the demo's conductor is gone")
            loop.stop()
        } else if record.serverRight == nil && ContinuousClock.now > helloBy {
            outcome.ending = .failed("no event server said hello within 5 s")
            loop.stop()
        }
    }
    let observer = RunLoopObserver(activities: .allActivities) { _, activity in record.observe(activity, loop: loop) }

    do throws(RunLoopError) {
        try loop.add(observer, mode: .common)
        try loop.add(hid, mode: .common)
        try loop.add(dispatcher, mode: .common)
        try loop.add(frame, mode: .common)
    } catch {
        tracer.always("cannot set up the main run loop: \(error)")
        return ExitStatus.failure
    }

    // The app's "network" thread: a completion handler on the main queue about every 60 ms.
    let stopPosting = Atomic<Bool>(false)
    let network = DemoThread(name: "network") {
        var number = 0
        while !stopPosting.load(ordering: .acquiring) {
            number += 1
            let postedAt = now()
            let block = number
            record.mainQueuePosted.add(1, ordering: .relaxed)
            DispatchQueue.main.async { record.mainQueueBlock(block, postedAt: postedAt) }
            sleep(until: postedAt + Int64(45 + block * 7 % 31) * 1_000_000)
        }
    }

    tracer.line(now(), "checked in", "\"\(serviceName)\": Source1 on \(hid.portName), Source0 \"dispatch\", "
                + "timer \"frame\" every 100 ms, an observer of all activities, all in the common modes of the main "
                + "run loop; a \"network\" thread posts DispatchQueue.main blocks about every 60 ms")

    // The server sends for `duration`, then its end message; give it 10 s more on a loaded machine.
    let giveUp = ContinuousClock.now + .nanoseconds(Int64(options.duration * 1e9)) + .seconds(10)
    while outcome.ending == nil && ContinuousClock.now < giveUp {
        _ = loop.run(mode: .default, until: giveUp)
    }
    if outcome.ending == nil {
        outcome.ending = .failed("no end message from the event server within \(seconds(options.duration + 10))")
    }

    outcome.deadNameRequest?.cancel()
    outcome.ownPort = nil
    observer.invalidate()
    hid.invalidate()        // its port, and with it the name, goes when the source is released at the return
    dispatcher.invalidate()
    frame.invalidate()
    stopPosting.store(true, ordering: .releasing)
    network.join()
    // Every block posted runs before the summary: nothing is lost.
    let drainBy = ContinuousClock.now + .seconds(2)
    while record.mainQueueRan < record.mainQueuePosted.load(ordering: .acquiring) && ContinuousClock.now < drainBy {
        _ = loop.run(mode: .default, timeout: .milliseconds(10))
    }

    let summary = AppSummary(record: record)
    if !options.quiet { say("") }
    summary.printForPeople()
    switch outcome.ending {
    case .complete?:
        say(summary.machineLine(ending: "complete"))
        return ExitStatus.ok
    case .serverGone?:
        say(summary.machineLine(ending: "server-gone"))
        tracer.always("the event server (pid \(record.serverPID)) is gone: its port \(record.serverRight?.name.description ?? "?") "
                      + "is a dead name and no end message came. \(record.handled) events handled, "
                      + (record.orderBroken == nil ? "in order" : "out of order") + "; the app exits \(ExitStatus.peerDied)")
        return ExitStatus.peerDied
    case let .failed(why)?:
        say(summary.machineLine(ending: "failed"))
        tracer.always("failed: \(why)")
        return ExitStatus.failure
    case nil:
        return ExitStatus.failure
    }
}
