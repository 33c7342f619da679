import Foundation
import TestSupport
import Testing
@testable import FieldHAL
@testable import FieldHALMedia

/// `MotionJPEG.withStandardHuffmanTables` against libjpeg-turbo's own tools: cjpeg writes
/// the T.81 Annex K.3 tables by default, so its output is the reference for ours, and
/// djpeg proves that a frame with the tables put back decodes to the same pixels.
@Suite("Motion-JPEG Huffman tables")
struct MotionJPEGTests {
    /// A 64x48 colour test picture, encoded by cjpeg (baseline, standard tables, 4:2:0).
    static func referenceJPEG() async throws -> [UInt8] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fieldhal-mjpeg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var ppm = Array("P6\n64 48\n255\n".utf8)
        for y in 0..<48 { for x in 0..<64 { ppm += [UInt8(x * 4), UInt8(y * 5), UInt8((x ^ y) * 4 & 0xFF)] } }
        try Data(ppm).write(to: URL(fileURLWithPath: "\(directory)/in.ppm"))
        let jpeg = try await tool("/usr/bin/cjpeg", ["-quality", "85", "\(directory)/in.ppm"])
        return [UInt8](jpeg)
    }

    static func tool(_ path: String, _ arguments: [String], input: [UInt8]? = nil) async throws -> Data {
        try await offPool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
            let output = Pipe(), inputPipe = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            process.standardInput = input == nil ? FileHandle.nullDevice : inputPipe
            try process.run()
            if let input {
                try inputPipe.fileHandleForWriting.write(contentsOf: Data(input))
                try inputPipe.fileHandleForWriting.close()
            }
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { throw CocoaError(.fileReadCorruptFile) }
            return data
        }
    }

    /// The JPEG's segments before the scan, as (marker, payload after the length field).
    static func segments(_ jpeg: [UInt8]) -> [(marker: UInt8, payload: ArraySlice<UInt8>)] {
        var result: [(UInt8, ArraySlice<UInt8>)] = []
        var index = 2
        while index + 3 < jpeg.count, jpeg[index] == 0xFF, jpeg[index + 1] != 0xDA {
            let length = Int(jpeg[index + 2]) << 8 | Int(jpeg[index + 3])
            result.append((jpeg[index + 1], jpeg[(index + 4)..<(index + 2 + length)]))
            index += 2 + length
        }
        return result
    }

    /// The Huffman tables in DHT payloads, keyed by class and id.
    static func tables(_ payloads: [ArraySlice<UInt8>]) -> [UInt8: [UInt8]] {
        var tables: [UInt8: [UInt8]] = [:]
        for payload in payloads {
            var index = payload.startIndex
            while index + 17 <= payload.endIndex {
                let count = payload[(index + 1)..<(index + 17)].reduce(0) { $0 + Int($1) }
                tables[payload[index]] = Array(payload[index..<(index + 17 + count)])
                index += 17 + count
            }
        }
        return tables
    }

    /// `jpeg` with every DHT segment taken out, as a UVC camera sends it.
    static func strippingHuffmanTables(_ jpeg: [UInt8]) -> [UInt8] {
        var stripped: [UInt8] = [0xFF, 0xD8]
        var index = 2
        while jpeg[index + 1] != 0xDA {
            let length = Int(jpeg[index + 2]) << 8 | Int(jpeg[index + 3])
            if jpeg[index + 1] != 0xC4 { stripped += jpeg[index..<(index + 2 + length)] }
            index += 2 + length
        }
        return stripped + jpeg[index...]
    }

    @Test func theTablesAreTheOnesLibjpegWrites() async throws {
        let reference = try await Self.referenceJPEG()
        let theirs = Self.tables(Self.segments(reference).filter { $0.marker == 0xC4 }.map(\.payload))
        let ours = Self.tables([MotionJPEG.standardTablesSegment[4...]])
        #expect(theirs.keys.sorted() == [0x00, 0x01, 0x10, 0x11])
        #expect(ours == theirs)
        let length = Int(MotionJPEG.standardTablesSegment[2]) << 8 | Int(MotionJPEG.standardTablesSegment[3])
        #expect(length == MotionJPEG.standardTablesSegment.count - 2)
    }

    @Test func aFrameWithoutTablesDecodesToTheSamePixelsOnceCompleted() async throws {
        let reference = try await Self.referenceJPEG()
        let stripped = Self.strippingHuffmanTables(reference)
        #expect(!Self.segments(stripped).contains { $0.marker == 0xC4 })
        let completed = try #require(try stripped.withUnsafeBytes { try MotionJPEG.withStandardHuffmanTables($0, subject: "camera test") })
        #expect(completed.count == stripped.count + MotionJPEG.standardTablesSegment.count)
        let expected = try await Self.tool("/usr/bin/djpeg", ["-pnm"], input: reference)
        let decoded = try await Self.tool("/usr/bin/djpeg", ["-pnm"], input: completed)
        #expect(decoded.count == expected.count && decoded == expected)
    }

    @Test func aFrameWithItsOwnTablesIsLeftAlone() async throws {
        let reference = try await Self.referenceJPEG()
        #expect(try reference.withUnsafeBytes { try MotionJPEG.withStandardHuffmanTables($0, subject: "camera test") } == nil)
    }

    /// Damaged frames: every cut before the scan, a bad segment length, stray bytes, and
    /// random garbage after SOI. Each is a `malformedData` error or a completed frame —
    /// never a crash, never a read past the end.
    @Test func damagedFramesGetAClearError() async throws {
        let stripped = Self.strippingHuffmanTables(try await Self.referenceJPEG())
        let scanStart = stripped.indices.first { stripped[$0] == 0xFF && $0 + 1 < stripped.count && stripped[$0 + 1] == 0xDA && $0 > 2 }!
        func complete(_ bytes: [UInt8]) throws -> [UInt8]? {
            try bytes.withUnsafeBytes { try MotionJPEG.withStandardHuffmanTables($0, subject: "camera /dev/video0") }
        }
        for cut in 0...scanStart {
            #expect(throws: FieldHALError.self, "cut at \(cut)") { try complete(Array(stripped[..<cut])) }
        }
        var zeroLength = stripped
        zeroLength[4] = 0; zeroLength[5] = 1
        #expect { try complete(zeroLength) } throws: { "\($0)".contains("impossible length 1") }
        #expect { try complete([0xFF, 0xD8, 0x12, 0x34, 0xFF, 0xDA]) } throws: {
            (($0 as? FieldHALError)?.kind == .malformedData) && "\($0)".contains("camera /dev/video0: an MJPEG frame with data where a marker belongs (byte 2)")
        }
        #expect { try complete([0xFF, 0xD8, 0xFF, 0xD9]) } throws: { "\($0)".contains("ends (EOI) before its scan") }
        var random = SplitMix64(state: 42)
        for _ in 0..<2000 {
            let garbage = [0xFF, 0xD8] + (0..<Int.random(in: 0...64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            do { _ = try complete(garbage) } catch let error as FieldHALError { #expect(error.kind == .malformedData) }
        }
    }
}
