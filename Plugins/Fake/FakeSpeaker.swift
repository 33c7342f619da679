import FieldHAL
import Foundation

/// A speaker that records what it was asked to play, optionally into a JSON-lines log.
actor FakeSpeaker: Speaker {
    nonisolated let deviceName: String
    private let logFile: String?
    private let realtime: Bool
    private(set) var played: [String] = []

    init(deviceName: String, logFile: String?, realtime: Bool) {
        self.deviceName = deviceName
        self.logFile = logFile
        self.realtime = realtime
    }

    func play(_ clip: SoundClip) async throws {
        let subject = "speaker \(deviceName)"
        if realtime { try await sleepCancellable(for: clip.duration, subject: subject) }
        played.append(clip.name)
        if let logFile {
            struct Entry: Encodable { let time: Date; let sound: String; let milliseconds: Int }
            try JSONLinesLog.append(Entry(time: Date(), sound: clip.name, milliseconds: clip.samples.count * 1000 / clip.sampleRate),
                                    to: logFile, subject: subject)
        }
    }

    func close() {}
}
