import FieldHAL
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Streams PCM to a RIFF/WAVE file: the header is written first with placeholder sizes,
/// samples are appended as they arrive, and `finish()` patches the sizes and commits the
/// file atomically. Memory stays bounded by the caller's chunk size. Backends share it.
public final class WAVFileWriter {
    public let sampleRate: Int
    public let channels: Int
    public let format: SampleFormat
    private let file: AtomicFileWriter
    private var dataBytes = 0
    public private(set) var levels = AudioLevelMeter()

    public convenience init(path: String, sampleRate: Int, channels: Int, format: SampleFormat) throws {
        try self.init(.path(path), sampleRate: sampleRate, channels: channels, format: format)
    }

    public init(_ destination: RecordingDestination, sampleRate: Int, channels: Int, format: SampleFormat) throws {
        self.sampleRate = sampleRate
        self.channels = channels
        self.format = format
        file = try AtomicFileWriter(destination, mode: 0o640)
        try file.write(Self.header(sampleRate: sampleRate, channels: channels, format: format, dataBytes: 0))
    }

    public var framesWritten: Int { dataBytes / (channels * format.bytesPerSample) }

    /// Appends interleaved little-endian samples, whole frames only.
    public func append(_ samples: UnsafeRawBufferPointer) throws {
        precondition(samples.count % (channels * format.bytesPerSample) == 0, "partial frame")
        levels.measure(samples, format: format)
        try file.write(samples)
        dataBytes += samples.count
    }

    /// Patches the header's sizes and commits the file.
    public func finish() throws {
        try file.write(Self.header(sampleRate: sampleRate, channels: channels, format: format, dataBytes: dataBytes), at: 0)
        try file.commit()
    }

    /// The canonical 44-byte PCM header.
    public static func header(sampleRate: Int, channels: Int, format: SampleFormat, dataBytes: Int) -> [UInt8] {
        let bytesPerSample = format.bytesPerSample
        var header: [UInt8] = []
        func append32(_ value: Int) { header += withUnsafeBytes(of: UInt32(truncatingIfNeeded: value).littleEndian, Array.init) }
        func append16(_ value: Int) { header += withUnsafeBytes(of: UInt16(truncatingIfNeeded: value).littleEndian, Array.init) }
        header += Array("RIFF".utf8); append32(36 + dataBytes)
        header += Array("WAVE".utf8)
        header += Array("fmt ".utf8); append32(16)
        append16(1)  // PCM
        append16(channels)
        append32(sampleRate)
        append32(sampleRate * channels * bytesPerSample)
        append16(channels * bytesPerSample)
        append16(bytesPerSample * 8)
        header += Array("data".utf8); append32(dataBytes)
        return header
    }
}

/// Peak and RMS levels in dBFS, clamped to expo-av's metering range −160…0.
public struct AudioLevelMeter: Sendable {
    private var peak = 0.0
    private var sumOfSquares = 0.0
    private var sampleCount = 0

    public init() {}

    public static let floor = -160.0

    public mutating func measure(_ samples: UnsafeRawBufferPointer, format: SampleFormat) {
        switch format {
        case .s16le:
            for index in stride(from: 0, to: samples.count - 1, by: 2) {
                let raw = Int16(littleEndian: samples.loadUnaligned(fromByteOffset: index, as: Int16.self))
                add(Double(raw) / 32768.0)
            }
        case .s32le:
            for index in stride(from: 0, to: samples.count - 3, by: 4) {
                let raw = Int32(littleEndian: samples.loadUnaligned(fromByteOffset: index, as: Int32.self))
                add(Double(raw) / 2147483648.0)
            }
        }
    }

    private mutating func add(_ value: Double) {
        peak = max(peak, abs(value))
        sumOfSquares += value * value
        sampleCount += 1
    }

    public var peakDBFS: Double { Self.dbfs(peak) }
    public var rmsDBFS: Double { Self.dbfs(sampleCount == 0 ? 0 : (sumOfSquares / Double(sampleCount)).squareRoot()) }

    static func dbfs(_ amplitude: Double) -> Double {
        guard amplitude > 0 else { return floor }
        return min(0, max(floor, 20 * log10(amplitude)))
    }
}
