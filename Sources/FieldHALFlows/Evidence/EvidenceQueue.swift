import CSodium
import Crypto
import FieldHAL
import FieldHALVault
import Foundation
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
    /// Set on the TEXT item that reports a failed capture of this kind.
    public var failedKind: EvidenceKind?
    /// Set while a process PUTs the payload (cleared when the PUT ends either way), so that
    /// `evidence queue` can show an upload in flight.
    public var uploadingSince: Date?
}

/// The durable evidence queue in `<state>/evidence` (0700): per item a sealed payload
/// (`<id>.data`) and sealed metadata (`<id>.item`), both written atomically, payload first.
/// An item exists once its `.item` file does; a `.data` without one (a kill mid-add) and
/// temporary files are removed when the queue opens. Items leave only when the server
/// has confirmed them with an evidence id.
public final class EvidenceQueue: Sendable {
    public static let keyEntry = "evidence-queue-key"
    public let directory: String
    private let key: [UInt8]
    /// Held open with an exclusive `flock` by the one process that may change the queue.
    private let lockDescriptor: Int32

    /// Opens the queue. `exclusive` (adding, uploading) takes the queue's lock and fails
    /// with `busy` while another process holds it; a read-only opening (listing) does not.
    public init(stateDirectory: StateDirectory, vault: Vault, exclusive: Bool = true) throws {
        directory = stateDirectory.file("evidence")
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw FieldHALError(.io, subject: directory, detail: "cannot create the evidence queue: \(String(cString: strerror(errno)))")
        }
        if exclusive {
            let descriptor = open(directory + "/queue.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard descriptor >= 0, flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
                if descriptor >= 0 { close(descriptor) }
                throw FieldHALError(.busy, subject: "evidence queue", detail: "another fieldhal process is working on the queue",
                                    advice: "it uploads what is pending; try again when it has finished")
            }
            lockDescriptor = descriptor
        } else {
            lockDescriptor = -1
        }
        if let stored = try vault.load(Self.keyEntry), stored.count == EvidenceCipher.keySize {
            key = stored
        } else if !exclusive {
            key = []  // no key yet means no item yet: nothing to read
        } else {
            let fresh = EvidenceCipher.newKey()
            try vault.store(fresh, as: Self.keyEntry)
            key = fresh
        }
        if exclusive { try removeLeftovers() }
    }

    deinit {
        if lockDescriptor >= 0 { close(lockDescriptor) }
    }

    // MARK: Adding

    /// Seals the file at `path` into the queue, hashing it on the way; the file itself is
    /// left alone (the caller removes a temporary capture once this returns).
    @discardableResult
    public func add(kind: EvidenceKind, contentType: String, incidentId: String, file path: String) throws -> EvidenceItem {
        guard let input = FileHandle(forReadingAtPath: path) else {
            throw FieldHALError(.io, subject: path, detail: "cannot read the evidence to queue")
        }
        defer { try? input.close() }
        return try add(kind: kind, contentType: contentType, incidentId: incidentId) {
            [UInt8](try input.read(upToCount: EvidenceCipher.chunkSize) ?? Data())
        }
    }

    @discardableResult
    public func add(kind: EvidenceKind, contentType: String, incidentId: String, bytes: [UInt8]) throws -> EvidenceItem {
        var remaining = bytes[...]
        return try add(kind: kind, contentType: contentType, incidentId: incidentId) {
            let chunk = Array(remaining.prefix(EvidenceCipher.chunkSize))
            remaining = remaining.dropFirst(chunk.count)
            return chunk
        }
    }

    private func add(kind: EvidenceKind, contentType: String, incidentId: String, read: () throws -> [UInt8]) throws -> EvidenceItem {
        let id = Self.newID()
        let writer = try AtomicFileWriter(path: dataPath(id))
        let sealed = try EvidenceCipher.seal(key: key, read: read, into: writer)
        try writer.commit()
        let item = EvidenceItem(id: id, incidentId: incidentId, kind: kind, contentType: contentType, size: sealed.size,
                                sha256: sealed.sha256, createdAt: Date(), phase: .queued)
        try save(item)
        return item
    }

    /// Records that evidence of `kind` could not be captured, and why, as a TEXT item.
    @discardableResult
    public func recordCaptureError(kind: EvidenceKind, incidentId: String, message: String) throws -> EvidenceItem {
        var item = try add(kind: .text, contentType: "text/plain; charset=utf-8", incidentId: incidentId,
                           bytes: Array("\(kind.rawValue) evidence not captured: \(message)".utf8))
        item.failedKind = kind
        try save(item)
        return item
    }

    // MARK: Reading and updating

    /// Every item, oldest first. An item file that does not open is reported, not dropped.
    public func items() throws -> [EvidenceItem] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".item") }
        return try names.map { name in
            let id = String(name.dropLast(5))
            guard let sealed = try AtomicFile.read(itemPath(id)), let plain = EvidenceCipher.openMessage(key: key, sealed) else {
                throw FieldHALError(.malformedData, subject: itemPath(id), detail: "a queued evidence item does not open",
                                    advice: "the queue key or the file was changed; keep the file and report it")
            }
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .secondsSince1970
            return try decoder.decode(EvidenceItem.self, from: Data(plain))
        }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    public func save(_ item: EvidenceItem) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        try AtomicFile.write(EvidenceCipher.sealMessage(key: key, Array(try encoder.encode(item))), to: itemPath(item.id))
    }

    /// Removes a confirmed item: its metadata first (so it is gone at once), then its data.
    public func remove(_ id: String) throws {
        if unlink(itemPath(id)) != 0 && errno != ENOENT {
            throw FieldHALError(.io, subject: itemPath(id), detail: String(cString: strerror(errno)))
        }
        unlink(dataPath(id))
    }

    /// Writes the item's plaintext to `path` (0600), verifying size and SHA-256 on the way.
    func decrypt(_ item: EvidenceItem, to path: String) throws {
        let writer = try AtomicFileWriter(path: path)
        var hash = SHA256()
        var size: Int64 = 0
        try EvidenceCipher.open(key: key, path: dataPath(item.id)) { chunk in
            hash.update(data: chunk)
            size += Int64(chunk.count)
            try writer.write(chunk)
        }
        guard size == item.size, EvidenceCipher.hex(Array(hash.finalize())) == item.sha256 else {
            throw FieldHALError(.malformedData, subject: dataPath(item.id), detail: "sealed evidence does not match its recorded size and SHA-256")
        }
        try writer.commit()
    }

    func dataPath(_ id: String) -> String { "\(directory)/\(id).data" }
    func itemPath(_ id: String) -> String { "\(directory)/\(id).item" }

    /// Temporary files of writes a kill interrupted, and payloads whose item never landed.
    private func removeLeftovers() throws {
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: directory))
        for name in names {
            let orphanData = name.hasSuffix(".data") && !names.contains(String(name.dropLast(5)) + ".item")
            if name.hasPrefix(".") || name.hasSuffix(".upload") || orphanData { unlink("\(directory)/\(name)") }
        }
    }

    static func newID() -> String {
        var bytes = [UInt8](repeating: 0, count: 12)
        randombytes_buf(&bytes, bytes.count)
        // Time first, so that names sort in creation order too.
        return String(format: "%013llx-", UInt64(Date().timeIntervalSince1970 * 1000)) + EvidenceCipher.hex(bytes)
    }
}
