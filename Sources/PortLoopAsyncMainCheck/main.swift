// A child process for the experimental main executor with an `async` main: the @main type names PortLoop's
// executor factory as the program's DefaultExecutorFactory, so that the main task and every @MainActor job run
// on the main run loop. Prints `ok async-main <details>` or `fail async-main <why>` and exits 0 or 1.
import Dispatch
@_spi(ExperimentalCustomExecutors) import _Concurrency
@_spi(Experimental) import PortLoop
#if canImport(Glibc)
import Glibc
#endif

/// Whether the calling thread is the main one, whose loop is the main loop.
func isOnMainThread() -> Bool { PortRunLoop.main.isCurrent }

@main
struct AsyncMainCheck {
    typealias DefaultExecutorFactory = PortLoopExecutorFactory

    @MainActor static func main() async {
        let installed = MainActor.executor is MainRunLoopExecutor
        nonisolated(unsafe) var blockRan = false
        DispatchQueue.main.async { blockRan = true }
        // The main task may begin before the loop runs; after its first suspension it resumes as main-loop work.
        let offMain = await Task.detached { !isOnMainThread() }.value
        let inLoop = PortRunLoop.main.currentModeName == .default
        try? await Task.sleep(for: .milliseconds(50))
        let details = "installed=\(installed) inLoop=\(inLoop) main=\(isOnMainThread()) offMain=\(offMain) block=\(blockRan)"
        let ok = installed && inLoop && isOnMainThread() && offMain && blockRan
        print("\(ok ? "ok" : "fail") async-main \(details)")
        exit(ok ? 0 : 1)
    }
}
