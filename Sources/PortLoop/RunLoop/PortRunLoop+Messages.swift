import CPortLoop

// Handling what woke the loop: Source1 messages, readable descriptors, the main queue.
//
// Every message the loop takes from a port is handled exactly once: performed by its source, or put back at the
// head of its port (`pl_port_requeue`) when its source can no longer take it here — the source left the mode or
// was invalidated after the message was taken, or the run was stopped while a batch was still in hand. Put back,
// the message waits for whoever receives on that port next (the source in another mode, a later run), in its
// order. Only the destruction of the port itself destroys messages, as in Mach.

extension PortRunLoop {
    /// What to do with a message that arrived on a port of the mode.
    private enum Disposition {
        /// Perform this source with it. Not retained: the caller's lookup holds it while the message is handled.
        case perform(Unmanaged<RunLoopPortSource>)
        /// Put it back in this source's port: the source left the mode, or the run is stopping.
        case putBack(RunLoopPortSource)
        /// The wake-up port's message: consumed, nothing else to do.
        case wakeUp
        /// A port no source of the mode ever held: cannot happen; logged and dropped.
        case unknown
    }

    /// The source a message's port had when last looked up under the lock, and the mode's
    /// `sourcesGeneration` then: while the generation stands, the next message from that port needs no lookup.
    struct SourceLookup {
        var arrival: PortName
        var generation: UInt64
        var source: RunLoopPortSource
        /// `source`, for a caller that holds the lookup while it uses the source.
        var unmanagedSource: Unmanaged<RunLoopPortSource> { Unmanaged.passUnretained(source) }
    }

    /// Performs the Source1 of the first message and, when batching, of up to `messageBatch - 1` more
    /// already queued. Returns whether any source was performed.
    ///
    /// The others come in batches from one port at a time (`pl_port_set_receive_batch_taking`: one lock round
    /// for many messages), into a batch this call owns while its callouts run: a callout that runs a nested loop
    /// must not overwrite the payloads still to be handled, so a nested call finds the loop's batch lent and makes
    /// its own. Small payloads are copied into the batch's buffer; larger ones, in memory of their own, are taken
    /// over, each freed once its message is dealt with. What a batch cannot take (a descriptor) comes through a
    /// single receive.
    ///
    /// When a message has to be put back, so is the rest of its batch (the same port's next messages, last
    /// first so that they keep their order), and the pass ends its batching there.
    func handleMessages(_ state: LoopMode, first: pl_received_t, batch: Bool) -> Bool {
        var handled: Bool
        // The mode's last lookup, carried from pass to pass: moved out and back, not copied (a nested run in the
        // mode finds none and leaves its own, which this one's replaces).
        var lookup: SourceLookup?
        swap(&lookup, &state.lastLookup)
        defer { swap(&lookup, &state.lastLookup) }
        switch handleReceived(state, first, following: false, lookup: &lookup) {
        case let .done(performed): handled = performed
        case .putBack: return false
        }
        guard batch else { return handled }
        let nested = messageBatchLent
        if !nested && batchStorage == nil { batchStorage = MessageBatch() }
        let messages = nested ? MessageBatch() : batchStorage!
        messageBatchLent = true
        defer { if nested { messages.deallocate() } else { messageBatchLent = false } }
        var remaining = Self.messageBatch - 1
        var header = pl_received_t()
        while remaining > 0 {
            var count: UInt32 = 0
            let status = pl_port_set_receive_batch_taking(state.portSet.set, messages.headers.baseAddress,
                                                          messages.taken.baseAddress,
                                                          UInt32(min(remaining, messages.headers.count)),
                                                          messages.payloads.baseAddress, messages.payloads.count,
                                                          &count)
            if count == 0 {
                // Nothing queued (timed out): the pass is done. Something the batch does not take: one receive. What
                // only a look at the descriptors would find, the next sleep finds at once: a system call here would
                // be spent for nothing on every wake-up with one message.
                guard status == PL_OK,
                      receive(on: state, header: &header, timeout: 0, queuedOnly: true) == PL_OK else { break }
                switch handleReceived(state, header, following: true, lookup: &lookup) {
                case let .done(performed): handled = performed || handled
                case .putBack: return handled
                }
                remaining -= 1
                continue
            }
            for index in 0..<Int(count) {
                switch handle(state, messages.headers[index], payload: messages.payload(at: index),
                              following: true, lookup: &lookup) {
                case let .done(performed):
                    handled = performed || handled
                    messages.release(at: index)
                case let .putBack(source):
                    // The batch's later messages came from the same port, after this one: they go back first.
                    for later in (index..<Int(count)).reversed() {
                        putBack(messages.headers[later], payload: messages.payload(at: later), to: source)
                        messages.release(at: later)
                    }
                    return handled
                }
            }
            remaining -= Int(count)
        }
        return handled
    }

    /// What became of one received message.
    private enum Outcome {
        /// Dealt with; whether a source was performed.
        case done(Bool)
        /// Not taken by this run: the caller puts it back in this source's port (and takes no more).
        case putBack(RunLoopPortSource)
    }

    /// Handles the message or descriptor that ``receive(on:header:timeout:queuedOnly:)`` took last, its payload in
    /// the receive buffer or taken over: performs it, or puts it back in its port. Then frees a taken payload.
    private func handleReceived(_ state: LoopMode, _ header: pl_received_t, following: Bool,
                                lookup: inout SourceLookup?) -> Outcome {
        let outcome = handle(state, header, payload: receivedPayload, following: following, lookup: &lookup)
        if case let .putBack(source) = outcome { putBack(header, payload: receivedPayload, to: source) }
        releaseTakenPayload()
        return outcome
    }

    /// Handles one received message or readable descriptor, unless the message must go back to its port.
    /// `following`: the message was taken after the first of the pass, so a stop requested meanwhile puts it
    /// back (a CF pass takes one message). `lookup` carries the last source lookup from message to message.
    private func handle(_ state: LoopMode, _ header: pl_received_t, payload: UnsafeRawPointer?,
                        following: Bool, lookup: inout SourceLookup?) -> Outcome {
        guard header.kind == PL_RECEIVED_MESSAGE else {
            guard header.kind == PL_RECEIVED_FD else { return .done(false) }
            if header.fd == mainQueueHandle && state.holdsMainQueue {
                return .done(serviceMainQueue(fileDescriptor: header.fd))
            }
            return .done(performDescriptorSource(state, fileDescriptor: header.fd))
        }
        let source: Unmanaged<RunLoopPortSource>
        switch disposition(of: header, in: state, following: following, lookup: &lookup) {
        case .wakeUp:
            return .done(false) // `doBlocks` clears `wakeUpQueued`
        case .unknown:
            if let reply = header.reply {
                // A request's send-once reply right ends here: its requester is told.
                if header.flags & PL_RECEIVED_REPLY_ONCE != 0 { pl_port_release_send_once(reply) } else { pl_port_release_send(reply) }
            }
            pl_attachments_free(header.attachments)
            return .done(false)
        case let .putBack(departed):
            return .putBack(departed)
        case let .perform(found):
            source = found
        }
        let size = Int(header.size)
        var message = ReceivedMessage.adopting(header, payload: payloadBytes(payload, count: size))
        let replyPort = message.replyPort // for the answer, which is sent after the message is gone
        // Not retained for the call: `lookup` holds the source, and so does the mode (`sources1`) or, once the source
        // has left it, the run (`departedSources1`).
        let reply = source._withUnsafeGuaranteedRef {
            __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE1_PERFORM_FUNCTION__($0, message)
        }
        // Kept for the next message's payload, if it came from there (`payloadBytes`).
        if Self.reusesBytes(forPayloadOf: size) { swap(&message.payload, &spareBytes) }
        _ = consume message
        if let reply, let replyPort {
            // Never block the loop on a requester that does not read its replies.
            do throws(PortError) {
                try replyPort.send(id: reply.id, bytes: reply.bytes, timeout: .poll)
            } catch {
                logError("reply to \(replyPort.name) dropped: \(error)")
            }
        }
        return .done(true)
    }

    /// Whether a payload of `size` bytes goes through ``spareBytes``: an empty one takes no array, and one over
    /// ``spareBytesLimit`` gets an array of its own; either leaves the one kept alone.
    private static func reusesBytes(forPayloadOf size: Int) -> Bool { size > 0 && size <= spareBytesLimit }

    /// The handler's payload array, in the array a previous message's handler let go of when it can be (see
    /// ``spareBytes``), made otherwise.
    private func payloadBytes(_ payload: UnsafeRawPointer?, count: Int) -> [UInt8] {
        guard count > 0 else { return [] }
        let source = UnsafeRawBufferPointer(start: payload, count: count)
        guard Self.reusesBytes(forPayloadOf: count) else { return Array(source) }
        var bytes: [UInt8] = []
        swap(&bytes, &spareBytes)
        if bytes.count == count {
            // Copied over in place; if the last handler kept its array after all, the write makes a copy first, of
            // exactly its size.
            bytes.withUnsafeMutableBytes { $0.copyMemory(from: source) }
        } else if bytes.capacity >= count && bytes.capacity <= count + count / 4 + 32 {
            // A kept array is copied here at its old room: at most a quarter more than the payload, and 32 bytes.
            bytes.removeAll(keepingCapacity: true)
            bytes.append(contentsOf: source)
        } else {
            bytes = Array(source)
        }
        return bytes
    }

    /// Decides a message's fate in one lock hold, or in none when `lookup` still stands for its port and no
    /// stop is pending.
    private func disposition(of header: pl_received_t, in state: LoopMode, following: Bool,
                             lookup: inout SourceLookup?) -> Disposition {
        let arrival = PortName(rawValue: header.arrival_name)
        if arrival == wakeUpPortName { return .wakeUp }
        // Read field by field: a copy of the lookup would retain and release its source.
        if lookup?.arrival == arrival, lookup?.generation == state.sourcesGeneration.load(ordering: .acquiring),
           !(following && stopPending.load(ordering: .acquiring)), let known = lookup?.unmanagedSource {
            // The source is still the port's in this mode. Its validity needs no look either: a source
            // invalidated on this thread (by a handler) has left the mode already, which changed the generation,
            // and one invalidated on another thread may as well have been a moment later.
            return .perform(known)
        }
        let (present, departed, stopping, generation) = lock.withLock {
            let present = state.sources1[arrival]
            return (present, present == nil ? state.departedSources1[arrival] : nil, stopRequested,
                    state.sourcesGeneration.load(ordering: .relaxed))
        }
        if let source = present {
            lookup = SourceLookup(arrival: arrival, generation: generation, source: source)
            // Invalidated but not yet out of the mode: its remover is about to take it out.
            guard source.isValid && !(following && stopping) else { return .putBack(source) }
            return .perform(Unmanaged.passUnretained(source))
        }
        // A source leaves the mode's set and `sources1` in one hold of the loop's lock, and a run in the mode
        // keeps it in `departedSources1` until every message it may have taken has been dealt with.
        if let departed { return .putBack(departed) }
        assertionFailure("a message arrived on \(arrival), which no source of mode \(state.name) held")
        logError("message \(header.id) on \(arrival) dropped: no source of mode \(state.name) held that port")
        return .unknown
    }

    /// Puts a taken message back at the head of its source's port. If the port was destroyed meanwhile, the
    /// message goes the way of the port's other queued messages: its reply right is released.
    private func putBack(_ header: pl_received_t, payload: UnsafeRawPointer?, to source: RunLoopPortSource) {
        var header = header
        let status = pl_port_requeue(source.port.port, &header, payload)
        if status != PL_OK {
            if let reply = header.reply {
                // A request's send-once reply right ends here: its requester is told.
                if header.flags & PL_RECEIVED_REPLY_ONCE != 0 { pl_port_release_send_once(reply) } else { pl_port_release_send(reply) }
            }
            pl_attachments_free(header.attachments)
        }
    }

    /// Calls the handler of the mode's source for a readable descriptor; false if no valid source watches it
    /// any more (it left the mode between the receive and now).
    private func performDescriptorSource(_ state: LoopMode, fileDescriptor: Int32) -> Bool {
        guard let source = lock.withLock({ state.descriptorSources[fileDescriptor] }), source.isValid else {
            return false
        }
        __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE1_PERFORM_FUNCTION__(source)
        return true
    }
}
