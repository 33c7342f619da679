import FieldHAL
import FieldHALMedia
import Foundation
import TransrifyWire

/// Joins a recording's segments (each a whole WAV or Motion-JPEG AVI, as the kit sent them)
/// into one file of the same kind: the samples or frames in sequence order, one header. A
/// segment that is missing leaves a gap the export reports; one that arrived twice is used
/// once; one that is not the format of the first is refused, since joining would corrupt
/// what follows.
public enum RecordingExport {
    public struct Exported: Codable, Sendable, Equatable {
        public var recording: String
        public var kind: String
        public var path: String
        public var segments: Int
        public var seconds: Double
        /// The lab's chain check of the recording (gaps, wrong predecessors), as in its state.
        public var problems: [String]
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        /// The incident is unknown or has no recording in segments (not a bad segment).
        public var nothingToExport: Bool
        init(_ description: String, nothingToExport: Bool = false) {
            self.description = description
            self.nothingToExport = nothingToExport
        }
    }

    /// One segment as stored: its place and the path of its bytes.
    struct Part {
        var segment: EvidenceSegment
        var path: String
    }

    /// Writes `parts` (any order) as one file at `path`; returns its seconds.
    static func join(kind: String, _ parts: [Part], to path: String) throws -> Double {
        var seen = Set<Int>()
        let ordered = parts.sorted { $0.segment.sequence < $1.segment.sequence }.filter { seen.insert($0.segment.sequence).inserted }
        let seconds = Double(ordered.reduce(Int64(0)) { $0 + $1.segment.durationMs }) / 1000
        switch kind {
        case EvidenceKind.audio.rawValue: try joinWAV(ordered, to: path)
        case EvidenceKind.video.rawValue: try joinAVI(ordered, seconds: seconds, to: path)
        default: throw Failure("a \(kind) recording cannot be joined (only AUDIO and VIDEO are recorded in segments)")
        }
        return seconds
    }

    // MARK: WAV

    private static func joinWAV(_ parts: [Part], to path: String) throws {
        var writer: WAVFileWriter?
        var first: (rate: Int, channels: Int, format: SampleFormat)?
        for part in parts {
            let bytes = try read(part.path)
            let riff = try RIFF(bytes, form: "WAVE", what: "segment \(part.segment.sequence)")
            guard let fmt = riff.chunk("fmt "), fmt.count >= 16 else { throw Failure("segment \(part.segment.sequence) has no fmt chunk") }
            let tag = RIFF.u16(fmt, 0), channels = Int(RIFF.u16(fmt, 2)), rate = Int(RIFF.u32(fmt, 4)), bits = RIFF.u16(fmt, 14)
            guard tag == 1, channels > 0, let format = bits == 16 ? SampleFormat.s16le : bits == 32 ? .s32le : nil else {
                throw Failure("segment \(part.segment.sequence) is not 16- or 32-bit PCM (format \(tag), \(bits) bits)")
            }
            if let first, first != (rate, channels, format) {
                throw Failure("segment \(part.segment.sequence) is \(rate) Hz × \(channels), \(format.rawValue); the first was \(first.rate) Hz × \(first.channels), \(first.format.rawValue)")
            }
            first = (rate, channels, format)
            let output = try writer ?? WAVFileWriter(path: path, sampleRate: rate, channels: channels, format: format)
            writer = output
            guard let data = riff.chunk("data") else { throw Failure("segment \(part.segment.sequence) has no data chunk") }
            let whole = data.count - data.count % (channels * format.bytesPerSample)
            try data.prefix(whole).withUnsafeBytes { try output.append($0) }
        }
        guard let writer else { throw Failure("no segment to export") }
        try writer.finish()
    }

    // MARK: AVI

    private static func joinAVI(_ parts: [Part], seconds: Double, to path: String) throws {
        var writer: MJPEGAVIWriter?
        for part in parts {
            let bytes = try read(part.path)
            let riff = try RIFF(bytes, form: "AVI ", what: "segment \(part.segment.sequence)")
            guard let avih = riff.list("hdrl")?.chunk("avih"), avih.count >= 40 else {
                throw Failure("segment \(part.segment.sequence) has no AVI main header")
            }
            let width = Int(RIFF.u32(avih, 32)), height = Int(RIFF.u32(avih, 36))
            if let writer, (writer.width, writer.height) != (width, height) {
                throw Failure("segment \(part.segment.sequence) is \(width)x\(height); the first was \(writer.width)x\(writer.height)")
            }
            let output = try writer ?? MJPEGAVIWriter(path: path, width: width, height: height)
            writer = output
            // The first RIFF's frames, then any OpenDML extension's (`RIFF AVIX`) after it.
            for movi in [riff.list("movi")].compactMap({ $0 }) + RIFF.extensions(of: bytes, after: riff).compactMap({ $0.list("movi") }) {
                for frame in movi.frames {
                    if output.full(forFrameOf: frame.count) != nil { throw Failure("the export does not fit: the disk is full") }
                    try frame.withUnsafeBytes { try output.append(jpeg: $0) }
                }
            }
        }
        guard let writer else { throw Failure("no segment to export") }
        try writer.finish(duration: .milliseconds(Int64((seconds * 1000).rounded())))
    }

    private static func read(_ path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else { throw Failure("cannot read \(path)") }
        return Array(data)
    }
}

/// A RIFF form's chunks, read from bytes with every size checked against what is there.
struct RIFF {
    /// The form's (or list's) sub-chunks: id and body.
    var chunks: [(id: String, body: ArraySlice<UInt8>)]
    /// Where the form ends in the file (the next RIFF, in an OpenDML AVI, starts there).
    var end: Int

    init(_ bytes: [UInt8], form: String, what: String, at start: Int = 0) throws {
        guard bytes.count >= start + 12, Self.id(bytes[...], start) == "RIFF", Self.id(bytes[...], start + 8) == form else {
            throw RecordingExport.Failure("\(what) is not a RIFF \(form.trimmingCharacters(in: .whitespaces)) file")
        }
        let size = Int(Self.u32(bytes[...], start + 4))
        end = min(bytes.count, start + 8 + size)
        chunks = Self.parse(bytes[(start + 12)..<end])
    }

    private init(chunks: [(id: String, body: ArraySlice<UInt8>)]) {
        self.chunks = chunks
        end = 0
    }

    /// Chunks in `body`, stopping at the first whose size overruns it (a truncated file).
    static func parse(_ body: ArraySlice<UInt8>) -> [(id: String, body: ArraySlice<UInt8>)] {
        var chunks: [(id: String, body: ArraySlice<UInt8>)] = []
        var offset = body.startIndex
        while offset + 8 <= body.endIndex {
            let size = Int(u32(body, offset - body.startIndex + 4))
            guard size <= body.endIndex - offset - 8 else { break }
            chunks.append((id(body, offset), body[(offset + 8)..<(offset + 8 + size)]))
            offset += 8 + size + size % 2
        }
        return chunks
    }

    func chunk(_ id: String) -> ArraySlice<UInt8>? { chunks.first { $0.id == id }?.body }

    /// The first `LIST` of type `type`.
    func list(_ type: String) -> RIFF? {
        for (id, body) in chunks where id == "LIST" && body.count >= 4 && Self.id(body, body.startIndex) == type {
            return RIFF(chunks: Self.parse(body.dropFirst(4)))
        }
        return nil
    }

    /// A `movi` list's video frames (`##dc`, and `##db`), through any `rec ` lists.
    var frames: [ArraySlice<UInt8>] {
        chunks.flatMap { id, body -> [ArraySlice<UInt8>] in
            if id == "LIST", body.count >= 4, Self.id(body, body.startIndex) == "rec " { return RIFF(chunks: Self.parse(body.dropFirst(4))).frames }
            return id.hasSuffix("dc") || id.hasSuffix("db") ? [body] : []
        }
    }

    /// The `RIFF AVIX` forms after the first one.
    static func extensions(of bytes: [UInt8], after first: RIFF) -> [RIFF] {
        var found: [RIFF] = []
        var start = first.end + first.end % 2
        while let next = try? RIFF(bytes, form: "AVIX", what: "", at: start), next.end > start {
            found.append(next)
            start = next.end + next.end % 2
        }
        return found
    }

    /// The four-character code at `index` (the slice's own index, not an offset).
    static func id(_ bytes: ArraySlice<UInt8>, _ index: Int) -> String {
        String(decoding: bytes[index..<(index + 4)], as: UTF8.self)
    }

    /// Little-endian, at `offset` from the collection's start.
    static func u32(_ bytes: ArraySlice<UInt8>, _ offset: Int) -> UInt32 {
        let i = bytes.startIndex + offset
        return UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24
    }

    static func u16(_ bytes: ArraySlice<UInt8>, _ offset: Int) -> UInt16 {
        let i = bytes.startIndex + offset
        return UInt16(bytes[i]) | UInt16(bytes[i + 1]) << 8
    }
}
