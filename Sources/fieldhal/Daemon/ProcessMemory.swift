import CMalloc

/// How the daemon's process uses the C heap, set once at start-up.
enum ProcessMemory {
    /// Blocks this large or larger are mapped on their own and unmapped when freed.
    static let mmapThreshold: Int32 = 128 * 1024

    /// glibc starts with a 128 KiB mmap threshold and raises it to the size of every mapped
    /// block freed, up to 32 MiB. After the first photo (the fake camera's colour planes are
    /// 7 MiB; a recording's buffers are similar) every later one then comes from the heap,
    /// and its pages stay with the process after it is freed: the soak measured a one-time
    /// step of 7.8 MiB private memory that never came back (issue 23). A threshold set
    /// explicitly is never moved, so large transient buffers go back to the system when
    /// freed and what stays resident is what is in use.
    static func returnLargeBuffersWhenFreed() {
        _ = mallopt(M_MMAP_THRESHOLD, mmapThreshold)
    }
}
