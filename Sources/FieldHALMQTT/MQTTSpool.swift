import FieldHAL
import FieldHALSystem
#if canImport(Glibc)
import Glibc
#endif

/// The messages the broker has not acknowledged yet, one file each in a directory of the
/// kit's state: a broker that is away, or a daemon killed or restarted meanwhile, loses none
/// of them. Bounded: past `limit` the oldest not yet handed to the broker is dropped, and
/// counted, so an outage of days cannot fill the disk.
///
/// Each file is written under a temporary name and renamed, so a kill leaves a whole
/// message or none; it is not fsynced (one fsync per fix would wear a board's flash and
/// hold the bridge for milliseconds), so a power cut may lose the last seconds of them
/// (docs/decisions.md). Confined to the bridge's thread.
final class MQTTSpool {
    struct Message: Equatable {
        let sequence: UInt64
        let topic: String
        let payload: [UInt8]
    }

    let directory: String
    let limit: Int
    /// Waiting to be handed to the broker, oldest first.
    private var waiting: [UInt64] = []
    private var head = 0
    /// Handed to libmosquitto, not yet acknowledged.
    private var handed: Set<UInt64> = []
    private var next: UInt64 = 1
    private(set) var dropped = 0

    /// Opens (or makes, mode 0700) the directory and finds what an earlier run left. A link,
    /// another user's directory or one others may enter is refused.
    init(directory: String, limit: Int) throws(FieldHALError) {
        self.directory = directory
        self.limit = max(1, limit)
        if mkdir(directory, 0o700) != 0 && errno != EEXIST { throw SystemError.io("mkdir", subject: directory) }
        var info = stat()
        guard lstat(directory, &info) == 0 else { throw SystemError.io("lstat", subject: directory) }
        guard info.st_mode & S_IFMT == S_IFDIR, info.st_uid == geteuid(), info.st_mode & 0o077 == 0 else {
            throw FieldHALError(.permissionDenied, subject: directory,
                                detail: "the MQTT queue must be a directory of this user's that no one else may enter (mode 0700), not a link",
                                advice: "remove it; the daemon makes it again")
        }
        guard let listing = opendir(directory) else { throw SystemError.io("opendir", subject: directory) }
        defer { closedir(listing) }
        var found: [UInt64] = []
        while let entry = readdir(listing) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            if name.hasSuffix(".tmp") {
                unlink("\(directory)/\(name)")  // a write a kill cut short
            } else if name.hasSuffix(".msg"), let sequence = UInt64(name.dropLast(4), radix: 16) {
                found.append(sequence)
            }
        }
        waiting = found.sorted()
        next = (waiting.last ?? 0) + 1
        while count > self.limit { dropOldest() }
    }

    /// Messages kept: waiting and handed.
    var count: Int { waiting.count - head + handed.count }
    var waitingCount: Int { waiting.count - head }

    private func path(_ sequence: UInt64) -> String {
        let hex = String(sequence, radix: 16)
        return "\(directory)/\(String(repeating: "0", count: max(0, 16 - hex.count)))\(hex).msg"
    }

    /// Keeps a message for the broker.
    func append(topic: String, payload: [UInt8]) throws(FieldHALError) {
        let sequence = next
        let final = path(sequence), temporary = final + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SystemError.io("open", subject: temporary) }
        let bytes = Array(topic.utf8) + [0x0A] + payload
        let failure = bytes.withUnsafeBytes { buffer -> FieldHALError? in
            do throws(FieldHALError) {
                try SystemCall.writeAll(buffer, to: fd, file: temporary)
                return nil
            } catch { return error }
        }
        close(fd)
        if let failure {
            unlink(temporary)
            throw failure
        }
        guard rename(temporary, final) == 0 else {
            let error = SystemError.io("rename", subject: final)
            unlink(temporary)
            throw error
        }
        next += 1
        waiting.append(sequence)
        while count > limit { dropOldest() }
    }

    /// The oldest message waiting, now counted as handed; nil when none waits. A file that
    /// cannot be read (a disk error) is dropped and counted rather than blocking the rest.
    func takeOldest() -> Message? {
        while head < waiting.count {
            let sequence = waiting[head]
            head += 1
            compact()
            guard let bytes = try? RegularFile.read(path(sequence), limit: 1 << 20, what: "queued MQTT message"),
                  let newline = bytes.firstIndex(of: 0x0A) else {
                unlink(path(sequence))
                dropped += 1
                continue
            }
            handed.insert(sequence)
            return Message(sequence: sequence, topic: String(decoding: bytes[..<newline], as: UTF8.self), payload: Array(bytes[(newline + 1)...]))
        }
        return nil
    }

    /// A handed message the broker did not take (libmosquitto refused it): first again.
    func giveBack(_ sequence: UInt64) {
        guard handed.remove(sequence) != nil else { return }
        if head > 0 {
            head -= 1
            waiting[head] = sequence
        } else {
            waiting.insert(sequence, at: 0)
        }
    }

    /// The broker acknowledged it: gone.
    func acknowledged(_ sequence: UInt64) {
        guard handed.remove(sequence) != nil else { return }
        unlink(path(sequence))
    }

    private func dropOldest() {
        guard head < waiting.count else { return }
        unlink(path(waiting[head]))
        head += 1
        dropped += 1
        compact()
    }

    private func compact() {
        if head > 1024 && head * 2 > waiting.count {
            waiting.removeFirst(head)
            head = 0
        }
    }
}
