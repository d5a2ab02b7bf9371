import PortLoop

/// The front loop: receives requests on the service port and hands each to a worker, and runs the graceful
/// stop.
///
/// It lives on the main thread's run loop, whose default mode's port set holds the service port (a
/// ``RunLoopPortSource``), the control port on which workers answer drain fences (another one), the signalfd
/// of a ``RunLoopSignalSource`` and the loop's wake-up port; the throughput timer sets how long it may sleep.
///
/// Dispatch is round-robin, skipping full workers: a forward is a send with a `.poll` timeout, which fails at
/// once with ``PortError/timedOut`` when that worker's queue is at its limit, and the next worker is tried. Only
/// when every worker is full does the dispatcher wait, on the next one in turn; meanwhile requests wait in the
/// service port and, once that is full, clients wait in their sends. Back-pressure is the ports' queue limits
/// all the way down, with no counters of outstanding work to keep right.
///
/// The stop has three phases, all on the loop's thread:
/// 1. *draining*: the requests queued at the service port when the stop began (counted with
///    ``RunLoopPortSource/queuedMessageCount``; the port is a FIFO and this loop its only receiver, so they are
///    exactly the next ones the handler sees) are still forwarded; every later request is answered with a
///    refusal (``EchoProtocol/refusedID``), so no client waits for an answer that will not come.
/// 2. *fencing*: a fence message goes to each worker behind the last forwarded request, with the control port
///    as its reply port; a worker answers it only after everything before it in its FIFO.
/// 3. *finished*: when every fence is answered, every accepted request has been answered; the service port is
///    destroyed, which withdraws the name and turns every client's right into a dead name, and the loop stops.
///
/// All mutable state is touched only on the loop's thread (the main thread): the port sources' handlers, the
/// timers and the blocks performed on it run there. That is what the `@unchecked Sendable` rests on.
final class Dispatcher: @unchecked Sendable {
    enum Phase: Equatable {
        case serving
        /// Stopping; this many requests queued before the stop are still to be forwarded.
        case draining(queued: Int)
        /// Waiting for this many workers to answer their fence.
        case fencing(pending: Int)
        case finished
    }

    let loop: PortRunLoop
    let workers: [EchoWorker]
    private var service: RunLoopPortSource?
    private var control: RunLoopPortSource?

    private(set) var phase = Phase.serving
    private var nextWorker = 0
    /// Requests handed to a worker.
    private(set) var forwarded = 0
    /// Of those, how many were queued at the service port when the stop began.
    private(set) var drained = 0
    /// Requests refused because they arrived after the stop began.
    private(set) var refused = 0
    /// Requests that could not be handed to any worker (a worker's port gone: a bug, never expected).
    private(set) var lost = 0
    /// Why the daemon is stopping, once it is.
    private(set) var stopReason: String?
    /// The name checked in, until it is withdrawn.
    private(set) var serviceName: String?

    /// The service port's queue limit: the largest there is, so that in-process clients (at most 256, one
    /// request outstanding each) never wait to send; other processes' senders share it through credit.
    static let serviceQueueLimit = PortReceiveRight.maxQueueLimit

    init(loop: PortRunLoop, workers: [EchoWorker]) {
        self.loop = loop
        self.workers = workers
    }

    /// Checks `name` in at `namespace` (adopting systemd's socket for it when socket activation passed one),
    /// creates the control port, puts both sources in the loop's default mode, and returns a local send right to
    /// the service port for this process's own clients. The loop must be the caller's.
    func start(name: String, in namespace: PortNamespace) throws(DaemonError) -> PortSendRight {
        precondition(loop.isCurrent, "the dispatcher starts on its loop's thread")
        do throws(PortError) {
            // The same version-1 source as for a port of this process alone: a request from another process
            // wakes the loop exactly as one from a thread here does. `unowned`: the daemon keeps the dispatcher
            // until the process exits, and the sources live in its loop; a strong capture would be a cycle
            // through the loop for no benefit.
            let port = try namespace.checkIn(name, queueLimit: Self.serviceQueueLimit)
            service = RunLoopPortSource(port: port) { [unowned self] message in
                handleRequest(message)
            }
            // Each worker answers one fence, and the loop answers with a `.poll` send: room for all of them.
            control = try RunLoopPortSource(queueLimit: max(1, workers.count)) { [unowned self] message in
                handleFenceReply(message)
            }
        } catch {
            throw .checkIn(name: name, namespace: namespace.path, error)
        }
        serviceName = name
        do throws(RunLoopError) {
            try loop.add(service!, mode: .default)
            try loop.add(control!, mode: .default)
        } catch {
            throw .runLoop(error)
        }
        return service!.makeSendRight()
    }

    /// Requests answered by the workers so far.
    var served: Int { workers.reduce(0) { $0 + $1.served.current } }

    // MARK: - Requests

    private func handleRequest(_ message: ReceivedMessage) -> PortReply? {
        switch phase {
        case .serving:
            forward(message)
            return nil
        case let .draining(queued):
            forward(message)
            drained += 1
            if queued > 1 { phase = .draining(queued: queued - 1) } else { sendFences() }
            return nil
        case .fencing, .finished:
            refused += 1
            return PortReply(id: EchoProtocol.refusedID, bytes: EchoProtocol.refusedPayload)
        }
    }

    /// Hands a request to the next worker that has room, with the client's reply port attached, so the worker
    /// answers the client directly.
    private func forward(_ message: ReceivedMessage) {
        let count = workers.count
        for attempt in 0..<count {
            let index = (nextWorker + attempt) % count
            do throws(PortError) {
                try workers[index].requests.send(id: message.id, bytes: message.payload,
                                                 replyPort: message.replyPort, timeout: .poll)
                nextWorker = (index + 1) % count
                forwarded += 1
                return
            } catch .timedOut {
                continue // that worker's queue is full: try the next
            } catch {
                complain("portloop-echod: forwarding to w\(index + 1) failed: \(error)")
                lost += 1
                return
            }
        }
        // Every worker is full: wait for room at the next one in turn. The service port queues meanwhile.
        let index = nextWorker
        nextWorker = (index + 1) % count
        do throws(PortError) {
            try workers[index].requests.send(id: message.id, bytes: message.payload,
                                             replyPort: message.replyPort, timeout: .forever)
            forwarded += 1
        } catch {
            complain("portloop-echod: forwarding to w\(index + 1) failed: \(error)")
            lost += 1
        }
    }

    // MARK: - Stopping

    /// Begins the graceful stop (see the type's description); false if it had begun already.
    @discardableResult
    func beginStop(reason: String) -> Bool {
        precondition(loop.isCurrent, "the dispatcher stops on its loop's thread")
        guard phase == .serving, let service else { return false }
        stopReason = reason
        let queued = service.queuedMessageCount
        // Forwarded and not yet answered: in a worker's port, or in the batch its loop has taken from it.
        let atWorkers = forwarded - served
        say("stopping (\(reason)): finishing \(queued) request\(queued == 1 ? "" : "s") queued at the service port"
            + " and \(atWorkers) given to workers; refusing new ones")
        if queued > 0 { phase = .draining(queued: queued) } else { sendFences() }
        return true
    }

    /// Sends each worker its fence, behind everything forwarded to it.
    private func sendFences() {
        phase = .fencing(pending: workers.count)
        guard let control else { return }
        let answers = control.makeSendRight()
        for worker in workers {
            do throws(PortError) {
                // Blocking is fine: the worker drains its port without needing this loop.
                try worker.requests.send(id: EchoProtocol.fenceID, replyPort: answers, timeout: .forever)
            } catch {
                complain("portloop-echod: fence to w\(worker.number) failed: \(error)")
                fenceAnswered()
            }
        }
    }

    private func handleFenceReply(_ message: ReceivedMessage) -> PortReply? {
        if message.id == EchoProtocol.fenceID { fenceAnswered() }
        return nil
    }

    private func fenceAnswered() {
        guard case let .fencing(pending) = phase else { return }
        if pending > 1 {
            phase = .fencing(pending: pending - 1)
        } else {
            phase = .finished
            withdraw()
            loop.stop()
        }
    }

    /// Destroys the service port, which withdraws the name: every client's right becomes a dead name (a send
    /// fails with ``PortError/invalidDestination``) and a look-up finds nobody (``PortError/unknownService(_:)``,
    /// or under socket activation a wait for systemd to start the service again). Refusals have been answering
    /// since the fences went out; a request that reaches the port between the last one and this call is
    /// destroyed with it, and its client's `request` fails with ``PortError/noReply`` at once.
    private func withdraw() {
        guard let source = service else { return }
        source.invalidate() // out of the loop's mode
        service = nil       // the last reference: the source, its receive right and the name go now
        if let name = serviceName { say("withdrew \(name): clients' rights are dead names now") }
        serviceName = nil
    }
}
