import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// An anonymous file in memory (memfd_create(2)): where a recording that must never reach a
/// disk in plaintext is written (an evidence segment), to be sealed into the evidence queue
/// once it closes. It has no name in any file system, and it is gone when closed or when
/// the process dies, whatever kills it.
public final class MemoryFile: Sendable {
    public let descriptor: Int32

    public init(name: String) throws(FieldHALError) {
        guard let create = Self.memfdCreate else {
            throw FieldHALError(.unsupported, subject: "memory file \(name)", detail: "this C library has no memfd_create",
                                advice: "FieldHAL needs glibc 2.27 or newer (Debian 10 or newer)")
        }
        let made = create(name, Self.closeOnExec | Self.allowSealing)
        guard made >= 0 else {
            throw FieldHALError(.io, subject: "memory file \(name)", detail: "memfd_create: \(SystemError.describe())",
                                advice: "the kernel must be 3.17 or newer, and the process below its limit of open files")
        }
        descriptor = made
    }

    /// glibc's `memfd_create`, found by name: Glibc's Swift module leaves it out (it is
    /// declared under `_GNU_SOURCE` only), and the core links no C module of its own. The
    /// flags are the kernel's (<linux/memfd.h>), the same on every architecture.
    private typealias MemfdCreate = @convention(c) (UnsafePointer<CChar>, UInt32) -> Int32
    private static let memfdCreate: MemfdCreate? = dlsym(nil, "memfd_create").map { unsafeBitCast($0, to: MemfdCreate.self) }
    private static let closeOnExec: UInt32 = 0x0001  // MFD_CLOEXEC
    private static let allowSealing: UInt32 = 0x0002  // MFD_ALLOW_SEALING: a plugin's segments are sealed

    /// Takes over an open descriptor (a segment a plugin recorded and passed sealed): it is
    /// closed with this object.
    public init(adopting descriptor: Int32) {
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    public var size: Int {
        var info = stat()
        return fstat(descriptor, &info) == 0 ? Int(info.st_size) : 0
    }

    /// Up to `count` bytes from `offset` (fewer at the end; none past it).
    public func read(at offset: Int, count: Int) throws(FieldHALError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        do {
            let got = try bytes.withUnsafeMutableBytes { try FileDescriptor(rawValue: descriptor).read(fromAbsoluteOffset: Int64(offset), into: $0) }
            bytes.removeLast(count - got)
            return bytes
        } catch {
            throw SystemError.io("read", subject: "memory file", code: (error as? Errno)?.rawValue ?? EIO)
        }
    }
}
