import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A vibration motor that records what it was asked to play. Tests read `played`; the
/// CLI and demos can also have every pattern appended to a JSON-lines log file.
actor FakeHapticsEngine: HapticsEngine {
    nonisolated let deviceName: String
    private let logFile: String?
    private let realtime: Bool
    /// The most recent patterns, oldest first: at most `recentLimit` (a daemon on the fake
    /// kit plays one per alert for months; the log file, when asked for, keeps them all).
    private(set) var played: [HapticPattern] = []
    /// Every pattern played.
    private(set) var playedCount = 0
    static let recentLimit = 64

    init(deviceName: String, logFile: String?, realtime: Bool) {
        self.deviceName = deviceName
        self.logFile = logFile
        self.realtime = realtime
    }

    func play(_ pattern: HapticPattern) async throws -> HapticsPlayed {
        let subject = "haptics \(deviceName)"
        try pattern.validate(subject: subject)
        if realtime {
            let total = pattern.steps.reduce(0) { $0 + $1.durationMilliseconds + $1.pauseMilliseconds }
            try await sleepCancellable(for: .milliseconds(total), subject: subject)
        }
        played.append(pattern)
        if played.count > Self.recentLimit { played.removeFirst(played.count - Self.recentLimit) }
        playedCount += 1
        if let logFile {
            struct Entry: Encodable { let time: Date; let pattern: String; let steps: [HapticStep] }
            try JSONLinesLog.append(Entry(time: Date(), pattern: pattern.name, steps: pattern.steps), to: logFile, subject: subject)
        }
        return HapticsPlayed(pattern.steps)
    }

    func close() {}
}
