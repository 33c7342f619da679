import FieldHAL
import FieldHALMedia
import Foundation
import Testing
import TestSupport
import Transrify
@testable import TransrifyLabServer

/// `RecordingExport` against segments a kit could send wrong: another format mid-recording,
/// bytes that are no RIFF file, a segment twice, a header whose sizes overrun the file.
@Suite struct RecordingExportTests {
    func wav(_ directory: String, _ name: String, rate: Int = 48_000, seconds: Double = 0.5) throws -> String {
        let path = directory + "/" + name
        let writer = try WAVFileWriter(path: path, sampleRate: rate, channels: 1, format: .s16le)
        let samples = [Int16](repeating: 1000, count: Int(Double(rate) * seconds))
        try samples.withUnsafeBytes { try writer.append($0) }
        try writer.finish()
        return path
    }

    func part(_ sequence: Int, _ path: String) -> RecordingExport.Part {
        RecordingExport.Part(segment: EvidenceSegment(recording: "r", sequence: sequence, startedAtMs: 0, durationMs: 500, previousSha256: nil), path: path)
    }

    @Test func segmentsJoinInOrderEachOnce() throws {
        let directory = scratchDirectory("export-unit")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let a = try wav(directory, "a.wav"), b = try wav(directory, "b.wav")
        let seconds = try RecordingExport.join(kind: "AUDIO", [part(1, b), part(0, a), part(1, b)], to: directory + "/out.wav")
        #expect(seconds == 1.0)
        let size = try FileManager.default.attributesOfItem(atPath: directory + "/out.wav")[.size] as? Int
        #expect(size == 44 + 2 * 24_000 * 2, "one header, two segments of samples")
    }

    @Test func aSegmentOfAnotherFormatOrNotRIFFOrTruncatedIsRefusedAndSaysWhich() throws {
        let directory = scratchDirectory("export-bad")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let a = try wav(directory, "a.wav"), slow = try wav(directory, "slow.wav", rate: 44_100)
        #expect(throws: RecordingExport.Failure.self) { try RecordingExport.join(kind: "AUDIO", [part(0, a), part(1, slow)], to: directory + "/1.wav") }
        do {
            _ = try RecordingExport.join(kind: "AUDIO", [part(0, a), part(1, slow)], to: directory + "/1.wav")
        } catch let failure as RecordingExport.Failure {
            #expect(failure.description == "segment 1 is 44100 Hz × 1, S16_LE; the first was 48000 Hz × 1, S16_LE")
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/1.wav"), "nothing half-written is left")

        let junk = directory + "/junk"
        try Data("<html>not a recording</html>".utf8).write(to: URL(fileURLWithPath: junk))
        #expect { try RecordingExport.join(kind: "VIDEO", [part(0, junk)], to: directory + "/2.avi") } throws: {
            "\($0)" == "segment 0 is not a RIFF AVI file"
        }
        // A data chunk that claims more than the file holds: the chunk is not read past the end.
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: a)))
        bytes[40..<44] = [0xff, 0xff, 0xff, 0x7f]
        let lying = directory + "/lying.wav"
        try Data(bytes).write(to: URL(fileURLWithPath: lying))
        #expect { try RecordingExport.join(kind: "AUDIO", [part(0, lying)], to: directory + "/3.wav") } throws: {
            "\($0)" == "segment 0 has no data chunk"
        }
        #expect { try RecordingExport.join(kind: "PHOTO", [part(0, a)], to: directory + "/4") } throws: {
            "\($0)".contains("only AUDIO and VIDEO")
        }
    }
}
