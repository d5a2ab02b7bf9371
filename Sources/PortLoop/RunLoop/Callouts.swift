// Every call from the loop into user code goes through one of these never-inlined functions, named as CF
// names its own, so that a backtrace shows what the loop was doing.

@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_AN_OBSERVER_CALLBACK_FUNCTION__(
    _ observer: RunLoopObserver, _ activity: PortRunLoop.Activity) {
    observer.handler(observer, activity)
}

@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_A_TIMER_CALLBACK_FUNCTION__(_ timer: RunLoopTimer) {
    timer.handler(timer)
}

@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE0_PERFORM_FUNCTION__(_ source: RunLoopSource) {
    source.perform()
}

/// The message is lent, so that the call neither copies it nor retains its references; the loop takes its payload
/// array back afterwards (`spareBytes`).
@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE1_PERFORM_FUNCTION__(
    _ source: RunLoopPortSource, _ message: borrowing ReceivedMessage) -> PortReply? {
    source.handler(message)
}

/// A descriptor source is a version-1 source too (CF performs a `CFFileDescriptor`'s source through the same
/// Source1 callout), so a backtrace names it the same way.
@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE1_PERFORM_FUNCTION__(_ source: RunLoopDescriptorSource) {
    source.handler(source)
}

@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_A_BLOCK__(_ block: @Sendable () -> Void) {
    block()
}

@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE0_SCHEDULE_FUNCTION__(
    _ callback: @Sendable (PortRunLoop, PortRunLoop.Mode) -> Void, _ loop: PortRunLoop, _ mode: PortRunLoop.Mode) {
    callback(loop, mode)
}

@inline(never)
func __PORTLOOP_IS_CALLING_OUT_TO_A_SOURCE0_CANCEL_FUNCTION__(
    _ callback: @Sendable (PortRunLoop, PortRunLoop.Mode) -> Void, _ loop: PortRunLoop, _ mode: PortRunLoop.Mode) {
    callback(loop, mode)
}
