// portloop-echod — an echo daemon on PortLoop's run loops and Mach-style ports, and a load generator for it.
//
// The design, and why it is this one
// ----------------------------------
//
//   clients: other processes   main thread: dispatcher loop               worker loop threads (RunLoopThread × N)
//   (lookUp), or this one's    PortRunLoop.main, default mode
//   threads (--clients)
//                              ┌ the mode's port set ────────────────┐
//   request(id:bytes:) ──────▶ │ service port → RunLoopPortSource    │ ─ .poll send to the ──▶ w1 port → RunLoopPortSource
//   (fresh reply port each)    │ control port → RunLoopPortSource    │   next worker with room   w2 port → RunLoopPortSource
//                              │ signalfd → RunLoopSignalSource      │ ◀─ fence replies ──────── …
//                              │ wake-up port                        │
//                              └ RunLoopTimer: throughput line ──────┘
//          ◀──────────── reply: each worker's loop sends its PortReply straight to the client's reply port
//
// The service port is checked in under a name (--name, in --namespace or PortNamespace.standard), as launchd's
// bootstrap_check_in gives a daemon its port; under systemd socket activation the check-in adopts the socket
// systemd passes (Examples/systemd). Everything that wakes the dispatcher — a request from another process or
// from a thread here, a fence reply, a signal, the throughput timer, a block performed on it — arrives through
// one receive on its mode's port set, exactly as a CFRunLoop sleeps in mach_msg() on a port set: a remote
// request wakes the same version-1 source as a local one. Each worker likewise sleeps on its own loop's port set.
//
// Why a dispatcher in front of per-worker ports, rather than workers receiving on one shared port set: the
// workers are run loops (they could serve timers, other sources, perform requests and an executor too), and a
// run loop owns its port sets; what a loop shows off is sources, modes and wake-ups, which the dispatcher and
// the workers both use. The dispatcher also makes the ports' own features do the work that a hand-written
// server would need code for:
//   - load balancing and back-pressure come from queue limits: a forward is a send with a `.poll` timeout,
//     and a full worker (its 128-message queue at the limit) makes the send fail at once, so the next worker
//     is tried; when all are full the dispatcher waits, the service port queues, and then clients wait;
//   - the reply needs no routing: the request's reply right travels with the forwarded message, and the
//     worker's loop sends the handler's PortReply straight back to the client (a MIG server's reply);
//   - the graceful stop needs no counters of work in flight: FIFO ports give ordering guarantees. At the
//     signal the dispatcher counts what waits in the service port (those requests are still served; later
//     ones get a refusal reply), then sends each worker a fence behind its last request; a worker answers
//     the fence only after everything before it, so when every fence is answered every accepted request
//     has been answered. Then the service port is destroyed, which withdraws the name and makes every
//     client's right a dead name; the workers are stopped and joined, the summary printed, and the exit is 0.
// Signals are blocked in every thread and reported by a RunLoopSignalSource (a signalfd in the dispatcher's
// port set): a signal wakes the loop like a message and the stop runs as ordinary loop work between two
// requests, not inside a signal handler.
//
// Clients: `portloop-echod load` starts client processes (this executable again, in the hidden load-client
// role), each with threads that look the name up and run an EchoClient; the parent adds up their one-line
// reports. In-process clients remain for a self-contained check: `--self-test N` checks N replies and exits;
// `--clients K` alone gives open-ended load until a signal or `--duration`.
//
// Files: Options (the root command, serve, the shared --name/--namespace), EchoProtocol (message ids and
// payloads), EchoWorker, Dispatcher, ShutdownSignals, ThroughputReporter, EchoDaemon (wiring and summary),
// EchoClient (one client thread's loop and its tally), LoadGenerator (in-process clients), LoadCommand and
// ClientProcess (the load's parent), LoadClient (a client process and its report line), LatencyHistogram, and
// small helpers (Counter, Guarded, PosixThread, Console, DaemonError).

EchoCommand.main()
