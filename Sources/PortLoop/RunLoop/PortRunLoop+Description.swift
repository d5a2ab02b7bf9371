extension PortRunLoop: CustomStringConvertible {
    /// Lists, as CF's description does: the wake-up port, whether stopped, the current mode, the common
    /// modes and common mode items, and per mode its sources, observers and timers.
    public var description: String {
        lock.withLock {
            var lines = ["<PortRunLoop thread \(threadID)> {wakeup port = \(wakeUpPortName), stopped = \(stopRequested), "
                + "waiting = \(isWaiting), current mode = \(currentMode?.name.rawValue ?? "(none)"),"]
            lines.append("common modes = {\(commonModes.map(\.rawValue).sorted().joined(separator: ", "))},")
            lines.append("common mode items = {\(commonItems.map(\.summary).joined(separator: ", "))},")
            lines.append("modes = {")
            for (name, state) in modes.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                lines.append("  \(name.rawValue): {port set members = \(state.portSet.memberCount),")
                lines.append("    sources0 = [\(state.sources0.map(\.description).joined(separator: ", "))],")
                // CF lists a CFFileDescriptor's source among the version-1 sources too.
                let sources1 = state.sources1.values.map(\.description)
                    + state.descriptorSources.values.map(\.description)
                lines.append("    sources1 = [\(sources1.joined(separator: ", "))],")
                lines.append("    observers = [\(state.observers.map(\.description).joined(separator: ", "))],")
                let timers = state.timers.timers.map { timer in (timer.attachment.withLock { timer.fireDate }, timer) }
                    .sorted { $0.0 < $1.0 }.prefix(20)
                lines.append("    timers = [\(timers.map(\.1.description).joined(separator: ", "))"
                    + (state.timers.count > 20 ? ", … \(state.timers.count - 20) more" : "") + "]}")
            }
            lines.append("}}")
            return lines.joined(separator: "\n")
        }
    }
}

extension LoopItem {
    var summary: String {
        switch self {
        case let .source(item): item.description
        case let .portSource(item): item.description
        case let .descriptorSource(item): item.description
        case let .timer(item): item.description
        case let .observer(item): item.description
        }
    }
}
