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
    let stored: PaddedVaultEntry<LockState>

    public init(vault: Vault) {
        stored = PaddedVaultEntry(Self.entry, size: Self.paddedSize, in: vault, subject: "lock state",
                                  advice: "restore the state directory from backup, or run fieldhal lock reset")
    }

    public func load() throws -> LockState? { try stored.load() }
    public func save(_ state: LockState) throws { try stored.save(state) }
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
