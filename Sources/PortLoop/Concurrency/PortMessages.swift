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
/// Iterate from one task at a time: two concurrent `next()` calls stop the program, as `AsyncStream` does.
public struct PortMessages: AsyncSequence, Sendable {
    public typealias Element = ReceivedMessage
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

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(storage: storage) }

    /// Iterates a ``PortMessages``.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let storage: Storage

        /// The next message, waiting for one if the port is empty; nil once the consuming task is cancelled
        /// (the port is then destroyed).
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
            let port: OpaquePointer
            switch poll() {
            case let .message(message): return message
            case .finished: return nil
            case let .empty(pointer): port = pointer
            }
            // A checked continuation, not an unsafe one: parking is the slow path (the port was empty), where
            // misuse detection costs nothing that matters. It also keeps ThreadSanitizer quiet about a known
            // false positive (swiftlang/swift#57803): when the waiting thread resumes the continuation before
            // this task reaches its await, the runtime synchronises through an atomic TSan cannot see, and
            // UnsafeContinuation.resume, inlined here, would be reported racing with the resumed task.
            let message = await withTaskCancellationHandler(operation: {
                await withCheckedContinuation(isolation: actor) { continuation in
                    park(port, continuation)
                }
            }, onCancel: {
                cancel()
            }, isolation: actor)
            // Nil means cancelled, or the wait could not be set up; either way the iteration is over.
            if message == nil { finish() }
            return message
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
            } catch {
                // Only the port's destruction could fail a poll, and only this object destroys it.
                PortRunLoop.logError("PortMessages: receive on \(name) failed: \(error)")
                port = nil
                return .finished
            }
        }

        /// Parks the consumer in the reactor, unless cancellation came first.
        private func park(_ pointer: OpaquePointer, _ continuation: MessageContinuation) {
            lock.lock()
            guard port != nil else {
                lock.unlock()
                continuation.resume(returning: nil)
                return
            }
            // With the lock held, so that a concurrent cancel() finds the waiter registered and takes it out.
            PortMessageReactor.shared.wait(for: pointer, name: name, continuation: continuation)
            lock.unlock()
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
            parked?.resume(returning: nil)
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
