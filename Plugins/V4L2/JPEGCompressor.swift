#if V4L2
import CV4L2
import FieldHAL

/// libjpeg-turbo's TurboJPEG API, compressing planar 4:2:0 frames straight to JPEG (no RGB
/// step: JPEG itself stores 4:2:0 YCbCr, so this is the cheapest path from a camera's raw
/// frame). One compressor per device thread; it reuses its output buffer between frames.
final class JPEGCompressor {
    private let handle: tjhandle
    private var output: UnsafeMutablePointer<UInt8>?
    private var outputCapacity: UInt = 0

    init(subject: String) throws {
        guard let handle = tjInitCompress() else {
            throw FieldHALError(.io, subject: subject, detail: "libturbojpeg could not start a compressor")
        }
        self.handle = handle
    }

    deinit {
        if let output { tjFree(output) }
        tjDestroy(handle)
    }

    /// Compresses a YU12 frame (Y plane, then U and V at half size, rows unpadded) and
    /// passes the JPEG to `body` without copying it.
    func compressYUV420<T>(_ frame: UnsafeRawBufferPointer, width: Int, height: Int, quality: Int,
                           subject: String, _ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
        let expected = width * height + 2 * ((width + 1) / 2) * ((height + 1) / 2)
        guard frame.count >= expected, let source = frame.baseAddress else {
            throw FieldHALError(.protocolError, subject: subject,
                                detail: "a \(width)x\(height) 4:2:0 frame needs \(expected) bytes; the driver gave \(frame.count)")
        }
        // Size the buffer for the worst case once, so TurboJPEG never reallocates it.
        let needed = tjBufSize(Int32(width), Int32(height), Int32(TJSAMP_420.rawValue))
        if outputCapacity < needed {
            if let output { tjFree(output) }
            output = tjAlloc(Int32(needed))
            outputCapacity = needed
        }
        var size = outputCapacity
        var destination = output
        let status = tjCompressFromYUV(handle, source.assumingMemoryBound(to: UInt8.self), Int32(width), 1, Int32(height),
                                       Int32(TJSAMP_420.rawValue), &destination, &size, Int32(quality),
                                       TJFLAG_NOREALLOC | TJFLAG_FASTDCT)
        guard status == 0, let destination else {
            throw FieldHALError(.io, subject: subject, detail: "JPEG compression failed: \(String(cString: tjGetErrorStr2(handle)))")
        }
        return try body(UnsafeRawBufferPointer(start: destination, count: Int(size)))
    }
}
#endif
