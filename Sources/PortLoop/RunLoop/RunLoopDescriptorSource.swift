/// A run loop source over a file descriptor (`CFFileDescriptor` with its `CFFileDescriptorCreateRunLoopSource`):
/// the descriptor sits in the port set of each mode the source is in, so its becoming readable wakes the loop
/// by itself, and the loop calls the handler on its own thread, as it performs a Source1.
///
/// Use it for descriptors that other code makes readable: a `signalfd`, a socket, a pipe, an eventfd owned by
/// another library. The loop does not read the descriptor; the handler must, until it would block.
/// Readiness is level-triggered: a handler that leaves data unread is called again at once, in the same pass
/// (CF's `CFFileDescriptor` instead turns its callback off after each call until it is re-enabled; a level
/// trigger needs no re-enabling and cannot lose a wake-up, at the price of that rule).
///
/// The source neither owns nor closes the descriptor. Close it only after the source has left its loop
/// (``invalidate()`` or removal from every mode): once that returns, the loop's port sets no longer watch it.
/// Do that on the loop's own thread, or after the loop has stopped, if the handler might still be about to
/// run: a handler that runs after its descriptor was closed reads a closed (or reused) number.
///
/// ```swift
/// var fds: [Int32] = [0, 0]
/// pipe(&fds)
/// let source = RunLoopDescriptorSource(fileDescriptor: fds[0]) { source in
///     var byte: UInt8 = 0
///     _ = read(source.fileDescriptor, &byte, 1)   // consume it, or the handler is called again
///     print("readable")
/// }
/// try PortRunLoop.current.add(source, mode: .default)
/// ```
public final class RunLoopDescriptorSource: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// The watched descriptor (`CFFileDescriptorGetNativeDescriptor`).
    public let fileDescriptor: Int32
    /// Performance order (`CFRunLoopSourceGetOrder`); ready descriptors and ports are otherwise served as the
    /// port set reports them.
    public let order: Int
    let handler: @Sendable (RunLoopDescriptorSource) -> Void
    let attachment = ItemAttachment.make()

    /// Creates a source for a descriptor (`CFFileDescriptorCreate` with read callbacks enabled, then
    /// `CFFileDescriptorCreateRunLoopSource`). A descriptor that cannot be watched (closed, or a regular file,
    /// which epoll refuses) is reported when the source is added: ``RunLoopError/portLayer(_:)`` with
    /// ``PortError/invalidArgument(argument:reason:)``.
    /// - Parameters:
    ///   - fileDescriptor: an open descriptor that epoll can watch; not owned by the source.
    ///   - order: performance order.
    ///   - handler: called on the loop's thread each pass in which the descriptor is readable.
    public init(fileDescriptor: Int32, order: Int = 0,
                handler: @escaping @Sendable (RunLoopDescriptorSource) -> Void) {
        self.fileDescriptor = fileDescriptor
        self.order = order
        self.handler = handler
    }

    /// Removes the source from every mode of its loop and makes it unusable (`CFFileDescriptorInvalidate`).
    /// Once this returns the loop's port sets no longer watch the descriptor; the descriptor stays open.
    public func invalidate() {
        attachment.invalidate()?.removeEverywhere(self)
    }

    /// Whether the source has not been invalidated (`CFFileDescriptorIsValid`).
    public var isValid: Bool { attachment.isValid }

    public static func == (lhs: RunLoopDescriptorSource, rhs: RunLoopDescriptorSource) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String {
        "RunLoopDescriptorSource(fd \(fileDescriptor), order: \(order), valid: \(isValid))"
    }
}
