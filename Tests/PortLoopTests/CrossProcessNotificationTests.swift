import Foundation
import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Notifications about ports of other processes, and about our ports' rights held by other processes: no-senders
/// when a client lets its right go or is killed, dead-name when a service's port is destroyed or its process is
/// killed — each once, within milliseconds, in the process that asked.
@Suite("Across processes: notifications", .serialized)
struct CrossProcessNotificationTests {
    /// Serves the `hold`/`lend` child's opening request and returns the right it sends next.
    private func acceptLoan(on port: borrowing PortReceiveRight) throws -> PortSendRight? {
        let request = try port.receive(timeout: .seconds(10))
        try request.replyPort?.send(id: 102, timeout: .poll)
        let lent = try port.receive(timeout: .seconds(10))
        guard case let .sendRight(right)? = lent.attachments.first else { return nil }
        return right
    }

    @Test("a client killed with SIGKILL: the service's no-senders notice comes at once")
    func noSendersOnClientDeath() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("watched", queueLimit: 8)
        let inbox = try PortReceiveRight()
        let request = try port.requestNoSendersNotification(to: inbox.makeSendRight(),
                                                            makeSendCount: port.makeSendCount + 1)
        let holder = try Peer(["hold", space.path, "watched"])
        _ = try acceptLoan(on: port)
        #expect(holder.ready())
        #expect(throws: PortError.timedOut) { try inbox.receive(timeout: .after(.milliseconds(100))) }
        let killedAt = nowNanoseconds()
        holder.kill()
        let notice = try inbox.receive(timeout: .seconds(10))
        let took = Double(nowNanoseconds() - killedAt) / 1e6
        #expect(took < 2_000, "the notice took \(took) ms")
        guard case let .noSenders(name, count, id)? = PortNotification(notice) else {
            Issue.record("not a no-senders notice: \(notice)")
            return
        }
        #expect(name == port.name && id == request.id && count == port.makeSendCount)
        #expect(port.sendRightCount == 0)
    }

    @Test("a live client that lets its last right go: the service is told without waiting for its death")
    func noSendersOnRelease() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("released", queueLimit: 8)
        let inbox = try PortReceiveRight()
        let request = try port.requestNoSendersNotification(to: inbox.makeSendRight(),
                                                            makeSendCount: port.makeSendCount + 1)
        let client = try Peer(["drop", space.path, "released"])
        let ask = try port.receive(timeout: .seconds(10))
        try ask.replyPort?.send(id: 101, timeout: .poll)
        #expect(client.line(startingWith: "dropped") != nil)
        let notice = try inbox.receive(timeout: .seconds(10))
        #expect(PortNotification(notice)?.request == request.id)
        #expect(client.process.isRunning, "the client lives: its release, not its death, told us")
        client.kill()
    }

    @Test("a service killed with SIGKILL: a dead-name watch calls back on its loop at once")
    func deadNameOnServiceDeath() throws {
        let space = TemporaryNamespace()
        let service = try Peer(["serve", space.path, "doomed"])
        #expect(service.ready())
        let right = try space.namespace.lookUp("doomed")
        let told = Locked<[PortNotification]>([])
        let (worker, go) = gatedLoopThread(running: .seconds(20))
        let loop = worker.loop
        let watch = try RunLoopNotificationWatch(deadNameOf: right, on: loop) { notice in
            told.withLock { $0.append(notice) }
            loop.stop()
        }
        go.signal()
        let killedAt = nowNanoseconds()
        service.kill()
        #expect(worker.join() == [.stopped])
        let took = Double(nowNanoseconds() - killedAt) / 1e6
        #expect(took < 2_000, "the notice took \(took) ms")
        #expect(told.current.map(\.port) == [right.name])
        #expect(right.isDeadName && !watch.isPending)
    }

    @Test("a port destroyed by a process that lives on: holders of its rights are told it is a dead name")
    func deadNameOnRemoteDestroy() throws {
        let space = TemporaryNamespace()
        let port = try space.namespace.checkIn("borrower", queueLimit: 8)
        let lender = try Peer(["lend", space.path, "borrower"])
        guard let theirs = try acceptLoan(on: port) else {
            Issue.record("no right lent")
            return
        }
        #expect(lender.ready())
        let inbox = try PortReceiveRight()
        let request = try theirs.requestDeadNameNotification(to: inbox.makeSendRight())
        #expect(throws: PortError.timedOut) { try inbox.receive(timeout: .after(.milliseconds(100))) }
        lender.tell("destroy")
        let notice = try inbox.receive(timeout: .seconds(10))
        #expect(PortNotification(notice) == .deadName(port: theirs.name, request: request.id))
        #expect(lender.line(startingWith: "destroyed") != nil && lender.process.isRunning)
        #expect(theirs.isDeadName)
        lender.kill()
    }

    @Test("a successor takes the name over: a client told of the dead name looks it up again and loses nothing")
    func successorTakesOver() throws {
        let space = TemporaryNamespace()
        let old = try Peer(["serve", space.path, "handoff"])
        #expect(old.ready())
        let first = try space.namespace.lookUp("handoff")
        let inbox = try PortReceiveRight()
        let watch = try first.requestDeadNameNotification(to: inbox.makeSendRight())
        let pid = getpid()
        for seq in 0..<50 { try first.send(id: 8, bytes: Array("\(pid) 0 \(seq)".utf8), timeout: .seconds(10)) }
        let oldReport = try first.request(id: 9, bytes: [], timeout: .seconds(10))
        #expect(String(decoding: oldReport.payload, as: UTF8.self).hasPrefix("received 50 "))
        _ = try first.request(id: 10, bytes: [], timeout: .seconds(10)) // the old service stops and exits
        let notice = try inbox.receive(timeout: .seconds(10))
        #expect(PortNotification(notice) == .deadName(port: first.name, request: watch.id))
        #expect(throws: PortError.invalidDestination) { try first.send(id: 8, bytes: [], timeout: .poll) }
        #expect(old.finish() == 0)

        let successor = try Peer(["serve", space.path, "handoff"])
        #expect(successor.ready())
        let second = try space.namespace.lookUp("handoff")
        for seq in 0..<50 { try second.send(id: 8, bytes: Array("\(pid) 1 \(seq)".utf8), timeout: .seconds(10)) }
        let newReport = try second.request(id: 9, bytes: [], timeout: .seconds(10))
        #expect(String(decoding: newReport.payload, as: UTF8.self).hasPrefix("received 50 "))
        successor.kill()
    }

    @Test("racing a service's death against dead-name requests: one notice per request, never lost or doubled")
    func raceDeathAndRequest() throws {
        let space = TemporaryNamespace()
        let inbox = try PortReceiveRight(queueLimit: 1)
        for round in 0..<15 {
            let service = try Peer(["serve", space.path, "racer\(round)"])
            #expect(service.ready())
            let right = try space.namespace.lookUp("racer\(round)")
            let requests = Locked<[PortNotificationRequest]>([])
            let asker = TestThread {
                for _ in 0..<20 {
                    if let request = try? right.requestDeadNameNotification(to: inbox.makeSendRight()) {
                        requests.withLock { $0.append(request) }
                    }
                }
            }
            service.kill()
            asker.join()
            #expect(eventually { inbox.messageCount == requests.current.count })
            var seen: [PortNotificationRequest.ID] = []
            while let message = try? inbox.receive(timeout: .poll) {
                if let notice = PortNotification(message) { seen.append(notice.request) }
            }
            #expect(seen.sorted { $0.rawValue < $1.rawValue } == requests.current.map(\.id), "round \(round)")
        }
    }
}
