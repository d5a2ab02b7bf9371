extension RunLoopStallMonitor {
    /// One stall: a pass of the loop that ran longer than the monitor's threshold.
    ///
    /// The watchdog reports a stall when the threshold is crossed, while the pass is still running, so that a
    /// loop that never comes back (a deadlock, an endless callout) is reported too. ``duration`` is therefore
    /// how long the pass had run when the watchdog noticed: at least the threshold, a little more by the
    /// watchdog's wake-up latency; the pass itself may go on longer.
    public struct Report: Sendable, Hashable, CustomStringConvertible {
        /// The mode of the run the stalled pass belongs to (the innermost run, for nested runs).
        public let mode: PortRunLoop.Mode
        /// How long the pass had run when it was reported; at least ``threshold``.
        public let duration: Duration
        /// The monitor's threshold.
        public let threshold: Duration
        /// The last stage the loop announced before the stall, which says what it was busy with:
        /// - ``PortRunLoop/Activity/entry``: entry observers;
        /// - ``PortRunLoop/Activity/beforeTimers``: beforeTimers observers;
        /// - ``PortRunLoop/Activity/beforeSources``: beforeSources observers, blocks, version-0 sources, and —
        ///   in a pass that handled a source and so did not sleep — the timers and port sources after them;
        /// - ``PortRunLoop/Activity/beforeWaiting``: beforeWaiting observers (idle work, say);
        /// - ``PortRunLoop/Activity/afterWaiting``: afterWaiting observers, then timers, port sources, the main
        ///   queue and the blocks after them;
        /// - ``PortRunLoop/Activity/exit``: exit observers.
        public let stage: PortRunLoop.Activity

        /// Creates a report; the watchdog makes these, tests and custom sinks may too.
        public init(mode: PortRunLoop.Mode, duration: Duration, threshold: Duration, stage: PortRunLoop.Activity) {
            self.mode = mode
            self.duration = duration
            self.threshold = threshold
            self.stage = stage
        }

        /// ``duration`` in milliseconds, for logs and metrics.
        public var milliseconds: Double {
            let (seconds, attoseconds) = duration.components
            return Double(seconds) * 1e3 + Double(attoseconds) / 1e15
        }

        /// One line for logs: mode, duration in milliseconds, threshold and stage.
        public var description: String {
            let ms = (milliseconds * 10).rounded() / 10
            return "pass in mode \(mode.rawValue) running for \(ms) ms (threshold \(threshold)), last stage \(stage)"
        }
    }
}
