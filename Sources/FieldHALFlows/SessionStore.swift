import FieldHAL
import FieldHALVault
import Foundation
import Transrify

/// The signed-in session, sealed in the vault (Req 4.1, 4.5, 9.4, 17.3): reference, token,
/// session id, and whether the session is limited (duress) — never shown, never logged.
public struct SessionRecord: Codable, Sendable, Equatable {
    public var customerRef: String
    public var sessionId: String
    public var token: String
    /// True after a DURESS verdict (the seed's `limitedMode`).
    public var limitedMode: Bool
    public var signedInAt: Date
    /// The duress alert's id once the background work has sent it.
    public var alertId: String?
    /// When the background work last ran (both modes write it, so that the sealed file
    /// changes the same way whatever the verdict).
    public var backgroundRunAt: Date?
    public var geo: Geolocation?

    public init(customerRef: String, sessionId: String, token: String, limitedMode: Bool, signedInAt: Date = Date(), geo: Geolocation? = nil) {
        self.customerRef = customerRef
        self.sessionId = sessionId
        self.token = token
        self.limitedMode = limitedMode
        self.signedInAt = signedInAt
        self.geo = geo
    }

    /// The last 4 characters of the session id (Req 7.4).
    public var sessionIdSuffix: String { String(sessionId.suffix(4)) }
}

/// Where the session lives: one vault entry, always padded to one size, so that neither
/// the file's size nor its presence after sign-in says which PIN was used.
public struct SessionStore: Sendable {
    public static let entry = "transrify-session"
    public static let paddedSize = 4096
    let stored: PaddedVaultEntry<SessionRecord>

    public init(vault: Vault) {
        stored = PaddedVaultEntry(Self.entry, size: Self.paddedSize, in: vault, subject: "session",
                                  advice: "run fieldhal signout, then sign in again")
    }

    /// Every save and sign-out made in this process, as it happens: the daemon's loops wait
    /// on it instead of opening the sealed session every second. (A change made by another
    /// process is not heard; a loop that must see one looks again now and then.)
    public static let changes = Broadcaster<Int>(bufferLimit: 1)

    public func load() throws -> SessionRecord? { try stored.load() }

    public func save(_ record: SessionRecord) throws {
        try stored.save(record)
        Self.changes.yield(0)
    }

    /// Signs out: removes the session and with it the limited-mode flag (Req 8, 17.4).
    public func clear() throws {
        defer { Self.changes.yield(0) }
        try stored.remove()
    }
}

/// The tenant's API key, in the vault (Req 16.1, 16.3): never in source or config.
public struct TenantKeyStore: Sendable {
    public static let entry = "transrify-tenant-key"
    let vault: Vault

    public init(vault: Vault) { self.vault = vault }

    public func load() throws -> String? {
        try vault.load(Self.entry).map { String(decoding: $0, as: UTF8.self) }
    }

    public func save(_ key: String) throws {
        let trimmed = key.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed.count <= 512, trimmed.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
            throw FieldHALError(.invalidArgument, subject: "tenant key", detail: "a tenant key is 1–512 printable ASCII characters without spaces")
        }
        try vault.store(Array(trimmed.utf8), as: Self.entry)
    }
}
