extension PortRunLoop {
    /// A run loop mode's name (`CFRunLoopMode`). Modes are created on demand the first time a name is used.
    public struct Mode: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
        /// The mode's name, as CF's mode strings are names.
        public let rawValue: String
        /// A mode named `rawValue`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// A mode named `rawValue`.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        /// A mode from a string literal: `loop.run(mode: "tracking")`.
        public init(stringLiteral value: String) { self.rawValue = value }

        /// The usual mode (`kCFRunLoopDefaultMode`).
        public static let `default` = Mode("kCFRunLoopDefaultMode")
        /// Not a mode but a marker for the set of common modes (`kCFRunLoopCommonModes`): an item added to
        /// it lands in every common mode, now and later. Running in it returns ``RunResult/finished``.
        public static let common = Mode("kCFRunLoopCommonModes")

        public var description: String { rawValue }
    }

    /// The stages of a run that observers can watch (`CFRunLoopActivity`, with CF's bit values).
    public struct Activity: OptionSet, Hashable, Sendable, CustomStringConvertible {
        /// The bits, with `CFRunLoopActivity`'s values.
        public let rawValue: UInt
        /// Activities from their bits.
        public init(rawValue: UInt) { self.rawValue = rawValue }

        /// A run is about to start (`kCFRunLoopEntry`).
        public static let entry = Activity(rawValue: 1 << 0)
        /// A pass is about to fire timers (`kCFRunLoopBeforeTimers`).
        public static let beforeTimers = Activity(rawValue: 1 << 1)
        /// A pass is about to perform sources (`kCFRunLoopBeforeSources`).
        public static let beforeSources = Activity(rawValue: 1 << 2)
        /// The loop is about to sleep (`kCFRunLoopBeforeWaiting`).
        public static let beforeWaiting = Activity(rawValue: 1 << 5)
        /// The loop has just woken (`kCFRunLoopAfterWaiting`).
        public static let afterWaiting = Activity(rawValue: 1 << 6)
        /// A run is about to return (`kCFRunLoopExit`).
        public static let exit = Activity(rawValue: 1 << 7)
        /// Every activity (`kCFRunLoopAllActivities`).
        public static let allActivities = Activity(rawValue: 0x0FFF_FFFF)

        public var description: String {
            let names: [(Activity, String)] = [(.entry, "entry"), (.beforeTimers, "beforeTimers"),
                                               (.beforeSources, "beforeSources"), (.beforeWaiting, "beforeWaiting"),
                                               (.afterWaiting, "afterWaiting"), (.exit, "exit")]
            if self == .allActivities { return "all" }
            return names.filter { contains($0.0) }.map(\.1).joined(separator: "|")
        }
    }

    /// Why a run returned (`CFRunLoopRunResult`, with CF's raw values).
    public enum RunResult: Int, Sendable, CustomStringConvertible {
        /// The mode has no sources or timers, or does not exist, or is `.common` (`kCFRunLoopRunFinished`).
        case finished = 1
        /// ``PortRunLoop/stop()`` ended the run (`kCFRunLoopRunStopped`).
        case stopped = 2
        /// The run's timeout passed (`kCFRunLoopRunTimedOut`).
        case timedOut = 3
        /// A source was handled and the run was asked to return then (`kCFRunLoopRunHandledSource`).
        case handledSource = 4

        public var description: String {
            switch self {
            case .finished: "finished"
            case .stopped: "stopped"
            case .timedOut: "timedOut"
            case .handledSource: "handledSource"
            }
        }
    }
}

extension PortRunLoop.Mode {
    /// Refuses an empty list of modes: work scheduled in no mode could never run.
    static func validate(_ modes: [PortRunLoop.Mode]) throws(RunLoopError) {
        guard !modes.isEmpty else {
            throw .invalidArgument(argument: "modes", reason: "empty: work in no mode never runs")
        }
    }
}

/// What went wrong adding an item to a run loop.
public enum RunLoopError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The loop's thread has exited; its loop accepts nothing more.
    case threadExited
    /// The timer, observer or source is already scheduled on another loop; an item belongs to one loop.
    case attachedToAnotherLoop
    /// The item was invalidated and can no longer be scheduled.
    case invalidated
    /// The port layer refused to create a mode's port set (descriptors or memory exhausted).
    case portLayer(PortError)
    /// An argument is out of range (a negative delay): which one, and why.
    case invalidArgument(argument: String, reason: String)

    public var description: String {
        switch self {
        case .threadExited: "the run loop's thread has exited"
        case .attachedToAnotherLoop: "the item is scheduled on another run loop"
        case .invalidated: "the item was invalidated"
        case let .portLayer(error): "the port layer failed: \(error)"
        case let .invalidArgument(argument, reason): "invalid argument: \(argument): \(reason)"
        }
    }
}
