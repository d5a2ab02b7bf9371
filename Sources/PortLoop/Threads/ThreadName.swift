import CPortLoop

/// Names the calling thread (`pthread_setname_np`, as `-[NSThread setName:]` does for the current thread).
/// Linux keeps at most 15 bytes; the name is cut at a character boundary to fit rather than refused.
func setCurrentThreadName(_ name: String) {
    var bytes = 0
    var cut = ""
    for character in name {
        let size = character.utf8.count
        guard bytes + size <= 15 else { break }
        bytes += size
        cut.append(character)
    }
    _ = pl_thread_set_name(cut)
}

/// The calling thread's name as the kernel keeps it (`pthread_getname_np`).
func currentThreadName() -> String {
    var buffer = [CChar](repeating: 0, count: 16)
    guard pl_thread_get_name(&buffer, buffer.count) == 0 else { return "" }
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
