#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// CLOCK_MONOTONIC in nanoseconds: the clock the C layer's timeouts and the run loop's timers use.
@inline(__always)
func monotonicNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// The calling thread's `errno`.
func currentErrno() -> Int32 { errno }

/// The C library's text for an `errno` value (`strerror`), e.g. "Too many open files".
func errnoDescription(_ code: Int32) -> String { String(cString: strerror(code)) }
