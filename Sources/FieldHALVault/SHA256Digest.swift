import CLibcrypto
import FieldHAL

/// SHA-256 through OpenSSL's EVP interface (Debian's libcrypto), fed as bytes pass.
///
/// Why libcrypto and not libsodium, which the vault uses for everything else: libsodium's
/// SHA-256 is portable C, and evidence is hashed as it is sealed, so the hash sets the
/// pipeline's speed; libcrypto picks the CPU's SHA extensions at run time (three times
/// libsodium's speed on the 2-CPU machine of docs/performance.md). swift-crypto did the same
/// through a second copy of BoringSSL that every build compiled (docs/decisions.md).
final class SHA256Digest {
    private let context: OpaquePointer

    /// libcrypto set up once, without its configuration file: SHA-256 is in its built-in
    /// default provider, so no file is opened. Left to itself, libcrypto reads openssl.cnf
    /// at the first digest — and a capture that has run out of descriptors (issue 41's
    /// fault) then could not hash, or seal, its evidence.
    private static let ready: Bool = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_LOAD_CONFIG), nil) == 1

    /// Sets libcrypto up now (when the evidence queue opens), not at the first seal.
    static func prepare() { _ = ready }

    init() throws(FieldHALError) {
        guard Self.ready, let context = EVP_MD_CTX_new() else {
            throw FieldHALError(.io, subject: "SHA-256", detail: "libcrypto could not start a digest",
                                advice: "check the process's memory limit; the evidence was not sealed")
        }
        guard EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
            EVP_MD_CTX_free(context)
            throw FieldHALError(.io, subject: "SHA-256", detail: "libcrypto could not start a digest",
                                advice: "check the process's memory limit; the evidence was not sealed")
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
