import FieldHAL
import Foundation

/// A vibration motor that records what it was asked to play. Tests read `played`; the
/// CLI and demos can also have every pattern appended to a JSON-lines log file.
actor FakeHapticsEngine: HapticsEngine {
    nonisolated let deviceName: String
    private let logFile: String?
    private let realtime: Bool
    private(set) var played: [HapticPattern] = []

    init(deviceName: String, logFile: String?, realtime: Bool) {
        self.deviceName = deviceName
        self.logFile = logFile
        self.realtime = realtime
    }

    func play(_ pattern: HapticPattern) async throws {
        let subject = "haptics \(deviceName)"
        try pattern.validate(subject: subject)
        if realtime {
            let total = pattern.steps.reduce(0) { $0 + $1.durationMilliseconds + $1.pauseMilliseconds }
            try await sleepCancellable(for: .milliseconds(total), subject: subject)
        }
        played.append(pattern)
        if let logFile { try appendLog(pattern, to: logFile) }
    }

    private func appendLog(_ pattern: HapticPattern, to path: String) throws {
        struct Entry: Encodable { let time: Date; let pattern: String; let steps: [HapticStep] }
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = .sortedKeys
        var line = try encoder.encode(Entry(time: Date(), pattern: pattern.name, steps: pattern.steps))
        line.append(0x0A)
        guard let handle = FileHandle(forWritingAtPath: path) ?? {
            FileManager.default.createFile(atPath: path, contents: nil) ? FileHandle(forWritingAtPath: path) : nil
        }() else {
            throw FieldHALError(.io, subject: "haptics \(deviceName)", detail: "cannot open log file \(path)")
        }
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: line)
    }

    func close() {}
}
