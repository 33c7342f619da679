import CSodium
import FieldHAL
import FieldHALSystem
#if canImport(Glibc)
import Glibc
#endif

/// Why the vault refused to open or to return an entry. Never "silently replaced":
/// a damaged entry or key is reported, and left on disk for a human to look at.
public struct VaultError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// An entry failed authentication: altered on disk, or sealed under another key.
        case tampered
        /// The key file is missing but sealed entries exist: a new key would orphan them.
        case keyMissing
        /// The key file is readable by others, or is not a key.
        case keyInsecure, keyCorrupt
        /// The key is sealed to a TPM, and the TPM would not open it (or seal it).
        case keySealed
        case invalidName
        case cryptoUnavailable
    }

    public var kind: Kind
    public var path: String
    public var detail: String

    public var description: String { "vault \(path): \(detail)" }
}

/// Secrets at rest: tokens, PIN hashes, device keys, lockout counters.
///
/// A 32-byte key in `vault.key` (mode 0600) is made on first use; each entry is a file
/// `vault/<name>.sealed` holding `FHV1 || nonce || crypto_secretbox(name || value)`.
/// Where the kit has a TPM, `fieldhal vault seal-key` replaces `vault.key` with
/// `vault.key.cred`, sealed to the TPM (`SealedVaultKey`); the key is then read from the
/// unit's credentials (`$CREDENTIALS_DIRECTORY/vault.key`, which systemd unseals at start)
/// or, outside the unit, unsealed through systemd-creds.
/// Sealing the entry's name inside it makes a file swapped for another entry fail
/// authentication like any other tampering. Every write is atomic.
public final class Vault: Sendable {
    public let keyPath: String
    /// The state directory the key and the entries are in.
    public let directory: String
    /// `vault.key.cred`: the key sealed to the TPM, when it is.
    public let sealedKeyPath: String
    public let entriesDirectory: String
    /// How the key is kept (a file, or sealed to the TPM).
    public let keyProtection: VaultKeyProtection
    // The key lives in sodium_malloc'd memory (guard pages, locked, zeroed on free).
    private let key: SecretBytes

    private static let magic: [UInt8] = Array("FHV1".utf8)

    /// Opens the vault in `stateDirectory`, creating the directory and key on first use.
    public init(stateDirectory: StateDirectory) throws {
        guard sodium_init() >= 0 else {
            throw VaultError(kind: .cryptoUnavailable, path: stateDirectory.path, detail: "libsodium failed to initialise")
        }
        try stateDirectory.prepare()
        directory = stateDirectory.path
        keyPath = stateDirectory.file("vault.key")
        sealedKeyPath = stateDirectory.file("vault.key.cred")
        entriesDirectory = stateDirectory.file("vault")
        if mkdir(entriesDirectory, 0o700) != 0 && errno != EEXIST {
            throw SystemError.io("create directory", subject: entriesDirectory)
        }
        if VaultKeyProtection(of: stateDirectory) == .tpm2 {
            key = try Self.credentialFromSystemd() ?? SealedVaultKey.unseal(sealedKeyPath)
            keyProtection = .tpm2
        } else {
            key = try Self.loadOrCreateKey(at: keyPath, entriesDirectory: entriesDirectory)
            keyProtection = .file
        }
    }

    /// The key systemd unsealed for the unit (`LoadCredentialEncrypted=vault.key:…`): a file
    /// in the service's private, memory-backed credentials directory.
    private static func credentialFromSystemd() throws -> SecretBytes? {
        guard let directory = getenv("CREDENTIALS_DIRECTORY").map({ String(cString: $0) }) else { return nil }
        let path = directory + "/" + SealedVaultKey.credentialName
        guard var bytes = try AtomicFile.read(path) else { return nil }
        guard bytes.count == Int(crypto_secretbox_KEYBYTES) else {
            sodium_memzero(&bytes, bytes.count)
            throw VaultError(kind: .keyCorrupt, path: path, detail: "the unit's vault.key credential is not a \(crypto_secretbox_KEYBYTES)-byte key; check LoadCredentialEncrypted= in the unit")
        }
        return try SecretBytes(wiping: &bytes)
    }

    /// Seals the key to the TPM: writes `vault.key.cred`, checks that the TPM opens it to
    /// this very key, and only then removes `vault.key` (overwritten first). A cut at any
    /// point leaves a key that opens the vault: the plain file until the sealed one is
    /// proven, both (the same key) until the plain one is gone.
    public func sealKeyToTPM(device: String? = nil, pcrs: String? = nil) throws {
        guard keyProtection == .file else { return }
        var sealed = try SealedVaultKey.seal(keyPath: keyPath, device: device, pcrs: pcrs)
        defer { sodium_memzero(&sealed, sealed.count) }
        try AtomicFile.write(sealed, to: sealedKeyPath, mode: 0o600)
        let reopened: SecretBytes
        do {
            reopened = try SealedVaultKey.unseal(sealedKeyPath)
        } catch {
            unlink(sealedKeyPath)
            throw error
        }
        let same = reopened.count == key.count && reopened.withBytes { a in key.withBytes { b in sodium_memcmp(a, b, key.count) == 0 } }
        guard same else {
            unlink(sealedKeyPath)
            throw VaultError(kind: .keySealed, path: sealedKeyPath, detail: "the TPM opened the sealed key to another key; vault.key was kept")
        }
        try Self.shred(keyPath, in: directory)
    }

    /// Overwrites a key file with zeros on disk, then removes it. (On flash, the old blocks
    /// may survive the overwrite in the drive's spare area: docs/lock.md says so.)
    private static func shred(_ path: String, in directory: String) throws {
        let descriptor = Glibc.open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw SystemError.io("open", subject: path) }
        var zeros = [UInt8](repeating: 0, count: Int(crypto_secretbox_KEYBYTES))
        let wrote = pwrite(descriptor, &zeros, zeros.count, 0) == zeros.count && fsync(descriptor) == 0
        close(descriptor)
        guard wrote, unlink(path) == 0 else { throw SystemError.io("overwrite and remove", subject: path) }
        // The removal itself made durable: a power cut must not bring the file back.
        let parent = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if parent >= 0 { fsync(parent); close(parent) }
    }

    /// Seals `value` under `name` (letters, digits, `.`, `_`, `-`; at most 100 characters).
    public func store(_ value: [UInt8], as name: String) throws {
        try Self.validate(name)
        let nameBytes = Array(name.utf8)
        var plaintext = [UInt8(nameBytes.count)] + nameBytes + value
        defer { sodium_memzero(&plaintext, plaintext.count) }
        var nonce = [UInt8](repeating: 0, count: Int(crypto_secretbox_NONCEBYTES))
        randombytes_buf(&nonce, nonce.count)
        var sealed = [UInt8](repeating: 0, count: plaintext.count + Int(crypto_secretbox_MACBYTES))
        let result = key.withBytes { keyBytes in
            crypto_secretbox_easy(&sealed, plaintext, UInt64(plaintext.count), nonce, keyBytes)
        }
        guard result == 0 else { throw VaultError(kind: .cryptoUnavailable, path: path(of: name), detail: "sealing failed") }
        try AtomicFile.write(Self.magic + nonce + sealed, to: path(of: name), mode: 0o600)
    }

    /// The value stored under `name`, or `nil` if there is none.
    public func load(_ name: String) throws -> [UInt8]? {
        try open(name) { Array($0) }
    }

    /// A secret stored under `name` (a key), opened straight into guarded memory: the only
    /// plaintext copy outside it is the decryption buffer, wiped before this returns.
    public func loadSecret(_ name: String) throws -> SecretBytes? {
        try open(name) { value in try value.withUnsafeBytes { try SecretBytes(copying: $0) } }
    }

    /// Opens entry `name` and hands its value to `use`; the decrypted buffer is wiped after.
    private func open<T>(_ name: String, _ use: (ArraySlice<UInt8>) throws -> T) throws -> T? {
        try Self.validate(name)
        let path = path(of: name)
        guard let file = try AtomicFile.read(path) else { return nil }
        let header = Self.magic.count + Int(crypto_secretbox_NONCEBYTES)
        let tampered = VaultError(kind: .tampered, path: path,
                                  detail: "entry \"\(name)\" failed authentication: it was altered, or sealed under another key; it was left untouched")
        guard file.count >= header + Int(crypto_secretbox_MACBYTES), Array(file[0..<Self.magic.count]) == Self.magic else {
            throw tampered
        }
        let nonce = Array(file[Self.magic.count..<header])
        let sealed = Array(file[header...])
        var plaintext = [UInt8](repeating: 0, count: sealed.count - Int(crypto_secretbox_MACBYTES))
        defer { sodium_memzero(&plaintext, plaintext.count) }
        let result = key.withBytes { keyBytes in
            crypto_secretbox_open_easy(&plaintext, sealed, UInt64(sealed.count), nonce, keyBytes)
        }
        guard result == 0, let nameLength = plaintext.first.map(Int.init), plaintext.count >= 1 + nameLength,
              Array(plaintext[1..<(1 + nameLength)]) == Array(name.utf8) else {
            throw tampered
        }
        return try use(plaintext[(1 + nameLength)...])
    }

    /// Removes the entry; removing an absent entry is not an error.
    public func remove(_ name: String) throws {
        try Self.validate(name)
        if unlink(path(of: name)) != 0 && errno != ENOENT {
            throw SystemError.io("remove", subject: path(of: name))
        }
    }

    private func path(of name: String) -> String { "\(entriesDirectory)/\(name).sealed" }

    private static func validate(_ name: String) throws {
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x2E || byte == 0x5F || byte == 0x2D
        }
        guard !name.isEmpty, name.utf8.count <= 100, allowed, !name.hasPrefix(".") else {
            throw VaultError(kind: .invalidName, path: name, detail: "entry names are 1–100 letters, digits, '.', '_' or '-', not starting with '.'")
        }
    }

    private static func loadOrCreateKey(at path: String, entriesDirectory: String) throws -> SecretBytes {
        let keyLength = Int(crypto_secretbox_KEYBYTES)
        var info = stat()
        if stat(path, &info) == 0 {
            guard info.st_mode & 0o077 == 0 else {
                throw VaultError(kind: .keyInsecure, path: path,
                                 detail: "key file has mode \(String(info.st_mode & 0o777, radix: 8)); it must be readable by its owner only — run chmod 600 \(path)")
            }
            guard var bytes = try AtomicFile.read(path), bytes.count == keyLength else {
                throw VaultError(kind: .keyCorrupt, path: path, detail: "key file is not a \(keyLength)-byte key; restore it from backup")
            }
            return try SecretBytes(wiping: &bytes)
        }
        let existing = (try? DirectoryListing.entries(of: entriesDirectory)) ?? []
        guard !existing.contains(where: { $0.hasSuffix(".sealed") }) else {
            // Made (and used) by another process since the stat above: read it.
            if stat(path, &info) == 0 { return try loadOrCreateKey(at: path, entriesDirectory: entriesDirectory) }
            throw VaultError(kind: .keyMissing, path: path,
                             detail: "key file is missing but \(existing.count) sealed entries exist; restore the key rather than lose them, or remove \(entriesDirectory) to start afresh")
        }
        var bytes = [UInt8](repeating: 0, count: keyLength)
        crypto_secretbox_keygen(&bytes)
        defer { sodium_memzero(&bytes, bytes.count) }
        // Two processes opening a new state directory at once (the daemon and a command)
        // must end with one key: the one that lands first wins, the other reads it.
        let writer = try AtomicFileWriter(path: path, mode: 0o600)
        try writer.write(bytes)
        guard try writer.commitIfAbsent() else { return try loadOrCreateKey(at: path, entriesDirectory: entriesDirectory) }
        return try SecretBytes(wiping: &bytes)
    }
}

/// The names in a directory, through opendir/readdir.
private enum DirectoryListing {
    static func entries(of directory: String) throws -> [String] {
        guard let handle = opendir(directory) else { return [] }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.bindMemory(to: CChar.self).baseAddress!)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
