import CPortLoop

extension PortSendRight {
    /// Sends a request and waits for its reply: one `mach_msg` with `MACH_SEND_MSG | MACH_RCV_MSG` and a reply
    /// port, as a MIG client stub does. The receiver answers on the message's ``ReceivedMessage/replyPort``; a
    /// ``RunLoopPortSource`` does that with the ``PortReply`` its handler returns.
    ///
    /// Each request gets a fresh reply port, destroyed when the call returns. That is why a reply that arrives
    /// after the request timed out can never be taken for the answer to a later request: it is addressed to a
    /// port that no longer exists, so the late replier's send fails with ``PortError/invalidDestination``
    /// (a ``RunLoopPortSource``'s loop logs it and drops it). MIG does the same: on a receive timeout it
    /// destroys the thread's reply port and makes a new one (`mig_dealloc_reply_port`). The alternative,
    /// one long-lived reply port with a sequence number in each request, needs every replier to echo the
    /// number and the requester to skip stale replies, and a stale reply could still fill the reply queue;
    /// a port here costs one allocation and no descriptor, so the fresh port is both simpler and safe by
    /// construction.
    ///
    /// The reply port takes a reply of any size up to ``PortReceiveRight/maxMessageSizeLimit``, so that a reply
    /// larger than `maxReplySize` reaches it and fails this call at once with the size it has, where the
    /// replier's send would otherwise fail and leave this call waiting out its timeout. (Mach's
    /// `MACH_RCV_LARGE`: the receiver learns the size; the message is destroyed with the reply port.)
    ///
    /// - Parameters:
    ///   - id: the request's id (`msgh_id`).
    ///   - bytes: the request's payload.
    ///   - timeout: how long the whole exchange may take: waiting for room to send, then for the reply.
    ///   - maxReplySize: the largest reply payload accepted.
    /// - Returns: the reply; its ``ReceivedMessage/arrivalPort`` is the request's reply port.
    /// - Throws: ``PortError/timedOut`` (no room, or no reply in time), ``PortError/invalidDestination``
    ///   (the destination is destroyed, before or while waiting: its process died, say),
    ///   ``PortError/noReply`` (the replier released the reply right without answering: as soon as it did),
    ///   ``PortError/tooLarge(size:limit:)`` (the request is larger than the
    ///   destination takes, or the reply larger than `maxReplySize`: then with the reply's size, as soon as it
    ///   arrives), ``PortError/calledOnLoopThread`` (called on the thread whose run loop serves the destination
    ///   with a ``RunLoopPortSource``: the reply could only come after this call returned; nothing is sent),
    ///   ``PortError/invalidArgument(argument:reason:)`` (bad timeout or size).
    public func request(id: Int32 = 0, bytes: [UInt8] = [], timeout: PortTimeout = .forever,
                        maxReplySize: Int = PortReceiveRight.defaultMaxMessageSize) throws(PortError) -> ReceivedMessage {
        guard (1...PortReceiveRight.maxMessageSizeLimit).contains(maxReplySize) else {
            throw .invalidArgument(argument: "maxReplySize",
                                   reason: "\(maxReplySize) is outside 1…\(PortReceiveRight.maxMessageSizeLimit)")
        }
        let total = try timeout.nanoseconds()
        try checkNotSendOnce()
        if let loop = LoopRegistry.currentIfExists(), loop.servesPort(name) { throw .calledOnLoopThread }
        let deadline = total > 0 ? monotonicNanoseconds().addingClamped(total) : 0
        // One reply is expected: a queue of one holds it, and a second reply from a confused replier fails
        // at its end instead of waiting here.
        let replies = try PortReceiveRight(queueLimit: 1, maxMessageSize: PortReceiveRight.maxMessageSizeLimit)
        // When the replier lets go of the reply right without answering (or its process dies), the reply port
        // gets the send-once notice, or finds no right left: either ends the wait at once with noReply. The
        // message holds the only right, a send-once right.
        pl_port_set_no_senders_wakes(replies.port, 1)
        try sendRequest(id: id, bytes: bytes, replyPort: replies.port, timeout: total)

        let remaining: PortTimeout
        switch total {
        case 0: remaining = .poll
        case PL_TIMEOUT_FOREVER: remaining = .forever
        default: remaining = .after(.nanoseconds(max(0, deadline - monotonicNanoseconds())))
        }
        let reply: ReceivedMessage
        do {
            reply = try replies.receive(timeout: remaining, maxSize: maxReplySize)
        } catch .noReply where isDeadName {
            throw .invalidDestination // the destination died, taking the reply right with it
        }
        try Self.checkNotSendOnceNotice(reply, destinationDead: isDeadName)
        return reply
        // `replies` is destroyed here: a reply still on its way finds a dead name.
    }
}

extension PortSendRight {
    /// Sends a request and waits for its reply without blocking the calling task's thread: the `async` form of
    /// ``request(id:bytes:timeout:maxReplySize:)-64pzr`` (`mach_msg` with `MACH_SEND_MSG | MACH_RCV_MSG` and a
    /// reply port, as a MIG client stub does), safe from tasks of the cooperative pool. Same message, same
    /// fresh reply port, same errors, except that a call made from the thread of the run loop that serves the
    /// destination does not deadlock here (the task suspends and the loop goes on), so
    /// ``PortError/calledOnLoopThread`` is never thrown.
    ///
    /// While the destination's queue is full, the send is retried with a short back-off (1 ms, growing to
    /// 10 ms) until the timeout; the reply is awaited as a ``PortMessages`` consumer awaits, parked without a
    /// thread. Cancelling the calling task ends the call with ``PortError/timedOut`` and destroys the reply port,
    /// so a reply arriving later finds a dead name.
    public func request(id: Int32 = 0, bytes: [UInt8] = [], timeout: PortTimeout = .forever,
                        maxReplySize: Int = PortReceiveRight.defaultMaxMessageSize) async throws(PortError)
        -> ReceivedMessage {
        guard (1...PortReceiveRight.maxMessageSizeLimit).contains(maxReplySize) else {
            throw .invalidArgument(argument: "maxReplySize",
                                   reason: "\(maxReplySize) is outside 1…\(PortReceiveRight.maxMessageSizeLimit)")
        }
        let total = try timeout.nanoseconds()
        try checkNotSendOnce()
        let deadline = total > 0 ? monotonicNanoseconds().addingClamped(total) : (total == 0 ? 0 : .max)
        let replies = try PortReceiveRight(queueLimit: 1, maxMessageSize: PortReceiveRight.maxMessageSizeLimit)
        pl_port_set_no_senders_wakes(replies.port, 1) // as in the synchronous form

        // Send, waiting for room by polling: a blocking send would hold the pool's thread.
        var pause = Duration.milliseconds(1)
        while true {
            do throws(PortError) {
                try sendRequest(id: id, bytes: bytes, replyPort: replies.port, timeout: 0)
                break
            } catch .timedOut {
                let left = deadline.subtractingClamped(monotonicNanoseconds())
                guard left > 0, await RetryClock.shared.sleep(for: min(pause, .nanoseconds(left))) else {
                    throw .timedOut
                }
                pause = min(pause * 2, .milliseconds(10))
            }
        }

        let reply: ReceivedMessage?
        var noSenders = false
        if total == 0 {
            do throws(PortError) { reply = try replies.receive(timeout: .poll) } catch .timedOut { reply = nil } catch .noReply {
                reply = nil
                noSenders = true
            }
        } else {
            let messages = PortMessages(replies)
            defer { noSenders = messages.storage.endedWithoutSenders }
            reply = await withTaskGroup(of: ReceivedMessage?.self) { group in
                group.addTask {
                    var iterator = messages.makeAsyncIterator()
                    return await iterator.next()
                }
                if deadline != .max {
                    group.addTask {
                        _ = await RetryClock.shared.sleep(for: .nanoseconds(deadline.subtractingClamped(monotonicNanoseconds())))
                        return nil
                    }
                }
                let first = await group.next() ?? nil
                group.cancelAll() // the consumer, if it is still waiting, ends and destroys the reply port
                return first
            }
        }
        guard let reply else {
            // No sender left for the reply port: the replier let go of it, or its process died with it.
            if noSenders { throw isDeadName ? .invalidDestination : .noReply }
            throw .timedOut
        }
        try Self.checkNotSendOnceNotice(reply, destinationDead: isDeadName)
        guard reply.payload.count <= maxReplySize else {
            throw .tooLarge(size: reply.payload.count, limit: maxReplySize)
        }
        return reply
    }

    /// A request goes through a send right: a send-once right is good for one message that carries no right.
    private func checkNotSendOnce() throws(PortError) {
        if isSendOnce {
            throw .invalidArgument(argument: "self", reason: "a request cannot go through a send-once right")
        }
    }

    /// The reply right was a send-once right: the notice that it went unused (released, destroyed with the
    /// request, or with the replier's process; MIG's `MIG_SERVER_DIED`) ends the request at once.
    private static func checkNotSendOnceNotice(_ reply: ReceivedMessage, destinationDead: Bool) throws(PortError) {
        if reply.isNotification && reply.id == PortNotification.sendOnceMessageID {
            throw destinationDead ? .invalidDestination : .noReply
        }
    }

    /// Sends a request whose reply right is a send-once right made here for `replyPort`
    /// (`MACH_MSG_TYPE_MAKE_SEND_ONCE`), the only right to it: the reply port gets the reply through it, or its
    /// send-once notice.
    private func sendRequest(id: Int32, bytes: [UInt8], replyPort: OpaquePointer, timeout: Int64) throws(PortError) {
        let status = bytes.withUnsafeBytes { raw in
            pl_port_send_request(port, id, raw.baseAddress, raw.count, replyPort, timeout)
        }
        try PortError.check(status, operation: "request", size: bytes.count, limit: Int(pl_port_get_max_msg_size(port)))
    }
}
