import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Receives every notice waiting on `port` (polling), failing the test on any other message.
private func notices(on port: borrowing PortReceiveRight) -> [PortNotification] {
    var found: [PortNotification] = []
    while let message = try? port.receive(timeout: .poll) {
        guard let notice = PortNotification(message) else {
            Issue.record("not a notification: \(message)")
            continue
        }
        found.append(notice)
    }
    return found
}

/// No-senders and dead-name notifications in one process: when they fire, exactly once, what they carry, what
/// cancels them, and the races with the event they report.
@Suite("Port notifications")
struct PortNotificationTests {
    @Test("no-senders fires once, when the last right goes, with the make-send count of that moment")
    func noSendersOnLastRelease() throws {
        let port = try PortReceiveRight()
        let inbox = try PortReceiveRight()
        var first: PortSendRight? = port.makeSendRight()
        var second: PortSendRight? = port.makeSendRight()
        #expect(port.makeSendCount == 2)
        let request = try port.requestNoSendersNotification(to: inbox.makeSendRight())
        first = nil
        #expect(notices(on: inbox).isEmpty, "a right is left")
        second = nil
        _ = (first, second)
        let got = notices(on: inbox)
        #expect(got == [.noSenders(port: port.name, makeSendCount: 2, request: request.id)])
        #expect(!request.cancel(), "a fired request cannot be cancelled")
        _ = port.makeSendRight() // made and dropped: the request has fired already, so nothing more comes
        #expect(notices(on: inbox).isEmpty)
    }

    @Test("no-senders fires at once when no right exists, and not before the make-send count reaches sync")
    func noSendersNowAndSync() throws {
        let port = try PortReceiveRight()
        let inbox = try PortReceiveRight()
        let now = try port.requestNoSendersNotification(to: inbox.makeSendRight())
        #expect(notices(on: inbox) == [.noSenders(port: port.name, makeSendCount: 0, request: now.id)])

        let later = try port.requestNoSendersNotification(to: inbox.makeSendRight(), makeSendCount: 2)
        _ = port.makeSendRight() // count 1, gone: below sync
        #expect(notices(on: inbox).isEmpty)
        _ = port.makeSendRight() // count 2, gone
        #expect(notices(on: inbox) == [.noSenders(port: port.name, makeSendCount: 2, request: later.id)])
    }

    @Test("a right inside a queued message counts until the message is received and dropped")
    func rightsInMessagesCount() throws {
        let port = try PortReceiveRight()
        let carrier = try PortReceiveRight()
        let inbox = try PortReceiveRight()
        let toCarrier = carrier.makeSendRight()
        do {
            let right = port.makeSendRight()
            try toCarrier.send(id: 1, attachments: [.sendRight(right)], timeout: .poll)
            try toCarrier.send(id: 2, replyPort: right, timeout: .poll)
        }
        let request = try port.requestNoSendersNotification(to: inbox.makeSendRight())
        #expect(notices(on: inbox).isEmpty, "two rights wait in the carrier's queue")
        _ = try carrier.receive(timeout: .poll)
        #expect(notices(on: inbox).isEmpty, "one is left")
        _ = try carrier.receive(timeout: .poll)
        #expect(notices(on: inbox).map(\.request) == [request.id])
    }

    @Test("a notice made stale by a new right says so through the make-send count")
    func staleNotice() throws {
        let port = try PortReceiveRight()
        let inbox = try PortReceiveRight()
        let request = try port.requestNoSendersNotification(to: inbox.makeSendRight(), makeSendCount: 1)
        _ = port.makeSendRight()
        let kept = port.makeSendRight() // made after the notice fired
        guard case let .noSenders(_, count, _)? = notices(on: inbox).first else {
            Issue.record("no notice")
            return
        }
        #expect(count == 1 && port.makeSendCount == 2, "the receiver sees the notice is stale")
        _ = (kept, request)
    }

    @Test("cancelled before it fires, a request never delivers; dropping the request cancels it")
    func cancelStopsDelivery() throws {
        let port = try PortReceiveRight()
        let inbox = try PortReceiveRight()
        let right = port.makeSendRight()
        let cancelled = try right.requestDeadNameNotification(to: inbox.makeSendRight())
        #expect(cancelled.cancel())
        #expect(!cancelled.cancel(), "twice is harmless")
        var dropped: PortNotificationRequest? = try right.requestDeadNameNotification(to: inbox.makeSendRight())
        #expect(dropped != nil)
        dropped = nil
        port.destroy()
        #expect(notices(on: inbox).isEmpty)
    }

    @Test("dead-name fires once for each request when the port is destroyed, and at once for a dead right")
    func deadName() throws {
        let inbox = try PortReceiveRight()
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        let a = try right.requestDeadNameNotification(to: inbox.makeSendRight())
        let b = try right.requestDeadNameNotification(to: inbox.makeSendRight())
        let name = port.name
        port.destroy()
        #expect(notices(on: inbox) == [.deadName(port: name, request: a.id), .deadName(port: name, request: b.id)])
        let late = try right.requestDeadNameNotification(to: inbox.makeSendRight())
        #expect(notices(on: inbox) == [.deadName(port: name, request: late.id)])
        #expect(!a.cancel() && !late.cancel())
    }

    @Test("a destroyed port ends its no-senders requests without a notice")
    func destroyedPortEndsRequests() throws {
        let inbox = try PortReceiveRight()
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        let request = try port.requestNoSendersNotification(to: inbox.makeSendRight())
        port.destroy()
        #expect(right.isDeadName)
        #expect(notices(on: inbox).isEmpty)
        #expect(!request.cancel(), "it ended with its port")
    }

    @Test("notices pass a full queue: none is lost")
    func noticesPassTheQueueLimit() throws {
        let inbox = try PortReceiveRight(queueLimit: 1)
        try inbox.makeSendRight().send(id: 1, timeout: .poll) // full
        var requests: [PortNotificationRequest] = []
        for _ in 0..<5 {
            let port = try PortReceiveRight()
            requests.append(try port.requestNoSendersNotification(to: inbox.makeSendRight(), makeSendCount: 1))
            _ = port.makeSendRight() // made and dropped: the notice fires into the full inbox
        }
        #expect(inbox.messageCount == 6)
        #expect(throws: PortError.timedOut) { try inbox.makeSendRight().send(id: 2, timeout: .poll) }
        let first = try inbox.receive(timeout: .poll)
        #expect(!first.isNotification && PortNotification(first) == nil)
        #expect(Set(notices(on: inbox).map(\.request)) == Set(requests.map(\.id)))
    }

    @Test("a message sent with a notification's id is not a notification")
    func notForgeable() throws {
        let port = try PortReceiveRight()
        try port.makeSendRight().send(id: PortNotification.noSendersMessageID, bytes: [UInt8](repeating: 0, count: 24),
                                      timeout: .poll)
        let message = try port.receive(timeout: .poll)
        #expect(!message.isNotification)
        #expect(PortNotification(message) == nil)
    }

    @Test("a port may be told about itself: the request holds no right to it")
    func selfNotification() throws {
        let port = try PortReceiveRight()
        let right = port.makeSendRight()
        let request = try port.requestNoSendersNotification(to: right, makeSendCount: 1)
        #expect(port.sendRightCount == 1)
        _ = consume right
        let notice = try port.receive(timeout: .poll)
        #expect(PortNotification(notice)?.request == request.id)
    }

    @Test("a notify port of another process or a dead one is refused")
    func badNotifyPort() throws {
        let port = try PortReceiveRight()
        let gone = try PortReceiveRight()
        let goneRight = gone.makeSendRight()
        gone.destroy()
        #expect(throws: PortError.invalidDestination) { _ = try port.requestNoSendersNotification(to: goneRight) }
        #expect(throws: PortError.invalidDestination) {
            _ = try port.makeSendRight().requestDeadNameNotification(to: goneRight)
        }
    }

    @Test("racing the last release against the request: exactly one notice per request, every time")
    func raceReleaseAndRequest() throws {
        let inbox = try PortReceiveRight(queueLimit: 1)
        for round in 0..<500 {
            let port = try PortReceiveRight()
            let rights = Locked<[PortSendRight]>((0..<4).map { _ in port.makeSendRight() })
            let start = Latch()
            let droppers = (0..<2).map { _ in
                TestThread {
                    start.wait()
                    for _ in 0..<2 { _ = rights.withLock { $0.popLast() } }
                }
            }
            start.signal()
            let request = try port.requestNoSendersNotification(to: inbox.makeSendRight())
            droppers.forEach { $0.join() }
            let got = notices(on: inbox)
            #expect(got.map(\.request) == [request.id], "round \(round)")
            if got.count != 1 { break }
        }
    }

    @Test("racing destroy against dead-name requests and cancels: each request is delivered or cancelled, never both")
    func raceDestroyAndCancel() throws {
        let inbox = try PortReceiveRight(queueLimit: 1)
        for round in 0..<300 {
            var port: PortReceiveRight? = try PortReceiveRight()
            let right = port!.makeSendRight()
            let requests = try (0..<4).map { _ in try right.requestDeadNameNotification(to: inbox.makeSendRight()) }
            let cancelled = Locked<Set<UInt64>>([])
            let start = Latch()
            let canceller = TestThread {
                start.wait()
                for request in requests where request.cancel() { cancelled.withLock { _ = $0.insert(request.id.rawValue) } }
            }
            start.signal()
            port = nil
            canceller.join()
            let delivered = Set(notices(on: inbox).map(\.request.rawValue))
            #expect(delivered.isDisjoint(with: cancelled.current), "round \(round)")
            #expect(delivered.union(cancelled.current) == Set(requests.map(\.id.rawValue)), "round \(round)")
        }
    }
}

/// The run-loop convenience: one notice, one callback on the loop's thread, none after cancel.
@Suite("Run loop notification watches")
struct RunLoopNotificationWatchTests {
    @Test("a no-senders watch calls back once on its loop's thread")
    func noSendersWatch() throws {
        let port = try PortReceiveRight()
        let fired = Locked<[String]>([])
        let (worker, go) = gatedLoopThread(running: .seconds(20))
        let right = port.makeSendRight()
        let name = port.name
        let loop = worker.loop
        let watch = try RunLoopNotificationWatch(noSendersOf: port, on: worker.loop) { notice in
            fired.withLock { $0.append("\(notice.port == name) \(PortRunLoop.current === loop)") }
            loop.stop()
        }
        #expect(watch.isPending)
        go.signal()
        _ = consume right
        _ = worker.join()
        #expect(fired.current == ["true true"])
        #expect(!watch.isPending && !watch.cancel())
    }

    @Test("a cancelled watch never calls back, even with its notice already queued")
    func cancelledWatch() throws {
        let port = try PortReceiveRight()
        let calls = Locked(0)
        let (worker, go) = gatedLoopThread(running: .milliseconds(100))
        let watch = try RunLoopNotificationWatch(deadNameOf: port.makeSendRight(), on: worker.loop) { _ in
            calls.withLock { $0 += 1 }
        }
        port.destroy() // the notice is queued on the watch's port; its loop is not running yet
        #expect(watch.cancel())
        go.signal()
        #expect(worker.join() != [.handledSource])
        #expect(calls.current == 0)
    }

    @Test("a dead-name watch on a destroyed port calls back on the loop")
    func deadNameWatch() throws {
        let port = try PortReceiveRight()
        let calls = Locked<[PortNotification]>([])
        let (worker, go) = gatedLoopThread(running: .seconds(20))
        let loop = worker.loop
        let watch = try RunLoopNotificationWatch(deadNameOf: port.makeSendRight(), on: loop) { notice in
            calls.withLock { $0.append(notice) }
            loop.stop()
        }
        let name = port.name
        go.signal()
        port.destroy()
        _ = worker.join()
        #expect(calls.current.map(\.port) == [name])
        _ = watch
    }
}
