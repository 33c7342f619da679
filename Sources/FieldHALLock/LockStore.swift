import FieldHAL
import FieldHALSystem
import FieldHALVault
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where the lock keeps its state.
public protocol LockStore: Sendable {
    func load() throws -> LockState?
    func save(_ state: LockState) throws
    /// Runs `body` with the state held against every other process (load → check → save is
    /// one step: two attempts at once must not both start from the same failure count).
    func exclusively<T>(_ body: () throws -> T) throws -> T
}

extension LockStore {
    public func exclusively<T>(_ body: () throws -> T) throws -> T { try body() }
}

/// The lock's state sealed in the vault, padded to a fixed size: a normal unlock and a
/// duress unlock write files of the same length that only the vault key opens. The vault
/// writes atomically, so a power cut leaves the old state or the new, never a torn one.
public struct VaultLockStore: LockStore {
    public static let entry = "lock-state"
    /// Room for the state with dozens of pending duress events; larger states are refused.
    public static let paddedSize = 8192
    let stored: PaddedVaultEntry<LockState>
    let lockPath: String

    public init(vault: Vault) {
        lockPath = vault.entriesDirectory + "/lock-state.lock"
        stored = PaddedVaultEntry(Self.entry, size: Self.paddedSize, in: vault, subject: "lock state",
                                  advice: "restore the state directory from backup, or run fieldhal lock reset")
    }

    public func load() throws -> LockState? { try stored.load() }
    public func save(_ state: LockState) throws { try stored.save(state) }

    /// `flock` on `lock-state.lock` beside the vault's entries: the CLI, the daemon and a
    /// background run may each hold a `LockService`; the kernel drops the lock with the
    /// process, so a kill never leaves it held.
    public func exclusively<T>(_ body: () throws -> T) throws -> T {
        let path = lockPath
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw SystemError.io("open", subject: path)
        }
        defer { close(descriptor) }
        try SystemCall.retrying("flock", subject: path) { flock(descriptor, LOCK_EX) }
        return try body()
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
