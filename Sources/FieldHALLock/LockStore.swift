import FieldHAL
import FieldHALVault
import Foundation

/// Where the lock keeps its state.
public protocol LockStore: Sendable {
    func load() throws -> LockState?
    func save(_ state: LockState) throws
}

/// The lock's state sealed in the vault, padded to a fixed size: a normal unlock and a
/// duress unlock write files of the same length that only the vault key opens. The vault
/// writes atomically, so a power cut leaves the old state or the new, never a torn one.
public struct VaultLockStore: LockStore {
    public static let entry = "lock-state"
    /// Room for the state with dozens of pending duress events; larger states are refused.
    public static let paddedSize = 8192
    let vault: Vault

    public init(vault: Vault) { self.vault = vault }

    public func load() throws -> LockState? {
        guard let bytes = try vault.load(Self.entry) else { return nil }
        guard let end = bytes.lastIndex(where: { $0 != 0x20 }) else { return nil }
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .secondsSince1970
            return try decoder.decode(LockState.self, from: Data(bytes[...end]))
        } catch {
            throw FieldHALError(.malformedData, subject: "lock state", detail: "the sealed lock state does not decode",
                                advice: "restore the state directory from backup, or run fieldhal lock reset")
        }
    }

    public func save(_ state: LockState) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .secondsSince1970
        var bytes = Array(try encoder.encode(state))
        guard bytes.count <= Self.paddedSize else {
            throw FieldHALError(.io, subject: "lock state", detail: "the state outgrew \(Self.paddedSize) bytes")
        }
        bytes += [UInt8](repeating: 0x20, count: Self.paddedSize - bytes.count)  // JSON ignores trailing spaces
        try vault.store(bytes, as: Self.entry)
    }
}

/// A store in memory, for tests and for flows that keep nothing.
public final class MemoryLockStore: LockStore, @unchecked Sendable {
    private let lock = NSLock()
    private var state: LockState?
    public private(set) var saves = 0

    public init(_ state: LockState? = nil) { self.state = state }

    public func load() throws -> LockState? { lock.withLock { state } }
    public func save(_ state: LockState) throws { lock.withLock { self.state = state; saves += 1 } }
}
