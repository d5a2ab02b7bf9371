import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Ctrl-C for the commands that run until it (ping, watch): SIGINT sets a flag that their loops look at between
/// requests, so that they print their summary and exit 0 rather than die mid-line.
enum Interruption {
    private static let flag = Atomic<Bool>(false)

    /// Installs the handler, and unblocks SIGINT: a parent may have started this process with it blocked.
    static func catchInterrupt() {
        signal(SIGINT) { _ in Interruption.flag.store(true, ordering: .relaxed) }
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    static var happened: Bool { flag.load(ordering: .relaxed) }

    /// Sleeps for `duration`, waking early on Ctrl-C; true when interrupted.
    static func sleep(_ duration: Duration) -> Bool {
        let end = ContinuousClock.now + duration
        while !happened {
            let left = end - ContinuousClock.now
            if left <= .zero { return false }
            let step = min(left, .milliseconds(20))
            let (seconds, attoseconds) = step.components
            var pause = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
            nanosleep(&pause, nil)
        }
        return true
    }
}
