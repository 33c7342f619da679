import CSodium
import FieldHAL

/// The device's Curve25519 key pair for sealed boxes (seed 001): made with
/// `crypto_box_keypair` on first use, the secret half kept in the vault and in guarded
/// memory, never printed; the public half is derived from it on every load.
public final class DeviceKeyPair: Sendable {
    /// The vault entry that holds the secret key.
    public static let vaultEntry = "device-box-secret-key"

    public let publicKey: [UInt8]
    let secretKey: SecretBytes

    /// The public key as printed and exchanged: standard base64 of the 32 bytes.
    public var publicKeyBase64: String { Base64.encode(publicKey) }

    /// Loads the key pair from `vault`, creating and storing one on first use.
    public static func loadOrCreate(in vault: Vault) throws -> DeviceKeyPair {
        if var stored = try vault.load(vaultEntry) {
            defer { sodium_memzero(&stored, stored.count) }
            guard stored.count == Int(crypto_box_SECRETKEYBYTES) else {
                throw FieldHALError(.malformedData, subject: "device key", detail: "the stored secret key is \(stored.count) bytes, not \(crypto_box_SECRETKEYBYTES)",
                                    advice: "restore the state directory from backup; removing the entry makes a new key that old senders do not know")
            }
            return try DeviceKeyPair(secret: stored, path: vault.entriesDirectory)
        }
        var publicKey = [UInt8](repeating: 0, count: Int(crypto_box_PUBLICKEYBYTES))
        var secret = [UInt8](repeating: 0, count: Int(crypto_box_SECRETKEYBYTES))
        defer { sodium_memzero(&secret, secret.count) }
        guard crypto_box_keypair(&publicKey, &secret) == 0 else {
            throw FieldHALError(.io, subject: "device key", detail: "crypto_box_keypair failed")
        }
        try vault.store(secret, as: vaultEntry)
        return try DeviceKeyPair(secret: secret, path: vault.entriesDirectory)
    }

    private init(secret: [UInt8], path: String) throws {
        var derived = [UInt8](repeating: 0, count: Int(crypto_box_PUBLICKEYBYTES))
        guard crypto_scalarmult_base(&derived, secret) == 0 else {
            throw FieldHALError(.malformedData, subject: "device key", detail: "the stored secret key is not a Curve25519 key")
        }
        publicKey = derived
        var copy = secret
        secretKey = try SecretBytes(wiping: &copy)
    }
}

/// Standard base64 with padding, through libsodium (constant-time, strict on decode).
public enum Base64 {
    public static func encode(_ bytes: [UInt8]) -> String {
        let variant = Int32(sodium_base64_VARIANT_ORIGINAL)
        var text = [CChar](repeating: 0, count: sodium_base64_encoded_len(bytes.count, variant))
        _ = sodium_bin2base64(&text, text.count, bytes, bytes.count, variant)
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The bytes, or nil when `text` is not canonical padded base64 (whitespace around it
    /// is ignored).
    public static func decode(_ text: String) -> [UInt8]? {
        let trimmed = Array(text.utf8.drop { $0 == 32 || $0 == 10 || $0 == 13 || $0 == 9 }.reversed()
                                .drop { $0 == 32 || $0 == 10 || $0 == 13 || $0 == 9 }.reversed())
        guard !trimmed.isEmpty else { return nil }
        var bytes = [UInt8](repeating: 0, count: trimmed.count / 4 * 3 + 3)
        var length = 0
        var end: UnsafePointer<CChar>?
        let status = trimmed.withUnsafeBufferPointer { input in
            input.withMemoryRebound(to: CChar.self) { chars in
                sodium_base642bin(&bytes, bytes.count, chars.baseAddress, chars.count, nil, &length, &end,
                                  Int32(sodium_base64_VARIANT_ORIGINAL))
            }
        }
        guard status == 0, let end, trimmed.withUnsafeBufferPointer({ input in
            input.withMemoryRebound(to: CChar.self) { end == $0.baseAddress! + $0.count }
        }) else { return nil }
        return Array(bytes.prefix(length))
    }
}
