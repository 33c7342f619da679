import FieldHAL
import FieldHALSystem
#if canImport(Glibc)
import Glibc
#endif

/// Streams Motion-JPEG frames into an AVI file (one video stream), the container every
/// player, browser-side converter and ffmpeg read without a codec pack.
///
/// The file is OpenDML AVI (AVI 2.0), so a recording is not cut off at 1 GiB: the first
/// RIFF is a plain AVI with an `idx1` index, which AVI 1.0 players read alone; each further
/// gigabyte goes into an `AVIX` RIFF. A super index (`indx`) in the header points at one
/// standard index (`ix00`) per RIFF, through which OpenDML readers (ffmpeg, VLC, mpv,
/// DirectShow) find every frame.
///
/// Frames go to disk as they arrive; only the open RIFF's index (8 bytes a frame) stays in
/// memory. `finish` writes the last indexes, patches the header's counts and frame rate,
/// and commits the file atomically, so a killed recording leaves no half-written file at
/// `path`. Before each frame the writer checks that the disk still has room for the frame,
/// the indexes still to write and a margin: a recording that fills the disk stops there and
/// keeps what it has, instead of failing a write and losing the whole clip.
public final class MJPEGAVIWriter {
    public let width: Int
    public let height: Int
    /// Bytes in one RIFF: AVI's sizes are 32-bit, and players expect each RIFF (the first
    /// above all) to stay under 1 GiB.
    public static let segmentLimit = 1 << 30
    /// RIFFs the super index has room for.
    public static let segmentCapacity = 256
    /// The largest file the writer makes (256 GiB); `full(forFrameOf:)` says when a frame
    /// would pass it.
    public static let sizeLimit = segmentLimit * segmentCapacity
    /// Free space left on the disk when a recording stops for lack of it.
    public static let diskMargin = 1 << 20

    /// Why the writer takes no more frames.
    public enum Full: Sendable, Equatable {
        /// `sizeLimit`, or a frame larger than a RIFF.
        case sizeLimit
        /// The file system has no room for the frame, the indexes and `diskMargin`.
        case diskFull
    }

    private let segmentBytes: Int
    private let freeSpace: () -> Int?
    private let file: AtomicFileWriter
    /// The standard index of each RIFF closed so far, for the super index.
    private var closedSegments: [(indexOffset: UInt64, indexBytes: UInt32, frames: UInt32)] = []
    /// Where the open RIFF starts in the file, and where its `movi` list's type field is
    /// (the base of every frame offset in its indexes).
    private var segmentStart = 0
    private var moviType = 0
    /// The open RIFF's frames: chunk offset relative to `moviType`, and JPEG size.
    private var segmentFrames: [(offset: UInt32, size: UInt32)] = []
    private var firstSegmentFrames = 0
    private var largestFrame = 0
    private var microsecondsPerFrame: UInt32 = 0

    public private(set) var frameCount = 0
    public private(set) var bytesWritten = 0

    public convenience init(path: String, width: Int, height: Int) throws {
        try self.init(.path(path), width: width, height: height)
    }

    public convenience init(_ destination: RecordingDestination, width: Int, height: Int) throws {
        try self.init(destination, width: width, height: height, segmentBytes: Self.segmentLimit)
    }

    /// `segmentBytes` below `segmentLimit` lets tests cross RIFF boundaries with small files;
    /// `freeSpace` replaces the file system's free space (statvfs) for tests.
    convenience init(path: String, width: Int, height: Int, segmentBytes: Int, freeSpace: (() -> Int?)? = nil) throws {
        try self.init(.path(path), width: width, height: height, segmentBytes: segmentBytes, freeSpace: freeSpace)
    }

    init(_ destination: RecordingDestination, width: Int, height: Int, segmentBytes: Int, freeSpace: (() -> Int?)? = nil) throws {
        self.width = width
        self.height = height
        self.segmentBytes = segmentBytes
        file = try AtomicFileWriter(destination, mode: 0o640)
        self.freeSpace = freeSpace ?? Self.freeSpace(at: destination)
        let hdrl = headerList()
        let start = Self.fourCC("RIFF") + Self.u32(0) + Self.fourCC("AVI ") + hdrl + Self.fourCC("LIST") + Self.u32(0) + Self.fourCC("movi")
        try write(start)
        moviType = start.count - 4
    }

    /// Why a frame of `size` bytes cannot be appended, or nil when it can: the caller stops
    /// recording there and finishes the file.
    public func full(forFrameOf size: Int) -> Full? {
        let opensSegment = !fitsInOpenSegment(size)
        if opensSegment, !fitsInFreshSegment(size) { return .sizeLimit }
        if let free = freeSpace() {
            let frames = segmentFrames.count + 1
            var needed = Self.chunkBytes(size) + Self.standardIndexBytes(frames: frames) + Self.diskMargin
            if closedSegments.isEmpty { needed += 8 + 16 * frames }  // idx1
            if opensSegment { needed += 24 + Self.standardIndexBytes(frames: 1) }
            if free < needed { return .diskFull }
        }
        return nil
    }

    /// Appends one complete JPEG image as the next frame, in a new RIFF when the open one is full.
    public func append(jpeg: UnsafeRawBufferPointer) throws {
        precondition(fitsInOpenSegment(jpeg.count) || fitsInFreshSegment(jpeg.count), "check full(forFrameOf:) first")
        if !fitsInOpenSegment(jpeg.count) {
            try closeSegment()
            try openExtensionSegment()
        }
        segmentFrames.append((UInt32(bytesWritten - moviType), UInt32(jpeg.count)))
        try write(Self.fourCC("00dc") + Self.u32(UInt32(jpeg.count)))
        try file.write(jpeg)
        bytesWritten += jpeg.count
        if jpeg.count % 2 == 1 { try write([0]) }  // RIFF chunks are word-aligned
        frameCount += 1
        largestFrame = max(largestFrame, jpeg.count)
    }

    /// Writes the last indexes, fixes the header for `duration` of recording, and commits
    /// the file. Returns the file's size.
    @discardableResult
    public func finish(duration: Duration) throws -> Int {
        try closeSegment()
        let microseconds = frameCount == 0 ? 0 : Int((duration.seconds * 1e6 / Double(frameCount)).rounded())
        microsecondsPerFrame = UInt32(clamping: max(1, microseconds))
        try file.write(headerList(), at: 12)
        try file.commit()
        return bytesWritten
    }

    // MARK: RIFFs

    private func fitsInOpenSegment(_ size: Int) -> Bool {
        let frames = segmentFrames.count + 1
        let legacyIndex = closedSegments.isEmpty ? 8 + 16 * frames : 0
        return bytesWritten - segmentStart + Self.chunkBytes(size) + Self.standardIndexBytes(frames: frames) + legacyIndex <= segmentBytes
    }

    /// Whether a new RIFF can be opened for a frame of `size` bytes and hold it.
    private func fitsInFreshSegment(_ size: Int) -> Bool {
        closedSegments.count + 2 <= Self.segmentCapacity && 24 + Self.chunkBytes(size) + Self.standardIndexBytes(frames: 1) <= segmentBytes
    }

    /// Ends the open RIFF: its standard index closes the `movi` list (where ffmpeg puts it
    /// too), the first RIFF also gets `idx1`, and the RIFF's and the list's sizes are set.
    private func closeSegment() throws {
        let indexOffset = bytesWritten
        var index = Self.fourCC("ix00") + Self.u32(UInt32(24 + 8 * segmentFrames.count))
        index += Self.u16(2) + [0, 1]  // longs per entry; sub-type 0; AVI_INDEX_OF_CHUNKS
        index += Self.u32(UInt32(segmentFrames.count)) + Self.fourCC("00dc")
        index += Self.u64(UInt64(moviType)) + Self.u32(0)
        for frame in segmentFrames {
            index += Self.u32(frame.offset + 8) + Self.u32(frame.size)  // offset of the data; bit 31 clear: a key frame
        }
        try write(index)
        let moviSize = bytesWritten - (moviType - 8) - 8
        if closedSegments.isEmpty {
            firstSegmentFrames = segmentFrames.count
            var legacy = Self.fourCC("idx1") + Self.u32(UInt32(16 * segmentFrames.count))
            legacy.reserveCapacity(8 + 16 * segmentFrames.count)
            for frame in segmentFrames {
                legacy += Self.fourCC("00dc") + Self.u32(0x10) + Self.u32(frame.offset) + Self.u32(frame.size)  // AVIIF_KEYFRAME
            }
            try write(legacy)
        }
        try file.write(Self.u32(UInt32(moviSize)), at: moviType - 4)
        try file.write(Self.u32(UInt32(bytesWritten - segmentStart - 8)), at: segmentStart + 4)
        closedSegments.append((UInt64(indexOffset), UInt32(index.count), UInt32(segmentFrames.count)))
        segmentFrames.removeAll(keepingCapacity: true)
    }

    private func openExtensionSegment() throws {
        segmentStart = bytesWritten
        try write(Self.fourCC("RIFF") + Self.u32(0) + Self.fourCC("AVIX") + Self.fourCC("LIST") + Self.u32(0) + Self.fourCC("movi"))
        moviType = bytesWritten - 4
    }

    private func write(_ bytes: [UInt8]) throws {
        try file.write(bytes)
        bytesWritten += bytes.count
    }

    /// The free space of the file system the destination is on; nil (no bound but the size
    /// limit's) for a file in memory, which its recording's length bounds. A directory held
    /// open is asked through its descriptor, which the caller keeps open until the
    /// recording returns (`RecordingDestination.entry`).
    private static func freeSpace(at destination: RecordingDestination) -> () -> Int? {
        switch destination {
        case .memory:
            return { nil }
        case .path(let path):
            let directory = FilePaths.directory(of: path)
            return { available { statvfs(directory, &$0) } }
        case .entry(_, let directory):
            return { available { fstatvfs(directory, &$0) } }
        }
    }

    private static func available(_ look: (inout statvfs) -> Int32) -> Int? {
        var info = statvfs()
        guard look(&info) == 0 else { return nil }
        return Int(info.f_bavail) * Int(info.f_frsize)
    }

    private static func chunkBytes(_ size: Int) -> Int { 8 + size + size % 2 }
    private static func standardIndexBytes(frames: Int) -> Int { 8 + 24 + 8 * frames }

    // MARK: The header

    /// `hdrl`: `avih`, one `strl` (`strh`, a BITMAPINFOHEADER, the super index) and the
    /// OpenDML `odml` list. Same size whatever it says, so `finish` rewrites it in place.
    private func headerList() -> [UInt8] {
        let usPerFrame = microsecondsPerFrame
        let largest = UInt32(largestFrame)
        var avih = Self.u32(usPerFrame)
        avih += Self.u32(usPerFrame == 0 ? 0 : UInt32(clamping: Int(largest) * 1_000_000 / Int(usPerFrame)))
        avih += Self.u32(0)  // padding granularity
        avih += Self.u32(0x10)  // AVIF_HASINDEX
        avih += Self.u32(UInt32(firstSegmentFrames))  // frames in the first RIFF (OpenDML)
        avih += Self.u32(0) + Self.u32(1)  // initial frames; streams
        avih += Self.u32(largest + 8)
        avih += Self.u32(UInt32(width)) + Self.u32(UInt32(height))
        avih += [UInt8](repeating: 0, count: 16)

        var strh = Self.fourCC("vids") + Self.fourCC("MJPG")
        strh += Self.u32(0) + Self.u16(0) + Self.u16(0) + Self.u32(0)  // flags, priority, language, initial frames
        strh += Self.u32(usPerFrame == 0 ? 1 : usPerFrame) + Self.u32(1_000_000)  // scale / rate = seconds per frame
        strh += Self.u32(0) + Self.u32(UInt32(frameCount))  // start, length: every frame
        strh += Self.u32(largest + 8)
        strh += Self.u32(UInt32.max)  // quality: default
        strh += Self.u32(0)  // sample size: varies
        strh += Self.u16(0) + Self.u16(0) + Self.u16(UInt16(clamping: width)) + Self.u16(UInt16(clamping: height))

        var strf = Self.u32(40) + Self.u32(UInt32(width)) + Self.u32(UInt32(height))
        strf += Self.u16(1) + Self.u16(24) + Self.fourCC("MJPG") + Self.u32(UInt32(clamping: width * height * 3))
        strf += [UInt8](repeating: 0, count: 16)

        var indx = Self.u16(4) + [0, 0]  // longs per entry; sub-type 0; AVI_INDEX_OF_INDEXES
        indx += Self.u32(UInt32(closedSegments.count)) + Self.fourCC("00dc") + [UInt8](repeating: 0, count: 12)
        for slot in 0..<Self.segmentCapacity {
            if slot < closedSegments.count {
                let segment = closedSegments[slot]
                indx += Self.u64(segment.indexOffset) + Self.u32(segment.indexBytes) + Self.u32(segment.frames)
            } else {
                indx += [UInt8](repeating: 0, count: 16)
            }
        }

        let dmlh = Self.u32(UInt32(frameCount)) + [UInt8](repeating: 0, count: 244)

        let strl = Self.chunk("strh", strh) + Self.chunk("strf", strf) + Self.chunk("indx", indx)
        return Self.list("hdrl", Self.chunk("avih", avih) + Self.list("strl", strl) + Self.list("odml", Self.chunk("dmlh", dmlh)))
    }

    private static func chunk(_ id: String, _ body: [UInt8]) -> [UInt8] { fourCC(id) + u32(UInt32(body.count)) + body }
    private static func list(_ type: String, _ body: [UInt8]) -> [UInt8] { chunk("LIST", fourCC(type) + body) }
    private static func fourCC(_ code: String) -> [UInt8] { Array(code.utf8) }
    private static func u16(_ value: UInt16) -> [UInt8] { withUnsafeBytes(of: value.littleEndian, Array.init) }
    private static func u32(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.littleEndian, Array.init) }
    private static func u64(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.littleEndian, Array.init) }
}
