import CMemfd
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

/// Bytes in a sealed memfd: how a still's JPEG or a clip's PCM crosses the plugin channel.
/// The sender writes them and seals the memfd's size and contents; the receiver checks the
/// seals before it reads, so what it reads cannot change under it, and no copy of the
/// bytes goes through a file on disk.
public enum SealedMemory {
    /// A sealed memfd holding `bytes`.
    public static func make(_ bytes: UnsafeRawBufferPointer, name: String) throws(FieldHALError) -> OwnedDescriptor {
        let descriptor = fieldhal_memfd_create(name)
        guard descriptor >= 0 else { throw failure("memfd_create") }
        let owned = OwnedDescriptor(descriptor)
        var offset = 0
        while offset < bytes.count {
            switch SystemCall.attempt({ pwrite(descriptor, bytes.baseAddress! + offset, bytes.count - offset, off_t(offset)) }) {
            case .success(let written) where written > 0: offset += written
            case .success: throw failure("writing the memfd", code: ENOSPC)
            case .failure(let code): throw failure("writing the memfd", code: code.rawValue)
            }
        }
        guard fieldhal_memfd_seal(descriptor) == 0 else { throw failure("sealing the memfd") }
        return owned
    }

    public static func make(_ bytes: [UInt8], name: String) throws(FieldHALError) -> OwnedDescriptor {
        let made = bytes.withUnsafeBytes { buffer in Result { () throws(FieldHALError) in try make(buffer, name: name) } }
        return try made.get()
    }

    /// The bytes of a sealed memfd from the other side, at most `limit` of them. A
    /// descriptor that is not a sealed memfd, or holds more, is the sender's fault.
    public static func read(_ descriptor: OwnedDescriptor, limit: Int, subject: String) throws(FieldHALError) -> [UInt8] {
        let handle = descriptor.descriptor
        guard fieldhal_memfd_is_sealed(handle) == 1 else {
            throw FieldHALError(.protocolError, subject: subject, detail: "sent a descriptor that is not a sealed memfd",
                                advice: "docs/plugin-protocol.md, \"Descriptors\": seal it with F_SEAL_WRITE, F_SEAL_SHRINK and F_SEAL_GROW")
        }
        var status = stat()
        guard fstat(handle, &status) == 0 else { throw failure("fstat of the memfd") }
        let size = Int(status.st_size)
        guard size <= limit else {
            throw FieldHALError(.protocolError, subject: subject, detail: "sent \(size) bytes in a memfd; at most \(limit) are allowed here")
        }
        var bytes = [UInt8](repeating: 0, count: size)
        var offset = 0
        while offset < size {
            switch SystemCall.attempt({ bytes.withUnsafeMutableBytes { pread(handle, $0.baseAddress! + offset, size - offset, off_t(offset)) } }) {
            case .success(let count) where count > 0: offset += count
            case .success: throw failure("reading the memfd", code: EIO)  // shorter than it said
            case .failure(let code): throw failure("reading the memfd", code: code.rawValue)
            }
        }
        return bytes
    }

    private static func failure(_ step: String, code: Int32 = errno) -> FieldHALError {
        FieldHALError(.io, subject: "sealed memory", detail: "\(step): \(SystemError.describe(code))")
    }
}
