import FieldHAL
import FieldHALMedia
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A microphone that records a sine tone, or loops the samples of a WAV file, to a real
/// WAV file streamed to disk. In real time by default, as a sound card would; with
/// `realtime = false` it records as fast as it can (tests, demos).
final class FakeMicrophone: Microphone {
    enum Source: Sendable {
        case tone(frequency: Double, amplitude: Double)
        /// Mono samples in −1…1, played in a loop at the requested rate.
        case samples([Double])
    }

    let deviceName: String
    private let source: Source
    private let realtime: Bool
    /// A recording longer than this ends early, as if the device were unplugged then.
    private let unplugAfter: Duration?

    init(deviceName: String, source: Source, realtime: Bool, unplugAfter: Duration? = nil) {
        self.deviceName = deviceName
        self.source = source
        self.realtime = realtime
        self.unplugAfter = unplugAfter
    }

    func record(_ request: RecordingRequest, to destination: RecordingDestination) async throws -> AudioRecording {
        let subject = "microphone \(deviceName)"
        try request.validate(subject: subject)
        let writer = try WAVFileWriter(destination, sampleRate: request.sampleRate, channels: request.channels, format: request.format)
        // Unplugged partway: the samples taken before it, then `endedEarly`.
        let unpluggedAt = unplugAfter.map { max(1, Int(($0.seconds * Double(request.sampleRate)).rounded())) }
        let totalFrames = min(request.frameCount, unpluggedAt ?? request.frameCount)
        let endedEarly = unplugAfter.flatMap { totalFrames < request.frameCount ? FakePlugin.unplugged(subject, after: $0) : nil }
        let chunkFrames = max(1, request.sampleRate / 10)  // 100 ms, as a period of a capture device
        let start = ContinuousClock.now
        var frame = 0
        var chunk: [UInt8] = []
        chunk.reserveCapacity(chunkFrames * request.channels * request.format.bytesPerSample)
        while frame < totalFrames {
            let count = min(chunkFrames, totalFrames - frame)
            chunk.removeAll(keepingCapacity: true)
            for offset in 0..<count {
                let value = sample(at: frame + offset, rate: request.sampleRate)
                for _ in 0..<request.channels { Self.append(value, format: request.format, to: &chunk) }
            }
            if realtime {
                try await sleepCancellable(until: start + .milliseconds((frame + count) * 1000 / request.sampleRate), subject: subject)
            } else if Task.isCancelled {
                throw FieldHALError.cancelled(subject)
            }
            try chunk.withUnsafeBytes { try writer.append($0) }
            frame += count
        }
        try writer.finish()
        return AudioRecording(path: destination.name, sampleRate: request.sampleRate, channels: request.channels, format: request.format,
                              frames: writer.framesWritten, peakDBFS: writer.levels.peakDBFS, rmsDBFS: writer.levels.rmsDBFS,
                              endedEarly: endedEarly)
    }

    private func sample(at frame: Int, rate: Int) -> Double {
        switch source {
        case .tone(let frequency, let amplitude):
            amplitude * sin(2 * .pi * frequency * Double(frame) / Double(rate))
        case .samples(let samples):
            samples.isEmpty ? 0 : samples[frame % samples.count]
        }
    }

    private static func append(_ value: Double, format: SampleFormat, to bytes: inout [UInt8]) {
        let clamped = min(1, max(-1, value))
        switch format {
        case .s16le:
            let raw = Int16(clamped * 32767).littleEndian
            withUnsafeBytes(of: raw) { bytes += $0 }
        case .s32le:
            let raw = Int32(clamped * 2147483647).littleEndian
            withUnsafeBytes(of: raw) { bytes += $0 }
        }
    }

    func close() async {}
}

/// Reads the samples of a PCM WAV file (16- or 32-bit), mixed down to mono.
enum WAVSampleReader {
    static func monoSamples(_ bytes: [UInt8], file: String) throws -> [Double] {
        func fail(_ detail: String) -> FieldHALError {
            FieldHALError(.malformedData, subject: "microphone \(file)", detail: detail, advice: "give a PCM WAV file")
        }
        func uint(_ offset: Int, _ size: Int) -> Int {
            (0..<size).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
        }
        guard bytes.count >= 12, bytes[0..<4].elementsEqual("RIFF".utf8), bytes[8..<12].elementsEqual("WAVE".utf8) else {
            throw fail("not a RIFF/WAVE file")
        }
        var offset = 12
        var channels = 0, bitsPerSample = 0
        while offset + 8 <= bytes.count {
            let size = uint(offset + 4, 4)
            let body = offset + 8
            guard size >= 0, body + size <= bytes.count || bytes[offset..<offset + 4].elementsEqual("data".utf8) else {
                throw fail("chunk at \(offset) runs past the end of the file")
            }
            if bytes[offset..<offset + 4].elementsEqual("fmt ".utf8) {
                guard size >= 16, uint(body, 2) == 1 else { throw fail("not integer PCM") }
                channels = uint(body + 2, 2)
                bitsPerSample = uint(body + 14, 2)
            } else if bytes[offset..<offset + 4].elementsEqual("data".utf8) {
                guard channels > 0, bitsPerSample == 16 || bitsPerSample == 32 else { throw fail("16- or 32-bit PCM needed") }
                let width = bitsPerSample / 8
                let end = min(bytes.count, body + size)
                var samples: [Double] = []
                var frameStart = body
                while frameStart + channels * width <= end {
                    var sum = 0.0
                    for channel in 0..<channels {
                        let raw = uint(frameStart + channel * width, width)
                        let signed = width == 2 ? Double(Int16(truncatingIfNeeded: raw)) / 32768 : Double(Int32(truncatingIfNeeded: raw)) / 2147483648
                        sum += signed
                    }
                    samples.append(sum / Double(channels))
                    frameStart += channels * width
                }
                return samples
            }
            offset = body + size + (size & 1)
        }
        throw fail("no data chunk")
    }
}
