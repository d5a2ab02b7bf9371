import CPortLoop

/// The kernel's id of the calling thread. The process's main thread is the one whose id is the process id,
/// which lets any thread recognise it.
@inline(__always)
func currentThreadID() -> Int32 { pl_thread_id() }

/// The main thread's kernel id.
func mainThreadID() -> Int32 { pl_process_id() }

/// Whether the calling thread is the process's main thread.
func isMainThread() -> Bool { pl_thread_id() == pl_process_id() }
