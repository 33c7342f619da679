import CSodium
import FieldHAL
import FieldHALSystem
#if canImport(Glibc)
import Glibc
#endif

/// Secret bytes in libsodium's guarded memory: `sodium_malloc` places them against a guard
/// page and locks them into RAM (never swapped out), and `sodium_free` zeroes them when the
/// last reference goes. Keys (the vault key, the evidence queue key, the device key) and
/// PINs read from the terminal or standard input live here and nowhere else on the kit's
/// side of a call; a Swift `String` or `Array` would leave copies in the heap that nothing
/// wipes. Immutable after it is filled, so sharing it across threads is sound.
public final class SecretBytes: @unchecked Sendable, ExpressibleByStringLiteral {
    public let count: Int
    private let pointer: UnsafeMutableRawPointer

    /// `count` zero bytes (filled by `fill` before anyone reads them).
    init(count: Int) throws {
        guard sodium_init() >= 0, let memory = sodium_malloc(max(count, 1)) else {
            throw FieldHALError(.io, subject: "secret memory", detail: "sodium_malloc of \(count) bytes failed: out of memory, or RLIMIT_MEMLOCK too low")
        }
        sodium_memzero(memory, max(count, 1))
        self.count = count
        pointer = memory
    }

    /// Copies `source` in (the caller wipes it).
    convenience init(copying source: UnsafeRawBufferPointer) throws {
        try self.init(count: source.count)
        if let base = source.baseAddress { pointer.copyMemory(from: base, byteCount: count) }
    }

    /// Copies `bytes` in and wipes them where they were.
    public convenience init(wiping bytes: inout [UInt8]) throws {
        try self.init(count: bytes.count)
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress { pointer.copyMemory(from: base, byteCount: count) }
        }
        sodium_memzero(&bytes, bytes.count)
    }

    /// Text that already exists as a `String` (a literal in a test, a PIN that arrived in a
    /// JSON body): its copies in the heap are the caller's, not wiped by this.
    public convenience init(copying text: String) {
        var bytes = Array(text.utf8)
        // A handful of bytes: failing here means the process cannot lock even one page.
        do { try self.init(wiping: &bytes) } catch { fatalError("\(error)") }
    }

    public convenience init(stringLiteral value: String) { self.init(copying: value) }

    deinit { sodium_free(pointer) }  // zeroes before freeing

    public func withUnsafeBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    func withBytes<T>(_ body: (UnsafePointer<UInt8>) -> T) -> T {
        body(pointer.assumingMemoryBound(to: UInt8.self))
    }

    /// Equal contents, compared in constant time for equal lengths (lengths are not secret:
    /// a PIN's is 4 to 6).
    public func isEqual(to other: SecretBytes) -> Bool {
        count == other.count && sodium_memcmp(pointer, other.pointer, count) == 0
    }

    /// The bytes as text, for the one place that must hand them on as a `String` (a JSON
    /// request): the copy is the caller's to keep short-lived.
    public func unsafeString() -> String {
        withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
    }

    /// One line from `descriptor` (its newline and a carriage return before it dropped), read
    /// byte by byte with read(2) straight into guarded memory: no stdio buffer holds a copy.
    /// nil at end of input with nothing read. A line longer than `maximum` is read to its end
    /// and refused, so the next line is still the next thing read.
    public static func readLine(from descriptor: Int32, maximum: Int) throws -> SecretBytes? {
        let buffer = try SecretBytes(count: maximum)
        var length = 0, tooLong = false, sawAnything = false
        var byte: UInt8 = 0
        while true {
            let got = try SystemCall.retrying("read", subject: "standard input") { read(descriptor, &byte, 1) }
            if got == 0 { break }
            sawAnything = true
            if byte == 0x0A { break }
            if length < maximum {
                buffer.pointer.storeBytes(of: byte, toByteOffset: length, as: UInt8.self)
                length += 1
            } else {
                tooLong = true
            }
        }
        byte = 0
        guard sawAnything else { return nil }
        guard !tooLong else {
            throw FieldHALError(.invalidArgument, subject: "standard input", detail: "a line longer than \(maximum) characters")
        }
        if length > 0 && buffer.pointer.load(fromByteOffset: length - 1, as: UInt8.self) == 0x0D { length -= 1 }
        let line = try SecretBytes(count: length)
        if length > 0 { line.pointer.copyMemory(from: buffer.pointer, byteCount: length) }
        return line
    }
}
