import CSodium
import FieldHAL
import FieldHALVault

/// PINs at rest: argon2id through `crypto_pwhash_str` (salt and parameters inside the
/// string), checked with `crypto_pwhash_str_verify`, which compares in constant time.
public enum PINHash {
    /// The cost: libsodium's "interactive" limits (64 MiB, 2 passes), ≈0.1 s on a small
    /// board — slow enough that a stolen state directory cannot be brute-forced quickly
    /// across a 10⁴–10⁶ PIN space, and fast enough at the keypad.
    public struct Cost: Sendable {
        public var operations: UInt64
        public var memory: Int
        public static let interactive = Cost(operations: UInt64(crypto_pwhash_OPSLIMIT_INTERACTIVE), memory: Int(crypto_pwhash_MEMLIMIT_INTERACTIVE))
        /// For tests only: the smallest cost libsodium allows.
        public static let minimum = Cost(operations: UInt64(crypto_pwhash_OPSLIMIT_MIN), memory: Int(crypto_pwhash_MEMLIMIT_MIN))
    }

    /// The argon2id string of `pin`, read in place from guarded memory.
    public static func hash(_ pin: SecretBytes, cost: Cost = .interactive) throws -> String {
        guard sodium_init() >= 0 else { throw FieldHALError(.io, subject: "lock", detail: "libsodium failed to initialise") }
        var output = [CChar](repeating: 0, count: Int(crypto_pwhash_STRBYTES))
        let result = pin.withUnsafeBytes { bytes in
            crypto_pwhash_str_alg(&output, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(bytes.count),
                                  cost.operations, cost.memory, crypto_pwhash_ALG_ARGON2ID13)
        }
        guard result == 0 else {
            throw FieldHALError(.io, subject: "lock", detail: "argon2id hashing failed: out of memory?")
        }
        return String(decoding: output.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public static func verify(_ pin: SecretBytes, against stored: String) -> Bool {
        pin.withUnsafeBytes { bytes in
            stored.withCString { crypto_pwhash_str_verify($0, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(bytes.count)) == 0 }
        }
    }
}
