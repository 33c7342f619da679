import CSodium
import FieldHAL
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An append-only log of lock events: one JSON line each, carrying the SHA-256 of the line
/// before it, so that an edited, reordered or deleted line breaks the chain. The lock keeps
/// the newest line's hash and the count in its sealed state, so cutting lines off the end
/// is caught too. A duress unlock is written exactly as a normal one.
public struct AuditLog: Sendable {
    public let path: String

    public struct Entry: Codable, Sendable, Equatable {
        public var seq: Int
        public var time: String
        public var event: String
        public var detail: String
        public var prev: String
        public var hash: String
    }

    public init(path: String) { self.path = path }

    /// Appends an event and returns the new head (count, hash). The line is fsynced before
    /// this returns.
    public func append(event: String, detail: String, at date: Date, after head: (count: Int, hash: String)) throws -> (count: Int, hash: String) {
        let time = ISO8601DateFormatter().string(from: date)
        let seq = head.count + 1
        let hash = Self.hash(seq: seq, time: time, event: event, detail: detail, prev: head.hash)
        let entry = Entry(seq: seq, time: time, event: event, detail: detail, prev: head.hash, hash: hash)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var line = Array(try encoder.encode(entry))
        line.append(10)
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw FieldHALError(.io, subject: "audit log \(path)", detail: "open: \(SystemError.describe())")
        }
        defer { close(descriptor) }
        let written = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == line.count, fsync(descriptor) == 0 else {
            throw FieldHALError(.io, subject: "audit log \(path)", detail: "append: \(SystemError.describe())")
        }
        return (seq, hash)
    }

    /// What `verify` found.
    public enum Verdict: Equatable, Sendable {
        case intact(entries: Int)
        /// The chain is whole but holds `extra` lines past the recorded head: a crash
        /// between writing the line and recording it. Not tampering.
        case intactWithUnrecordedTail(entries: Int, extra: Int)
        case broken(line: Int, reason: String)
    }

    /// Checks every line's hash and link, and the end against the recorded head.
    public func verify(recordedCount: Int, recordedHead: String) -> Verdict {
        // Our own read(2), not String(contentsOfFile:): Foundation leaks 4 KiB reading an empty
        // file (found by fuzz/run), and the daemon reads this log at every lock operation.
        let text = String(decoding: (try? AtomicFile.read(path)) ?? [], as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        var previous = ""
        var count = 0
        var headSeen = recordedCount == 0
        for (index, line) in lines.enumerated() {
            if line.isEmpty && index == lines.count - 1 { break }
            let number = index + 1
            guard let entry = try? JSONDecoder().decode(Entry.self, from: Data(line.utf8)) else {
                return .broken(line: number, reason: "not an audit entry (edited or cut)")
            }
            guard entry.seq == number else { return .broken(line: number, reason: "sequence \(entry.seq) where \(number) belongs (a line was removed or moved)") }
            guard entry.prev == previous else { return .broken(line: number, reason: "does not follow the line before it") }
            guard entry.hash == Self.hash(seq: entry.seq, time: entry.time, event: entry.event, detail: entry.detail, prev: entry.prev) else {
                return .broken(line: number, reason: "its content does not match its hash (edited)")
            }
            if entry.seq == recordedCount {
                guard entry.hash == recordedHead else { return .broken(line: number, reason: "differs from the line the lock recorded") }
                headSeen = true
            }
            previous = entry.hash
            count = number
        }
        guard count >= recordedCount, headSeen else {
            return .broken(line: count + 1, reason: "\(recordedCount - count) line(s) missing at the end (the lock recorded \(recordedCount))")
        }
        return count == recordedCount ? .intact(entries: count) : .intactWithUnrecordedTail(entries: count, extra: count - recordedCount)
    }

    /// The last line's sequence number and hash (nil for an empty log); `verify` says
    /// whether the lines before it can be trusted.
    public func head() -> (count: Int, hash: String)? {
        // Our own read(2), not String(contentsOfFile:): Foundation leaks 4 KiB reading an empty
        // file (found by fuzz/run), and the daemon reads this log at every lock operation.
        let text = String(decoding: (try? AtomicFile.read(path)) ?? [], as: UTF8.self)
        guard let last = text.split(separator: "\n").last,
              let entry = try? JSONDecoder().decode(Entry.self, from: Data(last.utf8)) else { return nil }
        return (entry.seq, entry.hash)
    }

    static func hash(seq: Int, time: String, event: String, detail: String, prev: String) -> String {
        let material = Array("\(seq)\u{1F}\(time)\u{1F}\(event)\u{1F}\(detail)\u{1F}\(prev)".utf8)
        var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
        _ = crypto_hash_sha256(&digest, material, UInt64(material.count))
        return digest.map { String(format: "%02x", $0) }.joined()
    }
}
