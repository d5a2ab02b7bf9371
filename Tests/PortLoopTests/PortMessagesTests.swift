@testable import PortLoop
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A port's messages as an `AsyncSequence`: order, cancellation destroying the port, back-pressure
/// through the port's queue limit, and the shared waiting thread that ends when nobody waits. Serialized:
/// the tests count that thread.
@Suite("Port messages as an AsyncSequence", .serialized, .timeLimit(.minutes(1)))
struct PortMessagesTests {
    let reactorThread = PortMessageReactor.threadName

    @Test("messages arrive in order, with their payloads, through a small queue")
    func inOrder() async throws {
        let port = try PortReceiveRight(queueLimit: 4)
        let sender = port.makeSendRight()
        let messages = port.messages()
        let producer = TestThread {
            for i in 0..<2000 { try! sender.send(id: Int32(i), bytes: payload(i, i * 3)) }
        }
        var received: [Int32] = []
        for await message in messages {
            #expect(decode(message.payload) == (Int(message.id), Int(message.id) * 3))
            received.append(message.id)
            if received.count == 2000 { break }
        }
        producer.join()
        #expect(received == (0..<2000).map { Int32($0) })
    }

    @Test("an actor on a loop's executor consumes messages on the loop's thread")
    func consumedByLoopActor() async throws {
        let worker = ExecutorLoopThread()
        defer { worker.stop() }
        let consumer = ConsumingActor(executor: worker.executor)
        let port = try PortReceiveRight()
        let sender = port.makeSendRight()
        let messages = port.messages()
        let producer = TestThread { for i in 0..<300 { try! sender.send(id: Int32(i)) } }
        let (ids, threads) = await consumer.take(300, from: messages)
        producer.join()
        #expect(ids == (0..<300).map { Int32($0) })
        #expect(threads == [worker.loop.threadID])
    }

    @Test("cancelling a waiting consumer ends the iteration and destroys the port")
    func cancelWhileWaiting() async throws {
        let (messages, sender) = try PortMessages.makeStream()
        #expect(messages.portName == sender.name)
        let count = Locked(0)
        let consumer = Task {
            for await _ in messages { count.withLock { $0 += 1 } }
            return count.current
        }
        try sender.send(id: 1)
        try sender.send(id: 2)
        #expect(await eventually { count.current == 2 && PortMessageReactor.shared.waiterCount == 1 })
        #expect(!sender.isDeadName)

        consumer.cancel()
        #expect(await consumer.value == 2)
        #expect(messages.isFinished)
        #expect(sender.isDeadName)
        #expect(throws: PortError.invalidDestination) { try sender.send(id: 3, timeout: .poll) }
        #expect(PortMessageReactor.shared.waiterCount == 0)
    }

    @Test("cancelling with messages queued ends at once; the queued messages and their reply rights go")
    func cancelWithMessagesQueued() async throws {
        let replies = try PortReceiveRight()
        let reply = replies.makeSendRight()
        let port = try PortReceiveRight(queueLimit: 16)
        let sender = port.makeSendRight()
        for i in 0..<10 { try sender.send(id: Int32(i), replyPort: reply) }
        #expect(replies.sendRightCount == 11)
        let messages = port.messages()
        let consumer = Task {
            var seen: [Int32] = []
            for await message in messages {
                seen.append(message.id)
                if message.id == 2 { withUnsafeCurrentTask { $0?.cancel() } }
            }
            return seen
        }
        #expect(await consumer.value == [0, 1, 2])
        #expect(sender.isDeadName)
        #expect(replies.sendRightCount == 1, "only our own right is left: the 7 queued messages were destroyed")
    }

    @Test("a task cancelled before it asks gets nil, and the port is destroyed")
    func cancelledBeforeAsking() async throws {
        let port = try PortReceiveRight()
        let sender = port.makeSendRight()
        try sender.send(id: 1)
        let messages = port.messages()
        let result = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()?.id
        }.value
        #expect(result == nil)
        #expect(sender.isDeadName)
    }

    @Test("releasing the sequence destroys the port")
    func releaseDestroys() throws {
        let sender: PortSendRight
        do {
            let port = try PortReceiveRight()
            sender = port.makeSendRight()
            let messages = port.messages()
            #expect(!messages.isFinished)
            #expect(!sender.isDeadName)
        }
        #expect(sender.isDeadName)
    }

    @Test("messages stay in the port until asked for: its queue limit holds senders back")
    func backPressure() async throws {
        let port = try PortReceiveRight(queueLimit: 2)
        let sender = port.makeSendRight()
        let messages = port.messages()
        var iterator = messages.makeAsyncIterator()
        try sender.send(id: 0)
        #expect(await iterator.next()?.id == 0)
        try sender.send(id: 1, timeout: .poll)
        try sender.send(id: 2, timeout: .poll)
        #expect(throws: PortError.timedOut) { try sender.send(id: 3, timeout: .poll) }
        #expect(await iterator.next()?.id == 1)
        #expect(await iterator.next()?.id == 2)
        let late = TestThread { sleepMilliseconds(50); try! sender.send(id: 3, timeout: .poll) }
        #expect(await iterator.next()?.id == 3, "a waiting consumer is woken by the next send")
        late.join()
    }

    @Test("one waiting thread serves every waiting consumer and ends when none is left")
    func oneThreadNoLeak() async throws {
        #expect(await eventually { threadCount(named: reactorThread) == 0 }, "a previous test's thread lingers on")
        let count = 20
        var senders: [PortSendRight] = []
        var consumers: [Task<Int32?, Never>] = []
        for _ in 0..<count {
            let port = try PortReceiveRight()
            senders.append(port.makeSendRight())
            let messages = port.messages()
            consumers.append(Task { var iterator = messages.makeAsyncIterator(); return await iterator.next()?.id })
        }
        #expect(await eventually { PortMessageReactor.shared.waiterCount == count })
        #expect(threadCount(named: reactorThread) == 1)
        #expect(PortMessageReactor.shared.runningThreads.load(ordering: .relaxed) == 1)

        for (i, sender) in senders.enumerated() where i.isMultiple(of: 2) { try sender.send(id: Int32(i)) }
        for (i, consumer) in consumers.enumerated() where i.isMultiple(of: 2) { #expect(await consumer.value == Int32(i)) }
        for (i, consumer) in consumers.enumerated() where !i.isMultiple(of: 2) { consumer.cancel() }
        for (i, consumer) in consumers.enumerated() where !i.isMultiple(of: 2) { #expect(await consumer.value == nil) }
        #expect(PortMessageReactor.shared.waiterCount == 0)
        #expect(senders.enumerated().allSatisfy { $0.offset.isMultiple(of: 2) || $0.element.isDeadName },
                "a cancelled consumer's port is destroyed")

        #expect(await eventually { threadCount(named: reactorThread) == 0 }, "the waiting thread ends after its linger")
        #expect(PortMessageReactor.shared.runningThreads.load(ordering: .relaxed) == 0)
    }
}

/// A consumer that cannot be parked (descriptors or threads exhausted) keeps polling its port and never
/// ends while the port lives. The reactor's test hooks stand in for the exhaustion; they apply to the
/// test's own port only, or (thread start) only while no other consumer of the process waits.
extension PortMessagesTests {
    @Test("a consumer whose park fails waits on, receiving in order what is sent during and after the failures")
    func parkFailureRetries() async throws {
        let (messages, sender) = try PortMessages.makeStream()
        let name = messages.portName
        let failures = Locked(0)
        let failing = Locked(true)
        PortMessageReactor.shared.setSessionFailureForTesting { port in
            guard port == name, failing.current else { return nil }
            failures.withLock { $0 += 1 }
            return .systemCallFailed(call: "epoll_create1", errno: EMFILE)
        }
        defer { PortMessageReactor.shared.setSessionFailureForTesting(nil) }
        let consumer = Task {
            var ids: [Int32] = []
            for await message in messages {
                ids.append(message.id)
                if ids.count == 6 { break }
            }
            return ids
        }
        #expect(await eventually { failures.current >= 3 }, "the consumer keeps trying to park")
        for id in 0..<3 { try sender.send(id: Int32(id)) }
        let seen = failures.current
        #expect(await eventually { failures.current >= seen + 3 }, "and keeps trying after taking them by polling")
        #expect(!messages.isFinished)
        #expect(messages.storage.failureEpisodes.load(ordering: .relaxed) == 1, "one failure episode, logged once")

        failing.withLock { $0 = false }
        #expect(await eventually { PortMessageReactor.shared.waiterCount == 1 }, "parked once parking works")
        for id in 3..<6 { try sender.send(id: Int32(id)) }
        #expect(await consumer.value == [0, 1, 2, 3, 4, 5])
        #expect(!messages.isFinished, "the iteration was left by break, not ended: the port lives")
        #expect(!sender.isDeadName)
    }

    @Test("cancelling a consumer while its parks fail ends the iteration and destroys the port")
    func cancelDuringParkFailures() async throws {
        let (messages, sender) = try PortMessages.makeStream()
        let name = messages.portName
        let failures = Locked(0)
        PortMessageReactor.shared.setSessionFailureForTesting { port in
            guard port == name else { return nil }
            failures.withLock { $0 += 1 }
            return .systemCallFailed(call: "epoll_create1", errno: EMFILE)
        }
        defer { PortMessageReactor.shared.setSessionFailureForTesting(nil) }
        let consumer = Task {
            var count = 0
            for await _ in messages { count += 1 }
            return count
        }
        try sender.send(id: 1)
        #expect(await eventually { failures.current >= 3 }, "the consumer is retrying")
        consumer.cancel()
        #expect(await consumer.value == 1)
        #expect(messages.isFinished)
        #expect(sender.isDeadName)
        #expect(PortMessageReactor.shared.waiterCount == 0)
    }

    @Test("a consumer whose waiting thread cannot start polls on, and parks once a thread starts")
    func threadStartFailureRetries() async throws {
        #expect(await eventually { PortMessageReactor.shared.runningThreads.load(ordering: .relaxed) == 0 },
                "a previous test's thread lingers on")
        let attempts = Locked(0)
        let failing = Locked(true)
        PortMessageReactor.shared.setThreadStartFailureForTesting {
            guard failing.current else { return nil }
            attempts.withLock { $0 += 1 }
            return EAGAIN
        }
        defer { PortMessageReactor.shared.setThreadStartFailureForTesting(nil) }
        let (messages, sender) = try PortMessages.makeStream()
        let received = Locked<[Int32]>([])
        let consumer = Task {
            for await message in messages {
                received.withLock { $0.append(message.id) }
                if received.current.count == 3 { break }
            }
        }
        #expect(await eventually { attempts.current >= 3 })
        try sender.send(id: 0)
        try sender.send(id: 1)
        #expect(await eventually { received.current == [0, 1] }, "taken by the consumer's own polls")
        #expect(PortMessageReactor.shared.runningThreads.load(ordering: .relaxed) == 0)

        failing.withLock { $0 = false }
        #expect(await eventually { PortMessageReactor.shared.waiterCount == 1 })
        #expect(PortMessageReactor.shared.runningThreads.load(ordering: .relaxed) == 1)
        try sender.send(id: 2)
        await consumer.value
        #expect(received.current == [0, 1, 2])
        #expect(!messages.isFinished)
    }
}

/// Consumes a port's messages inside its isolation, on a loop's thread.
actor ConsumingActor {
    let executor: RunLoopSerialExecutor
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    init(executor: RunLoopSerialExecutor) { self.executor = executor }

    func take(_ count: Int, from messages: PortMessages) async -> ([Int32], Set<Int32>) {
        var ids: [Int32] = []
        var threads: Set<Int32> = []
        for await message in messages {
            ids.append(message.id)
            threads.insert(currentThreadID())
            if ids.count == count { break }
        }
        return (ids, threads)
    }
}
