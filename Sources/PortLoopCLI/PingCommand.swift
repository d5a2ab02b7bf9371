import ArgumentParser
import PortLoop

/// `portloop ping`: round trips to a service's transport, timed, as ping(8) times ICMP echoes.
struct PingCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ping",
        abstract: "Time round trips to a service, with a p50/p99/max summary.",
        discussion: """
            Each request is a status query carrying SIZE bytes, answered with as many by the service process's \
            transport, as the kernel answers ping(8): it measures the way between the processes (sockets, both \
            transports, scheduling), not the service's application code, which takes no part. The service need \
            not do anything to be pinged. To time the application as well, time a request it answers: \
            `portloop send NAME --id N --reply`.
            Runs until -c requests are done or Ctrl-C. Exit code 0 when every request was answered, 75 when \
            any timed out, 74 when the service went away, 69 / 77 when it cannot be looked up.
            """
    )

    @OptionGroup var options: NamespaceOptions

    @Argument(help: "The service's name.")
    var name: String

    @Option(name: .customShort("c"), help: ArgumentHelp("Stop after this many requests (default: until Ctrl-C).", valueName: "count"))
    var count: Int?

    @Option(name: .customShort("i"), help: ArgumentHelp("Seconds between requests.", valueName: "interval"))
    var interval: Seconds = Seconds(1)

    @Option(help: ArgumentHelp("Seconds to wait for each answer (and for the look-up).", valueName: "seconds"))
    var timeout: Seconds = Seconds(2)

    @Option(help: ArgumentHelp("Bytes each request and each answer carry.", valueName: "bytes"))
    var size: Int = 56

    func validate() throws {
        try validateServiceName(name)
        if let count, count < 1 { throw ValidationError("-c must be at least 1") }
        guard timeout.value > 0 else { throw ValidationError("--timeout must be more than 0") }
        guard (0...ServiceStatus.maxEcho).contains(size) else {
            throw ValidationError("--size must be in 0...\(ServiceStatus.maxEcho)")
        }
    }

    func run() throws {
        let namespace = try options.resolved()
        Interruption.catchInterrupt()
        failing { () throws(CommandFailure) in
            let right: PortSendRight
            do throws(PortError) { right = try namespace.lookUp(name, timeout: timeout.timeout) } catch {
                throw CommandFailure(error, service: name, doing: "looking up")
            }
            printLine("PING \(name) in \(namespace.path): \(size) bytes, answered by the service's transport")
            var times: [Duration] = []
            var sent = 0
            let started = ContinuousClock.now
            while count.map({ sent < $0 }) ?? true, !Interruption.happened {
                if sent > 0, Interruption.sleep(interval.duration) { break }
                sent += 1
                let before = ContinuousClock.now
                do throws(PortError) {
                    let status = try right.serviceStatus(echoing: size, timeout: timeout.timeout)
                    let time = ContinuousClock.now - before
                    times.append(time)
                    printLine("\(size) bytes from \(name) (pid \(status.processID)): seq=\(sent) time=\(milliseconds(time)) ms")
                } catch .timedOut {
                    printLine("no answer from \(name): seq=\(sent) timed out after \(timeout.value) s")
                } catch .invalidArgument {
                    throw CommandFailure(message: "\(name) answers no status query: its release predates them",
                                         code: CommandFailure.otherFailure)
                } catch {
                    printSummary(sent: sent, times: times, since: started)
                    throw CommandFailure(error, service: name, doing: "pinging")
                }
            }
            printSummary(sent: sent, times: times, since: started)
            if times.count < sent {
                throw CommandFailure(message: "\(sent - times.count) of \(sent) requests to \(name) timed out",
                                     code: CommandFailure.timedOut)
            }
        }
    }

    func printSummary(sent: Int, times: [Duration], since start: ContinuousClock.Instant) {
        let lost = sent == 0 ? 0 : (sent - times.count) * 100 / sent
        printLine("--- \(name) ping statistics ---")
        printLine("\(sent) requests, \(times.count) answered, \(lost)% unanswered, time \(milliseconds(ContinuousClock.now - start)) ms")
        guard !times.isEmpty else { return }
        let sorted = times.sorted()
        printLine("rtt min/p50/p99/max = \(milliseconds(sorted[0]))/\(milliseconds(percentile(sorted, 50)))/"
                  + "\(milliseconds(percentile(sorted, 99)))/\(milliseconds(sorted[sorted.count - 1])) ms")
    }
}

/// The nearest-rank percentile of sorted values.
func percentile(_ sorted: [Duration], _ p: Int) -> Duration {
    let rank = (p * sorted.count + 99) / 100 // ceil(p/100 * n)
    return sorted[max(0, min(sorted.count - 1, rank - 1))]
}

/// A duration in milliseconds with three decimals ("0.123").
func milliseconds(_ duration: Duration) -> String {
    let (seconds, attoseconds) = duration.components
    let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    let whole = microseconds / 1000, fraction = microseconds % 1000
    return "\(whole)." + String(repeating: "0", count: 3 - String(fraction).count) + "\(fraction)"
}
