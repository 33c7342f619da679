import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A speaker that records what it was asked to play, optionally into a JSON-lines log.
actor FakeSpeaker: Speaker {
    nonisolated let deviceName: String
    private let logFile: String?
    private let realtime: Bool
    /// The most recent clips' names, oldest first: at most `recentLimit` (a daemon on the
    /// fake kit plays one per alert for months; the log file, when asked for, keeps them all).
    private(set) var played: [String] = []
    /// Every clip played.
    private(set) var playedCount = 0
    static let recentLimit = 64

    init(deviceName: String, logFile: String?, realtime: Bool) {
        self.deviceName = deviceName
        self.logFile = logFile
        self.realtime = realtime
    }

    func play(_ clip: SoundClip) async throws {
        let subject = "speaker \(deviceName)"
        if realtime { try await sleepCancellable(for: clip.duration, subject: subject) }
        played.append(clip.name)
        if played.count > Self.recentLimit { played.removeFirst(played.count - Self.recentLimit) }
        playedCount += 1
        if let logFile {
            struct Entry: Encodable { let time: Date; let sound: String; let milliseconds: Int }
            try JSONLinesLog.append(Entry(time: Date(), sound: clip.name, milliseconds: clip.samples.count * 1000 / clip.sampleRate),
                                    to: logFile, subject: subject)
        }
    }

    func close() {}
}
