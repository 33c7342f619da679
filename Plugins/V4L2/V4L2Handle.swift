#if V4L2
import CV4L2
import FieldHAL
import FieldHALSystem
import SystemPackage
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A FourCC pixel format code (`YUYV`, `MJPG`), as V4L2 packs it into 32 bits.
struct FourCC: Hashable, Sendable, CustomStringConvertible {
    var code: UInt32

    init(_ code: UInt32) { self.code = code }

    init(_ text: StaticString) {
        precondition(text.utf8CodeUnitCount == 4, "a FourCC has four characters")
        let bytes = UnsafeBufferPointer(start: text.utf8Start, count: 4)
        code = bytes.enumerated().reduce(0) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }

    init?(string: String) {
        let bytes = Array(string.utf8)
        guard bytes.count == 4 else { return nil }
        code = bytes.enumerated().reduce(0) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
    }

    /// `YUYV`, `Y10` (padding trimmed), `Y16-BE` (V4L2's big-endian flag, bit 31).
    var description: String {
        let bigEndian = code & (1 << 31) != 0
        let letters = String(decoding: (0..<4).map { UInt8(truncatingIfNeeded: (code & 0x7FFF_FFFF) >> (8 * $0)) }, as: UTF8.self)
            .trimmingSpace()
        return bigEndian ? letters + "-BE" : letters
    }

    static let mjpeg = FourCC("MJPG")
    static let jpeg = FourCC("JPEG")
    static let yuyv = FourCC("YUYV")
    /// Planar 4:2:0 (`YU12`): what JPEG compresses from directly, and what libv4l2 converts
    /// other raw formats to.
    static let yuv420 = FourCC("YU12")
}

/// An open V4L2 device node, through libv4l2 (which converts formats the device lacks).
/// A thin, typed layer over the C calls: each failure becomes a `FieldHALError` that names
/// the device and what to do. Not thread-safe: one device thread owns it.
final class V4L2Handle {
    let path: String
    let descriptor: Int32
    private var closed = false

    var subject: String { "camera \(path)" }

    private static let silenceOnce: Void = fieldhal_v4l2_silence_library_errors()

    /// Opens non-blocking (every dequeue waits in `poll`, with a timeout and a wake-up pipe).
    init(path: String) throws {
        _ = Self.silenceOnce
        self.path = path
        let descriptor = fieldhal_v4l2_open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { throw Self.error(errno, subject: "camera \(path)", doing: "open") }
        self.descriptor = descriptor
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        _ = v4l2_close(descriptor)
    }

    /// One ioctl, retried on EINTR. `doing` names the step for the error message.
    func control<Argument>(_ request: UInt, _ argument: inout Argument, doing: String) throws {
        let code = tryControl(request, &argument)
        if code != 0 { throw Self.error(code, subject: subject, doing: doing) }
    }

    /// Like `control`, but returns the errno instead of throwing: for enumerations, which end
    /// with EINVAL, and dequeues, which say "not yet" with EAGAIN.
    func tryControl<Argument>(_ request: UInt, _ argument: inout Argument) -> Int32 {
        switch SystemCall.attempt({ withUnsafeMutablePointer(to: &argument) { fieldhal_v4l2_ioctl(descriptor, request, $0) } }) {
        case .success: 0
        case .failure(let code): code.rawValue
        }
    }

    /// The error for a failed call, with advice a technician can act on.
    static func error(_ code: Int32, subject: String, doing step: String) -> FieldHALError {
        let detail = "\(step): \(SystemError.describe(code))"
        switch code {
        case EACCES, EPERM:
            return FieldHALError(.permissionDenied, subject: subject, detail: "permission denied",
                                 advice: "add the service user to group video or install udev/60-fieldhal.rules")
        case ENOENT, ENXIO:
            return FieldHALError(.deviceNotFound, subject: subject, detail: "no such device",
                                 advice: "check the camera is plugged in; v4l2-ctl --list-devices shows what is there")
        case EBUSY:
            return FieldHALError(.busy, subject: subject, detail: "\(step): the device is busy",
                                 advice: "another program is streaming from it (fuser shows which); stop it or configure another camera")
        case ENODEV, EIO, EPIPE:
            return FieldHALError(.disconnected, subject: subject, detail: "\(step): the camera went away",
                                 advice: "check the cable; the next capture opens it again")
        case EINVAL where step.hasPrefix("set format"):
            return FieldHALError(.unsupported, subject: subject, detail: detail)
        default:
            return FieldHALError(.io, subject: subject, detail: detail)
        }
    }
}
#endif
