import ArgumentParser
import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// `portloop watch`: a service's message rate, one line per interval.
struct WatchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Show the messages per second a service receives, one line per interval.",
        discussion: """
            Asks the service for its status every interval (its transport answers, the application takes no \
            part) and prints the messages its port received since the last line, per second, with its queue \
            depth. Runs until Ctrl-C (exit code 0), -c lines, or the service goes away: then a last line on \
            standard error and exit code 74. A service that does not answer within --timeout ends it with 75.
            """
    )

    @OptionGroup var options: NamespaceOptions

    @Argument(help: "The service's name.")
    var name: String

    @Option(help: ArgumentHelp("Seconds between lines.", valueName: "seconds"))
    var interval: Seconds = Seconds(1)

    @Option(name: .customShort("c"), help: ArgumentHelp("Stop after this many lines (default: until Ctrl-C).", valueName: "count"))
    var count: Int?

    @Option(help: ArgumentHelp("Seconds to wait for each answer (and for the look-up).", valueName: "seconds"))
    var timeout: Seconds = Seconds(2)

    func validate() throws {
        try validateServiceName(name)
        guard interval.value >= 0.01 else { throw ValidationError("--interval must be at least 0.01") }
        guard timeout.value > 0 else { throw ValidationError("--timeout must be more than 0") }
        if let count, count < 1 { throw ValidationError("-c must be at least 1") }
    }

    func run() throws {
        let namespace = try options.resolved()
        Interruption.catchInterrupt()
        failing { () throws(CommandFailure) in
            let right: PortSendRight
            var last: ServiceStatus
            do throws(PortError) {
                right = try namespace.lookUp(name, timeout: timeout.timeout)
                last = try right.serviceStatus(timeout: timeout.timeout)
            } catch .invalidArgument {
                throw CommandFailure(message: "\(name) answers no status query: its release predates them",
                                     code: CommandFailure.otherFailure)
            } catch {
                throw CommandFailure(error, service: name, doing: "looking up")
            }
            printLine("watching \(name) (pid \(last.processID)) every \(interval.value) s")
            var lastTime = ContinuousClock.now
            var lines = 0
            while count.map({ lines < $0 }) ?? true {
                if Interruption.sleep(interval.duration) { return }
                let now: ServiceStatus
                do throws(PortError) { now = try right.serviceStatus(timeout: timeout.timeout) } catch {
                    throw CommandFailure(error, service: name, doing: "watching")
                }
                let time = ContinuousClock.now
                let seconds = Double((time - lastTime).components.attoseconds) / 1e18 + Double((time - lastTime).components.seconds)
                let rate = Double(now.messagesReceived &- last.messagesReceived) / max(seconds, 1e-9)
                printLine("\(clockTime())  \(String(Int(rate.rounded()))) msg/s  queue \(now.queueDepth)/\(now.queueLimit)"
                          + "  received \(now.messagesReceived)")
                last = now
                lastTime = time
                lines += 1
            }
        }
    }
}

/// The wall-clock time of day, HH:MM:SS, for the lines of `watch`.
func clockTime() -> String {
    var now = time(nil)
    var parts = tm()
    localtime_r(&now, &parts)
    func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
    return "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
}
