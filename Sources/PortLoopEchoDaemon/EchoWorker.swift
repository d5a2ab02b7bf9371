import PortLoop
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One worker: a ``RunLoopThread`` whose loop holds a ``RunLoopPortSource`` on the worker's own request port.
///
/// The dispatcher forwards each request to that port with the client's reply port attached. The worker's loop
/// sleeps in a receive on its mode's port set (its wake-up port, the thread's keep-alive port, this request
/// port), wakes when a request arrives, drains up to a batch of them per pass, and for each one calls the
/// handler below; the loop itself sends the returned ``PortReply`` to the request's reply port. The worker
/// never touches a socket, a lock or a queue of its own: the port is the queue.
final class EchoWorker: Sendable {
    /// 1-based, as printed (`w1`, `w2`, …) and as put in replies.
    let number: Int
    let thread: RunLoopThread
    let source: RunLoopPortSource
    /// Where the dispatcher sends this worker's requests.
    let requests: PortSendRight
    /// Requests answered so far (fences not included).
    let served: Counter

    /// A worker's request port holds this many messages; when it is full the dispatcher tries the next worker
    /// (see ``Dispatcher``), so the limit is also what makes the dispatch load-aware.
    static let queueLimit = 128

    /// `delay`: seconds to spend on each request before answering it (simulated work; 0 for none).
    init(number: Int, delay: Double = 0) throws(DaemonError) {
        self.number = number
        let served = Counter()
        self.served = served
        let pause = UInt32((delay * 1e6).rounded())
        do throws(PortError) {
            source = try RunLoopPortSource(queueLimit: Self.queueLimit) { message in
                if message.id == EchoProtocol.fenceID {
                    // Everything forwarded before the fence has been answered: the port is FIFO and the
                    // dispatcher is its only sender. Say so on the fence's reply port.
                    return PortReply(id: EchoProtocol.fenceID, bytes: [UInt8(truncatingIfNeeded: number)])
                }
                if pause > 0 { usleep(pause) } // blocks this worker's loop, as real work would
                served.increment()
                return PortReply(id: message.id, bytes: EchoProtocol.echo(message.payload, worker: number))
            }
            thread = try RunLoopThread(name: "echod-worker-\(number)")
        } catch {
            throw .port(error)
        }
        requests = source.makeSendRight()
        do throws(RunLoopError) { try thread.loop.add(source, mode: .default) } catch { throw .runLoop(error) }
    }

    /// Ends the worker's loop and joins its thread. Call it once the worker's fence has been answered, so
    /// that nothing it was given is left unanswered.
    func stop() {
        thread.stop()
    }
}
