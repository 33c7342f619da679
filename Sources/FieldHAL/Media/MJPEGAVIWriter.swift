/// Streams Motion-JPEG frames into an AVI file (RIFF, one video stream, `idx1` index), the
/// container every player, browser-side converter and ffmpeg read without a codec pack.
///
/// Frames go to disk as they arrive; only the index (8 bytes a frame) stays in memory.
/// `finish` appends the index, patches the header's counts and frame rate, and commits the
/// file atomically, so a killed recording leaves no half-written file at `path`. Plain AVI
/// (no OpenDML) tops out at 1 GiB: `wouldExceedLimit` tells the caller to stop before it.
public final class MJPEGAVIWriter {
    public let width: Int
    public let height: Int
    /// Frames stop being accepted beyond this size (AVI 1.0's RIFF size is 32-bit, and
    /// players assume the first RIFF is under 1 GiB).
    public static let sizeLimit = 1 << 30

    private let file: AtomicFileWriter
    /// Offset and size of each frame's chunk, relative to the `movi` list's type field.
    private var index: [(offset: UInt32, size: UInt32)] = []
    private var moviBytes = 4  // the "movi" type field itself
    private var largestFrame = 0

    public var frameCount: Int { index.count }
    public var bytesWritten: Int { Self.headerSize + moviBytes }

    public init(path: String, width: Int, height: Int) throws {
        self.width = width
        self.height = height
        file = try AtomicFileWriter(path: path, mode: 0o640)
        try file.write(header(microsecondsPerFrame: 0))
    }

    /// Whether appending a frame of `size` bytes would pass `sizeLimit`.
    public func wouldExceedLimit(frameSize size: Int) -> Bool {
        bytesWritten + 8 + size + 1 + 16 * (index.count + 1) + 8 > Self.sizeLimit
    }

    /// Appends one complete JPEG image as the next frame.
    public func append(jpeg: UnsafeRawBufferPointer) throws {
        precondition(!wouldExceedLimit(frameSize: jpeg.count), "check wouldExceedLimit first")
        var chunk = Array("00dc".utf8)
        chunk += Self.littleEndian(UInt32(jpeg.count))
        try file.write(chunk)
        try file.write(jpeg)
        if jpeg.count % 2 == 1 { try file.write([0]) }  // RIFF chunks are word-aligned
        index.append((UInt32(moviBytes), UInt32(jpeg.count)))
        moviBytes += 8 + jpeg.count + jpeg.count % 2
        largestFrame = max(largestFrame, jpeg.count)
    }

    /// Writes the index, fixes the header for `duration` of recording, and commits the file.
    /// Returns the file's size.
    @discardableResult
    public func finish(duration: Duration) throws -> Int {
        var idx = Array("idx1".utf8) + Self.littleEndian(UInt32(16 * index.count))
        idx.reserveCapacity(8 + 16 * index.count)
        for entry in index {
            idx += Array("00dc".utf8)
            idx += Self.littleEndian(UInt32(0x10))  // AVIIF_KEYFRAME: every MJPEG frame is one
            idx += Self.littleEndian(entry.offset)
            idx += Self.littleEndian(entry.size)
        }
        try file.write(idx)
        let microseconds = index.isEmpty ? 0 : Int((duration.seconds * 1e6 / Double(index.count)).rounded())
        try file.write(header(microsecondsPerFrame: max(1, microseconds), indexBytes: idx.count), at: 0)
        try file.commit()
        return bytesWritten + idx.count
    }

    private static let headerSize = 12 + 8 + 4 + (8 + 56) + (8 + 4 + (8 + 56) + (8 + 40)) + 8

    /// RIFF, `hdrl` (`avih`, one `strl` with `strh` and a BITMAPINFOHEADER), and the `movi`
    /// list's header. Sizes are placeholders until `finish`.
    private func header(microsecondsPerFrame: Int, indexBytes: Int = 0) -> [UInt8] {
        let frames = UInt32(index.count)
        let usPerFrame = UInt32(microsecondsPerFrame)
        var bytes: [UInt8] = []
        func fourCC(_ code: String) { bytes += Array(code.utf8) }
        func u32(_ value: UInt32) { bytes += Self.littleEndian(value) }
        func u16(_ value: UInt16) { bytes += Self.littleEndian16(value) }

        fourCC("RIFF"); u32(UInt32(Self.headerSize - 8 + moviBytes + indexBytes)); fourCC("AVI ")
        fourCC("LIST"); u32(4 + (8 + 56) + (8 + 4 + (8 + 56) + (8 + 40))); fourCC("hdrl")
        fourCC("avih"); u32(56)
        u32(usPerFrame)
        u32(usPerFrame == 0 ? 0 : UInt32(min(Int(UInt32.max), largestFrame * 1_000_000 / Int(usPerFrame))))
        u32(0)  // padding granularity
        u32(0x10)  // AVIF_HASINDEX
        u32(frames)
        u32(0)  // initial frames
        u32(1)  // streams
        u32(UInt32(largestFrame + 8))
        u32(UInt32(width)); u32(UInt32(height))
        for _ in 0..<4 { u32(0) }
        fourCC("LIST"); u32(4 + (8 + 56) + (8 + 40)); fourCC("strl")
        fourCC("strh"); u32(56)
        fourCC("vids"); fourCC("MJPG")
        u32(0); u16(0); u16(0); u32(0)  // flags, priority, language, initial frames
        u32(usPerFrame == 0 ? 1 : usPerFrame); u32(1_000_000)  // scale / rate = seconds per frame
        u32(0); u32(frames)  // start, length
        u32(UInt32(largestFrame + 8))
        u32(UInt32.max)  // quality: default
        u32(0)  // sample size: varies
        u16(0); u16(0); u16(UInt16(width)); u16(UInt16(height))
        fourCC("strf"); u32(40)
        u32(40); u32(UInt32(width)); u32(UInt32(height))
        u16(1); u16(24); fourCC("MJPG"); u32(UInt32(width * height * 3))
        for _ in 0..<4 { u32(0) }
        fourCC("LIST"); u32(UInt32(moviBytes)); fourCC("movi")
        precondition(bytes.count == Self.headerSize + 4, "AVI header layout")
        return bytes
    }

    private static func littleEndian(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.littleEndian, Array.init) }
    private static func littleEndian16(_ value: UInt16) -> [UInt8] { withUnsafeBytes(of: value.littleEndian, Array.init) }
}
