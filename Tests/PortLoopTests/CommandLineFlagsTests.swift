import PortLoopToolSupport
import Testing

/// The command-line walk of portloop-demo and portloop-echod.
@Suite("Command-line flags")
struct CommandLineFlagsTests {
    @Test("--flag value and --flag=value give the same value; other arguments pass through whole")
    func values() throws {
        var flags = CommandLineFlags(["--workers", "4", "--interval=0.5", "-h", "--name=a=b", "--empty=", "plain"])
        var seen: [String] = []
        while flags.next() {
            switch flags.flag {
            case "--workers", "--interval", "--name", "--empty": seen.append("\(flags.flag):\(try flags.value())")
            default:
                try flags.expectNoValue()
                seen.append(flags.argument)
            }
        }
        #expect(seen == ["--workers:4", "--interval:0.5", "-h", "--name:a=b", "--empty:", "plain"])
    }

    @Test("a flag without its value, or with one it does not take, is a typed problem")
    func problems() {
        var missing = CommandLineFlags(["--workers"])
        let movedToWorkers = missing.next()
        #expect(movedToWorkers)
        #expect(throws: CommandLineFlags.Problem.missingValue(flag: "--workers")) { try missing.value() }
        var unexpected = CommandLineFlags(["--quiet=yes"])
        let movedToQuiet = unexpected.next()
        #expect(movedToQuiet)
        #expect(unexpected.flag == "--quiet" && unexpected.argument == "--quiet=yes")
        #expect(throws: CommandLineFlags.Problem.unexpectedValue(flag: "--quiet")) { try unexpected.expectNoValue() }
        #expect(CommandLineFlags.Problem.missingValue(flag: "--workers").description == "--workers needs a value")
        let movedPastTheEnd = unexpected.next()
        #expect(!movedPastTheEnd)
    }
}
