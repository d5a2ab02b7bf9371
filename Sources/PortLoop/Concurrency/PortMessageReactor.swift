import CPortLoop
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a consumer that asked to be parked is resumed with.
enum ParkOutcome: Sendable {
    /// Its port's next message.
    case message(ReceivedMessage)
    /// Its iteration ended (the task was cancelled); the port is destroyed.
    case ended
    /// No sender can reach its port any more, and the port asked to be told (a request's reply port).
    case noSenders
    /// It could not be parked; it polls its port and tries again (see ``PortMessages``).
    case failed(ParkFailure)
}

/// How a parked consumer is resumed.
typealias MessageContinuation = CheckedContinuation<ParkOutcome, Never>

/// Why a consumer could not be parked: which call failed, and its error.
struct ParkFailure: Error, Sendable, CustomStringConvertible {
    let call: String
    let error: PortError
    var description: String { "\(call) failed: \(error)" }
}

/// The one thread that waits for messages on behalf of every ``PortMessages`` consumer with nothing to read:
/// PortLoop's counterpart of libdispatch's manager thread, which serves every Mach receive source on Darwin.
///
/// Why a shared waiting thread, and not the alternatives:
/// - A blocking receive inside `next()` would hold a thread of the cooperative pool (as many threads as
///   cores) for as long as the port is quiet; a few quiet ports would stall every task in the process.
/// - Receiving with short timeouts and checking for cancellation in between still holds pool threads, and
///   makes an idle consumer cost a wake-up per slice.
/// - A thread per sequence, or a run loop port source feeding an `AsyncStream`, works but costs a thread
///   per port, and a buffering stream takes messages out of the port, so that senders no longer feel the
///   queue limit.
///
/// Here a consumer takes queued messages directly, without any thread hop. Only when its port is empty does
/// it register here: its port joins this thread's port set and its continuation is parked. The first
/// message resumes it and takes the port out of the set again, so messages stay in the port's own bounded
/// queue until the consumer asks for them (senders are held back by the queue limit, as in Mach) and a
/// cancelled consumer can destroy its port at once. The thread and its port set exist only while someone
/// waits, plus a short linger so that a busy consumer does not start a thread per message.
///
/// Parking fails when the port set or the thread cannot be made (descriptors or threads exhausted); the
/// consumer is told at once, synchronously, and retries on its own (see ``PortMessages``). The thread is
/// started before any waiter joins its set, so a waiter that was parked always has a thread to resume it.
final class PortMessageReactor: @unchecked Sendable {
    /// The process's reactor.
    static let shared = PortMessageReactor()
    /// The waiting thread's name, as `/proc/self/task/*/comm` shows it.
    static let threadName = "portloop.ports"
    /// How long the thread stays after its last waiter has gone.
    static let idleLinger: Duration = .milliseconds(500)

    /// A parked consumer: its port (a member of the session's set meanwhile) and its continuation.
    struct Waiter {
        let port: OpaquePointer
        let continuation: MessageContinuation
    }

    /// What one waiting thread owns; released with the thread.
    final class Session: @unchecked Sendable {
        let set: PortSet
        let wakeUpPort: PortReceiveRight
        let wakeUpName: PortName
        let wakeUpSender: PortSendRight

        init() throws(ParkFailure) {
            do { set = try PortSet() } catch { throw ParkFailure(call: "PortSet()", error: error) }
            // Queue limit 1: wake-ups coalesce, as the run loop's do.
            let port: PortReceiveRight
            do { port = try PortReceiveRight(queueLimit: 1, maxMessageSize: 1) } catch {
                throw ParkFailure(call: "PortReceiveRight(queueLimit: 1, maxMessageSize: 1)", error: error)
            }
            do { try set.insert(port) } catch { throw ParkFailure(call: "PortSet.insert", error: error) }
            wakeUpName = port.name
            wakeUpSender = port.makeSendRight()
            wakeUpPort = port
        }

        func wakeUp() { try? wakeUpSender.send(timeout: .poll) }
    }

    private let lock = PThreadLock()
    /// Guarded by `lock`, as is `session`. Every waiter's port is a member of the session's set.
    private var waiters: [PortName: Waiter] = [:]
    private var session: Session?
    /// Waiting threads alive now, for tests of teardown.
    let runningThreads = Atomic<Int>(0)

    /// How many consumers are parked now.
    var waiterCount: Int { lock.withLock { waiters.count } }

    /// Tests only: while set, every park asks it first, and an error it returns fails that park as if the
    /// waiting port set could not be made. Guarded by `lock`; production parks pay one nil check there.
    private var sessionFailureForTesting: (@Sendable (PortName) -> PortError?)?
    /// Tests only: while set, a waiting thread about to start asks it first, and an errno it returns fails
    /// the start as `pthread_create` would. Guarded by `lock`.
    private var threadStartFailureForTesting: (@Sendable () -> Int32?)?

    func setSessionFailureForTesting(_ hook: (@Sendable (PortName) -> PortError?)?) {
        lock.withLock { sessionFailureForTesting = hook }
    }

    func setThreadStartFailureForTesting(_ hook: (@Sendable () -> Int32?)?) {
        lock.withLock { threadStartFailureForTesting = hook }
    }

    /// Parks a consumer until its port receives: its continuation is resumed with the port's next message,
    /// or by ``cancelWait(for:)``'s caller.
    /// - Throws: which call failed, when the waiting port set or thread cannot be made or the port cannot
    ///   join the set (descriptors or threads exhausted); the continuation is then left to the caller.
    func wait(for port: OpaquePointer, name: PortName, continuation: MessageContinuation) throws(ParkFailure) {
        lock.lock()
        defer { lock.unlock() }
        precondition(waiters[name] == nil, "PortMessages: next() called from two tasks at once; iterate from one")
        if let hook = sessionFailureForTesting, let error = hook(name) {
            throw ParkFailure(call: "PortSet()", error: error)
        }
        let session: Session
        if let current = self.session {
            session = current
        } else {
            session = try Session()
            // Started under the lock, before any waiter joins: if it cannot start, nobody was parked on it.
            // (It takes the lock first thing, so it waits for this call to finish.)
            try startThread(session)
            self.session = session
        }
        let status = pl_port_set_insert(session.set.set, port)
        guard status == PL_OK else {
            // A session started for this waiter lingers and ends on its own.
            throw ParkFailure(call: "pl_port_set_insert",
                              error: PortError.from(status, operation: "pl_port_set_insert") ?? .invalidName)
        }
        waiters[name] = Waiter(port: port, continuation: continuation)
    }

    /// Takes a parked consumer out, returning its continuation for the caller to resume; nil if it is not
    /// parked (a message was handed to it meanwhile). Its port leaves the set before this returns, so the
    /// caller may destroy it.
    func cancelWait(for name: PortName) -> MessageContinuation? {
        let (waiter, idle) = lock.withLock { () -> (Waiter?, Session?) in
            guard let waiter = waiters.removeValue(forKey: name), let session else { return (nil, nil) }
            pl_port_set_extract(session.set.set, waiter.port)
            return (waiter, waiters.isEmpty ? session : nil)
        }
        // A thread waiting forever for nobody must notice, so that it lingers and ends.
        idle?.wakeUp()
        return waiter?.continuation
    }

    // MARK: - The waiting thread

    /// Starts the waiting thread of a new session; with the lock held.
    private func startThread(_ session: Session) throws(ParkFailure) {
        if let hook = threadStartFailureForTesting, let errno = hook() {
            throw ParkFailure(call: "pthread_create", error: .systemCallFailed(call: "pthread_create", errno: errno))
        }
        runningThreads.add(1, ordering: .relaxed)
        let rc = startDetachedThread(named: Self.threadName) { [self] in
            serve(session)
            runningThreads.subtract(1, ordering: .relaxed)
        }
        guard rc != 0 else { return }
        runningThreads.subtract(1, ordering: .relaxed)
        throw ParkFailure(call: "pthread_create", error: .systemCallFailed(call: "pthread_create", errno: rc))
    }

    /// The thread's body: hands each message to its port's waiter until nobody has waited for a while.
    private func serve(_ session: Session) {
        let linger = PortTimeout.after(Self.idleLinger)
        while true {
            let timeout = lock.withLock { waiters.isEmpty ? linger : .forever }
            let event: PortSetEvent
            do throws(PortError) {
                switch try session.set.receiveNotingSenderless(timeout: timeout) {
                case let .event(received):
                    event = received
                case let .senderless(name):
                    resume(name, session, with: .noSenders)
                    continue
                }
            } catch .timedOut {
                let done = lock.withLock { () -> Bool in
                    guard waiters.isEmpty else { return false }
                    self.session = nil // the next waiter starts a new thread with a new set
                    return true
                }
                if done { return }
                continue
            } catch {
                // The set is never destroyed while this thread runs, so only resource exhaustion gets here;
                // back off instead of spinning on it.
                PortRunLoop.logError("PortMessages: receive failed: \(error)")
                usleep(10_000)
                continue
            }
            guard case let .message(message) = event, message.arrivalPort != session.wakeUpName else { continue }
            // No waiter: it was cancelled after this message was taken, and its port is being destroyed; the
            // message goes the way of the port's other queued messages.
            resume(message.arrivalPort, session, with: .message(message))
        }
    }

    /// Hands an outcome to the waiter of `name`, whose port leaves the set first: until its consumer asks
    /// again, the port keeps its messages to itself.
    private func resume(_ name: PortName, _ session: Session, with outcome: ParkOutcome) {
        let waiter = lock.withLock { () -> Waiter? in
            guard let waiter = waiters.removeValue(forKey: name) else { return nil }
            pl_port_set_extract(session.set.set, waiter.port)
            return waiter
        }
        waiter?.continuation.resume(returning: outcome)
    }
}
