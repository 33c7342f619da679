import CSodium
import FieldHAL
import FieldHALSystem
import Foundation

/// Evidence at rest: libsodium's `crypto_secretstream_xchacha20poly1305`, 64 KiB per
/// message, the last one tagged FINAL (so a truncated file is detected). While
/// sealing, it hashes the plaintext with SHA-256 (libcrypto: it uses the CPU's SHA
/// extensions, three times libsodium's portable code here) — the digest the server will check — so a
/// file of any size is read once, with memory bounded by one chunk. In the vault, beside the
/// other ciphers, so that the flows hold no crypto library of their own.
public enum EvidenceCipher {
    public static let chunkSize = 64 * 1024
    public static let keySize = Int(crypto_secretstream_xchacha20poly1305_KEYBYTES)
    static let headerSize = Int(crypto_secretstream_xchacha20poly1305_HEADERBYTES)
    static let overhead = Int(crypto_secretstream_xchacha20poly1305_ABYTES)

    /// A fresh key: the bytes to store in the vault (the caller wipes them) and the same
    /// key in guarded memory.
    public static func newKey() throws -> (stored: [UInt8], key: SecretBytes) {
        var key = [UInt8](repeating: 0, count: keySize)
        crypto_secretstream_xchacha20poly1305_keygen(&key)
        let stored = key
        return (stored, try SecretBytes(wiping: &key))
    }

    /// The key's bytes for libsodium, or nil when it is not a key of this size (a read-only
    /// queue with no key yet): nothing may be read past a shorter buffer.
    private static func withKey<T>(_ key: SecretBytes, _ body: (UnsafePointer<UInt8>) throws -> T) rethrows -> T? {
        guard key.count == keySize else { return nil }
        return try key.withUnsafeBytes { try body($0.baseAddress!.assumingMemoryBound(to: UInt8.self)) }
    }

    public static func noKey(_ path: String) -> FieldHALError {
        FieldHALError(.malformedData, subject: path, detail: "the evidence queue has no key to open it", advice: "restore the state directory's vault from backup")
    }

    public struct Sealed: Sendable { public var size: Int64; public var sha256: String }

    /// Seals everything `read` returns (an empty array ends the input) into `output`.
    public static func seal(key: SecretBytes, read: () throws -> [UInt8], into output: AtomicFileWriter) throws -> Sealed {
        var state = crypto_secretstream_xchacha20poly1305_state()
        var header = [UInt8](repeating: 0, count: headerSize)
        defer { sodium_memzero(&state, MemoryLayout.size(ofValue: state)) }
        guard withKey(key, { crypto_secretstream_xchacha20poly1305_init_push(&state, &header, $0) }) != nil else { throw noKey(output.path) }
        try output.write(header)
        let hash = try SHA256Digest()
        var size: Int64 = 0
        var cipher = [UInt8](repeating: 0, count: chunkSize + overhead)
        func push(_ chunk: ArraySlice<UInt8>, final: Bool) throws {
            var written: UInt64 = 0
            let tag = final ? UInt8(crypto_secretstream_xchacha20poly1305_TAG_FINAL) : 0
            chunk.withUnsafeBufferPointer { plain in
                _ = crypto_secretstream_xchacha20poly1305_push(&state, &cipher, &written, plain.baseAddress, UInt64(plain.count), nil, 0, tag)
            }
            try cipher.withUnsafeBytes { try output.write(UnsafeRawBufferPointer(rebasing: $0[0..<Int(written)])) }
        }
        // Every message but the last holds exactly `chunkSize` bytes, and the last (tagged
        // FINAL, possibly empty) at most that: a reader takes frames of one fixed size.
        var buffer: [UInt8] = []
        while true {
            let chunk = try read()
            if chunk.isEmpty { break }
            hash.update(chunk)
            size += Int64(chunk.count)
            buffer += chunk
            while buffer.count > chunkSize {
                try push(buffer[0..<chunkSize], final: false)
                buffer.removeFirst(chunkSize)
            }
        }
        try push(buffer[...], final: true)
        return Sealed(size: size, sha256: hex(hash.finish()))
    }

    /// Opens a sealed file chunk by chunk, handing each plaintext chunk to `write`.
    /// Throws `malformedData` if anything was altered, reordered or cut short.
    public static func open(key: SecretBytes, path: String, write: ([UInt8]) throws -> Void) throws {
        let opener = try Opener(key: key, path: path)
        while let chunk = try opener.next() { try write(chunk) }
    }

    /// A sealed file opened one chunk at a time, as its reader asks (an upload streams it):
    /// the plaintext only ever in memory. One reader at a time.
    public final class Opener: @unchecked Sendable {
        private let path: String
        private let input: FileHandle
        private var state = crypto_secretstream_xchacha20poly1305_state()
        private var plain = [UInt8](repeating: 0, count: chunkSize)
        private var done = false

        public init(key: SecretBytes, path: String) throws {
            guard let input = FileHandle(forReadingAtPath: path) else {
                throw FieldHALError(.io, subject: path, detail: "cannot open sealed evidence")
            }
            self.path = path
            self.input = input
            let header = [UInt8](try input.read(upToCount: headerSize) ?? Data())
            guard header.count == headerSize, withKey(key, { crypto_secretstream_xchacha20poly1305_init_pull(&state, header, $0) }) == 0 else {
                try? input.close()
                throw FieldHALError(.malformedData, subject: path, detail: "sealed evidence header is damaged")
            }
        }

        deinit {
            sodium_memzero(&plain, plain.count)
            sodium_memzero(&state, MemoryLayout.size(ofValue: state))
            try? input.close()
        }

        /// The next plaintext chunk (never empty), or nil after the final one.
        public func next() throws -> [UInt8]? {
            while !done {
                let cipher = [UInt8](try input.read(upToCount: chunkSize + overhead) ?? Data())
                guard cipher.count >= overhead else {
                    throw FieldHALError(.malformedData, subject: path, detail: "sealed evidence is cut short (no final chunk)")
                }
                var length: UInt64 = 0, tag: UInt8 = 0
                guard crypto_secretstream_xchacha20poly1305_pull(&state, &plain, &length, &tag, cipher, UInt64(cipher.count), nil, 0) == 0 else {
                    throw FieldHALError(.malformedData, subject: path, detail: "sealed evidence fails authentication")
                }
                done = tag == UInt8(crypto_secretstream_xchacha20poly1305_TAG_FINAL)
                if length > 0 { return Array(plain[0..<Int(length)]) }
            }
            return nil
        }
    }

    /// One short message (an item's metadata) sealed the same way, in memory.
    public static func sealMessage(key: SecretBytes, _ message: [UInt8]) throws -> [UInt8] {
        var state = crypto_secretstream_xchacha20poly1305_state()
        var header = [UInt8](repeating: 0, count: headerSize)
        defer { sodium_memzero(&state, MemoryLayout.size(ofValue: state)) }
        guard withKey(key, { crypto_secretstream_xchacha20poly1305_init_push(&state, &header, $0) }) != nil else { throw noKey("evidence item") }
        var cipher = [UInt8](repeating: 0, count: message.count + overhead)
        var written: UInt64 = 0
        crypto_secretstream_xchacha20poly1305_push(&state, &cipher, &written, message, UInt64(message.count), nil, 0,
                                                   UInt8(crypto_secretstream_xchacha20poly1305_TAG_FINAL))
        return header + cipher
    }

    public static func openMessage(key: SecretBytes, _ sealed: [UInt8]) -> [UInt8]? {
        guard sealed.count >= headerSize + overhead else { return nil }
        var state = crypto_secretstream_xchacha20poly1305_state()
        defer { sodium_memzero(&state, MemoryLayout.size(ofValue: state)) }
        let header = Array(sealed[0..<headerSize])
        guard withKey(key, { crypto_secretstream_xchacha20poly1305_init_pull(&state, header, $0) }) == 0 else { return nil }
        let cipher = Array(sealed[headerSize...])
        var plain = [UInt8](repeating: 0, count: cipher.count - overhead)
        var length: UInt64 = 0, tag: UInt8 = 0
        guard crypto_secretstream_xchacha20poly1305_pull(&state, &plain, &length, &tag, cipher, UInt64(cipher.count), nil, 0) == 0,
              tag == UInt8(crypto_secretstream_xchacha20poly1305_TAG_FINAL) else { return nil }
        return Array(plain[0..<Int(length)])
    }

    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// SHA-256 over bytes as they pass (libcrypto), written as the server writes it: the
/// digest every evidence item is checked by. One owner: a copy shares the running digest.
public struct ContentHash {
    private let hash: SHA256Digest

    public init() throws(FieldHALError) { hash = try SHA256Digest() }

    /// libcrypto set up before any evidence is hashed (the evidence queue's opening), so
    /// that a capture short of descriptors later still hashes.
    public static func prepare() { SHA256Digest.prepare() }

    public mutating func update(_ bytes: [UInt8]) { hash.update(bytes) }

    /// The digest in lowercase hex; the hash is spent.
    public func hex() -> String { EvidenceCipher.hex(hash.finish()) }
}

public enum Randomness {
    /// Random bytes from libsodium (the kernel's generator), for names that must not collide.
    public static func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        randombytes_buf(&bytes, bytes.count)
        return bytes
    }
}

extension SecretBytes {
    /// Overwrites `bytes` (a copy of a secret outside guarded memory) with zeros in a way the
    /// compiler keeps (libsodium's `sodium_memzero`).
    public static func wipe(_ bytes: inout [UInt8]) {
        sodium_memzero(&bytes, bytes.count)
    }
}
