import Foundation
import TestSupport
import Testing
@testable import FieldHAL
@testable import FieldHALMedia

/// The OpenDML AVI writer, read back two ways: by our own walk of the RIFF structure (every
/// index entry must land on the frame it names, byte for byte) and by ffmpeg, which must
/// count and decode every frame. Small RIFFs (`segmentBytes`) cross the 1 GiB boundaries'
/// code paths with files of a few hundred kilobytes.
@Suite("Motion-JPEG AVI writer")
struct MJPEGAVIWriterTests {
    /// Three different cjpeg frames, 160x120, one of them an odd number of bytes (RIFF pads it).
    static func frames() async throws -> [[UInt8]] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fieldhal-avi-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var frames: [[UInt8]] = []
        for (index, quality) in [40, 75, 95].enumerated() {
            var ppm = Array("P6\n160 120\n255\n".utf8)
            for y in 0..<120 { for x in 0..<160 { ppm += [UInt8((x + index * 30) & 0xFF), UInt8(y * 2), UInt8((x ^ y) & 0xFF)] } }
            try Data(ppm).write(to: URL(fileURLWithPath: "\(directory)/in.ppm"))
            frames.append([UInt8](try await MotionJPEGTests.tool("/usr/bin/cjpeg", ["-quality", "\(quality)", "\(directory)/in.ppm"])))
        }
        // A one-byte comment after SOI makes the frame's length odd if it was even, and keeps it a JPEG.
        if frames.allSatisfy({ $0.count % 2 == 0 }) { frames[1].insert(contentsOf: [0xFF, 0xFE, 0x00, 0x03, 0x21], at: 2) }
        return frames
    }

    static func scratchPath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("fieldhal-avi-\(UUID().uuidString).avi").path
    }

    /// Writes `count` frames (cycling through `frames`) until the writer is full; returns
    /// what was written, in order, the file's size and why it stopped early, if it did.
    static func record(_ frames: [[UInt8]], count: Int, to path: String, segmentBytes: Int = MJPEGAVIWriter.segmentLimit,
                       disk: SimulatedDisk? = nil) throws -> (written: [[UInt8]], bytes: Int, full: MJPEGAVIWriter.Full?) {
        let writer = try MJPEGAVIWriter(path: path, width: 160, height: 120, segmentBytes: segmentBytes,
                                        freeSpace: disk.map { disk in { disk.capacity - disk.used } })
        var written: [[UInt8]] = [], full: MJPEGAVIWriter.Full?
        for index in 0..<count {
            let frame = frames[index % frames.count]
            full = writer.full(forFrameOf: frame.count)
            if full != nil { break }
            try frame.withUnsafeBytes { try writer.append(jpeg: $0) }
            disk?.used = writer.bytesWritten
            written.append(frame)
        }
        let bytes = try writer.finish(duration: .seconds(Double(written.count) / 25))
        return (written, bytes, full)
    }

    /// A file system of `capacity` bytes that only this recording writes to.
    final class SimulatedDisk {
        let capacity: Int
        var used = 0
        init(capacity: Int) { self.capacity = capacity }
    }

    @Test func aShortClipIsOneRIFFThatFFmpegReadsWhole() async throws {
        let frames = try await Self.frames()
        let path = Self.scratchPath()
        defer { unlink(path) }
        let (written, bytes, full) = try Self.record(frames, count: 50, to: path)
        #expect(full == nil)
        let file = try AVIFile(path: path)
        #expect(file.bytes.count == bytes)
        #expect(file.riffs.map(\.type) == ["AVI "])
        try file.checkIndexes(against: written)
        #expect(try await FFmpeg.streamSummary(path) == "mjpeg,160,120,25/1,50")
        try await FFmpeg.decodesWithoutError(path)
    }

    @Test func aLongRecordingGoesOnInAVIXRIFFs() async throws {
        let frames = try await Self.frames()
        let path = Self.scratchPath()
        defer { unlink(path) }
        let segment = 64 * 1024
        let (written, _, _) = try Self.record(frames, count: 300, to: path, segmentBytes: segment)
        #expect(written.count == 300)
        let file = try AVIFile(path: path)
        #expect(file.riffs.count > 5, "\(file.riffs.count) RIFFs")
        #expect(file.riffs.first?.type == "AVI " && file.riffs.dropFirst().allSatisfy { $0.type == "AVIX" })
        #expect(file.riffs.allSatisfy { $0.size + 8 <= segment }, "every RIFF within its limit")
        try file.checkIndexes(against: written)
        #expect(file.avihTotalFrames == file.legacyIndexFrames, "avih counts the first RIFF's frames (OpenDML)")
        #expect(file.avihTotalFrames < 300)
        #expect(try await FFmpeg.streamSummary(path) == "mjpeg,160,120,25/1,300")
        try await FFmpeg.decodesWithoutError(path)
    }

    @Test func theSuperIndexFullEndsTheRecordingAndTheFileStaysWhole() async throws {
        let frames = try await Self.frames()
        let path = Self.scratchPath()
        defer { unlink(path) }
        // RIFFs that hold two or three frames each: 256 of them fill the super index.
        let segment = 5 * 1024 + 2 * (frames.map(\.count).max()! + 8) + 256
        let (written, _, full) = try Self.record(frames, count: 10_000, to: path, segmentBytes: segment)
        #expect(full == .sizeLimit)
        #expect(written.count < 10_000)
        let file = try AVIFile(path: path)
        #expect(file.riffs.count == MJPEGAVIWriter.segmentCapacity)
        try file.checkIndexes(against: written)
        #expect(try await FFmpeg.streamSummary(path) == "mjpeg,160,120,25/1,\(written.count)")
    }

    @Test func aFrameLargerThanARIFFIsRefusedBeforeAnythingIsWritten() throws {
        let path = Self.scratchPath()
        defer { unlink(path) }
        let writer = try MJPEGAVIWriter(path: path, width: 160, height: 120, segmentBytes: 8 * 1024)
        #expect(writer.full(forFrameOf: 9 * 1024) == .sizeLimit)
        #expect(writer.full(forFrameOf: 1024) == nil)
        #expect(!FileManager.default.fileExists(atPath: path), "nothing at the path before finish")
        try writer.finish(duration: .zero)
        #expect(try AVIFile(path: path).riffs.map(\.type) == ["AVI "], "an empty recording is still a valid file")
    }

    @Test func aFillingDiskStopsTheRecordingAndKeepsTheClip() async throws {
        let frames = try await Self.frames()
        let path = Self.scratchPath()
        defer { unlink(path) }
        let disk = SimulatedDisk(capacity: 3 << 20)
        let (written, bytes, full) = try Self.record(frames, count: 100_000, to: path, segmentBytes: 256 * 1024, disk: disk)
        #expect(full == .diskFull)
        #expect(bytes <= disk.capacity - MJPEGAVIWriter.diskMargin, "the indexes fitted in what was left: \(bytes) bytes")
        #expect(bytes > disk.capacity - MJPEGAVIWriter.diskMargin - 64 * 1024, "stopped near the margin, not long before: \(bytes) bytes")
        let file = try AVIFile(path: path)
        #expect(file.riffs.count > 5)
        try file.checkIndexes(against: written)
        #expect(try await FFmpeg.streamSummary(path) == "mjpeg,160,120,25/1,\(written.count)")
    }

    /// Past 4 GiB at the real RIFF size: 64-bit offsets in the super index. About 4.3 GB on
    /// disk, so only with FIELDHAL_LARGE_FILE_TESTS=1 (figures in docs/reliability.md).
    @Test(.enabled(if: ProcessInfo.processInfo.environment["FIELDHAL_LARGE_FILE_TESTS"] == "1"))
    func pastFourGibibytesAtTheRealLimit() async throws {
        let frames = try await Self.frames()
        let big = frames.map { frame in  // ~1 MiB frames: a comment segment of 65 533 bytes, repeated
            var padded = Array(frame.prefix(2))
            for _ in 0..<16 { padded += [0xFF, 0xFE, 0xFF, 0xFF] + [UInt8](repeating: 0x20, count: 65_533) }
            return padded + frame.dropFirst(2)
        }
        let path = Self.scratchPath()
        defer { unlink(path) }
        let count = (4 << 30) / big[0].count + 300
        let started = ContinuousClock.now
        let (written, bytes, _) = try Self.record(big, count: count, to: path)
        let wrote = ContinuousClock.now - started
        #expect(written.count == count)
        #expect(bytes > 4 << 30)
        // The super index's entries, read from the header: each points at an ix00, the last past 4 GiB.
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        let header = [UInt8](try handle.read(upToCount: 8192) ?? Data())
        let indx = try #require((0..<(header.count - 4)).first { header[$0..<($0 + 4)].elementsEqual("indx".utf8) })
        let entries = Int(AVIFile.u32(header, indx + 12))
        #expect(entries == 5, "five RIFFs of at most 1 GiB")
        var offsets: [UInt64] = []
        for entry in 0..<entries {
            let offset = AVIFile.u64(header, indx + 32 + 16 * entry)
            try handle.seek(toOffset: offset)
            #expect(try handle.read(upToCount: 4) == Data("ix00".utf8), "super index entry \(entry) at \(offset)")
            offsets.append(offset)
        }
        #expect((offsets.last ?? 0) > 4 << 30)
        let summary = try await FFmpeg.streamSummary(path)
        #expect(summary == "mjpeg,160,120,25/1,\(count)")
        print("large AVI: \(count) frames, \(bytes) bytes written in \(wrote); ffprobe: \(summary)")
    }
}

/// ffprobe and ffmpeg as the reference reader.
enum FFmpeg {
    /// "codec,width,height,frame rate,packets" for the video stream.
    static func streamSummary(_ path: String) async throws -> String {
        let output = try await MotionJPEGTests.tool("/usr/bin/ffprobe", ["-v", "error", "-count_packets", "-select_streams", "v:0",
                                                                          "-show_entries", "stream=codec_name,width,height,r_frame_rate,nb_read_packets",
                                                                          "-of", "csv=p=0", path])
        return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Every frame decodes (`-xerror` makes the first decoding error fail the run).
    static func decodesWithoutError(_ path: String) async throws {
        _ = try await MotionJPEGTests.tool("/usr/bin/ffmpeg", ["-nostdin", "-v", "error", "-xerror", "-i", path, "-f", "null", "-"])
    }
}

/// Our own reading of the file: the RIFFs, and each index checked against the frames.
struct AVIFile {
    struct RIFF { var type: String; var start: Int; var size: Int }
    let bytes: [UInt8]
    let riffs: [RIFF]

    init(path: String) throws {
        bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var riffs: [RIFF] = []
        var offset = 0
        while offset + 12 <= bytes.count {
            guard Self.fourCC(bytes, offset) == "RIFF" else { throw AVIError("no RIFF at \(offset)") }
            let size = Int(Self.u32(bytes, offset + 4))
            riffs.append(RIFF(type: Self.fourCC(bytes, offset + 8), start: offset, size: size))
            offset += 8 + size
        }
        guard offset == bytes.count else { throw AVIError("the RIFFs cover \(offset) of \(bytes.count) bytes") }
        self.riffs = riffs
    }

    var avihTotalFrames: Int { Int(Self.u32(bytes, find("avih", in: 0..<bytes.count)! + 8 + 16)) }
    var legacyIndexFrames: Int { Int(Self.u32(bytes, find("idx1", in: 0..<bytes.count)! + 4)) / 16 }

    /// The super index, every standard index, idx1, strh's length and dmlh's total, each
    /// checked against the frames in the order they were written.
    func checkIndexes(against frames: [[UInt8]]) throws {
        let indx = find("indx", in: 0..<bytes.count)!
        let used = Int(Self.u32(bytes, indx + 12))
        guard used == riffs.count else { throw AVIError("super index: \(used) entries for \(riffs.count) RIFFs") }
        var frameNumber = 0
        for entry in 0..<used {
            let at = indx + 32 + 16 * entry
            let indexOffset = Int(Self.u64(bytes, at)), indexSize = Int(Self.u32(bytes, at + 8)), duration = Int(Self.u32(bytes, at + 12))
            let riff = riffs[entry]
            guard (riff.start..<(riff.start + 8 + riff.size)).contains(indexOffset), Self.fourCC(bytes, indexOffset) == "ix00",
                  Int(Self.u32(bytes, indexOffset + 4)) + 8 == indexSize else { throw AVIError("super index entry \(entry) points at no ix00 of RIFF \(entry)") }
            let count = Int(Self.u32(bytes, indexOffset + 12))
            guard count == duration else { throw AVIError("ix00 \(entry): \(count) entries, super index says \(duration)") }
            let base = Int(Self.u64(bytes, indexOffset + 20))
            for slot in 0..<count {
                let dataOffset = base + Int(Self.u32(bytes, indexOffset + 32 + 8 * slot))
                let size = Int(Self.u32(bytes, indexOffset + 36 + 8 * slot))
                try checkFrame(at: dataOffset - 8, size: size, is: frames, frameNumber, "ix00 \(entry) entry \(slot)")
                frameNumber += 1
            }
        }
        guard frameNumber == frames.count else { throw AVIError("the standard indexes list \(frameNumber) of \(frames.count) frames") }

        let movi = find("movi", in: 0..<(riffs[0].start + 8 + riffs[0].size))!
        let idx1 = find("idx1", in: 0..<(riffs[0].start + 8 + riffs[0].size))!
        for slot in 0..<(Int(Self.u32(bytes, idx1 + 4)) / 16) {
            let at = idx1 + 8 + 16 * slot
            try checkFrame(at: movi + Int(Self.u32(bytes, at + 8)), size: Int(Self.u32(bytes, at + 12)), is: frames, slot, "idx1 entry \(slot)")
        }
        let strh = find("strh", in: 0..<movi)!
        guard Int(Self.u32(bytes, strh + 8 + 32)) == frames.count else { throw AVIError("strh length is not the frame count") }
        let dmlh = find("dmlh", in: 0..<movi)!
        guard Int(Self.u32(bytes, dmlh + 8)) == frames.count else { throw AVIError("dmlh total is not the frame count") }
    }

    private func checkFrame(at chunk: Int, size: Int, is frames: [[UInt8]], _ number: Int, _ what: String) throws {
        guard number < frames.count, Self.fourCC(bytes, chunk) == "00dc", Int(Self.u32(bytes, chunk + 4)) == size,
              Array(bytes[(chunk + 8)..<(chunk + 8 + size)]) == frames[number] else {
            throw AVIError("\(what) does not point at frame \(number)")
        }
    }

    /// The first chunk or list type `code` in `range` (a plain scan: frames are JPEG, whose
    /// bytes never spell these four letters at a chunk boundary in our test pictures).
    private func find(_ code: String, in range: Range<Int>) -> Int? {
        let needle = Array(code.utf8)
        var offset = range.lowerBound
        while offset + 4 <= range.upperBound {
            if bytes[offset] == needle[0], Array(bytes[offset..<(offset + 4)]) == needle { return offset }
            offset += 1
        }
        return nil
    }

    static func fourCC(_ bytes: [UInt8], _ at: Int) -> String { String(decoding: bytes[at..<(at + 4)], as: UTF8.self) }
    static func u32(_ bytes: [UInt8], _ at: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(bytes[at + $1]) << (8 * $1) } }
    static func u64(_ bytes: [UInt8], _ at: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(bytes[at + $1]) << (8 * $1) } }
}

struct AVIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
