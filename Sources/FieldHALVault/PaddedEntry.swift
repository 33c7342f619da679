import FieldHAL
import Foundation

/// A value kept as JSON in one vault entry, padded with spaces to a fixed size, so that the
/// sealed file's length says nothing about what it holds (the lock's state after a duress
/// unlock, a session after a duress sign-in). JSON ignores the trailing spaces.
public struct PaddedVaultEntry<Value: Codable & Sendable>: Sendable {
    public let name: String
    public let size: Int
    /// Names the value in errors: "lock state", "session".
    public let subject: String
    /// What to do when the sealed value does not decode.
    public let advice: String
    let vault: Vault

    public init(_ name: String, size: Int, in vault: Vault, subject: String, advice: String) {
        self.name = name
        self.size = size
        self.vault = vault
        self.subject = subject
        self.advice = advice
    }

    public func load() throws -> Value? {
        guard let bytes = try vault.load(name) else { return nil }
        guard let end = bytes.lastIndex(where: { $0 != 0x20 }) else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        do {
            return try decoder.decode(Value.self, from: Data(bytes[...end]))
        } catch {
            throw FieldHALError(.malformedData, subject: subject, detail: "the sealed \(subject) does not decode", advice: advice)
        }
    }

    public func save(_ value: Value) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .secondsSince1970
        var bytes = Array(try encoder.encode(value))
        guard bytes.count <= size else {
            throw FieldHALError(.io, subject: subject, detail: "the \(subject) outgrew \(size) bytes")
        }
        bytes += [UInt8](repeating: 0x20, count: size - bytes.count)
        try vault.store(bytes, as: name)
    }

    public func remove() throws { try vault.remove(name) }
}
