/// Where a recording (a camera's AVI, a microphone's WAV) is written. The writers take it
/// as it is: a file already open is written through its descriptor, never reopened by a
/// name such as `/dev/fd/N` or `/proc/self/fd/N`.
public enum RecordingDestination: Sendable {
    /// A file at this path. It appears there only when complete (written beside it, then
    /// renamed over it); a recording cancelled or failed leaves nothing.
    case path(String)

    /// A file in memory (evidence that must never reach a disk in plaintext), written in
    /// place from its start: whoever made it reads it once the recording has returned.
    case memory(MemoryFile)

    /// A file named `name` (a plain name, no `/`) in a directory this process has open
    /// (the directory a plugin process is handed). It appears there only when complete,
    /// as with `path`. The descriptor stays the caller's, open until the recording returns.
    case entry(String, inDirectory: Int32)

    /// What a recording reports as its path: the path, the name in the directory, or
    /// "memory".
    public var name: String {
        switch self {
        case .path(let path): path
        case .memory: "memory"
        case .entry(let name, _): name
        }
    }
}
