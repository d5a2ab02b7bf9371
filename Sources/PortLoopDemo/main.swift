// portloop-demo: port-driven wake-ups of a PortLoop run loop, made visible in a terminal.
//
//   portloop-demo [--duration <seconds>] [--producers <count>] [--burst <count>] [--quiet] [--help]
//
// Options.swift holds the command line, Demo.swift runs the loop thread and the producers (Producers.swift),
// Trace.swift records and prints what the loop does, Summary.swift closes with the numbers.

DemoCommand.main()
