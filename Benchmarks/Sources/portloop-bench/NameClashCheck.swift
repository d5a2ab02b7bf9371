// Compiled, never called: every public type of PortLoop (its experimental SPI too) named without its module, in
// a file that also imports Foundation, CoreFoundation, NIOCore and NIOPosix. A name one of them also has makes
// this file ambiguous and the benchmarks' build fails (`make test` builds them). The test NameClashListTests
// keeps this list complete.
import CoreFoundation
import Foundation
import NIOCore
import NIOPosix
@_spi(Experimental) import PortLoop

let portLoopPublicTypes: [Any.Type] = [
    PerformRequest.self, PortError.self, PortError.Code.self, PortLoopLogging.self, PortMessages.self,
    PortName.self, PortReply.self, PortRunLoop.self, PortRunLoop.Activity.self,
    PortRunLoop.Mode.self, PortRunLoop.RunResult.self, PortSendRight.self, PortSet.self, PortSetBufferEvent.self,
    PortSetEvent.self, PortTimeout.self, ReceivedMessage.self, ReceivedMessageHeader.self,
    RunLoopDescriptorSource.self, RunLoopError.self, RunLoopIdleQueue.self, RunLoopObserver.self,
    RunLoopPortSource.self, RunLoopScopeHooks<Int>.self, RunLoopSerialExecutor.self, RunLoopSource.self,
    RunLoopStallMonitor.self, RunLoopStallMonitor.Report.self, RunLoopThread.self, RunLoopThreadError<Never>.self,
    RunLoopTimer.self, StallMonitorError.self, RunLoopSignalSource.self, MainRunLoopExecutor.self,
    PortLoopExecutorFactory.self, PeerPolicy.self, PortNamespace.self, MessageAttachment.self, ServiceStatus.self,
    SharedRingPolicy.self, MessageDescriptor.self, CrossProcessStatistics.self, SenderIdentity.self, PortNotification.self,
    PortNotificationRequest.self, RunLoopNotificationWatch.self,
]
/// Noncopyable types cannot be `Any.Type`.
let portLoopReceiveRightType = PortReceiveRight.self
let portLoopSendOnceRightType = PortSendOnceRight.self
let portLoopMessageBufferType = MessageBuffer.self
let portLoopReceivedBufferType = ReceivedBuffer.self
