import CPortLoop

// The main-queue dispatch port (CF's `_dispatch_get_main_queue_port_4CF` handling): when the main
// thread runs the main loop in a common mode, libdispatch's main-queue eventfd sits in the mode's port set,
// and the loop drains the main queue when it is readable, at most every other pass. Then
// `DispatchQueue.main.async {}` and `@MainActor` work in a program whose main thread runs the main loop.
// All of this state is touched only by the main thread.

@inline(never)
func __PORTLOOP_IS_SERVICING_THE_MAIN_DISPATCH_QUEUE__() {
    pl_main_queue_drain()
}

extension PortRunLoop {
    /// Whether a run of `mode` that is starting now services the main queue: the main loop, on the main
    /// thread, in a common mode, and not from inside a main-queue callout.
    func servicesMainQueue(_ mode: Mode) -> Bool {
        isMainLoop && isCurrent && !servicingMainQueue && lock.withLock { commonModes.contains(mode) }
    }

    /// Puts libdispatch's eventfd in the mode's port set, or takes it out; returns the previous state.
    @discardableResult
    func setMainQueueMember(_ state: LoopMode, _ member: Bool) -> Bool {
        let previous = state.holdsMainQueue
        guard member != previous else { return previous }
        if mainQueueHandle < 0 { mainQueueHandle = pl_main_queue_handle() }
        do throws(PortError) {
            if member {
                try state.portSet.insert(fileDescriptor: mainQueueHandle)
            } else {
                try state.portSet.remove(fileDescriptor: mainQueueHandle)
            }
            state.holdsMainQueue = member
        } catch {
            logError("main queue handle \(mainQueueHandle) could not join the port set: \(error)")
        }
        return previous
    }

    /// Handles the eventfd reported readable: reads it, then drains the main queue, unless it was drained
    /// in the previous pass (CF serves it at most every other pass, so other sources are not starved).
    /// Returns whether the queue was serviced.
    func serviceMainQueue(fileDescriptor: Int32) -> Bool {
        guard fileDescriptor == mainQueueHandle, !mainQueueSkipThisPass else { return false }
        _ = pl_main_queue_consume(fileDescriptor)
        servicingMainQueue = true
        __PORTLOOP_IS_SERVICING_THE_MAIN_DISPATCH_QUEUE__()
        servicingMainQueue = false
        mainQueueServicedLastPass = true
        return true
    }
}
