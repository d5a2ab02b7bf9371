import Synchronization

/// A port's messages as an `AsyncSequence`: the `async` counterpart of receiving in a loop with
/// `mach_msg(MACH_RCV_MSG)`, as a Mach receive source (`DISPATCH_SOURCE_TYPE_MACH_RECV`) provides on Darwin.
///
/// The sequence owns the port's receive right. Messages are yielded in the order the port queued them.
/// Cancelling the consuming task ends the iteration (`next()` returns nil) and destroys the port: its queued
/// messages are destroyed, and senders get ``PortError/invalidDestination`` from then on. The port is also
/// destroyed when the sequence and its iterators are released.
///
/// Waiting never holds a thread of the cooperative pool: a consumer takes queued messages directly, and
/// with an empty port it is parked until a message arrives (see `PortMessageReactor`). Messages stay in the
/// port's bounded queue until asked for, so a slow consumer holds its senders back by the queue limit
/// instead of buffering without bound.
///
/// ```swift
/// let (messages, sender) = try PortMessages.makeStream() // or port.messages() with a receive right
/// let consumer = Task {
///     for await message in messages { print(message.id) }
/// }
/// try sender.send(id: 1)
/// consumer.cancel() // ends the loop and destroys the port
/// ```
///
/// The iteration ends only when the consuming task is cancelled or the sequence is released; never while
/// the port lives. If the consumer cannot be parked because descriptors or threads have run out (the
/// waiting thread's port set or the thread itself cannot be made), it logs that once (which call failed,
/// and why), then polls its port with a backoff (1 ms, doubling to 100 ms; a cancellable sleep on a thread
/// of its own, as `Task.sleep` itself needs descriptors for its timers)
/// and tries to park again each time; messages that arrive meanwhile are taken, in order, by those polls.
/// The next successful park ends the episode, and a later failure is logged again.
///
/// Iterate from one task at a time: two concurrent `next()` calls stop the program, as `AsyncStream` does.
public struct PortMessages: AsyncSequence, Sendable {
    /// Each element is one message, with its reply right.
    public typealias Element = ReceivedMessage
    /// The iteration never fails: it ends (``AsyncIterator/next()`` returns nil) when its task is cancelled.
    public typealias Failure = Never

    let storage: Storage

    /// Makes the sequence of a port's messages; it owns the port from now on.
    public init(_ port: consuming PortReceiveRight) {
        storage = Storage(port: port)
    }

    /// Creates a port and returns its messages with a send right to it, as `AsyncStream.makeStream` returns
    /// a stream and its continuation (`mach_port_allocate`, then `MACH_MSG_TYPE_MAKE_SEND`).
    /// - Throws: ``PortError/invalidArgument(argument:reason:)`` for a limit out of range.
    public static func makeStream(queueLimit: Int = PortReceiveRight.defaultQueueLimit,
                                  maxMessageSize: Int = PortReceiveRight.defaultMaxMessageSize)
        throws(PortError) -> (messages: PortMessages, sender: PortSendRight) {
        let port = try PortReceiveRight(queueLimit: queueLimit, maxMessageSize: maxMessageSize)
        let sender = port.makeSendRight()
        return (PortMessages(port), sender)
    }

    /// The name of the port.
    public var portName: PortName { storage.name }

    /// Whether the iteration has ended and the port is destroyed.
    public var isFinished: Bool { storage.isFinished }

    /// An iterator over the port's messages; iterate from one task at a time.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(storage: storage) }

    /// Iterates a ``PortMessages``.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let storage: Storage

        /// The next message, waiting for one if the port is empty; nil once the consuming task is cancelled
        /// (the port is then destroyed). Never nil otherwise: see "ends only" in ``PortMessages``.
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> ReceivedMessage? {
            await storage.next(isolation: actor)
        }

        /// The next message; see ``next(isolation:)``.
        public mutating func next() async -> ReceivedMessage? {
            await storage.next(isolation: nil)
        }
    }

    /// The receive right and the iteration's state, shared by the sequence and its iterators.
    final class Storage: @unchecked Sendable {
        let name: PortName
        private let lock = PThreadLock()
        /// The port, until the iteration ends; guarded by `lock`.
        private var port: PortReceiveRight?
        /// While parking fails: the sleep before the next attempt. nil while parking works. Guarded by `lock`.
        private var retryDelay: Duration?
        /// The iteration ended because no sender could reach the port any more (only a port that asked to be
        /// told: a request's reply port). Guarded by `lock`.
        private var noSendersLeft = false
        var endedWithoutSenders: Bool { lock.withLock { noSendersLeft } }
        /// Park failure episodes logged, for tests: one per run of failures.
        let failureEpisodes = Atomic<Int>(0)

        /// The first pause after a failed park, and the longest, between which the pause doubles.
        static let firstRetryDelay = Duration.milliseconds(1)
        static let maxRetryDelay = Duration.milliseconds(100)

        init(port: consuming PortReceiveRight) {
            name = port.name
            self.port = consume port
        }

        var isFinished: Bool { lock.withLock { port == nil } }

        private enum Poll {
            case message(ReceivedMessage)
            case empty(OpaquePointer)
            case finished
        }

        func next(isolation actor: isolated (any Actor)?) async -> ReceivedMessage? {
            while true {
                let port: OpaquePointer
                switch poll() {
                case let .message(message): return message
                case .finished: return nil
                case let .empty(pointer): port = pointer
                }
                // A checked continuation, not an unsafe one: parking is the slow path (the port was empty),
                // where misuse detection costs nothing that matters. It also keeps ThreadSanitizer quiet about a
                // known false positive (swiftlang/swift#57803): when the waiting thread resumes the continuation
                // before this task reaches its await, the runtime synchronises through an atomic TSan cannot
                // see, and UnsafeContinuation.resume, inlined here, would be reported racing with the task.
                let outcome = await withTaskCancellationHandler(operation: {
                    await withCheckedContinuation(isolation: actor) { continuation in
                        park(port, continuation)
                    }
                }, onCancel: {
                    cancel()
                }, isolation: actor)
                switch outcome {
                case let .message(message):
                    return message
                case .ended:
                    finish()
                    return nil
                case .noSenders:
                    lock.withLock { noSendersLeft = true }
                    finish()
                    return nil
                case let .failed(failure):
                    // The port lives and keeps its messages: pause, then poll it and try to park again.
                    guard await RetryClock.shared.sleep(for: backOff(after: failure)) else {
                        cancel()
                        return nil
                    }
                }
            }
        }

        /// The pause before the next attempt after a failed park; logs the first failure of an episode.
        private func backOff(after failure: ParkFailure) -> Duration {
            let (delay, first) = lock.withLock { () -> (Duration, Bool) in
                guard let previous = retryDelay else {
                    retryDelay = Self.firstRetryDelay
                    return (Self.firstRetryDelay, true)
                }
                let next = Swift.min(previous * 2, Self.maxRetryDelay)
                retryDelay = next
                return (next, false)
            }
            if first {
                failureEpisodes.add(1, ordering: .relaxed)
                PortRunLoop.logError("""
                    PortMessages: cannot wait for messages on \(name): \(failure); polling the port with a backoff \
                    of up to \(Self.maxRetryDelay) until waiting works again
                    """)
            }
            return delay
        }

        /// Takes a queued message, if any. The lock keeps `cancel()` from destroying the port meanwhile.
        private func poll() -> Poll {
            lock.lock()
            defer { lock.unlock() }
            guard port != nil else { return .finished }
            if Task.isCancelled {
                port = nil // destroys it
                return .finished
            }
            do throws(PortError) {
                guard let message = try port?.receive(timeout: .poll) else { return .finished }
                return .message(message)
            } catch .timedOut {
                guard let pointer = port?.port else { return .finished }
                return .empty(pointer)
            } catch .noReply {
                noSendersLeft = true // a port that asked to be told: nothing can arrive
                port = nil
                return .finished
            } catch {
                // Only the port's destruction could fail a poll, and only this object destroys it.
                PortRunLoop.logError("PortMessages: receive on \(name) failed: \(error)")
                port = nil
                return .finished
            }
        }

        /// Parks the consumer in the reactor, unless cancellation came first; resumes it with the failure if
        /// it cannot be parked.
        private func park(_ pointer: OpaquePointer, _ continuation: MessageContinuation) {
            lock.lock()
            guard port != nil else {
                lock.unlock()
                continuation.resume(returning: .ended)
                return
            }
            // With the lock held, so that a concurrent cancel() finds the waiter registered and takes it out.
            do throws(ParkFailure) {
                try PortMessageReactor.shared.wait(for: pointer, name: name, continuation: continuation)
                retryDelay = nil // parked: a failure episode, if any, is over
                lock.unlock()
            } catch {
                lock.unlock()
                continuation.resume(returning: .failed(error))
            }
        }

        /// The task was cancelled: end the iteration now, destroying the port, and resume a parked consumer.
        private func cancel() {
            let parked = lock.withLock { () -> MessageContinuation? in
                guard port != nil else { return nil }
                // Out of the reactor's set before the port goes, so the reactor never sees a freed port.
                let parked = PortMessageReactor.shared.cancelWait(for: name)
                port = nil
                return parked
            }
            parked?.resume(returning: .ended)
        }

        private func finish() {
            lock.withLock { port = nil }
        }
    }
}

extension PortReceiveRight {
    /// The port's messages as an `AsyncSequence` (see ``PortMessages``); the sequence owns the port.
    public consuming func messages() -> PortMessages { PortMessages(self) }
}
