import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The log the fake output devices (haptics, speaker) can keep: one JSON object a line, so
/// a demo or a test in another process can see what was played.
enum JSONLinesLog {
    static func append(_ entry: some Encodable, to path: String, subject: String) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = .sortedKeys
        var line = try encoder.encode(entry)
        line.append(0x0A)
        // O_APPEND and one write per line: the haptics and the speaker may log to the same
        // file at the same moment (an alert plays both), and neither may clobber the other.
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw FieldHALError(.io, subject: subject, detail: "cannot open log file \(path): \(SystemError.describe())")
        }
        defer { close(descriptor) }
        let written = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == line.count else {
            throw FieldHALError(.io, subject: subject, detail: "cannot append to log file \(path)")
        }
    }
}
