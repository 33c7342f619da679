import FieldHAL
import Foundation

/// The log the fake output devices (haptics, speaker) can keep: one JSON object a line, so
/// a demo or a test in another process can see what was played.
enum JSONLinesLog {
    static func append(_ entry: some Encodable, to path: String, subject: String) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = .sortedKeys
        var line = try encoder.encode(entry)
        line.append(0x0A)
        guard let handle = FileHandle(forWritingAtPath: path) ?? {
            FileManager.default.createFile(atPath: path, contents: nil) ? FileHandle(forWritingAtPath: path) : nil
        }() else {
            throw FieldHALError(.io, subject: subject, detail: "cannot open log file \(path)")
        }
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: line)
    }
}
