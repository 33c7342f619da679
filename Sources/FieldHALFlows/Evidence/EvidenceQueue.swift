import FieldHAL
import FieldHALSystem
import FieldHALVault
import SystemPackage
import Foundation
import Synchronization
import Transrify

/// One piece of evidence waiting to reach the server. A capture that could not be made
/// (Req 21.5) is queued too, as a TEXT item saying which kind failed and why, so that the
/// server learns of it and the queue empties the same way whatever happened.
public struct EvidenceItem: Codable, Sendable, Equatable {
    public enum Phase: String, Codable, Sendable {
        /// Sealed on disk; next: presign and PUT.
        case queued
        /// The PUT succeeded (`objectKey`); next: finalize.
        case uploaded
    }

    public var id: String
    public var incidentId: String
    public var kind: EvidenceKind
    public var contentType: String
    /// Plaintext size and SHA-256 (lower-case hex): what the server will receive.
    public var size: Int64
    public var sha256: String
    public var createdAt: Date
    public var phase: Phase
    public var objectKey: String?
    public var attempts: Int = 0
    public var nextAttemptAt: Date?
    public var lastError: String?
    /// Its last attempt failed for the network (not a refusal): due again as soon as an
    /// upload gets through, whatever its backoff says (the link is back).
    public var waitingForNetwork: Bool?
    /// Set on the TEXT item that reports a failed capture of this kind.
    public var failedKind: EvidenceKind?
    /// Set while a process PUTs the payload (cleared when the PUT ends either way), so that
    /// `evidence queue` can show an upload in flight.
    public var uploadingSince: Date?
    /// Captured by the silent work after a duress sign-in or unlock: uploaded like any other
    /// item, but never listed or counted at the device (nil in items from before this field).
    public var silent: Bool?
    /// Set on each segment of a recording (audio or video recorded in pieces, issue 19).
    public var segment: Segment?

    public var isSilent: Bool { silent ?? false }

    /// Where a segment stands in its recording: a hash chain, so that the server can tell a
    /// missing, reordered or altered segment.
    public struct Segment: Codable, Sendable, Equatable {
        /// Shared by every segment of one recording (one capture of one kind).
        public var recording: String
        /// 0, 1, 2, … in the order recorded.
        public var sequence: Int
        public var startedAt: Date
        public var durationSeconds: Double
        /// The SHA-256 of the segment before this one (its plaintext, lower-case hex); nil
        /// for the first.
        public var previousSHA256: String?

        public init(recording: String, sequence: Int, startedAt: Date, durationSeconds: Double, previousSHA256: String?) {
            self.recording = recording
            self.sequence = sequence
            self.startedAt = startedAt
            self.durationSeconds = durationSeconds
            self.previousSHA256 = previousSHA256
        }
    }
}

/// The durable evidence queue in `<state>/evidence` (0700): per item a sealed payload
/// (`<id>.data`) and sealed metadata (`<id>.item`), both written atomically, payload first.
/// An item exists once its `.item` file does; a `.data` without one (a kill mid-add or
/// mid-removal) and temporary files are removed when the queue opens (`removeLeftovers`).
/// Items leave only when the server has confirmed them with an evidence id.
///
/// Any number of processes may use the queue at once (the daemon's uploads, a capture after
/// a sign-in, `evidence capture` and `flush`): adding needs no lock (each item has names of
/// its own), and an upload claims its item with an exclusive `flock` on the item's payload
/// for as long as it works on it, so nobody waits behind a long upload and no item is sent
/// twice. Only the queue key's creation is serialised (a brief lock on `queue.lock`).
public final class EvidenceQueue: Sendable {
    public static let keyEntry = "evidence-queue-key"
    /// A temporary file younger than this may still be written by a live process (a
    /// recording's scratch file is written to all the time).
    public static let leftoverAge: TimeInterval = 300
    public let directory: String
    /// In guarded memory (issue 18): the key that opens every item on the kit.
    private let key: SecretBytes

    /// Opens the queue. `exclusive` (adding, uploading) makes the queue key if there is none
    /// and removes stale leftovers; a read-only opening (listing) changes nothing.
    public init(stateDirectory: StateDirectory, vault: Vault, exclusive: Bool = true) throws {
        ContentHash.prepare()
        directory = stateDirectory.file("evidence")
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw SystemError.io("cannot create the evidence queue", subject: directory)
        }
        if let stored = try vault.loadSecret(Self.keyEntry), stored.count == EvidenceCipher.keySize {
            key = stored
        } else if !exclusive {
            key = SecretBytes(copying: "")  // no key yet means no item yet: nothing to read
        } else {
            key = try Self.makeKey(in: directory, vault: vault)
        }
        if exclusive { try removeLeftovers() }
    }

    /// Two processes opening a new queue at once must not each make a key (the loser's
    /// items would never open): the key is made under `queue.lock`, checked again inside.
    private static func makeKey(in directory: String, vault: Vault) throws -> SecretBytes {
        let descriptor = open(directory + "/queue.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw FieldHALError(.io, subject: directory + "/queue.lock", detail: SystemError.describe())
        }
        defer { unlockAndClose(descriptor) }
        // Held for microseconds by whoever makes the key: wait for it, within a bound.
        let deadline = ContinuousClock.now + .seconds(10)
        waiting: while true {
            switch SystemCall.attempt({ flock(descriptor, LOCK_EX | LOCK_NB) }) {
            case .success: break waiting
            case .failure(.wouldBlock) where ContinuousClock.now < deadline: usleep(10_000)
            case .failure(.wouldBlock):
                throw FieldHALError(.busy, subject: "evidence queue", detail: "another process holds \(directory)/queue.lock",
                                    advice: "find it with fuser \(directory)/queue.lock")
            case .failure(let code):
                throw SystemError.file(directory + "/queue.lock", "lock", code: code.rawValue)
            }
        }
        if let stored = try vault.loadSecret(keyEntry), stored.count == EvidenceCipher.keySize { return stored }
        var fresh = try EvidenceCipher.newKey()
        defer { SecretBytes.wipe(&fresh.stored) }
        try vault.store(fresh.stored, as: keyEntry)
        return fresh.key
    }

    /// An item's upload, claimed: nobody else uploads it while this is alive.
    public final class Claim: Sendable {
        let descriptor: Int32
        init(_ descriptor: Int32) { self.descriptor = descriptor }
        deinit { unlockAndClose(descriptor) }
    }

    /// A flock belongs to the open file, not to the descriptor: a child this process is
    /// spawning holds a copy of every descriptor until its exec, so close alone can leave the
    /// lock held for that long (the next claim of the same item then found it "busy").
    /// LOCK_UN releases it at once, whatever copies exist.
    static func unlockAndClose(_ descriptor: Int32) {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }

    /// Claims the item for upload, or nil when another process is working on it (or it is gone).
    public func claim(_ id: String) -> Claim? {
        let descriptor = open(dataPath(id), O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            close(descriptor)
            return nil
        }
        return Claim(descriptor)
    }

    // MARK: Adding

    /// Seals the file at `path` into the queue, hashing it on the way; the file itself is
    /// left alone (the caller removes a temporary capture once this returns).
    @discardableResult
    public func add(kind: EvidenceKind, contentType: String, incidentId: String, file path: String, silent: Bool = false) throws -> EvidenceItem {
        guard let input = FileHandle(forReadingAtPath: path) else {
            throw FieldHALError(.io, subject: path, detail: "cannot read the evidence to queue")
        }
        defer { try? input.close() }
        return try add(kind: kind, contentType: contentType, incidentId: incidentId, silent: silent) {
            [UInt8](try input.read(upToCount: EvidenceCipher.chunkSize) ?? Data())
        }
    }

    /// Seals a recording kept in memory (never on disk in plaintext) into the queue.
    @discardableResult
    public func add(kind: EvidenceKind, contentType: String, incidentId: String, memory: MemoryFile, silent: Bool = false,
                    segment: EvidenceItem.Segment? = nil) throws -> EvidenceItem {
        var offset = 0
        return try add(kind: kind, contentType: contentType, incidentId: incidentId, silent: silent, segment: segment) {
            let chunk = try memory.read(at: offset, count: EvidenceCipher.chunkSize)
            offset += chunk.count
            return chunk
        }
    }

    @discardableResult
    public func add(kind: EvidenceKind, contentType: String, incidentId: String, bytes: [UInt8], silent: Bool = false) throws -> EvidenceItem {
        var remaining = bytes[...]
        return try add(kind: kind, contentType: contentType, incidentId: incidentId, silent: silent) {
            let chunk = Array(remaining.prefix(EvidenceCipher.chunkSize))
            remaining = remaining.dropFirst(chunk.count)
            return chunk
        }
    }

    private func add(kind: EvidenceKind, contentType: String, incidentId: String, silent: Bool, segment: EvidenceItem.Segment? = nil,
                     read: () throws -> [UInt8]) throws -> EvidenceItem {
        let id = Self.newID()
        let writer = try AtomicFileWriter(path: dataPath(id))
        // Claimed from before the payload has its name until its item is saved: a payload
        // without an item that nobody claims is then known to be a leftover (see
        // `removeLeftovers`), and an upload never starts on a half-added item.
        let held = Claim(try writer.lockedDescriptor())
        defer { withExtendedLifetime(held) {} }
        let sealed = try EvidenceCipher.seal(key: key, read: read, into: writer)
        try writer.commit()
        let item = EvidenceItem(id: id, incidentId: incidentId, kind: kind, contentType: contentType, size: sealed.size,
                                sha256: sealed.sha256, createdAt: Date(), phase: .queued, silent: silent ? true : nil, segment: segment)
        try save(item)
        return item
    }

    /// Records that evidence of `kind` could not be captured, and why, as a TEXT item.
    @discardableResult
    public func recordCaptureError(kind: EvidenceKind, incidentId: String, message: String, silent: Bool = false) throws -> EvidenceItem {
        var item = try add(kind: .text, contentType: "text/plain; charset=utf-8", incidentId: incidentId,
                           bytes: Array("\(kind.rawValue) evidence not captured: \(message)".utf8), silent: silent)
        item.failedKind = kind
        try save(item)
        return item
    }

    // MARK: Reading and updating

    /// What may be shown at the device: every item but the silent ones, oldest first.
    public func visibleItems() throws -> [EvidenceItem] { try items().filter { !$0.isSilent } }

    /// One item as it is on disk now, or nil when it has left the queue.
    public func item(_ id: String) throws -> EvidenceItem? {
        try readItem(id)
    }

    /// Every item, oldest first. An item file that does not open is reported, not dropped.
    public func items() throws -> [EvidenceItem] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".item") }
        // An item another process removes while this lists is simply no longer there.
        return try names.compactMap { try readItem(String($0.dropLast(5))) }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    private func readItem(_ id: String) throws -> EvidenceItem? {
        guard let sealed = try AtomicFile.read(itemPath(id)) else { return nil }
        guard let plain = EvidenceCipher.openMessage(key: key, sealed) else {
            throw FieldHALError(.malformedData, subject: itemPath(id), detail: "a queued evidence item does not open",
                                advice: "the queue key or the file was changed; keep the file and report it")
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try decoder.decode(EvidenceItem.self, from: Data(plain))
    }

    public func save(_ item: EvidenceItem) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        try AtomicFile.write(try EvidenceCipher.sealMessage(key: key, Array(try encoder.encode(item))), to: itemPath(item.id))
    }

    /// Removes a confirmed item: its metadata first (so it is gone at once), then its data.
    public func remove(_ id: String) throws {
        if unlink(itemPath(id)) != 0 && errno != ENOENT {
            throw FieldHALError(.io, subject: itemPath(id), detail: SystemError.describe())
        }
        unlink(dataPath(id))
    }

    /// Writes the item's plaintext to `path` (0600), verifying size and SHA-256 on the way.
    func decrypt(_ item: EvidenceItem, to path: String) throws {
        let writer = try AtomicFileWriter(path: path)
        try readSealed(item) { try writer.write($0) }
        try writer.commit()
    }

    /// Opens the item's sealed file to its end and checks it against its recorded size and
    /// SHA-256, keeping nothing: whether what a killed capture left is whole.
    public func verify(_ item: EvidenceItem) throws {
        try readSealed(item) { _ in }
    }

    /// Each chunk of the item's plaintext, in order; throws when the file is not the item's.
    private func readSealed(_ item: EvidenceItem, _ each: ([UInt8]) throws -> Void) throws {
        var hash = try ContentHash()
        var size: Int64 = 0
        try EvidenceCipher.open(key: key, path: dataPath(item.id)) { chunk in
            hash.update(chunk)
            size += Int64(chunk.count)
            try each(chunk)
        }
        guard size == item.size, hash.hex() == item.sha256 else {
            throw FieldHALError(.malformedData, subject: dataPath(item.id), detail: "sealed evidence does not match its recorded size and SHA-256")
        }
    }

    /// The item's plaintext for an upload, decrypted as it is read and never written anywhere;
    /// its size and SHA-256 are checked as the last chunk is read, and a mismatch fails the
    /// read (and so the upload) with `malformedData`.
    /// `read` hears the bytes read so far after each chunk (an upload's progress).
    func plaintextStream(_ item: EvidenceItem, read: (@Sendable (Int64) -> Void)? = nil) throws -> BodyStream {
        let opener = try EvidenceCipher.Opener(key: key, path: dataPath(item.id))
        let progress = Mutex<(hash: ContentHash, size: Int64)>((try ContentHash(), 0))
        let path = dataPath(item.id)
        return BodyStream {
            try progress.withLock { progress in
                if let chunk = try opener.next() {
                    progress.hash.update(chunk)
                    progress.size += Int64(chunk.count)
                    read?(progress.size)
                    return chunk
                }
                guard progress.size == item.size, progress.hash.hex() == item.sha256 else {
                    throw FieldHALError(.malformedData, subject: path, detail: "sealed evidence does not match its recorded size and SHA-256")
                }
                return nil
            }
        }
    }

    func dataPath(_ id: String) -> String { "\(directory)/\(id).data" }
    func itemPath(_ id: String) -> String { "\(directory)/\(id).item" }

    /// Temporary files of writes a kill interrupted (at once when their writer is gone,
    /// otherwise once untouched for `leftoverAge`); a decrypted upload whose item nobody has
    /// claimed; a payload without an item that nobody claims — an add or a removal a kill
    /// cut short (both hold the payload's claim throughout, so a claimable payload whose item
    /// is still absent once claimed has no live writer).
    private func removeLeftovers() throws {
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: directory))
        let now = Date().timeIntervalSince1970
        for name in names {
            let path = "\(directory)/\(name)"
            if name.hasSuffix(".upload") {
                if claim(String(name.dropLast(7))) != nil || !names.contains(String(name.dropLast(7)) + ".data") { unlink(path) }
                continue
            }
            if name.hasSuffix(".data") && !names.contains(String(name.dropLast(5)) + ".item") {
                let id = String(name.dropLast(5))
                if let claimed = claim(id) {
                    if access(itemPath(id), F_OK) != 0 { unlink(path) }
                    withExtendedLifetime(claimed) {}
                }
                continue
            }
            guard name.hasPrefix(".") else { continue }
            var info = stat()
            let stale = stat(path, &info) == 0 && now - TimeInterval(info.st_mtim.tv_sec) >= Self.leftoverAge
            if stale || Self.writerIsGone(name) { unlink(path) }
        }
    }

    /// An atomic write's temporary file (`.<name>.tmp-<pid>-<n>`) whose writing process is
    /// gone: a kill interrupted it, and it can go at once.
    static func writerIsGone(_ name: String) -> Bool {
        guard let range = name.range(of: ".tmp-"), let pid = Int32(name[range.upperBound...].prefix { $0.isNumber }), pid > 0 else {
            return false
        }
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    static func newID() -> String {
        let bytes = Randomness.bytes(12)
        // Time first, so that names sort in creation order too.
        return String(format: "%013llx-", UInt64(Date().timeIntervalSince1970 * 1000)) + EvidenceCipher.hex(bytes)
    }
}
