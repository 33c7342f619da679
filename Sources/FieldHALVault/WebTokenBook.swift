import CSodium
import FieldHAL
import FieldHALSystem
import Foundation
import Synchronization

/// One token of the web door: what a page from `origin` may do. The secret itself is never
/// kept: only its BLAKE2b digest (a token is 32 random bytes, so a fast hash is as strong as
/// a slow one; argon2id is for PINs, which are short).
public struct WebToken: Sendable, Codable, Equatable {
    /// Names the token in `list` and `revoke`; public, and the first part of the token text.
    public var id: String
    /// The page's origin (`https://kiosk.example`): requests from any other are refused.
    public var origin: String
    /// The API scopes it allows, by name (`nfc.read`).
    public var allow: [String]
    /// The devices it is limited to (`camera.front`), as a grant's; nil: every device.
    public var devices: [String]?
    public var issued: Date
    /// Lowercase hex of BLAKE2b-256 over the secret part.
    var digest: String

    public init(id: String, origin: String, allow: [String], devices: [String]?, issued: Date, digest: String) {
        self.id = id
        self.origin = origin
        self.allow = allow
        self.devices = devices
        self.issued = issued
        self.digest = digest
    }
}

/// The web door's tokens, in `web-tokens.json` of the state directory (0600, replaced
/// atomically). A token's text is `fhw_<id>_<secret>`: the id finds the record, the secret's
/// digest is compared in constant time, and the text is shown once, when it is issued.
/// The daemon owns the book: tokens are issued and revoked through its API (by root, its
/// own user or the control group), so a revocation holds from the next request on.
public final class WebTokenBook: Sendable {
    public let path: String
    private let tokens: Mutex<[WebToken]>

    public static let fileName = "web-tokens.json"
    static let prefix = "fhw_"

    private struct File: Codable { var tokens: [WebToken] }

    /// The book at `path`; a missing file is an empty book, a file that is not one an error
    /// naming it (never an empty book that would quietly drop every token).
    public init(path: String) throws {
        self.path = path
        var found: [WebToken] = []
        if let bytes = try AtomicFile.read(path) {
            do {
                found = try Self.decoder.decode(File.self, from: Data(bytes)).tokens
            } catch {
                throw FieldHALError(.malformedData, subject: path, detail: "not a book of web tokens (\(error))",
                                    advice: "restore it from a backup, or move it away and issue the kiosk's tokens again")
            }
        }
        tokens = Mutex(found)
    }

    /// The tokens, oldest first.
    public var all: [WebToken] { tokens.withLock { $0 } }

    /// Whether some token is bound to `origin` (a preflight from it is answered).
    public func knows(origin: String) -> Bool { tokens.withLock { $0.contains { $0.origin == origin } } }

    /// A new token for `origin`; returns its record and its text, which nobody sees again.
    public func issue(origin: String, allow: [String], devices: [String]?, now: Date = Date()) throws -> (token: WebToken, text: String) {
        var secret = Randomness.bytes(32)
        defer { SecretBytes.wipe(&secret) }
        let text = Self.prefix + EvidenceCipher.hex(Randomness.bytes(4)) + "_" + EvidenceCipher.hex(secret)
        let id = String(text.dropFirst(Self.prefix.count).prefix(8))
        // Whole seconds: the book keeps ISO 8601 times without fractions.
        let issued = Date(timeIntervalSince1970: now.timeIntervalSince1970.rounded(.down))
        let token = WebToken(id: id, origin: origin, allow: allow, devices: devices, issued: issued, digest: Self.digest(secret))
        try tokens.withLock { tokens in
            var next = tokens
            next.append(token)
            try save(next)
            tokens = next
        }
        return (token, text)
    }

    /// Removes the token `id`; nil when there is none.
    public func revoke(id: String) throws -> WebToken? {
        try tokens.withLock { tokens in
            guard let index = tokens.firstIndex(where: { $0.id == id }) else { return nil }
            var next = tokens
            let gone = next.remove(at: index)
            try save(next)
            tokens = next
            return gone
        }
    }

    /// The token whose text `presented` is, or nil (unknown, revoked or malformed). The
    /// secret's digest is always computed and compared, so that a wrong secret and an
    /// unknown id take the same time.
    public func token(presented: String) -> WebToken? {
        let parts = presented.split(separator: "_", omittingEmptySubsequences: false)
        let id = parts.count == 3 && parts[0] + "_" == Self.prefix ? String(parts[1]) : ""
        // Exactly 64 digits: the core's hex reader also takes separators, a token has none.
        let secret = parts.count == 3 && parts[2].count == 64 ? [UInt8](hexString: String(parts[2])) ?? [] : []
        let digest = Self.digestBytes(secret)
        let found = tokens.withLock { tokens in tokens.first { $0.id == id } }
        let expected = found.flatMap { [UInt8](hexString: $0.digest) } ?? [UInt8](repeating: 0, count: digest.count)
        let same = expected.count == digest.count && sodium_memcmp(expected, digest, digest.count) == 0
        return same && secret.count == 32 ? found : nil
    }

    private func save(_ tokens: [WebToken]) throws {
        try AtomicFile.write(Array(try Self.encoder.encode(File(tokens: tokens))), to: path, mode: 0o600)
    }

    private static func digest(_ secret: [UInt8]) -> String { EvidenceCipher.hex(digestBytes(secret)) }

    private static func digestBytes(_ secret: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        _ = crypto_generichash(&out, out.count, secret, UInt64(secret.count), nil, 0)
        return out
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }()

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }()
}
