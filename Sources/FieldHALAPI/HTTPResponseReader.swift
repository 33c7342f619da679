import FieldHAL
import Foundation

/// An HTTP/1.1 response read as it arrives: its head, then its body's bytes (de-chunked),
/// then its end. Bytes are fed as the socket gives them, split anywhere.
///
/// The one reader of the daemon's answers outside SwiftNIO: the event stream's blocking
/// reader feeds it a body as it comes, the front's one-call `DaemonSocket` an answer
/// whole. Bounds: a head of 64 KiB, a chunk-size or trailer
/// line of 4 KiB; anything else malformed is `protocolError`, never a crash.
public struct HTTPResponseReader: Sendable {
    public enum Part: Equatable, Sendable {
        case head(status: Int, headers: [String: String])
        case body([UInt8])
        case end
    }

    private enum Stage: Equatable {
        case head
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        /// A body of `remaining` bytes, or up to the close when nil.
        case identity(remaining: Int?)
        case done
    }

    public static let headLimit = 64 * 1024
    public static let lineLimit = 4 * 1024

    private var buffer: [UInt8] = []
    private var start = 0
    private var stage = Stage.head
    public let subject: String

    public init(subject: String) {
        self.subject = subject
    }

    public var isDone: Bool { stage == .done }

    public mutating func feed(_ bytes: some Collection<UInt8>) throws(FieldHALError) -> [Part] {
        try feed(ArraySlice(bytes))
    }

    /// The same for a read's bytes, not generic: a caller in another module reaches a
    /// generic `feed` unspecialised, through witness tables and metadata lookups, and an
    /// event stream pays that for every event, read cold (`bench api-gps`).
    public mutating func feed(_ bytes: ArraySlice<UInt8>) throws(FieldHALError) -> [Part] {
        buffer.append(contentsOf: bytes)
        var parts: [Part] = []
        while try step(&parts) {}
        // Drop what has been read, now and then (not per byte: a long stream stays linear).
        if start > 0, start == buffer.count || start > 64 * 1024 {
            buffer.removeFirst(start)
            start = 0
        }
        return parts
    }

    /// The connection closed: the end of a body that runs to the close, else an error.
    public mutating func closed() throws(FieldHALError) -> [Part] {
        switch stage {
        case .done: return []
        case .identity(remaining: nil):
            stage = .done
            return [.end]
        case .head where buffer.count == start:
            throw FieldHALError(.disconnected, subject: subject, detail: "the daemon closed the connection without an answer",
                                advice: "is the daemon stopping or restarting? (journalctl -u fieldhal)")
        default:
            throw FieldHALError(.disconnected, subject: subject, detail: "the daemon ended the connection mid-answer",
                                advice: "is the daemon stopping or restarting? (journalctl -u fieldhal)")
        }
    }

    private func malformed(_ detail: String) -> FieldHALError {
        FieldHALError(.protocolError, subject: subject, detail: "the daemon's answer is not HTTP/1.1: \(detail)",
                      advice: "is it a FieldHAL daemon on this socket?")
    }

    /// One step of the parse; false when it needs more bytes (or is done).
    private mutating func step(_ parts: inout [Part]) throws(FieldHALError) -> Bool {
        let available = buffer.count - start
        switch stage {
        case .done:
            start = buffer.count
            return false
        case .head:
            guard let end = find([13, 10, 13, 10]) else {
                if available > Self.headLimit { throw malformed("a head over \(Self.headLimit) bytes") }
                return false
            }
            let text = String(decoding: buffer[start..<end], as: UTF8.self)
            start = end + 4
            var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false).makeIterator()
            let statusLine = lines.next() ?? ""
            let fields = statusLine.split(separator: " ", maxSplits: 2)
            guard fields.count >= 2, fields[0].hasPrefix("HTTP/1."), let status = Int(fields[1]), (100...599).contains(status) else {
                throw malformed("the status line \"\(statusLine.prefix(80))\"")
            }
            var headers: [String: String] = [:]
            while let line = lines.next() {
                guard let colon = line.firstIndex(of: ":") else { throw malformed("the header line \"\(line.prefix(80))\"") }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            if (100..<200).contains(status) { return true }  // an informational answer: the real one follows
            parts.append(.head(status: status, headers: headers))
            if headers["transfer-encoding"]?.lowercased().hasSuffix("chunked") == true {
                stage = .chunkSize
            } else if let length = headers["content-length"] {
                guard let count = Int(length), count >= 0 else { throw malformed("Content-Length \"\(length.prefix(40))\"") }
                stage = .identity(remaining: count)
            } else {
                stage = .identity(remaining: nil)
            }
            return true
        case .chunkSize:
            guard let line = try lineBytes() else { return false }
            // By bytes, no Foundation: a chunk per event on a stream, each read cold.
            let size = (line.firstIndex(of: 0x3B).map { line[..<$0] } ?? line).trimmingSpaces()  // ";": an extension
            guard !size.isEmpty, size.count <= 15, let count = Int(String(decoding: size, as: UTF8.self), radix: 16), count >= 0 else {
                throw malformed("the chunk size \"\(String(decoding: line.prefix(40), as: UTF8.self))\"")
            }
            stage = count == 0 ? .trailers : .chunkData(remaining: count)
            return true
        case .chunkData(let remaining):
            guard available > 0 else { return false }
            let taken = min(remaining, available)
            parts.append(.body(Array(buffer[start..<start + taken])))
            start += taken
            stage = taken == remaining ? .chunkDataEnd : .chunkData(remaining: remaining - taken)
            return true
        case .chunkDataEnd:
            guard available >= 2 else { return false }
            guard buffer[start] == 13, buffer[start + 1] == 10 else { throw malformed("a chunk longer than its size") }
            start += 2
            stage = .chunkSize
            return true
        case .trailers:
            guard let line = try line() else { return false }
            if line.isEmpty {
                stage = .done
                parts.append(.end)
            }
            return true
        case .identity(let remaining):
            if remaining == 0 {
                stage = .done
                parts.append(.end)
                return true
            }
            guard available > 0 else { return false }
            let taken = min(remaining ?? available, available)
            parts.append(.body(Array(buffer[start..<start + taken])))
            start += taken
            stage = .identity(remaining: remaining.map { $0 - taken })
            return true
        }
    }

    /// The next CRLF-ended line, without its CRLF; nil until it is whole.
    private mutating func line() throws(FieldHALError) -> String? {
        try lineBytes().map { String(decoding: $0, as: UTF8.self) }
    }

    private mutating func lineBytes() throws(FieldHALError) -> ArraySlice<UInt8>? {
        guard let end = find([13, 10]) else {
            if buffer.count - start > Self.lineLimit { throw malformed("a line over \(Self.lineLimit) bytes") }
            return nil
        }
        let bytes = buffer[start..<end]
        start = end + 2
        return bytes
    }

    private func find(_ needle: [UInt8]) -> Int? {
        guard buffer.count - start >= needle.count else { return nil }
        var index = start
        while index + needle.count <= buffer.count {
            if buffer[index] == needle[0], buffer[index..<index + needle.count].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}

extension ArraySlice<UInt8> {
    /// Without leading and trailing spaces and tabs (a header value, a chunk size).
    package func trimmingSpaces() -> ArraySlice<UInt8> {
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else { return [] }
        return self[first...last]
    }
}
