import Synchronization

/// A notification handled on a run loop: the convenience over ``PortNotificationRequest`` for the common case
/// of one notice, one callback, on the loop that owns the state it concerns.
///
/// The watch makes its own notify port, serves it with a ``RunLoopPortSource`` in the given mode, asks for the
/// notification, and calls `handler` once on the loop's thread when it comes; then it ends. ``cancel()`` stops
/// it: called on the loop's thread, no callback happens after it returns; called elsewhere, no callback starts
/// after it returns. Dropping the watch cancels it too.
///
/// ```swift
/// // A server frees a client's state when the client's last right to its connection port goes.
/// let watch = try RunLoopNotificationWatch(noSendersOf: connectionPort, on: .current) { notice in
///     sessions.removeValue(forKey: notice.port)
/// }
/// ```
public final class RunLoopNotificationWatch: @unchecked Sendable {
    /// Cleared by cancel() and by the callback; the handler runs only if the callback clears it first.
    private final class Arming: Sendable {
        let armed = Atomic<Bool>(true)
        func disarm() -> Bool {
            armed.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged
        }
    }
    private let arming = Arming()
    private let source: RunLoopPortSource
    private let request: PortNotificationRequest

    /// Calls `handler` on `loop` when no send right to `port` is left
    /// (``PortReceiveRight/requestNoSendersNotification(to:makeSendCount:)``).
    /// - Throws: ``PortError`` from the request (``PortError/invalidName`` for a destroyed port), or
    ///   ``RunLoopError`` when the loop's thread has exited.
    public convenience init(noSendersOf port: borrowing PortReceiveRight, makeSendCount: UInt64 = 0,
                            on loop: PortRunLoop, mode: PortRunLoop.Mode = .default,
                            handler: @escaping @Sendable (PortNotification) -> Void) throws {
        try self.init(loop: loop, mode: mode, handler: handler) { notifyPort throws(PortError) in
            try port.requestNoSendersNotification(to: notifyPort, makeSendCount: makeSendCount)
        }
    }

    /// Calls `handler` on `loop` when `right` becomes a dead name
    /// (``PortSendRight/requestDeadNameNotification(to:)``).
    /// - Throws: ``PortError`` from the request, or ``RunLoopError`` when the loop's thread has exited.
    public convenience init(deadNameOf right: PortSendRight, on loop: PortRunLoop, mode: PortRunLoop.Mode = .default,
                            handler: @escaping @Sendable (PortNotification) -> Void) throws {
        try self.init(loop: loop, mode: mode, handler: handler) { notifyPort throws(PortError) in
            try right.requestDeadNameNotification(to: notifyPort)
        }
    }

    private init(loop: PortRunLoop, mode: PortRunLoop.Mode, handler: @escaping @Sendable (PortNotification) -> Void,
                 request makeRequest: (PortSendRight) throws(PortError) -> PortNotificationRequest) throws {
        let arming = self.arming
        // Notices pass a full queue, so one slot is enough; the port takes nothing but this watch's notice.
        source = try RunLoopPortSource(queueLimit: 1) { message in
            guard let notice = PortNotification(message), arming.disarm() else { return nil }
            handler(notice)
            return nil
        }
        try loop.add(source, mode: mode)
        do {
            request = try makeRequest(source.makeSendRight())
        } catch {
            source.invalidate()
            throw error
        }
    }

    deinit { cancel() }

    /// Whether the watch can still call its handler: neither fired nor cancelled.
    public var isPending: Bool { arming.armed.load(ordering: .acquiring) }

    /// Stops the watch. Returns `true` if the handler had not been called and now never will be.
    @discardableResult
    public func cancel() -> Bool {
        let stopped = arming.disarm()
        request.cancel()
        source.invalidate()
        return stopped
    }
}
