import CLibcrypto

/// SHA-256 through OpenSSL's EVP interface (Debian's libcrypto), fed as bytes pass.
///
/// Why libcrypto and not libsodium, which the vault uses for everything else: libsodium's
/// SHA-256 is portable C, and evidence is hashed as it is sealed, so the hash sets the
/// pipeline's speed; libcrypto picks the CPU's SHA extensions at run time (three times
/// libsodium's speed on the 2-CPU machine of docs/performance.md). swift-crypto did the same
/// through a second copy of BoringSSL that every build compiled (docs/decisions.md).
final class SHA256Digest {
    private let context: OpaquePointer

    init() {
        // Allocation is the only way these fail; a hash that cannot start is not an input
        // error a caller could handle.
        guard let context = EVP_MD_CTX_new(), EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
            fatalError("libcrypto could not start a SHA-256 digest (out of memory)")
        }
        self.context = context
    }

    deinit { EVP_MD_CTX_free(context) }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        _ = EVP_DigestUpdate(context, base, bytes.count)
    }

    func update(_ bytes: some Collection<UInt8>) {
        if bytes.withContiguousStorageIfAvailable({ update(UnsafeRawBufferPointer($0)) }) == nil {
            Array(bytes).withUnsafeBytes { update($0) }
        }
    }

    /// The 32-byte digest; the digest is spent (a further update or finish is a misuse).
    func finish() -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        _ = EVP_DigestFinal_ex(context, &digest, &length)
        return digest
    }
}
